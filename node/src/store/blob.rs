//! Content-addressed blob files: states, deltas and dataset shards and
//! manifests, named by their id.
//!
//! A blob is written to a temporary name, fsynced, renamed to
//! `<root>/<kind>/<hex id>`, and the directory is fsynced, so a crash leaves
//! either the whole blob or none. Reads check the hash; serving checks each
//! chunk against a table that was itself checked against the id, as it is
//! read from disk, and keeps checked chunks in a bounded cache
//! (`store::cache`) so a chunk asked for again is not read and hashed again.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::cache::ChunkCache;
use super::tree::{self, BlobKind};
use super::{fsync_dir, StoreError};
use murmur_protocol::hash::hex;

/// A blob's verified chunk table, shared with the server.
pub type ChunkTable = Arc<Vec<[u8; 32]>>;

/// Most chunk tables kept in memory for serving.
const TABLE_CACHE: usize = 64;
/// Most bytes of verified chunks kept in memory for serving.
pub const CHUNK_CACHE_BYTES: usize = 256 << 20;

/// The blob directory.
#[derive(Debug)]
pub struct BlobStore {
    root: PathBuf,
    tables: Mutex<HashMap<(BlobKind, [u8; 32]), ChunkTable>>,
    chunks: Mutex<ChunkCache>,
}

