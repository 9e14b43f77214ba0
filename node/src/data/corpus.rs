//! `Corpus`: an opened data source — its tokenizer, its train/validation
//! split, and the entropy floor when it is known — from which the trainer
//! makes batch loaders.
//!
//! Splits: the synthetic corpus has separate seeded train and validation
//! streams. Token data keeps shards whose file name has a `val` part
//! (llm.c's `fineweb_val_000000.bin`, `tiny_shakespeare_val.bin`) for
//! validation; without such files the last 5% of the token stream is held out.
//! A dataset directory (`murmur data add`) keeps its manifest's splits and
//! brings its own tokenizer.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use murmur_protocol::dataset::{DatasetTokenizer, Split};

use super::dataset::dir::{DatasetDir, MANIFEST_FILE};
use super::dataset::shard_tokens;
use super::error::DataError;
use super::loader::BatchLoader;
use super::shard::TokenShard;
use super::spec::{DataSource, DataSpec};
use super::synthetic::SyntheticLanguage;
use super::text::{list_files, load_text};
use super::tokenizer::{Tokenizer, TokenizerKind};

/// Fraction of a token stream held out for validation when no val shard exists.
const VAL_FRACTION_DENOMINATOR: u64 = 20;

/// Where a run of tokens lives.
#[derive(Debug)]
pub(crate) enum TokenStore {
    Memory { tokens: Vec<u32> },
    Shard(TokenShard),
}

impl TokenStore {
    fn len(&self) -> u64 {
        match self {
            TokenStore::Memory { tokens, .. } => tokens.len() as u64,
            TokenStore::Shard(shard) => shard.len(),
        }
    }
}

/// A contiguous range of one store's tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub store: usize,
    pub start: u64,
    pub len: u64,
}

#[derive(Debug)]
pub(crate) enum CorpusBody {
    Synthetic(SyntheticLanguage),
    Tokens { stores: Vec<TokenStore>, train: Vec<Segment>, val: Vec<Segment> },
}

pub(crate) struct CorpusInner {
    pub description: String,
    pub tokenizer: Arc<dyn Tokenizer>,
    pub vocab: usize,
    /// The data brings its own tokenizer (a dataset's tokenizer.json).
    pub own_tokenizer: bool,
    pub body: CorpusBody,
}

/// Opened training data. Cheap to clone; loaders share it.
#[derive(Clone)]
pub struct Corpus {
    inner: Arc<CorpusInner>,
}

impl fmt::Debug for Corpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Corpus")
            .field("description", &self.inner.description)
            .field("vocab", &self.inner.vocab)
            .finish()
    }
}

impl fmt::Display for Corpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.description)
    }
}

/// Is this a validation shard by llm.c's naming (`*_val_*.bin`, `*_val.bin`)?
fn is_val_shard(path: &Path) -> bool {
    path.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|stem| stem.split(['_', '-', '.']).any(|part| part == "val"))
}

fn is_bin(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("bin"))
}

/// Splits the whole of `stores` into train segments and a held-out tail.
fn split_tail(stores: &[TokenStore]) -> (Vec<Segment>, Vec<Segment>) {
    let total: u64 = stores.iter().map(TokenStore::len).sum();
    let mut val_left = total.div_ceil(VAL_FRACTION_DENOMINATOR);
    let mut train = Vec::new();
    let mut val = Vec::new();
    for (store, s) in stores.iter().enumerate().rev() {
        let len = s.len();
        let held = val_left.min(len);
        val_left -= held;
        if held > 0 {
            val.push(Segment { store, start: len - held, len: held });
        }
        if held < len {
            train.push(Segment { store, start: 0, len: len - held });
        }
    }
    train.reverse();
    val.reverse();
    (train, val)
}

fn whole(stores: &[TokenStore], range: std::ops::Range<usize>) -> Vec<Segment> {
    range.map(|store| Segment { store, start: 0, len: stores[store].len() }).collect()
}

