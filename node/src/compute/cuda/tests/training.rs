//! Whole training steps on the CUDA backend: the tiny preset tracks the CPU
//! backend's losses, reruns are bit-identical, a small Llama's loss and
//! gradients track the CPU's (shared body in
//! `compute::oracle`), and a step moves only tokens up and the stats down.

use crate::compute::cuda::testing::cuda_or_skip;
use crate::compute::oracle::{training_tracks_cpu_and_reruns_bit_identically, transfer_model, transfer_step};

#[test]
fn twenty_tiny_steps_track_the_cpu_and_rerun_bit_identically() {
    let Some(g) = cuda_or_skip("cuda twenty_tiny_steps_track_the_cpu_and_rerun_bit_identically") else {
        return;
    };
    training_tracks_cpu_and_reruns_bit_identically(&g);
}

#[test]
fn a_small_llama_matches_the_cpu() {
    let Some(g) = cuda_or_skip("cuda a_small_llama_matches_the_cpu") else { return };
    crate::compute::oracle::llama::llama_model_matches_cpu(&g);
}

#[test]
fn a_training_step_moves_only_tokens_up_and_stats_down() {
    let Some(g) = cuda_or_skip("cuda a_training_step_moves_only_tokens_up_and_stats_down") else { return };
    let mut model = transfer_model(&g);
    transfer_step(&g, &mut model, 1); // allocates activations
    g.reset_transfer_stats();
    let loss = transfer_step(&g, &mut model, 2);
    let t = g.transfer_stats();
    assert!(loss.is_finite());
    assert_eq!(t.tensor_uploads, 0, "{t:?}");
    assert_eq!(t.token_uploads, 2, "inputs and targets go up: {t:?}");
    assert_eq!(t.downloads, 1, "only the stats come down: {t:?}");
    assert!(t.bytes_down <= 64, "{t:?}");
}

#[test]
fn the_memory_check_reads_the_devices_free_memory() {
    let Some(g) = cuda_or_skip("cuda the_memory_check_reads_the_devices_free_memory") else { return };
    use crate::compute::Backend;
    let free = g.memory_available().expect("cuMemGetInfo answers");
    assert!(free > 0 && free <= g.memory_bytes as u64, "{free} of {}", g.memory_bytes);
    let llama = crate::model::ModelConfig::preset("llama-1b").expect("a preset");
    let err =
        crate::model::check_fits(&g, &llama, (512, 2048), false).expect_err("512 × 2048 tokens of llama-1b");
    assert!(err.contains("is free") && err.contains("what fits"), "{err}");
}
