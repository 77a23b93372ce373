//! `GroupSummary` and `MemberSummary`: what DescribeGroups reports of a
//! group, classic or consumer.
//!
//! A leaf: both kinds of group ([`super::group`], [`super::consumer_group`])
//! describe themselves in these terms, so they live below both.

use bytes::Bytes;

use super::state::GroupState;

/// One member in a DescribeGroups answer.
#[derive(Debug, Clone)]
pub struct MemberSummary {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client address.
    pub client_host: String,
    /// Metadata of the selected protocol (Stable groups only).
    pub metadata: Bytes,
    /// Assignment (Stable groups only).
    pub assignment: Bytes,
}

/// What DescribeGroups reports.
#[derive(Debug, Clone)]
pub struct GroupSummary {
    /// State (of a consumer group: Empty, or Stable while it has members).
    pub state: GroupState,
    /// The state's name (a consumer group's own: Empty, Assigning, Reconciling, Stable).
    pub state_name: &'static str,
    /// Protocol type, or empty.
    pub protocol_type: String,
    /// Selected protocol (Stable groups only), or empty.
    pub protocol: String,
    /// Members.
    pub members: Vec<MemberSummary>,
}
