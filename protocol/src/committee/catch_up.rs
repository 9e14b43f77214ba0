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
//! it, moves the node, whatever round they name. The node has no vote in
//! a round it has not closed: one that moved to a state whose roster seats
//! it, after the others went on without it, follows them. The tally keeps each
//! signer's own newest rounds, so one key's results for many rounds push
//! out only its own. A node with no roster (the run's first round, or a
//! node without the ledger of its state) has no electorate: it counts a
//! strict majority of each round's committers, as anyone joining an open
//! run must trust whoever answers.
//!
//! Two sides that ran apart (a partition, or a node paused past the
//! deadlines) each hold a roster without the other, so neither side's
//! results count for the other's electorate. The results of former roster
//! members — keys that dropped off the node's roster within the last
//! `FORMER_ROUNDS` rounds or `FORMER_DEADLINES` input deadlines, whichever
//! is longer, not excluded, and kept across restarts by the driver — are
//! tallied apart (`outside`, only
//! keys heard lately): a rival chain is the largest group of them that
//! named one state for one of the newest two rounds they signed, on a chain
//! other than ours. Keys that were never on the node's roster count for
//! nothing, however many. It outranks
//! our roster when it has more keys, or as many and it is behind us by
//! `TIE_LEAD` rounds or more (the faster side moves: it can fetch the
//! slower side's state and join its next round in time, where the slower
//! side would chase states the faster one has passed), or, closer than
//! that, the smallest key of the two sides is its: then the node fetches
//! that state and moves to it, whatever its round (the record of what it
//! signed keeps it from signing a second word for a round it signed
//! before). Both sides see the same two groups, so one side moves and the
//! other stays; a minority of keys never outranks a roster.
//!
//! In an open run that names operators, the operators are the electorate
//! instead (`Electorate::Operators`): a node follows a strict majority of
//! the operators who signed a round (of an even split, the smaller
//! StateId), whether or not they sit on its roster, and no other key's
//! word counts, however many sign — anyone may train in such a run, so a
//! roster may be mostly one party's keys. No rival chain outranks them.

use std::collections::{BTreeMap, BTreeSet};

use super::ledger::Ledger;
use super::machine::fetch_backoff;
use crate::hash::StateId;
use crate::identity::PublicKey;

/// Rounds remembered per signer.
const KEPT_ROUNDS: usize = 4;
/// Rounds by which the side ahead of an equal rival chain moves to it.
pub const TIE_LEAD: u64 = 4;
/// Rounds of this node's own chain remembered (the state it opened each
/// on), so a rival's word about a state it passed through long ago is
/// not taken for another chain.
const CHAIN_ROUNDS: usize = 4096;
/// Signers remembered.
const MAX_COMMITTERS: usize = 65_536;
/// Rounds a key that dropped off the roster stays a former member (and
/// at least `FORMER_DEADLINES` input deadlines).
pub const FORMER_ROUNDS: u64 = 64;
/// Input deadlines a key that dropped off the roster stays a former member
/// at the least: a side that closes rounds alone closes them fast, and
/// would otherwise forget the other side before it heard from it.
pub const FORMER_DEADLINES: u64 = 10;

/// Whose signed words decide which state a node follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Electorate {
    /// The roster of the state the node holds (the excluded left out): a
    /// strict majority of all of it.
    Roster(BTreeSet<PublicKey>),
    /// An open run that names operators: a strict majority of the
    /// operators who signed the round; no other key counts.
    Operators(BTreeSet<PublicKey>),
    /// No roster (the run's first round, or a state without its ledger):
    /// a strict majority of the round's committers.
    Committers,
}

