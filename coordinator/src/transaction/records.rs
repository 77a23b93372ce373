//! The record layout of `__transaction_state`: one record per change of a
//! transactional id, keyed by the id; a null value (tombstone) removes it.
//! This module owns the bytes.
//!
//! The layouts are Kafka's own (`TransactionLogKey` v0, `TransactionLogValue`
//! v0), so a Kafka tool that decodes `__transaction_state` reads Floe's.
//! Big-endian; strings are an `i16` length then UTF-8; arrays an `i32` count.
//!
//! ```text
//! key    i16 0 | transactional_id string
//! value  i16 0 | producer_id i64 | producer_epoch i16 | transaction_timeout_ms i32
//!        | transaction_status i8 | transaction_partitions [topic string | partition_ids [i32]]
//!        | transaction_last_update_timestamp_ms i64 | transaction_start_timestamp_ms i64
//! ```
//! `transaction_status` is [`TransactionState::id`]. Version 0 carries no
//! previous producer id or epoch (Kafka's v1 adds them as tagged fields):
//! after a restart a retried InitProducerId whose answer was lost bumps the
//! epoch once more instead of getting the same answer, which clients accept.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::metadata::TransactionMetadata;
use super::state::TransactionState;

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;

/// A record that is not a `__transaction_state` record Floe can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable __transaction_state record: {0}")]
pub struct RecordError(pub String);

fn put_string(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

/// The key of `transactional_id`'s records.
pub fn key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_string(&mut buf, transactional_id);
    buf.freeze()
}

/// The value recording `m`.
pub fn value(m: &TransactionMetadata) -> Bytes {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in &m.partitions {
        by_topic.entry(t.as_str()).or_default().push(*p);
    }
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(VALUE_VERSION);
    buf.put_i64(m.producer_id);
    buf.put_i16(m.producer_epoch);
    buf.put_i32(m.txn_timeout_ms);
    buf.put_i8(m.state.id());
    buf.put_i32(by_topic.len() as i32);
    for (topic, partitions) in by_topic {
        put_string(&mut buf, topic);
        buf.put_i32(partitions.len() as i32);
        for p in partitions {
            buf.put_i32(p);
        }
    }
    buf.put_i64(m.txn_last_update_timestamp);
    buf.put_i64(m.txn_start_timestamp);
    buf.freeze()
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn need(&self, n: usize) -> Result<(), RecordError> {
        if self.0.remaining() < n {
            return Err(RecordError(format!("{n} bytes needed, {} left", self.0.remaining())));
        }
        Ok(())
    }
    fn i8(&mut self) -> Result<i8, RecordError> {
        self.need(1)?;
        Ok(self.0.get_i8())
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }
    fn string(&mut self) -> Result<String, RecordError> {
        let len = self.i16()?;
        let len = usize::try_from(len).map_err(|_| RecordError(format!("string length {len}")))?;
        self.need(len)?;
        let s = std::str::from_utf8(&self.0[..len])
            .map_err(|e| RecordError(e.to_string()))?
            .to_string();
        self.0.advance(len);
        Ok(s)
    }
    fn count(&mut self) -> Result<usize, RecordError> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| RecordError(format!("array length {n}")))?;
        // Every element takes at least 4 bytes: a count beyond that is a lie.
        if n > self.0.remaining() / 4 {
            return Err(RecordError(format!(
                "array length {n} with {} bytes left",
                self.0.remaining()
            )));
        }
        Ok(n)
    }
}

/// The transactional id of a key.
///
/// # Errors
/// [`RecordError`] for a key of another version or a short one.
pub fn decode_key(bytes: &[u8]) -> Result<String, RecordError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != KEY_VERSION {
        return Err(RecordError(format!("key version {version}")));
    }
    r.string()
}

/// The metadata a value records for `transactional_id`.
///
/// # Errors
/// [`RecordError`] for a value that is not a v0 value.
pub fn decode_value(
    transactional_id: &str,
    bytes: &[u8],
) -> Result<TransactionMetadata, RecordError> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version != VALUE_VERSION {
        return Err(RecordError(format!("value version {version}")));
    }
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let txn_timeout_ms = r.i32()?;
    let status = r.i8()?;
    let state = TransactionState::from_id(status)
        .ok_or_else(|| RecordError(format!("transaction status {status}")))?;
    let mut m = TransactionMetadata::new(transactional_id, producer_id, txn_timeout_ms, 0);
    m.producer_epoch = producer_epoch;
    m.state = state;
    for _ in 0..r.count()? {
        let topic = r.string()?;
        for _ in 0..r.count()? {
            m.partitions.insert((topic.clone(), r.i32()?));
        }
    }
    m.txn_last_update_timestamp = r.i64()?;
    m.txn_start_timestamp = r.i64()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips() {
        let mut m = TransactionMetadata::new("app-1", 42, 60_000, 5);
        m.producer_epoch = 3;
        m.state = TransactionState::PrepareCommit;
        m.partitions.insert(("orders".into(), 2));
        m.partitions.insert(("orders".into(), 0));
        m.partitions.insert(("__consumer_offsets".into(), 0));
        m.txn_start_timestamp = 4;
        assert_eq!(decode_key(&key("app-1")).unwrap(), "app-1");
        assert_eq!(decode_value("app-1", &value(&m)).unwrap(), m);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_key(&[]).is_err());
        assert!(decode_key(&[0, 0, 0x7f, 0xff]).is_err());
        assert!(decode_value("x", &[0, 0, 1]).is_err());
        let mut v = value(&TransactionMetadata::new("x", 1, 1, 1)).to_vec();
        v[16] = 99; // status
        assert!(decode_value("x", &v).is_err());
        let mut huge = value(&TransactionMetadata::new("x", 1, 1, 1)).to_vec();
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_value("x", &huge).is_err());
    }
}
