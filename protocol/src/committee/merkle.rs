//! The Merkle tree a sharded manifest signs: one leaf per shard of a delta
//! (its index, payload hash, payload length and L2 norm), so a manifest is the
//! same size whatever the shard count and each shard travels with a proof of
//! at most ⌈log₂ S⌉ hashes (docs/protocol.md §10.2).

use crate::hash::{domain_hash, PayloadHash};

/// Domain of a leaf hash.
pub const DOMAIN_MERKLE_LEAF: &str = "murmur 2026-11 v2 shard-leaf";
/// Domain of an inner node hash.
pub const DOMAIN_MERKLE_NODE: &str = "murmur 2026-11 v2 shard-node";
/// Longest proof (65,536 shards).
pub const MAX_PROOF_LEN: usize = 16;

/// What a manifest commits to for one shard of its delta.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardLeaf {
    pub shard: u32,
    pub payload_hash: PayloadHash,
    pub payload_len: u64,
    /// L2 norm of the shard's decoded values (f64 sum in index order, as f32).
    pub norm: f32,
}

impl ShardLeaf {
    pub fn hash(&self) -> [u8; 32] {
        let mut b = Vec::with_capacity(48);
        b.extend_from_slice(&self.shard.to_le_bytes());
        b.extend_from_slice(&self.payload_hash.0);
        b.extend_from_slice(&self.payload_len.to_le_bytes());
        b.extend_from_slice(&self.norm.to_bits().to_le_bytes());
        domain_hash(DOMAIN_MERKLE_LEAF, &b)
    }
}

fn parent(l: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
    let mut b = [0u8; 64];
    b[..32].copy_from_slice(l);
    b[32..].copy_from_slice(r);
    domain_hash(DOMAIN_MERKLE_NODE, &b)
}

/// The next level up: pairs hashed, an odd last node carried up as it is.
fn level_up(level: &[[u8; 32]]) -> Vec<[u8; 32]> {
    level.chunks(2).map(|p| if p.len() == 2 { parent(&p[0], &p[1]) } else { p[0] }).collect()
}

/// The root over `leaves` in shard order (all zeros for none).
pub fn merkle_root(leaves: &[ShardLeaf]) -> [u8; 32] {
    MerkleTree::new(leaves).root()
}

/// Every level of the tree over a delta's leaves, built once, so each of
/// its S proofs costs ⌈log₂ S⌉ copies rather than a rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerkleTree {
    /// Leaf hashes first, the root's level (one node) last; no levels for
    /// no leaves.
    levels: Vec<Vec<[u8; 32]>>,
}

impl MerkleTree {
    pub fn new(leaves: &[ShardLeaf]) -> Self {
        let mut level: Vec<[u8; 32]> = leaves.iter().map(ShardLeaf::hash).collect();
        let mut levels = Vec::new();
        while level.len() > 1 {
            let up = level_up(&level);
            levels.push(level);
            level = up;
        }
        if !level.is_empty() {
            levels.push(level);
        }
        Self { levels }
    }

    /// The root (all zeros for no leaves).
    pub fn root(&self) -> [u8; 32] {
        self.levels.last().map_or([0; 32], |top| top[0])
    }

    /// The sibling hashes from leaf `index` to the root (levels where the
    /// node is carried up contribute none).
    pub fn proof(&self, index: usize) -> Vec<[u8; 32]> {
        let mut i = index;
        let mut proof = Vec::new();
        for level in self.levels.iter().take(self.levels.len().saturating_sub(1)) {
            if let Some(sibling) = level.get(i ^ 1) {
                proof.push(*sibling);
            }
            i /= 2;
        }
        proof
    }
}

/// Whether `leaf` is leaf `leaf.shard` of `count` under `root`.
pub fn verify_proof(root: &[u8; 32], count: u32, leaf: &ShardLeaf, proof: &[[u8; 32]]) -> bool {
    if leaf.shard >= count || proof.len() > MAX_PROOF_LEN {
        return false;
    }
    let (mut h, mut i, mut width) = (leaf.hash(), leaf.shard as usize, count as usize);
    let mut siblings = proof.iter();
    while width > 1 {
        let sibling = i ^ 1;
        if sibling < width {
            let Some(s) = siblings.next() else { return false };
            h = if i % 2 == 0 { parent(&h, s) } else { parent(s, &h) };
        }
        i /= 2;
        width = width.div_ceil(2);
    }
    siblings.next().is_none() && &h == root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: u32) -> Vec<ShardLeaf> {
        (0..n)
            .map(|s| ShardLeaf {
                shard: s,
                payload_hash: PayloadHash([s as u8; 32]),
                payload_len: 100 + u64::from(s),
                norm: s as f32,
            })
            .collect()
    }

    #[test]
    fn every_leaf_proves_against_the_root_and_nothing_else_does() {
        for n in [1u32, 2, 3, 5, 8, 13, 125] {
            let l = leaves(n);
            let root = merkle_root(&l);
            let tree = MerkleTree::new(&l);
            assert_eq!(tree.root(), root);
            for (i, leaf) in l.iter().enumerate() {
                let p = tree.proof(i);
                assert!(p.len() <= 7);
                assert!(verify_proof(&root, n, leaf, &p), "n={n} i={i}");
                let mut forged = *leaf;
                forged.norm += 1.0;
                assert!(!verify_proof(&root, n, &forged, &p));
                let mut moved = *leaf;
                moved.shard = (moved.shard + 1) % n;
                assert!(n == 1 || !verify_proof(&root, n, &moved, &p));
            }
        }
    }

    #[test]
    fn a_proof_with_an_extra_or_missing_hash_fails() {
        let l = leaves(6);
        let root = merkle_root(&l);
        let mut p = MerkleTree::new(&l).proof(2);
        p.push([0; 32]);
        assert!(!verify_proof(&root, 6, &l[2], &p));
        p.truncate(1);
        assert!(!verify_proof(&root, 6, &l[2], &p));
    }
}
