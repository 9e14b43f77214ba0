//! The node's event loop: drives the round state machine with the trainer
//! thread and the network. Net events and job results become machine
//! events; machine actions become jobs, fetches, gossip and storage.
//!
//! The loop itself never blocks: encoding, hashing and fsyncing the node's
//! own delta, reading states and aggregating run on the blocking pool and
//! come back as `WorkDone` messages; fetches run on tasks (`fetching`).
//! In an overlapped run (RunSpec pacing, docs/protocol.md §6.3) the node
//! starts training round r + 1 as soon as its round-r delta is stored, from
//! θ_r's lookahead, while round r is exchanged and aggregated; when round r + 1 opens,
//! its state lands in the running job (which moves its progress onto it, or
//! waits for it half-way), and the result is announced against that base.
//!
//! A trainer thread that dies is started again, at most
//! `MAX_TRAINER_RESTARTS` times in `TRAINER_RESTART_WINDOW`; past that the
//! node stops with an error.

pub(crate) mod admission;
mod reconcile;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::{
    Action, DeltaManifest, ErrorFeedback, Event, PayloadFault, PayloadHash, Phase, PublicKey, Rejection,
    RoundMachine, RunSpec, StateId, TrainingState,
};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::aggregation::{aggregate_round, RoundAggregate};
use super::backing::CommitBook;
use super::fetching::{spawn_payload_fetch, spawn_state_fetch, PayloadFetch, StateFetch};
use super::held::HeldState;
use super::report::Reporter;
use super::server::{ServedStatus, StoreServer};
use super::tickets::TicketBook;
use super::trainer::ahead::{report_trained_ahead, AtOpen, Trained, TrainingAhead};
use super::trainer::{self, Job, JobDone, TrainerHandle, TrainerSetup};
use super::RuntimeError;
use crate::net::{peer_id_of, public_key_of, GossipMessage, NetEvent, NetHandle, NetRejection, TopicKind};
use crate::store::{BlobKind, Store};

/// How often a node reports between round closes.
const TELEMETRY_EVERY: Duration = Duration::from_secs(5);
/// The shortest gap between two reports (the bounded rate).
const TELEMETRY_MIN_GAP: Duration = Duration::from_secs(2);
/// States kept in the store besides the current one (newest first).
pub const KEPT_STATES: usize = 3;

/// Results of work the loop started.
pub(crate) enum WorkDone {
    Payload {
        round: u64,
        hash: PayloadHash,
        from: PublicKey,
        fault: Option<Option<PayloadFault>>,
    },
    /// A state fetched (or read from the store) for a re-sync.
    State {
        round: u64,
        id: StateId,
        state: HeldState,
    },
    /// A state fetch ended without the state: the node no longer wants it.
    StateAbandoned {
        id: StateId,
    },
    /// An attempt at fetching a re-sync's state failed.
    StateUnavailable {
        id: StateId,
    },
    Aggregated {
        round: u64,
        result: Result<RoundAggregate, String>,
    },
    /// Our delta, encoded, hashed and stored (or why not).
    Encoded {
        round: u64,
        base: StateId,
        tokens: u64,
        train_loss: f32,
        result: Result<PayloadHash, String>,
    },
    /// Our manifest could not be recorded before publishing: not published.
    ManifestNotRecorded {
        round: u64,
        why: String,
    },
    /// A peer's answer to a status request (a joining trainer's, or one
    /// asked to reconcile).
    PeerStatus {
        peer: PeerId,
        status: crate::net::PeerStatus,
    },
    /// A trainer thread started again after the last one died.
    TrainerStarted(Result<(TrainerHandle, mpsc::UnboundedReceiver<JobDone>), String>),
}

