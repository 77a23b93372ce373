//! The byte stream of one client connection: a plain TCP socket, TLS over
//! one in user space (rustls), or TLS in the kernel (kTLS).
//!
//! The connection loop reads and writes through [`ClientStream`] without
//! caring which; only the response writer looks inside, because `sendfile`
//! needs the bare socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::server::ktls_stream::KtlsStream;
use crate::server::record_io::RecordIo;

/// A client connection's stream.
#[derive(Debug)]
pub enum ClientStream {
    /// PLAINTEXT and SASL_PLAINTEXT listeners.
    Plain(TcpStream),
    /// SSL and SASL_SSL listeners, after the handshake, records in user space.
    Tls(Box<TlsStream<RecordIo>>),
    /// SSL and SASL_SSL listeners, records encrypted by the kernel.
    Ktls(KtlsStream),
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
            ClientStream::Ktls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            ClientStream::Ktls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            ClientStream::Ktls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientStream::Plain(s) => s.is_write_vectored(),
            ClientStream::Tls(s) => s.is_write_vectored(),
            ClientStream::Ktls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
            ClientStream::Ktls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
            ClientStream::Ktls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
