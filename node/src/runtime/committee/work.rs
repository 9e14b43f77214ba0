//! The round's compute, run on the blocking pool: cut a trained delta
//! into encoded shards (with error feedback) and store them; aggregate a
//! shard from stored inputs with the one per-shard function
//! (`murmur_protocol::committee::aggregate_shard`, as `murmur netsim` and
//! re-checks use it) and store its encoded payload; apply a round's
//! aggregated shards (decoded) with the outer step.

use murmur_protocol::committee::{
    aggregate_codec, aggregate_shard, shard_norm, Ledger, ShardAggregate, ShardInput, ShardLayout, ShardLeaf,
    ShardRule, ShardedManifest,
};
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::{
    decode_delta, decode_delta_into, outer_step, ErrorFeedback, RunSpec, StateId, TrainingState,
};

use crate::store::{BlobKind, Position, Store};

/// Our delta cut by `layout`: each shard encoded (error feedback over the
/// whole vector), stored as a Delta blob; the leaves in shard order and the
/// whole-delta norm (of the decoded shards).
pub fn cut_delta(
    store: &Store,
    codec: murmur_protocol::Codec,
    feedback: &mut ErrorFeedback,
    delta: &[f32],
    layout: ShardLayout,
) -> Result<(Vec<ShardLeaf>, f32), String> {
    let ranges: Vec<_> = (0..layout.shards()).map(|s| layout.range(s)).collect();
    let payloads = feedback
        .encode_ranges(codec, delta, &ranges)
        .map_err(|e| format!("encoding our delta failed: {e}"))?;
    let mut leaves = Vec::with_capacity(payloads.len());
    for (s, payload) in payloads.iter().enumerate() {
        let decoded = decode_delta(payload, codec, ranges[s].len()).map_err(|e| e.to_string())?;
        store.blobs.put(BlobKind::Delta, payload).map_err(|e| format!("storing our shard failed: {e}"))?;
        leaves.push(ShardLeaf {
            shard: s as u32,
            payload_hash: payload_hash_of(payload),
            payload_len: payload.len() as u64,
            norm: shard_norm(&decoded),
        });
    }
    let norm = leaves.iter().map(|l| f64::from(l.norm).powi(2)).sum::<f64>().sqrt() as f32;
    Ok((leaves, norm))
}

/// Aggregate `shard` from the stored payloads of `inputs` (their leaves in
/// the same order) and store its payload as an Aggregate blob.
pub fn aggregate_stored(
    store: &Store,
    spec: &RunSpec,
    layout: ShardLayout,
    shard: u32,
    inputs: &[ShardedManifest],
    leaves: &[ShardLeaf],
) -> Result<ShardAggregate, String> {
    let n = layout.len(shard);
    let mut decoded = Vec::with_capacity(inputs.len());
    for (m, l) in inputs.iter().zip(leaves) {
        let values = store
            .blobs
            .get(BlobKind::Delta, &l.payload_hash.0)
            .map_err(|e| e.to_string())
            .and_then(|b| decode_delta(&b, spec.codec, n).map_err(|e| e.to_string()));
        match values {
            Ok(v) => decoded.push((m, l, v)),
            Err(e) => tracing::warn!("shard {shard} of {:?} left out: {e}", m.signer),
        }
    }
    let shard_inputs: Vec<ShardInput<'_>> = decoded.iter().map(|(m, l, v)| ShardInput::of(m, l, v)).collect();
    let agg = aggregate_shard(&shard_inputs, n, ShardRule::of(spec), aggregate_codec(spec.codec))
        .map_err(|e| e.to_string())?;
    store.blobs.put(BlobKind::Aggregate, &agg.payload).map_err(|e| e.to_string())?;
    Ok(agg)
}

/// Apply round `base.round`: every shard's chosen aggregate (None: zero)
/// read from the store, then the outer step; the new state is stored
/// (its blob, its `ledger`, then the position), so a restart finds the
/// position's ledger whenever it was killed.
pub fn apply_round(
    store: &Store,
    spec: &RunSpec,
    base: &TrainingState,
    layout: ShardLayout,
    shards: &[Option<[u8; 32]>],
    ledger: &Ledger,
) -> Result<TrainingState, String> {
    let mut delta = vec![0f32; spec.model.param_count as usize];
    for (s, chosen) in shards.iter().enumerate() {
        let Some(hash) = chosen else { continue };
        let range = layout.range(s as u32);
        let bytes = store.blobs.get(BlobKind::Aggregate, hash).map_err(|e| e.to_string())?;
        decode_delta_into(&bytes, aggregate_codec(spec.codec), &mut delta[range])
            .map_err(|e| format!("aggregate of shard {s}: {e}"))?;
    }
    let mut next = base.clone();
    outer_step(spec.outer, &mut next, &delta).map_err(|e| e.to_string())?;
    let id = store.blobs.put(BlobKind::State, &next.encode()).map_err(|e| e.to_string())?;
    store.blobs.put(BlobKind::Ledger, &ledger.encode()).map_err(|e| e.to_string())?;
    store.meta.set_ledger_of(&spec.run_id(), &StateId(id), &ledger.hash()).map_err(|e| e.to_string())?;
    store
        .meta
        .set_position(&spec.run_id(), Position { round: next.round, state: StateId(id) })
        .map_err(|e| e.to_string())?;
    Ok(next)
}
