//! The node's event loop: drives the round state machine with the trainer
//! thread and the network. Net events and job results become machine
//! events; machine actions become jobs, fetches, gossip and storage.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::PeerId;
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::telemetry;
use murmur_protocol::{
    aggregate, decode_delta, outer_step, AcceptedDelta, Action, DeltaInput, ErrorFeedback, Event,
    PayloadFault, PayloadHash, PeerLink, Phase, PublicKey, RejectionCount, RoundMachine, RunSpec, Signature,
    StateId, Telemetry, TrainingState,
};
use serde_json::json;
use tokio::sync::mpsc;

use super::report::Reporter;
use super::server::{ServedStatus, StoreServer};
use super::startup::fetch_state;
use super::trainer::{Job, JobDone, TrainerHandle};
use crate::net::{
    fetch_blob, peer_id_of, public_key_of, GossipMessage, NetEvent, NetHandle, NetRejection, TopicKind,
};
use crate::store::{BlobKind, Position, Store};

/// How often a node reports between round closes.
const TELEMETRY_EVERY: Duration = Duration::from_secs(5);
/// The shortest gap between two reports (the bounded rate).
const TELEMETRY_MIN_GAP: Duration = Duration::from_secs(2);

/// `s` cut to at most `max` bytes on a character boundary.
fn truncate_utf8(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Results of work the loop started.
enum Internal {
    Payload { hash: PayloadHash, from: PublicKey, fault: Option<Option<PayloadFault>> },
    State { round: u64, id: StateId, result: Result<TrainingState, String> },
    Aggregated { round: u64, result: Result<(Vec<PayloadHash>, TrainingState), String> },
}

/// Everything the loop owns.
pub struct Node {
    pub spec: RunSpec,
    pub store: Arc<Store>,
    pub net: NetHandle,
    pub server: Arc<StoreServer>,
    pub trainer: TrainerHandle,
    pub machine: RoundMachine,
    pub state: Arc<TrainingState>,
    pub out: Reporter,
    pub started: Instant,
    pub feedback: ErrorFeedback,
    pub key: murmur_protocol::NodeKey,
    pub reset_moments: bool,
    /// Prometheus metrics (switched off unless `--metrics` is given).
    pub metrics: crate::metrics::NodeMetrics,
    trainers: HashSet<PeerId>,
    holders: HashMap<PayloadHash, Vec<PeerId>>,
    pending_reports: HashMap<u64, serde_json::Value>,
    fetching_state: Option<StateId>,
    train_secs: f64,
    first_train: Option<Instant>,
    contributed: bool,
    last_bytes_sent: u64,
    last_train_loss: f32,
    /// Tokens trained since start (for tokens/s).
    train_tokens: u64,
    /// When telemetry was last published, for which round, with which val loss.
    last_telemetry: Option<Instant>,
    telemetry_round: u64,
    last_val_loss: Option<f32>,
    /// Signer of each delta offered to aggregation in the current round.
    offered: HashMap<PayloadHash, PublicKey>,
    /// Delta blobs stored, by the round they belong to (for garbage collection).
    deltas_by_round: std::collections::BTreeMap<u64, Vec<PayloadHash>>,
    /// States stored since start, oldest first (the newest few are kept).
    recent_states: std::collections::VecDeque<StateId>,
    tx: mpsc::UnboundedSender<Internal>,
    rx: mpsc::UnboundedReceiver<Internal>,
}

impl Node {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: RunSpec,
        key: murmur_protocol::NodeKey,
        store: Arc<Store>,
        net: NetHandle,
        server: Arc<StoreServer>,
        trainer: TrainerHandle,
        state: TrainingState,
        out: Reporter,
        started: Instant,
    ) -> Self {
        let now = started.elapsed().as_millis() as u64;
        let cfg = murmur_protocol::RoundConfig::from_spec(&spec);
        let machine = RoundMachine::new(cfg, key.clone(), state.round, state.id(), now);
        let (tx, rx) = mpsc::unbounded_channel();
        let n = spec.model.param_count as usize;
        Self {
            spec,
            store,
            net,
            server,
            trainer,
            machine,
            state: Arc::new(state),
            out,
            started,
            feedback: ErrorFeedback::new(n),
            key,
            reset_moments: false,
            metrics: Default::default(),
            trainers: HashSet::new(),
            holders: HashMap::new(),
            pending_reports: HashMap::new(),
            fetching_state: None,
            train_secs: 0.0,
            first_train: None,
            contributed: false,
            last_bytes_sent: 0,
            last_train_loss: f32::NAN,
            train_tokens: 0,
            last_telemetry: None,
            telemetry_round: 0,
            last_val_loss: None,
            offered: HashMap::new(),
            deltas_by_round: Default::default(),
            recent_states: Default::default(),
            tx,
            rx,
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn state_id(&self) -> StateId {
        self.state.id()
    }

    /// Run until the network stops.
    pub async fn run(
        mut self,
        mut net_events: mpsc::Receiver<NetEvent>,
        mut jobs: mpsc::UnboundedReceiver<JobDone>,
        replay: Vec<NetEvent>,
    ) {
        for ev in replay {
            self.on_net(ev);
        }
        self.drain().await;
        let mut heartbeat = tokio::time::interval(TELEMETRY_EVERY);
        loop {
            let wake = self
                .machine
                .next_timeout()
                .map(|t| self.started + Duration::from_millis(t))
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                ev = net_events.recv() => match ev {
                    Some(ev) => self.on_net(ev),
                    None => break,
                },
                Some(done) = jobs.recv() => self.on_job(done),
                Some(internal) = self.rx.recv() => self.on_internal(internal),
                _ = heartbeat.tick() => {
                    if self.first_train.is_some() {
                        self.publish_telemetry(self.telemetry_round, None);
                    }
                }
                _ = tokio::time::sleep_until(wake.into()) => {
                    let now = self.now();
                    self.machine.handle(now, Event::TimerFired);
                }
            }
            self.drain().await;
        }
    }

    fn feed(&mut self, ev: Event) {
        let now = self.now();
        self.machine.handle(now, ev);
    }

    fn on_net(&mut self, ev: NetEvent) {
        match ev {
            NetEvent::Listening(addr) => self.out.event("listening", json!({ "addr": addr.to_string() })),
            NetEvent::Gossip { from, message } => {
                let Some(from_key) = public_key_of(&from) else { return };
                match *message {
                    GossipMessage::Manifest(manifest) => {
                        let e = self.holders.entry(manifest.payload_hash).or_default();
                        if !e.contains(&from) && e.len() < 16 {
                            e.push(from);
                        }
                        self.feed(Event::ManifestReceived { from: from_key, manifest });
                    }
                    GossipMessage::Commit(commit) => {
                        self.feed(Event::CommitReceived { from: from_key, commit })
                    }
                    GossipMessage::Telemetry(_) => {}
                }
            }
            NetEvent::PeerJoined { peer, role } => {
                if role.trains() {
                    if let Some(k) = public_key_of(&peer) {
                        self.trainers.insert(peer);
                        self.feed(Event::PeerJoined { peer: k });
                    }
                }
            }
            NetEvent::PeerLeft { peer } => {
                if self.trainers.remove(&peer) {
                    if let Some(k) = public_key_of(&peer) {
                        self.feed(Event::PeerLeft { peer: k });
                    }
                }
            }
            NetEvent::Rejected { peer, reason } => {
                self.out.event("rejected", json!({ "peer": peer.to_string(), "reason": reason.name() }))
            }
            NetEvent::Banned { peer } => self.out.event("banned", json!({ "peer": peer.to_string() })),
        }
    }

    fn on_job(&mut self, done: JobDone) {
        match done {
            JobDone::Trained { round, base, delta, tokens, train_loss, secs } => {
                self.train_secs += secs;
                self.metrics.trained(tokens, secs);
                self.train_tokens += tokens;
                self.last_train_loss = train_loss;
                if round != self.machine.round() || base != self.machine.base() {
                    return;
                }
                let payload = match self.feedback.encode(self.spec.codec, &delta) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!("encoding our delta failed: {e}");
                        return;
                    }
                };
                let payload_hash = payload_hash_of(&payload);
                if let Err(e) = self.store.blobs.put(BlobKind::Delta, &payload) {
                    tracing::error!("storing our delta failed: {e}");
                    return;
                }
                self.deltas_by_round.entry(round).or_default().push(payload_hash);
                self.feed(Event::LocalDeltaReady { round, base, payload_hash, tokens, train_loss });
            }
            JobDone::Cancelled { .. } => {}
            JobDone::Evaluated { round, val_loss } => self.report_round(round, Some(val_loss)),
            JobDone::Failed(e) => tracing::error!("trainer: {e}"),
        }
    }

    fn report_round(&mut self, round: u64, val_loss: Option<f32>) {
        let Some(mut v) = self.pending_reports.remove(&round) else { return };
        let sent = self.net.stats.bytes_sent();
        let wall = self.first_train.map_or(0.0, |t| t.elapsed().as_secs_f64());
        v["val_loss"] = json!(val_loss);
        v["bytes_sent"] = json!(sent.saturating_sub(self.last_bytes_sent));
        v["train_frac"] = json!(if wall > 0.0 { (self.train_secs / wall).min(1.0) } else { 0.0 });
        v["secs"] = json!(self.started.elapsed().as_secs_f64());
        v["peers"] = json!(self.trainers.len());
        self.last_bytes_sent = sent;
        if let Some(state_id) = v["state_id"].as_str() {
            let rec = crate::store::RoundRecord {
                round,
                state_id: state_id.to_string(),
                included: v["included"].as_u64().unwrap_or(0) as usize,
                val_loss,
            };
            let _ = self.store.meta.record_round(&self.spec.run_id(), &rec);
        }
        self.out.event("round", v);
        self.last_telemetry = None;
        self.publish_telemetry(round, val_loss);
    }

    /// Publish a signed progress report, at most one per `TELEMETRY_MIN_GAP`.
    /// The network is asked for the node's links and refusals on a task, so
    /// the loop never waits for it.
    fn publish_telemetry(&mut self, round: u64, val_loss: Option<f32>) {
        if self.last_telemetry.is_some_and(|t| t.elapsed() < TELEMETRY_MIN_GAP) {
            return;
        }
        self.last_telemetry = Some(Instant::now());
        self.telemetry_round = round;
        if val_loss.is_some() {
            self.last_val_loss = val_loss;
        }
        let wall = self.first_train.map_or(1.0, |t| t.elapsed().as_secs_f64().max(1e-3));
        let tokens_per_sec = (self.train_tokens as f64 / wall) as f32;
        let t = Telemetry {
            run: self.spec.run_id(),
            round,
            train_loss: if self.last_train_loss.is_finite() { self.last_train_loss } else { 0.0 },
            val_loss: self.last_val_loss.filter(|v| v.is_finite()),
            tokens_per_sec: if tokens_per_sec.is_finite() { tokens_per_sec } else { 0.0 },
            device: truncate_utf8(&self.trainer.device, telemetry::MAX_DEVICE_BYTES),
            bytes_sent: self.net.stats.bytes_sent(),
            bytes_recv: self.net.stats.bytes_received(),
            peer_count: self.trainers.len() as u32,
            state: self.state_id(),
            backend: self.trainer.backend.to_string(),
            links: Vec::new(),
            rejections: Vec::new(),
            signer: PublicKey::default(),
            signature: Signature::default(),
        };
        let (net, key) = (self.net.clone(), self.key.clone());
        tokio::spawn(async move {
            let mut t = t;
            t.links = net
                .peers()
                .await
                .into_iter()
                .filter(|p| p.role.is_some())
                .filter_map(|p| public_key_of(&p.peer).map(|k| PeerLink { peer: k, relayed: p.relayed }))
                .take(telemetry::MAX_LINKS)
                .collect();
            t.rejections = net
                .rejections()
                .await
                .into_iter()
                .take(telemetry::MAX_REJECTION_KINDS)
                .map(|(reason, count)| RejectionCount {
                    reason: truncate_utf8(&reason, telemetry::MAX_REASON_BYTES),
                    count,
                })
                .collect();
            let bytes = t.sign(&key).encode();
            if let Err(e) = net.publish(TopicKind::Telemetry, bytes).await {
                tracing::debug!("publishing telemetry: {e}");
            }
        });
    }

    fn on_internal(&mut self, msg: Internal) {
        match msg {
            Internal::Payload { hash, from, fault } => match fault {
                None => {
                    self.deltas_by_round.entry(self.machine.round()).or_default().push(hash);
                    self.feed(Event::PayloadVerified { payload_hash: hash })
                }
                Some(Some(fault)) => self.feed(Event::PayloadInvalid { payload_hash: hash, from, fault }),
                Some(None) => tracing::info!("payload {hash:?} could not be fetched"),
            },
            Internal::Aggregated { round, result } => {
                if self.machine.phase() != Phase::Aggregating || self.machine.round() != round {
                    return;
                }
                match result {
                    Ok((included, next)) => {
                        let new_state = next.id();
                        self.state = Arc::new(next);
                        self.feed(Event::Aggregated { round, included, new_state });
                    }
                    Err(e) => {
                        tracing::warn!("aggregation of round {round} failed: {e}");
                        self.feed(Event::AggregationFailed { round });
                    }
                }
            }
            Internal::State { round, id, result } => {
                if self.fetching_state == Some(id) {
                    self.fetching_state = None;
                }
                match result {
                    Ok(state) => {
                        self.state = Arc::new(state);
                        self.feedback.reset();
                        self.reset_moments = true;
                        self.out.event("resynced", json!({ "round": round, "state_id": id.to_hex() }));
                        if round > 0 {
                            self.pending_reports.insert(
                                round - 1,
                                json!({ "round": round - 1, "state_id": id.to_hex(), "included": 0, "resynced": true }),
                            );
                            self.trainer.submit(Job::Evaluate {
                                round: round - 1,
                                params: Arc::new(self.state.params.clone()),
                            });
                        }
                        if self.machine.base() == id {
                            self.start_training(self.machine.round(), id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!("fetching state {id} failed: {e}; retrying");
                        if self.machine.base() == id {
                            let peers: Vec<PeerId> = self.trainers.iter().copied().collect();
                            self.spawn_state_fetch(round, id, peers);
                        }
                    }
                }
            }
        }
    }

    fn start_training(&mut self, round: u64, base: StateId) {
        if base != self.state_id() {
            return;
        }
        self.server.set_status(ServedStatus { round, state: Some(base.0) });
        let epoch = self.trainer.cancel();
        self.first_train.get_or_insert_with(Instant::now);
        let reset = std::mem::take(&mut self.reset_moments);
        self.trainer.submit(Job::Train {
            epoch,
            round,
            base,
            params: Arc::new(self.state.params.clone()),
            reset_moments: reset,
        });
    }

    fn publish(&self, kind: TopicKind, bytes: Vec<u8>, attempts: u32) {
        let net = self.net.clone();
        tokio::spawn(async move {
            for i in 0..attempts {
                match net.publish(kind, bytes.clone()).await {
                    Ok(()) => return,
                    Err(e) if i + 1 == attempts => tracing::debug!("publishing {kind:?}: {e}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
                }
            }
        });
    }

    fn spawn_state_fetch(&mut self, round: u64, id: StateId, mut peers: Vec<PeerId>) {
        if self.fetching_state == Some(id) {
            return;
        }
        self.fetching_state = Some(id);
        for p in &self.trainers {
            if !peers.contains(p) {
                peers.push(*p);
            }
        }
        let (net, store, spec, tx) =
            (self.net.clone(), self.store.clone(), self.spec.clone(), self.tx.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let result = fetch_state(&net, &store, &spec, id, round, &peers).await;
            let _ = tx.send(Internal::State { round, id, result });
        });
    }

    fn spawn_payload_fetch(&self, hash: PayloadHash, len: u64, signer: PublicKey, from: PublicKey) {
        let mut peers: Vec<PeerId> = [from, signer].iter().filter_map(peer_id_of).collect();
        peers.extend(self.holders.get(&hash).into_iter().flatten().copied());
        peers.extend(self.trainers.iter().copied());
        let mut seen = HashSet::new();
        peers.retain(|p| seen.insert(*p));
        let (net, store, spec, tx) =
            (self.net.clone(), self.store.clone(), self.spec.clone(), self.tx.clone());
        let give_up = Instant::now() + Duration::from_secs(u64::from(self.spec.round_deadline_secs).max(5));
        tokio::spawn(async move {
            let mut fault = Some(None);
            let mut attempt = 0u64;
            while Instant::now() < give_up {
                attempt += 1;
                if store.blobs.contains(BlobKind::Delta, &hash.0) {
                    fault = None;
                    break;
                }
                match fetch_blob(&net, BlobKind::Delta, hash.0, len, len, &peers).await {
                    Ok(f) => {
                        let n = spec.model.param_count as usize;
                        let codec = spec.codec;
                        let store2 = store.clone();
                        let checked = tokio::task::spawn_blocking(move || {
                            decode_delta(&f.bytes, codec, n)
                                .map(|_| store2.blobs.put(BlobKind::Delta, &f.bytes))
                        })
                        .await;
                        fault = match checked {
                            Ok(Ok(Ok(_))) => None,
                            Ok(Ok(Err(_))) | Err(_) => Some(None),
                            Ok(Err(_)) => Some(Some(PayloadFault::Undecodable)),
                        };
                        break;
                    }
                    Err(e) => {
                        tracing::debug!("fetching payload {hash:?} (attempt {attempt}): {e}");
                        tokio::time::sleep(Duration::from_millis((200 * attempt).min(2000))).await;
                    }
                }
            }
            let _ = tx.send(Internal::Payload { hash, from, fault });
        });
    }

    /// Keep the store bounded: deltas of rounds before the previous one and
    /// all but the newest three states are deleted (never the current state).
    fn collect_garbage(&mut self, closed: u64, new_state: StateId) {
        let old: Vec<u64> = self.deltas_by_round.range(..closed.saturating_sub(1)).map(|(r, _)| *r).collect();
        for r in old {
            for h in self.deltas_by_round.remove(&r).unwrap_or_default() {
                let _ = self.store.blobs.remove(BlobKind::Delta, &h.0);
            }
        }
        self.recent_states.push_back(new_state);
        while self.recent_states.len() > 3 {
            if let Some(s) = self.recent_states.pop_front() {
                if s != self.state_id() {
                    let _ = self.store.blobs.remove(BlobKind::State, &s.0);
                }
            }
        }
    }

    async fn drain(&mut self) {
        while let Some(action) = self.machine.poll_action() {
            self.act(action).await;
        }
    }

    async fn act(&mut self, action: Action) {
        match action {
            Action::RoundOpened { round, base } => {
                self.metrics.round_opened(round);
                self.holders.retain(|_, v| !v.is_empty());
                if self.holders.len() > 4096 {
                    self.holders.clear();
                }
                self.start_training(round, base);
            }
            Action::PublishManifest(m) => {
                if !self.contributed {
                    self.contributed = true;
                    self.out.event(
                        "contributed",
                        json!({ "round": m.round, "secs_since_start": self.started.elapsed().as_secs_f64() }),
                    );
                }
                self.publish(TopicKind::Manifest, m.encode(), 20);
            }
            Action::FetchPayload { payload_hash, payload_len, signer, from } => {
                self.spawn_payload_fetch(payload_hash, payload_len, signer, from)
            }
            Action::Aggregate { round, base, deltas } => {
                self.offered = deltas.iter().map(|d| (d.payload_hash, d.signer)).collect();
                let (store, spec, state, tx) =
                    (self.store.clone(), self.spec.clone(), self.state.clone(), self.tx.clone());
                tokio::task::spawn_blocking(move || {
                    let result = if state.id() == base {
                        aggregate_round(&store, &spec, &state, &deltas)
                    } else {
                        Err("the base state is not the one held".into())
                    };
                    let _ = tx.send(Internal::Aggregated { round, result });
                });
            }
            Action::PublishCommit(c) => {
                self.metrics.round_closed(c.round);
                let contributors: Vec<String> = c
                    .included
                    .iter()
                    .filter_map(|h| self.offered.get(h))
                    .filter_map(peer_id_of)
                    .map(|p| p.to_string())
                    .collect();
                self.pending_reports.insert(
                    c.round,
                    json!({
                        "round": c.round,
                        "state_id": c.new_state.to_hex(),
                        "included": c.included.len(),
                        "contributors": contributors,
                    }),
                );
                self.trainer
                    .submit(Job::Evaluate { round: c.round, params: Arc::new(self.state.params.clone()) });
                self.publish(TopicKind::Commit, c.encode(), 20);
                self.collect_garbage(c.round, c.new_state);
            }
            Action::Resync { round, state, peers } => {
                self.trainer.cancel();
                let peers: Vec<PeerId> = peers.iter().filter_map(peer_id_of).collect();
                self.out.event(
                    "resync",
                    json!({ "round": round, "state_id": state.to_hex(), "peers": peers.len() }),
                );
                if state == self.state_id() {
                    return;
                }
                if let Ok(bytes) = self.store.blobs.get(BlobKind::State, &state.0) {
                    let n = self.spec.model.param_count as usize;
                    if let Ok(s) = TrainingState::decode(&bytes, n) {
                        let _ = self.tx.send(Internal::State { round, id: state, result: Ok(s) });
                        return;
                    }
                }
                self.spawn_state_fetch(round, state, peers);
            }
            Action::Reject { peer, reason } => {
                if let Some(p) = peer_id_of(&peer) {
                    if p != self.net.local {
                        self.net.penalize(p, NetRejection::Round(reason)).await;
                    }
                }
                let _ = self.store.meta.charge_peer(&peer.0, reason.penalty());
            }
        }
    }
}

/// Decode the round's deltas, aggregate them, apply the outer step, and
/// store the new state (blob first, then the position record).
pub fn aggregate_round(
    store: &Store,
    spec: &RunSpec,
    base: &TrainingState,
    deltas: &[AcceptedDelta],
) -> Result<(Vec<PayloadHash>, TrainingState), String> {
    let n = spec.model.param_count as usize;
    let mut decoded = Vec::with_capacity(deltas.len());
    for d in deltas {
        let values = store
            .blobs
            .get(BlobKind::Delta, &d.payload_hash.0)
            .map_err(|e| e.to_string())
            .and_then(|b| decode_delta(&b, spec.codec, n).map_err(|e| e.to_string()));
        match values {
            Ok(v) => decoded.push((*d, v)),
            Err(e) => tracing::warn!("delta {:?} left out: {e}", d.payload_hash),
        }
    }
    let inputs: Vec<DeltaInput<'_>> = decoded
        .iter()
        .map(|(d, v)| DeltaInput {
            payload_hash: d.payload_hash,
            signer: d.signer,
            tokens: d.tokens,
            values: v,
        })
        .collect();
    let agg = aggregate(&inputs, n, spec.robust).map_err(|e| e.to_string())?;
    let mut next = base.clone();
    outer_step(spec.outer, &mut next, &agg.delta).map_err(|e| e.to_string())?;
    let bytes = next.encode();
    let id = store.blobs.put(BlobKind::State, &bytes).map_err(|e| e.to_string())?;
    store
        .meta
        .set_position(&spec.run_id(), Position { round: next.round, state: StateId(id) })
        .map_err(|e| e.to_string())?;
    Ok((agg.included, next))
}
