//! Broker configuration: Kafka's setting names, from four layers.
//!
//! Later layers win: built-in defaults, the TOML file (`--config`), `FLOE_*`
//! environment variables (`FLOE_LOG_SEGMENT_BYTES` is `log.segment.bytes`;
//! a `floe.*` setting is its whole name in upper snake case,
//! `FLOE_ICEBERG_S3_SECRET_ACCESS_KEY` is `floe.iceberg.s3.secret-access-key`),
//! then command-line flags and `--override key=value`. Every layer speaks
//! the same flat `key = value` vocabulary, so a setting has one name
//! everywhere; in TOML both `"log.segment.bytes" = 1` and the dotted-key
//! form `log.segment.bytes = 1` work.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use floe_storage::LogConfig;

pub use crate::raw_config::ConfigError;
use crate::raw_config::{get, parse};

/// Documentation and default of one broker setting.
#[derive(Debug, Clone, Copy)]
pub struct SettingSpec {
    /// Kafka's name for it (or a `floe.`-style name where Kafka has none).
    pub key: &'static str,
    /// The built-in default, as text.
    pub default: &'static str,
    /// One line for the configuration reference.
    pub doc: &'static str,
}

const fn s(key: &'static str, default: &'static str, doc: &'static str) -> SettingSpec {
    SettingSpec { key, default, doc }
}

