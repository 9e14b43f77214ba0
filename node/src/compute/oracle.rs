//! The oracle tests' bodies, shared by every device backend (wgpu, CUDA):
//! each kernel forward and backward against the CPU backend with
//! |backend − cpu| ≤ atol + rtol·|cpu| (tolerances stated at each check), and
//! a few training steps of the tiny model. Shapes are not tile multiples;
//! T = 1, odd vocabularies (37 padded to 128, 50257 padded to 50304) and
//! adversarial values (GELU at ±20, logits near 1e3) are included. Backward
//! checks start from non-zero gradients, since every backward op accumulates.
//! Each backend's tests get their device their own way and call these.
//! The Llama architecture's ops and model are in `llama`.

pub mod llama;

use crate::compute::cpu::{attention, CpuBackend};
use crate::compute::{AdamWStep, AttentionShape, Backend, EncoderShape, LogitsShape, MatmulShape};
use crate::model::params::init_params;
use crate::model::{gpt::Gpt, ModelConfig};

/// The CPU backend on the path `MURMUR_CPU_ISA` forces (the widest by default).
static CPU: std::sync::LazyLock<CpuBackend> = std::sync::LazyLock::new(CpuBackend::new);

/// Deterministic pseudo-random values in [-scale, scale).
pub fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
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

pub fn ids(n: usize, seed: u64, vocab: usize) -> Vec<u32> {
    values(n, seed, 1.0)
        .iter()
        .map(|x| (((x + 1.0) * 0.5 * vocab as f32) as usize).min(vocab - 1) as u32)
        .collect()
}

pub fn up<B: Backend>(g: &B, x: &[f32]) -> B::Tensor {
    let mut t = g.tensor(x.len());
    g.upload(&mut t, x);
    t
}

pub fn up_tokens<B: Backend>(g: &B, x: &[u32]) -> B::Tokens {
    let mut t = g.tokens(x.len());
    g.upload_tokens(&mut t, x);
    t
}

/// |got − want| ≤ atol + rtol·|want| elementwise (NaN never passes).
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        let ok = err <= atol + rtol * w.abs();
        assert!(ok, "{what}[{i}]: backend {g} vs cpu {w} (|diff| {err:e} > {atol:e} + {rtol:e}·|cpu|)");
    }
}

pub fn encoder_case<B: Backend>(g: &B, s: EncoderShape, vocab: usize, vp: usize, seed: u64) {
    let (bt, c) = (s.b * s.t, s.c);
    let wte = values(vp * c, seed, 1.0);
    let wpe = values(s.t * c, seed + 1, 1.0);
    // few distinct tokens so the backward sums repeated ones
    let toks =
        ids(bt, seed + 2, vocab.min(5)).iter().map(|t| t * (vocab as u32 / 5).max(1)).collect::<Vec<_>>();
    let mut want = vec![0.0; bt * c];
    CPU.encoder_forward(&mut want, &toks, &wte, &wpe, s);
    let mut out = g.tensor(bt * c);
    let gt = up_tokens(g, &toks);
    g.encoder_forward(&mut out, &gt, &up(g, &wte), &up(g, &wpe), s);
    // one addition per element, same operands: exact
    assert_close("encoder_forward", &g.download(&out), &want, 0.0, 0.0);

    let dout = values(bt * c, seed + 3, 1.0);
    let (mut dwte, mut dwpe) = (values(vp * c, seed + 4, 0.1), values(s.t * c, seed + 5, 0.1));
    let (mut gdwte, mut gdwpe) = (up(g, &dwte), up(g, &dwpe));
    CPU.encoder_backward(&mut dwte, &mut dwpe, &dout, &toks, s);
    g.encoder_backward(&mut gdwte, &mut gdwpe, &up(g, &dout), &gt, s);
    // positions summed in the same order as the CPU: exact
    assert_close("encoder_backward dwte", &g.download(&gdwte), &dwte, 0.0, 0.0);
    assert_close("encoder_backward dwpe", &g.download(&gdwpe), &dwpe, 0.0, 0.0);
}

