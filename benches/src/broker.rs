//! The broker under test: a `floe` child process on a data directory of our choosing
//! (free ports, flags passed through), or an external broker reached by `--bootstrap`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::procstat::{self, ProcStats};

/// How to start `floe` processes.
#[derive(Debug, Clone)]
pub struct FloeLauncher {
    /// The binary.
    pub bin: PathBuf,
    /// Extra arguments for every start (`--floe-arg`).
    pub extra_args: Vec<String>,
    /// Where each start's stderr goes (`floe-<label>.log`).
    pub log_dir: PathBuf,
}

impl FloeLauncher {
    /// The binary: `explicit`, else `$FLOE_BIN`, else `floe` beside this executable.
    pub fn find_bin(explicit: Option<PathBuf>) -> PathBuf {
        if let Some(p) = explicit.or_else(|| std::env::var_os("FLOE_BIN").map(PathBuf::from)) {
            return p;
        }
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("floe")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("floe"))
    }

    /// Starts `floe` on `data_dir` with `--override` for each of `overrides`, and waits
    /// until it accepts connections.
    ///
    /// # Errors
    /// The binary does not start, exits, or does not listen within 30 s.
    pub fn start(
        &self,
        label: &str,
        data_dir: &Path,
        overrides: &[(String, String)],
    ) -> anyhow::Result<Broker> {
        self.start_on(free_port()?, free_port()?, label, data_dir, overrides, &[])
    }

    /// [`Self::start`] on given ports (Kafka, metrics) with `args` before the
    /// `--floe-arg`s: a cluster member (`--node-id`, `--metadata-store`) that comes back
    /// after a kill on the endpoints it registered before, as a restarted broker does.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_node(
        &self,
        label: &str,
        data_dir: &Path,
        overrides: &[(String, String)],
        ports: (u16, u16),
        args: &[String],
    ) -> anyhow::Result<Broker> {
        self.start_on(ports.0, ports.1, label, data_dir, overrides, args)
    }

    /// [`Self::start`] with a second listener, SSL, using the PEM `cert` and
    /// `key`; returns the broker (PLAINTEXT on `bootstrap`) and the SSL `HOST:PORT`.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_with_ssl(
        &self,
        label: &str,
        data_dir: &Path,
        overrides: &[(String, String)],
        cert: &Path,
        key: &Path,
    ) -> anyhow::Result<(Broker, String)> {
        let (port, ssl_port) = (free_port()?, free_port()?);
        let listeners = format!("PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}");
        let mut all = overrides.to_vec();
        all.extend([
            ("listeners".to_string(), listeners.clone()),
            ("advertised.listeners".to_string(), listeners),
            ("ssl.certificate.location".to_string(), cert.display().to_string()),
            ("ssl.key.location".to_string(), key.display().to_string()),
        ]);
        let broker = self.start_on(port, free_port()?, label, data_dir, &all, &[])?;
        Ok((broker, format!("127.0.0.1:{ssl_port}")))
    }

    fn start_on(
        &self,
        port: u16,
        metrics_port: u16,
        label: &str,
        data_dir: &Path,
        overrides: &[(String, String)],
        args: &[String],
    ) -> anyhow::Result<Broker> {
        let listen = format!("127.0.0.1:{port}");
        let log_path = self.log_dir.join(format!("floe-{label}.log"));
        let log = File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", &listen, "--advertised-listener", &listen])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            // Brokers run side by side: none takes the default REST catalog, registry or console port.
            .args([
                "--iceberg-rest-listen",
                "",
                "--schema-registry-listen",
                "",
                "--console-listen",
                "",
            ]);
        for (k, v) in overrides {
            cmd.args(["--override", &format!("{k}={v}")]);
        }
        cmd.args(args);
        cmd.args(&self.extra_args);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        die_with_parent(&mut cmd);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {} (build it with `cargo build -p floe-broker`, or pass --floe-bin)", self.bin.display()))?;
        let pid = child.id();
        let mut broker = Broker {
            bootstrap: listen,
            pid: Some(pid),
            metrics: Some(format!("127.0.0.1:{metrics_port}")),
            child: Some(child),
            log_path: Some(log_path),
        };
        broker.wait_listening(port, Duration::from_secs(30))?;
        Ok(broker)
    }
}

/// A broker being measured.
#[derive(Debug)]
pub struct Broker {
    /// `HOST:PORT` for clients.
    pub bootstrap: String,
    /// Its process, when known (ours, or `--broker-pid`): CPU and RSS are measured.
    pub pid: Option<u32>,
    /// Floe's Prometheus endpoint, for brokers we started.
    pub metrics: Option<String>,
    child: Option<Child>,
    log_path: Option<PathBuf>,
}

