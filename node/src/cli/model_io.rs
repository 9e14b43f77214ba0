//! `murmur export`, `murmur import` and `murmur sample`: moving models in and
//! out of murmur, and generating text from one.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};

use super::device::{with_backend, DeviceArg};
use crate::checkpoint::{native, safetensors, Checkpoint, CheckpointMeta};
use crate::data::TokenizerKind;
use crate::model::sample::{generate, SampleOptions};
use crate::model::Gpt;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Hugging Face GPT-2: model.safetensors + config.json.
    Safetensors,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A murmur checkpoint (.murmur).
    #[arg(long)]
    pub checkpoint: PathBuf,
    #[arg(long, value_enum, default_value = "safetensors")]
    pub format: ExportFormat,
    /// Output directory.
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
    /// Tokenizer: byte or gpt2 (default: byte when the vocabulary is 256, else gpt2).
    #[arg(long)]
    pub tokenizer: Option<TokenizerKind>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
}

pub fn export(args: ExportArgs) -> Result<()> {
    let ckpt = native::load(&args.checkpoint)?;
    match args.format {
        ExportFormat::Safetensors => safetensors::export(&args.out, &ckpt.meta.model, &ckpt.params)?,
    }
    println!("exported step {} to {}", ckpt.meta.step, args.out.display());
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
    let kind = args.tokenizer.unwrap_or(if cfg.vocab_size <= 256 {
        TokenizerKind::Byte
    } else {
        TokenizerKind::Gpt2
    });
    let tok = kind.build()?;
    if tok.vocab_size() > cfg.vocab_size {
        bail!(
            "tokenizer {kind} has {} tokens but the model only {}; pass --tokenizer byte",
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
    let out = with_backend!(args.device, super::device::PrecisionArg::Fp32, |backend| {
        let mut model = Gpt::new(backend, cfg.clone(), &ckpt.params, 1);
        generate(backend, &mut model, &prompt, opts, tok.eot())
    });
    println!("{}{}", args.prompt, tok.decode(&out));
    Ok(())
}
