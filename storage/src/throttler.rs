//! `Throttler`: holds a thread to a byte rate (Kafka's `Throttler`, as the
//! log cleaner uses it for `log.cleaner.io.max.bytes.per.second`).

use std::time::{Duration, Instant};

/// How long a measuring window lasts before the rate is checked (Kafka's 300 ms).
const CHECK_INTERVAL: Duration = Duration::from_millis(300);

/// Sleeps the calling thread whenever the bytes it reported in the current
/// window came faster than the rate allows.
#[derive(Debug)]
pub(crate) struct Throttler {
    bytes_per_second: f64,
    window_start: Instant,
    bytes_in_window: f64,
}

impl Throttler {
    /// A throttler for `bytes_per_second`; infinite (or non-positive) means none.
    pub(crate) fn new(bytes_per_second: f64) -> Self {
        Self { bytes_per_second, window_start: Instant::now(), bytes_in_window: 0.0 }
    }

    /// Accounts for `bytes` read or written, sleeping if the rate is exceeded.
    pub(crate) fn maybe_throttle(&mut self, bytes: u64) {
        if !self.bytes_per_second.is_finite() || self.bytes_per_second <= 0.0 {
            return;
        }
        self.bytes_in_window += bytes as f64;
        let elapsed = self.window_start.elapsed();
        if elapsed < CHECK_INTERVAL {
            return;
        }
        let allowed = Duration::from_secs_f64(self.bytes_in_window / self.bytes_per_second);
        if allowed > elapsed {
            std::thread::sleep(allowed - elapsed);
        }
        self.window_start = Instant::now();
        self.bytes_in_window = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_never_sleeps_and_a_rate_holds_the_thread() {
        let started = Instant::now();
        let mut t = Throttler::new(f64::INFINITY);
        for _ in 0..1000 {
            t.maybe_throttle(1 << 30);
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        // 1 MB at 2 MB/s, reported after the first window: about half a second.
        let mut t = Throttler::new(2_000_000.0);
        std::thread::sleep(CHECK_INTERVAL);
        let started = Instant::now();
        t.maybe_throttle(1_000_000);
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
    }
}