impl Broker {
    /// An external broker.
    pub fn external(bootstrap: String, pid: Option<u32>) -> Broker {
        Broker { bootstrap, pid, metrics: None, child: None, log_path: None }
    }

    /// Whether this harness started it (and may restart it with other settings).
    pub fn is_ours(&self) -> bool {
        self.child.is_some()
    }

    /// CPU time and peak RSS, when the process is known.
    pub fn stats(&self) -> Option<ProcStats> {
        self.pid.and_then(|p| procstat::read(p).ok())
    }

    /// Starts a new peak-RSS window (see [`procstat::reset_peak_rss`]).
    pub fn reset_peak_rss(&self) -> bool {
        self.pid.is_some_and(procstat::reset_peak_rss)
    }

    /// The sum of one Prometheus counter's samples whose labels contain `label`.
    pub fn metric(&self, name: &str, label: &str) -> Option<f64> {
        let body = self.metrics_text()?;
        let mut sum = None;
        for line in body.lines().filter(|l| l.starts_with(name) && l.contains(label)) {
            if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                *sum.get_or_insert(0.0) += v;
            }
        }
        sum
    }

    /// Every sample of the metric `name`: its labels and value (`None` without a
    /// metrics endpoint or when it does not answer).
    pub fn metric_samples(&self, name: &str) -> Option<Vec<(BTreeMap<String, String>, f64)>> {
        Some(parse_samples(&self.metrics_text()?, name))
    }

    /// The Prometheus text of `/metrics` (brokers we started).
    pub fn metrics_text(&self) -> Option<String> {
        let addr = self.metrics.as_ref()?;
        let mut s = TcpStream::connect(addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    }

    fn wait_listening(&mut self, port: u16, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("floe exited during startup ({status}):\n{}", self.log_tail());
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "floe did not listen on port {port} within {timeout:?}:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last 30 lines of its log (brokers we started), for error messages.
    pub fn log_tail(&self) -> String {
        self.log_path.as_deref().map(|p| file_tail(p, 30)).unwrap_or_default()
    }

    /// Whether a broker we started has exited (external brokers: never known).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL to a broker we started, and reaps it: a crash, no clean shutdown.
    ///
    /// # Errors
    /// Signalling or waiting failed.
    pub fn kill9(mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// Stops a broker we started: SIGTERM (a clean shutdown flushes logs and writes
    /// checkpoints, so the data dir can be reopened at once), SIGKILL after 20 s.
    /// External brokers are left alone.
    ///
    /// # Errors
    /// Signalling or waiting failed.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill()?;
        child.wait()?;
        Ok(())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The samples of metric `name` in Prometheus text: `name{a="x",b="y"} 1.5`.
/// Label values here are topic names and numbers, so no escapes are handled.
pub(crate) fn parse_samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once("} ") {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                None => continue, // another metric whose name starts with `name`
            },
        };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let labels = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
            .collect();
        out.push((labels, value));
    }
    out
}

/// A loopback port free at the moment of asking.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The last `lines` lines of a text file ("" when unreadable).
pub(crate) fn file_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Asks the kernel to SIGKILL the child when floe-bench dies, however it dies: `Drop`
/// stops children on errors and panics, but not when floe-bench itself is killed (a CI
/// timeout, Ctrl-C), and a broker or etcd left behind holds ports and disk.
///
/// The signal follows the *thread* that spawned the child: spawn from a thread that
/// lives as long as the child (the scenarios spawn from the main thread).
pub(crate) fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `prctl(PR_SET_PDEATHSIG)` is async-signal-safe and touches no memory of the
    // parent, which is all that may run between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_prometheus_samples() {
        let text = "# HELP floe_iceberg_committed_offset x\n\
            floe_iceberg_committed_offset{partition=\"0\",topic=\"t\"} 750\n\
            floe_iceberg_committed_offset{partition=\"1\",topic=\"t\"} 12\n\
            floe_iceberg_committed_offset_other{partition=\"1\"} 3\n\
            floe_up 1\n";
        let s = super::parse_samples(text, "floe_iceberg_committed_offset");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0["partition"], "0");
        assert_eq!(s[0].0["topic"], "t");
        assert_eq!(s[0].1, 750.0);
        assert_eq!(s[1].1, 12.0);
        assert_eq!(super::parse_samples(text, "floe_up")[0].1, 1.0);
    }
}
