//! `murmur sim`: N simulated workers in one process, training one model either
//! with DiLoCo (H inner AdamW steps per worker, pseudo-gradients through the
//! protocol's codecs, error feedback, robust aggregation and outer optimizer)
//! or with synchronous data parallelism (gradients averaged every step), at
//! equal total tokens, so the two can be compared on loss and on bytes sent.
//!
//! DiLoCo rounds are paced as a RunSpec paces them (docs/protocol.md §6.3,
//! §6.4): blocking or overlapped (the eager, one-round-delayed outer step),
//! and a fixed H or a time budget, in which a worker at speed v trains
//! ⌊v·H⌋ steps a round and deltas are normalised by their steps.
//!
//! Workers share one model object on the backend: each round a worker's
//! parameters (and, if kept, its AdamW moments) are uploaded, it trains, and
//! its result is downloaded. Memory stays at one model plus host copies.

pub mod adversary;
pub mod codec_bench;
mod ddp;
mod diloco;
mod params;

use serde::Serialize;
use thiserror::Error;

use murmur_protocol::{AggregateError, Codec, CodecError, OuterError, OuterOptimizer, RobustMode};

use crate::compute::{AdamWStep, Backend};
use crate::data::{BatchLoader, Corpus, DataError};
use crate::model::{Gpt, ModelConfig};
use crate::train::schedule::LrSchedule;
use crate::train::{OptimizerConfig, TrainError};

pub use adversary::Attack;

/// How the simulated workers combine their work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SimMode {
    /// Local SGD: H inner steps, then one compressed pseudo-gradient per worker.
    Diloco,
    /// Synchronous data parallelism: fp32 gradients averaged every step.
    Ddp,
}

/// What a DiLoCo worker does with its AdamW moments between rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InnerMoments {
    /// Each worker keeps its own m and v (and bias-correction step) across rounds.
    Keep,
    /// Every round starts from zero moments (step counter restarts at 1).
    Reset,
}

/// One simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub model: ModelConfig,
    pub mode: SimMode,
    pub workers: usize,
    /// H: inner steps per round (DiLoCo); the validation interval in DDP.
    pub inner_steps: usize,
    pub codec: Codec,
    /// Total training tokens over all workers (rounded down to whole steps).
    pub total_tokens: u64,
    /// Sequences per worker per step.
    pub batch: usize,
    pub seq: usize,
    /// Inner AdamW (DiLoCo) or the one shared AdamW (DDP); the schedule spans
    /// each worker's total step count.
    pub optimizer: OptimizerConfig,
    pub inner_moments: InnerMoments,
    pub outer: OuterOptimizer,
    pub robust: RobustMode,
    /// The last `adversaries` workers are adversarial (DiLoCo only).
    pub adversaries: usize,
    pub attack: Attack,
    pub seed: u64,
    /// Held-out batches (of `VAL_BATCH` sequences) per evaluation.
    pub val_batches: usize,
    /// How DiLoCo rounds are paced.
    pub pacing: SimPacing,
}

/// Overlapped or blocking rounds; fixed H or a time budget with workers of
/// unequal speed (DiLoCo only).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SimPacing {
    /// Each worker trains round r + 1 while round r is exchanged, and moves
    /// its progress onto θ_{r+1} when that lands.
    pub overlapped: bool,
    /// Overlapped rounds: where round r + 1 starts before θ_{r+1} lands.
    pub ahead_from: AheadFrom,
    /// Overlapped rounds: how many full-speed inner steps of round r + 1
    /// the exchange of round r takes; `None`: the whole round.
    pub exchange_steps: Option<usize>,
    /// Overlapped rounds: the share of the progress trained before the
    /// landing that is kept on the landed state (the node's rule:
    /// `LANDING_KEEP`).
    pub landing_keep: f32,
    /// The inner phase is a time budget of H full-speed steps: a worker of
    /// speed v trains max(1, ⌊v·H⌋) steps and aggregation normalises by steps
    /// (`Weighting::PerToken`). Otherwise every worker trains H steps.
    pub budgeted: bool,
    /// The last `slow_workers` honest workers run at `slow_speed` (0 < v ≤ 1).
    pub slow_workers: usize,
    pub slow_speed: f64,
}

impl Default for SimPacing {
    fn default() -> Self {
        Self {
            overlapped: false,
            ahead_from: AheadFrom::Lookahead,
            exchange_steps: None,
            landing_keep: murmur_protocol::LANDING_KEEP,
            budgeted: false,
            slow_workers: 0,
            slow_speed: 1.0,
        }
    }
}

