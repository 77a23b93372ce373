//! `ConsumerGroup`: one group of the consumer group protocol (KIP-848),
//! driven by ConsumerGroupHeartbeat — no join/sync barrier, no leader.
//!
//! Three epochs, as in Kafka:
//! - the *group epoch* bumps when membership, a subscription or the
//!   subscribed topics' partition counts change;
//! - the *assignment epoch* is the group epoch of the latest target
//!   assignment, which the server-side assignor computes at once;
//! - each member's *member epoch* reaches the assignment epoch when the
//!   member has reconciled: it gave up the partitions the target takes from
//!   it (the heartbeat response drops them; the member acknowledges by
//!   heartbeating without them in `topic_partitions`) and got the new ones
//!   that their previous owners released.
//!
//! A partition is given to a member only when no other member owns it (as
//! assigned or pending revocation), so it is never consumed by two members
//! at once, and nobody stops for anyone else's rebalance.
//!
//! Synchronous and clock-explicit, like [`super::group::Group`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tokio::time::Instant;

use super::assignor::{self, Assignment, AssignorMember, ASSIGNORS, DEFAULT_ASSIGNOR};
use super::state::GroupState;
use super::summary::{GroupSummary, MemberSummary};

/// Member epoch of a heartbeat that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// Member epoch of a static member's heartbeat that leaves temporarily.
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Broker settings of consumer groups.
#[derive(Debug, Clone)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `group.consumer.max.size`.
    pub max_size: usize,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        Self {
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval: Duration::from_millis(5000),
            max_size: i32::MAX as usize,
        }
    }
}

/// A ConsumerGroupHeartbeat, decoded (owned partitions by topic name).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    /// Member id: client-generated (v1) or empty on a first v0 join.
    pub member_id: String,
    /// 0 joins, -1 leaves, -2 leaves (static), else the member's epoch.
    pub member_epoch: i32,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// Rack.
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    /// `None`: unchanged (the coordinator has already resolved it into the names).
    pub subscribed_topic_regex: Option<String>,
    /// `None`: unchanged.
    pub server_assignor: Option<String>,
    /// The partitions the member owns; `None`: unchanged.
    pub owned: Option<Assignment>,
    /// From the request header.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
}

/// A heartbeat's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResult {
    /// The member id (generated for a v0 first join).
    pub member_id: String,
    /// The member's epoch now.
    pub member_epoch: i32,
    /// The partitions the member should own now, when they changed (or the request was a full one).
    pub assignment: Option<Assignment>,
}

/// Where a member is in its reconciliation (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Owns its target assignment at the assignment epoch (or waits for nothing).
    Stable,
    /// Must give up `revoking` before it moves on.
    UnrevokedPartitions,
    /// At the new epoch, waiting for partitions others still own.
    UnreleasedPartitions,
}

/// One member of a consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// Rack.
    pub rack_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client address.
    pub client_host: String,
    /// Current epoch (-2: a static member that left temporarily).
    pub member_epoch: i32,
    /// The epoch before the last bump (a heartbeat whose response was lost may carry it).
    pub previous_member_epoch: i32,
    /// Reconciliation state.
    pub state: MemberState,
    /// Subscribed topic names.
    pub subscribed_topic_names: Vec<String>,
    /// Subscribed regex, as given.
    pub subscribed_topic_regex: Option<String>,
    /// The assignor the member asked for.
    pub server_assignor: Option<String>,
    /// How long the member may take to revoke.
    pub rebalance_timeout: Duration,
    /// The partitions it owns.
    pub assigned: Assignment,
    /// The partitions it must give up.
    pub revoking: Assignment,
    last_heartbeat: Instant,
    revocation_deadline: Option<Instant>,
}

/// A consumer group. Not thread-safe by itself: it lives inside a
/// [`super::group::Group`], behind that group's mutex.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    /// Target assignment of the assignment epoch, by member.
    target: BTreeMap<String, Assignment>,
    /// Partition counts of the subscribed topics when the group epoch last moved.
    subscribed_partitions: BTreeMap<String, i32>,
    /// The assignor of the latest target.
    assignor: String,
}