impl Electorate {
    /// Whether `key`'s word counts.
    pub fn counts(&self, key: &PublicKey) -> bool {
        match self {
            Electorate::Roster(keys) | Electorate::Operators(keys) => keys.contains(key),
            Electorate::Committers => true,
        }
    }
}

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
    /// `electorate`, or split evenly between two states (each backed by
    /// exactly half: the smaller StateId, so both halves end on one state),
    /// with its backers. `me`, the node asking with the round it has open,
    /// has no vote in that round or a later one unless it said what it
    /// ended it on: it cannot hold out against a state for a round it has
    /// not closed.
    pub fn decided(
        &self,
        electorate: &Electorate,
        me: Option<(&PublicKey, u64)>,
    ) -> Option<(u64, StateId, Vec<PublicKey>)> {
        let mut votes: BTreeMap<u64, BTreeMap<StateId, Vec<PublicKey>>> = BTreeMap::new();
        for (signer, rounds) in &self.by_signer {
            if !electorate.counts(signer) {
                continue;
            }
            for (round, state) in rounds {
                votes.entry(*round).or_default().entry(*state).or_default().push(*signer);
            }
        }
        votes.into_iter().rev().find_map(|(round, by_state)| {
            let voters = match electorate {
                Electorate::Roster(keys) => {
                    let abstains = me.is_some_and(|(k, open)| {
                        round >= open && keys.contains(k) && self.said(k, round).is_none()
                    });
                    keys.len() - usize::from(abstains)
                }
                Electorate::Operators(_) | Electorate::Committers => by_state.values().map(Vec::len).sum(),
            };
            let halves = by_state.values().filter(|b| 2 * b.len() == voters).count();
            let (state, backers) =
                by_state.into_iter().max_by_key(|(s, b)| (b.len(), std::cmp::Reverse(*s)))?;
            let even_split = halves == 2 && 2 * backers.len() == voters;
            (2 * backers.len() > voters || even_split).then_some((round, state, backers))
        })
    }

    /// Forget the words of every signer `keep` says no.
    fn retain(&mut self, keep: impl Fn(&PublicKey) -> bool) {
        self.by_signer.retain(|k, _| keep(k));
    }

    /// The committers of `round` (for tests and reports).
    pub fn committers(&self, round: u64) -> BTreeSet<PublicKey> {
        self.by_signer.iter().filter(|(_, r)| r.contains_key(&round)).map(|(k, _)| *k).collect()
    }
}

impl CommitTally {
    /// The largest group of signers in `heard` (that the caller counts) that
    /// named one state for one of the newest two rounds any of them signed,
    /// and not the state `ours` says we ended that round on: (round, state,
    /// signers), the largest group first, then the newer round.
    fn largest_group(
        &self,
        counted: impl Fn(&PublicKey) -> bool,
        ours: impl Fn(u64, StateId) -> bool,
    ) -> Option<(u64, StateId, Vec<PublicKey>)> {
        let signers = || self.by_signer.iter().filter(|(k, _)| counted(k));
        let newest = signers().filter_map(|(_, r)| r.keys().next_back().copied()).max()?;
        let mut groups: BTreeMap<(u64, StateId), Vec<PublicKey>> = BTreeMap::new();
        for (k, rounds) in signers() {
            for (round, state) in rounds.range(newest.saturating_sub(1)..) {
                if !ours(*round, *state) {
                    groups.entry((*round, *state)).or_default().push(*k);
                }
            }
        }
        groups.into_iter().max_by_key(|((r, _), v)| (v.len(), *r)).map(|((r, s), v)| (r, s, v))
    }

    /// The state `signer` said it ended `round` on.
    fn said(&self, signer: &PublicKey, round: u64) -> Option<StateId> {
        self.by_signer.get(signer)?.get(&round).copied()
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
    /// The run's operators, when only their words decide (an open run that
    /// names them); empty otherwise.
    operators: BTreeSet<PublicKey>,
    tally: CommitTally,
    /// Keys that dropped off the roster, with the round they did and when.
    former: BTreeMap<PublicKey, (u64, u64)>,
    /// The words of former members, and when each was last heard.
    outside: CommitTally,
    heard: BTreeMap<PublicKey, u64>,
    /// Our chain: by round, the state this node ended it on (the state it
    /// opened the next round on), for its newest `CHAIN_ROUNDS` rounds.
    chain: BTreeMap<u64, StateId>,
    /// A rival chain's state being fetched, with the round it opens: the
    /// node moves to it whatever its own round.
    rejoining: Option<(u64, StateId)>,
    /// The state being fetched, with the round it ended.
    fetching: Option<(u64, StateId)>,
    /// The last state whose fetch failed: asked for again only after a
    /// back-off that doubles with each failure in a row.
    failed: Option<FailedFetch>,
    waiting: bool,
}

/// A state no holder served: how often in a row, and when to ask again
/// (none once that retry was taken).
#[derive(Debug, Clone, Copy)]
struct FailedFetch {
    target: (u64, StateId),
    tries: usize,
    retry_at: Option<u64>,
}

impl CatchUp {
    /// Catching up in a run where only `operators`' words decide (none:
    /// the roster's).
    pub fn with_operators(operators: &[PublicKey]) -> Self {
        Self { operators: operators.iter().copied().collect(), ..Self::default() }
    }

