//! Admission at the network's edge: which peers a node serves, forwards
//! gossip for, asks for content and keeps connection slots for.
//!
//! A run that admits by ticket is private: its states, deltas, dataset
//! shards, Status and RunSpec go only to admitted peers (the run's
//! operators, the holders of an operator's ticket that has not expired,
//! and the bootstrap servers this node was configured with), and gossip
//! whose signer is not admitted is neither forwarded nor handed to the
//! node. A peer learns that another is admitted from the tickets it sees:
//! on the ticket topic, in Status answers, and presented with
//! `XferRequest::Present` by a peer that was told `NotAdmitted`.
//!
//! In every run, admitted peers are asked for content before strangers
//! (`order`), and the peers the run names — operators, allowlisted keys,
//! ticket holders, bootstrap servers — are `preferred` for connection slots.
//! Bounded: at most `MAX_ADMITTED` ticket holders, whose tickets an operator
//! had to sign.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

use libp2p::PeerId;
use murmur_protocol::{Admission, AdmissionPolicy, PublicKey, RunId, Ticket};

use super::peers::{peer_id_of, public_key_of};
use crate::runtime::tickets::unix_now;

/// Who the node admits.
#[derive(Debug)]
pub struct Gate {
    policy: AdmissionPolicy,
    /// The bootstrap servers the node was started with (trusted by its operator).
    bootstrap: HashSet<PeerId>,
    admission: Mutex<Admission>,
    /// The origin of the admission clock (milliseconds since).
    start: Instant,
}

