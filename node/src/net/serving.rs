//! Who is being served: the transfer requests a node is answering, Status
//! included, each holding a slot from its arrival until its answer has gone
//! out on the connection (or failed). At most `total` slots are held at
//! once and `per_peer` by any one peer; a request beyond either is answered
//! `Busy` at once. Holding the slot until the answer is flushed, not only
//! while it is computed, bounds what answers waiting on a slow or silent
//! reader keep in memory too. A request past its peer's own share is an
//! overrun (`Refused::PastShare`): honest askers wait for their share
//! (`asking`), so the swarm charges it; a full node is nobody's fault.
//!
//! Sans-IO: the swarm task calls `admit` when a request arrives, `answered`
//! when the blocking pool hands back the answer, and `release` / `failed`
//! on libp2p's `ResponseSent` / `InboundFailure` events.

use std::collections::HashMap;
use std::hash::Hash;

use libp2p::PeerId;

/// Where a held request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Its answer is being computed.
    Working,
    /// It failed (timed out, connection closed) while being computed: the
    /// slot is freed, and the answer dropped, when the computation ends.
    Abandoned,
    /// Its answer is on its way out.
    Sending,
}

/// Why a request got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Every slot of the node is held (by any peers).
    Full,
    /// Its peer already holds its whole share.
    PastShare,
}

/// The slots of the requests being served, by request id `R`.
#[derive(Debug)]
pub(crate) struct ServeSlots<R> {
    total: usize,
    per_peer: usize,
    held: HashMap<R, (PeerId, Stage)>,
    by_peer: HashMap<PeerId, usize>,
}

impl<R: Eq + Hash + Copy> ServeSlots<R> {
    pub(crate) fn new(total: usize, per_peer: usize) -> Self {
        Self { total, per_peer, held: HashMap::new(), by_peer: HashMap::new() }
    }

    /// Take a slot for request `id` from `peer`; refused (answer `Busy`)
    /// when that peer or the node has none left.
    pub(crate) fn admit(&mut self, peer: PeerId, id: R) -> Result<(), Refused> {
        let mine = self.by_peer.get(&peer).copied().unwrap_or(0);
        if mine >= self.per_peer {
            return Err(Refused::PastShare);
        }
        if self.held.len() >= self.total || self.held.contains_key(&id) {
            return Err(Refused::Full);
        }
        self.held.insert(id, (peer, Stage::Working));
        self.by_peer.insert(peer, mine + 1);
        Ok(())
    }

    /// The answer to `id` is ready: true to send it (the slot is held until
    /// it is sent); false when the request was abandoned meanwhile (the
    /// slot is freed; drop the answer).
    pub(crate) fn answered(&mut self, id: R) -> bool {
        match self.held.get_mut(&id) {
            Some((_, stage @ Stage::Working)) => {
                *stage = Stage::Sending;
                true
            }
            _ => {
                self.release(id);
                false
            }
        }
    }

    /// The request failed: its slot is freed now if its answer was on its
    /// way, or when its computation ends.
    pub(crate) fn failed(&mut self, id: R) {
        match self.held.get_mut(&id) {
            Some((_, stage @ Stage::Working)) => *stage = Stage::Abandoned,
            Some(_) => self.release(id),
            None => {}
        }
    }

    /// Free `id`'s slot (its answer was sent, or could not be); unknown ids
    /// (requests answered `Busy`, slots freed already) change nothing.
    pub(crate) fn release(&mut self, id: R) {
        let Some((peer, _)) = self.held.remove(&id) else { return };
        match self.by_peer.get_mut(&peer) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                self.by_peer.remove(&peer);
            }
        }
    }

    /// Slots held, in all and by `peer`.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    pub(crate) fn held_by(&self, peer: &PeerId) -> usize {
        self.by_peer.get(peer).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_its_share_and_the_node_its_total() {
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        let mut s = ServeSlots::new(5, 3);
        assert!((0..3).all(|i| s.admit(a, i).is_ok()));
        assert_eq!(s.admit(a, 3), Err(Refused::PastShare), "a peer past its share");
        assert!(s.admit(b, 10).is_ok() && s.admit(b, 11).is_ok());
        assert_eq!(s.admit(c, 20), Err(Refused::Full), "the node past its total: nobody's overrun");
        assert_eq!(s.admit(a, 4), Err(Refused::PastShare), "a full node still tells an overrun");
        assert_eq!((s.held(), s.held_by(&a), s.held_by(&b)), (5, 3, 2));
        // A slot is held until the answer is sent, not only computed.
        assert!(s.answered(0));
        assert_eq!(s.admit(c, 20), Err(Refused::Full));
        s.release(0);
        assert!(s.admit(c, 20).is_ok());
        assert_eq!(s.held_by(&a), 2);
        // Ids it does not hold change nothing.
        s.release(99);
        s.failed(99);
        assert_eq!(s.held(), 5);
    }

    #[test]
    fn a_failed_request_frees_its_slot_once_its_work_is_done() {
        let a = PeerId::random();
        let mut s = ServeSlots::new(4, 1);
        assert!(s.admit(a, 1).is_ok());
        s.failed(1);
        assert_eq!(s.held_by(&a), 1, "still computing: the slot stays taken");
        assert!(!s.answered(1), "the answer of an abandoned request is dropped");
        assert_eq!(s.held(), 0);
        assert!(s.admit(a, 2).is_ok());
        assert!(s.answered(2));
        s.failed(2);
        assert_eq!(s.held(), 0, "failed on its way out: freed at once");
        assert!(s.by_peer.is_empty());
    }
}