/// Everything the loop owns.
pub struct Node {
    pub spec: RunSpec,
    pub store: Arc<Store>,
    pub net: NetHandle,
    pub server: Arc<StoreServer>,
    pub trainer: TrainerHandle,
    pub machine: RoundMachine,
    pub state: HeldState,
    pub out: Reporter,
    pub started: Instant,
    /// Error-feedback residual; shared with the blocking task that encodes.
    pub feedback: Arc<Mutex<ErrorFeedback>>,
    pub key: murmur_protocol::NodeKey,
    pub reset_moments: bool,
    /// Evaluate the validation loss after every this many rounds (0: never;
    /// rounds are then reported without one).
    pub eval_every: u64,
    /// Overlapped runs: the next round, training ahead.
    ahead: TrainingAhead,
    /// How to start the trainer again, and when it last had to be.
    trainer_setup: TrainerSetup,
    trainer_restarts: trainer::RestartBudget,
    trainer_alive: bool,
    done_rx: mpsc::UnboundedReceiver<JobDone>,
    /// Set when the node must stop (the trainer keeps dying).
    fatal: Option<RuntimeError>,
    /// Our own manifest signed before a restart, to announce again.
    restored: Option<DeltaManifest>,
    /// The state the machine wants and the node does not hold (fetch tasks
    /// watch it and stop when it changes).
    wanted: watch::Sender<Option<StateId>>,
    /// Prometheus metrics (switched off unless `--metrics` is given).
    pub metrics: crate::metrics::NodeMetrics,
    trainers: HashSet<PeerId>,
    holders: HashMap<PayloadHash, Vec<PeerId>>,
    pending_reports: HashMap<u64, serde_json::Value>,
    fetching_state: Option<StateId>,
    last_resync: Option<(u64, StateId)>,
    train_secs: f64,
    first_train: Option<Instant>,
    contributed: bool,
    bytes: super::report::RoundBytes,
    last_train_loss: f32,
    /// Tokens trained since start (for tokens/s).
    train_tokens: u64,
    /// When telemetry was last published, for which round, with which val loss.
    last_telemetry: Option<Instant>,
    telemetry_round: u64,
    last_val_loss: Option<f32>,
    /// Signer and claimed tokens of each delta offered to aggregation in
    /// the current round.
    offered: HashMap<PayloadHash, (PublicKey, u64)>,
    /// Delta blobs stored, by the round they belong to (for garbage collection).
    deltas_by_round: std::collections::BTreeMap<u64, Vec<PayloadHash>>,
    /// Every state blob this node wrote or fetched since start, oldest
    /// first: all but the newest `KEPT_STATES` (and the current) are deleted.
    recent_states: VecDeque<StateId>,
    /// Our own ticket (runs that admit by ticket), the tickets verified,
    /// and the commits counted, offered as our status's backing.
    own_ticket: Option<murmur_protocol::Ticket>,
    tickets: TicketBook,
    commits: CommitBook,
    /// Peers asked for their backing because they diverged (`reconcile`).
    reconcile_asked: reconcile::Asked,
    last_ticket_gossip: Option<Instant>,
    /// Tickets gathered at cold start, for the machine (fed by `run`).
    start_tickets: Vec<(PublicKey, murmur_protocol::Ticket)>,
    tx: mpsc::UnboundedSender<WorkDone>,
    rx: mpsc::UnboundedReceiver<WorkDone>,
}

/// What the loop starts from besides the network and the store.
pub struct NodeStart {
    pub trainer: TrainerHandle,
    pub done_rx: mpsc::UnboundedReceiver<JobDone>,
    pub trainer_setup: TrainerSetup,
    pub state: TrainingState,
    /// Our manifest signed before a restart, if it is for `state`'s round.
    pub restored: Option<DeltaManifest>,
    /// Our own ticket, if the run admits by ticket and we are no operator.
    pub own_ticket: Option<murmur_protocol::Ticket>,
    /// Tickets gathered at cold start, with who presented them.
    pub tickets: Vec<(PublicKey, murmur_protocol::Ticket)>,
}