/// Every broker setting Floe reads. docs/configuration.md is generated from this table (`config_reference`).
pub const SETTINGS: &[SettingSpec] = &[
    s("listeners", "127.0.0.1:9092", "Comma-separated `NAME://HOST:PORT` listeners to bind (a bare `HOST:PORT` is `PLAINTEXT`); port 0 picks a free port."),
    s("advertised.listeners", "", "Comma-separated `NAME://HOST:PORT`: the address Metadata hands to clients connected through listener NAME (a bare `HOST:PORT` is `PLAINTEXT`); defaults to the bound address."),
    s("listener.security.protocol.map", crate::listeners::DEFAULT_PROTOCOL_MAP, "Comma-separated `NAME:PROTOCOL`: each listener's security protocol, `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`."),
    s("ssl.certificate.location", "", "PEM file with the broker's certificate chain (leaf first); required when a listener uses SSL or SASL_SSL."),
    s("ssl.key.location", "", "PEM file with the private key of `ssl.certificate.location` (PKCS#8, PKCS#1 or SEC1; unencrypted)."),
    s("ssl.truststore.location", "", "PEM file of CA certificates that client certificates must chain to (needed when `ssl.client.auth` is not `none`) and, in a cluster whose inter-broker listener uses TLS, that other brokers' certificates must chain to (required then: Kafka would fall back to the JVM's default truststore, Floe has none)."),
    s("ssl.client.auth", "none", "Client certificates on TLS listeners: `none`, `requested` (verified if sent) or `required`."),
    s("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", "TLS versions offered: `TLSv1.2`, `TLSv1.3` or both."),
    s("floe.ssl.ktls", "auto", "Kernel TLS for zero-copy fetch over TLS: `auto` uses it when the kernel has it, `off` never, `on` refuses to start without it."),
    s("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms offered on SASL listeners; `listener.name.NAME.sasl.enabled.mechanisms` overrides it for listener NAME."),
    s("connections.max.reauth.ms", "0", "KIP-368: an authenticated SASL connection must re-authenticate within this long or is closed; 0 disables expiry."),
    s("connection.failed.authentication.delay.ms", "100", "Delay before answering a failed SASL authentication (the connection is then closed)."),
    s("floe.sasl.plain.users.file", "", "File of `user:password` lines for SASL/PLAIN; users not in it are checked against their SCRAM credentials."),
    s("floe.ssl.reload.interval.ms", "0", "Also reload the certificate, key and truststore when their files change, checked this often (0: only on SIGHUP)."),
    s("authorizer.class.name", "", "Turns on ACL authorization: `org.apache.kafka.metadata.authorizer.StandardAuthorizer`, `kafka.security.authorizer.AclAuthorizer` or `floe` (all behave as Kafka's StandardAuthorizer); empty allows every request."),
    s("super.users", "", "Semicolon-separated principals (`User:admin;User:ops`) that bypass ACLs."),
    s("allow.everyone.if.no.acl.found", "false", "With an authorizer on: whether a resource that has no ACL binding at all is open to everyone."),
    s("metrics.listen", "127.0.0.1:9644", "Address of the Prometheus endpoint (`GET /metrics`); empty disables it."),
    s("log.dirs", "./floe-data", "Data directory: partition logs, topic metadata, checkpoints, and (by default) the Iceberg catalog and warehouse. A relative path is made absolute at startup, against the directory Floe was started in, and logged."),
    s("floe.port.offset", "0", "Added to every port Floe binds by default (9092, 9644, 8080, 8081, 8181) and not set otherwise: `--port-offset 10` runs a second broker beside the first on 9102, 9654, 8090, 8091 and 8191."),
    s("node.id", "1", "This broker's id, as reported in Metadata; unique in a cluster."),
    s("floe.metadata.store", "local", "Where the cluster's metadata lives: `local` (this broker alone) or `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]` (a cluster: brokers register in etcd and elect a controller there)."),
    s("broker.rack", "", "This broker's rack, reported in Metadata (rack-aware replica placement uses it)."),
    s("broker.session.timeout.ms", "9000", "With an etcd metadata store: how long etcd keeps this broker registered (and its controller role held) after it last heard from it. Whole seconds count."),
    s("num.partitions", "1", "Partitions of a topic created without a count (auto-created or count -1)."),
    s("auto.create.topics.enable", "true", "Create a topic when Metadata names one that does not exist."),
    s("default.replication.factor", "1", "Replication factor of topics created without one (auto-created, or -1 in CreateTopics). A broker alone holds one replica."),
    s("inter.broker.listener.name", "", "In a cluster: the listener brokers connect to each other on (replica fetchers, transaction markers), by its endpoint in each broker's registration; empty is the first listener. Any protocol: SSL and SASL_SSL need `ssl.truststore.location`, SASL ones `sasl.mechanism.inter.broker.protocol` and a JAAS login."),
    s("ssl.endpoint.identification.algorithm", "https", "Inter-broker TLS: `https` checks that the other broker's certificate names the host connected to (its registered endpoint host); empty checks the chain only."),
    s("sasl.mechanism.inter.broker.protocol", "PLAIN", "Inter-broker SASL: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (Kafka's default, GSSAPI, is not in Floe)."),
    s("sasl.jaas.config", "", "Inter-broker SASL login (secret: never shown), Kafka's form `...LoginModule required username=\"U\" password=\"P\";`; `listener.name.LISTENER.MECHANISM.sasl.jaas.config` (lower case) wins over it."),
    s("replica.lag.time.max.ms", "30000", "In a cluster: a follower that has not caught up with its leader for this long leaves the ISR (and rejoins once it reaches the high watermark)."),
    s("replica.fetch.max.bytes", "1048576", "A follower's fetch: record bytes asked per partition (the first batch comes whole even when larger)."),
    s("replica.fetch.response.max.bytes", "10485760", "A follower's fetch: record bytes asked for the whole response (the first batch comes whole even when larger)."),
    s("replica.fetch.wait.max.ms", "500", "A follower's fetch: how long the leader may hold it waiting for `replica.fetch.min.bytes`."),
    s("replica.fetch.min.bytes", "1", "A follower's fetch: record bytes the leader waits for before answering (up to `replica.fetch.wait.max.ms`)."),
    s("replica.fetch.backoff.ms", "1000", "How long a follower waits before fetching again a partition whose fetch failed, or before reconnecting to its leader."),
    s("offsets.topic.replication.factor", "3", "In a cluster: replicas of `__consumer_offsets`, created on the first FindCoordinator for a group; until that many brokers are live, group lookups answer COORDINATOR_NOT_AVAILABLE."),
    s("offsets.topic.num.partitions", "1", "Partitions of `__consumer_offsets`, used when the topic is created (an existing topic keeps its own count). A group's coordinator is the leader of partition `abs(groupId.hashCode) % partitions`, as in Kafka, so in a cluster more partitions spread the groups over the brokers. Kafka's default is 50; Floe's is 1 because every partition has its own coordinator state, log and writer thread, and a single broker gains nothing from more: raise it for a cluster with many groups."),
    s("offsets.commit.timeout.ms", "5000", "In a cluster: how long an offset commit (or any coordinator write) waits for the in-sync replicas of its internal topic before failing with COORDINATOR_NOT_AVAILABLE."),
    s("transaction.state.log.replication.factor", "3", "In a cluster: replicas of `__transaction_state`, created on the first FindCoordinator for a transactional id (COORDINATOR_NOT_AVAILABLE until that many brokers are live)."),
    s("transaction.state.log.min.isr", "2", "In a cluster: `min.insync.replicas` of `__transaction_state` (capped at its replication factor)."),
    s("transaction.state.log.num.partitions", "1", "Partitions of `__transaction_state`, used when the topic is created (an existing topic keeps its own count). A transactional id's coordinator is the leader of partition `abs(transactionalId.hashCode) % partitions`, as in Kafka. Kafka's default is 50; Floe's is 1 for the same reasons as `offsets.topic.num.partitions`."),
    s("min.insync.replicas", "1", "Default `min.insync.replicas` of topics (also of `__consumer_offsets`): an acks=all write is refused with NOT_ENOUGH_REPLICAS while fewer replicas are in sync. Changeable at run time, for one broker or cluster-wide, as in Kafka."),
    s("unclean.leader.election.enable", "false", "In a cluster: when no in-sync replica of a partition is alive, let the controller elect an out-of-sync one (losing what it lacks) rather than leave the partition offline."),
    s("auto.leader.rebalance.enable", "true", "In a cluster: the controller moves leadership back to preferred replicas (each partition's first replica, once alive and in sync) for brokers that lead too few of the partitions they are preferred for."),
    s("leader.imbalance.check.interval.seconds", "300", "In a cluster: how often the controller checks leadership balance (`auto.leader.rebalance.enable`)."),
    s("leader.imbalance.per.broker.percentage", "10", "In a cluster: the share of a broker's preferred partitions led elsewhere above which the controller moves them back."),
    s("socket.request.max.bytes", "104857600", "Largest request frame accepted; a larger one closes the connection."),
    s("connections.max.idle.ms", "600000", "A connection with no request begun for this long is closed."),
    s("max.connections", "10000", "Most client connections open at once; a connection beyond it is accepted and closed at once. Each takes a file descriptor: the broker raises its soft `RLIMIT_NOFILE` to the hard limit at startup."),
    s("max.connections.per.ip", "2147483647", "Most client connections open at once from one IP address; one beyond it is accepted and closed at once."),
    s("floe.request.read-timeout-ms", "30000", "Once a request's first bytes have arrived, the rest must arrive within this long or the connection is closed (slowloris guard)."),
    s("fetch.zero.copy", "true", "Serve plaintext fetch records with sendfile(2); false copies through user space."),
    s("fetch.max.bytes", "57671680", "Upper bound on the records in one Fetch response, whatever the client asks."),
    s("message.max.bytes", "1048588", "Default `max.message.bytes` of topics: the largest record batch accepted."),
    s("log.segment.bytes", "1073741824", "Default `segment.bytes`: a segment rolls at this size."),
    s("log.roll.ms", "604800000", "Default `segment.ms`: a segment rolls after this age."),
    s("log.roll.hours", "", "Kafka's other spelling of `log.roll.ms`, in hours (`log.roll.ms` wins when both are set)."),
    s("log.index.interval.bytes", "4096", "Default `index.interval.bytes`: bytes of log between offset index entries."),
    s("log.retention.ms", "604800000", "Default `retention.ms`; -1 keeps data forever."),
    s("log.retention.minutes", "", "Kafka's other spelling of `log.retention.ms`, in minutes (`log.retention.ms` wins over it, it wins over `log.retention.hours`)."),
    s("log.retention.hours", "", "Kafka's other spelling of `log.retention.ms`, in hours (`log.retention.ms` and `log.retention.minutes` win over it)."),
    s("log.retention.bytes", "-1", "Default `retention.bytes` per partition; -1 is unlimited."),
    s("log.local.retention.ms", "-2", "Default `local.retention.ms` (KIP-405; shared storage only): how long sealed segments already in the Iceberg table stay on local disk; -2: same as `retention.ms`, -1: forever."),
    s("log.local.retention.bytes", "-2", "Default `local.retention.bytes` (KIP-405; shared storage only): local bytes per partition kept of segments already in the Iceberg table; -2: same as `retention.bytes`, -1: unlimited."),
    s("log.retention.check.interval.ms", "300000", "How often retention (`retention.ms`, `retention.bytes`) and producer-id expiry run; the first pass comes 30 s after start-up, or sooner when this is shorter."),
    s("log.flush.interval.messages", "9223372036854775807", "Default `flush.messages`: fsync after this many messages; 1 fsyncs every append before the ack."),
    s("log.flush.interval.ms", "9223372036854775807", "Default `flush.ms`: fsync when data has been unflushed this long."),
    s("log.flush.scheduler.interval.ms", "1000", "How often `flush.ms` and time-based rolling (`segment.ms`) are checked and the recovery-point and log-start checkpoints written."),
    s("log.message.timestamp.type", "CreateTime", "Default `message.timestamp.type`: CreateTime or LogAppendTime."),
    s("log.cleanup.policy", "delete", "Default `cleanup.policy`: `delete`, `compact` or `compact,delete`."),
    s("producer.id.expiration.ms", "86400000", "Forget a producer id (its sequences, for idempotence) once its last batch is this old and it has no ongoing transaction."),
    s("log.cleaner.enable", "true", "Run the log cleaner (compaction of `cleanup.policy=compact` topics)."),
    s("log.cleaner.threads", "1", "Cleaner threads (OS threads, off the request path)."),
    s("log.cleaner.io.max.bytes.per.second", "1.7976931348623157E308", "Read + write rate of all cleaner threads together."),
    s("log.cleaner.dedupe.buffer.size", "134217728", "Memory of the cleaners' offset maps, shared by the threads."),
    s("log.cleaner.backoff.ms", "15000", "How long a cleaner sleeps when no log is due."),
    s("log.cleaner.min.cleanable.ratio", "0.5", "Default `min.cleanable.dirty.ratio`."),
    s("log.cleaner.min.compaction.lag.ms", "0", "Default `min.compaction.lag.ms`."),
    s("log.cleaner.max.compaction.lag.ms", "9223372036854775807", "Default `max.compaction.lag.ms`."),
    s("log.cleaner.delete.retention.ms", "86400000", "Default `delete.retention.ms`."),
    s("shutdown.timeout.ms", "10000", "How long a clean shutdown waits for in-flight requests."),
    s("group.initial.rebalance.delay.ms", "3000", "How long the first rebalance of an empty group waits for more members (extended while they keep arriving, up to the rebalance timeout)."),
    s("group.min.session.timeout.ms", "6000", "Smallest `session.timeout.ms` a group member may ask for."),
    s("group.max.session.timeout.ms", "1800000", "Largest `session.timeout.ms` a group member may ask for."),
    s("group.consumer.session.timeout.ms", "45000", "Consumer group protocol (KIP-848): a member that has not heartbeated for this long is removed."),
    s("group.consumer.heartbeat.interval.ms", "5000", "Consumer group protocol: the heartbeat interval handed to members."),
    s("group.consumer.max.size", "2147483647", "Consumer group protocol: most members a group may have."),
    s("offsets.retention.minutes", "10080", "Committed offsets of a group are deleted this long after the group became empty (or the commit, if later)."),
    s("offsets.retention.check.interval.ms", "600000", "How often expired committed offsets are looked for."),
    s("transaction.max.timeout.ms", "900000", "The longest `transaction.timeout.ms` a transactional producer may ask for (INVALID_TRANSACTION_TIMEOUT above it)."),
    s("transactional.id.expiration.ms", "604800000", "A transactional id with no transaction open is forgotten after this long without use."),
    s("transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000", "How often transactions open longer than their timeout are looked for and aborted."),
    s("transaction.remove.expired.transaction.cleanup.interval.ms", "3600000", "How often expired transactional ids are looked for."),
    s("floe.iceberg.enabled", "false", "Default of the topic setting `floe.iceberg.enabled`: tier sealed segments of topics to Iceberg tables."),
    s("floe.iceberg.catalog-name", "floe", "Name of the embedded Iceberg SQL catalog (`DATA_DIR/iceberg/catalog.db`, warehouse `DATA_DIR/iceberg/warehouse`); readers must use the same name."),
    s("floe.iceberg.namespace", "kafka", "Iceberg namespace of the tiered tables; each table is named as its topic."),
    s("floe.iceberg.partition-spec", "day(timestamp)", "Default of the topic setting `floe.iceberg.partition-spec`: comma-separated `TRANSFORM(COLUMN)` terms, e.g. `hour(timestamp),identity(partition)`."),
    s("floe.iceberg.target-lag-ms", "60000", "Default of the topic setting `floe.iceberg.target-lag-ms`: the active segment is rolled (and tiered) once its oldest untiered record has waited this long."),
    s("floe.iceberg.retention-guard", "true", "Retention never deletes offsets that are not yet tiered (tiered topics only)."),
    s("floe.iceberg.shared.read-threads", "1", "Threads rebuilding record batches from a shared topic's table for fetches below its local log start offset (KIP-405's `remote.log.reader.threads`)."),
    s("floe.iceberg.shared.read-queue", "64", "Table reads waiting for a thread; beyond, such a fetch answers empty and the client retries (KIP-405's `remote.log.reader.max.pending.tasks`)."),
    s("floe.iceberg.shared.cache-bytes", "268435456", "Rebuilt batches kept in memory for the next fetch of the same offset (a retry after a timed-out wait, another consumer group)."),
    s("floe.iceberg.shared.fetch-max-wait-ms", "500", "How long a fetch waits for a table read before answering that partition empty; the read goes on and fills the cache (KIP-1018's `remote.fetch.max.wait.ms`)."),
    s("floe.iceberg.tick-ms", "5000", "How often the tiering thread looks for sealed segments to tier."),
    s("floe.iceberg.rest-listen", "127.0.0.1:8181", "Address of the read-only Iceberg REST catalog over the tiered tables (`http://HOST:PORT`, routes under `/v1/`); empty disables it."),
    s("floe.console.listen", "127.0.0.1:8080", "Address of the web console (`http://HOST:PORT`): topics, messages, groups and their lag, Iceberg tables, ACLs, users and benchmark reports, as the logged-in user through this broker's own listener; empty disables it."),
    s("floe.console.read-only", "false", "The web console changes nothing: every write (create, produce, seek, ACLs, users...) answers 403."),
    s("floe.console.bench-reports-dir", "", "Directory of `floe-bench` reports (one subdirectory per run, as `floe-bench run ... --out DIR` writes) the web console shows; empty shows none."),
    s("floe.schema.registry.listen", "127.0.0.1:8081", "Address of the built-in Schema Registry (Confluent's REST API): `HOST:PORT` or `http://HOST:PORT`, or `https://HOST:PORT` to serve it with the broker's TLS certificate (`ssl.*`); its schemas are kept in the compacted topic `_schemas`; empty disables it. With a SASL listener it asks for HTTP basic auth; with the authorizer on it applies the broker's ACLs."),
    s("floe.iceberg.orphan-check-interval-ms", "600000", "How often each tiered table is checked for orphan data files (of crashed or aborted attempts; local and S3 warehouses)."),
    s("floe.iceberg.maintenance-interval-ms", "600000", "How often each tiered table is maintained (after a tiering commit): snapshots expired, small files compacted."),
    s("floe.iceberg.snapshot.max-age-ms", "86400000", "Default of the topic setting `floe.iceberg.snapshot.max-age-ms`: snapshots older than this expire, and the files only they reached are deleted."),
    s("floe.iceberg.snapshot.min-to-keep", "1", "Default of the topic setting `floe.iceberg.snapshot.min-to-keep`: expiry keeps at least this many of the most recent snapshots."),
    s("floe.iceberg.target-file-size-bytes", "134217728", "Default of the topic setting `floe.iceberg.target-file-size-bytes` (Iceberg's `write.target-file-size-bytes`): the size tiering and compaction write data files at."),
    s("floe.iceberg.compaction.enabled", "true", "Default of the topic setting `floe.iceberg.compaction.enabled`: table maintenance rewrites a partition's small data files into files of the target size (a `replace` snapshot)."),
    s("floe.iceberg.compaction.min-input-files", "5", "Default of the topic setting `floe.iceberg.compaction.min-input-files`: a partition's small files (below 75% of the target size) are rewritten once there are this many, or once they fill a target-size file."),
    s("floe.iceberg.compaction.max-bytes-per-run", "536870912", "Most data-file bytes one table's compaction rewrites per maintenance run (the rest waits for the next run): the throttle that keeps compaction from starving tiering."),
    s("floe.iceberg.orphan-min-age-ms", "1800000", "Orphan data files younger than this are left alone (an attempt may still be writing them); older ones are deleted."),
    s("floe.iceberg.catalog-type", "sql", "`sql`: the embedded SQLite catalog (or the SQLite database at `floe.iceberg.catalog-uri`); `rest`: an external Iceberg REST catalog at `floe.iceberg.catalog-uri`."),
    s("floe.iceberg.catalog-uri", "", "REST: the catalog's base URI (`http://HOST:PORT[/PATH]` or `https://…`; required). SQL: a `sqlite:PATH` URI; empty is `DATA_DIR/iceberg/catalog.db`."),
    s("floe.iceberg.warehouse", "", "Where data and metadata files go: empty is the local `DATA_DIR/iceberg/warehouse`; `file:///dir` or `s3://bucket/prefix`. REST: passed to the catalog (which may decide)."),
    s("floe.iceberg.rest.credential", "", "REST: OAuth2 client credential `client_id:client_secret`, exchanged for a token at the catalog's `/v1/oauth/tokens` (secret: never shown)."),
    s("floe.iceberg.rest.token", "", "REST: bearer token sent with every catalog request (secret: never shown)."),
    s("floe.iceberg.s3.endpoint", "", "S3 endpoint URL for an S3-compatible store (MinIO, …), e.g. `http://127.0.0.1:9000`; empty is AWS."),
    s("floe.iceberg.s3.region", "", "S3 region; empty leaves it to the S3 client (`AWS_REGION`)."),
    s("floe.iceberg.s3.access-key-id", "", "S3 access key id; empty leaves credentials to the S3 client (`AWS_ACCESS_KEY_ID`, profiles, instance metadata)."),
    s("floe.iceberg.s3.secret-access-key", "", "S3 secret access key (secret: never shown); empty leaves it to the S3 client (`AWS_SECRET_ACCESS_KEY`)."),
    s("floe.iceberg.s3.path-style-access", "false", "Path-style S3 requests (`endpoint/bucket/key`, what MinIO and most S3-compatible stores want) instead of virtual-host style."),
];

