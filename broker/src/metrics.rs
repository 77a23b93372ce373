//! Broker metrics and the Prometheus endpoint that serves them.
//!
//! The fetch byte counters are split by the path that served the records
//! (`sendfile-plaintext`, `sendfile-ktls`, `copy-tls`, `copy-plaintext`), so
//! a test or an operator can tell which path a fetch took.

use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes as HttpBytes;
use hyper::{Request, Response, StatusCode};
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The `path` labels of `floe_fetch_bytes_total`: how record bytes left the broker.
pub const FETCH_PATHS: [&str; 5] =
    ["sendfile-plaintext", "sendfile-ktls", "copy-tls", "copy-plaintext", "table-rebuild"];

/// Every metric the broker keeps. Cheap to clone handles, safe to share.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Requests handled, by API name.
    pub requests: IntCounterVec,
    /// Request handling time (decode to response written), by API name.
    pub request_duration: HistogramVec,
    /// Record bytes written to fetch responses, by path (see [`FETCH_PATHS`]).
    pub fetch_bytes: IntCounterVec,
    /// `floe_replication_bytes_out_total{path}`: the part of `fetch_bytes` served to
    /// follower replicas (Kafka's `ReplicationBytesOutPerSec`).
    pub replication_bytes_out: IntCounterVec,
    /// 1 when TLS fetches can use kernel TLS, 0 when they take the copying path.
    pub ktls_enabled: IntGauge,
    /// TLS sessions offered to the kernel, by outcome (`offloaded`, `tls12`,
    /// `ulp_refused`, `failed`, `disabled`).
    pub ktls_sessions: IntCounterVec,
    /// Connections by listener name and security protocol, as accepted.
    pub connections_accepted: IntCounterVec,
    /// Record batch bytes appended by Produce.
    pub produce_bytes: IntCounter,
    /// Records appended by Produce.
    pub produce_records: IntCounter,
    /// Connections currently open.
    pub connections: IntGauge,
    /// Connections the broker closed (bad input, a connection limit, a read deadline), by reason.
    pub connections_rejected: IntCounterVec,
    /// `floe_authorization_denied_total{resource_type}`: requests (or their elements) refused by ACLs.
    pub authorization_denied: IntCounterVec,
    /// Damaged ranges recovery found in a partition's segments and kept
    /// (valid batches follow them; reads step over them), by topic and partition.
    pub log_corrupt_ranges: IntGaugeVec,
    /// 1 once a log directory went offline after an I/O error (Kafka's
    /// `OfflineLogDirectoryCount`, per directory); only a restart clears it.
    pub log_dir_offline: IntGaugeVec,
    /// Live brokers in the cluster view (1 for a broker alone).
    pub cluster_live_brokers: IntGauge,
    /// 1 on the controller, 0 elsewhere (Kafka's `ActiveControllerCount`).
    pub active_controller_count: IntGauge,
    /// The controller's node id as this broker last saw it (-1: none known).
    pub cluster_controller_id: IntGauge,
    /// Replication: leaders, ISR changes, follower lag, the followers' fetches.
    pub replication: floe_cluster::replication::ReplicationMetrics,
    /// Iceberg tiering, per table.
    pub iceberg: floe_tiering::metrics::IcebergMetrics,
    /// The log cleaner (compaction), read from its statistics at every scrape.
    pub cleaner: CleanerMetrics,
    /// `floe_schema_registry_requests_total{route,status}`: Schema Registry requests.
    pub schema_registry_requests: IntCounterVec,
}

/// Log cleaner metrics (Kafka's `kafka.log:type=LogCleaner*`, in Prometheus form).
#[derive(Debug, Clone)]
pub struct CleanerMetrics {
    /// Completed cleans of a log.
    pub runs: IntCounter,
    /// Bytes read by cleans.
    pub bytes_read: IntCounter,
    /// Bytes written by cleans.
    pub bytes_written: IntCounter,
    /// Seconds since any log was last cleaned (-1 before the first clean).
    pub seconds_since_last_run: Gauge,
    /// Dirty bytes over cleanable bytes, by topic and partition (compacted topics).
    pub dirty_ratio: GaugeVec,
    /// Seconds since the partition was last cleaned (-1 before its first clean).
    pub seconds_since_last_clean: GaugeVec,
    stats: Arc<std::sync::OnceLock<Arc<floe_storage::CleanerStats>>>,
}