    /// Count that `signer` ended `round` on `state` (what its result of
    /// the next round, trained from `state`, says).
    pub fn note_state(&mut self, signer: PublicKey, round: u64, state: StateId) {
        self.tally.note_state(signer, round, state);
    }

    /// This node opened `round` on `base`: it ended the round before on
    /// `base`. Rounds it had passed on a chain it left are forgotten.
    pub fn opened(&mut self, round: u64, base: StateId) {
        let Some(ended) = round.checked_sub(1) else { return };
        self.chain.split_off(&ended);
        self.chain.insert(ended, base);
        while self.chain.len() > CHAIN_ROUNDS {
            self.chain.pop_first();
        }
    }

    /// Round `round` opened at `now` on a roster changed from `old` to
    /// `new`: keys that dropped off (and were not excluded) are former
    /// members for `FORMER_ROUNDS` rounds and at least `keep_ms`; keys back
    /// on it are members again. Words of keys that are neither in the
    /// electorate nor former members are forgotten.
    pub fn roster_changed(&mut self, old: &Ledger, new: &Ledger, round: u64, now: u64, keep_ms: u64) {
        for k in &old.roster {
            if new.roster.binary_search(k).is_err()
                && !new.is_excluded(k)
                && self.former.len() < MAX_COMMITTERS
            {
                self.former.insert(*k, (round, now));
            }
        }
        self.former.retain(|k, (at, since)| {
            (at.saturating_add(FORMER_ROUNDS) >= round || now.saturating_sub(*since) <= keep_ms)
                && new.roster.binary_search(k).is_err()
                && !new.is_excluded(k)
        });
        // Only the electorate's words can decide: the rest (keys that left,
        // or a flood of made-up keys while there was no roster) would
        // otherwise hold the room of the keys that count.
        let operators = &self.operators;
        if !operators.is_empty() {
            self.tally.retain(|k| operators.contains(k));
        } else if !new.roster.is_empty() {
            self.tally.retain(|k| new.roster.binary_search(k).is_ok());
        }
    }

    /// Former members a node remembered before it restarted (its store
    /// keeps them): former members again from `round`, at `now`, unless
    /// `ledger` seats or excludes them.
    pub fn restore_former(&mut self, keys: &[PublicKey], ledger: &Ledger, round: u64, now: u64) {
        for k in keys {
            if ledger.roster.binary_search(k).is_err()
                && !ledger.is_excluded(k)
                && self.former.len() < MAX_COMMITTERS
            {
                self.former.entry(*k).or_insert((round, now));
            }
        }
    }

    /// The former members, ascending.
    pub fn former_members(&self) -> Vec<PublicKey> {
        self.former.keys().copied().collect()
    }

    /// Whether `key` dropped off the roster lately.
    pub fn is_former(&self, key: &PublicKey) -> bool {
        self.former.contains_key(key)
    }

    /// Count, apart, that `signer` — a former member — ended `round` on
    /// `state`, heard at `now`.
    pub fn note_outside(&mut self, signer: PublicKey, round: u64, state: StateId, now: u64) {
        if self.heard.len() >= MAX_COMMITTERS && !self.heard.contains_key(&signer) {
            return;
        }
        self.heard.insert(signer, now);
        self.outside.note_state(signer, round, state);
    }

