//! Between the model's per-tensor parameters (canonical order) and the one
//! flat f32 vector the protocol's states and deltas are made of.

use crate::model::ParamSpec;

/// Concatenate tensors in canonical order.
pub(super) fn flatten(tensors: &[Vec<f32>]) -> Vec<f32> {
    let mut flat = Vec::with_capacity(tensors.iter().map(Vec::len).sum());
    for t in tensors {
        flat.extend_from_slice(t);
    }
    flat
}

/// Cut a flat vector back into tensors of the specs' sizes. A short input
/// leaves the missing tail at zero (callers pass vectors of the model's size).
pub(super) fn split(flat: &[f32], specs: &[ParamSpec]) -> Vec<Vec<f32>> {
    let mut at = 0;
    specs
        .iter()
        .map(|s| {
            let n = s.numel();
            let mut t = vec![0f32; n];
            let end = (at + n).min(flat.len());
            let have = end.saturating_sub(at);
            t[..have].copy_from_slice(&flat[at.min(end)..end]);
            at += n;
            t
        })
        .collect()
}

/// Δ = θ_r − θ_local, element by element.
pub(super) fn pseudo_gradient(base: &[f32], local: &[f32]) -> Vec<f32> {
    base.iter().zip(local).map(|(b, l)| b - l).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{init_params, param_specs, ModelConfig};

    #[test]
    fn split_inverts_flatten_on_a_model() {
        let cfg = ModelConfig::new(1, 16, 2, 64, 8).expect("valid shape");
        let tensors = init_params(&cfg, 3);
        let flat = flatten(&tensors);
        assert_eq!(flat.len(), cfg.param_count());
        assert_eq!(split(&flat, &param_specs(&cfg)), tensors);
    }

    #[test]
    fn short_input_is_zero_padded_not_a_panic() {
        let cfg = ModelConfig::new(1, 16, 2, 64, 8).expect("valid shape");
        let specs = param_specs(&cfg);
        let out = split(&[1.0, 2.0], &specs);
        assert_eq!(out[0][..3], [1.0, 2.0, 0.0]);
        assert!(out[1..].iter().all(|t| t.iter().all(|&v| v == 0.0)));
    }

    #[test]
    fn pseudo_gradient_is_base_minus_local() {
        assert_eq!(pseudo_gradient(&[1.0, 2.0], &[0.5, 3.0]), vec![0.5, -1.0]);
    }
}
