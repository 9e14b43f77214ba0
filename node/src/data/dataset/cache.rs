//! Which dataset shards a node keeps: a byte bound (`--data-cache`), and
//! least-recently-used eviction that never drops a shard the current round
//! needs or a pinned one (a local copy from the node's own command line).
//! Pure bookkeeping: the caller deletes what `make_room` names.

use std::collections::{HashMap, HashSet};

use murmur_protocol::hash::ShardHash;

/// Default bound on held shard bytes: 4 GiB.
pub const DEFAULT_DATA_CACHE_BYTES: u64 = 4 << 30;

/// The held shards and when each was last used.
#[derive(Debug, Clone)]
pub struct ShardLru {
    bound: u64,
    tick: u64,
    held: HashMap<ShardHash, (u64, u64)>,
    pinned: HashSet<ShardHash>,
}

impl ShardLru {
    pub fn new(bound: u64) -> Self {
        Self { bound, tick: 0, held: HashMap::new(), pinned: HashSet::new() }
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> u64 {
        self.held.values().map(|(bytes, _)| bytes).sum()
    }

    pub fn contains(&self, hash: &ShardHash) -> bool {
        self.held.contains_key(hash)
    }

    /// Record a held shard (used now).
    pub fn insert(&mut self, hash: ShardHash, bytes: u64, pinned: bool) {
        self.tick += 1;
        self.held.insert(hash, (bytes, self.tick));
        if pinned {
            self.pinned.insert(hash);
        }
    }

    /// Mark a held shard used now.
    pub fn touch(&mut self, hash: &ShardHash) {
        self.tick += 1;
        if let Some(e) = self.held.get_mut(hash) {
            e.1 = self.tick;
        }
    }

    /// Shards to delete (least recently used first, never one in `needed`
    /// or pinned) so that `incoming` more bytes fit the bound; they are
    /// forgotten here. Returns what it could free even when that is not enough.
    pub fn make_room(&mut self, incoming: u64, needed: &HashSet<ShardHash>) -> Vec<ShardHash> {
        let mut candidates: Vec<(u64, ShardHash, u64)> = self
            .held
            .iter()
            .filter(|(h, _)| !needed.contains(*h) && !self.pinned.contains(*h))
            .map(|(h, (bytes, used))| (*used, *h, *bytes))
            .collect();
        candidates.sort_unstable_by_key(|c| (c.0, c.1));
        let mut held = self.held_bytes();
        let mut out = Vec::new();
        for (_, hash, bytes) in candidates {
            if held.saturating_add(incoming) <= self.bound {
                break;
            }
            held -= bytes;
            self.held.remove(&hash);
            out.push(hash);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_but_never_needed_or_pinned() {
        let h = |b: u8| ShardHash([b; 32]);
        let mut lru = ShardLru::new(300);
        lru.insert(h(1), 100, false);
        lru.insert(h(2), 100, true);
        lru.insert(h(3), 100, false);
        lru.touch(&h(1));
        assert!(lru.make_room(0, &HashSet::new()).is_empty());
        // Room for 100 more: shard 3 is the least recently used unpinned one.
        assert_eq!(lru.make_room(100, &HashSet::new()), vec![h(3)]);
        assert!(!lru.contains(&h(3)));
        lru.insert(h(4), 100, false);
        // Shard 1 is needed this round and 2 is pinned: only 4 can go.
        let needed: HashSet<ShardHash> = [h(1)].into();
        assert_eq!(lru.make_room(200, &needed), vec![h(4)]);
        assert_eq!(lru.held_bytes(), 200);
    }
}
