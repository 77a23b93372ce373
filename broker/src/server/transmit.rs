//! Writing responses to a socket, with `sendfile(2)` for record bytes.
//!
//! A Fetch response is a list of parts: encoded bytes and regions of segment
//! files. On the zero-copy path file regions go from the page cache to the
//! socket with `sendfile`, on plaintext sockets and on TLS sockets whose
//! records the kernel encrypts (kTLS); on the copying paths
//! (`fetch.zero.copy=false`, and TLS sessions kept in user space) they are
//! read into memory and written. Every path produces the same bytes on the
//! wire (the same plaintext, on TLS).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use bytes::Bytes;
use floe_protocol::fetch::{EncodedResponse, ResponsePart};
use floe_protocol::FileRegion;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use crate::server::stream::ClientStream;

/// How the record bytes of a response left the broker (the `path` label of
/// `floe_fetch_bytes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchPath {
    /// `sendfile` on a plaintext socket.
    SendfilePlaintext,
    /// `sendfile` on a socket the kernel encrypts (kTLS).
    SendfileKtls,
    /// Read into memory, encrypted by rustls, written.
    CopyTls,
    /// Read into memory and written to a plaintext socket (`fetch.zero.copy=false`).
    CopyPlaintext,
}

impl FetchPath {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            FetchPath::SendfilePlaintext => "sendfile-plaintext",
            FetchPath::SendfileKtls => "sendfile-ktls",
            FetchPath::CopyTls => "copy-tls",
            FetchPath::CopyPlaintext => "copy-plaintext",
        }
    }
}

/// The record bytes of one response and the path they took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmitted {
    /// The path.
    pub path: FetchPath,
    /// Bytes of segment files sent.
    pub file_bytes: u64,
}

/// Chunk size of file reads on the copying path: whole-response buffers
/// would cost up to `fetch.max.bytes` of memory per connection.
const COPY_CHUNK: usize = 256 * 1024;

/// Writes one already-framed response (and flushes TLS buffers).
///
/// # Errors
/// Any socket error; the connection is then closed.
pub async fn write_bytes(stream: &mut ClientStream, frame: &Bytes) -> io::Result<()> {
    stream.write_all(frame).await?;
    stream.flush().await
}

/// Writes a response made of parts, in order.
///
/// On a plaintext socket with `zero_copy`, file parts are sent with
/// `sendfile`; otherwise they are read with `pread` in chunks and written
/// like any other bytes.
///
/// # Errors
/// Any socket or file error; the connection is then closed (a response cut
/// midway cannot be resumed).
pub async fn write_parts(
    stream: &mut ClientStream,
    response: &EncodedResponse,
    zero_copy: bool,
) -> io::Result<Transmitted> {
    let file_bytes = file_bytes(response);
    let path = match stream {
        ClientStream::Plain(socket) if zero_copy => {
            write_with_sendfile(socket, response).await?;
            return Ok(Transmitted { path: FetchPath::SendfilePlaintext, file_bytes });
        }
        ClientStream::Ktls(ktls) if zero_copy => {
            let writes = write_with_sendfile(ktls.socket(), response).await?;
            ktls.note_sent(response_len(response), writes);
            return Ok(Transmitted { path: FetchPath::SendfileKtls, file_bytes });
        }
        ClientStream::Plain(_) => FetchPath::CopyPlaintext,
        ClientStream::Tls(_) | ClientStream::Ktls(_) => FetchPath::CopyTls,
    };
    let mut chunk = Vec::new();
    for part in &response.parts {
        match part {
            ResponsePart::Bytes(b) => stream.write_all(b).await?,
            ResponsePart::File(region) => copy_region(stream, region, &mut chunk).await?,
        }
    }
    stream.flush().await?;
    Ok(Transmitted { path, file_bytes })
}

/// Writes the parts, file regions with `sendfile`; returns the number of
/// write and `sendfile` calls that sent bytes (kTLS counts records by them).
async fn write_with_sendfile(socket: &TcpStream, response: &EncodedResponse) -> io::Result<u64> {
    let mut calls = 0;
    for part in &response.parts {
        calls += match part {
            ResponsePart::Bytes(b) => write_all(socket, b).await?,
            ResponsePart::File(region) => sendfile_all(socket, region).await?,
        };
    }
    Ok(calls)
}

/// `write_all` on a shared socket reference, counting the calls.
async fn write_all(socket: &TcpStream, mut bytes: &[u8]) -> io::Result<u64> {
    let mut calls = 0;
    while !bytes.is_empty() {
        socket.writable().await?;
        match socket.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = &bytes[n..];
                calls += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(calls)
}

/// Bytes of a response, encoded parts and file regions together.
fn response_len(response: &EncodedResponse) -> u64 {
    response
        .parts
        .iter()
        .map(|p| match p {
            ResponsePart::Bytes(b) => b.len() as u64,
            ResponsePart::File(region) => u64::from(region.len),
        })
        .sum()
}

/// Reads a file region with `pread`, chunk by chunk, and writes it.
async fn copy_region(
    stream: &mut ClientStream,
    region: &FileRegion,
    chunk: &mut Vec<u8>,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut position = region.position;
    let end = region.position + u64::from(region.len);
    while position < end {
        let n = ((end - position) as usize).min(COPY_CHUNK);
        chunk.resize(n, 0);
        region.file.read_exact_at(chunk, position)?;
        stream.write_all(chunk).await?;
        position += n as u64;
    }
    Ok(())
}

fn file_bytes(response: &EncodedResponse) -> u64 {
    response
        .parts
        .iter()
        .map(|p| match p {
            ResponsePart::File(r) => u64::from(r.len),
            ResponsePart::Bytes(_) => 0,
        })
        .sum()
}

/// Sends a whole file region on a non-blocking socket.
///
/// `sendfile` on a non-blocking socket routinely sends less than asked or
/// returns `EAGAIN`; the loop waits for writability and continues. It never
/// waits on the socket while holding a worker, but it can wait on the disk
/// when the pages are not cached (a cold catch-up read).
async fn sendfile_all(stream: &TcpStream, region: &FileRegion) -> io::Result<u64> {
    let mut calls = 0;
    let mut offset = region.position as i64;
    let end = region.position as i64 + i64::from(region.len);
    while offset < end {
        stream.writable().await?;
        let remaining = (end - offset) as usize;
        let result = stream.try_io(Interest::WRITABLE, || {
            let mut off: nix::libc::off_t = offset;
            nix::sys::sendfile::sendfile(
                stream.as_fd(),
                region.file.as_fd(),
                Some(&mut off),
                remaining,
            )
            .map_err(io::Error::from)
        });
        match result {
            Ok(0) => {
                // The file is shorter than the region: it was truncated under us.
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "segment file (fd {}) ended before the fetch region",
                        region.file.as_raw_fd()
                    ),
                ));
            }
            Ok(n) => {
                offset += n as i64;
                calls += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(calls)
}
