//! Model-level tests on the CPU backend: forward against the f64 reference,
//! every tensor's analytic gradient against f64 central finite differences,
//! and bit-exact determinism of training (GPT-2 here, Llama in `llama`).

use super::config::ModelConfig;
use super::gpt::Gpt;
use super::params::{head_index, init_params, WTE};
use super::reference;
use super::rng::Rng;
use crate::compute::cpu::{CpuBackend, Isa, Precision};
use crate::compute::AdamWStep;

/// A small shape with an odd vocabulary (padded to 128), odd sequence length
/// and two heads, so padding and masking paths are exercised.
fn small_cfg() -> ModelConfig {
    ModelConfig::new(2, 16, 2, 37, 8).unwrap()
}

/// Parameters with larger-than-GPT-2 spread so gradients are well scaled.
fn params(cfg: &ModelConfig, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed ^ 0xabc);
    let mut p = init_params(cfg, seed);
    for t in p.iter_mut() {
        for x in t.iter_mut() {
            *x += (rng.normal() * 0.3) as f32;
        }
    }
    p[WTE][cfg.vocab_size * cfg.n_embd..].fill(0.0);
    p[head_index(cfg)][cfg.vocab_size * cfg.n_embd..].fill(0.0);
    p
}

fn batch(cfg: &ModelConfig, b: usize, t: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = Rng::new(seed);
    let v = cfg.vocab_size as u64;
    let x: Vec<u32> = (0..b * t).map(|_| (rng.next_u64() % v) as u32).collect();
    let y: Vec<u32> = (0..b * t).map(|_| (rng.next_u64() % v) as u32).collect();
    (x, y)
}

/// The CPU paths to check: the one `MURMUR_CPU_ISA` forces, else every path
/// this CPU supports (fp32).
fn cpu_paths() -> Vec<CpuBackend> {
    if Isa::is_forced() {
        return vec![
            CpuBackend::from_env(Precision::Fp32).expect("MURMUR_CPU_ISA names a path this CPU runs")
        ];
    }
    Isa::supported_paths()
        .into_iter()
        .map(|isa| CpuBackend::with_options(isa, Precision::Fp32).expect("supported path"))
        .collect()
}

mod llama;

fn to_f64(p: &[Vec<f32>]) -> Vec<Vec<f64>> {
    p.iter().map(|t| t.iter().map(|x| *x as f64).collect()).collect()
}

#[test]
fn forward_loss_matches_f64_reference() {
    let cfg = small_cfg();
    let (b, t) = (2, 7);
    let p = params(&cfg, 1);
    let (x, y) = batch(&cfg, b, t, 2);
    let want = reference::loss(&cfg, &to_f64(&p), &x, &y, b, t);
    for be in cpu_paths() {
        let mut model = Gpt::new(&be, cfg.clone(), &p, 1);
        model.zero_grad(&be);
        model.forward(&be, &x, Some(&y), b, t);
        let got = model.read_stats(&be).mean_loss() as f64;
        assert!((got - want).abs() <= 1e-5 * want.abs(), "{}: loss {got} vs reference {want}", be.isa());
    }
}

/// Relative error tolerance of the gradient check: |analytic − numeric| ≤
/// 1e-3 · max(|numeric|, 1e-3·g_scale), where g_scale is the tensor's largest
/// |gradient| — coordinates whose gradient is a thousandth of the tensor's
/// largest are compared at that floor, because an f32 gradient cannot carry
/// more relative precision than its accumulation allows.
const GRAD_RTOL: f64 = 1e-3;

#[test]
fn every_parameter_gradient_matches_central_finite_differences() {
    for be in cpu_paths() {
        gradient_check(&be, &small_cfg());
    }
}

