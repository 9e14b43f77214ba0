//! `murmur export`, `murmur import`, `murmur eval` and `murmur sample`:
//! moving models in and out of murmur (a checkpoint, a node's committed
//! state, or a live run's), measuring one on its run's validation data,
//! and generating text from one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args, ValueEnum};
use libp2p::Multiaddr;
use murmur_protocol::hash::unhex;
use murmur_protocol::StateId;

use super::device::{with_backend, DeviceArg, PrecisionArg};
use crate::checkpoint::run_export::{self, load_model};
use crate::checkpoint::{native, safetensors, Checkpoint, CheckpointMeta};
use crate::data::hf_tokenizer::ExportTokenizer;
use crate::data::{BpeTokenizer, Tokenizer, TokenizerChoice, TokenizerKind};
use crate::model::sample::{context_logits, generate, SampleOptions};
use crate::model::Gpt;
use crate::runtime::export::{export_from_data_dir, export_from_network, Pick};
use crate::runtime::report::Reporter;
use crate::runtime::spec::model_config;
use crate::runtime::trainer::{stream_corpus, VAL_BATCHES};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Hugging Face GPT-2: model.safetensors + config.json.
    Safetensors,
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["checkpoint", "data_dir", "bootstrap"])))]
pub struct ExportArgs {
    /// A murmur checkpoint (.murmur) written by `murmur train`.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// A node's data directory: export a committed state it holds (the
    /// newest by default). The node must be stopped.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// With --data-dir: the state committed by this round.
    #[arg(long, requires = "data_dir", conflicts_with = "state")]
    pub round: Option<u64>,
    /// This committed state (StateId, 64 hex characters): with --data-dir,
    /// one the node holds; with --bootstrap, one the run's trainers hold
    /// and their recent signed commits back.
    #[arg(long)]
    pub state: Option<String>,
    /// A bootstrap server of a live run (repeatable): join as an observer
    /// and export the newest state the run's signed commits back.
    #[arg(long)]
    pub bootstrap: Vec<Multiaddr>,
    /// With --bootstrap: how long to wait for the run's trainers, in seconds.
    #[arg(long, default_value_t = 20)]
    pub wait: u64,
    #[command(flatten)]
    pub observer: super::identity::ObserverArgs,
    #[arg(long, value_enum, default_value = "safetensors")]
    pub format: ExportFormat,
    /// With --checkpoint: the tokenizer written beside the model, byte, gpt2
    /// or a tokenizer.json (default: byte or gpt2 by the vocabulary size).
    #[arg(long, requires = "checkpoint")]
    pub tokenizer: Option<TokenizerChoice>,
    /// Output directory (must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// A Hugging Face GPT-2 directory (model.safetensors + config.json) or .safetensors file.
    #[arg(long)]
    pub from: PathBuf,
    /// The murmur checkpoint to write.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct SampleArgs {
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[arg(long, default_value = "")]
    pub prompt: String,
    /// Number of tokens to generate.
    #[arg(long, default_value_t = 200)]
    pub tokens: usize,
    /// 0 samples greedily.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Tokenizer: byte, gpt2 or a tokenizer.json (a dataset's own is
    /// `DIR/tokenizer.json`; default: byte when the vocabulary is 256, else gpt2).
    #[arg(long)]
    pub tokenizer: Option<TokenizerChoice>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    /// Also write a JSON file with the prompt's token ids, the logits at
    /// each of its positions and the generated ids (to compare murmur's
    /// forward pass with another implementation's).
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A directory written by `murmur export --data-dir` or `--bootstrap`
    /// (its murmur.json names the run, whose validation data is used).
    #[arg(long)]
    pub model: PathBuf,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    pub json: bool,
}

/// A tokenizer.json given on the command line.
fn read_tokenizer_file(path: &std::path::Path) -> Result<BpeTokenizer> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(BpeTokenizer::from_json(&bytes, &path.display().to_string())?)
}

pub fn export(args: ExportArgs) -> Result<()> {
    let ExportFormat::Safetensors = args.format;
    if let Some(path) = &args.checkpoint {
        let ckpt = native::load(path)?;
        let tokenizer = match &args.tokenizer {
            None => ExportTokenizer::for_vocabulary(ckpt.meta.model.vocab_size),
            Some(TokenizerChoice::Kind(kind)) => Some(ExportTokenizer::BuiltIn(*kind)),
            Some(TokenizerChoice::File(file)) => Some(ExportTokenizer::Own(read_tokenizer_file(file)?)),
            Some(TokenizerChoice::TrainBpe(_)) => bail!("--tokenizer: give byte, gpt2 or a tokenizer.json"),
        };
        safetensors::export(&args.out, &ckpt.meta.model, &ckpt.params, tokenizer.as_ref())?;
        println!("exported step {} to {}", ckpt.meta.step, args.out.display());
        return Ok(());
    }
    let meta = if let Some(dir) = &args.data_dir {
        let pick = match (args.round, &args.state) {
            (Some(r), _) => Pick::Round(r),
            (None, Some(hex)) => Pick::State(parse_state_id(hex)?),
            (None, None) => Pick::Latest,
        };
        export_from_data_dir(dir, pick, &args.out)?
    } else {
        super::init_logs();
        let wait = Duration::from_secs(args.wait);
        let (bootstrap, out) = (args.bootstrap.clone(), args.out.clone());
        let state = args.state.as_deref().map(parse_state_id).transpose()?;
        let who = args.observer.identity()?;
        super::run_until_done(async move {
            export_from_network(&who, &bootstrap, state, &out, wait, Reporter { json: false }).await
        })?
    };
    let round = meta.round.map_or_else(|| "the genesis state".to_string(), |r| format!("round {r}"));
    println!(
        "exported {round} of run {} (state {}, {} tokens seen) to {}",
        meta.run,
        meta.state_id,
        meta.tokens_seen,
        args.out.display()
    );
    Ok(())
}

