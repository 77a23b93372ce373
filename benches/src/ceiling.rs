//! The machine's ceiling for a catch-up consumer: `sendfile(2)` of a cached file into a
//! loopback TCP socket, read and discarded by a thread of this process.
//!
//! It leaves out everything a broker adds (request parsing, response framing, many
//! partitions, a client that parses what it reads), so it bounds what Floe can reach
//! on this machine; results are quoted as a fraction of it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

/// One measurement of the ceiling.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// Bytes sent per run.
    pub bytes: u64,
    /// Bytes per `sendfile` call's region.
    pub region_bytes: usize,
    /// MB/s (10^6 bytes) of each run.
    pub runs_mb_per_s: Vec<f64>,
    /// The median run, MB/s: the figure results are divided by.
    pub mb_per_s: f64,
}

/// Measures `runs` times: `total` bytes of a cached 64 MiB file, `region` bytes per call.
///
/// # Errors
/// Temp file or socket failures.
pub fn sendfile_loopback(total: u64, region: usize, runs: usize) -> anyhow::Result<Ceiling> {
    const FILE_BYTES: usize = 64 << 20;
    let mut file = tempfile::tempfile().context("temp file for the ceiling")?;
    let chunk: Vec<u8> = (0..1 << 20).map(|_| fastrand::u8(..)).collect();
    for _ in 0..FILE_BYTES / chunk.len() {
        file.write_all(&chunk)?;
    }
    file.flush()?;
    let mut results = Vec::with_capacity(runs);
    for _ in 0..runs {
        results.push(one_run(&file, FILE_BYTES as u64, total, region)?);
    }
    let mut sorted = results.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    Ok(Ceiling {
        bytes: total,
        region_bytes: region,
        mb_per_s: sorted[sorted.len() / 2],
        runs_mb_per_s: results,
    })
}

fn one_run(file: &std::fs::File, file_len: u64, total: u64, region: usize) -> anyhow::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            match s.read(&mut buf)? {
                0 => return Ok(n),
                k => n += k as u64,
            }
        }
    });
    let sock = TcpStream::connect(addr)?;
    sock.set_nodelay(true)?;
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        let mut off = (sent % file_len) as libc::off_t;
        let want = (region as u64).min(total - sent).min(file_len - off as u64) as usize;
        let n =
            nix::sys::sendfile::sendfile(&sock, file, Some(&mut off), want).context("sendfile")?;
        anyhow::ensure!(n > 0, "sendfile sent nothing");
        sent += n as u64;
    }
    drop(sock);
    let received = reader.join().map_err(|_| anyhow::anyhow!("reader thread panicked"))??;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(received == total, "reader got {received} of {total} bytes");
    Ok(total as f64 / 1e6 / secs)
}