/// Every tensor's analytic gradient on `be` against central finite
/// differences of the f64 reference, at its largest coordinate and six
/// random ones.
fn gradient_check(be: &CpuBackend, cfg: &ModelConfig) {
    let cfg = cfg.clone();
    let (b, t) = (2, 7);
    let p = params(&cfg, 3);
    let (x, y) = batch(&cfg, b, t, 4);
    let be = *be;
    let mut model = Gpt::new(&be, cfg.clone(), &p, 1);
    model.zero_grad(&be);
    model.forward(&be, &x, Some(&y), b, t);
    model.backward(&be, 1);
    let grads = model.download_grads(&be);
    let mut p64 = to_f64(&p);
    let mut rng = Rng::new(99);
    let h = 1e-5;
    let mut checked = 0;
    for (ti, spec) in model.specs().to_vec().iter().enumerate() {
        let g = &grads[ti];
        let vocab_rows = ti == WTE || ti == head_index(&cfg);
        let limit = if vocab_rows { cfg.vocab_size * cfg.n_embd } else { g.len() };
        let scale = g[..limit].iter().fold(0f64, |m, v| m.max(v.abs() as f64));
        assert!(scale > 0.0, "{}: gradient is identically zero", spec.name);
        // the coordinate of largest gradient, plus random ones
        let argmax = (0..limit).max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs())).unwrap();
        let mut coords = vec![argmax];
        coords.extend((0..6).map(|_| (rng.next_u64() % limit as u64) as usize));
        for &i in &coords {
            let orig = p64[ti][i];
            p64[ti][i] = orig + h;
            let lp = reference::loss(&cfg, &p64, &x, &y, b, t);
            p64[ti][i] = orig - h;
            let lm = reference::loss(&cfg, &p64, &x, &y, b, t);
            p64[ti][i] = orig;
            let numeric = (lp - lm) / (2.0 * h);
            let analytic = g[i] as f64;
            let denom = numeric.abs().max(1e-3 * scale);
            let rel = (analytic - numeric).abs() / denom;
            assert!(
                rel <= GRAD_RTOL,
                "{} {}[{i}]: analytic {analytic:e} vs numeric {numeric:e} (relative error {rel:e})",
                be.isa(),
                spec.name
            );
            checked += 1;
        }
    }
    assert!(checked >= 7 * model.specs().len());
    // padded vocabulary rows get no gradient
    assert!(grads[WTE][cfg.vocab_size * cfg.n_embd..].iter().all(|g| *g == 0.0));
    assert!(grads[head_index(&cfg)][cfg.vocab_size * cfg.n_embd..].iter().all(|g| *g == 0.0));
}

fn train_run(be: CpuBackend, steps: usize) -> (Vec<f32>, blake3::Hash) {
    train_preset(be, "tiny", steps)
}

/// `steps` AdamW steps of `preset` from seed 42 on seeded random batches:
/// the losses and a hash of the final weights.
fn train_preset(be: CpuBackend, preset: &str, steps: usize) -> (Vec<f32>, blake3::Hash) {
    let cfg = ModelConfig::preset(preset).unwrap();
    let (b, t) = (4, 32);
    let mut model = Gpt::new(&be, cfg.clone(), &init_params(&cfg, 42), 1);
    let mut losses = Vec::new();
    for step in 1..=steps {
        let (x, y) = batch(&cfg, b, t, step as u64);
        model.zero_grad(&be);
        model.forward(&be, &x, Some(&y), b, t);
        model.backward(&be, 1);
        let hp =
            AdamWStep { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step: step as u32 };
        model.optimizer_step(&be, hp, 1.0);
        losses.push(model.read_stats(&be).mean_loss());
    }
    let mut hasher = blake3::Hasher::new();
    for tensor in model.download_params(&be) {
        hasher.update(bytemuck::cast_slice(&tensor));
    }
    (losses, hasher.finalize())
}