impl Corpus {
    /// Opens the data a spec names, checking it fully enough that training
    /// will not fail later for a reason visible now.
    pub fn open(spec: &DataSpec) -> Result<Corpus, DataError> {
        let inner = match &spec.source {
            DataSource::Synthetic(synthetic) => {
                if spec.tokenizer == Some(TokenizerKind::Gpt2) {
                    return Err(DataError::BadSpec {
                        spec: spec.to_string(),
                        reason: "the synthetic corpus is byte-level; drop `--tokenizer gpt2`".into(),
                    });
                }
                let language = synthetic.build()?;
                CorpusInner {
                    description: format!(
                        "{} (entropy floor {:.4} nats/byte)",
                        spec.source,
                        language.entropy_rate()
                    ),
                    tokenizer: TokenizerKind::Byte.build()?,
                    vocab: 256,
                    own_tokenizer: false,
                    body: CorpusBody::Synthetic(language),
                }
            }
            DataSource::Text(path) => Self::open_text(path, spec.tokenizer.unwrap_or(TokenizerKind::Byte))?,
            DataSource::Shards(path) => {
                Self::open_shards(path, spec.tokenizer.unwrap_or(TokenizerKind::Gpt2))?
            }
            DataSource::Path(path) if path.join(MANIFEST_FILE).is_file() => {
                if let Some(kind) = spec.tokenizer {
                    return Err(DataError::BadSpec {
                        spec: spec.to_string(),
                        reason: format!(
                            "a dataset directory names its own tokenizer; drop `--tokenizer {kind}`"
                        ),
                    });
                }
                Self::open_dataset(path)?
            }
            DataSource::Path(path) => {
                let meta = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?;
                let shards =
                    if meta.is_dir() { !list_files(path, &is_bin)?.is_empty() } else { is_bin(path) };
                if shards {
                    Self::open_shards(path, spec.tokenizer.unwrap_or(TokenizerKind::Gpt2))?
                } else {
                    Self::open_text(path, spec.tokenizer.unwrap_or(TokenizerKind::Byte))?
                }
            }
        };
        tracing::info!(data = %inner.description, vocab = inner.vocab, "opened training data");
        Ok(Corpus { inner: Arc::new(inner) })
    }

    fn open_text(path: &Path, kind: TokenizerKind) -> Result<CorpusInner, DataError> {
        let tokenizer = kind.build()?;
        let tokens = load_text(path, tokenizer.as_ref())?;
        let count = tokens.len();
        let stores = vec![TokenStore::Memory { tokens }];
        let (train, val) = split_tail(&stores);
        Ok(CorpusInner {
            description: format!("text {} ({count} tokens, tokenizer {kind})", path.display()),
            vocab: tokenizer.vocab_size(),
            own_tokenizer: false,
            tokenizer,
            body: CorpusBody::Tokens { stores, train, val },
        })
    }

    /// A dataset directory (`murmur data add`): its splits and its tokenizer.
    fn open_dataset(path: &Path) -> Result<CorpusInner, DataError> {
        let dataset = DatasetDir::open(path)?;
        let tokenizer = dataset.open_tokenizer()?;
        let m = &dataset.manifest;
        let stores: Vec<TokenStore> = m
            .train
            .iter()
            .chain(&m.val)
            .map(|e| {
                let bytes = dataset.read_shard(&e.hash)?;
                let name = format!("{} shard {}", path.display(), e.hash);
                let tokens = shard_tokens(&bytes, m.tokenizer.vocab_size(), &name)?;
                Ok(TokenStore::Memory { tokens: tokens.into_iter().map(u32::from).collect() })
            })
            .collect::<Result<_, DataError>>()?;
        let (train, val) = (whole(&stores, 0..m.train.len()), whole(&stores, m.train.len()..stores.len()));
        Ok(CorpusInner {
            description: format!(
                "dataset {} ({}, {} train + {} val tokens, tokenizer {} of {} ids)",
                path.display(),
                dataset.id(),
                m.tokens(Split::Train),
                m.tokens(Split::Val),
                m.tokenizer.name(),
                m.tokenizer.vocab_size()
            ),
            vocab: tokenizer.vocab_size(),
            own_tokenizer: matches!(m.tokenizer, DatasetTokenizer::Bpe { .. }),
            tokenizer,
            body: CorpusBody::Tokens { stores, train, val },
        })
    }

