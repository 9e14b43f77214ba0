//! The trust rule of cold start: which state, if any, the signed words of
//! where the run stands that a node has gathered back under the run's
//! admission.
//!
//! An export, the archive or the dashboard never takes a state because a
//! peer claims a higher round. They gather commitments — ShardResults, each
//! a signer's signed word that the state it trained from opens its round
//! (`Commitment`) — from peers' status answers or gossip, keep those that
//! verify, name the run, and whose signer's word counts (admitted by the
//! policy or an unexpired ticket; in an open run with operators, only the
//! operators), drop signers that named two states for one round, and
//! take the newest round q whose leading StateId was named by at least
//! half of q's counted signers (a tie goes to the smaller StateId) and by
//! at least `quorum` of them — or, in an open run with operators, by at
//! least half of the operators who signed (at least one) — and by at least
//! half of every counted signer seen in any round. That state opens round
//! q. A minority of the keys heard from, however far ahead the round they
//! sign, never decides.

use crate::admission::Admission;
use crate::committee::ShardResult;
use crate::hash::{RunId, StateId};
use crate::identity::PublicKey;
use crate::spec::AdmissionPolicy;
use std::collections::{BTreeMap, BTreeSet};

/// Most commitments a node weighs when choosing a state (callers bound
/// what they gather to this; more are ignored).
pub const MAX_WEIGHED_COMMITS: usize = 4096;

/// A signer's signed word that `state` opens round `opens` of `run`, its
/// signature checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commitment {
    pub run: RunId,
    pub opens: u64,
    pub state: StateId,
    pub signer: PublicKey,
}

impl Commitment {
    /// A ShardResult of round q: its base, the state its signer ended
    /// round q − 1 on, opens round q.
    pub fn of_result(r: &ShardResult) -> Option<Self> {
        r.verify().ok()?;
        Some(Self { run: r.run, opens: r.round, state: r.base, signer: r.signer })
    }
}

/// A state backed by signed commitments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backed {
    /// The round the state opens (the committed round + 1).
    pub round: u64,
    pub state: StateId,
    /// The counted signers that named it.
    pub committers: Vec<PublicKey>,
    /// All counted signers of that round.
    pub total: usize,
}

/// The newest state the `commitments` back under the run's rule at `now`
/// (the admission's clock), if any.
pub fn backed_state(
    run: &RunId,
    quorum: u32,
    admission: &Admission,
    now: u64,
    commitments: impl IntoIterator<Item = Commitment>,
) -> Option<Backed> {
    // One tally per round: a signer that named two states for a round
    // counts for none.
    let mut rounds: BTreeMap<u64, Tally> = BTreeMap::new();
    for c in commitments.into_iter().take(MAX_WEIGHED_COMMITS) {
        if c.run != *run || !admission.counts_commits_of(&c.signer, now) {
            continue;
        }
        rounds.entry(c.opens).or_default().record(c.signer, c.state);
    }
    let need = match admission.policy() {
        AdmissionPolicy::OpenWithOperators { .. } => 1,
        _ => quorum.max(1) as usize,
    };
    let electorate: BTreeSet<PublicKey> = rounds.values().flat_map(|t| t.named.keys().copied()).collect();
    for (round, tally) in rounds.iter().rev() {
        let Some((state, committers)) = tally.leader() else { continue };
        let total = tally.named.len();
        let decides = committers.len() >= need && 2 * committers.len() >= total;
        if decides && 2 * committers.len() >= electorate.len() {
            return Some(Backed { round: *round, state, committers, total });
        }
    }
    None
}

/// One round's signed words: the state each signer named, a signer that
/// named two left out for good.
#[derive(Debug, Default)]
struct Tally {
    named: BTreeMap<PublicKey, StateId>,
    equivocators: BTreeSet<PublicKey>,
}

impl Tally {
    fn record(&mut self, signer: PublicKey, state: StateId) {
        if self.equivocators.contains(&signer) {
            return;
        }
        match self.named.get(&signer) {
            Some(s) if *s == state => {}
            Some(_) => {
                self.named.remove(&signer);
                self.equivocators.insert(signer);
            }
            None => {
                self.named.insert(signer, state);
            }
        }
    }

