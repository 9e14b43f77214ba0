//! The Llama architecture on the CPU backend: its forward against the f64
//! reference and every tensor's gradient against f64 central finite
//! differences (tied and untied embeddings, grouped-query and multi-head
//! attention), bit-exact determinism of training on every path in both
//! precisions, and a preset that learns.

use super::*;
use crate::model::config::LlamaShape;
use crate::model::Architecture;

/// Small Llamas with an odd vocabulary and sequence length: grouped-query
/// attention with an untied LM head, and multi-head attention tied.
fn small_llamas() -> [ModelConfig; 2] {
    let shape = |n_kv_head, tied_embeddings| LlamaShape {
        n_kv_head,
        ffn_hidden: 24,
        tied_embeddings,
        rope_theta: 10_000,
    };
    [
        ModelConfig::llama(2, 16, 4, 37, 8, shape(2, false)).unwrap(),
        ModelConfig::llama(2, 16, 2, 37, 8, shape(2, true)).unwrap(),
    ]
}

#[test]
fn llama_forward_loss_matches_f64_reference() {
    for cfg in small_llamas() {
        let (b, t) = (2, 7);
        let p = params(&cfg, 1);
        let (x, y) = batch(&cfg, b, t, 2);
        let want = reference::loss(&cfg, &to_f64(&p), &x, &y, b, t);
        for be in cpu_paths() {
            let mut model = Gpt::new(&be, cfg.clone(), &p, 1);
            model.zero_grad(&be);
            model.forward(&be, &x, Some(&y), b, t);
            let got = model.read_stats(&be).mean_loss() as f64;
            let what = format!("{} {:?}", be.isa(), cfg.arch);
            assert!((got - want).abs() <= 1e-5 * want.abs(), "{what}: loss {got} vs reference {want}");
        }
    }
}

#[test]
fn every_llama_parameter_gradient_matches_central_finite_differences() {
    for cfg in small_llamas() {
        for be in cpu_paths() {
            gradient_check(&be, &cfg);
        }
    }
}

#[test]
fn llama_training_is_bit_identical_on_every_path_and_thread_count() {
    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");
    for fp32 in cpu_paths() {
        for precision in [Precision::Fp32, Precision::Bf16] {
            let be = CpuBackend::with_options(fp32.isa(), precision).expect("supported path");
            let (l1, h1) = train_preset(be, "llama-tiny", 8);
            let (l2, h2) = train_preset(be, "llama-tiny", 8);
            let (l3, h3) = one_thread.install(|| train_preset(be, "llama-tiny", 8));
            let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&l1), bits(&l2), "{} {precision}", be.isa());
            assert_eq!(bits(&l1), bits(&l3), "{} {precision}: 1 thread", be.isa());
            assert_eq!((h1, h1), (h2, h3), "{} {precision}: weights", be.isa());
            assert!(l1.iter().all(|l| l.is_finite()));
        }
    }
}

/// llama-tiny fits one repeated batch: its loss falls from near ln(vocab)
/// to well below it in a few dozen steps.
#[test]
fn llama_tiny_learns_a_repeated_batch() {
    let be = CpuBackend::new();
    let cfg = ModelConfig::preset("llama-tiny").unwrap();
    assert!(matches!(cfg.arch, Architecture::Llama(_)));
    let (b, t) = (4, 32);
    let (x, y) = batch(&cfg, b, t, 7);
    let mut model = Gpt::new(&be, cfg.clone(), &init_params(&cfg, 42), 1);
    let mut losses = Vec::new();
    for step in 1..=40u32 {
        model.zero_grad(&be);
        model.forward(&be, &x, Some(&y), b, t);
        model.backward(&be, 1);
        let hp = AdamWStep { lr: 3e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, step };
        model.optimizer_step(&be, hp, 1.0);
        losses.push(model.read_stats(&be).mean_loss());
    }
    let ln_vocab = (cfg.vocab_size as f32).ln();
    assert!((losses[0] - ln_vocab).abs() < 0.1, "first loss {} vs ln V {ln_vocab}", losses[0]);
    assert!(losses[39] < 0.5 * ln_vocab, "loss after 40 steps: {:?}", losses);
}

/// Activation checkpointing recomputes each block from its input: the loss
/// and every gradient are the same bits as with every block's activations
/// kept, on every path in both precisions; GPT-2 refuses it.
#[test]
fn checkpointed_llama_gradients_are_the_same_bits() {
    for cfg in small_llamas() {
        let (b, t) = (2, 7);
        let p = params(&cfg, 3);
        let (x, y) = batch(&cfg, b, t, 4);
        for fp32 in cpu_paths() {
            for precision in [Precision::Fp32, Precision::Bf16] {
                let be = CpuBackend::with_options(fp32.isa(), precision).expect("supported path");
                let run = |checkpointing: bool| {
                    let mut model = Gpt::new(&be, cfg.clone(), &p, 1);
                    assert!(model.set_checkpointing(checkpointing));
                    model.zero_grad(&be);
                    model.forward(&be, &x, Some(&y), b, t);
                    model.backward(&be, 1);
                    let grads: Vec<Vec<u32>> = model
                        .download_grads(&be)
                        .iter()
                        .map(|g| g.iter().map(|v| v.to_bits()).collect())
                        .collect();
                    (model.read_stats(&be).mean_loss().to_bits(), grads)
                };
                assert_eq!(run(true), run(false), "{} {precision} {:?}", be.isa(), cfg.arch);
            }
        }
    }
    let gpt2 = ModelConfig::preset("tiny").unwrap();
    let be = CpuBackend::new();
    let mut model = Gpt::new(&be, gpt2.clone(), &init_params(&gpt2, 1), 1);
    assert!(!model.set_checkpointing(true));
    assert!(model.set_checkpointing(false));
}
