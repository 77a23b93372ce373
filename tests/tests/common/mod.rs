//! A real `floe` process for the end-to-end tests: free ports, a temp data dir, stderr
//! captured to a file and printed if the test panics. Killed on drop.
#![allow(dead_code)]

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The broker binary: `$FLOE_BIN`, else `<target dir>/debug/floe` found from this test
/// executable (`<target>/debug/deps/<test>-<hash>`).
pub fn floe_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FLOE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent() // deps
        .and_then(Path::parent) // debug
        .expect("test executable is not under <target>/<profile>/deps");
    profile_dir.join("floe")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One running broker.
pub struct Floe {
    child: Child,
    pub port: u16,
    pub metrics_port: u16,
    pub dir: tempfile::TempDir,
    stderr_path: PathBuf,
}

impl Floe {
    pub fn start() -> Floe {
        Self::start_with(&[])
    }

    pub fn start_with(overrides: &[(&str, &str)]) -> Floe {
        let bin = floe_bin();
        assert!(
            bin.exists(),
            "floe binary not found at {} (run `cargo build --workspace` first, or set FLOE_BIN)",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let metrics_port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let stderr_path = dir.path().join("floe-stderr.log");
        let stderr = File::create(&stderr_path).unwrap();
        let mut cmd = Command::new(&bin);
        cmd.arg("--data-dir")
            .arg(dir.path().join("data"))
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
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(stderr.try_clone().unwrap())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let mut floe = Floe { child, port, metrics_port, dir, stderr_path };
        floe.wait_listening(Duration::from_secs(30));
        floe
    }

    fn wait_listening(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "floe exited during startup ({status})\n--- floe stderr ---\n{}",
                    self.stderr()
                );
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "floe did not listen on port {} within {timeout:?}\n--- floe stderr ---\n{}",
                    self.port,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Floe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- floe stderr ({}) ---\n{}", self.stderr_path.display(), self.stderr());
        }
    }
}
