//! Serving within bounds (issue 41). Memory: a peer asks a serving node for the
//! tables of 65 blobs it holds (one more than the node's table cache held),
//! then, from two identities at once, for a 64 MiB state: 32 table requests
//! together, then 32 chunk requests together; the state's table file is
//! missing (a data directory from before tables were kept), so the first
//! of them rebuilds it. The serving node's peak RSS (VmHWM) may grow by at
//! most `SERVE_BOUND_BYTES` over the whole attack.
//!
//! The server runs in a process of its own — this test binary again, in
//! `serve_child_process` — so the clients' buffers do not count; its RSS is
//! read from /proc/<pid>/status.
//!
//! Fails before chunk tables were kept with their blobs and chunks read by
//! position: each of the 32 table requests missed the (cleared) table
//! cache and read the whole state into memory and hashed it, so the server
//! held several copies of the state at once (VmHWM grew by 311 to 696 MiB
//! over four runs against the old code; about 37 MiB now, most of it the 32
//! chunks left in the chunk cache).
//!
//! Shares: one peer holds at most `serve_per_peer` (16) of the node's 32
//! serving slots, its Status requests included, while another peer is
//! still answered. Fails before the server knew who asks: all 20 requests
//! of one peer were taken at once, and Status was answered on the swarm
//! task outside any limit (checked against the old code). Each request
//! past the share is charged to the greedy peer as an overrun, while a
//! node that asks for twice its share at once is never refused nor
//! charged: its requests past the share wait their turn at home, behind
//! requests it gave up on that the server is still answering. Fails where
//! a request given up on freed its slot at once: the next ones came back
//! `Busy` (checked against that code).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::multiaddr::Protocol;
use libp2p::PeerId;
use murmur_node::net::{
    ContentServer, NetConfig, NetEvent, NetHandle, NetRejection, PeerStatus, Role, XferRequest, XferResponse,
};
use murmur_node::runtime::server::StoreServer;
use murmur_node::runtime::startup::Nothing;
use murmur_node::store::tree::{self, BlobKind};
use murmur_node::store::Store;
use murmur_protocol::NodeKey;
use murmur_tests::swarms::{connect, dial, start_swarm, start_swarm_with, TEST_RUN};
use murmur_tests::Proc;
use tokio::sync::mpsc;

/// The state the attack asks for: 64 chunks of 1 MiB.
const STATE_BYTES: usize = 64 << 20;
/// Blobs whose tables are asked for first (the old table cache held 64 and
/// was cleared whole when full).
const KNOWN_BLOBS: usize = 65;
/// Requests for the state sent at once, split between two identities (the
/// node serves at most 32 at once).
const STATE_REQUESTS: u64 = 32;
/// The stated bound on the serving node's peak RSS growth: the 32 distinct
/// chunks asked for (kept in the chunk cache afterwards) plus as many in
/// flight, the tables, and the runtime's buffers: 1.5 states' worth, where
/// 32 requests used to hold up to 32 copies of the state.
const SERVE_BOUND_BYTES: u64 = 96 << 20;
/// Where `serve_child_process` finds the store it serves.
const STORE_ENV: &str = "MURMUR_TEST_SERVE_STORE";

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim_start_matches(':').split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn blob(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed).collect()
}

/// A store holding `KNOWN_BLOBS` small deltas and one state; their ids.
fn fill_store(dir: &Path) -> (Vec<([u8; 32], u64)>, [u8; 32]) {
    let store = Store::open(dir).expect("store");
    let known = (0..KNOWN_BLOBS)
        .map(|i| {
            let b = blob(4096 + i, i as u8);
            (store.blobs.put(BlobKind::Delta, &b).expect("put"), b.len() as u64)
        })
        .collect();
    let state = store.blobs.put(BlobKind::State, &blob(STATE_BYTES, 0xA5)).expect("put");
    // As in a data directory from before tables were kept with their blobs:
    // the server rebuilds the state's table once, a chunk at a time.
    std::fs::remove_file(store.blobs.table_path(BlobKind::State, &state)).expect("table file");
    (known, state)
}

/// Ask `peer` until it answers something other than `Busy` (a few tries).
async fn ask(net: &NetHandle, peer: PeerId, request: XferRequest) -> XferResponse {
    for _ in 0..100 {
        match net.request(peer, request.clone()).await {
            Ok(XferResponse::Busy) => tokio::time::sleep(Duration::from_millis(50)).await,
            Ok(answer) => return answer,
            Err(e) => panic!("{request:?}: {e}"),
        }
    }
    panic!("{request:?}: Busy for 5 s")
}

/// Send `requests` at once, alternating between `clients`; every answer.
async fn burst(clients: &[NetHandle], peer: PeerId, requests: Vec<XferRequest>) -> Vec<XferResponse> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, r) in requests.into_iter().enumerate() {
        let net = clients[i % clients.len()].clone();
        tasks.spawn(async move { (i, ask(&net, peer, r).await) });
    }
    let mut answers: Vec<(usize, XferResponse)> = tasks.join_all().await;
    answers.sort_by_key(|a| a.0);
    answers.into_iter().map(|a| a.1).collect()
}

