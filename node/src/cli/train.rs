//! `murmur train`: flags, the optional TOML config file they override, and
//! the progress printer (human lines or `--json` objects).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Deserialize;

use super::device::{with_backend, DeviceArg, PrecisionArg};
use crate::checkpoint::native;
use crate::data::{Corpus, DataSpec, TokenizerKind};
use crate::model::ModelConfig;
use crate::train::trainer::latest_checkpoint;
use crate::train::{train, OptimizerConfig, TrainConfig, TrainEvent};

/// Settings of `murmur train`. Each flag may also come from the config file
/// (same name, snake_case) or from the environment (`MURMUR_<NAME>`); a flag
/// on the command line wins over the environment, which wins over the file.
#[derive(Args, Debug, Default)]
pub struct TrainArgs {
    /// TOML file with any of the settings below.
    #[arg(long, env = "MURMUR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Model preset: tiny, small or gpt2-124m.
    #[arg(long, env = "MURMUR_PRESET")]
    pub preset: Option<String>,
    /// Training data: `synthetic[:key=value,...]`, a text file or folder, or llm.c .bin shards.
    #[arg(long, env = "MURMUR_DATA")]
    pub data: Option<String>,
    /// Tokenizer for text data: byte or gpt2.
    #[arg(long, env = "MURMUR_TOKENIZER")]
    pub tokenizer: Option<String>,
    #[arg(long, env = "MURMUR_STEPS")]
    pub steps: Option<usize>,
    #[arg(long, env = "MURMUR_BATCH")]
    pub batch: Option<usize>,
    /// Sequence length (at most the model's context).
    #[arg(long, env = "MURMUR_SEQ")]
    pub seq: Option<usize>,
    /// Micro-batches accumulated per optimizer step.
    #[arg(long, env = "MURMUR_GRAD_ACCUM")]
    pub grad_accum: Option<usize>,
    /// Peak learning rate.
    #[arg(long, env = "MURMUR_LR")]
    pub lr: Option<f32>,
    /// Warmup steps.
    #[arg(long, env = "MURMUR_WARMUP")]
    pub warmup: Option<usize>,
    #[arg(long, env = "MURMUR_WEIGHT_DECAY")]
    pub weight_decay: Option<f32>,
    /// Global gradient-norm clip (0 disables).
    #[arg(long, env = "MURMUR_GRAD_CLIP")]
    pub grad_clip: Option<f32>,
    #[arg(long, env = "MURMUR_SEED")]
    pub seed: Option<u64>,
    /// Validate every N steps (0: only at the end).
    #[arg(long, env = "MURMUR_VAL_EVERY")]
    pub val_every: Option<usize>,
    #[arg(long, env = "MURMUR_VAL_BATCHES")]
    pub val_batches: Option<usize>,
    /// Directory for checkpoints.
    #[arg(long, env = "MURMUR_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Save a checkpoint every N steps (0: only at the end).
    #[arg(long, env = "MURMUR_CHECKPOINT_EVERY")]
    pub checkpoint_every: Option<usize>,
    /// Resume from the newest checkpoint in --checkpoint-dir, if there is one.
    #[arg(long)]
    pub resume: bool,
    /// Resume from this checkpoint file.
    #[arg(long)]
    pub resume_from: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto", env = "MURMUR_DEVICE")]
    pub device: DeviceArg,
    /// GEMM input precision: bf16 (CPU backend) keeps fp32 master weights,
    /// optimizer state and checkpoints.
    #[arg(long, value_enum, default_value = "fp32", env = "MURMUR_PRECISION")]
    pub precision: PrecisionArg,
    /// Print one JSON object per line instead of human-readable progress.
    #[arg(long)]
    pub json: bool,
}

/// The config file: the same settings as the flags.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct TrainFile {
    preset: Option<String>,
    data: Option<String>,
    tokenizer: Option<String>,
    steps: Option<usize>,
    batch: Option<usize>,
    seq: Option<usize>,
    grad_accum: Option<usize>,
    lr: Option<f32>,
    warmup: Option<usize>,
    weight_decay: Option<f32>,
    grad_clip: Option<f32>,
    seed: Option<u64>,
    val_every: Option<usize>,
    val_batches: Option<usize>,
    checkpoint_dir: Option<PathBuf>,
    checkpoint_every: Option<usize>,
}

fn read_config_file(path: &Path) -> Result<TrainFile> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "config file {} is malformed: {}\nexpected TOML keys among: preset, data, tokenizer, steps, batch, seq, \
             grad_accum, lr, warmup, weight_decay, grad_clip, seed, val_every, val_batches, checkpoint_dir, checkpoint_every",
            path.display(),
            e.to_string().trim_end()
        )
    })
}

