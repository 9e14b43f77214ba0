//! Joining a run: learn the RunSpec from a bootstrap server, reopen the
//! node's last consistent position from its store (or make genesis), and
//! cold start — ask the peers where the run stands and fetch the latest
//! committed state from several of them at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::{Multiaddr, PeerId};
use murmur_protocol::{DeltaManifest, NodeKey, RunId, RunSpec, StateId, TrainingState};
use serde_json::json;
use tokio::sync::mpsc;

use super::fetching::fetch_state;
use super::report::Reporter;
use super::spec::genesis;
use super::RuntimeError;
use crate::net::{
    self, peer_of, ContentServer, NetConfig, NetEvent, NetHandle, PeerStatus, Role, XferRequest, XferResponse,
};
use crate::store::{BlobKind, Position, Store};

/// A server with nothing to serve (the short-lived probe swarm, observers).
pub struct Nothing;

impl ContentServer for Nothing {
    fn status(&self) -> PeerStatus {
        PeerStatus { spec: Vec::new(), round: 0, state: None, trainer: false }
    }
    fn serve(&self, _: &XferRequest) -> XferResponse {
        XferResponse::NotFound
    }
}

/// Ask the bootstrap servers for the run they host (retrying until `wait`).
pub async fn discover_spec(
    key: &NodeKey,
    bootstrap: &[Multiaddr],
    wait: Duration,
) -> Result<RunSpec, RuntimeError> {
    let peers: Vec<PeerId> = bootstrap.iter().filter_map(peer_of).collect();
    if peers.is_empty() {
        return Err(RuntimeError::Config("--bootstrap addresses must end with /p2p/<peer id>".into()));
    }
    let mut cfg = NetConfig::new(key.clone(), RunId([0; 32]), Role::Observer);
    cfg.bootstrap = bootstrap.to_vec();
    let (probe, _events) = net::start(cfg, Arc::new(Nothing))?;
    let deadline = Instant::now() + wait;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        for peer in &peers {
            let ask = tokio::time::timeout(Duration::from_secs(5), probe.request(*peer, XferRequest::Status));
            match ask.await {
                Ok(Ok(XferResponse::Status(s))) => match RunSpec::decode(&s.spec) {
                    Ok(spec) => return Ok(spec),
                    Err(e) => last = format!("bootstrap sent an invalid run spec: {e}"),
                },
                Ok(Ok(other)) => last = format!("unexpected answer {other:?}"),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "timed out".into(),
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(RuntimeError::Config(format!("could not get the run spec from the bootstrap server: {last}")))
}

/// Our manifest signed before a restart, when it is for `mine`'s round and
/// base and its payload is still stored.
pub fn signed_manifest_for(store: &Store, spec: &RunSpec, mine: &TrainingState) -> Option<DeltaManifest> {
    let bytes = store.meta.signed_manifest(&spec.run_id()).ok()??;
    let m = DeltaManifest::decode(&bytes).ok()?;
    let fits = m.run == spec.run_id()
        && m.round == mine.round
        && m.base == mine.id()
        && m.verify().is_ok()
        && store.blobs.contains(BlobKind::Delta, &m.payload_hash.0);
    fits.then_some(m)
}

/// The node's last consistent state in this run, or genesis (stored).
pub fn load_position(store: &Store, spec: &RunSpec) -> Result<(TrainingState, bool), RuntimeError> {
    let run = spec.run_id();
    let n = spec.model.param_count as usize;
    if let Some(p) = store.meta.position(&run)? {
        match store.blobs.get(BlobKind::State, &p.state.0).map(|b| TrainingState::decode(&b, n)) {
            Ok(Ok(s)) if s.round == p.round && s.run == run => return Ok((s, true)),
            _ => tracing::warn!("stored position round {} is unreadable; starting from genesis", p.round),
        }
    }
    let g = genesis(spec)?;
    let id = store.blobs.put(BlobKind::State, &g.encode())?;
    store.meta.set_position(&run, Position { round: 0, state: StateId(id) })?;
    Ok((g, false))
}

/// Wait briefly for peers, ask the trainers among them where the run
/// stands, and fetch a newer state than `mine` from all its holders.
/// Returns the state to start from and the membership events seen.
pub async fn cold_start(
    net: &NetHandle,
    events: &mut mpsc::Receiver<NetEvent>,
    store: &Arc<Store>,
    spec: &RunSpec,
    mine: TrainingState,
    wait: Duration,
    out: Reporter,
) -> (TrainingState, Vec<NetEvent>) {
    let t0 = Instant::now();
    let mut seen = Vec::new();
    let mut trainers: Vec<PeerId> = Vec::new();
    let mut last_join = t0;
    let settle = Duration::from_millis(1500);
    while t0.elapsed() < wait && (trainers.is_empty() || last_join.elapsed() <= settle) {
        match tokio::time::timeout(Duration::from_millis(200), events.recv()).await {
            Ok(Some(ev)) => {
                match &ev {
                    NetEvent::Listening(addr) => out.event("listening", json!({ "addr": addr.to_string() })),
                    NetEvent::PeerJoined { peer, role } if role.trains() => {
                        trainers.push(*peer);
                        last_join = Instant::now();
                    }
                    NetEvent::PeerLeft { peer } => trainers.retain(|p| p != peer),
                    _ => {}
                }
                if matches!(ev, NetEvent::PeerJoined { .. } | NetEvent::PeerLeft { .. }) {
                    seen.push(ev);
                }
            }
            Ok(None) => break,
            Err(_) => {}
        }
    }
    let spec_bytes = spec.encode();
    let asks =
        trainers.iter().map(|p| {
            let net = net.clone();
            let p = *p;
            async move {
                (p, tokio::time::timeout(Duration::from_secs(5), net.request(p, XferRequest::Status)).await)
            }
        });
    let mut holders: HashMap<(u64, [u8; 32]), Vec<PeerId>> = HashMap::new();
    for (peer, answer) in futures::future::join_all(asks).await {
        if let Ok(Ok(XferResponse::Status(s))) = answer {
            if let (true, true, Some(state)) = (s.trainer, s.spec == spec_bytes, s.state) {
                holders.entry((s.round, state)).or_default().push(peer);
            }
        }
    }
    let mine_id = mine.id();
    let mine_votes = holders.get(&(mine.round, mine_id.0)).map_or(0, Vec::len);
    let best =
        holders.iter().max_by_key(|((round, _), peers)| (*round, peers.len())).map(|(k, v)| (*k, v.clone()));
    let Some(((round, state), peers)) = best else { return (mine, seen) };
    let newer = round > mine.round || (round == mine.round && state != mine_id.0 && peers.len() > mine_votes);
    if !newer {
        return (mine, seen);
    }
    let fetch_t0 = Instant::now();
    match fetch_state(net, store, spec, StateId(state), round, &peers).await {
        Ok(s) => {
            out.event(
                "synced",
                json!({
                    "round": round,
                    "state_id": StateId(state).to_hex(),
                    "from_peers": peers.len(),
                    "fetch_secs": fetch_t0.elapsed().as_secs_f64(),
                }),
            );
            (s, seen)
        }
        Err(e) => {
            tracing::warn!("cold start: fetching state of round {round} failed: {e}");
            (mine, seen)
        }
    }
}