    /// Whether `state`, opening `round`, is the rival chain's state being
    /// fetched (the node moves to it whatever its own round). A state that
    /// opens another round than the one its signers ended on is not.
    pub fn rejoins(&self, round: u64, state: StateId) -> bool {
        self.rejoining == Some((round, state))
    }

    /// Hold off training until a state is fetched.
    pub fn wait(&mut self) {
        self.waiting = true;
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting
    }

    /// A fetch ended at `now`: with a state (`caught_up`) or without one
    /// (the same state is then asked for again only after a back-off).
    pub fn fetch_ended(&mut self, caught_up: bool, now: u64) {
        let target = self.fetching.take();
        self.rejoining = None;
        if caught_up {
            self.waiting = false;
            self.failed = None;
            return;
        }
        let Some(target) = target else { return };
        let tries = match self.failed {
            Some(f) if f.target == target => f.tries + 1,
            _ => 1,
        };
        let retry_at = Some(now.saturating_add(fetch_backoff(tries)));
        self.failed = Some(FailedFetch { target, tries, retry_at });
    }

    /// When a state whose fetch failed is to be asked for again (none: no
    /// retry is waiting on a back-off).
    pub fn retry_at(&self) -> Option<u64> {
        self.failed.filter(|_| self.fetching.is_none()).and_then(|f| f.retry_at)
    }

    /// Whether the retry waiting on a back-off is due at `now`; it is then
    /// taken (the caller looks for a target once).
    pub fn take_due_retry(&mut self, now: u64) -> bool {
        match &mut self.failed {
            Some(f) if f.retry_at.is_some_and(|t| t <= now) && self.fetching.is_none() => {
                f.retry_at = None;
                true
            }
            _ => false,
        }
    }

    /// The state to fetch, when none is being fetched and a strict
    /// majority of `ledger`'s electorate signed a state this node (in
    /// `round`, trained from `base`) is a whole round short of, or a
    /// different state for the round it closed last (or, while waiting,
    /// any state it does not hold); else a rival chain that outranks the
    /// electorate, of keys heard since `fresh_since`. The target is then
    /// being fetched, unless its last fetch failed less than its back-off
    /// before `now`.
    pub fn target(
        &mut self,
        ledger: &Ledger,
        (round, base): (u64, StateId),
        me: &PublicKey,
        (now, fresh_since): (u64, u64),
    ) -> Option<CatchUpTarget> {
        if self.fetching.is_some() {
            return None;
        }
        let roster: BTreeSet<PublicKey> =
            ledger.roster.iter().filter(|k| !ledger.is_excluded(k)).copied().collect();
        let electorate = if !self.operators.is_empty() {
            Electorate::Operators(self.operators.clone())
        } else if roster.is_empty() {
            Electorate::Committers
        } else {
            Electorate::Roster(roster)
        };
        let found = self.majority(&electorate, me, round, base).or_else(|| match &electorate {
            Electorate::Roster(keys) => self.rival(ledger, keys, round, me, fresh_since),
            Electorate::Operators(_) | Electorate::Committers => None,
        });
        let (decided, state, backers) = found?;
        if self.failed.is_some_and(|f| f.target == (decided, state) && f.retry_at.is_some_and(|t| now < t)) {
            self.rejoining = None;
            return None;
        }
        let mut holders: Vec<PublicKey> = backers.into_iter().filter(|k| k != me).collect();
        if holders.is_empty() {
            self.rejoining = None;
            return None;
        }
        // Askers start at different holders, so no one holder serves every
        // catch-up of a round.
        let mut first = [0u8; 8];
        first.copy_from_slice(&me.0[..8]);
        let start = u64::from_le_bytes(first) % holders.len() as u64;
        holders.rotate_left(start as usize);
        self.fetching = Some((decided, state));
        Some(CatchUpTarget { round: decided, state, holders })
    }

