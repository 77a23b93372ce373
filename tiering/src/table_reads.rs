//! Fetches below a shared topic's local log start offset, served from its
//! Iceberg table (`floe.iceberg.storage=shared`, `docs/shared-mode.md` 4.2–4.3).
//!
//! The request path never decodes Parquet: a fetch hands a [`TableRead`] to a
//! bounded queue and waits at most `floe.iceberg.shared.fetch-max-wait-ms` (or
//! the request's own `max_wait_ms` if shorter). OS threads named
//! `floe-shared-read-N`, each with a current-thread runtime and its own
//! read-only catalog, rebuild the original record batches from the table
//! (`crate::shared`) and keep them in a cache bounded by
//! `floe.iceberg.shared.cache-bytes`. A read rebuilds [`READ_AHEAD_BYTES`]
//! ahead of the fetch, whatever its `max_bytes`: a Parquet row group is decoded
//! whole, so the batches after the asked ones cost little more, and the
//! consumer's next fetches are cut from the cache at batch boundaries. A wait
//! that times out answers the partition empty and leaves the read running, so
//! the client's next fetch of the same offset is served from memory. Reads of
//! the same offset by several fetches (consumer groups backfilling together)
//! are done once: later ones wait for the first.
//!
//! Each thread lowers its own scheduling priority (nice 10: Linux nice values
//! are per thread), so on a small machine a backfill takes the CPU produce and
//! tailing fetches leave.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use floe_protocol::record_batch::BatchIter;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::settings::SharedReadSettings;
use crate::shared::{read_batches_with_index, FetchCompression, FileIndex};
use crate::IcebergCatalog;

/// How far ahead of a fetch a table read rebuilds (the cache serves the rest).
pub const READ_AHEAD_BYTES: usize = 8 << 20;

/// One table read: partition `partition` of `topic` from `from` up to (not
/// including) `upper`, the local log start offset when the fetch came.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableRead {
    /// The topic (its table is `<namespace>.<topic>`).
    pub topic: String,
    /// The Kafka partition.
    pub partition: i32,
    /// The fetch offset.
    pub from: i64,
    /// The codec rebuilt batches are written with (the topic's `floe.iceberg.shared.fetch-compression`).
    pub codec: FetchCompression,
}

impl TableRead {
    fn range_key(&self) -> RangeKey {
        RangeKey { topic: self.topic.clone(), partition: self.partition, codec: self.codec }
    }
}

/// The rebuilt batches of one partition in one codec.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RangeKey {
    topic: String,
    partition: i32,
    codec: FetchCompression,
}

/// What a fetch gets from the table: batches from the one holding its offset.
#[derive(Debug, Clone, Default)]
pub struct Served {
    /// Whole batches, concatenated.
    pub bytes: bytes::Bytes,
    /// The offset after the last batch.
    pub next_offset: i64,
    /// The aborted transactions `(producer id, first offset)` of the range by
    /// KIP-98's rule, from the table's abort markers.
    pub aborted: Vec<(i64, i64)>,
}

/// What a table read answers: the rebuilt batches, or why there are none.
pub type ReadResult = Result<Served, String>;

/// One rebuilt batch: its offsets and bytes.
#[derive(Debug, Clone)]
struct CachedBatch {
    last: i64,
    bytes: bytes::Bytes,
}

/// What a finished read hands its waiters: the batches in offset order and the
/// partition's abort markers `(marker offset, producer id, first offset)`.
#[derive(Debug, Clone, Default)]
struct Rebuilt {
    batches: Vec<(i64, CachedBatch)>,
    markers: Vec<(i64, i64, i64)>,
    /// The table's next offset when the markers were read: they are complete
    /// below it, and the local log's `.txnindex` holds those at or above the
    /// local log start. Once local deletion passes it, markers in between are
    /// in neither, and a READ_COMMITTED answer would miss their aborts.
    markers_upto: i64,
}

