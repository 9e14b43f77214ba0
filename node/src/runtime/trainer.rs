//! The compute side of a node: one thread that owns the backend, the model
//! and the data loaders, and runs jobs in order — train H inner steps from a
//! state's parameters, or evaluate a state's validation loss. Jobs carry an
//! epoch; bumping the epoch cancels a training job between steps (the round
//! it was for has been left).
//!
//! A panic in a job (a backend assert, say) is caught and reported as
//! `JobDone::Panicked`, and the thread ends: the node starts a new one from
//! the same `TrainerSetup` (see `runtime::node`), or stops with an error
//! when that keeps happening.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use murmur_protocol::{land, RunSpec, StateId, TrainingState, LANDING_KEEP};
use tokio::sync::mpsc;

use crate::compute::device::{on_backend, Chosen};
use crate::compute::{on_worker, AdamWStep, Backend};
use crate::data::{Batch, BatchLoader, Corpus, DataSpec};
use crate::model::{Gpt, ModelConfig};
use crate::train::trainer::evaluate;

use super::dataset::DatasetFeed;

pub mod overlap;

/// Validation batches per evaluation (4,096 tokens with batch 8 and
/// 64-token windows).
pub const VAL_BATCHES: usize = 8;

/// Work for the trainer thread.
#[derive(Debug)]
pub enum Job {
    /// Train `round` from `state`. `ahead`: an overlapped run's next round,
    /// started before `round` has opened from the last round's state carried
    /// by its outer momentum (`lookahead_params`); the round's own state
    /// lands there once it opens.
    Train {
        epoch: u64,
        round: u64,
        base: StateId,
        state: Arc<TrainingState>,
        reset_moments: bool,
        overlapped: Option<Arc<Landing>>,
    },
    Evaluate {
        round: u64,
        state: Arc<TrainingState>,
    },
}

/// What a job produced.
#[derive(Debug)]
pub enum JobDone {
    Trained {
        round: u64,
        base: StateId,
        /// Pseudo-gradient: the parameters trained from minus θ_local.
        delta: Vec<f32>,
        tokens: u64,
        train_loss: f32,
        /// Seconds spent in inner steps.
        secs: f64,
        /// The job was an overlapped run's training ahead (`Job::Train::overlapped`).
        overlapped: bool,
        /// Seconds it waited half-way for its round's state (not in `secs`).
        waited_secs: f64,
        /// Seconds between the previous training job's last inner step and
        /// this job's first (`None` for the thread's first job): the time
        /// the node's round loop took to hand the trainer its next round.
        idle_before_secs: Option<f64>,
        /// Training ahead: the steps taken before the round's state landed
        /// (`None`: it landed after the last step, or never).
        landed_after: Option<u32>,
    },
    Cancelled {
        round: u64,
    },
    /// An evaluation of `round`'s state: its validation loss, or why
    /// there is none.
    Evaluated {
        round: u64,
        val_loss: Result<f32, String>,
    },
    Failed(String),
    /// A job panicked (the message); the thread has ended.
    Panicked(String),
}

/// Where an overlapped run's training ahead learns that its round has
/// opened: the round's canonical state. Before its next step the job moves
/// the progress it has made onto that state (θ ← S + (θ − start)) and trains
/// on from there (docs/protocol.md §6.3). A job that has taken half its
/// steps (or spent half its budget) with nothing landed waits for it: more
/// of a round trained from a stale start costs more loss than the wait.
#[derive(Debug, Default)]
pub struct Landing {
    slot: Mutex<Landed>,
    landed: Condvar,
}

#[derive(Debug, Default)]
enum Landed {
    #[default]
    Waiting,
    On(Arc<TrainingState>),
    /// Moved onto it: a job lands once.
    Taken,
}

impl Landing {
    /// The round opened on `state` (the first call counts).
    pub fn land(&self, state: Arc<TrainingState>) {
        let mut slot = self.slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if matches!(*slot, Landed::Waiting) {
            *slot = Landed::On(state);
            self.landed.notify_all();
        }
    }
    /// The landed state, once: at once, or after waiting up to `wait`.
    fn take(&self, wait: Duration) -> Option<Arc<TrainingState>> {
        let slot = self.slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (mut slot, _) = self
            .landed
            .wait_timeout_while(slot, wait, |s| matches!(s, Landed::Waiting))
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match std::mem::take(&mut *slot) {
            Landed::On(state) => {
                *slot = Landed::Taken;
                Some(state)
            }
            other => {
                *slot = other;
                None
            }
        }
    }
}

