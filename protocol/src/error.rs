//! Errors of the protocol layer.

use thiserror::Error;

/// What went wrong reading or writing the wire format.
#[derive(Debug, Error)]
pub enum ProtocolError {
    /// A frame announced a size above `socket.request.max.bytes` (or a negative one).
    #[error("frame of {size} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge {
        /// The size the frame announced.
        size: i64,
        /// The configured limit.
        limit: usize,
    },
    /// The request header could not be decoded.
    #[error("malformed request header: {0}")]
    MalformedHeader(String),
    /// The request body could not be decoded at the header's version.
    #[error("malformed {api} v{version} request: {reason}")]
    MalformedRequest {
        /// The API's name.
        api: &'static str,
        /// The version the header named.
        version: i16,
        /// What the decoder said.
        reason: String,
    },
    /// A response could not be encoded (a bug: a field does not fit the version).
    #[error("cannot encode {api} v{version} response: {reason}")]
    Encode {
        /// The API's name.
        api: &'static str,
        /// The version.
        version: i16,
        /// What the encoder said.
        reason: String,
    },
}