/// Settings whose values are secrets: DescribeConfigs reports them as sensitive with no value.
pub const SENSITIVE_SETTINGS: &[&str] = &[
    "floe.iceberg.rest.credential",
    "floe.iceberg.rest.token",
    "floe.iceberg.s3.secret-access-key",
    "sasl.jaas.config",
];

/// Settings holding URIs, which may carry `user:password@`: shown with it masked.
const URI_SETTINGS: &[&str] =
    &["floe.iceberg.catalog-uri", "floe.iceberg.warehouse", "floe.iceberg.s3.endpoint"];

/// Whether `key`'s value must never be shown.
pub fn is_sensitive(key: &str) -> bool {
    // Per-listener JAAS lines (`listener.name.L.M.sasl.jaas.config`) hold passwords too.
    SENSITIVE_SETTINGS.contains(&key) || key.ends_with(".sasl.jaas.config")
}

/// The broker's typed configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The Kafka listeners to bind, with their protocols and advertised addresses.
    pub listeners: Vec<crate::listeners::ListenerSpec>,
    /// TLS settings (`ssl.*`), used by SSL and SASL_SSL listeners.
    pub tls: crate::security::tls::TlsSettings,
    /// SASL settings, used by SASL_PLAINTEXT and SASL_SSL listeners.
    pub sasl: crate::security::sasl::SaslSettings,
    /// Authorization settings (`authorizer.class.name`, `super.users`, ...).
    pub authorizer: crate::authorizer::AuthorizerSettings,
    /// The metrics endpoint, if enabled.
    pub metrics_listen: Option<SocketAddr>,
    /// The data directory.
    pub data_dir: PathBuf,
    /// This broker's node id.
    pub node_id: i32,
    /// `floe.metadata.store`.
    pub metadata_store: floe_cluster::MetadataStoreUrl,
    /// `broker.rack`, if set.
    pub broker_rack: Option<String>,
    /// `broker.session.timeout.ms`.
    pub broker_session_timeout_ms: u64,
    /// Partitions of a topic created without a count.
    pub num_partitions: i32,
    /// Whether Metadata creates unknown topics.
    pub auto_create_topics: bool,
    /// `default.replication.factor`.
    pub default_replication_factor: i32,
    /// `unclean.leader.election.enable`.
    pub unclean_leader_election: bool,
    /// `offsets.topic.replication.factor`.
    pub offsets_topic_replication_factor: i32,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets` when it is created.
    pub offsets_topic_num_partitions: i32,
    /// `transaction.state.log.num.partitions`: partitions of `__transaction_state` when it is created.
    pub transaction_state_log_num_partitions: i32,
    /// `offsets.commit.timeout.ms`.
    pub offsets_commit_timeout_ms: u64,
    /// `transaction.state.log.replication.factor`.
    pub transaction_state_log_replication_factor: i32,
    /// `transaction.state.log.min.isr`.
    pub transaction_state_log_min_isr: i32,
    /// `auto.leader.rebalance.enable`.
    pub auto_leader_rebalance: bool,
    /// `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_s: u64,
    /// `leader.imbalance.per.broker.percentage`.
    pub leader_imbalance_per_broker_percentage: u32,
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: u64,
    /// How this broker connects to the others: `inter.broker.listener.name`
    /// (resolved), `ssl.endpoint.identification.algorithm`,
    /// `sasl.mechanism.inter.broker.protocol` and its JAAS login.
    pub inter_broker: crate::security::inter_broker::InterBrokerSettings,
    /// `replica.fetch.max.bytes`.
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`.
    pub replica_fetch_response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms`.
    pub replica_fetch_wait_max_ms: u32,
    /// `replica.fetch.min.bytes`.
    pub replica_fetch_min_bytes: i32,
    /// `replica.fetch.backoff.ms`.
    pub replica_fetch_backoff_ms: u64,
    /// Largest request frame.
    pub socket_request_max_bytes: usize,
    /// Idle connection timeout.
    pub connections_max_idle_ms: u64,
    /// `max.connections`.
    pub max_connections: usize,
    /// `max.connections.per.ip`.
    pub max_connections_per_ip: usize,
    /// `floe.request.read-timeout-ms`: deadline for the rest of a begun request.
    pub request_read_timeout_ms: u64,
    /// Whether plaintext fetches use sendfile.
    pub fetch_zero_copy: bool,
    /// Broker-wide cap on a Fetch response's record bytes.
    pub fetch_max_bytes: i32,
    /// How often retention and rolling run.
    pub retention_check_interval_ms: u64,
    /// How often `flush.ms` and time-based rolling (`segment.ms`) are checked and the recovery-point and log-start checkpoints written.
    pub flush_scheduler_interval_ms: u64,
    /// How long shutdown waits for connections.
    pub shutdown_timeout_ms: u64,
    /// Defaults for every topic's log.
    pub log_defaults: LogConfig,
    /// `log.cleaner.*`: the log cleaner threads.
    pub cleaner: floe_storage::CleanerConfig,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms`.
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub group_max_session_timeout_ms: i32,
    /// `group.consumer.session.timeout.ms`.
    pub group_consumer_session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms`.
    pub group_consumer_heartbeat_interval_ms: u64,
    /// `group.consumer.max.size`.
    pub group_consumer_max_size: i32,
    /// `offsets.retention.minutes`.
    pub offsets_retention_minutes: u64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: u64,
    /// The transaction coordinator's settings (`transaction.*`, `transactional.id.expiration.ms`).
    pub transactions: floe_coordinator::transaction::TransactionConfig,
    /// Iceberg tiering (`floe.iceberg.*`).
    pub tiering: floe_tiering::settings::TieringSettings,
    /// The read-only Iceberg REST catalog endpoint, if enabled (`floe.iceberg.rest-listen`).
    pub iceberg_rest_listen: Option<SocketAddr>,
    /// The built-in Schema Registry's endpoint, if enabled (`floe.schema.registry.listen`).
    pub schema_registry_listen: Option<SocketAddr>,
    /// The registry serves HTTPS with the broker's certificate (`https://` in its address).
    pub schema_registry_tls: bool,
    /// The web console's endpoint, if enabled (`floe.console.listen`).
    pub console_listen: Option<SocketAddr>,
    /// `floe.console.read-only`: the console refuses every write.
    pub console_read_only: bool,
    /// `floe.console.bench-reports-dir`: benchmark reports the console shows, if set.
    pub console_bench_reports_dir: Option<PathBuf>,
    /// The effective value of every setting, for DescribeConfigs on the broker.
    pub effective: BTreeMap<String, String>,
}

