//! A ticket run is private against identities without tickets: two honest
//! nodes hold tickets an operator issued with `murmur ticket issue`; ten
//! identities without one join as trainers, gossip valid manifests (their
//! payloads served and decodable), results naming a state of their own and
//! self-signed tickets, every round. None is counted, included or followed:
//! the honest nodes' roster is the two of them, they close every round with
//! their own two deltas and agree on every state. None is given a byte:
//! the bootstrap server refuses them the RunSpec, and every request for a
//! Status, a state's parts, table or chunk, a delta, a dataset shard or a
//! shard's result, and every shard offered, of the nodes and of the
//! bootstrap server, is answered `NotAdmitted` and charged. A watcher that forwards everything,
//! connected to one honest node, sees the honest nodes' gossip through it
//! and none of the outsiders': their gossip is not forwarded.
//!
//! Fails on the code before ticket runs were private: the bootstrap server
//! and the nodes answered outsiders' requests, and nodes forwarded their
//! gossip (checked against the previous commit).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use libp2p::{Multiaddr, PeerId};
use murmur_node::net::offer::{ShardOffer, MAX_INLINE_PAYLOAD};
use murmur_node::net::{self, ContentServer, NetConfig, NetEvent, NetHandle, PeerStatus, Role, TopicKind};
use murmur_node::net::{XferRequest, XferResponse};
use murmur_node::runtime::startup::{discover_spec, Identity};
use murmur_node::store::BlobKind;
use murmur_protocol::committee::{merkle_root, ShardLeaf, ShardResult, ShardedManifest};
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::{encode_delta, NodeKey, PayloadHash, PublicKey, RunSpec, Signature, StateId, Ticket};
use murmur_tests::{
    issue_ticket, start_node, start_ticket_run, states_by_round, wait_until, write_node_key, RunSettings,
    TicketRun,
};

/// An outsider's server: its status (a trainer of the run, no ticket) and
/// its one delta payload (a single chunk, so no table is needed).
struct Outsider {
    spec: Vec<u8>,
    payload: Bytes,
    hash: PayloadHash,
}

impl Outsider {
    fn empty() -> Self {
        Outsider { spec: Vec::new(), payload: Bytes::new(), hash: PayloadHash([0; 32]) }
    }
}

impl ContentServer for Outsider {
    fn status(&self, _: PeerId) -> PeerStatus {
        PeerStatus { spec: self.spec.clone(), trainer: true, ..PeerStatus::default() }
    }
    fn serve(&self, _: PeerId, r: &XferRequest) -> XferResponse {
        match *r {
            XferRequest::Table { kind: BlobKind::Delta, id, .. } if id == self.hash.0 => {
                XferResponse::Table(vec![id])
            }
            XferRequest::Chunk { kind: BlobKind::Delta, id, index: 0, .. } if id == self.hash.0 => {
                XferResponse::Chunk(self.payload.clone())
            }
            _ => XferResponse::NotFound,
        }
    }
}

/// The fake state every outsider's results name.
const FAKE: StateId = StateId([0x66; 32]);

/// Outsider `k`'s manifest of round `round` from `base`: its delta as one
/// shard (`hash`, `len` bytes), and that shard's leaf.
fn outsider_manifest(
    k: &NodeKey,
    spec: &RunSpec,
    round: u64,
    base: StateId,
    hash: PayloadHash,
    len: u64,
) -> (ShardedManifest, ShardLeaf) {
    let leaf = ShardLeaf { shard: 0, payload_hash: hash, payload_len: len, norm: 1.0 };
    let manifest = ShardedManifest {
        run: spec.run_id(),
        round,
        base,
        signer: PublicKey::default(),
        tokens: 4096,
        train_loss: 3.0,
        codec: spec.codec,
        element_count: spec.model.param_count,
        shards: 1,
        norm: 1.0,
        root: merkle_root(&[leaf]),
        signature: Signature::default(),
    }
    .sign(k);
    (manifest, leaf)
}

