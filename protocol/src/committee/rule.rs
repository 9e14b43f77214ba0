//! The shard rule of the linear robust modes (Mean, NormClip, NormFilter):
//! which of a shard's inputs count and with what coefficient, from what the
//! signed manifests say alone (claimed tokens and whole-delta norms). The
//! aggregate is then Σ cᵢ·xᵢ, so a node that knows the included list and
//! the manifests can check it from projections of the inputs
//! (`super::sketch`) without holding them.
//!
//! The rule leaves out, until none is left to leave out, every input the
//! run's rule refuses among those still in: under a time budget
//! (`Weighting::PerToken`) a claim far from the median claim
//! (`ClaimOutlier`, docs/protocol.md §6.4), then under NormFilter a norm
//! above the run's multiple of the median norm (`NormOutlier`). The set an
//! owner includes is one the rule keeps whole, which anyone can check from
//! the list. Weights are the claimed tokens capped at twice the median
//! claim (plain tokens under Mean); NormClip scales each input whose norm
//! exceeds the multiple of the median down to it. Under a time budget each
//! input first counts as rescaled to the median claim's length (factor
//! t̃ / tᵢ, its norm with it) and its norm bound widens by
//! `rescale_allowance` (`crate::aggregate::robust`). Medians are over the
//! inputs in the set. All arithmetic is f64.

use super::messages::ShardedManifest;
use crate::aggregate::robust::{median_f64, rescale_allowance, within_norm_allowing};
use crate::aggregate::{AggregateRejection, Weighting, CLAIM_ABOVE_MEDIAN, CLAIM_BELOW_MEDIAN};
use crate::spec::{RobustMode, RunSpec};

/// What the rule reads of one input: its manifest's claim and norm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InputClaim {
    pub tokens: u64,
    pub whole_norm: f32,
}

impl InputClaim {
    /// What `m` signs of its delta.
    pub fn of(m: &ShardedManifest) -> Self {
        Self { tokens: m.tokens, whole_norm: m.norm }
    }
}

/// A run's rule for combining a shard's inputs: its robust mode, and how
/// claimed tokens weigh (per token under a time budget).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardRule {
    pub mode: RobustMode,
    pub weighting: Weighting,
}

impl ShardRule {
    /// The rule `spec` asks for.
    pub fn of(spec: &RunSpec) -> Self {
        Self { mode: spec.robust, weighting: Weighting::for_pacing(spec.pacing) }
    }

    /// `mode` in fixed-H rounds.
    pub fn as_trained(mode: RobustMode) -> Self {
        Self { mode, weighting: Weighting::AsTrained }
    }

    /// Whether the shard's aggregate is Σ cᵢ·xᵢ with coefficients from the
    /// claims alone.
    pub fn is_linear(&self) -> bool {
        is_linear(self.mode)
    }
}

/// What the rule says of an included list (its inputs' `claims`).
#[derive(Debug, Clone, PartialEq)]
pub enum ListCheck {
    /// The list is one the rule keeps whole: these are its coefficients.
    Coefficients(Vec<f64>),
    /// The rule would leave some of the list out: no honest owner signs it.
    NotKeptWhole,
}

/// Check an included list against the rule. None for a mode that is not
/// linear or an empty list.
pub fn check_list(claims: &[InputClaim], rule: ShardRule) -> Option<ListCheck> {
    if left_out(claims, rule)?.iter().any(Option::is_some) {
        return Some(ListCheck::NotKeptWhole);
    }
    coefficients(claims, rule).map(ListCheck::Coefficients)
}

/// Whether `mode` aggregates a shard as Σ cᵢ·xᵢ with coefficients from the
/// claims alone.
pub fn is_linear(mode: RobustMode) -> bool {
    matches!(mode, RobustMode::Mean | RobustMode::NormClip { .. } | RobustMode::NormFilter { .. })
}

