//! The norm gate (docs/protocol.md §10.3, step 6): before a round applies, each
//! fetched aggregate's size (its RMS, the L2 norm over the square root of
//! its length) is compared with the median of the round's fetched
//! aggregates. One above `GATE_MULTIPLE` times that median is a suspect: the
//! round does not apply it until an audit of it agrees (a sketch or a
//! recomputation), and takes it as wrong when none has by `GATE_WAIT`
//! grace periods after it became one. Every node fetches the same chosen
//! aggregates, so every node suspects the same ones: a lie too large for
//! the gate is caught before an honest node applies it, and one under the
//! gate moves a shard by at most `GATE_MULTIPLE` times a typical aggregate.

use crate::aggregate::robust::median_f64;
use std::collections::{BTreeMap, BTreeSet};

/// How far above the round's median RMS an aggregate is a suspect.
pub const GATE_MULTIPLE: f64 = 4.0;

/// Fewest fetched aggregates with which a round has a median to compare
/// with (fewer: nothing is a suspect).
pub const GATE_MIN_SHARDS: usize = 3;

/// Grace periods a suspect waits for an audit that agrees with it.
pub const GATE_WAIT: u64 = 4;

/// One round's fetched aggregate sizes and the audits of its suspects.
#[derive(Debug, Clone, Default)]
pub struct NormGate {
    /// Fetched shard → (its claim's result hash, RMS).
    sizes: BTreeMap<u32, ([u8; 32], f64)>,
    /// Suspect shard → (claim, when it times out).
    suspects: BTreeMap<u32, ([u8; 32], u64)>,
    /// Claims an audit of this round agreed with.
    agreed: BTreeSet<[u8; 32]>,
}

/// What the gate says of a suspect shard now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suspect {
    /// Became one now: audit it.
    New { shard: u32, claim: [u8; 32] },
    /// Waiting for its audit.
    Waiting,
    /// No audit agreed in time: take the claim as wrong.
    TimedOut { shard: u32, claim: [u8; 32] },
}

/// RMS of an aggregate from its L2 norm and length.
fn rms(norm: f32, len: usize) -> f64 {
    f64::from(norm) / (len.max(1) as f64).sqrt()
}

impl NormGate {
    /// Forget the last round.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Shard `shard`'s chosen claim was fetched: its values have L2 norm
    /// `norm` over `len` elements.
    pub fn note_fetched(&mut self, shard: u32, claim: [u8; 32], norm: f32, len: usize) {
        // A non-finite size stands above any median.
        let size = rms(norm, len);
        self.sizes.insert(shard, (claim, if size.is_finite() { size } else { f64::INFINITY }));
    }

    /// Shard `shard`'s claim `claim` is no longer chosen (given up): the
    /// shard's next claim is measured when it is fetched.
    pub fn forget(&mut self, shard: u32, claim: &[u8; 32]) {
        if self.sizes.get(&shard).is_some_and(|(c, _)| c == claim) {
            self.sizes.remove(&shard);
        }
        if self.suspects.get(&shard).is_some_and(|(c, _)| c == claim) {
            self.suspects.remove(&shard);
        }
    }

    /// An audit agreed with `claim`.
    pub fn agree(&mut self, claim: [u8; 32]) {
        self.agreed.insert(claim);
    }

    /// When the next suspect times out.
    pub fn next_deadline(&self) -> Option<u64> {
        (self.suspects.values()).filter(|(c, _)| !self.agreed.contains(c)).map(|(_, until)| *until).min()
    }

    /// The fetched shards above the gate, with their claims.
    fn above(&self) -> Vec<(u32, [u8; 32])> {
        if self.sizes.len() < GATE_MIN_SHARDS {
            return Vec::new();
        }
        let median = median_f64(self.sizes.values().map(|(_, s)| *s).collect());
        let bound = GATE_MULTIPLE * median;
        (self.sizes.iter())
            .filter(|(_, (_, s))| !s.is_finite() || *s > bound)
            .map(|(shard, (claim, _))| (*shard, *claim))
            .collect()
    }

