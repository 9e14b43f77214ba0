//! Every kernel, forward and backward, on the GPU against the CPU backend
//! (the shared bodies in `compute::oracle`), plus what only the wgpu backend
//! has: every matmul tile configuration, and the windowed paths a small
//! storage-binding limit forces.

use crate::compute::cpu::CpuBackend;
use crate::compute::gpu::testing::{coop_or_skip, fresh_gpu_or_skip, gpu_or_skip};
use crate::compute::gpu::{GpuBackend, GpuOptions, GpuPrecision, MatmulLayout, TileConfig};
use crate::compute::oracle::*;
use crate::compute::{AttentionShape, Backend, EncoderShape, LogitsShape, MatmulShape};

/// A backend that pretends bindings hold at most 4 KiB, so every tensor
/// above ~1000 floats takes the windowed (split) paths.
fn windowed(test: &str) -> Option<GpuBackend> {
    fresh_gpu_or_skip(test, GpuOptions { max_binding_bytes: Some(4096), ..Default::default() })
}

#[test]
fn encoder_matches_cpu() {
    let Some(g) = gpu_or_skip("encoder_matches_cpu") else { return };
    encoder_case(g, EncoderShape { b: 3, t: 5, c: 37 }, 37, 128, 1);
    encoder_case(g, EncoderShape { b: 2, t: 1, c: 16 }, 37, 128, 2);
    let Some(w) = windowed("encoder_matches_cpu (windowed)") else { return };
    encoder_case(&w, EncoderShape { b: 3, t: 7, c: 37 }, 37, 128, 3);
}

#[test]
fn layernorm_matches_cpu() {
    let Some(g) = gpu_or_skip("layernorm_matches_cpu") else { return };
    layernorm_case(g, 7, 37, 10);
    layernorm_case(g, 1, 130, 11); // one row wider than the workgroup
    layernorm_case(g, 70, 45, 13); // rows beyond the parameter sums' lanes, a part column workgroup
    let Some(w) = windowed("layernorm_matches_cpu (windowed)") else { return };
    layernorm_case(&w, 60, 37, 12);
}

#[test]
fn matmul_matches_cpu_with_every_tile_configuration() {
    for tiles in TileConfig::ALL {
        let opts = GpuOptions { tiles: Some(tiles), ..Default::default() };
        let Some(g) = fresh_gpu_or_skip("matmul_matches_cpu_with_every_tile_configuration", opts) else {
            return;
        };
        let label = format!("tiles {}", tiles.label());
        assert_eq!(g.matmul_tiles(7, 29), tiles, "{label}: forced configuration not used");
        for (i, s) in MATMUL_SHAPES.iter().enumerate() {
            matmul_case(&g, &label, *s, i % 2 == 0, 20 + i as u64);
        }
    }
}

#[test]
fn f16_matmul_in_every_tiled_configuration_multiplies_f16_rounded_inputs() {
    for tiles in TileConfig::ALL {
        let opts = GpuOptions { tiles: Some(tiles), precision: GpuPrecision::F16, ..Default::default() };
        let Some(g) = fresh_gpu_or_skip("f16_matmul_in_every_tiled_configuration", opts) else {
            return;
        };
        let label = format!("tiles {} f16", tiles.label());
        assert!(g.matmul_tiles(7, 29).f16_inputs, "{label}");
        for (i, s) in MATMUL_SHAPES.iter().enumerate() {
            matmul_case_with(&g, &label, *s, i % 2 == 1, 60 + i as u64, round_f16, 1e-4);
        }
    }
}

#[test]
fn matmul_on_cooperative_matrices_matches_cpu_on_f16_rounded_inputs() {
    for tiles in TileConfig::COOP {
        let opts = GpuOptions { tiles: Some(tiles), precision: GpuPrecision::F16, ..Default::default() };
        let Some(g) = coop_or_skip("matmul_on_cooperative_matrices_matches_cpu", opts) else {
            return;
        };
        let label = format!("tiles {}", tiles.label());
        // Tensor cores sum in f32 in their own order: atol, rtol 1e-3.
        for (i, s) in MATMUL_SHAPES.iter().enumerate() {
            matmul_case_with(&g, &label, *s, i % 2 == 0, 70 + i as u64, round_f16, 1e-3);
        }
        // Past one K tile, several blocks each way, and a K split.
        matmul_case_with(&g, &label, MatmulShape { n: 150, c: 100, oc: 270 }, true, 80, round_f16, 1e-3);
        let Some(w) = coop_or_skip(
            "matmul_on_cooperative_matrices_matches_cpu (windowed)",
            GpuOptions { max_binding_bytes: Some(4096), ..opts },
        ) else {
            return;
        };
        matmul_case_with(&w, &label, MatmulShape { n: 70, c: 20, oc: 60 }, false, 81, round_f16, 1e-3);
    }
}

