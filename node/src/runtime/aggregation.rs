//! A round's aggregation, run on the blocking pool: decode the offered
//! deltas from the store, combine them deterministically under the run's
//! robust mode (normalised by claimed tokens in time-budgeted runs,
//! docs/protocol.md §6.4), apply the outer step, and store the new state (blob first,
//! then the position record), before the node publishes its commit.

use murmur_protocol::{
    aggregate_weighted, decode_delta, outer_step, AcceptedDelta, DeltaInput, PayloadHash, PublicKey, RunSpec,
    StateId, TrainingState, Weighting,
};

use super::held::HeldState;
use crate::store::{BlobKind, Position, Store};

/// A round's aggregate as the node keeps it.
pub struct RoundAggregate {
    /// The included deltas' hashes, ascending (the commit's list).
    pub included: Vec<PayloadHash>,
    /// Offered deltas left out, with why (for the node's log).
    pub left_out: Vec<(PublicKey, String)>,
    /// The new state, stored.
    pub state: HeldState,
}

/// Decode the round's deltas, aggregate them, apply the outer step, and
/// store the new state (blob first, then the position record).
pub fn aggregate_round(
    store: &Store,
    spec: &RunSpec,
    base: &TrainingState,
    deltas: &[AcceptedDelta],
) -> Result<RoundAggregate, String> {
    let n = spec.model.param_count as usize;
    let mut left_out = Vec::new();
    let mut decoded = Vec::with_capacity(deltas.len());
    for d in deltas {
        let values = store
            .blobs
            .get(BlobKind::Delta, &d.payload_hash.0)
            .map_err(|e| e.to_string())
            .and_then(|b| decode_delta(&b, spec.codec, n).map_err(|e| e.to_string()));
        match values {
            Ok(v) => decoded.push((*d, v)),
            Err(e) => left_out.push((d.signer, format!("unreadable: {e}"))),
        }
    }
    let inputs: Vec<DeltaInput<'_>> = decoded
        .iter()
        .map(|(d, v)| DeltaInput {
            payload_hash: d.payload_hash,
            signer: d.signer,
            tokens: d.tokens,
            values: v,
        })
        .collect();
    let weighting = Weighting::for_pacing(spec.pacing);
    let agg = aggregate_weighted(&inputs, n, spec.robust, weighting).map_err(|e| e.to_string())?;
    left_out.extend(agg.rejected.iter().map(|r| (r.signer, r.reason.to_string())));
    let mut next = base.clone();
    outer_step(spec.outer, &mut next, &agg.delta).map_err(|e| e.to_string())?;
    let bytes = next.encode();
    let id = store.blobs.put(BlobKind::State, &bytes).map_err(|e| e.to_string())?;
    store
        .meta
        .set_position(&spec.run_id(), Position { round: next.round, state: StateId(id) })
        .map_err(|e| e.to_string())?;
    Ok(RoundAggregate { included: agg.included, left_out, state: HeldState::stored(next, StateId(id)) })
}
