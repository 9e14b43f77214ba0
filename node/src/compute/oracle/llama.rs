//! The Llama architecture's oracle tests' bodies: RMSNorm, RoPE and SwiGLU
//! forward and backward against the CPU backend, and a small Llama's loss
//! and every gradient (grouped-query attention, untied head).

use super::{assert_close, ids, up, values, CPU};
use crate::compute::{AttentionShape, Backend};
use crate::model::params::init_params;
use crate::model::{gpt::Gpt, LlamaShape, ModelConfig};

/// RMSNorm on rows narrower and wider than a workgroup, backward onto
/// non-zero gradients.
pub fn rmsnorm_case<B: Backend>(g: &B) {
    for (n, c, seed) in [(7, 37, 1), (3, 300, 2), (1, 1, 3)] {
        let (x, w, d) = (values(n * c, seed, 2.0), values(c, seed + 10, 1.5), values(n * c, seed + 20, 1.0));
        let (mut out, mut rstd) = (vec![0.0; n * c], vec![0.0; n]);
        CPU.rmsnorm_forward(&mut out, &mut rstd, &x, &w, n, c);
        let (mut go, mut gr) = (g.tensor(n * c), g.tensor(n));
        let (gx, gw) = (up(g, &x), up(g, &w));
        g.rmsnorm_forward(&mut go, &mut gr, &gx, &gw, n, c);
        // rmsnorm: atol 1e-5, rtol 1e-4
        assert_close(&format!("rmsnorm out n{n} c{c}"), &g.download(&go), &out, 1e-5, 1e-4);
        assert_close(&format!("rmsnorm rstd n{n} c{c}"), &g.download(&gr), &rstd, 1e-5, 1e-4);
        let (mut dx, mut dw) = (values(n * c, seed + 30, 0.1), values(c, seed + 40, 0.1));
        let (mut gdx, mut gdw) = (up(g, &dx), up(g, &dw));
        CPU.rmsnorm_backward(&mut dx, &mut dw, &d, &x, &w, &rstd, n, c);
        g.rmsnorm_backward(&mut gdx, &mut gdw, &up(g, &d), &gx, &gw, &gr, n, c);
        assert_close(&format!("rmsnorm dinp n{n} c{c}"), &g.download(&gdx), &dx, 1e-5, 1e-4);
        assert_close(&format!("rmsnorm dweight n{n} c{c}"), &g.download(&gdw), &dw, 1e-5, 1e-4);
    }
}

/// RoPE forward and its inverse on multi-head and grouped-query layouts.
pub fn rope_case<B: Backend>(g: &B) {
    let shapes = [AttentionShape::mha(2, 7, 16, 2), AttentionShape { b: 2, t: 33, c: 64, nh: 4, nkv: 2 }];
    for (k, s) in shapes.into_iter().enumerate() {
        let len = s.b * s.t * s.qkv_width();
        for (inverse, seed) in [(false, 60 + k as u64), (true, 70 + k as u64)] {
            let mut want = values(len, seed, 2.0);
            let mut got = up(g, &want);
            match inverse {
                false => {
                    CPU.rope_forward(&mut want, s, 10_000.0);
                    g.rope_forward(&mut got, s, 10_000.0);
                }
                true => {
                    CPU.rope_backward(&mut want, s, 10_000.0);
                    g.rope_backward(&mut got, s, 10_000.0);
                }
            }
            // rope: atol 1e-5, rtol 1e-4 (wgpu computes its angles in f32)
            assert_close(&format!("rope {s:?} inverse {inverse}"), &g.download(&got), &want, 1e-5, 1e-4);
        }
    }
}

/// SwiGLU forward and backward, saturated gates included.
pub fn swiglu_case<B: Backend>(g: &B) {
    let (n, h) = (5, 300);
    let mut inp = values(n * 2 * h, 80, 4.0);
    (inp[0], inp[1]) = (40.0, -40.0);
    let d = values(n * h, 81, 1.0);
    let mut out = vec![0.0; n * h];
    CPU.swiglu_forward(&mut out, &inp, n, h);
    let gi = up(g, &inp);
    let mut go = g.tensor(n * h);
    g.swiglu_forward(&mut go, &gi, n, h);
    // swiglu: atol 1e-5, rtol 1e-4
    assert_close("swiglu out", &g.download(&go), &out, 1e-5, 1e-4);
    let mut dinp = vec![f32::NAN; n * 2 * h];
    CPU.swiglu_backward_fresh(&mut dinp, &inp, &d, n, h);
    let mut gd = up(g, &values(n * 2 * h, 82, 1.0));
    g.swiglu_backward_fresh(&mut gd, &gi, &up(g, &d), n, h);
    assert_close("swiglu dinp", &g.download(&gd), &dinp, 1e-5, 1e-4);
}

/// A small Llama (grouped-query attention, untied LM head, odd vocabulary)
/// on `g` against the CPU: the loss within 1e-4 (relative) and each
/// parameter gradient within 1e-3 (‖g − cpu‖ / ‖cpu‖ per tensor).
pub fn llama_model_matches_cpu<B: Backend>(g: &B) {
    let shape = LlamaShape { n_kv_head: 2, ffn_hidden: 40, tied_embeddings: false, rope_theta: 10_000 };
    let cfg = ModelConfig::llama(2, 32, 4, 37, 16, shape).expect("shape");
    let (b, t) = (2, 13);
    let (x, y) = (ids(b * t, 90, cfg.vocab_size), ids(b * t, 91, cfg.vocab_size));
    let cpu = {
        let cpu = &*CPU;
        let mut m = Gpt::new(cpu, cfg.clone(), &init_params(&cfg, 5), 1);
        m.zero_grad(cpu);
        m.forward(cpu, &x, Some(&y), b, t);
        m.backward(cpu, 1);
        (m.read_stats(cpu).mean_loss(), m.download_grads(cpu))
    };
    let mut m = Gpt::new(g, cfg.clone(), &init_params(&cfg, 5), 1);
    m.zero_grad(g);
    m.forward(g, &x, Some(&y), b, t);
    m.backward(g, 1);
    let (loss, grads) = (m.read_stats(g).mean_loss(), m.download_grads(g));
    assert!(((loss - cpu.0) / cpu.0).abs() <= 1e-4, "loss {loss} vs cpu {}", cpu.0);
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    for ((c, d), spec) in cpu.1.iter().zip(&grads).zip(m.specs()) {
        let diff: Vec<f32> = c.iter().zip(d).map(|(a, b)| a - b).collect();
        let rel = norm(&diff) / norm(c).max(1e-30);
        assert!(rel <= 1e-3, "{}: relative gradient error {rel:e}", spec.name);
    }
}
