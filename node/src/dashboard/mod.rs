//! The dashboard: a libp2p peer that trains nothing. It joins a run through
//! a bootstrap server as an observer, validates the run's gossip like any
//! node (telemetry, manifests, commits), asks the trainers it meets for
//! their status, fetches the latest committed state now and then to sample
//! text from it (decoded with the run's dataset tokenizer, fetched from
//! peers), and serves a live local web page.
//!
//! - `board`: what is known of the run, and the page's JSON snapshot.
//! - `http`: the local web server (page, snapshot, Server-Sent Events).
//! - `host`: which Host a request may name (the guard against DNS rebinding).
//! - `sampler`: text from a committed state.
//! - `assets/`: the page (HTML, JS, CSS), compiled in.

pub mod board;
pub mod host;
pub mod http;
pub mod sampler;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::{Multiaddr, PeerId};
use murmur_protocol::{DataRef, PublicKey, RunSpec, StateId};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::data::{named_tokenizer, Tokenizer};
use crate::net::{
    self, peer_of, GossipMessage, NetConfig, NetEvent, NetHandle, Role, XferRequest, XferResponse,
};
use crate::runtime::committee::sync::fetch_committed_state;
use crate::runtime::report::Reporter;
use crate::runtime::startup::{discover_spec, Identity, Nothing};
use crate::runtime::RuntimeError;
use board::{Board, Sample};
use sampler::Sampler;

/// How often the page's snapshot is rebuilt (when something changed).
const REFRESH: Duration = Duration::from_millis(500);
/// The shortest gap between two text samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// How `murmur dashboard` runs.
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    pub bootstrap: Vec<Multiaddr>,
    /// Where the web page is served.
    pub http: SocketAddr,
    pub mdns: bool,
    pub json: bool,
    /// Who the dashboard joins as (a ticket run answers admitted keys only).
    pub who: Identity,
}

fn peer_name(k: &PublicKey) -> String {
    net::peer_id_of(k).map(|p| p.to_string()).unwrap_or_else(|| murmur_protocol::hash::hex(&k.0))
}

/// Results of work the dashboard started.
enum WorkDone {
    Sample(Result<Sample, String>),
    /// The tokenizer of the run's dataset, fetched from peers.
    Tokenizer(Result<Arc<dyn Tokenizer>, String>),
    Status {
        peer: PeerId,
        round: u64,
        state: Option<[u8; 32]>,
    },
}