pub fn layernorm_case<B: Backend>(g: &B, n: usize, c: usize, seed: u64) {
    let inp: Vec<f32> = values(n * c, seed, 2.0).iter().map(|x| x + 3.0).collect();
    let (w, b) = (values(c, seed + 1, 1.0), values(c, seed + 2, 1.0));
    let (mut out, mut mean, mut rstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
    CPU.layernorm_forward(&mut out, &mut mean, &mut rstd, &inp, &w, &b, n, c);
    let (mut go, mut gm, mut gr) = (g.tensor(n * c), g.tensor(n), g.tensor(n));
    let (gi, gw) = (up(g, &inp), up(g, &w));
    g.layernorm_forward(&mut go, &mut gm, &mut gr, &gi, &gw, &up(g, &b), n, c);
    // layernorm forward: atol 1e-5, rtol 1e-4 (tree vs sequential row sums)
    assert_close("layernorm out", &g.download(&go), &out, 1e-5, 1e-4);
    assert_close("layernorm mean", &g.download(&gm), &mean, 1e-5, 1e-5);
    assert_close("layernorm rstd", &g.download(&gr), &rstd, 1e-5, 1e-4);

    let dout = values(n * c, seed + 3, 1.0);
    let (mut di, mut dw, mut db) =
        (values(n * c, seed + 4, 0.1), values(c, seed + 5, 0.1), values(c, seed + 6, 0.1));
    let (mut gdi, mut gdw, mut gdb) = (up(g, &di), up(g, &dw), up(g, &db));
    CPU.layernorm_backward(&mut di, &mut dw, &mut db, &dout, &inp, &w, &mean, &rstd, n, c);
    g.layernorm_backward(&mut gdi, &mut gdw, &mut gdb, &up(g, &dout), &gi, &gw, &gm, &gr, n, c);
    // layernorm backward: atol 1e-4, rtol 1e-4
    assert_close("layernorm dinp", &g.download(&gdi), &di, 1e-4, 1e-4);
    assert_close("layernorm dweight", &g.download(&gdw), &dw, 1e-4, 1e-4);
    assert_close("layernorm dbias", &g.download(&gdb), &db, 1e-5, 1e-5);
}

pub fn matmul_case<B: Backend>(g: &B, label: &str, s: MatmulShape, with_bias: bool, seed: u64) {
    // matmul: atol 1e-4, rtol 1e-4 (K ≤ 200 terms of magnitude ≤ 1, different order)
    matmul_case_with(g, label, s, with_bias, seed, |x| x, 1e-4);
}

/// `x` rounded to the nearest f16, saturating at ±65504: what a backend's
/// f16 mode multiplies.
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x.clamp(-65504.0, 65504.0)).to_f32()
}

