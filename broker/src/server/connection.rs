//! One client connection: read a frame, handle it, write the response, repeat.
//!
//! Requests are handled one at a time, as Kafka does (it mutes a channel
//! until its response is sent): pipelined requests are answered in order,
//! and a long-polling Fetch holds back the requests queued behind it. A
//! client over one of its quotas is muted the same way for the throttle
//! time after its response is sent (KIP-219).
//!
//! One exception, Redpanda's two-stage produce: an `acks=all` Produce in a
//! cluster is answered once its followers have the records, and that wait
//! (Kafka's DelayedProduce) would otherwise cap a connection at one batch per
//! replication round trip. Once its appends are done, the connection reads
//! the next request while it waits; a following Produce is appended at once
//! (after the earlier one's appends, so the log order is the request order, as
//! when answered one by one), any other request waits until every earlier one
//! is answered, and the responses go out in request order. At most
//! [`MAX_AWAITING_PRODUCES`] wait at a time; none do when a quota applies.
//! On SSL and SASL_SSL listeners the TLS handshake comes first; the loop
//! then reads and writes through [`ClientStream`] whichever the transport.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use floe_protocol::frame::{parse_frame, parse_request_header, HeaderError};
use futures_util::stream::{FuturesOrdered, StreamExt};
use kafka_protocol::messages::ApiKey;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::handlers::{self, Reply};
use crate::security::ktls;
use crate::server::endpoint::Endpoint;
use crate::server::limits::{ReadClock, ReadExpiry, READ_DEADLINE_LOG};
use crate::server::record_io::RecordIo;
use crate::server::stream::ClientStream;
use crate::server::transmit;
use crate::session::Session;

/// How long a client has to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection and its read buffer.
#[derive(Debug)]
pub struct Connection {
    socket: Option<TcpStream>,
    peer: SocketAddr,
    buffer: BytesMut,
    broker: Arc<Broker>,
    session: Session,
}

/// Produce requests a connection may have appended and not yet answered (librdkafka
/// sends at most 5 at a time to an idempotent producer's connection).
const MAX_AWAITING_PRODUCES: usize = 16;