    /// The state a strict majority of `electorate` signed, when this node
    /// is behind it.
    fn majority(
        &self,
        electorate: &Electorate,
        me: &PublicKey,
        round: u64,
        base: StateId,
    ) -> Option<(u64, StateId, Vec<PublicKey>)> {
        let (decided, state, backers) = self.tally.decided(electorate, Some((me, round)))?;
        let behind = round < decided
            || (round == decided + 1 && base != state)
            || (self.waiting && round <= decided + 1 && base != state);
        behind.then_some((decided, state, backers))
    }

    /// A rival chain of former members that outranks `electorate`: more
    /// keys, or as many and behind ours by `TIE_LEAD` rounds (or within
    /// that, the smallest key of both sides).
    fn rival(
        &mut self,
        ledger: &Ledger,
        electorate: &BTreeSet<PublicKey>,
        round: u64,
        me: &PublicKey,
        fresh_since: u64,
    ) -> Option<(u64, StateId, Vec<PublicKey>)> {
        let counted = |k: &PublicKey| {
            self.former.contains_key(k)
                && !electorate.contains(k)
                && !ledger.is_excluded(k)
                && self.heard.get(k).is_some_and(|t| *t >= fresh_since)
        };
        // Our chain: the states we ended our newest rounds on, the base we
        // train from now among them (a former member whose newest word
        // names one of them is behind on our chain, not on another), and
        // what we said we ended a round on.
        let ours = |r: u64, s: StateId| self.chain.get(&r) == Some(&s) || self.tally.said(me, r) == Some(s);
        let (r, state, backers) = self.outside.largest_group(counted, ours)?;
        let smallest = |keys: &mut dyn Iterator<Item = &PublicKey>| keys.min().copied();
        // Of two equal sides, the one ahead by `TIE_LEAD` rounds moves: it
        // closes rounds faster, so it can fetch the other's state and join
        // its next round, where the slower side would chase states the
        // faster one has already passed (and never train in time for its
        // rounds). Closer than that, the side without the smallest key.
        let theirs = r.saturating_add(1);
        let tie_is_theirs = if round >= theirs.saturating_add(TIE_LEAD) {
            true
        } else if theirs >= round.saturating_add(TIE_LEAD) {
            false
        } else {
            smallest(&mut backers.iter()) < smallest(&mut electorate.iter())
        };
        let outranks =
            backers.len() > electorate.len() || (backers.len() == electorate.len() && tie_is_theirs);
        if !outranks {
            return None;
        }
        self.rejoining = Some((r.saturating_add(1), state));
        Some((r, state, backers))
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
        let open = Electorate::Committers;
        let mut t = CommitTally::default();
        assert_eq!(t.decided(&open, None), None);
        t.note(commit(1, 3, 7));
        t.note(commit(2, 3, 7));
        t.note(commit(3, 3, 8));
        let (round, state, backers) = t.decided(&open, None).expect("decided");
        assert_eq!((round, state, backers.len()), (3, StateId([7; 32]), 2));
        // A committer's second commit for a round does not count twice.
        t.note(commit(3, 3, 7));
        assert_eq!(t.decided(&open, None).map(|d| d.2.len()), Some(2));
        // An even split between two states goes to the smaller StateId.
        t.note(commit(1, 4, 2));
        t.note(commit(2, 4, 1));
        assert_eq!(t.decided(&open, None).map(|d| (d.0, d.1)), Some((4, StateId([1; 32]))));
        // A third committer on neither: one of three is no majority.
        t.note(commit(3, 4, 5));
        assert_eq!(t.decided(&open, None).map(|d| d.0), Some(3));
        for r in 5..12 {
            t.note(commit(1, r, 1));
        }
        assert!(!t.committers(3).contains(&keys(&[1]).into_iter().next().unwrap()), "old rounds are dropped");
        assert_eq!(t.decided(&open, None).map(|d| d.0), Some(11));
        // Commits for rounds older than a signer's kept ones are ignored.
        t.note(commit(1, 2, 2));
        assert!(t.committers(2).is_empty());
    }