/// What the rule leaves out of `claims` (None: kept), run until a pass
/// over those still in leaves none out. None for a mode that is not
/// linear.
pub fn left_out(claims: &[InputClaim], rule: ShardRule) -> Option<Vec<Option<AggregateRejection>>> {
    if !rule.is_linear() {
        return None;
    }
    let mut out: Vec<Option<AggregateRejection>> = vec![None; claims.len()];
    loop {
        let inside: Vec<usize> = (0..claims.len()).filter(|&i| out[i].is_none()).collect();
        if inside.is_empty() {
            break;
        }
        let median = median_f64(inside.iter().map(|&i| claims[i].tokens as f64).collect());
        let mut dropped = false;
        if rule.weighting == Weighting::PerToken {
            for &i in &inside {
                let t = claims[i].tokens as f64;
                if t > CLAIM_ABOVE_MEDIAN as f64 * median || t * (CLAIM_BELOW_MEDIAN as f64) < median {
                    out[i] = Some(AggregateRejection::ClaimOutlier);
                    dropped = true;
                }
            }
            if dropped {
                continue;
            }
        }
        if let RobustMode::NormFilter { multiple } = rule.mode {
            let scaled = Scaled::of(&inside.iter().map(|&i| claims[i]).collect::<Vec<_>>(), rule.weighting);
            let pass = within_norm_allowing(&scaled.norms, multiple, scaled.allowance.as_deref());
            for (&i, k) in inside.iter().zip(pass) {
                if !k {
                    out[i] = Some(AggregateRejection::NormOutlier);
                    dropped = true;
                }
            }
        }
        if !dropped {
            break;
        }
    }
    Some(out)
}

/// The inputs of a set as the rule weighs them: each one's factor (t̃ / tᵢ
/// per token, else 1), its norm times that factor, and per token the
/// widening of its norm bound.
struct Scaled {
    factors: Vec<f64>,
    norms: Vec<f64>,
    allowance: Option<Vec<f64>>,
}

impl Scaled {
    fn of(claims: &[InputClaim], weighting: Weighting) -> Self {
        let median = median_f64(claims.iter().map(|c| c.tokens as f64).collect());
        let per_token = weighting == Weighting::PerToken;
        let factors: Vec<f64> =
            claims.iter().map(|c| if per_token { median / c.tokens.max(1) as f64 } else { 1.0 }).collect();
        let norms = claims.iter().zip(&factors).map(|(c, f)| f64::from(c.whole_norm) * f).collect();
        let allowance =
            per_token.then(|| claims.iter().map(|c| rescale_allowance(c.tokens, median)).collect());
        Self { factors, norms, allowance }
    }
}

