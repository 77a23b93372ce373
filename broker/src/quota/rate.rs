//! A sampled rate, as Kafka's `Rate` over a `SampledStat`: the sum of the
//! values recorded in the last `samples` windows of `window_ms` each,
//! divided by the time those windows cover.
//!
//! Kafka's rules, kept exactly because throttle times follow from them:
//! a window starts at the first record after the previous one completed; a
//! window older than `samples × window_ms` is reset; the elapsed time is at
//! least `samples − 1` full windows (so one burst in an idle sensor is not
//! divided by a few milliseconds), and at least 1 ms.

/// One window: when it started and what was recorded in it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: u64,
    value: f64,
}

/// Kafka's `Rate` (per second) over `samples` windows of `window_ms`.
///
/// Not thread-safe by itself: the quota manager keeps each behind a lock.
#[derive(Debug, Clone)]
pub struct SampledRate {
    samples: Vec<Sample>,
    current: usize,
    num_samples: usize,
    window_ms: u64,
}

impl SampledRate {
    /// An empty rate of `num_samples` windows of `window_ms` (Kafka's
    /// `quota.window.num` = 11, `quota.window.size.seconds` = 1).
    pub fn new(num_samples: usize, window_ms: u64) -> Self {
        Self {
            samples: Vec::with_capacity(num_samples),
            current: 0,
            num_samples: num_samples.max(1),
            window_ms: window_ms.max(1),
        }
    }

    /// Adds `value` at `now_ms` (a negative value takes back an earlier record).
    pub fn record(&mut self, value: f64, now_ms: u64) {
        if self.samples.is_empty() {
            self.samples.push(Sample { start_ms: now_ms, value: 0.0 });
            self.current = 0;
        }
        if now_ms.saturating_sub(self.samples[self.current].start_ms) >= self.window_ms {
            self.current = (self.current + 1) % self.num_samples;
            let fresh = Sample { start_ms: now_ms, value: 0.0 };
            if self.current >= self.samples.len() {
                self.samples.push(fresh);
            } else {
                self.samples[self.current] = fresh;
            }
        }
        self.samples[self.current].value += value;
    }

    /// The rate per second at `now_ms`.
    pub fn measure(&mut self, now_ms: u64) -> f64 {
        self.purge_obsolete(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (self.window_size_ms(now_ms) as f64 / 1000.0)
    }

    /// The time the rate is measured over, in milliseconds (Kafka's `Rate.windowSize`).
    pub fn window_size_ms(&mut self, now_ms: u64) -> u64 {
        self.purge_obsolete(now_ms);
        let oldest = self.samples.iter().map(|s| s.start_ms).min().unwrap_or(now_ms);
        let mut elapsed = now_ms.saturating_sub(oldest);
        let full_windows = elapsed / self.window_ms;
        let min_full_windows = (self.num_samples - 1) as u64;
        if full_windows < min_full_windows {
            elapsed += (min_full_windows - full_windows) * self.window_ms;
        }
        elapsed.max(1)
    }

    fn purge_obsolete(&mut self, now_ms: u64) {
        let expire_age = self.num_samples as u64 * self.window_ms;
        for s in &mut self.samples {
            if now_ms.saturating_sub(s.start_ms) >= expire_age {
                *s = Sample { start_ms: now_ms, value: 0.0 };
            }
        }
    }
}

/// Kafka's `QuotaUtils.throttleTime`: how long a client that drove `rate`
/// over its `bound` must wait for the rate to come back to the bound,
/// `(rate − bound) / bound × window`. Zero at or under the bound.
pub fn throttle_time_ms(rate: f64, bound: f64, window_ms: u64) -> u64 {
    if rate <= bound || bound <= 0.0 {
        return 0;
    }
    ((rate - bound) / bound * window_ms as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_in_an_idle_sensor_is_spread_over_ten_windows() {
        let mut r = SampledRate::new(11, 1000);
        r.record(1000.0, 0);
        assert_eq!(r.window_size_ms(0), 10_000);
        assert!((r.measure(0) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn old_windows_expire_and_reused_slots_restart() {
        let mut r = SampledRate::new(11, 1000);
        for second in 0..30u64 {
            r.record(500.0, second * 1000);
        }
        // 11 windows hold 500 each; the oldest started 10 s ago.
        assert!((r.measure(29_000) - 5500.0 / 10.0).abs() < 1e-9, "{}", r.measure(29_000));
        // Long idle: every window is obsolete.
        assert_eq!(r.measure(100_000), 0.0);
    }

    #[test]
    fn throttle_is_the_time_to_come_back_to_the_bound() {
        // Twice the quota over a 10 s window: wait another 10 s.
        assert_eq!(throttle_time_ms(200.0, 100.0, 10_000), 10_000);
        assert_eq!(throttle_time_ms(110.0, 100.0, 10_000), 1000);
        assert_eq!(throttle_time_ms(90.0, 100.0, 10_000), 0);
    }

    #[test]
    fn unrecording_takes_a_value_back() {
        let mut r = SampledRate::new(11, 1000);
        r.record(1000.0, 5);
        r.record(-1000.0, 6);
        assert_eq!(r.measure(6), 0.0);
    }
}
