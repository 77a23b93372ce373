//! A Floe cluster of the harness's own: one etcd (a throwaway data dir, loopback ports)
//! and N `floe` brokers in cluster mode (`--node-id N --metadata-store etcd://…/PREFIX`),
//! each with its own data dir and listener, as `tests/python/cluster_rig.py` starts them.
//! Partition state (leader, leader epoch, ISR) is read from etcd itself, through its
//! HTTP gateway, so what the harness sees does not depend on any broker's view.
//!
//! Every process started here is killed when its owner is dropped (errors and panics
//! included), and dies with floe-bench if floe-bench is killed
//! ([`crate::broker`]'s parent-death signal).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use base64::Engine as _;
use serde::Deserialize;

use crate::broker::{die_with_parent, file_tail, free_port, Broker, FloeLauncher};

/// The settings of every broker of the cluster, beside the caller's: a short session,
/// so a killed broker's lease expires (and the controller moves its leaderships) within
/// seconds, as the cluster tests run it.
pub const SESSION_TIMEOUT_MS: u64 = 2000;

/// One etcd member on loopback, on a data dir deleted with it.
#[derive(Debug)]
pub struct Etcd {
    child: Option<Child>,
    client_port: u16,
    log_path: PathBuf,
    _data: tempfile::TempDir,
}

impl Etcd {
    /// The `etcd` binary: `$ETCD_BIN`, else `etcd` on the `PATH`.
    fn bin() -> PathBuf {
        std::env::var_os("ETCD_BIN").map_or_else(|| PathBuf::from("etcd"), PathBuf::from)
    }

    /// Starts etcd (log in `log_dir/etcd.log`) and waits until `/health` answers.
    ///
    /// # Errors
    /// etcd does not start, exits, or is not healthy within 30 s (its log tail is in the error).
    pub fn start(log_dir: &Path) -> anyhow::Result<Etcd> {
        let data = tempfile::Builder::new().prefix("floe-bench-etcd-").tempdir()?;
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let (client, peer) =
            (format!("http://127.0.0.1:{client_port}"), format!("http://127.0.0.1:{peer_port}"));
        let log_path = log_dir.join("etcd.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut cmd = Command::new(Self::bin());
        cmd.args(["--name", "floe-bench", "--data-dir"])
            .arg(data.path())
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("floe-bench={peer}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().with_context(|| {
            format!("cannot start {} (install etcd, or set ETCD_BIN)", Self::bin().display())
        })?;
        let mut etcd = Etcd { child: Some(child), client_port, log_path, _data: data };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !etcd.healthy() {
            if let Some(status) = etcd.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("etcd exited during startup ({status}):\n{}", file_tail(&etcd.log_path, 30));
            }
            if Instant::now() > deadline {
                bail!("etcd was not healthy within 30 s:\n{}", file_tail(&etcd.log_path, 30));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(etcd)
    }

    /// `127.0.0.1:PORT` of its client listener.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn healthy(&self) -> bool {
        http(&self.endpoint(), "GET", "/health", "")
            .is_ok_and(|(status, body)| status == 200 && body.contains("\"true\""))
    }

