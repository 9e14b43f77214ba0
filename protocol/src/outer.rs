//! The outer optimizer step: from θ_r, momentum m_r and the aggregated
//! pseudo-gradient Δ (= θ_r − θ_local, averaged), compute S_{r+1}.
//!
//! Nesterov (DiLoCo; lr η, momentum μ):
//!   m_{r+1} = μ·m_r + Δ
//!   θ_{r+1} = θ_r − η·(Δ + μ·m_{r+1})
//! Average: θ_{r+1} = θ_r − Δ, no momentum.
//!
//! Each element is computed in f64 from the f32 inputs and rounded once to
//! f32 (m_{r+1} is rounded before it enters θ's update); no fused multiply-add.

use crate::spec::OuterOptimizer;
use crate::state::TrainingState;
use thiserror::Error;

/// The state and delta do not fit the optimizer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OuterError {
    #[error("delta has {found} elements, the state has {expected}")]
    WrongShape { expected: usize, found: usize },
    #[error("momentum buffer missing, or present for an optimizer without one, or of the wrong length")]
    Momentum,
}

/// The genesis momentum for `opt`: zeros of length `n` when it keeps momentum.
pub fn initial_momentum(opt: OuterOptimizer, n: usize) -> Option<Vec<f32>> {
    opt.has_momentum().then(|| vec![0.0; n])
}

/// Apply one outer step in place: S_r → S_{r+1} (the round increments).
pub fn outer_step(opt: OuterOptimizer, state: &mut TrainingState, delta: &[f32]) -> Result<(), OuterError> {
    let n = state.params.len();
    if delta.len() != n {
        return Err(OuterError::WrongShape { expected: n, found: delta.len() });
    }
    match (opt, state.momentum.as_mut()) {
        (OuterOptimizer::Average, None) => {
            for (p, &d) in state.params.iter_mut().zip(delta) {
                *p = (f64::from(*p) - f64::from(d)) as f32;
            }
        }
        (OuterOptimizer::Nesterov { lr, momentum }, Some(m)) if m.len() == n => {
            let (lr, mu) = (f64::from(lr), f64::from(momentum));
            for ((p, mi), &d) in state.params.iter_mut().zip(m.iter_mut()).zip(delta) {
                let d = f64::from(d);
                let m_next = (mu * f64::from(*mi) + d) as f32;
                *mi = m_next;
                *p = (f64::from(*p) - lr * (d + mu * f64::from(m_next))) as f32;
            }
        }
        _ => return Err(OuterError::Momentum),
    }
    state.round = state.round.saturating_add(1);
    Ok(())
}

/// The eager local state (Kale et al.): the canonical S_r stepped, on a copy
/// of its momentum, with a node's own fresh round-r delta standing in for
/// round r's aggregate (which the network is still exchanging). Not the
/// overlap rule of docs/protocol.md §6.3 (`lookahead_params` is); `murmur
/// sim --ahead-from eager` compares against it.
pub fn eager_state(
    opt: OuterOptimizer,
    state: &TrainingState,
    own: &[f32],
) -> Result<TrainingState, OuterError> {
    let mut local = state.clone();
    outer_step(opt, &mut local, own)?;
    Ok(local)
}

/// Where an overlapped run trains round r + 1 from until S_{r+1} lands
/// (docs/protocol.md §6.3): the parameters of S_r carried one outer step by
/// its momentum alone, i.e. stepped with a zero delta (for Nesterov,
/// θ_r − η·μ²·m_r; for Average, θ_r). S_{r+1} differs from it only by
/// round r's own aggregate term, −η·(1 + μ)·Δ̄_r, the same for every node.
pub fn lookahead_params(opt: OuterOptimizer, state: &TrainingState) -> Result<Vec<f32>, OuterError> {
    let zeros = vec![0.0; state.params.len()];
    Ok(eager_state(opt, state, &zeros)?.params)
}

/// How much of the progress an overlapped node trained from the lookahead
/// it keeps when S_{r+1} lands (docs/protocol.md §6.3): half. Those steps'
/// gradients were taken at the lookahead, a round's outer step behind
/// S_{r+1}, and largely repeat what round r's aggregate already applied;
/// keeping them whole over-counts them (simulation: docs/benchmarks.md,
/// "Pacing").
pub const LANDING_KEEP: f32 = 0.5;

