//! Chunk tables kept with their blobs, so that serving never reads a whole
//! blob: a blob of more than one chunk has its table (32 bytes a chunk, in
//! order) in `<root>/<kind>/<hex id>`, written and renamed into place
//! before the blob itself, so a stored blob has its table from the start.
//! A table file is checked against the blob's id and length each time it
//! is loaded; one that is missing (data directories from before tables were
//! kept) or wrong is rebuilt by reading the blob a chunk at a time, and
//! written again, so that happens once. A blob of one chunk has the table
//! `[id]` and no file. Loaded tables are kept in a small cache (the newest
//! `CACHED_TABLES`, the oldest forgotten first).

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::fsync_dir;
use super::tree::{self, BlobKind, CHUNK_LEN, MAX_CHUNKS};
use murmur_protocol::hash::hex;

/// A blob's verified chunk table, shared with the server.
pub type ChunkTable = Arc<Vec<[u8; 32]>>;

/// Most chunk tables kept in memory (a table is at most 16,385 entries,
/// 512 KiB; a 1 GB state's is 32 KiB).
pub const CACHED_TABLES: usize = 64;

/// The table files, and the tables loaded lately.
#[derive(Debug)]
pub struct TableFiles {
    root: PathBuf,
    cache: Mutex<TableCache>,
}

impl TableFiles {
    /// Open (creating) the table directory `root`.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        for kind in BlobKind::ALL {
            fs::create_dir_all(root.join(kind.dir_name()))?;
        }
        Ok(Self { root: root.to_path_buf(), cache: Mutex::new(TableCache::default()) })
    }

    /// Where the table of blob `id` of `kind` lives.
    pub fn path(&self, kind: BlobKind, id: &[u8; 32]) -> PathBuf {
        self.root.join(kind.dir_name()).join(hex(id))
    }

    /// A cached table.
    pub fn cached(&self, kind: BlobKind, id: &[u8; 32]) -> Option<ChunkTable> {
        self.lock().get(&(kind, *id))
    }

    /// Keep `table` in the cache.
    pub fn remember(&self, kind: BlobKind, id: &[u8; 32], table: ChunkTable) {
        self.lock().insert((kind, *id), table);
    }

    /// Write `table` of blob `id` (`len` bytes) durably through `tmp` (a
    /// temporary path on the same filesystem). One-chunk blobs have none.
    pub fn write(
        &self,
        kind: BlobKind,
        id: &[u8; 32],
        len: u64,
        table: &[[u8; 32]],
        tmp: &Path,
    ) -> std::io::Result<()> {
        if tree::chunk_count(len) <= 1 {
            return Ok(());
        }
        {
            let mut f = File::create(tmp)?;
            f.write_all(table.as_flattened())?;
            f.sync_all()?;
        }
        fs::rename(tmp, self.path(kind, id))?;
        fsync_dir(&self.root.join(kind.dir_name()))
    }

    /// The stored table of blob `id` of `len` bytes, if its file is there
    /// and merges to the id (checked here, every time it is read).
    pub fn load(&self, kind: BlobKind, id: &[u8; 32], len: u64) -> Option<Vec<[u8; 32]>> {
        let n = tree::chunk_count(len);
        if n > MAX_CHUNKS {
            return None;
        }
        let mut f = File::open(self.path(kind, id)).ok()?;
        if f.metadata().ok()?.len() != n * 32 {
            return None;
        }
        let mut table = vec![[0u8; 32]; usize::try_from(n).ok()?];
        f.read_exact(table.as_flattened_mut()).ok()?;
        tree::table_matches(kind, id, len, &table).then_some(table)
    }

    /// Forget blob `id`'s table: the cached one and its file.
    pub fn remove(&self, kind: BlobKind, id: &[u8; 32]) -> std::io::Result<()> {
        self.lock().remove(&(kind, *id));
        match fs::remove_file(self.path(kind, id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Delete the table files of `kind` whose blob is not in `keep` (a
    /// crash between a table's rename and its blob's leaves one behind).
    pub fn retain(&self, kind: BlobKind, keep: &[[u8; 32]]) -> std::io::Result<()> {
        for e in fs::read_dir(self.root.join(kind.dir_name()))? {
            let e = e?;
            let id = e
                .file_name()
                .to_str()
                .and_then(murmur_protocol::hash::unhex)
                .and_then(|v| <[u8; 32]>::try_from(v).ok());
            match id {
                Some(id) if keep.contains(&id) => {}
                Some(id) => self.remove(kind, &id)?,
                None => fs::remove_file(e.path())?,
            }
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TableCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The chunk table of the `len`-byte blob read from `file`, one chunk at a
/// time (one chunk's buffer in memory, however large the blob).
pub fn table_of_file(kind: BlobKind, file: &mut File, len: u64) -> std::io::Result<Vec<[u8; 32]>> {
    let n = tree::chunk_count(len);
    if n > MAX_CHUNKS {
        return Err(std::io::Error::other("blob has more chunks than any blob may"));
    }
    let mut buf = vec![0u8; CHUNK_LEN.min(len) as usize];
    let mut table = Vec::with_capacity(n as usize);
    for index in 0..n {
        let Some((_, size)) = tree::chunk_range(len, index) else { break };
        file.read_exact(&mut buf[..size])?;
        let entry = tree::chunk_entry(kind, len, index, &buf[..size]);
        table.push(entry.ok_or_else(|| std::io::Error::other("chunk of the wrong length"))?);
    }
    Ok(table)
}

type TableKey = (BlobKind, [u8; 32]);

/// The newest `CACHED_TABLES` tables, the oldest forgotten first.
#[derive(Debug, Default)]
struct TableCache {
    tables: HashMap<TableKey, ChunkTable>,
    order: VecDeque<TableKey>,
}

impl TableCache {
    fn get(&self, key: &TableKey) -> Option<ChunkTable> {
        self.tables.get(key).cloned()
    }

    fn insert(&mut self, key: TableKey, table: ChunkTable) {
        if self.tables.insert(key, table).is_some() {
            return;
        }
        self.order.push_back(key);
        while self.tables.len() > CACHED_TABLES {
            let Some(old) = self.order.pop_front() else { break };
            self.tables.remove(&old);
        }
    }

    fn remove(&mut self, key: &TableKey) {
        if self.tables.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_forgets_the_oldest_table_not_all_of_them() {
        let mut c = TableCache::default();
        for i in 0..=CACHED_TABLES {
            c.insert((BlobKind::Delta, [i as u8; 32]), Arc::new(vec![[i as u8; 32]]));
        }
        assert_eq!(c.tables.len(), CACHED_TABLES);
        assert!(c.get(&(BlobKind::Delta, [0; 32])).is_none(), "the oldest went");
        assert!(c.get(&(BlobKind::Delta, [1; 32])).is_some(), "the rest stay");
        c.remove(&(BlobKind::Delta, [1; 32]));
        assert_eq!(c.order.len(), CACHED_TABLES - 1);
    }

    #[test]
    fn a_streamed_table_is_the_table_of_the_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        for len in [1usize, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) - 5] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let path = dir.path().join(format!("b{len}"));
            fs::write(&path, &bytes).expect("write");
            let mut f = File::open(&path).expect("open");
            let t = table_of_file(BlobKind::State, &mut f, len as u64).expect("table");
            assert_eq!(t, tree::table_of(BlobKind::State, &bytes), "len {len}");
        }
    }
}