/// How long the trainer thread's current training job has been in inner
/// steps (for the time in inner steps reported while a job is running).
#[derive(Debug)]
pub struct BusyClock {
    origin: Instant,
    /// Microseconds after `origin` + 1 when the job's current stretch of
    /// inner steps started; 0 when not in inner steps.
    since_us: AtomicU64,
    /// The job's inner-step time before its current stretch (a job that
    /// waits half-way for its state has two stretches).
    carried_us: AtomicU64,
}

impl BusyClock {
    fn new() -> Self {
        Self { origin: Instant::now(), since_us: AtomicU64::new(0), carried_us: AtomicU64::new(0) }
    }
    /// Seconds the running training job has spent in inner steps (0 when
    /// idle; a wait for the state to land is not counted, and what came
    /// before it is).
    pub fn running_secs(&self) -> f64 {
        let carried = self.carried_us.load(Ordering::SeqCst) as f64;
        let current = match self.since_us.load(Ordering::SeqCst) {
            0 => 0.0,
            t => (self.origin.elapsed().as_micros() as f64 - (t - 1) as f64).max(0.0),
        };
        (carried + current) / 1e6
    }
}

/// Marks a stretch of the job's inner steps from its creation until it is
/// paused (the job goes on later) or dropped (the job ended).
struct Busy<'a>(&'a BusyClock);

impl<'a> Busy<'a> {
    fn start(clock: &'a BusyClock) -> Self {
        clock.since_us.store(clock.origin.elapsed().as_micros() as u64 + 1, Ordering::SeqCst);
        Self(clock)
    }

    /// End this stretch but keep its time for the job's running total.
    fn pause(self) {
        let clock = self.0;
        std::mem::forget(self);
        let since = clock.since_us.swap(0, Ordering::SeqCst);
        if since > 0 {
            let stretch = (clock.origin.elapsed().as_micros() as u64).saturating_sub(since - 1);
            clock.carried_us.fetch_add(stretch, Ordering::SeqCst);
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.since_us.store(0, Ordering::SeqCst);
        self.0.carried_us.store(0, Ordering::SeqCst);
    }
}

/// Handle to the trainer thread.
pub struct TrainerHandle {
    jobs: std_mpsc::Sender<Job>,
    epoch: Arc<AtomicU64>,
    /// Whether (and since when) a training job is running.
    pub busy: Arc<BusyClock>,
    /// The device in words, e.g. "cpu (2 threads, avx2+fma)".
    pub device: String,
    /// The backend's short name: "cpu", "gpu" or "cuda".
    pub backend: &'static str,
}

impl TrainerHandle {
    /// Queue a job; false when the trainer thread has ended.
    pub fn submit(&self, job: Job) -> bool {
        self.jobs.send(job).is_ok()
    }
    /// Cancel running and queued training; returns the new epoch.
    pub fn cancel(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::SeqCst) + 1
    }
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }
}

/// Where the trainer's batches come from.
enum TrainData {
    /// The synthetic corpus: an endless per-node stream.
    Stream { loader: Box<BatchLoader>, val: Box<BatchLoader> },
    /// A content-addressed dataset: each round's assigned windows.
    Dataset(Arc<DatasetFeed>),
}

/// What a trainer thread is started from (kept to start it again).
#[derive(Clone)]
pub struct TrainerSetup {
    pub spec: RunSpec,
    pub cfg: ModelConfig,
    /// The node's data shard (synthetic data).
    pub shard: u64,
    pub device: Chosen,
    /// The run's dataset, when it names one (else the spec's data must be synthetic).
    pub feed: Option<Arc<DatasetFeed>>,
    /// Activation checkpointing (Llama; `--checkpointing`).
    pub checkpointing: bool,
}

/// The corpus of a run whose data is synthetic (generated, not fetched).
pub fn stream_corpus(spec: &RunSpec, cfg: &ModelConfig) -> Result<Corpus, String> {
    let data = match spec.data_ref().map_err(|e| e.to_string())? {
        murmur_protocol::DataRef::Synthetic(_) => DataSpec::parse(&spec.data).map_err(|e| e.to_string())?,
        murmur_protocol::DataRef::Dataset { id, .. } => return Err(format!("dataset {id} has no feed")),
    };
    let corpus = Corpus::open(&data).map_err(|e| e.to_string())?;
    if corpus.vocab_size() > cfg.vocab_size {
        return Err(format!(
            "the data's vocabulary ({}) exceeds the model's ({})",
            corpus.vocab_size(),
            cfg.vocab_size
        ));
    }
    Ok(corpus)
}

