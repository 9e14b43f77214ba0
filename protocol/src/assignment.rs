//! Window assignments anyone can recompute: which training windows the node
//! with signing key `signer` trains on in round `round` of a run with seed
//! `seed`, over a dataset with `total` training windows.
//!
//! Definition (docs/protocol.md, "Window assignments"):
//! 1. `K = blake3::derive_key("murmur 2025-01 v1 window-assignment",
//!    seed u64 LE ‖ round u64 LE ‖ signer 32 bytes)`.
//! 2. `start = u64 LE of keyed_blake3(K, "start")[0..8] mod total`.
//! 3. The round's block is the `count` windows `start, start + 1, …`
//!    (mod `total`): contiguous, so a round touches one or two shards and a
//!    node fetches little; nodes' blocks start at independent uniform
//!    offsets, so they overlap little while `count · nodes ≪ total`.
//! 4. The block is visited in the order of `keyed_blake3(K, j u64 LE)[0..8]`
//!    read as a u64 LE (ties by `j`): step `s` of the round trains on the
//!    block positions `order[s·batch .. (s+1)·batch]`.
//!
//! Any dataset with at least one training window works (a block longer
//! than the dataset wraps around).

use crate::hash::DOMAIN_ASSIGNMENT;
use crate::identity::PublicKey;

/// The assignment key of (seed, round, signer).
pub fn assignment_key(seed: u64, round: u64, signer: &PublicKey) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key(DOMAIN_ASSIGNMENT);
    h.update(&seed.to_le_bytes());
    h.update(&round.to_le_bytes());
    h.update(&signer.0);
    *h.finalize().as_bytes()
}

fn keyed_u64(key: &[u8; 32], input: &[u8]) -> u64 {
    let out = blake3::keyed_hash(key, input);
    let mut b = [0u8; 8];
    b.copy_from_slice(&out.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// The `count` training windows of (seed, round, signer) over `total`
/// windows, in the order they are trained on. Empty when `total` is 0.
pub fn assigned_windows(seed: u64, round: u64, signer: &PublicKey, total: u64, count: usize) -> Vec<u64> {
    if total == 0 {
        return Vec::new();
    }
    let key = assignment_key(seed, round, signer);
    let start = keyed_u64(&key, b"start") % total;
    let mut order: Vec<(u64, u64)> =
        (0..count as u64).map(|j| (keyed_u64(&key, &j.to_le_bytes()), j)).collect();
    order.sort_unstable();
    order.into_iter().map(|(_, j)| (start + j % total) % total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn key(b: u8) -> PublicKey {
        PublicKey([b; 32])
    }

    #[test]
    fn assignments_are_deterministic_and_depend_on_every_input() {
        let a = assigned_windows(7, 3, &key(1), 10_000, 64);
        assert_eq!(a, assigned_windows(7, 3, &key(1), 10_000, 64));
        assert_eq!(a.len(), 64);
        assert_ne!(a, assigned_windows(8, 3, &key(1), 10_000, 64));
        assert_ne!(a, assigned_windows(7, 4, &key(1), 10_000, 64));
        assert_ne!(a, assigned_windows(7, 3, &key(2), 10_000, 64));
        assert!(a.iter().all(|&w| w < 10_000));
    }

    #[test]
    fn a_round_is_a_contiguous_block_visited_in_shuffled_order() {
        let a = assigned_windows(1, 0, &key(9), 100_000, 200);
        let set: HashSet<u64> = a.iter().copied().collect();
        assert_eq!(set.len(), 200, "no window twice within a round");
        let start = (0..100_000u64).find(|s| (0..200).all(|j| set.contains(&((s + j) % 100_000))));
        assert!(start.is_some(), "the windows form one block (mod total)");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_ne!(a, sorted, "the block is shuffled");
    }

    #[test]
    fn nodes_of_a_round_overlap_little_and_rounds_cover_the_data() {
        let total = 16_000;
        let nodes: Vec<HashSet<u64>> =
            (0..4u8).map(|k| assigned_windows(5, 2, &key(k), total, 400).into_iter().collect()).collect();
        let mut overlap = 0;
        for i in 0..4 {
            for j in i + 1..4 {
                overlap += nodes[i].intersection(&nodes[j]).count();
            }
        }
        // Expected overlap of 6 pairs of random 400-blocks in 16,000: 6·2·400²/16,000 = 120.
        assert!(overlap < 800, "too much overlap: {overlap}");
        let mut covered = HashSet::new();
        for round in 0..200 {
            covered.extend(assigned_windows(5, round, &key(0), total, 400));
        }
        assert!(covered.len() as u64 > total * 9 / 10, "covered {} of {total}", covered.len());
    }

    #[test]
    fn tiny_datasets_work_for_every_node() {
        assert_eq!(assigned_windows(1, 1, &key(1), 1, 5), vec![0; 5]);
        let w = assigned_windows(1, 1, &key(1), 3, 7);
        assert!(w.iter().all(|&x| x < 3));
        assert!(assigned_windows(1, 1, &key(1), 0, 5).is_empty());
    }
}