impl Node {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: RunSpec,
        key: murmur_protocol::NodeKey,
        store: Arc<Store>,
        net: NetHandle,
        server: Arc<StoreServer>,
        start: NodeStart,
        out: Reporter,
        started: Instant,
    ) -> Self {
        let NodeStart { trainer, done_rx, trainer_setup, state, restored, own_ticket, tickets } = start;
        let state_id = state.id();
        let deltas_by_round = restored.iter().map(|m| (m.round, vec![m.payload_hash])).collect();
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
            state: HeldState::new(state),
            out,
            started,
            feedback: Arc::new(Mutex::new(ErrorFeedback::new(n))),
            key,
            reset_moments: false,
            eval_every: 1,
            ahead: TrainingAhead::default(),
            trainer_setup,
            trainer_restarts: trainer::RestartBudget::default(),
            trainer_alive: true,
            done_rx,
            fatal: None,
            restored,
            wanted: watch::channel(None).0,
            metrics: Default::default(),
            trainers: HashSet::new(),
            holders: HashMap::new(),
            pending_reports: HashMap::new(),
            fetching_state: None,
            last_resync: None,
            train_secs: 0.0,
            first_train: None,
            contributed: false,
            bytes: super::report::RoundBytes::default(),
            last_train_loss: f32::NAN,
            train_tokens: 0,
            last_telemetry: None,
            telemetry_round: 0,
            last_val_loss: None,
            offered: HashMap::new(),
            recent_states: VecDeque::from([state_id]),
            deltas_by_round,
            own_ticket,
            tickets: TicketBook::default(),
            commits: CommitBook::default(),
            reconcile_asked: reconcile::Asked::default(),
            last_ticket_gossip: None,
            start_tickets: tickets,
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

    /// Run until the network stops, or until the node cannot go on (its
    /// trainer keeps dying): then the error says why.
    pub async fn run(
        mut self,
        mut net_events: mpsc::Receiver<NetEvent>,
        replay: Vec<NetEvent>,
    ) -> Result<(), RuntimeError> {
        let me = self.key.public();
        let gathered = std::mem::take(&mut self.start_tickets);
        for (from, t) in self.own_ticket.clone().map(|t| (me, t)).into_iter().chain(gathered) {
            self.present_ticket(from, t);
        }
        self.gossip_ticket();
        for ev in replay {
            self.on_net(ev);
        }
        if let Some(manifest) = self.restored.take() {
            let payload = manifest.payload_hash.to_hex();
            self.out.event("reannounce", json!({ "round": manifest.round, "payload": payload }));
            self.feed(Event::LocalDeltaRestored { manifest });
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
                done = self.done_rx.recv(), if self.trainer_alive => match done {
                    Some(done) => self.on_job(done),
                    None => self.trainer_died("the trainer thread stopped".into()),
                },
                Some(internal) = self.rx.recv() => self.on_internal(internal),
                _ = heartbeat.tick() => {
                    self.gossip_ticket();
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
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The trainer thread is gone: start a new one (on the blocking pool),
    /// or stop the node when it died too often.
    fn trainer_died(&mut self, why: String) {
        if !self.trainer_alive {
            return;
        }
        self.trainer_alive = false;
        if let Err(e) = self.trainer_restarts.take(Instant::now(), &why, self.out) {
            self.fatal = Some(e);
            return;
        }
        self.metrics.trainer_restarted();
        let tx = self.tx.clone();
        trainer::respawn(self.trainer_setup.clone(), move |started| {
            let _ = tx.send(WorkDone::TrainerStarted(started));
        });
    }

    /// Queue a job; a dead trainer is noticed here too.
    fn submit(&mut self, job: Job) {
        if self.trainer_alive && !self.trainer.submit(job) {
            self.trainer_died("the trainer thread is gone".into());
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
                        self.feed(Event::ManifestReceived { from: from_key, manifest });
                    }
                    GossipMessage::Commit(commit) => {
                        self.feed(Event::CommitReceived { from: from_key, commit: commit.clone() });
                        self.note_commit(commit);
                    }
                    GossipMessage::Ticket(ticket) => self.present_ticket(from_key, ticket),
                    GossipMessage::Telemetry(_)
                    | GossipMessage::ShardedManifest(_)
                    | GossipMessage::ShardResult(_)
                    | GossipMessage::FraudProof(_) => {}
                }
            }
            NetEvent::PeerJoined { peer, role } => {
                if role.trains() {
                    if let Some(k) = public_key_of(&peer) {
                        self.trainers.insert(peer);
                        self.feed(Event::PeerJoined { peer: k });
                        self.ask_ticket(peer);
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
        report_trained_ahead(self.out, &done);
        match done {
            JobDone::Trained { round, base, delta, tokens, train_loss, secs, ahead, .. } => {
                self.train_secs += secs;
                self.metrics.trained(tokens, secs);
                self.train_tokens += tokens;
                self.last_train_loss = train_loss;
                let trained = Trained { delta, tokens, train_loss };
                if ahead {
                    if let Some(t) = self.ahead.finished(round, self.machine.round(), trained) {
                        self.announce_own(round, self.machine.base(), t);
                    }
                    return;
                }
                if round != self.machine.round() || base != self.machine.base() {
                    return;
                }
                self.announce_own(round, base, trained);
            }
            JobDone::Cancelled { round } => {
                // Training ahead was cancelled: train the round when it opens.
                if self.ahead.cancelled(round)
                    && self.machine.round() == round
                    && self.machine.phase() == Phase::Collecting
                {
                    self.start_training(round, self.machine.base());
                }
            }
            JobDone::Evaluated { round, val_loss } => self.report_round(round, Some(val_loss)),
            JobDone::Failed(e) => tracing::error!("trainer: {e}"),
            JobDone::Panicked(what) => self.trainer_died(format!("the trainer panicked: {what}")),
        }
    }

    /// Encode, hash and store our delta of `round` on the blocking pool (then
    /// `WorkDone::Encoded` feeds it to the machine).
    fn announce_own(&mut self, round: u64, base: StateId, t: Trained) {
        if self.machine.round() != round
            || self.machine.base() != base
            || self.machine.phase() != Phase::Collecting
            || self.machine.has_local_delta()
            || base != self.state_id()
        {
            return;
        }
        let Trained { delta, tokens, train_loss } = t;
        let (feedback, store, spec, tx) =
            (self.feedback.clone(), self.store.clone(), self.spec.clone(), self.tx.clone());
        tokio::task::spawn_blocking(move || {
            let encoded = feedback
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .encode(spec.codec, &delta)
                .map_err(|e| format!("encoding our delta failed: {e}"));
            let result = encoded.and_then(|payload| {
                let hash = payload_hash_of(&payload);
                store
                    .blobs
                    .put(BlobKind::Delta, &payload)
                    .map(|_| hash)
                    .map_err(|e| format!("storing our delta failed: {e}"))
            });
            let _ = tx.send(WorkDone::Encoded { round, base, tokens, train_loss, result });
        });
        self.train_ahead(round, base);
    }

    /// Overlapped rounds: train round `round + 1` now, from `round`'s state
    /// (its lookahead), while our delta of `round` is encoded and the round
    /// is exchanged; the next state lands in the job when it opens.
    fn train_ahead(&mut self, round: u64, base: StateId) {
        if !self.spec.pacing.overlapped || !self.trainer_alive {
            return;
        }
        let epoch = self.trainer.epoch();
        if let Some(job) = self.ahead.start(epoch, round + 1, base, self.state.state().clone()) {
            self.submit(job);
        }
    }

    /// Report the round just closed (its report is pending): after an
    /// evaluation of the held state when `eval_every` asks for one, else now
    /// without a validation loss.
    fn evaluate_or_report(&mut self, round: u64) {
        if self.eval_every > 0 && round.is_multiple_of(self.eval_every) {
            self.submit(Job::Evaluate { round, state: self.state.state().clone() });
        } else {
            self.report_round(round, None);
        }
    }

    fn report_round(&mut self, round: u64, val_loss: Option<f32>) {
        let Some(mut v) = self.pending_reports.remove(&round) else { return };
        v["val_loss"] = json!(val_loss);
        self.bytes.fill(&mut v, &self.net.stats);
        let running = self.trainer.busy.running_secs();
        super::report::fill_training_time(
            &mut v,
            self.train_secs,
            running,
            self.first_train,
            self.train_tokens,
        );
        v["secs"] = json!(self.started.elapsed().as_secs_f64());
        v["peers"] = json!(self.trainers.len());
        super::report::record_round(&self.store, &self.spec.run_id(), round, &v, val_loss);
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
        let t = super::telemetry::Progress {
            spec: &self.spec,
            round,
            state: self.state_id(),
            train_loss: self.last_train_loss,
            val_loss: self.last_val_loss,
            tokens: self.train_tokens,
            first_train: self.first_train,
            trainer: &self.trainer,
            net: &self.net,
            peers: self.trainers.len(),
            restarts: self.trainer_restarts.total,
        }
        .telemetry();
        super::telemetry::publish(self.net.clone(), self.key.clone(), t);
    }

    fn on_internal(&mut self, msg: WorkDone) {
        match msg {
            WorkDone::Payload { round, hash, from, fault } => match fault {
                None => {
                    self.deltas_by_round.entry(round).or_default().push(hash);
                    // A fetch that outlived its round (a re-sync moved the
                    // node on) leaves nothing behind.
                    self.collect_old_deltas(self.machine.round());
                    self.feed(Event::PayloadVerified { payload_hash: hash })
                }
                Some(Some(fault)) => self.feed(Event::PayloadInvalid { payload_hash: hash, from, fault }),
                // No peer served it: the machine asks again after a back-off.
                Some(None) => self.feed(Event::PayloadUnavailable { payload_hash: hash }),
            },
            WorkDone::Aggregated { round, result } => {
                if self.machine.phase() != Phase::Aggregating || self.machine.round() != round {
                    // Its state blob was written all the same: track it so it is collected.
                    if let Ok(agg) = result {
                        self.keep_state(agg.state.id());
                    }
                    return;
                }
                match result {
                    Ok(RoundAggregate { included, left_out, state }) => {
                        for (signer, reason) in left_out {
                            let peer = peer_id_of(&signer).map(|p| p.to_string());
                            tracing::warn!("round {round}: the delta of {peer:?} was left out: {reason}");
                            self.out
                                .event("left_out", json!({ "round": round, "peer": peer, "reason": reason }));
                        }
                        let new_state = state.id();
                        self.state = state;
                        self.feed(Event::Aggregated { round, included, new_state });
                    }
                    Err(e) => {
                        tracing::warn!("aggregation of round {round} failed: {e}");
                        self.feed(Event::AggregationFailed { round });
                    }
                }
            }
            WorkDone::StateAbandoned { id } => {
                if self.fetching_state == Some(id) {
                    self.fetching_state = None;
                }
            }
            WorkDone::StateUnavailable { id } => {
                if self.fetching_state == Some(id) {
                    self.fetching_state = None;
                }
                self.feed(Event::StateUnavailable { state: id });
            }
            WorkDone::State { round, id, state } => {
                if self.fetching_state == Some(id) {
                    self.fetching_state = None;
                }
                if self.machine.base() != id || id == self.state_id() {
                    self.keep_state(id);
                    return;
                }
                self.state = state;
                self.collect_garbage(round, id);
                let feedback = self.feedback.clone();
                tokio::task::spawn_blocking(move || {
                    feedback.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).reset();
                });
                self.reset_moments = true;
                self.out.event("resynced", json!({ "round": round, "state_id": id.to_hex() }));
                if round > 0 {
                    self.pending_reports.insert(
                        round - 1,
                        json!({ "round": round - 1, "state_id": id.to_hex(), "included": 0, "resynced": true }),
                    );
                    self.evaluate_or_report(round - 1);
                }
                self.start_training(self.machine.round(), id);
            }
            WorkDone::Encoded { round, base, tokens, train_loss, result } => match result {
                Ok(payload_hash) => {
                    self.deltas_by_round.entry(round).or_default().push(payload_hash);
                    self.feed(Event::LocalDeltaReady { round, base, payload_hash, tokens, train_loss });
                }
                Err(e) => tracing::error!("{e}"),
            },
            WorkDone::ManifestNotRecorded { round, why } => {
                tracing::error!(
                    "recording our manifest of round {round} failed ({why}); it was not published"
                )
            }
            WorkDone::PeerStatus { peer, status } => self.on_peer_status(peer, status),
            WorkDone::TrainerStarted(Ok((handle, done_rx))) => {
                self.out.event("trainer_started", json!({ "device": handle.device }));
                self.trainer = handle;
                self.done_rx = done_rx;
                self.trainer_alive = true;
                self.ahead.clear();
                // Evaluations queued on the dead thread are lost; their rounds
                // are reported without a validation loss.
                let lost: Vec<u64> = self.pending_reports.keys().copied().collect();
                for r in lost {
                    self.report_round(r, None);
                }
                if self.machine.phase() == Phase::Collecting {
                    self.start_training(self.machine.round(), self.machine.base());
                }
            }
            WorkDone::TrainerStarted(Err(e)) => {
                self.fatal = Some(RuntimeError::Trainer(format!("starting the trainer again failed: {e}")));
            }
        }
    }

    fn start_training(&mut self, round: u64, base: StateId) {
        if base != self.state_id() {
            return;
        }
        self.server.set_status(ServedStatus { round, state: Some(base.0) });
        if self.machine.has_local_delta() {
            // Signed before a restart and announced again: never a second one.
            return;
        }
        match self.ahead.open(round, self.state.state()) {
            // Trained ahead and finished: announce it against this base.
            AtOpen::Finished(t) => return self.announce_own(round, base, t),
            // Still training ahead: the round's state landed in the job, and
            // its delta is announced when it finishes.
            AtOpen::Landed => return,
            AtOpen::Train => {}
        }
        let epoch = self.trainer.cancel();
        self.first_train.get_or_insert_with(Instant::now);
        let reset = std::mem::take(&mut self.reset_moments);
        let state = self.state.state().clone();
        self.submit(Job::Train { epoch, round, base, state, reset_moments: reset, ahead: None });
    }

    fn publish(&self, kind: TopicKind, bytes: Vec<u8>, attempts: u32) {
        let net = self.net.clone();
        tokio::spawn(publish_with_retries(net, kind, bytes, attempts));
    }

    /// Record our manifest (fsynced) before the first byte of it leaves the
    /// node, then gossip it: after a crash it is announced again as it is.
    fn publish_manifest(&self, m: &DeltaManifest) {
        let (net, store, run, tx) =
            (self.net.clone(), self.store.clone(), self.spec.run_id(), self.tx.clone());
        let (round, bytes) = (m.round, m.encode());
        tokio::spawn(async move {
            let record = bytes.clone();
            let recorded = tokio::task::spawn_blocking(move || store.meta.set_signed_manifest(&run, &record))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            match recorded {
                Ok(()) => publish_with_retries(net, TopicKind::Manifest, bytes, 20).await,
                Err(why) => {
                    let _ = tx.send(WorkDone::ManifestNotRecorded { round, why });
                }
            }
        });
    }

    fn start_state_fetch(&mut self, round: u64, id: StateId, voters: Vec<PeerId>) {
        if self.fetching_state == Some(id) {
            return;
        }
        self.fetching_state = Some(id);
        self.wanted.send_replace(Some(id));
        let mut peers = voters.clone();
        for p in &self.trainers {
            if !peers.contains(p) {
                peers.push(*p);
            }
        }
        let fetch = StateFetch { round, id, voters, peers, wanted: self.wanted.subscribe() };
        spawn_state_fetch(
            self.net.clone(),
            self.store.clone(),
            self.spec.clone(),
            fetch,
            self.out,
            self.tx.clone(),
        );
    }

    /// Remember a state the store now holds, deleting all but the newest
    /// `KEPT_STATES` (never the current one).
    fn keep_state(&mut self, id: StateId) {
        if !self.recent_states.contains(&id) {
            self.recent_states.push_back(id);
        }
        while self.recent_states.len() > KEPT_STATES {
            if let Some(s) = self.recent_states.pop_front() {
                if s != self.state_id() {
                    let store = self.store.clone();
                    tokio::task::spawn_blocking(move || store.blobs.remove(BlobKind::State, &s.0));
                }
            }
        }
    }

    /// Fetch a payload of the current round from its announcer, its signer,
    /// other holders and the trainers.
    fn fetch_payload(
        &mut self,
        payload_hash: PayloadHash,
        payload_len: u64,
        signer: PublicKey,
        from: PublicKey,
    ) {
        // Holders are learnt only from manifests the machine accepted.
        if let Some(p) = peer_id_of(&from) {
            let e = self.holders.entry(payload_hash).or_default();
            if !e.contains(&p) && e.len() < 16 {
                e.push(p);
            }
        }
        let mut peers: Vec<PeerId> = [from, signer].iter().filter_map(peer_id_of).collect();
        peers.extend(self.holders.get(&payload_hash).into_iter().flatten().copied());
        peers.extend(self.trainers.iter().copied());
        let mut seen = HashSet::new();
        peers.retain(|p| seen.insert(*p));
        let fetch =
            PayloadFetch { round: self.machine.round(), hash: payload_hash, len: payload_len, from, peers };
        spawn_payload_fetch(self.net.clone(), self.store.clone(), self.spec.clone(), fetch, self.tx.clone())
    }

    /// Keep the store bounded once the node stands at `round` (after a
    /// commit or a re-sync): deltas of rounds before `round - 1` and all but
    /// the newest `KEPT_STATES` states are deleted (never the current one).
    fn collect_garbage(&mut self, round: u64, new_state: StateId) {
        self.collect_old_deltas(round);
        self.keep_state(new_state);
    }

    /// Delete the deltas of rounds before `round - 1`.
    fn collect_old_deltas(&mut self, round: u64) {
        let old: Vec<u64> = self.deltas_by_round.range(..round.saturating_sub(1)).map(|(r, _)| *r).collect();
        let mut doomed = Vec::new();
        for r in old {
            doomed.extend(self.deltas_by_round.remove(&r).unwrap_or_default());
        }
        if !doomed.is_empty() {
            let store = self.store.clone();
            tokio::task::spawn_blocking(move || {
                for h in doomed {
                    let _ = store.blobs.remove(BlobKind::Delta, &h.0);
                }
            });
        }
    }

    async fn drain(&mut self) {
        while let Some(action) = self.machine.poll_action() {
            self.act(action).await;
        }
        // Fetch tasks for a state the machine no longer wants stop.
        let base = self.machine.base();
        let want = (base != self.state_id()).then_some(base);
        self.wanted.send_if_modified(|w| {
            let changed = *w != want;
            *w = want;
            changed
        });
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
                self.out.event("announced", json!({ "round": m.round, "payload": m.payload_hash.to_hex() }));
                self.publish_manifest(&m);
            }
            Action::FetchPayload { payload_hash, payload_len, signer, from } => {
                self.fetch_payload(payload_hash, payload_len, signer, from)
            }
            Action::Aggregate { round, base, deltas } => {
                self.offered = deltas.iter().map(|d| (d.payload_hash, (d.signer, d.tokens))).collect();
                let (store, spec, held, tx) =
                    (self.store.clone(), self.spec.clone(), self.state.clone(), self.tx.clone());
                tokio::task::spawn_blocking(move || {
                    let result = if held.id() == base {
                        aggregate_round(&store, &spec, held.state(), &deltas)
                    } else {
                        Err("the base state is not the one held".into())
                    };
                    let _ = tx.send(WorkDone::Aggregated { round, result });
                });
            }
            Action::PublishCommit(c) => {
                self.metrics.round_closed(c.round);
                let included: Vec<&(PublicKey, u64)> =
                    c.included.iter().filter_map(|h| self.offered.get(h)).collect();
                let contributors: Vec<String> =
                    included.iter().filter_map(|(k, _)| peer_id_of(k)).map(|p| p.to_string()).collect();
                let round_tokens: u64 = included.iter().map(|(_, t)| t).sum();
                self.pending_reports.insert(
                    c.round,
                    json!({
                        "round": c.round,
                        "state_id": c.new_state.to_hex(),
                        "included": c.included.len(),
                        "contributors": contributors,
                        "round_tokens": round_tokens,
                    }),
                );
                self.evaluate_or_report(c.round);
                self.publish(TopicKind::Commit, c.encode(), 20);
                self.note_commit(c.clone());
                self.collect_garbage(c.round, c.new_state);
            }
            Action::Resync { round, state, peers } => {
                self.trainer.cancel();
                self.ahead.clear();
                let peers: Vec<PeerId> = peers.iter().filter_map(peer_id_of).collect();
                // A retry (the machine asks again after a failed attempt) is
                // not a new re-sync.
                if self.last_resync != Some((round, state)) {
                    self.last_resync = Some((round, state));
                    self.out.event(
                        "resync",
                        json!({ "round": round, "state_id": state.to_hex(), "peers": peers.len() }),
                    );
                }
                if state == self.state_id() {
                    return;
                }
                self.start_state_fetch(round, state, peers);
            }
            Action::Reject { peer, reason } => {
                if reason == Rejection::WrongBase {
                    self.reconcile_with(peer);
                }
                if let Some(p) = peer_id_of(&peer) {
                    if p != self.net.local {
                        self.net.penalize(p, NetRejection::Round(reason));
                    }
                }
            }
        }
    }
}

/// Gossip `bytes`, retrying a few times while the mesh forms.
pub(crate) async fn publish_with_retries(net: NetHandle, kind: TopicKind, bytes: Vec<u8>, attempts: u32) {
    for i in 0..attempts {
        match net.publish(kind, bytes.clone()).await {
            Ok(()) => return,
            Err(e) if i + 1 == attempts => tracing::debug!("publishing {kind:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}
