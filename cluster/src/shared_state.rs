//! Shared state: the settings every broker of a cluster enforces alike (topic config
//! changes, dynamic broker configs, ACLs, SCRAM credentials), kept in etcd, mirrored
//! by every broker and changed by whichever broker handles the admin request.
//!
//! This is ZooKeeper-mode Kafka's layout, with etcd's watch in place of its change
//! notification znodes (`/config/changes`, `/kafka-acl-changes`). Keys, under the
//! cluster's prefix:
//! - `configs/topics/<name>`: a topic's whole override set once it was altered
//!   ([`StoredTopicConfig`], Kafka's `/config/topics/<t>`), tied to the topic id so a
//!   later topic of the same name does not inherit it. While absent, the topic's
//!   overrides are the creation-time configs in `topics/<name>` (left as they are);
//! - `configs/brokers/<default>` and `configs/brokers/<node.id>`: the dynamic broker
//!   configs, cluster-wide and per broker (Kafka's `/config/brokers/...`);
//! - `acls/<ResourceType>/<PatternType>/<name>`: the ACL bindings of one resource
//!   pattern (Kafka's `/kafka-acl/<type>/<name>` and `/kafka-acl-extended/prefixed/...`);
//! - `scram/<user>`: a user's SCRAM credentials (Kafka kept them in `/config/users/<u>`).
//!
//! Apart from topic configs, values are opaque here: the broker writes and reads them.
//!
//! A change is a read, a decision and a write conditional on every changed key's
//! `mod_revision` being the one read (Kafka's conditional znode updates on the znode
//! version): of two brokers changing the same keys at once, one wins and the other
//! decides again from the winner's state. Each broker watches the three directories
//! and keeps a [`SharedState`]; a broker that loses etcd keeps the last state it saw,
//! and reads the whole directories again once etcd answers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::etcd_keys::{bounded, parse_json, topic_key};
use crate::{ClusterError, TopicAssignment};

/// The directories of shared state, each one watch.
pub const SHARED_DIRS: [&str; 3] = ["configs/", "acls/", "scram/"];

/// The key (relative to the prefix) of a topic's altered configs.
pub fn topic_config_key(topic: &str) -> String {
    format!("configs/topics/{topic}")
}

/// The key of the dynamic configs of broker `node_id`, or of the cluster-wide default (`None`).
pub fn broker_config_key(node_id: Option<i32>) -> String {
    match node_id {
        Some(id) => format!("configs/brokers/{id}"),
        None => "configs/brokers/<default>".to_string(),
    }
}

/// A topic's override set, as AlterConfigs or IncrementalAlterConfigs left it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTopicConfig {
    /// The topic these overrides belong to (a topic deleted and created again under
    /// the same name has another id, and starts from its creation configs).
    pub topic_id: String,
    /// Every override (not only the altered ones): they replace the creation configs.
    pub configs: BTreeMap<String, String>,
}

/// One stored value and the revision it was written at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredValue {
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// The shared state as last seen in etcd. Cheap to clone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedState {
    /// Every key under the [`SHARED_DIRS`], by its name relative to the prefix
    /// (`acls/Topic/Literal/orders`).
    pub entries: Arc<BTreeMap<String, StoredValue>>,
    /// Per directory, the etcd revision its mirror has reached: a write at revision R
    /// is in `entries` once its directory's revision is at least R.
    pub revisions: BTreeMap<&'static str, i64>,
    /// Whether every directory has been read at least once.
    pub synced: bool,
}

impl SharedState {
    /// The entries under `dir` (e.g. `acls/`), by the rest of their name.
    pub fn under<'a>(
        &'a self,
        dir: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a StoredValue)> + 'a {
        self.entries
            .range(dir.to_string()..)
            .map_while(move |(k, v)| k.strip_prefix(dir).map(|rest| (rest, v)))
    }

    /// The topic's altered configs, if it has any for this topic id.
    pub fn topic_config(&self, topic: &str, topic_id: &str) -> Option<BTreeMap<String, String>> {
        let stored = self.entries.get(&topic_config_key(topic))?;
        let parsed: StoredTopicConfig = serde_json::from_slice(&stored.value)
            // Read on every application (each second): a value that does not parse stays
            // quiet here; the broker that wrote it validated it, so only a hand edit can.
            .map_err(
                |e| debug!(topic, error = %e, "ignoring stored topic configs that do not parse"),
            )
            .ok()?;
        (parsed.topic_id == topic_id).then_some(parsed.configs)
    }

    /// The overrides topic `name` has in the cluster: its altered configs, else its
    /// creation configs.
    pub fn effective_topic_config(
        &self,
        name: &str,
        assignment: &TopicAssignment,
    ) -> BTreeMap<String, String> {
        self.topic_config(name, &assignment.topic_id).unwrap_or_else(|| assignment.configs.clone())
    }
}

