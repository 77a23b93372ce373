//! An outbound Kafka connection to a broker: what a follower's fetcher speaks
//! to its leader and the transaction coordinator to a partition's leader
//! (Kafka's `BlockingSend` / `NetworkClient` for inter-broker requests), and
//! what the `floe` admin commands speak to any broker.
//!
//! [`BrokerConnection::connect`] is the one place such a connection is
//! opened: it speaks the peer endpoint's security protocol (for a broker,
//! Kafka's `inter.broker.listener.name`), TLS with [`ClientSecurity`]'s
//! `rustls` configuration for SSL and SASL_SSL, then the SASL login
//! ([`crate::sasl`]) for SASL_PLAINTEXT and SASL_SSL, before any other
//! request. When the peer gives the login a lifetime (KIP-368,
//! `connections.max.reauth.ms`), the connection logs in again on the same
//! socket before the next request once 90% of it has passed, as Kafka's
//! clients do, rather than be closed by the peer at expiry.
//!
//! # Wire layout
//! Each request and response is a size-prefixed frame, as for clients:
//! ```text
//! request   i32 size | request header (v1, or v2 for flexible versions) | body
//! response  i32 size | response header (v0, or v1 for flexible versions) | body
//! ```
//! Header versions come from the message's `HeaderVersion`, the API key from
//! its `Request::KEY`. One request is in flight at a time; every response's
//! correlation id must be the one sent.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use floe_protocol::frame::SIZE_PREFIX_LEN;
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::sasl::{SaslCredentials, SaslMechanism};
use crate::SecurityProtocol;

/// The largest response frame accepted: a size prefix above it is taken as
/// garbage rather than allocated (a follower's fetch asks for
/// `replica.fetch.response.max.bytes`, 10 MiB by default, plus at most one
/// oversized first batch).
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// What went wrong on a [`BrokerConnection`]. After any error but
/// [`ClientError::Encode`] the connection is broken (a response may be
/// half-read or still coming): calls fail with [`ClientError::Broken`] and
/// the caller connects again.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connection could not be opened.
    #[error("cannot connect to broker at {addr}: {source}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Connecting, sending or waiting for the response took longer than allowed.
    #[error("{during} broker at {addr} timed out after {timeout:?}")]
    Timeout {
        /// `host:port`.
        addr: String,
        /// What was under way (`connecting to`, `waiting for ApiKey 1 from`...).
        during: String,
        /// The limit.
        timeout: Duration,
    },
    /// Reading or writing the socket failed.
    #[error("I/O error with broker at {addr}: {source}")]
    Io {
        /// `host:port`.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The peer closed the connection.
    #[error("broker at {addr} closed the connection")]
    Closed {
        /// `host:port`.
        addr: String,
    },
    /// The request could not be encoded at that version (a field the version lacks).
    #[error("cannot encode request (api key {api_key}, v{version}): {reason}")]
    Encode {
        /// The API key.
        api_key: i16,
        /// The version asked for.
        version: i16,
        /// The encoder's complaint.
        reason: String,
    },
    /// The response frame has an impossible size prefix.
    #[error("response frame of {size} bytes from broker at {addr} (at most {MAX_RESPONSE_BYTES})")]
    FrameSize {
        /// `host:port`.
        addr: String,
        /// The size prefix read.
        size: i32,
    },
    /// The response could not be decoded at the request's version.
    #[error("cannot decode the response (api key {api_key}, v{version}) from broker at {addr}: {reason}")]
    Decode {
        /// `host:port`.
        addr: String,
        /// The API key.
        api_key: i16,
        /// The version.
        version: i16,
        /// The decoder's complaint.
        reason: String,
    },
    /// The response answers another request.
    #[error("response from broker at {addr} has correlation id {got}, expected {expected}")]
    CorrelationId {
        /// `host:port`.
        addr: String,
        /// The id sent.
        expected: i32,
        /// The id received.
        got: i32,
    },
    /// The TLS handshake failed (an untrusted or misnamed certificate, a
    /// refused client certificate, a peer that does not speak TLS).
    #[error("TLS handshake with broker at {addr} failed: {source}")]
    Tls {
        /// `host:port`.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The peer refused this broker's SASL login. The message is the peer's;
    /// the password is never in it.
    #[error("SASL {mechanism} authentication to broker at {addr} failed: {message}")]
    Authentication {
        /// `host:port`.
        addr: String,
        /// The mechanism used.
        mechanism: &'static str,
        /// Why, as the peer (or the SCRAM check of its answer) says.
        message: String,
    },
    /// The endpoint's protocol needs what this broker was not configured with
    /// (TLS or SASL on an endpoint while its own inter-broker listener has neither).
    #[error("cannot connect to broker at {addr}: {reason}")]
    Security {
        /// `host:port`.
        addr: String,
        /// What is missing.
        reason: String,
    },
    /// An earlier error left the connection unusable.
    #[error("connection to broker at {addr} is broken by an earlier error")]
    Broken {
        /// `host:port`.
        addr: String,
    },
}

/// Where another broker is reached on the inter-broker listener, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host, as registered (also the name its TLS certificate must carry).
    pub host: String,
    /// Port.
    pub port: u16,
    /// The endpoint's security protocol.
    pub protocol: SecurityProtocol,
}

