//! Load from librdkafka: producer threads at a set rate (or flat out), consumers that
//! tail the topics or catch up on a backlog, latency histograms and a timeline.
//!
//! Every payload starts with its send time (microseconds since the run's epoch, an
//! `Instant` shared by producers and consumers in this process, little endian u64);
//! consumers subtract it from their receive time for the end-to-end latency. Publish
//! latency runs from the `send` call to the delivery report, as in OMB (measured from
//! the actual send, not the intended one: at a fixed rate that falls behind, queueing
//! in front of `send` is not counted).
//!
//! Consumers assign partitions explicitly (no group), so runs do not wait on group
//! rebalances and work against any broker.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::workload::Workload;

/// Latency histograms hold microseconds, 3 significant figures, up to 10 minutes.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// A latency histogram's summary, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

impl LatencySummary {
    /// Summarises a histogram of microseconds.
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// Throughput in one interval of the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the load started (end of the interval).
    pub t_s: f64,
    /// Acknowledged messages per second.
    pub publish_msg_per_s: f64,
    /// Acknowledged payload MB/s.
    pub publish_mb_per_s: f64,
    /// Consumed payload MB/s.
    pub consume_mb_per_s: f64,
}

/// What a [`run`] measured (over the measured window, after warm-up).
#[derive(Debug, Serialize)]
pub struct LoadResult {
    /// Target rate, messages/s (0 = flat out).
    pub target_rate: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Messages acknowledged in the window.
    pub published_messages: u64,
    /// Acknowledged messages/s.
    pub publish_msg_per_s: f64,
    /// Acknowledged payload MB/s (10^6 bytes).
    pub publish_mb_per_s: f64,
    /// Messages consumed in the window.
    pub consumed_messages: u64,
    /// Consumed payload MB/s.
    pub consume_mb_per_s: f64,
    /// Messages that failed to send or deliver.
    pub errors: u64,
    /// Publish latency.
    pub publish_latency: LatencySummary,
    /// End-to-end latency.
    pub e2e_latency: LatencySummary,
    /// Throughput over time (whole run, warm-up included).
    pub timeline: Vec<Sample>,
    /// The histograms behind the summaries (for plots; not serialised).
    #[serde(skip)]
    pub publish_hist: Histogram<u64>,
    /// See `publish_hist`.
    #[serde(skip)]
    pub e2e_hist: Histogram<u64>,
}

/// Counters shared by the threads of one run.
#[derive(Debug)]
struct Shared {
    epoch: Instant,
    recording: AtomicBool,
    stop_producers: AtomicBool,
    stop_consumers: AtomicBool,
    acked: AtomicU64,
    acked_bytes: AtomicU64,
    consumed: AtomicU64,
    consumed_bytes: AtomicU64,
    errors: AtomicU64,
    publish_hist: Mutex<Histogram<u64>>,
    e2e_hist: Mutex<Histogram<u64>>,
}

impl Shared {
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }
}

