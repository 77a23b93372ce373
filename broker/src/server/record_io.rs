//! The socket under a TLS session, read whole TLS records at a time while
//! the handshake runs.
//!
//! Why: handing a session to kernel TLS needs the socket's read side to sit
//! exactly on a record boundary, with nothing that belongs to the kernel
//! already taken into user space. `tokio-rustls` keeps reading after the
//! handshake completes (up to one application-data record, which rustls then
//! decrypts and keeps), and a plain read could also take half of the next
//! record. Reading in whole records bounds what user space holds to records
//! rustls has processed, plus at most one record this type still holds
//! (see [`RecordIo::finish_record`]). Once the session stays in user space,
//! [`RecordIo::pass_through`] turns the record framing off.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TLS record header: content type, version, length.
const HEADER_LEN: usize = 5;
/// The longest record body TLS allows (2^14 + 2048, TLS 1.2's ciphertext bound).
const MAX_RECORD_BODY: usize = (1 << 14) + 2048;

/// A socket that, until told otherwise, hands its reader one whole TLS
/// record at a time.
#[derive(Debug)]
pub struct RecordIo {
    socket: TcpStream,
    /// The record being assembled or handed out.
    record: Vec<u8>,
    /// Bytes of `record` already handed to the reader.
    delivered: usize,
    /// Record framing off: reads go straight to the socket (after `record`).
    pass_through: bool,
}

impl RecordIo {
    /// Wraps a socket before its TLS handshake.
    pub fn new(socket: TcpStream) -> Self {
        Self { socket, record: Vec::new(), delivered: 0, pass_through: false }
    }

    /// The socket.
    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Reads go straight to the socket from now on (the session stays in user space).
    pub fn pass_through(&mut self) {
        self.pass_through = true;
    }

    /// Completes the record this type has started to read, if any, and returns
    /// its bytes not yet handed out (empty when the socket sits on a record boundary).
    /// Afterwards the socket sits on a record boundary.
    ///
    /// # Errors
    /// A socket error, or EOF inside the record.
    pub async fn finish_record(&mut self) -> io::Result<Vec<u8>> {
        if self.record.len() > self.delivered {
            while !self.record_complete() {
                let want = self.bytes_wanted();
                let start = self.record.len();
                self.record.resize(start + want, 0);
                let n = self.socket.read(&mut self.record[start..]).await?;
                self.record.truncate(start + n);
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "EOF inside a TLS record",
                    ));
                }
            }
        }
        let rest = self.record.split_off(self.delivered);
        self.record.clear();
        self.delivered = 0;
        Ok(rest)
    }

    /// Gives the socket back.
    pub fn into_socket(self) -> TcpStream {
        self.socket
    }

    /// The whole record's length once its header is in. A header that is not
    /// a TLS record's (a plaintext Kafka client on a TLS port) counts as a
    /// record of its own, so rustls sees it at once and refuses it, rather
    /// than this type waiting for a length that is not one.
    fn record_len(&self) -> Option<usize> {
        let header = self.record.get(..HEADER_LEN)?;
        let body = usize::from(u16::from_be_bytes([header[3], header[4]]));
        let plausible = (20..=24).contains(&header[0]) && header[1] == 3 && body <= MAX_RECORD_BODY;
        Some(if plausible { HEADER_LEN + body } else { HEADER_LEN })
    }

    fn record_complete(&self) -> bool {
        self.record_len().is_some_and(|len| self.record.len() == len)
    }

    /// How many more bytes the record (or its header) needs.
    fn bytes_wanted(&self) -> usize {
        match self.record_len() {
            Some(len) => len - self.record.len(),
            None => HEADER_LEN - self.record.len(),
        }
    }

    /// Hands out the rest of a complete record.
    fn deliver(&mut self, buf: &mut ReadBuf<'_>) {
        let n = (self.record.len() - self.delivered).min(buf.remaining());
        buf.put_slice(&self.record[self.delivered..self.delivered + n]);
        self.delivered += n;
        if self.delivered == self.record.len() {
            self.record.clear();
            self.delivered = 0;
        }
    }
}