impl Endpoint {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// What an outbound connection presents: TLS client configuration (for SSL
/// and SASL_SSL endpoints) and SASL credentials (for SASL ones).
#[derive(Clone, Default)]
pub struct ClientSecurity {
    tls: Option<Arc<ClientConfig>>,
    sasl: Option<(SaslMechanism, SaslCredentials)>,
}

impl fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

impl ClientSecurity {
    /// PLAINTEXT only: no TLS, no SASL (a broker alone, tests).
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// TLS with `tls` (see [`crate::tls::TlsClientSettings`]) and the SASL
    /// login `sasl`, each for the endpoints whose protocol needs it.
    pub fn new(
        tls: Option<Arc<ClientConfig>>,
        sasl: Option<(SaslMechanism, SaslCredentials)>,
    ) -> Self {
        ClientSecurity { tls, sasl }
    }

    /// The TLS client configuration, if loaded.
    pub fn tls(&self) -> Option<&Arc<ClientConfig>> {
        self.tls.as_ref()
    }

    /// The SASL mechanism and credentials, if any.
    pub fn sasl(&self) -> Option<&(SaslMechanism, SaslCredentials)> {
        self.sasl.as_ref()
    }
}

/// The socket under a [`BrokerConnection`]: plain TCP or TLS over it.
#[derive(Debug)]
enum BrokerStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for BrokerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for BrokerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            BrokerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            BrokerStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// An outbound connection to another broker, one request at a time, in the
/// endpoint's security protocol.
///
/// Not `Clone`: one owner sends and reads. Every call is bounded by the
/// connection's timeout, which must exceed any time the peer is allowed to
/// hold a request (a fetch's `max_wait_ms`).
#[derive(Debug)]
pub struct BrokerConnection {
    stream: BrokerStream,
    addr: String,
    client_id: StrBytes,
    timeout: Duration,
    next_correlation_id: i32,
    broken: bool,
    /// The SASL login, kept to log in again before the session expires.
    login: Option<(SaslMechanism, SaslCredentials)>,
    /// When to log in again (KIP-368); `None` when the session does not expire.
    reauthenticate_at: Option<Instant>,
}

impl BrokerConnection {
    /// Connects to `endpoint` in its security protocol, within `timeout` for
    /// the TCP connection, the TLS handshake and each SASL round trip; the
    /// timeout also bounds every later call. `client_id` goes into every
    /// request header. `security` holds the TLS client configuration and SASL
    /// login this broker presents.
    ///
    /// # Errors
    /// [`ClientError::Connect`], [`ClientError::Timeout`], [`ClientError::Tls`],
    /// [`ClientError::Authentication`], [`ClientError::Security`] (the endpoint
    /// needs TLS or SASL this broker has no settings for), or any error of the
    /// SASL requests.
    pub async fn connect(
        endpoint: &Endpoint,
        client_id: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<Self, ClientError> {
        let addr = endpoint.addr();
        let missing = |what: &str| {
            ClientError::Security {
            addr: addr.clone(),
            reason: format!("its endpoint is {} and this broker has no {what} for the inter-broker listener (is its inter.broker.listener.name the same protocol?)", endpoint.protocol),
        }
        };
        // Checked before connecting: a missing setting is not worth a socket.
        let tls = if endpoint.protocol.uses_tls() {
            Some(security.tls().ok_or_else(|| missing("TLS client settings"))?.clone())
        } else {
            None
        };
        let sasl = if endpoint.protocol.uses_sasl() {
            Some(security.sasl().ok_or_else(|| missing("SASL login"))?)
        } else {
            None
        };
        let tcp = match tokio::time::timeout(
            timeout,
            TcpStream::connect((endpoint.host.as_str(), endpoint.port)),
        )
        .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => return Err(ClientError::Connect { addr, source }),
            Err(_) => {
                return Err(ClientError::Timeout { addr, during: "connecting to".into(), timeout })
            }
        };
        // Requests are small and answered one at a time: do not let Nagle hold them.
        tcp.set_nodelay(true).map_err(|source| ClientError::Io { addr: addr.clone(), source })?;
        let stream = match tls {
            None => BrokerStream::Plain(tcp),
            Some(config) => {
                // The registered host is what the certificate must name (an IP address or a DNS name).
                let name = ServerName::try_from(endpoint.host.clone()).map_err(|e| {
                    ClientError::Security {
                        addr: addr.clone(),
                        reason: format!("host is not a valid TLS server name: {e}"),
                    }
                })?;
                match tokio::time::timeout(timeout, TlsConnector::from(config).connect(name, tcp))
                    .await
                {
                    Ok(Ok(stream)) => BrokerStream::Tls(Box::new(stream)),
                    Ok(Err(source)) => return Err(ClientError::Tls { addr, source }),
                    Err(_) => {
                        return Err(ClientError::Timeout {
                            addr,
                            during: "TLS handshake with".into(),
                            timeout,
                        })
                    }
                }
            }
        };
        let mut conn = Self {
            stream,
            addr,
            client_id: StrBytes::from_string(client_id.to_string()),
            timeout,
            next_correlation_id: 0,
            broken: false,
            login: sasl.cloned(),
            reauthenticate_at: None,
        };
        conn.authenticate().await?;
        Ok(conn)
    }

