//! The event loop of `murmur netsim`: carries out each machine's actions on
//! the simulated network, plays the adversaries, and gathers the report.
//! Work that is a pure function of its inputs (a shard's aggregation, the
//! outer step) is computed once per distinct input and shared, as honest
//! nodes holding the same inputs would compute the same bits.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::{bail, Result};
use murmur_protocol::codec::{decode_delta, encode_delta};
use murmur_protocol::committee::messages::aggregate_hash;
use murmur_protocol::committee::{
    aggregate_codec, aggregate_shard, shard_norm, CommitteeAction, CommitteeConfig, CommitteeEvent,
    CommitteeMachine, FetchOutcome, IncludedList, IncludedSigners, Ledger, MerkleTree, SeenSignatures,
    ShardInput, ShardLeaf, ShardResult, ShardedManifest,
};
use murmur_protocol::hash::{payload_hash_of, RunId, StateId};
use murmur_protocol::identity::{NodeKey, PublicKey};
use murmur_protocol::{initial_momentum, outer_step, state_id, TrainingState};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod audits;

use super::transport::{Kind, Link, Network};
use super::wire;
use super::workload::{drawn_delta, LinearTask};
use super::{v1_bytes, NetsimConfig, NetsimReport, NodeRound, Offender, RoundReport, Workload};
use crate::net::offer::ShardOffer;
use crate::net::{XferRequest, XferResponse};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Honest,
    Poisoner,
    Liar,
    Withholder,
    Equivocator,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Honest => "honest",
            Role::Poisoner => "poisoner",
            Role::Liar => "liar",
            Role::Withholder => "withholder",
            Role::Equivocator => "equivocator",
        }
    }
}

/// A shard payload and its leaf.
type Payload = (Arc<Vec<u8>>, ShardLeaf);
/// A node's round: opened at, applied at, the state it reached.
type Progress = (u64, Option<u64>, Option<StateId>);

enum Msg {
    Event(Box<CommitteeEvent>),
    /// Events one transfer delivers together, in order.
    Events(Vec<CommitteeEvent>),
    Timer(u64),
    /// Bytes that arrive with nothing to report (one input of a re-check).
    Bytes,
}

struct Sim {
    cfg: NetsimConfig,
    run: RunId,
    keys: Vec<NodeKey>,
    index: HashMap<PublicKey, usize>,
    roles: Vec<Role>,
    machines: Vec<CommitteeMachine>,
    net: Network<Msg>,
    task: Option<LinearTask>,
    /// Parameters and momentum by the parameters' StateId; states' ids map to them.
    states: HashMap<StateId, (Arc<TrainingState>, Ledger)>,
    /// Payloads of the rounds in progress: (round, node, shard) → bytes and leaf.
    payloads: HashMap<(u64, usize, u32), Payload>,
    /// This round's aggregated values by result hash.
    values: HashMap<[u8; 32], Arc<Vec<f32>>>,
    aggregates: HashMap<[u8; 32], (IncludedList, u64, [u8; 32])>,
    /// Σ cᵢ·xᵢ of each audited result's included inputs, by (round, shard,
    /// included root): what honest trainers' projections add up to.
    honest_sums: HashMap<(u64, u32, [u8; 32]), Arc<Vec<f32>>>,
    /// The included signers behind each result hash signed this round,
    /// against its signer's roster (a liar's wrong hash keeps the honest
    /// list it computed), as the signer serves them.
    lists: HashMap<[u8; 32], IncludedSigners>,
    /// Every result signed, by (round, shard, signer), as its signer serves it.
    results: HashMap<(u64, u32, usize), ShardResult>,
    /// Per node, per round it applied (this and the last): each shard's
    /// applied result, by signer (the node serves it too).
    applied_signers: HashMap<usize, BTreeMap<u64, Vec<Option<usize>>>>,
    /// The manifests each node signed, by (round, node).
    signed: HashMap<(u64, usize), Vec<ShardedManifest>>,
    /// Hashes of everything gossiped (gossip's duplicate filter).
    gossiped: std::collections::HashSet<[u8; 32]>,
    applied: HashMap<[u8; 32], StateId>,
    /// Node → (round opened at, applied at, state).
    progress: Vec<BTreeMap<u64, Progress>>,
    /// (round, node): the node ended the round on a state it caught up with.
    caught_up: BTreeSet<(u64, usize)>,
    offline: Vec<bool>,
    timers: Vec<Option<u64>>,
    first_offence: Vec<Option<u64>>,
    rng: SmallRng,
}