/// Where a raw setting came from, for error messages.
#[derive(Debug, Clone, Copy)]
pub enum Layer {
    /// The TOML file.
    File,
    /// An environment variable.
    Env,
    /// A command-line flag or `--override`.
    CommandLine,
}

impl Layer {
    fn describe(self) -> &'static str {
        match self {
            Layer::File => "the config file",
            Layer::Env => "the environment",
            Layer::CommandLine => "the command line",
        }
    }
}

/// Kafka's other spellings of a duration setting, in the unit they name: the
/// setting is the alias times `factor` ms. As in Kafka, the `.ms` form wins over
/// `.minutes`, which wins over `.hours`, whichever layer set them; a negative
/// value is -1 (unlimited).
pub const DURATION_ALIASES: &[(&str, &str, i64)] = &[
    ("log.retention.minutes", "log.retention.ms", 60_000),
    ("log.retention.hours", "log.retention.ms", 3_600_000),
    ("log.roll.hours", "log.roll.ms", 3_600_000),
];

/// `FLOE_*` variables that are not settings: the `floe` command line's own
/// (`FLOE_BROKERS`, `FLOE_PROFILE`, `FLOE_LOG_FORMAT`) and those of Floe's test and
/// benchmark tools, by prefix. Any other `FLOE_*` variable must name a setting.
const NON_SETTING_VARIABLES: &[&str] = &[
    "FLOE_BROKERS",
    "FLOE_PROFILE",
    "FLOE_LOG_FORMAT",
    "FLOE_BIN",
    "FLOE_BENCH_",
    "FLOE_QUIX_",
    "FLOE_SOAK_",
    "FLOE_FAULT_",
    "FLOE_POWERLOSS_",
    "FLOE_CLUSTER_POWERLOSS_",
    "FLOE_CLUSTER_KILLS",
    "FLOE_SHARED_CRASH_",
    "FLOE_START_TIMEOUT",
    "FLOE_UPDATE_DOCS",
    "FLOE_JEPSEN_",
    "FLOE_TEST_",
];

/// The `FLOE_*` variable that sets `key`: `FLOE_` and the name in upper snake case
/// (`log.segment.bytes` is `FLOE_LOG_SEGMENT_BYTES`; for a `floe.*` setting the
/// `floe.` is not repeated: `floe.iceberg.warehouse` is `FLOE_ICEBERG_WAREHOUSE`).
pub fn env_variable(key: &str) -> String {
    let name = key.strip_prefix("floe.").unwrap_or(key);
    format!("FLOE_{}", name.replace(['.', '-'], "_").to_ascii_uppercase())
}

/// Collects raw settings layer by layer, then builds a [`BrokerConfig`].
#[derive(Debug, Default)]
pub struct ConfigBuilder {
    raw: BTreeMap<String, String>,
    /// Where each setting that is not a default was set (`--override`, `FLOE_X`, the file).
    origins: BTreeMap<String, String>,
}

impl ConfigBuilder {
    /// Starts from the built-in defaults.
    pub fn new() -> Self {
        let raw = SETTINGS.iter().map(|s| (s.key.to_string(), s.default.to_string())).collect();
        Self { raw, origins: BTreeMap::new() }
    }

    /// Sets one key, refusing keys Floe does not know.
    ///
    /// # Errors
    /// [`ConfigError::UnknownKey`].
    pub fn set(
        &mut self,
        key: &str,
        value: impl Into<String>,
        layer: Layer,
    ) -> Result<(), ConfigError> {
        self.set_from(key, value, layer.describe())
    }

    /// Sets one key typed at `origin` (a flag, `--override`, a file, a variable: named in errors),
    /// refusing keys Floe does not know, with the closest known key.
    ///
    /// # Errors
    /// [`ConfigError::UnknownKey`].
    pub fn set_from(
        &mut self,
        key: &str,
        value: impl Into<String>,
        origin: &str,
    ) -> Result<(), ConfigError> {
        let key = canonical_key(key);
        // `listener.name.<name>.<setting>`: Kafka's per-listener form (read for SASL mechanisms).
        let per_listener = key.starts_with("listener.name.") && key.len() > "listener.name.".len();
        if !SETTINGS.iter().any(|s| s.key == key) && !per_listener {
            let suggestion =
                floe_storage::config::did_you_mean(&key, SETTINGS.iter().map(|s| s.key))
                    .map(str::to_string);
            return Err(ConfigError::UnknownKey {
                key,
                source_name: origin.to_string(),
                suggestion,
            });
        }
        self.origins.insert(key.clone(), origin.to_string());
        self.raw.insert(key, value.into());
        Ok(())
    }

    /// Reads a TOML file of settings (flat quoted keys or dotted keys).
    ///
    /// # Errors
    /// [`ConfigError::File`] or an unknown key.
    pub fn load_file(&mut self, path: &std::path::Path) -> Result<(), ConfigError> {
        let shown = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::File { path: shown.clone(), reason: e.to_string() })?;
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::File {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let mut flat = Vec::new();
        flatten_toml("", &toml::Value::Table(table), &mut flat);
        let origin = format!("config file {}", shown.display());
        for (key, value) in flat {
            self.set_from(&key, value, &origin)?;
        }
        Ok(())
    }

    /// Applies `FLOE_*` variables from `vars`. A `FLOE_*` variable that names no
    /// setting is refused (with the closest one), except the `floe` command
    /// line's own and those of Floe's test tools.
    ///
    /// # Errors
    /// [`ConfigError::UnknownVariable`], or an unknown key.
    pub fn load_env(
        &mut self,
        vars: impl Iterator<Item = (String, String)>,
    ) -> Result<(), ConfigError> {
        let mut vars: Vec<(String, String)> =
            vars.filter(|(name, _)| name.starts_with("FLOE_")).collect();
        vars.sort();
        for (name, value) in vars {
            if NON_SETTING_VARIABLES.iter().any(|v| {
                if v.ends_with('_') {
                    name.starts_with(v)
                } else {
                    name == *v
                }
            }) {
                continue;
            }
            let Some(setting) = SETTINGS.iter().find(|s| env_variable(s.key) == name) else {
                let variables: Vec<String> =
                    SETTINGS.iter().map(|s| env_variable(s.key).to_ascii_lowercase()).collect();
                let suggestion =
                    floe_storage::config::did_you_mean(&name, variables.iter().map(String::as_str))
                        .map(|v| {
                            let key = SETTINGS
                                .iter()
                                .find(|s| env_variable(s.key).eq_ignore_ascii_case(v))
                                .map_or("", |s| s.key);
                            format!("{} ({key})", v.to_ascii_uppercase())
                        });
                return Err(ConfigError::UnknownVariable { name, suggestion });
            };
            self.set_from(setting.key, value, &format!("environment variable {name}"))?;
        }
        Ok(())
    }

