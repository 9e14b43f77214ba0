//! The node's round loop (docs/protocol.md §10): the round
//! machine (`murmur_protocol::committee::CommitteeMachine`) driven by the
//! trainer thread and the network. The machine decides everything and owns
//! every timer (deadlines, fetch retries and back-off, fallbacks); this
//! loop only moves bytes and runs compute, and turns what comes back into
//! machine events.
//!
//! - `closing`: a round applied or a state fetched: the node's new state.
//! - `early`: the next round's messages, held (bounded per signer) until it opens.
//! - `served`: what the node answers beyond blobs (offers, leaves, lists).
//! - `sync`: fetching the state a majority signed.
//! - `training`: starting rounds on the trainer thread and cutting deltas.
//! - `transfer`: the tasks that move shards, aggregates and lists.
//! - `work`: cutting, aggregating and applying on the blocking pool.

pub mod audit;
mod closing;
pub mod early;
pub mod served;
pub mod sync;
mod training;
pub mod transfer;
pub mod work;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use murmur_protocol::committee::{
    aggregate_codec, verify_proof, CommitteeAction, CommitteeConfig, CommitteeEvent, CommitteeMachine,
    FetchOutcome, IncludedList, IncludedSigners, Ledger, ShardLeaf, ShardResult, ShardRule, ShardedManifest,
    SignedRecord, SketchAudit,
};
use murmur_protocol::hash::hex;
use murmur_protocol::{AdmissionPolicy, ErrorFeedback, PublicKey, RunSpec, StateId, TrainingState};
use serde_json::json;
use tokio::sync::mpsc;

use super::hashed_state::HashedState;
use super::report::Reporter;
use super::server::StoreServer;
use super::tickets::TICKET_GOSSIP_EVERY;
use super::trainer::overlap::OverlappedRound;
use super::trainer::{self, JobDone, TrainerHandle, TrainerSetup};
use super::RuntimeError;
use crate::metrics::NodeMetrics;
use crate::net::offer::ShardOffer;
use crate::net::{GossipMessage, NetEvent, NetHandle, TopicKind, XferRequest};
use crate::store::{BlobKind, Store};
use early::{Early, EarlyBuffer};
use served::CommitteeServed;

/// How long a trainer's Status (asked when it joins) may take.
const STATUS_WAIT: Duration = Duration::from_secs(5);
/// States a node keeps besides its current one: the state before it,
/// still served to a node catching up on the round just closed.
pub const KEPT_STATES: usize = 1;
/// Offers being pulled at once.
const MAX_PULLING: usize = 4096;
/// How often a node gossips its progress report.
const TELEMETRY_EVERY: Duration = Duration::from_secs(5);

/// The machine's timing from the spec: members aggregate at the round
/// deadline (or once every roster member's shard is in); results are
/// awaited half as long again; a conflict or a fallback gets a quarter.
pub fn committee_config(spec: &RunSpec) -> CommitteeConfig {
    let input_ms = u64::from(spec.round_deadline_secs) * 1000;
    CommitteeConfig {
        run: spec.run_id(),
        codec: spec.codec,
        element_count: spec.model.param_count,
        k: spec.committee_size,
        rule: ShardRule::of(spec),
        input_ms,
        result_ms: (input_ms / 2).max(1000),
        grace_ms: (input_ms / 4).max(1000),
        audits: murmur_protocol::committee::machine::DEFAULT_AUDITS,
        operators: match &spec.admission {
            AdmissionPolicy::OpenWithOperators { operators } => operators.clone(),
            _ => Vec::new(),
        },
    }
}

/// Results of work the loop started.
enum WorkDone {
    Cut {
        round: u64,
        tokens: u64,
        train_loss: f32,
        result: Result<(Vec<ShardLeaf>, f32), String>,
    },
    Pulled {
        offer: ShardOffer,
        ok: bool,
    },
    Aggregated {
        round: u64,
        shard: u32,
        result: Result<(IncludedList, u64, [u8; 32]), String>,
    },
    Fetched {
        round: u64,
        shard: u32,
        hash: [u8; 32],
        outcome: FetchOutcome,
        /// The decoded values' L2 norm, once served.
        norm: f32,
        included: Option<IncludedSigners>,
    },
    Included {
        round: u64,
        result: ShardResult,
        list: IncludedList,
    },
    Sketched {
        round: u64,
        result: ShardResult,
        included: IncludedList,
        matches: Option<bool>,
    },
    Rechecked {
        round: u64,
        result: ShardResult,
        included: IncludedList,
        matches: bool,
        /// The inputs' signed manifests (verified), for the machine to
        /// compare with those it holds.
        manifests: Vec<ShardedManifest>,
    },
    /// Blobs a re-check stored (the inputs it gathered, the aggregate it
    /// recomputed), whatever it found.
    Stored {
        round: u64,
        blobs: Vec<(BlobKind, [u8; 32])>,
    },
    Applied {
        round: u64,
        ledger: Ledger,
        result: Result<TrainingState, String>,
    },
    /// A result pulled from its signer (`PullResult`).
    ResultPulled(ShardResult),
    /// A trainer's own shard, pulled from it (`PullInputs`): taken as its offer.
    InputPulled(ShardOffer),
    Synced {
        target: StateId,
        result: Result<(TrainingState, Ledger), String>,
    },
    /// A trainer thread started again after the last one died.
    TrainerStarted(trainer::Started),
    /// An offer of our shard was not taken.
    Undelivered {
        round: u64,
        to: PublicKey,
        shard: u32,
    },
}

