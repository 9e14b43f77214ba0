//! Catching up in a committee run. Every node signs a result each round
//! (every roster member holds a seat; in a round without a roster every
//! node aggregates shard 0), and a result's `base` is the state its signer
//! ended the last round on: results are the commits, tallied here, and no
//! separate commit travels. A node that is a whole round behind (it joined
//! late, restarted, or ended a round on a state the others did not) takes the
//! state a strict majority of its electorate signed for the newest round
//! such a majority agrees on (of an even split between two states, the
//! smaller StateId, so both halves end on one). The machine asks its driver
//! to fetch that state (`CommitteeAction::FetchState`) and jumps to it.
//!
//! The electorate is the roster of the state the node holds (the keys
//! seated in its round, the excluded left out): results from any other key
//! never count, so no number of keys off that roster, and no minority of
//! it, moves the node, whatever round they name. The tally keeps each
//! signer's own newest rounds, so one key's results for many rounds push
//! out only its own. A node with no roster (the run's first round, or a
//! node without the ledger of its state) has no electorate: it counts a
//! strict majority of each round's committers, as anyone joining an open
//! run must trust whoever answers.

use std::collections::{BTreeMap, BTreeSet};

use super::ledger::Ledger;
use crate::hash::StateId;
use crate::identity::PublicKey;

/// Rounds remembered per signer.
const KEPT_ROUNDS: usize = 4;
/// Signers remembered.
const MAX_COMMITTERS: usize = 65_536;

/// By signer: which state each said it ended its newest rounds on.
#[derive(Debug, Default)]
pub struct CommitTally {
    by_signer: BTreeMap<PublicKey, BTreeMap<u64, StateId>>,
}

impl CommitTally {
    /// Count `signer`'s signed word that it ended `round` on `state`; a
    /// signer's first word for a round is the one kept, and only its
    /// `KEPT_ROUNDS` newest rounds.
    pub fn note_state(&mut self, signer: PublicKey, round: u64, state: StateId) {
        if self.by_signer.len() >= MAX_COMMITTERS && !self.by_signer.contains_key(&signer) {
            return;
        }
        let rounds = self.by_signer.entry(signer).or_default();
        if rounds.len() >= KEPT_ROUNDS && rounds.keys().next().is_some_and(|r| round < *r) {
            return;
        }
        rounds.entry(round).or_insert(state);
        while rounds.len() > KEPT_ROUNDS {
            rounds.pop_first();
        }
    }

    /// The newest round with a state backed by a strict majority of
    /// `electorate` (when it is empty: of that round's committers), or
    /// split evenly between two states (each backed by exactly half: the
    /// smaller StateId, so both halves end on one state), with its backers.
    pub fn decided(&self, electorate: &BTreeSet<PublicKey>) -> Option<(u64, StateId, Vec<PublicKey>)> {
        let mut votes: BTreeMap<u64, BTreeMap<StateId, Vec<PublicKey>>> = BTreeMap::new();
        for (signer, rounds) in &self.by_signer {
            if !electorate.is_empty() && !electorate.contains(signer) {
                continue;
            }
            for (round, state) in rounds {
                votes.entry(*round).or_default().entry(*state).or_default().push(*signer);
            }
        }
        votes.into_iter().rev().find_map(|(round, by_state)| {
            let voters =
                if electorate.is_empty() { by_state.values().map(Vec::len).sum() } else { electorate.len() };
            let halves = by_state.values().filter(|b| 2 * b.len() == voters).count();
            let (state, backers) =
                by_state.into_iter().max_by_key(|(s, b)| (b.len(), std::cmp::Reverse(*s)))?;
            let even_split = halves == 2 && 2 * backers.len() == voters;
            (2 * backers.len() > voters || even_split).then_some((round, state, backers))
        })
    }

    /// The committers of `round` (for tests and reports).
    pub fn committers(&self, round: u64) -> BTreeSet<PublicKey> {
        self.by_signer.iter().filter(|(_, r)| r.contains_key(&round)).map(|(k, _)| *k).collect()
    }
}

