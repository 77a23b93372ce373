//! Freshness: the time from a produce acknowledgement to the record being
//! visible in the topic's Iceberg table.
//!
//! A librdkafka producer sends at a fixed rate and notes, per partition, the offset
//! and the moment of each delivery report (the acknowledgement). A poller reads the
//! broker's `floe_iceberg_committed_offset` every `poll` interval: a record whose
//! offset is below its partition's committed offset is in a committed snapshot (the
//! gauge moves only after the catalog commit; see [`crate::tiering`]), and its
//! freshness is the poll's time minus its acknowledgement. The figure is an upper
//! bound by at most one poll interval.
//!
//! The values are raw bytes (one random payload, repeated) or typed events
//! ([`crate::typed_payload`], Avro or Protobuf in the Confluent wire format, each one
//! fresh) for a topic tiered with `floe.iceberg.value.format=schema-registry`. Setting
//! up the broker, the registry and the topic is the scenario's; this module only
//! produces and watches.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use serde::Serialize;

use crate::broker::Broker;
use crate::load::{new_histogram, LatencySummary};
use crate::tiering::committed_offsets;
use crate::typed_payload::{self, ValueKind};

/// What the produced values are.
#[derive(Debug, Clone, Copy)]
pub enum Values {
    /// One random payload of the message size, the same for every record.
    Raw,
    /// Typed events of about the message size, each encoded afresh, framed for the
    /// registered schema `schema_id`.
    Typed {
        /// Avro or Protobuf.
        kind: ValueKind,
        /// The id the broker's registry gave the schema.
        schema_id: i32,
    },
}

/// What one freshness run asks for.
#[derive(Debug, Clone)]
pub struct FreshnessSpec {
    /// The topic (created with tiering on).
    pub topic: String,
    /// Its partitions; messages go round-robin.
    pub partitions: u32,
    /// Payload bytes per message (typed values: about this many).
    pub message_size: usize,
    /// Raw or typed values.
    pub values: Values,
    /// Messages per second.
    pub rate: u64,
    /// Seconds of producing.
    pub duration_s: f64,
    /// How often `/metrics` is read.
    pub poll: Duration,
    /// How long to wait, after the last acknowledgement, for every record to be visible.
    pub settle: Duration,
}

/// What one freshness run measured.
#[derive(Debug, Serialize)]
pub struct Freshness {
    /// Records acknowledged.
    pub acked: u64,
    /// Records seen in the table (should equal `acked`).
    pub visible: u64,
    /// Delivery failures.
    pub errors: u64,
    /// Acknowledgement → visible in the table.
    pub latency: LatencySummary,
    /// `/metrics` reads.
    pub polls: u64,
    /// The histogram behind `latency`, microseconds (for plots).
    #[serde(skip)]
    pub hist: Histogram<u64>,
}

/// Acknowledged records not yet seen in the table: partition → offset → ack time.
type Pending = Mutex<BTreeMap<i32, BTreeMap<i64, Instant>>>;

struct AckContext {
    pending: Arc<Pending>,
    acked: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
}

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                let now = Instant::now();
                // Short critical section shared with the poller; nothing waits under it.
                self.pending
                    .lock()
                    .unwrap()
                    .entry(m.partition())
                    .or_default()
                    .insert(m.offset(), now);
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Produces `spec.rate` messages/s for `spec.duration_s` and measures when each becomes
/// visible in the table, until all are or `spec.settle` has passed after the last ack.
///
/// # Errors
/// The producer cannot be created, or the broker has no metrics endpoint.
pub fn measure(b: &Broker, spec: &FreshnessSpec, bar: &ProgressBar) -> anyhow::Result<Freshness> {
    anyhow::ensure!(
        b.metrics.is_some(),
        "freshness reads Floe's /metrics: it needs a broker started by floe-bench"
    );
    let pending: Arc<Pending> = Arc::default();
    let acked = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let ctx = AckContext { pending: pending.clone(), acked: acked.clone(), errors: errors.clone() };
    let producer: ThreadedProducer<AckContext> = ClientConfig::new()
        .set("bootstrap.servers", &b.bootstrap)
        .set("log_level", "3")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create_with_context(ctx)
        .context("producer")?;
    let done = AtomicBool::new(false);
    let mut hist = new_histogram();
    let mut polls = 0u64;
    let mut visible = 0u64;
    let total = (spec.rate as f64 * spec.duration_s) as u64;
    bar.set_length(total);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let sender = s.spawn(|| {
            let raw: Vec<u8> = (0..spec.message_size).map(|_| fastrand::u8(..)).collect();
            let start = Instant::now();
            for i in 0..total {
                // Encoded before the wait, so the send itself happens on time.
                let typed = match spec.values {
                    Values::Raw => None,
                    Values::Typed { kind, schema_id } => {
                        Some(typed_payload::encode(kind, schema_id, i, spec.message_size))
                    }
                };
                let payload = typed.as_deref().unwrap_or(&raw[..]);
                let due = start + Duration::from_secs_f64(i as f64 / spec.rate.max(1) as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let partition = (i % u64::from(spec.partitions.max(1))) as i32;
                let mut record = BaseRecord::<(), [u8], ()>::to(&spec.topic)
                    .partition(partition)
                    .payload(payload);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                            record = r;
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            }
            producer.flush(Duration::from_secs(60)).ok();
            done.store(true, Ordering::Relaxed);
        });
        let mut last_ack_seen: Option<Instant> = None;
        loop {
            std::thread::sleep(spec.poll);
            let now = Instant::now();
            polls += 1;
            if let Some(committed) = committed_offsets(b, &spec.topic) {
                let mut pending = pending.lock().unwrap();
                for (partition, acks) in pending.iter_mut() {
                    let Some(&next) = committed.get(partition) else { continue };
                    let still_pending = acks.split_off(&next);
                    for (_, acked_at) in std::mem::replace(acks, still_pending) {
                        hist.saturating_record((now - acked_at).as_micros().max(1) as u64);
                        visible += 1;
                    }
                }
            }
            bar.set_position(visible);
            bar.set_message(format!("acked {} visible {visible}", acked.load(Ordering::Relaxed)));
            if done.load(Ordering::Relaxed) {
                let settled_since = *last_ack_seen.get_or_insert(now);
                let all = acked.load(Ordering::Relaxed);
                if visible >= all || now - settled_since > spec.settle {
                    break;
                }
            }
        }
        sender.join().map_err(|_| anyhow::anyhow!("producer thread panicked"))?;
        Ok(())
    })?;
    Ok(Freshness {
        acked: acked.load(Ordering::Relaxed),
        visible,
        errors: errors.load(Ordering::Relaxed),
        latency: LatencySummary::of(&hist),
        polls,
        hist,
    })
}