/// What the round loop starts from.
pub struct CommitteeStart {
    pub spec: RunSpec,
    pub key: murmur_protocol::NodeKey,
    pub store: Arc<Store>,
    pub net: NetHandle,
    pub server: Arc<StoreServer>,
    pub trainer: TrainerHandle,
    pub done_rx: mpsc::UnboundedReceiver<JobDone>,
    /// How to start the trainer again when it dies.
    pub trainer_setup: TrainerSetup,
    /// The state to start from (its ledger is looked up in the store; a
    /// node without it waits to catch up with the run).
    pub state: TrainingState,
    pub out: Reporter,
    pub started: Instant,
    /// This node's ticket in a ticket run: gossiped on joining and every
    /// `TICKET_GOSSIP_EVERY`, so peers admit its gossip and requests.
    pub own_ticket: Option<murmur_protocol::Ticket>,
    /// Prometheus metrics (switched off unless `--metrics` is given).
    pub metrics: NodeMetrics,
    /// Evaluate the state every this many rounds (0: never).
    pub eval_every: u64,
    /// The node restarted from its stored position (mid-round, as far as
    /// the run is concerned).
    pub resumed: bool,
}

/// Everything the loop owns.
struct CommitteeNode {
    spec: RunSpec,
    key: murmur_protocol::NodeKey,
    me: PublicKey,
    store: Arc<Store>,
    net: NetHandle,
    server: Arc<StoreServer>,
    served: Arc<CommitteeServed>,
    /// Aggregate fetches under way (the round's and its audits').
    fetching: Arc<transfer::AggregateFetches>,
    trainer: TrainerHandle,
    done_rx: mpsc::UnboundedReceiver<JobDone>,
    trainer_setup: TrainerSetup,
    trainer_alive: bool,
    restarts: trainer::RestartBudget,
    /// Overlapped runs: the next round, training ahead.
    overlap: OverlappedRound,
    /// Training so far, for telemetry and round reports: tokens, seconds
    /// in finished inner-step jobs, since when, the last losses.
    train_tokens: u64,
    train_secs: f64,
    first_train: Option<Instant>,
    last_train_loss: f32,
    last_val_loss: Option<f32>,
    metrics: NodeMetrics,
    eval_every: u64,
    machine: CommitteeMachine,
    state: HashedState,
    ledger: Ledger,
    feedback: Arc<Mutex<ErrorFeedback>>,
    out: Reporter,
    started: Instant,
    /// Our leaves and their round (for offers to committees and fallbacks).
    own: Option<(u64, Vec<ShardLeaf>)>,
    pulling: HashSet<(u64, u32, PublicKey)>,
    /// Blobs this node stored, by round (deleted two rounds on).
    kept: BTreeMap<u64, BTreeSet<(BlobKind, [u8; 32])>>,
    early: EarlyBuffer,
    trainers: HashSet<PeerId>,
    pending_reports: HashMap<u64, serde_json::Value>,
    bytes: super::report::RoundBytes,
    round_opened: Instant,
    own_ticket: Option<murmur_protocol::Ticket>,
    last_ticket_gossip: Option<Instant>,
    /// Our first signed result of each of the newest rounds: the backing
    /// our status offers (each names the state we trained that round from).
    own_results: BTreeMap<u64, ShardResult>,
    /// The newest round whose delta we signed.
    announced: Option<u64>,
    fatal: Option<RuntimeError>,
    tx: mpsc::UnboundedSender<WorkDone>,
    rx: mpsc::UnboundedReceiver<WorkDone>,
}

