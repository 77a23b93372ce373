//! The network side of the broker: accept connections, read frames, hand
//! requests to the handlers, write responses (zero-copy where allowed).
//!
//! - [`endpoint`]: a bound listener as its connections see it.
//! - [`listener`]: the accept loop and shutdown coordination.
//! - [`connection`]: one client connection, one request at a time.
//! - [`limits`]: connection count limits, read deadlines, the open-files limit.
//! - [`stream`]: the connection's byte stream, plain TCP or TLS.
//! - [`record_io`]: the socket read in whole TLS records during a handshake.
//! - [`ktls_stream`]: a connection whose TLS records the kernel handles.
//! - [`transmit`]: writing a response, including `sendfile` of file regions.

pub mod connection;
pub mod endpoint;
pub mod ktls_stream;
pub mod limits;
pub mod listener;
pub mod record_io;
pub mod stream;
pub mod transmit;
