//! `Member`: one member of a classic group — its identity, timeouts,
//! protocols, assignment, last heartbeat and the deferred JoinGroup or
//! SyncGroup response it is waiting for.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::outcome::{JoinResult, SyncResult};

/// A member of a classic group, owned by its [`super::group::Group`].
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) member_id: String,
    /// `group.instance.id` of a static member.
    pub(crate) instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    /// (name, metadata) in the member's order of preference.
    pub(crate) protocols: Vec<(String, Bytes)>,
    /// The assignment of the current generation, as the leader sent it.
    pub(crate) assignment: Bytes,
    pub(crate) last_heartbeat: Instant,
    /// Set while the member's JoinGroup waits for the rebalance to complete.
    pub(crate) join_waiter: Option<oneshot::Sender<JoinResult>>,
    /// Set while the member's SyncGroup waits for the leader's assignment.
    pub(crate) sync_waiter: Option<oneshot::Sender<SyncResult>>,
    /// Joined during the current rebalance (for `group.initial.rebalance.delay.ms`).
    pub(crate) is_new: bool,
}

impl Member {
    /// The member's metadata for `protocol`.
    pub(crate) fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m)
    }

    /// Whether the member supports `protocol`.
    pub(crate) fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(n, _)| n == protocol)
    }

    /// Whether `protocols` are exactly the member's (names, order and metadata).
    pub(crate) fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// The member's most preferred protocol among `candidates`.
    pub(crate) fn vote<'a>(&'a self, candidates: &[String]) -> Option<&'a str> {
        self.protocols.iter().map(|(n, _)| n.as_str()).find(|n| candidates.iter().any(|c| c == n))
    }

    pub(crate) fn awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }

    pub(crate) fn awaiting_sync(&self) -> bool {
        self.sync_waiter.is_some()
    }

    /// The session is over: no heartbeat (nor join/sync in flight) for `session_timeout`.
    pub(crate) fn has_expired(&self, now: Instant) -> bool {
        !self.awaiting_join()
            && !self.awaiting_sync()
            && now >= self.last_heartbeat + self.session_timeout
    }
}
