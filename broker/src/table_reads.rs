//! Fetches below a shared topic's local log start offset, served from its
//! Iceberg table (`floe.iceberg.storage=shared`, `docs/shared-mode.md` 4.2–4.3).
//!
//! The request path never decodes Parquet: a fetch hands a [`TableRead`] to a
//! bounded queue and waits at most `floe.iceberg.shared.fetch-max-wait-ms` (or
//! the request's own `max_wait_ms` if shorter). OS threads named
//! `floe-shared-read-N`, each with a current-thread runtime and its own
//! read-only catalog, rebuild the original record batches from the table
//! (`floe_tiering::shared`) and keep them in a cache bounded by
//! `floe.iceberg.shared.cache-bytes`. A wait that times out answers the
//! partition empty and leaves the read running, so the client's next fetch of
//! the same offset is served from memory. Reads of the same range by several
//! fetches (consumer groups backfilling together) are done once: later ones
//! wait for the first.
//!
//! Each thread lowers its own scheduling priority (nice 10: Linux nice values
//! are per thread), so on a small machine a backfill takes the CPU produce and
//! tailing fetches leave.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use floe_tiering::shared::{read_batches_with_index, FetchCompression, FileIndex, RebuiltRange};
use floe_tiering::IcebergCatalog;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::tiering::SharedReadSettings;

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

/// What a table read answers: the rebuilt batches, or why there are none.
pub type ReadResult = Result<Arc<RebuiltRange>, String>;

enum Job {
    /// Rebuild batches (answered to the fetches in `Shared::inflight`).
    Read { read: TableRead, upper: i64, max_bytes: usize },
    /// A ListOffsets lookup by time in `[from, upper)`.
    Lookup { topic: String, partition: i32, what: Lookup, from: i64, upper: i64, reply: oneshot::Sender<LookupResult> },
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

/// Rebuilt ranges by read, oldest evicted first once over the byte cap.
#[derive(Default)]
struct Cache {
    entries: HashMap<TableRead, Arc<RebuiltRange>>,
    order: VecDeque<TableRead>,
    bytes: u64,
}

impl Cache {
    fn insert(&mut self, read: TableRead, range: Arc<RebuiltRange>, cap: u64) {
        let size = range.bytes.len() as u64;
        if size > cap {
            return;
        }
        if let Some(old) = self.entries.insert(read.clone(), range) {
            self.bytes -= old.bytes.len() as u64;
        } else {
            self.order.push_back(read);
        }
        self.bytes += size;
        while self.bytes > cap {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(gone) = self.entries.remove(&oldest) {
                self.bytes -= gone.bytes.len() as u64;
            }
        }
    }
}

struct Shared {
    cache: Mutex<Cache>,
    /// Reads queued or running, with the fetches waiting for each.
    inflight: Mutex<HashMap<TableRead, Vec<oneshot::Sender<ReadResult>>>>,
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
pub type OpenCatalog = Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<IcebergCatalog, String>> + Send>> + Send + Sync>;

impl TableReads {
    /// Starts `settings.threads` read threads, each opening its catalog with `open`.
    ///
    /// # Errors
    /// If a thread cannot be spawned.
    pub fn start(settings: SharedReadSettings, open: OpenCatalog) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>(settings.queue.max(1));
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let shared = Arc::new(Shared { cache: Mutex::default(), inflight: Mutex::default(), settings });
        for n in 0..settings.threads.max(1) {
            let (rx, shared, open) = (rx.clone(), shared.clone(), open.clone());
            std::thread::Builder::new().name(format!("floe-shared-read-{n}")).spawn(move || read_thread(rx, shared, open))?;
        }
        info!(threads = settings.threads, queue = settings.queue, cache_bytes = settings.cache_bytes, "shared-storage table readers started");
        Ok(Self { jobs: tx, shared })
    }