#[test]
fn matmul_split_into_windows_matches_cpu() {
    let Some(w) = windowed("matmul_split_into_windows_matches_cpu") else { return };
    matmul_case(&w, "windowed", MatmulShape { n: 9, c: 37, oc: 131 }, true, 30);
    matmul_case(&w, "windowed", MatmulShape { n: 70, c: 20, oc: 60 }, false, 31);
}

#[test]
fn matmul_layouts_are_exposed_for_benchmarks() {
    let Some(g) = gpu_or_skip("matmul_layouts_are_exposed_for_benchmarks") else { return };
    let s = MatmulShape { n: 3, c: 4, oc: 5 };
    let (x, y) = (up(g, &values(3 * 5, 40, 1.0)), up(g, &values(3 * 4, 41, 1.0)));
    let mut out = g.tensor(5 * 4);
    g.matmul(MatmulLayout::Tn, &mut out, &x, &y, None, s);
    let (mut dw, mut di) = (vec![0.0; 20], vec![0.0; 12]);
    CpuBackend::new().matmul_backward(
        &mut di,
        &mut dw,
        None,
        &g.download(&x),
        &g.download(&y),
        &vec![0.0; 20],
        s,
    );
    assert_close("TN", &g.download(&out), &dw, 1e-5, 1e-5);
}

#[test]
fn attention_matches_cpu() {
    let Some(g) = gpu_or_skip("attention_matches_cpu") else { return };
    attention_case(g, AttentionShape::mha(2, 5, 12, 3), 50);
    attention_case(g, AttentionShape::mha(3, 1, 8, 2), 51);
    attention_case(g, AttentionShape::mha(1, 70, 8, 2), 52); // several tiles of queries and keys
    attention_case(g, AttentionShape { b: 2, t: 9, c: 16, nh: 4, nkv: 2 }, 54); // grouped-query
    attention_case(g, AttentionShape { b: 1, t: 5, c: 12, nh: 3, nkv: 1 }, 55);
    attention_case(g, AttentionShape::mha(2, 45, 140, 2), 57); // part tiles, a 70-channel head
    attention_case(g, AttentionShape::mha(1, 100, 128, 2), 58); // 64-channel heads
    attention_case(g, AttentionShape { b: 1, t: 21, c: 18, nh: 3, nkv: 3 }, 59); // 6 channels, padded to 8
    let Some(w) = windowed("attention_matches_cpu (windowed)") else { return };
    attention_case(&w, AttentionShape::mha(5, 9, 12, 3), 53);
}

#[test]
fn gelu_matches_cpu_including_saturated_inputs() {
    let Some(g) = gpu_or_skip("gelu_matches_cpu_including_saturated_inputs") else { return };
    gelu_case(g);
}

#[test]
fn residual_matches_cpu_exactly() {
    let Some(g) = gpu_or_skip("residual_matches_cpu_exactly") else { return };
    residual_case(g);
}

#[test]
fn softmax_xent_matches_cpu_on_odd_vocabularies_and_large_logits() {
    let Some(g) = gpu_or_skip("softmax_xent_matches_cpu_on_odd_vocabularies_and_large_logits") else {
        return;
    };
    softmax_cases(g);
    let Some(w) = windowed("softmax_xent (windowed)") else { return };
    softmax_case(&w, LogitsShape { n: 11, v: 37, vp: 128 }, &values(11 * 128, 93, 4.0), &ids(11, 94, 37));
}

#[test]
fn reductions_and_clipping_match_cpu() {
    let Some(g) = gpu_or_skip("reductions_and_clipping_match_cpu") else { return };
    reductions_case(g);
    let Some(w) = windowed("reductions (windowed)") else { return };
    let x = values(5000, 105, 1.0);
    let mut stats = vec![0.0; 2];
    CpuBackend::new().sum_squares_into(&mut stats, 1, &x);
    let mut gs = w.tensor(2);
    w.sum_squares_into(&mut gs, 1, &up(&w, &x));
    assert_close("sum_squares windowed", &w.download(&gs), &stats, 1e-4, 1e-5);
}

#[test]
fn adamw_matches_cpu() {
    let Some(g) = gpu_or_skip("adamw_matches_cpu") else { return };
    adamw_case(g, 1037);
    let Some(w) = windowed("adamw (windowed)") else { return };
    adamw_case(&w, 3001);
}

#[test]
fn llama_ops_match_cpu() {
    let Some(g) = gpu_or_skip("llama_ops_match_cpu") else { return };
    crate::compute::oracle::llama::rmsnorm_case(g);
    crate::compute::oracle::llama::rope_case(g);
    crate::compute::oracle::llama::swiglu_case(g);
    let Some(w) = windowed("llama_ops_match_cpu (windowed)") else { return };
    crate::compute::oracle::llama::rmsnorm_case(&w);
    crate::compute::oracle::llama::rope_case(&w);
    crate::compute::oracle::llama::swiglu_case(&w);
    attention_case(&w, AttentionShape { b: 3, t: 9, c: 16, nh: 4, nkv: 2 }, 56);
}
