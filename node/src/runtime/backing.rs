//! Signed commitments as evidence of where a run stands (docs/protocol.md
//! §7.6).
//!
//! Serving side: a node offers its own signed results of its last rounds
//! (`own_results`), each naming the state it trained that round from, as
//! the backing of its status.
//! Joining side: `Evidence` gathers the commitments and tickets of the
//! peers' status answers (or, for an archive, of the run's gossip) and
//! picks the state they back under the run's rule
//! (`murmur_protocol::trust`), never a round a peer merely claims.

use murmur_protocol::committee::ShardResult;
use murmur_protocol::trust::MAX_WEIGHED_COMMITS;
use murmur_protocol::{backed_state, Admission, Backed, Commitment, PublicKey, RunSpec, Ticket};

use crate::net::{PeerStatus, StatusBacking};

/// Rounds whose results a node keeps to offer.
pub const BACKING_ROUNDS: usize = 3;
/// What a committee node's status offers: its own signed results, one per
/// round (the newest `BACKING_ROUNDS`, newest first), with its ticket.
pub fn own_results<'a>(
    results: impl DoubleEndedIterator<Item = &'a ShardResult>,
    ticket: Option<&Ticket>,
) -> Vec<StatusBacking> {
    let ticket = ticket.map(Ticket::encode);
    results
        .rev()
        .take(BACKING_ROUNDS)
        .map(|r| StatusBacking { result: r.encode(), ticket: ticket.clone() })
        .collect()
}

/// Commitments and tickets gathered from peers' status answers.
#[derive(Debug, Default)]
pub struct Evidence {
    /// Every commitment gathered (signed results), its signature checked.
    words: Vec<Commitment>,
    /// (who presented it, the ticket); holders already matched.
    tickets: Vec<(PublicKey, Ticket)>,
}

impl Evidence {
    /// Take what `peer`'s status offers: its own ticket (only if it is
    /// `peer`'s), and its backing — signed results — each with a ticket
    /// only if it is the signer's. Undecodable entries
    /// and bad signatures are skipped; at most `MAX_WEIGHED_COMMITS` of
    /// each are kept in all.
    pub fn add_status(&mut self, peer: PublicKey, s: &PeerStatus) {
        if let Some(t) = s.ticket.as_deref().and_then(|b| Ticket::decode(b).ok()) {
            if t.holder == peer && self.tickets.len() < MAX_WEIGHED_COMMITS {
                self.tickets.push((peer, t));
            }
        }
        for b in &s.backing {
            if self.words.len() >= MAX_WEIGHED_COMMITS {
                break;
            }
            let word = ShardResult::decode(&b.result).ok().as_ref().and_then(Commitment::of_result);
            let Some(word) = word else { continue };
            if let Some(t) = b.ticket.as_deref().and_then(|b| Ticket::decode(b).ok()) {
                if t.holder == word.signer && self.tickets.len() < MAX_WEIGHED_COMMITS {
                    self.tickets.push((peer, t));
                }
            }
            self.words.push(word);
        }
    }

    /// Take a result seen as gossip (at most
    /// `MAX_WEIGHED_COMMITS` kept; a bad signature is no evidence).
    pub fn add_result(&mut self, r: &ShardResult) {
        if self.words.len() < MAX_WEIGHED_COMMITS {
            if let Some(word) = Commitment::of_result(r) {
                self.words.push(word);
            }
        }
    }

    /// Take a ticket seen as gossip, presented by `presenter`.
    pub fn add_ticket(&mut self, presenter: PublicKey, t: Ticket) {
        let known = self.tickets.iter().any(|(_, k)| k.holder == t.holder && k.expires == t.expires);
        if !known && self.tickets.len() < MAX_WEIGHED_COMMITS {
            self.tickets.push((presenter, t));
        }
    }

    /// Forget the words of rounds before `round`.
    pub fn forget_before(&mut self, round: u64) {
        self.words.retain(|w| w.opens > round);
    }

    /// The state that opens round `opens`, as the commitments naming that
    /// round back it under the run's rule.
    fn backed_at(&self, spec: &RunSpec, unix_now: u64, opens: u64) -> Option<Backed> {
        let a = self.admission(spec, unix_now);
        let words = self.words.iter().filter(|w| w.opens == opens).copied();
        backed_state(&spec.run_id(), spec.quorum, &a, unix_now.saturating_mul(1000), words)
    }

    /// The state round `round` ended on, as the gathered words of the
    /// round after it back it under the run's rule.
    pub fn backed_round(&self, spec: &RunSpec, unix_now: u64, round: u64) -> Option<Backed> {
        self.backed_at(spec, unix_now, round.checked_add(1)?)
    }

    /// Whether the gathered commitments of some round back `state` under
    /// the run's rule.
    pub fn backing_of(
        &self,
        spec: &RunSpec,
        unix_now: u64,
        state: murmur_protocol::StateId,
    ) -> Option<Backed> {
        let mut rounds: Vec<u64> = self.words.iter().filter(|w| w.state == state).map(|w| w.opens).collect();
        rounds.sort_unstable();
        rounds.dedup();
        rounds.into_iter().filter_map(|r| self.backed_at(spec, unix_now, r)).find(|b| b.state == state)
    }

    /// The admission these tickets give at unix time `unix_now` (the
    /// admission's clock is unix milliseconds).
    fn admission(&self, spec: &RunSpec, unix_now: u64) -> Admission {
        let mut a = Admission::new(spec.run_id(), spec.admission.clone());
        if spec.admission.uses_tickets() {
            for (_, t) in &self.tickets {
                let _ = a.present(t, unix_now, unix_now.saturating_mul(1000));
            }
        }
        a
    }

