//! The one rewrite a leader makes to a client's batches before they reach the
//! segment ([`stamp_batches`]): base offsets, the partition leader epoch and,
//! for `LogAppendTime` topics, the append time — in one walk, whatever the
//! topic. Only the append-time stamp touches bytes the CRC covers, so only
//! then is a CRC recomputed.

use super::{
    be_i16, be_i32, ATTRIBUTES_OFFSET, BASE_OFFSET_OFFSET, BATCH_LENGTH_OFFSET, CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD, MAX_TIMESTAMP_OFFSET, PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD, TIMESTAMP_TYPE_BIT,
};

/// What [`stamp_batches`] writes into every batch of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchStamp {
    /// The first batch's base offset; each next batch starts after the previous one's last offset.
    pub first_offset: i64,
    /// The leader's epoch, written as every batch's partitionLeaderEpoch (outside the CRC).
    pub partition_leader_epoch: i32,
    /// For a `LogAppendTime` topic, the append time: every batch is marked
    /// LogAppendTime with this `maxTimestamp`, and its CRC recomputed.
    pub log_append_time: Option<i64>,
}

/// Stamps every whole batch of `buf` with `stamp` (see [`BatchStamp`]) and
/// returns the offset after the last batch. Expects batches that passed
/// [`super::validate_batches`] (or that the broker built); stops at anything
/// that is not a whole batch, by `batchLength` alone.
pub fn stamp_batches(buf: &mut [u8], stamp: BatchStamp) -> i64 {
    let mut next = stamp.first_offset;
    let epoch = stamp.partition_leader_epoch.to_be_bytes();
    let mut pos = 0usize;
    while buf.len() - pos >= RECORD_BATCH_OVERHEAD {
        let Ok(len) = usize::try_from(be_i32(buf, pos + BATCH_LENGTH_OFFSET)) else {
            break;
        };
        let size = len + LOG_OVERHEAD;
        if size < RECORD_BATCH_OVERHEAD || size > buf.len() - pos {
            break;
        }
        let batch = &mut buf[pos..pos + size];
        batch[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&next.to_be_bytes());
        batch[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
            .copy_from_slice(&epoch);
        if let Some(now_ms) = stamp.log_append_time {
            let attributes = be_i16(batch, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_BIT;
            batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2]
                .copy_from_slice(&attributes.to_be_bytes());
            batch[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
                .copy_from_slice(&now_ms.to_be_bytes());
            let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
            batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        }
        let delta = be_i32(batch, LAST_OFFSET_DELTA_OFFSET);
        next = next.wrapping_add(i64::from(delta)).wrapping_add(1);
        pos += size;
    }
    next
}