/// Start the trainer thread on the chosen backend (a GPU backend is opened
/// on the thread itself, which then owns it). With a dataset feed the
/// batches come from it; otherwise the spec's data must be synthetic.
pub fn spawn(setup: &TrainerSetup, done: mpsc::UnboundedSender<JobDone>) -> Result<TrainerHandle, String> {
    let TrainerSetup { spec, cfg, shard, device, feed, checkpointing } = setup.clone();
    let spec = &spec;
    let batch = spec.inner.batch_size.max(1) as usize;
    let seq = cfg.max_seq_len;
    let data = match feed {
        Some(feed) => TrainData::Dataset(feed),
        None => {
            let corpus = stream_corpus(spec, &cfg)?;
            let loader =
                corpus.train_loader(batch, seq, spec.seed, shard, 1 << 16).map_err(|e| e.to_string())?;
            let val = corpus.val_loader(batch, seq).map_err(|e| e.to_string())?;
            TrainData::Stream { loader: Box::new(loader), val: Box::new(val) }
        }
    };
    let (tx, rx) = std_mpsc::channel();
    let epoch = Arc::new(AtomicU64::new(0));
    let busy = Arc::new(BusyClock::new());
    let worker = Worker {
        spec: spec.clone(),
        cfg,
        data,
        epoch: epoch.clone(),
        step: 0,
        busy: busy.clone(),
        last_steps_end: None,
        checkpointing,
    };
    let (opened_tx, opened_rx) = std_mpsc::channel::<Result<String, String>>();
    std::thread::Builder::new()
        .name("murmur-trainer".into())
        .spawn(move || {
            on_backend!(
                device,
                |backend| {
                    // The host was checked before the run started; a GPU's
                    // own memory only now that it is open.
                    if !matches!(device, Chosen::Cpu(_)) {
                        let shape = (batch, seq);
                        if let Err(e) =
                            crate::model::check_fits(&backend, &worker.cfg, shape, worker.checkpointing)
                        {
                            let _ = opened_tx.send(Err(e));
                            return;
                        }
                    }
                    let _ = opened_tx.send(Ok(backend.describe()));
                    worker.run(backend, rx, done)
                },
                |e| {
                    let _ = opened_tx.send(Err(format!("opening the {} backend: {e}", device.name())));
                }
            )
        })
        .map_err(|e| e.to_string())?;
    let described =
        opened_rx.recv().map_err(|_| "the trainer thread stopped while starting".to_string())??;
    let backend = device.name();
    Ok(TrainerHandle { jobs: tx, epoch, busy, device: described, backend })
}

struct Worker {
    spec: RunSpec,
    cfg: ModelConfig,
    data: TrainData,
    epoch: Arc<AtomicU64>,
    /// Inner steps taken by this node (AdamW's step count and warmup).
    step: u32,
    busy: Arc<BusyClock>,
    /// When the last training job's inner steps ended.
    last_steps_end: Option<Instant>,
    checkpointing: bool,
}