/// How long an unanswered fetch waits before it reports failure.
const FETCH_TIMEOUT_MS: u64 = 2000;

fn hash_of(parts: &[&[u8]]) -> [u8; 32] {
    *blake3::hash(&parts.concat()).as_bytes()
}

/// Run the simulation to the end and report.
pub fn run(cfg: NetsimConfig) -> Result<NetsimReport> {
    if cfg.nodes == 0 || cfg.params == 0 || cfg.rounds == 0 {
        bail!("netsim needs at least one node, one parameter and one round");
    }
    if cfg.adversaries.total() >= cfg.nodes {
        bail!("{} adversaries leave no honest node among {}", cfg.adversaries.total(), cfg.nodes);
    }
    let mut sim = Sim::new(cfg)?;
    sim.run_to_end()?;
    Ok(sim.report())
}

impl Sim {
    fn new(cfg: NetsimConfig) -> Result<Self> {
        let n = cfg.nodes;
        let keys: Vec<NodeKey> = (0..n)
            .map(|i| {
                let mut seed = [0u8; 32];
                seed[..8].copy_from_slice(&cfg.seed.to_le_bytes());
                seed[8..16].copy_from_slice(&(i as u64).to_le_bytes());
                NodeKey::from_seed(seed)
            })
            .collect();
        let index = keys.iter().enumerate().map(|(i, k)| (k.public(), i)).collect();
        let a = cfg.adversaries;
        let honest = n - a.total();
        let roles: Vec<Role> = (0..n)
            .map(|i| {
                let j = i.wrapping_sub(honest);
                if i < honest {
                    Role::Honest
                } else if j < a.poisoners {
                    Role::Poisoner
                } else if j < a.poisoners + a.liars {
                    Role::Liar
                } else if j < a.poisoners + a.liars + a.withholders {
                    Role::Withholder
                } else {
                    Role::Equivocator
                }
            })
            .collect();
        let run = RunId(hash_of(&[b"netsim", &cfg.seed.to_le_bytes()]));
        let task = match cfg.workload {
            Workload::Linear { inner_steps, batch, lr } => {
                Some(LinearTask::new(cfg.params, inner_steps, batch, lr, cfg.seed))
            }
            Workload::Drawn { .. } => None,
        };
        let genesis = TrainingState {
            run,
            round: 0,
            params: vec![0.0; cfg.params],
            momentum: initial_momentum(cfg.outer, cfg.params),
        };
        let ledger = Ledger::genesis(keys.iter().map(NodeKey::public).collect());
        let base = ledger.state_id(genesis.id());
        let mut states = HashMap::new();
        states.insert(base, (Arc::new(genesis), ledger.clone()));
        let mcfg = CommitteeConfig {
            run,
            codec: cfg.codec,
            element_count: cfg.params as u64,
            k: cfg.k,
            rule: cfg.rule(),
            input_ms: cfg.input_ms,
            result_ms: cfg.result_ms,
            grace_ms: cfg.grace_ms,
            audits: cfg.audits,
            operators: Vec::new(),
        };
        let seen = SeenSignatures::default();
        let machines = keys
            .iter()
            .map(|k| {
                let mut m = CommitteeMachine::new(mcfg.clone(), k.clone(), 0, base, ledger.clone(), 0);
                m.share_signatures(seen.clone());
                m
            })
            .collect();
        let links = vec![Link::mbps(cfg.up_mbps, cfg.down_mbps, cfg.latency_ms); n];
        let net = Network::new(links, cfg.gossip_degree);
        Ok(Self {
            rng: SmallRng::seed_from_u64(cfg.seed ^ 0x5eed),
            cfg,
            run,
            keys,
            index,
            roles,
            machines,
            net,
            task,
            states,
            payloads: HashMap::new(),
            values: HashMap::new(),
            aggregates: HashMap::new(),
            honest_sums: HashMap::new(),
            lists: HashMap::new(),
            signed: HashMap::new(),
            results: HashMap::new(),
            applied_signers: HashMap::new(),
            gossiped: Default::default(),
            applied: HashMap::new(),
            progress: vec![BTreeMap::new(); n],
            caught_up: BTreeSet::new(),
            offline: vec![false; n],
            timers: vec![None; n],
            first_offence: vec![None; n],
        })
    }

