//! The record layouts of the `__consumer_offsets` log: keys and values of
//! committed offsets and group metadata. This module owns the bytes.
//!
//! The layouts are Kafka's own (`OffsetCommitKey` v1, `OffsetCommitValue`
//! v3, `GroupMetadataKey` v2, `GroupMetadataValue` v3), so a Kafka tool that
//! decodes `__consumer_offsets` reads Floe's too, and Floe reads the group
//! values of every version Kafka wrote before its flexible ones (v0–v3).
//! Every key and value starts with a big-endian `i16` version; strings are an
//! `i16` length then UTF-8 (length -1 is null); bytes are an `i32` length then
//! the bytes. A null record value is a tombstone.
//!
//! A group's value carries its members, as Kafka's does: a coordinator that
//! loads the log (after a restart or a leader change of the partition) gets
//! the group back Stable with the same generation, members and assignments,
//! so the members' heartbeats and transactional offset commits go on without
//! a rebalance.
//!
//! ```text
//! offset key     i16 1 | group string | topic string | partition i32
//! offset value   i16 3 | offset i64 | leader_epoch i32 | metadata string | commit_timestamp i64
//! group key      i16 2 | group string
//! group value    i16 3 | protocol_type string | generation i32 | protocol nullable string
//!                | leader nullable string | current_state_timestamp i64 (v2+)
//!                | members i32 count, then for each:
//!                    member_id string | group_instance_id nullable string (v3+)
//!                    | client_id string | client_host string | rebalance_timeout i32 (v1+)
//!                    | session_timeout i32 | subscription bytes | assignment bytes
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
    /// The members of that generation with their assignments (none when the
    /// group is Empty).
    pub members: Vec<MemberMetadata>,
}

/// What is persisted of one member of a group's generation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberMetadata {
    /// The member id the coordinator gave it.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// The client id of its JoinGroup.
    pub client_id: String,
    /// The address it joined from.
    pub client_host: String,
    /// Rebalance timeout (ms); -1 when a v0 value did not carry it.
    pub rebalance_timeout_ms: i32,
    /// Session timeout (ms).
    pub session_timeout_ms: i32,
    /// Its metadata for the group's selected protocol.
    pub subscription: Bytes,
    /// The leader's assignment for it.
    pub assignment: Bytes,
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

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
    buf.put_slice(&b[..b.len().min(i32::MAX as usize)]);
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
    String::from_utf8(raw.to_vec())
        .map(Some)
        .map_err(|_| DecodeError(format!("{what} is not UTF-8")))
}

fn get_str(buf: &mut Bytes, what: &str) -> Result<String, DecodeError> {
    get_nullable_str(buf, what)?.ok_or_else(|| DecodeError(format!("null {what}")))
}

fn get_i32(buf: &mut Bytes, what: &str) -> Result<i32, DecodeError> {
    need(buf, 4, what)?;
    Ok(buf.get_i32())
}

