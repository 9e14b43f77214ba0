//! Whole training steps on the GPU: the tiny preset tracks the CPU backend's
//! losses, reruns are bit-identical, and a step moves only tokens up and the
//! stats down.

use crate::compute::cpu::CpuBackend;
use crate::compute::gpu::testing::{fresh_gpu_or_skip, gpu_or_skip};
use crate::compute::gpu::GpuOptions;
use crate::compute::{AdamWStep, Backend};
use crate::model::params::init_params;
use crate::model::{gpt::Gpt, ModelConfig};

use super::ids;

/// The tiny preset (4 layers, 128 channels, 4 heads, vocab 256, ctx 64) at
/// batch 2, sequence 32: small enough for lavapipe.
const B: usize = 2;
const T: usize = 32;
const STEPS: usize = 20;

fn hp(step: usize) -> AdamWStep {
    AdamWStep { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step: step as u32 }
}

/// Losses per step and the final parameters' bits.
fn train<Bk: Backend>(be: &Bk, steps: usize) -> (Vec<f32>, Vec<u32>) {
    let cfg = ModelConfig::preset("tiny").expect("tiny preset");
    let mut model = Gpt::new(be, cfg.clone(), &init_params(&cfg, 42), 1);
    let mut losses = Vec::new();
    for step in 1..=steps {
        let x = ids(B * T, 1000 + step as u64, cfg.vocab_size);
        // a learnable next token, so the loss has somewhere to go
        let y: Vec<u32> = x.iter().map(|t| (t * 7 + 3) % cfg.vocab_size as u32).collect();
        model.zero_grad(be);
        model.forward(be, &x, Some(&y), B, T);
        model.backward(be, 1);
        model.optimizer_step(be, hp(step), 1.0);
        losses.push(model.read_stats(be).mean_loss());
    }
    let bits = model.download_params(be).iter().flatten().map(|x| x.to_bits()).collect();
    (losses, bits)
}

#[test]
fn twenty_tiny_steps_track_the_cpu_and_rerun_bit_identically() {
    let Some(g) = gpu_or_skip("twenty_tiny_steps_track_the_cpu_and_rerun_bit_identically") else { return };
    let (cpu, _) = train(&CpuBackend::new(), STEPS);
    let (gpu, bits1) = train(g, STEPS);
    for (step, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
        let rel = ((g - c) / c).abs();
        assert!(rel <= 1e-3, "step {}: gpu loss {g} vs cpu {c} (relative {rel:e} > 1e-3)", step + 1);
    }
    assert!(cpu.last() < cpu.first(), "training should reduce the loss: {cpu:?}");
    let (gpu2, bits2) = train(g, STEPS);
    assert_eq!(
        gpu.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        gpu2.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        "losses differ between two runs"
    );
    assert!(bits1 == bits2, "parameters differ between two runs");
}

#[test]
fn a_training_step_moves_only_tokens_up_and_stats_down() {
    let Some(g) =
        fresh_gpu_or_skip("a_training_step_moves_only_tokens_up_and_stats_down", GpuOptions::default())
    else {
        return;
    };
    let cfg = ModelConfig::new(2, 32, 2, 37, 16).expect("shape");
    let mut model = Gpt::new(&g, cfg.clone(), &init_params(&cfg, 7), 1);
    let step = |model: &mut Gpt<_>, s: usize| {
        let (x, y) = (ids(2 * 16, s as u64, 37), ids(2 * 16, 50 + s as u64, 37));
        model.zero_grad(&g);
        model.forward(&g, &x, Some(&y), 2, 16);
        model.backward(&g, 1);
        model.optimizer_step(&g, hp(s), 1.0);
        model.read_stats(&g).mean_loss()
    };
    step(&mut model, 1); // allocates activations
    g.reset_transfer_stats();
    let loss = step(&mut model, 2);
    let t = g.transfer_stats();
    assert!(loss.is_finite());
    // Kernel arguments (uniform arena writes) and on-device clears are not
    // tensor transfers and are not counted.
    assert_eq!(t.tensor_uploads, 0, "{t:?}");
    assert_eq!(t.token_uploads, 2, "inputs and targets go up: {t:?}");
    assert_eq!(t.downloads, 1, "only the stats come down: {t:?}");
    assert!(t.bytes_down <= 64, "{t:?}");
    assert!(t.submits <= 4, "a step is a few submits: {t:?}");
}