/// A backend whose products round A and B with `round` (f16 modes) against
/// the CPU on rounded copies of the same inputs: the products are then exact
/// on both sides and only the order of the f32 sums differs (atol, rtol
/// `tol`). Accumulated outputs and biases are not rounded.
pub fn matmul_case_with<B: Backend>(
    g: &B,
    label: &str,
    s: MatmulShape,
    with_bias: bool,
    seed: u64,
    round: fn(f32) -> f32,
    tol: f32,
) {
    let MatmulShape { n, c, oc } = s;
    let rounded = |v: &[f32]| v.iter().map(|&x| round(x)).collect::<Vec<f32>>();
    let inp = values(n * c, seed, 1.0);
    let w = values(oc * c, seed + 1, 1.0);
    let bias = values(oc, seed + 2, 1.0);
    let mut out = vec![0.0; n * oc];
    CPU.matmul_forward(&mut out, &rounded(&inp), &rounded(&w), with_bias.then_some(&bias), s);
    let (gi, gw, gb) = (up(g, &inp), up(g, &w), up(g, &bias));
    let mut go = g.tensor(n * oc);
    g.matmul_forward(&mut go, &gi, &gw, with_bias.then_some(&gb), s);
    let what = format!("matmul NT {s:?} {label}");
    assert_close(&what, &g.download(&go), &out, tol, tol);

    let dout = values(n * oc, seed + 3, 1.0);
    let (mut di, mut dw, mut db) =
        (values(n * c, seed + 4, 0.5), values(oc * c, seed + 5, 0.5), values(oc, seed + 6, 0.5));
    let (mut gdi, mut gdw, mut gdb) = (up(g, &di), up(g, &dw), up(g, &db));
    let (rdout, rinp, rw) = (rounded(&dout), rounded(&inp), rounded(&w));
    let mut unused_db = db.clone();
    CPU.matmul_backward(&mut di, &mut dw, with_bias.then_some(&mut unused_db), &rdout, &rinp, &rw, s);
    // The bias gradient sums the unrounded output gradient.
    let mut unused = (vec![0.0; n * c], vec![0.0; oc * c]);
    CPU.matmul_backward(&mut unused.0, &mut unused.1, with_bias.then_some(&mut db), &dout, &inp, &w, s);
    g.matmul_backward(&mut gdi, &mut gdw, with_bias.then_some(&mut gdb), &up(g, &dout), &gi, &gw, s);
    assert_close(&format!("matmul NN dinp {s:?} {label}"), &g.download(&gdi), &di, tol, tol);
    assert_close(&format!("matmul TN dweight {s:?} {label}"), &g.download(&gdw), &dw, tol, tol);
    // bias gradient: rows summed in the CPU's order, atol 1e-5, rtol 1e-5
    assert_close(&format!("matmul dbias {s:?} {label}"), &g.download(&gdb), &db, 1e-5, 1e-5);
}

/// Matmul shapes that are not tile multiples, with and without a bias.
pub const MATMUL_SHAPES: [MatmulShape; 4] = [
    MatmulShape { n: 7, c: 37, oc: 29 },
    MatmulShape { n: 1, c: 16, oc: 5 },
    MatmulShape { n: 65, c: 70, oc: 131 },
    MatmulShape { n: 33, c: 128, oc: 200 },
];

pub fn attention_case<B: Backend>(g: &B, s: AttentionShape, seed: u64) {
    let AttentionShape { b, t, c, nh, .. } = s;
    let qkv = values(b * t * s.qkv_width(), seed, 1.5);
    // The CPU's fused kernels keep one logsumexp per row; the device's
    // probabilities are checked against the CPU's materialised reference.
    let (mut out, mut att) = (vec![0.0; b * t * c], vec![0.0; CPU.attention_scratch_len(s)]);
    CPU.attention_forward(&mut out, &mut att, &qkv, s);
    let (mut ref_out, mut probs) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
    attention::reference_forward(CPU.isa(), &mut ref_out, &mut probs, &qkv, s);
    let gq = up(g, &qkv);
    let scratch = g.attention_scratch_len(s);
    let (mut go, mut ga) = (g.tensor(b * t * c), up(g, &values(scratch, seed + 9, 1.0)));
    g.attention_forward(&mut go, &mut ga, &gq, s);
    // attention: atol 1e-5, rtol 1e-4
    assert_close(&format!("attention out {s:?}"), &g.download(&go), &out, 1e-5, 1e-4);
    // A device that keeps the T × T matrix (its scratch grows with t²; at
    // t = 1 the logsumexps have the same length) is checked against it too.
    if g.attention_scratch_len(AttentionShape { t: 2, ..s }) == b * nh * 4 {
        assert_close(&format!("attention att {s:?}"), &g.download(&ga), &probs, 1e-5, 1e-4);
    }

    let dout = values(b * t * c, seed + 1, 1.0);
    let mut dqkv = values(b * t * s.qkv_width(), seed + 2, 0.1);
    let mut gd = up(g, &dqkv);
    CPU.attention_backward(&mut dqkv, &dout, &qkv, &att, s);
    g.attention_backward(&mut gd, &up(g, &dout), &gq, &ga, s);
    assert_close(&format!("attention dqkv {s:?}"), &g.download(&gd), &dqkv, 1e-5, 1e-4);
}

