//! `Group`: one classic consumer group and its state machine.
//!
//! ```text
//!            join                all joined / deadline          leader's SyncGroup
//!   Empty ──────────► PreparingRebalance ──────────► CompletingRebalance ──────────► Stable
//!     ▲                   ▲   │ nobody left                 │ join, leave, expiry        │
//!     └───────────────────┼───┘                             │ or sync deadline           │
//!                         └─────────────────────────────────┴────────────────────────────┘
//!                                                 join (leader or new metadata), leave, expiry
//! ```
//! Dead is the state of a deleted group (no longer in the coordinator's map).
//!
//! Everything here is synchronous and takes `now` explicitly, so the state
//! machine is tested without a runtime. Deferred JoinGroup and SyncGroup
//! responses are `oneshot` senders kept on the members; the methods that
//! complete a phase send on them.
//!
//! Two steps wait for the log, as in Kafka: the leader's SyncGroup, whose
//! assignment becomes the Stable generation only once the group record
//! holding it is written (replicated, in a cluster), and a static member's
//! rejoin under a new member id. The group leaves a [`PendingWrite`] for the
//! coordinator ([`Group::take_pending_write`]), which appends the record and
//! hands the result back ([`Group::write_done`]): the step completes, or is
//! undone and its requests get the write's error. So a member is never told
//! an assignment or a member id that a new coordinator would not load.

#![allow(clippy::module_inception)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::consumer_group::ConsumerGroup;
use super::member::Member;
use super::outcome::{JoinResult, JoinedMember, Outcome, SyncResult};
use super::records::{GroupMetadata, MemberMetadata, OffsetAndMetadata};
use super::state::GroupState;
use super::summary::{GroupSummary, MemberSummary};
use crate::clock::wall_ms;

/// The broker settings the state machine obeys.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay: Duration,
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            initial_rebalance_delay: Duration::from_millis(3000),
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
        }
    }
}

/// A JoinGroup, decoded.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// Empty on a first join.
    pub member_id: String,
    /// `group.instance.id` (static membership).
    pub instance_id: Option<String>,
    /// The client's id (from the request header).
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (v0: the session timeout).
    pub rebalance_timeout_ms: i32,
    /// "consumer", "connect", …
    pub protocol_type: String,
    /// (name, metadata) by preference.
    pub protocols: Vec<(String, Bytes)>,
    /// v4+ (KIP-394): a first join gets MEMBER_ID_REQUIRED and an id.
    pub require_known_member_id: bool,
}

/// One classic group: members, generation, protocol, committed offsets.
///
/// Not thread-safe by itself: the coordinator keeps each group behind a
/// `std::sync::Mutex` and never awaits while holding it.
#[derive(Debug)]
pub struct Group {
    id: String,
    state: GroupState,
    /// Wall time the current state was entered (ms).
    pub(crate) state_since_ms: i64,
    protocol_type: Option<String>,
    protocol: Option<String>,
    generation: i32,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// `group.instance.id` → member id.
    static_members: HashMap<String, String>,
    /// KIP-394: ids handed out with MEMBER_ID_REQUIRED, until they join or expire.
    pending_members: HashMap<String, Instant>,
    join_deadline: Option<Instant>,
    /// `Some` while the first rebalance of an empty group waits for more members.
    initial_delay_remaining: Option<Duration>,
    new_member_added: bool,
    sync_deadline: Option<Instant>,
    /// Members of the new generation that have not sent SyncGroup yet.
    pending_sync: HashSet<String>,
    /// Committed offsets by (topic, partition).
    pub(crate) offsets: HashMap<(String, i32), OffsetAndMetadata>,
    /// The persisted metadata changed: the coordinator writes it and clears this.
    pub(crate) metadata_dirty: bool,
    /// Group metadata was ever persisted (a tombstone is due when it goes).
    pub(crate) persisted: bool,
    /// `Some` while the group id is a consumer group (KIP-848): then it has no
    /// classic members, and while it has consumer members no classic member can join.
    pub(crate) consumer: Option<ConsumerGroup>,
    /// A step that needs its group record written, not yet taken by the coordinator.
    pending_write: Option<PendingWrite>,
    /// The generation whose leader assignment is being written (a second
    /// SyncGroup of the leader meanwhile only waits).
    assignment_in_flight: Option<i32>,
}

