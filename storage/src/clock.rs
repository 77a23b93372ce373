//! The wall clock every crate stamps and compares with: the coordinators'
//! records, the Schema Registry's appends, tiering's expiry, retention, orphan
//! ages, commit times and last-error metric, the cleaner's statistics.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; a clock before 1970 reads 0.
pub fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Seconds since the Unix epoch; a clock before 1970 reads 0.
pub fn wall_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