/// The batches from the one holding `from`, consecutive (a gap, a hole the
/// log stepped over, ends them), at most `max_bytes` but the first whole.
fn cut<'a>(
    batches: impl Iterator<Item = (&'a i64, &'a CachedBatch)>,
    from: i64,
    max_bytes: usize,
    markers: &[(i64, i64, i64)],
) -> Option<Served> {
    let mut out = bytes::BytesMut::new();
    let mut next: Option<i64> = None;
    for (base, b) in batches {
        match next {
            None if b.last < from => continue,
            None if *base > from => return None,
            Some(n) if *base != n => break,
            _ => {}
        }
        if next.is_some() && out.len() + b.bytes.len() > max_bytes {
            break;
        }
        out.extend_from_slice(&b.bytes);
        next = Some(b.last + 1);
    }
    let next_offset = next?;
    // KIP-98: every abort marker at or after the fetch offset whose transaction began before the range's end.
    let aborted = markers
        .iter()
        .filter(|(m, _, first)| *m >= from && *first < next_offset)
        .map(|(_, p, first)| (*p, *first))
        .collect();
    Some(Served { bytes: out.freeze(), next_offset, aborted })
}

enum Job {
    /// Rebuild batches (answered to the fetches in `Shared::inflight`).
    Read { read: TableRead, upper: i64 },
    /// A ListOffsets lookup by time in `[from, upper)`.
    Lookup {
        topic: String,
        partition: i32,
        what: Lookup,
        from: i64,
        upper: i64,
        reply: oneshot::Sender<LookupResult>,
    },
}

/// What a ListOffsets lookup in the table asks (`docs/shared-mode.md` 4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The first record whose timestamp is at least this (ms).
    Timestamp(i64),
    /// The record with the largest timestamp (KIP-734).
    MaxTimestamp,
}

/// `(offset, timestamp)` found, `None` when no record matches, or why the table could not be read.
pub type LookupResult = Result<Option<(i64, i64)>, String>;

/// Rebuilt batches per partition and codec, oldest inserted evicted first once
/// over the byte cap. A table-served range is below the local log start and
/// never changes, so an entry is never stale: retention only makes it unreachable.
/// One cached range: its batches by base offset, the `(from, to, bytes)` spans read, and its bytes.
type CachedRange = (BTreeMap<i64, CachedBatch>, Vec<(i64, i64, i64)>, i64);

/// The fetches waiting for one read: each one's `max_bytes` and where its answer goes.
type Waiters = Vec<(usize, oneshot::Sender<ReadResult>)>;

#[derive(Default)]
struct Cache {
    ranges: HashMap<RangeKey, CachedRange>,
    order: VecDeque<(RangeKey, i64)>,
    bytes: u64,
}

impl Cache {
    fn insert(&mut self, key: &RangeKey, rebuilt: &Rebuilt, cap: u64) {
        let (batches, markers, upto) = self
            .ranges
            .entry(key.clone())
            .or_insert_with(|| (BTreeMap::new(), Vec::new(), i64::MIN));
        // The newest markers win: a slower read of an older snapshot never replaces them.
        if rebuilt.markers_upto >= *upto {
            *markers = rebuilt.markers.clone();
            *upto = rebuilt.markers_upto;
        }
        for (base, b) in &rebuilt.batches {
            if batches.insert(*base, b.clone()).is_none() {
                self.bytes += b.bytes.len() as u64;
                self.order.push_back((key.clone(), *base));
            }
        }
        while self.bytes > cap {
            let Some((k, base)) = self.order.pop_front() else { break };
            if let Some((batches, _, _)) = self.ranges.get_mut(&k) {
                if let Some(gone) = batches.remove(&base) {
                    self.bytes -= gone.bytes.len() as u64;
                }
                if batches.is_empty() {
                    self.ranges.remove(&k);
                }
            }
        }
    }