/// Mean loss of `model` over `batches` (no parameter update).
fn evaluate_batches<B: Backend>(backend: &B, model: &mut Gpt<B>, batches: &[Batch]) -> Result<f32, String> {
    if batches.is_empty() {
        return Err("no validation batches".into());
    }
    let mut sum = 0f64;
    for b in batches {
        model.zero_grad(backend);
        model.forward(backend, &b.inputs, Some(&b.targets), b.batch, b.seq);
        sum += f64::from(model.read_stats(backend).mean_loss());
    }
    Ok((sum / batches.len() as f64) as f32)
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
            let ran = catch_unwind(AssertUnwindSafe(|| match job {
                Job::Train { epoch, round, base, state, reset_moments, overlapped } => {
                    if epoch != self.epoch.load(Ordering::SeqCst) {
                        JobDone::Cancelled { round }
                    } else {
                        let job = TrainJob { epoch, round, base, reset_moments, overlapped };
                        if job.overlapped.is_some() {
                            // Training ahead starts from the state's lookahead.
                            match murmur_protocol::lookahead_params(self.spec.outer, &state) {
                                Ok(start) => self.train(&backend, &mut model, job, &start),
                                Err(e) => {
                                    JobDone::Failed(format!("the lookahead of round {round}'s start: {e}"))
                                }
                            }
                        } else {
                            self.train(&backend, &mut model, job, &state.params)
                        }
                    }
                }
                Job::Evaluate { round, state } => self.evaluate(&backend, &mut model, round, &state.params),
            }));
            match ran {
                Ok(result) => {
                    if done.send(result).is_err() {
                        break;
                    }
                }
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic without a message".into());
                    let _ = done.send(JobDone::Panicked(what));
                    break;
                }
            }
        }
    }

    fn model_with<'m, B: Backend>(
        &self,
        backend: &B,
        model: &'m mut Option<Gpt<B>>,
        flat: &[f32],
    ) -> &'m mut Gpt<B> {
        match model {
            Some(m) => {
                m.upload_params_flat(backend, flat);
                m
            }
            None => {
                let values = crate::model::split_params(&self.cfg, flat);
                let m = model.insert(Gpt::from_values(backend, self.cfg.clone(), values, 1));
                m.set_checkpointing(self.checkpointing);
                m
            }
        }
    }

    fn evaluate<B: Backend>(
        &mut self,
        backend: &B,
        model: &mut Option<Gpt<B>>,
        round: u64,
        params: &[f32],
    ) -> JobDone {
        let (batch, seq) = (self.spec.inner.batch_size.max(1) as usize, self.cfg.max_seq_len);
        let val_batches = match &self.data {
            TrainData::Dataset(feed) => match feed.val_batches(batch, seq, VAL_BATCHES) {
                Ok(b) => Some(b),
                Err(e) => return JobDone::Evaluated { round, val_loss: Err(e) },
            },
            TrainData::Stream { .. } => None,
        };
        let m = self.model_with(backend, model, params);
        let result = match (&mut self.data, val_batches) {
            (_, Some(batches)) => evaluate_batches(backend, m, &batches),
            (TrainData::Stream { val, .. }, None) => {
                evaluate(backend, m, val, VAL_BATCHES).map_err(|e| e.to_string())
            }
            (TrainData::Dataset(_), None) => Err("no validation batches".to_string()),
        };
        JobDone::Evaluated { round, val_loss: result }
    }

    /// Up to H inner steps from `params`; with a time budget (RunSpec
    /// pacing) the steps stop once the budget is spent (at least one runs,
    /// see `budget_spent`).
    fn train<B: Backend>(
        &mut self,
        backend: &B,
        model: &mut Option<Gpt<B>>,
        job: TrainJob,
        params: &[f32],
    ) -> JobDone {
        let TrainJob { epoch, round, base, reset_moments, overlapped } = job;
        // What the delta is taken against: the start, or the landed state.
        let mut origin: Option<Arc<TrainingState>> = None;
        let mut landed_after = None;
        // Time spent waiting for the state to land (not in inner steps).
        let mut waited = Duration::ZERO;
        let inner = self.spec.inner;
        let h = self.spec.inner_steps;
        let budget = self
            .spec
            .pacing
            .is_budgeted()
            .then(|| std::time::Duration::from_millis(u64::from(self.spec.pacing.inner_budget_ms)));
        let mut round_batches = match &self.data {
            TrainData::Dataset(feed) => {
                let batch = inner.batch_size.max(1) as usize;
                match feed.round_batches(round, batch, self.cfg.max_seq_len, h as usize) {
                    Ok(b) => Some(b.into_iter()),
                    Err(e) => return JobDone::Failed(e),
                }
            }
            TrainData::Stream { .. } => None,
        };
        let m = self.model_with(backend, model, params);
        if reset_moments {
            m.reset_moments(backend);
        }
        let busy = self.busy.clone();
        let mut busy_now = Some(Busy::start(&busy));
        let t0 = Instant::now();
        let idle_before_secs = self.last_steps_end.map(|t| t0.duration_since(t).as_secs_f64());
        let mut loss_sum = 0f64;
        let mut tokens = 0u64;
        let mut steps = 0u32;
        for _ in 0..h {
            if self.epoch.load(Ordering::SeqCst) != epoch {
                return JobDone::Cancelled { round };
            }
            let spent = t0.elapsed().saturating_sub(waited);
            if budget.is_some_and(|b| steps > 0 && budget_spent(spent, steps, b)) {
                break;
            }
            if let Some(landing) = overlapped.as_deref().filter(|_| origin.is_none()) {
                let mut landed = landing.take(Duration::ZERO);
                if landed.is_none() && (steps >= (h / 2).max(1) || budget.is_some_and(|b| spent >= b / 2)) {
                    // Half-way with nothing landed: idle (not in inner
                    // steps) until the round's state lands.
                    if let Some(stretch) = busy_now.take() {
                        stretch.pause();
                    }
                    let from = Instant::now();
                    while landed.is_none() {
                        if self.epoch.load(Ordering::SeqCst) != epoch {
                            return JobDone::Cancelled { round };
                        }
                        landed = landing.take(Duration::from_millis(50));
                    }
                    waited += from.elapsed();
                    busy_now = Some(Busy::start(&busy));
                }
                if let Some(landed) = landed {
                    if landed.params.len() != params.len() {
                        return JobDone::Failed(format!(
                            "round {round}'s state has {} parameters, the model {}",
                            landed.params.len(),
                            params.len()
                        ));
                    }
                    let mut local = m.download_params_flat(backend);
                    land(&mut local, &landed.params, params, LANDING_KEEP);
                    m.upload_params_flat(backend, &local);
                    origin = Some(landed);
                    landed_after = Some(steps);
                }
            }
            let step_started = Instant::now();
            injected_panic(round);
            injected_delay();
            let next = match (&mut round_batches, &mut self.data) {
                (Some(batches), _) => batches.next().ok_or_else(|| "the round's batches ran out".to_string()),
                (None, TrainData::Stream { loader, .. }) => loader.next_batch().map_err(|e| e.to_string()),
                (None, TrainData::Dataset(_)) => Err("no batches for the round".to_string()),
            };
            let b = match next {
                Ok(b) => b,
                Err(e) => return JobDone::Failed(e),
            };
            self.step = self.step.saturating_add(1);
            let warm = inner.warmup_steps.max(1) as f32;
            let lr = inner.lr * (self.step as f32 / warm).min(1.0);
            let hp = AdamWStep {
                lr,
                beta1: inner.beta1,
                beta2: inner.beta2,
                eps: inner.eps,
                weight_decay: inner.weight_decay,
                step: self.step,
            };
            let loss = on_worker::<B, _>(|| {
                m.zero_grad(backend);
                m.forward(backend, &b.inputs, Some(&b.targets), b.batch, b.seq);
                m.backward(backend, 1);
                m.optimizer_step(backend, hp, inner.grad_clip);
                m.read_stats(backend).mean_loss()
            });
            if !loss.is_finite() {
                return JobDone::Failed(format!("training diverged in round {round}: loss {loss}"));
            }
            loss_sum += f64::from(loss);
            tokens += (b.batch * b.seq) as u64;
            steps += 1;
            throttle(step_started.elapsed());
        }
        drop(busy_now);
        self.last_steps_end = Some(Instant::now());
        let secs = t0.elapsed().saturating_sub(waited).as_secs_f64();
        // The delta is computed in the downloaded vector, without a copy.
        let mut delta = m.download_params_flat(backend);
        for (d, a) in delta.iter_mut().zip(origin.as_ref().map_or(params, |s| &s.params[..])) {
            *d = a - *d;
        }
        JobDone::Trained {
            round,
            base,
            delta,
            tokens,
            train_loss: (loss_sum / f64::from(steps.max(1))) as f32,
            secs,
            overlapped: overlapped.is_some(),
            waited_secs: waited.as_secs_f64(),
            idle_before_secs,
            landed_after,
        }
    }
}

