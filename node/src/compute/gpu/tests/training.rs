//! Whole training steps on the GPU: the tiny preset tracks the CPU backend's
//! losses, reruns are bit-identical (shared body in `compute::oracle`), and a
//! step moves only tokens up and the stats down; f16 products keep small
//! gradients (the loss scale). A small Llama's loss and gradients track
//! the CPU's.

use crate::compute::gpu::testing::{fresh_gpu_or_skip, gpu_or_skip};
use crate::compute::gpu::{GpuOptions, GpuPrecision};
use crate::compute::oracle::{
    gradient_errors_at_2048_tokens, training_tracks_cpu_and_reruns_bit_identically, transfer_model,
    transfer_step,
};
use crate::compute::Backend;

#[test]
fn twenty_tiny_steps_track_the_cpu_and_rerun_bit_identically() {
    let Some(g) = gpu_or_skip("twenty_tiny_steps_track_the_cpu_and_rerun_bit_identically") else { return };
    training_tracks_cpu_and_reruns_bit_identically(g);
}

#[test]
fn a_training_step_moves_only_tokens_up_and_stats_down() {
    let Some(g) =
        fresh_gpu_or_skip("a_training_step_moves_only_tokens_up_and_stats_down", GpuOptions::default())
    else {
        return;
    };
    let mut model = transfer_model(&g);
    transfer_step(&g, &mut model, 1); // allocates activations
    g.reset_transfer_stats();
    let loss = transfer_step(&g, &mut model, 2);
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

#[test]
fn f16_products_keep_small_gradients_through_the_loss_scale() {
    let opts = GpuOptions { precision: GpuPrecision::F16, ..Default::default() };
    let Some(g) = fresh_gpu_or_skip("f16_products_keep_small_gradients_through_the_loss_scale", opts) else {
        return;
    };
    assert_eq!(g.loss_scale(2048), 2048.0);
    let errors = gradient_errors_at_2048_tokens(&g);
    // f16 inputs (11-bit significands) against fp32, on lavapipe: at most
    // 8.4e-4 per tensor with the loss scale, up to 4.9e-3 without it (the
    // logit gradients' subnormals).
    let worst = errors.iter().cloned().fold(0.0f32, f32::max);
    assert!(worst < 2e-3, "relative gradient errors per tensor: {errors:?}");
}

#[test]
fn a_small_llama_matches_the_cpu() {
    let Some(g) = gpu_or_skip("a_small_llama_matches_the_cpu") else { return };
    crate::compute::oracle::llama::llama_model_matches_cpu(g);
}