    /// The state most signers named (a tie: the smaller StateId), with them.
    fn leader(&self) -> Option<(StateId, Vec<PublicKey>)> {
        let mut by_state: BTreeMap<StateId, Vec<PublicKey>> = BTreeMap::new();
        for (k, s) in &self.named {
            by_state.entry(*s).or_default().push(*k);
        }
        by_state.into_iter().max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{NodeKey, Signature};
    use crate::ticket::Ticket;

    const RUN: RunId = RunId([1; 32]);
    const WALL: u64 = 1_700_000_000;

    fn of(words: &[ShardResult]) -> Vec<Commitment> {
        words.iter().filter_map(Commitment::of_result).collect()
    }

    fn key(i: u8) -> NodeKey {
        NodeKey::from_seed([i; 32])
    }

    /// `k`'s word that round `round` ended on `state`: a result of round
    /// `round + 1` trained from it.
    fn commit(k: &NodeKey, round: u64, state: u8) -> ShardResult {
        ShardResult {
            run: RUN,
            round: round + 1,
            base: StateId([state; 32]),
            shard: 0,
            included_count: 1,
            included_root: [0; 32],
            total_tokens: 1,
            result_hash: [0; 32],
            signer: k.public(),
            signature: Signature::default(),
        }
        .sign(k)
    }

    fn ticket_admission(holders: &[u8]) -> Admission {
        let op = key(100);
        let mut a = Admission::new(RUN, AdmissionPolicy::Tickets { operators: vec![op.public()] });
        for &h in holders {
            let t = Ticket::issue(&op, RUN, key(h).public(), WALL + 3600);
            assert!(a.present(&t, WALL, WALL * 1000).is_ok());
        }
        a
    }

    #[test]
    fn a_majority_of_admitted_committers_backs_a_state() {
        let a = ticket_admission(&[1, 2, 3]);
        let commits = [commit(&key(1), 4, 9), commit(&key(2), 4, 9), commit(&key(3), 4, 8)];
        let b = backed_state(&RUN, 2, &a, WALL * 1000, of(&commits)).expect("backed");
        assert_eq!((b.round, b.state, b.committers.len(), b.total), (5, StateId([9; 32]), 2, 3));
        // Below the quorum nothing is backed, whatever the majority.
        assert_eq!(backed_state(&RUN, 3, &a, WALL * 1000, of(&commits)), None);
    }

    #[test]
    fn forged_higher_states_are_not_backed() {
        let a = ticket_admission(&[1, 2]);
        let mut commits = vec![commit(&key(1), 4, 9), commit(&key(2), 4, 9)];
        // Ten identities without tickets sign a "higher" state.
        commits.extend((10..20).map(|i| commit(&key(i), 50, 66)));
        // A bad signature from an admitted key, for a higher round.
        let mut bad = commit(&key(1), 60, 77);
        bad.base = StateId([78; 32]);
        commits.push(bad);
        // A commit of another run.
        let mut other = commit(&key(2), 70, 88);
        other.run = RunId([2; 32]);
        commits.push(other.clone().sign(&key(2)));
        let b = backed_state(&RUN, 2, &a, WALL * 1000, of(&commits)).expect("backed");
        assert_eq!((b.round, b.state), (5, StateId([9; 32])));
        // Expired tickets no longer count: nothing is backed.
        assert_eq!(backed_state(&RUN, 2, &a, (WALL + 3600) * 1000, of(&commits)), None);
    }

    #[test]
    fn equivocators_count_for_no_state() {
        let a = ticket_admission(&[1, 2, 3]);
        let commits =
            [commit(&key(1), 4, 9), commit(&key(2), 4, 9), commit(&key(2), 4, 8), commit(&key(3), 4, 8)];
        // 2 equivocated: 1 for 9 and 1 for 8 of 2 counted — a tie, which
        // goes to the smaller StateId (as re-sync's does); with quorum 2,
        // nothing is backed.
        let b = backed_state(&RUN, 1, &a, WALL * 1000, of(&commits)).expect("backed");
        assert_eq!((b.round, b.state, b.total), (5, StateId([8; 32]), 2));
        assert_eq!(backed_state(&RUN, 2, &a, WALL * 1000, of(&commits)), None);
    }

    #[test]
    fn the_newest_backed_round_wins() {
        let mut keys = vec![key(1).public(), key(2).public()];
        keys.sort();
        let a = Admission::new(RUN, AdmissionPolicy::Allowlist(keys));
        let commits = [commit(&key(1), 3, 9), commit(&key(2), 3, 9), commit(&key(1), 5, 7)];
        // Round 5 has one committer (quorum 2): round 3's state is the newest backed.
        let b = backed_state(&RUN, 2, &a, 0, of(&commits)).expect("backed");
        assert_eq!((b.round, b.state), (4, StateId([9; 32])));
    }

    /// Fails before the electorate condition: the newest round decided
    /// alone, so one commit a million rounds ahead won at quorum 1.
    #[test]
    fn one_keys_far_future_commit_does_not_outrank_a_majority() {
        let open = Admission::new(RUN, AdmissionPolicy::Open);
        let mut commits: Vec<ShardResult> = (1..=3).map(|i| commit(&key(i), 10, 9)).collect();
        commits.push(commit(&key(4), 1_000_000, 66));
        let b = backed_state(&RUN, 1, &open, 0, of(&commits)).expect("backed");
        assert_eq!((b.round, b.state), (11, StateId([9; 32])));
        // Three of four keys a round ahead of the fourth still lead it there.
        let ahead: Vec<ShardResult> =
            (1..=3).map(|i| commit(&key(i), 12, 5)).chain([commit(&key(4), 11, 6)]).collect();
        assert_eq!(
            backed_state(&RUN, 1, &open, 0, of(&ahead)).map(|b| (b.round, b.state)),
            Some((13, StateId([5; 32])))
        );
    }

    #[test]
    fn in_an_open_run_with_operators_their_commits_decide() {
        let ops = {
            let mut v = vec![key(100).public(), key(101).public()];
            v.sort();
            v
        };
        let a = Admission::new(RUN, AdmissionPolicy::OpenWithOperators { operators: ops });
        let mut commits: Vec<ShardResult> = (10..30).map(|i| commit(&key(i), 9, 66)).collect();
        commits.push(commit(&key(100), 8, 5));
        let b = backed_state(&RUN, 3, &a, 0, of(&commits)).expect("backed");
        assert_eq!((b.round, b.state, b.committers), (9, StateId([5; 32]), vec![key(100).public()]));
        // Plain open runs count everyone: free identities decide (the documented limit).
        let open = Admission::new(RUN, AdmissionPolicy::Open);
        assert_eq!(backed_state(&RUN, 3, &open, 0, of(&commits)).map(|b| b.state), Some(StateId([66; 32])));
    }

    #[test]
    fn committee_results_back_the_base_their_signers_trained_from() {
        let open = Admission::new(RUN, AdmissionPolicy::Open);
        // A result of round r trained from `base` is the word that round
        // r − 1 ended on it.
        let result = |k: &NodeKey, round: u64, base: u8| commit(k, round - 1, base);
        let results = [result(&key(1), 6, 9), result(&key(2), 6, 9), result(&key(3), 6, 8)];
        let words: Vec<Commitment> = results.iter().filter_map(Commitment::of_result).collect();
        let b = backed_state(&RUN, 1, &open, 0, words).expect("backed");
        assert_eq!(
            (b.round, b.state, b.total),
            (6, StateId([9; 32]), 3),
            "a round-6 result's base opens round 6"
        );
        let mut forged = result(&key(4), 7, 5);
        forged.base = StateId([6; 32]);
        assert_eq!(Commitment::of_result(&forged), None, "a result whose signature fails is no word");
    }
}