    /// The value at `key`, read through etcd's gRPC gateway (`/v3/kv/range`), or
    /// `None` when the key does not exist.
    ///
    /// # Errors
    /// etcd does not answer, or answers something that is not a range response.
    pub fn get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        #[derive(Deserialize)]
        struct Kv {
            value: Option<String>,
        }
        #[derive(Deserialize)]
        struct Range {
            #[serde(default)]
            kvs: Vec<Kv>,
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let body = serde_json::json!({ "key": b64.encode(key) }).to_string();
        let (status, text) = http(&self.endpoint(), "POST", "/v3/kv/range", &body)?;
        anyhow::ensure!(status == 200, "etcd range {key}: HTTP {status}: {text}");
        let range: Range =
            serde_json::from_str(&text).with_context(|| format!("etcd range {key}: {text}"))?;
        match range.kvs.into_iter().next() {
            None => Ok(None),
            // An empty value comes back without the field.
            Some(kv) => Ok(Some(
                b64.decode(kv.value.unwrap_or_default()).context("etcd value is not base64")?,
            )),
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One HTTP/1.0 request (the server closes the connection after the answer, so the
/// body is everything after the headers): (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").context("HTTP answer without headers")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("HTTP answer without a status")?;
    Ok((status, body.to_string()))
}

/// A partition's leadership as the cluster stores it (`PREFIX/partitions/TOPIC/P`,
/// `cluster/src/partition.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct PartitionState {
    /// The leader's node id, −1 while none is eligible.
    pub leader: i32,
    /// Grows with every change of leader.
    pub leader_epoch: i32,
    /// The in-sync replicas, the leader among them.
    pub isr: Vec<i32>,
}

/// One member of the cluster: its fixed endpoints and data dir, and its process while it runs.
#[derive(Debug)]
struct Node {
    id: i32,
    ports: (u16, u16),
    data: tempfile::TempDir,
    broker: Option<Broker>,
    starts: u32,
}

/// etcd and N brokers. Dropping it kills every broker, then etcd.
#[derive(Debug)]
pub struct Cluster {
    // Declared before `etcd`: fields drop in order, so brokers go before their store.
    nodes: Vec<Node>,
    etcd: Etcd,
    prefix: String,
    launcher: FloeLauncher,
    overrides: Vec<(String, String)>,
    label: String,
}

impl Cluster {
    /// Starts etcd and brokers `1..=n` (logs `floe-LABEL-nID-START.log` in the
    /// launcher's log dir), and waits until every broker sees all `n` and one controller.
    ///
    /// # Errors
    /// etcd or a broker does not start (the log tail is in the error), or the brokers
    /// do not agree within 60 s.
    pub fn start(
        launcher: &FloeLauncher,
        label: &str,
        n: i32,
        overrides: &[(String, String)],
    ) -> anyhow::Result<Cluster> {
        let etcd = Etcd::start(&launcher.log_dir)?;
        let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
        let mut all =
            vec![("broker.session.timeout.ms".to_string(), SESSION_TIMEOUT_MS.to_string())];
        all.extend(overrides.iter().cloned());
        let mut cluster = Cluster {
            nodes: Vec::new(),
            etcd,
            prefix: format!("floe-bench-{tag}"),
            launcher: launcher.clone(),
            overrides: all,
            label: label.to_string(),
        };
        for id in 1..=n {
            let data = tempfile::Builder::new().prefix(&format!("floe-bench-n{id}-")).tempdir()?;
            cluster.nodes.push(Node {
                id,
                ports: (free_port()?, free_port()?),
                data,
                broker: None,
                starts: 0,
            });
            cluster.start_node(id)?;
        }
        cluster.wait_agreed(Duration::from_secs(60))?;
        Ok(cluster)
    }

    fn node(&self, id: i32) -> anyhow::Result<&Node> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .with_context(|| format!("no broker {id} in the cluster"))
    }

    fn node_mut(&mut self, id: i32) -> anyhow::Result<&mut Node> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .with_context(|| format!("no broker {id} in the cluster"))
    }

    fn start_node(&mut self, id: i32) -> anyhow::Result<()> {
        let store = format!("etcd://{}/{}", self.etcd.endpoint(), self.prefix);
        let (launcher, overrides, label) =
            (self.launcher.clone(), self.overrides.clone(), self.label.clone());
        let node = self.node_mut(id)?;
        node.starts += 1;
        let args = ["--node-id".to_string(), id.to_string(), "--metadata-store".to_string(), store];
        let log_label = format!("{label}-n{id}-{}", node.starts);
        let broker = launcher
            .start_node(&log_label, node.data.path(), &overrides, node.ports, &args)
            .with_context(|| format!("broker {id} (start {})", node.starts))?;
        node.broker = Some(broker);
        Ok(())
    }

