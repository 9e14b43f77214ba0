//! Reconciling with a peer that closed the last round differently
//! (docs/protocol.md §7.4, "Divergence").
//!
//! A manifest for this node's round on another base (`WrongBase`) means its
//! signer closed the last round on another state. Both apply the same
//! re-sync rule, so they part only when they count different votes: a
//! commit one of them never counted (it arrived before its signer's ticket,
//! or gossip lost it) and gossip never delivers again. The node asks that
//! signer for its status, at most once per signer and round, and feeds the
//! machine the commits (with their committers' tickets) it offers as
//! backing; with the same votes on both sides the rule puts them on one
//! state.

use std::collections::HashSet;

use libp2p::PeerId;
use murmur_protocol::{Event, PublicKey, RoundCommit, Ticket};
use serde_json::json;

use super::Node;
use crate::net::{peer_id_of, public_key_of, StatusBacking};

/// Most peers asked per round (a round's worth of diverging signers is
/// bounded by the membership; this bounds the requests one round can cause).
pub const MAX_RECONCILE_ASKS: usize = 64;

/// Which signers were asked in which round.
#[derive(Debug, Default)]
pub struct Asked {
    round: u64,
    peers: HashSet<PublicKey>,
}

impl Asked {
    /// Whether `peer` may be asked now: not yet in `round`, and under the cap.
    pub fn first(&mut self, round: u64, peer: PublicKey) -> bool {
        if round != self.round {
            self.round = round;
            self.peers.clear();
        }
        self.peers.len() < MAX_RECONCILE_ASKS && self.peers.insert(peer)
    }
}

impl Node {
    /// `signer` announced a delta for our round on another base: ask it
    /// for the commits that put it there.
    pub(super) fn reconcile_with(&mut self, signer: PublicKey) {
        if signer == self.key.public() {
            return;
        }
        let Some(peer) = peer_id_of(&signer) else { return };
        let round = self.machine.round();
        if !self.reconcile_asked.first(round, signer) {
            return;
        }
        self.out.event("reconcile", json!({ "peer": peer.to_string(), "round": round }));
        self.ask_status(peer);
    }

    /// The commits a peer's status offers as backing: tickets first (so that
    /// their holders' commits count), then every commit of a round that can
    /// still move this node and that it has not counted yet.
    pub(super) fn take_backing(&mut self, peer: PeerId, backing: &[StatusBacking]) {
        let Some(from) = public_key_of(&peer) else { return };
        for b in backing {
            let Ok(commit) = RoundCommit::decode(&b.commit) else { continue };
            if let Some(ticket) = b.ticket.as_deref().and_then(|t| Ticket::decode(t).ok()) {
                if ticket.holder == commit.signer && !self.tickets.holds(&ticket) {
                    self.present_ticket(from, ticket);
                }
            }
            // Older rounds decide nothing here any more (the machine would
            // charge their signers as replays).
            if commit.round.saturating_add(1) < self.machine.round() || self.commits.holds(&commit) {
                continue;
            }
            self.feed(Event::CommitReceived { from, commit: commit.clone() });
            self.note_commit(commit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signer_is_asked_once_a_round_and_a_round_asks_at_most_the_cap() {
        let mut asked = Asked::default();
        let key = |i: u32| {
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&i.to_le_bytes());
            PublicKey(k)
        };
        assert!(asked.first(3, key(1)));
        assert!(!asked.first(3, key(1)));
        assert!(asked.first(4, key(1)), "a new round may ask again");
        let more = (2..1_000).filter(|&i| asked.first(4, key(i))).count();
        assert_eq!(more, MAX_RECONCILE_ASKS - 1);
        assert!(asked.first(5, key(999)));
    }
}
