//! A connection whose TLS records the kernel encrypts and decrypts (kTLS),
//! after [`crate::security::ktls::offload`] handed it the session's keys.
//!
//! Writes are plain writes (and `sendfile`) on the socket. Reads use
//! `recvmsg` with room for the record-type control message: application
//! data comes back as plaintext, any other record stops the connection.
//! A client's `close_notify` alert reads as EOF; another alert, or a
//! handshake message (a TLS 1.3 KeyUpdate: the kernel cannot change keys on
//! its own and rustls is no longer there to derive them) ends it with an
//! error that names the record. Kafka clients do not send KeyUpdate in
//! practice (OpenSSL only on request, Java after about 2^37 bytes).
//!
//! The kernel does not rotate the sending key either, so the stream counts
//! the records it may have sent, from above, and reads EOF between requests
//! once the cipher's limit is near ([`crate::security::ktls`]): the client
//! reconnects with fresh keys.

use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, TlsGetRecordType};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The most plaintext one TLS record carries.
const MAX_RECORD_PLAINTEXT: u64 = 16 * 1024;
/// The most one read asks of the socket.
const READ_CHUNK: usize = 64 * 1024;

/// A TCP socket with the kernel's TLS ULP keyed for both directions.
#[derive(Debug)]
pub struct KtlsStream {
    socket: TcpStream,
    /// Application data rustls decrypted before the handover.
    pending: Bytes,
    /// An upper bound of the records sent under the current key.
    records_sent: u64,
    record_limit: u64,
}

impl KtlsStream {
    /// Wraps a socket keyed by `offload`.
    pub(crate) fn new(socket: TcpStream, pending: Bytes, record_limit: u64) -> Self {
        Self { socket, pending, records_sent: 0, record_limit }
    }

    /// The socket, for `sendfile`.
    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Counts `bytes` sent in `writes` calls: every call may end a record
    /// early, and none carries more than 16 KiB of plaintext per record.
    pub fn note_sent(&mut self, bytes: u64, writes: u64) {
        self.records_sent =
            self.records_sent.saturating_add(bytes.div_ceil(MAX_RECORD_PLAINTEXT) + writes);
    }

    /// True once the connection should close before its key wears out.
    pub fn key_exhausted(&self) -> bool {
        self.records_sent >= self.record_limit
    }
}

/// One `recvmsg`: plaintext of application-data records, or the verdict
/// on another record.
fn recv_record(socket: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let mut cmsg = nix::cmsg_space!(u8);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty())
        .map_err(io::Error::from)?;
    let n = msg.bytes;
    let mut record_type = TlsGetRecordType::ApplicationData;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::TlsGetRecordType(t) = c {
            record_type = t;
        }
    }
    let content = &iov[0][..n];
    match record_type {
        TlsGetRecordType::ApplicationData => Ok(n),
        // close_notify (level 1, description 0): the peer is done.
        TlsGetRecordType::Alert if content.get(1) == Some(&0) => Ok(0),
        TlsGetRecordType::Alert => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("kTLS: the client sent TLS alert {:?}", content.get(1)),
        )),
        TlsGetRecordType::Handshake => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "kTLS: the client sent a TLS handshake message (type {:?}, 24 = KeyUpdate) the kernel cannot act on; closing",
                content.first()
            ),
        )),
        other => Err(io::Error::new(io::ErrorKind::InvalidData, format!("kTLS: unexpected TLS record {other:?}"))),
    }
}

impl AsyncRead for KtlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            let n = this.pending.len().min(buf.remaining());
            buf.put_slice(&this.pending[..n]);
            this.pending.advance(n);
            return Poll::Ready(Ok(()));
        }
        if this.key_exhausted() {
            tracing::info!(records = this.records_sent, "kTLS connection near its key's record limit: closing so the client reconnects with fresh keys");
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(this.socket.poll_read_ready(cx))?;
            // Zeroing is the price of a safe `&mut [u8]` for recvmsg; bounded
            // per call, as a large request buffer would otherwise be zeroed whole.
            let want = buf.remaining().min(READ_CHUNK);
            let unfilled = buf.initialize_unfilled_to(want);
            match this.socket.try_io(Interest::READABLE, || recv_record(&this.socket, unfilled)) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for KtlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.socket).poll_write(cx, buf))?;
        this.note_sent(n as u64, 1);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.socket).poll_write_vectored(cx, bufs))?;
        this.note_sent(n as u64, 1);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn pending_plaintext_is_read_first_and_the_record_budget_ends_the_connection() {
        // A socket without the tls ULP: recvmsg then carries no record type,
        // which reads as application data (what the kernel reports for it).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut stream = KtlsStream::new(server, Bytes::from_static(b"held"), 3);
        client.write_all(b"wire").await.unwrap();
        let mut got = [0u8; 8];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"heldwire");

        stream.write_all(&[0u8; 20_000]).await.unwrap();
        assert!(stream.records_sent >= 2, "20,000 bytes are at least two records");
        stream.note_sent(0, 1);
        assert!(stream.key_exhausted());
        client.write_all(b"more").await.unwrap();
        assert_eq!(
            stream.read(&mut got).await.unwrap(),
            0,
            "an exhausted key reads as EOF between requests"
        );
    }
}
