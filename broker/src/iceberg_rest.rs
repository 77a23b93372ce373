//! The HTTP server of the read-only Iceberg REST catalog
//! ([`floe_tiering::rest`]: its routes, answers and JSON bodies).
//!
//! The server runs on its own OS thread with a current-thread tokio runtime,
//! like the tiering thread: reading the catalog means SQLite queries and
//! blocking local file reads of metadata JSON, none of which may stall the
//! Kafka request workers. Connections are HTTP/1.1 (hyper), capped at
//! [`MAX_CONNECTIONS`]; each request is counted in
//! `floe_iceberg_rest_requests_total{route,status}`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use floe_tiering::metrics::IcebergMetrics;
use floe_tiering::rest::{Reply, RestCatalog};
use floe_tiering::{CatalogConfig, CatalogReader};
use http_body_util::Full;
use hyper::body::Bytes as HttpBytes;
use hyper::{Request, Response};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tracing::{debug, error, info, warn};


/// Most connections served at once; more wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 256;

/// The running server. Dropping it without [`IcebergRestServer::stop`] leaves the thread running.
#[derive(Debug)]
pub struct IcebergRestServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl IcebergRestServer {
    /// Binds `addr` and starts serving the SQL catalog `catalog` (read-only;
    /// its warehouse local or on S3) on a thread of its own.
    ///
    /// # Errors
    /// The bind error, or the thread or runtime could not be started.
    pub fn start(addr: SocketAddr, catalog: CatalogConfig, metrics: IcebergMetrics) -> std::io::Result<Self> {
        // Bound here, not on the thread, so a taken port fails the broker's startup at once.
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let catalog_name = catalog.name.clone();
        // Clients may name the warehouse by its location: an absolute one, as the writer resolves it.
        let warehouse_location = match catalog.local_warehouse() {
            Some(dir) => format!("file://{}", std::path::absolute(&dir).unwrap_or(dir).display()),
            None => catalog.warehouse.clone(),
        };
        let catalog = Arc::new(RestCatalog::new(CatalogReader::from_config(catalog), &catalog_name, &warehouse_location));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let handle = std::thread::Builder::new().name("floe-iceberg-rest".into()).spawn(move || {
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        error!(error = %e, "iceberg REST listener cannot join the runtime; the REST catalog is off");
                        return;
                    }
                };
                tokio::select! {
                    _ = accept_loop(listener, catalog, metrics) => {}
                    _ = stop_rx => {}
                }
            });
            // Dropping the runtime here cancels the connections still open.
        })?;
        info!(url = %format!("http://{addr}"), catalog = %catalog_name, "iceberg REST catalog (read-only) listening");
        Ok(Self { addr, stop: Some(stop_tx), handle: Some(handle) })
    }

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
                error!("iceberg REST thread panicked");
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, catalog: Arc<RestCatalog>, metrics: IcebergMetrics) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // Wait for a free slot before accepting, so excess clients queue in the kernel.
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                warn!(error = %e, "iceberg REST accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let catalog = catalog.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let catalog = catalog.clone();
                let metrics = metrics.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&req, &catalog, &metrics, peer).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                debug!(%peer, error = %e, "iceberg REST connection ended with an error");
            }
            drop(permit);
        });
    }
}

async fn handle(
    req: &Request<hyper::body::Incoming>,
    catalog: &RestCatalog,
    metrics: &IcebergMetrics,
    peer: SocketAddr,
) -> Response<Full<HttpBytes>> {
    let route = floe_tiering::rest::route(req.method(), req.uri().path(), req.uri().query(), catalog.catalog_name());
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
        headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    }
    if let Some(allow) = reply.allow {
        headers.insert(hyper::header::ALLOW, hyper::header::HeaderValue::from_static(allow));
    }
    response
}
