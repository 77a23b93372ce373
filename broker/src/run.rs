//! Startup and orderly shutdown.
//!
//! Startup: open (and recover) the logs, bind the listeners (Kafka, metrics,
//! Iceberg REST), start the maintenance, log cleaner and tiering threads. Shutdown on SIGTERM or SIGINT: stop accepting, let
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
use crate::metrics::{self, Metrics};
use crate::ports::{self, Service};
use crate::security::credentials::CredentialStore;
use crate::security::ktls;
use crate::security::tls::TlsContext;
use crate::server::endpoint::Endpoint;
use crate::server::limits::ConnectionLimits;
use crate::server::listener;
use floe_storage::maintenance::Maintenance;

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
    /// A service's port could not be bound.
    #[error("cannot bind the {service}: {source}; move it with its setting or flag, or run a second broker with --port-offset")]
    Bind {
        /// What listens there, with the setting and flag that move it.
        service: crate::ports::Service,
        /// The socket error.
        source: std::io::Error,
    },
    /// Ports were taken before anything started.
    #[error(transparent)]
    PortsInUse(#[from] crate::ports::PortsInUse),
    /// The TLS certificate, key or truststore could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] crate::security::tls::TlsError),
    /// The TLS client settings of the inter-broker listener could not be loaded.
    #[error("inter-broker TLS client for listener {listener}: {source}")]
    InterBrokerTls {
        /// The inter-broker listener.
        listener: String,
        /// What could not be loaded.
        source: crate::security::tls::TlsError,
    },
    /// `floe.ssl.ktls=on` on a kernel without kernel TLS.
    #[error("{0}")]
    Ktls(String),
    /// Flushing the logs at shutdown failed: the next start will recover.
    #[error("shutdown flush failed: {0}")]
    Shutdown(StorageError),
    /// A background task or thread could not be started or joined.
    #[error("{0}")]
    Task(String),
    /// The broker could not join its cluster (`floe.metadata.store`).
    #[error("cluster: {0}")]
    Cluster(#[from] floe_cluster::ClusterError),
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

/// Runs the broker until `requested` turns true. In a cluster, a controlled shutdown
/// comes first: leadership moves to other in-sync replicas while this broker still
/// serves, then it stops.
///
/// # Errors
/// See [`RunError`].
pub async fn serve(config: BrokerConfig, requested: watch::Receiver<bool>) -> Result<(), RunError> {
    // What the broker's parts stop on: `requested`, after the controlled shutdown.
    let (stop, shutdown) = watch::channel(false);
    let dir = config.data_dir.clone();
    let defaults = config.log_defaults.clone();
    let node_id = config.node_id;
    let cluster_id = cluster_id_of(&config).await?;
    let opened = tokio::task::spawn_blocking(move || {
        LogManager::open_in_cluster(&dir, Some(node_id), cluster_id.as_deref(), defaults)
    })
    .await
    .map_err(|e| RunError::Task(e.to_string()))?;
    let logs = Arc::new(
        opened.map_err(|source| RunError::OpenLogs { dir: config.data_dir.clone(), source })?,
    );

    let needs_tls =
        config.listeners.iter().any(|l| l.protocol.uses_tls()) || config.schema_registry_tls;
    let tls = if needs_tls {
        let settings = config.tls.clone();
        let loaded = tokio::task::spawn_blocking(move || TlsContext::load(settings))
            .await
            .map_err(|e| RunError::Task(e.to_string()))??;
        Some(Arc::new(loaded))
    } else {
        None
    };
    let ktls = decide_ktls(&config).await?;
    let credentials = {
        let dir = config.data_dir.clone();
        let plain_users = config.sasl.plain_users_file.clone();
        tokio::task::spawn_blocking(move || CredentialStore::open(&dir, plain_users.as_deref()))
            .await
            .map_err(|e| RunError::Task(e.to_string()))?
            .map_err(|e| RunError::Task(e.to_string()))?
    };
    let authorizer = {
        let dir = config.data_dir.clone();
        let settings = config.authorizer.clone();
        tokio::task::spawn_blocking(move || crate::authorizer::Authorizer::open(settings, &dir))
            .await
            .map_err(|e| RunError::Task(e.to_string()))?
            .map_err(|e| RunError::Task(e.to_string()))?
    };
    let quotas = {
        let dir = config.data_dir.clone();
        tokio::task::spawn_blocking(move || crate::quota::ClientQuotas::open(&dir))
            .await
            .map_err(|e| RunError::Task(e.to_string()))?
            .map_err(|e| RunError::Task(e.to_string()))?
    };
    if authorizer.enabled() {
        let count = authorizer.store().map(|s| s.snapshot().len()).unwrap_or(0);
        tracing::info!(acls = count, "authorizer on: requests are checked against ACLs");
    }

    let mut endpoints = Vec::with_capacity(config.listeners.len());
    for spec in &config.listeners {
        let bind_error =
            |source| RunError::Bind { service: Service::kafka(&spec.name, spec.bind), source };
        let listener = TcpListener::bind(spec.bind).await.map_err(bind_error)?;
        let bound = listener.local_addr().map_err(bind_error)?;
        if spec.advertised.is_none() && bound.ip().is_unspecified() {
            tracing::warn!(listener = %spec.name, "listening on all interfaces without an advertised address: advertising 127.0.0.1");
        }
        let (advertised_host, advertised_port) =
            Endpoint::advertised_of(spec.advertised.as_ref(), bound);
        let endpoint = Endpoint {
            name: spec.name.clone(),
            protocol: spec.protocol,
            bound,
            advertised_host,
            advertised_port,
            tls: if spec.protocol.uses_tls() { tls.clone() } else { None },
        };
        endpoints.push((listener, Arc::new(endpoint)));
    }

    // The registry's port is bound before the broker registers, as its URL is in the registration.
    let registry_error = |e| match e {
        crate::schema_registry::StartError::Bind { addr, source } => {
            RunError::Bind { service: Service::new(ports::SCHEMA_REGISTRY, addr), source }
        }
        other => RunError::Task(other.to_string()),
    };
    let registry_listener = match config.schema_registry_listen {
        Some(addr) => {
            Some(crate::schema_registry::SchemaRegistryServer::bind(addr).map_err(registry_error)?)
        }
        None => None,
    };
    let registry_url = registry_listener.as_ref().and_then(|l| l.local_addr().ok()).map(|bound| {
        let scheme = if config.schema_registry_tls { "https" } else { "http" };
        // An unspecified bind address is reached at the host the broker advertises.
        let host = if bound.ip().is_unspecified() {
            endpoints
                .first()
                .map_or_else(|| "127.0.0.1".to_string(), |(_, e)| e.advertised_host.clone())
        } else {
            bound.ip().to_string()
        };
        format!("{scheme}://{host}:{}", bound.port())
    });
    let cluster = join_cluster(&config, &endpoints, registry_url).await?;

    let metrics = Arc::new(Metrics::new());
    for topic in logs.topics() {
        for log in topic.partitions() {
            let ranges = log.corrupt_ranges();
            if !ranges.is_empty() {
                let partition = log.partition().to_string();
                metrics
                    .log_corrupt_ranges
                    .with_label_values(&[log.topic(), partition.as_str()])
                    .set(ranges.len() as i64);
            }
        }
    }
    metrics.ktls_enabled.set(i64::from(ktls));
    tokio::spawn(publish_cluster_view(cluster.subscribe(), config.node_id, metrics.clone()));

    {
        let failure = logs.log_dir_failure();
        let dir = failure.dir().display().to_string();
        metrics.log_dir_offline.with_label_values(&[dir.as_str()]).set(0);
        let gauge = metrics.log_dir_offline.clone();
        failure.on_offline(Box::new(move |_| gauge.with_label_values(&[dir.as_str()]).set(1)));
    }
    let mut metrics_addr = None;
    if let Some(addr) = config.metrics_listen {
        let bind_error =
            |source| RunError::Bind { service: Service::new(ports::METRICS, addr), source };
        let l = crate::http_server::bind(addr).map_err(bind_error)?;
        metrics_addr = l.local_addr().ok();
        tokio::spawn(metrics::serve(l, metrics.clone()).map_err(bind_error)?);
    }

    // Bound before any thread starts, so a taken port fails startup with nothing to undo.
    let mut iceberg_rest = None;
    let catalog =
        config.tiering.catalog.catalog_config(&config.data_dir, &config.tiering.catalog_name);
    match config.iceberg_rest_listen {
        // Readers go to the external catalog itself: serving it again here would only proxy it.
        Some(_) if catalog.catalog_type == floe_tiering::CatalogType::Rest => {
            tracing::info!(catalog = %catalog.describe(), "the embedded Iceberg REST catalog is off: tables live in an external REST catalog");
        }
        Some(addr) => {
            let server = crate::iceberg_rest::IcebergRestServer::start(
                addr,
                catalog,
                metrics.iceberg.clone(),
            )
            .map_err(|source| RunError::Bind {
                service: Service::new(ports::ICEBERG_REST, addr),
                source,
            })?;
            iceberg_rest = Some(server);
        }
        None => {}
    }
    let iceberg_rest_addr = iceberg_rest.as_ref().map(|s| s.local_addr());

    // The registry's state, for the produce path's schema validation too; served
    // once the broker's users and ACLs exist (below).
    let schemas = match &registry_listener {
        Some(_) => Some(
            crate::schema_registry::open_store(logs.clone(), cluster.is_clustered())
                .map_err(registry_error)?,
        ),
        None => None,
    };

    let maintenance = Maintenance::start(
        logs.clone(),
        Duration::from_millis(config.flush_scheduler_interval_ms),
        Duration::from_millis(config.retention_check_interval_ms),
    )
    .map_err(|e| RunError::Task(e.to_string()))?;
    let cleaner = floe_storage::LogCleaner::start(logs.clone(), config.cleaner.clone())
        .map_err(|e| RunError::Task(e.to_string()))?;
    metrics.cleaner.observe(cleaner.stats());

    // What fetchers and marker senders present to the other brokers: read once,
    // so a missing truststore or key stops startup rather than every connection.
    let inter_broker =
        Arc::new(crate::security::inter_broker::load(&config.inter_broker, &config.tls).map_err(
            |source| RunError::InterBrokerTls {
                listener: config.inter_broker.listener.clone(),
                source,
            },
        )?);
    let fetchers = floe_cluster::replication::fetcher::ReplicaFetcherManager::new(
        config.node_id,
        config.inter_broker.listener.clone(),
        crate::cluster_replication::fetcher_settings(&config, inter_broker.clone()),
        metrics.replication.clone(),
        metrics.log_corrupt_ranges.clone(),
    );
    let (replicas, isr_requests) = floe_cluster::replication::ReplicaManager::new(
        config.node_id,
        Duration::from_millis(config.replica_lag_time_max_ms),
        fetchers,
        metrics.replication.clone(),
    );
    let replicas = Arc::new(replicas);

    let mut cluster_markers = None;
    let (groups, txns) = if cluster.is_clustered() {
        // Coordinators follow the leadership of their internal topics (crate::coordinator_terms):
        // nothing to load until this broker leads one.
        let gate: Arc<dyn floe_coordinator::replicated::ReplicatedWrites> =
            Arc::new(crate::coordinator_terms::ReplicaGate::new(
                replicas.clone(),
                tokio::runtime::Handle::current(),
                Duration::from_millis(config.offsets_commit_timeout_ms),
            ));
        // One coordinator per partition of each internal topic; keys map with the
        // configured counts until the topics exist in the cluster (then with theirs).
        let groups = Arc::new(
            floe_coordinator::group::GroupCoordinators::replicated(
                config.coordinator_config(),
                logs.clone(),
                config.offsets_topic_num_partitions,
                gate.clone(),
            )
            .map_err(|e| RunError::Task(e.to_string()))?,
        );
        // Markers go to each partition's leader; the writer gets the broker once it exists.
        let markers = Arc::new(crate::txn_markers::ClusterMarkerWriter::new(
            tokio::runtime::Handle::current(),
            inter_broker.clone(),
        ));
        cluster_markers = Some(markers.clone());
        let txns = floe_coordinator::transaction::TransactionCoordinators::replicated(
            config.transactions.clone(),
            logs.clone(),
            markers,
            config.transaction_state_log_num_partitions,
            gate,
        )
        .map_err(|e| RunError::Task(e.to_string()))?;
        (groups, Arc::new(txns))
    } else {
        let groups = {
            // Creates __consumer_offsets with offsets.topic.num.partitions if it does not exist.
            let (group_config, group_logs, count) =
                (config.coordinator_config(), logs.clone(), config.offsets_topic_num_partitions);
            let opened = tokio::task::spawn_blocking(move || {
                floe_coordinator::group::GroupCoordinators::single(group_config, group_logs, count)
            })
            .await
            .map_err(|e| RunError::Task(e.to_string()))?;
            Arc::new(opened.map_err(|e| RunError::Task(e.to_string()))?)
        };
        let txns = {
            let markers =
                Arc::new(crate::txn_markers::LocalMarkerWriter::new(logs.clone(), groups.clone()));
            let (txn_config, txn_logs, count) = (
                config.transactions.clone(),
                logs.clone(),
                config.transaction_state_log_num_partitions,
            );
            let opened = tokio::task::spawn_blocking(move || {
                floe_coordinator::transaction::TransactionCoordinators::open(
                    txn_config, txn_logs, markers, count,
                )
            })
            .await
            .map_err(|e| RunError::Task(e.to_string()))?;
            Arc::new(opened.map_err(|e| RunError::Task(e.to_string()))?)
        };
        {
            // Offsets load in the background; group requests answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
            // Transactions a crash left decided but incomplete are finished once the offsets are
            // loaded (their markers may go to __consumer_offsets through the group coordinators).
            let (groups, txns) = (groups.clone(), txns.clone());
            tokio::spawn(async move {
                if groups.load_all().await.is_ok() {
                    txns.complete_prepared().await;
                }
            });
        }
        (groups, txns)
    };
    let sweeper = groups.start(shutdown.clone());
    let txn_timer = transaction_timer(txns.clone(), config.transactions.clone(), shutdown.clone());

    // In a cluster only a partition's leader tiers it (see crate::tiering).
    let tierers = if cluster.is_clustered() {
        let leaders = replicas.clone();
        floe_tiering::runner::Tierers {
            broker_id: Some(config.node_id),
            leadership: Some(Arc::new(move |topic: &str, partition: i32| {
                leaders.is_leader(&floe_cluster::TopicPartition::new(topic, partition))
            })),
            schemas: None,
        }
    } else {
        floe_tiering::runner::Tierers::default()
    };
    // Typed tables read their schemas from this broker's registry.
    let tierers = floe_tiering::runner::Tierers {
        schemas: schemas.clone().map(|s| s as Arc<dyn floe_tiering::SchemaSource>),
        ..tierers
    };
    let tiering = floe_tiering::runner::TieringTask::start(
        logs.clone(),
        config.data_dir.clone(),
        config.tiering.clone(),
        metrics.iceberg.clone(),
        tierers,
    )
    .map_err(|e| RunError::Task(e.to_string()))?;

    let limits = ConnectionLimits::new(config.max_connections, config.max_connections_per_ip);
    let dynamic_config = {
        let (dir, statics, logs, limits) =
            (config.data_dir.clone(), config.effective.clone(), logs.clone(), limits.clone());
        tokio::task::spawn_blocking(move || {
            crate::dynamic_config::DynamicBrokerConfig::open(&dir, statics, logs, limits)
        })
        .await
        .map_err(|e| RunError::Task(e.to_string()))?
        .map_err(|e| RunError::Task(e.to_string()))?
    };
    let mut authorizer = authorizer;
    authorizer.count_denials_in(metrics.authorization_denied.clone());
    // The table read threads serve shared-storage topics' fetches below their local
    // log start; they open the catalog on their first read, so a broker without a
    // shared topic pays one idle thread.
    let table_reads = {
        let catalog =
            config.tiering.catalog.catalog_config(&config.data_dir, &config.tiering.catalog_name);
        let namespace = config.tiering.namespace.clone();
        let open: floe_tiering::table_reads::OpenCatalog = Arc::new(move || {
            let (catalog, namespace) = (catalog.clone(), namespace.clone());
            Box::pin(async move {
                floe_tiering::IcebergCatalog::open_read_only(&catalog, &namespace)
                    .await
                    .map_err(|e| e.to_string())
            })
        });
        Some(Arc::new(
            floe_tiering::table_reads::TableReads::start(config.tiering.shared_reads, open)
                .map_err(|e| RunError::Task(e.to_string()))?,
        ))
    };
    let broker = Arc::new(Broker {
        config,
        logs: logs.clone(),
        metrics,
        groups,
        txns,
        credentials: Arc::new(credentials),
        authorizer: Arc::new(authorizer),
        quotas: Arc::new(quotas),
        dynamic_config: Arc::new(dynamic_config),
        ktls,
        cluster,
        replicas,
        schemas,
        table_reads,
        shutdown: shutdown.clone(),
    });
    if let Some(writer) = &cluster_markers {
        writer.attach(&broker);
    }
    let mut schema_registry = None;
    if let (Some(listener), Some(store)) = (registry_listener, broker.schemas.clone()) {
        if broker.cluster.is_clustered() {
            let side = Arc::new(crate::schema_registry::cluster::BrokerCluster::new(
                &broker,
                tokio::runtime::Handle::current(),
            ));
            store.attach(side.clone());
            tokio::spawn(crate::schema_registry::cluster::create_topic_when_possible(
                side,
                shutdown.clone(),
            ));
        }
        let sasl = broker.config.listeners.iter().any(|l| l.protocol.uses_sasl());
        let access = crate::schema_registry::Access::new(
            sasl.then(|| broker.credentials.clone()),
            broker.authorizer.clone(),
        );
        let registry_tls = if broker.config.schema_registry_tls { tls.clone() } else { None };
        let server = crate::schema_registry::SchemaRegistryServer::start(
            listener,
            store,
            access,
            registry_tls,
            broker.metrics.clone(),
        )
        .map_err(registry_error)?;
        schema_registry = Some(server);
    }
    let schema_registry_addr = schema_registry.as_ref().map(|s| s.local_addr());
    tokio::spawn(stop_after_controlled_shutdown(broker.clone(), requested, stop));
    if broker.cluster.is_clustered() {
        // Producer ids unique in the cluster: blocks come from etcd (called on the
        // blocking pool by InitProducerId, hence block_on).
        let (weak, handle) = (Arc::downgrade(&broker), tokio::runtime::Handle::current());
        broker.logs.producer_ids().set_block_source(Box::new(move |size| {
            let broker = weak.upgrade().ok_or("the broker is stopping")?;
            handle.block_on(broker.cluster.reserve_producer_ids(size)).map_err(|e| e.to_string())
        }));
        tokio::spawn(crate::cluster_topics::run(broker.clone()));
        // The cluster's ACLs, SCRAM users and configs are in force before the first request.
        crate::cluster_configs::apply_latest(&broker).await;
        tokio::spawn(crate::cluster_configs::run(broker.clone()));
        tokio::spawn(crate::cluster_replication::run_isr_writer(broker.clone(), isr_requests));
    }
    if let Some(tls) = &tls {
        tokio::spawn(crate::security::tls::reload_on_signal(tls.clone(), shutdown.clone()));
    }
    let described: Vec<String> = endpoints
        .iter()
        .map(|(_, e)| {
            format!(
                "{}://{} ({}, advertised {}:{})",
                e.name, e.bound, e.protocol, e.advertised_host, e.advertised_port
            )
        })
        .collect();
    tracing::info!(
        listeners = %described.join(", "),
        metrics = %shown(metrics_addr),
        iceberg_rest = %shown(iceberg_rest_addr),
        schema_registry = %shown(schema_registry_addr),
        data_dir = %broker.config.data_dir.display(),
        zero_copy = broker.config.fetch_zero_copy,
        "floe is ready"
    );

    let accept_loops = endpoints.into_iter().map(|(listener, endpoint)| {
        listener::run(listener, endpoint, broker.clone(), limits.clone(), shutdown.clone())
    });
    futures_util::future::join_all(accept_loops).await;
    broker.replicas.shutdown().await;
    broker.cluster.leave().await;
    let _ = sweeper.await;
    let _ = txn_timer.await;

    tokio::task::spawn_blocking(move || {
        if let Some(server) = iceberg_rest {
            server.stop();
        }
        if let Some(server) = schema_registry {
            server.stop();
        }
        tiering.stop();
        cleaner.stop();
        maintenance.stop();
        logs.shutdown()
    })
    .await
    .map_err(|e| RunError::Task(e.to_string()))?
    .map_err(RunError::Shutdown)?;
    tracing::info!("floe stopped cleanly");
    Ok(())
}

/// An address for a log line: `off` when the service is turned off.
fn shown(addr: Option<std::net::SocketAddr>) -> String {
    addr.map_or_else(|| "off".to_string(), |a| a.to_string())
}

/// In a cluster, the id every broker must share (etcd's, or this data directory's
/// if this broker is the first); alone, `None`: the data directory's own.
async fn cluster_id_of(config: &BrokerConfig) -> Result<Option<String>, RunError> {
    if config.metadata_store == floe_cluster::MetadataStoreUrl::Local {
        return Ok(None);
    }
    let stored = LogManager::stored_cluster_id(&config.data_dir)
        .map_err(|source| RunError::OpenLogs { dir: config.data_dir.clone(), source })?;
    let proposed = stored.unwrap_or_else(floe_storage::log_manager::new_cluster_id);
    let timeout =
        Duration::from_millis(config.broker_session_timeout_ms).max(Duration::from_secs(10));
    let id = floe_cluster::agree_cluster_id(&config.metadata_store, &proposed, timeout).await?;
    tracing::info!(cluster_id = %id, store = %config.metadata_store, "cluster id agreed with the metadata store");
    Ok(Some(id))
}

/// Registers this broker in its cluster (at once for `local`), advertising every
/// listener's endpoint, so that any broker can answer Metadata for it.
async fn join_cluster(
    config: &BrokerConfig,
    endpoints: &[(TcpListener, Arc<Endpoint>)],
    schema_registry: Option<String>,
) -> Result<floe_cluster::Membership, RunError> {
    let registration = floe_cluster::BrokerRegistration {
        node_id: config.node_id,
        rack: config.broker_rack.clone(),
        endpoints: endpoints
            .iter()
            .map(|(_, e)| floe_cluster::BrokerEndpoint {
                listener: e.name.clone(),
                host: e.advertised_host.clone(),
                port: e.advertised_port,
                security_protocol: e.protocol.to_string(),
            })
            .collect(),
        shutting_down: false,
        schema_registry,
    };
    let settings = floe_cluster::MembershipSettings {
        store: config.metadata_store.clone(),
        registration,
        session_timeout: Duration::from_millis(config.broker_session_timeout_ms),
        unclean_leader_election: config.unclean_leader_election,
        leader_rebalance: config.auto_leader_rebalance.then(|| floe_cluster::LeaderRebalance {
            interval: Duration::from_secs(config.leader_imbalance_check_interval_s),
            imbalance_percentage: config.leader_imbalance_per_broker_percentage,
        }),
    };
    if config.metadata_store != floe_cluster::MetadataStoreUrl::Local {
        tracing::info!(store = %config.metadata_store, node_id = config.node_id, "joining the cluster");
    }
    Ok(floe_cluster::Membership::join(settings).await?)
}

/// How long a controlled shutdown waits for the controller to move this broker's
/// leaderships away (Kafka retries its ControlledShutdown for a similar while).
const CONTROLLED_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);

/// Waits for a stop request, then (in a cluster) hands this broker's leaderships to
/// other in-sync replicas before telling the broker's parts to stop: a rolling
/// restart then loses nothing acknowledged and clients only see leaders move.
async fn stop_after_controlled_shutdown(
    broker: Arc<Broker>,
    mut requested: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
) {
    if requested.wait_for(|r| *r).await.is_err() {
        // The requester is gone: nothing will ask to stop; the broker runs on.
        std::future::pending::<()>().await;
    }
    if broker.cluster.is_clustered() {
        let me = broker.node_id();
        // Partitions whose ISR has another member can move; a sole replica cannot.
        let movable = move |v: &floe_cluster::ClusterView| {
            v.partitions
                .values()
                .filter(|s| s.leader == me && s.isr.iter().any(|r| *r != me))
                .count()
        };
        let before = broker.cluster.with_view(movable);
        tracing::info!(
            node_id = me,
            leaderships = before,
            "controlled shutdown: asking the controller to move leadership away"
        );
        match broker.cluster.announce_shutdown().await {
            Ok(()) => {
                let moved = broker
                    .cluster
                    .wait_for_view(CONTROLLED_SHUTDOWN_TIMEOUT, |v| movable(v) == 0)
                    .await;
                let left = broker.cluster.with_view(movable);
                if moved {
                    tracing::info!(node_id = me, "controlled shutdown: leadership moved; stopping");
                } else {
                    tracing::warn!(
                        node_id = me,
                        still_leading = left,
                        timeout_s = CONTROLLED_SHUTDOWN_TIMEOUT.as_secs(),
                        "controlled shutdown: leadership did not all move in time; stopping anyway"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "controlled shutdown: cannot reach the metadata store; stopping without moving leadership")
            }
        }
    }
    let _ = stop.send(true);
}

/// Keeps the cluster gauges on the membership's view until the membership ends.
async fn publish_cluster_view(
    mut view: watch::Receiver<floe_cluster::ClusterView>,
    node_id: i32,
    metrics: Arc<Metrics>,
) {
    loop {
        {
            let v = view.borrow_and_update();
            metrics.cluster_live_brokers.set(v.brokers.len() as i64);
            metrics.cluster_controller_id.set(i64::from(v.controller_id.unwrap_or(-1)));
            metrics.active_controller_count.set(i64::from(v.controller_id == Some(node_id)));
        }
        if view.changed().await.is_err() {
            return;
        }
    }
}

/// Probes the kernel for kTLS once and applies `floe.ssl.ktls`.
async fn decide_ktls(config: &BrokerConfig) -> Result<bool, RunError> {
    let mode = config.tls.ktls;
    if mode == ktls::KtlsMode::Off {
        tracing::info!(
            "kernel TLS off (floe.ssl.ktls=off): fetches on TLS listeners use the copying path"
        );
        return Ok(false);
    }
    let support = tokio::task::spawn_blocking(ktls::probe)
        .await
        .map_err(|e| RunError::Task(e.to_string()))?;
    let usable = ktls::decide(mode, &support).map_err(RunError::Ktls)?;
    // Said at INFO only where it matters: a broker without a TLS listener has no use for it.
    let tls_listeners = config.listeners.iter().any(|l| l.protocol.uses_tls());
    match &support {
        ktls::KtlsSupport::Unavailable(why) if tls_listeners => {
            tracing::info!(reason = %why, "kernel TLS unavailable: fetches on TLS listeners use the copying path")
        }
        ktls::KtlsSupport::Unavailable(why) => tracing::debug!(reason = %why, "kernel TLS unavailable"),
        ktls::KtlsSupport::Available if tls_listeners => tracing::info!(
            "kernel TLS available: TLS 1.3 sessions are handed to the kernel after the handshake, and their fetches use sendfile"
        ),
        ktls::KtlsSupport::Available => tracing::debug!("kernel TLS available"),
    }
    Ok(usable)
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

/// The transaction coordinator's timers: timed-out transactions aborted and
/// prepared ones retried every `transaction.abort.timed.out.transaction.cleanup.interval.ms`,
/// expired transactional ids removed every `transaction.remove.expired.transaction.cleanup.interval.ms`.
fn transaction_timer(
    txns: Arc<floe_coordinator::transaction::TransactionCoordinators>,
    config: floe_coordinator::transaction::TransactionConfig,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut abort = tokio::time::interval(config.abort_timed_out_interval);
        let mut expire = tokio::time::interval(config.remove_expired_interval);
        abort.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        expire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = abort.tick() => txns.tick(floe_coordinator::clock::wall_ms()).await,
                _ = expire.tick() => {
                    txns.remove_expired(floe_coordinator::clock::wall_ms()).await;
                }
                _ = shutdown.changed() => break,
            }
            if *shutdown.borrow() {
                break;
            }
        }
    })
}