    /// A cached answer for `read`, unless its markers stop below `upper` (the
    /// local log start now): then the markers must be read again.
    fn serve(&self, read: &TableRead, max_bytes: usize, upper: i64) -> Option<Served> {
        let (batches, markers, upto) = self.ranges.get(&read.range_key())?;
        if *upto < upper {
            return None;
        }
        // From the batch holding `from`: the last one based at or below it.
        let start = batches.range(..=read.from).next_back().map(|(b, _)| *b)?;
        cut(batches.range(start..), read.from, max_bytes, markers)
    }
}

struct Shared {
    cache: Mutex<Cache>,
    /// Reads queued or running, with the fetches waiting for each (and their `max_bytes`).
    inflight: Mutex<HashMap<TableRead, Waiters>>,
    settings: SharedReadSettings,
}

/// The table read path of one broker: the queue, the threads, the cache.
pub struct TableReads {
    jobs: mpsc::Sender<Job>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TableReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableReads").field("settings", &self.shared.settings).finish()
    }
}

/// How a catalog is opened by each read thread.
pub type OpenCatalog = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<IcebergCatalog, String>> + Send>,
        > + Send
        + Sync,
>;

impl TableReads {
    /// Starts `settings.threads` read threads, each opening its catalog with `open`.
    ///
    /// # Errors
    /// If a thread cannot be spawned.
    pub fn start(settings: SharedReadSettings, open: OpenCatalog) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>(settings.queue.max(1));
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let shared =
            Arc::new(Shared { cache: Mutex::default(), inflight: Mutex::default(), settings });
        for n in 0..settings.threads.max(1) {
            let (rx, shared, open) = (rx.clone(), shared.clone(), open.clone());
            std::thread::Builder::new()
                .name(format!("floe-shared-read-{n}"))
                .spawn(move || read_thread(rx, shared, open))?;
        }
        info!(
            threads = settings.threads,
            queue = settings.queue,
            cache_bytes = settings.cache_bytes,
            "shared-storage table readers started"
        );
        Ok(Self { jobs: tx, shared })
    }

    /// The rebuilt batches of `read` up to `upper`, about `max_bytes` of them,
    /// within `wait`; `None` when they are not ready by then (or the queue is
    /// full): answer the partition empty, the client fetches the same offset again.
    pub async fn read(
        &self,
        read: TableRead,
        upper: i64,
        max_bytes: usize,
        wait: Duration,
    ) -> Option<ReadResult> {
        if let Some(hit) = self
            .shared
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .serve(&read, max_bytes, upper)
        {
            return Some(Ok(hit));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut inflight = self.shared.inflight.lock().unwrap_or_else(PoisonError::into_inner);
            match inflight.get_mut(&read) {
                Some(waiters) => waiters.push((max_bytes, tx)),
                None => {
                    let job = Job::Read { read: read.clone(), upper };
                    if self.jobs.try_send(job).is_err() {
                        debug!(topic = %read.topic, partition = read.partition, from = read.from, "table read queue full: answering empty");
                        return None;
                    }
                    inflight.insert(read, vec![(max_bytes, tx)]);
                }
            }
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(result)) => Some(result),
            // Timed out (the read goes on, into the cache) or the thread went away.
            _ => None,
        }
    }

    /// A ListOffsets lookup by time over `[from, upper)` of the table, within
    /// `wait`; `None` when the queue is full or the wait ran out.
    pub async fn lookup(
        &self,
        topic: &str,
        partition: i32,
        what: Lookup,
        from: i64,
        upper: i64,
        wait: Duration,
    ) -> Option<LookupResult> {
        let (reply, rx) = oneshot::channel();
        let job = Job::Lookup { topic: topic.to_string(), partition, what, from, upper, reply };
        if self.jobs.try_send(job).is_err() {
            return None;
        }
        tokio::time::timeout(wait, rx).await.ok().and_then(Result::ok)
    }
}