/// A state to fetch: the one a majority ended `round` on, and its signers.
#[derive(Debug, Clone, PartialEq)]
pub struct CatchUpTarget {
    pub round: u64,
    pub state: StateId,
    pub holders: Vec<PublicKey>,
}

/// Where a node stands on catching up: the tally, the state it is
/// fetching, and whether it waits for a state before it may train (it holds
/// a state without its ledger).
#[derive(Debug, Default)]
pub struct CatchUp {
    tally: CommitTally,
    fetching: bool,
    waiting: bool,
}

impl CatchUp {
    /// Count that `signer` ended `round` on `state` (what its result of
    /// the next round, trained from `state`, says).
    pub fn note_state(&mut self, signer: PublicKey, round: u64, state: StateId) {
        self.tally.note_state(signer, round, state);
    }

    /// Hold off training until a state is fetched.
    pub fn wait(&mut self) {
        self.waiting = true;
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting
    }

    /// A fetch ended: with a state (`caught_up`) or without one.
    pub fn fetch_ended(&mut self, caught_up: bool) {
        self.fetching = false;
        if caught_up {
            self.waiting = false;
        }
    }

    /// The state to fetch, when none is being fetched and a strict
    /// majority of `ledger`'s electorate signed a state this node (in
    /// `round`, trained from `base`) is a whole round short of, or a
    /// different state for the round it closed last (or, while waiting,
    /// any state it does not hold). The target is then being fetched.
    pub fn target(
        &mut self,
        ledger: &Ledger,
        round: u64,
        base: StateId,
        me: &PublicKey,
    ) -> Option<CatchUpTarget> {
        if self.fetching {
            return None;
        }
        let electorate = ledger.roster.iter().filter(|k| !ledger.is_excluded(k)).copied().collect();
        let (decided, state, backers) = self.tally.decided(&electorate)?;
        let behind = round < decided
            || (round == decided + 1 && base != state)
            || (self.waiting && round <= decided + 1 && base != state);
        let mut holders: Vec<PublicKey> = backers.into_iter().filter(|k| k != me).collect();
        if !behind || holders.is_empty() {
            return None;
        }
        // Askers start at different holders, so no one holder serves every
        // catch-up of a round.
        let mut first = [0u8; 8];
        first.copy_from_slice(&me.0[..8]);
        let start = u64::from_le_bytes(first) % holders.len() as u64;
        holders.rotate_left(start as usize);
        self.fetching = true;
        Some(CatchUpTarget { round: decided, state, holders })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::NodeKey;

    fn commit(signer: u8, round: u64, state: u8) -> (PublicKey, u64, StateId) {
        (NodeKey::from_seed([signer; 32]).public(), round, StateId([state; 32]))
    }

    impl CommitTally {
        fn note(&mut self, (signer, round, state): (PublicKey, u64, StateId)) {
            self.note_state(signer, round, state);
        }
    }

    fn keys(signers: &[u8]) -> BTreeSet<PublicKey> {
        signers.iter().map(|s| NodeKey::from_seed([*s; 32]).public()).collect()
    }

    #[test]
    fn the_newest_round_decides_by_strict_majority_and_old_rounds_are_dropped() {
        let open = BTreeSet::new();
        let mut t = CommitTally::default();
        assert_eq!(t.decided(&open), None);
        t.note(commit(1, 3, 7));
        t.note(commit(2, 3, 7));
        t.note(commit(3, 3, 8));
        let (round, state, backers) = t.decided(&open).expect("decided");
        assert_eq!((round, state, backers.len()), (3, StateId([7; 32]), 2));
        // A committer's second commit for a round does not count twice.
        t.note(commit(3, 3, 7));
        assert_eq!(t.decided(&open).map(|d| d.2.len()), Some(2));
        // An even split between two states goes to the smaller StateId.
        t.note(commit(1, 4, 2));
        t.note(commit(2, 4, 1));
        assert_eq!(t.decided(&open).map(|d| (d.0, d.1)), Some((4, StateId([1; 32]))));
        // A third committer on neither: one of three is no majority.
        t.note(commit(3, 4, 5));
        assert_eq!(t.decided(&open).map(|d| d.0), Some(3));
        for r in 5..12 {
            t.note(commit(1, r, 1));
        }
        assert!(!t.committers(3).contains(&keys(&[1]).into_iter().next().unwrap()), "old rounds are dropped");
        assert_eq!(t.decided(&open).map(|d| d.0), Some(11));
        // Commits for rounds older than a signer's kept ones are ignored.
        t.note(commit(1, 2, 2));
        assert!(t.committers(2).is_empty());
    }

    #[test]
    fn keys_off_the_roster_never_decide_whatever_round_they_name() {
        let roster = keys(&[1, 2, 3, 4, 5]);
        let mut t = CommitTally::default();
        t.note(commit(1, 6, 7));
        t.note(commit(2, 6, 7));
        t.note(commit(3, 6, 7));
        // Forty keys off the roster sign a far-future state.
        for s in 100..140 {
            t.note(commit(s, 1_000_000, 9));
        }
        let (round, state, backers) = t.decided(&roster).expect("the roster's majority decides");
        assert_eq!((round, state, backers.len()), (6, StateId([7; 32]), 3));
        // An even split of the roster goes to the smaller StateId; half of
        // it alone on a round the other half has not signed decides nothing.
        let four = keys(&[1, 2, 3, 4]);
        let mut even = CommitTally::default();
        for (signer, state) in [(1, 9), (2, 9), (3, 4), (4, 4)] {
            even.note(commit(signer, 6, state));
        }
        assert_eq!(even.decided(&four).map(|d| (d.1, d.2.len())), Some((StateId([4; 32]), 2)));
        let mut half = CommitTally::default();
        half.note(commit(1, 9_000, 1));
        half.note(commit(2, 9_000, 1));
        assert_eq!(half.decided(&four), None);
        // Two of five is no majority of the roster, however many others agree.
        let mut u = CommitTally::default();
        u.note(commit(1, 6, 8));
        u.note(commit(2, 6, 8));
        for s in 100..140 {
            u.note(commit(s, 6, 8));
        }
        assert_eq!(u.decided(&roster), None);
    }

    #[test]
    fn askers_that_fall_behind_together_start_at_different_holders() {
        let ledger = Ledger::genesis(keys(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).into_iter().collect());
        let mut firsts = BTreeSet::new();
        for asker in 20..60u8 {
            let mut c = CatchUp::default();
            for s in 1..=9 {
                c.note_state(commit(s, 4, 7).0, 4, StateId([7; 32]));
            }
            let me = NodeKey::from_seed([asker; 32]).public();
            let t = c.target(&ledger, 3, StateId([1; 32]), &me).expect("behind the majority");
            assert_eq!(
                t.holders.iter().collect::<BTreeSet<_>>(),
                keys(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).iter().collect()
            );
            firsts.insert(t.holders[0]);
        }
        assert!(firsts.len() >= 6, "40 askers start at {} of 9 holders", firsts.len());
    }

    #[test]
    fn one_key_naming_many_rounds_pushes_out_only_its_own_commits() {
        let roster = keys(&[1, 2, 3, 4]);
        let mut t = CommitTally::default();
        for s in [1, 2, 3] {
            t.note(commit(s, 6, 7));
        }
        // Roster member 4 signs commits for a thousand rounds.
        for r in 1_000..2_000 {
            t.note(commit(4, r, 9));
        }
        assert_eq!(t.decided(&roster).map(|d| (d.0, d.1)), Some((6, StateId([7; 32]))));
        assert_eq!(t.committers(6).len(), 3);
    }
}
