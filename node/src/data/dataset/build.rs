//! Building a dataset: tokenize text files, a folder of them, or llm.c
//! `.bin` token shards into fixed-size u16 token shards plus the manifest
//! that names them (`murmur data add`, and the built-in datasets).
//!
//! Splits: `.bin` inputs keep shards named like `*_val*.bin` for validation;
//! otherwise the first tokens of the stream are held out (5% of the
//! estimated total, at most 2^20 tokens, at least 4,096 where the data
//! allows). Text is read one file at a time, checked to be UTF-8, and
//! tokenized in pieces cut after a newline that precedes a non-space
//! character (where both tokenizers give the same tokens as for the whole
//! text), with the tokenizer's end-of-text token before each file. A BPE
//! trained for the dataset (`bpe:VOCAB`) is trained on the same pieces first,
//! and its tokenizer.json goes to the sink beside the shards.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use murmur_protocol::dataset::{DatasetManifest, DatasetTokenizer, ShardEntry, Split, MAX_SHARD_TOKENS};
use murmur_protocol::hash::{shard_hash_of, ShardHash};

use crate::data::bpe::BpeTokenizer;
use crate::data::error::DataError;
use crate::data::shard::TokenShard;
use crate::data::text::list_files;
use crate::data::tokenizer::{Tokenizer, TokenizerChoice, TokenizerKind};

/// Default tokens per shard: 2^19 (1 MiB, one transfer chunk).
pub const DEFAULT_SHARD_TOKENS: u32 = 1 << 19;
/// Most tokens the default validation split holds.
pub const MAX_DEFAULT_VAL_TOKENS: u64 = 1 << 20;
/// Bytes of text tokenized at a time (cut at a newline).
const PIECE_BYTES: usize = 4 << 20;

/// How to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub tokenizer: TokenizerChoice,
    pub shard_tokens: u32,
    /// Tokens held out for validation; `None` picks the default rule.
    pub val_tokens: Option<u64>,
}

/// Where a built dataset's files go: its shards and, when it has its own
/// tokenizer, that tokenizer.json.
pub trait ShardSink {
    /// Keep shard `bytes` (its hash is `hash`).
    fn put(&mut self, hash: &ShardHash, bytes: Vec<u8>) -> Result<(), DataError>;
    /// Keep the dataset's own tokenizer.json.
    fn put_tokenizer(&mut self, json: &[u8]) -> Result<(), DataError>;
}

/// Keeps shards in memory (built-in datasets, tests).
#[derive(Debug, Default)]
pub struct MemorySink {
    pub shards: Vec<(ShardHash, Vec<u8>)>,
    pub tokenizer: Option<Vec<u8>>,
}

impl ShardSink for MemorySink {
    fn put(&mut self, hash: &ShardHash, bytes: Vec<u8>) -> Result<(), DataError> {
        self.shards.push((*hash, bytes));
        Ok(())
    }

    fn put_tokenizer(&mut self, json: &[u8]) -> Result<(), DataError> {
        self.tokenizer = Some(json.to_vec());
        Ok(())
    }
}

pub fn dataset_tokenizer(kind: TokenizerKind) -> DatasetTokenizer {
    match kind {
        TokenizerKind::Byte => DatasetTokenizer::Byte,
        TokenizerKind::Gpt2 => DatasetTokenizer::Gpt2,
    }
}

/// Cuts a token stream into shards: the first `val_target` tokens into
/// validation shards, the rest into training shards.
struct Sharder<'a> {
    shard_tokens: usize,
    vocab: u32,
    val_target: u64,
    seen: u64,
    current: Vec<u8>,
    split: Split,
    train: Vec<ShardEntry>,
    val: Vec<ShardEntry>,
    sink: &'a mut dyn ShardSink,
}