/// Tables loaded by one thread, reused for a second: a fetch loop over a
/// backfill would otherwise read the catalog and metadata file per request.
/// A table-served range is below the local log start and never changes, so a
/// second-old snapshot serves it as well as the newest (expiry keeps the files
/// of recent snapshots for `floe.iceberg.snapshot.max-age-ms`).
const TABLE_TTL: Duration = Duration::from_secs(1);

/// A topic's tables and their file index, as one thread loaded them.
struct Loaded {
    at: Instant,
    main: crate::iceberg::table::Table,
    log: crate::iceberg::table::Table,
    index: FileIndex,
}

fn read_thread(
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    shared: Arc<Shared>,
    open: OpenCatalog,
) {
    lower_priority();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            warn!(error = %e, "cannot start a table read runtime: this thread serves no table reads");
            return;
        }
    };
    runtime.block_on(async move {
        let mut catalog: Option<IcebergCatalog> = None;
        let mut tables: HashMap<String, Loaded> = HashMap::new();
        loop {
            let job = { rx.lock().await.recv().await };
            let (read, upper, max_bytes) = match job {
                None => return,
                Some(Job::Lookup { topic, partition, what, from, upper, reply }) => {
                    let found = lookup(
                        &open,
                        &mut catalog,
                        &mut tables,
                        &topic,
                        partition,
                        what,
                        from,
                        upper,
                    )
                    .await;
                    let _ = reply.send(found);
                    continue;
                }
                Some(Job::Read { read, upper }) => (read, upper, READ_AHEAD_BYTES),
            };
            let mut result = serve(&open, &mut catalog, &mut tables, &read, upper, max_bytes).await;
            if result.is_ok() {
                // The batches are rebuilt, neither cached nor answered: a crash here
                // kills the broker with a table read in flight (test_shared_crash.py).
                if let Err(e) = floe_storage::failpoint::check("shared.read.rebuilt") {
                    result = Err(format!(
                        "table read of {} partition {} from {}: {e}",
                        read.topic, read.partition, read.from
                    ));
                }
            }
            if let Ok(rebuilt) = &result {
                let cap = shared.settings.cache_bytes;
                shared.cache.lock().unwrap_or_else(PoisonError::into_inner).insert(
                    &read.range_key(),
                    rebuilt,
                    cap,
                );
            }
            let waiters = shared
                .inflight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&read)
                .unwrap_or_default();
            for (max_bytes, w) in waiters {
                // Cut from the read itself: the cache may be too small to hold it.
                let answer = match &result {
                    Ok(rebuilt) => Ok(cut(
                        rebuilt.batches.iter().map(|(b, c)| (b, c)),
                        read.from,
                        max_bytes,
                        &rebuilt.markers,
                    )
                    .unwrap_or_default()),
                    Err(e) => Err(e.clone()),
                };
                let _ = w.send(answer);
            }
        }
    });
}

async fn serve(
    open: &OpenCatalog,
    catalog: &mut Option<IcebergCatalog>,
    tables: &mut HashMap<String, Loaded>,
    read: &TableRead,
    upper: i64,
    max_bytes: usize,
) -> Result<Rebuilt, String> {
    let l = loaded(open, catalog, tables, &read.topic, Some((read.partition, upper))).await?;
    let range = read_batches_with_index(
        &l.main,
        &l.log,
        &l.index,
        read.partition,
        read.from,
        upper,
        max_bytes,
        read.codec,
    )
    .await
    .map_err(|e| e.to_string())?;
    if range.mismatches > 0 {
        warn!(topic = %read.topic, partition = read.partition, from = read.from,
            mismatches = range.mismatches, "rebuilt batches whose CRC differs from the stored one (a bug: served with the new CRC)");
    }
    let bytes = bytes::Bytes::from(range.bytes);
    let mut batches = Vec::with_capacity(range.batches);
    for b in BatchIter::new(&bytes) {
        let b = b.map_err(|e| format!("a rebuilt batch does not parse (a bug): {e}"))?;
        let end = b.position + b.header.total_size();
        batches.push((
            b.header.base_offset,
            CachedBatch { last: b.header.last_offset(), bytes: bytes.slice(b.position..end) },
        ));
    }
    let markers = l
        .index
        .abort_markers
        .get(&read.partition)
        .into_iter()
        .flatten()
        .map(|m| (m.offset, m.producer_id, m.first_offset))
        .collect();
    let markers_upto = l.index.next_offset(read.partition).unwrap_or(i64::MIN);
    if markers_upto < upper {
        // Local deletion follows the table's committed offsets: a fresh index is never behind it.
        warn!(topic = %read.topic, partition = read.partition, markers_upto, local_log_start = upper,
            "the table's committed offset is below the local log start: abort markers in between may be missed");
    }
    Ok(Rebuilt { batches, markers, markers_upto })
}