/// The coefficient of each input of a set the rule keeps whole (`claims`
/// are exactly the inputs in the aggregate). None for a mode that is not
/// linear or an empty set.
pub fn coefficients(claims: &[InputClaim], rule: ShardRule) -> Option<Vec<f64>> {
    if !rule.is_linear() || claims.is_empty() {
        return None;
    }
    let tokens: Vec<f64> = claims.iter().map(|c| c.tokens as f64).collect();
    let weights: Vec<f64> = match rule.mode {
        RobustMode::Mean => tokens,
        _ => {
            let cap = 2.0 * median_f64(tokens.clone());
            tokens.iter().map(|t| t.min(cap)).collect()
        }
    };
    let total: f64 = weights.iter().fold(0.0, |a, w| a + w);
    if total <= 0.0 {
        return None;
    }
    let scaled = Scaled::of(claims, rule.weighting);
    let clip: Vec<f64> = match rule.mode {
        RobustMode::NormClip { multiple } => {
            let threshold = f64::from(multiple) * median_f64(scaled.norms.clone());
            let allowance = |i: usize| scaled.allowance.as_ref().map_or(1.0, |a| a[i]);
            (scaled.norms.iter().enumerate())
                .map(|(i, &n)| {
                    let bound = threshold * allowance(i);
                    if n > bound && n > 0.0 {
                        bound / n
                    } else {
                        1.0
                    }
                })
                .collect()
        }
        _ => vec![1.0; claims.len()],
    };
    Some((0..claims.len()).map(|i| weights[i] * scaled.factors[i] * clip[i] / total).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(tokens: u64, whole_norm: f32) -> InputClaim {
        InputClaim { tokens, whole_norm }
    }

    fn fixed(mode: RobustMode) -> ShardRule {
        ShardRule::as_trained(mode)
    }

    fn per_token(mode: RobustMode) -> ShardRule {
        ShardRule { mode, weighting: Weighting::PerToken }
    }

    fn kept(claims: &[InputClaim], rule: ShardRule) -> Vec<bool> {
        left_out(claims, rule).unwrap().iter().map(Option::is_none).collect()
    }

    #[test]
    fn the_norm_filter_runs_to_a_set_it_keeps_whole() {
        // 1, 1, 1, 2.9, 8: the first pass (median 1) drops 8 but not 2.9;
        // the median of the rest is still 1, so nothing else goes.
        let filter = fixed(RobustMode::NormFilter { multiple: 3.0 });
        let claims = [claim(10, 1.0), claim(10, 1.0), claim(10, 1.0), claim(10, 2.9), claim(10, 8.0)];
        let out = left_out(&claims, filter).unwrap();
        assert_eq!(out, vec![None, None, None, None, Some(AggregateRejection::NormOutlier)]);
        let inside: Vec<InputClaim> =
            claims.iter().zip(&out).filter(|(_, o)| o.is_none()).map(|(c, _)| *c).collect();
        assert!(kept(&inside, filter).iter().all(|k| *k));
        // A set with an outlier in it is not one the filter keeps whole.
        assert_eq!(check_list(&claims, filter), Some(ListCheck::NotKeptWhole));
        assert_eq!(left_out(&claims, fixed(RobustMode::Median)), None);
    }

    #[test]
    fn coefficients_cap_claims_and_clip_long_deltas() {
        let claims = [claim(10, 1.0), claim(10, 1.0), claim(1000, 1.0)];
        let c = coefficients(&claims, fixed(RobustMode::NormFilter { multiple: 3.0 })).unwrap();
        // The 1000-token claim weighs as 20 (twice the median claim).
        assert_eq!(c, vec![0.25, 0.25, 0.5]);
        let mean = coefficients(&claims, fixed(RobustMode::Mean)).unwrap();
        assert!((mean[2] - 1000.0 / 1020.0).abs() < 1e-12);
        let clipped = coefficients(
            &[claim(10, 1.0), claim(10, 1.0), claim(10, 6.0)],
            fixed(RobustMode::NormClip { multiple: 2.0 }),
        )
        .unwrap();
        // The third is scaled from norm 6 to 2: a third of its weight.
        assert!((clipped[2] - 1.0 / 9.0).abs() < 1e-12);
        assert!((clipped[0] - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(coefficients(&claims, fixed(RobustMode::TrimmedMean { trim: 0.1 })), None);
        assert_eq!(coefficients(&[], fixed(RobustMode::Mean)), None);
    }

    #[test]
    fn a_time_budget_leaves_far_claims_out_and_counts_each_delta_per_token() {
        // Claims 100, 100, 100, 500 (over 4× the median) and 5 (under a
        // 16th): both far claims go, whatever their norms.
        let rule = per_token(RobustMode::Mean);
        let claims = [claim(100, 1.0), claim(100, 1.0), claim(100, 1.0), claim(500, 1.0), claim(5, 1.0)];
        let out = left_out(&claims, rule).unwrap();
        let far = Some(AggregateRejection::ClaimOutlier);
        assert_eq!(out, vec![None, None, None, far, far]);
        // Fixed-H rounds keep them.
        assert!(kept(&claims, fixed(RobustMode::Mean)).iter().all(|k| *k));
        // A kept set: each delta is rescaled to the median claim (80) and
        // weighted by its claim, so every coefficient is 80 / Σ t.
        let set = [claim(40, 1.0), claim(80, 1.0), claim(160, 1.0)];
        let c = coefficients(&set, rule).unwrap();
        for ci in &c {
            assert!((ci - 80.0 / 280.0).abs() < 1e-12, "{c:?}");
        }
        assert_eq!(check_list(&set, rule), Some(ListCheck::Coefficients(c)));
    }

    #[test]
    fn a_time_budget_filters_and_clips_rescaled_norms_with_their_allowance() {
        // A quarter-speed node's delta is half as long as the median's
        // (noise grows as √steps): rescaled ×4 it is twice the median
        // length, within 1.5 × median × √4 = 3 × median.
        let filter = per_token(RobustMode::NormFilter { multiple: 1.5 });
        let claims = [claim(100, 1.0), claim(100, 1.0), claim(100, 1.0), claim(25, 0.5)];
        assert!(kept(&claims, filter).iter().all(|k| *k));
        // Its rescaled norm at 4 × the median is out (bound 3).
        let long = [claim(100, 1.0), claim(100, 1.0), claim(100, 1.0), claim(25, 1.0)];
        assert_eq!(left_out(&long, filter).unwrap()[3], Some(AggregateRejection::NormOutlier));
        // Clipped instead: scaled from 4 to 3, on top of its ×4 rescale.
        let clip = coefficients(&long, per_token(RobustMode::NormClip { multiple: 1.5 })).unwrap();
        let total = 100.0 * 3.0 + 25.0;
        assert!((clip[3] - 25.0 * 4.0 * 0.75 / total).abs() < 1e-12, "{clip:?}");
        assert!((clip[0] - 100.0 / total).abs() < 1e-12, "{clip:?}");
    }
}
