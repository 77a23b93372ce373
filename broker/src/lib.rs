//! The Floe broker: a Kafka-compatible server over Floe's segment logs.
//!
//! A request travels connection → frame → handler → storage, as in
//! mini-redis: the [`server`] reads frames off sockets, [`handlers`] turn
//! decoded requests into responses against the [`floe_storage::LogManager`],
//! and Fetch responses go back with their record bytes still in segment
//! files, sent with `sendfile(2)` on plaintext connections.
//!
//! # Layout
//! - [`config`]: settings with Kafka's names, from file, environment and flags.
//! - [`raw_config`]: the raw settings map and the errors of reading it (key, value as typed, where).
//! - [`config_reference`]: docs/configuration.md, generated from the settings tables.
//! - [`ports`]: the services that listen, with their settings and flags; every taken port named at once.
//! - [`listeners`]: listener settings (names, security protocols, advertised addresses).
//! - [`security`]: TLS, kernel TLS detection, SASL; what this broker presents to others (floe-client's TLS and SASL).
//! - [`authorizer`]: ACLs (Kafka's model), their store and the per-request checks.
//! - [`session`]: per-connection state handlers see (listener, peer, authentication).
//! - [`broker`]: the shared state handlers read.
//! - [`dynamic_config`]: broker settings changed at run time (AlterConfigs on BROKER), persisted and applied.
//! - [`server`]: accept loop, connections, response transmission (zero-copy).
//! - [`handlers`]: one module per Kafka API, one dispatch table.
//! - [`quota`]: client quotas (byte rates, request time): their store and enforcement.
//! - [`txn_markers`]: transaction markers to the partitions' leaders (this broker's logs, or WriteTxnMarkers).
//! - [`errors`]: storage errors → Kafka error codes, in one place.
//! - [`json_file`]: the small versioned JSON files (ACLs, SCRAM credentials, quotas, dynamic configs), read and written one way.
//! - [`metrics`]: Prometheus metrics and the `/metrics` endpoint.
//! - [`http_server`]: the one HTTP server the metrics endpoint, the Iceberg REST catalog, the Schema Registry and the console run on.
//! - [`cluster_configs`]: in a cluster, the shared settings in etcd (topic configs, dynamic broker configs, ACLs, SCRAM) applied here.
//! - [`coordinator_terms`]: in a cluster, the coordinators follow the leadership of their internal topics.
//! - [`cluster_admin`]: in a cluster, the admin requests that change the metadata store (topics, partitions, leader elections).
//! - [`cluster_topics`]: in a cluster, the metadata store's topics applied to this data directory (created, grown, deleted).
//! - [`cluster_replication`]: in a cluster, replication (`floe_cluster::replication`: the replica manager, the ISR, the replica fetchers) started from this broker's settings; the ISR writer task.
//! - [`iceberg_rest`]: the HTTP server of the read-only Iceberg REST catalog (`floe_tiering::rest` answers; its own thread).
//! - [`schema_registry`]: the HTTP server of the built-in Schema Registry (`floe_schema`'s store and REST answers; its own thread), its access and cluster glue.
//! - [`run`]: startup and orderly shutdown.
//! - [`text`]: words for people (plurals, `unlimited`), shared with the admin CLI.
//!
//! Tiering (the thread, its settings, the table-served reads, `iceberg status`/`maintain`)
//! is `floe_tiering`'s; log maintenance (`floe_storage::maintenance`) is storage's. The broker starts both.

#![warn(missing_debug_implementations)]

pub mod authorizer;
pub mod broker;
pub mod cluster_admin;
pub mod cluster_configs;
pub mod cluster_replication;
pub mod cluster_topics;
pub mod config;
pub mod config_reference;
pub mod coordinator_terms;
pub mod dynamic_config;
pub mod errors;
pub mod handlers;
pub mod http_server;
pub mod iceberg_rest;
pub mod json_file;
pub mod listeners;
pub mod metrics;
pub mod ports;
pub mod quota;
pub mod raw_config;
pub mod run;
pub mod schema_registry;
pub mod security;
pub mod server;
pub mod session;
pub mod text;
pub mod txn_markers;
