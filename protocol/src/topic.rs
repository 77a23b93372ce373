//! Kafka's internal topic names, and the one rule about them that every crate
//! needs: which topics are internal (as Kafka's `org.apache.kafka.common.internals.Topic`).

/// The group coordinator's log of committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The transaction coordinator's log of transactional ids and their state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// Whether `topic` is one of the coordinators' internal topics: the broker hides them from
/// listings, closes them to clients' produce and delete, and never tiers them.
pub fn is_internal(topic: &str) -> bool {
    topic == OFFSETS_TOPIC || topic == TRANSACTION_STATE_TOPIC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_coordinators_topics_are_internal() {
        assert!(is_internal("__consumer_offsets"));
        assert!(is_internal("__transaction_state"));
        assert!(!is_internal("__consumer_offsets_x"));
        assert!(!is_internal("orders"));
    }
}
