//! Joining a run: learn the RunSpec from a bootstrap server, reopen the
//! node's last consistent position from its store (or make genesis, or
//! fetch it when the run starts from a given model), prune what a restart
//! left, and meet the first peers; and, for `murmur export --bootstrap`,
//! gather the peers' statuses and the signed results they offer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::{Multiaddr, PeerId};
use murmur_protocol::{AdmissionPolicy, Backed, NodeKey, RunId, RunSpec, StateId, Ticket, TrainingState};
use serde_json::json;
use tokio::sync::mpsc;

use super::backing::Evidence;
use super::report::Reporter;
use super::spec::{check_genesis, genesis, state_len};
use super::RuntimeError;
use crate::net::{
    self, peer_id_of, peer_of, public_key_of, ContentServer, NetConfig, NetEvent, NetHandle, PeerStatus,
    Role, XferRequest, XferResponse,
};
use crate::store::{BlobKind, Position, Store};

/// A server with nothing to serve (the short-lived probe swarm, observers).
pub struct Nothing;

impl ContentServer for Nothing {
    fn status(&self, _: PeerId) -> PeerStatus {
        PeerStatus::default()
    }
    fn serve(&self, _: PeerId, _: &XferRequest) -> XferResponse {
        XferResponse::NotFound
    }
}

/// Who a node or observer is to the run: its key, and the ticket it
/// presents where the run admits by ticket.
#[derive(Clone)]
pub struct Identity {
    pub key: NodeKey,
    pub ticket: Option<Ticket>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("key", &self.key.public()).field("ticket", &self.ticket).finish()
    }
}

/// A short-lived observer swarm of run `run` (policy `admission`) that
/// dials `bootstrap` and presents `who`'s ticket where it is refused.
fn probe(
    who: &Identity,
    run: RunId,
    admission: AdmissionPolicy,
    bootstrap: &[Multiaddr],
) -> Result<NetHandle, RuntimeError> {
    let mut cfg = NetConfig::new(who.key.clone(), run, Role::Observer);
    cfg.bootstrap = bootstrap.to_vec();
    cfg.admission = admission;
    cfg.ticket = who.ticket.clone();
    let (probe, _events) = net::start(cfg, Arc::new(Nothing))?;
    Ok(probe)
}

/// Ask the bootstrap servers for the run they host (retrying until `wait`).
/// A bootstrap server of a ticket run answers only an admitted key: one
/// of its operators, or `who` with its ticket.
pub async fn discover_spec(
    who: &Identity,
    bootstrap: &[Multiaddr],
    wait: Duration,
) -> Result<RunSpec, RuntimeError> {
    let peers: Vec<PeerId> = bootstrap.iter().filter_map(peer_of).collect();
    if peers.is_empty() {
        return Err(RuntimeError::Config("--bootstrap addresses must end with /p2p/<peer id>".into()));
    }
    let probe = probe(who, RunId([0; 32]), AdmissionPolicy::Open, bootstrap)?;
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
                Ok(Ok(XferResponse::NotAdmitted)) => {
                    return Err(RuntimeError::Config(format!(
                        "the bootstrap server's run admits only holders of an operator's ticket, and key {} {}; ask an operator of the run for a ticket for this key and pass it with --ticket FILE (murmur dashboard and murmur export also take --key FILE, the key the ticket names)",
                        who.key.public(),
                        match &who.ticket {
                            Some(_) => "presented a ticket it does not accept (for another run or key, expired, or not signed by an operator)",
                            None => "has none",
                        }
                    )))
                }
                Ok(Ok(other)) => last = format!("unexpected answer {other:?}"),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = "timed out".into(),
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(RuntimeError::Config(format!("could not get the run spec from the bootstrap server: {last}")))
}

