//! murmur-hostile: a hostile node of a ticket run, built from the project's
//! own crates for the multi-process test `tests/tests/network_hostile.rs`.
//!
//! It holds an operator's ticket, so the honest nodes admit it, joins as a
//! trainer, follows the rounds the honest nodes close (their results on
//! gossip), and every round:
//! - signs with its admitted key results for rounds far ahead (r + 5 and
//!   r + 1,000,000) and for the current round, each including one made-up
//!   delta and naming a made-up StateId as the state it trained from (one
//!   per round, so it never equivocates);
//! - announces a delta of the round's shard count, trained from the state
//!   the round's results name, and never serves a payload;
//! - learns each round as it opens (an honest trainer's Status, then the
//!   first honest trainer's own shard 0 it can pull, as any node may, whose
//!   manifest names the round's base and shard count) and offers every
//!   shard of a delta trained from
//!   that base to every honest trainer, never serving a payload;
//! - relays Sybil gossip: telemetry and manifests, validly signed by fresh
//!   keys that hold no ticket;
//! - answers every transfer request but Status `Busy`; its Status claims a
//!   state a million rounds ahead, backed by its own far-future results;
//! - from its `--flood-after`-th round on, floods every honest trainer with
//!   table and chunk requests for the parameters of the state it trains
//!   from, `--in-flight` at once, never waiting for the share a node serves
//!   one peer.
//!
//! It prints `{"event": "started", "peer_id": …}`, one `mischief` line per
//! round with the StateIds it made up, and an `acted` line with its counts
//! every second, so a test can check that it did each thing.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use libp2p::{Multiaddr, PeerId};
use murmur_node::net::offer::ShardOffer;
use murmur_node::net::{
    self, ContentServer, GossipMessage, NetConfig, NetEvent, NetHandle, PeerStatus, Role, StatusBacking,
    TopicKind, XferRequest, XferResponse,
};
use murmur_node::runtime::spec::{state_len, tokens_per_delta};
use murmur_node::runtime::startup::{discover_spec, Identity};
use murmur_node::runtime::tickets::read_ticket_file;
use murmur_node::store::keyfile;
use murmur_node::store::tree::{self, BlobKind};
use murmur_protocol::committee::{MerkleTree, ShardLayout, ShardLeaf, ShardResult, ShardedManifest};
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::{NodeKey, PayloadHash, PublicKey, RunSpec, Signature, StateId, Telemetry, Ticket};
use serde_json::json;

/// How many rounds past the run its far-future results are.
const FAR_ROUNDS_PAST: [u64; 2] = [5, 1_000_000];

struct Args {
    bootstrap: Multiaddr,
    key: PathBuf,
    ticket: PathBuf,
    sybils: u32,
    flood_after: u64,
    in_flight: usize,
}

impl Args {
    fn parse() -> anyhow::Result<Args> {
        let mut a = std::env::args().skip(1);
        let (mut bootstrap, mut key, mut ticket) = (None, None, None);
        let (mut sybils, mut flood_after, mut in_flight) = (16, 3, 64);
        while let Some(flag) = a.next() {
            let value = a.next().with_context(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--bootstrap" => bootstrap = Some(value.parse().context("--bootstrap")?),
                "--key" => key = Some(PathBuf::from(value)),
                "--ticket" => ticket = Some(PathBuf::from(value)),
                "--sybils" => sybils = value.parse().context("--sybils")?,
                "--flood-after" => flood_after = value.parse().context("--flood-after")?,
                "--in-flight" => in_flight = value.parse().context("--in-flight")?,
                _ => bail!("unknown flag {flag}"),
            }
        }
        Ok(Args {
            bootstrap: bootstrap.context("--bootstrap ADDR is required")?,
            key: key.context("--key FILE is required")?,
            ticket: ticket.context("--ticket FILE is required")?,
            sybils,
            flood_after,
            in_flight,
        })
    }
}

