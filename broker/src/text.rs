//! Words for people, shared by the broker's reports (`floe iceberg status`)
//! and the admin CLI: a count with its noun in the right number, and
//! Kafka's "no limit" values (`Long.MAX_VALUE`) as `unlimited`.

/// `n noun`, the noun plural (an `s` added) unless `n` is 1: `1 partition`, `3 partitions`.
pub fn count(n: impl TryInto<u128>, noun: &str) -> String {
    // Counts are never negative; one that is prints as 0.
    let n: u128 = n.try_into().unwrap_or(0);
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

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
    fn counts_take_the_plural_unless_one() {
        assert_eq!(count(1u32, "partition"), "1 partition");
        assert_eq!(count(0u32, "partition"), "0 partitions");
        assert_eq!(count(12usize, "table"), "12 tables");
        assert_eq!(unlimited_or("9223372036854775807"), "unlimited");
        assert_eq!(unlimited_or("604800000"), "604800000");
    }
}
