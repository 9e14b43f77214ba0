//! Deterministic randomness for the data pipeline: a SplitMix64 stream, seed
//! derivation, and a keyed bijection over `0..n` used to shuffle windows.
//!
//! Everything here is pure integer arithmetic so two nodes on any platform draw
//! the same numbers from the same seed. The float conversion uses the top 53
//! bits, which is exact on every IEEE-754 machine.

/// One step of the SplitMix64 finalizer: a strong 64-bit mixing function.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Derives a child seed from a parent seed and a list of labels, so that
/// streams for (seed, node 3) and (seed, node 4) are unrelated.
pub(crate) fn derive_seed(seed: u64, labels: &[u64]) -> u64 {
    let mut h = mix64(seed ^ 0x6d75_726d_7572_6461); // "murmurda"
    for &label in labels {
        h = mix64(h ^ mix64(label.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    }
    h
}

/// SplitMix64: tiny, fast, and statistically sound for data shuffling and
/// synthetic text (not for cryptography).
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (n > 0) by Lemire's multiply-shift with rejection.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let product = (self.next_u64() as u128) * (n as u128);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }
}

/// A keyed permutation of `0..n` computed pointwise: a 4-round Feistel network
/// on the smallest even-bit-width power of two ≥ n, with cycle walking to stay
/// inside `0..n`. Needs O(1) memory however many windows a corpus has, and any
/// position can be looked up directly, which makes loader positions resumable.
#[derive(Clone, Debug)]
pub(crate) struct WindowPermutation {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl WindowPermutation {
    pub(crate) fn new(n: u64, key: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut rng = SplitMix64::new(key);
        let keys = [rng.next_u64(), rng.next_u64(), rng.next_u64(), rng.next_u64()];
        Self { n, half_bits, keys }
    }

    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for key in self.keys {
            let f = mix64(right ^ key) & mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half_bits) | right
    }

    /// The image of `index` (< n). The domain is at most 4n, so the expected
    /// number of walks is below 4.
    pub(crate) fn apply(&self, index: u64) -> u64 {
        debug_assert!(index < self.n);
        let mut x = self.encrypt(index);
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_bijection_for_many_sizes() {
        for n in [1u64, 2, 3, 5, 16, 17, 100, 1000, 4097] {
            let perm = WindowPermutation::new(n, 42 + n);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = perm.apply(i);
                assert!(j < n);
                assert!(!seen[j as usize], "n={n}: {j} hit twice");
                seen[j as usize] = true;
            }
        }
    }

    #[test]
    fn permutation_depends_on_key() {
        let a: Vec<u64> = (0..64).map(|i| WindowPermutation::new(64, 1).apply(i)).collect();
        let b: Vec<u64> = (0..64).map(|i| WindowPermutation::new(64, 2).apply(i)).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn uniform_draws_stay_in_range_and_are_reproducible() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..1000 {
            let x = a.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x.to_bits(), b.next_f64().to_bits());
            assert!(a.below(13) < 13);
            b.below(13);
        }
        assert_ne!(derive_seed(1, &[0]), derive_seed(1, &[1]));
    }
}