    fn online(&self) -> Vec<usize> {
        (0..self.keys.len()).filter(|i| !self.offline[*i]).collect()
    }

    fn run_to_end(&mut self) -> Result<()> {
        for i in 0..self.keys.len() {
            self.progress[i].insert(0, (0, None, None));
            self.drain(i, 0)?;
        }
        while let Some((now, to, msg)) = self.net.pop() {
            let round = self.machines[to].round();
            if round >= self.cfg.rounds {
                continue;
            }
            match msg {
                Msg::Timer(at) => {
                    if self.timers[to] != Some(at) {
                        continue;
                    }
                    self.timers[to] = None;
                    self.machines[to].handle(now, CommitteeEvent::TimerFired);
                }
                Msg::Event(e) => {
                    if self.offline[to] && !matches!(*e, CommitteeEvent::Applied { .. }) {
                        continue;
                    }
                    self.machines[to].handle(now, *e);
                }
                Msg::Events(es) => {
                    if self.offline[to] {
                        continue;
                    }
                    for e in es {
                        self.machines[to].handle(now, e);
                    }
                }
                Msg::Bytes => continue,
            }
            self.drain(to, now)?;
        }
        Ok(())
    }

    fn schedule_timer(&mut self, i: usize) {
        if let Some(t) = self.machines[i].next_timeout() {
            if self.timers[i] != Some(t) {
                self.timers[i] = Some(t);
                self.net.at(t, i, Msg::Timer(t));
            }
        }
    }

    fn drain(&mut self, i: usize, now: u64) -> Result<()> {
        while let Some(a) = self.machines[i].poll_action() {
            self.act(i, now, a)?;
        }
        self.schedule_timer(i);
        Ok(())
    }