fn overlaps(a: &Assignment, b: &Assignment) -> bool {
    a.iter().any(|(t, ps)| b.get(t).is_some_and(|qs| !ps.is_disjoint(qs)))
}

fn intersection(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let both: BTreeSet<i32> =
                b.get(t).map(|qs| ps.intersection(qs).copied().collect()).unwrap_or_default();
            (!both.is_empty()).then(|| (t.clone(), both))
        })
        .collect()
}

fn difference(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let left: BTreeSet<i32> = match b.get(t) {
                Some(qs) => ps.difference(qs).copied().collect(),
                None => ps.clone(),
            };
            (!left.is_empty()).then(|| (t.clone(), left))
        })
        .collect()
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    difference(a, b).is_empty()
}

impl ConsumerGroup {
    /// The group epoch.
    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    /// The epoch of the target assignment.
    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    /// The assignor of the latest target assignment.
    pub fn assignor(&self) -> &str {
        if self.assignor.is_empty() {
            DEFAULT_ASSIGNOR
        } else {
            &self.assignor
        }
    }

    /// No members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members by id.
    pub fn members(&self) -> impl Iterator<Item = &ConsumerMember> {
        self.members.values()
    }

    /// A member's target assignment.
    pub fn target_of(&self, member_id: &str) -> Assignment {
        self.target.get(member_id).cloned().unwrap_or_default()
    }