    /// Logs in (again) with the connection's SASL login, if it has one, and
    /// notes when the session must be renewed.
    async fn authenticate(&mut self) -> Result<(), ClientError> {
        let Some((mechanism, credentials)) = self.login.clone() else { return Ok(()) };
        let lifetime = crate::sasl::login(self, mechanism, &credentials).await?;
        // Kafka's clients renew at 85-95% of the lifetime; the middle of that is enough here.
        self.reauthenticate_at = lifetime.map(|l| Instant::now() + l.mul_f64(0.9));
        Ok(())
    }

    /// `host:port` of the peer.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection runs over TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self.stream, BrokerStream::Tls(_))
    }

    /// Sends `request` at `version` and waits for its response, within the
    /// connection's timeout; first logs in again if the SASL session is due
    /// for renewal.
    ///
    /// # Errors
    /// Any [`ClientError`]; all but [`ClientError::Encode`] break the connection.
    pub async fn call<Req: Request>(
        &mut self,
        version: i16,
        request: &Req,
    ) -> Result<Req::Response, ClientError> {
        if self.reauthenticate_at.is_some_and(|at| Instant::now() >= at) && !self.broken {
            self.authenticate().await?;
        }
        self.exchange(version, request).await
    }

    /// One request and its response, nothing else (the SASL login's own requests).
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub(crate) async fn exchange<Req: Request>(
        &mut self,
        version: i16,
        request: &Req,
    ) -> Result<Req::Response, ClientError> {
        if self.broken {
            return Err(ClientError::Broken { addr: self.addr.clone() });
        }
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = self.encode(version, correlation_id, request)?;
        // Broken until the exchange completes: a cancelled or failed call leaves
        // the stream mid-frame.
        self.broken = true;
        let timeout = self.timeout;
        let exchange = async {
            self.stream.write_all(&frame).await.map_err(|e| self.io_error(e))?;
            self.read_frame().await
        };
        let mut body = match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(ClientError::Timeout {
                    addr: self.addr.clone(),
                    during: format!("waiting for api key {} from", Req::KEY),
                    timeout,
                })
            }
        };
        let decode_error = |reason: String| ClientError::Decode {
            addr: self.addr.clone(),
            api_key: Req::KEY,
            version,
            reason,
        };
        let header = ResponseHeader::decode(&mut body, Req::Response::header_version(version))
            .map_err(|e| decode_error(e.to_string()))?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::CorrelationId {
                addr: self.addr.clone(),
                expected: correlation_id,
                got: header.correlation_id,
            });
        }
        let response =
            Req::Response::decode(&mut body, version).map_err(|e| decode_error(e.to_string()))?;
        self.broken = false;
        Ok(response)
    }

    /// The size-prefixed request frame.
    fn encode<Req: Request>(
        &self,
        version: i16,
        correlation_id: i32,
        request: &Req,
    ) -> Result<Bytes, ClientError> {
        let encode_error =
            |reason: String| ClientError::Encode { api_key: Req::KEY, version, reason };
        let header = RequestHeader::default()
            .with_request_api_key(Req::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header
            .encode(&mut buf, Req::header_version(version))
            .map_err(|e| encode_error(e.to_string()))?;
        request.encode(&mut buf, version).map_err(|e| encode_error(e.to_string()))?;
        let size = i32::try_from(buf.len() - SIZE_PREFIX_LEN).map_err(|_| ClientError::Encode {
            api_key: Req::KEY,
            version,
            reason: "request larger than 2 GiB".into(),
        })?;
        buf[..SIZE_PREFIX_LEN].copy_from_slice(&size.to_be_bytes());
        Ok(buf.freeze())
    }

    /// Reads one size-prefixed frame; returns its body.
    async fn read_frame(&mut self) -> Result<Bytes, ClientError> {
        let mut prefix = [0u8; SIZE_PREFIX_LEN];
        self.read_exact(&mut prefix).await?;
        let size = (&prefix[..]).get_i32();
        let len = usize::try_from(size).ok().filter(|&n| n <= MAX_RESPONSE_BYTES);
        let Some(len) = len else {
            return Err(ClientError::FrameSize { addr: self.addr.clone(), size });
        };
        // Read into spare capacity rather than a zeroed buffer: a follower's fetch
        // response is up to `replica.fetch.response.max.bytes`, and zeroing it first
        // cost a memset of every replicated byte.
        let mut body = BytesMut::with_capacity(len);
        while body.len() < len {
            let missing = len - body.len();
            let mut rest = (&mut body).limit(missing);
            match self.stream.read_buf(&mut rest).await {
                Ok(0) => return Err(ClientError::Closed { addr: self.addr.clone() }),
                Ok(_) => {}
                Err(e) => return Err(self.io_error(e)),
            }
        }
        Ok(body.freeze())
    }

    async fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ClientError> {
        match self.stream.read_exact(buf).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(ClientError::Closed { addr: self.addr.clone() })
            }
            Err(e) => Err(self.io_error(e)),
        }
    }

    fn io_error(&self, source: std::io::Error) -> ClientError {
        ClientError::Io { addr: self.addr.clone(), source }
    }
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod connection_tests;
