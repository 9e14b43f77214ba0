//! Fetches a hostile peer cannot stall: a peer that answers every request
//! `Busy` is left and charged, and the blob comes from the honest peers,
//! whether the hostile peer is first in the list (a one-chunk payload) or
//! anywhere in it while the honest peer answers slowly (a multi-chunk
//! state); and an honest peer behind a congested link, whose chunks come
//! one after another, serves the whole blob rather than being left for
//! timing out chunks it was asked for all at once. Real swarms on
//! 127.0.0.1.
//!
//! The busy-peer tests fail before fetches counted attempts per peer: a `Busy`
//! answer slept 50 ms and counted against the chunk, the busy peer stayed in
//! the pool and won the next tie, and after 7 attempts the whole fetch
//! returned `NoPeers` with nobody charged.

use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;
use murmur_node::net::{
    fetch_blob, ContentServer, NetEvent, NetRejection, PeerStatus, XferRequest, XferResponse,
};
use murmur_node::runtime::server::StoreServer;
use murmur_node::store::{BlobKind, Store};
use murmur_tests::swarms::{connect, start_swarm};
use tokio::sync::mpsc;

/// Answers every transfer request `Busy`.
struct AlwaysBusy;

impl ContentServer for AlwaysBusy {
    fn status(&self, _: PeerId) -> PeerStatus {
        PeerStatus { trainer: true, ..PeerStatus::default() }
    }
    fn serve(&self, _: PeerId, _: &XferRequest) -> XferResponse {
        XferResponse::Busy
    }
}

/// An honest store behind a slow link: each chunk takes `delay`.
struct Slow {
    store: StoreServer,
    delay: Duration,
}

impl ContentServer for Slow {
    fn status(&self, from: PeerId) -> PeerStatus {
        self.store.status(from)
    }
    fn serve(&self, from: PeerId, request: &XferRequest) -> XferResponse {
        if let XferRequest::Chunk { .. } = request {
            std::thread::sleep(self.delay);
        }
        self.store.serve(from, request)
    }
}

/// An honest store behind a congested uplink: chunks go out one at a
/// time, each taking `delay`, however many are asked for at once.
struct Congested {
    store: StoreServer,
    link: std::sync::Mutex<()>,
    delay: Duration,
}

impl ContentServer for Congested {
    fn status(&self, from: PeerId) -> PeerStatus {
        self.store.status(from)
    }
    fn serve(&self, from: PeerId, request: &XferRequest) -> XferResponse {
        if let XferRequest::Chunk { .. } = request {
            let _link = self.link.lock().unwrap_or_else(|e| e.into_inner());
            std::thread::sleep(self.delay);
            return self.store.serve(from, request);
        }
        self.store.serve(from, request)
    }
}

/// The first peer charged for `reason` within 10 s.
async fn charged(events: &mut mpsc::Receiver<NetEvent>, reason: NetRejection) -> Option<PeerId> {
    let wait = async {
        while let Some(ev) = events.recv().await {
            if let NetEvent::Rejected { peer, reason: r } = ev {
                if r == reason {
                    return Some(peer);
                }
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(10), wait).await.ok().flatten()
}

fn blob(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_busy_peer_first_in_the_list_does_not_stop_a_one_chunk_fetch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let payload = blob(50_000, 1);
    let id = store.blobs.put(BlobKind::Delta, &payload).expect("put");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (honest, _he) = start_swarm(1, Arc::new(StoreServer::new(store.clone(), Vec::new(), true)));
        let (busy, _be) = start_swarm(2, Arc::new(AlwaysBusy));
        let (me, mut events) = start_swarm(3, Arc::new(AlwaysBusy));
        connect(&me, &[&honest, &busy]).await;
        for round in 0..3 {
            let len = payload.len() as u64;
            let got = tokio::time::timeout(
                Duration::from_secs(30),
                fetch_blob(&me, BlobKind::Delta, id, len, len, &[busy.local, honest.local]),
            )
            .await
            .expect("the fetch ends within 30 s");
            let got = got.unwrap_or_else(|e| panic!("fetch {round} failed: {e}"));
            assert_eq!(got.bytes, payload, "fetch {round}: the verified payload");
        }
        assert_eq!(
            charged(&mut events, NetRejection::Busy).await,
            Some(busy.local),
            "the busy peer is charged"
        );
    });
}