    fn act(&mut self, i: usize, now: u64, action: CommitteeAction) -> Result<()> {
        let round = self.machines[i].round();
        if std::env::var_os("NETSIM_DEBUG").is_some() && i == 5 {
            let kind = format!("{action:?}");
            eprintln!("{now} r{round} {}", &kind[..kind.len().min(60)]);
        }
        match action {
            CommitteeAction::Train { round, base, plan } => self.train(i, now, round, base, &plan)?,
            CommitteeAction::PublishManifest(m) => {
                self.record_signed(i, round, &m);
                if self.roles[i] == Role::Equivocator {
                    let other = self.second_manifest(i, round, &m);
                    self.gossip(i, now, round, &other.encode(), CommitteeEvent::ManifestReceived(other));
                }
                self.gossip(i, now, round, &m.encode(), CommitteeEvent::ManifestReceived(m));
            }
            CommitteeAction::SendShard { to, shard, shards, proof, manifest } => {
                let Some(&j) = self.index.get(&to) else { return Ok(()) };
                let Some((payload, leaf)) = self.payloads.get(&(round, i, shard)).cloned() else {
                    return Ok(());
                };
                self.record_signed(i, round, &manifest);
                let manifest = match self.roles[i] {
                    // An equivocator signs a second manifest (same delta, a
                    // different claim) and sends it with its odd shards.
                    Role::Equivocator if shard % 2 == 1 => self.second_manifest(i, round, &manifest),
                    _ => *manifest,
                };
                let signer = self.keys[i].public();
                let offer = ShardOffer {
                    round,
                    signer,
                    shards,
                    leaf,
                    proof: proof.clone(),
                    manifest: Box::new(manifest.clone()),
                    payload: None,
                };
                debug_assert_eq!(offer.leaf.payload_len, payload.len() as u64);
                let bytes = wire::offer(&offer);
                let m = CommitteeEvent::ManifestReceived(manifest);
                let e = CommitteeEvent::ShardReceived { signer, shards, leaf, proof };
                self.net.send(now, round, Kind::Shards, i, j, bytes, Msg::Events(vec![m, e]));
            }
            CommitteeAction::AggregateShard { shard, inputs, leaves } => {
                if self.roles[i] == Role::Withholder || self.offline[i] {
                    return Ok(());
                }
                let (list, tokens, mut hash) = self.aggregate(i, round, shard, &inputs, &leaves)?;
                if self.roles[i] == Role::Liar {
                    let honest = self.values.get(&hash).cloned().unwrap_or_default();
                    let lie: Vec<f32> = honest.iter().map(|v| v + 0.05).collect();
                    hash = aggregate_hash(&encode_delta(aggregate_codec(self.cfg.codec), &lie)?);
                    self.values.insert(hash, Arc::new(lie));
                    self.first_offence[i].get_or_insert(round);
                }
                let signers = IncludedSigners::of(&list, &self.machines[i].ledger().roster);
                self.lists.insert(hash, signers);
                let e = CommitteeEvent::ShardAggregated {
                    round,
                    shard,
                    included: list,
                    total_tokens: tokens,
                    result_hash: hash,
                };
                self.net.at(now + 1, i, Msg::Event(Box::new(e)));
            }
            CommitteeAction::PublishResult(r) => {
                self.results.insert((r.round, r.shard, i), r.clone());
                self.gossip(i, now, round, &r.encode(), CommitteeEvent::ResultReceived(r))
            }
            CommitteeAction::FetchAggregate { shard, result_hash, from } => {
                self.fetch_aggregate(i, now, round, shard, result_hash, from)
            }
            CommitteeAction::RequestIncluded { result } => self.request_included(i, now, round, result),
            CommitteeAction::PullResult { shard, from, held } => {
                self.pull_result(i, now, round, shard, &from, &held)
            }
            CommitteeAction::PullInputs { shard, from } => self.pull_inputs(i, now, round, shard, &from),
            CommitteeAction::Sketch(audits) => self.sketch(i, now, round, audits)?,
            CommitteeAction::Recheck { result, included, holders } => {
                self.recheck(i, now, round, result, included, &holders)?
            }
            CommitteeAction::PublishProof(p) => {
                self.gossip(i, now, round, &p.encode(), CommitteeEvent::ProofReceived(p))
            }
            CommitteeAction::Apply { round, base, shards, ledger } => {
                // As the node does: it serves the results it applied (this
                // and the last round).
                let mut signers = vec![None; shards.len()];
                for r in self.machines[i].chosen_results() {
                    if let (Some(slot), Some(&j)) =
                        (signers.get_mut(r.shard as usize), self.index.get(&r.signer))
                    {
                        *slot = Some(j);
                    }
                }
                let rounds = self.applied_signers.entry(i).or_default();
                rounds.insert(round, signers);
                rounds.retain(|r, _| *r + 1 >= round);
                self.apply(i, now, round, base, &shards, ledger)?
            }
            CommitteeAction::FetchState { round: decided, state, holders } => {
                self.fetch_state(i, now, round, decided, state, &holders)
            }
            // A simulated node keeps its memory when it goes offline.
            CommitteeAction::Record(_) => {}
        }
        Ok(())
    }

    /// Node `i` (in `round`) catches up with `state`, what a majority ended
    /// round `decided` on: its parameters and ledger come from the first
    /// holder, and the node ends `decided` on it.
    fn fetch_state(
        &mut self,
        i: usize,
        now: u64,
        round: u64,
        decided: u64,
        state: StateId,
        holders: &[PublicKey],
    ) {
        let from = holders.iter().find_map(|k| self.index.get(k).copied());
        let (Some(from), Some((s, ledger))) = (from, self.states.get(&state).cloned()) else {
            self.net.at(now + 1, i, Msg::Event(Box::new(CommitteeEvent::CatchUpFailed)));
            return;
        };
        let state_bytes = 4 * self.cfg.params as u64 * if self.cfg.outer.has_momentum() { 2 } else { 1 };
        let bytes = wire::state(ledger.encode().len() as u64, state_bytes);
        let e = CommitteeEvent::CaughtUp { round: s.round, state, ledger };
        let at = self.net.send(now, round, Kind::States, from, i, bytes, Msg::Event(Box::new(e)));
        self.progress[i].retain(|r, _| *r <= decided);
        let started = self.progress[i].get(&decided).map_or(now, |p| p.0);
        self.progress[i].insert(decided, (started, Some(at), Some(state)));
        self.progress[i].insert(decided + 1, (at, None, None));
        self.caught_up.insert((decided, i));
    }

    /// Keep `m` among the manifests node `i` signed for `round`.
    fn record_signed(&mut self, i: usize, round: u64, m: &ShardedManifest) {
        let signed = self.signed.entry((round, i)).or_default();
        if !signed.contains(m) {
            signed.push(m.clone());
        }
    }

