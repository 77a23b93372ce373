//! Resource limits on client connections: how many may be open, how long a
//! connection may sit idle or dribble a request, and the open-files limit.
//!
//! Kafka's names where Kafka has one: `max.connections`,
//! `max.connections.per.ip`, `connections.max.idle.ms`. Floe adds
//! `floe.request.read-timeout-ms`, a deadline for the rest of a request once
//! its first bytes arrived, so a client that sends two bytes and stalls
//! (slowloris) costs a socket for seconds, not for `connections.max.idle.ms`.
//!
//! In-flight requests per connection are capped at one by construction: a
//! connection reads its next request only after the previous response is
//! written (as Kafka mutes a channel), and pipelined requests wait in the
//! socket's receive buffer, which the kernel bounds.
//!
//! Memory per connection follows the bytes a client has actually sent, not
//! the size it announces: a frame's buffer grows as its bytes arrive
//! (`floe_protocol::frame::parse_frame`), so ten thousand half-sent frames
//! announcing 100 MiB each hold kilobytes, not terabytes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Why a new connection was closed as soon as it was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max.connections` connections are already open.
    MaxConnections,
    /// `max.connections.per.ip` connections from this address are already open.
    MaxConnectionsPerIp,
}

impl Refusal {
    /// The `reason` label of `floe_connections_closed_on_error_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            Refusal::MaxConnections => "max_connections",
            Refusal::MaxConnectionsPerIp => "max_connections_per_ip",
        }
    }
}

/// Counts open connections, in all and per client address, and admits new
/// ones while both counts are under their limits.
///
/// Thread-safe; the lock is held for a map update only, never across an `.await`.
#[derive(Debug)]
pub struct ConnectionLimits {
    /// Atomics: a dynamic broker config change ([`Self::set`]) applies to the next connection.
    max_total: AtomicUsize,
    max_per_ip: AtomicUsize,
    open: Mutex<OpenConnections>,
}

#[derive(Debug, Default)]
struct OpenConnections {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

impl ConnectionLimits {
    /// Limits of `max_total` connections, `max_per_ip` from any one address.
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total: AtomicUsize::new(max_total),
            max_per_ip: AtomicUsize::new(max_per_ip),
            open: Mutex::new(OpenConnections::default()),
        })
    }

    /// New limits (`max.connections`, `max.connections.per.ip` altered at
    /// run time): connections already open stay; new ones are admitted
    /// against the new values.
    pub fn set(&self, max_total: usize, max_per_ip: usize) {
        self.max_total.store(max_total, Ordering::Relaxed);
        self.max_per_ip.store(max_per_ip, Ordering::Relaxed);
    }

    /// Counts a new connection from `ip` if the limits allow it; the count
    /// drops when the returned permit is dropped.
    ///
    /// # Errors
    /// The limit that is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let mut open = self.lock();
        if open.total >= self.max_total.load(Ordering::Relaxed) {
            return Err(Refusal::MaxConnections);
        }
        let from_ip = open.per_ip.entry(ip).or_insert(0);
        if *from_ip >= self.max_per_ip.load(Ordering::Relaxed) {
            return Err(Refusal::MaxConnectionsPerIp);
        }
        *from_ip += 1;
        open.total += 1;
        Ok(ConnectionPermit { limits: self.clone(), ip })
    }

    /// The configured value of the limit behind `why`.
    pub fn limit(&self, why: Refusal) -> usize {
        match why {
            Refusal::MaxConnections => self.max_total.load(Ordering::Relaxed),
            Refusal::MaxConnectionsPerIp => self.max_per_ip.load(Ordering::Relaxed),
        }
    }

    /// Connections currently counted.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    fn release(&self, ip: IpAddr) {
        let mut open = self.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&ip);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OpenConnections> {
        // A panic elsewhere while holding this lock leaves plain counters behind: still usable.
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnectionPermit {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.limits.release(self.ip);
    }
}

/// Lets a log line through at most once per interval, counting the ones it
/// held back, so a flood of refused or timed-out connections writes a line a
/// second rather than a line a connection.
#[derive(Debug)]
pub struct LogLimiter {
    interval: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl LogLimiter {
    /// A limiter letting one line through per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self { interval, state: Mutex::new((None, 0)) }
    }

