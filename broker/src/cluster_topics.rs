//! The cluster's topics, applied to this broker's data directory.
//!
//! In a cluster, topics are created and deleted in the metadata store (any broker
//! handling CreateTopics or DeleteTopics writes there), and every broker follows:
//! - a topic in the metadata gets its logs here, under the cluster's topic id, and
//!   grows with its partition count;
//! - a topic that leaves the metadata while this broker watches is deleted here;
//! - a local topic the metadata does not list (a "stray": deleted while this broker
//!   was away, or of another incarnation) is reported and not served. A stray with the
//!   name of a topic the metadata lists under another id is deleted, as Kafka deletes a
//!   replica whose topic id does not match.
//!
//! Every broker keeps logs for every partition of every topic; only a partition's
//! replicas fill theirs. After applying the topics, the same task hands the view to
//! the [`floe_cluster::replication::ReplicaManager`] (roles) and the fetchers, on every change
//! and on a short tick (logs opened late, ISR checks).
//!
//! The coordinators' internal topics (`__consumer_offsets`, `__transaction_state`)
//! are cluster topics like the others once the first FindCoordinator created them;
//! after each change of roles the coordinators follow their leadership
//! ([`crate::coordinator_terms`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use floe_cluster::TopicAssignment;
use floe_storage::LogManager;
use tracing::{info, warn};

use crate::broker::Broker;

use floe_protocol::topic::is_internal as is_internal_topic;

/// How often roles are re-applied and ISRs checked without a change of view (logs
/// opened late, followers falling behind).
const TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// Keeps the data directory's topics on the cluster's, and this broker's roles on the
/// view's, until the membership ends.
pub async fn run(broker: Arc<Broker>) {
    let mut view = broker.cluster.subscribe();
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut strays_reported = false;
    let mut tick = tokio::time::interval(TICK);
    // Whether the view changed since the topics were last applied.
    let mut changed = true;
    let terms = crate::coordinator_terms::CoordinatorTerms::start(broker.clone());
    loop {
        // A change that arrived while the last pass ran, with the tick due as well, can
        // be consumed by the `borrow_and_update` below without `view.changed()` ever
        // firing for it: ask the channel, so no topic creation waits for the next change.
        if view.has_changed().unwrap_or(false) {
            changed = true;
        }
        let snapshot = {
            let v = view.borrow_and_update();
            v.synced.then(|| v.clone())
        };
        if let Some(v) = snapshot {
            if std::mem::take(&mut changed) {
                let logs = broker.logs.clone();
                let previous = std::mem::take(&mut known);
                let report_strays = !strays_reported;
                let topics = v.topics.clone();
                let applied = tokio::task::spawn_blocking(move || {
                    apply(&logs, &topics, &previous, report_strays)
                })
                .await;
                match applied {
                    Ok(now_known) => known = now_known,
                    Err(e) => tracing::error!(error = %e, "applying the cluster's topics failed"),
                }
                strays_reported = true;
            }
            broker.replicas.apply(&v, &broker.logs);
            terms.follow();
            broker.replicas.shrink_isrs();
            broker.metrics.replication.max_follower_lag.set(broker.replicas.max_follower_lag());
        }
        tokio::select! {
            closed = view.changed() => {
                if closed.is_err() {
                    return;
                }
                changed = true;
            }
            _ = tick.tick() => {}
        }
    }
}

/// One pass: creates, grows and deletes local topics to match `topics`; returns the
/// names now known from the metadata.
fn apply(
    logs: &LogManager,
    topics: &BTreeMap<String, TopicAssignment>,
    previous: &BTreeSet<String>,
    report_strays: bool,
) -> BTreeSet<String> {
    for (name, assignment) in topics {
        if let Err(e) = ensure_local(logs, name, assignment) {
            warn!(topic = %name, error = %e, "cannot create this broker's logs of a cluster topic; retrying at the next change");
        }
    }
    for gone in previous.iter().filter(|n| !topics.contains_key(*n)) {
        match logs.delete_topic(gone) {
            Ok(()) => {
                info!(topic = %gone, "deleted this broker's logs of a topic deleted from the cluster")
            }
            Err(floe_storage::StorageError::UnknownTopicOrPartition { .. }) => {}
            Err(e) => {
                warn!(topic = %gone, error = %e, "cannot delete this broker's logs of a deleted topic")
            }
        }
    }
    if report_strays {
        for t in logs
            .topics()
            .iter()
            .filter(|t| !is_internal_topic(t.name()) && !topics.contains_key(t.name()))
        {
            warn!(topic = %t.name(), topic_id = %t.id(),
                  "stray topic: in this data directory but not in the cluster's metadata; kept, not served");
        }
    }
    topics.keys().cloned().collect()
}

/// Creates (or grows, or replaces a namesake of another id) the local copy of `name`.
pub(crate) fn ensure_local(
    logs: &LogManager,
    name: &str,
    assignment: &TopicAssignment,
) -> Result<(), floe_storage::StorageError> {
    let id = uuid::Uuid::parse_str(&assignment.topic_id).map_err(|e| {
        floe_storage::StorageError::InvalidTopic {
            name: name.to_string(),
            reason: format!("the cluster's topic id {:?} is not a UUID: {e}", assignment.topic_id),
        }
    })?;
    let count = assignment.partitions.keys().next_back().map_or(0, |p| p + 1);
    if let Some(local) = logs.topic(name) {
        if local.id() == id {
            if local.partition_count() < count {
                logs.create_partitions(name, count)?;
                info!(
                    topic = name,
                    partitions = count,
                    "grew this broker's logs of a cluster topic"
                );
            }
            return Ok(());
        }
        warn!(topic = name, local_id = %local.id(), cluster_id = %id,
              "deleting this broker's logs of an older topic of the same name");
        drop(local);
        logs.delete_topic(name)?;
    }
    match logs.create_topic_with_id(name, id, count, assignment.configs.clone()) {
        Ok(_) => {
            info!(topic = name, topic_id = %id, partitions = count, "created this broker's logs of a cluster topic");
            Ok(())
        }
        // Created meanwhile by the CreateTopics handler of this broker.
        Err(floe_storage::StorageError::TopicAlreadyExists { .. })
            if logs.topic(name).is_some_and(|t| t.id() == id) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}