/// Fetch the genesis state of a run that starts from a given model from
/// the bootstrap servers (which hold it), check it against the spec's
/// ParamsId, and store it as the node's position at round 0. Nothing is
/// stored unless the check passes.
pub async fn fetch_genesis(
    who: &Identity,
    bootstrap: &[Multiaddr],
    store: &Store,
    spec: &RunSpec,
    wait: Duration,
) -> Result<(), RuntimeError> {
    let Some(params) = spec.genesis_params else { return Ok(()) };
    let peers: Vec<PeerId> = bootstrap.iter().filter_map(peer_of).collect();
    if peers.is_empty() {
        return Err(super::spec::SpecError::GenesisNotHeld(params).into());
    }
    let probe = probe(who, spec.run_id(), spec.admission.clone(), bootstrap)?;
    let (len, n) = (state_len(spec), spec.model.param_count as usize);
    let deadline = Instant::now() + wait;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        for peer in &peers {
            let ask = tokio::time::timeout(Duration::from_secs(5), probe.request(*peer, XferRequest::Status));
            let id = match ask.await {
                Ok(Ok(XferResponse::Status(PeerStatus { round: 0, state: Some(id), .. }))) => id,
                Ok(Ok(other)) => {
                    last = format!("it does not serve a genesis state ({other:?})");
                    continue;
                }
                Ok(Err(e)) => {
                    last = e.to_string();
                    continue;
                }
                Err(_) => {
                    last = "timed out".into();
                    continue;
                }
            };
            let fetched = match net::fetch_blob(&probe, BlobKind::State, id, len, len, &[*peer]).await {
                Ok(f) => f.bytes,
                Err(e) => {
                    last = format!("fetching the genesis state: {e}");
                    continue;
                }
            };
            let checked = TrainingState::decode(&fetched, n)
                .map_err(|e| format!("the genesis state does not decode: {e}"))
                .and_then(|s| check_genesis(spec, &s).map_err(|e| e.to_string()).map(|()| s));
            match checked {
                Ok(s) => {
                    let stored = store.blobs.put(BlobKind::State, &fetched)?;
                    store.meta.set_position(&spec.run_id(), Position { round: 0, state: StateId(stored) })?;
                    debug_assert_eq!(StateId(stored), s.id());
                    return Ok(());
                }
                Err(e) => {
                    last = format!("bootstrap server {peer} sent a state that is not the run's genesis: {e}")
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(RuntimeError::Config(format!(
        "could not get this run's genesis state (parameters {params}) from the bootstrap server: {last}"
    )))
}

/// After a restart at `round` on `state`: the delta blobs kept are the
/// shards of the delta signed for that round (its `SignedRecord`'s leaves),
/// which are sent again; every other delta and every state but `state` go.
pub fn prune_after_restart(
    store: &Store,
    run: &RunId,
    round: u64,
    state: StateId,
) -> Result<(), crate::store::StoreError> {
    let mut keep: Vec<[u8; 32]> = Vec::new();
    let record = store.meta.signed_record(run)?.map(|b| murmur_protocol::committee::SignedRecord::decode(&b));
    if let Some(Ok(r)) = record.filter(|r| r.as_ref().is_ok_and(|r| r.round == round)) {
        keep.extend(r.leaves.iter().map(|l| l.payload_hash.0));
    }
    store.blobs.retain(BlobKind::Delta, &keep)?;
    store.blobs.retain(BlobKind::State, &[state.0])?;
    Ok(())
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

/// What a joiner learnt from the trainers it found.
pub struct Gathered {
    pub trainers: Vec<PeerId>,
    /// The (round, state) each trainer's status claims, with who claims it.
    pub claims: HashMap<(u64, [u8; 32]), Vec<PeerId>>,
    /// The signed commits and tickets their statuses offered.
    pub evidence: Evidence,
    /// Membership events seen meanwhile.
    pub seen: Vec<NetEvent>,
}

/// Wait briefly for peers (at most `wait`, and 1.5 s after the last
/// trainer joined) and ask the trainers among them, at once, for their
/// status in `spec`'s run.
pub async fn gather(
    net: &NetHandle,
    events: &mut mpsc::Receiver<NetEvent>,
    spec: &RunSpec,
    wait: Duration,
    out: Reporter,
) -> Gathered {
    let (trainers, seen) = wait_for_trainers(events, wait, out).await;
    let (claims, evidence) = ask_statuses(net, &trainers, spec).await;
    Gathered { trainers, claims, evidence, seen }
}

/// Wait briefly for peers, as `gather` does; the membership events seen
/// meanwhile, for the event loop to replay.
pub async fn meet_peers(
    events: &mut mpsc::Receiver<NetEvent>,
    wait: Duration,
    out: Reporter,
) -> Vec<NetEvent> {
    wait_for_trainers(events, wait, out).await.1
}

/// The trainers that joined within `wait` (and 1.5 s after the last), and
/// the membership events seen meanwhile.
async fn wait_for_trainers(
    events: &mut mpsc::Receiver<NetEvent>,
    wait: Duration,
    out: Reporter,
) -> (Vec<PeerId>, Vec<NetEvent>) {
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
    (trainers, seen)
}

/// Ask `trainers`, at once, for their status in `spec`'s run: the (round,
/// state) each claims, and the commitments and tickets they offer.
pub async fn ask_statuses(
    net: &NetHandle,
    trainers: &[PeerId],
    spec: &RunSpec,
) -> (HashMap<(u64, [u8; 32]), Vec<PeerId>>, Evidence) {
    let spec_bytes = spec.encode();
    let asks =
        trainers.iter().map(|p| {
            let net = net.clone();
            let p = *p;
            async move {
                (p, tokio::time::timeout(Duration::from_secs(5), net.request(p, XferRequest::Status)).await)
            }
        });
    let mut claims: HashMap<(u64, [u8; 32]), Vec<PeerId>> = HashMap::new();
    let mut evidence = Evidence::default();
    for (peer, answer) in futures::future::join_all(asks).await {
        if let Ok(Ok(XferResponse::Status(s))) = answer {
            if s.trainer && s.spec == spec_bytes {
                if let Some(k) = public_key_of(&peer) {
                    evidence.add_status(k, &s);
                }
                if let Some(state) = s.state {
                    claims.entry((s.round, state)).or_default().push(peer);
                }
            }
        }
    }
    (claims, evidence)
}

impl Gathered {
    /// Who to fetch backed state `b` from: those who claim it, then its
    /// committers, then every trainer (a state is content-addressed, so any
    /// server can only waste time).
    pub fn holders_of(&self, b: &Backed) -> Vec<PeerId> {
        let mut peers: Vec<PeerId> = self.claims.get(&(b.round, b.state.0)).cloned().unwrap_or_default();
        let committers = b.committers.iter().filter_map(peer_id_of).filter(|p| self.trainers.contains(p));
        for p in committers.chain(self.trainers.iter().copied()) {
            if !peers.contains(&p) {
                peers.push(p);
            }
        }
        peers
    }
}

#[cfg(test)]
mod prune_tests {
    use super::*;
    use murmur_protocol::committee::{ShardLeaf, SignedRecord};
    use murmur_protocol::PayloadHash;

    #[test]
    fn a_restart_keeps_the_shards_of_the_committee_delta_it_signed_for_its_round() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let run = RunId([3; 32]);
        let signed = store.blobs.put(BlobKind::Delta, b"our shard").expect("put");
        let other = store.blobs.put(BlobKind::Delta, b"someone else's").expect("put");
        let leaf = ShardLeaf { shard: 0, payload_hash: PayloadHash(signed), payload_len: 9, norm: 1.0 };
        let key = murmur_protocol::NodeKey::from_seed([4; 32]);
        let manifest = murmur_protocol::committee::ShardedManifest {
            run,
            round: 7,
            base: StateId([5; 32]),
            signer: key.public(),
            tokens: 1,
            train_loss: 1.0,
            codec: murmur_protocol::Codec::F32,
            element_count: 2,
            shards: 1,
            norm: 1.0,
            root: murmur_protocol::committee::merkle_root(&[leaf]),
            signature: murmur_protocol::Signature([0; 64]),
        }
        .sign(&key);
        let record =
            SignedRecord { manifest: Some(manifest), leaves: vec![leaf], ..SignedRecord::of_round(7) };
        store.meta.set_signed_record(&run, &record.encode()).expect("record");
        prune_after_restart(&store, &run, 7, StateId([9; 32])).expect("prune");
        assert!(store.blobs.contains(BlobKind::Delta, &signed), "the recorded shard stays");
        assert!(!store.blobs.contains(BlobKind::Delta, &other));
        // Resumed at a later round, the record binds nothing: its shards go.
        prune_after_restart(&store, &run, 8, StateId([9; 32])).expect("prune");
        assert!(!store.blobs.contains(BlobKind::Delta, &signed));
    }
}
