//! Load for the `transactions` scenario: one or several librdkafka producers flat
//! out, either idempotent (`enable.idempotence=true`) or transactional (each its own
//! `transactional.id`, `init_transactions`, then `begin_transaction`, N records,
//! `commit_transaction` in a loop), and a catch-up consumer with a chosen
//! `isolation.level`.
//!
//! Latencies: per record, `send` to delivery report (as `load`); per transaction,
//! `commit_transaction`, called as an application calls it: librdkafka first flushes
//! the transaction's records (sending the last batch at once, without waiting for
//! `linger.ms`), then sends EndTxn, which the broker answers once the markers are written.
//!
//! The catch-up consumer ends at librdkafka's partition EOF (`enable.partition.eof`):
//! a transactional topic's offsets include one control record per partition and
//! transaction, which no consumer delivers, so "high watermark − start" messages
//! would never be reached.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::load::{client_config, new_histogram, payloads, LatencySummary, Sample};
use crate::workload::Workload;

/// How the producer of one arm writes.
#[derive(Debug, Clone)]
pub enum Mode {
    /// `enable.idempotence=true`, no transactions.
    Idempotent,
    /// A transactional producer committing every `records_per_txn` records.
    Transactional {
        /// `transactional.id`.
        id: String,
        /// Records per transaction.
        records_per_txn: usize,
    },
}

/// One producer arm.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    /// Bootstrap servers.
    pub bootstrap: String,
    /// The topic written (already created).
    pub topic: String,
    /// Message size, random share, batch size, linger, compression, warm-up and duration.
    pub workload: Workload,
    /// Idempotent or transactional.
    pub mode: Mode,
    /// Producers running at once, each on its own thread (transactional: ids `ID-0`, `ID-1`, …).
    pub producers: usize,
}

/// What one producer arm measured (over the measured window, after warm-up).
#[derive(Debug, Serialize)]
pub struct ProduceResult {
    /// `idempotent` or `transactional`.
    pub mode: String,
    /// Records per transaction (transactional arm).
    pub records_per_txn: Option<usize>,
    /// Producers that ran at once.
    pub producers: usize,
    /// Seconds measured.
    pub seconds: f64,
    /// Records acknowledged in the window.
    pub published_messages: u64,
    /// Acknowledged records/s.
    pub publish_msg_per_s: f64,
    /// Acknowledged payload MB/s (10^6 bytes).
    pub publish_mb_per_s: f64,
    /// Transactions committed in the window.
    pub transactions: u64,
    /// Committed transactions/s.
    pub transactions_per_s: f64,
    /// Transactions committed over the whole run (warm-up included).
    pub total_transactions: u64,
    /// Transactions aborted after a failed commit (whole run).
    pub aborted_transactions: u64,
    /// Records that failed to send or deliver (whole run).
    pub errors: u64,
    /// Records acknowledged over the whole run (warm-up included): what the topic holds.
    pub total_messages: u64,
    /// Per-record publish latency, `send` → delivery report.
    pub publish_latency: LatencySummary,
    /// `commit_transaction`: the flush of the transaction's records, then EndTxn.
    pub commit_latency: Option<LatencySummary>,
    /// Throughput over time (whole run, warm-up included).
    pub timeline: Vec<Sample>,
    /// Histograms behind the summaries (plots; not serialised).
    #[serde(skip)]
    pub publish_hist: Histogram<u64>,
    /// See `publish_hist`.
    #[serde(skip)]
    pub commit_hist: Histogram<u64>,
}

#[derive(Debug)]
struct Shared {
    epoch: Instant,
    recording: AtomicBool,
    stop: AtomicBool,
    acked: AtomicU64,
    acked_bytes: AtomicU64,
    errors: AtomicU64,
    committed: AtomicU64,
    aborted: AtomicU64,
}

impl Shared {
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }
}

