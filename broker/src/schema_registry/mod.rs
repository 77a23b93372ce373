//! The built-in Schema Registry: the Confluent Schema Registry's REST API on
//! `floe.schema.registry.listen`, so the serializers of confluent-kafka, kafkajs
//! and Kafka Connect register and fetch schemas against Floe unchanged.
//!
//! The registry itself is `floe-schema`'s: its store over `_schemas`
//! ([`floe_schema::SchemaStore`]), the REST API's routes and answers
//! ([`floe_schema::rest`]) and the produce-time validation
//! ([`floe_schema::validation`], called by the Produce handler). This module is
//! what needs the broker: the HTTP server, the broker's users and ACLs, and the
//! cluster.
//!
//! # Layout
//! - this file: the HTTP server, a request's authentication, authorization and answer.
//! - [`cluster`]: in a cluster, `_schemas` through the controller and the leader's registry.
//! - [`forward`]: writes forwarded to the registry of the broker leading `_schemas`.
//! - [`access`]: basic auth with the broker's users, the broker's ACLs on subjects.
//!
//! The server runs on its own OS thread with a current-thread tokio runtime, like
//! the Iceberg REST catalog: a registration appends to `_schemas` and fsyncs, which
//! must not stall the Kafka request workers. Each request's store work runs on the
//! runtime's blocking pool; the store's lock orders them. Requests are counted in
//! `floe_schema_registry_requests_total{route,status}`.

pub mod access;
pub mod cluster;
pub(crate) mod forward;

use std::net::SocketAddr;
use std::sync::Arc;

use floe_schema::rest::{self, Reply, Route, CONTENT_TYPE};
use floe_schema::{
    AvroFormat, JsonSchemaFormat, ProtobufFormat, Registry, SchemaFormat, SchemaStore,
};
use floe_storage::LogManager;
use http_body_util::Full;
use hyper::body::Bytes as HttpBytes;
use hyper::{Request, Response};
use tracing::{debug, error, info, warn};

use crate::http_server::{self, BodyError, ServerThread};
use crate::metrics::Metrics;
use crate::security::tls::TlsContext;
pub use access::Access;

/// Most connections served at once; more wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 256;

/// The largest request body taken: a schema of 16 MiB is far past any real one
/// (Confluent's own default request limit is of this order) and bounds memory.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// The schema types this broker's registry understands.
fn formats() -> Vec<Arc<dyn SchemaFormat>> {
    vec![Arc::new(AvroFormat), Arc::new(JsonSchemaFormat), Arc::new(ProtobufFormat)]
}

/// The registry's state over `_schemas`: loaded now on a single broker; in a
/// cluster (`clustered`) read from this broker's replica once the topic exists,
/// after [`SchemaStore::attach`].
///
/// # Errors
/// [`StartError::Store`].
pub fn open_store(logs: Arc<LogManager>, clustered: bool) -> Result<Arc<SchemaStore>, StartError> {
    Ok(Arc::new(
        SchemaStore::open(logs, || Registry::new(formats()), clustered)
            .map_err(StartError::Store)?,
    ))
}

/// The running server. Dropping it without [`SchemaRegistryServer::stop`] stops it without joining its thread.
#[derive(Debug)]
pub struct SchemaRegistryServer(ServerThread);

/// Why the registry could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound (or the thread not started).
    #[error("schema registry on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `_schemas` could not be created or replayed.
    #[error("schema registry: {0}")]
    Store(floe_schema::RegistryError),
}

impl SchemaRegistryServer {
    /// Binds `addr`: done first at startup, so a taken port fails it at once.
    ///
    /// # Errors
    /// [`StartError::Bind`].
    pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, StartError> {
        http_server::bind(addr).map_err(|source| StartError::Bind { addr, source })
    }

    /// Starts serving `store` (see [`open_store`]) on `listener` (see [`Self::bind`]),
    /// on a thread of its own, to the users `access` lets in; over TLS when `tls` is given.
    ///
    /// # Errors
    /// [`StartError::Bind`] if the thread or its runtime cannot start.
    pub fn start(
        listener: std::net::TcpListener,
        store: Arc<SchemaStore>,
        access: Access,
        tls: Option<Arc<TlsContext>>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, StartError> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let served = Arc::new(Served { store, access, metrics });
        let local = listener.local_addr();
        let addr = local.as_ref().map_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)), |a| *a);
        let bind_error = |source| StartError::Bind { addr, source };
        let options = http_server::Options {
            name: "schema registry",
            max_connections: Some(MAX_CONNECTIONS),
            tls,
        };
        let server = http_server::spawn_thread(
            "floe-schema-registry",
            listener,
            options,
            move |req, peer| handle(req, served.clone(), peer),
        )
        .map_err(bind_error)?;
        info!(url = %format!("{scheme}://{addr}"), "schema registry listening");
        Ok(Self(server))
    }

    /// The bound address (the port is real even when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr()
    }

    /// Stops accepting, drops open connections and joins the thread.
    pub fn stop(self) {
        self.0.stop();
    }
}