impl CleanerMetrics {
    fn new() -> Self {
        Self {
            runs: IntCounter::new("floe_log_cleaner_runs_total", "Completed cleans (compactions) of a log").expect("metric"),
            bytes_read: IntCounter::new("floe_log_cleaner_read_bytes_total", "Bytes the log cleaner read").expect("metric"),
            bytes_written: IntCounter::new("floe_log_cleaner_written_bytes_total", "Bytes the log cleaner wrote").expect("metric"),
            seconds_since_last_run: Gauge::new("floe_log_cleaner_seconds_since_last_run", "Seconds since any log was last cleaned; -1 before the first clean").expect("metric"),
            dirty_ratio: GaugeVec::new(Opts::new("floe_log_cleaner_dirty_ratio", "Dirty bytes over cleanable bytes of a compacted partition, as the cleaner last saw it"), &["topic", "partition"]).expect("metric"),
            seconds_since_last_clean: GaugeVec::new(Opts::new("floe_log_cleaner_seconds_since_last_clean", "Seconds since the partition was last cleaned; -1 before its first clean"), &["topic", "partition"]).expect("metric"),
            stats: Arc::default(),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.runs.clone()),
            Box::new(self.bytes_read.clone()),
            Box::new(self.bytes_written.clone()),
            Box::new(self.seconds_since_last_run.clone()),
            Box::new(self.dirty_ratio.clone()),
            Box::new(self.seconds_since_last_clean.clone()),
        ]
    }

    /// Reads the cleaner's statistics at every scrape from now on.
    pub fn observe(&self, stats: Arc<floe_storage::CleanerStats>) {
        let _ = self.stats.set(stats);
    }

    /// Brings the metrics up to the cleaner's statistics.
    fn refresh(&self) {
        let Some(stats) = self.stats.get() else { return };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for (counter, total) in [
            (&self.runs, stats.runs()),
            (&self.bytes_read, stats.bytes_read()),
            (&self.bytes_written, stats.bytes_written()),
        ] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        let since = |ms: i64| if ms > 0 { (now_ms - ms).max(0) as f64 / 1000.0 } else { -1.0 };
        self.seconds_since_last_run.set(since(stats.last_run_ms()));
        self.dirty_ratio.reset();
        self.seconds_since_last_clean.reset();
        for ((topic, partition), state) in stats.partitions() {
            let partition = partition.to_string();
            let labels = [topic.as_str(), partition.as_str()];
            self.dirty_ratio.with_label_values(&labels).set(state.dirty_ratio);
            self.seconds_since_last_clean
                .with_label_values(&labels)
                .set(state.last_clean_ms.map_or(-1.0, since));
        }
    }
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    ///
    /// # Panics
    /// Never in practice: registration only fails on duplicate or malformed
    /// names, which are constants here (a unit test registers them all).
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("floe_requests_total", "Requests handled, by API"),
            &["api"],
        )
        .expect("metric");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "floe_request_duration_seconds",
                "Time from decoded request to written response",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 5.0,
            ]),
            &["api"],
        )
        .expect("metric");
        let fetch_bytes = IntCounterVec::new(
            Opts::new("floe_fetch_bytes_total", "Record bytes served in fetch responses, by path"),
            &["path"],
        )
        .expect("metric");
        let replication_bytes_out = IntCounterVec::new(
            Opts::new(
                "floe_replication_bytes_out_total",
                "Record bytes served in fetch responses to follower replicas, by path (also counted in floe_fetch_bytes_total)",
            ),
            &["path"],
        )
        .expect("metric");
        let ktls_enabled = IntGauge::new(
            "floe_ktls_enabled",
            "1 when fetches on TLS listeners can use kernel TLS (sendfile), 0 when they copy",
        )
        .expect("metric");
        let ktls_sessions = IntCounterVec::new(
            Opts::new(
                "floe_ktls_sessions_total",
                "TLS sessions offered to kernel TLS after the handshake, by outcome: offloaded, tls12 (kept in user space), ulp_refused, failed (connection closed), disabled (after a failure)",
            ),
            &["outcome"],
        )
        .expect("metric");
        let connections_accepted = IntCounterVec::new(
            Opts::new(
                "floe_connections_accepted_total",
                "Connections accepted, by listener and security protocol",
            ),
            &["listener", "protocol"],
        )
        .expect("metric");
        let produce_bytes =
            IntCounter::new("floe_produce_bytes_total", "Record batch bytes appended")
                .expect("metric");
        let produce_records =
            IntCounter::new("floe_produce_records_total", "Records appended").expect("metric");
        let connections =
            IntGauge::new("floe_connections", "Open client connections").expect("metric");
        let connections_rejected = IntCounterVec::new(
            Opts::new(
                "floe_connections_closed_on_error_total",
                "Connections the broker closed: bad input, a limit or a read deadline, by reason",
            ),
            &["reason"],
        )
        .expect("metric");
        let authorization_denied = IntCounterVec::new(
            Opts::new("floe_authorization_denied_total", "Authorization checks refused by the ACLs, by resource type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID)"),
            &["resource_type"],
        )
        .expect("metric");
        let log_corrupt_ranges = IntGaugeVec::new(
            Opts::new(
                "floe_log_corrupt_ranges",
                "Damaged byte ranges found by recovery and kept (later data not truncated); see `floe verify`",
            ),
            &["topic", "partition"],
        )
        .expect("metric");
        let log_dir_offline = IntGaugeVec::new(
            Opts::new("floe_log_dir_offline", "1 when the log directory is offline after an I/O error (KAFKA_STORAGE_ERROR); restart to recover"),
            &["dir"],
        )
        .expect("metric");
        let cluster_live_brokers = IntGauge::new(
            "floe_cluster_live_brokers",
            "Brokers registered in the cluster (1 when the metadata store is local)",
        )
        .expect("metric");
        let active_controller_count = IntGauge::new(
            "floe_active_controller_count",
            "1 when this broker is the cluster's controller (Kafka's ActiveControllerCount)",
        )
        .expect("metric");
        let cluster_controller_id = IntGauge::new(
            "floe_cluster_controller_id",
            "The controller's node id as this broker last saw it; -1 while none is known",
        )
        .expect("metric");
        let replication = floe_cluster::replication::ReplicationMetrics::new();
        let iceberg = floe_tiering::metrics::IcebergMetrics::new();
        let cleaner = CleanerMetrics::new();
        let schema_registry_requests = IntCounterVec::new(
            Opts::new(
                "floe_schema_registry_requests_total",
                "Schema Registry requests, by route and HTTP status",
            ),
            &["route", "status"],
        )
        .expect("metric");
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(request_duration.clone()),
            Box::new(fetch_bytes.clone()),
            Box::new(replication_bytes_out.clone()),
            Box::new(ktls_enabled.clone()),
            Box::new(ktls_sessions.clone()),
            Box::new(connections_accepted.clone()),
            Box::new(produce_bytes.clone()),
            Box::new(produce_records.clone()),
            Box::new(connections.clone()),
            Box::new(connections_rejected.clone()),
            Box::new(authorization_denied.clone()),
            Box::new(log_corrupt_ranges.clone()),
            Box::new(log_dir_offline.clone()),
            Box::new(cluster_live_brokers.clone()),
            Box::new(active_controller_count.clone()),
            Box::new(cluster_controller_id.clone()),
            Box::new(schema_registry_requests.clone()),
        ]
        .into_iter()
        .chain(replication.collectors())
        .chain(iceberg.collectors())
        .chain(cleaner.collectors())
        {
            registry.register(c).expect("unique metric names");
        }
        // Every path appears from the start, so a reader sees 0 rather than nothing.
        for path in FETCH_PATHS {
            fetch_bytes.with_label_values(&[path]);
            replication_bytes_out.with_label_values(&[path]);
        }
        for outcome in ["offloaded", "tls12", "ulp_refused", "failed", "disabled"] {
            ktls_sessions.with_label_values(&[outcome]);
        }
        Self {
            registry,
            requests,
            request_duration,
            fetch_bytes,
            replication_bytes_out,
            ktls_enabled,
            ktls_sessions,
            connections_accepted,
            produce_bytes,
            produce_records,
            connections,
            connections_rejected,
            authorization_denied,
            log_corrupt_ranges,
            log_dir_offline,
            cluster_live_brokers,
            active_controller_count,
            cluster_controller_id,
            replication,
            iceberg,
            cleaner,
            schema_registry_requests,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.cleaner.refresh();
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Serves `GET /metrics` on `listener` (see [`crate::http_server::bind`]) until the future is dropped.
///
/// # Errors
/// The listener cannot join the current runtime.
pub fn serve(
    listener: std::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    let options = crate::http_server::Options { name: "metrics", ..Default::default() };
    crate::http_server::serve(listener, options, move |req, _peer| {
        std::future::ready(respond(&req, &metrics))
    })
}

fn respond(req: &Request<hyper::body::Incoming>, metrics: &Metrics) -> Response<Full<HttpBytes>> {
    let (status, body, content_type) = match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => {
            (StatusCode::OK, metrics.render(), "text/plain; version=0.0.4")
        }
        (&hyper::Method::GET, "/") => {
            (StatusCode::OK, "floe: see /metrics\n".to_string(), "text/plain")
        }
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string(), "text/plain"),
    };
    let mut response = Response::new(Full::new(HttpBytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_register_and_render() {
        let m = Metrics::new();
        m.fetch_bytes.with_label_values(&["sendfile-plaintext"]).inc_by(42);
        m.requests.with_label_values(&["Fetch"]).inc();
        let text = m.render();
        assert!(text.contains("floe_fetch_bytes_total{path=\"sendfile-plaintext\"} 42"), "{text}");
        assert!(text.contains("floe_fetch_bytes_total{path=\"copy-tls\"} 0"), "{text}");
        assert!(text.contains("floe_requests_total{api=\"Fetch\"} 1"), "{text}");
        m.iceberg.record_error("t", "iceberg_load", "first", 1);
        m.iceberg.record_error("t", "iceberg_load", "second", 2);
        let text = m.render();
        assert!(text.contains("floe_iceberg_last_error{error=\"second\",topic=\"t\"} 1"), "{text}");
        assert!(!text.contains("error=\"first\""), "{text}");
        assert!(
            text.contains("floe_iceberg_errors_total{kind=\"iceberg_load\",topic=\"t\"} 2"),
            "{text}"
        );
    }
}
