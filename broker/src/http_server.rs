//! The one HTTP/1.1 server behind the broker's HTTP services: the Prometheus
//! endpoint ([`crate::metrics`]), the Iceberg REST catalog
//! ([`crate::iceberg_rest`]), the Schema Registry ([`crate::schema_registry`])
//! and the web console (the `floe` binary's `console` module).
//!
//! Each service keeps its own listener and its own routing (a handler from a
//! request and its peer to a response); this module is the plumbing they
//! share: [`bind`], the accept loop ([`serve`]) with an optional cap on open
//! connections and optional TLS, hyper's HTTP/1 connections, [`read_body`] with
//! a size limit, and [`spawn_thread`] for a service whose requests block
//! (SQLite reads, fsyncs), which must not stall the Kafka request workers: it
//! gets an OS thread with a current-thread tokio runtime, and
//! [`ServerThread::stop`] stops it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use tokio::sync::{oneshot, Semaphore};
use tracing::{debug, error, warn};

use crate::security::tls::TlsContext;

/// How long a client has to finish its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the accept loop pauses after a failed accept (EMFILE, say) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// How a service is served.
#[derive(Clone, Default)]
pub struct Options {
    /// The service as logs name it: `{name} accept failed`, `{name} connection ended with an error`.
    pub name: &'static str,
    /// Most connections served at once; more wait in the kernel's accept queue. `None`: no cap.
    pub max_connections: Option<usize>,
    /// Serve HTTPS with these certificates (reloaded with them) instead of plain HTTP.
    pub tls: Option<Arc<TlsContext>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("name", &self.name)
            .field("max_connections", &self.max_connections)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Binds `addr` (non-blocking, for a tokio runtime): done first at startup, so a
/// taken port fails the start at once; callers name the setting in the error.
///
/// # Errors
/// The bind error.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The accept loop of `listener` (see [`bind`]), answering each request with
/// `handler(request, peer)`; it runs until dropped, which stops accepting and
/// drops the open connections with their runtime. Call it within the tokio
/// runtime that will run it (the listener joins that runtime's reactor now).
///
/// # Errors
/// The listener cannot join the current runtime.
pub fn serve<H, F>(
    listener: std::net::TcpListener,
    options: Options,
    handler: H,
) -> std::io::Result<impl Future<Output = ()> + Send>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::from_std(listener)?;
    Ok(accept_loop(listener, options, Arc::new(handler)))
}

async fn accept_loop<H, F>(listener: tokio::net::TcpListener, options: Options, handler: Arc<H>)
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let slots = options.max_connections.map(|n| Arc::new(Semaphore::new(n)));
    loop {
        // Wait for a free slot before accepting, so excess clients queue in the kernel.
        let permit = match &slots {
            Some(slots) => match slots.clone().acquire_owned().await {
                Ok(permit) => Some(permit),
                Err(_) => return,
            },
            None => None,
        };
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                warn!(error = %e, "{} accept failed", options.name);
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let (handler, tls, name) = (handler.clone(), options.tls.clone(), options.name);
        tokio::spawn(async move {
            connection(stream, peer, handler, tls, name).await;
            drop(permit);
        });
    }
}

/// Serves one connection: the TLS handshake if any, then HTTP/1 until the client leaves.
async fn connection<H, F>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    handler: Arc<H>,
    tls: Option<Arc<TlsContext>>,
    name: &'static str,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let answer = handler(req, peer);
        async move { Ok::<_, std::convert::Infallible>(answer.await) }
    });
    let http = hyper::server::conn::http1::Builder::new();
    let result = match tls {
        None => http.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await,
        Some(tls) => {
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream)).await {
                Ok(Ok(stream)) => {
                    http.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await
                }
                Ok(Err(e)) => {
                    warn!(%peer, error = %e, "{name} TLS handshake failed");
                    return;
                }
                Err(_) => {
                    warn!(%peer, "{name} TLS handshake timed out");
                    return;
                }
            }
        }
    };
    if let Err(e) = result {
        debug!(%peer, error = %e, "{name} connection ended with an error");
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Longer than the limit given to [`read_body`].
    #[error("the request body is larger than {0} bytes")]
    TooLarge(usize),
    /// The connection failed or the client sent a malformed body.
    #[error("cannot read the request body: {0}")]
    Read(Box<dyn std::error::Error + Send + Sync>),
}

/// The whole body of a request, refused past `limit` bytes (the rest is left
/// unread, so the connection cannot carry another request).
///
/// # Errors
/// [`BodyError`].
pub async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    match Limited::new(body, limit).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge(limit)),
        Err(e) => Err(BodyError::Read(e)),
    }
}

/// A service served by [`spawn_thread`]. Dropping it without [`ServerThread::stop`]
/// stops the server too, without waiting for its thread.
#[derive(Debug)]
pub struct ServerThread {
    addr: SocketAddr,
    name: &'static str,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

/// Serves `listener` (see [`bind`]) as [`serve`] does, on an OS thread named
/// `thread` with a current-thread tokio runtime of its own: the handler may
/// block it, or spawn its blocking work on that runtime's blocking pool,
/// without stalling the broker's runtime.
///
/// # Errors
/// The runtime or the thread cannot be started, or the listener cannot join the runtime.
pub fn spawn_thread<H, F>(
    thread: &str,
    listener: std::net::TcpListener,
    options: Options,
    handler: H,
) -> std::io::Result<ServerThread>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let addr = listener.local_addr()?;
    let name = options.name;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let accepting = {
        let _in_runtime = runtime.enter();
        serve(listener, options, handler)?
    };
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let handle = std::thread::Builder::new().name(thread.into()).spawn(move || {
        runtime.block_on(async move {
            tokio::select! {
                () = accepting => {}
                _ = stop_rx => {}
            }
        });
        // Dropping the runtime here cancels the connections still open.
    })?;
    Ok(ServerThread { addr, name, stop: Some(stop_tx), handle: Some(handle) })
}

impl ServerThread {
    /// The bound address (the port is real even when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, drops open connections and joins the thread.
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                error!("{} thread panicked", self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(request.as_bytes()).await.expect("write");
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.expect("read");
        String::from_utf8_lossy(&out).into_owned()
    }

    fn echo_path(
        req: Request<Incoming>,
        _peer: SocketAddr,
    ) -> impl Future<Output = Response<Full<Bytes>>> + Send {
        let path = req.uri().path().to_string();
        async move {
            match read_body(req.into_body(), 4).await {
                Ok(body) => Response::new(Full::new(Bytes::from(format!("{path} {}", body.len())))),
                Err(e) => Response::new(Full::new(Bytes::from(e.to_string()))),
            }
        }
    }

    #[test]
    fn a_thread_server_answers_limits_bodies_and_stops() {
        let listener = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let options = Options { name: "test", max_connections: Some(2), tls: None };
        let server = spawn_thread("floe-http-test", listener, options, echo_path).expect("start");
        let addr = server.local_addr();
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let ok = get(addr, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc").await;
            assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("/a 3"), "{ok}");
            let big = get(addr, "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\nConnection: close\r\n\r\n123456789").await;
            assert!(big.ends_with("the request body is larger than 4 bytes"), "{big}");
        });
        server.stop();
        assert!(std::net::TcpStream::connect(addr).is_err(), "still listening after stop");
    }

    #[tokio::test]
    async fn serve_runs_on_the_current_runtime() {
        let listener = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(
            serve(listener, Options { name: "test", ..Options::default() }, echo_path)
                .expect("serve"),
        );
        let ok = get(addr, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(ok.ends_with("/x 0"), "{ok}");
        task.abort();
    }
}
