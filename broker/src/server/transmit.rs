//! Writing responses to a socket, with `sendfile(2)` for record bytes.
//!
//! A Fetch response is a list of parts: encoded bytes and regions of segment
//! files. On the zero-copy path file regions go from the page cache to the
//! socket with `sendfile`; on the copying path (`fetch.zero.copy=false`, and
//! the future TLS listener) they are read into memory and written. Both
//! produce the same bytes on the wire.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use bytes::Bytes;
use floe_protocol::fetch::{EncodedResponse, ResponsePart};
use floe_protocol::FileRegion;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// How many record bytes each path carried for one response.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Transmitted {
    /// Bytes sent with `sendfile`.
    pub sendfile_bytes: u64,
    /// File bytes copied through user space.
    pub copied_bytes: u64,
}

/// Writes one already-framed response.
///
/// # Errors
/// Any socket error; the connection is then closed.
pub async fn write_bytes(stream: &mut TcpStream, frame: &Bytes) -> io::Result<()> {
    stream.write_all(frame).await
}

/// Writes a response made of parts, in order.
///
/// With `zero_copy`, file parts are sent with `sendfile`; otherwise they are
/// read with `pread` and written like any other bytes.
///
/// # Errors
/// Any socket or file error; the connection is then closed (a response cut
/// midway cannot be resumed).
pub async fn write_parts(stream: &mut TcpStream, response: &EncodedResponse, zero_copy: bool) -> io::Result<Transmitted> {
    let mut sent = Transmitted::default();
    if !zero_copy {
        let contiguous = response.to_contiguous()?;
        stream.write_all(&contiguous).await?;
        sent.copied_bytes = file_bytes(response);
        return Ok(sent);
    }
    for part in &response.parts {
        match part {
            ResponsePart::Bytes(b) => stream.write_all(b).await?,
            ResponsePart::File(region) => {
                sendfile_all(stream, region).await?;
                sent.sendfile_bytes += u64::from(region.len);
            }
        }
    }
    Ok(sent)
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
async fn sendfile_all(stream: &TcpStream, region: &FileRegion) -> io::Result<()> {
    let mut offset = region.position as i64;
    let end = region.position as i64 + i64::from(region.len);
    while offset < end {
        stream.writable().await?;
        let remaining = (end - offset) as usize;
        let result = stream.try_io(Interest::WRITABLE, || {
            let mut off: nix::libc::off_t = offset;
            nix::sys::sendfile::sendfile(stream.as_fd(), region.file.as_fd(), Some(&mut off), remaining)
                .map_err(io::Error::from)
        });
        match result {
            Ok(0) => {
                // The file is shorter than the region: it was truncated under us.
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("segment file (fd {}) ended before the fetch region", region.file.as_raw_fd()),
                ));
            }
            Ok(n) => offset += n as i64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
