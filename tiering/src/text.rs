//! Words for people in tiering's reports (`floe iceberg status`, `maintain`),
//! which the broker's admin CLI uses too.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_plural_unless_one() {
        assert_eq!(count(1u32, "partition"), "1 partition");
        assert_eq!(count(0u32, "partition"), "0 partitions");
        assert_eq!(count(12usize, "table"), "12 tables");
    }
}