/// Producer context: records each delivery report. Called on the producer's poll
/// thread only, so the histogram lock is uncontended (one short section, no waiting).
struct Ctx {
    shared: Arc<Shared>,
    local: Mutex<Histogram<u64>>,
}

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_us: usize) {
        match result {
            Ok(m) => {
                let bytes = m.payload_len() as u64;
                self.shared.acked.fetch_add(1, Ordering::Relaxed);
                self.shared.acked_bytes.fetch_add(bytes, Ordering::Relaxed);
                if self.shared.recording.load(Ordering::Relaxed) {
                    let lat = self.shared.now_us().saturating_sub(sent_us as u64).max(1);
                    self.local.lock().unwrap().saturating_record(lat);
                }
            }
            Err(_) => {
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

pub(crate) fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap).set("log_level", "3");
    c
}

/// Creates `topics` with `partitions` each (replication factor 1).
///
/// # Errors
/// The admin request fails, or a topic cannot be created (an existing one is an error:
/// runs use fresh names).
pub fn create_topics(bootstrap: &str, topics: &[String], partitions: u32) -> anyhow::Result<()> {
    create_topics_with(bootstrap, topics, partitions, &[])
}

/// [`create_topics`] with topic settings (`config`), e.g. `floe.iceberg.enabled=true`.
///
/// # Errors
/// As [`create_topics`].
pub fn create_topics_with(
    bootstrap: &str,
    topics: &[String],
    partitions: u32,
    config: &[(String, String)],
) -> anyhow::Result<()> {
    create_replicated_topics(bootstrap, topics, partitions, 1, config)
}

/// [`create_topics_with`] with `replication_factor` replicas of each partition (a cluster).
///
/// # Errors
/// As [`create_topics`].
pub fn create_replicated_topics(
    bootstrap: &str,
    topics: &[String],
    partitions: u32,
    replication_factor: i32,
    config: &[(String, String)],
) -> anyhow::Result<()> {
    let admin: AdminClient<_> = client_config(bootstrap).create().context("admin client")?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            let topic =
                NewTopic::new(t, partitions as i32, TopicReplication::Fixed(replication_factor));
            config.iter().fold(topic, |n, (k, v)| n.set(k, v))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = rt.block_on(admin.create_topics(&new, &opts)).context("CreateTopics")?;
    for r in results {
        if let Err((topic, code)) = r {
            anyhow::bail!("cannot create topic {topic}: {code}");
        }
    }
    // Wait until metadata shows every partition with a leader (in a cluster, a broker
    // may answer LEADER_NOT_AVAILABLE for a moment after creation, as Kafka does).
    let deadline = Instant::now() + Duration::from_secs(30);
    for t in topics {
        loop {
            let md = admin.inner().fetch_metadata(Some(t), Duration::from_secs(5))?;
            let ready = md.topics().first().is_some_and(|mt| {
                mt.error().is_none()
                    && mt.partitions().len() == partitions as usize
                    && mt.partitions().iter().all(|p| p.error().is_none() && p.leader() >= 0)
            });
            if ready {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "topic {t} did not appear in metadata");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// The log end offset (high watermark) of each of `topic`'s partitions `0..partitions`.
///
/// # Errors
/// The broker does not answer.
pub fn end_offsets(bootstrap: &str, topic: &str, partitions: u32) -> anyhow::Result<Vec<i64>> {
    let probe: BaseConsumer = client_config(bootstrap).set("group.id", "floe-bench").create()?;
    (0..partitions as i32)
        .map(|p| Ok(probe.fetch_watermarks(topic, p, Duration::from_secs(10))?.1))
        .collect()
}

/// Replaces `topic`'s setting overrides with `config` (AlterConfigs).
///
/// # Errors
/// The admin request fails or the broker refuses the settings.
pub fn alter_topic_config(
    bootstrap: &str,
    topic: &str,
    config: &[(String, String)],
) -> anyhow::Result<()> {
    let admin: AdminClient<_> = client_config(bootstrap).create().context("admin client")?;
    let alter = config
        .iter()
        .fold(AlterConfig::new(ResourceSpecifier::Topic(topic)), |a, (k, v)| a.set(k, v));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for r in rt.block_on(admin.alter_configs(&[alter], &opts)).context("AlterConfigs")? {
        if let Err((resource, code)) = r {
            anyhow::bail!("cannot alter {resource:?}: {code}");
        }
    }
    Ok(())
}

/// Payload templates: a few distinct payloads with the workload's share of random bytes.
pub(crate) fn payloads(w: &Workload) -> Vec<Vec<u8>> {
    let random = ((w.message_size as f64) * w.random_payload_share) as usize;
    (0..64)
        .map(|_| {
            let mut p = vec![0u8; w.message_size];
            p[..random].iter_mut().for_each(|b| *b = fastrand::u8(..));
            p
        })
        .collect()
}

/// Options of one [`run`].
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Bootstrap servers.
    pub bootstrap: String,
    /// The workload (its `producer_rate`, duration and warm-up apply).
    pub workload: Workload,
    /// Topics to write (already created).
    pub topics: Vec<String>,
    /// Whether consumers tail the topics while producing.
    pub consume: bool,
    /// Stop producing after this many payload bytes (backlog mode) instead of after the
    /// duration.
    pub produce_bytes: Option<u64>,
}

fn producer(spec: &RunSpec, shared: &Arc<Shared>) -> anyhow::Result<ThreadedProducer<Ctx>> {
    let w = &spec.workload;
    let ctx = Ctx { shared: Arc::clone(shared), local: Mutex::new(new_histogram()) };
    let p: ThreadedProducer<Ctx> = client_config(&spec.bootstrap)
        .set("acks", if w.acks == "all" { "-1" } else { w.acks.as_str() })
        .set("compression.type", &w.compression)
        .set("batch.size", w.batch_size.to_string())
        .set("linger.ms", w.linger_ms.to_string())
        .set("message.max.bytes", (w.batch_size.max(w.message_size) + 65536).to_string())
        .set("queue.buffering.max.kbytes", "262144")
        .set("enable.idempotence", "false")
        .create_with_context(ctx)
        .context("producer")?;
    Ok(p)
}

/// `refill`: payload bytes `8..refill` are made random afresh for every message (0: none).
#[allow(clippy::too_many_arguments)]
fn produce_loop(
    p: &ThreadedProducer<Ctx>,
    topic: &str,
    rate: f64,
    limit_bytes: Option<u64>,
    templates: &[Vec<u8>],
    refill: usize,
    shared: &Shared,
) {
    let start = Instant::now();
    let mut sent: u64 = 0;
    let mut buf = templates[0].clone();
    while !shared.stop_producers.load(Ordering::Relaxed) {
        if let Some(limit) = limit_bytes {
            if sent * buf.len() as u64 >= limit {
                break;
            }
        }
        if rate > 0.0 {
            let due = start + Duration::from_secs_f64(sent as f64 / rate);
            let now = Instant::now();
            if due > now + Duration::from_micros(500) {
                std::thread::sleep(due - now);
            }
        }
        buf.copy_from_slice(&templates[(sent % templates.len() as u64) as usize]);
        if refill > 8 {
            fastrand::fill(&mut buf[8..refill]);
        }
        let ts = shared.now_us();
        buf[..8].copy_from_slice(&ts.to_le_bytes());
        let mut record =
            BaseRecord::<(), [u8], usize>::with_opaque_to(topic, ts as usize).payload(&buf[..]);
        loop {
            match p.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_micros(200));
                    if shared.stop_producers.load(Ordering::Relaxed) {
                        return;
                    }
                }
                Err(_) => {
                    shared.errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        sent += 1;
    }
}

fn consume_loop(
    spec: &RunSpec,
    assignment: TopicPartitionList,
    shared: &Shared,
    stop_at: Option<u64>,
) -> anyhow::Result<()> {
    let c: BaseConsumer = client_config(&spec.bootstrap)
        .set("group.id", "floe-bench")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("fetch.wait.max.ms", "100")
        // Big fetches and a deep prefetch queue, so a catch-up read is not paced by
        // librdkafka's defaults (1 MiB per partition, 64 MiB queued).
        .set("max.partition.fetch.bytes", "8388608")
        .set("fetch.max.bytes", "67108864")
        .set("queued.max.messages.kbytes", "262144")
        .create()
        .context("consumer")?;
    c.assign(&assignment)?;
    loop {
        if shared.stop_consumers.load(Ordering::Relaxed) {
            return Ok(());
        }
        if stop_at.is_some_and(|n| shared.consumed.load(Ordering::Relaxed) >= n) {
            return Ok(());
        }
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let payload = m.payload().unwrap_or(&[]);
                shared.consumed.fetch_add(1, Ordering::Relaxed);
                shared.consumed_bytes.fetch_add(payload.len() as u64, Ordering::Relaxed);
                if payload.len() >= 8 && shared.recording.load(Ordering::Relaxed) {
                    let sent = u64::from_le_bytes(payload[..8].try_into().unwrap());
                    let lat = shared.now_us().saturating_sub(sent).max(1);
                    shared.e2e_hist.lock().unwrap().saturating_record(lat);
                }
            }
            Some(Err(_)) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }
}

fn assignments(spec: &RunSpec, start: Offset) -> anyhow::Result<Vec<TopicPartitionList>> {
    let w = &spec.workload;
    let n = w.consumers_per_topic.max(1) as usize;
    let mut out = Vec::new();
    for t in &spec.topics {
        let mut lists = vec![TopicPartitionList::new(); n];
        for p in 0..w.partitions_per_topic {
            lists[p as usize % n].add_partition_offset(t, p as i32, start)?;
        }
        out.extend(lists.into_iter().filter(|l| l.count() > 0));
    }
    Ok(out)
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared {
        epoch: Instant::now(),
        recording: AtomicBool::new(false),
        stop_producers: AtomicBool::new(false),
        stop_consumers: AtomicBool::new(false),
        acked: AtomicU64::new(0),
        acked_bytes: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
        consumed_bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        publish_hist: Mutex::new(new_histogram()),
        e2e_hist: Mutex::new(new_histogram()),
    })
}

/// Produces (and, with `spec.consume`, tails) the workload for its warm-up + duration,
/// or until `spec.produce_bytes` are acknowledged; updates `bar` once a second.
///
/// # Errors
/// Client creation fails.
pub fn run(spec: &RunSpec, bar: &ProgressBar) -> anyhow::Result<LoadResult> {
    let w = &spec.workload;
    let shared = shared();
    let templates = payloads(w);
    let refill = if w.fresh_random {
        ((w.message_size as f64) * w.random_payload_share) as usize
    } else {
        0
    };
    let nproducers = (w.producers_per_topic * w.topics) as usize;
    let rate_each = w.producer_rate as f64 / nproducers as f64;
    let limit_each = spec.produce_bytes.map(|b| b.div_ceil(nproducers as u64));
    let backlog = spec.produce_bytes.is_some();
    if backlog {
        shared.recording.store(true, Ordering::Relaxed);
    }
    let mut result = None;
    std::thread::scope(|s| -> anyhow::Result<()> {
        let mut consumers = Vec::new();
        if spec.consume {
            for a in assignments(spec, Offset::Beginning)? {
                let sh = &shared;
                consumers.push(s.spawn(move || consume_loop(spec, a, sh, None)));
            }
        }
        let mut producers = Vec::new();
        for i in 0..nproducers {
            let topic = &spec.topics[i % spec.topics.len()];
            let p = producer(spec, &shared)?;
            let (sh, tpl) = (&shared, &templates);
            producers.push(s.spawn(move || {
                produce_loop(&p, topic, rate_each, limit_each, tpl, refill, sh);
                p.flush(Duration::from_secs(60)).ok();
                let h = std::mem::replace(&mut *p.context().local.lock().unwrap(), new_histogram());
                sh.publish_hist.lock().unwrap().add(h).ok();
            }));
        }

        // The monitor: a sample per tick, the warm-up switch, the end of the run.
        let tick = Duration::from_millis(if w.duration_s <= 5.0 { 250 } else { 1000 });
        let start = Instant::now();
        let end = Duration::from_secs_f64(w.warmup_s + w.duration_s);
        bar.set_length(if backlog { spec.produce_bytes.unwrap() } else { end.as_millis() as u64 });
        let mut timeline = Vec::new();
        let mut last = (Instant::now(), 0u64, 0u64, 0u64);
        let mut window_start =
            if w.warmup_s == 0.0 || backlog { Some((start, 0u64, 0u64, 0u64, 0u64)) } else { None };
        if window_start.is_some() {
            shared.recording.store(true, Ordering::Relaxed);
        }
        loop {
            std::thread::sleep(tick);
            let now = Instant::now();
            let (a, ab, cb) = (
                shared.acked.load(Ordering::Relaxed),
                shared.acked_bytes.load(Ordering::Relaxed),
                shared.consumed_bytes.load(Ordering::Relaxed),
            );
            let dt = (now - last.0).as_secs_f64();
            let sample = Sample {
                t_s: (now - start).as_secs_f64(),
                publish_msg_per_s: (a - last.1) as f64 / dt,
                publish_mb_per_s: (ab - last.2) as f64 / 1e6 / dt,
                consume_mb_per_s: (cb - last.3) as f64 / 1e6 / dt,
            };
            bar.set_message(format!(
                "publish {:>9.0} msg/s {:>7.1} MB/s | consume {:>7.1} MB/s",
                sample.publish_msg_per_s, sample.publish_mb_per_s, sample.consume_mb_per_s
            ));
            bar.set_position(if backlog { ab } else { (now - start).as_millis() as u64 });
            timeline.push(sample);
            last = (now, a, ab, cb);
            if window_start.is_none() && now - start >= Duration::from_secs_f64(w.warmup_s) {
                window_start = Some((now, a, ab, shared.consumed.load(Ordering::Relaxed), cb));
                shared.recording.store(true, Ordering::Relaxed);
            }
            let done = if backlog {
                producers.iter().all(|h| h.is_finished())
            } else {
                now - start >= end
            };
            if done {
                break;
            }
        }
        let (ws, wa, wab, wc, wcb) = window_start.unwrap();
        let window_end = Instant::now();
        let (acked, acked_bytes) =
            (shared.acked.load(Ordering::Relaxed), shared.acked_bytes.load(Ordering::Relaxed));
        let consumed_at_end = shared.consumed.load(Ordering::Relaxed);
        let consumed_bytes_at_end = shared.consumed_bytes.load(Ordering::Relaxed);
        shared.stop_producers.store(true, Ordering::Relaxed);
        for p in producers {
            p.join().map_err(|_| anyhow::anyhow!("producer thread panicked"))?;
        }
        // Let consumers drain what was sent (their latencies count), up to 10 s.
        let drain_deadline = Instant::now() + Duration::from_secs(10);
        while spec.consume
            && shared.consumed.load(Ordering::Relaxed) < shared.acked.load(Ordering::Relaxed)
            && Instant::now() < drain_deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        shared.stop_consumers.store(true, Ordering::Relaxed);
        for c in consumers {
            c.join().map_err(|_| anyhow::anyhow!("consumer thread panicked"))??;
        }
        let secs = if backlog {
            (window_end - start).as_secs_f64()
        } else {
            (window_end - ws).as_secs_f64()
        };
        let publish_hist = shared.publish_hist.lock().unwrap().clone();
        let e2e_hist = shared.e2e_hist.lock().unwrap().clone();
        let consume_bytes_window = consumed_bytes_at_end - wcb;
        result = Some(LoadResult {
            target_rate: w.producer_rate,
            seconds: secs,
            published_messages: acked - wa,
            publish_msg_per_s: (acked - wa) as f64 / secs,
            publish_mb_per_s: (acked_bytes - wab) as f64 / 1e6 / secs,
            consumed_messages: consumed_at_end - wc,
            consume_mb_per_s: consume_bytes_window as f64 / 1e6 / secs,
            errors: shared.errors.load(Ordering::Relaxed),
            publish_latency: LatencySummary::of(&publish_hist),
            e2e_latency: LatencySummary::of(&e2e_hist),
            timeline,
            publish_hist,
            e2e_hist,
        });
        Ok(())
    })?;
    Ok(result.expect("set above"))
}

/// What a catch-up read measured.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUp {
    /// Payload bytes read.
    pub bytes: u64,
    /// Messages read.
    pub messages: u64,
    /// Seconds from assigning the partitions to the last message.
    pub seconds: f64,
    /// Payload MB/s.
    pub mb_per_s: f64,
}