/// What a training job is, besides the parameters it starts from.
#[derive(Debug, Clone)]
struct TrainJob {
    epoch: u64,
    round: u64,
    base: StateId,
    reset_moments: bool,
    overlapped: Option<Arc<Landing>>,
}

/// The compute speed a node emulates: `MURMUR_COMPUTE_SPEED=V` (0 < V < 1)
/// makes every inner step take 1/V times as long as it did, by sleeping
/// (1/V − 1)× its time after it. Used to make a testnet's nodes unequal
/// (`murmur testnet --slow`); a sleep counts as time in inner steps, as a
/// slower device's would.
fn throttle(step: std::time::Duration) {
    static SPEED: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let v = *SPEED.get_or_init(|| {
        std::env::var("MURMUR_COMPUTE_SPEED")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| *v > 0.0 && *v < 1.0)
            .unwrap_or(1.0)
    });
    if v < 1.0 {
        std::thread::sleep(step.mul_f64(1.0 / v - 1.0).min(std::time::Duration::from_secs(600)));
    }
}

/// Fault injection for the runtime's tests: `MURMUR_TEST_TRAINER_PANICS=R:N`
/// makes the first N training steps taken at round R or later panic (one per
/// trainer thread, as a backend assert would), so a test can watch the node
/// restart its trainer (N small) or stop with an error (N large).
fn injected_panic(round: u64) {
    static PANICKED: AtomicU32 = AtomicU32::new(0);
    let Ok(v) = std::env::var("MURMUR_TEST_TRAINER_PANICS") else { return };
    let Some((from, count)) = v.split_once(':') else { return };
    let (Ok(from), Ok(count)) = (from.parse::<u64>(), count.parse::<u32>()) else { return };
    if round >= from && PANICKED.fetch_add(1, Ordering::SeqCst) < count {
        panic!("injected trainer panic (MURMUR_TEST_TRAINER_PANICS={v}) at round {round}");
    }
}

