//! The HTTP server of the read-only Iceberg REST catalog
//! ([`floe_tiering::rest`]: its routes, answers and JSON bodies).
//!
//! The server runs on its own OS thread with a current-thread tokio runtime,
//! like the tiering thread: reading the catalog means SQLite queries and
//! blocking local file reads of metadata JSON, none of which may stall the
//! Kafka request workers ([`crate::http_server::spawn_thread`]). Connections are
//! HTTP/1.1 (hyper), capped at [`MAX_CONNECTIONS`]; each request is counted in
//! `floe_iceberg_rest_requests_total{route,status}`.

use std::net::SocketAddr;
use std::sync::Arc;

use floe_tiering::metrics::IcebergMetrics;
use floe_tiering::rest::{Reply, RestCatalog};
use floe_tiering::{CatalogConfig, CatalogReader};
use http_body_util::Full;
use hyper::body::Bytes as HttpBytes;
use hyper::{Request, Response};
use tracing::{debug, error, info, warn};

use crate::http_server::{self, ServerThread};

/// Most connections served at once; more wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 256;

/// The running server. Dropping it without [`IcebergRestServer::stop`] stops it without joining its thread.
#[derive(Debug)]
pub struct IcebergRestServer(ServerThread);

impl IcebergRestServer {
    /// Binds `addr` and starts serving the SQL catalog `catalog` (read-only;
    /// its warehouse local or on S3) on a thread of its own.
    ///
    /// # Errors
    /// The bind error, or the thread or runtime could not be started.
    pub fn start(
        addr: SocketAddr,
        catalog: CatalogConfig,
        metrics: IcebergMetrics,
    ) -> std::io::Result<Self> {
        // Bound here, not on the thread, so a taken port fails the broker's startup at once.
        let listener = http_server::bind(addr)?;
        let catalog_name = catalog.name.clone();
        // Clients may name the warehouse by its location: an absolute one, as the writer resolves it.
        let warehouse_location = match catalog.local_warehouse() {
            Some(dir) => format!("file://{}", std::path::absolute(&dir).unwrap_or(dir).display()),
            None => catalog.warehouse.clone(),
        };
        let catalog = Arc::new(RestCatalog::new(
            CatalogReader::from_config(catalog),
            &catalog_name,
            &warehouse_location,
        ));
        let options = http_server::Options {
            name: "iceberg REST",
            max_connections: Some(MAX_CONNECTIONS),
            tls: None,
        };
        let server =
            http_server::spawn_thread("floe-iceberg-rest", listener, options, move |req, peer| {
                let (catalog, metrics) = (catalog.clone(), metrics.clone());
                async move { handle(&req, &catalog, &metrics, peer).await }
            })?;
        let addr = server.local_addr();
        info!(url = %format!("http://{addr}"), catalog = %catalog_name, "iceberg REST catalog (read-only) listening");
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

async fn handle(
    req: &Request<hyper::body::Incoming>,
    catalog: &RestCatalog,
    metrics: &IcebergMetrics,
    peer: SocketAddr,
) -> Response<Full<HttpBytes>> {
    let route = floe_tiering::rest::route(
        req.method(),
        req.uri().path(),
        req.uri().query(),
        catalog.catalog_name(),
    );
    let reply = catalog.answer(&route).await;
    metrics.rest_requests.with_label_values(&[route.label(), reply.status.as_str()]).inc();
    if let Some(problem) = &reply.problem {
        let (method, uri) = (req.method(), req.uri());
        match reply.status.as_u16() {
            // Existence checks and lookups of missing tables are routine for engines.
            404 => debug!(%peer, %method, %uri, problem, "iceberg REST: not found"),
            500.. => error!(%peer, %method, %uri, problem, "iceberg REST: catalog read failed"),
            _ => warn!(%peer, %method, %uri, problem, "iceberg REST: request refused"),
        }
    }
    http_response(reply)
}

fn http_response(reply: Reply) -> Response<Full<HttpBytes>> {
    let has_body = reply.body.is_some();
    let mut response = Response::new(Full::new(HttpBytes::from(reply.body.unwrap_or_default())));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    if has_body {
        headers.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
    }
    if let Some(allow) = reply.allow {
        headers.insert(hyper::header::ALLOW, hyper::header::HeaderValue::from_static(allow));
    }
    response
}
