//! Floe's benchmarks: criterion micro-benchmarks (`benches/`) and `floe-bench`, a
//! harness that measures a running broker the way the OpenMessaging Benchmark does,
//! against any Kafka-compatible bootstrap server.
//!
//! `floe-bench run SCENARIO` starts a `floe` of its own (or drives `--bootstrap`),
//! loads it with librdkafka (the `rdkafka` crate, so the broker is measured, not a
//! client of ours), and writes a Markdown report, a JSON file of every figure and
//! SVG plots. Every run also measures the machine's ceiling (raw `sendfile` into a
//! loopback socket) so results can be quoted as a fraction of it.
//!
//! # Layout
//! - [`workload`]: OMB-style workload files (`benches/workloads/*.toml`).
//! - [`broker`]: the broker under test: a `floe` child process or an external one.
//! - [`cluster`]: etcd and N `floe` brokers in cluster mode, partition state from etcd.
//! - [`procstat`]: CPU seconds and peak RSS of a process from `/proc`.
//! - [`ceiling`]: the machine's ceiling, `sendfile` of a cached file into loopback.
//! - [`load`]: producers and consumers (librdkafka), latency histograms, timelines.
//! - [`fetch_client`]: a fetch-only client over plaintext or TLS (rustls), for `tls`.
//! - [`report`]: the Markdown report, the JSON file, the machine description.
//! - [`plot`]: SVG plots (latency CDFs, throughput over time, values per trial).
//! - [`tiering`]: what the broker's Iceberg tiering did (its metrics, its thread's CPU).
//! - [`freshness`]: produce acknowledgement → row visible in the Iceberg table.
//! - [`typed_payload`]: Avro and Protobuf events in the Confluent wire format, registered
//!   with the broker's Schema Registry, for the typed arms.
//! - [`iceberg_query`]: a tiered table's metadata files, and a DuckDB query's time over it
//!   (a Python script in `benches/scripts/`).
//! - [`transactions`]: idempotent and transactional producers flat out, catch-up reads
//!   with an `isolation.level`, for `transactions`.
//! - [`compaction`]: what the broker's log cleaner did (its metrics, its threads' CPU), a
//!   keyed backlog.
//! - [`rated`]: a fixed-rate acks=all producer whose latency can be cut to any window, and
//!   that says when the first record sent after a moment was acknowledged.
//! - [`scenario`]: the scenarios (`zero-copy`, `tls`, `max-throughput`, `coupling`,
//!   `tiering-cost`, `freshness`, `table-maintenance`, `transactions`, `compaction`, `replication`).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod broker;
pub mod ceiling;
pub mod cluster;
pub mod compaction;
pub mod fetch_client;
pub mod freshness;
pub mod iceberg_query;
pub mod load;
pub mod plot;
pub mod procstat;
pub mod rated;
pub mod report;
pub mod scenario;
pub mod tiering;
pub mod transactions;
pub mod typed_payload;
pub mod workload;
