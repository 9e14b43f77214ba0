//! A bounded in-memory cache of verified chunks, for serving.
//!
//! A chunk enters only after it matched its entry in the blob's verified
//! table (when it was read from disk), so a chunk served from here was
//! checked when it was read, like one read for the request; what is saved
//! is the file read and the hash on every further request for it (a delta
//! is asked for by every other trainer, a state by every joiner). The cache
//! holds at most `budget` bytes and forgets the oldest chunks first; the
//! store drops a blob's chunks when the blob is removed or found corrupt.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use super::tree::BlobKind;

/// Which chunk: blob kind, blob id, chunk index.
pub type ChunkKey = (BlobKind, [u8; 32], u64);

/// Verified chunks, oldest forgotten first, at most `budget` bytes.
#[derive(Debug)]
pub struct ChunkCache {
    budget: usize,
    held: usize,
    chunks: HashMap<ChunkKey, Bytes>,
    order: VecDeque<ChunkKey>,
}

impl ChunkCache {
    pub fn new(budget: usize) -> Self {
        Self { budget, held: 0, chunks: HashMap::new(), order: VecDeque::new() }
    }

    /// A cached chunk (a shared handle, not a copy).
    pub fn get(&self, key: &ChunkKey) -> Option<Bytes> {
        self.chunks.get(key).cloned()
    }

    /// Keep a verified chunk, forgetting the oldest ones to stay within the
    /// budget. A chunk larger than the whole budget is not kept.
    pub fn insert(&mut self, key: ChunkKey, chunk: Bytes) {
        if chunk.len() > self.budget || self.chunks.contains_key(&key) {
            return;
        }
        while self.held + chunk.len() > self.budget {
            let Some(old) = self.order.pop_front() else { break };
            if let Some(b) = self.chunks.remove(&old) {
                self.held -= b.len();
            }
        }
        self.held += chunk.len();
        self.chunks.insert(key, chunk);
        self.order.push_back(key);
    }

    /// Forget every chunk of one blob.
    pub fn forget_blob(&mut self, kind: BlobKind, id: &[u8; 32]) {
        self.retain(|k, i| !(k == kind && i == id));
    }

    /// Keep only the chunks of blobs for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(BlobKind, &[u8; 32]) -> bool) {
        let mut held = self.held;
        self.chunks.retain(|(k, i, _), b| {
            let stay = keep(*k, i);
            if !stay {
                held -= b.len();
            }
            stay
        });
        self.held = held;
        let chunks = &self.chunks;
        self.order.retain(|key| chunks.contains_key(key));
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(n: usize, v: u8) -> Bytes {
        Bytes::from(vec![v; n])
    }

    #[test]
    fn stays_within_its_budget_forgetting_the_oldest() {
        let mut c = ChunkCache::new(100);
        c.insert((BlobKind::State, [1; 32], 0), chunk(40, 1));
        c.insert((BlobKind::State, [1; 32], 1), chunk(40, 2));
        assert_eq!(c.held(), 80);
        c.insert((BlobKind::State, [1; 32], 2), chunk(40, 3));
        assert_eq!(c.held(), 80);
        assert!(c.get(&(BlobKind::State, [1; 32], 0)).is_none());
        assert_eq!(c.get(&(BlobKind::State, [1; 32], 2)), Some(chunk(40, 3)));
        // Too large for the budget: not kept, nothing evicted for it.
        c.insert((BlobKind::Delta, [2; 32], 0), chunk(101, 4));
        assert!(c.get(&(BlobKind::Delta, [2; 32], 0)).is_none());
        assert_eq!(c.held(), 80);
        // A second insert of the same chunk changes nothing.
        c.insert((BlobKind::State, [1; 32], 2), chunk(40, 3));
        assert_eq!(c.held(), 80);
    }

    #[test]
    fn forgets_a_blob_and_keeps_the_rest() {
        let mut c = ChunkCache::new(1000);
        for i in 0..3 {
            c.insert((BlobKind::State, [1; 32], i), chunk(10, 1));
            c.insert((BlobKind::Delta, [1; 32], i), chunk(10, 2));
            c.insert((BlobKind::State, [2; 32], i), chunk(10, 3));
        }
        c.forget_blob(BlobKind::State, &[1; 32]);
        assert_eq!(c.held(), 60);
        assert!(c.get(&(BlobKind::State, [1; 32], 1)).is_none());
        assert!(c.get(&(BlobKind::Delta, [1; 32], 1)).is_some());
        c.retain(|k, _| k == BlobKind::Delta);
        assert_eq!(c.held(), 30);
        // Eviction order survives the removals.
        let mut small = ChunkCache::new(30);
        small.insert((BlobKind::State, [1; 32], 0), chunk(10, 1));
        small.insert((BlobKind::State, [2; 32], 0), chunk(10, 1));
        small.insert((BlobKind::State, [3; 32], 0), chunk(10, 1));
        small.forget_blob(BlobKind::State, &[2; 32]);
        small.insert((BlobKind::State, [4; 32], 0), chunk(20, 1));
        assert!(small.get(&(BlobKind::State, [1; 32], 0)).is_none());
        assert!(small.get(&(BlobKind::State, [3; 32], 0)).is_some());
        assert_eq!(small.held(), 30);
    }
}
