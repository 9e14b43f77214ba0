//! What a node signed in its newest round — its manifest (with the leaves
//! under it) and its results — kept across restarts so that it never signs
//! a second, different one for the same round (which any peer holding both
//! would turn into a `TwoManifests` or `TwoResults` proof against an honest
//! node), and so that a restarted node can send the shards of the delta it
//! signed again (their payloads are durable blobs) and serve the results
//! it signed with the included lists behind them. The
//! machine hands each new record to its driver (`CommitteeAction::Record`)
//! before any of it leaves the node; the driver stores it durably and gives
//! it back to the machine after a restart (`CommitteeMachine::restore_signed`).
//!
//! Encoding (the node's own store, not the wire): `u64 round ‖ u32 m ‖ m
//! bytes of manifest (m = 0: none) ‖ u32 l ‖ l × (u32 shard ‖ [32]
//! payload hash ‖ u64 payload length ‖ f32 norm) ‖ u32 n ‖ n × (u32 len ‖
//! len bytes of a ShardResult) ‖ u32 n' ‖ n' × (u32 len ‖ len bytes of an
//! IncludedList)`. Leaves are recorded only with a manifest and are its
//! shards' leaves in order (their Merkle root is its root); included lists
//! are one per result, in the same order, each the list its result's
//! `included_root` names (n' = 0, or the section absent, in a record kept
//! without them; lists that do not match are dropped on reading).

use super::merkle::{merkle_root, ShardLeaf};
use super::messages::{IncludedList, ShardResult, ShardedManifest, MAX_INCLUDED};
use super::plan::MAX_SHARDS;
use crate::hash::PayloadHash;
use crate::wire::{Reader, WireError, Writer};

/// Most results a record keeps: a node's own shard and the shards it took
/// over as a backup, with room to spare.
pub const MAX_RECORDED_RESULTS: usize = 64;
/// Largest encoded manifest or result a record holds.
const MAX_ITEM_BYTES: usize = 4096;
/// Largest encoded included list a record holds.
const MAX_LIST_BYTES: usize = 8 + 64 * MAX_INCLUDED;

/// A node's signed words of one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SignedRecord {
    pub round: u64,
    pub manifest: Option<ShardedManifest>,
    /// The leaves the manifest signs, in shard order (empty without one).
    pub leaves: Vec<ShardLeaf>,
    /// One per shard.
    pub results: Vec<ShardResult>,
    /// The included list behind each result, in `results`' order (empty
    /// when the record was kept without them).
    pub lists: Vec<IncludedList>,
}

impl SignedRecord {
    /// An empty record of `round`.
    pub fn of_round(round: u64) -> Self {
        Self { round, manifest: None, leaves: Vec::new(), results: Vec::new(), lists: Vec::new() }
    }

    /// The result recorded for `shard`.
    pub fn result(&self, shard: u32) -> Option<&ShardResult> {
        self.results.iter().find(|r| r.shard == shard)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u64(self.round);
        let m = self.manifest.as_ref().map(ShardedManifest::encode).unwrap_or_default();
        w.u32(m.len() as u32);
        w.bytes(&m);
        w.u32(self.leaves.len() as u32);
        for l in &self.leaves {
            w.u32(l.shard);
            w.bytes(&l.payload_hash.0);
            w.u64(l.payload_len);
            w.u32(l.norm.to_bits());
        }
        w.u32(self.results.len() as u32);
        for r in &self.results {
            let b = r.encode();
            w.u32(b.len() as u32);
            w.bytes(&b);
        }
        w.u32(self.lists.len() as u32);
        for l in &self.lists {
            let b = l.encode();
            w.u32(b.len() as u32);
            w.bytes(&b);
        }
        w.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let round = r.u64()?;
        let m = item_len(&mut r, "recorded manifest")?;
        let manifest = if m == 0 { None } else { Some(ShardedManifest::decode(r.take(m)?)?) };
        let l = r.count("recorded leaves", MAX_SHARDS as usize, 48)?;
        let mut leaves = Vec::with_capacity(l);
        for _ in 0..l {
            let shard = r.u32()?;
            let payload_hash = PayloadHash(r.array::<32>()?);
            let (payload_len, norm) = (r.u64()?, f32::from_bits(r.u32()?));
            leaves.push(ShardLeaf { shard, payload_hash, payload_len, norm });
        }
        let signed_over = |m: &ShardedManifest| {
            leaves.len() == m.shards as usize
                && leaves.iter().enumerate().all(|(i, l)| l.shard as usize == i)
                && merkle_root(&leaves) == m.root
        };
        if !leaves.is_empty() && !manifest.as_ref().is_some_and(signed_over) {
            return Err(WireError::Invalid {
                field: "recorded leaves",
                why: "not the leaves the recorded manifest signs",
            });
        }
        let n = r.count("recorded results", MAX_RECORDED_RESULTS, 4)?;
        let mut results = Vec::with_capacity(n);
        for _ in 0..n {
            let len = item_len(&mut r, "recorded result")?;
            results.push(ShardResult::decode(r.take(len)?)?);
        }
        let mut lists = Vec::new();
        if r.remaining() > 0 {
            let n = r.count("recorded included lists", MAX_RECORDED_RESULTS, 4)?;
            for _ in 0..n {
                let len = r.u32()? as usize;
                if len > MAX_LIST_BYTES {
                    let (len, cap) = (len as u64, MAX_LIST_BYTES as u64);
                    return Err(WireError::TooLong { field: "recorded included list", len, cap });
                }
                lists.push(IncludedList::decode(r.take(len)?)?);
            }
        }
        r.finish()?;
        // Lists that are not the ones the results name are dropped, not the
        // record: its results still keep the node from signing twice.
        let behind = |(l, r): (&IncludedList, &ShardResult)| l.root() == r.included_root;
        if lists.len() != results.len() || !lists.iter().zip(&results).all(behind) {
            lists.clear();
        }
        Ok(Self { round, manifest, leaves, results, lists })
    }
}

