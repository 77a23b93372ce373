//! An outbound Kafka connection (placeholder until written).
