//! Storage: content-addressed blob files for states and deltas, sled for
//! small metadata, and the key file. A node killed at any instant reopens
//! to its last consistent position: the position record is written only
//! after the state blob it names is durable. One process at a time: `open`
//! locks the directory before it touches anything in it.
//!
//! Layout of a data directory:
//! ```text
//! lock              held (flock) by the process that has the store open
//! node.key          32-byte ed25519 seed (mode 0600)
//! meta/             sled: positions, last signed manifest, round history, run spec
//! blobs/state/<id>  StatePayload bytes, named by StateId (hex)
//! blobs/delta/<id>  DeltaPayload bytes, named by PayloadHash (hex)
//! blobs/dataset-shard/<id>     dataset token shards, named by ShardHash (hex)
//! blobs/dataset-manifest/<id>  dataset manifests, named by DatasetId (hex)
//! blobs/table/<kind>/<id>      chunk table of each blob over 1 MiB (32 bytes a chunk)
//! blobs/tmp/        writes in progress (cleared on open, once locked)
//! blobs/partial/    resumable fetches
//! ```

pub mod blob;
pub mod cache;
pub mod flight;
pub mod keyfile;
pub mod meta;
pub mod tables;
pub mod tree;

pub use blob::BlobStore;
pub use meta::{MetaStore, Position, RoundRecord};
pub use tree::{BlobKind, CHUNK_LEN};

use std::fs::{File, OpenOptions, TryLockError};
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
    #[error(
        "data directory {} is in use by another murmur process (it holds {}); stop that process, or give this one its own --data-dir",
        .0.display(),
        .0.join(LOCK_FILE).display()
    )]
    Locked(PathBuf),
}

/// The lock file's name in a data directory.
const LOCK_FILE: &str = "lock";

/// A node's data directory.
#[derive(Debug)]
pub struct Store {
    pub dir: PathBuf,
    pub blobs: BlobStore,
    pub meta: MetaStore,
    /// The directory's lock, held while the store is open (released when
    /// the file is closed, by a crash too).
    _lock: File,
}

impl Store {
    /// Open (creating) the data directory. The lock is taken before
    /// anything in the directory changes: a second process on the same
    /// directory is refused before `BlobStore::open` clears `blobs/tmp`,
    /// which holds the first one's writes in progress.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)?;
        let lock = lock(dir)?;
        let meta = MetaStore::open(&dir.join("meta"))?;
        Ok(Self { dir: dir.to_path_buf(), blobs: BlobStore::open(&dir.join("blobs"))?, meta, _lock: lock })
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.join("node.key")
    }
}

/// Make a rename or a new name in `dir` durable: fsync the directory
/// itself (a file's own fsync does not cover its name).
pub(crate) fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Take `dir`'s lock (an exclusive flock on `dir/lock`), or say who holds
/// it. Where the platform has no such lock, sled's own lock on `meta/`
/// (opened next, before the blobs) is the only guard.
fn lock(dir: &Path) -> Result<File, StoreError> {
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK_FILE))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::Locked(dir.to_path_buf())),
        Err(TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => Ok(file),
        Err(TryLockError::Error(e)) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails before `Store::open` took the lock first: the second open
    /// emptied `blobs/tmp` — deleting the first store's write in progress —
    /// and only then did sled refuse it.
    #[test]
    fn a_second_open_is_refused_and_leaves_the_first_ones_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Store::open(dir.path()).expect("open");
        let in_flight = first.blobs.temp_path("state");
        std::fs::write(&in_flight, b"half a state").expect("write");
        let err = Store::open(dir.path()).expect_err("a second store opened the same directory");
        let msg = err.to_string();
        assert!(msg.contains("in use by another murmur process") && msg.contains("--data-dir"), "{msg}");
        assert!(in_flight.exists(), "the second open deleted the first one's write in progress");
        // Once the first store is closed the directory opens again, and
        // what a crash left in blobs/tmp is cleared.
        drop(first);
        let again = Store::open(dir.path()).expect("reopen");
        assert!(!in_flight.exists());
        assert!(again.blobs.temp_path("state").parent().is_some_and(Path::is_dir));
    }
}