fn get_bytes(buf: &mut Bytes, what: &str) -> Result<Bytes, DecodeError> {
    let len = get_i32(buf, what)?;
    if len < 0 {
        // Kafka's bytes fields here are not nullable; a -1 reads as empty.
        return Ok(Bytes::new());
    }
    need(buf, len as usize, what)?;
    Ok(buf.split_to(len as usize))
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

/// The value of a group's metadata, with its members.
pub fn group_value(g: &GroupMetadata) -> Bytes {
    let members: usize = g
        .members
        .iter()
        .map(|m| {
            24 + m.member_id.len()
                + m.instance_id.as_ref().map_or(0, String::len)
                + m.client_id.len()
                + m.client_host.len()
                + m.subscription.len()
                + m.assignment.len()
        })
        .sum();
    let mut buf = BytesMut::with_capacity(32 + g.protocol_type.len() + members);
    buf.put_i16(GROUP_VALUE_VERSION);
    put_str(&mut buf, &g.protocol_type);
    buf.put_i32(g.generation);
    put_nullable_str(&mut buf, g.protocol.as_deref());
    put_nullable_str(&mut buf, g.leader.as_deref());
    buf.put_i64(g.state_timestamp);
    buf.put_i32(i32::try_from(g.members.len()).unwrap_or(i32::MAX));
    for m in &g.members {
        put_str(&mut buf, &m.member_id);
        put_nullable_str(&mut buf, m.instance_id.as_deref());
        put_str(&mut buf, &m.client_id);
        put_str(&mut buf, &m.client_host);
        buf.put_i32(m.rebalance_timeout_ms);
        buf.put_i32(m.session_timeout_ms);
        put_bytes(&mut buf, &m.subscription);
        put_bytes(&mut buf, &m.assignment);
    }
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
    let count = get_i32(&mut v, "member count")?;
    // Each member takes at least this many bytes (empty strings and bytes): a
    // count beyond what is left is garbage, not an allocation.
    let smallest_member = 18 + if version >= 1 { 4 } else { 0 } + if version >= 3 { 2 } else { 0 };
    if count < 0 || count as usize > v.remaining() / smallest_member {
        return Err(DecodeError(format!("member count {count} with {} bytes left", v.remaining())));
    }
    let mut members = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let member_id = get_str(&mut v, "member id")?;
        let instance_id =
            if version >= 3 { get_nullable_str(&mut v, "group instance id")? } else { None };
        let client_id = get_str(&mut v, "client id")?;
        let client_host = get_str(&mut v, "client host")?;
        let rebalance_timeout_ms =
            if version >= 1 { get_i32(&mut v, "rebalance timeout")? } else { -1 };
        let session_timeout_ms = get_i32(&mut v, "session timeout")?;
        let subscription = get_bytes(&mut v, "subscription")?;
        let assignment = get_bytes(&mut v, "assignment")?;
        members.push(MemberMetadata {
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(GroupMetadata { protocol_type, generation, protocol, leader, state_timestamp, members })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_groups_round_trip() {
        let o = OffsetAndMetadata {
            offset: 42,
            leader_epoch: 0,
            metadata: "m".into(),
            commit_timestamp: 7,
        };
        let e = decode(Some(&offset_key("g", "t", 3)), Some(&offset_value(&o))).unwrap();
        assert_eq!(
            e,
            LogEntry::Offset { group: "g".into(), topic: "t".into(), partition: 3, value: Some(o) }
        );
        let e = decode(Some(&offset_key("g", "t", 3)), None).unwrap();
        assert!(matches!(e, LogEntry::Offset { value: None, .. }));
        let g = GroupMetadata {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m-1".into()),
            state_timestamp: 9,
            members: vec![
                MemberMetadata {
                    member_id: "m-1".into(),
                    instance_id: Some("i-1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    session_timeout_ms: 45_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"assigned"),
                },
                MemberMetadata {
                    member_id: "m-2".into(),
                    session_timeout_ms: 10_000,
                    ..Default::default()
                },
            ],
        };
        let e = decode(Some(&group_key("g")), Some(&group_value(&g))).unwrap();
        assert_eq!(e, LogEntry::Group { group: "g".into(), value: Some(g.clone()) });
        assert!(decode(Some(&Bytes::from_static(&[0, 9])), None).is_err());
        assert!(decode(Some(&offset_key("g", "t", 3).slice(..5)), None).is_err());
        let value = group_value(&g);
        assert!(
            decode(Some(&group_key("g")), Some(&value.slice(..value.len() - 1))).is_err(),
            "a member cut short"
        );
    }

    /// A value of an older version, laid out by hand from Kafka's
    /// `GroupMetadataValue` schema: v1 has rebalance timeouts but no state
    /// timestamp and no instance ids.
    #[test]
    fn older_group_values_with_members_are_read() {
        let mut v = BytesMut::new();
        v.put_i16(1);
        put_str(&mut v, "consumer");
        v.put_i32(3);
        put_nullable_str(&mut v, Some("range"));
        put_nullable_str(&mut v, Some("m"));
        v.put_i32(1);
        put_str(&mut v, "m");
        put_str(&mut v, "client");
        put_str(&mut v, "/10.0.0.1");
        v.put_i32(60_000);
        v.put_i32(10_000);
        put_bytes(&mut v, b"s");
        put_bytes(&mut v, b"a");
        let e = decode(Some(&group_key("g")), Some(&v.freeze())).unwrap();
        let LogEntry::Group { value: Some(g), .. } = e else { panic!("a group value: {e:?}") };
        assert_eq!((g.generation, g.state_timestamp, g.leader.as_deref()), (3, -1, Some("m")));
        assert_eq!(
            g.members,
            vec![MemberMetadata {
                member_id: "m".into(),
                instance_id: None,
                client_id: "client".into(),
                client_host: "/10.0.0.1".into(),
                rebalance_timeout_ms: 60_000,
                session_timeout_ms: 10_000,
                subscription: Bytes::from_static(b"s"),
                assignment: Bytes::from_static(b"a"),
            }]
        );
    }

    #[test]
    fn an_absurd_member_count_is_an_error_not_an_allocation() {
        let mut v = BytesMut::new();
        v.put_i16(3);
        put_str(&mut v, "consumer");
        v.put_i32(1);
        put_nullable_str(&mut v, None);
        put_nullable_str(&mut v, None);
        v.put_i64(0);
        v.put_i32(i32::MAX);
        assert!(decode(Some(&group_key("g")), Some(&v.freeze())).is_err());
    }
}
