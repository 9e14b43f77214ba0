//! `murmur train`: its settings (flags, `MURMUR_*` environment variables and
//! an optional TOML config file, declared once in `TrainSettings`), and the
//! progress printer (human lines or `--json` objects).

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

/// Settings of `murmur train`.
#[derive(Args, Debug, Default)]
pub struct TrainArgs {
    /// TOML file with any of the run settings (same names, snake_case);
    /// flags and MURMUR_* variables override it.
    #[arg(long, env = "MURMUR_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: TrainSettings,
    /// Resume from the newest checkpoint in --checkpoint-dir, if there is one.
    #[arg(long)]
    pub resume: bool,
    /// Resume from this checkpoint file.
    #[arg(long)]
    pub resume_from: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto", env = "MURMUR_DEVICE")]
    pub device: DeviceArg,
    /// GEMM input precision: bf16 (CPU backend) or f16 (wgpu backend) keep
    /// fp32 sums, master weights, optimizer state and checkpoints.
    #[arg(long, value_enum, default_value = "fp32", env = "MURMUR_PRECISION")]
    pub precision: PrecisionArg,
    /// Print one JSON object per line instead of human-readable progress.
    #[arg(long)]
    pub json: bool,
}

/// Declares `TrainSettings` once: each field is a flag (clap), a
/// `MURMUR_*` variable (clap's `env`) and a config-file key (serde), and
/// `layered` lays one set over another field by field.
macro_rules! layered_settings {
    ($(#[$sm:meta])* pub struct $name:ident { $( $(#[$m:meta])* pub $f:ident : Option<$t:ty>, )* }) => {
        $(#[$sm])*
        pub struct $name { $( $(#[$m])* pub $f: Option<$t>, )* }

        impl $name {
            /// The config-file keys.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($f)),*];

            /// These settings laid over `below`: each one given here wins,
            /// `below` fills the rest.
            pub fn layered(&self, below: &Self) -> Self {
                Self { $( $f: self.$f.clone().or_else(|| below.$f.clone()), )* }
            }
        }
    };
}

layered_settings! {
    /// The run settings. A flag (`--grad-accum`) wins over its environment
    /// variable (`MURMUR_GRAD_ACCUM`), which wins over the config file's key
    /// (`grad_accum`), which wins over the default (`resolve`).
    #[derive(Args, Deserialize, Debug, Default, Clone, PartialEq)]
    #[serde(deny_unknown_fields)]
    pub struct TrainSettings {
        /// Model preset: tiny, small, gpt2-124m (GPT-2), or llama-tiny, llama-60m,
        /// llama-150m, llama-400m, llama-1b (Llama).
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
        /// Activation checkpointing (Llama presets): keep each block's input
        /// only and recompute the block in the backward, for a fraction of
        /// the activation memory at the cost of one more forward pass.
        #[arg(long, env = "MURMUR_CHECKPOINTING", num_args = 0..=1, default_missing_value = "true")]
        pub checkpointing: Option<bool>,
    }
}

impl TrainSettings {
    /// The config file at `path`, read against the same declaration
    /// (unknown keys are refused, naming the known ones).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "config file {} is malformed: {}\nexpected TOML keys among: {}",
                path.display(),
                e.to_string().trim_end(),
                Self::KEYS.join(", ")
            )
        })
    }
}

/// Resolved settings: flags over environment over file over defaults.
pub fn resolve(args: &TrainArgs) -> Result<(TrainConfig, DataSpec)> {
    let s = match &args.config {
        Some(p) => args.settings.layered(&TrainSettings::from_file(p)?),
        None => args.settings.clone(),
    };
    macro_rules! pick {
        ($f:ident, $default:expr) => {
            s.$f.clone().unwrap_or($default)
        };
    }
    let preset = pick!(preset, "tiny".to_string());
    let model = ModelConfig::preset(&preset)?;
    let mut spec = DataSpec::parse(&pick!(data, "synthetic".to_string()))?;
    if let Some(tok) = s.tokenizer.clone() {
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
        checkpoint_dir: s.checkpoint_dir.clone(),
        checkpointing: pick!(checkpointing, false),
        model,
    };
    if config.checkpointing && config.model.arch.is_gpt2() {
        bail!("--checkpointing is for the Llama presets; {preset} is GPT-2");
    }
    if config.batch == 0 || config.seq == 0 || config.steps == 0 {
        bail!("--batch, --seq and --steps must each be at least 1");
    }
    if !(config.optimizer.lr.is_finite() && config.optimizer.lr > 0.0) {
        bail!("--lr must be a positive number (got {})", config.optimizer.lr);
    }
    Ok((config, spec))
}

pub fn run(args: TrainArgs) -> Result<()> {
    let (mut config, spec) = resolve(&args)?;
    let corpus = Corpus::open(&spec)?;
    // A dataset's own tokenizer sets the model's vocabulary.
    if let Some(vocab) = corpus.own_vocabulary().filter(|&v| v != config.model.vocab_size) {
        config.model = config.model.with_vocab(vocab)?;
    }
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
    let chosen = super::device::choose(args.device, args.precision)?;
    let summary = with_backend!(chosen chosen, |backend| train(backend, &config, &corpus, resume, |ev| {
        print_event(ev, json)
    })?);
    let gap =
        summary.entropy_floor.map(|f| (summary.ln_vocab - summary.val_loss as f64) / (summary.ln_vocab - f));
    if json {
        let mut v = serde_json::to_value(&summary)?;
        v["event"] = "done".into();
        v["gap_closed"] = serde_json::json!(gap);
        println!("{v}");
    } else {
        println!(
            "done: {} steps, val loss {:.4}{}, {:.0} tokens/s{}",
            summary.steps,
            summary.val_loss,
            summary.val_bits_per_byte.map_or_else(String::new, |b| format!(" ({b:.4} bits/byte)")),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        train: TrainArgs,
    }

    /// Flags over `MURMUR_*` over the file over defaults, one setting each
    /// way. (The variables named here are used by no other test.)
    #[test]
    fn flags_beat_environment_beat_file_beat_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("run.toml");
        std::fs::write(&f, "steps = 30\nbatch = 3\nseed = 7\nlr = 0.01\ncheckpoint_dir = \"ck\"\n")
            .expect("write");
        std::env::set_var("MURMUR_BATCH", "5");
        std::env::set_var("MURMUR_SEED", "9");
        let cli = Cli::try_parse_from(["train", "--config", f.to_str().expect("utf-8"), "--seed", "11"])
            .expect("parse");
        std::env::remove_var("MURMUR_BATCH");
        std::env::remove_var("MURMUR_SEED");
        let (c, _) = resolve(&cli.train).expect("resolve");
        assert_eq!(c.seed, 11, "flag over environment and file");
        assert_eq!(c.batch, 5, "environment over file");
        assert_eq!(c.steps, 30, "file over default");
        assert_eq!(c.optimizer.lr, 0.01);
        assert_eq!(c.checkpoint_dir, Some(PathBuf::from("ck")));
        assert_eq!(c.val_batches, 8, "default");
        assert_eq!(c.model, ModelConfig::preset("tiny").expect("tiny"));
    }

    /// `--preset llama-tiny` trains on the CPU, closes part of the gap to
    /// the data's entropy floor, and its checkpoint reads back as a Llama
    /// the run resumes from.
    #[test]
    fn llama_tiny_trains_and_resumes_from_its_checkpoint() {
        use crate::compute::cpu::CpuBackend;
        let dir = tempfile::tempdir().expect("tempdir");
        let ck = dir.path().to_str().expect("utf-8");
        let args =
            ["train", "--preset", "llama-tiny", "--steps", "6", "--batch", "2", "--checkpoint-dir", ck];
        let cli = Cli::try_parse_from(args).expect("parse");
        let (config, spec) = resolve(&cli.train).expect("resolve");
        assert_eq!(config.model, ModelConfig::preset("llama-tiny").expect("preset"));
        let corpus = Corpus::open(&spec).expect("synthetic corpus");
        let be = CpuBackend::new();
        let summary = train(&be, &config, &corpus, None, |_| {}).expect("llama-tiny trains on the CPU");
        assert!(summary.val_loss < summary.ln_vocab as f32, "{summary:?}");
        let path = latest_checkpoint(dir.path()).expect("a checkpoint at the last step");
        let ckpt = native::load(&path).expect("the checkpoint reads back");
        assert_eq!(ckpt.meta.model, config.model);
        let more = TrainConfig { steps: 8, ..config };
        let resumed = train(&be, &more, &corpus, Some(ckpt), |_| {}).expect("resumes");
        assert_eq!(resumed.steps, 8);
    }

    #[test]
    fn the_file_knows_exactly_the_declared_settings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("run.toml");
        let every: String = TrainSettings::KEYS
            .iter()
            .map(|k| match *k {
                "preset" => "preset = \"tiny\"\n".to_string(),
                "data" | "tokenizer" | "checkpoint_dir" => format!("{k} = \"x\"\n"),
                "lr" | "weight_decay" | "grad_clip" => format!("{k} = 0.5\n"),
                "checkpointing" => format!("{k} = true\n"),
                _ => format!("{k} = 2\n"),
            })
            .collect();
        std::fs::write(&f, &every).expect("write");
        let s = TrainSettings::from_file(&f).expect("every declared key is accepted");
        assert_eq!(s.grad_accum, Some(2));
        assert_eq!(s.layered(&TrainSettings::default()), s);
        assert_eq!(TrainSettings::default().layered(&s), s);
        std::fs::write(&f, "gradaccum = 2\n").expect("write");
        let e = TrainSettings::from_file(&f).expect_err("unknown key").to_string();
        assert!(e.contains("gradaccum") && e.contains("run.toml") && e.contains("grad_accum"), "{e}");
    }
}