fn parse_state_id(hex: &str) -> Result<StateId> {
    match unhex(hex).and_then(|b| <[u8; 32]>::try_from(b).ok()) {
        Some(id) => Ok(StateId(id)),
        None => bail!("--state takes a StateId: 64 hex characters, as the node's round lines print it"),
    }
}

/// The validation loss of an exported model on its run's validation data,
/// measured as the run's nodes measure it.
pub fn eval(args: EvalArgs) -> Result<()> {
    let meta = run_export::read_meta(&args.model)?;
    let spec = meta.spec()?;
    let cfg = model_config(&spec)?;
    let (model_cfg, params) = load_model(&args.model).map_err(anyhow::Error::msg)?;
    if model_cfg != cfg {
        bail!(
            "{} holds a model of another shape than its run's preset `{}`",
            args.model.display(),
            spec.model.preset
        );
    }
    let corpus = stream_corpus(&spec, &cfg).map_err(|e| {
        anyhow::anyhow!("{e}: `murmur eval` measures runs on synthetic data; a dataset run's nodes report its validation loss in their round lines")
    })?;
    let (batch, seq) = (spec.inner.batch_size.max(1) as usize, cfg.max_seq_len);
    let mut val = corpus.val_loader(batch, seq)?;
    let chosen = super::device::choose(args.device, PrecisionArg::Fp32)?;
    let loss = with_backend!(chosen chosen, |backend| {
        let mut model = Gpt::new(backend, cfg.clone(), &params, 1);
        crate::train::trainer::evaluate(backend, &mut model, &mut val, VAL_BATCHES)?
    });
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "val_loss": loss, "round": meta.round, "state_id": meta.state_id })
        );
    } else {
        println!("val_loss {loss:.6} ({} validation batches of {batch} × {seq} tokens)", VAL_BATCHES);
    }
    Ok(())
}

pub fn import(args: ImportArgs) -> Result<()> {
    let (model, params) = safetensors::import(&args.from)?;
    let meta = CheckpointMeta { model, step: 0, has_moments: false, train_state: serde_json::Value::Null };
    native::save(&args.out, &Checkpoint { meta, params, moments: None })?;
    println!("imported {} into {}", args.from.display(), args.out.display());
    Ok(())
}

pub fn sample(args: SampleArgs) -> Result<()> {
    let ckpt = native::load(&args.checkpoint)?;
    let cfg = ckpt.meta.model.clone();
    let tok: Arc<dyn Tokenizer> = match &args.tokenizer {
        None => TokenizerKind::for_vocabulary(cfg.vocab_size).unwrap_or(TokenizerKind::Gpt2).build()?,
        Some(TokenizerChoice::Kind(kind)) => kind.build()?,
        Some(TokenizerChoice::File(file)) => Arc::new(read_tokenizer_file(file)?),
        Some(TokenizerChoice::TrainBpe(_)) => bail!("--tokenizer: give byte, gpt2 or a tokenizer.json"),
    };
    if tok.vocab_size() > cfg.vocab_size {
        bail!(
            "the {} tokenizer has {} tokens but the model only {}; pass the tokenizer it was trained with (--tokenizer byte, gpt2 or its tokenizer.json)",
            tok.name(),
            tok.vocab_size(),
            cfg.vocab_size
        );
    }
    let prompt = tok.encode(&args.prompt);
    let opts = SampleOptions {
        max_new_tokens: args.tokens,
        temperature: args.temperature,
        top_k: args.top_k,
        seed: args.seed,
    };
    let chosen = super::device::choose(args.device, super::device::PrecisionArg::Fp32)?;
    if args.logits_out.is_some() && (prompt.is_empty() || prompt.len() > cfg.max_seq_len) {
        bail!(
            "--logits-out needs a --prompt of 1 to {} tokens; this one has {}",
            cfg.max_seq_len,
            prompt.len()
        );
    }
    let (out, logits) = with_backend!(chosen chosen, |backend| {
        let mut model = Gpt::new(backend, cfg.clone(), &ckpt.params, 1);
        let logits = args.logits_out.as_ref().map(|_| prompt_logits(backend, &mut model, &prompt));
        (generate(backend, &mut model, &prompt, opts, tok.eot()), logits)
    });
    if let (Some(path), Some(logits)) = (&args.logits_out, logits) {
        let json = serde_json::json!({ "prompt": prompt, "logits": logits, "generated": out });
        std::fs::write(path, json.to_string())
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    println!("{}{}", args.prompt, tok.decode(&out));
    Ok(())
}

/// The logits (real vocabulary only) at each position of `prompt`, which
/// fits the model's context.
fn prompt_logits<B: crate::compute::Backend>(
    backend: &B,
    model: &mut Gpt<B>,
    prompt: &[u32],
) -> Vec<Vec<f32>> {
    let (vp, v) = (model.config.padded_vocab_size, model.config.vocab_size);
    let all = context_logits(backend, model, prompt);
    all.chunks(vp).take(prompt.len()).map(|row| row[..v].to_vec()).collect()
}
