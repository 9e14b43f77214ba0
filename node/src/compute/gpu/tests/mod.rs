//! GPU backend tests: every shader validated by naga (no adapter needed),
//! every kernel against the CPU oracle, training against the CPU backend,
//! determinism and host↔device traffic. GPU tests get their adapter from
//! `testing::gpu_or_skip` (fail under MURMUR_REQUIRE_GPU=1, skip otherwise).
//! Shapes are tiny: CI runs them on lavapipe at about 1 GFLOP/s.

mod kernels;
mod shaders;
mod training;

use crate::compute::gpu::{GpuBackend, GpuTensor, GpuTokens};
use crate::compute::Backend;

/// Deterministic pseudo-random values in [-scale, scale).
pub(super) fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

pub(super) fn ids(n: usize, seed: u64, vocab: usize) -> Vec<u32> {
    values(n, seed, 1.0)
        .iter()
        .map(|x| (((x + 1.0) * 0.5 * vocab as f32) as usize).min(vocab - 1) as u32)
        .collect()
}

pub(super) fn up(g: &GpuBackend, x: &[f32]) -> GpuTensor {
    let mut t = g.tensor(x.len());
    g.upload(&mut t, x);
    t
}

pub(super) fn up_tokens(g: &GpuBackend, x: &[u32]) -> GpuTokens {
    let mut t = g.tokens(x.len());
    g.upload_tokens(&mut t, x);
    t
}

/// |got − want| ≤ atol + rtol·|want| elementwise (NaN never passes).
#[track_caller]
pub(super) fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        let ok = err <= atol + rtol * w.abs();
        assert!(ok, "{what}[{i}]: gpu {g} vs cpu {w} (|diff| {err:e} > {atol:e} + {rtol:e}·|cpu|)");
    }
}