    /// An equivocator's second manifest of `round`: `first` (recorded
    /// already) with another claimed loss, signed once a round and kept
    /// with what it signed.
    fn second_manifest(&mut self, i: usize, round: u64, first: &ShardedManifest) -> ShardedManifest {
        self.first_offence[i].get_or_insert(round);
        if let Some(other) = self.signed.get(&(round, i)).and_then(|v| v.iter().find(|m| *m != first)) {
            return other.clone();
        }
        let mut other = first.clone();
        other.train_loss += 1.0;
        let other = other.sign(&self.keys[i]);
        self.record_signed(i, round, &other);
        other
    }

    /// Gossip an encoded message; the same bytes gossiped again (another
    /// node found the same proof) are dropped, as gossip's duplicate filter
    /// drops them.
    fn gossip(&mut self, from: usize, now: u64, round: u64, encoded: &[u8], e: CommitteeEvent) {
        if !self.gossiped.insert(*blake3::hash(encoded).as_bytes()) {
            return;
        }
        let bytes = wire::gossip(encoded.len());
        let online = self.online();
        let at = self.net.gossip_cost(now, round, &online, bytes);
        for j in online {
            if j != from {
                self.net.at(at, j, Msg::Event(Box::new(e.clone())));
            }
        }
    }

    fn train(
        &mut self,
        i: usize,
        now: u64,
        round: u64,
        base: StateId,
        plan: &murmur_protocol::committee::CommitteePlan,
    ) -> Result<()> {
        self.progress[i].entry(round).or_insert((now, None, None));
        if self.roles[i] == Role::Honest && self.cfg.churn > 0.0 && round > 0 {
            self.offline[i] = self.rng.gen_bool(self.cfg.churn.min(1.0));
        }
        if self.offline[i] {
            return Ok(());
        }
        let Some((state, _)) = self.states.get(&base).cloned() else { bail!("node {i}: unknown base state") };
        let (mut delta, loss) = match (&self.task, self.cfg.workload) {
            (Some(t), _) => t.train(&state.params, i, round),
            (None, Workload::Drawn { sigma }) => {
                (drawn_delta(self.cfg.params, sigma, self.cfg.seed, i, round), 0.0)
            }
            (None, _) => bail!("no workload"),
        };
        if self.roles[i] == Role::Poisoner {
            delta.iter_mut().for_each(|v| *v *= -50.0);
            self.first_offence[i].get_or_insert(round);
        }
        let layout = plan.layout();
        let mut leaves = Vec::with_capacity(layout.shards() as usize);
        for s in 0..layout.shards() {
            let payload = encode_delta(self.cfg.codec, &delta[layout.range(s)])?;
            let decoded = decode_delta(&payload, self.cfg.codec, layout.len(s))?;
            let leaf = ShardLeaf {
                shard: s,
                payload_hash: payload_hash_of(&payload),
                payload_len: payload.len() as u64,
                norm: shard_norm(&decoded),
            };
            leaves.push(leaf);
            self.payloads.insert((round, i, s), (Arc::new(payload), leaf));
        }
        let norm = (leaves.iter().map(|l| f64::from(l.norm).powi(2)).sum::<f64>()).sqrt() as f32;
        let e = CommitteeEvent::LocalDeltaReady { tokens: 1000, train_loss: loss, norm, leaves };
        self.net.at(now + self.cfg.train_ms, i, Msg::Event(Box::new(e)));
        Ok(())
    }

