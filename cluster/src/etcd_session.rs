//! The broker's session with etcd: registration under a lease, the lease's
//! keep-alive, the controller campaign, and the watches that keep the
//! [`ClusterView`] current.
//!
//! Keys, under the cluster's prefix (default `/floe`):
//! - `<prefix>/brokers/<node.id>`: a [`BrokerRegistration`] (JSON), bound to the
//!   broker's lease, so it vanishes when etcd stops hearing from the broker;
//! - `<prefix>/controller`: etcd's election of that name; the winner's campaign key
//!   (bound to its lease) holds its node id, and its create revision is the
//!   controller epoch;
//! - `<prefix>/topics/<name>`: a [`TopicAssignment`] (JSON);
//! - `<prefix>/partitions/<topic>/<p>`: a [`PartitionState`] (JSON), whose
//!   `mod_revision` is the partition epoch.
//!
//! A session lasts until any of its streams fails or the lease expires. The view
//! keeps its last state meanwhile (a broker that cannot reach etcd goes on with what
//! it saw) and a new session (new lease, registration, campaign) starts as soon as
//! etcd answers again.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::controller::{self, ControllerContext};
use crate::etcd_keys::{bounded, parse_json, partitions_prefix};
use crate::{
    BrokerRegistration, ClusterError, ClusterView, PartitionState, TopicAssignment, TopicPartition,
};

/// What to join, and as whom.
pub(crate) struct EtcdTarget {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub registration: BrokerRegistration,
    pub session_timeout: Duration,
    /// `unclean.leader.election.enable`, applied when this broker is the controller.
    pub unclean_leader_election: bool,
    /// `auto.leader.rebalance.enable` and its settings, applied when this broker is the controller.
    pub leader_rebalance: Option<crate::LeaderRebalance>,
}

impl EtcdTarget {
    fn brokers_prefix(&self) -> String {
        format!("{}/brokers/", self.prefix)
    }

    fn broker_key(&self) -> String {
        format!("{}{}", self.brokers_prefix(), self.registration.node_id)
    }

    fn election(&self) -> String {
        format!("{}/controller", self.prefix)
    }

    fn partitions_prefix(&self) -> String {
        partitions_prefix(&self.prefix)
    }

    /// The lease TTL: etcd counts whole seconds.
    fn lease_ttl_s(&self) -> i64 {
        (self.session_timeout.as_millis().div_ceil(1000) as i64).max(1)
    }

    /// The bound on one etcd request that should answer at once.
    fn request_timeout(&self) -> Duration {
        self.session_timeout.max(Duration::from_secs(3))
    }
}

/// The cluster id stored at `<prefix>/cluster_id`, which `proposed` becomes if none is.
pub(crate) async fn agree_cluster_id(
    endpoints: &[String],
    prefix: &str,
    proposed: &str,
    timeout: Duration,
) -> Result<String, ClusterError> {
    let mut c =
        bounded(timeout, "connect", Client::connect(endpoints, Some(connect_options()))).await?;
    let key = format!("{prefix}/cluster_id");
    match create_or_get(&mut c, timeout, &key, proposed.as_bytes(), None).await? {
        None => {
            info!(cluster_id = proposed, key = %key, "created the cluster id in etcd");
            Ok(proposed.to_string())
        }
        Some(stored) => Some(String::from_utf8_lossy(stored.value()).into_owned())
            .filter(|id| !id.is_empty())
            .ok_or(ClusterError::BadValue { key, reason: "empty cluster id".into() }),
    }
}

/// Writes `key` = `value` (under `lease`, if given) only if the key does not exist:
/// `None` when written, else the key as it is (read in the same transaction).
pub(crate) async fn create_or_get(
    c: &mut Client,
    timeout: Duration,
    key: &str,
    value: &[u8],
    lease: Option<i64>,
) -> Result<Option<KeyValue>, ClusterError> {
    let put_options = lease.map(|id| PutOptions::new().with_lease(id));
    let txn = Txn::new()
        .when([Compare::version(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, value, put_options)])
        .or_else([TxnOp::get(key, None)]);
    let resp = bounded(timeout, "create-if-absent", c.txn(txn)).await?;
    if resp.succeeded() {
        return Ok(None);
    }
    let existing = resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => g.kvs().first().cloned(),
        _ => None,
    });
    existing.map(Some).ok_or(ClusterError::BadValue {
        key: key.into(),
        reason: "exists, yet read back empty".into(),
    })
}