/// One key's change: the new value, or `None` to delete it.
pub type Change = (String, Option<Vec<u8>>);

/// The shared state of one cluster: its mirror, and the writes that change it.
/// Dropping it stops the mirror.
pub struct SharedStore {
    client: Client,
    prefix: String,
    timeout: Duration,
    state: watch::Receiver<SharedState>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore").field("prefix", &self.prefix).finish()
    }
}

impl Drop for SharedStore {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SharedStore {
    /// Starts mirroring the shared state under `prefix`.
    pub(crate) fn start(client: Client, prefix: String, timeout: Duration) -> Self {
        let (tx, rx) = watch::channel(SharedState::default());
        let task = tokio::spawn(mirror_all(client.clone(), prefix.clone(), timeout, tx));
        SharedStore { client, prefix, timeout, state: rx, task }
    }

    /// The state as last seen.
    pub fn state(&self) -> SharedState {
        self.state.borrow().clone()
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<SharedState> {
        self.state.clone()
    }

    /// Waits until every directory has been read once, for at most `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.state.clone();
        tokio::time::timeout(timeout, async { rx.wait_for(|s| s.synced).await.is_ok() })
            .await
            .unwrap_or(false)
    }

    /// Waits until this broker's mirror of `dir` has reached `revision` (a write of its
    /// own), for at most `timeout`; returns whether it has.
    pub async fn wait_for_revision(&self, dir: &str, revision: i64, timeout: Duration) -> bool {
        let mut rx = self.state.clone();
        let reached =
            |s: &SharedState| s.revisions.iter().any(|(d, r)| *d == dir && *r >= revision);
        tokio::time::timeout(timeout, async { rx.wait_for(reached).await.is_ok() })
            .await
            .unwrap_or(false)
    }

