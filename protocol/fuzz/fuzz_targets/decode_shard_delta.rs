//! ShardDelta::decode on arbitrary bytes, then its leaf's Merkle proof:
//! against a fixed root (never panics), and, for up to 64 shards, against a
//! tree built around the leaf, where the honest proof must verify and the
//! received proof may verify only if it is that proof.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::merkle::MAX_PROOF_LEN;
use murmur_protocol::committee::{merkle_root, verify_proof, MerkleTree, ShardDelta, ShardLeaf};
use murmur_protocol::hash::PayloadHash;

fn filler(s: u32) -> ShardLeaf {
    ShardLeaf { shard: s, payload_hash: PayloadHash([s as u8; 32]), payload_len: 100, norm: 1.0 }
}

fuzz_target!(|data: &[u8]| {
    let Ok(d) = ShardDelta::decode(data) else { return };
    assert_eq!(d.encode(), data, "decode then encode must give the same bytes");
    assert!(d.shard < d.shards && d.proof.len() <= MAX_PROOF_LEN);
    let leaf = d.leaf();
    let fixed = merkle_root(&(0..5).map(filler).collect::<Vec<_>>());
    let _ = verify_proof(&fixed, d.shards, &leaf, &d.proof);
    if d.shards <= 64 {
        let leaves: Vec<ShardLeaf> =
            (0..d.shards).map(|s| if s == d.shard { leaf } else { filler(s) }).collect();
        let root = merkle_root(&leaves);
        let honest = MerkleTree::new(&leaves).proof(d.shard as usize);
        assert!(honest.len() <= MAX_PROOF_LEN);
        assert!(verify_proof(&root, d.shards, &leaf, &honest), "the honest proof verifies");
        if verify_proof(&root, d.shards, &leaf, &d.proof) {
            assert_eq!(d.proof, honest, "only the honest proof verifies");
        }
    }
});