impl AsyncRead for RecordIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.record_complete() {
            this.deliver(buf);
            return Poll::Ready(Ok(()));
        }
        if this.pass_through && this.record.is_empty() {
            return Pin::new(&mut this.socket).poll_read(cx, buf);
        }
        // Assemble the whole record before handing any of it out.
        loop {
            let want = this.bytes_wanted();
            let start = this.record.len();
            this.record.resize(start + want, 0);
            let mut chunk = ReadBuf::new(&mut this.record[start..]);
            let polled = Pin::new(&mut this.socket).poll_read(cx, &mut chunk);
            let n = chunk.filled().len();
            this.record.truncate(start + n);
            ready!(polled)?;
            if n == 0 {
                if start == 0 {
                    return Poll::Ready(Ok(())); // EOF between records
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "EOF inside a TLS record",
                )));
            }
            if this.record_complete() {
                this.deliver(buf);
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl AsyncWrite for RecordIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write_vectored(cx, bufs)
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
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    fn record(content_type: u8, body: &[u8]) -> Vec<u8> {
        let mut r = vec![content_type, 3, 3];
        r.extend_from_slice(&(body.len() as u16).to_be_bytes());
        r.extend_from_slice(body);
        r
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn reads_stop_at_record_boundaries_and_a_started_record_is_finished() {
        let (mut client, server) = pair().await;
        let (a, b, c) = (record(22, &[1; 300]), record(23, &[2; 40]), record(23, &[3; 100]));
        let mut wire = [a.clone(), b.clone()].concat();
        wire.extend_from_slice(&c[..20]); // the third record arrives in two parts
        client.write_all(&wire).await.unwrap();
        client.flush().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;

        let mut io = RecordIo::new(server);
        let mut buf = vec![0u8; 4096];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(
            &buf[..n],
            &a[..],
            "one read, one record, though more is buffered in the socket"
        );
        let n = io.read(&mut buf[..10]).await.unwrap();
        assert_eq!(&buf[..n], &b[..10], "a short buffer gets part of the record");
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &b[10..]);

        // Start the third record (nothing of it is handed out: it is incomplete)...
        let read =
            tokio::time::timeout(std::time::Duration::from_millis(100), io.read(&mut buf)).await;
        assert!(read.is_err(), "an incomplete record is not handed out");
        // ...then finish it: its bytes come back whole, and the socket is on a boundary.
        let writer = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            client.write_all(&c[20..]).await.unwrap();
            client.write_all(b"after").await.unwrap();
            client
        });
        let rest = io.finish_record().await.unwrap();
        assert_eq!(rest, record(23, &[3; 100]));
        let _client = writer.await.unwrap();
        let mut socket = io.into_socket();
        let mut after = [0u8; 5];
        socket.read_exact(&mut after).await.unwrap();
        assert_eq!(&after, b"after");
    }

    #[tokio::test]
    async fn a_header_that_is_no_tls_record_is_handed_out_at_once() {
        let (mut client, server) = pair().await;
        // A Kafka ApiVersions frame on a TLS port: its "length" would be 4352 bytes.
        client.write_all(&[0, 0, 0, 0x11, 0, 0x12, 0, 0]).await.unwrap();
        let mut io = RecordIo::new(server);
        let mut buf = vec![0u8; 64];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), io.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], &[0, 0, 0, 0x11, 0]);
    }

    #[tokio::test]
    async fn pass_through_hands_out_the_held_record_first() {
        let (mut client, server) = pair().await;
        let a = record(23, &[7; 10]);
        client.write_all(&a[..8]).await.unwrap();
        let mut io = RecordIo::new(server);
        let mut buf = vec![0u8; 64];
        assert!(tokio::time::timeout(std::time::Duration::from_millis(100), io.read(&mut buf))
            .await
            .is_err());
        io.pass_through();
        client.write_all(&a[8..]).await.unwrap();
        client.write_all(b"xyz").await.unwrap();
        let mut got = Vec::new();
        while got.len() < a.len() + 3 {
            let n = io.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, [a, b"xyz".to_vec()].concat());
    }
}