    /// Parses every setting into a [`BrokerConfig`]. Kafka's other spellings
    /// ([`DURATION_ALIASES`]) and `floe.port.offset` are applied first; every path
    /// is made absolute, against the directory Floe was started in, once, here.
    ///
    /// # Errors
    /// [`ConfigError::Setting`] naming the first bad setting, its value as typed and where it was typed.
    pub fn build(mut self) -> Result<BrokerConfig, ConfigError> {
        let origins = std::mem::take(&mut self.origins);
        let locate = |e: ConfigError| match e {
            ConfigError::InvalidValue { key, value, reason } => {
                let origin = origins
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| "the built-in default".to_string());
                ConfigError::Setting { key, value, origin, reason }
            }
            other => other,
        };
        resolve_duration_aliases(&mut self.raw, &origins).map_err(locate)?;
        apply_port_offset(&mut self.raw, &origins).map_err(locate)?;
        absolute_paths(&mut self.raw).map_err(locate)?;
        self.build_resolved().map_err(locate)
    }

    fn build_resolved(self) -> Result<BrokerConfig, ConfigError> {
        let r = &self.raw;
        let listeners = crate::listeners::parse_listeners(
            get(r, "listeners"),
            get(r, "advertised.listeners"),
            get(r, "listener.security.protocol.map"),
        )?;
        let metrics_listen = match get(r, "metrics.listen").trim() {
            "" => None,
            text => Some(crate::listeners::resolve("metrics.listen", strip_scheme(text))?),
        };
        let tls = crate::security::tls::TlsSettings::from_raw(r)?;
        let sasl = crate::security::sasl::SaslSettings::from_raw(r, &listeners)?;
        let authorizer = crate::authorizer::AuthorizerSettings::from_raw(r)?;
        let metadata_store: floe_cluster::MetadataStoreUrl = parse(r, "floe.metadata.store")?;
        let clustered = !matches!(metadata_store, floe_cluster::MetadataStoreUrl::Local);
        let inter_broker =
            crate::security::inter_broker::InterBrokerSettings::from_raw(r, &listeners, clustered)?;
        let iceberg_rest_listen = match get(r, "floe.iceberg.rest-listen").trim() {
            "" => None,
            text => {
                Some(crate::listeners::resolve("floe.iceberg.rest-listen", strip_scheme(text))?)
            }
        };
        let schema_registry_tls = get(r, "floe.schema.registry.listen")
            .trim()
            .to_ascii_lowercase()
            .starts_with("https://");
        let schema_registry_listen = match get(r, "floe.schema.registry.listen").trim() {
            "" => None,
            text => {
                Some(crate::listeners::resolve("floe.schema.registry.listen", strip_scheme(text))?)
            }
        };
        let console_listen = match get(r, "floe.console.listen").trim() {
            "" => None,
            text => Some(crate::listeners::resolve("floe.console.listen", strip_scheme(text))?),
        };
        let console_bench_reports_dir = Some(get(r, "floe.console.bench-reports-dir").trim())
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        let mut log_overrides = BTreeMap::new();
        for (broker_key, topic_key) in LOG_DEFAULT_KEYS {
            log_overrides.insert(topic_key.to_string(), get(r, broker_key).to_string());
        }
        let mut log_defaults =
            LogConfig::default().with_overrides(&log_overrides).map_err(|e| match e {
                // The topic key's broker setting, with the value as typed.
                floe_storage::StorageError::InvalidConfig { key, reason } => {
                    let broker_key = LOG_DEFAULT_KEYS
                        .iter()
                        .find(|(_, topic_key)| *topic_key == key)
                        .map_or(key.as_str(), |(b, _)| *b);
                    ConfigError::InvalidValue {
                        key: broker_key.to_string(),
                        value: get(r, broker_key).trim().to_string(),
                        reason,
                    }
                }
                other => ConfigError::InvalidValue {
                    key: "log.dirs".into(),
                    value: get(r, "log.dirs").into(),
                    reason: other.to_string(),
                },
            })?;
        log_defaults.producer_id_expiration_ms = parse_positive(r, "producer.id.expiration.ms")?;
        Ok(BrokerConfig {
            listeners,
            tls,
            sasl,
            authorizer,
            metrics_listen,
            data_dir: PathBuf::from(get(r, "log.dirs").trim()),
            node_id: parse(r, "node.id")?,
            metadata_store,
            broker_rack: Some(get(r, "broker.rack").trim())
                .filter(|v| !v.is_empty())
                .map(str::to_string),
            broker_session_timeout_ms: parse_positive(r, "broker.session.timeout.ms")?,
            num_partitions: parse_positive(r, "num.partitions")?,
            auto_create_topics: parse(r, "auto.create.topics.enable")?,
            default_replication_factor: parse_positive(r, "default.replication.factor")?,
            unclean_leader_election: parse(r, "unclean.leader.election.enable")?,
            offsets_topic_replication_factor: parse_positive(
                r,
                "offsets.topic.replication.factor",
            )?,
            offsets_topic_num_partitions: parse_positive(r, "offsets.topic.num.partitions")?,
            transaction_state_log_num_partitions: parse_positive(
                r,
                "transaction.state.log.num.partitions",
            )?,
            offsets_commit_timeout_ms: parse_positive(r, "offsets.commit.timeout.ms")?,
            transaction_state_log_replication_factor: parse_positive(
                r,
                "transaction.state.log.replication.factor",
            )?,
            transaction_state_log_min_isr: parse_positive(r, "transaction.state.log.min.isr")?,
            auto_leader_rebalance: parse(r, "auto.leader.rebalance.enable")?,
            leader_imbalance_check_interval_s: parse_positive(
                r,
                "leader.imbalance.check.interval.seconds",
            )?,
            leader_imbalance_per_broker_percentage: parse(
                r,
                "leader.imbalance.per.broker.percentage",
            )?,
            replica_lag_time_max_ms: parse_positive(r, "replica.lag.time.max.ms")?,
            inter_broker,
            replica_fetch_max_bytes: parse_positive(r, "replica.fetch.max.bytes")?,
            replica_fetch_response_max_bytes: parse_positive(
                r,
                "replica.fetch.response.max.bytes",
            )?,
            replica_fetch_wait_max_ms: parse(r, "replica.fetch.wait.max.ms")?,
            replica_fetch_min_bytes: parse_positive(r, "replica.fetch.min.bytes")?,
            replica_fetch_backoff_ms: parse(r, "replica.fetch.backoff.ms")?,
            socket_request_max_bytes: parse_positive(r, "socket.request.max.bytes")?,
            connections_max_idle_ms: parse_positive(r, "connections.max.idle.ms")?,
            max_connections: parse_positive(r, "max.connections")?,
            max_connections_per_ip: parse_positive(r, "max.connections.per.ip")?,
            request_read_timeout_ms: parse_positive(r, "floe.request.read-timeout-ms")?,
            fetch_zero_copy: parse(r, "fetch.zero.copy")?,
            fetch_max_bytes: parse_positive(r, "fetch.max.bytes")?,
            retention_check_interval_ms: parse_positive(r, "log.retention.check.interval.ms")?,
            flush_scheduler_interval_ms: parse_positive(r, "log.flush.scheduler.interval.ms")?,
            shutdown_timeout_ms: parse(r, "shutdown.timeout.ms")?,
            log_defaults,
            cleaner: floe_storage::CleanerConfig {
                enable: parse(r, "log.cleaner.enable")?,
                threads: parse_positive(r, "log.cleaner.threads")?,
                io_max_bytes_per_second: parse_positive(r, "log.cleaner.io.max.bytes.per.second")?,
                dedupe_buffer_size: parse_positive(r, "log.cleaner.dedupe.buffer.size")?,
                backoff_ms: parse_positive(r, "log.cleaner.backoff.ms")?,
            },
            group_initial_rebalance_delay_ms: parse(r, "group.initial.rebalance.delay.ms")?,
            group_min_session_timeout_ms: parse_positive(r, "group.min.session.timeout.ms")?,
            group_max_session_timeout_ms: parse_positive(r, "group.max.session.timeout.ms")?,
            group_consumer_session_timeout_ms: parse_positive(
                r,
                "group.consumer.session.timeout.ms",
            )?,
            group_consumer_heartbeat_interval_ms: parse_positive(
                r,
                "group.consumer.heartbeat.interval.ms",
            )?,
            group_consumer_max_size: parse_positive(r, "group.consumer.max.size")?,
            offsets_retention_minutes: parse_positive(r, "offsets.retention.minutes")?,
            offsets_retention_check_interval_ms: parse_positive(
                r,
                "offsets.retention.check.interval.ms",
            )?,
            transactions: floe_coordinator::transaction::TransactionConfig {
                max_timeout_ms: parse_positive(r, "transaction.max.timeout.ms")?,
                id_expiration_ms: parse_positive(r, "transactional.id.expiration.ms")?,
                abort_timed_out_interval: std::time::Duration::from_millis(parse_positive(
                    r,
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                )?),
                remove_expired_interval: std::time::Duration::from_millis(parse_positive(
                    r,
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                )?),
            },
            tiering: floe_tiering::settings::TieringSettings {
                enabled_default: parse(r, "floe.iceberg.enabled")?,
                catalog_name: get(r, "floe.iceberg.catalog-name").trim().to_string(),
                namespace: get(r, "floe.iceberg.namespace").trim().to_string(),
                partition_spec: get(r, "floe.iceberg.partition-spec").trim().to_string(),
                target_lag_ms: parse(r, "floe.iceberg.target-lag-ms")?,
                retention_guard: parse(r, "floe.iceberg.retention-guard")?,
                tick_ms: parse_positive(r, "floe.iceberg.tick-ms")?,
                orphan_check_interval_ms: parse_positive(
                    r,
                    "floe.iceberg.orphan-check-interval-ms",
                )?,
                orphan_min_age_ms: parse_positive(r, "floe.iceberg.orphan-min-age-ms")?,
                maintenance_interval_ms: parse_positive(r, "floe.iceberg.maintenance-interval-ms")?,
                snapshot_max_age_ms: parse(r, "floe.iceberg.snapshot.max-age-ms")?,
                snapshot_min_to_keep: parse_positive(r, "floe.iceberg.snapshot.min-to-keep")?,
                target_file_size: parse_positive(r, "floe.iceberg.target-file-size-bytes")?,
                compaction_enabled: parse(r, "floe.iceberg.compaction.enabled")?,
                compaction_min_input_files: parse_positive(
                    r,
                    "floe.iceberg.compaction.min-input-files",
                )?,
                compaction_max_bytes_per_run: parse_positive(
                    r,
                    "floe.iceberg.compaction.max-bytes-per-run",
                )?,
                catalog: tiering_catalog(r)?,
                shared_reads: floe_tiering::settings::SharedReadSettings {
                    threads: parse_positive(r, "floe.iceberg.shared.read-threads")?,
                    queue: parse_positive(r, "floe.iceberg.shared.read-queue")?,
                    cache_bytes: parse(r, "floe.iceberg.shared.cache-bytes")?,
                    fetch_max_wait_ms: parse(r, "floe.iceberg.shared.fetch-max-wait-ms")?,
                },
                retention_check_interval_ms: parse_positive(r, "log.retention.check.interval.ms")?,
            },
            iceberg_rest_listen,
            schema_registry_listen,
            console_listen,
            console_read_only: parse(r, "floe.console.read-only")?,
            console_bench_reports_dir,
            schema_registry_tls,
            // Secrets are masked here, so nothing that shows the configuration can leak them.
            effective: self
                .raw
                .iter()
                .map(|(k, v)| {
                    let shown = if is_sensitive(k) && !v.is_empty() {
                        "****".to_string()
                    } else if URI_SETTINGS.contains(&k.as_str()) {
                        floe_tiering::catalog_config::mask_userinfo(v)
                    } else {
                        v.clone()
                    };
                    (k.clone(), shown)
                })
                .collect(),
        })
    }
}

