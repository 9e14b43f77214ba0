//! Asking within the share: the requests this node has in flight to each
//! peer, at most the share every node serves one peer (`SERVE_PER_PEER`).
//! A request past it waits here for one of that peer's to end, rather than
//! going out to be refused `Busy` — and charged as an overrun
//! (`NetRejection::Overrun`): an honest node never asks a peer for more
//! than it serves.
//!
//! A slot is held until the swarm hands back the answer or the failure,
//! not only while the asker waits: an asker that stops waiting (a fetch's
//! own timeout) does not free a slot the serving peer still holds. The
//! serving peer's slot lives from the request's arrival until its answer
//! is sent, inside this one, so a node that asks within its share is never
//! refused for its share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use libp2p::PeerId;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Transfer requests (Status included) a node serves one peer at once,
/// and so asks one peer for at once.
pub const SERVE_PER_PEER: usize = 16;
/// Peers whose idle slots are kept before they are swept.
const KEPT_PEERS: usize = 1024;

/// The slots of the requests this node has in flight, per peer.
#[derive(Debug)]
pub(crate) struct AskSlots {
    per_peer: usize,
    peers: Mutex<HashMap<PeerId, Arc<Semaphore>>>,
}

/// One request's slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct AskSlot(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl AskSlots {
    pub(crate) fn new(per_peer: usize) -> Self {
        Self { per_peer: per_peer.max(1), peers: Mutex::new(HashMap::new()) }
    }

    /// A slot for one request to `peer`, once one is free.
    pub(crate) async fn take(&self, peer: PeerId) -> AskSlot {
        let slots = {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            if peers.len() >= KEPT_PEERS && !peers.contains_key(&peer) {
                let full = self.per_peer;
                peers.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < full);
            }
            peers.entry(peer).or_insert_with(|| Arc::new(Semaphore::new(self.per_peer))).clone()
        };
        // The semaphores are never closed, so a permit always comes.
        AskSlot(slots.acquire_owned().await.ok())
    }

    #[cfg(test)]
    fn in_flight(&self, peer: &PeerId) -> usize {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.get(peer).map_or(0, |s| self.per_peer - s.available_permits())
    }

    #[cfg(test)]
    fn kept(&self) -> usize {
        self.peers.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_peer_is_asked_for_its_share_and_the_next_request_waits() {
        let slots = Arc::new(AskSlots::new(3));
        let (a, b) = (PeerId::random(), PeerId::random());
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(slots.take(a).await);
        }
        assert_eq!(slots.in_flight(&a), 3);
        let waiting = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take(a).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a fourth request to a waits for a slot");
        let other = tokio::time::timeout(Duration::from_secs(1), slots.take(b)).await;
        assert!(other.is_ok(), "another peer is asked at once");
        held.pop();
        let fourth = tokio::time::timeout(Duration::from_secs(1), waiting).await;
        assert!(matches!(fourth, Ok(Ok(_))), "a freed slot goes to the waiting request");
        assert_eq!(slots.in_flight(&a), 3);
    }

    #[tokio::test]
    async fn idle_peers_are_swept_past_the_kept_count() {
        let slots = AskSlots::new(2);
        let busy = PeerId::random();
        let _held = slots.take(busy).await;
        for _ in 1..KEPT_PEERS {
            drop(slots.take(PeerId::random()).await);
        }
        assert_eq!(slots.kept(), KEPT_PEERS);
        drop(slots.take(PeerId::random()).await);
        assert_eq!(slots.kept(), 2, "only the peer with a request in flight is kept, and the new one");
        assert_eq!(slots.in_flight(&busy), 1);
    }
}
