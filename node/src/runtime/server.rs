//! What a node (or bootstrap server) answers on the transfer protocol: its
//! status (with its ticket and the signed commits backing its state), and
//! chunk tables and chunks of the blobs in its store (a table kept with its
//! blob, a chunk read at its offset and checked against the verified table
//! before it is sent; never a whole blob in memory), and the round's
//! runs what `committee::served` holds. The swarm calls it within its
//! serving slots, and says which peer asks (the answers are the same for
//! every peer today).

use std::sync::{Arc, Mutex, OnceLock};

use libp2p::PeerId;

use crate::net::{ContentServer, PeerStatus, StatusBacking, XferRequest, XferResponse};
use crate::store::Store;

/// Where the serving node stands (updated by the runtime).
#[derive(Debug, Clone, Default)]
pub struct ServedStatus {
    pub round: u64,
    pub state: Option<[u8; 32]>,
}

/// Serves blobs from a store.
pub struct StoreServer {
    store: Arc<Store>,
    spec: Vec<u8>,
    trainer: bool,
    status: Mutex<ServedStatus>,
    /// This node's own ticket (canonical bytes), if the run admits by ticket.
    ticket: Option<Vec<u8>>,
    /// Signed commits backing where the node stands (bounded by the caller).
    backing: Mutex<Vec<StatusBacking>>,
    /// The round's offers, leaves and included lists.
    committee: OnceLock<Arc<super::committee::served::CommitteeServed>>,
}

impl StoreServer {
    pub fn new(store: Arc<Store>, spec: Vec<u8>, trainer: bool) -> Self {
        Self {
            store,
            spec,
            trainer,
            status: Mutex::new(ServedStatus::default()),
            ticket: None,
            backing: Mutex::new(Vec::new()),
            committee: OnceLock::new(),
        }
    }

    /// Answer the round's requests from `served` (set once).
    pub fn serve_committee(&self, served: Arc<super::committee::served::CommitteeServed>) {
        let _ = self.committee.set(served);
    }

    /// Present `ticket` (canonical bytes) in every status answer.
    pub fn with_ticket(mut self, ticket: Option<Vec<u8>>) -> Self {
        self.ticket = ticket;
        self
    }

    /// Offer these signed commits (and tickets) as the backing of the status.
    pub fn set_backing(&self, backing: Vec<StatusBacking>) {
        if let Ok(mut g) = self.backing.lock() {
            *g = backing;
        }
    }

    pub fn set_status(&self, s: ServedStatus) {
        if let Ok(mut g) = self.status.lock() {
            *g = s;
        }
    }
}

impl ContentServer for StoreServer {
    fn status(&self, _from: PeerId) -> PeerStatus {
        let s = self.status.lock().map(|g| g.clone()).unwrap_or_default();
        let backing = self.backing.lock().map(|g| g.clone()).unwrap_or_default();
        PeerStatus {
            spec: self.spec.clone(),
            round: s.round,
            state: s.state,
            trainer: self.trainer,
            ticket: self.ticket.clone(),
            backing,
        }
    }

    fn serve(&self, from: PeerId, request: &XferRequest) -> XferResponse {
        let blobs = &self.store.blobs;
        match *request {
            XferRequest::Status => XferResponse::Status(self.status(from)),
            // The swarm answers presentations itself (`net::gate`).
            XferRequest::Present(_) => XferResponse::NotFound,
            XferRequest::Table { kind, id, len } => {
                if blobs.len_of(kind, &id) != Some(len) {
                    return XferResponse::NotFound;
                }
                match blobs.table(kind, &id) {
                    Ok(t) => XferResponse::Table(t.as_ref().clone()),
                    Err(_) => XferResponse::NotFound,
                }
            }
            XferRequest::Chunk { kind, id, len, index } => {
                if blobs.len_of(kind, &id) != Some(len) {
                    return XferResponse::NotFound;
                }
                match blobs.chunk(kind, &id, index) {
                    Ok(b) => XferResponse::Chunk(b),
                    Err(_) => XferResponse::NotFound,
                }
            }
            XferRequest::Projections { round, ref asks } => self
                .committee
                .get()
                .and_then(|c| c.projections(from, round, asks, blobs))
                .map_or(XferResponse::NotFound, XferResponse::Projections),
            XferRequest::Offer(_)
            | XferRequest::Included { .. }
            | XferRequest::Signers { .. }
            | XferRequest::Leaf { .. }
            | XferRequest::Result { .. }
            | XferRequest::StateParts { .. } => {
                self.committee.get().and_then(|c| c.answer(from, request)).unwrap_or(XferResponse::NotFound)
            }
        }
    }
}
