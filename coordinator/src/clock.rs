//! The wall clock both coordinators stamp their records with.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, for persisted state timestamps and
/// expiry (committed offsets, transactional ids). A clock before 1970 reads 0.
pub fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