    #[test]
    fn keys_off_the_roster_never_decide_whatever_round_they_name() {
        let roster = Electorate::Roster(keys(&[1, 2, 3, 4, 5]));
        let mut t = CommitTally::default();
        t.note(commit(1, 6, 7));
        t.note(commit(2, 6, 7));
        t.note(commit(3, 6, 7));
        // Forty keys off the roster sign a far-future state.
        for s in 100..140 {
            t.note(commit(s, 1_000_000, 9));
        }
        let (round, state, backers) = t.decided(&roster, None).expect("the roster's majority decides");
        assert_eq!((round, state, backers.len()), (6, StateId([7; 32]), 3));
        // An even split of the roster goes to the smaller StateId; half of
        // it alone on a round the other half has not signed decides nothing.
        let four = Electorate::Roster(keys(&[1, 2, 3, 4]));
        let mut even = CommitTally::default();
        for (signer, state) in [(1, 9), (2, 9), (3, 4), (4, 4)] {
            even.note(commit(signer, 6, state));
        }
        assert_eq!(even.decided(&four, None).map(|d| (d.1, d.2.len())), Some((StateId([4; 32]), 2)));
        let mut half = CommitTally::default();
        half.note(commit(1, 9_000, 1));
        half.note(commit(2, 9_000, 1));
        assert_eq!(half.decided(&four, None), None);
        // Two of five is no majority of the roster, however many others agree.
        let mut u = CommitTally::default();
        u.note(commit(1, 6, 8));
        u.note(commit(2, 6, 8));
        for s in 100..140 {
            u.note(commit(s, 6, 8));
        }
        assert_eq!(u.decided(&roster, None), None);
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
            let t = c.target(&ledger, (3, StateId([1; 32])), &me, (0, 0)).expect("behind the majority");
            assert_eq!(
                t.holders.iter().collect::<BTreeSet<_>>(),
                keys(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).iter().collect()
            );
            firsts.insert(t.holders[0]);
        }
        assert!(firsts.len() >= 6, "40 askers start at {} of 9 holders", firsts.len());
    }

    #[test]
    fn a_state_no_holder_served_is_asked_for_again_only_after_a_doubling_back_off() {
        let ledger = Ledger::genesis(keys(&[1, 2, 3]).into_iter().collect());
        let me = NodeKey::from_seed([20; 32]).public();
        let mut c = CatchUp::default();
        for s in 1..=3 {
            c.note_state(commit(s, 4, 7).0, 4, StateId([7; 32]));
        }
        let at = (3, StateId([1; 32]));
        assert!(c.target(&ledger, at, &me, (0, 0)).is_some());
        assert!(c.target(&ledger, at, &me, (0, 0)).is_none(), "one fetch at a time");
        c.fetch_ended(false, 1_000);
        let first = c.retry_at().expect("a back-off after a failed fetch");
        assert!(first > 1_000);
        assert!(!c.take_due_retry(first - 1));
        assert!(c.target(&ledger, at, &me, (first - 1, 0)).is_none(), "asked again before its back-off");
        assert!(c.take_due_retry(first));
        assert!(!c.take_due_retry(first), "a retry is taken once");
        assert_eq!(c.retry_at(), None);
        assert!(c.target(&ledger, at, &me, (first, 0)).is_some());
        assert_eq!(c.retry_at(), None, "no back-off while a fetch runs");
        c.fetch_ended(false, first);
        let second = c.retry_at().expect("a second back-off");
        assert!(second - first > first - 1_000, "the back-off doubles: {first} then {second}");
        // Another state (the majority moved on) is asked for at once.
        for s in 1..=3 {
            c.note_state(commit(s, 5, 8).0, 5, StateId([8; 32]));
        }
        let t = c.target(&ledger, at, &me, (first, 0)).expect("a new state is not held back");
        assert_eq!(t.state, StateId([8; 32]));
        c.fetch_ended(true, first);
        assert_eq!(c.retry_at(), None, "a fetch that caught up ends the back-off");
    }

