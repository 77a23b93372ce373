//! What a broker's log cleaner did, read from outside (Floe's `floe_log_cleaner_*`
//! metrics and the CPU time of its `floe-cleaner-N` threads from `/proc`), and a keyed
//! backlog for a compacted topic. The scenario's latency producer is
//! [`crate::rated::RatedProducer`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::ProgressBar;
use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use serde::Serialize;

use crate::broker::{parse_samples, Broker};
use crate::load::client_config;
use crate::procstat;

/// The name prefix of Floe's cleaner threads (`floe-cleaner-{i}`, `storage/src/log_cleaner.rs`).
pub const CLEANER_THREAD: &str = "floe-cleaner";

/// The cleaner's counters at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CleanerCounters {
    /// `floe_log_cleaner_runs_total`.
    pub runs: f64,
    /// `floe_log_cleaner_read_bytes_total`.
    pub bytes_read: f64,
    /// `floe_log_cleaner_written_bytes_total`.
    pub bytes_written: f64,
    /// CPU seconds of the live `floe-cleaner-*` threads (`None`: no pid, or no such thread).
    pub thread_cpu_s: Option<f64>,
    /// How many `floe-cleaner-*` threads `/proc` showed.
    pub threads: usize,
}

impl CleanerCounters {
    /// Reads the counters (`None` without a metrics endpoint).
    pub fn read(b: &Broker) -> Option<CleanerCounters> {
        let text = b.metrics_text()?;
        let one = |name: &str| parse_samples(&text, name).first().map_or(0.0, |(_, v)| *v);
        let threads = b.pid.and_then(|p| procstat::named_threads_cpu(p, CLEANER_THREAD).ok());
        Some(CleanerCounters {
            runs: one("floe_log_cleaner_runs_total"),
            bytes_read: one("floe_log_cleaner_read_bytes_total"),
            bytes_written: one("floe_log_cleaner_written_bytes_total"),
            thread_cpu_s: threads.filter(|(n, _)| *n > 0).map(|(_, s)| s),
            threads: threads.map_or(0, |(n, _)| n),
        })
    }

    /// What happened between `self` (earlier) and `later`.
    pub fn delta(&self, later: &CleanerCounters) -> CleanerCounters {
        CleanerCounters {
            runs: later.runs - self.runs,
            bytes_read: later.bytes_read - self.bytes_read,
            bytes_written: later.bytes_written - self.bytes_written,
            thread_cpu_s: self.thread_cpu_s.zip(later.thread_cpu_s).map(|(a, z)| z - a),
            threads: later.threads,
        }
    }
}

/// The cleaner's view of one partition: (dirty ratio, seconds since its last clean, −1
/// before the first), from `floe_log_cleaner_dirty_ratio` and
/// `floe_log_cleaner_seconds_since_last_clean`. Partitions not seen yet are absent.
pub fn partition_states(b: &Broker, topic: &str) -> Option<BTreeMap<i32, (f64, f64)>> {
    let text = b.metrics_text()?;
    let of = |name: &str| -> BTreeMap<i32, f64> {
        parse_samples(&text, name)
            .into_iter()
            .filter(|(l, _)| l.get("topic").is_some_and(|t| t == topic))
            .filter_map(|(l, v)| Some((l.get("partition")?.parse().ok()?, v)))
            .collect()
    };
    let ratio = of("floe_log_cleaner_dirty_ratio");
    let since = of("floe_log_cleaner_seconds_since_last_clean");
    Some(ratio.into_iter().map(|(p, r)| (p, (r, since.get(&p).copied().unwrap_or(-1.0)))).collect())
}

/// Bytes of `.log` files and their count in a partition directory.
pub fn log_files(dir: &std::path::Path) -> (u64, usize) {
    let mut bytes = 0;
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().ends_with(".log") {
            bytes += e.metadata().map_or(0, |m| m.len());
            n += 1;
        }
    }
    (bytes, n)
}

#[derive(Debug, Default)]
struct Counting {
    acked: AtomicU64,
    errors: AtomicU64,
}

struct CountingCtx(Arc<Counting>);

impl ClientContext for CountingCtx {}

impl ProducerContext for CountingCtx {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.0.acked.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.0.errors.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// What writing the keyed backlog did.
#[derive(Debug, Clone, Serialize)]
pub struct KeyedBacklog {
    /// Distinct keys.
    pub keys: u64,
    /// Versions written of each key.
    pub versions: u32,
    /// Records acknowledged.
    pub records: u64,
    /// Value bytes acknowledged.
    pub value_bytes: u64,
    /// Records that failed.
    pub errors: u64,
    /// Seconds to write and flush.
    pub seconds: f64,
    /// Value MB/s.
    pub mb_per_s: f64,
}

/// Writes `versions` rounds of `keys` keys (`key-00000042`) with `value_size`-byte values
/// (half random) to `topic`: round 0 of every key, then round 1, … so every key's latest
/// version is in the last round.
///
/// # Errors
/// Client creation or a flush that does not finish in 120 s.
pub fn produce_keyed(
    bootstrap: &str,
    topic: &str,
    keys: u64,
    versions: u32,
    value_size: usize,
    bar: &ProgressBar,
) -> anyhow::Result<KeyedBacklog> {
    let counting = Arc::new(Counting::default());
    let p: ThreadedProducer<CountingCtx> = client_config(bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("compression.type", "none")
        .set("batch.size", "1048576")
        .set("linger.ms", "5")
        .set("queue.buffering.max.kbytes", "262144")
        .create_with_context(CountingCtx(Arc::clone(&counting)))
        .context("keyed producer")?;
    let templates: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            let mut v = vec![0u8; value_size];
            fastrand::fill(&mut v[..value_size / 2]);
            v
        })
        .collect();
    let total = keys * u64::from(versions);
    bar.set_length(total * value_size as u64);
    let start = Instant::now();
    let mut n = 0u64;
    for _version in 0..versions {
        for k in 0..keys {
            let key = format!("key-{k:08}");
            let value = &templates[(n % 64) as usize];
            let mut record =
                BaseRecord::<str, [u8], ()>::to(topic).key(key.as_str()).payload(value.as_slice());
            loop {
                match p.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    Err((e, _)) => anyhow::bail!("keyed backlog: send failed: {e}"),
                }
            }
            n += 1;
            if n.is_multiple_of(1024) {
                let acked = counting.acked.load(Ordering::Relaxed);
                bar.set_position(acked * value_size as u64);
                bar.set_message(format!(
                    "{:.1} MB/s",
                    acked as f64 * value_size as f64 / 1e6 / start.elapsed().as_secs_f64()
                ));
            }
        }
    }
    p.flush(Duration::from_secs(120)).context("keyed backlog: flush")?;
    let seconds = start.elapsed().as_secs_f64();
    let records = counting.acked.load(Ordering::Relaxed);
    bar.set_position(records * value_size as u64);
    let value_bytes = records * value_size as u64;
    Ok(KeyedBacklog {
        keys,
        versions,
        records,
        value_bytes,
        errors: counting.errors.load(Ordering::Relaxed),
        seconds,
        mb_per_s: value_bytes as f64 / 1e6 / seconds,
    })
}
