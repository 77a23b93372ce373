//! `floe-powerloss-fs`: the power-loss rig's filesystem (issue #6 §2.2).
//!
//! Mounts an in-memory FUSE filesystem whose writes, truncates, creates,
//! renames and unlinks stay volatile until the file or directory they touch is
//! fsynced (`disk.rs` has the exact model), and serves a control socket:
//!
//! ```text
//! cut    -> unmount, drop every unsynced change, mount again;
//!           replies "ok files_reverted=N bytes_dropped=N dirs_reverted=N inodes_dropped=N"
//! cut torn SEED
//!        -> the same, but first a random part of the unsynced changes (whole
//!           4 KiB pages, lengths, single directory entries; seeded) is made durable
//! stats  -> "ok file_syncs=N dir_syncs=N"
//! quit   -> unmount and exit; replies "ok"
//! ```
//!
//! The control socket is bound only once the first mount is up, so a test can
//! wait for the socket file to appear. Cut only while nothing has files open
//! on the mount (the broker killed first): the unmount waits for the kernel to
//! let go of the old session.
//!
//! Needs root (fuser mounts with mount(2) directly; no fusermount3 needed) and
//! /dev/fuse. Killed without `quit`, it leaves a dead mount: `umount -l` it.
//!
//! Layout: `disk` (the durability model), `fs` (the FUSE adapter), this file
//! (command line, mounting, control loop).

mod disk;
mod fs;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{bail, Context, Result};
use clap::Parser;
use fuser::{BackgroundSession, Config, MountOption};
use tracing::{info, warn};

use crate::disk::Disk;
use crate::fs::PowerLossFs;

/// Mount a FUSE filesystem that forgets unsynced changes on command.
#[derive(Debug, Parser)]
#[command(name = "floe-powerloss-fs", version)]
struct Args {
    /// Directory to mount on (must exist and be empty).
    #[arg(long)]
    mountpoint: PathBuf,
    /// Unix socket to serve control commands on (cut, stats, quit).
    #[arg(long)]
    control: PathBuf,
}

fn mount(disk: &Arc<Mutex<Disk>>, mountpoint: &Path) -> Result<BackgroundSession> {
    let mut config = Config::default();
    config.mount_options =
        vec![MountOption::FSName("floe-powerloss".into()), MountOption::DefaultPermissions];
    fuser::spawn_mount(PowerLossFs::new(Arc::clone(disk)), mountpoint, &config)
        .with_context(|| format!("mount on {}", mountpoint.display()))
}

/// Ends the session and makes sure nothing is mounted on `mountpoint` any more.
fn unmount(session: &mut Option<BackgroundSession>, mountpoint: &Path) -> Result<()> {
    if let Some(s) = session.take() {
        // Seen once in 100 cuts: the session's read of /dev/fuse ends with
        // ECONNABORTED rather than ENODEV after the unmount. What matters is
        // that the mount is gone, checked below.
        if let Err(e) = s.umount_and_join() {
            warn!(error = %e, "FUSE session ended with an error");
        }
    }
    if is_mounted(mountpoint)? {
        warn!(mountpoint = %mountpoint.display(), "still mounted after the session ended: umount -l");
        let status =
            Command::new("umount").arg("-l").arg(mountpoint).status().context("run umount -l")?;
        if !status.success() || is_mounted(mountpoint)? {
            bail!("{} is still mounted", mountpoint.display());
        }
    }
    Ok(())
}

/// Whether `mountpoint` (canonical) is a mount point now, per /proc/self/mounts.
fn is_mounted(mountpoint: &Path) -> Result<bool> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("read /proc/self/mounts")?;
    let want = mountpoint.to_string_lossy();
    Ok(mounts.lines().any(|l| l.split(' ').nth(1) == Some(&*want)))
}

/// One control connection: reads command lines until EOF. Returns true on `quit`.
fn serve(
    stream: UnixStream,
    disk: &Arc<Mutex<Disk>>,
    session: &mut Option<BackgroundSession>,
    mountpoint: &Path,
) -> Result<bool> {
    let mut out = stream.try_clone().context("clone control stream")?;
    for line in BufReader::new(stream).lines() {
        let line = line.context("read control command")?;
        let reply = match line.trim() {
            cmd if cmd == "cut" || cmd.starts_with("cut torn ") => {
                let torn = match cmd.strip_prefix("cut torn ").map(str::parse::<u64>) {
                    None => None,
                    Some(Ok(seed)) => Some(seed),
                    Some(Err(_)) => {
                        writeln!(out, "error bad seed in {cmd:?}").context("reply")?;
                        continue;
                    }
                };
                unmount(session, mountpoint)?;
                let r = {
                    let mut disk = disk.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(seed) = torn {
                        disk.persist_some(seed);
                    }
                    disk.power_cut()
                };
                *session = Some(mount(disk, mountpoint)?);
                info!(
                    torn_seed = ?torn,
                    files_reverted = r.files_reverted,
                    bytes_dropped = r.bytes_dropped,
                    dirs_reverted = r.dirs_reverted,
                    inodes_dropped = r.inodes_dropped,
                    reverted = ?r.reverted,
                    "power cut"
                );
                format!(
                    "ok files_reverted={} bytes_dropped={} dirs_reverted={} inodes_dropped={}",
                    r.files_reverted, r.bytes_dropped, r.dirs_reverted, r.inodes_dropped
                )
            }
            "stats" => {
                let s = disk.lock().unwrap_or_else(PoisonError::into_inner).syncs();
                format!("ok file_syncs={} dir_syncs={}", s.file_syncs, s.dir_syncs)
            }
            "quit" => {
                unmount(session, mountpoint)?;
                writeln!(out, "ok").context("reply")?;
                return Ok(true);
            }
            other => format!("error unknown command {other:?}"),
        };
        writeln!(out, "{reply}").context("reply")?;
    }
    Ok(false)
}

fn main() -> Result<()> {
    // fuser warns of every request it answers ENOSYS for (xattrs, ioctls): noise here.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,fuser=error".into()),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let mut args = Args::parse();
    // Canonical before mounting, to match /proc/self/mounts (and never stat a dead mount).
    args.mountpoint = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    let disk = Arc::new(Mutex::new(Disk::new()));
    let mut session = Some(mount(&disk, &args.mountpoint)?);
    match std::fs::remove_file(&args.control) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("remove stale {}", args.control.display()))
        }
    }
    let listener = UnixListener::bind(&args.control)
        .with_context(|| format!("bind control socket {}", args.control.display()))?;
    info!(mountpoint = %args.mountpoint.display(), control = %args.control.display(), "mounted");
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "control accept failed");
                continue;
            }
        };
        match serve(stream, &disk, &mut session, &args.mountpoint) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => warn!(error = format!("{e:#}"), "control command failed"),
        }
    }
    info!("unmounted; exiting");
    Ok(())
}
