//! Startup and orderly shutdown.
//!
//! Startup: open (and recover) the logs, bind the listeners (Kafka, metrics,
//! Iceberg REST), start the maintenance and tiering threads. Shutdown on SIGTERM or SIGINT: stop accepting, let
//! in-flight requests finish, stop maintenance, flush every log and write
//! the checkpoints, so the next start has nothing to recover.

use std::sync::Arc;
use std::time::Duration;

use floe_storage::{LogManager, StorageError};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::maintenance::Maintenance;
use crate::metrics::{self, Metrics};
use crate::server::listener;

/// Why the broker could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum RunError {
    /// The logs could not be opened or recovered.
    #[error("cannot open the logs in {dir}: {source}")]
    OpenLogs {
        /// The data directory.
        dir: std::path::PathBuf,
        /// The storage error.
        source: StorageError,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// Flushing the logs at shutdown failed: the next start will recover.
    #[error("shutdown flush failed: {0}")]
    Shutdown(StorageError),
    /// A background task or thread could not be started or joined.
    #[error("{0}")]
    Task(String),
}

/// Runs the broker until SIGTERM or SIGINT.
///
/// # Errors
/// See [`RunError`].
pub async fn run(config: BrokerConfig) -> Result<(), RunError> {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested");
        let _ = shutdown_tx.send(true);
    });
    serve(config, shutdown_rx).await
}

/// Runs the broker until `shutdown` turns true.
///
/// # Errors
/// See [`RunError`].
pub async fn serve(config: BrokerConfig, shutdown: watch::Receiver<bool>) -> Result<(), RunError> {
    let dir = config.data_dir.clone();
    let defaults = config.log_defaults.clone();
    let node_id = config.node_id;
    let opened = tokio::task::spawn_blocking(move || LogManager::open_with_node_id(&dir, Some(node_id), defaults))
        .await
        .map_err(|e| RunError::Task(e.to_string()))?;
    let logs = Arc::new(opened.map_err(|source| RunError::OpenLogs { dir: config.data_dir.clone(), source })?);

    let listener = TcpListener::bind(config.listen).await.map_err(|source| RunError::Bind { addr: config.listen, source })?;
    let bound = listener.local_addr().map_err(|source| RunError::Bind { addr: config.listen, source })?;
    let (advertised_host, advertised_port) = match &config.advertised {
        Some((host, port)) => (host.clone(), i32::from(*port)),
        None if bound.ip().is_unspecified() => {
            tracing::warn!("listening on all interfaces without advertised.listeners: advertising 127.0.0.1");
            ("127.0.0.1".to_string(), i32::from(bound.port()))
        }
        None => (bound.ip().to_string(), i32::from(bound.port())),
    };

    let metrics = Arc::new(Metrics::new());
    let mut metrics_addr = None;
    if let Some(addr) = config.metrics_listen {
        let l = metrics::bind(addr).await.map_err(|source| RunError::Bind { addr, source })?;
        metrics_addr = l.local_addr().ok();
        tokio::spawn(metrics::serve(l, metrics.clone()));
    }

    // Bound before any thread starts, so a taken port fails startup with nothing to undo.
    let mut iceberg_rest = None;
    if let Some(addr) = config.iceberg_rest_listen {
        let server = crate::iceberg_rest::IcebergRestServer::start(addr, &config.data_dir, &config.tiering.catalog_name, metrics.clone())
            .map_err(|source| RunError::Bind { addr, source })?;
        iceberg_rest = Some(server);
    }
    let iceberg_rest_addr = iceberg_rest.as_ref().map(|s| s.local_addr());

    let tick = Duration::from_millis(config.flush_scheduler_interval_ms.min(config.retention_check_interval_ms));
    let maintenance = Maintenance::start(logs.clone(), tick)
        .map_err(|e| RunError::Task(e.to_string()))?;

    let groups = Arc::new(
        crate::group::GroupCoordinator::new(config.coordinator_config(), logs.clone()).map_err(|e| RunError::Task(e.to_string()))?,
    );
    {
        // Offsets load in the background; group requests answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
        let groups = groups.clone();
        tokio::spawn(async move {
            let _ = groups.load().await;
        });
    }
    let sweeper = groups.start(shutdown.clone());

    let tiering = crate::tiering::TieringTask::start(logs.clone(), config.data_dir.clone(), config.tiering.clone(), metrics.clone())
        .map_err(|e| RunError::Task(e.to_string()))?;

    let broker = Arc::new(Broker {
        config,
        logs: logs.clone(),
        metrics,
        groups,
        advertised_host,
        advertised_port,
        shutdown: shutdown.clone(),
    });
    tracing::info!(
        listen = %bound,
        advertised = %format!("{}:{}", broker.advertised_host, broker.advertised_port),
        metrics = ?metrics_addr,
        iceberg_rest = ?iceberg_rest_addr,
        data_dir = %broker.config.data_dir.display(),
        zero_copy = broker.config.fetch_zero_copy,
        "floe is ready"
    );

    listener::run(listener, broker, shutdown).await;
    let _ = sweeper.await;

    tokio::task::spawn_blocking(move || {
        if let Some(server) = iceberg_rest {
            server.stop();
        }
        tiering.stop();
        maintenance.stop();
        logs.shutdown()
    })
    .await
    .map_err(|e| RunError::Task(e.to_string()))?
    .map_err(RunError::Shutdown)?;
    tracing::info!("floe stopped cleanly");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the broker");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