    /// Aggregate `shard` of `round` from `inputs` as node `i` does (once
    /// per distinct input set, keeping the values): with the shard's length
    /// in `i`'s plan (the round `i` is in; another node may have moved on
    /// to a plan that cuts the vector differently).
    fn aggregate(
        &mut self,
        i: usize,
        round: u64,
        shard: u32,
        inputs: &[ShardedManifest],
        leaves: &[ShardLeaf],
    ) -> Result<(IncludedList, u64, [u8; 32])> {
        let n = self.machines[i].plan().layout().len(shard);
        let mut key = blake3::Hasher::new();
        key.update(&round.to_le_bytes());
        key.update(&shard.to_le_bytes());
        key.update(&(n as u64).to_le_bytes());
        for (m, l) in inputs.iter().zip(leaves) {
            key.update(&m.signer.0);
            key.update(&l.payload_hash.0);
        }
        let key = *key.finalize().as_bytes();
        if let Some(a) = self.aggregates.get(&key) {
            return Ok(a.clone());
        }
        let mut decoded = Vec::with_capacity(inputs.len());
        for m in inputs {
            let j = self.index[&m.signer];
            let bytes = self.payloads.get(&(round, j, shard)).map(|p| p.0.clone()).unwrap_or_default();
            decoded.push(decode_delta(&bytes, self.cfg.codec, n).unwrap_or_default());
        }
        let shard_inputs: Vec<ShardInput<'_>> =
            inputs.iter().zip(leaves).zip(&decoded).map(|((m, l), v)| ShardInput::of(m, l, v)).collect();
        let out = match aggregate_shard(&shard_inputs, n, self.cfg.rule(), aggregate_codec(self.cfg.codec)) {
            Ok(a) => {
                self.values.insert(a.result_hash, Arc::new(a.values));
                (a.included, a.total_tokens, a.result_hash)
            }
            Err(_) => (IncludedList::default(), 0, [0; 32]),
        };
        self.aggregates.insert(key, out.clone());
        Ok(out)
    }

    fn serves(&self, j: usize) -> bool {
        !self.offline[j] && self.roles[j] != Role::Withholder
    }

    fn fetch_aggregate(
        &mut self,
        i: usize,
        now: u64,
        round: u64,
        shard: u32,
        hash: [u8; 32],
        from: PublicKey,
    ) {
        let list = if shard == 0 { self.list_for(hash) } else { None };
        let outcome = match self.values.contains_key(&hash) {
            true => FetchOutcome::Served,
            false => FetchOutcome::Unavailable,
        };
        let norm = self.values.get(&hash).map_or(0.0, |v| shard_norm(v));
        let e = CommitteeEvent::AggregateFetched {
            shard,
            result_hash: hash,
            outcome,
            norm,
            included: list.clone(),
        };
        match self.index.get(&from).copied() {
            // We hold it ourselves (we signed it).
            Some(j) if j == i => self.net.at(now + 1, i, Msg::Event(Box::new(e))),
            Some(j) if self.serves(j) => {
                let n = self.values.get(&hash).map_or(0, |v| v.len()) as u64;
                let payload = aggregate_codec(self.cfg.codec).payload_len(n).unwrap_or(4 * n);
                let signers = list.map_or(0, |l| wire::included(l.encode().len()));
                let bytes = wire::blob(payload) + signers;
                self.net.send(now, round, Kind::Aggregates, j, i, bytes, Msg::Event(Box::new(e)));
            }
            // Nobody answers: the request times out.
            _ => {
                let e = CommitteeEvent::AggregateFetched {
                    shard,
                    result_hash: hash,
                    outcome: FetchOutcome::Unavailable,
                    norm: 0.0,
                    included: None,
                };
                self.net.at(now + FETCH_TIMEOUT_MS, i, Msg::Event(Box::new(e)));
            }
        }
    }

    /// Node `i` asks each of `from` in turn for a result of `shard` (the
    /// one it applied, else its own) until one serves one not signed by
    /// one of `held` (each ask charged as the node's request).
    fn pull_result(
        &mut self,
        i: usize,
        now: u64,
        round: u64,
        shard: u32,
        from: &[PublicKey],
        held: &[PublicKey],
    ) {
        let request = XferRequest::Result { round, shard };
        for key in from {
            let Some(&j) = self.index.get(key) else { continue };
            let applied = self.applied_signers.get(&j).and_then(|rounds| {
                let signer = rounds.get(&round)?.get(shard as usize).copied()??;
                self.results.get(&(round, shard, signer))
            });
            let served =
                applied.or_else(|| self.results.get(&(round, shard, j))).filter(|_| self.serves(j)).cloned();
            let answer = served.as_ref().map_or(XferResponse::NotFound, |r| XferResponse::Result(r.encode()));
            let bytes = wire::exchange(&request, &answer);
            match served.filter(|r| !held.contains(&r.signer)) {
                Some(r) => {
                    let e = CommitteeEvent::ResultReceived(r);
                    self.net.send(now, round, Kind::Gossip, j, i, bytes, Msg::Event(Box::new(e)));
                    return;
                }
                None => {
                    self.net.send(now, round, Kind::Gossip, j, i, bytes, Msg::Bytes);
                }
            }
        }
    }

