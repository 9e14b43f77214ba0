//! Content-addressed blob files: states, deltas and dataset shards and
//! manifests, named by their id.
//!
//! A blob is written to a temporary name, fsynced, renamed to
//! `<root>/<kind>/<hex id>`, and the directory is fsynced, so a crash leaves
//! either the whole blob or none. Its chunk table is computed as it is
//! stored (the id is merged from it, so the bytes are hashed once) and kept
//! with it (`store::tables`, renamed into place just before the blob).
//! Reads check the hash. Serving never reads a whole blob: a chunk is read
//! at its offset and checked against the blob's table (itself checked
//! against the id), then kept in a bounded cache (`store::cache`) so a
//! chunk asked for again is not read and hashed again; concurrent requests
//! for one table or one chunk share one read (`store::flight`).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use super::cache::{ChunkCache, ChunkKey};
use super::flight::Flights;
use super::tables::{table_of_file, TableFiles};
use super::tree::{self, BlobKind};
use super::{fsync_dir, StoreError};
use murmur_protocol::hash::hex;

pub use super::tables::ChunkTable;

/// Most bytes of verified chunks kept in memory for serving.
pub const CHUNK_CACHE_BYTES: usize = 256 << 20;

/// The blob directory.
#[derive(Debug)]
pub struct BlobStore {
    root: PathBuf,
    tables: TableFiles,
    chunks: Mutex<ChunkCache>,
    table_reads: Flights<(BlobKind, [u8; 32])>,
    chunk_reads: Flights<ChunkKey>,
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
            tables: TableFiles::open(&root.join("table"))?,
            chunks: Mutex::new(ChunkCache::new(CHUNK_CACHE_BYTES)),
            table_reads: Flights::default(),
            chunk_reads: Flights::default(),
        })
    }

    /// Where blob `id` of `kind` lives.
    pub fn path(&self, kind: BlobKind, id: &[u8; 32]) -> PathBuf {
        self.root.join(kind.dir_name()).join(hex(id))
    }

    /// Where the chunk table of blob `id` of `kind` is kept (blobs of more
    /// than one chunk).
    pub fn table_path(&self, kind: BlobKind, id: &[u8; 32]) -> PathBuf {
        self.tables.path(kind, id)
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

    /// Store `bytes` as a blob of `kind`, with its chunk table; returns its id.
    pub fn put(&self, kind: BlobKind, bytes: &[u8]) -> Result<[u8; 32], StoreError> {
        let len = bytes.len() as u64;
        let table = tree::table_of(kind, bytes);
        let id = tree::root_of(kind, len, &table).unwrap_or_else(|| kind.hash(bytes));
        if self.contains(kind, &id) {
            return Ok(id);
        }
        let tmp = self.temp_path(kind.dir_name());
        {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        self.install(kind, &id, len, &table, &tmp)?;
        Ok(id)
    }

    /// Move a complete, fsynced temporary file into place as blob `id`
    /// after checking its hash (read a chunk at a time, computing the
    /// table it is stored with).
    pub fn adopt(&self, kind: BlobKind, id: &[u8; 32], tmp: &Path) -> Result<(), StoreError> {
        let mut f = File::open(tmp)?;
        let len = f.metadata()?.len();
        let table = table_of_file(kind, &mut f, len)?;
        let root = match tree::chunk_count(len) {
            0 => Some(kind.hash(&[])),
            _ => tree::root_of(kind, len, &table),
        };
        if root != Some(*id) {
            let _ = fs::remove_file(tmp);
            return Err(StoreError::HashMismatch { kind, id: hex(id) });
        }
        self.install(kind, id, len, &table, tmp)
    }

    /// Rename the checked temporary file `tmp` into place as blob `id`, its
    /// table first (a crash between the two leaves a table without a blob,
    /// which `retain` removes, never a blob without its table).
    fn install(
        &self,
        kind: BlobKind,
        id: &[u8; 32],
        len: u64,
        table: &[[u8; 32]],
        tmp: &Path,
    ) -> Result<(), StoreError> {
        self.tables.write(kind, id, len, table, &self.temp_path("table"))?;
        fs::rename(tmp, self.path(kind, id))?;
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
            return Err(self.discard(kind, id));
        }
        Ok(bytes)
    }

    /// The verified chunk table of a stored blob: cached, else from its
    /// table file, else rebuilt from the blob a chunk at a time (and
    /// written, so that happens once). Concurrent callers for one blob
    /// share one load.
    pub fn table(&self, kind: BlobKind, id: &[u8; 32]) -> Result<ChunkTable, StoreError> {
        self.table_reads.once(&(kind, *id), || self.tables.cached(kind, id), || self.load_table(kind, id))
    }

    fn load_table(&self, kind: BlobKind, id: &[u8; 32]) -> Result<ChunkTable, StoreError> {
        let missing = || StoreError::Missing { kind, id: hex(id) };
        let mut f = File::open(self.path(kind, id)).map_err(|_| missing())?;
        let len = f.metadata()?.len();
        let table = match tree::chunk_count(len) {
            0 => return Err(missing()),
            1 => vec![*id],
            _ => match self.tables.load(kind, id, len) {
                Some(t) => t,
                None => {
                    let t = table_of_file(kind, &mut f, len)?;
                    if !tree::table_matches(kind, id, len, &t) {
                        return Err(self.discard(kind, id));
                    }
                    let tmp = self.temp_path("table");
                    if let Err(e) = self.tables.write(kind, id, len, &t, &tmp) {
                        tracing::warn!("keeping the chunk table of {kind:?} blob {}: {e}", hex(id));
                        let _ = fs::remove_file(tmp);
                    }
                    t
                }
            },
        };
        let table = Arc::new(table);
        self.tables.remember(kind, id, table.clone());
        Ok(table)
    }

    /// Chunk `index` of a stored blob, read at its offset and checked
    /// against the blob's table (then kept in the chunk cache, and shared
    /// from there while it stays). Concurrent callers for one chunk share
    /// one read. A chunk that fails removes the blob.
    pub fn chunk(&self, kind: BlobKind, id: &[u8; 32], index: u64) -> Result<Bytes, StoreError> {
        let key = (kind, *id, index);
        let cached = || self.chunks.lock().unwrap_or_else(PoisonError::into_inner).get(&key);
        self.chunk_reads.once(&key, cached, || self.read_chunk(kind, id, index))
    }

    fn read_chunk(&self, kind: BlobKind, id: &[u8; 32], index: u64) -> Result<Bytes, StoreError> {
        let table = self.table(kind, id)?;
        let mut f = File::open(self.path(kind, id)).map_err(|_| StoreError::Missing { kind, id: hex(id) })?;
        let len = f.metadata()?.len();
        let (offset, n) = tree::chunk_range(len, index).ok_or(StoreError::BadRange)?;
        f.seek(SeekFrom::Start(offset))?;
        let mut buf = vec![0u8; n];
        f.read_exact(&mut buf)?;
        let entry = usize::try_from(index).ok().and_then(|i| table.get(i).copied());
        if entry.is_none() || tree::chunk_entry(kind, len, index, &buf) != entry {
            return Err(self.discard(kind, id));
        }
        let buf = Bytes::from(buf);
        self.chunks.lock().unwrap_or_else(PoisonError::into_inner).insert((kind, *id, index), buf.clone());
        Ok(buf)
    }

    /// Remove a blob found corrupt (it will be fetched again); the error
    /// to answer with.
    fn discard(&self, kind: BlobKind, id: &[u8; 32]) -> StoreError {
        let _ = self.remove(kind, id);
        StoreError::HashMismatch { kind, id: hex(id) }
    }

    /// Drop what is kept about one blob besides the blob (its table, cached
    /// and on disk, and its cached chunks).
    fn forget(&self, kind: BlobKind, id: &[u8; 32]) -> Result<(), StoreError> {
        self.chunks.lock().unwrap_or_else(PoisonError::into_inner).forget_blob(kind, id);
        Ok(self.tables.remove(kind, id)?)
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

    /// Delete one blob and its table (absent is fine).
    pub fn remove(&self, kind: BlobKind, id: &[u8; 32]) -> Result<(), StoreError> {
        match fs::remove_file(self.path(kind, id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        self.forget(kind, id)
    }

    /// Delete blobs of `kind` not in `keep` (and their tables, and tables
    /// left without a blob).
    pub fn retain(&self, kind: BlobKind, keep: &[[u8; 32]]) -> Result<usize, StoreError> {
        let mut removed = 0;
        for id in self.list(kind)? {
            if !keep.contains(&id) {
                fs::remove_file(self.path(kind, &id))?;
                self.forget(kind, &id)?;
                removed += 1;
            }
        }
        self.tables.retain(kind, keep)?;
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
    fn a_blobs_table_is_stored_with_it_and_removed_with_it() {
        let (dir, store, bytes, id) = store_with_state(251);
        let path = store.table_path(BlobKind::State, &id);
        assert_eq!(
            fs::read(&path).expect("table file"),
            tree::table_of(BlobKind::State, &bytes).as_flattened()
        );
        // A blob of one chunk has the table [id] and no file.
        let small = store.put(BlobKind::Delta, &bytes[..1000]).expect("put");
        assert!(!store.table_path(BlobKind::Delta, &small).exists());
        assert_eq!(*store.table(BlobKind::Delta, &small).expect("table"), vec![small]);
        // Read from the file by a store that has cached nothing.
        drop(store);
        let store = BlobStore::open(dir.path()).expect("reopen");
        assert_eq!(
            *store.table(BlobKind::State, &id).expect("table"),
            tree::table_of(BlobKind::State, &bytes)
        );
        store.remove(BlobKind::State, &id).expect("remove");
        assert!(!path.exists());
        // A table left without its blob (a crash between the two renames)
        // goes with the next retain.
        let id = store.put(BlobKind::State, &bytes).expect("put");
        fs::remove_file(store.path(BlobKind::State, &id)).expect("rm");
        store.retain(BlobKind::State, &[]).expect("retain");
        assert!(!store.table_path(BlobKind::State, &id).exists());
    }

    #[test]
    fn a_missing_or_wrong_table_file_is_rebuilt_from_the_blob_once() {
        let (dir, store, bytes, id) = store_with_state(239);
        let path = store.table_path(BlobKind::State, &id);
        let good = fs::read(&path).expect("table file");
        let mut wrong = good.clone();
        wrong[40] ^= 1;
        for damage in [None, Some(wrong), Some(good[..64].to_vec())] {
            match &damage {
                None => fs::remove_file(&path).expect("rm"),
                Some(b) => fs::write(&path, b).expect("write"),
            }
            let store = BlobStore::open(dir.path()).expect("reopen");
            assert_eq!(
                *store.table(BlobKind::State, &id).expect("table"),
                tree::table_of(BlobKind::State, &bytes)
            );
            assert_eq!(fs::read(&path).expect("rewritten"), good, "written again ({damage:?})");
            assert_eq!(store.chunk(BlobKind::State, &id, 1).expect("chunk"), bytes[1 << 20..2 << 20]);
        }
        // A blob that does not match its id, with no table to go by, is
        // found out by the rebuild and removed.
        let mut b = bytes.clone();
        b[7] ^= 1;
        fs::write(store.path(BlobKind::State, &id), &b).expect("write");
        fs::remove_file(&path).expect("rm");
        let store = BlobStore::open(dir.path()).expect("reopen");
        assert!(matches!(store.table(BlobKind::State, &id), Err(StoreError::HashMismatch { .. })));
        assert!(!store.contains(BlobKind::State, &id));
    }

    #[test]
    fn a_blob_adopted_from_a_file_is_checked_and_gets_its_table() {
        let (_dir, store, bytes, id) = store_with_state(233);
        store.remove(BlobKind::State, &id).expect("remove");
        let tmp = store.temp_path("state");
        fs::write(&tmp, &bytes).expect("write");
        assert!(matches!(store.adopt(BlobKind::State, &[1; 32], &tmp), Err(StoreError::HashMismatch { .. })));
        assert!(!tmp.exists(), "a file that does not match is removed");
        fs::write(&tmp, &bytes).expect("write");
        store.adopt(BlobKind::State, &id, &tmp).expect("adopt");
        assert_eq!(store.get(BlobKind::State, &id).expect("get"), bytes);
        assert!(store.table_path(BlobKind::State, &id).exists());
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