impl Gate {
    pub fn new(run: RunId, policy: AdmissionPolicy, bootstrap: impl IntoIterator<Item = PeerId>) -> Self {
        Gate {
            admission: Mutex::new(Admission::new(run, policy.clone())),
            policy,
            bootstrap: bootstrap.into_iter().collect(),
            start: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Whether the run is private: it admits by ticket.
    pub fn private(&self) -> bool {
        self.policy.uses_tickets()
    }

    /// Whether `peer` is admitted now (everyone in an open run).
    pub fn admits(&self, peer: &PeerId) -> bool {
        if self.bootstrap.contains(peer) {
            return true;
        }
        let Some(key) = public_key_of(peer) else { return false };
        self.admits_key(&key)
    }

    /// Whether the key `key` is admitted now.
    pub fn admits_key(&self, key: &PublicKey) -> bool {
        let now = self.now_ms();
        self.admission.lock().map(|a| a.admits(key, now)).unwrap_or(false)
    }

    /// Whether `peer` is one the run names (a bootstrap server, an
    /// operator, an allowlisted key, a ticket holder): the peers connection
    /// slots are kept for. In an open run, bootstrap servers and operators.
    pub fn preferred(&self, peer: &PeerId) -> bool {
        match self.policy {
            AdmissionPolicy::Allowlist(_) | AdmissionPolicy::Tickets { .. } => self.admits(peer),
            // Open runs admit everyone; their operators (if any) are named.
            AdmissionPolicy::Open | AdmissionPolicy::OpenWithOperators { .. } => {
                self.bootstrap.contains(peer)
                    || public_key_of(peer).is_some_and(|k| self.policy.operators().contains(&k))
            }
        }
    }

    /// Whether this node answers `peer`'s requests and forwards its gossip.
    pub fn serves(&self, peer: &PeerId) -> bool {
        !self.private() || self.admits(peer)
    }

    /// Whether gossip signed by `origin` may be forwarded and handed on
    /// (gossip with no single signer, a fraud proof, is checked by the node).
    pub fn forwards(&self, origin: Option<&PublicKey>) -> bool {
        !self.private() || origin.is_none_or(|k| self.admits_key(k))
    }

    /// Admit the holder of `ticket` if it is a valid ticket of this run
    /// (an operator's signature, not expired). Returns the holder.
    pub fn learn(&self, ticket: &Ticket) -> Option<PublicKey> {
        if !self.private() {
            return None;
        }
        let now = self.now_ms();
        let mut a = self.admission.lock().ok()?;
        a.present(ticket, unix_now(), now).ok()
    }

    /// A ticket `from` presents for itself (`XferRequest::Present`): admitted
    /// only when it is valid and `from` is its holder.
    pub fn present(&self, from: &PeerId, ticket: &Ticket) -> bool {
        peer_id_of(&ticket.holder) == Some(*from) && self.learn(ticket).is_some()
    }

    /// `peers` with the admitted ones first, in their given order, then the
    /// others (left out entirely in a private run).
    pub fn order(&self, peers: &[PeerId]) -> Vec<PeerId> {
        let (mut first, rest): (Vec<PeerId>, Vec<PeerId>) = peers.iter().partition(|p| self.admits(p));
        if !self.private() {
            first.extend(rest);
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::NodeKey;

    fn peer(seed: u8) -> (NodeKey, PeerId) {
        let k = NodeKey::from_seed([seed; 32]);
        let p = peer_id_of(&k.public()).expect("peer id");
        (k, p)
    }

    #[test]
    fn a_ticket_run_admits_operators_holders_and_its_bootstrap_servers_only() {
        let run = RunId([3; 32]);
        let (op, op_peer) = peer(1);
        let (holder, holder_peer) = peer(2);
        let (_, stranger) = peer(3);
        let (_, boot) = peer(4);
        let gate = Gate::new(run, AdmissionPolicy::Tickets { operators: vec![op.public()] }, [boot]);
        assert!(gate.private());
        assert!(gate.admits(&op_peer) && gate.admits(&boot));
        assert!(!gate.admits(&holder_peer) && !gate.serves(&stranger));
        let t = Ticket::issue(&op, run, holder.public(), unix_now() + 60);
        assert!(!gate.present(&stranger, &t), "a ticket admits its holder, not whoever shows it");
        assert!(!gate.admits(&holder_peer));
        assert!(gate.present(&holder_peer, &t));
        assert!(gate.admits(&holder_peer) && gate.serves(&holder_peer) && gate.preferred(&holder_peer));
        let forged = Ticket::issue(&holder, run, NodeKey::from_seed([3; 32]).public(), unix_now() + 60);
        assert_eq!(gate.learn(&forged), None, "only an operator's ticket admits");
        let expired = Ticket::issue(&op, run, NodeKey::from_seed([3; 32]).public(), unix_now() - 1);
        assert_eq!(gate.learn(&expired), None);
        assert!(!gate.forwards(Some(&NodeKey::from_seed([3; 32]).public())));
        assert!(gate.forwards(Some(&holder.public())) && gate.forwards(None));
        assert_eq!(gate.order(&[stranger, holder_peer, boot]), vec![holder_peer, boot]);
    }

    #[test]
    fn an_open_run_serves_everyone_and_asks_the_named_peers_first() {
        let (op, op_peer) = peer(1);
        let (_, a) = peer(2);
        let (_, boot) = peer(4);
        let open = Gate::new(RunId([3; 32]), AdmissionPolicy::Open, [boot]);
        assert!(!open.private() && open.serves(&a) && open.forwards(Some(&PublicKey([7; 32]))));
        assert!(open.preferred(&boot) && !open.preferred(&a));
        assert_eq!(open.order(&[a, boot]), vec![a, boot]);
        let ops = Gate::new(
            RunId([3; 32]),
            AdmissionPolicy::OpenWithOperators { operators: vec![op.public()] },
            [],
        );
        assert!(ops.preferred(&op_peer) && !ops.preferred(&a) && ops.serves(&a));
        let (listed, listed_peer) = peer(5);
        let allow = Gate::new(RunId([3; 32]), AdmissionPolicy::Allowlist(vec![listed.public()]), []);
        assert!(!allow.private() && allow.serves(&a));
        assert!(allow.preferred(&listed_peer) && !allow.preferred(&a));
        assert_eq!(allow.order(&[a, listed_peer]), vec![listed_peer, a]);
    }
}
