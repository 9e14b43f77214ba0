//! `DataError`: every way opening or reading training data can fail, each
//! message naming the problem and what to do about it.

use std::path::PathBuf;

/// Errors of the data pipeline. Messages are written for the person at the
/// command line: what is wrong, where, and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("data path {path} does not exist; pass a text file, a folder of text files, a .bin token shard, a folder of shards, or `synthetic`")]
    MissingPath { path: PathBuf },

    #[error("data file {path} is empty; point --data at a file that holds text or tokens")]
    EmptyFile { path: PathBuf },

    #[error("data folder {path} holds no usable files (hidden and empty files are skipped); add text files or .bin shards to it")]
    EmptyFolder { path: PathBuf },

    #[error("{path} holds only validation shards (`*_val*.bin`); add training shards beside them")]
    OnlyValidationShards { path: PathBuf },

    #[error("{path} is not valid UTF-8 (first bad byte at offset {offset}); text data must be UTF-8, or convert it to a token shard")]
    NotUtf8 { path: PathBuf, offset: usize },

    #[error("{path} is not an llm.c token shard: header magic is {found}, expected 20240520; was it written by a different tool or is it corrupt?")]
    BadShardMagic { path: PathBuf, found: i32 },

    #[error(
        "{path}: unsupported token shard version {found} (this reader understands version 1, uint16 tokens)"
    )]
    BadShardVersion { path: PathBuf, found: i32 },

    #[error("{path}: the shard header claims {claimed} tokens, which is invalid ({reason}); the file is corrupt, regenerate it")]
    BadShardCount { path: PathBuf, claimed: i64, reason: &'static str },

    #[error("{path} is truncated: the header promises {claimed} tokens ({expected_bytes} bytes) but the file is {actual_bytes} bytes; re-download or regenerate the shard")]
    TruncatedShard { path: PathBuf, claimed: u64, expected_bytes: u64, actual_bytes: u64 },

    #[error("{path} has {extra_bytes} bytes after the {claimed} tokens its header promises; the shard is corrupt, regenerate it")]
    TrailingShardBytes { path: PathBuf, claimed: u64, extra_bytes: u64 },

    #[error("{source_name}: token {token} at position {position} is outside the vocabulary (size {vocab}); the data was made with a different tokenizer, choose the matching one (byte, gpt2 or its tokenizer.json)")]
    TokenOutOfRange { source_name: String, token: u32, position: u64, vocab: usize },

    #[error("token {token} does not fit an llm.c uint16 shard (max 65535)")]
    TokenTooWideForShard { token: u32 },

    #[error("{what}: a window of {needed} tokens (sequence length + 1) is longer than the {available} tokens available; use a shorter --seq or more data")]
    SequenceTooLong { what: &'static str, needed: u64, available: u64 },

    #[error("the training split has {windows} windows of this sequence length but the run has {shard_count} shards; every node needs at least one, so use more data or a shorter sequence")]
    TooFewWindows { windows: u64, shard_count: u64 },

    #[error("shard index {index} is not below shard count {count}; node shards are numbered 0..count")]
    BadShardAssignment { index: u64, count: u64 },

    #[error("batch size and sequence length must be at least 1 (got batch {batch}, seq {seq})")]
    BadBatchShape { batch: usize, seq: usize },

    #[error("malformed data spec `{spec}`: {reason}. Expected `synthetic`, `synthetic:seed=7,words=48`, a path, `text:PATH` or `shards:PATH`")]
    BadSpec { spec: String, reason: String },

    #[error("invalid synthetic corpus: {reason}")]
    BadSynthetic { reason: String },

    #[error("the saved data position was made for {saved}, but this loader is {current}; resume with the same data, seed, shard and sequence length")]
    PositionMismatch { saved: String, current: String },

    #[error("built-in GPT-2 tokenizer files are damaged: {reason}")]
    TokenizerAsset { reason: String },

    #[error("tokenizer {what}: {reason}")]
    BadTokenizer { what: String, reason: String },

    #[error("dataset {what}: {reason}")]
    BadDataset { what: String, reason: String },

    #[error("too little data for a dataset: {tokens} tokens, of which {val_tokens} would be held out for validation; add more text (a dataset needs training and validation tokens) or pass a smaller --val-tokens")]
    DatasetTooSmall { tokens: u64, val_tokens: u64 },

    #[error("could not read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl DataError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::NotFound {
            DataError::MissingPath { path }
        } else {
            DataError::Io { path, source }
        }
    }
}