#[test]
fn twenty_steps_with_one_seed_are_bit_identical() {
    // every path, in both precisions, and on 1 thread as on the whole pool
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");
    for fp32 in cpu_paths() {
        for precision in [Precision::Fp32, Precision::Bf16] {
            let be = CpuBackend::with_options(fp32.isa(), precision).expect("supported path");
            let (l1, h1) = train_run(be, 20);
            let (l2, h2) = train_run(be, 20);
            let (l3, h3) = one_thread.install(|| train_run(be, 20));
            let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&l1), bits(&l2), "{} {precision}", be.isa());
            assert_eq!(bits(&l1), bits(&l3), "{} {precision}: 1 thread", be.isa());
            assert_eq!(h1, h2);
            assert_eq!(h1, h3);
            assert!(l1.iter().all(|l| l.is_finite()));
        }
    }
}

/// In bf16 every path trains to the same bits: the GEMMs give every path's
/// bits (`gemm::tests::bf16_gives_the_same_bits_on_every_path`), as do the
/// other kernels, so a bf16 run does not depend on which CPU ran it.
#[test]
fn bf16_training_gives_the_same_bits_on_every_path() {
    let portable = CpuBackend::with_options(Isa::Portable, Precision::Bf16).expect("portable");
    let (want_losses, want) = train_run(portable, 12);
    for path in cpu_paths() {
        let be = CpuBackend::with_options(path.isa(), Precision::Bf16).expect("supported path");
        let (losses, got) = train_run(be, 12);
        assert_eq!(losses, want_losses, "{}: losses", be.isa());
        assert_eq!(got, want, "{}: weights after 12 steps", be.isa());
    }
}

#[test]
fn gradient_accumulation_equals_one_big_batch() {
    let cfg = small_cfg();
    let p = params(&cfg, 5);
    let (x, y) = batch(&cfg, 4, 6, 6);
    let be = CpuBackend::new();
    let mut big = Gpt::new(&be, cfg.clone(), &p, 1);
    big.zero_grad(&be);
    big.forward(&be, &x, Some(&y), 4, 6);
    big.backward(&be, 1);
    let mut acc = Gpt::new(&be, cfg.clone(), &p, 2);
    acc.zero_grad(&be);
    for half in 0..2 {
        let r = half * 12..(half + 1) * 12;
        acc.forward(&be, &x[r.clone()], Some(&y[r]), 2, 6);
        acc.backward(&be, 2);
    }
    assert_eq!(acc.read_stats(&be).losses.len(), 2);
    for (a, b) in acc.download_grads(&be).iter().zip(big.download_grads(&be)) {
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-5 + 1e-4 * v.abs(), "{u} vs {v}");
        }
    }
}

/// With weight images (every CPU plan), a model whose weights were
/// replaced reads the new weights: uploading another run's parameters
/// gives that run's loss bit for bit, and a run that re-uploads its own
/// weights after every step (images written whole, not by AdamW) trains
/// to the same bits as one whose AdamW writes them.
#[test]
fn weight_images_follow_every_change_of_the_weights() {
    use crate::compute::Backend;
    let be = CpuBackend::with_options(Isa::widest(), Precision::Bf16).expect("widest path");
    let cfg = small_cfg();
    let has_images = be.weight_image_len(cfg.padded_vocab_size, cfg.n_embd) > 0;
    assert!(has_images, "every CPU plan has weight images");
    let (b, t) = (3, 7);
    let hp = |step| AdamWStep { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step };
    let run = |reupload: bool| {
        let mut model = Gpt::new(&be, cfg.clone(), &params(&cfg, 3), 1);
        let mut losses = Vec::new();
        for step in 1..=4u32 {
            let (x, y) = batch(&cfg, b, t, step as u64);
            model.zero_grad(&be);
            model.forward(&be, &x, Some(&y), b, t);
            model.backward(&be, 1);
            model.optimizer_step(&be, hp(step), 1.0);
            losses.push(model.read_stats(&be).mean_loss().to_bits());
            if reupload {
                let p = model.download_params(&be);
                model.upload_params(&be, &p);
            }
        }
        (losses, model)
    };
    let (by_adamw, trained) = run(false);
    let (by_upload, _) = run(true);
    assert_eq!(by_adamw, by_upload);
    // A fresh model (its images written from other weights) given the
    // trained weights, flat and per tensor.
    let (x, y) = batch(&cfg, b, t, 99);
    let loss = |model: &mut Gpt<CpuBackend>| {
        model.zero_grad(&be);
        model.forward(&be, &x, Some(&y), b, t);
        model.read_stats(&be).mean_loss().to_bits()
    };
    let mut trained = trained;
    let want = loss(&mut trained);
    let mut fresh = Gpt::new(&be, cfg.clone(), &params(&cfg, 4), 1);
    assert_ne!(loss(&mut fresh), want, "different weights give a different loss");
    fresh.upload_params(&be, &trained.download_params(&be));
    assert_eq!(loss(&mut fresh), want, "upload_params");
    let mut flat = Gpt::new(&be, cfg.clone(), &params(&cfg, 5), 1);
    let _ = loss(&mut flat);
    flat.upload_params_flat(&be, &trained.download_params_flat(&be));
    assert_eq!(loss(&mut flat), want, "upload_params_flat");
}