    /// `Some(n)` when a line may be written now, `n` counting this event and
    /// the ones held back since the last line; `None` to stay quiet.
    pub fn admit(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (last, held_back) = &mut *state;
        if last.is_some_and(|at| now.duration_since(at) < self.interval) {
            *held_back += 1;
            return None;
        }
        let events = *held_back + 1;
        *last = Some(now);
        *held_back = 0;
        Some(events)
    }
}

/// Log lines about connections closed for passing a read deadline (one
/// limiter for the whole process: a slowloris swarm spans many connections).
pub static READ_DEADLINE_LOG: LogLimiter = LogLimiter::new(Duration::from_secs(1));

/// Log lines about connections refused by [`ConnectionLimits`].
pub static REFUSAL_LOG: LogLimiter = LogLimiter::new(Duration::from_secs(1));

/// Which read deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadExpiry {
    /// No bytes of a next request for `connections.max.idle.ms`.
    Idle,
    /// A request's first bytes came but not the rest within `floe.request.read-timeout-ms`.
    RequestIncomplete,
}

impl ReadExpiry {
    /// The `reason` label of `floe_connections_closed_on_error_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            ReadExpiry::Idle => "idle",
            ReadExpiry::RequestIncomplete => "request_read_timeout",
        }
    }
}

/// The deadline of a connection's next read: the idle timeout while no
/// request has begun, the request read timeout (counted from the first
/// bytes, not reset by each dribble) once one has.
#[derive(Debug)]
pub struct ReadClock {
    idle: Duration,
    request: Duration,
    request_started: Option<Instant>,
}

impl ReadClock {
    /// A clock with the two timeouts.
    pub fn new(idle: Duration, request: Duration) -> Self {
        Self { idle, request, request_started: None }
    }

    /// The deadline for the next read, given how many bytes of an
    /// unfinished request are already buffered.
    pub fn next_deadline(&mut self, buffered: usize) -> (Instant, ReadExpiry) {
        let now = Instant::now();
        if buffered == 0 {
            self.request_started = None;
            return (now + self.idle, ReadExpiry::Idle);
        }
        let started = *self.request_started.get_or_insert(now);
        (started + self.request, ReadExpiry::RequestIncomplete)
    }

    /// A whole request has been read: the next one gets a fresh deadline.
    pub fn request_complete(&mut self) {
        self.request_started = None;
    }
}

/// Raises this process's soft open-files limit to its hard limit, so the
/// broker can hold as many connections as the system allows it; returns the
/// soft limit now in force.
///
/// # Errors
/// The `getrlimit`/`setrlimit` error.
pub fn raise_open_files_limit() -> nix::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(hard.max(soft))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limits_and_frees_places_on_drop() {
        let limits = ConnectionLimits::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = limits.admit(a).unwrap();
        let _a2 = limits.admit(a).unwrap();
        assert_eq!(limits.admit(a).unwrap_err(), Refusal::MaxConnectionsPerIp);
        let _b1 = limits.admit(b).unwrap();
        assert_eq!(limits.admit(b).unwrap_err(), Refusal::MaxConnections);
        assert_eq!(limits.open(), 3);
        drop(a1);
        assert_eq!(limits.open(), 2);
        let _a3 = limits.admit(a).unwrap();
        assert_eq!(limits.open(), 3);
    }

    #[test]
    fn log_limiter_counts_what_it_holds_back() {
        let log = LogLimiter::new(Duration::from_secs(3600));
        assert_eq!(log.admit(), Some(1));
        assert_eq!(log.admit(), None);
        assert_eq!(log.admit(), None);
        let log = LogLimiter::new(Duration::ZERO);
        assert_eq!(log.admit(), Some(1));
        assert_eq!(log.admit(), Some(1));
    }

    #[test]
    fn request_deadline_counts_from_the_first_bytes() {
        let mut clock = ReadClock::new(Duration::from_secs(600), Duration::from_secs(10));
        let (idle_at, kind) = clock.next_deadline(0);
        assert_eq!(kind, ReadExpiry::Idle);
        assert!(idle_at > Instant::now() + Duration::from_secs(590));
        let (first, kind) = clock.next_deadline(2);
        assert_eq!(kind, ReadExpiry::RequestIncomplete);
        assert!(first < Instant::now() + Duration::from_secs(11));
        std::thread::sleep(Duration::from_millis(5));
        // More dribbled bytes do not move the deadline.
        assert_eq!(clock.next_deadline(3).0, first);
        clock.request_complete();
        assert!(clock.next_deadline(1).0 > first);
    }
}