    /// Node `i` asks each of `from` for its own shard `shard` (its leaf,
    /// proof and manifest, then the payload), charged as the node's
    /// Leaf request and payload pull.
    fn pull_inputs(&mut self, i: usize, now: u64, round: u64, shard: u32, from: &[PublicKey]) {
        for key in from {
            let Some(&j) = self.index.get(key) else { continue };
            let request = XferRequest::Leaf { round, shard, signer: *key };
            let manifest = self.signed.get(&(round, j)).and_then(|ms| ms.first()).cloned();
            let (Some(manifest), true) = (manifest, self.serves(j)) else {
                let bytes = wire::exchange(&request, &XferResponse::NotFound);
                self.net.send(now, round, Kind::Shards, j, i, bytes, Msg::Bytes);
                continue;
            };
            let leaves: Vec<ShardLeaf> =
                (0..manifest.shards).filter_map(|s| self.payloads.get(&(round, j, s)).map(|p| p.1)).collect();
            if leaves.len() != manifest.shards as usize {
                continue;
            }
            let leaf = leaves[shard as usize];
            let proof = MerkleTree::new(&leaves).proof(shard as usize);
            let offer = ShardOffer {
                round,
                signer: *key,
                shards: manifest.shards,
                leaf,
                proof: proof.clone(),
                manifest: Box::new(manifest.clone()),
                payload: None,
            };
            // The Leaf answer carries no payload: it is pulled as a blob.
            let bytes =
                wire::exchange(&request, &XferResponse::Leaf(offer.clone())) + wire::blob(leaf.payload_len);
            let m = CommitteeEvent::ManifestReceived(manifest);
            let e = CommitteeEvent::ShardReceived { signer: *key, shards: offer.shards, leaf, proof };
            self.net.send(now, round, Kind::Shards, j, i, bytes, Msg::Events(vec![m, e]));
        }
    }

    fn list_for(&self, hash: [u8; 32]) -> Option<IncludedSigners> {
        self.lists.get(&hash).cloned()
    }

    fn apply(
        &mut self,
        i: usize,
        now: u64,
        round: u64,
        base: StateId,
        shards: &[Option<[u8; 32]>],
        ledger: Ledger,
    ) -> Result<()> {
        let mut key = blake3::Hasher::new();
        key.update(&base.0);
        for s in shards {
            key.update(&s.unwrap_or([0; 32]));
        }
        key.update(&ledger.encode());
        let key = *key.finalize().as_bytes();
        let new_state = match self.applied.get(&key) {
            Some(id) => *id,
            None => {
                let Some((state, _)) = self.states.get(&base).cloned() else {
                    bail!("node {i}: unknown base")
                };
                let plan = self.machines[i].plan().clone();
                let mut delta = vec![0f32; self.cfg.params];
                for (s, h) in shards.iter().enumerate() {
                    if let Some(v) = h.and_then(|h| self.values.get(&h)) {
                        let r = plan.layout().range(s as u32);
                        if v.len() == r.len() {
                            delta[r].copy_from_slice(v);
                        }
                    }
                }
                let mut next = (*state).clone();
                outer_step(self.cfg.outer, &mut next, &delta)?;
                let id =
                    ledger.state_id(state_id(self.run, next.round, &next.params, next.momentum.as_deref()));
                self.states.insert(id, (Arc::new(next), ledger));
                self.applied.insert(key, id);
                id
            }
        };
        if let Some(p) = self.progress[i].get_mut(&round) {
            p.1 = Some(now);
            p.2 = Some(new_state);
        }
        self.progress[i].insert(round + 1, (now, None, None));
        // The last node to apply a round clears its payloads.
        if (0..self.keys.len()).all(|j| self.machines[j].round() > round || j == i) {
            self.payloads.retain(|k, _| k.0 > round);
            self.signed.retain(|k, _| k.0 > round);
            self.honest_sums.retain(|k, _| k.0 > round);
        }
        self.net.at(now, i, Msg::Event(Box::new(CommitteeEvent::Applied { round, new_state })));
        // Nodes that sat this round out re-sync to the first state applied
        // (downloading it whole) and train the next round.
        let state_bytes = 4 * self.cfg.params as u64 * if self.cfg.outer.has_momentum() { 2 } else { 1 };
        let ledger = self.states.get(&new_state).map(|s| s.1.clone()).unwrap_or_default();
        for j in 0..self.keys.len() {
            if self.offline[j] && self.machines[j].round() == round {
                self.offline[j] = false;
                let bytes = wire::state(ledger.encode().len() as u64, state_bytes);
                let at = self.net.send(now, round, Kind::States, i, j, bytes, Msg::Bytes);
                if let Some(p) = self.progress[j].get_mut(&round) {
                    p.1 = Some(at);
                    p.2 = Some(new_state);
                }
                self.progress[j].insert(round + 1, (at, None, None));
                self.machines[j].jump(at, round + 1, new_state, ledger.clone());
                self.drain(j, at)?;
            }
        }
        Ok(())
    }