impl BrokerConfig {
    /// The group coordinator's settings.
    pub fn coordinator_config(&self) -> floe_coordinator::group::CoordinatorConfig {
        use std::time::Duration;
        floe_coordinator::group::CoordinatorConfig {
            group: floe_coordinator::group::group::GroupConfig {
                initial_rebalance_delay: Duration::from_millis(
                    self.group_initial_rebalance_delay_ms,
                ),
                min_session_timeout_ms: self.group_min_session_timeout_ms,
                max_session_timeout_ms: self.group_max_session_timeout_ms,
            },
            offsets_retention: Duration::from_secs(
                self.offsets_retention_minutes.saturating_mul(60),
            ),
            offsets_retention_check_interval: Duration::from_millis(
                self.offsets_retention_check_interval_ms,
            ),
            compaction: Default::default(),
            consumer: floe_coordinator::group::consumer_group::ConsumerGroupConfig {
                session_timeout: Duration::from_millis(self.group_consumer_session_timeout_ms),
                heartbeat_interval: Duration::from_millis(
                    self.group_consumer_heartbeat_interval_ms,
                ),
                max_size: self.group_consumer_max_size as usize,
            },
        }
    }
}

/// `floe.iceberg.catalog-type` and the settings of the catalog and warehouse it needs.
fn tiering_catalog(
    r: &BTreeMap<String, String>,
) -> Result<floe_tiering::settings::CatalogSettings, ConfigError> {
    use floe_tiering::{CatalogType, S3Settings, Secret};
    let invalid = |key: &str, reason: &str| ConfigError::InvalidValue {
        key: key.into(),
        value: get(r, key).into(),
        reason: reason.into(),
    };
    let catalog_type: CatalogType = parse(r, "floe.iceberg.catalog-type")?;
    let uri = get(r, "floe.iceberg.catalog-uri").trim().to_string();
    let warehouse = get(r, "floe.iceberg.warehouse").trim().to_string();
    match catalog_type {
        CatalogType::Rest if uri.is_empty() => {
            return Err(invalid(
                "floe.iceberg.catalog-uri",
                "required when floe.iceberg.catalog-type is rest",
            ));
        }
        CatalogType::Rest if !uri.starts_with("http://") && !uri.starts_with("https://") => {
            return Err(invalid(
                "floe.iceberg.catalog-uri",
                "a REST catalog URI is http(s)://HOST[:PORT][/PATH]",
            ));
        }
        CatalogType::Sql if !uri.is_empty() && !uri.starts_with("sqlite:") => {
            return Err(invalid(
                "floe.iceberg.catalog-uri",
                "the SQL catalog is SQLite: a sqlite: URI",
            ));
        }
        _ => {}
    }
    let local = warehouse.starts_with("file:///");
    let s3 = ["s3://", "s3a://", "s3n://"].iter().any(|p| warehouse.starts_with(p));
    if catalog_type == CatalogType::Sql && !warehouse.is_empty() && !local && !s3 {
        return Err(invalid(
            "floe.iceberg.warehouse",
            "expected a directory (DIR or file:///DIR) or s3://BUCKET/PREFIX",
        ));
    }
    let secret = |key: &str| Secret::new(get(r, key).trim());
    Ok(floe_tiering::settings::CatalogSettings {
        catalog_type,
        uri,
        warehouse,
        s3: S3Settings {
            endpoint: get(r, "floe.iceberg.s3.endpoint").trim().to_string(),
            region: get(r, "floe.iceberg.s3.region").trim().to_string(),
            access_key_id: get(r, "floe.iceberg.s3.access-key-id").trim().to_string(),
            secret_access_key: secret("floe.iceberg.s3.secret-access-key"),
            path_style_access: parse(r, "floe.iceberg.s3.path-style-access")?,
        },
        rest_credential: secret("floe.iceberg.rest.credential"),
        rest_token: secret("floe.iceberg.rest.token"),
    })
}