#[test]
fn table_and_state_requests_keep_the_servers_memory_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store_dir = dir.path().join("store");
    let (known, state) = fill_store(&store_dir);
    let state_len = STATE_BYTES as u64;
    let server = Proc::spawn_command(
        Command::new(std::env::current_exe().expect("test executable")),
        &["serve_child_process", "--exact", "--nocapture", "--test-threads", "1"].map(String::from),
        &[(STORE_ENV, &store_dir.display().to_string())],
        "server",
        dir.path(),
    );
    // The harness's "test serve_child_process ... " comes first on the line.
    let line = server.wait_line("with the serving address", Duration::from_secs(60), |l| {
        l.contains("serving /ip4/127.0.0.1/")
    });
    let addr: libp2p::Multiaddr =
        line.split_once("serving ").map(|s| s.1).unwrap_or_default().parse().expect("multiaddr");
    let server_peer = addr
        .iter()
        .find_map(|p| match p {
            Protocol::P2p(peer) => Some(peer),
            _ => None,
        })
        .expect("the address ends with /p2p/<id>");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (before, after) = rt.block_on(async {
        let clients: Vec<NetHandle> = (1..=2).map(|seed| start_swarm(seed, Arc::new(Nothing)).0).collect();
        for c in &clients {
            dial(c, std::slice::from_ref(&addr)).await;
        }
        let before = status_kib(server.pid(), "VmHWM");

        for (id, len) in &known {
            let answer = ask(
                &clients[0],
                server_peer,
                XferRequest::Table { kind: BlobKind::Delta, id: *id, len: *len },
            )
            .await;
            assert_eq!(answer, XferResponse::Table(vec![*id]), "the table of a one-chunk blob is its id");
        }
        let tables = (0..STATE_REQUESTS)
            .map(|_| XferRequest::Table { kind: BlobKind::State, id: state, len: state_len })
            .collect();
        let mut table = None;
        for answer in burst(&clients, server_peer, tables).await {
            match answer {
                XferResponse::Table(t) => {
                    assert!(tree::table_matches(BlobKind::State, &state, state_len, &t), "a valid table");
                    table = Some(t);
                }
                other => panic!("a table request answered {other:?}\n{}", server.tail()),
            }
        }
        let table = table.expect("tables");
        let chunks = (0..STATE_REQUESTS)
            .map(|index| XferRequest::Chunk { kind: BlobKind::State, id: state, len: state_len, index })
            .collect();
        for (index, answer) in burst(&clients, server_peer, chunks).await.into_iter().enumerate() {
            match answer {
                XferResponse::Chunk(b) => assert_eq!(
                    tree::chunk_entry(BlobKind::State, state_len, index as u64, &b),
                    Some(table[index]),
                    "chunk {index} matches its table entry"
                ),
                other => panic!("chunk {index} answered {other:?}\n{}", server.tail()),
            }
        }
        (before, status_kib(server.pid(), "VmHWM"))
    });
    let table_file = store_dir.join("blobs/table/state").join(murmur_protocol::hash::hex(&state));
    assert!(table_file.is_file(), "the rebuilt table was kept");
    let grew = (after.saturating_sub(before)) << 10;
    eprintln!(
        "serving node: VmHWM {} MiB before, {} MiB after ({} MiB growth; bound {} MiB)",
        before >> 10,
        after >> 10,
        grew >> 20,
        SERVE_BOUND_BYTES >> 20
    );
    assert!(before > 0, "no VmHWM read for the server\n{}", server.tail());
    assert!(
        grew <= SERVE_BOUND_BYTES,
        "the serving node's peak RSS grew by {} MiB (bound {} MiB)",
        grew >> 20,
        SERVE_BOUND_BYTES >> 20
    );
}

/// Takes `HOLD` to answer anything, Status included.
struct Slow;

const HOLD: Duration = Duration::from_millis(1500);

impl ContentServer for Slow {
    fn status(&self, _: PeerId) -> PeerStatus {
        std::thread::sleep(HOLD);
        PeerStatus { trainer: true, ..PeerStatus::default() }
    }
    fn serve(&self, _: PeerId, _: &XferRequest) -> XferResponse {
        std::thread::sleep(HOLD);
        XferResponse::NotFound
    }
}

/// The refusals the server charged so far, by peer.
fn charged(events: &mut mpsc::Receiver<NetEvent>) -> Vec<(PeerId, NetRejection)> {
    let mut out = Vec::new();
    while let Ok(ev) = events.try_recv() {
        if let NetEvent::Rejected { peer, reason } = ev {
            out.push((peer, reason));
        }
    }
    out
}

