//! The data pipeline: tokenizers, data sources, and the batch loaders the
//! trainer draws from.
//!
//! - `tokenizer`, `gpt2`, `pretokenizer`: byte-level and GPT-2 BPE tokenizers
//!   (GPT-2 works offline from files embedded from `node/assets/gpt2/`).
//! - `bpe`: a dataset's own tokenizer.json (trained byte-level BPE or a file).
//! - `text`, `shard`: UTF-8 text files and folders; llm.c uint16 token shards.
//! - `synthetic`: a seeded word-like language with an exactly known entropy rate.
//! - `spec`: `DataSpec`, the parsed `--data` string.
//! - `corpus`: `Corpus::open`, splits, and the entropy floor.
//! - `loader`: deterministic, resumable, per-node-disjoint batch loaders.
//! - `rng`: seeded randomness shared by the above.
//! - `dataset`: content-addressed datasets (shards + manifest, `murmur data add`,
//!   the built-in `shakespeare`).
//!
//! Typical use:
//! ```no_run
//! use murmur_node::data::{Corpus, DataSpec};
//! let corpus = Corpus::open(&DataSpec::parse("synthetic")?)?;
//! let mut train = corpus.train_loader(8, 64, /*seed*/ 1, /*shard_index*/ 0, /*shard_count*/ 1)?;
//! let batch = train.next_batch()?; // batch.inputs[b * 64 + t], batch.targets likewise
//! # Ok::<(), murmur_node::data::DataError>(())
//! ```

pub mod bpe;
mod corpus;
pub mod dataset;
mod error;
mod gpt2;
pub mod hf_tokenizer;
mod loader;
mod pretokenizer;
pub(crate) mod rng;
mod shard;
mod spec;
mod synthetic;
mod text;
mod tokenizer;

pub use bpe::BpeTokenizer;
pub use corpus::Corpus;
pub use error::DataError;
pub use gpt2::{Gpt2Tokenizer, GPT2_EOT, GPT2_VOCAB_SIZE};
pub use loader::{Batch, BatchLoader, LoaderPosition};
pub use shard::{write_shard, TokenShard, SHARD_HEADER_BYTES, SHARD_MAGIC, SHARD_VERSION};
pub use spec::{DataSource, DataSpec};
pub use synthetic::{SyntheticLanguage, SyntheticSpec};
pub use tokenizer::{named_tokenizer, ByteTokenizer, Tokenizer, TokenizerChoice, TokenizerKind};
