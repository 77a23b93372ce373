//! Words for people in the admin CLI and the console: a count with its noun in
//! the right number (tiering's, whose reports use it first), and Kafka's
//! "no limit" values (`Long.MAX_VALUE`) as `unlimited`.

pub use floe_tiering::text::count;

/// A number as people read it: Kafka's `Long.MAX_VALUE` (9223372036854775807,
/// what `max.compaction.lag.ms`, `local.retention.bytes`-style settings and
/// others mean by "no limit") as `unlimited`, anything else unchanged. For
/// tables and the console; JSON keeps the value.
pub fn unlimited_or(value: &str) -> String {
    if value.trim() == i64::MAX.to_string() {
        "unlimited".to_string()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_limit_reads_unlimited() {
        assert_eq!(unlimited_or("9223372036854775807"), "unlimited");
        assert_eq!(unlimited_or("604800000"), "604800000");
    }
}
