//! What a node signed in its newest round — its manifest and its results —
//! kept across restarts so that it never signs a second, different one for
//! the same round (which any peer holding both would turn into a
//! `TwoManifests` or `TwoResults` proof against an honest node). The
//! machine hands each new record to its driver (`CommitteeAction::Record`)
//! before any of it leaves the node; the driver stores it durably and gives
//! it back to the machine after a restart (`CommitteeMachine::restore_signed`).
//!
//! Encoding (the node's own store, not the wire): `u64 round ‖ u32 m ‖ m
//! bytes of manifest (m = 0: none) ‖ u32 n ‖ n × (u32 len ‖ len bytes of a
//! ShardResult)`.

use super::messages::{ShardResult, ShardedManifest};
use crate::wire::{Reader, WireError, Writer};

/// Most results a record keeps: a node's own shard and the shards it took
/// over as a backup, with room to spare.
pub const MAX_RECORDED_RESULTS: usize = 64;
/// Largest encoded manifest or result a record holds.
const MAX_ITEM_BYTES: usize = 4096;

/// A node's signed words of one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SignedRecord {
    pub round: u64,
    pub manifest: Option<ShardedManifest>,
    /// One per shard.
    pub results: Vec<ShardResult>,
}

impl SignedRecord {
    /// An empty record of `round`.
    pub fn of_round(round: u64) -> Self {
        Self { round, manifest: None, results: Vec::new() }
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
        w.u32(self.results.len() as u32);
        for r in &self.results {
            let b = r.encode();
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
        let n = r.count("recorded results", MAX_RECORDED_RESULTS, 4)?;
        let mut results = Vec::with_capacity(n);
        for _ in 0..n {
            let len = item_len(&mut r, "recorded result")?;
            results.push(ShardResult::decode(r.take(len)?)?);
        }
        r.finish()?;
        Ok(Self { round, manifest, results })
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
