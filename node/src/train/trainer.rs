//! The single-machine training loop: batches from a corpus, forward/backward
//! with gradient accumulation, AdamW with a warmup + cosine schedule and
//! global-norm clipping, periodic validation, and checkpoint save/resume.
//!
//! Progress goes to a caller-supplied sink as `TrainEvent`s, so the binary can
//! print text or JSON lines and tests can inspect every step.

use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::schedule::LrSchedule;
use crate::checkpoint::{native, Checkpoint, CheckpointMeta};
use crate::compute::{on_worker, AdamWStep, Backend};
use crate::data::{BatchLoader, Corpus, LoaderPosition};
use crate::model::{init_params, Gpt, ModelConfig};

/// Inner optimizer settings (AdamW with decoupled weight decay).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimizerConfig {
    pub lr: f32,
    pub min_lr_frac: f32,
    pub warmup: usize,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Global gradient-norm clip (≤ 0 disables).
    pub grad_clip: f32,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            lr: 3e-3,
            min_lr_frac: 0.1,
            warmup: 30,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
        }
    }
}

/// Everything a training run is configured by.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub model: ModelConfig,
    pub steps: usize,
    pub batch: usize,
    pub seq: usize,
    /// Micro-batches accumulated per optimizer step.
    pub grad_accum: usize,
    pub optimizer: OptimizerConfig,
    pub seed: u64,
    /// Validate every this many steps (0: only at the end).
    pub val_every: usize,
    pub val_batches: usize,
    /// Save a checkpoint every this many steps (0: only at the end), when
    /// `checkpoint_dir` is set.
    pub checkpoint_every: usize,
    pub checkpoint_dir: Option<PathBuf>,
    /// Activation checkpointing (Llama): recompute each block in the backward.
    #[serde(default)]
    pub checkpointing: bool,
}

/// What the loop reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TrainEvent {
    Start {
        params: usize,
        backend: String,
        data: String,
        entropy_floor: Option<f64>,
        resumed_from: Option<u64>,
    },
    Step {
        step: usize,
        loss: f32,
        lr: f32,
        grad_norm: f32,
        ms: f64,
        tokens_per_s: f64,
    },
    Val {
        step: usize,
        val_loss: f32,
    },
    Checkpoint {
        step: usize,
        path: PathBuf,
    },
}

/// The end of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrainSummary {
    pub steps: usize,
    pub train_loss: f32,
    pub val_loss: f32,
    /// The validation loss in bits per byte of text (real text only).
    pub val_bits_per_byte: Option<f64>,
    pub entropy_floor: Option<f64>,
    pub ln_vocab: f64,
    pub tokens: u64,
    pub seconds: f64,
    pub tokens_per_s: f64,
}

/// State stored in a checkpoint's `train_state` so a run can resume.
#[derive(Serialize, Deserialize)]
struct ResumeState {
    config: TrainConfig,
    loader: LoaderPosition,
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    #[error("the data's vocabulary ({data}) is larger than the model's ({model}); use a model preset with a larger vocabulary or a smaller tokenizer")]
    VocabMismatch { data: usize, model: usize },
    #[error("{0}")]
    Memory(String),
    #[error("sequence length {seq} exceeds the model's context {max}; pass --seq {max} or less")]
    SeqTooLong { seq: usize, max: usize },
    #[error("checkpoint does not match this run: {0}")]
    ResumeMismatch(String),
    #[error("training diverged at step {step}: loss is {loss}; lower --lr or enable --grad-clip")]
    Diverged { step: usize, loss: f32 },
}

/// Mean loss over `batches` held-out batches.
pub fn evaluate<B: Backend>(
    backend: &B,
    model: &mut Gpt<B>,
    loader: &mut BatchLoader,
    batches: usize,
) -> Result<f32, TrainError> {
    loader.reset();
    let mut total = 0f64;
    for _ in 0..batches.max(1) {
        let b = loader.next_batch()?;
        model.zero_grad(backend);
        model.forward(backend, &b.inputs, Some(&b.targets), b.batch, b.seq);
        total += model.read_stats(backend).mean_loss() as f64;
    }
    Ok((total / batches.max(1) as f64) as f32)
}

