//! Storage: content-addressed blob files for states and deltas, sled for
//! small metadata, and the key file. A node killed at any instant reopens
//! to its last consistent position: the position record is written only
//! after the state blob it names is durable.
//!
//! Layout of a data directory:
//! ```text
//! node.key          32-byte ed25519 seed (mode 0600)
//! meta/             sled: positions, last signed manifest, round history, run spec
//! blobs/state/<id>  StatePayload bytes, named by StateId (hex)
//! blobs/delta/<id>  DeltaPayload bytes, named by PayloadHash (hex)
//! blobs/dataset-shard/<id>     dataset token shards, named by ShardHash (hex)
//! blobs/dataset-manifest/<id>  dataset manifests, named by DatasetId (hex)
//! blobs/tmp/        writes in progress (cleared on open)
//! blobs/partial/    resumable fetches
//! ```

pub mod blob;
pub mod cache;
pub mod keyfile;
pub mod meta;
pub mod tree;

pub use blob::BlobStore;
pub use meta::{MetaStore, Position, RoundRecord};
pub use tree::{BlobKind, CHUNK_LEN};

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a store operation failed.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("storage I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata database: {0}")]
    Sled(#[from] sled::Error),
    #[error("{kind:?} blob {id} is not in the store")]
    Missing { kind: BlobKind, id: String },
    #[error("{kind:?} blob {id} does not match its hash (removed; it will be fetched again)")]
    HashMismatch { kind: BlobKind, id: String },
    #[error("chunk index out of range")]
    BadRange,
    #[error("{0} is corrupt")]
    Corrupt(&'static str),
}

/// A node's data directory.
#[derive(Debug)]
pub struct Store {
    pub dir: PathBuf,
    pub blobs: BlobStore,
    pub meta: MetaStore,
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            blobs: BlobStore::open(&dir.join("blobs"))?,
            meta: MetaStore::open(&dir.join("meta"))?,
        })
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.join("node.key")
    }
}