    #[test]
    fn one_key_naming_many_rounds_pushes_out_only_its_own_commits() {
        let roster = Electorate::Roster(keys(&[1, 2, 3, 4]));
        let mut t = CommitTally::default();
        for s in [1, 2, 3] {
            t.note(commit(s, 6, 7));
        }
        // Roster member 4 signs commits for a thousand rounds.
        for r in 1_000..2_000 {
            t.note(commit(4, r, 9));
        }
        assert_eq!(t.decided(&roster, None).map(|d| (d.0, d.1)), Some((6, StateId([7; 32]))));
        assert_eq!(t.committers(6).len(), 3);
    }

    #[test]
    fn in_a_run_with_operators_only_a_majority_of_the_operators_who_signed_moves_a_node() {
        // Operators 1 and 2; a roster of 3..=9 that all name state 8.
        let ops: Vec<PublicKey> = keys(&[1, 2]).into_iter().collect();
        let ledger = Ledger::genesis(keys(&[3, 4, 5, 6, 7, 8, 9]).into_iter().collect());
        let me = NodeKey::from_seed([3; 32]).public();
        let mut c = CatchUp::with_operators(&ops);
        for s in 3..=9 {
            c.note_state(commit(s, 4, 8).0, 4, StateId([8; 32]));
        }
        assert_eq!(
            c.target(&ledger, (5, StateId([1; 32])), &me, (0, 0)),
            None,
            "the whole roster moves nobody"
        );
        // One operator of two signed round 4: the operators who signed decide.
        c.note_state(commit(1, 4, 7).0, 4, StateId([7; 32]));
        let t = c.target(&ledger, (5, StateId([1; 32])), &me, (0, 0)).expect("behind the operators");
        assert_eq!((t.round, t.state, t.holders), (4, StateId([7; 32]), vec![commit(1, 4, 7).0]));
        // The two operators split evenly: the smaller StateId, as in re-sync.
        let mut c = CatchUp::with_operators(&ops);
        c.note_state(commit(1, 4, 7).0, 4, StateId([7; 32]));
        c.note_state(commit(2, 4, 6).0, 4, StateId([6; 32]));
        let t = c.target(&ledger, (5, StateId([1; 32])), &me, (0, 0)).expect("an even split decides");
        assert_eq!(t.state, StateId([6; 32]));
    }

    #[test]
    fn a_flood_of_made_up_keys_before_the_first_roster_is_forgotten_once_it_comes() {
        // No roster yet: any key's word counts, and a flood of made-up keys
        // fills the tally.
        let mut c = CatchUp::default();
        for i in 0..MAX_COMMITTERS as u32 {
            let mut seed = [0xee; 32];
            seed[..4].copy_from_slice(&i.to_le_bytes());
            c.note_state(PublicKey(seed), 3, StateId([9; 32]));
        }
        let members = keys(&[1, 2, 3]);
        let roster = Ledger::genesis(members.iter().copied().collect());
        let me = NodeKey::from_seed([1; 32]).public();
        c.roster_changed(&Ledger::genesis(Vec::new()), &roster, 4, 0, 300_000);
        // The roster's words count again: two of three ended round 6 on 7.
        for k in members.iter().take(2) {
            c.note_state(*k, 6, StateId([7; 32]));
        }
        let t = c.target(&roster, (5, StateId([1; 32])), &me, (0, 0)).expect("behind the roster's majority");
        assert_eq!((t.round, t.state), (6, StateId([7; 32])));
    }

