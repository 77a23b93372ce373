//! The accept loop of one listener: one task per connection, and an
//! orderly shutdown. The broker runs one loop per configured listener.
//!
//! Shutdown is announced on a `watch` channel; each connection finishes the
//! request it is handling and exits. The listener waits for every connection
//! task (up to a deadline) before returning, so the caller can then flush
//! logs knowing no append is in flight.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::server::connection::Connection;
use crate::server::endpoint::Endpoint;

/// Accepts connections on `endpoint` until `shutdown` flips to true, then drains.
pub async fn run(listener: TcpListener, endpoint: Arc<Endpoint>, broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(10);
                    let conn = Connection::new(stream, peer, broker.clone(), endpoint.clone());
                    connections.spawn(conn.run(shutdown.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: back off rather than spin.
                    tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let deadline = Duration::from_millis(broker.config.shutdown_timeout_ms);
    let open = connections.len();
    if open > 0 {
        tracing::info!(listener = %endpoint.name, open, "waiting for connections to finish their requests");
    }
    let drained = tokio::time::timeout(deadline, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(remaining = connections.len(), "shutdown deadline passed; aborting connections");
        connections.abort_all();
    }
}
