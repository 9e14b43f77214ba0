//! The round's frames on the transfer protocol (docs/protocol.md §10.7):
//! a trainer *offers* one shard of its delta to a committee member (the
//! shard's leaf and Merkle proof, with the signed manifest they prove
//! against; a payload of at most `MAX_INLINE_PAYLOAD` bytes travels in the
//! offer, a longer one the member pulls as a content-addressed Delta blob),
//! and anyone may ask a node for the leaf it holds of a signer's
//! shard (re-checks) or for the included list behind one of its shard
//! results.

use murmur_protocol::committee::merkle::MAX_PROOF_LEN;
use murmur_protocol::committee::{ShardLeaf, ShardedManifest};
use murmur_protocol::{PayloadHash, PublicKey};
use std::io;

/// One shard of `signer`'s delta for `round`: its leaf, its proof against
/// the manifest's root (a tree of `shards` leaves), and that manifest as
/// the signer signed it (checked by whoever uses the offer), and the
/// payload itself when it is short (`payload_len` bytes, at most
/// `MAX_INLINE_PAYLOAD`; checked against `payload_hash` by the receiver).
#[derive(Debug, Clone, PartialEq)]
pub struct ShardOffer {
    pub round: u64,
    pub signer: PublicKey,
    pub shards: u32,
    pub leaf: ShardLeaf,
    pub proof: Vec<[u8; 32]>,
    pub manifest: Box<ShardedManifest>,
    pub payload: Option<Vec<u8>>,
}

// Norms are finite (checked on decode), so equality is total.
impl Eq for ShardOffer {}

/// Most bytes of the manifest an offer carries.
pub const MAX_OFFER_MANIFEST_BYTES: usize = 512;

/// Longest payload an offer carries itself: a shorter shard costs one
/// request instead of an offer and a pull (at a million parameters and a
/// thousand shards, a shard is about 1.1 kB in int8).
pub const MAX_INLINE_PAYLOAD: usize = 4096;

/// Most bytes a ShardOffer takes.
pub const MAX_OFFER_BYTES: usize = 8
    + 32
    + 4
    + 4
    + 32
    + 8
    + 4
    + 1
    + MAX_PROOF_LEN * 32
    + 2
    + MAX_OFFER_MANIFEST_BYTES
    + 2
    + MAX_INLINE_PAYLOAD;

fn bad(what: &'static str) -> io::Error {
    super::xfer::malformed(what)
}

impl ShardOffer {
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.round.to_le_bytes());
        out.extend_from_slice(&self.signer.0);
        out.extend_from_slice(&self.shards.to_le_bytes());
        out.extend_from_slice(&self.leaf.shard.to_le_bytes());
        out.extend_from_slice(&self.leaf.payload_hash.0);
        out.extend_from_slice(&self.leaf.payload_len.to_le_bytes());
        out.extend_from_slice(&self.leaf.norm.to_bits().to_le_bytes());
        out.push(self.proof.len() as u8);
        for h in &self.proof {
            out.extend_from_slice(h);
        }
        let m = self.manifest.encode();
        out.extend_from_slice(&(m.len() as u16).to_le_bytes());
        out.extend_from_slice(&m);
        let payload = self.payload.as_deref().unwrap_or_default();
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend_from_slice(payload);
    }

    /// Whether the payload travels inside the offer (else it is pulled).
    pub fn travels_inline(&self) -> bool {
        self.leaf.payload_len <= MAX_INLINE_PAYLOAD as u64
    }

    /// The same offer without its payload (what is held to serve leaves).
    pub fn without_payload(mut self) -> Self {
        self.payload = None;
        self
    }

    /// Read an offer from the front of `b`, returning the rest.
    pub fn read(b: &[u8]) -> io::Result<(Self, &[u8])> {
        let mut c = b;
        let mut take = |n: usize| -> io::Result<&[u8]> {
            if c.len() < n {
                return Err(bad("truncated shard offer"));
            }
            let (a, rest) = c.split_at(n);
            c = rest;
            Ok(a)
        };
        let u64_of = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
        let u32_of = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap_or([0; 4]));
        let id_of = |s: &[u8]| -> [u8; 32] { s.try_into().unwrap_or([0; 32]) };
        let round = u64_of(take(8)?);
        let signer = PublicKey(id_of(take(32)?));
        let shards = u32_of(take(4)?);
        let shard = u32_of(take(4)?);
        let payload_hash = PayloadHash(id_of(take(32)?));
        let payload_len = u64_of(take(8)?);
        let norm = f32::from_bits(u32_of(take(4)?));
        let n = usize::from(take(1)?[0]);
        if n > MAX_PROOF_LEN {
            return Err(bad("shard offer proof too long"));
        }
        let mut proof = Vec::with_capacity(n);
        for _ in 0..n {
            proof.push(id_of(take(32)?));
        }
        let len = usize::from(u16::from_le_bytes(take(2)?.try_into().unwrap_or([0; 2])));
        if len > MAX_OFFER_MANIFEST_BYTES {
            return Err(bad("shard offer manifest too long"));
        }
        let manifest =
            ShardedManifest::decode(take(len)?).map_err(|_| bad("shard offer manifest malformed"))?;
        if shards == 0 || shard >= shards || !norm.is_finite() || norm < 0.0 || payload_len == 0 {
            return Err(bad("shard offer out of range"));
        }
        if manifest.signer != signer || manifest.round != round || manifest.shards != shards {
            return Err(bad("shard offer manifest is not the offer's signer, round and shard count"));
        }
        let inline = usize::from(u16::from_le_bytes(take(2)?.try_into().unwrap_or([0; 2])));
        if inline > MAX_INLINE_PAYLOAD || (inline != 0 && inline as u64 != payload_len) {
            return Err(bad("shard offer payload longer than 4096 bytes or not payload_len"));
        }
        let payload = (inline != 0).then(|| take(inline).map(<[u8]>::to_vec)).transpose()?;
        let leaf = ShardLeaf { shard, payload_hash, payload_len, norm };
        Ok((Self { round, signer, shards, leaf, proof, manifest: Box::new(manifest), payload }, c))
    }
}