impl Sharder<'_> {
    fn push(&mut self, tokens: &[u32], source: &dyn Fn() -> String) -> Result<(), DataError> {
        for &t in tokens {
            if t >= self.vocab {
                return Err(DataError::TokenOutOfRange {
                    source_name: source(),
                    token: t,
                    position: self.seen,
                    vocab: self.vocab as usize,
                });
            }
            let split = if self.seen < self.val_target { Split::Val } else { Split::Train };
            if split != self.split {
                self.flush()?;
                self.split = split;
            }
            self.current.extend_from_slice(&(t as u16).to_le_bytes());
            self.seen += 1;
            if self.current.len() == 2 * self.shard_tokens {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataError> {
        if self.current.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.current);
        let hash = shard_hash_of(&bytes);
        let tokens = (bytes.len() / 2) as u32;
        self.sink.put(&hash, bytes)?;
        let entry = ShardEntry { hash, tokens };
        match self.split {
            Split::Train => self.train.push(entry),
            Split::Val => self.val.push(entry),
        }
        Ok(())
    }
}

/// The default validation size for an estimated stream of `estimate` tokens.
fn default_val_tokens(estimate: u64) -> u64 {
    estimate.div_ceil(20).min(MAX_DEFAULT_VAL_TOKENS).max(4096.min(estimate / 2)).max(1)
}

fn is_bin(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("bin"))
}

fn is_val_name(path: &Path) -> bool {
    path.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|stem| stem.split(['_', '-', '.']).any(|part| part == "val"))
}

/// Build a dataset from `input` (a text file, a folder of text files, a
/// `.bin` shard or a folder of them) into `sink`; `progress` is told the
/// input bytes done so far. Returns the manifest and the input's size.
pub fn build(
    input: &Path,
    opts: BuildOptions,
    sink: &mut dyn ShardSink,
    progress: &dyn Fn(u64),
) -> Result<(DatasetManifest, u64), DataError> {
    if opts.shard_tokens == 0 || opts.shard_tokens > MAX_SHARD_TOKENS {
        return Err(DataError::BadDataset {
            what: input.display().to_string(),
            reason: format!("--shard-tokens must be in 1..={MAX_SHARD_TOKENS}"),
        });
    }
    let meta = fs::metadata(input).map_err(|e| DataError::io(input, e))?;
    let files: Vec<PathBuf> = if meta.is_dir() {
        let files = list_files(input, &|_| true)?;
        let bins: Vec<PathBuf> = files.iter().filter(|p| is_bin(p)).cloned().collect();
        if bins.is_empty() {
            files
        } else {
            bins
        }
    } else {
        vec![input.to_path_buf()]
    };
    if files.is_empty() {
        return Err(DataError::EmptyFolder { path: input.to_path_buf() });
    }
    let total_bytes: u64 = files.iter().filter_map(|p| fs::metadata(p).ok()).map(|m| m.len()).sum();
    if total_bytes == 0 {
        return Err(if meta.is_dir() {
            DataError::EmptyFolder { path: input.to_path_buf() }
        } else {
            DataError::EmptyFile { path: input.to_path_buf() }
        });
    }
    let shards = files.iter().all(|p| is_bin(p));
    let Resolved { tokenizer, json, named } = resolve_tokenizer(&opts.tokenizer, &files, shards, input)?;
    if let Some(json) = &json {
        sink.put_tokenizer(json)?;
    }
    let vocab = named.vocab_size();
    let mut sharder = Sharder {
        shard_tokens: opts.shard_tokens as usize,
        vocab,
        val_target: 0,
        seen: 0,
        current: Vec::with_capacity(2 * opts.shard_tokens as usize),
        split: Split::Val,
        train: Vec::new(),
        val: Vec::new(),
        sink,
    };
    let mut done = 0u64;
    if shards {
        let opened: Vec<TokenShard> = files.iter().map(|p| TokenShard::open(p)).collect::<Result<_, _>>()?;
        let (val, train): (Vec<&TokenShard>, Vec<&TokenShard>) =
            opened.iter().partition(|s| is_val_name(s.path()));
        let all: u64 = opened.iter().map(TokenShard::len).sum();
        sharder.val_target = match (opts.val_tokens, val.is_empty()) {
            (Some(v), _) => v,
            (None, false) => val.iter().map(|s| s.len()).sum(),
            (None, true) => default_val_tokens(all),
        };
        for shard in val.into_iter().chain(train) {
            let tokens = shard.read_all(vocab as usize)?;
            let name = shard.path().display().to_string();
            sharder.push(&tokens, &|| name.clone())?;
            done += 2 * shard.len();
            progress(done);
        }
    } else {
        let estimate = match named {
            DatasetTokenizer::Byte => total_bytes,
            _ => total_bytes / 4,
        };
        sharder.val_target = opts.val_tokens.unwrap_or_else(|| default_val_tokens(estimate));
        for file in &files {
            let name = file.display().to_string();
            let bytes = fs::read(file).map_err(|e| DataError::io(file, e))?;
            if bytes.is_empty() {
                continue;
            }
            let text = utf8(file, &bytes)?;
            if let Some(eot) = tokenizer.eot() {
                sharder.push(&[eot], &|| name.clone())?;
            }
            for piece in pieces(text) {
                let tokens = tokenizer.try_encode(piece).map_err(|reason| DataError::BadTokenizer {
                    what: tokenizer.name().to_string(),
                    reason: format!("it cannot encode {name}: {reason}"),
                })?;
                sharder.push(&tokens, &|| name.clone())?;
                done += piece.len() as u64;
                progress(done);
            }
        }
    }
    sharder.flush()?;
    let seen = sharder.seen;
    let (train, val) = (sharder.train, sharder.val);
    if val.is_empty() || train.is_empty() {
        return Err(DataError::DatasetTooSmall { tokens: seen, val_tokens: sharder.val_target });
    }
    let manifest = DatasetManifest { tokenizer: named, shard_tokens: opts.shard_tokens, train, val };
    manifest
        .validate()
        .map_err(|e| DataError::BadDataset { what: input.display().to_string(), reason: e.to_string() })?;
    Ok((manifest, total_bytes))
}

