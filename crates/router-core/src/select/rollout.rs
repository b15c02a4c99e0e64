//! Gradual migration: which values of a key a `rollout` rule takes.

use super::model::Rollout;

impl Rollout {
    pub(super) fn admits(&self, value: &str) -> bool {
        if !self.include.is_empty() && !self.include.iter().any(|re| re.is_match(value)) {
            return false;
        }
        if self.exclude.iter().any(|re| re.is_match(value)) {
            return false;
        }
        match self.basis_points {
            Some(bp) => rollout_bucket(&self.seed, value) < bp,
            None => true,
        }
    }
}

/// A value's stable bucket in `0..10_000` for a seed: FNV-1a over seed and
/// value, then a 64-bit finalizer so nearby paths spread evenly. The same
/// (seed, value) always lands in the same bucket on every isolate and
/// build, so a repository never splits between two registries, and raising
/// a percentage only adds buckets.
pub fn rollout_bucket(seed: &str, value: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.bytes().chain(std::iter::once(0)).chain(value.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash % 10_000) as u32
}