struct Ctx {
    shared: Arc<Shared>,
    hist: Mutex<Histogram<u64>>,
}

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_us: usize) {
        match result {
            Ok(m) => {
                self.shared.acked.fetch_add(1, Ordering::Relaxed);
                self.shared.acked_bytes.fetch_add(m.payload_len() as u64, Ordering::Relaxed);
                if self.shared.recording.load(Ordering::Relaxed) {
                    let lat = self.shared.now_us().saturating_sub(sent_us as u64).max(1);
                    self.hist.lock().unwrap().saturating_record(lat);
                }
            }
            Err(_) => {
                self.shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn producer(
    spec: &ProduceSpec,
    index: usize,
    shared: &Arc<Shared>,
) -> anyhow::Result<ThreadedProducer<Ctx>> {
    let w = &spec.workload;
    let mut c = client_config(&spec.bootstrap);
    c.set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", &w.compression)
        .set("batch.size", w.batch_size.to_string())
        .set("linger.ms", w.linger_ms.to_string())
        .set("message.max.bytes", (w.batch_size.max(w.message_size) + 65536).to_string())
        .set("queue.buffering.max.kbytes", "262144");
    if let Mode::Transactional { id, .. } = &spec.mode {
        c.set("transactional.id", format!("{id}-{index}")).set("transaction.timeout.ms", "60000");
    }
    let ctx = Ctx { shared: Arc::clone(shared), hist: Mutex::new(new_histogram()) };
    c.create_with_context(ctx).context("producer")
}

/// Sends one record, waiting while librdkafka's queue is full. False if it was given up.
fn send(
    p: &ThreadedProducer<Ctx>,
    topic: &str,
    buf: &mut [u8],
    template: &[u8],
    shared: &Shared,
) -> bool {
    buf.copy_from_slice(template);
    let ts = shared.now_us();
    buf[..8].copy_from_slice(&ts.to_le_bytes());
    let mut record =
        BaseRecord::<(), [u8], usize>::with_opaque_to(topic, ts as usize).payload(&buf[..]);
    loop {
        match p.send(record) {
            Ok(()) => return true,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
    }
}

enum Commit {
    Committed,
    /// The commit failed in a way librdkafka says an abort recovers from.
    MustAbort(String),
}

/// `rd_kafka_commit_transaction`, called as C, Python, Go and .NET applications call it:
/// librdkafka flushes the transaction's records (the last batch goes at once, without
/// waiting for `linger.ms`), then sends EndTxn. The `rdkafka` crate's own
/// `commit_transaction` flushes first through its `flush`, which polls in 100 ms steps,
/// adding up to 100 ms to every commit: a cost of that crate, not of the broker.
fn commit_transaction(p: &ThreadedProducer<Ctx>, timeout: Duration) -> anyhow::Result<Commit> {
    use rdkafka::bindings as rd;
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `native_ptr` is the live handle of the producer `p` owns (librdkafka's
    // transactional calls are thread-safe); a non-null result is an error object we own,
    // read, and destroy exactly once.
    unsafe {
        let err = rd::rd_kafka_commit_transaction(p.client().native_ptr(), timeout_ms);
        if err.is_null() {
            return Ok(Commit::Committed);
        }
        let what =
            std::ffi::CStr::from_ptr(rd::rd_kafka_error_string(err)).to_string_lossy().into_owned();
        let abortable = rd::rd_kafka_error_txn_requires_abort(err) != 0;
        rd::rd_kafka_error_destroy(err);
        if abortable {
            Ok(Commit::MustAbort(what))
        } else {
            Err(anyhow::anyhow!("commit_transaction: {what}"))
        }
    }
}

/// The producer thread: flat out until `stop`; a transaction is always finished
/// (committed) before returning, so the topic holds no open transaction.
fn produce_loop(
    p: &ThreadedProducer<Ctx>,
    spec: &ProduceSpec,
    shared: &Shared,
    commit_hist: &mut Histogram<u64>,
) -> anyhow::Result<()> {
    let templates = payloads(&spec.workload);
    let mut buf = templates[0].clone();
    let mut n = 0usize;
    match &spec.mode {
        Mode::Idempotent => {
            while !shared.stop.load(Ordering::Relaxed) {
                send(p, &spec.topic, &mut buf, &templates[n % templates.len()], shared);
                n += 1;
            }
            p.flush(Duration::from_secs(60)).context("flush")?;
        }
        Mode::Transactional { records_per_txn, .. } => {
            p.init_transactions(Duration::from_secs(60)).context("init_transactions")?;
            while !shared.stop.load(Ordering::Relaxed) {
                p.begin_transaction().context("begin_transaction")?;
                for _ in 0..*records_per_txn {
                    send(p, &spec.topic, &mut buf, &templates[n % templates.len()], shared);
                    n += 1;
                }
                let t0 = Instant::now();
                match commit_transaction(p, Duration::from_secs(60))? {
                    Commit::Committed => {
                        if shared.recording.load(Ordering::Relaxed) {
                            commit_hist.saturating_record((t0.elapsed().as_micros() as u64).max(1));
                        }
                        shared.committed.fetch_add(1, Ordering::Relaxed);
                    }
                    Commit::MustAbort(why) => {
                        eprintln!("commit failed ({why}); aborting the transaction");
                        shared.aborted.fetch_add(1, Ordering::Relaxed);
                        p.abort_transaction(Duration::from_secs(60))
                            .context("abort_transaction")?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Runs one producer arm for the workload's warm-up + duration; updates `bar`.
///
/// # Errors
/// Client creation, `init_transactions`, or a transaction that can neither commit nor abort.
pub fn produce(spec: &ProduceSpec, bar: &ProgressBar) -> anyhow::Result<ProduceResult> {
    let w = &spec.workload;
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        recording: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        acked: AtomicU64::new(0),
        acked_bytes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        committed: AtomicU64::new(0),
        aborted: AtomicU64::new(0),
    });
    let ps = (0..spec.producers.max(1))
        .map(|i| producer(spec, i, &shared))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut hists: Vec<Histogram<u64>> = ps.iter().map(|_| new_histogram()).collect();
    let tick = Duration::from_millis(if w.duration_s <= 5.0 { 250 } else { 1000 });
    let end = Duration::from_secs_f64(w.warmup_s + w.duration_s);
    bar.set_length(end.as_millis() as u64);
    let mut timeline = Vec::new();
    let (window, window_end) = std::thread::scope(|s| -> anyhow::Result<_> {
        let sh = &shared;
        let workers: Vec<_> = ps
            .iter()
            .zip(hists.iter_mut())
            .map(|(pr, hs)| {
                s.spawn(move || {
                    let r = produce_loop(pr, spec, sh, hs);
                    // One producer failing ends the arm: the others finish their transaction and stop.
                    sh.stop.store(true, Ordering::Relaxed);
                    r
                })
            })
            .collect();
        let start = Instant::now();
        let mut last = (start, 0u64, 0u64);
        let counters = |sh: &Shared| {
            (
                sh.acked.load(Ordering::Relaxed),
                sh.acked_bytes.load(Ordering::Relaxed),
                sh.committed.load(Ordering::Relaxed),
            )
        };
        let mut window = None;
        if w.warmup_s == 0.0 {
            window = Some((start, 0, 0, 0));
            shared.recording.store(true, Ordering::Relaxed);
        }
        while !workers.iter().any(|w| w.is_finished()) {
            std::thread::sleep(tick);
            let now = Instant::now();
            let (a, ab, c) = counters(&shared);
            let dt = (now - last.0).as_secs_f64();
            let sample = Sample {
                t_s: (now - start).as_secs_f64(),
                publish_msg_per_s: (a - last.1) as f64 / dt,
                publish_mb_per_s: (ab - last.2) as f64 / 1e6 / dt,
                consume_mb_per_s: 0.0,
            };
            bar.set_message(format!(
                "{:>9.0} msg/s {:>7.1} MB/s, {c} transactions",
                sample.publish_msg_per_s, sample.publish_mb_per_s
            ));
            bar.set_position((now - start).as_millis() as u64);
            timeline.push(sample);
            last = (now, a, ab);
            if window.is_none() && now - start >= Duration::from_secs_f64(w.warmup_s) {
                window = Some((now, a, ab, c));
                shared.recording.store(true, Ordering::Relaxed);
            }
            if now - start >= end {
                break;
            }
        }
        let window_end = (Instant::now(), counters(&shared));
        shared.stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker.join().map_err(|_| anyhow::anyhow!("producer thread panicked"))??;
        }
        Ok((window, window_end))
    })?;
    let (ws, wa, wab, wc) =
        window.context("the producer stopped during the warm-up (see the broker's log)")?;
    let (we, (a, ab, c)) = window_end;
    let secs = (we - ws).as_secs_f64();
    let mut publish_hist = new_histogram();
    let mut commit_hist = new_histogram();
    for (p, h) in ps.iter().zip(&hists) {
        publish_hist.add(&*p.context().hist.lock().unwrap()).context("merge histograms")?;
        commit_hist.add(h).context("merge histograms")?;
    }
    let transactional = matches!(spec.mode, Mode::Transactional { .. });
    Ok(ProduceResult {
        mode: if transactional { "transactional" } else { "idempotent" }.into(),
        records_per_txn: match &spec.mode {
            Mode::Transactional { records_per_txn, .. } => Some(*records_per_txn),
            Mode::Idempotent => None,
        },
        producers: ps.len(),
        seconds: secs,
        published_messages: a - wa,
        publish_msg_per_s: (a - wa) as f64 / secs,
        publish_mb_per_s: (ab - wab) as f64 / 1e6 / secs,
        transactions: c - wc,
        transactions_per_s: (c - wc) as f64 / secs,
        total_transactions: shared.committed.load(Ordering::Relaxed),
        aborted_transactions: shared.aborted.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        total_messages: shared.acked.load(Ordering::Relaxed),
        publish_latency: LatencySummary::of(&publish_hist),
        commit_latency: transactional.then(|| LatencySummary::of(&commit_hist)),
        timeline,
        publish_hist,
        commit_hist,
    })
}

/// What one catch-up read with an isolation level measured.
#[derive(Debug, Clone, Serialize)]
pub struct IsolatedRead {
    /// `read_committed` or `read_uncommitted`.
    pub isolation: String,
    /// Messages delivered to the application.
    pub messages: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Seconds from assigning the partitions to the last partition's EOF.
    pub seconds: f64,
    /// Payload MB/s.
    pub mb_per_s: f64,
}

/// Reads `topic`'s partitions `0..partitions` from the beginning to their end (the last
/// stable offset for read_committed) with one librdkafka consumer; `expected` messages
/// only size the progress bar.
///
/// # Errors
/// Client failures, a consume error, or no progress for 30 s.
pub fn catch_up(
    bootstrap: &str,
    topic: &str,
    partitions: u32,
    read_committed: bool,
    expected: u64,
    bar: &ProgressBar,
) -> anyhow::Result<IsolatedRead> {
    let isolation = if read_committed { "read_committed" } else { "read_uncommitted" };
    let c: BaseConsumer = client_config(bootstrap)
        .set("group.id", "floe-bench")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "100")
        .set("max.partition.fetch.bytes", "8388608")
        .set("fetch.max.bytes", "67108864")
        .set("queued.max.messages.kbytes", "262144")
        .create()
        .context("consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    bar.set_length(expected);
    let start = Instant::now();
    c.assign(&tpl)?;
    let (mut messages, mut bytes) = (0u64, 0u64);
    let mut eof = BTreeSet::new();
    let mut last_progress = Instant::now();
    while eof.len() < partitions as usize {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                messages += 1;
                bytes += m.payload_len() as u64;
                eof.remove(&m.partition());
                last_progress = Instant::now();
                if messages % 4096 == 0 {
                    bar.set_position(messages);
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
                last_progress = Instant::now();
            }
            Some(Err(e)) => anyhow::bail!("{isolation} catch-up read: {e}"),
            None => anyhow::ensure!(
                last_progress.elapsed() < Duration::from_secs(30),
                "{isolation} catch-up read stalled at {messages} messages ({} of {partitions} partitions at their end)",
                eof.len()
            ),
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    bar.set_position(messages);
    Ok(IsolatedRead {
        isolation: isolation.into(),
        messages,
        bytes,
        seconds,
        mb_per_s: bytes as f64 / 1e6 / seconds,
    })
}
