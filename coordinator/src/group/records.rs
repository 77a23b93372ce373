//! The record layouts of the `__consumer_offsets` log: keys and values of
//! committed offsets and group metadata. This module owns the bytes.
//!
//! The layouts are Kafka's own (`OffsetCommitKey` v1, `OffsetCommitValue`
//! v3, `GroupMetadataKey` v2, `GroupMetadataValue` v3 with no members), so a
//! Kafka tool that decodes `__consumer_offsets` reads Floe's too. Every key
//! and value starts with a big-endian `i16` version; strings are an `i16`
//! length then UTF-8 (length -1 is null). A null record value is a tombstone.
//!
//! ```text
//! offset key     i16 1 | group string | topic string | partition i32
//! offset value   i16 3 | offset i64 | leader_epoch i32 | metadata string | commit_timestamp i64
//! group key      i16 2 | group string
//! group value    i16 3 | protocol_type string | generation i32 | protocol nullable string
//!                | leader nullable string | current_state_timestamp i64 | members i32 (= 0)
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Key version of an offset commit.
const OFFSET_KEY: i16 = 1;
/// Key version of group metadata.
const GROUP_KEY: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;

/// A committed offset: what OffsetFetch answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The next offset the group will consume.
    pub offset: i64,
    /// The leader epoch of the record before `offset`, or -1.
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: String,
    /// When the commit was made (ms since the epoch).
    pub commit_timestamp: i64,
}

/// What is persisted of a group besides its offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupMetadata {
    /// "consumer", "connect", … (empty for groups that only ever committed offsets).
    pub protocol_type: String,
    /// The generation last completed.
    pub generation: i32,
    /// The selected protocol (assignor) of that generation.
    pub protocol: Option<String>,
    /// The leader of that generation.
    pub leader: Option<String>,
    /// When the group entered its current state (ms since the epoch).
    pub state_timestamp: i64,
}

/// A decoded record of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEntry {
    /// An offset commit, or its tombstone (`None`).
    Offset {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The commit; `None` deletes it.
        value: Option<OffsetAndMetadata>,
    },
    /// Group metadata, or its tombstone (`None`: the group was deleted).
    Group {
        /// The group.
        group: String,
        /// The metadata; `None` deletes the group.
        value: Option<GroupMetadata>,
    },
}

/// Why a record could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("undecodable __consumer_offsets record: {0}")]
pub struct DecodeError(String);

fn put_str(buf: &mut BytesMut, s: &str) {
    let bytes = s.as_bytes();
    let len = bytes.len().min(i16::MAX as usize);
    buf.put_i16(len as i16);
    buf.put_slice(&bytes[..len]);
}

fn put_nullable_str(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(buf, s),
        None => buf.put_i16(-1),
    }
}

fn need(buf: &Bytes, n: usize, what: &str) -> Result<(), DecodeError> {
    if buf.remaining() < n {
        return Err(DecodeError(format!("truncated {what}")));
    }
    Ok(())
}

fn get_nullable_str(buf: &mut Bytes, what: &str) -> Result<Option<String>, DecodeError> {
    need(buf, 2, what)?;
    let len = buf.get_i16();
    if len < 0 {
        return Ok(None);
    }
    need(buf, len as usize, what)?;
    let raw = buf.split_to(len as usize);
    String::from_utf8(raw.to_vec()).map(Some).map_err(|_| DecodeError(format!("{what} is not UTF-8")))
}

fn get_str(buf: &mut Bytes, what: &str) -> Result<String, DecodeError> {
    get_nullable_str(buf, what)?.ok_or_else(|| DecodeError(format!("null {what}")))
}

fn get_i32(buf: &mut Bytes, what: &str) -> Result<i32, DecodeError> {
    need(buf, 4, what)?;
    Ok(buf.get_i32())
}

fn get_i64(buf: &mut Bytes, what: &str) -> Result<i64, DecodeError> {
    need(buf, 8, what)?;
    Ok(buf.get_i64())
}

/// The key of `group`'s offset for `topic`-`partition`.
pub fn offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(12 + group.len() + topic.len());
    buf.put_i16(OFFSET_KEY);
    put_str(&mut buf, group);
    put_str(&mut buf, topic);
    buf.put_i32(partition);
    buf.freeze()
}

/// The value of a committed offset.
pub fn offset_value(o: &OffsetAndMetadata) -> Bytes {
    let mut buf = BytesMut::with_capacity(24 + o.metadata.len());
    buf.put_i16(OFFSET_VALUE_VERSION);
    buf.put_i64(o.offset);
    buf.put_i32(o.leader_epoch);
    put_str(&mut buf, &o.metadata);
    buf.put_i64(o.commit_timestamp);
    buf.freeze()
}