/// Broker settings that are the defaults of topic settings: (broker key, topic key).
pub const LOG_DEFAULT_KEYS: &[(&str, &str)] = &[
    ("log.segment.bytes", "segment.bytes"),
    ("log.roll.ms", "segment.ms"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("log.retention.ms", "retention.ms"),
    ("log.local.retention.ms", "local.retention.ms"),
    ("log.local.retention.bytes", "local.retention.bytes"),
    ("log.retention.bytes", "retention.bytes"),
    ("log.flush.interval.messages", "flush.messages"),
    ("log.flush.interval.ms", "flush.ms"),
    ("log.message.timestamp.type", "message.timestamp.type"),
    ("log.cleanup.policy", "cleanup.policy"),
    ("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio"),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    ("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    ("message.max.bytes", "max.message.bytes"),
    ("min.insync.replicas", "min.insync.replicas"),
    // Topic-level view of the tiering defaults, so storage's retention hold sees them.
    ("floe.iceberg.enabled", "floe.iceberg.enabled"),
    ("floe.iceberg.retention-guard", "floe.iceberg.retention-guard"),
];

/// Accepts the names operators type for the same thing.
fn canonical_key(key: &str) -> String {
    match key.trim() {
        "listen" | "listener" => "listeners".into(),
        "advertised.listener" => "advertised.listeners".into(),
        "data.dir" | "log.dir" => "log.dirs".into(),
        other => other.to_string(),
    }
}

/// Sets each setting of [`DURATION_ALIASES`] from its other spelling when the
/// setting itself was not given (Kafka's precedence: `.ms`, then `.minutes`, then `.hours`).
fn resolve_duration_aliases(
    raw: &mut BTreeMap<String, String>,
    origins: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    let mut targets: Vec<&str> = DURATION_ALIASES.iter().map(|(_, target, _)| *target).collect();
    targets.dedup();
    for target in targets {
        if origins.contains_key(target) {
            continue;
        }
        // The first alias (in precedence order) that was given.
        let given = DURATION_ALIASES
            .iter()
            .filter(|(_, t, _)| *t == target)
            .find(|(alias, _, _)| !get(raw, alias).trim().is_empty());
        if let Some((alias, _, factor)) = given {
            let units: i64 = parse(raw, alias)?;
            let ms = if units < 0 { -1 } else { units.saturating_mul(*factor) };
            raw.insert(target.to_string(), ms.to_string());
        }
    }
    Ok(())
}

/// `floe.port.offset`: adds N to the port of every service's address ([`crate::ports::KINDS`])
/// left at its default, so a second broker on one machine needs one flag (`--port-offset 10`).
fn apply_port_offset(
    raw: &mut BTreeMap<String, String>,
    origins: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    let offset: u16 = parse(raw, "floe.port.offset")?;
    if offset == 0 {
        return Ok(());
    }
    for key in crate::ports::KINDS.map(|kind| kind.setting) {
        if origins.contains_key(key) {
            continue;
        }
        let default = get(raw, key).to_string();
        let Some((host, port)) =
            default.rsplit_once(':').and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        else {
            continue;
        };
        let Some(moved) = port.checked_add(offset) else {
            return Err(ConfigError::InvalidValue {
                key: "floe.port.offset".into(),
                value: offset.to_string(),
                reason: format!(
                    "{port} + {offset} is not a port; use an offset below {}",
                    u16::MAX - port + 1
                ),
            });
        };
        raw.insert(key.to_string(), format!("{host}:{moved}"));
    }
    Ok(())
}

/// Settings that name a local file or directory: made absolute at startup.
const PATH_SETTINGS: &[&str] = &[
    "log.dirs",
    "floe.console.bench-reports-dir",
    "floe.sasl.plain.users.file",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.truststore.location",
];

/// Makes every local path absolute against the current directory, once: the data
/// directory, files named by settings, a local warehouse (`./wh`, `file://./wh` → `file:///…/wh`)
/// and a SQLite catalog URI. What is stored, logged and handed to Iceberg readers is then
/// the place the user meant, wherever they read it from.
fn absolute_paths(raw: &mut BTreeMap<String, String>) -> Result<(), ConfigError> {
    let absolute = |key: &str, path: &str| {
        std::path::absolute(path).map_err(|e| ConfigError::InvalidValue {
            key: key.into(),
            value: path.into(),
            reason: format!("cannot make it absolute against the current directory: {e}"),
        })
    };
    for key in PATH_SETTINGS {
        let value = get(raw, key).trim().to_string();
        if !value.is_empty() {
            let path = absolute(key, &value)?;
            raw.insert(key.to_string(), path.display().to_string());
        }
    }
    let warehouse = get(raw, "floe.iceberg.warehouse").trim().to_string();
    // A REST catalog may take a warehouse *name*; only a `file:` location is a path there.
    let rest = get(raw, "floe.iceberg.catalog-type").trim().eq_ignore_ascii_case("rest");
    let local =
        local_warehouse_path(&warehouse).filter(|_| !rest || warehouse.starts_with("file:"));
    if let Some(local) = local {
        let path = absolute("floe.iceberg.warehouse", local)?;
        raw.insert("floe.iceberg.warehouse".into(), format!("file://{}", path.display()));
    }
    let uri = get(raw, "floe.iceberg.catalog-uri").trim().to_string();
    if let Some(rest) = uri.strip_prefix("sqlite:") {
        let (path, query) = rest.split_once('?').map_or((rest, None), |(p, q)| (p, Some(q)));
        let path = path.strip_prefix("//").unwrap_or(path);
        if !path.is_empty() && path != ":memory:" && !path.starts_with('/') {
            let path = absolute("floe.iceberg.catalog-uri", path)?;
            let query = query.map(|q| format!("?{q}")).unwrap_or_default();
            raw.insert(
                "floe.iceberg.catalog-uri".into(),
                format!("sqlite:{}{query}", path.display()),
            );
        }
    }
    Ok(())
}

/// The local path a warehouse setting names, absolute or not: `/dir`, `./dir`, `dir`,
/// `file:///dir`, and `file://./dir` or `file://dir` (which Iceberg readers would take
/// as a host `.` or `dir`). `None` for object stores and other schemes.
fn local_warehouse_path(warehouse: &str) -> Option<&str> {
    if warehouse.is_empty() {
        return None;
    }
    if let Some(rest) = warehouse.strip_prefix("file://") {
        return Some(rest);
    }
    (!warehouse.contains("://")).then_some(warehouse)
}

fn parse_positive<T>(raw: &BTreeMap<String, String>, key: &str) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + Default,
    T::Err: std::fmt::Display,
{
    let v: T = parse(raw, key)?;
    if v <= T::default() {
        return Err(ConfigError::InvalidValue {
            key: key.into(),
            value: get(raw, key).into(),
            reason: "expected a whole number greater than 0".into(),
        });
    }
    Ok(v)
}

fn strip_scheme(text: &str) -> &str {
    let text = text.trim();
    text.split_once("://").map(|(_, rest)| rest).unwrap_or(text)
}

fn flatten_toml(prefix: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten_toml(&key, v, out);
            }
        }
        toml::Value::String(s) => out.push((prefix.to_string(), s.clone())),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_build() {
        let c = ConfigBuilder::new().build().unwrap();
        assert_eq!(c.listeners.len(), 1);
        assert_eq!(c.listeners[0].bind, "127.0.0.1:9092".parse().unwrap());
        assert_eq!(c.listeners[0].protocol, crate::listeners::SecurityProtocol::Plaintext);
        assert_eq!(c.data_dir, std::env::current_dir().unwrap().join("floe-data"));
        assert!(c.fetch_zero_copy);
        assert_eq!(c.num_partitions, 1);
        assert_eq!(c.iceberg_rest_listen, Some("127.0.0.1:8181".parse().unwrap()));
        assert_eq!(c.schema_registry_listen, Some("127.0.0.1:8081".parse().unwrap()));
    }

    #[test]
    fn console_listen_can_be_moved_or_disabled() {
        let c = ConfigBuilder::new().build().unwrap();
        assert_eq!(c.console_listen, Some("127.0.0.1:8080".parse().unwrap()));
        assert!(!c.console_read_only);
        assert_eq!(c.console_bench_reports_dir, None);
        let mut b = ConfigBuilder::new();
        b.set("floe.console.listen", "http://127.0.0.1:0", Layer::CommandLine).unwrap();
        b.set("floe.console.read-only", "true", Layer::CommandLine).unwrap();
        b.set("floe.console.bench-reports-dir", "/srv/bench", Layer::CommandLine).unwrap();
        let c = b.build().unwrap();
        assert_eq!(c.console_listen, Some("127.0.0.1:0".parse().unwrap()));
        assert!(c.console_read_only);
        assert_eq!(c.console_bench_reports_dir, Some(PathBuf::from("/srv/bench")));
        let mut b = ConfigBuilder::new();
        b.set("floe.console.listen", "", Layer::CommandLine).unwrap();
        assert_eq!(b.build().unwrap().console_listen, None);
        let mut b = ConfigBuilder::new();
        b.set("floe.console.listen", "nowhere", Layer::CommandLine).unwrap();
        assert!(
            matches!(b.build(), Err(ConfigError::Setting { key, .. }) if key == "floe.console.listen")
        );
    }

    #[test]
    fn iceberg_rest_listen_can_be_moved_or_disabled() {
        let mut b = ConfigBuilder::new();
        b.set("floe.iceberg.rest-listen", "127.0.0.1:0", Layer::CommandLine).unwrap();
        assert_eq!(b.build().unwrap().iceberg_rest_listen, Some("127.0.0.1:0".parse().unwrap()));
        let mut b = ConfigBuilder::new();
        b.set("floe.iceberg.rest-listen", "", Layer::CommandLine).unwrap();
        assert_eq!(b.build().unwrap().iceberg_rest_listen, None);
        let mut b = ConfigBuilder::new();
        b.set("floe.iceberg.rest-listen", "nowhere", Layer::CommandLine).unwrap();
        assert!(
            matches!(b.build(), Err(ConfigError::Setting { key, .. }) if key == "floe.iceberg.rest-listen")
        );
    }

    #[test]
    fn layers_override_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("floe.toml");
        std::fs::write(
            &file,
            "log.segment.bytes = 1000\nnum.partitions = 3\n\"fetch.zero.copy\" = false\n",
        )
        .unwrap();
        let mut b = ConfigBuilder::new();
        b.load_file(&file).unwrap();
        b.load_env(
            [
                ("FLOE_NUM_PARTITIONS".to_string(), "5".to_string()),
                ("FLOE_BIN".to_string(), "x".to_string()),
            ]
            .into_iter(),
        )
        .unwrap();
        b.set("listen", "PLAINTEXT://127.0.0.1:0", Layer::CommandLine).unwrap();
        let c = b.build().unwrap();
        assert_eq!(c.num_partitions, 5);
        assert!(!c.fetch_zero_copy);
        assert_eq!(c.listeners[0].bind.port(), 0);
        assert_eq!(c.effective["log.segment.bytes"], "1000");
    }

    #[test]
    fn iceberg_catalog_settings() {
        use floe_tiering::CatalogType;
        let c = ConfigBuilder::new().build().unwrap();
        assert_eq!(c.tiering.catalog.catalog_type, CatalogType::Sql);
        let mut b = ConfigBuilder::new();
        b.load_env(
            [
                ("FLOE_ICEBERG_S3_SECRET_ACCESS_KEY".to_string(), "from-env".to_string()),
                ("FLOE_ICEBERG_S3_PATH_STYLE_ACCESS".to_string(), "true".to_string()),
            ]
            .into_iter(),
        )
        .unwrap();
        b.set("floe.iceberg.warehouse", "s3://bucket/wh", Layer::CommandLine).unwrap();
        let c = b.build().unwrap();
        assert_eq!(c.tiering.catalog.s3.secret_access_key.expose(), "from-env");
        assert!(c.tiering.catalog.s3.path_style_access);
        assert_eq!(c.tiering.catalog.warehouse, "s3://bucket/wh");
        assert!(!format!("{c:?}").contains("from-env"), "secrets never print");
        let mut b = ConfigBuilder::new();
        b.set("floe.iceberg.catalog-type", "rest", Layer::CommandLine).unwrap();
        b.set(
            "floe.iceberg.catalog-uri",
            "https://bob:hunter2@cat.example/api",
            Layer::CommandLine,
        )
        .unwrap();
        let c = b.build().unwrap();
        assert!(!format!("{c:?}").contains("hunter2"), "nor passwords in URIs");
        assert_eq!(c.effective["floe.iceberg.catalog-uri"], "https://****@cat.example/api");
        assert!(
            is_sensitive("floe.iceberg.s3.secret-access-key")
                && !is_sensitive("floe.iceberg.s3.endpoint")
        );
        for (key, value) in [
            ("floe.iceberg.catalog-type", "hive"),
            ("floe.iceberg.warehouse", "gs://bucket"),
            ("floe.iceberg.catalog-uri", "postgres://db"),
            ("floe.iceberg.s3.path-style-access", "maybe"),
        ] {
            let mut b = ConfigBuilder::new();
            b.set(key, value, Layer::CommandLine).unwrap();
            assert!(
                matches!(b.build(), Err(ConfigError::Setting { key: k, .. }) if k == key),
                "{key}={value}"
            );
        }
        let mut b = ConfigBuilder::new();
        b.set("floe.iceberg.catalog-type", "rest", Layer::CommandLine).unwrap();
        assert!(
            matches!(b.build(), Err(ConfigError::Setting { key, .. }) if key == "floe.iceberg.catalog-uri")
        );
        for (uri, ok) in [
            ("http://127.0.0.1:8181", true),
            ("https://cat.example/api", true),
            ("thrift://hms:9083", false),
        ] {
            let mut b = ConfigBuilder::new();
            b.set("floe.iceberg.catalog-type", "rest", Layer::CommandLine).unwrap();
            b.set("floe.iceberg.catalog-uri", uri, Layer::CommandLine).unwrap();
            assert_eq!(b.build().is_ok(), ok, "{uri}");
        }
    }

    /// The SASL_SSL example of docs/cluster.md ("Securing the inter-broker listener") builds.
    #[test]
    fn the_documented_inter_broker_example_builds_and_hides_its_password() {
        let docs = include_str!("../../docs/cluster.md");
        let start = docs.find("# broker1.toml").expect("example in docs/cluster.md");
        let toml = &docs[start..start + docs[start..].find("```").expect("end of example")];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker1.toml");
        std::fs::write(&path, toml).unwrap();
        let mut b = ConfigBuilder::new();
        b.load_file(&path).unwrap();
        b.set("floe.metadata.store", "etcd://127.0.0.1:2379", Layer::CommandLine).unwrap();
        let c = b.build().unwrap();
        let ib = &c.inter_broker;
        assert_eq!(
            (ib.listener.as_str(), ib.protocol, ib.verify_hostname),
            ("SASL_SSL", crate::listeners::SecurityProtocol::SaslSsl, true)
        );
        assert_eq!(ib.mechanism.name(), "SCRAM-SHA-512");
        assert_eq!(
            ib.credentials.as_ref().map(|c| (c.username.as_str(), c.password.as_str())),
            Some(("broker", "broker-secret"))
        );
        assert_eq!(c.effective["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"], "****");
        assert!(!format!("{c:?}").contains("broker-secret"), "the password never prints");
    }

    #[test]
    fn unknown_and_invalid_settings_are_refused() {
        let mut b = ConfigBuilder::new();
        assert!(matches!(
            b.set("log.segmnt.bytes", "1", Layer::CommandLine),
            Err(ConfigError::UnknownKey { .. })
        ));
        b.set("num.partitions", "zero", Layer::CommandLine).unwrap();
        assert!(
            matches!(b.build(), Err(ConfigError::Setting { key, .. }) if key == "num.partitions")
        );
    }

    /// Every refusal names the key and the value as typed, where they were typed, and what is allowed.
    #[test]
    fn errors_name_key_value_origin_and_what_is_allowed() {
        let error = |key: &str, value: &str, origin: &str| {
            let mut b = ConfigBuilder::new();
            b.set_from(key, value, origin).unwrap();
            b.build().unwrap_err().to_string()
        };
        assert_eq!(
            error("log.segment.bytes", "abc", "--override"),
            "invalid value `abc` for `log.segment.bytes` (from --override): expected a whole number from 14 to 2147483647"
        );
        assert_eq!(
            error("num.partitions", "0", "environment variable FLOE_NUM_PARTITIONS"),
            "invalid value `0` for `num.partitions` (from environment variable FLOE_NUM_PARTITIONS): expected a whole number greater than 0"
        );
        assert_eq!(
            error("auto.create.topics.enable", "yes", "config file /etc/floe.toml"),
            "invalid value `yes` for `auto.create.topics.enable` (from config file /etc/floe.toml): expected true or false"
        );
        // A log default refused by the topic rules names the broker setting, not the topic key.
        let text = error("log.segment.bytes", "10", "--override");
        assert!(
            text.starts_with("invalid value `10` for `log.segment.bytes` (from --override): "),
            "{text}"
        );
        let text = ConfigBuilder::new()
            .set_from("log.segmnt.bytes", "1", "--override")
            .unwrap_err()
            .to_string();
        assert_eq!(
            text,
            "unknown setting `log.segmnt.bytes` (from --override). Did you mean `log.segment.bytes`? Every setting is listed in docs/configuration.md."
        );
        // Floe's own keys are checked like Kafka's.
        let e = ConfigBuilder::new()
            .set_from("floe.iceberg.enabledd", "true", "--override")
            .unwrap_err();
        assert!(
            matches!(&e, ConfigError::UnknownKey { suggestion: Some(s), .. } if s == "floe.iceberg.enabled"),
            "{e}"
        );
    }

    #[test]
    fn kafkas_other_spellings_of_durations_work_as_in_kafka() {
        let retention = |pairs: &[(&str, &str)]| {
            let mut b = ConfigBuilder::new();
            for (k, v) in pairs {
                b.set_from(k, *v, "test").unwrap();
            }
            b.build().unwrap().log_defaults.retention_ms
        };
        assert_eq!(retention(&[]), 604_800_000);
        assert_eq!(retention(&[("log.retention.hours", "1")]), 3_600_000);
        assert_eq!(
            retention(&[("log.retention.minutes", "2"), ("log.retention.hours", "1")]),
            120_000
        );
        assert_eq!(retention(&[("log.retention.ms", "5"), ("log.retention.minutes", "2")]), 5);
        assert_eq!(retention(&[("log.retention.hours", "-1")]), -1);
        let mut b = ConfigBuilder::new();
        b.set_from("log.roll.hours", "2", "test").unwrap();
        assert_eq!(b.build().unwrap().log_defaults.segment_ms, 7_200_000);
        let mut b = ConfigBuilder::new();
        b.set_from("log.retention.hours", "a week", "flag").unwrap();
        assert_eq!(
            b.build().unwrap_err().to_string(),
            "invalid value `a week` for `log.retention.hours` (from flag): expected a whole number"
        );
    }

    #[test]
    fn floe_variables_must_name_a_setting() {
        let vars = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
                .into_iter()
        };
        let mut b = ConfigBuilder::new();
        let e = b.load_env(vars(&[("FLOE_LOG_SEGMENT_BYTE", "5")])).unwrap_err().to_string();
        assert!(e.starts_with("environment variable FLOE_LOG_SEGMENT_BYTE matches no setting. Did you mean FLOE_LOG_SEGMENT_BYTES (log.segment.bytes)?"), "{e}");
        // The command line's and the test tools' own variables are not settings.
        let mut b = ConfigBuilder::new();
        b.load_env(vars(&[
            ("FLOE_BIN", "x"),
            ("FLOE_BROKERS", "h:1"),
            ("FLOE_SOAK_SECONDS", "3"),
            ("PATH", "/bin"),
        ]))
        .unwrap();
        let mut b = ConfigBuilder::new();
        b.load_env(vars(&[
            ("FLOE_ICEBERG_WAREHOUSE", "s3://b/w"),
            ("FLOE_LOG_RETENTION_HOURS", "1"),
        ]))
        .unwrap();
        let c = b.build().unwrap();
        assert_eq!(
            (c.tiering.catalog.warehouse.as_str(), c.log_defaults.retention_ms),
            ("s3://b/w", 3_600_000)
        );
        let mut b = ConfigBuilder::new();
        b.load_env(vars(&[("FLOE_NUM_PARTITIONS", "x")])).unwrap();
        assert!(b
            .build()
            .unwrap_err()
            .to_string()
            .contains("(from environment variable FLOE_NUM_PARTITIONS)"));
    }

    #[test]
    fn paths_are_absolute_once_derived() {
        let cwd = std::env::current_dir().unwrap();
        let mut b = ConfigBuilder::new();
        b.set_from("log.dirs", "./data", "flag --data-dir").unwrap();
        b.set_from("floe.iceberg.warehouse", "file://./wh", "test").unwrap();
        b.set_from("floe.iceberg.catalog-uri", "sqlite:cat.db?mode=rwc", "test").unwrap();
        let c = b.build().unwrap();
        assert_eq!(c.data_dir, cwd.join("data"));
        assert_eq!(c.tiering.catalog.warehouse, format!("file://{}", cwd.join("wh").display()));
        assert_eq!(
            c.tiering.catalog.uri,
            format!("sqlite:{}?mode=rwc", cwd.join("cat.db").display())
        );
        // The embedded catalog and warehouse under the default data directory.
        let c = ConfigBuilder::new().build().unwrap();
        let catalog = c.tiering.catalog.catalog_config(&c.data_dir, "floe");
        assert_eq!(
            catalog.warehouse,
            format!("file://{}", cwd.join("floe-data/iceberg/warehouse").display())
        );
        assert!(!catalog.warehouse.contains("/./"));
        // A REST catalog's warehouse may be a name, kept as it is.
        let mut b = ConfigBuilder::new();
        b.set_from("floe.iceberg.catalog-type", "rest", "test").unwrap();
        b.set_from("floe.iceberg.catalog-uri", "http://127.0.0.1:8181", "test").unwrap();
        b.set_from("floe.iceberg.warehouse", "analytics", "test").unwrap();
        assert_eq!(b.build().unwrap().tiering.catalog.warehouse, "analytics");
    }
}

#[cfg(test)]
mod reference_tests {
    /// docs/configuration.md is generated from SETTINGS (crate::config_reference), so it
    /// cannot rot silently; the README's settings it names must exist.
    #[test]
    fn readme_names_only_real_settings() {
        let readme = include_str!("../../README.md");
        let table = readme.split("<!-- settings-table -->").nth(1).unwrap_or_default();
        let rows =
            table.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
        let keys: Vec<&str> =
            rows.filter_map(|l| l.strip_prefix("| `")?.split('`').next()).collect();
        assert!(
            keys.len() >= 10,
            "the README's settings table (after <!-- settings-table -->) has {} rows",
            keys.len()
        );
        for key in keys {
            assert!(
                super::SETTINGS.iter().any(|s| s.key == key),
                "README names `{key}`, not a broker setting"
            );
        }
    }
}