    /// Every broker's `HOST:PORT`, comma-separated (running or not: clients skip the dead).
    pub fn bootstrap(&self) -> String {
        self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.ports.0)).collect::<Vec<_>>().join(",")
    }

    /// The running brokers, with their node ids.
    pub fn brokers(&self) -> impl Iterator<Item = (i32, &Broker)> {
        self.nodes.iter().filter_map(|n| n.broker.as_ref().map(|b| (n.id, b)))
    }

    /// The node ids, in order.
    pub fn ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The partition's state in etcd (`None` before it is written).
    ///
    /// # Errors
    /// etcd does not answer, or the value is not a partition state.
    pub fn partition_state(
        &self,
        topic: &str,
        partition: i32,
    ) -> anyhow::Result<Option<PartitionState>> {
        let key = format!("/{}/partitions/{topic}/{partition}", self.prefix);
        match self.etcd.get(&key)? {
            None => Ok(None),
            Some(v) => Ok(Some(
                serde_json::from_slice(&v)
                    .with_context(|| format!("{key}: not a partition state"))?,
            )),
        }
    }

    /// kill -9 of broker `id` (a crash: no controlled shutdown, its lease left to expire).
    ///
    /// # Errors
    /// The broker is not running, or the signal failed.
    pub fn kill9(&mut self, id: i32) -> anyhow::Result<()> {
        let broker = self
            .node_mut(id)?
            .broker
            .take()
            .with_context(|| format!("broker {id} is not running"))?;
        broker.kill9()
    }

    /// Starts broker `id` again on its data dir and endpoints, and waits until it listens.
    ///
    /// # Errors
    /// As [`Cluster::start`].
    pub fn restart(&mut self, id: i32) -> anyhow::Result<()> {
        anyhow::ensure!(self.node(id)?.broker.is_none(), "broker {id} is already running");
        self.start_node(id)
    }

    /// An error naming every broker that should be running but has exited, with its log tail.
    ///
    /// # Errors
    /// A broker exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        for n in &mut self.nodes {
            if let Some(b) = n.broker.as_mut() {
                if let Some(status) = b.exited() {
                    bail!("broker {} exited ({status}):\n{}", n.id, b.log_tail());
                }
            }
        }
        Ok(())
    }

    /// The last log lines of broker `id`'s current (or last) run.
    pub fn log_tail(&self, id: i32) -> String {
        self.node(id).ok().and_then(|n| n.broker.as_ref()).map(Broker::log_tail).unwrap_or_default()
    }

    /// Waits until every running broker reports all running brokers live
    /// (`floe_cluster_live_brokers`) and the same controller, one of them.
    ///
    /// # Errors
    /// Not within `timeout`.
    pub fn wait_agreed(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running()?;
            let running: Vec<i32> = self.brokers().map(|(id, _)| id).collect();
            let views: Vec<Option<(f64, f64)>> = self
                .brokers()
                .map(|(_, b)| {
                    let text = b.metrics_text()?;
                    let gauge = |name: &str| {
                        crate::broker::parse_samples(&text, name).first().map(|(_, v)| *v)
                    };
                    Some((
                        gauge("floe_cluster_live_brokers")?,
                        gauge("floe_cluster_controller_id")?,
                    ))
                })
                .collect();
            let agreed =
                views.iter().all(|v| v.is_some_and(|(live, _)| live as usize == running.len()))
                    && views.windows(2).all(|w| w[0].map(|v| v.1) == w[1].map(|v| v.1))
                    && views
                        .first()
                        .copied()
                        .flatten()
                        .is_some_and(|(_, c)| running.contains(&(c as i32)));
            if agreed {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the brokers {running:?} did not agree on {} live and one controller within {timeout:?} (views: {views:?})", running.len());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every partition `0..partitions` of `topic` has a leader and all
    /// `replicas` in its ISR (in etcd).
    ///
    /// # Errors
    /// Not within `timeout`; the error carries the state seen.
    pub fn wait_full_isr(
        &mut self,
        topic: &str,
        partitions: i32,
        replicas: usize,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        for p in 0..partitions {
            loop {
                self.check_running()?;
                let s = self.partition_state(topic, p)?;
                if s.as_ref().is_some_and(|s| s.leader >= 0 && s.isr.len() == replicas) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("{topic}-{p} did not reach an ISR of {replicas} within {timeout:?} (state in etcd: {s:?})");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}
