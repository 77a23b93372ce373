//! The maintenance thread: time-based rolling, retention, `flush.ms`
//! flushing and checkpoint writing, off the request runtime.
//!
//! It is a plain thread because everything it does is blocking file work
//! (fsync, unlink) that must never stall a request worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::LogManager;

/// Kafka's `InitialTaskDelayMs`: the first retention pass waits this long
/// after start-up (or less when the retention check interval is shorter).
const INITIAL_RETENTION_DELAY: Duration = Duration::from_secs(30);

/// A running maintenance thread; dropping it does not stop it, [`Maintenance::stop`] does.
#[derive(Debug)]
pub struct Maintenance {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Maintenance {
    /// Starts the thread; it runs a maintenance pass every `tick`
    /// (`log.flush.scheduler.interval.ms`: time-based rolling, `flush.ms`,
    /// checkpoints), and retention with producer expiry only every
    /// `retention_check` (`log.retention.check.interval.ms`), the first time
    /// after 30 s or `retention_check` if shorter (Kafka's initial delay).
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn start(
        logs: Arc<LogManager>,
        tick: Duration,
        retention_check: Duration,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let tick = tick.min(retention_check);
        let handle =
            std::thread::Builder::new().name("floe-maintenance".into()).spawn(move || {
                let mut retention_due =
                    Instant::now() + retention_check.min(INITIAL_RETENTION_DELAY);
                while !flag.load(Ordering::Relaxed) {
                    sleep_unless_stopped(&flag, tick);
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    let retention = Instant::now() >= retention_due;
                    if retention {
                        retention_due = Instant::now() + retention_check;
                    }
                    let now_ms = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_millis() as i64)
                        .unwrap_or(0);
                    match logs.run_maintenance_pass(now_ms, retention) {
                        Ok(report) if report != Default::default() => {
                            tracing::debug!(?report, "log maintenance")
                        }
                        Ok(_) => {}
                        Err(e) => tracing::error!(error = %e, "log maintenance failed"),
                    }
                }
            })?;
        Ok(Self { stop, handle: Some(handle) })
    }

    /// Stops the thread and waits for its current pass to finish.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                tracing::error!("maintenance thread panicked");
            }
        }
    }
}

fn sleep_unless_stopped(flag: &AtomicBool, total: Duration) {
    let step = Duration::from_millis(50);
    let started = Instant::now();
    while started.elapsed() < total && !flag.load(Ordering::Relaxed) {
        std::thread::sleep(step.min(total.saturating_sub(started.elapsed())));
    }
}