fn utf8<'a>(file: &Path, bytes: &'a [u8]) -> Result<&'a str, DataError> {
    std::str::from_utf8(bytes)
        .map_err(|e| DataError::NotUtf8 { path: file.to_path_buf(), offset: e.valid_up_to() })
}

/// The tokenizer a build uses.
struct Resolved {
    tokenizer: Arc<dyn Tokenizer>,
    /// The tokenizer.json of a dataset's own tokenizer.
    json: Option<Vec<u8>>,
    /// What the manifest says of it.
    named: DatasetTokenizer,
}

/// The tokenizer `choice` names for `files`: built in, read from a
/// tokenizer.json, or trained on the text of `files` (refused for shards).
fn resolve_tokenizer(
    choice: &TokenizerChoice,
    files: &[PathBuf],
    shards: bool,
    input: &Path,
) -> Result<Resolved, DataError> {
    let bpe = match choice {
        TokenizerChoice::Kind(kind) => {
            return Ok(Resolved { tokenizer: kind.build()?, json: None, named: dataset_tokenizer(*kind) })
        }
        TokenizerChoice::File(path) => {
            let what = path.display().to_string();
            let len = fs::metadata(path).map_err(|e| DataError::io(path, e))?.len();
            if len > u64::from(murmur_protocol::dataset::MAX_TOKENIZER_BYTES) {
                return Err(DataError::BadTokenizer {
                    what,
                    reason: format!("{len} bytes, more than any tokenizer.json murmur accepts (16 MiB)"),
                });
            }
            BpeTokenizer::from_json(&fs::read(path).map_err(|e| DataError::io(path, e))?, &what)?
        }
        TokenizerChoice::TrainBpe(vocab) => {
            if shards {
                return Err(DataError::BadTokenizer {
                    what: input.display().to_string(),
                    reason: format!("`bpe:{vocab}` trains on text, and .bin shards are already tokens; pass the tokenizer.json they were made with"),
                });
            }
            train_bpe(files, *vocab)?
        }
    };
    Ok(Resolved { named: bpe.dataset_tokenizer(), json: Some(bpe.json().to_vec()), tokenizer: Arc::new(bpe) })
}

/// Train a BPE of `vocab` ids on the pieces of every text file (read one
/// at a time; the first unreadable or non-UTF-8 file stops it).
fn train_bpe(files: &[PathBuf], vocab: u32) -> Result<BpeTokenizer, DataError> {
    let failed: Mutex<Option<DataError>> = Mutex::new(None);
    let texts = files.iter().map_while(|file| {
        let read = fs::read(file).map_err(|e| DataError::io(file, e)).and_then(|bytes| {
            utf8(file, &bytes)?;
            Ok(bytes)
        });
        match read {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                None
            }
        }
    });
    let pieces = texts.flat_map(|bytes| {
        let text = String::from_utf8(bytes).unwrap_or_default();
        pieces(&text).map(str::to_string).collect::<Vec<_>>()
    });
    let bpe = BpeTokenizer::train(pieces, vocab);
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    bpe
}

