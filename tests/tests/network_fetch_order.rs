//! Who a fetch asks, and who is served, in a ticket run: a fetch never
//! asks a peer the run does not admit, even one listed first that holds
//! the blob; the admitted holder serves the fetcher once it has presented
//! its ticket (the swarm does that when told `NotAdmitted`); and a fetcher
//! without a ticket gets nothing. In an open run the same stranger is
//! asked and serves its share, so the first check is not vacuous. Real
//! swarms on 127.0.0.1.
//!
//! Fails before ticket runs were private: fetches asked every listed peer,
//! and servers answered anyone (checked with the gate switched off).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;
use murmur_node::net::{self, fetch_blob, ContentServer, FetchError, NetConfig, NetHandle, PeerStatus, Role};
use murmur_node::net::{NetEvent, XferRequest, XferResponse};
use murmur_node::runtime::server::StoreServer;
use murmur_node::store::{BlobKind, Store};
use murmur_protocol::{AdmissionPolicy, NodeKey, Ticket};
use murmur_tests::swarms::{connect, TEST_RUN};
use tokio::sync::mpsc;

/// A store that counts the requests it is asked.
struct Counted {
    store: StoreServer,
    asked: Arc<AtomicU64>,
}

impl ContentServer for Counted {
    fn status(&self, from: PeerId) -> PeerStatus {
        self.store.status(from)
    }
    fn serve(&self, from: PeerId, request: &XferRequest) -> XferResponse {
        self.asked.fetch_add(1, Ordering::Relaxed);
        self.store.serve(from, request)
    }
}

fn swarm(
    seed: u8,
    admission: &AdmissionPolicy,
    ticket: Option<Ticket>,
    server: Arc<dyn ContentServer>,
) -> (NetHandle, mpsc::Receiver<NetEvent>) {
    let mut cfg = NetConfig::new(NodeKey::from_seed([seed; 32]), TEST_RUN, Role::Trainer);
    cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
    cfg.admission = admission.clone();
    cfg.ticket = ticket;
    net::start(cfg, server).expect("net")
}

fn blob(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(17).wrapping_add(3)).collect()
}

#[test]
fn a_ticket_run_fetches_only_from_admitted_peers_and_serves_only_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    // Three chunks, so an open fetch spreads over both holders.
    let state = blob(2 * (1 << 20) + 777);
    let id = store.blobs.put(BlobKind::State, &state).expect("put");
    let len = state.len() as u64;
    let operator = NodeKey::from_seed([21; 32]);
    let tickets = AdmissionPolicy::Tickets { operators: vec![operator.public()] };
    let fetcher_key = NodeKey::from_seed([23; 32]);
    let ticket = Ticket::issue(&operator, TEST_RUN, fetcher_key.public(), u64::MAX / 2);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        for (policy, private) in [(tickets.clone(), true), (AdmissionPolicy::Open, false)] {
            let holder_asked = Arc::new(AtomicU64::new(0));
            let stranger_asked = Arc::new(AtomicU64::new(0));
            let counted = |asked: &Arc<AtomicU64>| {
                let store = StoreServer::new(store.clone(), Vec::new(), true);
                Arc::new(Counted { store, asked: asked.clone() })
            };
            // The operator holds the state; so does a stranger, listed first.
            let (holder, _h) = swarm(21, &policy, None, counted(&holder_asked));
            let (stranger, _s) = swarm(22, &policy, None, counted(&stranger_asked));
            let (me, _m) = swarm(23, &policy, Some(ticket.clone()), counted(&Arc::new(AtomicU64::new(0))));
            connect(&me, &[&holder, &stranger]).await;
            let got = tokio::time::timeout(
                Duration::from_secs(60),
                fetch_blob(&me, BlobKind::State, id, len, len, &[stranger.local, holder.local]),
            )
            .await
            .expect("the fetch ends within 60 s")
            .unwrap_or_else(|e| panic!("fetch (private: {private}) failed: {e}"));
            assert_eq!(got.bytes, state, "the verified state");
            let asked = stranger_asked.load(Ordering::Relaxed);
            if private {
                assert_eq!(asked, 0, "a ticket run asked a peer it does not admit");
                assert_eq!(got.per_peer, vec![(holder.local, 3)], "every chunk came from the operator");
            } else {
                assert!(asked > 0, "an open run asks the stranger too");
            }
            assert!(holder_asked.load(Ordering::Relaxed) > 0);
            if private {
                // A fetcher with no ticket gets nothing from the operator.
                let (outsider, _o) = swarm(24, &policy, None, counted(&Arc::new(AtomicU64::new(0))));
                connect(&outsider, &[&holder]).await;
                let before = holder_asked.load(Ordering::Relaxed);
                let refused = fetch_blob(&outsider, BlobKind::State, id, len, len, &[holder.local]).await;
                assert!(
                    matches!(refused, Err(FetchError::NoTable | FetchError::NoPeers { .. })),
                    "an outsider fetched from a ticket run: {:?}",
                    refused.map(|f| f.per_peer)
                );
                let answer = outsider.request(holder.local, XferRequest::Status).await.expect("answer");
                assert_eq!(answer, XferResponse::NotAdmitted, "an outsider is refused the Status");
                assert_eq!(holder_asked.load(Ordering::Relaxed), before, "nothing was looked up for it");
            }
        }
    });
}
