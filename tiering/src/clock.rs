//! The wall clock tiering stamps and compares with: snapshot expiry, retention,
//! orphan ages, compaction's commit times and the last-error metric.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; a clock before 1970 reads 0.
pub fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Seconds since the Unix epoch; a clock before 1970 reads 0.
pub fn wall_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