#[test]
fn one_peer_gets_its_share_of_the_serving_slots_status_included() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (server, mut server_events) = start_swarm(7, Arc::new(Slow));
        // A greedy asker: it sends past its share instead of waiting.
        let (greedy, _ge) = start_swarm_with(8, Arc::new(Nothing), |c| c.ask_per_peer = 64);
        let (other, _oe) = start_swarm(9, Arc::new(Nothing));
        connect(&greedy, &[&server]).await;
        connect(&other, &[&server]).await;
        let share = NetConfig::new(NodeKey::from_seed([7; 32]), TEST_RUN, Role::Trainer).serve_per_peer;
        let mut asks = tokio::task::JoinSet::new();
        for index in 0..share as u64 + 4 {
            let (net, peer) = (greedy.clone(), server.local);
            asks.spawn(async move {
                net.request(peer, XferRequest::Chunk { kind: BlobKind::Delta, id: [1; 32], len: 9, index })
                    .await
            });
        }
        // A first Busy answer means the greedy peer holds its whole share
        // (for `HOLD`): now its Status is refused at once, and the other
        // peer's is answered.
        let mut answers = Vec::new();
        while !answers.contains(&XferResponse::Busy) {
            match asks.join_next().await {
                Some(answer) => answers.push(answer.expect("task").expect("answer")),
                None => panic!("no request of the greedy peer was refused: {answers:?}"),
            }
        }
        let t0 = Instant::now();
        let refused = greedy.request(server.local, XferRequest::Status).await.expect("answer");
        assert_eq!(refused, XferResponse::Busy, "a peer past its share is told Busy, Status too");
        assert!(t0.elapsed() < HOLD / 2, "Busy is answered at once");
        let answered = other.request(server.local, XferRequest::Status).await.expect("answer");
        assert!(matches!(answered, XferResponse::Status(_)), "another peer is served: {answered:?}");
        answers.extend(asks.join_all().await.into_iter().map(|a| a.expect("answer")));
        let busy = answers.iter().filter(|a| **a == XferResponse::Busy).count();
        let served = answers.iter().filter(|a| **a == XferResponse::NotFound).count();
        assert_eq!((served, busy), (share, 4), "{share} served at once, the rest Busy");
        let charges = charged(&mut server_events);
        let overruns = charges.iter().filter(|c| **c == (greedy.local, NetRejection::Overrun)).count();
        assert_eq!(overruns, 5, "each request past the share is charged, Status included: {charges:?}");
        assert!(charges.iter().all(|c| c.0 == greedy.local), "only the greedy peer: {charges:?}");
    });
}

#[test]
fn a_node_asks_a_peer_for_its_share_at_most_even_after_giving_up_on_requests() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (server, mut server_events) = start_swarm(10, Arc::new(Slow));
        let (asker, _ae) = start_swarm(11, Arc::new(Nothing));
        connect(&asker, &[&server]).await;
        let share = NetConfig::new(NodeKey::from_seed([10; 32]), TEST_RUN, Role::Trainer).serve_per_peer;
        let chunk = |index: u64| XferRequest::Chunk { kind: BlobKind::Delta, id: [1; 32], len: 9, index };
        let t0 = Instant::now();
        // A share of requests the asker stops waiting for: the server still
        // holds a slot for each until it has answered (after `HOLD`).
        let mut given_up = tokio::task::JoinSet::new();
        for index in 0..share as u64 {
            let (net, peer, request) = (asker.clone(), server.local, chunk(index));
            let wait = Duration::from_millis(200);
            given_up.spawn(async move { tokio::time::timeout(wait, net.request(peer, request)).await });
        }
        for waited in given_up.join_all().await {
            assert!(waited.is_err(), "answered within 200 ms: {waited:?}");
        }
        // Then twice the share at once.
        let mut asks = tokio::task::JoinSet::new();
        for index in 0..2 * share as u64 {
            let (net, peer, request) = (asker.clone(), server.local, chunk(index));
            asks.spawn(async move { net.request(peer, request).await });
        }
        let answers: Vec<XferResponse> =
            asks.join_all().await.into_iter().map(|a| a.expect("answer")).collect();
        assert!(
            answers.iter().all(|a| *a == XferResponse::NotFound),
            "every request served, none refused: {answers:?}"
        );
        assert!(t0.elapsed() >= 3 * HOLD, "after the given-up ones, in two turns of {share}");
        assert_eq!(charged(&mut server_events), vec![], "nothing charged to an asker within its share");
    });
}

/// Not a test of its own: the serving node of the test above, run in its
/// own process when `STORE_ENV` names a store (otherwise it returns at once).
/// It prints its address and serves until it is killed (at most 5 minutes).
#[test]
fn serve_child_process() {
    let Some(dir) = std::env::var_os(STORE_ENV).map(PathBuf::from) else { return };
    let store = Arc::new(Store::open(&dir).expect("store"));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (net, mut events) = start_swarm(100, Arc::new(StoreServer::new(store, Vec::new(), true)));
        let addr = loop {
            match events.recv().await {
                Some(NetEvent::Listening(a)) => break a,
                Some(_) => {}
                None => panic!("the swarm stopped"),
            }
        };
        println!("serving {addr}");
        // Keep draining events so the swarm never holds them back.
        let drain = async { while events.recv().await.is_some() {} };
        let _ = tokio::time::timeout(Duration::from_secs(300), drain).await;
        drop(net);
    });
}
