//! Where `floe topic produce` puts a keyed record: Kafka's Java default
//! partitioner (`BuiltInPartitioner.partitionForKey`), murmur2 of the key
//! bytes made positive, modulo the partition count. librdkafka's
//! `murmur2_random` partitioner and every Java client place keys the same
//! way, so records produced here land beside theirs.

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with Kafka's seed, the key's
/// bytes read little-endian four at a time.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Kafka seeds with the length as a Java int: only its low 32 bits count.
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    // Java's switch falls through: 3 bytes take all three steps.
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among
/// `partitions` (> 0): `toPositive(murmur2(key)) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    // toPositive clears the sign bit (it is not abs: i32::MIN maps to 0).
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of Kafka's own `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ];
        for (data, expected) in cases {
            assert_eq!(murmur2(data), expected, "murmur2({:?})", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn partition_is_the_positive_hash_modulo_the_count() {
        // murmur2("21") = -973932308; & 0x7fffffff = 1173551340.
        assert_eq!(partition_for_key(b"21", 7), 1_173_551_340 % 7);
        assert_eq!(partition_for_key(b"abc", 3), 479_470_107 % 3);
        for p in [1, 2, 6, 100] {
            let got = partition_for_key(b"foobar", p);
            assert!((0..p).contains(&got));
        }
    }
}
