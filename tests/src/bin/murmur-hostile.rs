//! murmur-hostile: a hostile node of a ticket run, built from the project's
//! own crates for the multi-process test `tests/tests/network_hostile.rs`.
//!
//! It holds an operator's ticket, so the honest nodes admit it, joins as a
//! trainer, follows the rounds the honest nodes close (their commits on
//! gossip), and every round:
//! - signs with its admitted key commits for rounds far ahead (r + 5 and
//!   r + 1,000,000) and for the current round with nothing included, each
//!   naming a made-up StateId (one per round, so it never equivocates), and
//!   announces a delta whose payload it never serves;
//! - relays Sybil gossip: telemetry and manifests, validly signed by fresh
//!   keys that hold no ticket;
//! - answers every transfer request but Status `Busy`; its Status claims a
//!   state a million rounds ahead, backed by its own far-future commits;
//! - from its `--flood-after`-th round on, floods every honest trainer with
//!   table and chunk requests for its newest state, `--in-flight` at once,
//!   never waiting for the share a node serves one peer.
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
use murmur_node::net::{
    self, ContentServer, GossipMessage, NetConfig, NetEvent, NetHandle, PeerStatus, Role, StatusBacking,
    TopicKind, XferRequest, XferResponse,
};
use murmur_node::runtime::spec::{state_len, tokens_per_delta};
use murmur_node::runtime::startup::{discover_spec, Identity};
use murmur_node::runtime::tickets::read_ticket_file;
use murmur_node::store::keyfile;
use murmur_node::store::tree::{self, BlobKind};
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::{
    NodeKey, PayloadHash, PublicKey, RoundCommit, RunSpec, Signature, StateId, Telemetry, Ticket,
};
use murmur_tests::signed_manifest;
use serde_json::json;

/// How far ahead its far-future commits are.
const AHEAD: [u64; 2] = [5, 1_000_000];

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
    commits: AtomicU64,
    far_commits: AtomicU64,
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
            "commits": g(&self.commits),
            "far_commits": g(&self.far_commits),
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

fn commit(key: &NodeKey, spec: &RunSpec, round: u64, base: StateId) -> RoundCommit {
    RoundCommit {
        run: spec.run_id(),
        round,
        base,
        included: Vec::new(),
        new_state: fake_state(round),
        signer: PublicKey::default(),
        signature: Signature::default(),
    }
    .sign(key)
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

/// Everything it does in round `round`, whose base the honest nodes hold.
struct Round<'a> {
    net: &'a NetHandle,
    key: &'a NodeKey,
    spec: &'a RunSpec,
    sybils: &'a [NodeKey],
    acted: &'a Acted,
}

impl Round<'_> {
    async fn mischief(&self, round: u64, base: StateId) {
        let (key, spec, acted) = (self.key, self.spec, self.acted);
        if publish(self.net, TopicKind::Commit, commit(key, spec, round, base).encode()).await {
            add(&acted.commits);
        }
        for ahead in AHEAD {
            let far = commit(key, spec, round + ahead, fake_state(round + ahead - 1));
            if publish(self.net, TopicKind::Commit, far.encode()).await {
                add(&acted.far_commits);
            }
        }
        let m = signed_manifest(key, spec, round, base, fake_payload(round), tokens_per_delta(spec));
        if publish(self.net, TopicKind::Manifest, m.encode()).await {
            add(&acted.manifests);
        }
        for (i, sybil) in self.sybils.iter().enumerate() {
            let hash = payload_hash_of(&[fake_payload(round).0.as_slice(), &i.to_le_bytes()].concat());
            let messages = [
                (TopicKind::Telemetry, telemetry(sybil, spec, round, fake_state(round)).encode()),
                (
                    TopicKind::Manifest,
                    signed_manifest(sybil, spec, round, base, hash, tokens_per_delta(spec)).encode(),
                ),
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
                fake_state(round + AHEAD[0]).to_hex(),
                fake_state(round + AHEAD[1]).to_hex(),
            ]})
        );
        add(&acted.rounds);
    }
}

/// The newest state each honest trainer committed to (what the flood asks for).
type Targets = Arc<Mutex<HashMap<PeerId, StateId>>>;

/// Ask `peer` for table and chunk after chunk of its newest state,
/// `in_flight` at once, for as long as the process runs.
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
    loop {
        while asks.len() < in_flight {
            let Some(state) = targets.lock().ok().and_then(|t| t.get(&peer).copied()) else { break };
            let (kind, id) = (BlobKind::State, state.0);
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
        };
        match ev {
            NetEvent::PeerJoined { peer, role } if role.trains() => {
                trainers.insert(peer);
            }
            NetEvent::Gossip { message, .. } => {
                let GossipMessage::Commit(c) = *message else { continue };
                if c.signer == me || sybils.iter().any(|s| s.public() == c.signer) {
                    continue;
                }
                if let (Some(p), Ok(mut t)) = (net::peer_id_of(&c.signer), targets.lock()) {
                    t.insert(p, c.new_state);
                }
                if last_round.is_some_and(|r| c.round <= r) {
                    continue;
                }
                // A round the honest nodes closed: the next one is ours too.
                last_round = Some(c.round);
                let round = c.round + 1;
                if let Ok(mut s) = server.status.lock() {
                    let far = round + AHEAD[1];
                    s.round = far;
                    s.state = Some(fake_state(far).0);
                    s.ticket = Some(ticket.encode());
                    s.backing = AHEAD
                        .iter()
                        .map(|a| StatusBacking {
                            commit: commit(&key, &spec, round + a, fake_state(round + a - 1)).encode(),
                            ticket: Some(ticket.encode()),
                        })
                        .collect();
                }
                let rounds_done = acted.rounds.load(Ordering::Relaxed);
                Round { net: &net, key: &key, spec: &spec, sybils: &sybils, acted: &acted }
                    .mischief(round, c.new_state)
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
