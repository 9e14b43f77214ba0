//! `murmur sim`: flags of the DiLoCo / data-parallel simulator and its
//! progress printer (human lines, or `--json` lines whose last is the report).

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};

use murmur_protocol::{Codec, OuterOptimizer, RobustMode};

use super::device::{with_backend, DeviceArg};
use crate::data::{Corpus, DataSpec};
use crate::model::ModelConfig;
use crate::sim::{simulate, AheadFrom, Attack, InnerMoments, SimConfig, SimEvent, SimMode, SimPacing};
use crate::train::OptimizerConfig;

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Diloco,
    Ddp,
}

/// `--robust`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RobustArg {
    /// Token-weighted mean.
    None,
    /// Norm clipping to --clip-multiple × the median norm, then the mean.
    Clip,
    /// Coordinate-wise trimmed mean dropping --trim of each end.
    TrimmedMean,
    /// Coordinate-wise median.
    Median,
    /// Leave out deltas whose norm exceeds --clip-multiple × the median norm, then the mean.
    NormFilter,
}

/// `--outer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OuterArg {
    /// Nesterov momentum with --outer-lr and --outer-momentum.
    Nesterov,
    /// θ ← θ − mean Δ.
    Average,
}

/// `--ahead-from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AheadArg {
    Lookahead,
    Eager,
}

/// `--inner-moments`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MomentsArg {
    Keep,
    Reset,
}

/// Settings of `murmur sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Simulated workers (each trains on its own shard of the data).
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Model preset: tiny, small, gpt2-124m, or a Llama (llama-tiny … llama-1b; cpu or gpu).
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// Training data: `synthetic[:key=value,...]`, a text file or folder, or llm.c .bin shards.
    #[arg(long, default_value = "synthetic")]
    pub data: String,
    #[arg(long, value_enum, default_value = "diloco")]
    pub mode: ModeArg,
    /// H: inner steps per round (DDP: steps between validations).
    #[arg(long, default_value_t = 128)]
    pub inner_steps: usize,
    /// Delta codec: f32, f16, bf16, int8[-b<block>], int4[-b<block>], topk[-<ppm>ppm][-b<block>]
    /// or topkmask[-<ppm>ppm][-b<block>] (top-k as a bit mask with int4 values).
    #[arg(long, default_value = "int8")]
    pub codec: String,
    /// Total training tokens over all workers (equal for both modes).
    #[arg(long, default_value_t = 2_000_000)]
    pub tokens: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_enum, default_value = "none")]
    pub robust: RobustArg,
    /// Norm-clip threshold as a multiple of the median delta norm.
    #[arg(long, default_value_t = 2.0)]
    pub clip_multiple: f32,
    /// Fraction trimmed from each end by --robust trimmed-mean.
    #[arg(long, default_value_t = 0.25)]
    pub trim: f32,
    #[arg(long, value_enum, default_value = "nesterov")]
    pub outer: OuterArg,
    #[arg(long, default_value_t = 0.7)]
    pub outer_lr: f32,
    #[arg(long, default_value_t = 0.9)]
    pub outer_momentum: f32,
    /// Sequences per worker per step.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Sequence length (default: the model's context).
    #[arg(long)]
    pub seq: Option<usize>,
    /// Peak inner learning rate (warmup, then cosine over each worker's steps).
    #[arg(long, default_value_t = 3e-3)]
    pub lr: f32,
    /// Warmup steps of the inner schedule.
    #[arg(long, default_value_t = 30)]
    pub warmup: usize,
    /// Final learning rate as a fraction of --lr.
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_frac: f32,
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f32,
    /// Global gradient-norm clip of each inner step (0 disables).
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f32,
    /// Keep each worker's AdamW moments across rounds, or reset them every round.
    #[arg(long, value_enum, default_value = "keep")]
    pub inner_moments: MomentsArg,
    /// How many of the workers are adversarial (the last ones).
    #[arg(long, default_value_t = 0)]
    pub adversaries: usize,
    #[arg(long, value_enum, default_value = "sign-flip")]
    pub attack: Attack,
    /// Held-out batches of 16 sequences per evaluation.
    #[arg(long, default_value_t = 16)]
    pub val_batches: usize,
    /// Overlapped rounds: each worker trains the next round while a round
    /// is exchanged, and moves its progress onto the new canonical state
    /// when the exchange lands (docs/protocol.md §6.3).
    #[arg(long)]
    pub overlap: bool,
    /// With --overlap: how many inner steps of the next round the exchange
    /// takes (default: the whole round).
    #[arg(long, value_name = "STEPS")]
    pub exchange_steps: Option<usize>,
    /// With --overlap: the share of the progress made before the state
    /// lands that is kept on it (the node's rule: 0.5; 1 keeps it whole).
    #[arg(long, value_name = "SHARE", default_value_t = murmur_protocol::LANDING_KEEP)]
    pub landing_keep: f32,
    /// With --overlap: where the next round trains from until its state
    /// lands: the last canonical state carried by its outer momentum alone
    /// (the node's rule), or that state stepped with the worker's own delta.
    #[arg(long, value_enum, default_value = "lookahead")]
    pub ahead_from: AheadArg,
    /// Time-budgeted rounds: the inner phase lasts H full-speed steps of time,
    /// so a worker at speed v trains ⌊v·H⌋ steps, and deltas are normalised
    /// by their steps before they are combined.
    #[arg(long)]
    pub budget: bool,
    /// `K:V`: the last K honest workers run at speed V (0 < V ≤ 1), e.g. `2:0.25`.
    #[arg(long, value_name = "K:V")]
    pub slow: Option<String>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    /// One JSON object per line; the last line is the report.
    #[arg(long)]
    pub json: bool,
}