/// Where an overlapped round's training starts before the state it belongs
/// to lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AheadFrom {
    /// θ_r carried by the outer momentum alone (`lookahead_params`; the
    /// node's rule).
    Lookahead,
    /// θ_r stepped by the outer optimizer with the worker's own round-r
    /// delta (the eager rule of Kale et al.).
    Eager,
}

/// Sequences per validation batch.
pub const VAL_BATCH: usize = 16;

/// Why a simulation could not run.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("invalid simulation settings: {0}")]
    Config(String),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error("worker {worker} could not encode its delta: {source}")]
    Encode { worker: usize, source: CodecError },
    #[error(transparent)]
    Aggregate(#[from] AggregateError),
    #[error(transparent)]
    Outer(#[from] OuterError),
}

/// Progress, one event per round (DDP: per `inner_steps` steps).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SimEvent {
    Start {
        mode: SimMode,
        workers: usize,
        adversaries: usize,
        params: usize,
        steps_per_worker: usize,
        rounds: usize,
        inner_steps: usize,
        tokens: u64,
        codec: String,
    },
    Round {
        round: usize,
        tokens: u64,
        val_loss: f32,
        /// Mean over honest workers of their last inner step's loss.
        train_loss: f32,
        /// Cumulative bytes one honest worker has sent.
        bytes_per_worker: u64,
        /// Deltas this round that failed decoding or validation.
        rejected: usize,
        seconds: f64,
    },
}

/// The outcome of a simulation: the final line of `murmur sim --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    pub mode: SimMode,
    pub codec: String,
    pub inner_steps: usize,
    pub rounds: usize,
    pub workers: usize,
    pub adversaries: usize,
    pub attack: Option<Attack>,
    pub robust: String,
    pub tokens: u64,
    pub params: usize,
    /// Final validation loss; `None` (JSON null) when training diverged.
    pub val_loss: Option<f32>,
    pub diverged: bool,
    /// Bytes one honest worker sent over the whole run (payloads only).
    pub bytes_per_worker: u64,
    /// Deltas rejected over the whole run.
    pub rejected: usize,
    pub pacing: SimPacing,
    pub seconds: f64,
}

/// Each worker's optimizer steps and (DiLoCo) rounds implied by a config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub steps_per_worker: usize,
    pub rounds: usize,
}

impl SimConfig {
    /// Check the settings and derive the step counts.
    pub fn plan(&self) -> Result<Plan, SimError> {
        let bad = |s: String| Err(SimError::Config(s));
        if self.workers == 0 || self.batch == 0 || self.seq == 0 || self.inner_steps == 0 {
            return bad("workers, batch, seq and inner steps must all be at least 1".into());
        }
        if self.seq > self.model.max_seq_len {
            return bad(format!("--seq {} exceeds the model's context {}", self.seq, self.model.max_seq_len));
        }
        if self.adversaries >= self.workers {
            return bad(format!(
                "{} adversaries leave no honest worker among {}",
                self.adversaries, self.workers
            ));
        }
        if self.adversaries > 0 && self.mode == SimMode::Ddp {
            return bad("adversaries are simulated in DiLoCo mode only".into());
        }
        if !self.codec.is_valid() {
            return bad(format!("codec {:?} has out-of-range parameters", self.codec));
        }
        let p = &self.pacing;
        if p.slow_workers > self.workers - self.adversaries || !(p.slow_speed > 0.0 && p.slow_speed <= 1.0) {
            return bad(format!(
                "{} slow workers at speed {}: need at most the {} honest workers and a speed in (0, 1]",
                p.slow_workers,
                p.slow_speed,
                self.workers - self.adversaries
            ));
        }
        if (p.overlapped || p.budgeted || p.slow_workers > 0) && self.mode == SimMode::Ddp {
            return bad("overlapped, time-budgeted and slow workers are simulated in DiLoCo mode only".into());
        }
        if p.budgeted {
            // Rounds of the workers' unequal steps; the schedule spans the
            // full-speed worker's steps.
            let per_round = (self.round_steps().iter().sum::<usize>() * self.batch * self.seq) as u64;
            let rounds = usize::try_from(self.total_tokens / per_round).unwrap_or(usize::MAX);
            if rounds == 0 {
                return bad(format!(
                    "{} tokens is less than one round of {per_round} tokens",
                    self.total_tokens
                ));
            }
            return Ok(Plan { steps_per_worker: rounds * self.inner_steps, rounds });
        }
        let per_step = (self.workers * self.batch * self.seq) as u64;
        let steps = usize::try_from(self.total_tokens / per_step).unwrap_or(usize::MAX);
        if steps == 0 {
            return bad(format!(
                "{} tokens is less than one step of {} workers × {} sequences × {} tokens",
                self.total_tokens, self.workers, self.batch, self.seq
            ));
        }
        Ok(Plan { steps_per_worker: steps, rounds: steps.div_ceil(self.inner_steps) })
    }

