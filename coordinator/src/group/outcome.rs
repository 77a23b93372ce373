//! The answers to JoinGroup and SyncGroup, and [`Outcome`]: an answer now,
//! or one the rebalance sends later.
//!
//! A leaf: the state machine ([`super::group`]) builds these answers and each
//! member keeps the sender of the one it waits for, so they live below both.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// Its metadata for the selected protocol.
    pub metadata: Bytes,
}

/// A JoinGroup answer.
#[derive(Debug, Clone)]
pub struct JoinResult {
    /// `None` for success.
    pub error: Option<ResponseError>,
    /// The generation joined.
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The selected protocol.
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: String,
    /// The member's id (generated on a first join).
    pub member_id: String,
    /// Every member with its metadata, for the leader only.
    pub members: Vec<JoinedMember>,
    /// The leader already has an assignment (a static leader rejoined, v9+).
    pub skip_assignment: bool,
}

impl JoinResult {
    /// An error answer.
    pub fn error(error: ResponseError, member_id: &str) -> Self {
        Self {
            error: Some(error),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup answer.
#[derive(Debug, Clone)]
pub struct SyncResult {
    /// `None` for success.
    pub error: Option<ResponseError>,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The selected protocol.
    pub protocol_name: Option<String>,
    /// This member's assignment, byte for byte as the leader sent it.
    pub assignment: Bytes,
}

impl SyncResult {
    /// An error answer.
    pub fn error(error: ResponseError) -> Self {
        Self {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer now, or one to await.
#[derive(Debug)]
pub enum Outcome<T> {
    /// Ready.
    Now(T),
    /// Sent when the rebalance phase completes.
    Wait(oneshot::Receiver<T>),
}
