//! The synchronous data-parallel baseline: every step each worker computes
//! the gradient of its own batch, the gradients are averaged in fp32 (an
//! all-reduce), and one shared AdamW steps.
//!
//! On one shared model the all-reduce is gradient accumulation at 1/N: the
//! backend sums each worker's batch gradient scaled by 1/N into the same
//! buffer, which is the mean the all-reduce would deliver. Each worker is
//! charged 4·params bytes per step, what it sends to exchange fp32 gradients.

use std::time::Instant;

use super::params::flatten;
use super::{accumulate_batch, robust_name, Evaluator, SimConfig, SimError, SimEvent, SimReport};
use crate::compute::Backend;
use crate::data::Corpus;
use crate::model::{init_params, Gpt};

pub(super) fn run<B: Backend>(
    backend: &B,
    config: &SimConfig,
    corpus: &Corpus,
    mut sink: impl FnMut(&SimEvent),
) -> Result<SimReport, SimError> {
    let started = Instant::now();
    let plan = config.plan()?;
    let schedule = config.schedule(plan);
    let initial = init_params(&config.model, config.seed);
    let workers = config.workers;
    let mut model = Gpt::new(backend, config.model.clone(), &initial, workers);
    let mut evaluator = Evaluator::new(backend, config, corpus, &initial)?;
    let mut loaders = (0..workers)
        .map(|i| corpus.train_loader(config.batch, config.seq, config.seed, i as u64, workers as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let n = config.model.param_count();
    let bytes_per_step = 4 * n as u64;
    let tokens_per_step = (workers * config.batch * config.seq) as u64;
    sink(&SimEvent::Start {
        mode: config.mode,
        workers,
        adversaries: 0,
        params: n,
        steps_per_worker: plan.steps_per_worker,
        rounds: plan.steps_per_worker,
        inner_steps: 1,
        tokens: config.trained_tokens(plan),
        codec: "f32-allreduce".into(),
    });
    let (mut val_loss, mut diverged, mut bytes) = (None, false, 0u64);
    for step in 1..=plan.steps_per_worker {
        model.zero_grad(backend);
        for loader in loaders.iter_mut() {
            accumulate_batch(backend, &mut model, loader, workers)?;
        }
        model.optimizer_step(
            backend,
            config.adamw(schedule.lr(step), step as u32),
            config.optimizer.grad_clip,
        );
        bytes += bytes_per_step;
        let train_loss = model.read_stats(backend).mean_loss();
        if !train_loss.is_finite() {
            diverged = true;
            break;
        }
        if step % config.inner_steps == 0 || step == plan.steps_per_worker {
            let loss = evaluator.loss(backend, &flatten(&model.download_params(backend)))?;
            val_loss = Some(loss);
            sink(&SimEvent::Round {
                round: step.div_ceil(config.inner_steps),
                tokens: step as u64 * tokens_per_step,
                val_loss: loss,
                train_loss,
                bytes_per_worker: bytes,
                rejected: 0,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
    }
    Ok(SimReport {
        mode: config.mode,
        codec: "f32-allreduce".into(),
        inner_steps: 1,
        rounds: plan.steps_per_worker,
        workers,
        adversaries: 0,
        attack: None,
        robust: robust_name(murmur_protocol::RobustMode::Mean),
        tokens: config.trained_tokens(plan),
        params: n,
        val_loss: if diverged { None } else { val_loss },
        diverged,
        bytes_per_worker: bytes,
        rejected: 0,
        pacing: config.pacing,
        seconds: started.elapsed().as_secs_f64(),
    })
}
