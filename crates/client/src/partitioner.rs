//! Choosing a partition for a record.
//!
//! Keyed records go to `murmur2(key) & 0x7fffffff % partitions`, the Java client's
//! default, so a key lands on the same partition whichever of the two produced it.
//! Records without a key stick to one partition per batch, rotating between batches.

/// The 32-bit MurmurHash2 variant Kafka's Java client uses (seed 0x9747b28c).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
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

/// The partition for a key among `partitions`.
pub fn partition_for_key(key: &[u8], partitions: usize) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as usize % partitions.max(1)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_java_client_hash() {
        // Vectors from Kafka's own test of `Utils.murmur2`.
        assert_eq!(murmur2(b"21"), -973_932_308);
        assert_eq!(murmur2(b"foobar"), -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1_486_304_829);
        assert_eq!(murmur2(b"abc"), 479_470_107);
    }

    #[test]
    fn a_key_always_maps_to_one_partition_in_range() {
        for i in 0..1000 {
            let key = format!("key-{i}");
            let p = partition_for_key(key.as_bytes(), 7);
            assert!((0..7).contains(&p));
            assert_eq!(p, partition_for_key(key.as_bytes(), 7));
        }
    }
}