    /// Tokens the plan actually trains (all workers).
    pub fn trained_tokens(&self, plan: Plan) -> u64 {
        if self.pacing.budgeted {
            return (plan.rounds * self.round_steps().iter().sum::<usize>() * self.batch * self.seq) as u64;
        }
        (plan.steps_per_worker * self.workers * self.batch * self.seq) as u64
    }

    /// Each worker's speed (1 but for the last `slow_workers` honest ones).
    fn speed(&self, worker: usize) -> f64 {
        let honest = self.workers - self.adversaries;
        if worker < honest && worker >= honest - self.pacing.slow_workers.min(honest) {
            self.pacing.slow_speed
        } else {
            1.0
        }
    }

    /// Inner steps each worker trains in a full round: H, or under a time
    /// budget max(1, ⌊speed·H⌋).
    pub fn round_steps(&self) -> Vec<usize> {
        (0..self.workers)
            .map(|i| {
                if self.pacing.budgeted {
                    ((self.speed(i) * self.inner_steps as f64).floor() as usize).max(1)
                } else {
                    self.inner_steps
                }
            })
            .collect()
    }

    fn schedule(&self, plan: Plan) -> LrSchedule {
        let o = &self.optimizer;
        LrSchedule {
            max_lr: o.lr,
            min_lr_frac: o.min_lr_frac,
            warmup: o.warmup,
            total: plan.steps_per_worker,
        }
    }

    fn adamw(&self, lr: f32, step: u32) -> AdamWStep {
        let o = &self.optimizer;
        AdamWStep { lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weight_decay, step }
    }
}

/// A short name for a robust mode (CLI and reports).
pub fn robust_name(mode: RobustMode) -> String {
    match mode {
        RobustMode::Mean => "none".into(),
        RobustMode::NormClip { multiple } => format!("clip-{multiple}"),
        RobustMode::NormFilter { multiple } => format!("norm-filter-{multiple}"),
        RobustMode::TrimmedMean { trim } => format!("trimmed-mean-{trim}"),
        RobustMode::Median => "median".into(),
    }
}

/// Run a simulation on `backend`, reporting progress to `sink`.
pub fn simulate<B: Backend>(
    backend: &B,
    config: &SimConfig,
    corpus: &Corpus,
    sink: impl FnMut(&SimEvent),
) -> Result<SimReport, SimError> {
    if corpus.vocab_size() > config.model.vocab_size {
        return Err(
            TrainError::VocabMismatch { data: corpus.vocab_size(), model: config.model.vocab_size }.into()
        );
    }
    match config.mode {
        SimMode::Diloco => diloco::run(backend, config, corpus, sink),
        SimMode::Ddp => ddp::run(backend, config, corpus, sink),
    }
}

/// Scores flat parameter vectors on the same held-out windows every time.
struct Evaluator<B: Backend> {
    model: Gpt<B>,
    loader: BatchLoader,
    batches: usize,
}

impl<B: Backend> Evaluator<B> {
    fn new(backend: &B, config: &SimConfig, corpus: &Corpus, initial: &[Vec<f32>]) -> Result<Self, SimError> {
        Ok(Evaluator {
            model: Gpt::new(backend, config.model.clone(), initial, 1),
            loader: corpus.val_loader(VAL_BATCH, config.seq)?,
            batches: config.val_batches.max(1),
        })
    }

    /// Mean validation loss of `flat` parameters.
    fn loss(&mut self, backend: &B, flat: &[f32]) -> Result<f32, SimError> {
        let tensors = params::split(flat, self.model.specs());
        self.model.upload_params(backend, &tensors);
        Ok(crate::train::trainer::evaluate(backend, &mut self.model, &mut self.loader, self.batches)?)
    }
}

/// One forward + backward of a worker's next batch, accumulated at 1/`accum`
/// (its loss is read afterwards through `Gpt::read_stats`).
fn accumulate_batch<B: Backend>(
    backend: &B,
    model: &mut Gpt<B>,
    loader: &mut BatchLoader,
    accum: usize,
) -> Result<(), SimError> {
    let b = loader.next_batch()?;
    model.forward(backend, &b.inputs, Some(&b.targets), b.batch, b.seq);
    model.backward(backend, accum);
    Ok(())
}

#[cfg(test)]
mod tests;