/// Reads every message of `topics` from the beginning to the high watermarks seen at the
/// start, with the workload's consumers, and times it.
///
/// # Errors
/// Client failures, or the read stalls for 60 s.
pub fn catch_up(
    bootstrap: &str,
    w: &Workload,
    topics: &[String],
    bar: &ProgressBar,
) -> anyhow::Result<CatchUp> {
    let probe: BaseConsumer = client_config(bootstrap).set("group.id", "floe-bench").create()?;
    let mut total = 0u64;
    for t in topics {
        for p in 0..w.partitions_per_topic as i32 {
            let (lo, hi) = probe.fetch_watermarks(t, p, Duration::from_secs(10))?;
            total += (hi - lo) as u64;
        }
    }
    drop(probe);
    let spec = RunSpec {
        bootstrap: bootstrap.into(),
        workload: w.clone(),
        topics: topics.to_vec(),
        consume: true,
        produce_bytes: None,
    };
    let shared = shared();
    bar.set_length(total);
    let start = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let mut handles = Vec::new();
        for a in assignments(&spec, Offset::Beginning)? {
            let (sh, sp) = (&shared, &spec);
            handles.push(s.spawn(move || consume_loop(sp, a, sh, Some(total))));
        }
        let mut last = (Instant::now(), 0u64);
        while shared.consumed.load(Ordering::Relaxed) < total {
            std::thread::sleep(Duration::from_millis(5));
            let n = shared.consumed.load(Ordering::Relaxed);
            bar.set_position(n);
            if n != last.1 {
                last = (Instant::now(), n);
            } else if last.0.elapsed() > Duration::from_secs(60)
                || handles.iter().all(|h| h.is_finished())
            {
                break;
            }
        }
        shared.stop_consumers.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("consumer thread panicked"))??;
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let messages = shared.consumed.load(Ordering::Relaxed);
    anyhow::ensure!(messages >= total, "catch-up read stalled at {messages} of {total} messages");
    let bytes = shared.consumed_bytes.load(Ordering::Relaxed);
    Ok(CatchUp { bytes, messages, seconds, mb_per_s: bytes as f64 / 1e6 / seconds })
}