    /// Kafka's consumer group state: Empty, Assigning, Reconciling or Stable.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.member_epoch != self.assignment_epoch)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Every subscribed topic name.
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members.values().flat_map(|m| m.subscribed_topic_names.iter().cloned()).collect()
    }

    /// ConsumerGroupHeartbeat. `topics` are the partition counts of every
    /// topic that exists. Errors are Kafka's (see the handler).
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        topics: &BTreeMap<String, i32>,
        cfg: &ConsumerGroupConfig,
        now: Instant,
    ) -> Result<HeartbeatResult, ResponseError> {
        if let Some(a) = &hb.server_assignor {
            if !ASSIGNORS.contains(&a.as_str()) {
                return Err(ResponseError::UnsupportedAssignor);
            }
        }
        let id = match hb.member_epoch {
            LEAVE_EPOCH | STATIC_LEAVE_EPOCH => return self.leave(&hb, topics, now),
            0 => self.join(&hb, cfg, now)?,
            epoch => {
                self.check_member(
                    &hb.member_id,
                    hb.instance_id.as_deref(),
                    epoch,
                    hb.owned.as_ref(),
                )?;
                (hb.member_id.clone(), false)
            }
        };
        let (id, mut changed) = id;
        let full = hb.member_epoch == 0
            || (hb.rebalance_timeout_ms != -1
                && hb.subscribed_topic_names.is_some()
                && hb.owned.is_some());
        let m = self.members.get_mut(&id).ok_or(ResponseError::UnknownMemberId)?;
        m.last_heartbeat = now;
        m.client_id = hb.client_id;
        m.client_host = hb.client_host;
        if hb.rack_id.is_some() {
            m.rack_id = hb.rack_id;
        }
        if hb.rebalance_timeout_ms >= 0 {
            m.rebalance_timeout = Duration::from_millis(hb.rebalance_timeout_ms as u64);
        }
        if let Some(mut names) = hb.subscribed_topic_names {
            names.sort();
            names.dedup();
            changed |= names != m.subscribed_topic_names;
            m.subscribed_topic_names = names;
        }
        if hb.subscribed_topic_regex.is_some() {
            m.subscribed_topic_regex = hb.subscribed_topic_regex;
        }
        if let Some(a) = hb.server_assignor {
            changed |= m.server_assignor.as_deref() != Some(&a);
            m.server_assignor = Some(a);
        }
        self.refresh(topics, changed);
        let before = self.members[&id].assigned.clone();
        let epoch_before = self.members[&id].member_epoch;
        self.reconcile(&id, hb.owned.as_ref(), now);
        let m = &self.members[&id];
        let send = full || m.assigned != before || m.member_epoch != epoch_before;
        Ok(HeartbeatResult {
            member_id: id,
            member_epoch: m.member_epoch,
            assignment: send.then(|| m.assigned.clone()),
        })
    }

    /// Adds (or restarts) the member; returns its id and whether it is new.
    fn join(
        &mut self,
        hb: &Heartbeat,
        cfg: &ConsumerGroupConfig,
        now: Instant,
    ) -> Result<(String, bool), ResponseError> {
        if hb.subscribed_topic_names.is_none()
            || hb.rebalance_timeout_ms < 0
            || hb.owned.as_ref().is_some_and(|o| !o.is_empty())
        {
            return Err(ResponseError::InvalidRequest);
        }
        let id = if hb.member_id.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            hb.member_id.clone()
        };
        if let Some(m) = self.members.get_mut(&id) {
            // A member rejoining with epoch 0 lost its assignment: start it over.
            m.member_epoch = 0;
            m.previous_member_epoch = 0;
            m.assigned.clear();
            m.revoking.clear();
            m.state = MemberState::Stable;
            m.revocation_deadline = None;
            return Ok((id, false));
        }
        let fresh = ConsumerMember {
            member_id: id.clone(),
            instance_id: hb.instance_id.clone(),
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            subscribed_topic_names: Vec::new(),
            subscribed_topic_regex: None,
            server_assignor: None,
            rebalance_timeout: Duration::from_millis(hb.rebalance_timeout_ms as u64),
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            last_heartbeat: now,
            revocation_deadline: None,
        };
        if let Some(instance) = &hb.instance_id {
            if let Some(old) = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance))
                .map(|m| m.member_id.clone())
            {
                if self.members[&old].member_epoch != STATIC_LEAVE_EPOCH {
                    return Err(ResponseError::UnreleasedInstanceId);
                }
                // The static member is back under a new member id: it takes over its place, epoch and partitions.
                let mut m = self.members.remove(&old).expect("found above");
                m.member_id = id.clone();
                m.member_epoch = m.previous_member_epoch;
                m.last_heartbeat = now;
                if let Some(t) = self.target.remove(&old) {
                    self.target.insert(id.clone(), t);
                }
                self.members.insert(id.clone(), m);
                return Ok((id, false));
            }
        }
        if self.members.len() >= cfg.max_size {
            return Err(ResponseError::GroupMaxSizeReached);
        }
        self.members.insert(id.clone(), fresh);
        Ok((id, true))
    }

    /// Kafka's `throwIfMemberEpochIsInvalid`, plus the member and instance checks.
    fn check_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        epoch: i32,
        owned: Option<&Assignment>,
    ) -> Result<(), ResponseError> {
        let m = self.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?;
        if instance_id.is_some() && m.instance_id.as_deref() != instance_id {
            return Err(ResponseError::FencedInstanceId);
        }
        if epoch > m.member_epoch {
            return Err(ResponseError::FencedMemberEpoch);
        }
        if epoch < m.member_epoch {
            // The response that bumped the epoch may have been lost: accept the
            // previous epoch if the member owns no more than it has now.
            let lost_response = epoch == m.previous_member_epoch
                && owned.is_some_and(|o| is_subset(o, &m.assigned));
            if !lost_response {
                return Err(ResponseError::FencedMemberEpoch);
            }
        }
        Ok(())
    }

    fn leave(
        &mut self,
        hb: &Heartbeat,
        topics: &BTreeMap<String, i32>,
        now: Instant,
    ) -> Result<HeartbeatResult, ResponseError> {
        let id = match &hb.instance_id {
            Some(instance) => self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance))
                .map(|m| m.member_id.clone())
                .ok_or(ResponseError::UnknownMemberId)?,
            None => hb.member_id.clone(),
        };
        if !hb.member_id.is_empty() && id != hb.member_id {
            return Err(ResponseError::FencedInstanceId);
        }
        let Some(m) = self.members.get_mut(&id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        if hb.member_epoch == STATIC_LEAVE_EPOCH && m.instance_id.is_some() {
            // Kept (with its partitions) until its session expires or it comes back.
            tracing::info!(member = %id, "static member left temporarily");
            if m.member_epoch != STATIC_LEAVE_EPOCH {
                m.previous_member_epoch = m.member_epoch;
            }
            m.member_epoch = STATIC_LEAVE_EPOCH;
            m.last_heartbeat = now;
        } else {
            tracing::info!(member = %id, "member left");
            self.remove_member(&id);
            self.refresh(topics, true);
        }
        Ok(HeartbeatResult { member_id: id, member_epoch: hb.member_epoch, assignment: None })
    }

    fn remove_member(&mut self, id: &str) {
        if self.members.remove(id).is_some() {
            self.target.remove(id);
        }
    }

    /// Bumps the group epoch (once) if `changed` (membership or a
    /// subscription) or the subscribed topics changed shape, and computes a
    /// new target assignment if the group epoch moved.
    fn refresh(&mut self, topics: &BTreeMap<String, i32>, changed: bool) {
        let subscribed: BTreeMap<String, i32> = self
            .subscribed_topics()
            .into_iter()
            .filter_map(|t| topics.get(&t).map(|&n| (t, n)))
            .collect();
        if changed || subscribed != self.subscribed_partitions {
            self.subscribed_partitions = subscribed;
            self.group_epoch += 1;
        }
        if self.group_epoch <= self.assignment_epoch {
            return;
        }
        let assignor = self.select_assignor();
        let members: Vec<AssignorMember<'_>> = self
            .members
            .values()
            .map(|m| AssignorMember {
                id: &m.member_id,
                topics: m
                    .subscribed_topic_names
                    .iter()
                    .filter(|t| self.subscribed_partitions.contains_key(*t))
                    .cloned()
                    .collect(),
            })
            .collect();
        self.target =
            assignor::assign(&assignor, &members, &self.subscribed_partitions, &self.target);
        self.assignment_epoch = self.group_epoch;
        self.assignor = assignor;
        tracing::debug!(group_epoch = self.group_epoch, assignor = %self.assignor, "new target assignment");
    }

    /// The assignor most members ask for (ties: the first in [`ASSIGNORS`]).
    fn select_assignor(&self) -> String {
        let votes = |a: &str| {
            self.members.values().filter(|m| m.server_assignor.as_deref() == Some(a)).count()
        };
        let best = ASSIGNORS
            .iter()
            .copied()
            .max_by_key(|a| (votes(a), std::cmp::Reverse(ASSIGNORS.iter().position(|x| x == a))));
        match best {
            Some(a) if votes(a) > 0 => a.to_string(),
            _ => DEFAULT_ASSIGNOR.to_string(),
        }
    }

    /// Partitions owned (assigned or pending revocation) by members other than `id`.
    fn owned_by_others(&self, id: &str) -> Assignment {
        let mut out = Assignment::new();
        for m in self.members.values().filter(|m| m.member_id != id) {
            for (t, ps) in m.assigned.iter().chain(m.revoking.iter()) {
                out.entry(t.clone()).or_default().extend(ps);
            }
        }
        out
    }

    /// Kafka's `CurrentAssignmentBuilder`: moves the member towards its target.
    fn reconcile(&mut self, id: &str, owned: Option<&Assignment>, now: Instant) {
        let Some(m) = self.members.get(id) else { return };
        match m.state {
            MemberState::UnrevokedPartitions => {
                // Progress only once the member says it no longer owns what it must give up.
                if owned.is_none_or(|o| overlaps(o, &m.revoking)) {
                    return;
                }
            }
            MemberState::Stable if m.member_epoch == self.assignment_epoch => return,
            MemberState::Stable | MemberState::UnreleasedPartitions => {}
        }
        let target = self.target_of(id);
        let others = self.owned_by_others(id);
        let epoch = self.assignment_epoch;
        let m = self.members.get_mut(id).expect("checked above");
        m.revoking.clear();
        m.revocation_deadline = None;
        let keep = intersection(&m.assigned, &target);
        let revoke = difference(&m.assigned, &target);
        if !revoke.is_empty() {
            m.assigned = keep;
            m.revoking = revoke;
            m.state = MemberState::UnrevokedPartitions;
            m.revocation_deadline = Some(now + m.rebalance_timeout);
            return;
        }
        let pending = difference(&target, &m.assigned);
        let free = difference(&pending, &others);
        let unreleased = free != pending;
        for (t, ps) in free {
            m.assigned.entry(t).or_default().extend(ps);
        }
        if m.member_epoch != epoch {
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = epoch;
        }
        m.state = if unreleased { MemberState::UnreleasedPartitions } else { MemberState::Stable };
    }

    /// Removes members whose session expired or who did not revoke in time.
    /// Returns whether anything changed.
    pub fn tick(
        &mut self,
        topics: &BTreeMap<String, i32>,
        cfg: &ConsumerGroupConfig,
        now: Instant,
    ) -> bool {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                now >= m.last_heartbeat + cfg.session_timeout
                    || m.revocation_deadline.is_some_and(|d| now >= d)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &gone {
            tracing::info!(member = %id, "consumer group member fenced (session or rebalance timeout)");
            self.remove_member(id);
        }
        if !gone.is_empty() {
            self.refresh(topics, true);
        }
        !gone.is_empty()
    }

    /// Kafka's `validateOffsetCommit` for OffsetCommit (and OffsetFetch v9+):
    /// a member of the group at its current epoch, or anyone (epoch < 0) when the group is empty.
    pub fn validate_offset_request(
        &self,
        member_id: &str,
        epoch: i32,
    ) -> Result<(), ResponseError> {
        if epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let m = self.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?;
        if epoch != m.member_epoch {
            return Err(ResponseError::StaleMemberEpoch);
        }
        Ok(())
    }
}