/// The key of `group`'s metadata.
pub fn group_key(group: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + group.len());
    buf.put_i16(GROUP_KEY);
    put_str(&mut buf, group);
    buf.freeze()
}

/// The value of a group's metadata (no members: they are not persisted).
pub fn group_value(g: &GroupMetadata) -> Bytes {
    let mut buf = BytesMut::with_capacity(32);
    buf.put_i16(GROUP_VALUE_VERSION);
    put_str(&mut buf, &g.protocol_type);
    buf.put_i32(g.generation);
    put_nullable_str(&mut buf, g.protocol.as_deref());
    put_nullable_str(&mut buf, g.leader.as_deref());
    buf.put_i64(g.state_timestamp);
    buf.put_i32(0);
    buf.freeze()
}

/// Decodes one record of the log.
///
/// # Errors
/// [`DecodeError`] for a key or value Floe does not know or that is cut short.
pub fn decode(key: Option<&Bytes>, value: Option<&Bytes>) -> Result<LogEntry, DecodeError> {
    let mut key = key.cloned().ok_or_else(|| DecodeError("null key".into()))?;
    need(&key, 2, "key version")?;
    match key.get_i16() {
        0 | OFFSET_KEY => {
            let group = get_str(&mut key, "group")?;
            let topic = get_str(&mut key, "topic")?;
            let partition = get_i32(&mut key, "partition")?;
            let value = value.map(|v| decode_offset_value(v.clone())).transpose()?;
            Ok(LogEntry::Offset { group, topic, partition, value })
        }
        GROUP_KEY => {
            let group = get_str(&mut key, "group")?;
            let value = value.map(|v| decode_group_value(v.clone())).transpose()?;
            Ok(LogEntry::Group { group, value })
        }
        v => Err(DecodeError(format!("unknown key version {v}"))),
    }
}

fn decode_offset_value(mut v: Bytes) -> Result<OffsetAndMetadata, DecodeError> {
    need(&v, 2, "value version")?;
    let version = v.get_i16();
    if !(0..=3).contains(&version) {
        return Err(DecodeError(format!("unknown offset value version {version}")));
    }
    let offset = get_i64(&mut v, "offset")?;
    let leader_epoch = if version >= 3 { get_i32(&mut v, "leader epoch")? } else { -1 };
    let metadata = get_str(&mut v, "metadata")?;
    let commit_timestamp = get_i64(&mut v, "commit timestamp")?;
    Ok(OffsetAndMetadata { offset, leader_epoch, metadata, commit_timestamp })
}

fn decode_group_value(mut v: Bytes) -> Result<GroupMetadata, DecodeError> {
    need(&v, 2, "value version")?;
    let version = v.get_i16();
    if !(0..=3).contains(&version) {
        return Err(DecodeError(format!("unknown group value version {version}")));
    }
    let protocol_type = get_str(&mut v, "protocol type")?;
    let generation = get_i32(&mut v, "generation")?;
    let protocol = get_nullable_str(&mut v, "protocol")?;
    let leader = get_nullable_str(&mut v, "leader")?;
    let state_timestamp = if version >= 2 { get_i64(&mut v, "state timestamp")? } else { -1 };
    // Members follow; Floe writes none and does not read Kafka's.
    Ok(GroupMetadata { protocol_type, generation, protocol, leader, state_timestamp })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_groups_round_trip() {
        let o = OffsetAndMetadata { offset: 42, leader_epoch: 0, metadata: "m".into(), commit_timestamp: 7 };
        let e = decode(Some(&offset_key("g", "t", 3)), Some(&offset_value(&o))).unwrap();
        assert_eq!(e, LogEntry::Offset { group: "g".into(), topic: "t".into(), partition: 3, value: Some(o) });
        let e = decode(Some(&offset_key("g", "t", 3)), None).unwrap();
        assert!(matches!(e, LogEntry::Offset { value: None, .. }));
        let g = GroupMetadata {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: None,
            state_timestamp: 9,
        };
        let e = decode(Some(&group_key("g")), Some(&group_value(&g))).unwrap();
        assert_eq!(e, LogEntry::Group { group: "g".into(), value: Some(g) });
        assert!(decode(Some(&Bytes::from_static(&[0, 9])), None).is_err());
        assert!(decode(Some(&offset_key("g", "t", 3).slice(..5)), None).is_err());
    }
}
