//! What a handler answers and how a response becomes it: [`Reply`] (a frame,
//! a Fetch's parts, nothing, or a Produce waiting for its followers),
//! [`Reject`] (the request cannot be answered: the connection closes), and the
//! decode/encode steps every API shares.

use bytes::Bytes;
use floe_protocol::fetch::EncodedResponse;
use floe_protocol::response::encode_response;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use super::produce;
use crate::broker::Broker;

/// What to write back for one request.
#[derive(Debug)]
pub enum Reply {
    /// Nothing: a Produce with `acks=0`.
    None,
    /// A complete response frame.
    Frame(Bytes),
    /// A Fetch response whose record bytes are still in segment files.
    Parts(EncodedResponse),
    /// A Produce appended and waiting for its followers: the connection may read and
    /// append its next Produce meanwhile, and answers both in order.
    AwaitingReplication(PendingProduce),
}

/// The second stage of an `acks=all` Produce in a cluster (see [`Reply::AwaitingReplication`]).
#[derive(Debug)]
pub struct PendingProduce {
    pub(super) appended: produce::Appended,
    pub(super) correlation_id: i32,
    pub(super) version: i16,
}

impl PendingProduce {
    /// Waits for the followers and encodes the response.
    ///
    /// # Errors
    /// [`Reject`] if the response cannot be encoded.
    pub async fn finish(self, broker: &Broker) -> Result<Reply, Reject> {
        let response = self.appended.finish(broker).await;
        frame(ApiKey::Produce, self.correlation_id, self.version, &response)
    }
}

/// A request that cannot be answered: the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum Reject {
    /// The API is not served, or not at this version (ApiVersions excepted).
    #[error("{api:?} v{version} is not served (correlation id {correlation_id})")]
    Unsupported {
        /// The API.
        api: ApiKey,
        /// The version asked for.
        version: i16,
        /// The request's correlation id.
        correlation_id: i32,
    },
    /// The body does not decode at its version.
    #[error("undecodable {api:?} v{version} request: {reason}")]
    Undecodable {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
        /// The decoder's complaint.
        reason: String,
    },
    /// The response could not be encoded: a bug, logged loudly.
    #[error("cannot encode the {api:?} v{version} response: {reason}")]
    Encode {
        /// The API.
        api: ApiKey,
        /// The version.
        version: i16,
        /// The encoder's complaint.
        reason: String,
    },
}

impl Reject {
    /// A short label for the `floe_connections_closed_on_error_total` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Reject::Unsupported { .. } => "unsupported_version",
            Reject::Undecodable { .. } => "undecodable_request",
            Reject::Encode { .. } => "encode_failure",
        }
    }
}

pub(super) fn clamp_ms(ms: u64) -> i32 {
    i32::try_from(ms).unwrap_or(i32::MAX)
}

pub(super) fn decode<T: Decodable>(
    api: ApiKey,
    body: &mut Bytes,
    version: i16,
) -> Result<T, Reject> {
    T::decode(body, version).map_err(|e| Reject::Undecodable {
        api,
        version,
        reason: e.to_string(),
    })
}

pub(super) fn frame<R: Encodable + HeaderVersion>(
    api: ApiKey,
    correlation_id: i32,
    version: i16,
    response: &R,
) -> Result<Reply, Reject> {
    encode_response(correlation_id, version, api, response)
        .map(Reply::Frame)
        .map_err(|e| encode_failure(api, version, e.to_string()))
}

pub(super) fn encode_failure(api: ApiKey, version: i16, reason: String) -> Reject {
    tracing::error!(?api, version, %reason, "response encoding failed (a bug)");
    Reject::Encode { api, version, reason }
}