pub fn gelu_case<B: Backend>(g: &B) {
    let mut x = values(1000, 60, 4.0);
    x.extend([20.0, -20.0, 10.0, -10.0, 5.5, -5.5, 0.0, 1e-3, 3.3, -3.3, 1e4, -1e4]);
    let mut want = vec![0.0; x.len()];
    CPU.gelu_forward(&mut want, &x);
    let gx = up(g, &x);
    let mut out = g.tensor(x.len());
    g.gelu_forward(&mut out, &gx);
    let got = g.download(&out);
    // gelu forward: atol 1e-6, rtol 1e-5 (driver tanh vs the CPU's)
    assert_close("gelu_forward", &got, &want, 1e-6, 1e-5);
    assert!(got.iter().all(|v| v.is_finite()));

    let dout = values(x.len(), 61, 1.0);
    let mut di = values(x.len(), 62, 0.1);
    let mut gdi = up(g, &di);
    CPU.gelu_backward(&mut di, &x, &dout);
    g.gelu_backward(&mut gdi, &gx, &up(g, &dout));
    // gelu backward: atol 1e-5, rtol 1e-4
    assert_close("gelu_backward", &g.download(&gdi), &di, 1e-5, 1e-4);
}

pub fn residual_case<B: Backend>(g: &B) {
    let n = 1037;
    let (a, b) = (values(n, 70, 1.0), values(n, 71, 1.0));
    let mut want = vec![0.0; n];
    CPU.residual_forward(&mut want, &a, &b);
    let mut out = g.tensor(n);
    g.residual_forward(&mut out, &up(g, &a), &up(g, &b));
    // residual: one addition per element, exact (atol 0, rtol 0)
    assert_close("residual_forward", &g.download(&out), &want, 0.0, 0.0);
}

pub fn softmax_case<B: Backend>(g: &B, s: LogitsShape, logits: &[f32], targets: &[u32]) {
    let LogitsShape { n, vp, .. } = s;
    let (mut losses, mut probs) = (vec![0.0; n], vec![0.0; n * vp]);
    CPU.softmax_xent_forward(&mut losses, &mut probs, &logits.to_vec(), &targets.to_vec(), s);
    let (gl, gt) = (up(g, logits), up_tokens(g, targets));
    let (mut gls, mut gp) = (g.tensor(n), up(g, &vec![7.0; n * vp]));
    g.softmax_xent_forward(&mut gls, &mut gp, &gl, &gt, s);
    // softmax probabilities: atol 1e-6, rtol 1e-4; losses: atol 2e-4 (one ulp
    // at |logit| ~ 1e3), rtol 1e-5
    assert_close(&format!("softmax probs {s:?}"), &g.download(&gp), &probs, 1e-6, 1e-4);
    assert_close(&format!("softmax losses {s:?}"), &g.download(&gls), &losses, 2e-4, 1e-5);

    let mut dl = values(n * vp, 80, 0.1);
    let mut gdl = up(g, &dl);
    CPU.softmax_xent_backward(&mut dl, &probs, &targets.to_vec(), 0.25, s);
    g.softmax_xent_backward(&mut gdl, &gp, &gt, 0.25, s);
    // backward: atol 1e-6, rtol 1e-5
    assert_close(&format!("softmax dlogits {s:?}"), &g.download(&gdl), &dl, 1e-6, 1e-5);
}

/// Odd vocabularies (37 in 128, 50257 in 50304), one row, logits near 1e3.
pub fn softmax_cases<B: Backend>(g: &B) {
    let s = LogitsShape { n: 3, v: 37, vp: 128 };
    let near_1e3: Vec<f32> = values(3 * 128, 90, 5.0).iter().map(|x| 1000.0 + x).collect();
    softmax_case(g, s, &near_1e3, &[0, 36, 17]);
    softmax_case(g, LogitsShape { n: 1, v: 37, vp: 128 }, &values(128, 91, 3.0), &[5]);
    let s = LogitsShape { n: 2, v: 50257, vp: 50304 };
    softmax_case(g, s, &values(2 * 50304, 92, 8.0), &[50256, 3]);
}