/// Runs training, optionally resuming from `resume`.
pub fn train<B: Backend>(
    backend: &B,
    config: &TrainConfig,
    corpus: &Corpus,
    resume: Option<Checkpoint>,
    mut sink: impl FnMut(&TrainEvent),
) -> Result<TrainSummary, TrainError> {
    let cfg = &config.model;
    if corpus.vocab_size() > cfg.vocab_size {
        return Err(TrainError::VocabMismatch { data: corpus.vocab_size(), model: cfg.vocab_size });
    }
    if config.seq > cfg.max_seq_len {
        return Err(TrainError::SeqTooLong { seq: config.seq, max: cfg.max_seq_len });
    }
    crate::model::check_fits(backend, cfg, (config.batch, config.seq), config.checkpointing)
        .map_err(TrainError::Memory)?;
    let accum = config.grad_accum.max(1);
    let mut loader = corpus.train_loader(config.batch, config.seq, config.seed, 0, 1)?;
    let mut val_loader = corpus.val_loader(config.batch, config.seq)?;
    let (mut model, start_step) = match resume {
        Some(ckpt) => {
            if &ckpt.meta.model != cfg {
                return Err(TrainError::ResumeMismatch(format!(
                    "checkpoint model {:?} differs from the configured {:?}",
                    ckpt.meta.model, cfg
                )));
            }
            let state: ResumeState = serde_json::from_value(ckpt.meta.train_state.clone())
                .map_err(|e| TrainError::ResumeMismatch(format!("training state unreadable: {e}")))?;
            loader.seek(&state.loader)?;
            let mut model = Gpt::new(backend, cfg.clone(), &ckpt.params, accum);
            if let Some((m, v)) = &ckpt.moments {
                model.upload_moments(backend, m, v);
            }
            (model, ckpt.meta.step as usize)
        }
        None => (Gpt::from_values(backend, cfg.clone(), init_params(cfg, config.seed), accum), 0),
    };
    model.set_checkpointing(config.checkpointing);
    sink(&TrainEvent::Start {
        params: cfg.param_count(),
        backend: backend.describe(),
        data: corpus.describe().to_string(),
        entropy_floor: corpus.entropy_floor(),
        resumed_from: (start_step > 0).then_some(start_step as u64),
    });
    let o = &config.optimizer;
    let sched =
        LrSchedule { max_lr: o.lr, min_lr_frac: o.min_lr_frac, warmup: o.warmup, total: config.steps };
    let tokens_per_step = (config.batch * config.seq * accum) as u64;
    let run_start = Instant::now();
    let mut last_loss = f32::NAN;
    let mut val_loss = f32::NAN;
    let mut val_step = usize::MAX;
    for step in start_step + 1..=config.steps {
        let t0 = Instant::now();
        let lr = sched.lr(step);
        let hp = AdamWStep {
            lr,
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
            step: step as u32,
        };
        let stats = on_worker::<B, _>(|| -> Result<_, TrainError> {
            model.zero_grad(backend);
            for _ in 0..accum {
                let b = loader.next_batch()?;
                model.forward(backend, &b.inputs, Some(&b.targets), b.batch, b.seq);
                model.backward(backend, accum);
            }
            model.optimizer_step(backend, hp, o.grad_clip);
            Ok(model.read_stats(backend))
        })?;
        last_loss = stats.mean_loss();
        if !last_loss.is_finite() {
            return Err(TrainError::Diverged { step, loss: last_loss });
        }
        let secs = t0.elapsed().as_secs_f64();
        sink(&TrainEvent::Step {
            step,
            loss: last_loss,
            lr,
            grad_norm: stats.grad_norm,
            ms: secs * 1e3,
            tokens_per_s: tokens_per_step as f64 / secs,
        });
        let last = step == config.steps;
        if last || (config.val_every > 0 && step % config.val_every == 0) {
            val_loss = evaluate(backend, &mut model, &mut val_loader, config.val_batches)?;
            val_step = step;
            sink(&TrainEvent::Val { step, val_loss });
        }
        if let Some(dir) = &config.checkpoint_dir {
            if last || (config.checkpoint_every > 0 && step % config.checkpoint_every == 0) {
                let path = dir.join(format!("ckpt-{step:08}.murmur"));
                save_checkpoint(backend, &model, config, &loader, step, &path)?;
                sink(&TrainEvent::Checkpoint { step, path });
            }
        }
    }
    if val_step == usize::MAX {
        val_loss = evaluate(backend, &mut model, &mut val_loader, config.val_batches)?;
    }
    let seconds = run_start.elapsed().as_secs_f64();
    let tokens = tokens_per_step * (config.steps.saturating_sub(start_step)) as u64;
    Ok(TrainSummary {
        steps: config.steps,
        train_loss: last_loss,
        val_loss,
        val_bits_per_byte: corpus
            .val_bytes_per_token()?
            .map(|bytes| f64::from(val_loss) / std::f64::consts::LN_2 / bytes),
        entropy_floor: corpus.entropy_floor(),
        ln_vocab: (corpus.vocab_size() as f64).ln(),
        tokens,
        seconds,
        tokens_per_s: tokens as f64 / seconds.max(1e-9),
    })
}

fn save_checkpoint<B: Backend>(
    backend: &B,
    model: &Gpt<B>,
    config: &TrainConfig,
    loader: &BatchLoader,
    step: usize,
    path: &std::path::Path,
) -> Result<(), TrainError> {
    let state = ResumeState { config: config.clone(), loader: loader.position() };
    let (m, v) = model.download_moments(backend);
    let ckpt = Checkpoint {
        meta: CheckpointMeta {
            model: config.model.clone(),
            step: step as u64,
            has_moments: true,
            train_state: serde_json::to_value(&state)
                .map_err(|e| TrainError::ResumeMismatch(e.to_string()))?,
        },
        params: model.download_params(backend),
        moments: Some((m, v)),
    };
    native::save(path, &ckpt)?;
    Ok(())
}

/// The newest `ckpt-*.murmur` in `dir`, if any.
pub fn latest_checkpoint(dir: &std::path::Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ckpt-") && n.ends_with(".murmur"))
        })
        .collect();
    found.sort();
    found.pop()
}
