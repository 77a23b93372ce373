//! `OffsetMap`: the log cleaner's map from a record key to the offset of the
//! key's latest record in the dirty range (Kafka's `SkimpyOffsetMap`).
//!
//! Keys are not stored, only a 128-bit hash of each (Kafka keeps 16-byte MD5
//! digests): two SipHash-1-3 digests of the key under different prefixes. A
//! collision would make the cleaner drop a record whose key merely shares the
//! hash of a later one; at 128 bits that needs about 2^64 keys. The map lives
//! for one clean only, so the hash need not be stable across builds.
//!
//! Memory: open addressing with linear probing over fixed 24-byte slots
//! (16 bytes of hash, 8 of offset), sized once from
//! `log.cleaner.dedupe.buffer.size` and filled to at most 90% (Kafka's
//! `log.cleaner.io.buffer.load.factor`) so probes stay short.

use std::hash::{DefaultHasher, Hasher};

/// Bytes one entry takes: the 16-byte key hash and the 8-byte offset.
pub(crate) const BYTES_PER_ENTRY: usize = 24;

/// The share of slots the map fills before it reports itself full.
const LOAD_FACTOR: f64 = 0.9;

/// A key hash that is never produced (a hash of all zeroes marks an empty slot).
const EMPTY: [u64; 2] = [0, 0];

/// Key hash → offset of the latest record with that key.
#[derive(Debug)]
pub(crate) struct OffsetMap {
    hashes: Vec<[u64; 2]>,
    offsets: Vec<i64>,
    entries: usize,
    max_entries: usize,
    /// The largest offset put into the map (-1 when empty).
    latest_offset: i64,
}

/// The 128-bit hash of a key; never all zeroes.
fn hash_key(key: &[u8]) -> [u64; 2] {
    let mut a = DefaultHasher::new();
    a.write_u8(0x5a);
    a.write(key);
    let mut b = DefaultHasher::new();
    b.write_u8(0xa5);
    b.write(key);
    let h = [a.finish(), b.finish()];
    if h == EMPTY {
        [1, 0]
    } else {
        h
    }
}

impl OffsetMap {
    /// A map of `slots` slots (at least 16), holding up to 90% of them.
    pub(crate) fn with_slots(slots: usize) -> Self {
        let slots = slots.max(16);
        Self {
            hashes: vec![EMPTY; slots],
            offsets: vec![-1; slots],
            entries: 0,
            max_entries: ((slots as f64) * LOAD_FACTOR) as usize,
            latest_offset: -1,
        }
    }

    /// A map for at most `memory` bytes that need never hold more than
    /// `max_keys` keys (the offsets of the dirty range bound the keys in it).
    pub(crate) fn for_memory(memory: usize, max_keys: usize) -> Self {
        let by_memory = memory / BYTES_PER_ENTRY;
        let needed = ((max_keys as f64) / LOAD_FACTOR) as usize + 1;
        Self::with_slots(by_memory.min(needed))
    }

    /// How many more distinct keys fit.
    pub(crate) fn free_entries(&self) -> usize {
        self.max_entries - self.entries
    }

    /// Keys in the map.
    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    /// The share of the usable slots in use (Kafka's `utilization`).
    pub(crate) fn utilization(&self) -> f64 {
        self.entries as f64 / self.max_entries.max(1) as f64
    }

    /// The largest offset put, -1 for an empty map.
    pub(crate) fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    fn slot_of(&self, hash: [u64; 2]) -> usize {
        let n = self.hashes.len();
        let mut i = (hash[0] as usize) % n;
        loop {
            let h = self.hashes[i];
            if h == hash || h == EMPTY {
                return i;
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
    }

    /// Records that `key`'s latest record (so far) is at `offset`. Returns
    /// `false`, changing nothing, when the key is new and the map is full.
    pub(crate) fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let hash = hash_key(key);
        let i = self.slot_of(hash);
        if self.hashes[i] == EMPTY {
            if self.entries >= self.max_entries {
                return false;
            }
            self.hashes[i] = hash;
            self.entries += 1;
        }
        self.offsets[i] = self.offsets[i].max(offset);
        self.latest_offset = self.latest_offset.max(offset);
        true
    }

    /// The offset of `key`'s latest record, -1 if the key is not in the map.
    pub(crate) fn get(&self, key: &[u8]) -> i64 {
        let i = self.slot_of(hash_key(key));
        if self.hashes[i] == EMPTY {
            -1
        } else {
            self.offsets[i]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_offset_per_key_wins() {
        let mut m = OffsetMap::with_slots(100);
        assert_eq!(m.get(b"a"), -1);
        assert!(m.put(b"a", 3));
        assert!(m.put(b"b", 4));
        assert!(m.put(b"a", 7));
        assert!(m.put(b"", 8), "an empty key is a key");
        assert_eq!((m.get(b"a"), m.get(b"b"), m.get(b""), m.get(b"c")), (7, 4, 8, -1));
        assert_eq!((m.len(), m.latest_offset()), (3, 8));
    }

    #[test]
    fn fills_to_the_load_factor_then_refuses_new_keys_only() {
        let mut m = OffsetMap::with_slots(100);
        let mut put = 0;
        while m.put(format!("key-{put}").as_bytes(), put) {
            put += 1;
        }
        assert_eq!(put, 90);
        assert_eq!(m.free_entries(), 0);
        assert!(m.put(b"key-5", 1000), "an existing key is still updated");
        assert_eq!(m.get(b"key-5"), 1000);
        for i in 0..90 {
            if i != 5 {
                assert_eq!(m.get(format!("key-{i}").as_bytes()), i);
            }
        }
    }

    #[test]
    fn sized_by_memory_or_by_the_keys_it_can_meet() {
        assert_eq!(OffsetMap::for_memory(24_000, 1_000_000).hashes.len(), 1000);
        assert_eq!(OffsetMap::for_memory(1 << 30, 90).hashes.len(), 101);
    }
}