#[test]
fn a_busy_peer_anywhere_in_the_list_does_not_stop_a_slow_state_fetch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    // Five chunks of 1 MiB (the last short), each taking 400 ms from the
    // honest peer: the busy peer answers every one of its shares in between.
    let state = blob(4 * (1 << 20) + 12_345, 2);
    let id = store.blobs.put(BlobKind::State, &state).expect("put");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let slow = Slow {
            store: StoreServer::new(store.clone(), Vec::new(), true),
            delay: Duration::from_millis(400),
        };
        let (honest, _he) = start_swarm(4, Arc::new(slow));
        let (busy, _be) = start_swarm(5, Arc::new(AlwaysBusy));
        let (me, mut events) = start_swarm(6, Arc::new(AlwaysBusy));
        connect(&me, &[&honest, &busy]).await;
        let len = state.len() as u64;
        for peers in [[honest.local, busy.local], [busy.local, honest.local]] {
            let got = tokio::time::timeout(
                Duration::from_secs(60),
                fetch_blob(&me, BlobKind::State, id, len, len, &peers),
            )
            .await
            .expect("the fetch ends within 60 s")
            .unwrap_or_else(|e| panic!("fetch from {peers:?} failed: {e}"));
            assert_eq!(got.bytes, state, "the verified state");
            let from_busy = got.per_peer.iter().find(|(p, _)| *p == busy.local).map_or(0, |e| e.1);
            assert_eq!(from_busy, 0, "the busy peer served nothing");
        }
        assert_eq!(
            charged(&mut events, NetRejection::Busy).await,
            Some(busy.local),
            "the busy peer is charged"
        );
    });
}

/// A request that waits for a slot to its peer (this node already asks it
/// for its whole share) is timed from when it goes out: the wait is this
/// node's own queue, never charged to the peer as its slowness. Each
/// answer takes 600 ms; the 17th request waits about that long for a slot
/// and then 600 ms more, past a 1 s limit counted from the call, within
/// it counted from the send.
#[test]
fn a_request_queued_for_its_share_is_timed_from_when_it_goes_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let payload = blob(1000, 3);
    let id = store.blobs.put(BlobKind::Delta, &payload).expect("put");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let slow = Slow {
            store: StoreServer::new(store.clone(), Vec::new(), true),
            delay: Duration::from_millis(600),
        };
        let (server, _se) = start_swarm(7, Arc::new(slow));
        let (me, _me) = start_swarm(8, Arc::new(AlwaysBusy));
        connect(&me, &[&server]).await;
        let chunk = XferRequest::Chunk { kind: BlobKind::Delta, id, len: payload.len() as u64, index: 0 };
        let share: Vec<_> = (0..murmur_node::net::SERVE_PER_PEER)
            .map(|_| {
                let (me, chunk) = (me.clone(), chunk.clone());
                tokio::spawn(async move { me.request(server.local, chunk).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let late = me.request_within(server.local, chunk, Duration::from_secs(1)).await;
        let waited = started.elapsed();
        assert!(waited > Duration::from_secs(1), "it did wait for a slot ({waited:?})");
        match late {
            Ok(XferResponse::Chunk(b)) => assert_eq!(&b[..], &payload[..]),
            other => panic!("the queued request failed after {waited:?}: {other:?}"),
        }
        for r in share {
            assert!(matches!(r.await.expect("task"), Ok(XferResponse::Chunk(_))));
        }
    });
}

/// Eight chunks, 3 s each through one link: asked all at once, the last
/// two would wait 21 and 24 s, past `REQUEST_TIMEOUT`, and the only peer
/// would be left with its blob half fetched. A window that starts small
/// and grows with each delivered chunk keeps every ask within its timeout.
#[test]
fn a_congested_peer_that_keeps_delivering_serves_the_whole_blob() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let state = blob(7 * (1 << 20) + 999, 4);
    let id = store.blobs.put(BlobKind::State, &state).expect("put");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let congested = Congested {
            store: StoreServer::new(store.clone(), Vec::new(), true),
            link: std::sync::Mutex::new(()),
            delay: Duration::from_secs(3),
        };
        let (server, _se) = start_swarm(9, Arc::new(congested));
        let (me, mut events) = start_swarm(10, Arc::new(AlwaysBusy));
        connect(&me, &[&server]).await;
        let len = state.len() as u64;
        let got = tokio::time::timeout(
            Duration::from_secs(90),
            fetch_blob(&me, BlobKind::State, id, len, len, &[server.local]),
        )
        .await
        .expect("the fetch ends within 90 s")
        .unwrap_or_else(|e| panic!("the fetch from the congested peer failed: {e}"));
        assert_eq!(got.bytes, state, "the verified state");
        assert_eq!(charged(&mut events, NetRejection::Unresponsive).await, None, "nobody charged");
    });
}
