//! Catching up in a protocol-v2 run: the commits nodes gossip after each
//! round are tallied; a node that is a whole round behind (it joined late,
//! restarted, or ended a round on a state the others did not) takes the
//! state a strict majority of the round's committers signed, fetching its
//! parts — the parameters (a State blob) and the ledger (a Ledger blob) —
//! from those committers and checking both against the v2 StateId.

use std::collections::{BTreeMap, BTreeSet};

use libp2p::PeerId;
use murmur_protocol::committee::ledger::state_id_of_parts;
use murmur_protocol::committee::Ledger;
use murmur_protocol::state::StateHeader;
use murmur_protocol::{PublicKey, RoundCommit, RunSpec, StateId, TrainingState};

use crate::net::{fetch_blob, peer_id_of, NetHandle, XferRequest, XferResponse};
use crate::store::{BlobKind, Position, Store};

/// Rounds of commits remembered.
const KEPT_ROUNDS: usize = 4;
/// Committers counted per round.
const MAX_COMMITTERS: usize = 65_536;
/// Largest ledger fetched (65,536 roster and 65,536 excluded keys).
pub const MAX_LEDGER_BYTES: u64 = 8 + 65_536 * 32 + 65_536 * 40;

/// Signed commits by round: which state each committer ended the round on.
#[derive(Debug, Default)]
pub struct CommitTally {
    rounds: BTreeMap<u64, BTreeMap<PublicKey, StateId>>,
}

impl CommitTally {
    /// Count `c` (its signature was checked by gossip validation); a
    /// committer's first commit for a round is the one kept.
    pub fn note(&mut self, c: &RoundCommit) {
        if self.rounds.len() >= KEPT_ROUNDS && self.rounds.keys().next().is_some_and(|r| c.round < *r) {
            return;
        }
        let round = self.rounds.entry(c.round).or_default();
        if round.len() < MAX_COMMITTERS {
            round.entry(c.signer).or_insert(c.new_state);
        }
        while self.rounds.len() > KEPT_ROUNDS {
            let Some(first) = self.rounds.keys().next().copied() else { break };
            self.rounds.remove(&first);
        }
    }

    /// The newest round's state backed by a strict majority of its
    /// committers, with them.
    pub fn decided(&self) -> Option<(u64, StateId, Vec<PublicKey>)> {
        let (round, by) = self.rounds.iter().next_back()?;
        let mut counts: BTreeMap<StateId, Vec<PublicKey>> = BTreeMap::new();
        for (k, s) in by {
            counts.entry(*s).or_default().push(*k);
        }
        let (state, backers) = counts.into_iter().max_by_key(|(s, b)| (b.len(), std::cmp::Reverse(*s)))?;
        (2 * backers.len() > by.len()).then_some((*round, state, backers))
    }

    /// The committers of `round` (for tests and reports).
    pub fn committers(&self, round: u64) -> BTreeSet<PublicKey> {
        self.rounds.get(&round).map(|m| m.keys().copied().collect()).unwrap_or_default()
    }
}

/// Fetch v2 state `target` from `holders`: its parts, then the ledger and
/// the parameters, each checked against `target`; both are stored and the
/// position recorded.
pub async fn fetch_state(
    net: &NetHandle,
    store: &Store,
    spec: &RunSpec,
    target: StateId,
    holders: &[PublicKey],
) -> Result<(TrainingState, Ledger), String> {
    let peers: Vec<PeerId> = holders.iter().filter_map(peer_id_of).collect();
    let n = spec.model.param_count;
    let state_len = StateHeader {
        run: spec.run_id(),
        round: 0,
        element_count: n,
        has_momentum: spec.outer.has_momentum(),
    }
    .payload_len();
    for peer in &peers {
        let ask = net.request(*peer, XferRequest::StateParts { state: target.0 });
        let Ok(Ok(XferResponse::StateParts { params, ledger, ledger_len })) =
            tokio::time::timeout(std::time::Duration::from_secs(10), ask).await
        else {
            continue;
        };
        if state_id_of_parts(StateId(params), ledger) != target || ledger_len > MAX_LEDGER_BYTES {
            continue;
        }
        let Ok(l) = fetch_blob(net, BlobKind::Ledger, ledger, ledger_len, MAX_LEDGER_BYTES, &peers).await
        else {
            continue;
        };
        let Ok(ledger_value) = Ledger::decode(&l.bytes) else { continue };
        let Ok(s) = fetch_blob(net, BlobKind::State, params, state_len, state_len, &peers).await else {
            continue;
        };
        let Ok(state) = TrainingState::decode(&s.bytes, n as usize) else { continue };
        if state.run != spec.run_id() || state.id() != StateId(params) {
            continue;
        }
        store.blobs.put(BlobKind::Ledger, &l.bytes).map_err(|e| e.to_string())?;
        store.blobs.put(BlobKind::State, &s.bytes).map_err(|e| e.to_string())?;
        store.meta.set_ledger_of(&spec.run_id(), &StateId(params), &ledger).map_err(|e| e.to_string())?;
        store
            .meta
            .set_position(&spec.run_id(), Position { round: state.round, state: StateId(params) })
            .map_err(|e| e.to_string())?;
        return Ok((state, ledger_value));
    }
    Err(format!("no committer of {} served its parts", target.to_hex()))
}

/// The ledger stored for the node's current state `params`, if any.
pub fn stored_ledger(store: &Store, spec: &RunSpec, params: StateId) -> Option<Ledger> {
    let hash = store.meta.ledger_of(&spec.run_id(), &params).ok()??;
    let bytes = store.blobs.get(BlobKind::Ledger, &hash).ok()?;
    Ledger::decode(&bytes).ok().filter(|l| l.hash() == hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::{NodeKey, RunId, Signature};

    fn commit(signer: u8, round: u64, state: u8) -> RoundCommit {
        RoundCommit {
            run: RunId([1; 32]),
            round,
            base: StateId([0; 32]),
            included: Vec::new(),
            new_state: StateId([state; 32]),
            signer: NodeKey::from_seed([signer; 32]).public(),
            signature: Signature::default(),
        }
    }

    #[test]
    fn the_newest_round_decides_by_strict_majority_and_old_rounds_are_dropped() {
        let mut t = CommitTally::default();
        assert_eq!(t.decided(), None);
        t.note(&commit(1, 3, 7));
        t.note(&commit(2, 3, 7));
        t.note(&commit(3, 3, 8));
        let (round, state, backers) = t.decided().expect("decided");
        assert_eq!((round, state, backers.len()), (3, StateId([7; 32]), 2));
        // A committer's second commit for a round does not count twice.
        t.note(&commit(3, 3, 7));
        assert_eq!(t.decided().map(|d| d.2.len()), Some(2));
        // A tie is no majority.
        t.note(&commit(1, 4, 1));
        t.note(&commit(2, 4, 2));
        assert_eq!(t.decided(), None);
        for r in 5..12 {
            t.note(&commit(1, r, 1));
        }
        assert!(t.committers(3).is_empty(), "old rounds are dropped");
        assert_eq!(t.decided().map(|d| d.0), Some(11));
        // Commits for rounds older than those kept are ignored.
        t.note(&commit(9, 2, 2));
        assert!(t.committers(2).is_empty());
    }
}
