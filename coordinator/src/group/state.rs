//! `GroupState`: the states of a classic group, by Kafka's names, and the
//! names DescribeGroups and ListGroups report for them.
//!
//! A leaf: the state machine ([`super::group`]), the consumer group's summary
//! and the coordinator all name states, so they live below all three.

/// Kafka's classic group states, by Kafka's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members; may still hold committed offsets.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Deleted.
    Dead,
}

impl GroupState {
    /// The name DescribeGroups and ListGroups report.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}
