//! Aggregating one shard: the one function committee members,
//! re-checkers, fraud-proof verifiers, `murmur netsim` and the node call. It
//! checks each input's shard norm against the signed leaf, then under the
//! linear modes sums Σ cᵢ·xᵢ with the coefficients of `super::rule`, and
//! under TrimmedMean and Median runs the version-1 aggregation
//! (`crate::aggregate`, with the run's weighting) on the shard: the same
//! validation, the same f64 sums in the same order. The aggregate travels encoded with the run's aggregate codec; its values
//! are the decoded payload, so every node applies the same bits.

use super::messages::{aggregate_hash, IncludedList};
use super::rule::{self, InputClaim, ShardRule};
use crate::aggregate::robust::l2_norm;
use crate::aggregate::{aggregate_weighted, validate, AggregateError, AggregateRejection, DeltaInput};
use crate::codec::{decode_delta, encode_delta, Codec};
use crate::hash::{domain_hash, PayloadHash};
use crate::identity::PublicKey;

/// One trainer's shard, decoded, with what its signed manifest says.
#[derive(Debug, Clone, Copy)]
pub struct ShardInput<'a> {
    pub signer: PublicKey,
    /// The manifest's Merkle root (which delta of the signer this is).
    pub root: [u8; 32],
    pub tokens: u64,
    /// The manifest's whole-delta norm.
    pub whole_norm: f32,
    /// The leaf's norm of this shard.
    pub shard_norm: f32,
    pub values: &'a [f32],
}

impl<'a> ShardInput<'a> {
    /// `values`, the decoded shard `leaf` of the delta `m` signs.
    pub fn of(
        m: &super::messages::ShardedManifest,
        leaf: &super::merkle::ShardLeaf,
        values: &'a [f32],
    ) -> Self {
        Self {
            signer: m.signer,
            root: m.root,
            tokens: m.tokens,
            whole_norm: m.norm,
            shard_norm: leaf.norm,
            values,
        }
    }

    /// What the shard rule reads of this input.
    pub fn claim(&self) -> InputClaim {
        InputClaim { tokens: self.tokens, whole_norm: self.whole_norm }
    }
}

/// The codec aggregates of a run travel in: the delta codec where it keeps
/// every element (f32, f16, bf16, int8 and int4 blocks), int8 in blocks of
/// the same size for the top-k codecs (an aggregate of sparse deltas is dense).
pub fn aggregate_codec(delta: Codec) -> Codec {
    match delta {
        Codec::TopK { block, .. } | Codec::TopKMask { block, .. } => Codec::Int8Block { block },
        c => c,
    }
}

/// An aggregated shard and what went into it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardAggregate {
    /// The aggregate as it travels: encoded with the aggregate codec.
    pub payload: Vec<u8>,
    /// The decoded payload: what every node applies.
    pub values: Vec<f32>,
    pub included: IncludedList,
    pub total_tokens: u64,
    /// `aggregate_hash(payload)`, the ShardResult's `result_hash`.
    pub result_hash: [u8; 32],
    pub rejected: Vec<(PublicKey, AggregateRejection)>,
}

/// L2 norm of a shard's values as a leaf records it (f64 in index order, as f32).
pub fn shard_norm(values: &[f32]) -> f32 {
    l2_norm(values) as f32
}

fn input_id(signer: &PublicKey, root: &[u8; 32]) -> PayloadHash {
    let mut b = [0u8; 64];
    b[..32].copy_from_slice(&signer.0);
    b[32..].copy_from_slice(root);
    PayloadHash(domain_hash(super::messages::DOMAIN_INCLUDED, &b))
}