/// One round of mischief by outsider `k`: a manifest for the honest nodes'
/// round and base, results naming `FAKE` for this round and the one
/// before, and a ticket it signed itself.
async fn misbehave(net: &NetHandle, k: &NodeKey, spec: &RunSpec, round: u64, base: StateId, delta: &Bytes) {
    let run = spec.run_id();
    let (manifest, _) = outsider_manifest(k, spec, round, base, payload_hash_of(delta), delta.len() as u64);
    let result = |r: u64| {
        ShardResult {
            run,
            round: r,
            base: FAKE,
            shard: 0,
            included_count: 1,
            included_root: [0; 32],
            total_tokens: 4096,
            result_hash: *payload_hash_of(delta).as_bytes(),
            signer: PublicKey::default(),
            signature: Signature::default(),
        }
        .sign(k)
    };
    let mut messages = vec![
        (TopicKind::ShardedManifest, manifest.encode()),
        (TopicKind::ShardResult, result(round).encode()),
    ];
    if round > 0 {
        messages.push((TopicKind::ShardResult, result(round - 1).encode()));
    }
    let ticket = Ticket::issue(k, run, k.public(), u64::MAX);
    messages.push((TopicKind::Ticket, ticket.encode()));
    for (kind, bytes) in messages {
        for _ in 0..10 {
            if net.publish(kind, bytes.clone()).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn state_id(hex: &str) -> StateId {
    let b = murmur_protocol::hash::unhex(hex).expect("hex");
    StateId(b.try_into().expect("32 bytes"))
}

/// Where an outsider's requests got it: the answers each target gave.
type Answers = Vec<(String, XferResponse)>;

/// Ask `target` for its Status, the parts, a table and a chunk of
/// `state`, a delta's chunk, a dataset shard's chunk and the result of
/// round `round`'s shard 0, and offer it a shard of `offer`'s delta for
/// that round: what an outsider wants of a node.
async fn probe(
    net: &NetHandle,
    target: PeerId,
    (state, state_len): (StateId, u64),
    round: u64,
    offer: &ShardOffer,
) -> Answers {
    let delta = offer.leaf.payload_hash;
    let requests = [
        ("status", XferRequest::Status),
        ("state parts", XferRequest::StateParts { state: state.0 }),
        ("state table", XferRequest::Table { kind: BlobKind::State, id: state.0, len: state_len }),
        ("state chunk", XferRequest::Chunk { kind: BlobKind::State, id: state.0, len: state_len, index: 0 }),
        ("delta chunk", XferRequest::Chunk { kind: BlobKind::Delta, id: delta.0, len: 1, index: 0 }),
        ("shard chunk", XferRequest::Chunk { kind: BlobKind::DatasetShard, id: [1; 32], len: 1, index: 0 }),
        ("result", XferRequest::Result { round, shard: 0 }),
        ("offer", XferRequest::Offer(offer.clone())),
    ];
    let mut out = Vec::new();
    for (what, r) in requests {
        let answer = tokio::time::timeout(Duration::from_secs(10), net.request(target, r)).await;
        let answer = match answer {
            Ok(Ok(a)) => a,
            other => panic!("{what} of {target}: no answer ({other:?})"),
        };
        out.push((format!("{what} of {target}"), answer));
    }
    out
}

#[test]
fn identities_without_tickets_count_for_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 60, batch: 4, quorum: 2, deadline: 20, seed: 43 };
    let TicketRun { boot: _boot, addr, operator, operator_key } = start_ticket_run(d, &settings, [0x0b; 32]);
    let mut honest = Vec::new();
    for (name, seed) in [("a", [0xa1; 32]), ("b", [0xb1; 32])] {
        let holder = write_node_key(d, name, seed);
        let ticket = issue_ticket(d, &operator_key, &["--bootstrap", &addr], &holder, name);
        honest.push(start_node(d, name, &addr, &["--ticket", &ticket.display().to_string()]));
    }
    let (a, b) = (&honest[0], &honest[1]);
    let ctx = || format!("{}\n{}", a.tail(), b.tail());
    wait_until("round 0 to close", Duration::from_secs(240), || a.last_round().is_some(), ctx);
    let targets: Vec<(PeerId, Multiaddr)> = [a, b]
        .iter()
        .filter_map(|p| {
            let addr: Multiaddr = p.events_of("listening").first()?["addr"].as_str()?.parse().ok()?;
            Some((p.peer_id()?.parse().ok()?, addr))
        })
        .collect();
    assert_eq!(targets.len(), 2, "{}", ctx());
    let honest_keys: Vec<PublicKey> =
        [[0xa1; 32], [0xb1; 32]].iter().map(|s| NodeKey::from_seed(*s).public()).collect();

    let outsiders: Vec<NodeKey> = (0..10u8).map(|i| NodeKey::from_seed([0x40 + i; 32])).collect();
    let outsider_ids: Vec<String> =
        outsiders.iter().filter_map(|k| net::peer_id_of(&k.public())).map(|p| p.to_string()).collect();
    let r0 = a.last_round().unwrap_or(0);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let boot: Multiaddr = addr.parse().expect("addr");
    let boot_peer = net::peer_of(&boot).expect("bootstrap peer id");
    let (answers, watched) = rt.block_on(async {
        // An outsider is refused the spec; the test learns it as the operator.
        let outsider = Identity { key: outsiders[0].clone(), ticket: None };
        let refused = discover_spec(&outsider, std::slice::from_ref(&boot), Duration::from_secs(30)).await;
        let refusal = refused.expect_err("the bootstrap server gave an outsider the run spec").to_string();
        assert!(refusal.contains("ticket"), "{refusal}");
        let op = Identity { key: operator.clone(), ticket: None };
        let spec =
            discover_spec(&op, std::slice::from_ref(&boot), Duration::from_secs(30)).await.expect("spec");
        let n = spec.model.param_count as usize;
        let state_len = murmur_node::runtime::spec::state_len(&spec);
        // A watcher that forwards everything (its gate is open), dialled to
        // node a only: what a forwards, it sees.
        let mut wcfg = NetConfig::new(NodeKey::from_seed([0x77; 32]), spec.run_id(), Role::Observer);
        wcfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
        let (watcher, mut watcher_events) = net::start(wcfg, Arc::new(Outsider::empty())).expect("net");
        let _ = watcher.dial(targets[0].1.clone()).await;
        let mut swarms = Vec::new();
        for (i, k) in outsiders.iter().enumerate() {
            // A small, valid delta of the run's codec and shape, different per outsider.
            let values: Vec<f32> = (0..n).map(|j| ((j * 7 + i * 13) % 101) as f32 * 1e-6).collect();
            let payload = encode_delta(spec.codec, &values).expect("delta");
            let payload = Bytes::from(payload);
            let hash = payload_hash_of(&payload);
            let server = Outsider { spec: spec.encode(), payload: payload.clone(), hash };
            let mut cfg = NetConfig::new(k.clone(), spec.run_id(), Role::Trainer);
            cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
            let (net, events) = net::start(cfg, Arc::new(server)).expect("net");
            for (_, t) in &targets {
                let _ = net.dial(t.clone()).await;
            }
            let _ = net.dial(boot.clone()).await;
            swarms.push((net, events, payload));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Every round the honest nodes close, every outsider joins in on the next.
        let t0 = Instant::now();
        let mut done_round = None;
        let attacked =
            |t0: Instant| t0.elapsed() >= Duration::from_secs(20) && a.last_round() >= Some(r0 + 4);
        while t0.elapsed() < Duration::from_secs(300) && !attacked(t0) {
            let last = states_by_round(a).into_iter().next_back();
            if let Some((round, state)) = last.filter(|(r, _)| done_round != Some(*r)) {
                done_round = Some(round);
                let base = state_id(&state);
                for (k, (net, _, delta)) in outsiders.iter().zip(&swarms) {
                    misbehave(net, k, &spec, round + 1, base, delta).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // What each outsider is given when it asks: the nodes and the bootstrap server.
        let (round, state) = states_by_round(a).into_iter().next_back().expect("a state");
        let state = state_id(&state);
        let mut answers = Vec::new();
        for ((net, _, delta), k) in swarms.iter().zip(&outsiders) {
            let len = delta.len() as u64;
            let (manifest, leaf) = outsider_manifest(k, &spec, round + 1, state, payload_hash_of(delta), len);
            let offer = ShardOffer {
                round: round + 1,
                signer: k.public(),
                shards: 1,
                leaf,
                proof: Vec::new(),
                manifest: Box::new(manifest),
                payload: (delta.len() <= MAX_INLINE_PAYLOAD).then(|| delta.to_vec()),
            };
            for target in targets.iter().map(|t| t.0).chain([boot_peer]) {
                answers.extend(probe(net, target, (state, state_len), round + 1, &offer).await);
            }
        }
        // What the watcher got through a, until it has seen both honest
        // keys there (bounded): with a mesh of 4 among a's dozen peers, the
        // watcher may hear b's messages only through a's IHAVE gossip.
        let mut watched = Vec::new();
        let seen_both = |w: &[(PeerId, Option<PublicKey>)]| {
            honest_keys.iter().all(|k| w.iter().any(|(from, o)| *from == targets[0].0 && *o == Some(*k)))
        };
        let give_up = Instant::now() + Duration::from_secs(60);
        while !seen_both(&watched) && Instant::now() < give_up {
            while let Ok(ev) = watcher_events.try_recv() {
                if let NetEvent::Gossip { from, message } = ev {
                    watched.push((from, message.origin()));
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (answers, watched)
    });
    wait_until("four rounds under attack", Duration::from_secs(60), || a.last_round() >= Some(r0 + 4), ctx);

    // No outsider was given a byte: every request, of the nodes and of the
    // bootstrap server, was answered NotAdmitted.
    assert_eq!(answers.len(), 10 * 3 * 8);
    for (what, answer) in &answers {
        assert_eq!(*answer, XferResponse::NotAdmitted, "{what}");
    }
    // Node a forwarded the honest nodes' gossip and none of the outsiders'.
    let via_a: Vec<Option<PublicKey>> =
        watched.iter().filter(|(from, _)| *from == targets[0].0).map(|(_, origin)| *origin).collect();
    for k in &honest_keys {
        assert!(
            via_a.contains(&Some(*k)),
            "the watcher saw no gossip of {k} through a ({} messages)",
            via_a.len()
        );
    }
    let outsider_keys: Vec<PublicKey> = outsiders.iter().map(NodeKey::public).collect();
    assert!(
        via_a.iter().all(|o| o.is_none_or(|k| !outsider_keys.contains(&k))),
        "a forwarded an outsider's gossip"
    );
    for p in [a, b] {
        // Nothing an outsider signed was counted, included or followed:
        // the roster is the two honest nodes, and no round includes more.
        for v in p.events_of("round") {
            assert!(v["roster"].as_u64().unwrap_or(0) <= 2, "{}: an outsider joined the roster: {v}", p.name);
            assert!(v["included"].as_u64().unwrap_or(0) <= 2, "{}: {v}", p.name);
        }
        let fake = FAKE.to_hex();
        assert!(
            p.lines().iter().all(|l| !l.contains(&fake)),
            "{} took or reported the outsiders' state\n{}",
            p.name,
            p.tail()
        );
        // Each outsider's requests were refused, and charged, as not admitted.
        let refused: std::collections::BTreeSet<String> = p
            .events_of("rejected")
            .iter()
            .filter(|v| v["reason"].as_str() == Some("not_admitted"))
            .filter_map(|v| v["peer"].as_str().map(String::from))
            .collect();
        let missed: Vec<&String> = outsider_ids.iter().filter(|o| !refused.contains(*o)).collect();
        assert!(
            missed.is_empty(),
            "{}: outsiders never refused as not admitted: {missed:?}\n{}",
            p.name,
            p.tail()
        );
        // The honest pair closed rounds with both of their own deltas.
        let both = p
            .events_of("round")
            .iter()
            .filter(|v| v["round"].as_u64() > Some(r0) && v["included"].as_u64() == Some(2))
            .count();
        assert!(both >= 2, "{}: rounds after {r0} did not include both honest deltas\n{}", p.name, p.tail());
    }
    let (sa, sb) = (states_by_round(a), states_by_round(b));
    let common: Vec<_> = sb.iter().filter(|(r, _)| sa.contains_key(r)).collect();
    assert!(common.len() >= 3, "{sa:?} {sb:?}");
    for (r, s) in common {
        assert_eq!(sa.get(r), Some(s), "round {r}: the honest nodes disagree");
    }
}
