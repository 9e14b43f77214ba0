//! Who aggregates what (docs/protocol.md §10.1): the parameter
//! vector cut into S contiguous shards, and for each round one committee of
//! roster members per shard. The plan is a pure function of (base state,
//! round, roster, k), so every honest node derives the same one.
//!
//! S = ⌊N / k⌋ (at least 1), so committees hold k to 2k − 1 members and every
//! roster member sits on exactly one of them: per-node work and traffic do
//! not depend on N. With N ≤ k there is one committee of everyone, which is
//! version 1's round. With k = 1 each shard has one owner, and the owners
//! of the next `MAX_FALLBACKS` shards are its backups, in order.

use crate::hash::{domain_hash, StateId};
use crate::identity::PublicKey;
use std::collections::BTreeMap;
use std::ops::Range;

/// Domain of the hash that orders the roster for a round.
pub const DOMAIN_COMMITTEE: &str = "murmur 2026-11 v2 committee-order";
/// Most shards a parameter vector is cut into.
pub const MAX_SHARDS: u32 = 65_536;
/// Backups a shard has: committees that take it over, one after another,
/// while the ones before withhold their result.
pub const MAX_FALLBACKS: u32 = 3;
/// Fewest elements per shard (smaller vectors get fewer shards).
pub const MIN_SHARD_ELEMENTS: u64 = 1024;

/// S contiguous, near-equal ranges of an `element_count`-long vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardLayout {
    element_count: u64,
    shards: u32,
}

impl ShardLayout {
    /// `wanted` shards, reduced so each has at least `MIN_SHARD_ELEMENTS`
    /// elements (and at least one shard).
    pub fn new(element_count: u64, wanted: u32) -> Self {
        let most = (element_count / MIN_SHARD_ELEMENTS).clamp(1, u64::from(MAX_SHARDS)) as u32;
        Self { element_count, shards: wanted.clamp(1, most) }
    }
    pub fn shards(&self) -> u32 {
        self.shards
    }
    pub fn element_count(&self) -> u64 {
        self.element_count
    }
    /// Elements `[s·n/S, (s+1)·n/S)` (empty for `s ≥ S`).
    pub fn range(&self, s: u32) -> Range<usize> {
        if s >= self.shards {
            return 0..0;
        }
        let at = |i: u64| (u128::from(i) * u128::from(self.element_count) / u128::from(self.shards)) as usize;
        at(u64::from(s))..at(u64::from(s) + 1)
    }
    pub fn len(&self, s: u32) -> usize {
        self.range(s).len()
    }
    pub fn is_empty(&self) -> bool {
        self.element_count == 0
    }
}

/// One round's committees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitteePlan {
    layout: ShardLayout,
    committees: Vec<Vec<PublicKey>>,
    seat: BTreeMap<PublicKey, u32>,
}

impl CommitteePlan {
    /// The plan of `round`, trained from `base`, for `roster` (any order,
    /// duplicates ignored) and committee size `k`.
    pub fn derive(base: StateId, round: u64, roster: &[PublicKey], k: u32, element_count: u64) -> Self {
        let mut order: Vec<([u8; 32], PublicKey)> = roster
            .iter()
            .map(|p| {
                let mut b = Vec::with_capacity(72);
                b.extend_from_slice(&base.0);
                b.extend_from_slice(&round.to_le_bytes());
                b.extend_from_slice(&p.0);
                (domain_hash(DOMAIN_COMMITTEE, &b), *p)
            })
            .collect();
        order.sort();
        order.dedup_by(|a, b| a.1 == b.1);
        let n = order.len() as u64;
        let wanted = u32::try_from(n / u64::from(k.max(1))).unwrap_or(u32::MAX);
        let layout = ShardLayout::new(element_count, wanted);
        let s = layout.shards() as usize;
        let mut committees = vec![Vec::new(); s];
        let mut seat = BTreeMap::new();
        for (i, (_, p)) in order.into_iter().enumerate() {
            committees[i % s].push(p);
            seat.insert(p, (i % s) as u32);
        }
        for c in &mut committees {
            c.sort();
        }
        Self { layout, committees, seat }
    }