/// Fault injection for the runtime's tests: `MURMUR_TEST_STEP_DELAY_MS=N`
/// sleeps N ms before every inner step, making this node a slow one (so a
/// test can rely on it still training while another restarts).
fn injected_delay() {
    static DELAY_MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let ms = *DELAY_MS.get_or_init(|| {
        std::env::var("MURMUR_TEST_STEP_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
    });
    if ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(ms.min(60_000)));
    }
}

/// Trainer restarts allowed within `TRAINER_RESTART_WINDOW` before the node
/// gives up and stops with an error.
pub const MAX_TRAINER_RESTARTS: usize = 3;
pub const TRAINER_RESTART_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

/// The restarts a node's trainer has had (both round loops keep one).
#[derive(Debug, Default)]
pub struct RestartBudget {
    recent: std::collections::VecDeque<std::time::Instant>,
    /// Restarts since the node started (telemetry, metrics).
    pub total: u32,
}

impl RestartBudget {
    /// The trainer died (`why`): record a restart at `now` and report it, or
    /// the error to stop with when `MAX_TRAINER_RESTARTS` were used within
    /// `TRAINER_RESTART_WINDOW`.
    pub fn take(
        &mut self,
        now: std::time::Instant,
        why: &str,
        out: super::report::Reporter,
    ) -> Result<(), super::RuntimeError> {
        while self.recent.front().is_some_and(|t| now.duration_since(*t) > TRAINER_RESTART_WINDOW) {
            self.recent.pop_front();
        }
        if self.recent.len() >= MAX_TRAINER_RESTARTS {
            out.event("trainer_failed", serde_json::json!({ "reason": why, "restarts": self.recent.len() }));
            return Err(super::RuntimeError::Trainer(format!(
                "the trainer died {} times within {} s (last: {why}); stopping. Check the device \
                 (try --device cpu) and the log above",
                self.recent.len() + 1,
                TRAINER_RESTART_WINDOW.as_secs()
            )));
        }
        self.recent.push_back(now);
        self.total = self.total.saturating_add(1);
        tracing::error!("trainer died: {why}; starting it again");
        out.event("trainer_restarted", serde_json::json!({ "reason": why, "restarts": self.recent.len() }));
        Ok(())
    }
}

/// A started trainer with the receiver of its results (or why it failed).
pub type Started = Result<(TrainerHandle, tokio::sync::mpsc::UnboundedReceiver<JobDone>), String>;

/// Start a trainer from `setup` on the blocking pool and hand it to `done`.
pub fn respawn(setup: TrainerSetup, done: impl FnOnce(Started) + Send + 'static) {
    tokio::task::spawn_blocking(move || {
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
        done(spawn(&setup, done_tx).map(|h| (h, done_rx)));
    });
}

/// Whether a time-budgeted phase that has spent `spent` in `steps` (> 0)
/// steps stops before its next step: when that step, at the mean step time
/// so far, would end more than half a step past `budget`. The phase then
/// ends within about half a step of the budget either way, instead of up to
/// a whole step past it — which, on a slow node whose steps take seconds,
/// would hold up the round its delta is awaited in.
pub(crate) fn budget_spent(spent: Duration, steps: u32, budget: Duration) -> bool {
    let mean_step = spent / steps.max(1);
    spent + mean_step / 2 >= budget
}

#[cfg(test)]
mod tests;
