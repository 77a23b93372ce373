//! The maintenance thread: time-based rolling, retention, `flush.ms`
//! flushing and checkpoint writing, off the request runtime.
//!
//! It is a plain thread because everything it does is blocking file work
//! (fsync, unlink) that must never stall a request worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floe_storage::LogManager;

/// A running maintenance thread; dropping it does not stop it, [`Maintenance::stop`] does.
#[derive(Debug)]
pub struct Maintenance {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Maintenance {
    /// Starts the thread; it runs a maintenance pass every `tick` (the
    /// shorter of the retention-check and flush-scheduler intervals).
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn start(logs: Arc<LogManager>, tick: Duration) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new().name("floe-maintenance".into()).spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                sleep_unless_stopped(&flag, tick);
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
                match logs.run_maintenance(now_ms) {
                    Ok(report) if report != Default::default() => tracing::debug!(?report, "log maintenance"),
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
