//! Deterministic aggregation of a round's pseudo-gradients.
//!
//! Inputs are validated (shape, finite values within ±2⁶⁴, non-zero tokens, one payload
//! per hash), sorted by payload hash, in time-budgeted runs normalised by
//! their claimed tokens (`Weighting::PerToken`), and combined by the run's
//! RobustMode.
//! Every sum runs in f64 in that fixed order, with no fused multiply-add, so
//! honest nodes given the same set of deltas produce bit-identical results
//! on any hardware, whatever order the deltas arrived in.

pub(crate) mod robust;

use crate::codec::MAX_ABS_VALUE;
use crate::hash::PayloadHash;
use crate::identity::PublicKey;
use crate::spec::{Pacing, RobustMode};
use thiserror::Error;

/// One decoded delta offered for aggregation.
#[derive(Debug, Clone, Copy)]
pub struct DeltaInput<'a> {
    pub payload_hash: PayloadHash,
    pub signer: PublicKey,
    pub tokens: u64,
    pub values: &'a [f32],
}

/// Why a delta was left out of the aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AggregateRejection {
    #[error("delta has {found} elements, the model has {expected}")]
    WrongShape { expected: usize, found: usize },
    #[error("element {index} is not finite")]
    NonFinite { index: usize },
    #[error("element {index} exceeds ±2^64, the codecs' value domain")]
    OutOfRange { index: usize },
    #[error("delta claims zero tokens")]
    ZeroTokens,
    #[error("another input with the same payload hash was already included")]
    Duplicate,
    #[error("inputs with the same payload hash disagree")]
    HashConflict,
    #[error("its L2 norm is an outlier (more than the run's multiple of the median norm)")]
    NormOutlier,
    #[error("the shard's L2 norm is not the one its signed manifest commits to")]
    NormMismatch,
    #[error("its claimed tokens are far from the median claim (above 4× or below 1/16 of it)")]
    ClaimOutlier,
}

/// How claimed tokens enter the combination (RunSpec pacing, docs/protocol.md §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weighting {
    /// Fixed-H rounds: every delta is combined as it was trained.
    #[default]
    AsTrained,
    /// Time-budgeted rounds: a delta of t tokens is first rescaled by
    /// t_med / t (normalised by its steps, rescaled by the median claim), so
    /// that with token weights a node's influence grows linearly with its
    /// steps, not with their square; claims above `CLAIM_ABOVE_MEDIAN` × or
    /// below 1 / `CLAIM_BELOW_MEDIAN` of the median are refused; the norm
    /// filter and clip bound a rescaled delta of t < t_med at √(t_med / t)
    /// times the usual bound (its stretched noise).
    PerToken,
}

impl Weighting {
    /// The weighting a run's pacing asks for: per token when the inner phase
    /// is time-budgeted (nodes train different step counts), else as trained.
    pub fn for_pacing(pacing: Pacing) -> Self {
        if pacing.is_budgeted() {
            Self::PerToken
        } else {
            Self::AsTrained
        }
    }
}

/// A claim above this multiple of the median claim is refused (`PerToken`).
pub const CLAIM_ABOVE_MEDIAN: u64 = 4;
/// A claim below the median claim divided by this is refused (`PerToken`):
/// rescaling it would amplify its delta more than that.
pub const CLAIM_BELOW_MEDIAN: u64 = 16;

/// A rejected input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub payload_hash: PayloadHash,
    pub signer: PublicKey,
    pub reason: AggregateRejection,
}

/// The aggregated pseudo-gradient Δ and what went into it.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    pub delta: Vec<f32>,
    /// Hashes of the included deltas, ascending.
    pub included: Vec<PayloadHash>,
    /// Rejected inputs, ordered by (hash, signer).
    pub rejected: Vec<Rejected>,
    /// Sum of the included deltas' claimed tokens.
    pub total_tokens: u64,
}

/// Aggregation could not produce a delta.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AggregateError {
    #[error("no delta survived validation ({} rejected)", rejected.len())]
    NoValidDeltas { rejected: Vec<Rejected> },
    #[error("the aggregate could not be encoded: {0}")]
    Encoding(#[from] crate::codec::CodecError),
}

fn same_input(a: &DeltaInput<'_>, b: &DeltaInput<'_>) -> bool {
    a.signer == b.signer
        && a.tokens == b.tokens
        && a.values.len() == b.values.len()
        && a.values.iter().zip(b.values).all(|(x, y)| x.to_bits() == y.to_bits())
}

pub(crate) fn validate(d: &DeltaInput<'_>, expected_len: usize) -> Option<AggregateRejection> {
    if d.values.len() != expected_len {
        return Some(AggregateRejection::WrongShape { expected: expected_len, found: d.values.len() });
    }
    if let Some(index) = d.values.iter().position(|v| !v.is_finite()) {
        return Some(AggregateRejection::NonFinite { index });
    }
    if let Some(index) = d.values.iter().position(|v| v.abs() > MAX_ABS_VALUE) {
        return Some(AggregateRejection::OutOfRange { index });
    }
    if d.tokens == 0 {
        return Some(AggregateRejection::ZeroTokens);
    }
    None
}