    /// Changes keys under `dir` (one of [`SHARED_DIRS`]): `decide` gets every key under
    /// it (by the rest of its name) as stored now, and returns the changes (names
    /// relative to `dir`); they are written in one transaction conditional on each
    /// changed key being as read, else read and decided again. Returns `Ok(None)` when
    /// `decide` changes nothing, else the revision written; `Err(e)` inside when
    /// `decide` refuses.
    ///
    /// # Errors
    /// etcd errors.
    pub async fn update<E>(
        &self,
        dir: &str,
        mut decide: impl FnMut(&BTreeMap<String, Vec<u8>>) -> Result<Vec<Change>, E>,
    ) -> Result<Result<Option<i64>, E>, ClusterError> {
        let mut c = self.client.clone();
        let full_dir = format!("{}/{dir}", self.prefix);
        loop {
            let read = bounded(
                self.timeout,
                "shared state read",
                c.get(full_dir.as_str(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
            let mut current = BTreeMap::new();
            let mut revisions = BTreeMap::new();
            for kv in read.kvs() {
                if let Some(name) =
                    kv.key_str().ok().and_then(|k| k.strip_prefix(full_dir.as_str()))
                {
                    current.insert(name.to_string(), kv.value().to_vec());
                    revisions.insert(name.to_string(), kv.mod_revision());
                }
            }
            let changes = match decide(&current) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            if changes.is_empty() {
                return Ok(Ok(None));
            }
            let mut compares = Vec::with_capacity(changes.len());
            let mut ops = Vec::with_capacity(changes.len());
            for (name, value) in &changes {
                let key = format!("{full_dir}{name}");
                compares.push(match revisions.get(name) {
                    Some(r) => Compare::mod_revision(key.as_str(), CompareOp::Equal, *r),
                    None => Compare::version(key.as_str(), CompareOp::Equal, 0),
                });
                ops.push(match value {
                    Some(v) => TxnOp::put(key.as_str(), v.clone(), None),
                    None => TxnOp::delete(key.as_str(), None),
                });
            }
            let resp = bounded(
                self.timeout,
                "shared state write",
                c.txn(Txn::new().when(compares).and_then(ops)),
            )
            .await?;
            if resp.succeeded() {
                let revision = resp.header().map_or(0, |h| h.revision());
                info!(
                    dir,
                    keys = changes.len(),
                    revision,
                    "shared state changed in the cluster metadata"
                );
                return Ok(Ok(Some(revision)));
            }
            debug!(dir, "shared state changed while a change was decided; deciding again");
        }
    }

    /// Alters the configs of topic `name` (AlterConfigs, IncrementalAlterConfigs):
    /// `decide` gets the topic as stored and its current overrides (altered, else the
    /// creation configs) and returns the new override set, written to
    /// `configs/topics/<name>` conditional on the topic being the same incarnation and
    /// its configs key unchanged since read (else read and decided again). Returns the
    /// revision written, or what `decide` refused.
    ///
    /// # Errors
    /// [`ClusterError::UnknownTopic`]; etcd errors.
    pub async fn alter_topic_config<E>(
        &self,
        name: &str,
        mut decide: impl FnMut(
            &TopicAssignment,
            &BTreeMap<String, String>,
        ) -> Result<BTreeMap<String, String>, E>,
    ) -> Result<Result<i64, E>, ClusterError> {
        let mut c = self.client.clone();
        let topic_key = topic_key(&self.prefix, name);
        let config_key = format!("{}/{}", self.prefix, topic_config_key(name));
        loop {
            let read = Txn::new().and_then([
                TxnOp::get(topic_key.as_str(), None),
                TxnOp::get(config_key.as_str(), None),
            ]);
            let read = bounded(self.timeout, "topic config read", c.txn(read)).await?;
            let mut got = read.op_responses().into_iter().map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().cloned(),
                _ => None,
            });
            let (topic, stored) = (got.next().flatten(), got.next().flatten());
            let topic = topic.ok_or_else(|| ClusterError::UnknownTopic(name.to_string()))?;
            let assignment: TopicAssignment = parse_json(&topic)?;
            let current = stored
                .as_ref()
                .and_then(|kv| parse_json::<StoredTopicConfig>(kv).ok())
                .filter(|s| s.topic_id == assignment.topic_id)
                .map_or_else(|| assignment.configs.clone(), |s| s.configs);
            let next = match decide(&assignment, &current) {
                Ok(n) => n,
                Err(e) => return Ok(Err(e)),
            };
            let value = StoredTopicConfig { topic_id: assignment.topic_id.clone(), configs: next };
            let value = serde_json::to_vec(&value).map_err(|e| ClusterError::BadValue {
                key: config_key.clone(),
                reason: e.to_string(),
            })?;
            let config_compare = match &stored {
                Some(kv) => {
                    Compare::mod_revision(config_key.as_str(), CompareOp::Equal, kv.mod_revision())
                }
                None => Compare::version(config_key.as_str(), CompareOp::Equal, 0),
            };
            let txn = Txn::new()
                .when([
                    Compare::create_revision(
                        topic_key.as_str(),
                        CompareOp::Equal,
                        topic.create_revision(),
                    ),
                    config_compare,
                ])
                .and_then([TxnOp::put(config_key.as_str(), value, None)]);
            let resp = bounded(self.timeout, "topic config write", c.txn(txn)).await?;
            if resp.succeeded() {
                let revision = resp.header().map_or(0, |h| h.revision());
                info!(topic = name, revision, "topic configs altered in the cluster metadata");
                return Ok(Ok(revision));
            }
            debug!(
                topic = name,
                "the topic or its configs changed while an alteration was decided; deciding again"
            );
        }
    }
}

/// Mirrors every directory, each with its own listing and watch; a failed one is read
/// again after a pause, the state keeping what it had meanwhile.
async fn mirror_all(
    client: Client,
    prefix: String,
    timeout: Duration,
    state: watch::Sender<SharedState>,
) {
    let mirrors = SHARED_DIRS.map(|dir| {
        let (client, prefix, state) = (client.clone(), prefix.clone(), state.clone());
        async move {
            let mut backoff = Duration::from_millis(250);
            loop {
                let ended = mirror_dir(client.clone(), &prefix, dir, timeout, &state).await;
                warn!(dir, error = %ended, "the shared state's etcd watch ended; keeping the last state and reading it again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    });
    let [a, b, c] = mirrors;
    tokio::join!(a, b, c);
}

/// One directory: a listing, then a watch from the revision after it. Returns why it ended.
async fn mirror_dir(
    mut c: Client,
    prefix: &str,
    dir: &'static str,
    timeout: Duration,
    state: &watch::Sender<SharedState>,
) -> ClusterError {
    let full = format!("{prefix}/{dir}");
    let strip = format!("{prefix}/");
    let name = |k: &[u8]| {
        std::str::from_utf8(k).ok().and_then(|k| k.strip_prefix(strip.as_str())).map(str::to_string)
    };
    let listing = match bounded(
        timeout,
        "shared state listing",
        c.get(full.as_str(), Some(GetOptions::new().with_prefix())),
    )
    .await
    {
        Ok(l) => l,
        Err(e) => return e,
    };
    let revision = listing.header().map_or(0, |h| h.revision());
    let listed: BTreeMap<String, StoredValue> = listing
        .kvs()
        .iter()
        .filter_map(|kv| {
            Some((
                name(kv.key())?,
                StoredValue { value: kv.value().to_vec(), mod_revision: kv.mod_revision() },
            ))
        })
        .collect();
    state.send_modify(|s| {
        let mut entries: BTreeMap<String, StoredValue> = s
            .entries
            .iter()
            .filter(|(k, _)| !k.starts_with(dir))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        entries.extend(listed);
        s.entries = Arc::new(entries);
        s.revisions.insert(dir, revision);
        s.synced = SHARED_DIRS.iter().all(|d| s.revisions.contains_key(d));
    });
    let options = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
    let mut stream = match c.watch(full.as_str(), Some(options)).await {
        Ok(stream) => stream,
        Err(e) => return e.into(),
    };
    loop {
        let resp = match stream.message().await {
            Ok(Some(resp)) => resp,
            Ok(None) => return ClusterError::StreamEnded("shared state watch"),
            Err(e) => return e.into(),
        };
        if resp.canceled() {
            return ClusterError::StreamEnded("shared state watch");
        }
        // The revision of the newest event (a delete's kv carries the delete's revision).
        let revision = resp
            .events()
            .iter()
            .filter_map(|e| e.kv().map(|kv| kv.mod_revision()))
            .max()
            .unwrap_or(0);
        state.send_modify(|s| {
            let entries = Arc::make_mut(&mut s.entries);
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                let Some(key) = name(kv.key()) else { continue };
                match event.event_type() {
                    EventType::Put => {
                        entries.insert(
                            key,
                            StoredValue {
                                value: kv.value().to_vec(),
                                mod_revision: kv.mod_revision(),
                            },
                        );
                    }
                    EventType::Delete => {
                        entries.remove(&key);
                    }
                }
            }
            let reached = s.revisions.entry(dir).or_default();
            *reached = (*reached).max(revision);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(entries: &[(&str, &[u8])]) -> SharedState {
        let entries = entries
            .iter()
            .map(|(k, v)| (k.to_string(), StoredValue { value: v.to_vec(), mod_revision: 1 }))
            .collect();
        SharedState { entries: Arc::new(entries), ..SharedState::default() }
    }

    #[test]
    fn under_lists_one_directory_only() {
        let s = state(&[
            ("acls/Topic/Literal/a", b"1"),
            ("acls/Topic/Literal/b/c", b"2"),
            ("configs/topics/a", b"3"),
            ("scram/u", b"4"),
        ]);
        let acls: Vec<&str> = s.under("acls/").map(|(k, _)| k).collect();
        assert_eq!(acls, ["Topic/Literal/a", "Topic/Literal/b/c"]);
        assert_eq!(s.under("scram/").count(), 1);
        assert_eq!(s.under("nothing/").count(), 0);
    }

    #[test]
    fn a_topic_config_applies_to_its_own_topic_id_only() {
        let assignment = |id: &str| TopicAssignment {
            topic_id: id.into(),
            partitions: BTreeMap::new(),
            configs: [("retention.ms".to_string(), "1000".to_string())].into_iter().collect(),
            create_revision: 0,
            mod_revision: 0,
        };
        let stored = serde_json::to_vec(&StoredTopicConfig {
            topic_id: "id-1".into(),
            configs: [("max.message.bytes".to_string(), "1024".to_string())].into_iter().collect(),
        })
        .expect("json");
        let s = state(&[(topic_config_key("t").as_str(), stored.as_slice())]);
        // Altered: the stored set replaces the creation configs.
        assert_eq!(
            s.effective_topic_config("t", &assignment("id-1")).into_iter().collect::<Vec<_>>(),
            [("max.message.bytes".to_string(), "1024".to_string())]
        );
        // A later topic of the same name starts from its own creation configs.
        assert_eq!(s.effective_topic_config("t", &assignment("id-2")), assignment("id-2").configs);
        assert_eq!(s.effective_topic_config("u", &assignment("id-1")), assignment("id-1").configs);
    }
}