    fn open_shards(path: &Path, kind: TokenizerKind) -> Result<CorpusInner, DataError> {
        let meta = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?;
        let files: Vec<PathBuf> = if meta.is_dir() {
            let files = list_files(path, &is_bin)?;
            if files.is_empty() {
                return Err(DataError::EmptyFolder { path: path.to_path_buf() });
            }
            files
        } else {
            vec![path.to_path_buf()]
        };
        // Train shards first, then validation shards, each in sorted order.
        let (val_files, train_files): (Vec<PathBuf>, Vec<PathBuf>) =
            files.into_iter().partition(|p| is_val_shard(p));
        if train_files.is_empty() {
            return Err(DataError::OnlyValidationShards { path: path.to_path_buf() });
        }
        let stores: Vec<TokenStore> = train_files
            .iter()
            .chain(&val_files)
            .map(|p| TokenShard::open(p).map(TokenStore::Shard))
            .collect::<Result<_, _>>()?;
        let (train, val) = if val_files.is_empty() {
            split_tail(&stores)
        } else {
            (whole(&stores, 0..train_files.len()), whole(&stores, train_files.len()..stores.len()))
        };
        let tokens: u64 = stores.iter().map(TokenStore::len).sum();
        let tokenizer = kind.build()?;
        Ok(CorpusInner {
            description: format!(
                "shards {} ({} train + {} val files, {tokens} tokens, tokenizer {kind})",
                path.display(),
                train_files.len(),
                val_files.len()
            ),
            vocab: tokenizer.vocab_size(),
            own_tokenizer: false,
            tokenizer,
            body: CorpusBody::Tokens { stores, train, val },
        })
    }

    /// The vocabulary of the data's own tokenizer, when it brings one (a
    /// dataset directory with a tokenizer.json): a model trained on it
    /// takes this vocabulary.
    pub fn own_vocabulary(&self) -> Option<usize> {
        self.inner.own_tokenizer.then_some(self.inner.vocab)
    }

    /// Vocabulary size of the tokens this corpus yields (before padding).
    pub fn vocab_size(&self) -> usize {
        self.inner.vocab
    }

    /// The best achievable validation loss in nats per token, when known
    /// (the synthetic corpus); `None` for real data.
    pub fn entropy_floor(&self) -> Option<f64> {
        match &self.inner.body {
            CorpusBody::Synthetic(language) => Some(language.entropy_rate()),
            CorpusBody::Tokens { .. } => None,
        }
    }