#[allow(clippy::too_many_arguments)]
async fn lookup(
    open: &OpenCatalog,
    catalog: &mut Option<IcebergCatalog>,
    tables: &mut HashMap<String, Loaded>,
    topic: &str,
    partition: i32,
    what: Lookup,
    from: i64,
    upper: i64,
) -> LookupResult {
    let l = loaded(open, catalog, tables, topic, None).await?;
    let found = match what {
        Lookup::Timestamp(ts) => {
            crate::shared::lookup::offset_for_timestamp(
                &l.main, &l.log, &l.index, partition, ts, from, upper,
            )
            .await
        }
        Lookup::MaxTimestamp => {
            crate::shared::lookup::max_timestamp(&l.main, &l.log, &l.index, partition, from, upper)
                .await
        }
    };
    found.map_err(|e| e.to_string())
}

/// `topic`'s tables and file index, loaded at most [`TABLE_TTL`] ago.
async fn loaded<'a>(
    open: &OpenCatalog,
    catalog: &mut Option<IcebergCatalog>,
    tables: &'a mut HashMap<String, Loaded>,
    topic: &str,
    need: Option<(i32, i64)>,
) -> Result<&'a Loaded, String> {
    if catalog.is_none() {
        *catalog = Some(open().await?);
    }
    let cat = catalog.as_ref().ok_or("no catalog")?;
    // Fresh enough: loaded within the TTL and, for a read, with the table's
    // offsets at least at the local log start it reads below (its abort markers
    // must reach where the local log's take over).
    let fresh = tables.get(topic).is_some_and(|l| {
        l.at.elapsed() < TABLE_TTL
            && need.is_none_or(|(p, upper)| l.index.next_offset(p).unwrap_or(i64::MIN) >= upper)
    });
    if !fresh {
        let load = |name: String| async move {
            cat.catalog()
                .load_table(&cat.ident(&name))
                .await
                .map_err(|e| format!("cannot load table {name}: {e}"))
        };
        let main = load(topic.to_string()).await?;
        let log = load(crate::catalog::log_table_name(topic)).await?;
        // A typed topic's dead letters hold the offsets its table could not type:
        // merged with the others when read. A raw topic has no `__dlq`.
        let dlq_name = crate::catalog::dead_letter_table_name(topic);
        let dlq = match cat.catalog().table_exists(&cat.ident(&dlq_name)).await {
            Ok(true) => Some(load(dlq_name).await?),
            Ok(false) => None,
            Err(e) => return Err(format!("cannot look for table {dlq_name}: {e}")),
        };
        let index = FileIndex::load_with_dead_letters(&main, &log, dlq.as_ref())
            .await
            .map_err(|e| e.to_string())?;
        tables.insert(topic.to_string(), Loaded { at: Instant::now(), main, log, index });
    }
    tables.get(topic).ok_or_else(|| "table not loaded".to_string())
}