pub fn reductions_case<B: Backend>(g: &B) {
    for n in [1usize, 4095, 10_007] {
        let x = values(n, 100 + n as u64, 1.0);
        let mut stats = vec![0.0; 4];
        CPU.sum_into(&mut stats, 2, &x, 0.5);
        CPU.sum_squares_into(&mut stats, 3, &x);
        let mut gs = g.tensor(4);
        let gx = up(g, &x);
        g.sum_into(&mut gs, 2, &gx, 0.5);
        g.sum_squares_into(&mut gs, 3, &gx);
        // sums: atol 1e-4, rtol 1e-5 (f32 tree vs f64 blocks)
        assert_close(&format!("sum/sum_squares n={n}"), &g.download(&gs), &stats, 1e-4, 1e-5);
    }
    for (max_norm, unscale) in [(0.0, 1.0), (1.0, 1.0), (100.0, 1.0), (0.0, 0.25), (1.0, 1.0 / 1024.0)] {
        let partials = vec![0.5, 2.0, 0.25, 9.0, 1.0];
        let mut stats = vec![3.0; 4];
        CPU.grad_clip_scale(&mut stats, 0, 1, &partials, 4, max_norm, unscale);
        let mut gs = up(g, &[3.0; 4]);
        g.grad_clip_scale(&mut gs, 0, 1, &up(g, &partials), 4, max_norm, unscale);
        // clipping: atol 0, rtol 1e-6
        let what = format!("grad_clip_scale max_norm={max_norm} unscale={unscale}");
        assert_close(&what, &g.download(&gs), &stats, 0.0, 1e-6);
    }
}

pub fn adamw_case<B: Backend>(g: &B, n: usize) {
    let (p, gr) = (values(n, 110, 1.0), values(n, 111, 1.0));
    let (m, v) = (values(n, 112, 0.1), values(n, 113, 0.1).iter().map(|x| x.abs()).collect::<Vec<_>>());
    let stats = vec![0.0, 0.7, 0.0];
    let hp = AdamWStep { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step: 3 };
    let (mut cp, mut cm, mut cv) = (p.clone(), m.clone(), v.clone());
    CPU.adamw_update(&mut cp, &gr, &mut cm, &mut cv, &stats, 1, hp);
    let (mut gp, mut gm, mut gv) = (up(g, &p), up(g, &m), up(g, &v));
    g.adamw_update(&mut gp, &up(g, &gr), &mut gm, &mut gv, &up(g, &stats), 1, hp);
    // adamw: atol 1e-6, rtol 1e-5 (driver sqrt and division)
    assert_close("adamw param", &g.download(&gp), &cp, 1e-6, 1e-5);
    assert_close("adamw m", &g.download(&gm), &cm, 1e-7, 1e-6);
    assert_close("adamw v", &g.download(&gv), &cv, 1e-7, 1e-6);
}

/// The tiny preset (4 layers, 128 channels, 4 heads, vocab 256, ctx 64) at
/// batch 2, sequence 32: small enough for lavapipe.
const TRAIN_B: usize = 2;
const TRAIN_T: usize = 32;
pub const TRAIN_STEPS: usize = 20;

pub fn hp(step: usize) -> AdamWStep {
    AdamWStep { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step: step as u32 }
}

/// Losses per step and the final parameters' bits.
pub fn train<Bk: Backend>(be: &Bk, steps: usize) -> (Vec<f32>, Vec<u32>) {
    let cfg = ModelConfig::preset("tiny").expect("tiny preset");
    let mut model = Gpt::new(be, cfg.clone(), &init_params(&cfg, 42), 1);
    let mut losses = Vec::new();
    for step in 1..=steps {
        let x = ids(TRAIN_B * TRAIN_T, 1000 + step as u64, cfg.vocab_size);
        // a learnable next token, so the loss has somewhere to go
        let y: Vec<u32> = x.iter().map(|t| (t * 7 + 3) % cfg.vocab_size as u32).collect();
        model.zero_grad(be);
        model.forward(be, &x, Some(&y), TRAIN_B, TRAIN_T);
        model.backward(be, 1);
        model.optimizer_step(be, hp(step), 1.0);
        losses.push(model.read_stats(be).mean_loss());
    }
    let bits = model.download_params(be).iter().flatten().map(|x| x.to_bits()).collect();
    (losses, bits)
}