/// A u32 length of one recorded message, at most `MAX_ITEM_BYTES`.
fn item_len(r: &mut Reader<'_>, field: &'static str) -> Result<usize, WireError> {
    let len = r.u32()? as usize;
    if len > MAX_ITEM_BYTES {
        return Err(WireError::TooLong { field, len: len as u64, cap: MAX_ITEM_BYTES as u64 });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(shard: u32) -> ShardLeaf {
        ShardLeaf { shard, payload_hash: PayloadHash([shard as u8; 32]), payload_len: 9, norm: 0.5 }
    }

    #[test]
    fn leaves_are_kept_only_as_the_recorded_manifests_own() {
        let empty = SignedRecord::of_round(3);
        assert_eq!(SignedRecord::decode(&empty.encode()).expect("decodes"), empty);
        // Leaves without a manifest to sign them are refused, not restored.
        let stray = SignedRecord { leaves: vec![leaf(0), leaf(1)], ..SignedRecord::of_round(3) };
        let err = SignedRecord::decode(&stray.encode()).expect_err("no manifest signs them");
        assert!(err.to_string().contains("recorded leaves"), "{err}");
        // A count past any shard count is refused before anything is read.
        let mut b = SignedRecord::of_round(3).encode();
        b.truncate(12);
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(SignedRecord::decode(&b).is_err());
    }

    fn result_behind(key: &crate::identity::NodeKey, list: &IncludedList) -> ShardResult {
        ShardResult {
            run: crate::hash::RunId([1; 32]),
            round: 3,
            base: crate::hash::StateId([2; 32]),
            shard: 1,
            included_count: list.entries.len() as u32,
            included_root: list.root(),
            total_tokens: 10,
            result_hash: [4; 32],
            signer: key.public(),
            signature: crate::identity::Signature([0; 64]),
        }
        .sign(key)
    }

    #[test]
    fn results_keep_the_included_lists_they_name() {
        let key = crate::identity::NodeKey::from_seed([5; 32]);
        let list = IncludedList::new(vec![(key.public(), [6; 32])]);
        let result = result_behind(&key, &list);
        let record =
            SignedRecord { results: vec![result.clone()], lists: vec![list], ..SignedRecord::of_round(3) };
        assert_eq!(SignedRecord::decode(&record.encode()).expect("decodes"), record);
        // A record kept without lists (the section absent) still decodes.
        let bare = SignedRecord { lists: Vec::new(), ..record.clone() };
        let mut b = bare.encode();
        b.truncate(b.len() - 4);
        assert_eq!(SignedRecord::decode(&b).expect("decodes"), bare);
        // A list its result does not name is dropped; the result is kept.
        let other = IncludedList::new(vec![(key.public(), [7; 32])]);
        let wrong = SignedRecord { lists: vec![other], ..record };
        let read = SignedRecord::decode(&wrong.encode()).expect("decodes");
        assert_eq!((read.results, read.lists), (vec![result], Vec::new()));
    }
}