/// nice 10 for the calling thread (Linux applies nice values per thread).
fn lower_priority() {
    // PRIO_PROCESS with `who` 0 is the calling thread on Linux (NPTL keeps nice per thread).
    // SAFETY: a plain system call on integers; no memory is shared with it.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
    if rc != 0 {
        debug!(error = %std::io::Error::last_os_error(), "cannot lower a table read thread's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(last: i64, len: usize) -> CachedBatch {
        CachedBatch { last, bytes: bytes::Bytes::from(vec![0u8; len]) }
    }

    fn read(from: i64) -> TableRead {
        TableRead { topic: "t".into(), partition: 0, from, codec: FetchCompression::Original }
    }

    #[test]
    fn cuts_start_at_the_batch_holding_the_offset_and_stop_at_gaps_and_limits() {
        // Batches [0,4] [5,9] [10,14], a hole 15-19, [20,24].
        let rebuilt = Rebuilt {
            batches: vec![
                (0, batch(4, 100)),
                (5, batch(9, 100)),
                (10, batch(14, 100)),
                (20, batch(24, 100)),
            ],
            // An abort marker at 12 for a transaction from 6; one at 3 (before any fetch below).
            markers: vec![(3, 7, 1), (12, 9, 6)],
            markers_upto: 25,
        };
        let mut cache = Cache::default();
        cache.insert(&read(0).range_key(), &rebuilt, 1 << 20);
        let s = cache.serve(&read(7), 1 << 20, 25).expect("hit");
        assert_eq!(
            (s.bytes.len(), s.next_offset),
            (200, 15),
            "from the batch holding 7 to the hole"
        );
        assert_eq!(s.aborted, vec![(9, 6)], "KIP-98: markers at or after the fetch offset only");
        let s = cache.serve(&read(0), 150, 25).expect("hit");
        assert_eq!(
            (s.bytes.len(), s.next_offset),
            (100, 5),
            "the first batch whole, then the limit"
        );
        assert_eq!(
            cache.serve(&read(0), 1, 25).expect("hit").bytes.len(),
            100,
            "the first batch even above the limit"
        );
        assert!(cache.serve(&read(17), 1 << 20, 25).is_none(), "inside the hole: read the table");
        assert!(cache.serve(&read(30), 1 << 20, 25).is_none(), "past the cached batches");
        // Over the cap the oldest batches go.
        cache.insert(
            &read(0).range_key(),
            &Rebuilt { batches: vec![(25, batch(29, 300))], markers: vec![], markers_upto: 30 },
            400,
        );
        assert!(cache.serve(&read(0), 1 << 20, 25).is_none());
        assert!(cache.bytes <= 400);
        assert_eq!(cache.serve(&read(26), 1 << 20, 30).expect("hit").next_offset, 30);
    }

    #[test]
    fn cached_markers_behind_the_local_log_start_are_read_again() {
        // Batches of an aborted transaction at [0,4]; its marker at 8 was above the
        // table's end (6) when the markers were read, so it was the local log's.
        let rebuilt =
            Rebuilt { batches: vec![(0, batch(4, 100))], markers: vec![], markers_upto: 6 };
        let mut cache = Cache::default();
        cache.insert(&read(0).range_key(), &rebuilt, 1 << 20);
        assert!(
            cache.serve(&read(0), 1 << 20, 6).is_some(),
            "the local log still holds the marker"
        );
        assert!(
            cache.serve(&read(0), 1 << 20, 10).is_none(),
            "local deletion passed the marker: read the table's markers again"
        );
        // A newer read brings the marker; an older one never takes it away again.
        cache.insert(
            &read(0).range_key(),
            &Rebuilt { batches: vec![], markers: vec![(8, 9, 0)], markers_upto: 12 },
            1 << 20,
        );
        cache.insert(
            &read(0).range_key(),
            &Rebuilt { batches: vec![], markers: vec![], markers_upto: 6 },
            1 << 20,
        );
        assert_eq!(cache.serve(&read(0), 1 << 20, 10).expect("hit").aborted, vec![(9, 0)]);
    }
}
