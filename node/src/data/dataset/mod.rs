//! Datasets as content-addressed objects (design §7.1): token shards named
//! by their blake3 plus a manifest (protocol `dataset`) whose hash is the
//! DatasetId a RunSpec names.
//!
//! - `build`: tokenize text / llm.c shards into shards + manifest.
//! - `dir`: the dataset directory `murmur data add --out` writes.
//! - `builtin`: datasets shipped in the binary (`shakespeare`).
//! - `cache`: which shards a node keeps within its byte bound.
//! - `local`: a dataset this node holds from its own command line.
//! - `windows`: the tokens of assigned windows, as training batches.

pub mod build;
pub mod builtin;
pub mod cache;
pub mod dir;
pub mod local;
pub mod windows;

pub use build::{build, BuildOptions, MemorySink, ShardSink, DEFAULT_SHARD_TOKENS};
pub use builtin::{built_in, MemoryDataset, BUILT_IN};
pub use cache::{ShardLru, DEFAULT_DATA_CACHE_BYTES};
pub use dir::{DatasetDir, DirSink};
pub use local::LocalDataset;
pub use windows::{batches_of, shard_tokens};
