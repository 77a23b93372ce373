//! The network side of the broker: accept connections, read frames, hand
//! requests to the handlers, write responses (zero-copy where allowed).
//!
//! - [`listener`]: the accept loop and shutdown coordination.
//! - [`connection`]: one client connection, one request at a time.
//! - [`limits`]: connection count limits, read deadlines, the open-files limit.
//! - [`transmit`]: writing a response, including `sendfile` of file regions.

pub mod connection;
pub mod limits;
pub mod listener;
pub mod transmit;
