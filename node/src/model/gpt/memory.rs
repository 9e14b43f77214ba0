//! What a model needs in memory on a backend, counted from the buffers it
//! allocates (the workspaces are built through one function, here with a
//! counter instead of the backend's allocator): parameters with their
//! gradients, AdamW moments and weight images, and the activations of one
//! `(batch, seq)` shape, with or without activation checkpointing; and the
//! check that a shape fits the memory a backend has free, whose error says
//! what would fit.

use super::{llama, matmul_weight_dims, Workspace, STAT_LOSS0};
use crate::compute::{AttentionShape, Backend};
use crate::model::config::{Architecture, ModelConfig};
use crate::model::params::param_specs;

/// Bytes of one tensor element.
const FLOAT_BYTES: u64 = 4;

/// Bytes a model needs on its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryNeed {
    /// Parameters, gradients, AdamW moments and weight images.
    pub model: u64,
    /// Activations and their gradients for the shape.
    pub activations: u64,
}

impl MemoryNeed {
    pub fn total(&self) -> u64 {
        self.model + self.activations
    }

    /// What `backend` needs for `cfg` at batch `b` and sequence `t`.
    pub fn of<B: Backend>(
        backend: &B,
        cfg: &ModelConfig,
        (b, t): (usize, usize),
        checkpointing: bool,
    ) -> Self {
        let specs = param_specs(cfg);
        let mut model: u64 = specs.iter().map(|s| 4 * s.numel() as u64).sum();
        for (i, s) in specs.iter().enumerate() {
            if let Some((oc, c)) = matmul_weight_dims(cfg, i, s) {
                model += backend.weight_image_len(oc, c) as u64;
            }
        }
        model += (specs.len() + STAT_LOSS0 + 1) as u64;
        let mut floats = 0u64;
        let mut count = |n: usize| floats += n as u64;
        match &cfg.arch {
            Architecture::Gpt2 => {
                let att = backend.attention_scratch_len(AttentionShape::mha(b, t, cfg.n_embd, cfg.n_head));
                Workspace::build(&mut count, att, cfg, (b, t));
            }
            Architecture::Llama(shape) => {
                let att = backend.attention_scratch_len(llama::attention_shape(cfg, b, t));
                llama::Workspace::build(&mut count, att, cfg, shape, (b, t), checkpointing);
            }
        }
        // Input and target token ids.
        floats += 2 * (b * t) as u64;
        MemoryNeed { model: model * FLOAT_BYTES, activations: floats * FLOAT_BYTES }
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Check that `cfg` at batch `b` × `t` tokens fits what `backend` has free
/// (nothing to check where the backend cannot tell); the error says what
/// the shape needs and what would fit: checkpointing, a smaller batch, or
/// another device.
pub fn check_fits<B: Backend>(
    backend: &B,
    cfg: &ModelConfig,
    (b, t): (usize, usize),
    checkpointing: bool,
) -> Result<MemoryNeed, String> {
    match backend.memory_available() {
        Some(free) => fits_in(free, backend, cfg, (b, t), checkpointing),
        None => Ok(MemoryNeed::of(backend, cfg, (b, t), checkpointing)),
    }
}

/// `check_fits` with `free` bytes free.
fn fits_in<B: Backend>(
    free: u64,
    backend: &B,
    cfg: &ModelConfig,
    (b, t): (usize, usize),
    checkpointing: bool,
) -> Result<MemoryNeed, String> {
    let need = MemoryNeed::of(backend, cfg, (b, t), checkpointing);
    if need.total() <= free {
        return Ok(need);
    }
    let llama = !cfg.arch.is_gpt2();
    let mut fits = Vec::new();
    for ckpt in if llama { vec![checkpointing, true] } else { vec![false] } {
        if let Some(batch) =
            (1..=b).rev().find(|&batch| MemoryNeed::of(backend, cfg, (batch, t), ckpt).total() <= free)
        {
            let how = match (batch == b, ckpt && !checkpointing) {
                (true, true) => "activation checkpointing (--checkpointing)".to_string(),
                (false, true) => format!("batch {batch} with activation checkpointing (--checkpointing)"),
                (_, false) => format!("batch {batch}"),
            };
            let total = MemoryNeed::of(backend, cfg, (batch, t), ckpt).total();
            fits.push(format!("{how}: {}", gib(total)));
        }
    }
    let what_fits = if fits.is_empty() {
        format!(
            "no batch of {t} tokens fits, since the parameters, gradients, optimizer moments and weight images alone take {}; use a device with more memory (on the CPU, --precision bf16 halves the weight images where the CPU has AVX-512-BF16)",
            gib(need.model)
        )
    } else {
        format!("what fits: {}; or a device with more memory", fits.join("; "))
    };
    Err(format!(
        "{} parameters at batch {b} × {t} tokens need {} on {} ({} for parameters, gradients, optimizer moments and weight images, {} for activations{}) and {} is free; {what_fits}",
        cfg.param_count(),
        gib(need.total()),
        backend.describe(),
        gib(need.model),
        gib(need.activations),
        if checkpointing { ", checkpointed" } else { "" },
        gib(free),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::cpu::CpuBackend;

    #[test]
    fn checkpointing_keeps_one_blocks_activations() {
        let be = CpuBackend::new();
        let cfg = ModelConfig::preset("llama-1b").unwrap();
        let full = MemoryNeed::of(&be, &cfg, (1, 2048), false);
        let kept = MemoryNeed::of(&be, &cfg, (1, 2048), true);
        assert_eq!(full.model, kept.model);
        // Parameters, gradients and two moments: 16 bytes a parameter at least.
        assert!(full.model >= 16 * cfg.param_count() as u64, "{full:?}");
        // The logits (three B·T × V buffers) and one block stay.
        assert!(kept.activations * 3 < full.activations, "{kept:?} vs {full:?}");
        // Linear in the batch (every buffer is per token, or per sequence for attention).
        let two = MemoryNeed::of(&be, &cfg, (2, 2048), false);
        assert!(two.activations > full.activations * 19 / 10, "{two:?} vs {full:?}");
        let gpt2 = ModelConfig::preset("tiny").unwrap();
        assert_eq!(MemoryNeed::of(&be, &gpt2, (4, 64), true), MemoryNeed::of(&be, &gpt2, (4, 64), false));
    }

    #[test]
    fn a_shape_that_does_not_fit_is_refused_with_what_would() {
        let be = CpuBackend::new();
        let cfg = ModelConfig::preset("llama-400m").unwrap();
        let need = MemoryNeed::of(&be, &cfg, (8, 1024), false);
        assert_eq!(fits_in(need.total(), &be, &cfg, (8, 1024), false), Ok(need));
        // Room for the model and a checkpointed batch of 8, not for every block's activations.
        let checkpointed = MemoryNeed::of(&be, &cfg, (8, 1024), true);
        let err = fits_in(checkpointed.total(), &be, &cfg, (8, 1024), false).unwrap_err();
        assert!(err.contains("what fits: batch "), "{err}");
        assert!(err.contains("; activation checkpointing (--checkpointing): "), "{err}");
        assert!(err.contains(&cfg.param_count().to_string()), "{err}");
        // Room for less than the parameters and their optimizer state.
        let err = fits_in(need.model / 2, &be, &cfg, (8, 1024), true).unwrap_err();
        assert!(err.contains("no batch of 1024 tokens fits"), "{err}");
        assert!(err.contains("a device with more memory"), "{err}");
        // GPT-2 has no checkpointing to offer.
        let gpt2 = ModelConfig::preset("gpt2-124m").unwrap();
        let one = MemoryNeed::of(&be, &gpt2, (1, 1024), false);
        let err = fits_in(one.total(), &be, &gpt2, (8, 1024), false).unwrap_err();
        assert!(err.contains("what fits: batch 1: ") && !err.contains("checkpointing"), "{err}");
    }
}
