//! The shard rule of the linear robust modes (Mean, NormClip, NormFilter):
//! which of a shard's inputs count and with what coefficient, from what the
//! signed manifests say alone (claimed tokens and whole-delta norms). The
//! aggregate is then Σ cᵢ·xᵢ, so a node that knows the included list and
//! the manifests can check it from projections of the inputs
//! (`super::sketch`) without holding them.
//!
//! NormFilter leaves out, until none is left to leave out, every input whose
//! norm exceeds the run's multiple of the median norm of those still in:
//! the set an owner includes is one the filter keeps whole, which anyone
//! can check from the list. Weights are the claimed tokens capped at twice
//! the median claim (plain tokens under Mean); NormClip scales each input
//! whose norm exceeds the multiple of the median down to it. Medians are
//! over the inputs in the set. All arithmetic is f64.

use super::messages::ShardedManifest;
use crate::aggregate::robust::{median_f64, within_norm};
use crate::spec::RobustMode;

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
pub fn check_list(claims: &[InputClaim], mode: RobustMode) -> Option<ListCheck> {
    if !kept(claims, mode)?.iter().all(|k| *k) {
        return Some(ListCheck::NotKeptWhole);
    }
    coefficients(claims, mode).map(ListCheck::Coefficients)
}

/// Whether `mode` aggregates a shard as Σ cᵢ·xᵢ with coefficients from the
/// claims alone.
pub fn is_linear(mode: RobustMode) -> bool {
    matches!(mode, RobustMode::Mean | RobustMode::NormClip { .. } | RobustMode::NormFilter { .. })
}

/// Which of `claims` the rule keeps (NormFilter's fixpoint; every input
/// under the other linear modes). None for a mode that is not linear.
pub fn kept(claims: &[InputClaim], mode: RobustMode) -> Option<Vec<bool>> {
    if !is_linear(mode) {
        return None;
    }
    let mut keep = vec![true; claims.len()];
    if let RobustMode::NormFilter { multiple } = mode {
        // One pass of the norm filter over the inputs still in, until a
        // pass leaves none out.
        loop {
            let inside: Vec<usize> = (0..claims.len()).filter(|&i| keep[i]).collect();
            let norms: Vec<f64> = inside.iter().map(|&i| f64::from(claims[i].whole_norm)).collect();
            let pass = within_norm(&norms, multiple);
            if pass.iter().all(|k| *k) {
                break;
            }
            for (&i, k) in inside.iter().zip(pass) {
                keep[i] = k;
            }
        }
    }
    Some(keep)
}

/// The coefficient of each input of a set the rule keeps whole (`claims`
/// are exactly the inputs in the aggregate); they sum to at most 1. None
/// for a mode that is not linear or an empty set.
pub fn coefficients(claims: &[InputClaim], mode: RobustMode) -> Option<Vec<f64>> {
    if !is_linear(mode) || claims.is_empty() {
        return None;
    }
    let tokens: Vec<f64> = claims.iter().map(|c| c.tokens as f64).collect();
    let weights: Vec<f64> = match mode {
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
    let clip: Vec<f64> = match mode {
        RobustMode::NormClip { multiple } => {
            let norms: Vec<f64> = claims.iter().map(|c| f64::from(c.whole_norm)).collect();
            let bound = f64::from(multiple) * median_f64(norms.clone());
            norms.iter().map(|&n| if n > bound && n > 0.0 { bound / n } else { 1.0 }).collect()
        }
        _ => vec![1.0; claims.len()],
    };
    Some(weights.iter().zip(&clip).map(|(w, s)| w * s / total).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(tokens: u64, whole_norm: f32) -> InputClaim {
        InputClaim { tokens, whole_norm }
    }

    #[test]
    fn the_norm_filter_runs_to_a_set_it_keeps_whole() {
        // 1, 1, 1, 2.9, 8: the first pass (median 1) drops 8 but not 2.9;
        // the median of the rest is still 1, so nothing else goes.
        let claims = [claim(10, 1.0), claim(10, 1.0), claim(10, 1.0), claim(10, 2.9), claim(10, 8.0)];
        let keep = kept(&claims, RobustMode::NormFilter { multiple: 3.0 }).unwrap();
        assert_eq!(keep, vec![true, true, true, true, false]);
        let inside: Vec<InputClaim> =
            claims.iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| *c).collect();
        assert!(kept(&inside, RobustMode::NormFilter { multiple: 3.0 }).unwrap().iter().all(|k| *k));
        // A set with an outlier in it is not one the filter keeps whole.
        assert!(!kept(&claims, RobustMode::NormFilter { multiple: 3.0 }).unwrap().iter().all(|k| *k));
        assert_eq!(kept(&claims, RobustMode::Median), None);
    }

    #[test]
    fn coefficients_cap_claims_and_clip_long_deltas() {
        let claims = [claim(10, 1.0), claim(10, 1.0), claim(1000, 1.0)];
        let c = coefficients(&claims, RobustMode::NormFilter { multiple: 3.0 }).unwrap();
        // The 1000-token claim weighs as 20 (twice the median claim).
        assert_eq!(c, vec![0.25, 0.25, 0.5]);
        let mean = coefficients(&claims, RobustMode::Mean).unwrap();
        assert!((mean[2] - 1000.0 / 1020.0).abs() < 1e-12);
        let clipped = coefficients(
            &[claim(10, 1.0), claim(10, 1.0), claim(10, 6.0)],
            RobustMode::NormClip { multiple: 2.0 },
        )
        .unwrap();
        // The third is scaled from norm 6 to 2: a third of its weight.
        assert!((clipped[2] - 1.0 / 9.0).abs() < 1e-12);
        assert!((clipped[0] - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(coefficients(&claims, RobustMode::TrimmedMean { trim: 0.1 }), None);
        assert_eq!(coefficients(&[], RobustMode::Mean), None);
    }
}