/// Run the node's round loop from `start` until the network stops.
pub async fn run_committee_node(
    start: CommitteeStart,
    net_events: mpsc::Receiver<NetEvent>,
    replay: Vec<NetEvent>,
) -> Result<(), RuntimeError> {
    let CommitteeStart {
        spec,
        key,
        store,
        net,
        server,
        trainer,
        done_rx,
        trainer_setup,
        state,
        out,
        started,
        own_ticket,
        metrics,
        eval_every,
        resumed,
    } = start;
    let (served, offers_rx) = CommitteeServed::new(spec.codec);
    let served = Arc::new(served);
    server.serve_committee(served.clone());
    // A run's genesis has an empty roster; a later state's ledger was
    // stored when the state was (else the node catches up first).
    let stored = sync::stored_ledger(&store, &spec, state.id());
    let waiting = state.round > 0 && stored.is_none();
    let ledger = stored.unwrap_or_default();
    if waiting {
        out.event("waiting", json!({ "round": state.round, "why": "no ledger for the stored state" }));
    }
    let now = started.elapsed().as_millis() as u64;
    let base = ledger.state_id(state.id());
    let mut machine =
        CommitteeMachine::new(committee_config(&spec), key.clone(), state.round, base, ledger.clone(), now);
    if waiting {
        machine.wait_for_state();
    }
    served.open_round(state.round, &ledger.roster);
    if resumed {
        machine.entered_mid_round();
    }
    // Keys that had dropped off the roster before a restart: a side that
    // ran apart from them can still rejoin them.
    machine.restore_former(&store.meta.former_members(&spec.run_id())?);
    // What we signed before a restart: never a second word for that round.
    match store.meta.signed_record(&spec.run_id())?.map(|b| SignedRecord::decode(&b)) {
        Some(Ok(mut record)) => {
            // A delta whose payloads are not all held cannot be sent again:
            // the machine then sits the round out as a trainer.
            // (A delta of a round already closed is collected as rounds
            // close: nothing to say about it.)
            if !record.leaves.iter().all(|l| store.blobs.contains(BlobKind::Delta, &l.payload_hash.0)) {
                if record.round == state.round {
                    tracing::warn!(
                        "the shards of the delta signed for round {} are gone; not sending them again",
                        record.round
                    );
                }
                record.leaves.clear();
            }
            let sent_again =
                record.manifest.as_ref().filter(|m| m.round == state.round && !record.leaves.is_empty());
            if let Some(m) = sent_again {
                // The delta signed before the restart, sent again rather
                // than trained (and signed) a second time.
                out.event("reannounce", json!({ "round": m.round, "shards": m.shards }));
            }
            machine.restore_signed(record)
        }
        Some(Err(e)) => {
            tracing::warn!("the record of what this node last signed is unreadable ({e}); ignoring it")
        }
        None => {}
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let n = spec.model.param_count as usize;
    let mut node = CommitteeNode {
        me: key.public(),
        spec,
        key,
        store,
        net: net.clone(),
        server,
        served,
        fetching: Arc::default(),
        trainer,
        done_rx,
        trainer_setup,
        trainer_alive: true,
        restarts: trainer::RestartBudget::default(),
        overlap: OverlappedRound::default(),
        train_tokens: 0,
        train_secs: 0.0,
        first_train: None,
        last_train_loss: f32::NAN,
        last_val_loss: None,
        metrics,
        eval_every,
        machine,
        state: HashedState::new(state),
        ledger,
        feedback: Arc::new(Mutex::new(ErrorFeedback::new(n))),
        out,
        started,
        own: None,
        pulling: HashSet::new(),
        kept: BTreeMap::new(),
        early: EarlyBuffer::default(),
        trainers: HashSet::new(),
        pending_reports: HashMap::new(),
        bytes: super::report::RoundBytes::default(),
        round_opened: Instant::now(),
        own_ticket,
        last_ticket_gossip: None,
        own_results: BTreeMap::new(),
        announced: None,
        fatal: None,
        tx,
        rx,
    };
    node.record_state();
    // A delta restored from the record: its shards go out again, served as
    // ours (start-up kept its blobs; they are deleted two rounds on).
    if let Some(leaves) = node.machine.own_leaves().map(<[_]>::to_vec) {
        for l in &leaves {
            node.keep(node.machine.round(), BlobKind::Delta, l.payload_hash.0);
        }
    }
    // Aggregates stored before a restart (the recorded results' among
    // them) are served for one more round (a slower node may still fetch
    // the round just closed), then collected with the round resumed at, as
    // if this run of the node had fetched them.
    match node.store.blobs.list(BlobKind::Aggregate) {
        Ok(ids) => {
            for id in ids {
                node.keep(node.machine.round(), BlobKind::Aggregate, id);
            }
        }
        Err(e) => tracing::warn!("listing the stored aggregates: {e}"),
    }
    node.serve_own_leaves();
    node.run(net_events, offers_rx, replay).await
}

impl CommitteeNode {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn state_id(&self) -> StateId {
        self.ledger.state_id(self.state.id())
    }

    async fn run(
        mut self,
        mut net_events: mpsc::Receiver<NetEvent>,
        mut offers: mpsc::Receiver<(PeerId, ShardOffer)>,
        replay: Vec<NetEvent>,
    ) -> Result<(), RuntimeError> {
        for ev in replay {
            self.on_net(ev);
        }
        self.drain();
        self.gossip_ticket();
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
                _ = heartbeat.tick() => {
                    self.publish_telemetry();
                    self.gossip_ticket();
                }
                Some((from, offer)) = offers.recv() => {
                    self.served.offer_taken(&from);
                    self.on_offer(offer);
                }
                Some(internal) = self.rx.recv() => self.on_internal(internal),
                _ = tokio::time::sleep_until(wake.into()) => self.feed(CommitteeEvent::TimerFired),
            }
            self.drain();
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
        }
        Ok(())
    }

    fn feed(&mut self, ev: CommitteeEvent) {
        let now = self.now();
        self.machine.handle(now, ev);
    }

    fn on_net(&mut self, ev: NetEvent) {
        match ev {
            NetEvent::Listening(addr) => self.out.event("listening", json!({ "addr": addr.to_string() })),
            NetEvent::Gossip { message, .. } => self.on_gossip(message),
            NetEvent::PeerJoined { peer, role } if role.trains() => {
                self.trainers.insert(peer);
                if self.spec.admission.uses_tickets() {
                    // Its Status carries its ticket, which the network's
                    // gate learns from the answer: until then its gossip
                    // and requests are refused as not admitted.
                    let net = self.net.clone();
                    tokio::spawn(async move {
                        let _ =
                            tokio::time::timeout(STATUS_WAIT, net.request(peer, XferRequest::Status)).await;
                    });
                }
                if let Some(key) = crate::net::public_key_of(&peer) {
                    self.feed(CommitteeEvent::PeerConnected(key));
                }
            }
            NetEvent::PeerLeft { peer } => {
                self.trainers.remove(&peer);
                if let Some(key) = crate::net::public_key_of(&peer) {
                    self.feed(CommitteeEvent::PeerDisconnected(key));
                }
            }
            NetEvent::Rejected { peer, reason } => {
                self.out.event("rejected", json!({ "peer": peer.to_string(), "reason": reason.name() }))
            }
            NetEvent::Banned { peer } => self.out.event("banned", json!({ "peer": peer.to_string() })),
            NetEvent::PeerJoined { .. } => {}
        }
    }

    /// Keep `e` for round `round` if that is the next one (bounded).
    fn keep_early(&mut self, round: u64, e: Early) {
        let roster = &self.machine.ledger().roster;
        self.early.keep(self.machine.round() + 1, round, e, |k| roster.binary_search(k).is_ok());
    }

    fn on_gossip(&mut self, message: Box<GossipMessage>) {
        let round = match &*message {
            GossipMessage::ShardedManifest(m) => m.round,
            GossipMessage::ShardResult(r) => r.round,
            _ => self.machine.round(),
        };
        if round > self.machine.round() {
            // A later round's result says what its signer ended our round
            // on: the machine counts it now (catching up), and takes it as
            // a claim once that round opens.
            if let GossipMessage::ShardResult(r) = &*message {
                self.feed(CommitteeEvent::ResultReceived(r.clone()));
            }
            self.keep_early(round, Early::Gossip(message));
            return;
        }
        match *message {
            GossipMessage::ShardedManifest(m) => self.feed(CommitteeEvent::ManifestReceived(m)),
            GossipMessage::ShardResult(r) => self.feed(CommitteeEvent::ResultReceived(r)),
            GossipMessage::FraudProof(p) => {
                self.out.event("proof", json!({ "accused": hex(&p.accused().0), "round": p.round() }));
                self.feed(CommitteeEvent::ProofReceived(p))
            }
            GossipMessage::Telemetry(_) | GossipMessage::Ticket(_) => {}
        }
    }

    /// A shard offered to us: its manifest goes to the machine (which
    /// checks it); the payload is pulled if it is for this round, for a
    /// shard the machine takes inputs for, and of the right length (the
    /// machine checks the proof against the manifest).
    fn on_offer(&mut self, offer: ShardOffer) {
        if offer.round > self.machine.round() {
            // Held (for the next round only) in its signer's name once that
            // signer's manifest is seen to be signed and to cover the leaf:
            // no one else's offers take the room a roster member's need.
            let m = &offer.manifest;
            let next = offer.round == self.machine.round() + 1;
            if next && m.verify().is_ok() && verify_proof(&m.root, offer.shards, &offer.leaf, &offer.proof) {
                self.keep_early(offer.round, Early::Offer(offer));
            }
            return;
        }
        if offer.round == self.machine.round() {
            self.feed(CommitteeEvent::ManifestReceived((*offer.manifest).clone()));
        }
        let plan = self.machine.plan();
        let layout = plan.layout();
        let expected = self.spec.codec.payload_len(layout.len(offer.leaf.shard) as u64);
        // Only a leaf under the manifest the machine took from its signer
        // costs a pull or a store: an offer forged in another's name takes
        // no place another offer of that shard needs.
        let proven = self.machine.manifest_of(&offer.signer).is_some_and(|m| {
            *m == *offer.manifest && verify_proof(&m.root, offer.shards, &offer.leaf, &offer.proof)
        });
        if offer.round != self.machine.round()
            || !self.machine.takes_inputs(offer.leaf.shard)
            || !proven
            || offer.shards != plan.shards()
            || expected != Some(offer.leaf.payload_len)
            || self.pulling.len() >= MAX_PULLING
            || !self.pulling.insert((offer.round, offer.leaf.shard, offer.signer))
        {
            return;
        }
        let (net, store, tx) = (self.net.clone(), self.store.clone(), self.tx.clone());
        if offer.payload.is_some() {
            tokio::task::spawn_blocking(move || {
                let ok = transfer::store_inline(&store, &offer);
                let _ = tx.send(WorkDone::Pulled { offer, ok });
            });
            return;
        }
        let cap = offer.leaf.payload_len;
        tokio::spawn(async move {
            let ok = transfer::pull_payload(&net, &store, &offer, cap, &[]).await.is_ok();
            let _ = tx.send(WorkDone::Pulled { offer, ok });
        });
    }

    fn on_internal(&mut self, msg: WorkDone) {
        self.keep_stored(&msg);
        let round = self.machine.round();
        match msg {
            WorkDone::Cut { round: r, tokens, train_loss, result } => match result {
                Ok((leaves, norm)) if r == round => {
                    // A delta restored from the record stands: this one is not signed.
                    if self.machine.own_leaves().is_some() {
                        return;
                    }
                    self.own = Some((r, leaves.clone()));
                    self.feed(CommitteeEvent::LocalDeltaReady { tokens, train_loss, norm, leaves });
                    self.serve_own_leaves();
                }
                Ok(_) => {}
                Err(e) => tracing::error!("{e}"),
            },
            WorkDone::Pulled { offer, ok } => {
                self.pulling.remove(&(offer.round, offer.leaf.shard, offer.signer));
                if ok && offer.round == round {
                    let ShardOffer { signer, shards, leaf, ref proof, .. } = offer;
                    let proof = proof.clone();
                    self.served.hold_leaf(offer.without_payload());
                    self.feed(CommitteeEvent::ShardReceived { signer, shards, leaf, proof });
                }
            }
            WorkDone::Aggregated { round: r, shard, result } if r == round => match result {
                Ok((included, total_tokens, result_hash)) => {
                    let e = CommitteeEvent::ShardAggregated {
                        round: r,
                        shard,
                        included,
                        total_tokens,
                        result_hash,
                    };
                    self.feed(e);
                }
                Err(e) => {
                    tracing::warn!("aggregating shard {shard} of round {r}: {e}");
                    self.feed(CommitteeEvent::ShardAggregationFailed { round: r, shard });
                }
            },
            WorkDone::Fetched { round: r, shard, hash, outcome, norm, included } if r == round => self
                .feed(CommitteeEvent::AggregateFetched { shard, result_hash: hash, outcome, norm, included }),
            WorkDone::Included { round: r, result, list } if r == round => {
                self.feed(CommitteeEvent::IncludedReceived { result, included: list })
            }
            WorkDone::Sketched { round: r, result, included, matches } if r == round => {
                let verdict = match matches {
                    Some(true) => "agrees",
                    Some(false) => "disagrees",
                    None => "unknown",
                };
                self.out.event(
                    "sketch",
                    json!({ "round": r, "shard": result.shard, "signer": hex(&result.signer.0), "verdict": verdict }),
                );
                self.feed(CommitteeEvent::Sketched { result, included, matches })
            }
            WorkDone::Rechecked { round: r, result, included, matches, manifests } if r == round => {
                for m in manifests {
                    self.feed(CommitteeEvent::ManifestReceived(m));
                }
                if !matches {
                    self.out.event(
                        "wrong_result",
                        json!({ "round": r, "shard": result.shard, "signer": hex(&result.signer.0) }),
                    );
                }
                self.feed(CommitteeEvent::Rechecked { result, included, matches })
            }
            WorkDone::Applied { round: r, ledger, result } if r == round => match result {
                Ok(next) => self.applied(r, ledger, next),
                Err(e) => {
                    self.fatal = Some(RuntimeError::Config(format!("applying round {r} failed: {e}")));
                }
            },
            WorkDone::ResultPulled(r) => self.feed(CommitteeEvent::ResultReceived(r)),
            WorkDone::InputPulled(offer) => {
                let (round, shard) = (offer.round, offer.leaf.shard);
                self.out.event(
                    "input_pulled",
                    json!({ "round": round, "shard": shard, "signer": hex(&offer.signer.0) }),
                );
                self.on_offer(offer)
            }
            WorkDone::Synced { target, result } => match result {
                Ok((state, ledger)) if self.machine.moves_to(state.round, target) => {
                    self.synced(target, state, ledger)
                }
                Ok(_) => self.feed(CommitteeEvent::CatchUpFailed),
                Err(e) => {
                    tracing::warn!("catching up: {e}");
                    self.feed(CommitteeEvent::CatchUpFailed);
                }
            },
            WorkDone::TrainerStarted(Ok((handle, done_rx))) => {
                self.out.event("trainer_started", json!({ "device": handle.device }));
                self.trainer = handle;
                self.done_rx = done_rx;
                self.trainer_alive = true;
                self.overlap.clear();
                // Evaluations queued on the dead thread are lost: their
                // rounds are reported without a validation loss.
                let lost: Vec<u64> = self.pending_reports.keys().copied().collect();
                for r in lost {
                    self.report_round(r, None);
                }
                // A delta not yet trained for this round is trained now.
                if self.own.as_ref().is_none_or(|(r, _)| *r != self.machine.round()) {
                    self.train(self.machine.round(), self.machine.base());
                }
            }
            WorkDone::Undelivered { round: r, to, shard } if r == round => {
                self.feed(CommitteeEvent::ShardUndelivered { to, shard })
            }
            WorkDone::TrainerStarted(Err(e)) => {
                self.fatal = Some(RuntimeError::Trainer(format!("starting the trainer again failed: {e}")));
            }
            // Results of a round this node has left.
            _ => {}
        }
    }

    /// The blobs a finished job stored are kept under the job's round,
    /// whether or not this node is still in that round: a job that
    /// outlives its round (the node re-synced or moved on meanwhile) would
    /// otherwise leave its blobs in the store for good.
    fn keep_stored(&mut self, msg: &WorkDone) {
        match msg {
            WorkDone::Cut { round, result: Ok((leaves, _)), .. } => {
                for l in leaves {
                    self.keep(*round, BlobKind::Delta, l.payload_hash.0);
                }
            }
            WorkDone::Pulled { offer, ok: true } => {
                self.keep(offer.round, BlobKind::Delta, offer.leaf.payload_hash.0)
            }
            WorkDone::Aggregated { round, result: Ok((_, _, hash)), .. } => {
                self.keep(*round, BlobKind::Aggregate, *hash)
            }
            // Shard 0's aggregate is stored before its signers are asked
            // for, so a fetch that ends Unavailable may have stored it too.
            WorkDone::Fetched { round, hash, .. } => self.keep(*round, BlobKind::Aggregate, *hash),
            // An audit fetches the aggregate it checks, which may be a
            // claim the round does not choose.
            WorkDone::Sketched { round, result, .. } => {
                self.keep(*round, BlobKind::Aggregate, result.result_hash)
            }
            WorkDone::Stored { round, blobs } => {
                for (kind, id) in blobs {
                    self.keep(*round, *kind, *id);
                }
            }
            _ => {}
        }
    }

    fn publish(&self, kind: TopicKind, bytes: Vec<u8>) {
        let net = self.net.clone();
        tokio::spawn(async move { net.publish_retrying(kind, bytes, 20).await });
    }

    fn drain(&mut self) {
        // After a failed record nothing more leaves: the node stops.
        while self.fatal.is_none() {
            let Some(action) = self.machine.poll_action() else { break };
            self.act(action);
        }
    }

    fn act(&mut self, action: CommitteeAction) {
        let round = self.machine.round();
        match action {
            // Stored before the actions after it send what it records.
            CommitteeAction::Record(record) => {
                if let Err(e) = self.store.meta.set_signed_record(&self.spec.run_id(), &record.encode()) {
                    self.fatal = Some(RuntimeError::Store(e));
                }
                // Our delta for the round is signed (and stored): from here
                // on it is sent, to its owners or again after a restart.
                if let Some(m) =
                    record.manifest.as_ref().filter(|m| self.announced.is_none_or(|r| r < m.round))
                {
                    self.announced = Some(m.round);
                    self.out.event("announced", json!({ "round": m.round, "shards": m.shards }));
                }
            }
            CommitteeAction::Train { round, base, .. } => {
                self.metrics.round_opened(round);
                self.train(round, base)
            }
            CommitteeAction::PublishManifest(m) => {
                self.publish(TopicKind::ShardedManifest, m.encode());
            }
            CommitteeAction::SendShard { to, shard, shards, proof, manifest } => {
                let Some((r, leaves)) = &self.own else { return };
                let Some(leaf) = leaves.get(shard as usize).copied() else { return };
                let offer =
                    ShardOffer { round: *r, signer: self.me, shards, leaf, proof, manifest, payload: None };
                let (net, store, tx) = (self.net.clone(), self.store.clone(), self.tx.clone());
                tokio::spawn(async move {
                    if !transfer::send_offer(net, &store, to, offer).await {
                        let _ = tx.send(WorkDone::Undelivered { round, to, shard });
                    }
                });
            }
            CommitteeAction::AggregateShard { shard, inputs, leaves } => {
                let (store, spec, tx) = (self.store.clone(), self.spec.clone(), self.tx.clone());
                let layout = self.machine.plan().layout();
                tokio::task::spawn_blocking(move || {
                    let result = work::aggregate_stored(&store, &spec, layout, shard, &inputs, &leaves)
                        .map(|a| (a.included, a.total_tokens, a.result_hash));
                    let _ = tx.send(WorkDone::Aggregated { round, shard, result });
                });
            }
            CommitteeAction::PublishResult(r) => {
                if let Some(list) = self.machine.our_list(r.shard).filter(|l| l.root() == r.included_root) {
                    let signers = IncludedSigners::of(list, &self.machine.ledger().roster);
                    self.served.hold_list(r.round, r.shard, r.result_hash, list.encode(), signers.encode());
                }
                self.served.hold_result(r.round, r.shard, r.encode());
                self.offer_as_backing(&r);
                self.publish(TopicKind::ShardResult, r.encode())
            }
            CommitteeAction::PullInputs { shard, from } => {
                self.out.event("pull_inputs", json!({ "round": round, "shard": shard, "asked": from.len() }));
                for signer in from {
                    let (net, tx) = (self.net.clone(), self.tx.clone());
                    tokio::spawn(async move {
                        if let Some(offer) = transfer::pull_input(&net, round, shard, signer).await {
                            let _ = tx.send(WorkDone::InputPulled(offer));
                        }
                    });
                }
            }
            CommitteeAction::PullResult { shard, from, held } => {
                let (net, tx, out) = (self.net.clone(), self.tx.clone(), self.out);
                tokio::spawn(async move {
                    let result = transfer::pull_result(&net, round, shard, &from, &held).await;
                    let got = result.is_some();
                    out.event(
                        "pull_result",
                        json!({ "round": round, "shard": shard, "asked": from.len(), "got": got }),
                    );
                    if let Some(result) = result {
                        let _ = tx.send(WorkDone::ResultPulled(result));
                    }
                });
            }
            CommitteeAction::FetchAggregate { shard, result_hash, from } => {
                let layout = self.machine.plan().layout();
                let form = (aggregate_codec(self.spec.codec), layout.len(shard));
                let (net, store, tx) = (self.net.clone(), self.store.clone(), self.tx.clone());
                let fetching = self.fetching.clone();
                if from == self.me {
                    let included = (shard == 0)
                        .then(|| self.served.signers(round, shard, result_hash))
                        .flatten()
                        .and_then(|b| IncludedSigners::decode(&b).ok());
                    let norm = transfer::held_aggregate_norm(&store, &result_hash, form);
                    let outcome = match norm {
                        Some(_) => FetchOutcome::Served,
                        None => FetchOutcome::Unavailable,
                    };
                    let (hash, norm) = (result_hash, norm.unwrap_or(0.0));
                    let _ = tx.send(WorkDone::Fetched { round, shard, hash, outcome, norm, included });
                    return;
                }
                tokio::spawn(async move {
                    let asked = (round, shard, result_hash);
                    let (outcome, norm, included) =
                        transfer::fetch_aggregate(net, store, &fetching, asked, form, from).await;
                    let _ = tx.send(WorkDone::Fetched {
                        round,
                        shard,
                        hash: result_hash,
                        outcome,
                        norm,
                        included,
                    });
                });
            }
            CommitteeAction::RequestIncluded { result } => {
                let (net, tx) = (self.net.clone(), self.tx.clone());
                let roster = self.machine.ledger().roster.clone();
                let roots = self.machine.manifest_roots();
                tokio::spawn(async move {
                    if let Some(list) = transfer::request_included(net, &result, &roster, &roots).await {
                        let _ = tx.send(WorkDone::Included { round, result, list });
                    }
                });
            }
            CommitteeAction::Sketch(audits) => self.sketch(audits),
            CommitteeAction::Recheck { result, included, holders } => self.recheck(result, included, holders),
            CommitteeAction::PublishProof(p) => {
                self.out.event(
                    "proof",
                    json!({ "accused": hex(&p.accused().0), "round": p.round(), "ours": true }),
                );
                self.publish(TopicKind::FraudProof, p.encode());
            }
            CommitteeAction::FetchState { round, state, holders } => self.fetch_state(round, state, holders),
            CommitteeAction::Apply { round, base, shards, ledger } => {
                if base != self.state_id() {
                    return;
                }
                for r in self.machine.chosen_results() {
                    self.served.hold_applied_result(r.round, r.shard, r.encode());
                }
                let (store, spec, state, tx) =
                    (self.store.clone(), self.spec.clone(), self.state.state().clone(), self.tx.clone());
                let layout = self.machine.plan().layout();
                tokio::task::spawn_blocking(move || {
                    let result = work::apply_round(&store, &spec, &state, layout, &shards, &ledger);
                    let _ = tx.send(WorkDone::Applied { round, ledger, result });
                });
            }
        }
    }

    /// Gossip a signed progress report (every `TELEMETRY_EVERY`, once the
    /// node has trained).
    /// Offer our result `r` (the first of its round) in our status, so an
    /// exporter or archive can count where we stand.
    fn offer_as_backing(&mut self, r: &ShardResult) {
        if self.own_results.contains_key(&r.round) {
            return;
        }
        self.own_results.insert(r.round, r.clone());
        while self.own_results.len() > super::backing::BACKING_ROUNDS {
            self.own_results.pop_first();
        }
        self.server
            .set_backing(super::backing::own_results(self.own_results.values(), self.own_ticket.as_ref()));
    }

    /// Gossip our own ticket when joining and every `TICKET_GOSSIP_EVERY`.
    fn gossip_ticket(&mut self) {
        let Some(t) = &self.own_ticket else { return };
        if self.last_ticket_gossip.is_some_and(|at| at.elapsed() < TICKET_GOSSIP_EVERY) {
            return;
        }
        self.last_ticket_gossip = Some(Instant::now());
        let bytes = t.encode();
        let net = self.net.clone();
        tokio::spawn(async move { net.publish_retrying(TopicKind::Ticket, bytes, 20).await });
    }

    fn publish_telemetry(&self) {
        if self.first_train.is_none() {
            return;
        }
        let t = super::telemetry::Progress {
            spec: &self.spec,
            round: self.machine.round(),
            state: self.state_id(),
            train_loss: self.last_train_loss,
            val_loss: self.last_val_loss,
            tokens: self.train_tokens,
            first_train: self.first_train,
            trainer: &self.trainer,
            net: &self.net,
            peers: self.trainers.len(),
            restarts: self.restarts.total,
        }
        .telemetry();
        super::telemetry::publish(self.net.clone(), self.key.clone(), t);
    }

    /// Audit results by sketches and report each verdict.
    fn sketch(&mut self, audits: Vec<SketchAudit>) {
        let round = self.machine.round();
        let reading = audit::ShardReading {
            run: self.spec.run_id(),
            round,
            layout: self.machine.plan().layout(),
            codec: self.spec.codec,
            rule: ShardRule::of(&self.spec),
        };
        let (net, store, served, tx) =
            (self.net.clone(), self.store.clone(), self.served.clone(), self.tx.clone());
        let fetching = self.fetching.clone();
        tokio::spawn(async move {
            audit::sketch(net, store, served, fetching, reading, audits, |a, matches| {
                let (result, included) = (a.result, a.included);
                let _ = tx.send(WorkDone::Sketched { round, result, included, matches });
            })
            .await;
        });
    }

    /// Recompute `result`'s shard from its included inputs (gathered from
    /// `holders` where this node lacks them) and report whether it matches.
    fn recheck(&mut self, result: ShardResult, included: IncludedList, holders: Vec<PublicKey>) {
        let round = self.machine.round();
        let inputs: Vec<(PublicKey, [u8; 32])> = included.entries.clone();
        let held: Vec<Option<ShardOffer>> =
            inputs.iter().map(|(signer, _)| self.served.leaf(round, result.shard, *signer)).collect();
        let layout = self.machine.plan().layout();
        let Some(cap) = self.spec.codec.payload_len(layout.len(result.shard) as u64) else { return };
        let (net, store, spec, tx) =
            (self.net.clone(), self.store.clone(), self.spec.clone(), self.tx.clone());
        let (shard, shards, run) = (result.shard, layout.shards(), self.spec.run_id());
        let want = transfer::RecheckInputs { run, round, shard, shards, inputs, held, holders, cap };
        tokio::spawn(async move {
            let Some(offers) = transfer::gather_inputs(&net, &store, &want).await else { return };
            let (manifests, leaves): (Vec<ShardedManifest>, Vec<ShardLeaf>) =
                offers.into_iter().map(|o| (*o.manifest, o.leaf)).unzip();
            let mut stored: Vec<(BlobKind, [u8; 32])> =
                leaves.iter().map(|l| (BlobKind::Delta, l.payload_hash.0)).collect();
            let recomputed = tokio::task::spawn_blocking(move || {
                let hash = work::aggregate_stored(&store, &spec, layout, shard, &manifests, &leaves)
                    .map(|a| a.result_hash);
                (hash, manifests)
            })
            .await;
            if let Ok((Ok(hash), _)) = &recomputed {
                stored.push((BlobKind::Aggregate, *hash));
            }
            let _ = tx.send(WorkDone::Stored { round, blobs: stored });
            if let Ok((Ok(hash), manifests)) = recomputed {
                let matches = hash == result.result_hash;
                let _ = tx.send(WorkDone::Rechecked { round, result, included, matches, manifests });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::spec::{run_spec, RunParams};

    #[test]
    fn only_an_open_run_that_names_operators_lets_their_results_alone_decide() {
        let op = PublicKey([1; 32]);
        let config = |admission| {
            committee_config(
                &run_spec(&RunParams { admission, committee_size: 1, ..Default::default() }).expect("spec"),
            )
        };
        assert_eq!(config(AdmissionPolicy::OpenWithOperators { operators: vec![op] }).operators, vec![op]);
        assert!(config(AdmissionPolicy::Tickets { operators: vec![op] }).operators.is_empty());
        assert!(config(AdmissionPolicy::Open).operators.is_empty());
    }
}
