//! Which merchant shard row an operation key's money lands in.

/// FNV-1a: stable across processes and releases (unlike `DefaultHasher`), so every
/// instance picks the same shard for a key.
pub fn merchant_shard(operation_key: &str, shards: u16) -> i16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in operation_key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let n = u64::from(shards.max(1));
    // `n <= 16`, so the remainder always fits.
    (h % n) as i16
}

#[cfg(test)]
mod tests {
    use super::merchant_shard;

    #[test]
    fn spreads_keys_over_every_shard_and_is_stable() {
        let mut seen = [0u32; 16];
        for i in 0..1600 {
            let s = merchant_shard(&format!("pay:{i}:debit"), 16);
            seen[s as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "uneven spread: {seen:?}");
        assert_eq!(
            merchant_shard("pay:1:debit", 16),
            merchant_shard("pay:1:debit", 16)
        );
        assert_eq!(merchant_shard("anything", 1), 0);
    }
}