    /// The newest state the gathered commitments back under the run's rule.
    pub fn backed(&self, spec: &RunSpec, unix_now: u64) -> Option<Backed> {
        let a = self.admission(spec, unix_now);
        let words = self.words.iter().copied();
        backed_state(&spec.run_id(), spec.quorum, &a, unix_now.saturating_mul(1000), words)
    }

    /// The tickets gathered that admit their holder now, with who presented
    /// them (for the round machine).
    pub fn valid_tickets(&self, spec: &RunSpec, unix_now: u64) -> Vec<(PublicKey, Ticket)> {
        if !spec.admission.uses_tickets() {
            return Vec::new();
        }
        let (run, ops) = (spec.run_id(), spec.admission.operators());
        self.tickets.iter().filter(|(_, t)| t.check(&run, ops, unix_now).is_ok()).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::{AdmissionPolicy, NodeKey, Signature, StateId};

    /// `k`'s word that round `round` ended on `state`: its result of the
    /// next round, trained from it.
    fn commit(k: &NodeKey, run: murmur_protocol::RunId, round: u64, state: u8) -> ShardResult {
        ShardResult {
            run,
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

    #[test]
    fn statuses_become_a_choice_by_the_runs_rule() {
        let op = NodeKey::from_seed([100; 32]);
        let mut spec = crate::runtime::spec::run_spec(&Default::default()).expect("spec");
        spec.admission = AdmissionPolicy::Tickets { operators: vec![op.public()] };
        spec.quorum = 2;
        let run = spec.run_id();
        let now = 1_700_000_000;
        let (a, b) = (NodeKey::from_seed([1; 32]), NodeKey::from_seed([2; 32]));
        let ticket = |k: &NodeKey| Ticket::issue(&op, run, k.public(), now + 60);
        // An honest peer offers both tickets and both commits of round 3.
        let backing = [&a, &b]
            .iter()
            .map(|k| StatusBacking {
                result: commit(k, run, 3, 9).encode(),
                ticket: Some(ticket(k).encode()),
            })
            .collect();
        let honest = PeerStatus { ticket: Some(ticket(&a).encode()), backing, ..Default::default() };
        // A forger offers ten higher commits by keys without valid tickets
        // (one with a ticket of its own making, one with someone else's).
        let forger = NodeKey::from_seed([50; 32]);
        let backing = (10..20u8)
            .map(|i| {
                let k = NodeKey::from_seed([i; 32]);
                StatusBacking {
                    result: commit(&k, run, 40, 66).encode(),
                    ticket: Some(Ticket::issue(&forger, run, k.public(), now + 60).encode()),
                }
            })
            .chain(std::iter::once(StatusBacking {
                result: commit(&forger, run, 41, 66).encode(),
                ticket: Some(ticket(&a).encode()),
            }))
            .collect();
        let forged = PeerStatus { round: 42, state: Some([66; 32]), backing, ..Default::default() };
        let mut ev = Evidence::default();
        ev.add_status(forger.public(), &forged);
        assert_eq!(ev.backed(&spec, now), None, "nothing the forger offers counts");
        ev.add_status(a.public(), &honest);
        let chosen = ev.backed(&spec, now).expect("backed");
        assert_eq!((chosen.round, chosen.state), (4, StateId([9; 32])));
        assert_eq!(ev.valid_tickets(&spec, now).len(), 3, "a's own ticket, a's and b's as backing");
        assert_eq!(ev.backed(&spec, now + 60), None, "expired tickets back nothing");
    }

    #[test]
    fn committee_results_in_statuses_back_the_state_their_signers_trained_from() {
        let spec = crate::runtime::spec::run_spec(&Default::default()).expect("spec");
        let run = spec.run_id();
        let result = |k: &NodeKey, round: u64, base: u8| commit(k, run, round - 1, base);
        let keys: Vec<NodeKey> = (1..=3u8).map(|i| NodeKey::from_seed([i; 32])).collect();
        let mut ev = Evidence::default();
        for (i, k) in keys.iter().enumerate() {
            // Each offers its own results of rounds 5..=8, newest three kept;
            // the third node ended round 7 elsewhere.
            let mine: Vec<ShardResult> =
                (5..=8).map(|r| result(k, r, if i == 2 && r == 8 { 2 } else { r as u8 })).collect();
            let backing = own_results(mine.iter(), None);
            assert_eq!(backing.len(), BACKING_ROUNDS);
            ev.add_status(k.public(), &PeerStatus { backing, ..Default::default() });
        }
        let b = ev.backed(&spec, 0).expect("backed");
        assert_eq!((b.round, b.state, b.committers.len(), b.total), (8, StateId([8; 32]), 2, 3));
        assert_eq!(ev.backing_of(&spec, 0, StateId([6; 32])).map(|b| b.round), Some(6));
        assert_eq!(ev.backing_of(&spec, 0, StateId([2; 32])), None, "one signer of three backs nothing");
        // A result with a broken signature is no evidence.
        let mut forged = result(&keys[0], 9, 9);
        forged.total_tokens = 2;
        let backing = vec![StatusBacking { result: forged.encode(), ticket: None }];
        ev.add_status(keys[0].public(), &PeerStatus { backing, ..Default::default() });
        assert_eq!(ev.backed(&spec, 0).map(|b| b.round), Some(8));
    }
}