fn connect_options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
        .with_keep_alive_while_idle(true)
}

/// Connects, registers this broker (failing if its node id is held by another live
/// broker), and starts the session supervisor.
pub(crate) async fn start(
    target: EtcdTarget,
) -> Result<(Client, watch::Receiver<ClusterView>, oneshot::Sender<()>, JoinHandle<()>), ClusterError>
{
    let client = bounded(
        target.request_timeout(),
        "connect",
        Client::connect(target.endpoints.clone(), Some(connect_options())),
    )
    .await?;
    let lease = register(client.clone(), &target).await?;
    // Until the first listing arrives, the cluster this broker knows is itself.
    let me = target.registration.clone();
    let (view_tx, view_rx) = watch::channel(ClusterView {
        brokers: [(me.node_id, me)].into_iter().collect(),
        ..ClusterView::default()
    });
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(supervise(client.clone(), target, view_tx, lease, stop_rx));
    Ok((client, view_rx, stop_tx, task))
}

/// Runs sessions until told to stop; then revokes the lease so the others see this
/// broker leave at once.
async fn supervise(
    client: Client,
    target: EtcdTarget,
    view: watch::Sender<ClusterView>,
    mut lease: i64,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let ended = tokio::select! {
            _ = &mut stop => break,
            e = run_session(client.clone(), &target, &view, lease) => e,
        };
        warn!(node_id = target.registration.node_id, error = %ended,
              "etcd session ended; keeping the last cluster view until a new session starts");
        let mut backoff = Duration::from_millis(250);
        lease = loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            match register(client.clone(), &target).await {
                Ok(lease) => break lease,
                Err(e) => {
                    warn!(node_id = target.registration.node_id, error = %e, "cannot register with etcd yet; retrying");
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        };
    }
    let mut c = client;
    match tokio::time::timeout(Duration::from_secs(3), c.lease_revoke(lease)).await {
        Ok(Ok(_)) => info!(node_id = target.registration.node_id, "left the cluster (registration revoked)"),
        Ok(Err(e)) => warn!(error = %e, "could not revoke this broker's lease; it expires after broker.session.timeout.ms"),
        Err(_) => warn!("etcd did not answer the lease revoke; the registration expires after broker.session.timeout.ms"),
    }
}