impl BlobStore {
    /// Open (creating) the blob directory; removes temporary files a crash
    /// left — and any another process is writing, so open it through
    /// `Store::open`, which holds the data directory's lock first.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        for kind in BlobKind::ALL {
            fs::create_dir_all(root.join(kind.dir_name()))?;
        }
        let tmp = root.join("tmp");
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        fs::create_dir_all(&tmp)?;
        Ok(Self {
            root: root.to_path_buf(),
            tables: Mutex::new(HashMap::new()),
            chunks: Mutex::new(ChunkCache::new(CHUNK_CACHE_BYTES)),
        })
    }

    /// Where blob `id` of `kind` lives.
    pub fn path(&self, kind: BlobKind, id: &[u8; 32]) -> PathBuf {
        self.root.join(kind.dir_name()).join(hex(id))
    }

    /// A fresh temporary path inside the store (same filesystem as the blobs).
    pub fn temp_path(&self, tag: &str) -> PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        self.root.join("tmp").join(format!("{tag}-{}-{n}", std::process::id()))
    }

    pub fn contains(&self, kind: BlobKind, id: &[u8; 32]) -> bool {
        self.path(kind, id).is_file()
    }

    /// Length of a stored blob.
    pub fn len_of(&self, kind: BlobKind, id: &[u8; 32]) -> Option<u64> {
        fs::metadata(self.path(kind, id)).ok().map(|m| m.len())
    }

    /// Store `bytes` as a blob of `kind`; returns its id.
    pub fn put(&self, kind: BlobKind, bytes: &[u8]) -> Result<[u8; 32], StoreError> {
        let id = kind.hash(bytes);
        if self.contains(kind, &id) {
            return Ok(id);
        }
        let tmp = self.temp_path(kind.dir_name());
        {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        self.adopt(kind, &id, &tmp)?;
        Ok(id)
    }

    /// Move a complete, fsynced temporary file into place as blob `id`
    /// after checking its hash.
    pub fn adopt(&self, kind: BlobKind, id: &[u8; 32], tmp: &Path) -> Result<(), StoreError> {
        let bytes = fs::read(tmp)?;
        if kind.hash(&bytes) != *id {
            let _ = fs::remove_file(tmp);
            return Err(StoreError::HashMismatch { kind, id: hex(id) });
        }
        let dst = self.path(kind, id);
        fs::rename(tmp, &dst)?;
        fsync_dir(&self.root.join(kind.dir_name()))?;
        Ok(())
    }

    /// Read a blob, refusing it unless it hashes to `id` (a corrupt blob is
    /// removed so it can be fetched again).
    pub fn get(&self, kind: BlobKind, id: &[u8; 32]) -> Result<Vec<u8>, StoreError> {
        let path = self.path(kind, id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing { kind, id: hex(id) })
            }
            Err(e) => return Err(e.into()),
        };
        if kind.hash(&bytes) != *id {
            self.forget(kind, id);
            let _ = fs::remove_file(&path);
            return Err(StoreError::HashMismatch { kind, id: hex(id) });
        }
        Ok(bytes)
    }

    /// The verified chunk table of a stored blob (cached).
    pub fn table(&self, kind: BlobKind, id: &[u8; 32]) -> Result<ChunkTable, StoreError> {
        if let Some(t) = self.tables.lock().ok().and_then(|m| m.get(&(kind, *id)).cloned()) {
            return Ok(t);
        }
        let bytes = self.get(kind, id)?;
        let t = Arc::new(tree::table_of(kind, &bytes));
        if let Ok(mut m) = self.tables.lock() {
            if m.len() >= TABLE_CACHE {
                m.clear();
            }
            m.insert((kind, *id), t.clone());
        }
        Ok(t)
    }

    /// Chunk `index` of a stored blob, checked against its table when it is
    /// read from disk (then kept in the chunk cache, and shared from there
    /// while it stays). A chunk that fails removes the blob.
    pub fn chunk(&self, kind: BlobKind, id: &[u8; 32], index: u64) -> Result<Bytes, StoreError> {
        if let Some(b) = self.chunks.lock().ok().and_then(|c| c.get(&(kind, *id, index))) {
            return Ok(b);
        }
        let table = self.table(kind, id)?;
        let len = self.len_of(kind, id).ok_or(StoreError::Missing { kind, id: hex(id) })?;
        let (offset, n) = tree::chunk_range(len, index).ok_or(StoreError::BadRange)?;
        let mut f = File::open(self.path(kind, id))?;
        f.seek(SeekFrom::Start(offset))?;
        let mut buf = vec![0u8; n];
        f.read_exact(&mut buf)?;
        let entry = usize::try_from(index).ok().and_then(|i| table.get(i).copied());
        if entry.is_none() || tree::chunk_entry(kind, len, index, &buf) != entry {
            self.forget(kind, id);
            let _ = fs::remove_file(self.path(kind, id));
            return Err(StoreError::HashMismatch { kind, id: hex(id) });
        }
        let buf = Bytes::from(buf);
        if let Ok(mut c) = self.chunks.lock() {
            c.insert((kind, *id, index), buf.clone());
        }
        Ok(buf)
    }

    /// Drop what is cached about one blob (its table and chunks).
    fn forget(&self, kind: BlobKind, id: &[u8; 32]) {
        if let Ok(mut m) = self.tables.lock() {
            m.remove(&(kind, *id));
        }
        if let Ok(mut c) = self.chunks.lock() {
            c.forget_blob(kind, id);
        }
    }

    /// Ids of every stored blob of `kind`.
    pub fn list(&self, kind: BlobKind) -> Result<Vec<[u8; 32]>, StoreError> {
        let mut out = Vec::new();
        for e in fs::read_dir(self.root.join(kind.dir_name()))? {
            let name = e?.file_name();
            let id = name
                .to_str()
                .and_then(murmur_protocol::hash::unhex)
                .and_then(|v| <[u8; 32]>::try_from(v).ok());
            if let Some(id) = id {
                out.push(id);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Check every blob's hash; returns the names of those that fail.
    pub fn verify_all(&self) -> Result<Vec<String>, StoreError> {
        let mut bad = Vec::new();
        for kind in BlobKind::ALL {
            for e in fs::read_dir(self.root.join(kind.dir_name()))? {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                let ok = fs::read(e.path()).map(|b| hex(&kind.hash(&b)) == name).unwrap_or(false);
                if !ok {
                    bad.push(format!("{}/{name}", kind.dir_name()));
                }
            }
        }
        Ok(bad)
    }

    /// Delete one blob (absent is fine).
    pub fn remove(&self, kind: BlobKind, id: &[u8; 32]) -> Result<(), StoreError> {
        self.forget(kind, id);
        match fs::remove_file(self.path(kind, id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Delete blobs of `kind` not in `keep`.
    pub fn retain(&self, kind: BlobKind, keep: &[[u8; 32]]) -> Result<usize, StoreError> {
        let mut removed = 0;
        for id in self.list(kind)? {
            if !keep.contains(&id) {
                self.forget(kind, &id);
                fs::remove_file(self.path(kind, &id))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// A writable file of `len` bytes for a resumable fetch of blob `id`;
    /// kept across restarts under `partial/`.
    pub fn partial_file(
        &self,
        kind: BlobKind,
        id: &[u8; 32],
        len: u64,
    ) -> Result<(File, PathBuf), StoreError> {
        let dir = self.root.join("partial");
        fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}-{}", kind.dir_name(), hex(id)));
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        if f.metadata()?.len() != len {
            f.set_len(len)?;
        }
        Ok((f, path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store in a fresh directory holding one 3 MB state blob (three
    /// chunks) of bytes `i mod modulus`.
    fn store_with_state(modulus: u32) -> (tempfile::TempDir, BlobStore, Vec<u8>, [u8; 32]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = BlobStore::open(dir.path()).expect("open");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % modulus) as u8).collect();
        let id = store.put(BlobKind::State, &bytes).expect("put");
        (dir, store, bytes, id)
    }

    #[test]
    fn put_get_and_corruption_is_detected() {
        let (_dir, store, bytes, id) = store_with_state(253);
        assert_eq!(store.get(BlobKind::State, &id).expect("get"), bytes);
        assert!(store.get(BlobKind::Delta, &id).is_err());
        assert_eq!(store.chunk(BlobKind::State, &id, 2).expect("chunk"), bytes[2 << 20..]);
        assert!(store.chunk(BlobKind::State, &id, 3).is_err());
        assert!(store.verify_all().expect("verify").is_empty());
        // Corrupt on disk: reads refuse it and drop the file.
        let mut b = bytes.clone();
        b[5] ^= 1;
        fs::write(store.path(BlobKind::State, &id), &b).expect("write");
        assert_eq!(store.verify_all().expect("verify").len(), 1);
        assert!(matches!(store.get(BlobKind::State, &id), Err(StoreError::HashMismatch { .. })));
        assert!(!store.contains(BlobKind::State, &id));
    }

    #[test]
    fn served_chunks_are_checked_when_read_and_then_shared() {
        let (_dir, store, bytes, id) = store_with_state(241);
        let first = store.chunk(BlobKind::State, &id, 0).expect("chunk");
        let again = store.chunk(BlobKind::State, &id, 0).expect("chunk");
        assert_eq!(first, bytes[..1 << 20]);
        assert_eq!(first.as_ptr(), again.as_ptr(), "the second request is served from the cache");
        // A chunk not yet read is checked on its read: corruption there
        // removes the blob and everything cached about it.
        let mut b = bytes.clone();
        b[(1 << 20) + 3] ^= 1;
        fs::write(store.path(BlobKind::State, &id), &b).expect("write");
        assert!(matches!(store.chunk(BlobKind::State, &id, 1), Err(StoreError::HashMismatch { .. })));
        assert!(!store.contains(BlobKind::State, &id));
        assert!(store.chunk(BlobKind::State, &id, 0).is_err());
        // Removing a blob drops its cached chunks too.
        let id = store.put(BlobKind::Delta, &bytes).expect("put");
        store.chunk(BlobKind::Delta, &id, 2).expect("chunk");
        store.remove(BlobKind::Delta, &id).expect("remove");
        assert!(store.chunk(BlobKind::Delta, &id, 2).is_err());
    }

    #[test]
    fn leftover_temporaries_are_cleared_on_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = BlobStore::open(dir.path()).expect("open");
        let tmp = store.temp_path("state");
        fs::write(&tmp, b"half").expect("write");
        drop(store);
        let _store = BlobStore::open(dir.path()).expect("reopen");
        assert!(!tmp.exists());
    }
}