    pub fn layout(&self) -> ShardLayout {
        self.layout
    }
    pub fn shards(&self) -> u32 {
        self.layout.shards()
    }
    /// The members of shard `s`'s committee, ascending.
    pub fn committee(&self, s: u32) -> &[PublicKey] {
        self.committees.get(s as usize).map_or(&[], Vec::as_slice)
    }
    /// The shard whose committee `key` sits on, if any.
    pub fn seat_of(&self, key: &PublicKey) -> Option<u32> {
        self.seat.get(key).copied()
    }
    pub fn is_member(&self, s: u32, key: &PublicKey) -> bool {
        self.seat_of(key) == Some(s)
    }
    /// The committee that takes shard `s` over at fallback `level` (1 =
    /// the first backup) when the ones before withheld their result: the
    /// committee `level` shards on. None past `MAX_FALLBACKS` or once the
    /// chain would come back to the shard's own committee.
    pub fn fallback(&self, s: u32, level: u32) -> Option<u32> {
        ((1..=MAX_FALLBACKS).contains(&level) && level < self.shards())
            .then(|| ((u64::from(s) + u64::from(level)) % u64::from(self.shards())) as u32)
    }
    /// Number of roster members the plan seats.
    pub fn roster_len(&self) -> usize {
        self.seat.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roster(n: u8) -> Vec<PublicKey> {
        (0..n).map(|i| PublicKey([i; 32])).collect()
    }

    #[test]
    fn shards_cover_the_vector_without_overlap() {
        for (n, s) in [(10_000u64, 7u32), (1_000_000, 125), (1024, 3), (5000, 1)] {
            let l = ShardLayout::new(n, s);
            let mut next = 0;
            for i in 0..l.shards() {
                let r = l.range(i);
                assert_eq!(r.start, next);
                assert!(r.len() as u64 >= MIN_SHARD_ELEMENTS.min(n));
                next = r.end;
            }
            assert_eq!(next as u64, n);
        }
        assert_eq!(ShardLayout::new(1024, 3).shards(), 1, "a shard never falls below the minimum");
    }

    #[test]
    fn everyone_sits_on_exactly_one_committee_of_k_to_2k_minus_1() {
        for n in [1u8, 5, 8, 9, 16, 33, 100, 255] {
            let plan = CommitteePlan::derive(StateId([1; 32]), 3, &roster(n), 8, 1 << 20);
            assert_eq!(plan.shards(), (u32::from(n) / 8).max(1));
            let mut seen = 0;
            for s in 0..plan.shards() {
                let c = plan.committee(s);
                if n >= 8 {
                    assert!((8..16).contains(&c.len()), "n={n}: committee of {}", c.len());
                }
                for p in c {
                    assert_eq!(plan.seat_of(p), Some(s));
                }
                seen += c.len();
            }
            assert_eq!(seen, usize::from(n));
        }
    }

    #[test]
    fn one_committee_of_everyone_up_to_k() {
        let plan = CommitteePlan::derive(StateId([1; 32]), 0, &roster(8), 8, 1 << 20);
        assert_eq!(plan.shards(), 1);
        assert_eq!(plan.committee(0), roster(8).as_slice());
        assert_eq!(plan.fallback(0, 1), None);
    }

    #[test]
    fn with_k_1_every_node_owns_one_shard_and_backups_follow_in_order() {
        let plan = CommitteePlan::derive(StateId([1; 32]), 0, &roster(40), 1, 1 << 20);
        assert_eq!(plan.shards(), 40);
        assert!((0..40).all(|s| plan.committee(s).len() == 1));
        assert_eq!(plan.fallback(38, 1), Some(39));
        assert_eq!(plan.fallback(38, 2), Some(0));
        assert_eq!(plan.fallback(38, 3), Some(1));
        assert_eq!(plan.fallback(38, 4), None, "at most MAX_FALLBACKS backups");
        assert_eq!(plan.fallback(38, 0), None, "level 0 is the owner itself");
        let two = CommitteePlan::derive(StateId([1; 32]), 0, &roster(2), 1, 1 << 20);
        assert_eq!((two.fallback(0, 1), two.fallback(0, 2)), (Some(1), None));
    }

    #[test]
    fn the_plan_depends_on_base_and_round_not_on_roster_order() {
        let mut r = roster(64);
        let a = CommitteePlan::derive(StateId([1; 32]), 3, &r, 8, 1 << 20);
        r.reverse();
        r.push(PublicKey([0; 32]));
        assert_eq!(a, CommitteePlan::derive(StateId([1; 32]), 3, &r, 8, 1 << 20));
        assert_ne!(a, CommitteePlan::derive(StateId([1; 32]), 4, &r, 8, 1 << 20));
        assert_ne!(a, CommitteePlan::derive(StateId([2; 32]), 3, &r, 8, 1 << 20));
    }
}
