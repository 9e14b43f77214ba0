//! What a node (or bootstrap server) answers on the transfer protocol: its
//! status, and chunk tables and chunks of the blobs in its store (each chunk
//! checked against the verified table before it is sent).

use std::sync::{Arc, Mutex};

use crate::net::{ContentServer, PeerStatus, XferRequest, XferResponse};
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
}

impl StoreServer {
    pub fn new(store: Arc<Store>, spec: Vec<u8>, trainer: bool) -> Self {
        Self { store, spec, trainer, status: Mutex::new(ServedStatus::default()) }
    }

    pub fn set_status(&self, s: ServedStatus) {
        if let Ok(mut g) = self.status.lock() {
            *g = s;
        }
    }
}

impl ContentServer for StoreServer {
    fn status(&self) -> PeerStatus {
        let s = self.status.lock().map(|g| g.clone()).unwrap_or_default();
        PeerStatus { spec: self.spec.clone(), round: s.round, state: s.state, trainer: self.trainer }
    }

    fn serve(&self, request: &XferRequest) -> XferResponse {
        let blobs = &self.store.blobs;
        match *request {
            XferRequest::Status => XferResponse::Status(self.status()),
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
        }
    }
}