/// Resolved settings: flags over environment over file over defaults.
pub fn resolve(args: &TrainArgs) -> Result<(TrainConfig, DataSpec)> {
    let file = match &args.config {
        Some(p) => read_config_file(p)?,
        None => TrainFile::default(),
    };
    macro_rules! pick {
        ($f:ident, $default:expr) => {
            args.$f.clone().or(file.$f.clone()).unwrap_or($default)
        };
    }
    let preset = pick!(preset, "tiny".to_string());
    let model = ModelConfig::preset(&preset)?;
    let mut spec = DataSpec::parse(&pick!(data, "synthetic".to_string()))?;
    if let Some(tok) = args.tokenizer.clone().or(file.tokenizer.clone()) {
        let kind: TokenizerKind = tok.parse()?;
        spec = spec.with_tokenizer(kind);
    }
    let d = OptimizerConfig::default();
    let steps = pick!(steps, 600);
    let optimizer = OptimizerConfig {
        lr: pick!(lr, d.lr),
        warmup: pick!(warmup, d.warmup.min(steps / 10)),
        weight_decay: pick!(weight_decay, d.weight_decay),
        grad_clip: pick!(grad_clip, d.grad_clip),
        ..d
    };
    let seq = pick!(seq, model.max_seq_len.min(64));
    let config = TrainConfig {
        steps,
        batch: pick!(batch, 8),
        seq,
        grad_accum: pick!(grad_accum, 1),
        optimizer,
        seed: pick!(seed, 1),
        val_every: pick!(val_every, 100),
        val_batches: pick!(val_batches, 8),
        checkpoint_every: pick!(checkpoint_every, 0),
        checkpoint_dir: args.checkpoint_dir.clone().or(file.checkpoint_dir.clone()),
        model,
    };
    if config.batch == 0 || config.seq == 0 || config.steps == 0 {
        bail!("--batch, --seq and --steps must each be at least 1");
    }
    if !(config.optimizer.lr.is_finite() && config.optimizer.lr > 0.0) {
        bail!("--lr must be a positive number (got {})", config.optimizer.lr);
    }
    Ok((config, spec))
}

pub fn run(args: TrainArgs) -> Result<()> {
    let (config, spec) = resolve(&args)?;
    let corpus = Corpus::open(&spec)?;
    let resume_path = match (&args.resume_from, args.resume, &config.checkpoint_dir) {
        (Some(p), _, _) => Some(p.clone()),
        (None, true, Some(dir)) => latest_checkpoint(dir),
        (None, true, None) => bail!("--resume needs --checkpoint-dir (or use --resume-from FILE)"),
        _ => None,
    };
    let resume = match &resume_path {
        Some(p) => Some(native::load(p)?),
        None => None,
    };
    let json = args.json;
    let summary = with_backend!(args.device, args.precision, |backend| train(
        backend,
        &config,
        &corpus,
        resume,
        |ev| { print_event(ev, json) }
    )?);
    let gap =
        summary.entropy_floor.map(|f| (summary.ln_vocab - summary.val_loss as f64) / (summary.ln_vocab - f));
    if json {
        let mut v = serde_json::to_value(&summary)?;
        v["event"] = "done".into();
        v["gap_closed"] = serde_json::json!(gap);
        println!("{v}");
    } else {
        println!(
            "done: {} steps, val loss {:.4}, {:.0} tokens/s{}",
            summary.steps,
            summary.val_loss,
            summary.tokens_per_s,
            match (summary.entropy_floor, gap) {
                (Some(f), Some(g)) =>
                    format!(", entropy floor {f:.4}, {:.1}% of the gap from ln(vocab) closed", g * 100.0),
                _ => String::new(),
            }
        );
    }
    Ok(())
}

fn print_event(ev: &TrainEvent, json: bool) {
    if json {
        if let Ok(s) = serde_json::to_string(ev) {
            println!("{s}");
        }
        return;
    }
    match ev {
        TrainEvent::Start { params, backend, data, entropy_floor, resumed_from } => {
            println!("model: {:.2}M parameters on {backend}", *params as f64 / 1e6);
            println!("data: {data}");
            if let Some(f) = entropy_floor {
                println!("entropy floor: {f:.4} nats/token");
            }
            if let Some(s) = resumed_from {
                println!("resumed from step {s}");
            }
        }
        TrainEvent::Step { step, loss, lr, grad_norm, ms, tokens_per_s } => {
            if *step <= 10 || step % 10 == 0 {
                println!(
                    "step {step:>6} | loss {loss:.4} | lr {lr:.2e} | norm {grad_norm:.3} | {ms:.1} ms | {tokens_per_s:.0} tok/s"
                );
            }
        }
        TrainEvent::Val { step, val_loss } => println!("step {step:>6} | val loss {val_loss:.4}"),
        TrainEvent::Checkpoint { path, .. } => println!("checkpoint saved: {}", path.display()),
    }
}