/// Build a dataset from text in memory (the built-in datasets).
pub fn build_text(
    text: &str,
    tokenizer: &dyn Tokenizer,
    named: DatasetTokenizer,
    shard_tokens: u32,
    val_tokens: u64,
) -> Result<(DatasetManifest, MemorySink), DataError> {
    let mut sink = MemorySink::default();
    let mut sharder = Sharder {
        shard_tokens: shard_tokens as usize,
        vocab: tokenizer.vocab_size() as u32,
        val_target: val_tokens,
        seen: 0,
        current: Vec::new(),
        split: Split::Val,
        train: Vec::new(),
        val: Vec::new(),
        sink: &mut sink,
    };
    for piece in pieces(text) {
        sharder.push(&tokenizer.encode(piece), &|| "built-in text".to_string())?;
    }
    sharder.flush()?;
    let manifest = DatasetManifest { tokenizer: named, shard_tokens, train: sharder.train, val: sharder.val };
    manifest
        .validate()
        .map_err(|e| DataError::BadDataset { what: "built-in text".into(), reason: e.to_string() })?;
    Ok((manifest, sink))
}

/// `text` in pieces of about `PIECE_BYTES`, each cut after a `\n` that is
/// followed by a non-whitespace character (or at the end).
pub(crate) fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let b = rest.as_bytes();
        let mut cut = b.len();
        if b.len() > PIECE_BYTES {
            cut = (PIECE_BYTES..b.len() - 1)
                .find(|&i| b[i] == b'\n' && !b[i + 1].is_ascii_whitespace())
                .map_or(b.len(), |i| i + 1);
        }
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::shard::write_shard;

    fn opts(kind: TokenizerKind, shard_tokens: u32) -> BuildOptions {
        BuildOptions { tokenizer: TokenizerChoice::Kind(kind), shard_tokens, val_tokens: None }
    }

    #[test]
    fn text_becomes_fixed_size_shards_with_a_val_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "hello world\n".repeat(10_000)).unwrap();
        let mut sink = MemorySink::default();
        let (m, bytes) = build(&path, opts(TokenizerKind::Byte, 10_000), &mut sink, &|_| {}).unwrap();
        assert_eq!(bytes, 120_000);
        assert_eq!(m.tokens(Split::Val), 6000);
        assert_eq!(m.tokens(Split::Train), 114_000);
        assert_eq!(m.train.len(), 12);
        assert!(m.train[..11].iter().all(|e| e.tokens == 10_000));
        for (hash, shard) in &sink.shards {
            assert_eq!(shard_hash_of(shard), *hash);
        }
        // Deterministic: the same input gives the same DatasetId.
        let again =
            build(&path, opts(TokenizerKind::Byte, 10_000), &mut MemorySink::default(), &|_| {}).unwrap();
        assert_eq!(again.0.id(), m.id());
        let gpt2 =
            build(&path, opts(TokenizerKind::Gpt2, 10_000), &mut MemorySink::default(), &|_| {}).unwrap();
        assert_ne!(gpt2.0.id(), m.id());
    }

    #[test]
    fn pieces_cut_only_before_a_word() {
        let text = format!("{}\n\n  x\nabc", "a".repeat(PIECE_BYTES));
        let parts: Vec<&str> = pieces(&text).collect();
        assert_eq!(parts.concat(), text);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], "abc");
    }

    #[test]
    fn bad_inputs_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let run = |p: &Path, kind| build(p, opts(kind, 1000), &mut MemorySink::default(), &|_| {});
        std::fs::write(d.join("empty.txt"), "").unwrap();
        assert!(matches!(run(&d.join("empty.txt"), TokenizerKind::Byte), Err(DataError::EmptyFile { .. })));
        std::fs::write(d.join("latin1.txt"), b"caf\xe9 au lait").unwrap();
        let err = run(&d.join("latin1.txt"), TokenizerKind::Byte).unwrap_err();
        assert!(matches!(err, DataError::NotUtf8 { offset: 3, .. }), "{err}");
        std::fs::write(d.join("bad.bin"), vec![7u8; 2048]).unwrap();
        assert!(matches!(run(&d.join("bad.bin"), TokenizerKind::Gpt2), Err(DataError::BadShardMagic { .. })));
        write_shard(&d.join("wide.bin"), &[300; 5000]).unwrap();
        let err = run(&d.join("wide.bin"), TokenizerKind::Byte).unwrap_err();
        assert!(matches!(err, DataError::TokenOutOfRange { token: 300, vocab: 256, .. }), "{err}");
        assert!(err.to_string().contains("different tokenizer"), "{err}");
        std::fs::write(d.join("tiny.txt"), "x").unwrap();
        assert!(matches!(
            run(&d.join("tiny.txt"), TokenizerKind::Byte),
            Err(DataError::DatasetTooSmall { .. })
        ));
        let empty = d.join("nothing");
        std::fs::create_dir(&empty).unwrap();
        assert!(matches!(run(&empty, TokenizerKind::Byte), Err(DataError::EmptyFolder { .. })));
        assert!(matches!(run(&d.join("absent"), TokenizerKind::Byte), Err(DataError::MissingPath { .. })));
        let zero =
            build(&d.join("tiny.txt"), opts(TokenizerKind::Byte, 0), &mut MemorySink::default(), &|_| {});
        assert!(matches!(zero, Err(DataError::BadDataset { .. })));
    }

    #[test]
    fn llmc_shards_keep_their_val_split() {
        let dir = tempfile::tempdir().unwrap();
        write_shard(&dir.path().join("toy_train_000001.bin"), &[1; 2500]).unwrap();
        write_shard(&dir.path().join("toy_val_000000.bin"), &[3; 300]).unwrap();
        let mut sink = MemorySink::default();
        let (m, _) = build(dir.path(), opts(TokenizerKind::Gpt2, 1000), &mut sink, &|_| {}).unwrap();
        assert_eq!((m.tokens(Split::Train), m.tokens(Split::Val)), (2500, 300));
        assert_eq!(m.train.len(), 3);
        assert_eq!(sink.shards.len(), 4);
    }

    #[test]
    fn a_bpe_trained_on_the_input_names_its_file_and_tokenizes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("verse.txt");
        let text = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n";
        std::fs::write(&path, text.repeat(400)).unwrap();
        let bpe = |vocab| BuildOptions {
            tokenizer: TokenizerChoice::TrainBpe(vocab),
            shard_tokens: 1000,
            val_tokens: Some(500),
        };
        let mut sink = MemorySink::default();
        let (m, _) = build(&path, bpe(300), &mut sink, &|_| {}).unwrap();
        let json = sink.tokenizer.clone().expect("the tokenizer.json went to the sink");
        let tokenizer = BpeTokenizer::from_json(&json, "built").unwrap();
        assert_eq!(m.tokenizer, tokenizer.dataset_tokenizer());
        // The end-of-text token first, then the text's own tokens.
        let first: Vec<u16> = sink.shards[0].1.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        assert_eq!(first[0], 0);
        let ids = tokenizer.encode(text);
        assert_eq!(first[1..=ids.len()].iter().map(|&t| u32::from(t)).collect::<Vec<_>>(), ids);
        assert!(m.tokens(Split::Train) + m.tokens(Split::Val) < 400 * text.len() as u64 / 2);
        // Same input, same DatasetId; another vocabulary, another.
        assert_eq!(build(&path, bpe(300), &mut MemorySink::default(), &|_| {}).unwrap().0.id(), m.id());
        assert_ne!(build(&path, bpe(290), &mut MemorySink::default(), &|_| {}).unwrap().0.id(), m.id());
        // A tokenizer.json given as a file gives the same dataset.
        let file = dir.path().join("tokenizer.json");
        std::fs::write(&file, &json).unwrap();
        let given = BuildOptions { tokenizer: TokenizerChoice::File(file), ..bpe(300) };
        assert_eq!(build(&path, given, &mut MemorySink::default(), &|_| {}).unwrap().0.id(), m.id());
        // Shards are already tokens.
        write_shard(&dir.path().join("toy.bin"), &[1; 3000]).unwrap();
        let err =
            build(&dir.path().join("toy.bin"), bpe(300), &mut MemorySink::default(), &|_| {}).unwrap_err();
        assert!(err.to_string().contains("already tokens"), "{err}");
    }
}