    #[test]
    fn a_former_member_is_kept_for_rounds_or_time_whichever_is_longer_and_survives_a_restart() {
        let both = Ledger::genesis(keys(&[1, 2]).into_iter().collect());
        let alone = Ledger::genesis(keys(&[1]).into_iter().collect());
        let other = NodeKey::from_seed([2; 32]).public();
        let keep_ms = 300_000;
        let mut c = CatchUp::default();
        c.roster_changed(&both, &alone, 10, 1_000, keep_ms);
        assert_eq!(c.former_members(), vec![other]);
        // A side alone closes rounds fast: 500 rounds in a minute.
        c.roster_changed(&alone, &alone, 510, 61_000, keep_ms);
        assert!(c.is_former(&other), "still within the time it is kept");
        c.roster_changed(&alone, &alone, 520, 301_001, keep_ms);
        assert!(!c.is_former(&other), "past both the rounds and the time");
        // Slow rounds: kept for FORMER_ROUNDS however long they take.
        let mut c = CatchUp::default();
        c.roster_changed(&both, &alone, 10, 0, keep_ms);
        c.roster_changed(&alone, &alone, 10 + FORMER_ROUNDS, 10_000_000, keep_ms);
        assert!(c.is_former(&other));
        // Back on the roster: a member again.
        c.roster_changed(&alone, &both, 80, 10_000_001, keep_ms);
        assert!(!c.is_former(&other));
        // After a restart the stored keys are former members again, unless
        // the roster seats them.
        let mut c = CatchUp::default();
        c.restore_former(&[other], &alone, 900, 0);
        assert!(c.is_former(&other));
        let mut c = CatchUp::default();
        c.restore_former(&[other], &both, 900, 0);
        assert!(!c.is_former(&other));
    }

    #[test]
    fn a_former_members_word_about_a_state_our_chain_passed_through_long_ago_moves_nobody() {
        // Two keys, ordered so the other side outranks ours on a tie.
        let (mut a, mut b) = (NodeKey::from_seed([1; 32]).public(), NodeKey::from_seed([2; 32]).public());
        if b > a {
            std::mem::swap(&mut a, &mut b);
        }
        let (me, other) = (a, b);
        let both = Ledger::genesis(vec![me, other]);
        let alone = Ledger::genesis(vec![me]);
        let state = |r: u64| StateId([r as u8; 32]);
        let mut c = CatchUp::default();
        c.opened(42, state(41));
        c.roster_changed(&both, &alone, 43, 0, 300_000);
        // We went on alone from round 42 to round 64.
        for r in 43..=64 {
            c.opened(r, state(r - 1));
            c.note_state(me, r - 1, state(r - 1));
        }
        // The former member's newest word: it ended round 41 on the state
        // we opened round 42 on. It is behind on our chain.
        c.note_outside(other, 41, state(41), 1_000);
        assert_eq!(c.target(&alone, (64, state(63)), &me, (0, 0)), None);
        // A word about a state we never held is another chain's.
        c.note_outside(other, 50, StateId([200; 32]), 1_000);
        let t = c.target(&alone, (64, state(63)), &me, (0, 0)).expect("the other chain outranks ours");
        assert_eq!((t.round, t.state, t.holders), (50, StateId([200; 32]), vec![other]));
    }

    #[test]
    fn of_two_equal_sides_the_one_ahead_in_rounds_moves() {
        let (mut small, mut large) =
            (NodeKey::from_seed([1; 32]).public(), NodeKey::from_seed([2; 32]).public());
        if small > large {
            std::mem::swap(&mut small, &mut large);
        }
        let rival = StateId([200; 32]);
        let side = |me: PublicKey, other: PublicKey, (ours, theirs): (u64, u64)| {
            let alone = Ledger::genesis(vec![me]);
            let mut c = CatchUp::default();
            c.roster_changed(&Ledger::genesis(vec![me, other]), &alone, ours, 0, 300_000);
            c.opened(ours, StateId([1; 32]));
            c.note_outside(other, theirs - 1, rival, 1_000);
            c.target(&alone, (ours, StateId([1; 32])), &me, (0, 0)).map(|t| t.state)
        };
        // Far apart in rounds: the side ahead moves, whatever the keys.
        assert_eq!(side(small, large, (900, 170)), Some(rival), "the smallest key ahead moves");
        assert_eq!(side(large, small, (170, 900)), None, "and the other stays");
        assert_eq!(side(large, small, (900, 170)), Some(rival));
        assert_eq!(side(small, large, (170, 900)), None);
        // Close in rounds: the side without the smallest key moves.
        assert_eq!(side(large, small, (100, 102)), Some(rival));
        assert_eq!(side(small, large, (102, 100)), None);
    }
}
