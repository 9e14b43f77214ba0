//! Every kernel, forward and backward, on the CUDA backend against the CPU
//! backend (the shared bodies in `compute::oracle`), plus the cuBLAS layouts
//! `bench kernels` times.

use crate::compute::cpu::CpuBackend;
use crate::compute::cuda::testing::cuda_or_skip;
use crate::compute::kernel_bench::TimedBackend;
use crate::compute::oracle::*;
use crate::compute::{AttentionShape, Backend, EncoderShape, MatmulLayout, MatmulShape};

#[test]
fn encoder_matches_cpu() {
    let Some(g) = cuda_or_skip("cuda encoder_matches_cpu") else { return };
    encoder_case(&g, EncoderShape { b: 3, t: 5, c: 37 }, 37, 128, 1);
    encoder_case(&g, EncoderShape { b: 2, t: 1, c: 16 }, 37, 128, 2);
}

#[test]
fn layernorm_matches_cpu() {
    let Some(g) = cuda_or_skip("cuda layernorm_matches_cpu") else { return };
    layernorm_case(&g, 7, 37, 10);
    layernorm_case(&g, 1, 300, 11); // one row wider than the block
    layernorm_case(&g, 70, 45, 12); // more rows than the parameter sums' 32 lanes, a part column block
}

#[test]
fn matmul_matches_cpu() {
    let Some(g) = cuda_or_skip("cuda matmul_matches_cpu") else { return };
    for (i, s) in MATMUL_SHAPES.iter().enumerate() {
        matmul_case(&g, "cuBLAS", *s, i % 2 == 0, 20 + i as u64);
    }
}

#[test]
fn matmul_layouts_are_exposed_for_benchmarks() {
    let Some(g) = cuda_or_skip("cuda matmul_layouts_are_exposed_for_benchmarks") else { return };
    let s = MatmulShape { n: 3, c: 4, oc: 5 };
    let (x, y) = (up(&g, &values(3 * 5, 40, 1.0)), up(&g, &values(3 * 4, 41, 1.0)));
    let mut out = g.tensor(5 * 4);
    g.matmul_in(MatmulLayout::Tn, &mut out, &x, &y, s);
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
    let Some(g) = cuda_or_skip("cuda attention_matches_cpu") else { return };
    attention_case(&g, AttentionShape::mha(2, 5, 12, 3), 50);
    attention_case(&g, AttentionShape::mha(3, 1, 8, 2), 51);
    attention_case(&g, AttentionShape::mha(1, 300, 8, 2), 52); // rows wider than a block
    attention_case(&g, AttentionShape::mha(2, 45, 140, 2), 53); // part tiles, a 70-channel head
    attention_case(&g, AttentionShape { b: 2, t: 9, c: 16, nh: 4, nkv: 2 }, 54); // grouped-query
                                                                                 // one key/value head, part tiles
    attention_case(&g, AttentionShape { b: 1, t: 37, c: 12, nh: 3, nkv: 1 }, 55);
    attention_case(&g, AttentionShape::mha(1, 100, 128, 2), 56); // 64-channel heads: tiles of 32 and 16 rows
    attention_case(&g, AttentionShape { b: 2, t: 70, c: 256, nh: 4, nkv: 2 }, 57);
    // grouped, several tiles
}

#[test]
fn llama_ops_match_cpu() {
    let Some(g) = cuda_or_skip("cuda llama_ops_match_cpu") else { return };
    crate::compute::oracle::llama::rmsnorm_case(&g);
    crate::compute::oracle::llama::rope_case(&g);
    crate::compute::oracle::llama::swiglu_case(&g);
}

#[test]
fn gelu_matches_cpu_including_saturated_inputs() {
    let Some(g) = cuda_or_skip("cuda gelu_matches_cpu_including_saturated_inputs") else { return };
    gelu_case(&g);
}

#[test]
fn residual_matches_cpu_exactly() {
    let Some(g) = cuda_or_skip("cuda residual_matches_cpu_exactly") else { return };
    residual_case(&g);
}

#[test]
fn softmax_xent_matches_cpu_on_odd_vocabularies_and_large_logits() {
    let Some(g) = cuda_or_skip("cuda softmax_xent_matches_cpu_on_odd_vocabularies_and_large_logits") else {
        return;
    };
    softmax_cases(&g);
}

#[test]
fn reductions_and_clipping_match_cpu() {
    let Some(g) = cuda_or_skip("cuda reductions_and_clipping_match_cpu") else { return };
    reductions_case(&g);
}

#[test]
fn adamw_matches_cpu() {
    let Some(g) = cuda_or_skip("cuda adamw_matches_cpu") else { return };
    adamw_case(&g, 1037);
}