/// The imaged weights' gradients are not zeroed between steps (AdamW
/// leaves them, the next backward overwrites them), yet every reader sees
/// zeros where it should: the gradients right after a step, the gradients
/// of two accumulated micro-batches after a step (against a model that
/// never stepped), and a step with no backward since the last (against a
/// model with the same weights and moments whose gradients were never
/// written).
#[test]
fn stale_weight_gradients_count_as_zero() {
    use crate::compute::Backend;
    let be = CpuBackend::with_options(Isa::widest(), Precision::Fp32).expect("widest path");
    let cfg = small_cfg();
    let has_images = be.weight_image_len(cfg.padded_vocab_size, cfg.n_embd) > 0;
    assert!(has_images, "every CPU plan has weight images");
    let bits = |g: Vec<Vec<f32>>| g.into_iter().flatten().map(f32::to_bits).collect::<Vec<_>>();
    let differ = |a: Vec<u32>, b: Vec<u32>| {
        a.iter().zip(&b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len())
    };
    let hp = |step| AdamWStep { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step };
    let (b, t) = (2, 5);
    let mut model = Gpt::new(&be, cfg.clone(), &params(&cfg, 8), 2);
    let (x, y) = batch(&cfg, b, t, 1);
    model.zero_grad(&be);
    model.forward(&be, &x, Some(&y), b, t);
    model.backward(&be, 1);
    assert!(model.download_grads(&be).iter().flatten().any(|g| *g != 0.0), "a backward writes gradients");
    model.optimizer_step(&be, hp(1), 1.0);
    assert!(model.download_grads(&be).iter().flatten().all(|g| *g == 0.0), "zero after a step");

    let micro = [batch(&cfg, b, t, 2), batch(&cfg, b, t, 3)];
    let accumulate = |m: &mut Gpt<CpuBackend>| {
        m.zero_grad(&be);
        for (x, y) in &micro {
            m.forward(&be, x, Some(y), b, t);
            m.backward(&be, 2);
        }
        bits(m.download_grads(&be))
    };
    let mut unstepped = Gpt::new(&be, cfg.clone(), &model.download_params(&be), 2);
    let n = differ(accumulate(&mut model), accumulate(&mut unstepped));
    assert_eq!(n, 0, "two micro-batches after a step: {n} gradient values differ");

    model.optimizer_step(&be, hp(2), 1.0);
    let (m, v) = model.download_moments(&be);
    let mut never_written = Gpt::new(&be, cfg.clone(), &model.download_params(&be), 2);
    never_written.upload_moments(&be, &m, &v);
    for s in [&mut model, &mut never_written] {
        s.zero_grad(&be);
        s.optimizer_step(&be, hp(3), 1.0);
    }
    let n = differ(bits(model.download_params(&be)), bits(never_written.download_params(&be)));
    assert_eq!(n, 0, "a step with no backward since the last: {n} weights differ");
}