/// Aggregate `inputs` (in any order) into one pseudo-gradient of
/// `expected_len` elements using `mode` (fixed-H rounds).
pub fn aggregate(
    inputs: &[DeltaInput<'_>],
    expected_len: usize,
    mode: RobustMode,
) -> Result<Aggregate, AggregateError> {
    aggregate_weighted(inputs, expected_len, mode, Weighting::AsTrained)
}

/// `aggregate` under the run's `weighting`.
pub fn aggregate_weighted(
    inputs: &[DeltaInput<'_>],
    expected_len: usize,
    mode: RobustMode,
    weighting: Weighting,
) -> Result<Aggregate, AggregateError> {
    let mut sorted: Vec<&DeltaInput<'_>> = inputs.iter().collect();
    sorted.sort_by(|a, b| a.payload_hash.cmp(&b.payload_hash).then(a.signer.cmp(&b.signer)));
    let mut rejected = Vec::new();
    let mut accepted: Vec<&DeltaInput<'_>> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        // The run of inputs sharing this payload hash.
        let mut j = i + 1;
        while j < sorted.len() && sorted[j].payload_hash == sorted[i].payload_hash {
            j += 1;
        }
        let group = &sorted[i..j];
        let reject =
            |d: &DeltaInput<'_>, reason| Rejected { payload_hash: d.payload_hash, signer: d.signer, reason };
        if group.iter().all(|d| same_input(d, group[0])) {
            match validate(group[0], expected_len) {
                Some(reason) => rejected.extend(group.iter().map(|d| reject(d, reason))),
                None => {
                    accepted.push(group[0]);
                    rejected.extend(group[1..].iter().map(|d| reject(d, AggregateRejection::Duplicate)));
                }
            }
        } else {
            rejected.extend(group.iter().map(|d| reject(d, AggregateRejection::HashConflict)));
        }
        i = j;
    }
    if accepted.is_empty() {
        return Err(AggregateError::NoValidDeltas { rejected });
    }
    if weighting == Weighting::AsTrained {
        return Ok(combine(accepted, rejected, expected_len, mode, None));
    }
    let median = robust::median_f64(accepted.iter().map(|d| d.tokens as f64).collect());
    let mut near = Vec::with_capacity(accepted.len());
    for d in accepted {
        let t = d.tokens as f64;
        if t > CLAIM_ABOVE_MEDIAN as f64 * median || t * (CLAIM_BELOW_MEDIAN as f64) < median {
            rejected.push(Rejected {
                payload_hash: d.payload_hash,
                signer: d.signer,
                reason: AggregateRejection::ClaimOutlier,
            });
        } else {
            near.push(d);
        }
    }
    rejected.sort_by(|a, b| a.payload_hash.cmp(&b.payload_hash).then(a.signer.cmp(&b.signer)));
    let scaled: Vec<Vec<f32>> = near
        .iter()
        .map(|d| {
            let factor = median / d.tokens as f64;
            d.values.iter().map(|&v| (f64::from(v) * factor) as f32).collect()
        })
        .collect();
    let normalised: Vec<DeltaInput<'_>> =
        near.iter().zip(&scaled).map(|(d, values)| DeltaInput { values, ..**d }).collect();
    Ok(combine(normalised.iter().collect(), rejected, expected_len, mode, Some(median)))
}

/// The robust combination of validated, sorted inputs (at least one);
/// `claim_median`: the inputs were rescaled to this median claim, and
/// their norm bounds widen by `robust::rescale_allowance`.
fn combine(
    mut accepted: Vec<&DeltaInput<'_>>,
    mut rejected: Vec<Rejected>,
    expected_len: usize,
    mode: RobustMode,
    claim_median: Option<f64>,
) -> Aggregate {
    let allowance = |inputs: &[&DeltaInput<'_>]| -> Option<Vec<f64>> {
        claim_median.map(|m| inputs.iter().map(|d| robust::rescale_allowance(d.tokens, m)).collect())
    };
    if let RobustMode::NormFilter { multiple } = mode {
        let norms: Vec<f64> = accepted.iter().map(|d| robust::l2_norm(d.values)).collect();
        let keep = robust::within_norm_allowing(&norms, multiple, allowance(&accepted).as_deref());
        let mut kept = Vec::with_capacity(accepted.len());
        for (d, k) in accepted.into_iter().zip(keep) {
            if k {
                kept.push(d);
            } else {
                rejected.push(Rejected {
                    payload_hash: d.payload_hash,
                    signer: d.signer,
                    reason: AggregateRejection::NormOutlier,
                });
            }
        }
        rejected.sort_by(|a, b| a.payload_hash.cmp(&b.payload_hash).then(a.signer.cmp(&b.signer)));
        accepted = kept;
    }
    let values: Vec<&[f32]> = accepted.iter().map(|d| d.values).collect();
    let tokens: Vec<u64> = accepted.iter().map(|d| d.tokens).collect();
    let delta = match mode {
        RobustMode::Mean => robust::weighted_mean(&values, &tokens, None, expected_len),
        RobustMode::NormClip { multiple } => robust::norm_clipped_mean(
            &values,
            &tokens,
            multiple,
            allowance(&accepted).as_deref(),
            expected_len,
        ),
        RobustMode::TrimmedMean { trim } => robust::trimmed_mean(&values, trim, expected_len),
        RobustMode::Median => robust::median(&values, expected_len),
        RobustMode::NormFilter { .. } => robust::capped_weight_mean(&values, &tokens, expected_len),
    };
    Aggregate {
        delta,
        included: accepted.iter().map(|d| d.payload_hash).collect(),
        rejected,
        total_tokens: tokens.iter().fold(0u64, |a, t| a.saturating_add(*t)),
    }
}

#[cfg(test)]
mod tests;