/// A signed manifest of `key` for `round` with `shards` shards (tests).
#[cfg(test)]
pub(crate) fn test_manifest(key: &murmur_protocol::NodeKey, round: u64, shards: u32) -> ShardedManifest {
    use murmur_protocol::{Codec, RunId, Signature, StateId};
    ShardedManifest {
        run: RunId([1; 32]),
        round,
        base: StateId([2; 32]),
        signer: key.public(),
        tokens: 10,
        train_loss: 1.0,
        codec: Codec::Int8Block { block: 64 },
        element_count: u64::from(shards).max(400),
        shards,
        norm: 2.0,
        root: [5; 32],
        signature: Signature([0; 64]),
    }
    .sign(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::NodeKey;

    #[test]
    fn offers_round_trip_and_bad_ones_are_refused() {
        let key = NodeKey::from_seed([3; 32]);
        let o = ShardOffer {
            round: 7,
            signer: key.public(),
            shards: 4,
            leaf: ShardLeaf { shard: 2, payload_hash: PayloadHash([9; 32]), payload_len: 100, norm: 1.5 },
            proof: vec![[1; 32], [2; 32]],
            manifest: Box::new(test_manifest(&key, 7, 4)),
            payload: Some(vec![7; 100]),
        };
        let mut b = Vec::new();
        o.write(&mut b);
        assert!(b.len() <= MAX_OFFER_BYTES);
        let (back, rest) = ShardOffer::read(&b).expect("decodes");
        assert_eq!(back, o);
        assert!(rest.is_empty());
        for cut in 0..b.len() {
            assert!(ShardOffer::read(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_shard = o.clone();
        bad_shard.leaf.shard = 4;
        let mut b = Vec::new();
        bad_shard.write(&mut b);
        assert!(ShardOffer::read(&b).is_err());
        let mut nan = o.clone();
        nan.leaf.norm = f32::NAN;
        let mut b = Vec::new();
        nan.write(&mut b);
        assert!(ShardOffer::read(&b).is_err());
        // An inline payload is exactly payload_len bytes.
        let mut short = o.clone();
        short.payload = Some(vec![7; 99]);
        let mut b = Vec::new();
        short.write(&mut b);
        assert!(ShardOffer::read(&b).is_err(), "an inline payload of another length is refused");
        let bare = o.clone().without_payload();
        let mut b = Vec::new();
        bare.write(&mut b);
        assert_eq!(ShardOffer::read(&b).expect("decodes").0, bare);
        let mut someone_elses = o;
        *someone_elses.manifest = test_manifest(&NodeKey::from_seed([4; 32]), 7, 4);
        let mut b = Vec::new();
        someone_elses.write(&mut b);
        assert!(ShardOffer::read(&b).is_err(), "a manifest of another signer is refused");
    }
}
