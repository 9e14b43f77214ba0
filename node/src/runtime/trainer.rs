//! The compute side of a node: one thread that owns the backend, the model
//! and the data loaders, and runs jobs in order — train H inner steps from a
//! state's parameters, or evaluate a state's validation loss. Jobs carry an
//! epoch; bumping the epoch cancels a training job between steps (the round
//! it was for has been left).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Instant;

use murmur_protocol::{RunSpec, StateId};
use tokio::sync::mpsc;

use crate::cli::device::Chosen;
use crate::compute::gpu::GpuBackend;
use crate::compute::{AdamWStep, Backend};
use crate::data::{BatchLoader, Corpus, DataSpec};
use crate::model::{param_specs, Gpt, ModelConfig};
use crate::train::trainer::evaluate;

/// Validation batches per evaluation.
pub const VAL_BATCHES: usize = 4;

/// Work for the trainer thread.
#[derive(Debug)]
pub enum Job {
    Train { epoch: u64, round: u64, base: StateId, params: Arc<Vec<f32>>, reset_moments: bool },
    Evaluate { round: u64, params: Arc<Vec<f32>> },
}

/// What a job produced.
#[derive(Debug)]
pub enum JobDone {
    Trained {
        round: u64,
        base: StateId,
        /// Pseudo-gradient θ_r − θ_local.
        delta: Vec<f32>,
        tokens: u64,
        train_loss: f32,
        /// Seconds spent in inner steps.
        secs: f64,
    },
    Cancelled {
        round: u64,
    },
    Evaluated {
        round: u64,
        val_loss: f32,
    },
    Failed(String),
}

/// Handle to the trainer thread.
pub struct TrainerHandle {
    jobs: std_mpsc::Sender<Job>,
    epoch: Arc<AtomicU64>,
    /// The device in words, e.g. "cpu (2 threads, avx2+fma)".
    pub device: String,
    /// The backend's short name: "cpu" or "gpu".
    pub backend: &'static str,
}

impl TrainerHandle {
    pub fn submit(&self, job: Job) {
        let _ = self.jobs.send(job);
    }
    /// Cancel running and queued training; returns the new epoch.
    pub fn cancel(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }
}

/// Start the trainer thread on the chosen backend (a GPU backend is opened
/// on the thread itself, which then owns it).
pub fn spawn(
    spec: &RunSpec,
    cfg: ModelConfig,
    shard: u64,
    device: Chosen,
    done: mpsc::UnboundedSender<JobDone>,
) -> Result<TrainerHandle, String> {
    let corpus =
        Corpus::open(&DataSpec::parse(&spec.data).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    if corpus.vocab_size() > cfg.vocab_size {
        return Err(format!(
            "the data's vocabulary ({}) exceeds the model's ({})",
            corpus.vocab_size(),
            cfg.vocab_size
        ));
    }
    let batch = spec.inner.batch_size.max(1) as usize;
    let seq = cfg.max_seq_len;
    let loader = corpus.train_loader(batch, seq, spec.seed, shard, 1 << 16).map_err(|e| e.to_string())?;
    let val = corpus.val_loader(batch, seq).map_err(|e| e.to_string())?;
    let (tx, rx) = std_mpsc::channel();
    let epoch = Arc::new(AtomicU64::new(0));
    let worker = Worker { spec: spec.clone(), cfg, loader, val, epoch: epoch.clone(), step: 0 };
    let (opened_tx, opened_rx) = std_mpsc::channel::<Result<String, String>>();
    std::thread::Builder::new()
        .name("murmur-trainer".into())
        .spawn(move || match device {
            Chosen::Cpu(precision) => match crate::compute::cpu::CpuBackend::from_env(precision) {
                Ok(backend) => {
                    let _ = opened_tx.send(Ok(backend.describe()));
                    worker.run(backend, rx, done)
                }
                Err(e) => {
                    let _ = opened_tx.send(Err(format!("opening the CPU backend: {e}")));
                }
            },
            Chosen::Gpu(choice) => match GpuBackend::new(choice) {
                Ok(backend) => {
                    let _ = opened_tx.send(Ok(backend.describe()));
                    worker.run(backend, rx, done)
                }
                Err(e) => {
                    let _ = opened_tx.send(Err(format!("opening the GPU: {e}")));
                }
            },
        })
        .map_err(|e| e.to_string())?;
    let described =
        opened_rx.recv().map_err(|_| "the trainer thread stopped while starting".to_string())??;
    let backend = match device {
        Chosen::Cpu(_) => "cpu",
        Chosen::Gpu(_) => "gpu",
    };
    Ok(TrainerHandle { jobs: tx, epoch, device: described, backend })
}

struct Worker {
    spec: RunSpec,
    cfg: ModelConfig,
    loader: BatchLoader,
    val: BatchLoader,
    epoch: Arc<AtomicU64>,
    /// Inner steps taken by this node (AdamW's step count and warmup).
    step: u32,
}

/// Split flat parameters into the model's tensors (canonical order).
pub fn split_params(cfg: &ModelConfig, flat: &[f32]) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    let mut at = 0;
    for s in param_specs(cfg) {
        let n = s.numel();
        out.push(flat.get(at..at + n).map(<[f32]>::to_vec).unwrap_or_default());
        at += n;
    }
    out
}