/// Run the dashboard until the process is stopped.
pub async fn run_dashboard(opts: DashboardOptions) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let now_ms = || started.elapsed().as_millis() as u64;
    let out = Reporter { json: opts.json };
    let spec = discover_spec(&opts.who, &opts.bootstrap, Duration::from_secs(60)).await?;
    let dataset = match spec.data_ref() {
        Ok(DataRef::Dataset { id, manifest_len }) => Some((id, manifest_len)),
        _ => None,
    };
    // A dataset's tokenizer comes from peers once the network is up.
    let mut sampler = match (dataset, Sampler::new(&spec, None)) {
        (Some(_), _) => None,
        (None, Ok(s)) => Some(Arc::new(s)),
        (None, Err(e)) => {
            tracing::warn!("no text samples: {e}");
            None
        }
    };
    let mut board = Board::new(spec.clone(), sampler.as_ref().and_then(|s| s.entropy_floor), peer_name);
    for addr in &opts.bootstrap {
        if let Some(p) = peer_of(addr) {
            board.set_role(p.to_string(), "bootstrap");
        }
    }
    if let Some(addr) = opts.bootstrap.first() {
        board.set_bootstrap(addr.to_string());
    }
    let mut cfg = NetConfig::new(opts.who.key.clone(), spec.run_id(), Role::Observer);
    cfg.bootstrap = opts.bootstrap.clone();
    cfg.mdns = opts.mdns;
    cfg.admission = spec.admission.clone();
    cfg.ticket = opts.who.ticket.clone();
    let (net, mut events) = net::start(cfg, Arc::new(Nothing))?;
    board.set_role(net.local.to_string(), "dashboard");

    let listener = tokio::net::TcpListener::bind(opts.http)
        .await
        .map_err(|e| RuntimeError::Config(format!("--http {}: {e}", opts.http)))?;
    let addr = listener.local_addr().map_err(|e| RuntimeError::Config(e.to_string()))?;
    let url = format!("http://{addr}/");
    out.event(
        "dashboard",
        json!({ "url": url, "run": spec.run_id().to_hex(), "peer_id": net.local.to_string() }),
    );
    let (snap_tx, snap_rx) = watch::channel(Arc::new(board.snapshot(now_ms()).to_string()));
    tokio::spawn(http::serve(listener, snap_rx));

    let (tx, mut rx) = mpsc::unbounded_channel::<WorkDone>();
    if let Some((id, manifest_len)) = dataset {
        let (net, tx) = (net.clone(), tx.clone());
        tokio::spawn(async move {
            // Until some peer serves it (each try waits a minute for one).
            loop {
                let found =
                    crate::runtime::dataset::dataset_tokenizer_from_peers(&net, id, manifest_len).await;
                let tokenizer = found.map_err(|e| e.to_string()).and_then(|(named, json)| {
                    named_tokenizer(named, json.as_deref(), &format!("of dataset {id}"))
                        .map_err(|e| e.to_string())
                });
                let fetched = tokenizer.is_ok();
                if tx.send(WorkDone::Tokenizer(tokenizer)).is_err() || fetched {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        });
    }
    let mut refresh = tokio::time::interval(REFRESH);
    let mut dirty = false;
    let mut reported_round: Option<u64> = None;
    let mut last_sample: Option<(Instant, StateId)> = None;
    let mut sampling = false;
    loop {
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { break };
                dirty = true;
                match ev {
                    NetEvent::Gossip { message, .. } => match *message {
                        GossipMessage::Telemetry(t) => board.on_telemetry(t, now_ms()),
                        GossipMessage::ShardResult(r) => board.on_result(&r, now_ms()),
                        GossipMessage::Ticket(_) | GossipMessage::ShardedManifest(_) | GossipMessage::FraudProof(_) => {}
                    },
                    NetEvent::Rejected { peer, reason } => {
                        board.on_own_rejection(&peer.to_string(), &reason.name(), now_ms())
                    }
                    NetEvent::PeerJoined { peer, role } if role.trains() => {
                        ask_status(net.clone(), peer, tx.clone());
                    }
                    NetEvent::PeerJoined { peer, role } => board.set_role(peer.to_string(), role.name()),
                    _ => {}
                }
            }
            Some(msg) = rx.recv() => {
                dirty = true;
                match msg {
                    WorkDone::Sample(Ok(s)) => {
                        sampling = false;
                        board.on_sample(s);
                    }
                    WorkDone::Sample(Err(e)) => {
                        sampling = false;
                        tracing::debug!("sampling: {e}");
                    }
                    WorkDone::Tokenizer(found) => match found.and_then(|t| Sampler::new(&spec, Some(t))) {
                        Ok(s) => sampler = Some(Arc::new(s)),
                        Err(e) => tracing::warn!("no text samples: {e}"),
                    },
                    WorkDone::Status { peer, round, state } => {
                        tracing::debug!(%peer, round, state = ?state.map(|s| StateId(s).to_hex()), "trainer status");
                    }
                }
            }
            _ = refresh.tick() => {
                if let Some((round, state, committers)) = board.latest_commit() {
                    if reported_round.is_none_or(|r| round > r) {
                        reported_round = Some(round);
                        out.event("round", json!({
                            "round": round,
                            "state_id": state.to_hex(),
                            "committers": committers.len(),
                        }));
                    }
                    let due = last_sample.is_none_or(|(t, s)| s != state && t.elapsed() >= SAMPLE_EVERY);
                    if let (Some(sampler), true, false) = (&sampler, due, sampling) {
                        sampling = true;
                        last_sample = Some((Instant::now(), state));
                        let peers: Vec<PeerId> = committers.iter().filter_map(net::peer_id_of).collect();
                        spawn_sample(net.clone(), spec.clone(), sampler.clone(), round, state, peers, tx.clone());
                    }
                }
                if dirty {
                    dirty = false;
                    let _ = snap_tx.send(Arc::new(board.snapshot(now_ms()).to_string()));
                }
            }
        }
    }
    Ok(())
}

/// Ask a trainer where it stands (the answer is logged and counted).
fn ask_status(net: NetHandle, peer: PeerId, tx: mpsc::UnboundedSender<WorkDone>) {
    tokio::spawn(async move {
        let ask = tokio::time::timeout(Duration::from_secs(5), net.request(peer, XferRequest::Status));
        if let Ok(Ok(XferResponse::Status(s))) = ask.await {
            let _ = tx.send(WorkDone::Status { peer, round: s.round, state: s.state });
        }
    });
}

/// Fetch the committed state of `round` (the state that opens the next
/// round) from its committers, checked against its StateId, and sample text.
fn spawn_sample(
    net: NetHandle,
    spec: RunSpec,
    sampler: Arc<Sampler>,
    round: u64,
    id: StateId,
    peers: Vec<PeerId>,
    tx: mpsc::UnboundedSender<WorkDone>,
) {
    tokio::spawn(async move {
        let result = match fetch_committed_state(&net, &spec, id, &peers).await {
            Err(e) => Err(e),
            Ok(state) => tokio::task::spawn_blocking(move || {
                let text = sampler.sample(&state);
                Ok(Sample { round, state: id, prompt: sampler.prompt.clone(), text })
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string())),
        };
        let _ = tx.send(WorkDone::Sample(result));
    });
}