    fn report(&self) -> NetsimReport {
        let n = self.keys.len();
        let plan = self.machines[0].plan();
        let delta_bytes: u64 = (0..plan.shards())
            .map(|s| {
                murmur_protocol::Codec::payload_len(&self.cfg.codec, plan.layout().len(s) as u64).unwrap_or(0)
            })
            .sum();
        let full_delta = self.cfg.codec.payload_len(self.cfg.params as u64).unwrap_or(0);
        let honest: Vec<usize> = (0..n).filter(|&i| self.roles[i] == Role::Honest).collect();
        let mut rounds = Vec::new();
        for r in 0..self.cfg.rounds {
            let traffic = self.net.traffic.get(r as usize);
            let nodes: Vec<NodeRound> = (0..n)
                .map(|i| {
                    let t = traffic.map(|t| t[i]).unwrap_or_default();
                    let p = self.progress[i].get(&r);
                    NodeRound {
                        node: i,
                        up: t.up,
                        down: t.down,
                        round_ms: p.and_then(|p| p.1.map(|a| a - p.0)),
                    }
                })
                .collect();
            let mut states: BTreeMap<StateId, usize> = BTreeMap::new();
            for &i in &honest {
                if let Some(id) = self.progress[i].get(&r).and_then(|p| p.2) {
                    *states.entry(id).or_default() += 1;
                }
            }
            let top = states.iter().max_by_key(|e| e.1).map(|e| *e.0);
            let (excluded, val_loss) = match top.and_then(|id| self.states.get(&id)) {
                Some((s, l)) => (l.excluded.len(), self.task.as_ref().map(|t| t.val_loss(&s.params))),
                None => (0, None),
            };
            let max_bytes = nodes.iter().map(|x| x.up + x.down).max().unwrap_or(0);
            let mut mean_by_kind = [0f64; 5];
            if let Some(t) = traffic {
                for x in t {
                    for (m, b) in mean_by_kind.iter_mut().zip(x.by_kind) {
                        *m += b as f64 / n as f64;
                    }
                }
            }
            let mean_bytes = nodes.iter().map(|x| (x.up + x.down) as f64).sum::<f64>() / n as f64;
            rounds.push(RoundReport {
                round: r,
                max_bytes,
                mean_bytes,
                mean_by_kind,
                v1_bytes: v1_bytes(n, full_delta, self.cfg.gossip_degree),
                max_round_ms: honest.iter().filter_map(|&i| nodes[i].round_ms).max().unwrap_or(0),
                honest_states: states.len(),
                honest_applied: states.values().sum(),
                honest_caught_up: honest.iter().filter(|&&i| self.caught_up.contains(&(r, i))).count(),
                excluded,
                val_loss,
                nodes,
            });
        }
        let offenders = (0..n)
            .filter(|&i| self.roles[i] != Role::Honest)
            .map(|i| {
                let key = self.keys[i].public();
                let excluded_from = (0..=self.cfg.rounds).find(|&r| {
                    honest.iter().any(|&h| {
                        self.progress[h]
                            .get(&r.saturating_sub(1))
                            .and_then(|p| p.2)
                            .and_then(|id| self.states.get(&id))
                            .is_some_and(|(_, l)| r > 0 && l.is_excluded(&key))
                    })
                });
                Offender {
                    node: i,
                    kind: self.roles[i].name(),
                    first_offence: self.first_offence[i],
                    excluded_from,
                }
            })
            .collect();
        NetsimReport {
            nodes: n,
            k: self.cfg.k,
            shards: plan.shards(),
            params: self.cfg.params,
            delta_bytes,
            rounds,
            offenders,
        }
    }
}