/// Land S_{r+1}'s parameters `landed` in running training that started at
/// `start` and stands at `local`: local ← landed + keep · (local − start).
pub fn land(local: &mut [f32], landed: &[f32], start: &[f32], keep: f32) {
    for ((p, s), f) in local.iter_mut().zip(landed).zip(start) {
        *p = s + keep * (*p - f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::RunId;

    fn state(opt: OuterOptimizer, params: Vec<f32>) -> TrainingState {
        let n = params.len();
        TrainingState { run: RunId([0; 32]), round: 0, params, momentum: initial_momentum(opt, n) }
    }

    #[test]
    fn landing_keeps_the_given_share_of_the_progress() {
        let mut local = vec![3.0f32, -1.0];
        land(&mut local, &[10.0, 20.0], &[1.0, 1.0], LANDING_KEEP);
        // progress (2, −2), half of it on the landed state.
        assert_eq!(local, vec![11.0, 19.0]);
        let mut whole = vec![3.0f32, -1.0];
        land(&mut whole, &[10.0, 20.0], &[1.0, 1.0], 1.0);
        assert_eq!(whole, vec![12.0, 18.0]);
    }

    #[test]
    fn average_subtracts_the_delta() {
        let mut s = state(OuterOptimizer::Average, vec![1.0, 2.0]);
        outer_step(OuterOptimizer::Average, &mut s, &[0.5, -1.0]).expect("fits");
        assert_eq!(s.params, vec![0.5, 3.0]);
        assert_eq!(s.round, 1);
        assert_eq!(s.momentum, None);
    }

    #[test]
    fn nesterov_follows_the_formula() {
        let opt = OuterOptimizer::DILOCO;
        let mut s = state(opt, vec![1.0]);
        outer_step(opt, &mut s, &[0.1]).expect("fits");
        // m1 = 0.1; θ1 = 1 − 0.7·(0.1 + 0.9·0.1) = 0.867
        assert_eq!(s.momentum.as_deref(), Some(&[0.1f32][..]));
        assert!((s.params[0] - 0.867).abs() < 1e-6);
        outer_step(opt, &mut s, &[0.1]).expect("fits");
        // m2 = 0.19; θ2 = 0.867 − 0.7·(0.1 + 0.171) = 0.6773
        assert!((s.momentum.as_deref().unwrap_or(&[0.0])[0] - 0.19).abs() < 1e-6);
        assert!((s.params[0] - 0.6773).abs() < 1e-5);
    }

    #[test]
    fn mismatches_are_errors() {
        let opt = OuterOptimizer::DILOCO;
        let mut s = state(opt, vec![1.0, 2.0]);
        assert_eq!(outer_step(opt, &mut s, &[0.0]), Err(OuterError::WrongShape { expected: 2, found: 1 }));
        assert_eq!(outer_step(OuterOptimizer::Average, &mut s, &[0.0, 0.0]), Err(OuterError::Momentum));
        s.momentum = Some(vec![0.0]);
        assert_eq!(outer_step(opt, &mut s, &[0.0, 0.0]), Err(OuterError::Momentum));
        assert_eq!(s.round, 0);
    }

    #[test]
    fn the_eager_state_steps_a_copy_with_the_own_delta() {
        let opt = OuterOptimizer::DILOCO;
        let s = state(opt, vec![1.0, 1.0]);
        let e = eager_state(opt, &s, &[0.5, -0.5]).expect("fits");
        let mut stepped = s.clone();
        outer_step(opt, &mut stepped, &[0.5, -0.5]).expect("fits");
        assert_eq!((e.params.clone(), e.momentum.clone(), e.round), (stepped.params, stepped.momentum, 1));
        // The state itself is not touched; shapes must agree.
        assert_eq!((s.params.clone(), s.round), (vec![1.0, 1.0], 0));
        assert!(matches!(eager_state(opt, &s, &[0.4]), Err(OuterError::WrongShape { .. })));
    }

    #[test]
    fn the_lookahead_is_the_momentum_step_alone() {
        let opt = OuterOptimizer::DILOCO;
        let mut s = state(opt, vec![1.0]);
        s.momentum = Some(vec![0.1]);
        // θ − η·μ²·m = 1 − 0.7·0.81·0.1 = 0.9433
        let l = lookahead_params(opt, &s).expect("fits");
        assert!((l[0] - 0.9433).abs() < 1e-6, "{l:?}");
        // S_{r+1} is the lookahead plus the delta's own term −η(1 + μ)Δ.
        let mut next = s.clone();
        outer_step(opt, &mut next, &[0.2]).expect("fits");
        assert!((next.params[0] - (l[0] - 0.7 * 1.9 * 0.2)).abs() < 1e-6);
        let avg = state(OuterOptimizer::Average, vec![1.0, 2.0]);
        assert_eq!(lookahead_params(OuterOptimizer::Average, &avg).expect("fits"), vec![1.0, 2.0]);
        assert_eq!(s.momentum.as_deref(), Some(&[0.1f32][..]), "the state itself is not touched");
    }
}