    /// The suspects that hold the round back at `now`, noting new ones
    /// (`ours`: whether this node signed a shard's claim, which then needs
    /// no audit). Empty: the
    /// round may apply.
    pub fn check(&mut self, now: u64, grace_ms: u64, ours: impl Fn(u32, &[u8; 32]) -> bool) -> Vec<Suspect> {
        let above = self.above();
        // A suspect no longer above the gate (the median moved) waits for
        // nothing: its timeout goes with it.
        self.suspects.retain(|shard, (c, _)| above.contains(&(*shard, *c)));
        let mut out = Vec::new();
        for (shard, claim) in above {
            if self.agreed.contains(&claim) || ours(shard, &claim) {
                continue;
            }
            match self.suspects.get(&shard) {
                Some((c, until)) if *c == claim => {
                    if now >= *until {
                        out.push(Suspect::TimedOut { shard, claim });
                    } else {
                        out.push(Suspect::Waiting);
                    }
                }
                _ => {
                    self.suspects.insert(shard, (claim, now + GATE_WAIT * grace_ms));
                    out.push(Suspect::New { shard, claim });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(sizes: &[f32]) -> NormGate {
        let mut g = NormGate::default();
        for (s, n) in sizes.iter().enumerate() {
            g.note_fetched(s as u32, [s as u8; 32], *n, 100);
        }
        g
    }

    #[test]
    fn an_aggregate_far_above_the_rounds_median_is_a_suspect_until_an_audit_agrees() {
        let mut g = gate(&[1.0, 1.1, 0.9, 1.2, 9.0]);
        assert_eq!(g.check(10, 100, |_, _| false), vec![Suspect::New { shard: 4, claim: [4; 32] }]);
        assert_eq!(g.check(20, 100, |_, _| false), vec![Suspect::Waiting]);
        assert_eq!(g.next_deadline(), Some(10 + GATE_WAIT * 100));
        g.agree([4; 32]);
        assert!(g.check(30, 100, |_, _| false).is_empty(), "an agreeing audit lets the round apply");
        assert_eq!(g.next_deadline(), None);
    }

    #[test]
    fn a_suspect_no_audit_agrees_with_times_out_and_our_own_claims_pass() {
        let mut g = gate(&[1.0, 1.0, 1.0, 3.9, 40.0]);
        assert_eq!(g.check(0, 100, |_, _| false).len(), 1, "3.9 × the median is under the gate");
        let late = GATE_WAIT * 100;
        assert_eq!(g.check(late, 100, |_, _| false), vec![Suspect::TimedOut { shard: 4, claim: [4; 32] }]);
        // Another claim of the shard starts afresh.
        g.forget(4, &[7; 32]);
        assert_eq!(g.check(late, 100, |_, _| false).len(), 1, "another claim's forgetting leaves it");
        g.forget(4, &[4; 32]);
        g.note_fetched(4, [9; 32], 40.0, 100);
        assert_eq!(g.check(late, 100, |_, _| false), vec![Suspect::New { shard: 4, claim: [9; 32] }]);
        assert!(gate(&[1.0, 1.0, 1.0, 40.0]).check(0, 100, |s, c| s == 3 && *c == [3; 32]).is_empty());
    }

    #[test]
    fn rounds_of_fewer_than_three_shards_and_non_finite_sizes() {
        assert!(gate(&[1.0, 50.0]).check(0, 100, |_, _| false).is_empty());
        let mut g = gate(&[1.0, 1.0, f32::NAN, 1.0]);
        assert_eq!(g.check(0, 100, |_, _| false), vec![Suspect::New { shard: 2, claim: [2; 32] }]);
        let mut g = gate(&[f32::INFINITY, f32::NAN, 1.0]);
        assert_eq!(g.check(0, 100, |_, _| false).len(), 2, "a median that is not a number lets none through");
        // An even count's median is the mean of the middle two: 4 × 2.5.
        assert_eq!(gate(&[1.0, 2.0, 3.0, 10.1]).check(0, 100, |_, _| false).len(), 1);
        assert!(gate(&[1.0, 2.0, 3.0, 9.9]).check(0, 100, |_, _| false).is_empty());
        // Lengths count: the same norm over 100× the elements is 10× smaller.
        let mut g = gate(&[1.0, 1.0, 1.0]);
        g.note_fetched(3, [3; 32], 10.0, 10_000);
        assert!(g.check(0, 100, |_, _| false).is_empty());
    }

    #[test]
    fn a_suspect_the_median_moved_below_the_gate_leaves_no_timeout_behind() {
        let mut g = gate(&[1.0, 1.0, 1.0, 6.0, 6.0, 20.0]);
        assert_eq!(g.check(0, 100, |_, _| false), vec![Suspect::New { shard: 5, claim: [5; 32] }]);
        // Shard 0's claim is given up and its next one is larger: the
        // median rises past shard 5, and shard 0 is the suspect now.
        g.forget(0, &[0; 32]);
        g.note_fetched(0, [9; 32], 30.0, 100);
        assert_eq!(g.check(50, 100, |_, _| false), vec![Suspect::New { shard: 0, claim: [9; 32] }]);
        assert_eq!(g.next_deadline(), Some(50 + GATE_WAIT * 100), "shard 5's timeout is gone");
    }
}