    /// The rebuilt batches of `read` up to `upper`, about `max_bytes` of them,
    /// within `wait`; `None` when they are not ready by then (or the queue is
    /// full): answer the partition empty, the client fetches the same offset again.
    pub async fn read(&self, read: TableRead, upper: i64, max_bytes: usize, wait: Duration) -> Option<ReadResult> {
        if let Some(hit) = self.shared.cache.lock().unwrap_or_else(PoisonError::into_inner).entries.get(&read) {
            return Some(Ok(hit.clone()));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut inflight = self.shared.inflight.lock().unwrap_or_else(PoisonError::into_inner);
            match inflight.get_mut(&read) {
                Some(waiters) => waiters.push(tx),
                None => {
                    let job = Job::Read { read: read.clone(), upper, max_bytes };
                    if self.jobs.try_send(job).is_err() {
                        debug!(topic = %read.topic, partition = read.partition, from = read.from, "table read queue full: answering empty");
                        return None;
                    }
                    inflight.insert(read, vec![tx]);
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
    pub async fn lookup(&self, topic: &str, partition: i32, what: Lookup, from: i64, upper: i64, wait: Duration) -> Option<LookupResult> {
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
    main: floe_tiering::iceberg::table::Table,
    log: floe_tiering::iceberg::table::Table,
    index: FileIndex,
}

fn read_thread(rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>, shared: Arc<Shared>, open: OpenCatalog) {
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
                    let found = lookup(&open, &mut catalog, &mut tables, &topic, partition, what, from, upper).await;
                    let _ = reply.send(found);
                    continue;
                }
                Some(Job::Read { read, upper, max_bytes }) => (read, upper, max_bytes),
            };
            let result = serve(&open, &mut catalog, &mut tables, &read, upper, max_bytes).await;
            if let Ok(range) = &result {
                if range.mismatches > 0 {
                    warn!(topic = %read.topic, partition = read.partition, from = read.from,
                        mismatches = range.mismatches, "rebuilt batches whose CRC differs from the stored one (a bug: served with the new CRC)");
                }
                let cap = shared.settings.cache_bytes;
                shared.cache.lock().unwrap_or_else(PoisonError::into_inner).insert(read.clone(), range.clone(), cap);
            }
            let waiters = shared.inflight.lock().unwrap_or_else(PoisonError::into_inner).remove(&read).unwrap_or_default();
            for w in waiters {
                let _ = w.send(result.clone());
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
) -> ReadResult {
    let l = loaded(open, catalog, tables, &read.topic).await?;
    let range = read_batches_with_index(&l.main, &l.log, &l.index, read.partition, read.from, upper, max_bytes, read.codec)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(range))
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
    let l = loaded(open, catalog, tables, topic).await?;
    let found = match what {
        Lookup::Timestamp(ts) => floe_tiering::shared::lookup::offset_for_timestamp(&l.main, &l.log, &l.index, partition, ts, from, upper).await,
        Lookup::MaxTimestamp => floe_tiering::shared::lookup::max_timestamp(&l.main, &l.log, &l.index, partition, from, upper).await,
    };
    found.map_err(|e| e.to_string())
}

/// `topic`'s tables and file index, loaded at most [`TABLE_TTL`] ago.
async fn loaded<'a>(
    open: &OpenCatalog,
    catalog: &mut Option<IcebergCatalog>,
    tables: &'a mut HashMap<String, Loaded>,
    topic: &str,
) -> Result<&'a Loaded, String> {
    if catalog.is_none() {
        *catalog = Some(open().await?);
    }
    let cat = catalog.as_ref().ok_or("no catalog")?;
    let fresh = tables.get(topic).is_some_and(|l| l.at.elapsed() < TABLE_TTL);
    if !fresh {
        let load = |name: String| async move {
            cat.catalog().load_table(&cat.ident(&name)).await.map_err(|e| format!("cannot load table {name}: {e}"))
        };
        let main = load(topic.to_string()).await?;
        let log = load(floe_tiering::catalog::log_table_name(topic)).await?;
        let index = FileIndex::load(&main, &log).await.map_err(|e| e.to_string())?;
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
