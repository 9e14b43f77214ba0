//! The tally of RoundCommits: which StateId each committer reported for each
//! recent round, with commit equivocation detection and bounded memory.

use super::reason::Rejection;
use crate::hash::{PayloadHash, StateId};
use crate::identity::PublicKey;
use std::collections::{BTreeMap, BTreeSet};

/// Most rounds whose votes are kept at once.
pub const MAX_VOTE_ROUNDS: usize = 8;
/// Most voters kept per round.
pub const MAX_VOTERS: usize = 4096;
/// How many of the node's own last rounds the electorate spans: a
/// committer counted for any of them is in it.
pub const ELECTORATE_ROUNDS: u64 = 16;

/// One committer's report for one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vote {
    pub state: StateId,
    pub included: Vec<PayloadHash>,
}

/// The leading StateId of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub state: StateId,
    pub included: Vec<PayloadHash>,
    pub voters: Vec<PublicKey>,
    /// All distinct committers counted for the round.
    pub total: usize,
}

impl Leader {
    /// The run's rule (docs/protocol.md §7.4, §7.6): the leader decides when
    /// at least `need` committers and at least half of the round's counted
    /// committers reported it (a tie already went to the smaller StateId).
    pub fn decides(&self, need: usize) -> bool {
        self.voters.len() >= need && 2 * self.voters.len() >= self.total
    }
}

#[derive(Debug, Clone, Default)]
pub struct Votes {
    rounds: BTreeMap<u64, BTreeMap<PublicKey, Vote>>,
    equivocators: BTreeMap<u64, BTreeSet<PublicKey>>,
    /// Each committer of the node's earlier rounds → the last such round it
    /// was counted for (at most `ELECTORATE_ROUNDS` rounds back, so at most
    /// `ELECTORATE_ROUNDS × MAX_VOTERS` keys).
    past_committers: BTreeMap<PublicKey, u64>,
}

impl Votes {
    /// Record `signer`'s vote for `round`.
    pub fn record(&mut self, round: u64, signer: PublicKey, vote: Vote) -> Result<(), Rejection> {
        if self.equivocators.get(&round).is_some_and(|s| s.contains(&signer)) {
            return Err(Rejection::CommitEquivocation);
        }
        if !self.rounds.contains_key(&round) && self.rounds.len() >= MAX_VOTE_ROUNDS {
            // Evict the round with the fewest voters, the highest such round first.
            let victim = self
                .rounds
                .iter()
                .min_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)))
                .map(|(r, _)| *r);
            if let Some(r) = victim {
                self.rounds.remove(&r);
                self.equivocators.remove(&r);
            }
        }
        let voters = self.rounds.entry(round).or_default();
        match voters.get(&signer) {
            Some(v) if *v == vote => Err(Rejection::Duplicate),
            Some(_) => {
                voters.remove(&signer);
                self.equivocators.entry(round).or_default().insert(signer);
                Err(Rejection::CommitEquivocation)
            }
            None if voters.len() >= MAX_VOTERS => Err(Rejection::RoundFull),
            None => {
                voters.insert(signer, vote);
                Ok(())
            }
        }
    }

    /// The StateId most voters reported for `round` (ties: smallest StateId).
    pub fn leader(&self, round: u64) -> Option<Leader> {
        let voters = self.rounds.get(&round)?;
        let mut by_state: BTreeMap<StateId, (Vec<PublicKey>, &Vec<PayloadHash>)> = BTreeMap::new();
        for (k, v) in voters {
            by_state.entry(v.state).or_insert_with(|| (Vec::new(), &v.included)).0.push(*k);
        }
        let (state, (voters_for, included)) =
            by_state.into_iter().max_by(|a, b| a.1 .0.len().cmp(&b.1 .0.len()).then(b.0.cmp(&a.0)))?;
        Some(Leader { state, included: included.clone(), voters: voters_for, total: voters.len() })
    }

    /// The committers counted for `round` (equivocators left out).
    pub fn voters(&self, round: u64) -> BTreeSet<PublicKey> {
        self.rounds.get(&round).map(|v| v.keys().copied().collect()).unwrap_or_default()
    }

    /// The committers counted for the node's own rounds from
    /// `ELECTORATE_ROUNDS` before `last` up to (not including) `last`, kept
    /// by `remember_committers`.
    pub fn earlier_committers(&self, last: u64) -> impl Iterator<Item = PublicKey> + '_ {
        let oldest = last.saturating_sub(ELECTORATE_ROUNDS);
        self.past_committers.iter().filter(move |(_, r)| **r >= oldest && **r < last).map(|(k, _)| *k)
    }

    /// Keep `round`'s committers in the electorate: called for the node's
    /// own last round as it leaves it, before its votes are pruned.
    pub fn remember_committers(&mut self, round: u64) {
        for k in self.voters(round) {
            self.past_committers.insert(k, round);
        }
        let oldest = round.saturating_sub(ELECTORATE_ROUNDS);
        self.past_committers.retain(|_, r| *r >= oldest);
    }

    /// Forget rounds below `round`.
    pub fn prune_below(&mut self, round: u64) {
        self.rounds = self.rounds.split_off(&round);
        self.equivocators = self.equivocators.split_off(&round);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(s: u8) -> Vote {
        Vote { state: StateId([s; 32]), included: vec![] }
    }

    #[test]
    fn leader_and_equivocation() {
        let mut v = Votes::default();
        let (a, b, c) = (PublicKey([1; 32]), PublicKey([2; 32]), PublicKey([3; 32]));
        assert_eq!(v.record(5, a, vote(9)), Ok(()));
        assert_eq!(v.record(5, b, vote(9)), Ok(()));
        assert_eq!(v.record(5, c, vote(8)), Ok(()));
        assert_eq!(v.record(5, a, vote(9)), Err(Rejection::Duplicate));
        let l = v.leader(5).expect("votes");
        assert_eq!((l.state, l.voters.len(), l.total), (StateId([9; 32]), 2, 3));
        assert_eq!(v.record(5, a, vote(7)), Err(Rejection::CommitEquivocation));
        assert_eq!(v.record(5, a, vote(9)), Err(Rejection::CommitEquivocation));
        assert_eq!(v.leader(5).map(|l| l.total), Some(2));
        v.prune_below(6);
        assert_eq!(v.leader(5), None);
    }

    #[test]
    fn memory_is_bounded() {
        let mut v = Votes::default();
        for r in 0..100u64 {
            let _ = v.record(r, PublicKey([1; 32]), vote(1));
        }
        assert!(v.rounds.len() <= MAX_VOTE_ROUNDS);
    }
}