/// A step of the state machine that completes once the group record it
/// implies is in the log (see the module doc).
#[derive(Debug)]
pub struct PendingWrite {
    generation: i32,
    step: PendingStep,
}

#[derive(Debug)]
enum PendingStep {
    /// The leader's assignment, by member id: the group turns Stable with it.
    Assignment(HashMap<String, Bytes>),
    /// A static member took `old_id`'s place as `new_id` in a Stable group;
    /// its JoinGroup is answered on `reply`.
    StaticRejoin {
        old_id: String,
        new_id: String,
        old_client: (String, String),
        reply: oneshot::Sender<JoinResult>,
    },
}

impl Group {
    /// A new, empty group.
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            state: GroupState::Empty,
            state_since_ms: wall_ms(),
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            join_deadline: None,
            initial_delay_remaining: None,
            new_member_added: false,
            sync_deadline: None,
            pending_sync: HashSet::new(),
            offsets: HashMap::new(),
            metadata_dirty: false,
            persisted: false,
            consumer: None,
            pending_write: None,
            assignment_in_flight: None,
        }
    }

    /// A group rebuilt from the log, as Kafka's `GroupMetadata.loadGroup`
    /// does: with members it is Stable in the generation it had, each member
    /// with its assignment and a fresh session (its last heartbeat is `now`,
    /// the load); without members it is Empty. A member's protocols are the
    /// one the group selected (the log keeps no others), so a rejoin with
    /// its full list rebalances, as on Kafka after a load.
    pub fn loaded(id: &str, meta: &GroupMetadata, now: Instant) -> Self {
        let mut g = Self::new(id);
        g.generation = meta.generation;
        g.protocol_type = (!meta.protocol_type.is_empty()).then(|| meta.protocol_type.clone());
        g.persisted = true;
        if meta.state_timestamp >= 0 {
            g.state_since_ms = meta.state_timestamp;
        }
        let Some(protocol) = meta.protocol.clone().filter(|_| !meta.members.is_empty()) else {
            return g;
        };
        for m in &meta.members {
            let session_timeout =
                Duration::from_millis(u64::try_from(m.session_timeout_ms).unwrap_or(0));
            // A v0 value has no rebalance timeout: Kafka then uses the session timeout.
            let rebalance_ms = if m.rebalance_timeout_ms >= 0 {
                m.rebalance_timeout_ms
            } else {
                m.session_timeout_ms
            };
            if let Some(instance) = &m.instance_id {
                g.static_members.insert(instance.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout,
                    rebalance_timeout: Duration::from_millis(
                        u64::try_from(rebalance_ms).unwrap_or(0),
                    ),
                    protocols: vec![(protocol.clone(), m.subscription.clone())],
                    assignment: m.assignment.clone(),
                    last_heartbeat: now,
                    join_waiter: None,
                    sync_waiter: None,
                    is_new: false,
                },
            );
        }
        g.protocol = Some(protocol);
        g.leader = meta
            .leader
            .clone()
            .filter(|l| g.members.contains_key(l))
            .or_else(|| g.members.keys().next().cloned());
        g.state = GroupState::Stable;
        g
    }

    /// The group id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The current state.
    pub fn state(&self) -> GroupState {
        self.state
    }

    /// The current generation.
    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// The protocol type, or empty.
    pub fn protocol_type(&self) -> &str {
        self.protocol_type.as_deref().unwrap_or("")
    }

    /// Number of members (of either protocol).
    pub fn member_count(&self) -> usize {
        self.members.len() + self.consumer.as_ref().map_or(0, |c| c.members().count())
    }

    /// Whether KIP-394 ids are outstanding.
    pub fn has_pending_members(&self) -> bool {
        !self.pending_members.is_empty()
    }

    /// What to persist about the group: its generation, and its members
    /// with their assignments while it is Stable (Kafka writes the value when
    /// a generation's assignment is in and when the group turns Empty; Floe
    /// writes it at the same points).
    pub fn metadata(&self) -> GroupMetadata {
        if self.state == GroupState::Stable {
            self.metadata_with_members(|m| m.assignment.clone())
        } else {
            self.metadata_without_members()
        }
    }

    fn metadata_without_members(&self) -> GroupMetadata {
        GroupMetadata {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_timestamp: self.state_since_ms,
            members: Vec::new(),
        }
    }

    /// The metadata of the generation with every member, each assigned `assignment(member)`.
    fn metadata_with_members(&self, assignment: impl Fn(&Member) -> Bytes) -> GroupMetadata {
        let protocol = self.protocol.as_deref().unwrap_or("");
        let members = self
            .members
            .values()
            .map(|m| MemberMetadata {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: i32::try_from(m.rebalance_timeout.as_millis())
                    .unwrap_or(i32::MAX),
                session_timeout_ms: i32::try_from(m.session_timeout.as_millis())
                    .unwrap_or(i32::MAX),
                subscription: m.metadata(protocol).cloned().unwrap_or_default(),
                assignment: assignment(m),
            })
            .collect();
        GroupMetadata { members, ..self.metadata_without_members() }
    }

    /// The step waiting for its group record, with the record's value to
    /// write; the coordinator appends it and calls [`Group::write_done`].
    pub fn take_pending_write(&mut self) -> Option<(GroupMetadata, PendingWrite)> {
        let w = self.pending_write.take()?;
        let meta = match &w.step {
            PendingStep::Assignment(by_member) => self.metadata_with_members(|m| {
                by_member.get(&m.member_id).cloned().unwrap_or_default()
            }),
            PendingStep::StaticRejoin { .. } => self.metadata(),
        };
        Some((meta, w))
    }

    /// The group record of `w` was written (`Ok`) or not (the error its
    /// requests get). A step the group moved past meanwhile (a rebalance
    /// began, the generation changed) is left alone, as Kafka does.
    pub fn write_done(
        &mut self,
        w: PendingWrite,
        result: Result<(), ResponseError>,
        cfg: &GroupConfig,
        now: Instant,
    ) {
        match w.step {
            PendingStep::Assignment(by_member) => {
                if self.assignment_in_flight == Some(w.generation) {
                    self.assignment_in_flight = None;
                }
                if self.state != GroupState::CompletingRebalance || self.generation != w.generation
                {
                    return;
                }
                match result {
                    Ok(()) => self.complete_sync(by_member),
                    Err(e) => {
                        tracing::warn!(group = %self.id, generation = w.generation, error = ?e,
                            "rebalance: the assignment could not be written; rebalancing again");
                        for m in self.members.values_mut() {
                            m.assignment = Bytes::new();
                            if let Some(tx) = m.sync_waiter.take() {
                                let _ = tx.send(SyncResult::error(e));
                            }
                        }
                        self.maybe_prepare_rebalance(cfg, now);
                    }
                }
            }
            PendingStep::StaticRejoin { old_id, new_id, old_client, reply } => match result {
                Ok(()) => {
                    let mut r = self.current_join_result(&new_id);
                    r.skip_assignment = self.is_leader(&new_id);
                    let _ = reply.send(r);
                }
                Err(e) => {
                    tracing::warn!(group = %self.id, old = %old_id, new = %new_id, error = ?e,
                        "static member's new id could not be written; it keeps the old one");
                    self.revert_static_rejoin(&old_id, &new_id, old_client, now);
                    let _ = reply.send(JoinResult::error(e, ""));
                }
            },
        }
    }

    /// Gives a static member its old member id back (Kafka's revert after a failed write).
    fn revert_static_rejoin(
        &mut self,
        old_id: &str,
        new_id: &str,
        old_client: (String, String),
        now: Instant,
    ) {
        let Some(mut member) = self.members.remove(new_id) else { return };
        member.member_id = old_id.to_string();
        (member.client_id, member.client_host) = old_client;
        member.last_heartbeat = now;
        if let Some(instance) = &member.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(new_id) {
                self.static_members.insert(instance.clone(), old_id.to_string());
            }
        }
        if self.is_leader(new_id) {
            self.leader = Some(old_id.to_string());
        }
        if self.pending_sync.remove(new_id) {
            self.pending_sync.insert(old_id.to_string());
        }
        self.members.insert(old_id.to_string(), member);
    }

    fn transition(&mut self, to: GroupState) {
        tracing::debug!(group = %self.id, from = self.state.name(), to = to.name(), generation = self.generation, "group state");
        self.state = to;
        self.state_since_ms = wall_ms();
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default()
    }

    /// Protocols every member supports, in first-seen preference order.
    fn candidate_protocols(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in self.members.values() {
            for (name, _) in &m.protocols {
                if !out.contains(name) && self.members.values().all(|o| o.supports(name)) {
                    out.push(name.clone());
                }
            }
        }
        out
    }

    /// The protocol with the most votes among those every member supports
    /// (ties go to the earlier candidate).
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: Vec<usize> = vec![0; candidates.len()];
        for m in self.members.values() {
            if let Some(v) = m.vote(&candidates) {
                if let Some(i) = candidates.iter().position(|c| c == v) {
                    votes[i] += 1;
                }
            }
        }
        let best = votes.iter().copied().max()?;
        candidates.into_iter().zip(votes).find(|(_, v)| *v == best).map(|(c, _)| c)
    }

    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(n, _)| self.members.values().all(|m| m.supports(n)))
    }

    // ---- JoinGroup -----------------------------------------------------

    /// JoinGroup.
    pub fn join(
        &mut self,
        req: JoinRequest,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let fail = |e| Outcome::Now(JoinResult::error(e, &req.member_id));
        if self.consumer.as_ref().is_some_and(|c| !c.is_empty()) {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        // An empty consumer group becomes a classic one.
        self.consumer = None;
        if req.session_timeout_ms < cfg.min_session_timeout_ms
            || req.session_timeout_ms > cfg.max_session_timeout_ms
        {
            return fail(ResponseError::InvalidSessionTimeout);
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        if req.member_id.is_empty() {
            self.join_new_member(req, cfg, now)
        } else {
            self.join_known_member(req, cfg, now)
        }
    }

    fn join_new_member(
        &mut self,
        req: JoinRequest,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let prefix = req.instance_id.as_deref().unwrap_or(&req.client_id);
        let new_id = format!("{prefix}-{}", uuid::Uuid::new_v4());
        if let Some(instance) = &req.instance_id {
            if let Some(old_id) = self.static_members.get(instance).cloned() {
                return self.replace_static_member(&old_id, new_id, req, cfg, now);
            }
            return self.add_member_and_rebalance(new_id, req, cfg, now);
        }
        if req.require_known_member_id {
            let session = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
            self.pending_members.insert(new_id.clone(), now + session);
            return Outcome::Now(JoinResult::error(ResponseError::MemberIdRequired, &new_id));
        }
        self.add_member_and_rebalance(new_id, req, cfg, now)
    }

    fn join_known_member(
        &mut self,
        req: JoinRequest,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let id = req.member_id.clone();
        if self.pending_members.remove(&id).is_some() {
            return self.add_member_and_rebalance(id, req, cfg, now);
        }
        let Some(member) = self.members.get(&id) else {
            return Outcome::Now(JoinResult::error(ResponseError::UnknownMemberId, &id));
        };
        if let Some(instance) = &req.instance_id {
            if self.static_members.get(instance) != Some(&id) {
                return Outcome::Now(JoinResult::error(ResponseError::FencedInstanceId, &id));
            }
        }
        let unchanged = member.matches(&req.protocols);
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(req, cfg, now),
            GroupState::CompletingRebalance if unchanged => {
                Outcome::Now(self.current_join_result(&id))
            }
            GroupState::Stable if unchanged && !self.is_leader(&id) => {
                Outcome::Now(self.current_join_result(&id))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member_and_rebalance(req, cfg, now)
            }
            GroupState::Empty | GroupState::Dead => {
                Outcome::Now(JoinResult::error(ResponseError::UnknownMemberId, &id))
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        id: String,
        req: JoinRequest,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        let (tx, rx) = oneshot::channel();
        let member = Member {
            member_id: id.clone(),
            instance_id: req.instance_id.clone(),
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout: Duration::from_millis(req.session_timeout_ms.max(0) as u64),
            rebalance_timeout: Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64),
            protocols: req.protocols,
            assignment: Bytes::new(),
            last_heartbeat: now,
            join_waiter: Some(tx),
            sync_waiter: None,
            is_new: true,
        };
        if let Some(instance) = &req.instance_id {
            self.static_members.insert(instance.clone(), id.clone());
        }
        self.members.insert(id, member);
        if self.state == GroupState::PreparingRebalance {
            self.new_member_added = true;
        }
        self.maybe_prepare_rebalance(cfg, now);
        self.try_complete_join(now);
        Outcome::Wait(rx)
    }

    fn update_member_and_rebalance(
        &mut self,
        req: JoinRequest,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let (tx, rx) = oneshot::channel();
        if let Some(m) = self.members.get_mut(&req.member_id) {
            m.protocols = req.protocols;
            m.session_timeout = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
            m.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms.max(0) as u64);
            m.client_id = req.client_id;
            m.client_host = req.client_host;
            m.last_heartbeat = now;
            // A second JoinGroup replaces the first; the first's receiver sees a closed channel.
            m.join_waiter = Some(tx);
        }
        self.maybe_prepare_rebalance(cfg, now);
        self.try_complete_join(now);
        Outcome::Wait(rx)
    }

    /// A static member rejoined with an empty member id: it takes over its
    /// old member id's place, and the old id is fenced. With unchanged
    /// metadata in a Stable (or completing) group it keeps its assignment and
    /// no rebalance happens.
    fn replace_static_member(
        &mut self,
        old_id: &str,
        new_id: String,
        req: JoinRequest,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let Some(mut member) = self.members.remove(old_id) else {
            return self.add_member_and_rebalance(new_id, req, cfg, now);
        };
        if let Some(tx) = member.join_waiter.take() {
            let _ = tx.send(JoinResult::error(ResponseError::FencedInstanceId, old_id));
        }
        if let Some(tx) = member.sync_waiter.take() {
            let _ = tx.send(SyncResult::error(ResponseError::FencedInstanceId));
        }
        let unchanged = member.matches(&req.protocols);
        let old_client = (member.client_id.clone(), member.client_host.clone());
        member.member_id = new_id.clone();
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.last_heartbeat = now;
        if self.is_leader(old_id) {
            self.leader = Some(new_id.clone());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        if let Some(instance) = &req.instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        self.members.insert(new_id.clone(), member);
        tracing::info!(group = %self.id, old = old_id, new = %new_id, "static member rejoined");
        // Kafka's rule: only a Stable group keeps its generation. While the
        // group completes a rebalance the leader may be assigning to the old
        // id, so the new one would get nothing: rebalance instead.
        match self.state {
            GroupState::Stable if unchanged => {
                let (reply, rx) = oneshot::channel();
                let step = PendingStep::StaticRejoin {
                    old_id: old_id.to_string(),
                    new_id,
                    old_client,
                    reply,
                };
                self.pending_write = Some(PendingWrite { generation: self.generation, step });
                Outcome::Wait(rx)
            }
            _ => {
                let req = JoinRequest { member_id: new_id, ..req };
                self.update_member_and_rebalance(req, cfg, now)
            }
        }
    }

    fn current_join_result(&self, member_id: &str) -> JoinResult {
        let members = if self.is_leader(member_id) { self.joined_members() } else { Vec::new() };
        JoinResult {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members,
            skip_assignment: false,
        }
    }

    fn joined_members(&self) -> Vec<JoinedMember> {
        let protocol = self.protocol.as_deref().unwrap_or("");
        self.members
            .values()
            .map(|m| JoinedMember {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                metadata: m.metadata(protocol).cloned().unwrap_or_default(),
            })
            .collect()
    }

    fn maybe_prepare_rebalance(&mut self, cfg: &GroupConfig, now: Instant) {
        if matches!(
            self.state,
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(cfg, now);
        }
    }

    fn prepare_rebalance(&mut self, cfg: &GroupConfig, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            for m in self.members.values_mut() {
                m.assignment = Bytes::new();
                if let Some(tx) = m.sync_waiter.take() {
                    let _ = tx.send(SyncResult::error(ResponseError::RebalanceInProgress));
                }
            }
        }
        let rebalance_timeout = self.max_rebalance_timeout();
        if self.state == GroupState::Empty && !cfg.initial_rebalance_delay.is_zero() {
            // Kafka's InitialDelayedJoin: wait for more members of a new group.
            self.join_deadline = Some(now + cfg.initial_rebalance_delay);
            self.initial_delay_remaining =
                Some(rebalance_timeout.saturating_sub(cfg.initial_rebalance_delay));
            self.new_member_added = false;
        } else {
            self.join_deadline = Some(now + rebalance_timeout);
            self.initial_delay_remaining = None;
        }
        self.sync_deadline = None;
        self.pending_sync.clear();
        self.transition(GroupState::PreparingRebalance);
    }

    fn try_complete_join(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance || self.initial_delay_remaining.is_some() {
            return;
        }
        if self.members.values().all(Member::awaiting_join) && self.pending_members.is_empty() {
            self.complete_join(now);
        }
    }

    fn complete_join(&mut self, now: Instant) {
        self.join_deadline = None;
        self.initial_delay_remaining = None;
        let laggards: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join())
            .map(|m| m.member_id.clone())
            .collect();
        for id in laggards {
            tracing::info!(group = %self.id, member = %id, "member did not rejoin in time; removed");
            self.drop_member(&id);
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol = None;
            self.leader = None;
            self.transition(GroupState::Empty);
            self.metadata_dirty = true;
            return;
        }
        self.protocol = self.select_protocol();
        if !self.leader.as_ref().is_some_and(|l| self.members.contains_key(l)) {
            self.leader = self.members.keys().next().cloned();
        }
        self.transition(GroupState::CompletingRebalance);
        self.sync_deadline = Some(now + self.max_rebalance_timeout());
        self.pending_sync = self.members.keys().cloned().collect();
        tracing::info!(group = %self.id, generation = self.generation, protocol = ?self.protocol,
            members = self.members.len(), "rebalance: join complete");
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.current_join_result(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.is_new = false;
                m.last_heartbeat = now;
                if let Some(tx) = m.join_waiter.take() {
                    let _ = tx.send(result);
                }
            }
        }
    }

    /// Removes a member without rebalancing; answers its pending requests.
    fn drop_member(&mut self, id: &str) {
        let Some(mut m) = self.members.remove(id) else { return };
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(id) {
                self.static_members.remove(instance);
            }
        }
        if let Some(tx) = m.join_waiter.take() {
            let _ = tx.send(JoinResult::error(ResponseError::UnknownMemberId, id));
        }
        if let Some(tx) = m.sync_waiter.take() {
            let _ = tx.send(SyncResult::error(ResponseError::UnknownMemberId));
        }
        self.pending_sync.remove(id);
        if self.is_leader(id) {
            self.leader = None;
        }
    }

    /// Removes a member (leave or expiry) and rebalances the rest.
    fn remove_member(&mut self, id: &str, cfg: &GroupConfig, now: Instant) {
        self.drop_member(id);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(cfg, now);
                self.try_complete_join(now);
            }
            GroupState::PreparingRebalance => self.try_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    // ---- SyncGroup, Heartbeat, LeaveGroup --------------------------------

    /// SyncGroup. `assignments` are the leader's (ignored from others).
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
    ) -> Outcome<SyncResult> {
        let fail = |e| Outcome::Now(SyncResult::error(e));
        if let Err(e) = self.check_member(member_id, instance_id, generation) {
            return fail(e);
        }
        if protocol_type.is_some_and(|p| self.protocol_type.as_deref() != Some(p))
            || protocol_name.is_some_and(|p| self.protocol.as_deref() != Some(p))
        {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => fail(ResponseError::UnknownMemberId),
            GroupState::PreparingRebalance => fail(ResponseError::RebalanceInProgress),
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                self.pending_sync.remove(member_id);
                if let Some(m) = self.members.get_mut(member_id) {
                    m.last_heartbeat = now;
                    m.sync_waiter = Some(tx);
                }
                if self.is_leader(member_id) && self.assignment_in_flight != Some(self.generation) {
                    let by_member: HashMap<String, Bytes> = assignments.into_iter().collect();
                    self.sync_deadline = None;
                    self.pending_sync.clear();
                    self.assignment_in_flight = Some(self.generation);
                    self.pending_write = Some(PendingWrite {
                        generation: self.generation,
                        step: PendingStep::Assignment(by_member),
                    });
                }
                Outcome::Wait(rx)
            }
            GroupState::Stable => {
                let m = self.members.get_mut(member_id).expect("checked above");
                m.last_heartbeat = now;
                Outcome::Now(SyncResult {
                    error: None,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol.clone(),
                    assignment: m.assignment.clone(),
                })
            }
        }
    }

    /// The leader's assignment is written: the generation is Stable and every
    /// member waiting in SyncGroup gets its part.
    fn complete_sync(&mut self, mut by_member: HashMap<String, Bytes>) {
        for m in self.members.values_mut() {
            m.assignment = by_member.remove(&m.member_id).unwrap_or_default();
        }
        self.transition(GroupState::Stable);
        tracing::info!(group = %self.id, generation = self.generation, "rebalance: group stable");
        let (pt, pn) = (self.protocol_type.clone(), self.protocol.clone());
        for m in self.members.values_mut() {
            if let Some(tx) = m.sync_waiter.take() {
                let _ = tx.send(SyncResult {
                    error: None,
                    protocol_type: pt.clone(),
                    protocol_name: pn.clone(),
                    assignment: m.assignment.clone(),
                });
            }
        }
    }

    /// The member exists, is not fenced and is of the current generation.
    fn check_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if let Some(instance) = instance_id {
            if let Some(owner) = self.static_members.get(instance) {
                if owner != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        Ok(())
    }

    /// Heartbeat: `None` is success.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Option<ResponseError> {
        if matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return Some(ResponseError::UnknownMemberId);
        }
        if let Err(e) = self.check_member(member_id, instance_id, generation) {
            return Some(e);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_heartbeat = now;
        }
        (self.state == GroupState::PreparingRebalance).then_some(ResponseError::RebalanceInProgress)
    }

    /// LeaveGroup of one member: `None` is success.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Option<ResponseError> {
        let id = match instance_id {
            Some(instance) => match self.static_members.get(instance) {
                None => return Some(ResponseError::UnknownMemberId),
                Some(owner) if !member_id.is_empty() && owner != member_id => {
                    return Some(ResponseError::FencedInstanceId)
                }
                Some(owner) => owner.clone(),
            },
            None => member_id.to_string(),
        };
        if self.pending_members.remove(&id).is_some() {
            return None;
        }
        if !self.members.contains_key(&id) {
            return Some(ResponseError::UnknownMemberId);
        }
        tracing::info!(group = %self.id, member = %id, "member left");
        self.remove_member(&id, cfg, now);
        None
    }

    // ---- timers ----------------------------------------------------------

    /// Applies every deadline due at `now`: KIP-394 ids, sessions, the join
    /// deadline (with the initial delay) and the sync deadline.
    pub fn tick(&mut self, cfg: &GroupConfig, now: Instant) {
        self.pending_members.retain(|_, deadline| *deadline > now);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.has_expired(now))
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            tracing::info!(group = %self.id, member = %id, "member session expired");
            self.remove_member(&id, cfg, now);
        }
        match self.state {
            GroupState::PreparingRebalance if self.join_deadline.is_some_and(|d| now >= d) => {
                match self.initial_delay_remaining {
                    Some(remaining) if self.new_member_added && !remaining.is_zero() => {
                        let delay = cfg.initial_rebalance_delay.min(remaining);
                        self.join_deadline = Some(now + delay);
                        self.initial_delay_remaining = Some(remaining - delay);
                        self.new_member_added = false;
                    }
                    _ => self.complete_join(now),
                }
            }
            GroupState::PreparingRebalance => self.try_complete_join(now),
            GroupState::CompletingRebalance if self.sync_deadline.is_some_and(|d| now >= d) => {
                let laggards: Vec<String> = self.pending_sync.iter().cloned().collect();
                for id in laggards {
                    tracing::info!(group = %self.id, member = %id, "member did not sync in time; removed");
                    self.drop_member(&id);
                }
                self.prepare_rebalance(cfg, now);
                self.try_complete_join(now);
            }
            _ => {}
        }
    }

    // ---- offsets and administration ---------------------------------------

    /// May this member commit offsets now? (Kafka's `validateOffsetCommit`.)
    /// A transactional commit that names no member, generation or instance
    /// (TxnOffsetCommit before v3, as kafkajs sends it) is accepted whatever
    /// the group's members: those versions cannot name one.
    pub fn validate_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
    ) -> Result<(), ResponseError> {
        if transactional && member_id.is_empty() && generation < 0 && instance_id.is_none() {
            return Ok(());
        }
        if let Some(c) = &self.consumer {
            return c.validate_offset_request(member_id, generation);
        }
        if member_id.is_empty() && generation < 0 {
            // A consumer without group management, or an admin client: only for empty groups.
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(ResponseError::UnknownMemberId)
            };
        }
        self.check_member(member_id, instance_id, generation)?;
        if self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// Marks a deleted group Dead.
    pub fn mark_dead(&mut self) {
        self.transition(GroupState::Dead);
    }

    /// Answers every waiting JoinGroup and SyncGroup with `error` (shutdown).
    pub fn fail_waiters(&mut self, error: ResponseError) {
        for m in self.members.values_mut() {
            if let Some(tx) = m.join_waiter.take() {
                let _ = tx.send(JoinResult::error(error, &m.member_id));
            }
            if let Some(tx) = m.sync_waiter.take() {
                let _ = tx.send(SyncResult::error(error));
            }
        }
    }

    /// Topics the members subscribe to, from their `consumer` protocol
    /// metadata; `None` when unknown (then every topic counts as subscribed).
    pub fn subscribed_topics(&self) -> Option<HashSet<String>> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        if let Some(c) = &self.consumer {
            return Some(c.subscribed_topics().into_iter().collect());
        }
        if self.members.is_empty() {
            return Some(HashSet::new());
        }
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol.as_deref()?;
        let mut topics = HashSet::new();
        for m in self.members.values() {
            let mut bytes = m.metadata(protocol)?.clone();
            if bytes.len() < 2 {
                return None;
            }
            let version = i16::from_be_bytes([bytes[0], bytes[1]]);
            let _ = bytes.split_to(2);
            let sub = ConsumerProtocolSubscription::decode(&mut bytes, version.clamp(0, 3)).ok()?;
            topics.extend(sub.topics.iter().map(|t| t.to_string()));
        }
        Some(topics)
    }

    /// DescribeGroups.
    pub fn summary(&self) -> GroupSummary {
        if let Some(c) = &self.consumer {
            return c.summary();
        }
        let stable = self.state == GroupState::Stable;
        let protocol = self.protocol.clone().unwrap_or_default();
        let members = self
            .members
            .values()
            .map(|m| MemberSummary {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable {
                    m.metadata(&protocol).cloned().unwrap_or_default()
                } else {
                    Bytes::new()
                },
                assignment: if stable { m.assignment.clone() } else { Bytes::new() },
            })
            .collect();
        GroupSummary {
            state: self.state,
            state_name: self.state.name(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: if stable { protocol } else { String::new() },
            members,
        }
    }
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