impl Worker {
    fn run<B: Backend>(
        mut self,
        backend: B,
        jobs: std_mpsc::Receiver<Job>,
        done: mpsc::UnboundedSender<JobDone>,
    ) {
        let mut model: Option<Gpt<B>> = None;
        while let Ok(job) = jobs.recv() {
            let result = match job {
                Job::Train { epoch, round, base, params, reset_moments } => {
                    if epoch != self.epoch.load(Ordering::SeqCst) {
                        JobDone::Cancelled { round }
                    } else {
                        self.train(&backend, &mut model, epoch, round, base, &params, reset_moments)
                    }
                }
                Job::Evaluate { round, params } => {
                    let m = self.model_with(&backend, &mut model, &params);
                    match evaluate(&backend, m, &mut self.val, VAL_BATCHES) {
                        Ok(val_loss) => JobDone::Evaluated { round, val_loss },
                        Err(e) => JobDone::Failed(e.to_string()),
                    }
                }
            };
            if done.send(result).is_err() {
                break;
            }
        }
    }

    fn model_with<'m, B: Backend>(
        &self,
        backend: &B,
        model: &'m mut Option<Gpt<B>>,
        flat: &[f32],
    ) -> &'m mut Gpt<B> {
        let values = split_params(&self.cfg, flat);
        let m = model.get_or_insert_with(|| Gpt::new(backend, self.cfg.clone(), &values, 1));
        m.upload_params(backend, &values);
        m
    }

    #[allow(clippy::too_many_arguments)]
    fn train<B: Backend>(
        &mut self,
        backend: &B,
        model: &mut Option<Gpt<B>>,
        epoch: u64,
        round: u64,
        base: StateId,
        params: &[f32],
        reset_moments: bool,
    ) -> JobDone {
        let inner = self.spec.inner;
        let h = self.spec.inner_steps;
        let m = self.model_with(backend, model, params);
        if reset_moments {
            m.reset_moments(backend);
        }
        let t0 = Instant::now();
        let mut loss_sum = 0f64;
        let mut tokens = 0u64;
        for _ in 0..h {
            if self.epoch.load(Ordering::SeqCst) != epoch {
                return JobDone::Cancelled { round };
            }
            let b = match self.loader.next_batch() {
                Ok(b) => b,
                Err(e) => return JobDone::Failed(e.to_string()),
            };
            self.step = self.step.saturating_add(1);
            let warm = inner.warmup_steps.max(1) as f32;
            let lr = inner.lr * (self.step as f32 / warm).min(1.0);
            m.zero_grad(backend);
            m.forward(backend, &b.inputs, Some(&b.targets), b.batch, b.seq);
            m.backward(backend, 1);
            let hp = AdamWStep {
                lr,
                beta1: inner.beta1,
                beta2: inner.beta2,
                eps: inner.eps,
                weight_decay: inner.weight_decay,
                step: self.step,
            };
            m.optimizer_step(backend, hp, inner.grad_clip);
            let loss = m.read_stats(backend).mean_loss();
            if !loss.is_finite() {
                return JobDone::Failed(format!("training diverged in round {round}: loss {loss}"));
            }
            loss_sum += f64::from(loss);
            tokens += (b.batch * b.seq) as u64;
        }
        let secs = t0.elapsed().as_secs_f64();
        let local: Vec<f32> = m.download_params(backend).into_iter().flatten().collect();
        let delta = params.iter().zip(&local).map(|(a, b)| a - b).collect();
        JobDone::Trained {
            round,
            base,
            delta,
            tokens,
            train_loss: (loss_sum / f64::from(h.max(1))) as f32,
            secs,
        }
    }
}