impl ConsumerGroup {
    /// DescribeGroups of a consumer group: protocol type "consumer", each
    /// member's subscription and assignment in the classic consumer
    /// protocol's layouts (v0), so classic tools can read them.
    pub fn summary(&self) -> GroupSummary {
        use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
        use kafka_protocol::messages::{
            ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
        };
        use kafka_protocol::protocol::{Encodable, StrBytes};
        fn encode(m: &impl Encodable) -> bytes::Bytes {
            let mut buf = bytes::BytesMut::new();
            buf.extend_from_slice(&0i16.to_be_bytes());
            match m.encode(&mut buf, 0) {
                Ok(()) => buf.freeze(),
                Err(_) => bytes::Bytes::new(),
            }
        }
        let members = self
            .members
            .values()
            .map(|m| {
                let sub = ConsumerProtocolSubscription::default().with_topics(
                    m.subscribed_topic_names
                        .iter()
                        .map(|t| StrBytes::from_string(t.clone()))
                        .collect(),
                );
                let assigned = m
                    .assigned
                    .iter()
                    .map(|(t, ps)| {
                        TopicPartition::default()
                            .with_topic(TopicName(StrBytes::from_string(t.clone())))
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect();
                MemberSummary {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: encode(&sub),
                    assignment: encode(
                        &ConsumerProtocolAssignment::default().with_assigned_partitions(assigned),
                    ),
                }
            })
            .collect();
        GroupSummary {
            state: if self.members.is_empty() { GroupState::Empty } else { GroupState::Stable },
            state_name: self.state_name(),
            protocol_type: "consumer".into(),
            protocol: self.assignor().to_string(),
            members,
        }
    }
}

#[cfg(test)]
#[path = "consumer_group_tests.rs"]
mod tests;
