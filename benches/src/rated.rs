//! A producer at a fixed rate (acks=all) that keeps every record's send time and
//! publish latency, so latency can be cut to any window afterwards (the window of the
//! `compaction` scenario is the clean, known only once it is over), and so a caller can
//! ask, while it runs, when the first record sent after a moment was acknowledged (the
//! failover time of the `replication` scenario).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use rdkafka::client::ClientContext;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};

use crate::load::{client_config, new_histogram};

/// Per record: send time (µs since the producer's epoch) and publish latency (µs).
pub type Samples = Vec<(u64, u64)>;

/// Delivery reports arrive on librdkafka's poll thread; the samples are shared with
/// [`RatedProducer::first_ack_since`], which reads them while the producer runs. Both
/// hold the lock for a push or a short scan of the newest samples, never across a wait.
struct SampleCtx {
    epoch: Instant,
    samples: Arc<Mutex<Samples>>,
    errors: Arc<AtomicU64>,
}

impl ClientContext for SampleCtx {}

impl ProducerContext for SampleCtx {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_us: usize) {
        match result {
            Ok(_) => {
                let now = self.epoch.elapsed().as_micros() as u64;
                // A poisoned lock means another thread panicked; the run is lost anyway.
                if let Ok(mut samples) = self.samples.lock() {
                    samples.push((sent_us as u64, now.saturating_sub(sent_us as u64).max(1)));
                }
            }
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A producer sending `rate` messages/s to a topic (librdkafka's partitioner spreads
/// them over its partitions) on its own thread, keeping every delivery's send time and
/// latency.
pub struct RatedProducer {
    epoch: Instant,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    samples: Arc<Mutex<Samples>>,
    errors: Arc<AtomicU64>,
    handle: JoinHandle<anyhow::Result<(Samples, u64)>>,
}

impl std::fmt::Debug for RatedProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RatedProducer")
            .field("sent", &self.sent.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RatedProducer {
    /// Starts sending `message_size`-byte messages (acks=all, linger.ms=1).
    ///
    /// # Errors
    /// The producer cannot be created.
    pub fn start(
        bootstrap: &str,
        topic: &str,
        rate: u64,
        message_size: usize,
    ) -> anyhow::Result<RatedProducer> {
        let epoch = Instant::now();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(AtomicU64::new(0));
        let ctx = SampleCtx { epoch, samples: Arc::clone(&samples), errors: Arc::clone(&errors) };
        let p: ThreadedProducer<SampleCtx> = client_config(bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "false")
            .set("linger.ms", "1")
            .set("compression.type", "none")
            .create_with_context(ctx)
            .context("rated producer")?;
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (stop2, sent2, topic) = (Arc::clone(&stop), Arc::clone(&sent), topic.to_string());
        let handle =
            std::thread::Builder::new().name("rated-producer".into()).spawn(move || {
                let mut payload = vec![0u8; message_size];
                fastrand::fill(&mut payload[..message_size / 2]);
                let mut n = 0u64;
                while !stop2.load(Ordering::Relaxed) {
                    let due = epoch + Duration::from_secs_f64(n as f64 / rate.max(1) as f64);
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    let ts = epoch.elapsed().as_micros() as u64;
                    let record = BaseRecord::<(), [u8], usize>::with_opaque_to(&topic, ts as usize)
                        .payload(&payload[..]);
                    if p.send(record).is_err() {
                        p.context().errors.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                    sent2.store(n, Ordering::Relaxed);
                }
                p.flush(Duration::from_secs(30)).context("rated producer: flush")?;
                let samples = p
                    .context()
                    .samples
                    .lock()
                    .map(|mut s| std::mem::take(&mut *s))
                    .map_err(|_| anyhow::anyhow!("rated producer: samples lock poisoned"))?;
                Ok((samples, p.context().errors.load(Ordering::Relaxed)))
            })?;
        Ok(RatedProducer { epoch, stop, sent, samples, errors, handle })
    }

    /// When (µs since the epoch) the first record sent at or after `from_us` was
    /// acknowledged, if one has been.
    ///
    /// Records sent before `from_us` do not count: after a leader is killed at
    /// `from_us`, an acknowledgement of such a record may still be the dead leader's
    /// (written to the socket before the kill, read after), while a record sent after
    /// the kill can only be acknowledged by a live leader.
    pub fn first_ack_since(&self, from_us: u64) -> Option<u64> {
        let samples = self.samples.lock().ok()?;
        // Samples are pushed in acknowledgement order: scan back from the newest until
        // the acknowledgements are older than `from_us`.
        samples
            .iter()
            .rev()
            .take_while(|(sent, lat)| sent + lat >= from_us)
            .filter(|(sent, _)| *sent >= from_us)
            .map(|(sent, lat)| sent + lat)
            .min()
    }

    /// Records that failed to send or were not delivered, so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Microseconds since the producer's epoch (the clock of its samples).
    pub fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Stops, flushes, and returns every (send µs, latency µs) and the error count.
    ///
    /// # Errors
    /// The producer thread failed.
    pub fn finish(self) -> anyhow::Result<(Samples, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().map_err(|_| anyhow::anyhow!("rated producer panicked"))?
    }
}

/// The latencies of the records sent in `[from_us, to_us)`.
pub fn window_histogram(samples: &[(u64, u64)], from_us: u64, to_us: u64) -> Histogram<u64> {
    let mut h = new_histogram();
    for &(_, lat) in samples.iter().filter(|(s, _)| (from_us..to_us).contains(s)) {
        h.saturating_record(lat);
    }
    h
}

/// p99 latency (ms) per `bucket_us` of send time in `[from_us, to_us)`, with x in seconds
/// relative to `zero_us` (for a timeline plot).
pub fn p99_timeline(
    samples: &[(u64, u64)],
    from_us: u64,
    to_us: u64,
    zero_us: u64,
    bucket_us: u64,
) -> Vec<(f64, f64)> {
    let mut buckets: BTreeMap<u64, Histogram<u64>> = BTreeMap::new();
    for &(sent, lat) in samples.iter().filter(|(s, _)| (from_us..to_us).contains(s)) {
        buckets
            .entry((sent - from_us) / bucket_us)
            .or_insert_with(new_histogram)
            .saturating_record(lat);
    }
    buckets
        .into_iter()
        .map(|(i, h)| {
            let mid = from_us + i * bucket_us + bucket_us / 2;
            ((mid as f64 - zero_us as f64) / 1e6, h.value_at_quantile(0.99) as f64 / 1000.0)
        })
        .collect()
}