/// Aggregate shard inputs (any order; at most one per signer is kept, the
/// first in signer order) of `expected_len` elements under `rule`, and
/// encode the result with `codec` (the run's `aggregate_codec`).
pub fn aggregate_shard(
    inputs: &[ShardInput<'_>],
    expected_len: usize,
    rule: ShardRule,
    codec: Codec,
) -> Result<ShardAggregate, AggregateError> {
    let mut sorted: Vec<&ShardInput<'_>> = inputs.iter().collect();
    sorted.sort_by(|a, b| a.signer.cmp(&b.signer).then(a.root.cmp(&b.root)));
    sorted.dedup_by(|a, b| a.signer == b.signer);
    let mut rejected = Vec::new();
    let mut kept: Vec<&ShardInput<'_>> = Vec::new();
    for d in sorted {
        let honest_norm = d.values.len() == expected_len
            && shard_norm(d.values).to_bits() == d.shard_norm.to_bits()
            && f64::from(d.shard_norm) <= f64::from(d.whole_norm) * (1.0 + 1e-6);
        if honest_norm || d.values.len() != expected_len {
            kept.push(d);
        } else {
            rejected.push((d.signer, AggregateRejection::NormMismatch));
        }
    }
    if rule.is_linear() {
        return aggregate_linear(kept, rejected, expected_len, rule, codec);
    }
    let deltas: Vec<DeltaInput<'_>> = kept
        .iter()
        .map(|d| DeltaInput {
            payload_hash: input_id(&d.signer, &d.root),
            signer: d.signer,
            tokens: d.tokens,
            values: d.values,
        })
        .collect();
    let agg = match aggregate_weighted(&deltas, expected_len, rule.mode, rule.weighting) {
        Ok(a) => a,
        Err(AggregateError::NoValidDeltas { rejected: more }) => {
            let mut all = more;
            all.extend(rejected.iter().map(|(signer, reason)| crate::aggregate::Rejected {
                payload_hash: PayloadHash::default(),
                signer: *signer,
                reason: *reason,
            }));
            return Err(AggregateError::NoValidDeltas { rejected: all });
        }
        Err(e) => return Err(e),
    };
    rejected.extend(agg.rejected.iter().map(|r| (r.signer, r.reason)));
    rejected.sort_by_key(|a| a.0);
    let included = IncludedList::new(
        kept.iter()
            .filter(|d| agg.included.contains(&input_id(&d.signer, &d.root)))
            .map(|d| (d.signer, d.root))
            .collect(),
    );
    let payload = encode_delta(codec, &agg.delta)?;
    let values = decode_delta(&payload, codec, expected_len)?;
    Ok(ShardAggregate {
        result_hash: aggregate_hash(&payload),
        payload,
        values,
        included,
        total_tokens: agg.total_tokens,
        rejected,
    })
}

/// The linear modes: validate each input (finite, in range, of the run's
/// codec and shard length), keep what `rule::left_out` keeps, and sum Σ cᵢ·xᵢ in f64 in signer
/// order with `rule::coefficients`.
fn aggregate_linear(
    candidates: Vec<&ShardInput<'_>>,
    mut rejected: Vec<(PublicKey, AggregateRejection)>,
    expected_len: usize,
    rule: ShardRule,
    codec: Codec,
) -> Result<ShardAggregate, AggregateError> {
    let mut valid = Vec::with_capacity(candidates.len());
    for d in candidates {
        let as_delta = DeltaInput {
            payload_hash: PayloadHash::default(),
            signer: d.signer,
            tokens: d.tokens,
            values: d.values,
        };
        match validate(&as_delta, expected_len) {
            Some(reason) => rejected.push((d.signer, reason)),
            None => valid.push(d),
        }
    }
    let claims: Vec<InputClaim> = valid.iter().map(|d| d.claim()).collect();
    let out = rule::left_out(&claims, rule).unwrap_or_default();
    let mut kept = Vec::with_capacity(valid.len());
    for (d, o) in valid.into_iter().zip(out) {
        match o {
            None => kept.push(d),
            Some(reason) => rejected.push((d.signer, reason)),
        }
    }
    rejected.sort_by_key(|a| a.0);
    let claims: Vec<InputClaim> = kept.iter().map(|d| d.claim()).collect();
    let Some(coefficients) = rule::coefficients(&claims, rule) else {
        let rejected = rejected
            .iter()
            .map(|(signer, reason)| crate::aggregate::Rejected {
                payload_hash: PayloadHash::default(),
                signer: *signer,
                reason: *reason,
            })
            .collect();
        return Err(AggregateError::NoValidDeltas { rejected });
    };
    let mut acc = vec![0f64; expected_len];
    for (d, c) in kept.iter().zip(&coefficients) {
        for (a, &v) in acc.iter_mut().zip(d.values) {
            *a += c * f64::from(v);
        }
    }
    let values: Vec<f32> = acc.into_iter().map(|a| a as f32).collect();
    let payload = encode_delta(codec, &values)?;
    let values = decode_delta(&payload, codec, expected_len)?;
    Ok(ShardAggregate {
        result_hash: aggregate_hash(&payload),
        payload,
        values,
        included: IncludedList::new(kept.iter().map(|d| (d.signer, d.root)).collect()),
        total_tokens: kept.iter().fold(0u64, |a, d| a.saturating_add(d.tokens)),
        rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::RobustMode;

    fn mean() -> ShardRule {
        ShardRule::as_trained(RobustMode::Mean)
    }

    fn input(i: u8, values: &[f32], whole: f32) -> ShardInput<'_> {
        ShardInput {
            signer: PublicKey([i; 32]),
            root: [i; 32],
            tokens: 10,
            whole_norm: whole,
            shard_norm: shard_norm(values),
            values,
        }
    }

    #[test]
    fn same_inputs_in_any_order_give_the_same_bits() {
        let (a, b, c) = ([1.0f32, 2.0], [0.5f32, -1.0], [0.25f32, 0.0]);
        let x = aggregate_shard(
            &[input(1, &a, 9.0), input(2, &b, 9.0), input(3, &c, 9.0)],
            2,
            mean(),
            Codec::F32,
        )
        .unwrap();
        let y = aggregate_shard(
            &[input(3, &c, 9.0), input(1, &a, 9.0), input(2, &b, 9.0)],
            2,
            mean(),
            Codec::F32,
        )
        .unwrap();
        assert_eq!(x, y);
        assert_eq!(x.included.len(), 3);
        assert_eq!(x.result_hash, aggregate_hash(&x.payload));
    }

    #[test]
    fn a_shard_whose_norm_is_not_the_signed_one_is_left_out() {
        let (a, b) = ([1.0f32, 2.0], [0.5f32, -1.0]);
        let mut lie = input(2, &b, 9.0);
        lie.shard_norm = 0.1;
        let x = aggregate_shard(&[input(1, &a, 9.0), lie], 2, mean(), Codec::F32).unwrap();
        assert_eq!(x.included.entries, vec![(PublicKey([1; 32]), [1; 32])]);
        assert_eq!(x.rejected, vec![(PublicKey([2; 32]), AggregateRejection::NormMismatch)]);
        let over = input(3, &a, 0.5);
        let y = aggregate_shard(&[input(1, &a, 9.0), over], 2, mean(), Codec::F32).unwrap();
        assert_eq!(y.rejected, vec![(PublicKey([3; 32]), AggregateRejection::NormMismatch)]);
    }

    #[test]
    fn the_norm_filter_reads_the_signed_whole_norms() {
        let v = [[0.1f32, 0.1], [0.1, 0.1], [0.1, 0.1]];
        // The third shard looks ordinary, but its delta as a whole is huge.
        let inputs = [input(1, &v[0], 1.0), input(2, &v[1], 1.1), input(3, &v[2], 50.0)];
        let x = aggregate_shard(
            &inputs,
            2,
            ShardRule::as_trained(RobustMode::NormFilter { multiple: 3.0 }),
            Codec::F32,
        )
        .unwrap();
        assert_eq!(x.included.len(), 2);
        assert_eq!(x.rejected, vec![(PublicKey([3; 32]), AggregateRejection::NormOutlier)]);
    }
}
