//! `murmur bench train`: training throughput of one shape on one backend,
//! counted as llm.c counts it (6N + 6·L·C·T FLOPs per token).

use std::time::{Duration, Instant};

use serde::Serialize;

use super::handoff;
use crate::compute::{on_worker, AdamWStep, Backend};
use crate::model::rng::Rng;
use crate::model::{init_params, Gpt, ModelConfig};

/// One throughput measurement.
#[derive(Clone, Debug, Serialize)]
pub struct TrainBench {
    pub backend: String,
    pub layers: usize,
    pub channels: usize,
    pub heads: usize,
    pub vocab: usize,
    pub batch: usize,
    pub seq: usize,
    pub params: usize,
    pub steps: usize,
    pub ms_per_step: f64,
    pub tokens_per_s: f64,
    pub gflops: f64,
    /// Cross-core round trips (ns) measured just before and just after the
    /// timed steps (`handoff`): about 60 near, 350 far on the benchmark VM.
    pub handoff_ns: [Option<f64>; 2],
}

/// Times `steps` full training steps (forward, backward, AdamW) after
/// `warmup` untimed ones, on random tokens.
///
/// The steps run as training runs them (`on_worker`: on a rayon worker for
/// the CPU backend).
pub fn bench_train<B: Backend>(
    backend: &B,
    cfg: &ModelConfig,
    batch: usize,
    seq: usize,
    warmup: usize,
    steps: usize,
) -> TrainBench {
    let patience = Duration::from_secs(1);
    let before = handoff::round_trip_ns(patience);
    let mut r = on_worker::<B, _>(|| bench_steps(backend, cfg, batch, seq, warmup, steps));
    r.handoff_ns = [before, handoff::round_trip_ns(patience)];
    r
}

fn bench_steps<B: Backend>(
    backend: &B,
    cfg: &ModelConfig,
    batch: usize,
    seq: usize,
    warmup: usize,
    steps: usize,
) -> TrainBench {
    let mut model = Gpt::new(backend, cfg.clone(), &init_params(cfg, 1), 1);
    let mut rng = Rng::new(7);
    let n = batch * seq;
    let v = cfg.vocab_size as u64;
    let mut step_once = |model: &mut Gpt<B>, step: usize| {
        let x: Vec<u32> = (0..n).map(|_| (rng.next_u64() % v) as u32).collect();
        let y: Vec<u32> = (0..n).map(|_| (rng.next_u64() % v) as u32).collect();
        model.zero_grad(backend);
        model.forward(backend, &x, Some(&y), batch, seq);
        model.backward(backend, 1);
        let hp =
            AdamWStep { lr: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, step: step as u32 };
        model.optimizer_step(backend, hp, 1.0);
        model.read_stats(backend)
    };
    for s in 0..warmup {
        step_once(&mut model, s + 1);
    }
    let start = Instant::now();
    for s in 0..steps {
        step_once(&mut model, warmup + s + 1);
    }
    let secs = start.elapsed().as_secs_f64();
    let tokens = (steps * n) as f64;
    TrainBench {
        backend: backend.describe(),
        layers: cfg.n_layer,
        channels: cfg.n_embd,
        heads: cfg.n_head,
        vocab: cfg.vocab_size,
        batch,
        seq,
        params: cfg.param_count(),
        steps,
        ms_per_step: secs * 1e3 / steps.max(1) as f64,
        tokens_per_s: tokens / secs,
        gflops: tokens * cfg.flops_per_token(seq) / secs / 1e9,
        handoff_ns: [None, None],
    }
}