/// The second stage of a Produce: its API name, when it was read, its reply.
type AwaitedReply = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = (&'static str, Instant, Result<Reply, handlers::Reject>)>
            + Send,
    >,
>;

/// What ended a wait for the next request's bytes.
enum Woke {
    /// The read finished (`Err(())`: its deadline passed first).
    Read(Result<std::io::Result<usize>, ()>),
    /// The oldest waiting Produce is ready to be answered.
    Answered((&'static str, Instant, Result<Reply, handlers::Reject>)),
}

/// Why a connection ended.
#[derive(Debug)]
enum Closed {
    /// The peer closed it between requests.
    ByPeer,
    /// The broker is shutting down.
    Shutdown,
    /// A read deadline passed: idle, or a request not finished in time.
    Expired(ReadExpiry),
    /// The peer sent something we cannot answer; already logged.
    BadInput(&'static str),
    /// A socket error.
    Io(std::io::Error),
}

impl Connection {
    /// Wraps a socket accepted on `endpoint`.
    pub fn new(
        socket: TcpStream,
        peer: SocketAddr,
        broker: Arc<Broker>,
        endpoint: Arc<Endpoint>,
    ) -> Self {
        // Nagle would hold back the small buffers written between sendfile
        // regions (measured: it halves sendfile throughput at 64 KiB).
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        broker
            .metrics
            .connections_accepted
            .with_label_values(&[&endpoint.name, endpoint.protocol.name()])
            .inc();
        let session = Session::new(peer, endpoint);
        // The buffer starts small and grows with the bytes a client sends, so
        // thousands of idle connections cost little memory.
        Self {
            socket: Some(socket),
            peer,
            buffer: BytesMut::with_capacity(4 * 1024),
            broker,
            session,
        }
    }

    /// Serves requests until the peer leaves, bad input arrives, or shutdown
    /// is announced (checked between requests, so in-flight ones finish).
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        self.broker.metrics.connections.inc();
        match self.open().await {
            Ok(mut stream) => {
                let closed = self.serve(&mut stream, &mut shutdown).await;
                // Counted before the socket closes: a client that sees the close
                // and then reads /metrics finds it there.
                self.account(closed);
                drop(stream);
            }
            Err(closed) => self.account(closed),
        }
    }

    /// Logs why the connection ends and counts it closed (and, for the closes
    /// Floe chose, why).
    fn account(&self, closed: Closed) {
        self.broker.metrics.connections.dec();
        match closed {
            Closed::ByPeer | Closed::Shutdown => {
                tracing::debug!(peer = %self.peer, ?closed, "connection closed")
            }
            Closed::Expired(expiry) => {
                if let Some(closed) = READ_DEADLINE_LOG.admit() {
                    let (reason, buffered) = (expiry.metric_label(), self.buffer.len());
                    tracing::info!(peer = %self.peer, reason, buffered, closed, "closing connections: read deadline passed");
                }
                self.broker
                    .metrics
                    .connections_rejected
                    .with_label_values(&[expiry.metric_label()])
                    .inc();
            }
            Closed::BadInput(reason) => {
                self.broker.metrics.connections_rejected.with_label_values(&[reason]).inc();
            }
            Closed::Io(e) => tracing::debug!(peer = %self.peer, error = %e, "connection error"),
        }
    }

    /// The stream to serve: the socket itself, or TLS over it once the
    /// handshake has completed. A failed handshake (an untrusted client
    /// certificate, a plaintext client on a TLS port) is logged and closes
    /// the connection; nothing else is affected.
    async fn open(&mut self) -> Result<ClientStream, Closed> {
        let Some(socket) = self.socket.take() else {
            return Err(Closed::BadInput("reused_connection"));
        };
        let Some(tls) = self.session.endpoint.tls.clone() else {
            return Ok(ClientStream::Plain(socket));
        };
        // Whole records at a time, so a session can be handed to the kernel after the handshake.
        let socket = RecordIo::new(socket);
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.acceptor().accept(socket)).await {
            Ok(Ok(mut stream)) => {
                // A client certificate rustls has verified names the principal (Kafka's default).
                let (_, tls_conn) = stream.get_ref();
                let subject = tls_conn
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|leaf| crate::security::x500::subject_dn(leaf));
                match subject {
                    Some(Some(dn)) => self.session.ssl_principal = Some(format!("User:{dn}")),
                    Some(None) => {
                        tracing::warn!(peer = %self.peer, "client certificate subject unreadable: the principal is User:ANONYMOUS")
                    }
                    None => {}
                }
                if !self.broker.ktls {
                    stream.get_mut().0.pass_through();
                    return Ok(ClientStream::Tls(Box::new(stream)));
                }
                self.offload_to_kernel(stream).await
            }
            Ok(Err(e)) => {
                tracing::warn!(peer = %self.peer, listener = %self.session.endpoint.name, error = %e, "closing connection: TLS handshake failed");
                Err(Closed::BadInput("tls_handshake_failed"))
            }
            Err(_) => {
                tracing::warn!(peer = %self.peer, listener = %self.session.endpoint.name, "closing connection: TLS handshake timed out");
                Err(Closed::BadInput("tls_handshake_timeout"))
            }
        }
    }

    /// Hands a TLS session to the kernel (kTLS) where it can be; see
    /// [`ktls::offload`]. A session the kernel took is counted and logged at
    /// debug level; one that stays in user space too, with the reason.
    async fn offload_to_kernel(
        &mut self,
        stream: tokio_rustls::server::TlsStream<RecordIo>,
    ) -> Result<ClientStream, Closed> {
        let sessions = &self.broker.metrics.ktls_sessions;
        // The handover may wait for the rest of a record the client started:
        // it gets the handshake's deadline, so a stalled client cannot hold it.
        let Ok(offloaded) =
            tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, ktls::offload(stream)).await
        else {
            sessions.with_label_values(&["failed"]).inc();
            tracing::warn!(peer = %self.peer, listener = %self.session.endpoint.name, "closing connection: handing the TLS session to the kernel timed out");
            return Err(Closed::BadInput("ktls_offload_timeout"));
        };
        match offloaded {
            Ok(ktls::Offload::Kernel(stream)) => {
                sessions.with_label_values(&["offloaded"]).inc();
                tracing::debug!(peer = %self.peer, "TLS session handed to the kernel (kTLS)");
                Ok(ClientStream::Ktls(stream))
            }
            Ok(ktls::Offload::UserSpace(stream, why)) => {
                sessions.with_label_values(&[why]).inc();
                tracing::debug!(peer = %self.peer, reason = why, "TLS session stays in user space");
                Ok(ClientStream::Tls(stream))
            }
            Err(e) => {
                sessions.with_label_values(&["failed"]).inc();
                tracing::warn!(peer = %self.peer, listener = %self.session.endpoint.name, error = %e, "closing connection: handing the TLS session to the kernel failed");
                Err(Closed::BadInput("ktls_offload_failed"))
            }
        }
    }

    async fn serve(
        &mut self,
        stream: &mut ClientStream,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Closed {
        let max_frame = self.broker.config.socket_request_max_bytes;
        let mut clock = ReadClock::new(
            Duration::from_millis(self.broker.config.connections_max_idle_ms),
            Duration::from_millis(self.broker.config.request_read_timeout_ms),
        );
        // Produce requests waiting for their followers, oldest first (see the module doc).
        let mut awaiting: FuturesOrdered<AwaitedReply> = FuturesOrdered::new();
        loop {
            let frame = loop {
                match parse_frame(&mut self.buffer, max_frame) {
                    Ok(Some(frame)) => {
                        clock.request_complete();
                        break frame;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(peer = %self.peer, error = %e, "closing connection: request frame too large");
                        return Closed::BadInput("frame_too_large");
                    }
                }
                let (deadline, expiry) = clock.next_deadline(self.buffer.len());
                // The select only says what happened; a reply is written after it, once
                // the read no longer borrows the stream.
                let woke = tokio::select! {
                    read = tokio::time::timeout_at(deadline, stream.read_buf(&mut self.buffer)) => Woke::Read(read.map_err(|_| ())),
                    Some(done) = awaiting.next(), if !awaiting.is_empty() => Woke::Answered(done),
                    _ = shutdown.changed() => return Closed::Shutdown,
                };
                match woke {
                    Woke::Read(Err(())) => return Closed::Expired(expiry),
                    Woke::Read(Ok(Ok(0))) => {
                        if !self.buffer.is_empty() {
                            tracing::warn!(peer = %self.peer, bytes = self.buffer.len(), "peer closed the connection mid-request");
                        }
                        return Closed::ByPeer;
                    }
                    Woke::Read(Ok(Ok(_))) => {}
                    Woke::Read(Ok(Err(e))) => return Closed::Io(e),
                    Woke::Answered((name, started, reply)) => {
                        if let Err(closed) = self.answer(stream, name, started, reply).await {
                            return closed;
                        }
                    }
                }
            };
            if self.session.auth.unframed_tokens {
                // After a SaslHandshake v0 the client sends its SASL tokens bare (see
                // handlers/sasl.rs). Nothing is waiting in `awaiting`: no Produce is
                // admitted before the login, and a v0 handshake is refused after one.
                let started = Instant::now();
                let reply =
                    handlers::sasl_unframed_token(&self.broker, &mut self.session, frame).await;
                if let Err(closed) =
                    self.answer(stream, "SaslAuthenticate", started, Ok(reply)).await
                {
                    return closed;
                }
                if let Some(reason) = self.session.close_after_reply.take() {
                    return Closed::BadInput(reason);
                }
                continue;
            }
            let request = match parse_request_header(frame) {
                Ok(r) => r,
                Err(HeaderError::UnknownApiKey { api_key, correlation_id }) => {
                    tracing::warn!(peer = %self.peer, api_key, correlation_id, "closing connection: unknown API key");
                    return Closed::BadInput("unknown_api_key");
                }
                Err(HeaderError::Malformed(e)) => {
                    tracing::warn!(peer = %self.peer, error = %e, "closing connection: malformed request header");
                    return Closed::BadInput("malformed_header");
                }
            };
            let api = request.api_key;
            // Only a Produce may overlap the ones before it; anything else runs once
            // every earlier request is answered, as on a connection without overlap.
            // A Produce beyond the limit waits for the oldest only, so the pipeline
            // stays full instead of draining to empty.
            let keep = if api == ApiKey::Produce { MAX_AWAITING_PRODUCES - 1 } else { 0 };
            while awaiting.len() > keep {
                let Some((name, started, reply)) = awaiting.next().await else { break };
                if let Err(closed) = self.answer(stream, name, started, reply).await {
                    return closed;
                }
            }
            let started = Instant::now();
            if let Err(refused) = self.session.admits(api, started) {
                tracing::warn!(
                    peer = %self.peer,
                    listener = %self.session.endpoint.name,
                    api = handlers::api_name(api),
                    reason = refused.label(),
                    "closing connection: request not allowed before (re-)authentication"
                );
                return Closed::BadInput(refused.label());
            }
            let name = handlers::api_name(api);
            let reply = handlers::dispatch(&self.broker, request, &mut self.session).await;
            match reply {
                Ok(Reply::AwaitingReplication(pending)) => {
                    let broker = self.broker.clone();
                    awaiting.push_back(Box::pin(async move {
                        (name, started, pending.finish(&broker).await)
                    }));
                    continue;
                }
                // Behind an earlier Produce still waiting: answered after it.
                reply if !awaiting.is_empty() => {
                    awaiting.push_back(Box::pin(std::future::ready((name, started, reply))));
                    continue;
                }
                reply => {
                    if let Err(closed) = self.answer(stream, name, started, reply).await {
                        return closed;
                    }
                }
            }
            if let Some(reason) = self.session.close_after_reply.take() {
                // Already logged by the handler (failed authentication and the like).
                return Closed::BadInput(reason);
            }
            if let Some(throttle) = self.session.throttled_for.take() {
                // Over a client quota: the response is out, and the next request waits (Kafka mutes the channel).
                tokio::select! {
                    _ = tokio::time::sleep(throttle) => {}
                    _ = shutdown.changed() => return Closed::Shutdown,
                }
            }
        }
    }

    /// Writes one request's reply and counts it.
    async fn answer(
        &mut self,
        stream: &mut ClientStream,
        name: &'static str,
        started: Instant,
        reply: Result<Reply, handlers::Reject>,
    ) -> Result<(), Closed> {
        let reply = match reply {
            Ok(reply) => reply,
            Err(reject) => {
                tracing::warn!(peer = %self.peer, reason = %reject, "closing connection: cannot handle request");
                return Err(Closed::BadInput(reject.metric_label()));
            }
        };
        let written = match reply {
            Reply::None => Ok(()),
            Reply::Frame(bytes) => transmit::write_bytes(stream, &bytes).await,
            Reply::Parts(parts) => {
                let zero_copy = self.broker.config.fetch_zero_copy;
                match transmit::write_parts(stream, &parts, zero_copy).await {
                    Ok(sent) => {
                        self.broker
                            .metrics
                            .fetch_bytes
                            .with_label_values(&[sent.path.label()])
                            .inc_by(sent.file_bytes);
                        if std::mem::take(&mut self.session.reply_to_replica) {
                            self.broker
                                .metrics
                                .replication_bytes_out
                                .with_label_values(&[sent.path.label()])
                                .inc_by(sent.file_bytes);
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Reply::AwaitingReplication(_) => {
                tracing::error!(peer = %self.peer, "closing connection: a produce's second stage was answered unfinished");
                return Err(Closed::BadInput("internal_error"));
            }
        };
        self.broker.metrics.requests.with_label_values(&[name]).inc();
        self.broker
            .metrics
            .request_duration
            .with_label_values(&[name])
            .observe(started.elapsed().as_secs_f64());
        written.map_err(Closed::Io)
    }
}