    /// The tokenizer that encodes prompts and decodes samples for this data.
    pub fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.inner.tokenizer)
    }

    /// The synthetic language, if this is the synthetic corpus.
    pub fn synthetic(&self) -> Option<&SyntheticLanguage> {
        match &self.inner.body {
            CorpusBody::Synthetic(language) => Some(language),
            CorpusBody::Tokens { .. } => None,
        }
    }

    /// Tokens in the (train, validation) splits; `None` for the unbounded synthetic streams.
    pub fn split_tokens(&self) -> Option<(u64, u64)> {
        match &self.inner.body {
            CorpusBody::Synthetic(_) => None,
            CorpusBody::Tokens { train, val, .. } => {
                Some((train.iter().map(|s| s.len).sum(), val.iter().map(|s| s.len).sum()))
            }
        }
    }

    /// Bytes of text per token in the validation split (over at most its
    /// first 2^20 tokens, end-of-text tokens left out), to turn a loss per
    /// token into bits per byte; `None` for the synthetic corpus.
    pub fn val_bytes_per_token(&self) -> Result<Option<f64>, DataError> {
        const SAMPLE: u64 = 1 << 20;
        let CorpusBody::Tokens { stores, val, .. } = &self.inner.body else { return Ok(None) };
        let mut tokens: Vec<u32> = Vec::new();
        for seg in val {
            let take = seg.len.min(SAMPLE - tokens.len() as u64) as usize;
            let start = seg.start as usize;
            match &stores[seg.store] {
                TokenStore::Memory { tokens: all } => tokens.extend_from_slice(&all[start..start + take]),
                TokenStore::Shard(shard) => {
                    let mut window = vec![0u32; take];
                    let mut file =
                        std::fs::File::open(shard.path()).map_err(|e| DataError::io(shard.path(), e))?;
                    shard.read_into(&mut file, seg.start, &mut window, self.inner.vocab)?;
                    tokens.extend_from_slice(&window);
                }
            }
            if tokens.len() as u64 >= SAMPLE {
                break;
            }
        }
        let eot = self.inner.tokenizer.eot();
        tokens.retain(|&t| Some(t) != eot);
        let bytes = self.inner.tokenizer.decode(&tokens).len();
        Ok((bytes > 0).then(|| bytes as f64 / tokens.len() as f64))
    }

    /// One line saying what was opened.
    pub fn describe(&self) -> &str {
        &self.inner.description
    }

    /// This node's training batches: `batch` windows of `seq + 1` tokens each.
    /// Nodes `0..shard_count` with the same `seed` read disjoint windows of
    /// every epoch (synthetic: independent streams seeded by (seed, shard_index)).
    pub fn train_loader(
        &self,
        batch: usize,
        seq: usize,
        seed: u64,
        shard_index: u64,
        shard_count: u64,
    ) -> Result<BatchLoader, DataError> {
        BatchLoader::train(Arc::clone(&self.inner), batch, seq, seed, shard_index, shard_count)
    }

    /// Held-out batches in a fixed order, identical on every node; make a fresh
    /// one (or `reset`) for each evaluation to score the same windows.
    pub fn val_loader(&self, batch: usize, seq: usize) -> Result<BatchLoader, DataError> {
        BatchLoader::val(Arc::clone(&self.inner), batch, seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::shard::write_shard;

    #[test]
    fn validation_shards_are_recognised_by_name() {
        assert!(is_val_shard(Path::new("fineweb_val_000000.bin")));
        assert!(is_val_shard(Path::new("data/tiny_shakespeare_val.bin")));
        assert!(!is_val_shard(Path::new("fineweb_train_000001.bin")));
        assert!(!is_val_shard(Path::new("interval_3.bin")));
    }

    #[test]
    fn tail_split_holds_out_five_percent_across_stores() {
        let stores = vec![
            TokenStore::Memory { tokens: vec![0; 950] },
            TokenStore::Memory { tokens: vec![0; 30] },
            TokenStore::Memory { tokens: vec![0; 20] },
        ];
        let (train, val) = split_tail(&stores);
        assert_eq!(train, [Segment { store: 0, start: 0, len: 950 }]);
        assert_eq!(val, [Segment { store: 1, start: 0, len: 30 }, Segment { store: 2, start: 0, len: 20 }]);
    }

    #[test]
    fn synthetic_corpus_reports_its_floor() {
        let corpus = Corpus::open(&DataSpec::synthetic()).unwrap();
        assert_eq!(corpus.vocab_size(), 256);
        let floor = corpus.entropy_floor().unwrap();
        assert!(floor > 0.0 && floor <= 2.5);
        assert!(corpus.describe().contains("entropy floor"));
        let gpt2 = DataSpec::synthetic().with_tokenizer(TokenizerKind::Gpt2);
        assert!(matches!(Corpus::open(&gpt2), Err(DataError::BadSpec { .. })));
    }

    #[test]
    fn text_file_opens_with_byte_tokens_and_no_floor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.txt");
        std::fs::write(&path, "hello world\n".repeat(100)).unwrap();
        let corpus = Corpus::open(&DataSpec::parse(path.to_str().unwrap()).unwrap()).unwrap();
        assert_eq!(corpus.vocab_size(), 256);
        assert_eq!(corpus.entropy_floor(), None);
        assert_eq!(corpus.split_tokens(), Some((1140, 60)));
    }

    #[test]
    fn shard_folder_uses_its_val_shard() {
        let dir = tempfile::tempdir().unwrap();
        write_shard(&dir.path().join("toy_train_000001.bin"), &[1; 1000]).unwrap();
        write_shard(&dir.path().join("toy_train_000002.bin"), &[2; 1000]).unwrap();
        write_shard(&dir.path().join("toy_val_000000.bin"), &[3; 300]).unwrap();
        std::fs::write(dir.path().join("README.md"), "not a shard").unwrap();
        let corpus = Corpus::open(&DataSpec::parse(dir.path().to_str().unwrap()).unwrap()).unwrap();
        assert_eq!(corpus.vocab_size(), 50257);
        assert_eq!(corpus.split_tokens(), Some((2000, 300)));
        let only_val = tempfile::tempdir().unwrap();
        write_shard(&only_val.path().join("toy_val.bin"), &[3; 300]).unwrap();
        let spec = DataSpec::parse(&format!("shards:{}", only_val.path().display())).unwrap();
        assert!(matches!(Corpus::open(&spec), Err(DataError::OnlyValidationShards { .. })));
    }

    #[test]
    fn missing_path_and_bad_shard_fail_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let missing = DataSpec::parse(dir.path().join("absent").to_str().unwrap()).unwrap();
        let err = Corpus::open(&missing).unwrap_err();
        assert!(matches!(err, DataError::MissingPath { .. }), "{err}");
        let bad = dir.path().join("bad.bin");
        std::fs::write(&bad, vec![7u8; 2048]).unwrap();
        let err = Corpus::open(&DataSpec::parse(bad.to_str().unwrap()).unwrap()).unwrap_err();
        assert!(matches!(err, DataError::BadShardMagic { .. }), "{err}");
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, "").unwrap();
        let err = Corpus::open(&DataSpec::parse(empty.to_str().unwrap()).unwrap()).unwrap_err();
        assert!(matches!(err, DataError::EmptyFile { .. }), "{err}");
    }
}
