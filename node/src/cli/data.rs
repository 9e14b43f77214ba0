//! `murmur data add`: turn a text file, a folder of text files or llm.c
//! `.bin` token shards into a content-addressed dataset directory (token
//! shards + manifest, and the dataset's own tokenizer.json when it has one)
//! and print its DatasetId.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::data::dataset::{build, BuildOptions, DirSink, DEFAULT_SHARD_TOKENS};
use crate::data::TokenizerChoice;

/// `murmur data …`
#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Tokenize text or llm.c shards into a dataset (shards + manifest) and print its DatasetId.
    Add(AddArgs),
}

/// Settings of `murmur data add`.
#[derive(Args, Debug)]
pub struct AddArgs {
    /// A UTF-8 text file, a folder of text files, an llm.c `.bin` shard or a folder of them.
    pub input: PathBuf,
    /// Tokenizer: byte, gpt2, bpe:VOCAB (a byte-level BPE of VOCAB ids
    /// trained on the input) or the path of a tokenizer.json (for `.bin`
    /// shards: the tokenizer they were made with).
    #[arg(long, default_value = "byte")]
    pub tokenizer: TokenizerChoice,
    /// Output dataset directory (default: <input name>.dataset beside the input).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Tokens per shard (2 bytes each).
    #[arg(long, default_value_t = DEFAULT_SHARD_TOKENS)]
    pub shard_tokens: u32,
    /// Tokens held out for validation (default: 5% of the data, at most 2^20).
    #[arg(long)]
    pub val_tokens: Option<u64>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: DataCommand) -> Result<()> {
    super::init_logs();
    match c {
        DataCommand::Add(a) => add(a),
    }
}

fn add(a: AddArgs) -> Result<()> {
    let out = match &a.out {
        Some(o) => o.clone(),
        None => {
            let name = a
                .input
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "data".into());
            a.input.with_file_name(format!("{name}.dataset"))
        }
    };
    let total: u64 = input_size(&a.input);
    let bar = if a.json { ProgressBar::hidden() } else { ProgressBar::new(total) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {bytes}/{total_bytes} [{bar:30}] {bytes_per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = Instant::now();
    let mut sink = DirSink::create(&out)?;
    let opts = BuildOptions {
        tokenizer: a.tokenizer.clone(),
        shard_tokens: a.shard_tokens,
        val_tokens: a.val_tokens,
    };
    let (manifest, bytes) = build(&a.input, opts, &mut sink, &|done| bar.set_position(done))
        .with_context(|| format!("building a dataset from {}", a.input.display()))?;
    let id = sink.finish(&manifest)?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let mb_per_s = bytes as f64 / 1e6 / secs;
    let (train, val) =
        (manifest.tokens(murmur_protocol::Split::Train), manifest.tokens(murmur_protocol::Split::Val));
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "dataset": id.to_hex(),
                "out": out.display().to_string(),
                "tokenizer": manifest.tokenizer.name(),
                "vocab": manifest.tokenizer.vocab_size(),
                "train_tokens": train,
                "val_tokens": val,
                "shards": manifest.train.len() + manifest.val.len(),
                "input_bytes": bytes,
                "secs": secs,
                "mb_per_s": mb_per_s,
            })
        );
    } else {
        println!("dataset {id}");
        println!(
            "  {} → {} ({} tokenizer of {} ids, {train} train + {val} validation tokens, {} shards)",
            a.input.display(),
            out.display(),
            manifest.tokenizer.name(),
            manifest.tokenizer.vocab_size(),
            manifest.train.len() + manifest.val.len()
        );
        println!("  {bytes} input bytes in {secs:.2} s: {mb_per_s:.1} MB/s");
        println!("  host it with `murmur-bootstrap --dataset {}`", out.display());
    }
    Ok(())
}

/// Bytes of the input (for the progress bar; 0 when unknown).
fn input_size(path: &std::path::Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    let mut total = 0;
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => pending.push(e.path()),
                Ok(_) => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                Err(_) => {}
            }
        }
    }
    total
}