/// The simulation the flags describe.
pub fn resolve(a: &SimArgs) -> Result<(SimConfig, DataSpec)> {
    let model = ModelConfig::preset(&a.preset)?;
    let codec: Codec = a.codec.parse()?;
    for (name, v) in [("--lr", a.lr), ("--outer-lr", a.outer_lr)] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{name} must be a positive number (got {v})");
        }
    }
    if !(0.0..1.0).contains(&a.outer_momentum) {
        bail!("--outer-momentum must be in [0, 1) (got {})", a.outer_momentum);
    }
    if !(0.0..0.5).contains(&a.trim) {
        bail!("--trim must be in [0, 0.5) (got {})", a.trim);
    }
    if !(a.clip_multiple.is_finite() && a.clip_multiple > 0.0) {
        bail!("--clip-multiple must be a positive number (got {})", a.clip_multiple);
    }
    let robust = match a.robust {
        RobustArg::None => RobustMode::Mean,
        RobustArg::Clip => RobustMode::NormClip { multiple: a.clip_multiple },
        RobustArg::TrimmedMean => RobustMode::TrimmedMean { trim: a.trim },
        RobustArg::Median => RobustMode::Median,
        RobustArg::NormFilter => RobustMode::NormFilter { multiple: a.clip_multiple.max(1.0) },
    };
    let outer = match a.outer {
        OuterArg::Nesterov => OuterOptimizer::Nesterov { lr: a.outer_lr, momentum: a.outer_momentum },
        OuterArg::Average => OuterOptimizer::Average,
    };
    let optimizer = OptimizerConfig {
        lr: a.lr,
        min_lr_frac: a.min_lr_frac,
        warmup: a.warmup,
        weight_decay: a.weight_decay,
        grad_clip: a.grad_clip,
        ..OptimizerConfig::default()
    };
    let (slow_workers, slow_speed) = match &a.slow {
        None => (0, 1.0),
        Some(text) => {
            let parsed = text
                .split_once(':')
                .and_then(|(k, v)| Some((k.parse::<usize>().ok()?, v.parse::<f64>().ok()?)));
            match parsed {
                Some((k, v)) if v > 0.0 && v <= 1.0 => (k, v),
                _ => bail!("--slow takes K:V, K workers at speed V in (0, 1], e.g. 2:0.25 (got {text:?})"),
            }
        }
    };
    let config = SimConfig {
        seq: a.seq.unwrap_or(model.max_seq_len),
        model,
        mode: match a.mode {
            ModeArg::Diloco => SimMode::Diloco,
            ModeArg::Ddp => SimMode::Ddp,
        },
        workers: a.workers,
        inner_steps: a.inner_steps,
        codec,
        total_tokens: a.tokens,
        batch: a.batch,
        optimizer,
        inner_moments: match a.inner_moments {
            MomentsArg::Keep => InnerMoments::Keep,
            MomentsArg::Reset => InnerMoments::Reset,
        },
        outer,
        robust,
        adversaries: a.adversaries,
        attack: a.attack,
        seed: a.seed,
        val_batches: a.val_batches,
        pacing: SimPacing {
            overlapped: a.overlap,
            exchange_steps: a.exchange_steps,
            landing_keep: a.landing_keep,
            ahead_from: match a.ahead_from {
                AheadArg::Lookahead => AheadFrom::Lookahead,
                AheadArg::Eager => AheadFrom::Eager,
            },
            budgeted: a.budget,
            slow_workers,
            slow_speed,
        },
    };
    config.plan()?;
    Ok((config, DataSpec::parse(&a.data)?))
}

pub fn run(a: SimArgs) -> Result<()> {
    let (config, spec) = resolve(&a)?;
    let corpus = Corpus::open(&spec)?;
    let json = a.json;
    let chosen = super::device::choose(a.device, super::device::PrecisionArg::Fp32)?;
    let report = with_backend!(chosen chosen, |backend| {
        simulate(backend, &config, &corpus, |ev| print_event(ev, json))?
    });
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        let loss = report.val_loss.map_or("diverged".to_string(), |l| format!("{l:.4}"));
        println!(
            "done: {:?} {} H={} over {} rounds, {} tokens: val loss {loss}, {} bytes sent per worker, {} deltas rejected, {:.0} s",
            report.mode,
            report.codec,
            report.inner_steps,
            report.rounds,
            report.tokens,
            report.bytes_per_worker,
            report.rejected,
            report.seconds
        );
    }
    Ok(())
}

fn print_event(ev: &SimEvent, json: bool) {
    if json {
        if let Ok(s) = serde_json::to_string(ev) {
            println!("{s}");
        }
        return;
    }
    match ev {
        SimEvent::Start { mode, workers, adversaries, params, steps_per_worker, rounds, inner_steps, tokens, codec } => {
            println!(
                "sim: {mode:?}, {workers} workers ({adversaries} adversarial), {:.2}M parameters, codec {codec}",
                *params as f64 / 1e6
            );
            println!("     {steps_per_worker} steps per worker, {rounds} rounds of H={inner_steps}, {tokens} tokens in total");
        }
        SimEvent::Round { round, tokens, val_loss, train_loss, bytes_per_worker, rejected, seconds } => println!(
            "round {round:>5} | tokens {tokens:>9} | val {val_loss:.4} | train {train_loss:.4} | sent/worker {bytes_per_worker:>12} B | rejected {rejected} | {seconds:.0} s"
        ),
    }
}
