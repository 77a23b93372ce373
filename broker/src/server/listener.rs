//! The accept loop of one listener: one task per connection, and an
//! orderly shutdown. The broker runs one loop per configured listener.
//!
//! Shutdown is announced on a `watch` channel; each connection finishes the
//! request it is handling and exits. The listener waits for every connection
//! task (up to a deadline) before returning, so the caller can then flush
//! logs knowing no append is in flight.
//!
//! A connection beyond `max.connections` (or `max.connections.per.ip`) is
//! accepted and closed at once, as Kafka does; a failed accept (EMFILE when
//! out of file descriptors) backs off and retries, never ending the loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::server::connection::Connection;
use crate::server::endpoint::Endpoint;
use crate::server::limits::{ConnectionLimits, REFUSAL_LOG};

/// Accepts connections on `endpoint` until `shutdown` flips to true, then drains.
///
/// `limits` is shared by every listener: `max.connections` counts the
/// broker's connections, not one listener's.
pub async fn run(
    listener: TcpListener,
    endpoint: Arc<Endpoint>,
    broker: Arc<Broker>,
    limits: Arc<ConnectionLimits>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(10);
                    let permit = match limits.admit(peer.ip()) {
                        Ok(permit) => permit,
                        Err(why) => {
                            // Counted before the close, so whoever sees the close sees the count.
                            broker.metrics.connections_rejected.with_label_values(&[why.metric_label()]).inc();
                            drop(stream);
                            if let Some(refused) = REFUSAL_LOG.admit() {
                                let (reason, limit) = (why.metric_label(), limits.limit(why));
                                tracing::warn!(%peer, reason, limit, refused, "closing new connections: connection limit reached");
                            }
                            continue;
                        }
                    };
                    let conn = Connection::new(stream, peer, broker.clone(), endpoint.clone());
                    let shutdown = shutdown.clone();
                    connections.spawn(async move {
                        conn.run(shutdown).await;
                        drop(permit);
                    });
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
    let drained =
        tokio::time::timeout(deadline, async { while connections.join_next().await.is_some() {} })
            .await;
    if drained.is_err() {
        tracing::warn!(
            remaining = connections.len(),
            "shutdown deadline passed; aborting connections"
        );
        connections.abort_all();
    }
}