/// One session: ends (with why) when the lease, the watch, the campaign or the
/// controller observation fails.
async fn run_session(
    client: Client,
    target: &EtcdTarget,
    view: &watch::Sender<ClusterView>,
    lease: i64,
) -> ClusterError {
    // How many of the two listings (brokers; topics and partitions) this session has
    // loaded: the controller acts only on a view its own session has read in full.
    let (loaded_tx, loaded_rx) = watch::channel(0u8);
    let loaded = || loaded_tx.send_modify(|n| *n += 1);
    let loaded_for_campaign = loaded_rx.clone();
    let result = tokio::select! {
        r = keep_alive(client.clone(), target, lease) => r,
        r = watch_brokers(client.clone(), target, view, loaded) => r,
        r = watch_topics_and_partitions(client.clone(), target, view, loaded) => r,
        r = campaign(client.clone(), target, lease, view.subscribe(), loaded_for_campaign) => r,
        r = observe_controller(client.clone(), target, view) => r,
        r = mark_synced(loaded_rx, view) => r,
    };
    match result {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// The listings a session loads: brokers; topics with partitions.
const LISTINGS: u8 = 2;

/// Marks the view synced once this session has loaded every listing.
async fn mark_synced(
    mut loaded: watch::Receiver<u8>,
    view: &watch::Sender<ClusterView>,
) -> Result<Infallible, ClusterError> {
    loaded.wait_for(|n| *n >= LISTINGS).await.map_err(|_| ClusterError::StreamEnded("listing"))?;
    view.send_if_modified(|v| !std::mem::replace(&mut v.synced, true));
    std::future::pending().await
}

/// Grants a lease and writes this broker's registration under it, if no other live
/// broker holds the node id. An earlier incarnation of this broker (same endpoints:
/// it was killed, or this process lost its previous session) is replaced at once, its
/// lease revoked so a controller role it held is released too. Another broker's is
/// waited out for one session timeout, then refused.
async fn register(mut c: Client, target: &EtcdTarget) -> Result<i64, ClusterError> {
    let me = &target.registration;
    let key = target.broker_key();
    let value = serde_json::to_vec(me)
        .map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
    let lease =
        bounded(target.request_timeout(), "lease grant", c.lease_grant(target.lease_ttl_s(), None))
            .await?
            .id();
    let give_up_at = Instant::now() + target.session_timeout + Duration::from_secs(2);
    let mut waiting_logged = false;
    loop {
        let holder = match create_or_get(
            &mut c,
            target.request_timeout(),
            &key,
            &value,
            Some(lease),
        )
        .await?
        {
            None => {
                info!(node_id = me.node_id, endpoints = %me.describe_endpoints(), lease, key = %key, "registered in etcd");
                return Ok(lease);
            }
            Some(holder) => holder,
        };
        let theirs = parse_registration(&holder);
        if theirs.as_ref().is_ok_and(|r| r.endpoints == me.endpoints) {
            info!(
                node_id = me.node_id,
                old_lease = holder.lease(),
                "replacing the registration of an earlier incarnation of this broker"
            );
            drop_registration(&mut c, target, &key, &holder).await?;
            continue;
        }
        let holder_desc = theirs.map_or_else(|e| e.to_string(), |r| r.describe_endpoints());
        if Instant::now() >= give_up_at {
            let _ = c.lease_revoke(lease).await;
            return Err(ClusterError::NodeIdInUse { node_id: me.node_id, holder: holder_desc });
        }
        if !waiting_logged {
            warn!(node_id = me.node_id, holder = %holder_desc,
                  "node.id is registered by another broker; waiting for that registration to expire");
            waiting_logged = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Removes a stale registration: revokes its lease (which also ends a controller
/// role held under it), or deletes the key if it has none; either only if the key is
/// still the one seen.
async fn drop_registration(
    c: &mut Client,
    target: &EtcdTarget,
    key: &str,
    stale: &KeyValue,
) -> Result<(), ClusterError> {
    if stale.lease() != 0 {
        match bounded(target.request_timeout(), "lease revoke", c.lease_revoke(stale.lease())).await
        {
            Ok(_) | Err(ClusterError::Etcd(_)) => return Ok(()), // revoked, or expired meanwhile
            Err(e) => return Err(e),
        }
    }
    let txn = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, stale.mod_revision())])
        .and_then([TxnOp::delete(key, None)]);
    bounded(target.request_timeout(), "stale registration delete", c.txn(txn)).await?;
    Ok(())
}

async fn keep_alive(
    mut c: Client,
    target: &EtcdTarget,
    lease: i64,
) -> Result<Infallible, ClusterError> {
    let (mut keeper, mut stream) =
        bounded(target.request_timeout(), "lease keep-alive", c.lease_keep_alive(lease)).await?;
    let mut tick =
        tokio::time::interval((target.session_timeout / 3).max(Duration::from_millis(100)));
    loop {
        tick.tick().await;
        keeper.keep_alive().await?;
        let resp = bounded(target.request_timeout(), "lease keep-alive", stream.message())
            .await?
            .ok_or(ClusterError::StreamEnded("lease keep-alive"))?;
        if resp.ttl() <= 0 {
            return Err(ClusterError::LeaseExpired);
        }
    }
}

/// Keeps `publish` fed with every key under `prefix` (by the rest of its name after
/// the prefix), parsed by `parse`: a listing, then a watch from the revision after it.
/// `loaded` is called once the listing is published. Keys that do not parse are
/// logged and left out.
async fn mirror_prefix<T>(
    c: Client,
    timeout: Duration,
    prefix: String,
    parse: impl Fn(&KeyValue) -> Result<T, ClusterError>,
    publish: impl FnMut(&BTreeMap<String, T>),
    loaded: impl FnOnce(),
) -> Result<Infallible, ClusterError> {
    let range = KeyRange { start: prefix.clone(), end: None, strip: prefix };
    mirror_range(c, timeout, range, parse, publish, loaded).await
}

/// Keys from `start` up to `end` (exclusive; `None`: every key starting with `start`),
/// named by what follows `strip`.
struct KeyRange {
    start: String,
    end: Option<String>,
    strip: String,
}

/// [`mirror_prefix`] over a key range: one listing and one watch, so that the keys of
/// one etcd transaction reach `publish` together.
async fn mirror_range<T>(
    mut c: Client,
    timeout: Duration,
    range: KeyRange,
    parse: impl Fn(&KeyValue) -> Result<T, ClusterError>,
    mut publish: impl FnMut(&BTreeMap<String, T>),
    loaded: impl FnOnce(),
) -> Result<Infallible, ClusterError> {
    let KeyRange { start, end, strip } = range;
    let suffix = |kv: &KeyValue| {
        kv.key_str().ok().and_then(|k| k.strip_prefix(strip.as_str())).map(str::to_string)
    };
    let get_options = match &end {
        Some(end) => GetOptions::new().with_range(end.as_str()),
        None => GetOptions::new().with_prefix(),
    };
    let listing = bounded(timeout, "listing", c.get(start.clone(), Some(get_options))).await?;
    let revision = listing.header().map_or(0, |h| h.revision());
    let mut entries = BTreeMap::new();
    for kv in listing.kvs() {
        match (suffix(kv), parse(kv)) {
            (Some(name), Ok(v)) => {
                entries.insert(name, v);
            }
            (_, Err(e)) => warn!(error = %e, "ignoring a key in etcd"),
            (None, _) => {}
        }
    }
    publish(&entries);
    loaded();
    let watch_options = match &end {
        Some(end) => WatchOptions::new().with_range(end.as_str()),
        None => WatchOptions::new().with_prefix(),
    };
    let mut stream =
        c.watch(start.clone(), Some(watch_options.with_start_revision(revision + 1))).await?;
    while let Some(resp) = stream.message().await? {
        if resp.canceled() {
            return Err(ClusterError::StreamEnded("watch"));
        }
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            let Some(name) = suffix(kv) else { continue };
            match event.event_type() {
                EventType::Put => match parse(kv) {
                    Ok(v) => {
                        entries.insert(name, v);
                    }
                    Err(e) => warn!(error = %e, "ignoring a key in etcd"),
                },
                EventType::Delete => {
                    entries.remove(&name);
                }
            }
        }
        publish(&entries);
    }
    Err(ClusterError::StreamEnded("watch"))
}

/// Keeps `view.brokers` equal to the registrations in etcd.
async fn watch_brokers(
    c: Client,
    target: &EtcdTarget,
    view: &watch::Sender<ClusterView>,
    loaded: impl FnOnce(),
) -> Result<Infallible, ClusterError> {
    let publish = |entries: &BTreeMap<String, BrokerRegistration>| {
        publish_brokers(view, entries.values().map(|r| (r.node_id, r.clone())).collect());
    };
    mirror_prefix(
        c,
        target.request_timeout(),
        target.brokers_prefix(),
        parse_registration,
        publish,
        loaded,
    )
    .await
}

/// A key of the topics-and-partitions range.
enum TopicsEntry {
    Topic(String, TopicAssignment),
    Partition(TopicPartition, PartitionState),
    /// Another key in the range (`producer_id_block` sorts between the two prefixes).
    Other,
}

/// Keeps `view.topics` and `view.partitions` equal to etcd's, through one watch over
/// the range from `partitions/` to the end of `topics/`: a topic created (or deleted)
/// with its partitions in one transaction appears (or goes) in one view change, never
/// a topic without its partitions.
async fn watch_topics_and_partitions(
    c: Client,
    target: &EtcdTarget,
    view: &watch::Sender<ClusterView>,
    loaded: impl FnOnce(),
) -> Result<Infallible, ClusterError> {
    let strip = format!("{}/", target.prefix);
    let parse = |kv: &KeyValue| {
        let name =
            kv.key_str().ok().and_then(|k| k.strip_prefix(strip.as_str())).unwrap_or_default();
        if let Some(topic) = name.strip_prefix("topics/") {
            let mut t = parse_json::<TopicAssignment>(kv)?;
            t.create_revision = kv.create_revision();
            t.mod_revision = kv.mod_revision();
            return Ok(TopicsEntry::Topic(topic.to_string(), t));
        }
        if let Some((topic, p)) =
            name.strip_prefix("partitions/").and_then(|rest| rest.rsplit_once('/'))
        {
            let mut state = parse_json::<PartitionState>(kv)?;
            state.partition_epoch = kv.mod_revision();
            if let Ok(p) = p.parse() {
                return Ok(TopicsEntry::Partition(TopicPartition::new(topic, p), state));
            }
        }
        Ok(TopicsEntry::Other)
    };
    let publish = |entries: &BTreeMap<String, TopicsEntry>| {
        let mut topics = BTreeMap::new();
        let mut partitions = BTreeMap::new();
        for entry in entries.values() {
            match entry {
                TopicsEntry::Topic(name, t) => {
                    topics.insert(name.clone(), t.clone());
                }
                TopicsEntry::Partition(tp, s) => {
                    partitions.insert(tp.clone(), s.clone());
                }
                TopicsEntry::Other => {}
            }
        }
        view.send_if_modified(|v| {
            if *v.topics == topics && *v.partitions == partitions {
                return false;
            }
            v.topics = Arc::new(topics);
            v.partitions = Arc::new(partitions);
            true
        });
    };
    // `topics0` is the first key after every `topics/...` ('0' follows '/').
    let range = KeyRange {
        start: target.partitions_prefix(),
        end: Some(format!("{}/topics0", target.prefix)),
        strip: strip.clone(),
    };
    mirror_range(c, target.request_timeout(), range, parse, publish, loaded).await
}

fn publish_brokers(view: &watch::Sender<ClusterView>, brokers: BTreeMap<i32, BrokerRegistration>) {
    view.send_if_modified(|v| {
        if v.brokers == brokers {
            return false;
        }
        let ids: Vec<i32> = brokers.keys().copied().collect();
        info!(brokers = ?ids, "live brokers changed");
        v.brokers = brokers;
        true
    });
}

/// Campaigns for the controller role under this session's lease; once won, holds it
/// for as long as the lease lives.
async fn campaign(
    mut c: Client,
    target: &EtcdTarget,
    lease: i64,
    view: watch::Receiver<ClusterView>,
    mut loaded: watch::Receiver<u8>,
) -> Result<Infallible, ClusterError> {
    let node_id = target.registration.node_id;
    let won = c.campaign(target.election(), node_id.to_string(), lease).await?;
    let leader = won.leader().ok_or(ClusterError::StreamEnded("campaign"))?;
    let epoch = leader.rev();
    info!(node_id, controller_epoch = epoch, "this broker is now the controller");
    loaded.wait_for(|n| *n >= LISTINGS).await.map_err(|_| ClusterError::StreamEnded("listing"))?;
    let ctx = ControllerContext {
        client: c,
        prefix: target.prefix.clone(),
        leader_key: leader.key().to_vec(),
        controller_epoch: epoch,
        unclean_leader_election: target.unclean_leader_election,
        leader_rebalance: target.leader_rebalance,
        last_rebalance: tokio::time::Instant::now(),
        timeout: target.request_timeout(),
    };
    controller::run(ctx, view).await
}

/// Keeps `view.controller_id` on the election's winner.
async fn observe_controller(
    mut c: Client,
    target: &EtcdTarget,
    view: &watch::Sender<ClusterView>,
) -> Result<Infallible, ClusterError> {
    let mut stream = c.observe(target.election()).await?;
    while let Some(resp) = stream.message().await? {
        let Some(kv) = resp.kv() else { continue };
        let Some(id) = kv.value_str().ok().and_then(|v| v.parse::<i32>().ok()) else {
            warn!(value = ?kv.value(), "the controller election holds a value that is not a node id");
            continue;
        };
        let epoch = kv.create_revision();
        view.send_if_modified(|v| {
            if v.controller_id == Some(id) && v.controller_epoch == epoch {
                return false;
            }
            info!(controller_id = id, controller_epoch = epoch, "controller changed");
            v.controller_id = Some(id);
            v.controller_epoch = epoch;
            true
        });
    }
    Err(ClusterError::StreamEnded("controller observe"))
}

fn parse_registration(kv: &KeyValue) -> Result<BrokerRegistration, ClusterError> {
    parse_json(kv)
}