/// What every connection serves.
#[derive(Debug)]
struct Served {
    store: Arc<SchemaStore>,
    access: Access,
    metrics: Arc<Metrics>,
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    served: Arc<Served>,
    peer: SocketAddr,
) -> Response<Full<HttpBytes>> {
    let route = rest::route(req.method(), req.uri().path(), req.uri().query());
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let incoming = Incoming {
        method: method.clone(),
        path_and_query: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string()),
        authorization: req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec()),
        forwarded: req.headers().contains_key(forward::FORWARDED),
        host: peer.ip(),
    };
    let reply = match http_server::read_body(req.into_body(), MAX_BODY_BYTES).await {
        Ok(body) => {
            let (answering, s) = (route.clone(), served.clone());
            match tokio::task::spawn_blocking(move || answer(&s, &answering, &incoming, body)).await
            {
                Ok(reply) => reply,
                Err(e) => service_error(format!("the request's task failed: {e}")),
            }
        }
        Err(e @ BodyError::TooLarge(_)) => Reply::error(413, 413, e.to_string()),
        Err(e @ BodyError::Read(_)) => service_error(e.to_string()),
    };
    served
        .metrics
        .schema_registry_requests
        .with_label_values(&[route.label(), reply.status.as_str()])
        .inc();
    if let Some(problem) = &reply.problem {
        match reply.status.as_u16() {
            404 => debug!(%peer, %method, %uri, problem, "schema registry: not found"),
            500.. => error!(%peer, %method, %uri, problem, "schema registry: request failed"),
            _ => warn!(%peer, %method, %uri, problem, "schema registry: request refused"),
        }
    }
    let unauthorized = reply.status == hyper::StatusCode::UNAUTHORIZED;
    let mut response = Response::new(Full::new(HttpBytes::from(reply.body)));
    *response.status_mut() = reply.status;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(CONTENT_TYPE));
    if route.is_write() && served.store.is_clustered() {
        // Where `_schemas` ends after this write, for a forwarding follower to wait for.
        response.headers_mut().insert(
            forward::SCHEMAS_OFFSET,
            hyper::header::HeaderValue::from(served.store.high_watermark()),
        );
    }
    if unauthorized {
        response.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Basic realm=\"floe\""),
        );
    }
    response
}

/// What the handler keeps of a request besides its route and body.
#[derive(Debug)]
struct Incoming {
    method: hyper::Method,
    path_and_query: String,
    authorization: Option<Vec<u8>>,
    /// Sent by another broker's registry: answered here or refused, never forwarded again.
    forwarded: bool,
    host: std::net::IpAddr,
}

/// How long a follower waits for its replica to hold a write it forwarded.
const READ_YOUR_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Authenticates, authorizes and answers one request (blocking): from the store,
/// or, for a write in a cluster on a broker that does not lead `_schemas`, by the
/// leader's registry.
fn answer(served: &Served, route: &Route, incoming: &Incoming, body: HttpBytes) -> Reply {
    let principal = match served.access.authenticate(incoming.authorization.as_deref()) {
        Ok(p) => p,
        Err(access::Denied::Unauthenticated(why) | access::Denied::Forbidden(why)) => {
            return Reply::error(401, 40101, why)
        }
    };
    if let Err(access::Denied::Forbidden(why) | access::Denied::Unauthenticated(why)) =
        served.access.authorize(&principal, incoming.host, route)
    {
        return Reply::error(403, 40301, why);
    }
    if route.is_write() && served.store.is_clustered() && !served.store.leads() {
        return forward_write(served, incoming, body);
    }
    let mut reply = rest::answer(&served.store, route, &body);
    if matches!(route, Route::Subjects { .. })
        && served.access.filters_listings()
        && reply.status.is_success()
    {
        if let Ok(subjects) = serde_json::from_slice::<Vec<String>>(&reply.body) {
            let visible: Vec<String> = subjects
                .into_iter()
                .filter(|s| served.access.may_see(&principal, incoming.host, s))
                .collect();
            reply.body = serde_json::to_vec(&visible).unwrap_or_default();
        }
    }
    reply
}

/// A write this broker cannot make: the leader's registry makes it; then this
/// broker's replica is awaited, so the client reads its write back here.
fn forward_write(served: &Served, incoming: &Incoming, body: HttpBytes) -> Reply {
    let unknown =
        |why: String| Reply::registry_error(&floe_schema::RegistryError::UnknownLeader(why));
    if incoming.forwarded {
        return unknown("a forwarded write reached a broker that does not lead _schemas (leadership moved): retry".into());
    }
    let Some(leader) = served.store.leader_url() else {
        return unknown("no broker with a Schema Registry leads _schemas now: retry".into());
    };
    let sent = tokio::runtime::Handle::current().block_on(forward::forward(
        &leader,
        &incoming.method,
        &incoming.path_and_query,
        body,
        incoming.authorization.as_deref(),
    ));
    match sent {
        Ok(answer) => {
            if let Some(offset) = answer.schemas_offset {
                let deadline = std::time::Instant::now() + READ_YOUR_WRITE_WAIT;
                while served.store.high_watermark() < offset && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            Reply {
                status: hyper::StatusCode::from_u16(answer.status)
                    .unwrap_or(hyper::StatusCode::BAD_GATEWAY),
                body: answer.body,
                problem: (answer.status >= 400)
                    .then(|| format!("the leading registry {leader} answered {}", answer.status)),
            }
        }
        Err(why) => Reply::registry_error(&floe_schema::RegistryError::Forwarding(why)),
    }
}

fn service_error(message: String) -> Reply {
    Reply::error(500, 50001, message)
}