/// What it has done so far.
#[derive(Default)]
struct Acted {
    rounds: AtomicU64,
    offers: AtomicU64,
    results: AtomicU64,
    far_results: AtomicU64,
    manifests: AtomicU64,
    sybil: AtomicU64,
    busy: AtomicU64,
    statuses: AtomicU64,
    flood_sent: AtomicU64,
    flood_busy: AtomicU64,
    flood_served: AtomicU64,
    flood_failed: AtomicU64,
}

fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Acted {
    fn report(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "event": "acted",
            "rounds": g(&self.rounds),
            "offers": g(&self.offers),
            "results": g(&self.results),
            "far_results": g(&self.far_results),
            "manifests": g(&self.manifests),
            "sybil": g(&self.sybil),
            "busy": g(&self.busy),
            "statuses": g(&self.statuses),
            "flood_sent": g(&self.flood_sent),
            "flood_busy": g(&self.flood_busy),
            "flood_served": g(&self.flood_served),
            "flood_failed": g(&self.flood_failed),
        })
    }
}

/// Its server: `Busy` to everything, and a Status a million rounds ahead.
struct BusyServer {
    status: Mutex<PeerStatus>,
    acted: Arc<Acted>,
}

impl ContentServer for BusyServer {
    fn status(&self, _: PeerId) -> PeerStatus {
        add(&self.acted.statuses);
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
    fn serve(&self, _: PeerId, _: &XferRequest) -> XferResponse {
        add(&self.acted.busy);
        XferResponse::Busy
    }
}

/// The StateId it makes up for `round` (the same every time it names it).
fn fake_state(round: u64) -> StateId {
    StateId(payload_hash_of(&[b"murmur-hostile state".as_slice(), &round.to_le_bytes()].concat()).0)
}

/// The payload hash of the delta it announces for `round` and never serves.
fn fake_payload(round: u64) -> PayloadHash {
    payload_hash_of(&[b"murmur-hostile delta".as_slice(), &round.to_le_bytes()].concat())
}

/// Its result of shard 0 of `round`, including one made-up delta, trained
/// from the made-up state before that round.
fn result(key: &NodeKey, spec: &RunSpec, round: u64) -> ShardResult {
    ShardResult {
        run: spec.run_id(),
        round,
        base: fake_state(round.saturating_sub(1)),
        shard: 0,
        included_count: 1,
        included_root: fake_payload(round).0,
        total_tokens: 1,
        result_hash: fake_state(round).0,
        signer: PublicKey::default(),
        signature: Signature::default(),
    }
    .sign(key)
}

/// A manifest of `round` from `base` in `shards` shards, each of the
/// length the run's codec gives it, whose payload hashes are made from
/// `payload` (nothing hashes to them); and its leaves.
fn manifest(
    key: &NodeKey,
    spec: &RunSpec,
    (round, base, shards): (u64, StateId, u32),
    payload: PayloadHash,
) -> (ShardedManifest, Vec<ShardLeaf>) {
    let layout = ShardLayout::new(spec.model.param_count, shards);
    let leaves: Vec<ShardLeaf> = (0..layout.shards())
        .map(|s| ShardLeaf {
            shard: s,
            payload_hash: payload_hash_of(&[payload.0.as_slice(), &s.to_le_bytes()].concat()),
            payload_len: spec.codec.payload_len(layout.len(s) as u64).unwrap_or(0),
            norm: 1.0,
        })
        .collect();
    let m = ShardedManifest {
        run: spec.run_id(),
        round,
        base,
        signer: PublicKey::default(),
        tokens: tokens_per_delta(spec),
        train_loss: 3.0,
        codec: spec.codec,
        element_count: spec.model.param_count,
        shards: layout.shards(),
        norm: (leaves.len() as f32).sqrt(),
        root: MerkleTree::new(&leaves).root(),
        signature: Signature::default(),
    }
    .sign(key);
    (m, leaves)
}

fn telemetry(key: &NodeKey, spec: &RunSpec, round: u64, state: StateId) -> Telemetry {
    Telemetry {
        run: spec.run_id(),
        round,
        train_loss: 0.1,
        val_loss: Some(0.1),
        tokens_per_sec: 1e9,
        device: "sybil".into(),
        bytes_sent: 0,
        bytes_recv: 0,
        peer_count: 1,
        state,
        backend: "cpu".into(),
        links: Vec::new(),
        rejections: Vec::new(),
        trainer_restarts: 0,
        signer: PublicKey::default(),
        signature: Signature::default(),
    }
    .sign(key)
}

/// Gossip `bytes`, retrying while the mesh forms; true once it went out.
async fn publish(net: &NetHandle, kind: TopicKind, bytes: Vec<u8>) -> bool {
    for _ in 0..10 {
        if net.publish(kind, bytes.clone()).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Everything it does in a round the honest nodes train.
struct Round<'a> {
    net: &'a NetHandle,
    key: &'a NodeKey,
    spec: &'a RunSpec,
    sybils: &'a [NodeKey],
    acted: &'a Acted,
}

impl Round<'_> {
    /// Round `round`, trained from `base` in `shards` shards.
    async fn mischief(&self, round: u64, base: StateId, shards: u32) {
        let (key, spec, acted) = (self.key, self.spec, self.acted);
        if publish(self.net, TopicKind::ShardResult, result(key, spec, round).encode()).await {
            add(&acted.results);
        }
        for past in FAR_ROUNDS_PAST {
            if publish(self.net, TopicKind::ShardResult, result(key, spec, round + past).encode()).await {
                add(&acted.far_results);
            }
        }
        let (m, _) = manifest(key, spec, (round, base, shards), fake_payload(round));
        if publish(self.net, TopicKind::ShardedManifest, m.encode()).await {
            add(&acted.manifests);
        }
        for (i, sybil) in self.sybils.iter().enumerate() {
            let hash = payload_hash_of(&[fake_payload(round).0.as_slice(), &i.to_le_bytes()].concat());
            let messages = [
                (TopicKind::Telemetry, telemetry(sybil, spec, round, fake_state(round)).encode()),
                (TopicKind::ShardedManifest, manifest(sybil, spec, (round, base, shards), hash).0.encode()),
            ];
            for (kind, bytes) in messages {
                if self.net.publish(kind, bytes).await.is_ok() {
                    add(&acted.sybil);
                }
            }
        }
        println!(
            "{}",
            json!({ "event": "mischief", "round": round, "fakes": [
                fake_state(round).to_hex(),
                fake_state(round + FAR_ROUNDS_PAST[0]).to_hex(),
                fake_state(round + FAR_ROUNDS_PAST[1]).to_hex(),
            ]})
        );
        add(&acted.rounds);
    }
}

/// Who signs for each honest trainer (from their results).
type Known = Arc<Mutex<HashMap<PeerId, PublicKey>>>;

/// Watch the honest trainers' Status; for each round that opens, send the
/// manifest of the first honest trainer's shard 0 of it (its base and
/// shard count) on `opened`, as soon as any of them has cut one.
async fn follow(net: NetHandle, known: Known, opened: tokio::sync::mpsc::Sender<ShardedManifest>) {
    let mut last = 0u64;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let peers: Vec<(PeerId, PublicKey)> =
            known.lock().map(|k| k.iter().map(|(p, k)| (*p, *k)).collect()).unwrap_or_default();
        let mut round = None;
        for (peer, _) in &peers {
            let ask = tokio::time::timeout(Duration::from_secs(2), net.request(*peer, XferRequest::Status));
            if let Ok(Ok(XferResponse::Status(status))) = ask.await {
                if status.round > last {
                    round = Some(status.round);
                    break;
                }
            }
        }
        let Some(round) = round else { continue };
        // A trainer's shard 0 is cut once it has trained: ask each in turn
        // until one has.
        'ask: for _ in 0..50 {
            for (peer, signer) in &peers {
                let leaf = XferRequest::Leaf { round, shard: 0, signer: *signer };
                let ask = tokio::time::timeout(Duration::from_secs(2), net.request(*peer, leaf));
                if let Ok(Ok(XferResponse::Leaf(offer))) = ask.await {
                    last = round;
                    let _ = opened.send(*offer.manifest).await;
                    break 'ask;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Offer every shard of its delta of `honest`'s round (base and shard
/// count as `honest` names them) to every trainer in `to`.
fn offer_shards(
    net: &NetHandle,
    key: &NodeKey,
    spec: &RunSpec,
    honest: &ShardedManifest,
    to: &[PeerId],
    acted: &Acted,
) {
    let round = honest.round;
    let (m, leaves) = manifest(key, spec, (round, honest.base, honest.shards), fake_payload(round));
    let tree = MerkleTree::new(&leaves);
    for (i, leaf) in leaves.iter().enumerate() {
        let offer = ShardOffer {
            round,
            signer: key.public(),
            shards: m.shards,
            leaf: *leaf,
            proof: tree.proof(i),
            manifest: Box::new(m.clone()),
            payload: None,
        };
        for &peer in to {
            let (net, request) = (net.clone(), XferRequest::Offer(offer.clone()));
            tokio::spawn(async move { net.request(peer, request).await });
            add(&acted.offers);
        }
    }
}

/// The newest state each honest trainer trains from (what the flood asks for).
type Targets = Arc<Mutex<HashMap<PeerId, StateId>>>;

/// The parameters blob of `peer`'s state `state`, as `peer` names it.
async fn params_of(net: &NetHandle, peer: PeerId, state: StateId) -> Option<[u8; 32]> {
    match net.request(peer, XferRequest::StateParts { state: state.0 }).await {
        Ok(XferResponse::StateParts { params, .. }) => Some(params),
        _ => None,
    }
}

/// Ask `peer` for table and chunk after chunk of the parameters of its
/// newest state, `in_flight` at once, for as long as the process runs.
async fn flood(
    net: NetHandle,
    peer: PeerId,
    targets: Targets,
    len: u64,
    in_flight: usize,
    acted: Arc<Acted>,
) {
    let chunks = tree::chunk_count(len).max(1);
    let mut asks = tokio::task::JoinSet::new();
    let mut i = 0u64;
    let mut params: Option<(StateId, [u8; 32])> = None;
    loop {
        let state = targets.lock().ok().and_then(|t| t.get(&peer).copied());
        if let Some(state) = state.filter(|s| params.is_none_or(|(p, _)| p != *s)) {
            if let Some(id) = params_of(&net, peer, state).await {
                params = Some((state, id));
            }
        }
        while asks.len() < in_flight {
            let Some((_, id)) = params else { break };
            let kind = BlobKind::State;
            let request = match i % 2 {
                0 => XferRequest::Table { kind, id, len },
                _ => XferRequest::Chunk { kind, id, len, index: (i / 2) % chunks },
            };
            i += 1;
            let net = net.clone();
            asks.spawn(async move { net.request(peer, request).await });
            add(&acted.flood_sent);
        }
        match asks.join_next().await {
            Some(Ok(Ok(XferResponse::Busy))) => add(&acted.flood_busy),
            Some(Ok(Ok(XferResponse::Table(_) | XferResponse::Chunk(_)))) => add(&acted.flood_served),
            Some(Ok(Ok(_))) => {}
            Some(_) => {
                // Refused a connection (banned): try again later, not in a storm.
                add(&acted.flood_failed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            None => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse()?;
    let key = keyfile::load(&args.key).with_context(|| format!("reading the key {}", args.key.display()))?;
    let ticket: Ticket = read_ticket_file(&args.ticket).map_err(anyhow::Error::msg)?;
    let who = Identity { key: key.clone(), ticket: Some(ticket.clone()) };
    let spec = discover_spec(&who, std::slice::from_ref(&args.bootstrap), Duration::from_secs(60)).await?;
    let acted = Arc::new(Acted::default());
    let server = Arc::new(BusyServer {
        status: Mutex::new(PeerStatus { spec: spec.encode(), trainer: true, ..PeerStatus::default() }),
        acted: acted.clone(),
    });
    let mut cfg = NetConfig::new(key.clone(), spec.run_id(), Role::Trainer);
    cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse()?];
    cfg.bootstrap = vec![args.bootstrap.clone()];
    cfg.admission = spec.admission.clone();
    cfg.ticket = Some(ticket.clone());
    // It never waits for the share a node serves one peer.
    cfg.ask_per_peer = args.in_flight.max(1) * 4;
    let (net, mut events) = net::start(cfg, server.clone())?;
    let me = key.public();
    println!(
        "{}",
        json!({ "event": "started", "peer_id": net.local.to_string(), "run": spec.run_id().to_hex() })
    );
    {
        let net = net.clone();
        let bytes = ticket.encode();
        tokio::spawn(async move { publish(&net, TopicKind::Ticket, bytes).await });
    }
    let sybils: Vec<NodeKey> = (0..args.sybils)
        .map(|i| {
            let mut seed = [0x5b; 32];
            seed[..4].copy_from_slice(&i.to_le_bytes());
            NodeKey::from_seed(seed)
        })
        .collect();
    let targets: Targets = Arc::default();
    let known: Known = Arc::default();
    let (opened_tx, mut opened) = tokio::sync::mpsc::channel(4);
    tokio::spawn(follow(net.clone(), known.clone(), opened_tx));
    let mut trainers: HashSet<PeerId> = HashSet::new();
    let mut flooding: HashSet<PeerId> = HashSet::new();
    let mut last_round: Option<u64> = None;
    let mut report = tokio::time::interval(Duration::from_secs(1));
    let len = state_len(&spec);
    loop {
        let ev = tokio::select! {
            ev = events.recv() => match ev {
                Some(ev) => ev,
                None => bail!("the network stopped"),
            },
            _ = report.tick() => {
                println!("{}", acted.report());
                continue;
            }
            Some(honest) = opened.recv() => {
                let to: Vec<PeerId> = trainers.iter().copied().collect();
                offer_shards(&net, &key, &spec, &honest, &to, &acted);
                continue;
            }
        };
        match ev {
            NetEvent::PeerJoined { peer, role } if role.trains() => {
                trainers.insert(peer);
            }
            NetEvent::Gossip { message, .. } => {
                let GossipMessage::ShardResult(m) = *message else { continue };
                if m.signer == me || sybils.iter().any(|s| s.public() == m.signer) {
                    continue;
                }
                if let (Some(p), Ok(mut t)) = (net::peer_id_of(&m.signer), targets.lock()) {
                    t.insert(p, m.base);
                    if let Ok(mut k) = known.lock() {
                        k.insert(p, m.signer);
                    }
                }
                if last_round.is_some_and(|r| m.round <= r) {
                    continue;
                }
                // A round the honest nodes close: it is ours too.
                let round = m.round;
                last_round = Some(round);
                let shards = trainers.len().max(1) as u32;
                if let Ok(mut s) = server.status.lock() {
                    let far = round + FAR_ROUNDS_PAST[1];
                    s.round = far;
                    s.state = Some(fake_state(far).0);
                    s.ticket = Some(ticket.encode());
                    s.backing = FAR_ROUNDS_PAST
                        .iter()
                        .map(|a| StatusBacking {
                            result: result(&key, &spec, round + a).encode(),
                            ticket: Some(ticket.encode()),
                        })
                        .collect();
                }
                let rounds_done = acted.rounds.load(Ordering::Relaxed);
                Round { net: &net, key: &key, spec: &spec, sybils: &sybils, acted: &acted }
                    .mischief(round, m.base, shards)
                    .await;
                if rounds_done + 1 >= args.flood_after {
                    for peer in trainers.iter().filter(|p| flooding.insert(**p)) {
                        let (net, targets, acted) = (net.clone(), targets.clone(), acted.clone());
                        tokio::spawn(flood(net, *peer, targets, len, args.in_flight, acted));
                    }
                }
            }
            _ => {}
        }
    }
}