/// Twenty tiny steps: losses within 1e-3 (relative) of the CPU backend's,
/// and a second run on `g` bit-identical to the first.
///
/// With a CPU path forced (`MURMUR_CPU_ISA`, scripts/test.sh's per-path
/// passes) the comparison with that path is the point and the rerun is
/// left out: it checks `g` alone, whichever CPU path is forced, and the
/// unforced run checks it.
pub fn training_tracks_cpu_and_reruns_bit_identically<B: Backend>(g: &B) {
    let (cpu, _) = train(&CpuBackend::new(), TRAIN_STEPS);
    let (dev, bits1) = train(g, TRAIN_STEPS);
    for (step, (c, d)) in cpu.iter().zip(&dev).enumerate() {
        let rel = ((d - c) / c).abs();
        assert!(rel <= 1e-3, "step {}: backend loss {d} vs cpu {c} (relative {rel:e} > 1e-3)", step + 1);
    }
    assert!(cpu.last() < cpu.first(), "training should reduce the loss: {cpu:?}");
    if crate::compute::cpu::Isa::is_forced() {
        eprintln!("a CPU path is forced: the backend's rerun is checked by the unforced run");
        return;
    }
    let (dev2, bits2) = train(g, TRAIN_STEPS);
    assert_eq!(
        dev.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        dev2.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        "losses differ between two runs"
    );
    assert!(bits1 == bits2, "parameters differ between two runs");
}

/// A small model for counting one step's transfers.
pub fn transfer_model<B: Backend>(g: &B) -> Gpt<B> {
    let cfg = ModelConfig::new(2, 32, 2, 37, 16).expect("shape");
    Gpt::new(g, cfg.clone(), &init_params(&cfg, 7), 1)
}

/// One training step of `transfer_model` (batch 2, sequence 16); its loss.
pub fn transfer_step<B: Backend>(g: &B, model: &mut Gpt<B>, s: usize) -> f32 {
    let (x, y) = (ids(2 * 16, s as u64, 37), ids(2 * 16, 50 + s as u64, 37));
    model.zero_grad(g);
    model.forward(g, &x, Some(&y), 2, 16);
    model.backward(g, 1);
    model.optimizer_step(g, hp(s), 1.0);
    model.read_stats(g).mean_loss()
}

/// The relative error of each parameter gradient of one backward on `g`
/// against the CPU's, ‖g − cpu‖ / ‖cpu‖ per tensor, on a batch of 2,048
/// tokens and a vocabulary of 256: the mean loss's logit gradients (about
/// 1 / (256 · 2048) ≈ 2e-6) sit among f16's subnormals, so a backend that
/// rounds GEMM inputs to f16 is accurate here only with a loss scale.
pub fn gradient_errors_at_2048_tokens<B: Backend>(g: &B) -> Vec<f32> {
    let cfg = ModelConfig::new(2, 32, 2, 256, 64).expect("shape");
    let (b, t) = (32, 64);
    let x = ids(b * t, 900, cfg.vocab_size);
    let y = ids(b * t, 901, cfg.vocab_size);
    let cpu = {
        let cpu = CpuBackend::new();
        let mut m = Gpt::new(&cpu, cfg.clone(), &init_params(&cfg, 5), 1);
        m.zero_grad(&cpu);
        m.forward(&cpu, &x, Some(&y), b, t);
        m.backward(&cpu, 1);
        m.download_grads(&cpu)
    };
    let dev = {
        let mut m = Gpt::new(g, cfg.clone(), &init_params(&cfg, 5), 1);
        m.zero_grad(g);
        m.forward(g, &x, Some(&y), b, t);
        m.backward(g, 1);
        m.download_grads(g)
    };
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    cpu.iter()
        .zip(&dev)
        .map(|(c, d)| {
            let diff: Vec<f32> = c.iter().zip(d).map(|(a, b)| a - b).collect();
            (norm(&diff) / norm(c).max(1e-30)) as f32
        })
        .collect()
}
