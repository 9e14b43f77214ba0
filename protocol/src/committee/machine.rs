//! The round machine (sans-IO, docs/protocol.md §10.3): one node's
//! view of one committee round at a time. Events in with the caller's `now`
//! (ms), actions out; it owns every deadline of the round (inputs, results,
//! fallback, fraud-proof window), reads no clock and does no I/O. `murmur
//! netsim` runs a thousand of these over a simulated network; the node runs
//! one over libp2p.
//!
//! A round: train → sign a sharded manifest, send each shard to its
//! committee → (as a member) aggregate the shard at the input deadline or
//! once every roster member's shard is in, sign the result → pick one claim
//! per shard (most signers, then most included, then smallest hash; a claim
//! proven wrong never wins), fetch the aggregated shards, apply once the
//! norm gate's suspects (`super::gate`) passed their audits. A shard
//! with no result by the result deadline goes to its first backup
//! committee, then the next (`MAX_FALLBACKS`); one with none after that is
//! applied as zero. Conflicting claims are re-checked by the shard's
//! members; every node audits `audits` shards drawn from its own
//! signature, which no owner can compute before it signs: by a sketch of
//! its inputs' projections under the linear robust modes (`super::sketch`),
//! else, and after a sketch that disagrees, by recomputing the shard from
//! its inputs. A recomputation that differs from a signed result is a fraud
//! proof, gossiped and checked by every node. Results are also the
//! commits: each names the state its signer trained from, and the machine
//! asks for the state a majority of its roster trained from when it is
//! behind it (`super::catch_up`).
//!
//! Work per event does not grow with the shard count: only shards an event
//! touched (or all, when a deadline passed) are looked at again, so
//! `murmur netsim` runs a thousand single-owner shards.

use super::catch_up::{CatchUp, FORMER_DEADLINES};
use super::gate::{NormGate, Suspect};
use super::ledger::{Ledger, MAX_LEDGER_KEYS};
use super::merkle::{verify_proof, MerkleTree, ShardLeaf};
use super::messages::{FraudProof, IncludedList, IncludedSigners, ShardResult, ShardedManifest};
use super::plan::{CommitteePlan, MAX_FALLBACKS};
use super::rule::ShardRule;
use super::signed::{SignedRecord, MAX_RECORDED_RESULTS};
use crate::codec::Codec;
use crate::hash::{domain_hash, RunId, StateId};
use crate::identity::{NodeKey, PublicKey, Signature, SIGN_AUDIT_DRAW};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::rc::Rc;

/// Signatures already verified, shared by the machines of one process
/// (`murmur netsim` runs a thousand machines that all receive the same
/// signed messages). Keyed by the hash of the whole signed encoding, so a
/// hit is exactly a message whose signature verified before.
#[derive(Debug, Clone, Default)]
pub struct SeenSignatures(Rc<RefCell<HashSet<[u8; 32]>>>);

impl SeenSignatures {
    fn check(&self, encoded: &[u8], verify: impl FnOnce() -> bool) -> bool {
        let h = *blake3::hash(encoded).as_bytes();
        if self.0.borrow().contains(&h) {
            return true;
        }
        let ok = verify();
        if ok {
            self.0.borrow_mut().insert(h);
        }
        ok
    }
}

/// What the machine needs from the RunSpec.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitteeConfig {
    pub run: RunId,
    pub codec: Codec,
    pub element_count: u64,
    /// Committee size k.
    pub k: u32,
    /// How a shard's inputs combine (the run's robust mode and weighting).
    pub rule: ShardRule,
    /// From the round's opening to the input deadline (members aggregate).
    pub input_ms: u64,
    /// From the input deadline to the result deadline (fallbacks start).
    pub result_ms: u64,
    /// How long a conflict waits for a fraud proof, and a fallback committee
    /// for its inputs, before the round goes on.
    pub grace_ms: u64,
    /// Shards each node audits per round, drawn from its own signature.
    pub audits: u32,
    /// In an open run that names operators, the operators: only their
    /// results decide which state a node catches up to. Empty: the
    /// roster's decide.
    pub operators: Vec<PublicKey>,
}

/// Shards a node audits per round unless the run says otherwise: with
/// three in four nodes honest, a shard goes unaudited in a round with
/// probability about e⁻³ (5%).
pub const DEFAULT_AUDITS: u32 = 4;

/// What one ask for a chosen claim's aggregate gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOutcome {
    /// Its values arrived, hash to the claim and decode (for shard 0, with
    /// included signers that match the claim's root).
    Served,
    /// The holder served nothing: no answer, not found, a dropped link.
    Unavailable,
    /// Bytes that hash to the claim do not decode as the shard's values:
    /// the claim itself is wrong.
    Refuted,
}

/// Something that happened, reported by the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum CommitteeEvent {
    /// This node trained: its delta's shards (leaves in shard order, for the
    /// round's plan) are held locally.
    LocalDeltaReady {
        tokens: u64,
        train_loss: f32,
        norm: f32,
        leaves: Vec<ShardLeaf>,
    },
    ManifestReceived(ShardedManifest),
    /// A shard of `signer`'s delta arrived, its payload hashed into `leaf`.
    ShardReceived {
        signer: PublicKey,
        shards: u32,
        leaf: ShardLeaf,
        proof: Vec<[u8; 32]>,
    },
    /// The driver aggregated a shard as asked in round `round` (a reply
    /// that comes after the round closed is dropped).
    ShardAggregated {
        round: u64,
        shard: u32,
        included: IncludedList,
        total_tokens: u64,
        result_hash: [u8; 32],
    },
    /// Aggregating a shard asked in round `round` found nothing valid.
    ShardAggregationFailed {
        round: u64,
        shard: u32,
    },
    ResultReceived(ShardResult),
    /// The included list of a result the machine asked for.
    IncludedReceived {
        result: ShardResult,
        included: IncludedList,
    },
    /// An ask for shard `shard`'s aggregate `result_hash` ended as
    /// `outcome`; when served, its decoded values have L2 norm `norm`
    /// (`shard_norm`); for
    /// shard 0 with the result's included signers (the next roster), which
    /// the machine checks against the result.
    AggregateFetched {
        shard: u32,
        result_hash: [u8; 32],
        outcome: FetchOutcome,
        norm: f32,
        included: Option<IncludedSigners>,
    },
    /// The driver checked `result`'s aggregate against its included inputs'
    /// projections: `matches` None when it could not tell.
    Sketched {
        result: ShardResult,
        included: IncludedList,
        matches: Option<bool>,
    },
    /// The driver recomputed `result`'s shard from its included inputs.
    Rechecked {
        result: ShardResult,
        included: IncludedList,
        matches: bool,
    },
    ProofReceived(Box<FraudProof>),
    /// A `SendShard` to `to` could not be delivered; the machine sends it
    /// again after a back-off (at most `MAX_SEND_TRIES` times a round).
    ShardUndelivered {
        to: PublicKey,
        shard: u32,
    },
    /// The outer step of the round was applied.
    Applied {
        round: u64,
        new_state: StateId,
    },
    /// The state a `FetchState` asked for was fetched and checked against
    /// its StateId: `state` with `ledger`, from which round `round` opens.
    CaughtUp {
        round: u64,
        state: StateId,
        ledger: Ledger,
    },
    /// No holder of a `FetchState`'s state served it.
    CatchUpFailed,
    /// The last connection to `key` closed: while it stays gone, owners do
    /// not wait for its shard.
    PeerDisconnected(PublicKey),
    /// `key` is connected (again): owners wait for its shard again.
    PeerConnected(PublicKey),
    TimerFired,
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum CommitteeAction {
    /// Train from `base` for `round`, cut the delta by `plan`'s layout.
    Train { round: u64, base: StateId, plan: CommitteePlan },
    /// Gossip this signed manifest to every node (an open round only: its
    /// committee is every announcer).
    PublishManifest(ShardedManifest),
    /// Send shard `shard` of our delta, with its proof and our signed
    /// manifest, to `to` (one attempt; report `ShardUndelivered` when it
    /// fails). The manifest travels only with the shards.
    SendShard { to: PublicKey, shard: u32, shards: u32, proof: Vec<[u8; 32]>, manifest: Box<ShardedManifest> },
    /// Aggregate `shard` from exactly these inputs (their payloads were
    /// received) and report `ShardAggregated` or `ShardAggregationFailed`.
    AggregateShard { shard: u32, inputs: Vec<ShardedManifest>, leaves: Vec<ShardLeaf> },
    /// Gossip this signed result to every node.
    PublishResult(ShardResult),
    /// Fetch the aggregated values of `shard` from `from` (for shard 0 also
    /// the included signers of its result, `IncludedSigners`) and report `AggregateFetched`; one
    /// attempt: the machine retries other holders after a back-off.
    FetchAggregate { shard: u32, result_hash: [u8; 32], from: PublicKey },
    /// Ask `result.signer` for the included list of `result`.
    RequestIncluded { result: ShardResult },
    /// Ask each of `from` (the shard's signers, then other nodes) in turn
    /// for a signed result of `shard` this round (its own, or the one it
    /// applied) until one answers with a result not signed by one of
    /// `held` (whose results for the shard this node has), and report it
    /// as `ResultReceived` (a node that missed the result's gossip: it
    /// restarted, or its connection was down).
    PullResult { shard: u32, from: Vec<PublicKey>, held: Vec<PublicKey> },
    /// Ask each of `from` for its own shard `shard` of this round (its
    /// leaf, proof and manifest, then the payload) and take each answer as
    /// an offer: a node that (re)started mid-round lost the shards sent to
    /// it before.
    PullInputs { shard: u32, from: Vec<PublicKey> },
    /// Audit these results by sketches, asking each trainer once for the
    /// projections of all its shards they name (`SketchAudit`), and report
    /// one `Sketched` per audit.
    Sketch(Vec<SketchAudit>),
    /// Recompute `result`'s shard from the deltas in `included` (fetching
    /// the shards not held from `holders`) and report `Rechecked`.
    Recheck { result: ShardResult, included: IncludedList, holders: Vec<PublicKey> },
    /// Gossip this fraud proof.
    PublishProof(Box<FraudProof>),
    /// Apply the round: for each shard the chosen aggregate (None: zero),
    /// then the outer step; the new state carries `ledger`.
    Apply { round: u64, base: StateId, shards: Vec<Option<[u8; 32]>>, ledger: Ledger },
    /// Fetch `state` (what a majority of the electorate ended `round` on)
    /// from `holders`, check it against its StateId, and report `CaughtUp`
    /// or `CatchUpFailed` (`catch_up`).
    FetchState { round: u64, state: StateId, holders: Vec<PublicKey> },
    /// Store this record of what the node signed this round durably before
    /// carrying out the actions after it (they send what it records), and
    /// give it back with `restore_signed` after a restart.
    Record(SignedRecord),
}

/// One sketch audit of `result`: ask each trainer in `included` for the
/// projections of its shard under `seed`, check them with `sketch::verdict`
/// against the aggregate (`inputs`: the manifests of `included`, in its
/// order). A trainer that does not answer is replaced by its input,
/// fetched from `holders`.
#[derive(Debug, Clone, PartialEq)]
pub struct SketchAudit {
    pub result: ShardResult,
    pub included: IncludedList,
    pub inputs: Vec<ShardedManifest>,
    pub seed: [u8; 32],
    pub holders: Vec<PublicKey>,
}

/// This node's delta of the round: its leaves and their tree (each shard
/// sent goes with a proof from it).
#[derive(Debug, Clone)]
struct OwnDelta {
    leaves: Vec<ShardLeaf>,
    tree: MerkleTree,
}

/// A shard that came before its manifest: its leaf and Merkle proof.
type EarlyShard = (ShardLeaf, Vec<[u8; 32]>);

/// Where a shard stands in this node's view.
#[derive(Debug, Clone, Default)]
struct ShardView {
    /// Valid results by signer.
    results: BTreeMap<PublicKey, ShardResult>,
    /// Claims shown wrong by a recomputation (result hashes).
    wrong: BTreeSet<[u8; 32]>,
    chosen: Option<[u8; 32]>,
    fetched: bool,
    /// 0 while the shard's own committee has it, j once its j-th backup does.
    level: u32,
    /// When its current backup took it.
    level_since: u64,
    zero: bool,
    /// Signers of the chosen claim, in the order this node asks them.
    holders: Vec<PublicKey>,
    /// Holders asked so far in this pass.
    tried: usize,
    /// Passes over the holders that ended with nothing served.
    passes: u32,
    /// When to ask the next holder.
    retry_at: Option<u64>,
    /// Results pulled while none came (`PullResult`).
    pulls: u32,
    /// Results signed by members of a backup this node has not handed the
    /// shard to yet (the others' deadlines passed before ours): each
    /// counts once this node hands the shard to that backup.
    from_later_backups: BTreeMap<PublicKey, ShardResult>,
}

/// Longest a ready sketch waits for the other drawn shards' included lists
/// before the ready ones go out together.
pub const SKETCH_WAIT_MS: u64 = 1_000;

/// Manifests taken per round from keys not on the roster.
pub const MAX_NEWCOMERS: usize = 1024;

/// First wait before asking the next holder of an aggregate.
pub const FETCH_RETRY_FIRST_MS: u64 = 200;
/// Longest wait between two asks.
pub const FETCH_RETRY_MAX_MS: u64 = 5_000;

/// Passes over a chosen claim's holders, none of which served it, after
/// which the claim is taken as withheld (the next one wins, or the shard
/// goes to its backup). A holder behind a congested link may fail one ask
/// and serve the next.
pub const FETCH_PASSES: u32 = 3;

/// Most times a round pulls one shard's result.
pub const MAX_RESULT_PULLS: u32 = 3;

/// Roster members beyond a shard's signers that one result pull asks.
pub const RESULT_ASKS_BEYOND_SIGNERS: usize = 3;

/// Most attempts at sending one shard to one member in a round.
pub const MAX_SEND_TRIES: u32 = 5;
/// A key off the roster counts toward a rival chain while its last result
/// came within this many round deadlines.
pub const RIVAL_HEARD_ROUNDS: u64 = 3;

/// The wait before the `tried`-th retry: doubling from the first, capped.
pub fn fetch_backoff(tried: usize) -> u64 {
    let doublings = tried.saturating_sub(1).min(16) as u32;
    (FETCH_RETRY_FIRST_MS << doublings).min(FETCH_RETRY_MAX_MS)
}

/// One node's committee round machine.
#[derive(Debug)]
pub struct CommitteeMachine {
    cfg: CommitteeConfig,
    key: NodeKey,
    me: PublicKey,
    round: u64,
    base: StateId,
    ledger: Ledger,
    plan: CommitteePlan,
    opened_at: u64,
    now: u64,
    /// Our leaves once trained (to re-send a shard to a fallback committee).
    mine: Option<OwnDelta>,
    /// What we signed in our newest round (kept across restarts).
    signed: SignedRecord,
    manifests: BTreeMap<PublicKey, ShardedManifest>,
    /// Shard inputs received (for the shards we aggregate): shard → signer → leaf.
    inputs: BTreeMap<u32, BTreeMap<PublicKey, ShardLeaf>>,
    /// Shards we aggregate (our own, and any we took over), and whether done.
    duties: BTreeMap<u32, bool>,
    /// When each fallback duty began.
    duty_since: BTreeMap<u32, u64>,
    shards: Vec<ShardView>,
    /// Our own results' included lists (served on request).
    our_lists: BTreeMap<u32, IncludedList>,
    /// Claims (shard, result hash) already re-checked or being re-checked.
    asked: BTreeSet<(u32, [u8; 32])>,
    /// Claims whose included list came: their audit (a sketch or a
    /// re-check) is under way or done.
    auditing: BTreeSet<[u8; 32]>,
    /// Proven keys → round of the offence.
    proven: BTreeMap<PublicKey, u64>,
    /// Accused keys whose wrong-result proof is being recomputed.
    verifying: BTreeSet<PublicKey>,
    /// The signers of shard 0's chosen result (its hash, the signers).
    included0: Option<([u8; 32], Vec<PublicKey>)>,
    /// Shards that arrived before their manifest: signer → (leaf, proof).
    early: BTreeMap<PublicKey, Vec<EarlyShard>>,
    /// The ledger the pending Apply carries.
    applying: Option<Ledger>,
    applied: bool,
    /// Shards to send again: (member, shard) → (attempts failed, when).
    resend: BTreeMap<(PublicKey, u32), (u32, Option<u64>)>,
    /// Shards to look at again in `advance` (an event touched them).
    dirty: BTreeSet<u32>,
    /// Aggregate fetches to retry: (when, shard).
    retries: BTreeSet<(u64, u32)>,
    /// When shards with a backup go to the next one: (when, shard).
    escalations: BTreeSet<(u64, u32)>,
    /// When the first result of the round came: shards still without one
    /// a pull wait later pull theirs.
    first_result_at: Option<u64>,
    /// When the newest announcer's manifest came (an open round closes its
    /// inputs a grace period after it, once every announcer's is in).
    last_announced_at: u64,
    /// Pulls of shards' results that are due: (when, shard).
    result_pulls_due: BTreeSet<(u64, u32)>,
    /// Roster members whose connection closed and did not come back.
    gone: BTreeSet<PublicKey>,
    /// When a node that entered this round mid-way (it started, or caught
    /// up) asks for the inputs of the shards it aggregates, and how many
    /// times it still will.
    input_pull_at: Option<u64>,
    input_pulls_left: u32,
    /// When such a node aggregates with the inputs it has (its pulls are
    /// done; the input deadline, counted from when it entered, may be far
    /// behind the round's).
    mid_round_due: Option<u64>,
    /// Shards fetched or applied as zero.
    settled: usize,
    /// Deadlines passed when `advance` last looked.
    deadlines_passed: usize,
    /// The shards this node audits this round.
    audits: BTreeSet<u32>,
    /// Drawn shards whose audit started (a sketch waiting or sent, or a
    /// re-check).
    audits_started: BTreeSet<u32>,
    /// Sketches waiting to go out together (until every drawn shard's audit
    /// started, `SKETCH_WAIT_MS` after the first was ready, the result
    /// deadline, or the round's apply), and when they go at the latest.
    sketches: Vec<SketchAudit>,
    sketches_due: Option<u64>,
    /// This round's draw signature (the audits' seeds come from it).
    draw: Option<Signature>,
    /// Fetched aggregates' sizes, and the suspects the round waits on.
    gate: NormGate,
    /// Commits tallied, and the state being fetched to catch up.
    catch_up: CatchUp,
    /// Results this node cannot take yet, of a later round or of this
    /// round from another base: a roster member's newest (one per
    /// signer), taken as claims when this node opens that round on that
    /// base (after a round applied, or a catch-up).
    early_results: BTreeMap<PublicKey, ShardResult>,
    seen: Option<SeenSignatures>,
    actions: VecDeque<CommitteeAction>,
}

/// Domain of the hash that turns a node's draw signature into shard numbers.
pub const DOMAIN_AUDIT_DRAW: &str = "murmur 2026-11 v2 audit-draw";

/// Domain of the hash that turns a draw signature and a shard into the
/// seed of a sketch audit.
pub const DOMAIN_AUDIT_SEED: &str = "murmur 2026-11 v2 audit-seed";

/// The holder of `key`'s signature over (run, round, base): its audit
/// draw, which only it can compute.
pub fn draw_signature(key: &NodeKey, run: RunId, round: u64, base: StateId) -> Signature {
    let mut msg = Vec::with_capacity(72);
    msg.extend_from_slice(&run.0);
    msg.extend_from_slice(&round.to_le_bytes());
    msg.extend_from_slice(&base.0);
    key.sign(SIGN_AUDIT_DRAW, &msg)
}

/// The `count` shards (of `shards`, distinct while there are enough) that
/// the holder of `key` audits in `round` from `base`: hashes of its
/// signature over (run, round, base).
pub fn audit_draw(
    key: &NodeKey,
    run: RunId,
    round: u64,
    base: StateId,
    shards: u32,
    count: u32,
) -> BTreeSet<u32> {
    shards_of_draw(&draw_signature(key, run, round, base), shards, count)
}

fn shards_of_draw(sig: &Signature, shards: u32, count: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let want = count.min(shards) as usize;
    let mut i = 0u64;
    while out.len() < want && i < 4 * u64::from(count) + 16 {
        let mut b = sig.0.to_vec();
        b.extend_from_slice(&i.to_le_bytes());
        let h = domain_hash(DOMAIN_AUDIT_DRAW, &b);
        let x = u64::from_le_bytes(h[..8].try_into().unwrap_or([0; 8]));
        out.insert((x % u64::from(shards.max(1))) as u32);
        i += 1;
    }
    out
}

/// The seed of the sketch audit of `shard` under draw signature `sig`.
pub fn audit_seed(sig: &Signature, shard: u32) -> [u8; 32] {
    let mut b = sig.0.to_vec();
    b.extend_from_slice(&shard.to_le_bytes());
    domain_hash(DOMAIN_AUDIT_SEED, &b)
}

impl CommitteeMachine {
    /// Start at `round` from `base` (whose ledger is `ledger`) at `now`.
    pub fn new(
        cfg: CommitteeConfig,
        key: NodeKey,
        round: u64,
        base: StateId,
        ledger: Ledger,
        now: u64,
    ) -> Self {
        let me = key.public();
        let plan = CommitteePlan::derive(base, round, &ledger.roster, cfg.k, cfg.element_count);
        let catch_up = CatchUp::with_operators(&cfg.operators);
        let mut m = Self {
            cfg,
            key,
            me,
            round,
            base,
            ledger,
            plan,
            opened_at: now,
            now,
            mine: None,
            signed: SignedRecord::of_round(round),
            manifests: BTreeMap::new(),
            inputs: BTreeMap::new(),
            duties: BTreeMap::new(),
            duty_since: BTreeMap::new(),
            shards: Vec::new(),
            our_lists: BTreeMap::new(),
            asked: BTreeSet::new(),
            auditing: BTreeSet::new(),
            proven: BTreeMap::new(),
            included0: None,
            verifying: BTreeSet::new(),
            early: BTreeMap::new(),
            applying: None,
            applied: false,
            resend: BTreeMap::new(),
            dirty: BTreeSet::new(),
            retries: BTreeSet::new(),
            escalations: BTreeSet::new(),
            first_result_at: None,
            last_announced_at: 0,
            result_pulls_due: BTreeSet::new(),
            gone: BTreeSet::new(),
            input_pull_at: None,
            input_pulls_left: 0,
            mid_round_due: None,
            settled: 0,
            deadlines_passed: 0,
            audits: BTreeSet::new(),
            audits_started: BTreeSet::new(),
            sketches: Vec::new(),
            sketches_due: None,
            draw: None,
            gate: NormGate::default(),
            catch_up,
            early_results: BTreeMap::new(),
            seen: None,
            actions: VecDeque::new(),
        };
        m.open(round, base, m.ledger.clone());
        m
    }

    /// Former roster members remembered before a restart (the driver
    /// stores `former_members` with each state): their results are tallied
    /// apart again, so a side that ran apart from them can still rejoin.
    pub fn restore_former(&mut self, keys: &[PublicKey]) {
        self.catch_up.restore_former(keys, &self.ledger, self.round, self.now);
    }

    /// The keys that dropped off the roster lately (for the driver to store).
    pub fn former_members(&self) -> Vec<PublicKey> {
        self.catch_up.former_members()
    }

    /// This node enters the round mid-way (it restarted, or caught up):
    /// what was gossiped and sent to it before is not here. A pull wait on
    /// it asks owners for their results and trainers for the inputs of the
    /// shards it aggregates.
    pub fn entered_mid_round(&mut self) {
        if self.open_round() {
            return;
        }
        let (at, wait) = (self.now + self.pull_wait(), self.pull_wait());
        self.result_pulls_due.extend((0..self.plan.shards()).map(|s| (at, s)));
        self.input_pull_at = Some(at);
        self.input_pulls_left = MAX_RESULT_PULLS;
        self.mid_round_due = Some(at + u64::from(MAX_RESULT_PULLS) * wait);
    }

    /// Ask the awaited trainers whose inputs are missing for their shards
    /// of the shards we aggregate, again a pull wait later.
    fn pull_inputs(&mut self) {
        self.input_pull_at = None;
        if self.input_pulls_left == 0 {
            return;
        }
        self.input_pulls_left -= 1;
        let open: Vec<u32> = self.duties.iter().filter(|(_, done)| !**done).map(|(s, _)| *s).collect();
        for s in open {
            let held = self.inputs.get(&s);
            let from: Vec<PublicKey> = self
                .ledger
                .roster
                .iter()
                .filter(|k| **k != self.me && self.awaited(k) && !held.is_some_and(|h| h.contains_key(*k)))
                .copied()
                .collect();
            if !from.is_empty() {
                self.actions.push_back(CommitteeAction::PullInputs { shard: s, from });
                self.input_pull_at = Some(self.now + self.pull_wait());
            }
        }
    }

    /// Train nothing until a state is fetched: the node holds a state
    /// without its ledger (it caught up with the first majority's state).
    pub fn wait_for_state(&mut self) {
        self.catch_up.wait();
    }

    /// Whether a fetched `state`, from which round `round` opens, moves
    /// this node: a later round, or another state for the round it is in.
    pub fn moves_to(&self, round: u64, state: StateId) -> bool {
        round > self.round
            || (round == self.round && state != self.base)
            || self.catch_up.rejoins(round, state)
    }

    /// Whether the node waits for a state before it trains.
    pub fn is_waiting(&self) -> bool {
        self.catch_up.is_waiting()
    }

    /// Share verified signatures with other machines of this process.
    pub fn share_signatures(&mut self, seen: SeenSignatures) {
        self.seen = Some(seen);
    }

    fn manifest_signed(&self, m: &ShardedManifest) -> bool {
        match &self.seen {
            Some(s) => s.check(&m.encode(), || m.verify().is_ok()),
            None => m.verify().is_ok(),
        }
    }

    /// Whether a result counts as its signer's word on the state it ended
    /// the last round on (every node signs a result each round: every
    /// roster member holds a seat, and in a round without a roster every
    /// node aggregates shard 0): a roster member's (anyone's while there is
    /// no roster), for a round after the first.
    fn commits(&self, r: &ShardResult) -> bool {
        r.round > 0
            && (self.ledger.roster.is_empty()
                || self.ledger.roster.binary_search(&r.signer).is_ok()
                || self.cfg.operators.contains(&r.signer))
    }

    /// Ask for the state a majority signed when this node is behind it.
    fn consider_catch_up(&mut self) {
        // Keys off the roster count toward a rival chain while they are
        // heard from every few rounds.
        let fresh_since = self.now.saturating_sub(RIVAL_HEARD_ROUNDS * self.cfg.input_ms);
        let (round, base, now) = (self.round, self.base, self.now);
        if let Some(t) = self.catch_up.target(&self.ledger, (round, base), &self.me, (now, fresh_since)) {
            self.actions.push_back(CommitteeAction::FetchState {
                round: t.round,
                state: t.state,
                holders: t.holders,
            });
        }
    }

    fn result_signed(&self, r: &ShardResult) -> bool {
        match &self.seen {
            Some(s) => s.check(&r.encode(), || r.verify().is_ok()),
            None => r.verify().is_ok(),
        }
    }

    pub fn round(&self) -> u64 {
        self.round
    }
    pub fn base(&self) -> StateId {
        self.base
    }
    pub fn plan(&self) -> &CommitteePlan {
        &self.plan
    }
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
    /// Keys this node holds a verified fraud proof against.
    pub fn proven(&self) -> &BTreeMap<PublicKey, u64> {
        &self.proven
    }
    /// The tokens shard 0's chosen result signs it included: what the
    /// round trained on (its included signers are the next roster).
    pub fn round_tokens(&self) -> Option<u64> {
        let view = self.shards.first()?;
        let chosen = view.chosen?;
        view.results.values().find(|r| r.result_hash == chosen).map(|r| r.total_tokens)
    }
    /// The root of every manifest this node holds this round, by signer.
    pub fn manifest_roots(&self) -> BTreeMap<PublicKey, [u8; 32]> {
        self.manifests.iter().map(|(k, m)| (*k, m.root)).collect()
    }
    /// Whether this node takes inputs for `shard` now: it aggregates the
    /// shard (its own, or one it took over as a backup) and has not yet.
    /// Any other shard offered to it is dropped, so its payload is not
    /// worth a pull.
    pub fn takes_inputs(&self, shard: u32) -> bool {
        self.duties.get(&shard) == Some(&false)
    }

    /// The manifest `signer` signed this round, as this node holds it.
    pub fn manifest_of(&self, signer: &PublicKey) -> Option<&ShardedManifest> {
        self.manifests.get(signer)
    }

    /// Re-sync: continue at `round` from `base` (fetched, with its ledger),
    /// dropping the round in progress.
    pub fn jump(&mut self, now: u64, round: u64, base: StateId, ledger: Ledger) {
        self.now = self.now.max(now);
        self.actions.clear();
        self.open(round, base, ledger);
        self.entered_mid_round();
    }

    /// The included list of our result for `shard`, to serve.
    pub fn our_list(&self, shard: u32) -> Option<&IncludedList> {
        self.our_lists.get(&shard)
    }
    /// What this node signed before a restart (the last `Record` it
    /// stored): it signs no other manifest, and no other result for a
    /// recorded shard, in that round. Records of past rounds are ignored.
    /// A record of this round with the leaves under its manifest gives the
    /// node its delta back: it sends its shards again (the payloads are the
    /// driver's durable blobs) and trains nothing new.
    pub fn restore_signed(&mut self, record: SignedRecord) {
        if record.round < self.round {
            return;
        }
        self.signed = record;
        self.restore_delta();
        // Results signed before the restart stand: their shards are not
        // aggregated a second time, and each is gossiped and served again
        // (a node that missed it asks its signer) with its included list.
        let shards: Vec<u32> = self.signed.results.iter().map(|r| r.shard).collect();
        for shard in shards {
            self.stand_by_recorded(shard);
        }
    }

    /// The recorded delta, when it is this round's and its leaves are
    /// whole: held as ours (in a round without a roster its manifest is
    /// what lets us sign results), and its shards sent again.
    fn restore_delta(&mut self) {
        let Some(m) = self.signed.manifest.clone() else { return };
        let ours = m.round == self.round
            && m.base == self.base
            && m.signer == self.me
            && m.shards == self.plan.shards()
            && self.signed.leaves.len() == m.shards as usize;
        if !ours || self.mine.is_some() {
            return;
        }
        let leaves = self.signed.leaves.clone();
        let tree = MerkleTree::new(&leaves);
        if tree.root() != m.root {
            return;
        }
        self.manifests.insert(self.me, m);
        self.last_announced_at = self.now;
        self.mine = Some(OwnDelta { leaves, tree });
        for s in 0..self.plan.shards() {
            self.send_shard(s, s);
        }
    }

    /// If this node recorded a result for `shard` this round (it signed it
    /// before a restart), the shard is not aggregated again; the result is
    /// published again (and taken as a claim where the node holds a seat
    /// for the shard now) when its included list was recorded with it —
    /// without it neither the list nor shard 0's signers could be served.
    /// Whether it recorded one.
    fn stand_by_recorded(&mut self, shard: u32) -> bool {
        let Some(i) = self.signed.results.iter().position(|r| {
            r.shard == shard
                && r.run == self.cfg.run
                && r.round == self.round
                && r.base == self.base
                && r.signer == self.me
                && (r.shard as usize) < self.shards.len()
        }) else {
            return false;
        };
        self.duties.insert(shard, true);
        let Some(list) = self.signed.lists.get(i).cloned() else { return true };
        let r = self.signed.results[i].clone();
        self.our_lists.insert(shard, list);
        self.actions.push_back(CommitteeAction::PublishResult(r.clone()));
        self.on_result(r);
        true
    }

    /// For each shard with a chosen claim, one result signed for it (what
    /// the node serves, once it applies them, to nodes that missed them).
    pub fn chosen_results(&self) -> Vec<ShardResult> {
        let chosen = |v: &ShardView| {
            let claim = v.chosen?;
            v.results.values().find(|r| r.result_hash == claim && self.counts(&r.signer)).cloned()
        };
        self.shards.iter().filter_map(chosen).collect()
    }

    /// Our leaves of this round, once we hold our delta (trained, or
    /// restored from the record).
    pub fn own_leaves(&self) -> Option<&[ShardLeaf]> {
        self.mine.as_ref().map(|own| own.leaves.as_slice())
    }

    pub fn poll_action(&mut self) -> Option<CommitteeAction> {
        self.actions.pop_front()
    }

    fn input_deadline(&self) -> u64 {
        self.opened_at + self.cfg.input_ms
    }
    fn result_deadline(&self) -> u64 {
        self.input_deadline() + self.cfg.result_ms
    }
    /// Conflicted claims are decided.
    fn decide_deadline(&self) -> u64 {
        self.result_deadline() + self.cfg.grace_ms
    }
    /// Every deadline of the round, ascending.
    fn deadlines(&self) -> impl Iterator<Item = u64> {
        let (result, grace) = (self.result_deadline(), self.cfg.grace_ms);
        std::iter::once(self.input_deadline())
            .chain((0..=2 * u64::from(MAX_FALLBACKS)).map(move |m| result + m * grace))
    }

    /// When the driver should send `TimerFired`.
    pub fn next_timeout(&self) -> Option<u64> {
        if self.applied {
            return None;
        }
        let deadline = self.deadlines().find(|t| *t > self.now);
        let retry = self.retries.first().map(|(t, _)| *t);
        let resend = self.resend.values().filter_map(|(_, at)| *at).min();
        // The gate is looked at only once every shard is settled.
        let gate = (self.settled == self.shards.len()).then(|| self.gate.next_deadline()).flatten();
        let escalation = self.escalations.first().map(|(t, _)| *t);
        let pull = self.result_pulls_due.first().map(|(t, _)| *t);
        let mid_round = self.mid_round_due.filter(|t| *t > self.now);
        let quiet = self.open_inputs_quiet_at().filter(|t| *t > self.now);
        let catch_up = self.catch_up.retry_at();
        [
            deadline,
            retry,
            resend,
            self.sketches_due,
            gate,
            escalation,
            pull,
            self.input_pull_at,
            mid_round,
            quiet,
            catch_up,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn open(&mut self, round: u64, base: StateId, ledger: Ledger) {
        self.round = round;
        self.base = base;
        self.catch_up.opened(round, base);
        let keep_ms = FORMER_DEADLINES.saturating_mul(self.cfg.input_ms);
        self.catch_up.roster_changed(&self.ledger, &ledger, round, self.now, keep_ms);
        self.ledger = ledger;
        // A proof the ledger records is done with; a re-check that never
        // answered ends with its round (proofs travel within the round).
        let ledger = &self.ledger;
        self.proven.retain(|k, _| !ledger.is_excluded(k));
        self.verifying.clear();
        self.plan =
            CommitteePlan::derive(base, round, &self.ledger.roster, self.cfg.k, self.cfg.element_count);
        self.opened_at = self.now;
        self.mine = None;
        if self.signed.round < round {
            self.signed = SignedRecord::of_round(round);
        }
        self.manifests.clear();
        self.inputs.clear();
        self.duties.clear();
        self.duty_since.clear();
        self.shards = vec![ShardView::default(); self.plan.shards() as usize];
        self.our_lists.clear();
        self.asked.clear();
        self.auditing.clear();
        self.included0 = None;
        self.early.clear();
        self.applying = None;
        self.applied = false;
        self.resend.clear();
        self.dirty.clear();
        self.retries.clear();
        self.escalations.clear();
        self.first_result_at = None;
        self.last_announced_at = self.now;
        self.result_pulls_due.clear();
        self.input_pull_at = None;
        self.input_pulls_left = 0;
        self.mid_round_due = None;
        let roster = &self.ledger.roster;
        self.gone.retain(|k| roster.binary_search(k).is_ok());
        self.settled = 0;
        self.deadlines_passed = 0;
        self.audits_started.clear();
        self.sketches.clear();
        self.sketches_due = None;
        self.gate.clear();
        // Only a node with a seat audits: one off the roster holds none of
        // the round's manifests.
        let own = self.plan.seat_of(&self.me);
        if self.open_round() || own.is_none() {
            self.audits = BTreeSet::new();
            self.draw = None;
        } else {
            let sig = draw_signature(&self.key, self.cfg.run, round, base);
            self.audits = shards_of_draw(&sig, self.plan.shards(), self.cfg.audits)
                .into_iter()
                .filter(|s| Some(*s) != own)
                .collect();
            self.draw = Some(sig);
        }
        if let Some(s) = self.plan.seat_of(&self.me) {
            self.duties.insert(s, false);
        }
        if self.open_round() {
            // No roster yet: every node aggregates the one shard.
            self.duties.insert(0, false);
        }
        self.actions.push_back(CommitteeAction::Train { round, base, plan: self.plan.clone() });
        // Results that came before the round opened here are claims now;
        // those of later rounds wait on.
        let early = std::mem::take(&mut self.early_results);
        for (signer, r) in early {
            if r.round == round && r.base == base {
                self.on_result(r);
            } else if r.round > round && self.commits(&r) {
                self.early_results.insert(signer, r);
            }
        }
    }

    /// Feed one event at `now`.
    pub fn handle(&mut self, now: u64, event: CommitteeEvent) {
        self.now = self.now.max(now);
        match event {
            CommitteeEvent::LocalDeltaReady { tokens, train_loss, norm, leaves } => {
                self.on_local(tokens, train_loss, norm, leaves)
            }
            CommitteeEvent::ManifestReceived(m) => self.on_manifest(m),
            CommitteeEvent::ShardReceived { signer, shards, leaf, proof } => {
                self.on_shard(signer, shards, leaf, &proof)
            }
            CommitteeEvent::ShardAggregated { round, shard, included, total_tokens, result_hash }
                if round == self.round =>
            {
                self.on_aggregated(shard, included, total_tokens, result_hash)
            }
            CommitteeEvent::ShardAggregationFailed { round, shard } if round == self.round => {
                self.duties.insert(shard, true);
            }
            CommitteeEvent::ResultReceived(r) => self.on_result(r),
            CommitteeEvent::IncludedReceived { result, included } => self.on_included(result, included),
            CommitteeEvent::AggregateFetched { shard, result_hash, outcome, norm, included } => {
                self.on_fetched(shard, result_hash, outcome, norm, included)
            }
            CommitteeEvent::Sketched { result, included, matches } => {
                if matches == Some(true) && result.round == self.round {
                    self.gate.agree(result.result_hash);
                } else if result.round == self.round {
                    let holders = self.holders_of(result.shard);
                    self.actions.push_back(CommitteeAction::Recheck { result, included, holders });
                }
            }
            CommitteeEvent::Rechecked { result, included, matches } => {
                self.on_rechecked(result, included, matches)
            }
            CommitteeEvent::ProofReceived(p) => self.on_proof(*p),
            CommitteeEvent::ShardUndelivered { to, shard } => {
                let now = self.now;
                if self.mine.is_some() && self.sends_to(shard, &to) {
                    let e = self.resend.entry((to, shard)).or_insert((0, None));
                    e.0 += 1;
                    e.1 = (e.0 < MAX_SEND_TRIES).then(|| now + fetch_backoff(e.0 as usize));
                }
            }
            CommitteeEvent::Applied { round, new_state } => {
                if round == self.round && self.applied {
                    let ledger = self.applying.take().unwrap_or_else(|| self.next_ledger());
                    // Our results of the next round will name this state.
                    self.catch_up.note_state(self.me, round, new_state);
                    self.open(round + 1, new_state, ledger);
                    self.consider_catch_up();
                }
            }
            CommitteeEvent::CaughtUp { round, state, ledger } => {
                let ahead = self.moves_to(round, state);
                self.catch_up.fetch_ended(ahead, self.now);
                if ahead {
                    self.jump(self.now, round, state, ledger);
                }
            }
            // Asked for again after a back-off (at the first event after
            // it), or at once for another state.
            CommitteeEvent::CatchUpFailed => {
                self.catch_up.fetch_ended(false, self.now);
                self.consider_catch_up();
            }
            CommitteeEvent::PeerDisconnected(key) => {
                if key != self.me && self.ledger.roster.binary_search(&key).is_ok() {
                    self.gone.insert(key);
                }
            }
            CommitteeEvent::PeerConnected(key) => {
                self.gone.remove(&key);
            }
            // A reply to a round that closed: its result would name the
            // wrong round.
            CommitteeEvent::ShardAggregated { .. } | CommitteeEvent::ShardAggregationFailed { .. } => {}
            CommitteeEvent::TimerFired => {}
        }
        // A catch-up retry whose back-off is up, whatever event came first.
        if self.catch_up.take_due_retry(self.now) {
            self.consider_catch_up();
        }
        self.advance();
    }

    fn counts(&self, key: &PublicKey) -> bool {
        !self.ledger.is_excluded(key) && !self.proven.contains_key(key)
    }

    /// Whether owners wait for `key`'s shard before the input deadline: it
    /// counts, is connected (as far as this node saw), and is not this node
    /// after a restart that lost the delta it had signed.
    fn awaited(&self, key: &PublicKey) -> bool {
        let lost_own = *key == self.me
            && self.mine.is_none()
            && self.signed.round == self.round
            && self.signed.manifest.is_some();
        self.counts(key) && !self.gone.contains(key) && !lost_own
    }

    /// How long after the round's first result a shard without one pulls it.
    fn pull_wait(&self) -> u64 {
        (self.cfg.grace_ms / 4).max(1)
    }

    /// Shard `s` still lacks results of members who would have signed one
    /// (its committee, and the backups that took it over): ask them, again
    /// a pull wait later, at most `MAX_RESULT_PULLS` times.
    fn pull_result(&mut self, s: u32) {
        let Some(v) = self.shards.get(s as usize) else { return };
        if self.open_round() || v.chosen.is_some() || v.zero || v.pulls >= MAX_RESULT_PULLS {
            return;
        }
        let mut from: Vec<PublicKey> = self
            .holders_of(s)
            .into_iter()
            .filter(|k| *k != self.me && self.counts(k) && !v.results.contains_key(k))
            .collect();
        // Every node serves the results it applied. A node that entered the
        // round mid-way (others may have applied it: the signer may be down,
        // or a backup it did not see take over signed), or whose signers'
        // connections are all closed, asks a few other roster members after
        // the signers, others at each pull; before that nobody has applied
        // the round, so the signers alone are asked.
        let roster = &self.ledger.roster;
        let signers_gone = !from.is_empty() && from.iter().all(|k| self.gone.contains(k));
        if (self.mid_round_due.is_some() || signers_gone) && !roster.is_empty() {
            // Spread by rank, so the nodes behind do not all ask the same three.
            let rank = roster.binary_search(&self.me).unwrap_or_else(|i| i);
            let start = (rank + s as usize + v.pulls as usize * RESULT_ASKS_BEYOND_SIGNERS) % roster.len();
            let beyond: Vec<PublicKey> = roster[start..]
                .iter()
                .chain(&roster[..start])
                .filter(|k| **k != self.me && self.counts(k) && !self.gone.contains(k) && !from.contains(k))
                .take(RESULT_ASKS_BEYOND_SIGNERS)
                .copied()
                .collect();
            from.extend(beyond);
        }
        if from.is_empty() {
            return;
        }
        let held: Vec<PublicKey> = v.results.keys().copied().collect();
        self.shards[s as usize].pulls += 1;
        self.result_pulls_due.insert((self.now + self.pull_wait(), s));
        self.actions.push_back(CommitteeAction::PullResult { shard: s, from, held });
    }

    fn on_local(&mut self, tokens: u64, train_loss: f32, norm: f32, leaves: Vec<ShardLeaf>) {
        if self.mine.is_some() || leaves.len() != self.plan.shards() as usize {
            return;
        }
        // Signed before a restart (its shards are gone with the process):
        // this round goes without our delta rather than with a second one.
        let signed_before = self.signed.round == self.round && self.signed.manifest.is_some();
        if signed_before || self.signed.round > self.round {
            return;
        }
        let tree = MerkleTree::new(&leaves);
        let m = ShardedManifest {
            run: self.cfg.run,
            round: self.round,
            base: self.base,
            signer: self.me,
            tokens,
            train_loss,
            codec: self.cfg.codec,
            element_count: self.cfg.element_count,
            shards: self.plan.shards(),
            norm,
            root: tree.root(),
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        self.signed.manifest = Some(m.clone());
        self.signed.leaves = leaves.clone();
        self.actions.push_back(CommitteeAction::Record(self.signed.clone()));
        if self.open_round() {
            self.actions.push_back(CommitteeAction::PublishManifest(m.clone()));
        }
        self.manifests.insert(self.me, m);
        self.last_announced_at = self.now;
        self.mine = Some(OwnDelta { leaves, tree });
        for s in 0..self.plan.shards() {
            self.send_shard(s, s);
        }
    }

    /// Sending our shard `shard` to `to`: its proof and our signed
    /// manifest go with it (None before we trained).
    fn our_shard_to(&self, to: PublicKey, shard: u32) -> Option<CommitteeAction> {
        let own = self.mine.as_ref()?;
        let manifest = Box::new(self.manifests.get(&self.me)?.clone());
        let proof = own.tree.proof(shard as usize);
        Some(CommitteeAction::SendShard { to, shard, shards: self.plan.shards(), proof, manifest })
    }

    /// Send our shard `s` to the committee of shard `to_committee`.
    fn send_shard(&mut self, s: u32, to_committee: u32) {
        let Some(leaf) = self.mine.as_ref().and_then(|own| own.leaves.get(s as usize).copied()) else {
            return;
        };
        for to in self.members(to_committee) {
            if to == self.me {
                self.inputs.entry(s).or_default().insert(self.me, leaf);
            } else if let Some(send) = self.our_shard_to(to, s) {
                self.actions.push_back(send);
            }
        }
    }

    /// Whether this round has no roster (a run's first round, or one whose
    /// roster emptied): then there is one shard and its committee is every
    /// counted node whose manifest this node holds — version 1's round.
    fn open_round(&self) -> bool {
        self.ledger.roster.is_empty()
    }

    /// The committee of shard `s` as this node knows it.
    fn members(&self, s: u32) -> Vec<PublicKey> {
        if self.open_round() {
            return self.manifests.keys().filter(|k| self.counts(k)).copied().collect();
        }
        self.plan.committee(s).to_vec()
    }

    /// The backup committees that took `shard` over so far, in order.
    fn backups(&self, shard: u32) -> impl Iterator<Item = u32> + '_ {
        let level = self.shards.get(shard as usize).map_or(0, |v| v.level);
        (1..=level).filter_map(move |j| self.plan.fallback(shard, j))
    }

    /// Nodes that hold the inputs of `shard` (its committee and the backups
    /// that took it over).
    fn holders_of(&self, shard: u32) -> Vec<PublicKey> {
        let mut holders = self.members(shard);
        for f in self.backups(shard) {
            holders.extend_from_slice(self.plan.committee(f));
        }
        holders
    }

    /// Whether this node sends its shard `shard` to `to` this round: a
    /// member of the shard's committee (or of its fallback's, once it fell
    /// back), or in an open round an announcer.
    fn sends_to(&self, shard: u32, to: &PublicKey) -> bool {
        if shard >= self.plan.shards() || *to == self.me {
            return false;
        }
        if self.open_round() {
            return self.manifests.contains_key(to);
        }
        self.plan.is_member(shard, to) || self.backups(shard).any(|f| self.plan.is_member(f, to))
    }

    fn on_manifest(&mut self, m: ShardedManifest) {
        if m.run != self.cfg.run || m.round != self.round || m.base != self.base || !self.counts(&m.signer) {
            return;
        }
        if m.shards != self.plan.shards()
            || m.element_count != self.cfg.element_count
            || m.codec != self.cfg.codec
        {
            return;
        }
        // The same manifest again (it travels with every shard a trainer
        // sends) costs no second signature check.
        if self.manifests.get(&m.signer).is_some_and(|old| *old == m) {
            return;
        }
        if !self.manifest_signed(&m) {
            return;
        }
        if let Some(old) = self.manifests.get(&m.signer) {
            if old.signed_bytes() != m.signed_bytes() {
                let proof = FraudProof::TwoManifests { a: old.clone(), b: m };
                self.prove(proof);
            }
            return;
        }
        // Newcomers (keys not on the roster) are taken up to a bound per
        // round, so a flood of fresh keys cannot grow the machine.
        let on_roster = self.ledger.roster.binary_search(&m.signer).is_ok();
        if !on_roster && self.manifests.len() >= self.ledger.roster.len() + MAX_NEWCOMERS {
            return;
        }
        let signer = m.signer;
        let shards = m.shards;
        self.manifests.insert(signer, m);
        self.last_announced_at = self.now;
        // In an open round every announcer aggregates: it gets our delta too.
        if self.open_round() {
            if let Some(send) = self.our_shard_to(signer, 0) {
                self.actions.push_back(send);
            }
        }
        // Shards that arrived before the manifest are checked now.
        for (leaf, proof) in self.early.remove(&signer).unwrap_or_default() {
            self.on_shard(signer, shards, leaf, &proof);
        }
    }

    fn on_shard(&mut self, signer: PublicKey, shards: u32, leaf: ShardLeaf, proof: &[[u8; 32]]) {
        if !self.duties.contains_key(&leaf.shard) || !self.counts(&signer) || shards != self.plan.shards() {
            return;
        }
        // Without the manifest the proof cannot be checked yet: kept (a few
        // per signer) until it comes.
        let Some(m) = self.manifests.get(&signer) else {
            if self.early.len() < 4 * self.ledger.roster.len().max(64) {
                let e = self.early.entry(signer).or_default();
                if e.len() < 4 {
                    e.push((leaf, proof.to_vec()));
                }
            }
            return;
        };
        if !verify_proof(&m.root, m.shards, &leaf, proof) {
            return;
        }
        if self.duties.get(&leaf.shard) == Some(&true) {
            return;
        }
        self.inputs.entry(leaf.shard).or_default().insert(signer, leaf);
    }

    fn aggregate(&mut self, shard: u32) {
        let got = self.inputs.get(&shard).cloned().unwrap_or_default();
        let mut inputs = Vec::new();
        let mut leaves = Vec::new();
        for (signer, leaf) in got {
            if let Some(m) = self.manifests.get(&signer).filter(|_| self.counts(&signer)) {
                inputs.push(m.clone());
                leaves.push(leaf);
            }
        }
        self.duties.insert(shard, true);
        if inputs.is_empty() {
            return;
        }
        self.actions.push_back(CommitteeAction::AggregateShard { shard, inputs, leaves });
    }

    fn on_aggregated(
        &mut self,
        shard: u32,
        included: IncludedList,
        total_tokens: u64,
        result_hash: [u8; 32],
    ) {
        if included.is_empty() || self.signed.round > self.round {
            return;
        }
        let r = ShardResult {
            run: self.cfg.run,
            round: self.round,
            base: self.base,
            shard,
            included_count: included.len() as u32,
            included_root: included.root(),
            total_tokens,
            result_hash,
            signer: self.me,
            signature: Signature([0; 64]),
        }
        .sign(&self.key);
        // Signing is deterministic: a result recorded before a restart is
        // published again only when this is the same one; a different one
        // is not sent (the shard's backup takes it over).
        match self.signed.result(shard) {
            Some(before) if *before != r => return,
            Some(_) => {}
            None if self.signed.results.len() >= MAX_RECORDED_RESULTS => return,
            None => {
                let aligned = self.signed.lists.len() == self.signed.results.len();
                self.signed.results.push(r.clone());
                if aligned {
                    self.signed.lists.push(included.clone());
                } else {
                    self.signed.lists.clear();
                }
                self.actions.push_back(CommitteeAction::Record(self.signed.clone()));
            }
        }
        self.our_lists.insert(shard, included);
        self.actions.push_back(CommitteeAction::PublishResult(r.clone()));
        self.on_result(r);
    }

    /// Whether `key` may sign a result for `shard` now.
    fn may_aggregate(&self, shard: u32, key: &PublicKey) -> bool {
        (self.open_round() && self.manifests.contains_key(key))
            || self.plan.is_member(shard, key)
            || self.backups(shard).any(|f| self.plan.is_member(f, key))
    }

    /// Whether `key` sits on a backup of `shard` that this node has not
    /// handed the shard to yet.
    fn backs_up_later(&self, shard: u32, key: &PublicKey) -> bool {
        let level = self.shards.get(shard as usize).map_or(u32::MAX, |v| v.level);
        (level.saturating_add(1)..=MAX_FALLBACKS)
            .filter_map(|j| self.plan.fallback(shard, j))
            .any(|f| self.plan.is_member(f, key))
    }

    fn on_result(&mut self, r: ShardResult) {
        let s = r.shard as usize;
        if r.run != self.cfg.run {
            return;
        }
        let ours = r.round == self.round && r.base == self.base && s < self.shards.len();
        let claims = ours && self.counts(&r.signer) && self.may_aggregate(r.shard, &r.signer);
        // A later backup's result: the others handed the shard on before
        // this node did; it is kept until this node does too.
        let later = ours && !claims && self.counts(&r.signer) && self.backs_up_later(r.shard, &r.signer);
        let commits = self.commits(&r);
        // A result of a former roster member: its word counts toward a
        // rival chain (a side that ran apart from ours).
        let outside = !(claims || commits || later) && r.round > 0 && self.catch_up.is_former(&r.signer);
        if outside {
            if self.counts(&r.signer) && self.result_signed(&r) {
                self.catch_up.note_outside(r.signer, r.round - 1, r.base, self.now);
                self.consider_catch_up();
            }
            return;
        }
        if !(claims || commits || later) || !self.result_signed(&r) {
            return;
        }
        if commits {
            self.catch_up.note_state(r.signer, r.round - 1, r.base);
            let newer = self.early_results.get(&r.signer).is_none_or(|kept| kept.round < r.round);
            // One per signer; any signer commits while there is no roster,
            // so as many as the newcomers a round takes.
            let room = self.early_results.contains_key(&r.signer)
                || self.early_results.len() < self.ledger.roster.len() + MAX_NEWCOMERS;
            if !ours && r.round >= self.round && newer && room {
                self.early_results.insert(r.signer, r.clone());
            }
            if !ours {
                self.consider_catch_up();
            }
        }
        if !(claims || later) {
            return;
        }
        let view = &mut self.shards[s];
        let held = if later { &mut view.from_later_backups } else { &mut view.results };
        match keep_first(held, &r) {
            Err(proof) => {
                self.prove(*proof);
                return;
            }
            Ok(false) => return,
            Ok(true) if later => return,
            Ok(true) => {}
        }
        self.dirty.insert(r.shard);
        if self.first_result_at.is_none() {
            // Results are coming: the shards still without one pull again
            // (pulls made on entering the round came before any existed).
            self.first_result_at = Some(self.now);
            let at = self.now + self.pull_wait();
            self.result_pulls_due.extend((0..self.plan.shards()).map(|shard| (at, shard)));
            self.shards.iter_mut().for_each(|v| v.pulls = 0);
        }
        // Members re-check every claim but their own on their shard; other
        // nodes re-check their random draw.
        let ours = self.shards[s].results.get(&self.me).map(ShardResult::claim);
        let conflict = ours.is_some_and(|c| c != r.claim());
        if (conflict || self.drawn(r.shard))
            && r.signer != self.me
            && self.asked.insert((r.shard, r.result_hash))
        {
            self.actions.push_back(CommitteeAction::RequestIncluded { result: r.clone() });
        }
        // A member whose result came after the others' re-checks them now.
        if r.signer == self.me {
            let others: Vec<ShardResult> =
                self.shards[s].results.values().filter(|o| o.claim() != r.claim()).cloned().collect();
            for o in others {
                if self.asked.insert((o.shard, o.result_hash)) {
                    self.actions.push_back(CommitteeAction::RequestIncluded { result: o });
                }
            }
        }
    }

    /// Whether this node re-checks `shard` this round (its own draw).
    fn drawn(&self, shard: u32) -> bool {
        self.audits.contains(&shard)
    }

    fn on_included(&mut self, result: ShardResult, included: IncludedList) {
        if result.round != self.round || included.root() != result.included_root {
            return;
        }
        self.auditing.insert(result.result_hash);
        if self.drawn(result.shard) {
            self.audits_started.insert(result.shard);
        }
        if let Some(sketch) = self.sketch_of(&result, &included) {
            self.sketches.push(sketch);
            self.sketches_due.get_or_insert(self.now + SKETCH_WAIT_MS);
            self.send_sketches();
            return;
        }
        let holders = self.holders_of(result.shard);
        self.actions.push_back(CommitteeAction::Recheck { result, included, holders });
    }

    /// Send the waiting sketches as one audit once every drawn shard's
    /// audit started (each trainer is then asked once for all of them), or
    /// `SKETCH_WAIT_MS` after the first was ready (a signer that never
    /// serves its list holds back no other audit for long), or once the
    /// result deadline passed or the round was applied.
    fn send_sketches(&mut self) {
        let all_started = self.audits.iter().all(|s| self.audits_started.contains(s));
        let waited = self.sketches_due.is_some_and(|t| self.now >= t);
        let late = self.applied || waited || self.now >= self.result_deadline();
        if !self.sketches.is_empty() && (all_started || late) {
            self.sketches_due = None;
            self.actions.push_back(CommitteeAction::Sketch(std::mem::take(&mut self.sketches)));
        }
    }

    /// A sketch audit of `result`, when it is one of our drawn audits (not
    /// a conflict with our own claim), the run's mode is linear, and we
    /// hold the manifest each included entry names (an entry whose root we
    /// do not know is re-checked from its inputs, which bring the manifest:
    /// a second manifest of one key is a proof).
    fn sketch_of(&self, result: &ShardResult, included: &IncludedList) -> Option<SketchAudit> {
        let sig = self.draw.as_ref()?;
        let ours = self.shards.get(result.shard as usize)?.results.get(&self.me);
        if !self.drawn(result.shard) || ours.is_some() || !self.cfg.rule.is_linear() {
            return None;
        }
        let inputs = included
            .entries
            .iter()
            .map(|(signer, root)| self.manifests.get(signer).filter(|m| m.root == *root).cloned())
            .collect::<Option<Vec<ShardedManifest>>>()?;
        Some(SketchAudit {
            result: result.clone(),
            included: included.clone(),
            inputs,
            seed: audit_seed(sig, result.shard),
            holders: self.holders_of(result.shard),
        })
    }

    fn on_rechecked(&mut self, result: ShardResult, included: IncludedList, matches: bool) {
        self.verifying.remove(&result.signer);
        if matches {
            if result.round == self.round {
                self.gate.agree(result.result_hash);
            }
            return;
        }
        let s = result.shard as usize;
        // Every signer of the same wrong claim is accused, each by its own
        // signed result.
        let mut accused = vec![result.clone()];
        if s < self.shards.len() && result.round == self.round {
            self.shards[s].wrong.insert(result.result_hash);
            self.dirty.insert(result.shard);
            accused.extend(
                self.shards[s]
                    .results
                    .values()
                    .filter(|r| r.claim() == result.claim() && r.signer != result.signer)
                    .cloned(),
            );
        }
        for r in accused {
            if r.signer != self.me
                && !self.proven.contains_key(&r.signer)
                && self.proven.len() < MAX_LEDGER_KEYS
            {
                self.proven.insert(r.signer, r.round);
                self.dirty.extend(0..self.plan.shards());
                let proof = FraudProof::WrongResult { result: r, included: included.clone() };
                self.actions.push_back(CommitteeAction::PublishProof(Box::new(proof)));
            }
        }
    }

    /// Whether a proof against `key` is taken: only against a key on this
    /// round's roster, which every honest node on this base holds alike,
    /// so all of them take or drop the same proofs, and a proof against a
    /// key made up for it (two messages signed by a fresh key cost its
    /// sender nothing) never reaches the ledger. In a round without a
    /// roster, where every signer is a newcomer, at most `MAX_NEWCOMERS`.
    fn may_be_proven(&self, key: &PublicKey) -> bool {
        if self.ledger.roster.is_empty() {
            self.proven.len() < MAX_NEWCOMERS
        } else {
            self.ledger.roster.binary_search(key).is_ok()
        }
    }

    fn prove(&mut self, proof: FraudProof) {
        let proof = proof.canonical();
        let (who, round) = (proof.accused(), proof.round());
        if self.proven.len() >= MAX_LEDGER_KEYS || self.ledger.is_excluded(&who) {
            return;
        }
        if self.proven.insert(who, round).is_none() {
            self.actions.push_back(CommitteeAction::PublishProof(Box::new(proof)));
            // Its claims no longer count anywhere.
            self.dirty.extend(0..self.plan.shards());
        }
    }

    fn on_proof(&mut self, p: FraudProof) {
        let accused = p.accused();
        if self.proven.contains_key(&accused)
            || self.ledger.is_excluded(&accused)
            || self.verifying.contains(&accused)
            || !self.may_be_proven(&accused)
        {
            return;
        }
        if p.check().is_err() {
            return;
        }
        match p {
            FraudProof::WrongResult { result, included } => {
                let holders = self.holders_of(result.shard);
                if self.auditing.contains(&result.result_hash) {
                    // Our own audit of that claim is under way or done: it
                    // proves the claim itself, or the proof does not hold.
                } else if result.round == self.round {
                    self.verifying.insert(accused);
                    self.actions.push_back(CommitteeAction::Recheck { result, included, holders });
                } else {
                    // Inputs of past rounds may be gone: only this round's
                    // wrong results are re-verified (proofs travel within
                    // the round).
                }
            }
            p => self.prove(p),
        }
    }

    fn on_fetched(
        &mut self,
        shard: u32,
        result_hash: [u8; 32],
        outcome: FetchOutcome,
        norm: f32,
        included: Option<IncludedSigners>,
    ) {
        let Some(v) = self.shards.get(shard as usize) else { return };
        if v.chosen != Some(result_hash) {
            return;
        }
        let claim = v.results.values().find(|r| r.result_hash == result_hash);
        let claim = claim.map(|r| (r.included_root, r.included_count as usize));
        let roster = &self.ledger.roster;
        let signers = included.and_then(|s| {
            let (root, count) = claim?;
            let (signers, got) = s.signers_and_root(roster).ok()?;
            (got == root && signers.len() == count).then_some(signers)
        });
        // Shard 0 is served with its included signers: a holder that
        // serves none, or a list that does not match the signed root (one
        // lying co-signer cannot refute the others' claim), did not serve
        // it.
        let outcome = match outcome {
            FetchOutcome::Served if shard == 0 && signers.is_none() => FetchOutcome::Unavailable,
            o => o,
        };
        if let (0, FetchOutcome::Served, Some(signers)) = (shard, outcome, signers) {
            self.included0 = Some((result_hash, signers));
        }
        let now = self.now;
        let v = &mut self.shards[shard as usize];
        match outcome {
            FetchOutcome::Served => {
                if !v.fetched && !v.zero {
                    v.fetched = true;
                    self.settled += 1;
                    self.gate.note_fetched(shard, result_hash, norm, self.plan.layout().len(shard));
                }
            }
            FetchOutcome::Unavailable if v.tried < v.holders.len() => {
                let at = now + fetch_backoff(v.tried);
                v.retry_at = Some(at);
                self.retries.insert((at, shard));
            }
            FetchOutcome::Unavailable if v.passes + 1 < FETCH_PASSES => {
                // Every holder failed once: all are asked again after the
                // longest back-off.
                v.passes += 1;
                v.tried = 0;
                let at = now + FETCH_RETRY_MAX_MS;
                v.retry_at = Some(at);
                self.retries.insert((at, shard));
            }
            _ => {
                // Values that do not decode, or no holder serves them after
                // every pass: the claim is taken as wrong and the next one
                // wins.
                v.wrong.insert(result_hash);
                v.chosen = None;
                self.dirty.insert(shard);
            }
        }
    }

    /// Ask the next holder of shard `s`'s chosen claim.
    fn ask_next_holder(&mut self, s: usize) {
        let v = &mut self.shards[s];
        let (Some(hash), Some(&from)) = (v.chosen, v.holders.get(v.tried)) else { return };
        v.tried += 1;
        v.retry_at = None;
        self.actions.push_back(CommitteeAction::FetchAggregate { shard: s as u32, result_hash: hash, from });
    }

    /// The winning claim of a shard among valid, unrefuted results.
    fn best_claim(&self, s: usize) -> Option<([u8; 32], Vec<PublicKey>)> {
        let v = &self.shards[s];
        let mut claims: BTreeMap<([u8; 32], [u8; 32], u32), Vec<PublicKey>> = BTreeMap::new();
        for r in v.results.values() {
            if self.counts(&r.signer) && !v.wrong.contains(&r.result_hash) {
                claims.entry(r.claim()).or_default().push(r.signer);
            }
        }
        claims
            .into_iter()
            .max_by(|a, b| (a.1.len(), a.0 .2).cmp(&(b.1.len(), b.0 .2)).then(b.0 .0.cmp(&a.0 .0)))
            .map(|(c, signers)| (c.0, signers))
    }

    fn conflicted(&self, s: usize) -> bool {
        let v = &self.shards[s];
        let claims: BTreeSet<_> = v
            .results
            .values()
            .filter(|r| self.counts(&r.signer) && !v.wrong.contains(&r.result_hash))
            .map(ShardResult::claim)
            .collect();
        claims.len() > 1
    }

    /// Every member that counts signed a result (in an open round: every
    /// announcer).
    fn all_members_in(&self, s: usize) -> bool {
        let v = &self.shards[s];
        let c = self.members(s as u32);
        !c.is_empty() && c.iter().filter(|k| self.counts(k)).all(|k| v.results.contains_key(k))
    }

    /// In an open round that holds its own delta, once every announcer's
    /// input is in: when it closes its inputs, a grace period after the
    /// newest announcement (nobody knows who else will come, so a quiet
    /// spell stands for the roster's "all in").
    fn open_inputs_quiet_at(&self) -> Option<u64> {
        if !self.open_round() || self.mine.is_none() || self.duties.get(&0) != Some(&false) {
            return None;
        }
        let inputs = self.inputs.get(&0)?;
        let announcers = self.members(0);
        announcers
            .iter()
            .all(|k| inputs.contains_key(k))
            .then_some(self.last_announced_at + self.cfg.grace_ms)
    }

    fn advance(&mut self) {
        self.send_sketches();
        if self.applied {
            return;
        }
        let now = self.now;
        // A deadline passed since the last look: every shard is looked at.
        let passed = self.deadlines().filter(|t| *t <= now).count();
        if passed != self.deadlines_passed {
            self.deadlines_passed = passed;
            self.dirty.extend(0..self.plan.shards());
        }
        // Duties: aggregate at the input deadline, or when every roster
        // member's shard is in; a backup's a grace period after it took over.
        let duties: Vec<(u32, bool)> = self.duties.iter().map(|(s, d)| (*s, *d)).collect();
        for (s, done) in duties {
            if done {
                continue;
            }
            let due = match self.duty_since.get(&s) {
                None => now >= self.input_deadline() || self.mid_round_due.is_some_and(|t| now >= t),
                Some(since) => now >= since + self.cfg.grace_ms,
            };
            // Every awaited roster member's shard is in (newcomers' shards
            // that came by then are included too); in an open round every
            // announcer's, with no new one for a grace period.
            let all_in = !self.ledger.roster.is_empty()
                && self.inputs.get(&s).is_some_and(|m| {
                    !m.is_empty()
                        && self.ledger.roster.iter().filter(|k| self.awaited(k)).all(|k| m.contains_key(k))
                });
            let all_in = all_in || self.open_inputs_quiet_at().is_some_and(|t| now >= t);
            if due || all_in {
                self.aggregate(s);
            }
        }
        // Shards to send again that are due.
        let due: Vec<(PublicKey, u32)> =
            self.resend.iter().filter(|(_, (_, at))| at.is_some_and(|t| t <= now)).map(|(k, _)| *k).collect();
        for (to, shard) in due {
            if let Some(e) = self.resend.get_mut(&(to, shard)) {
                e.1 = None;
            }
            if let Some(send) = self.our_shard_to(to, shard) {
                self.actions.push_back(send);
            }
        }
        // Retries of aggregate fetches that are due.
        while let Some(&(at, s)) = self.retries.first() {
            if at > now {
                break;
            }
            self.retries.pop_first();
            if self.shards[s as usize].retry_at == Some(at) {
                self.ask_next_holder(s as usize);
            }
        }
        // Shards whose backup's time is up.
        while let Some(&(at, s)) = self.escalations.first() {
            if at > now {
                break;
            }
            self.escalations.pop_first();
            self.dirty.insert(s);
        }
        if self.input_pull_at.is_some_and(|t| t <= now) {
            self.pull_inputs();
        }
        // Results to pull that are due.
        while let Some(&(at, s)) = self.result_pulls_due.first() {
            if at > now {
                break;
            }
            self.result_pulls_due.pop_first();
            self.pull_result(s);
        }
        // Pick claims of the shards that changed (a shard handed to a
        // backup that already signed changes again at once).
        while let Some(s) = self.dirty.pop_first() {
            self.look_at(s as usize, now);
        }
        if self.settled < self.shards.len() {
            return;
        }
        let passes = self.gate_passes();
        // Shards whose claim the gate gave up pick again now.
        while let Some(s) = self.dirty.pop_first() {
            self.look_at(s as usize, now);
        }
        if passes && self.settled == self.shards.len() {
            self.applied = true;
            let shards = self.shards.iter().map(|v| if v.zero { None } else { v.chosen }).collect();
            let ledger = self.next_ledger();
            self.applying = Some(ledger.clone());
            self.actions.push_back(CommitteeAction::Apply {
                round: self.round,
                base: self.base,
                shards,
                ledger,
            });
            self.send_sketches();
        }
    }

    /// Pick shard `s`'s claim when it is ready, or hand the shard to its
    /// next backup, or give it up as zero.
    fn look_at(&mut self, s: usize, now: u64) {
        if s >= self.shards.len() || self.shards[s].chosen.is_some() || self.shards[s].zero {
            return;
        }
        let best = self.best_claim(s);
        let level = self.shards[s].level;
        let ready = match &best {
            None => false,
            Some(_) if self.conflicted(s) => now >= self.decide_deadline(),
            Some(_) => self.all_members_in(s) || now >= self.result_deadline(),
        };
        if ready {
            if let Some((hash, mut signers)) = best {
                // Nodes start at signers by their rank in the roster, so
                // each signer serves about N / (signers) of them.
                let rank = self.ledger.roster.binary_search(&self.me).unwrap_or_else(|i| i);
                let start = (rank + s) % signers.len().max(1);
                signers.rotate_left(start);
                let v = &mut self.shards[s];
                v.chosen = Some(hash);
                v.holders = signers;
                v.tried = 0;
                v.passes = 0;
                self.ask_next_holder(s);
            }
        } else if best.is_none() && level == 0 && now >= self.result_deadline() {
            self.fall_back(s as u32, 1);
        } else if best.is_none() && level >= 1 && now >= self.shards[s].level_since + 2 * self.cfg.grace_ms {
            self.fall_back(s as u32, level + 1);
        }
    }

    /// Whether the round may apply its fetched aggregates: no chosen claim
    /// was shown wrong or lost its signers to a proof since it was chosen,
    /// and none is a suspect of the norm gate still waiting for its audit
    /// (`super::gate`). New suspects are audited; a claim given up (wrong,
    /// proven, or a suspect no audit agreed with in time) leaves its shard
    /// to pick another claim or go to its backup.
    fn gate_passes(&mut self) -> bool {
        // A chosen claim shown wrong, or whose signers were proven, since
        // it was chosen is not applied.
        for shard in 0..self.plan.shards() {
            if let Some(claim) = self.shards[shard as usize].chosen.filter(|c| self.given_up(shard, c)) {
                self.refuse(shard, claim);
            }
        }
        let (me, shards) = (self.me, &self.shards);
        let ours =
            |s: u32, c: &[u8; 32]| shards[s as usize].results.get(&me).is_some_and(|r| &r.result_hash == c);
        let verdicts = self.gate.check(self.now, self.cfg.grace_ms, ours);
        let passes = verdicts.is_empty();
        for verdict in verdicts {
            match verdict {
                Suspect::New { shard, claim } if self.given_up(shard, &claim) => self.refuse(shard, claim),
                Suspect::New { shard, claim } => self.audit_suspect(shard, claim),
                Suspect::TimedOut { shard, claim } => self.refuse(shard, claim),
                Suspect::Waiting => {}
            }
        }
        passes
    }

    /// Whether shard `shard`'s claim `claim` was shown wrong, or none of
    /// its signers counts any more (proven since it was chosen).
    fn given_up(&self, shard: u32, claim: &[u8; 32]) -> bool {
        let v = &self.shards[shard as usize];
        let backed = v.results.values().any(|r| r.result_hash == *claim && self.counts(&r.signer));
        v.wrong.contains(claim) || !backed
    }

    /// Audit shard `shard`'s claim `claim` as if drawn (unless an audit of
    /// it, or a re-check of a proof against it, is under way or done).
    fn audit_suspect(&mut self, shard: u32, claim: [u8; 32]) {
        self.audits.insert(shard);
        let result = self.shards[shard as usize].results.values().find(|r| r.result_hash == claim).cloned();
        let result = result.filter(|r| !self.verifying.contains(&r.signer));
        if let Some(result) = result.filter(|_| self.asked.insert((shard, claim))) {
            self.actions.push_back(CommitteeAction::RequestIncluded { result });
        }
    }

    /// Give up shard `shard`'s chosen claim `claim` as wrong.
    fn refuse(&mut self, shard: u32, claim: [u8; 32]) {
        self.gate.forget(shard, &claim);
        let v = &mut self.shards[shard as usize];
        if v.chosen != Some(claim) {
            return;
        }
        v.wrong.insert(claim);
        v.chosen = None;
        v.holders.clear();
        v.tried = 0;
        v.passes = 0;
        v.retry_at = None;
        if std::mem::take(&mut v.fetched) {
            self.settled -= 1;
        }
        self.dirty.insert(shard);
    }

    /// Shard `s` got no result: backup `level` takes it (trainers re-send
    /// it there, its members aggregate a grace period later, and two grace
    /// periods later the next backup takes it); past the last backup it is
    /// applied as zero.
    fn fall_back(&mut self, s: u32, level: u32) {
        let Some(f) = self.plan.fallback(s, level) else {
            self.shards[s as usize].zero = true;
            self.settled += 1;
            return;
        };
        self.shards[s as usize].level = level;
        self.shards[s as usize].level_since = self.now;
        // What this backup signed before we handed the shard to it counts now.
        let kept = std::mem::take(&mut self.shards[s as usize].from_later_backups);
        for r in kept.into_values() {
            self.on_result(r);
        }
        // With no result by then the next backup takes it.
        self.escalations.insert((self.now + 2 * self.cfg.grace_ms, s));
        if self.plan.is_member(f, &self.me) && !self.stand_by_recorded(s) {
            self.duties.insert(s, false);
            self.duty_since.insert(s, self.now);
            // Trainers that handed the shard over before this node did sent
            // it here while it took no inputs for it: asked a pull wait on.
            self.input_pulls_left = self.input_pulls_left.max(1);
            let at = self.now + self.pull_wait();
            self.input_pull_at = Some(self.input_pull_at.map_or(at, |t| t.min(at)));
        }
        self.send_shard(s, f);
    }

    fn next_ledger(&self) -> Ledger {
        let shard0 = self.shards.first().and_then(|v| {
            let hash = v.chosen?;
            self.included0.as_ref().filter(|(h, _)| *h == hash).map(|(_, signers)| signers.as_slice())
        });
        let proven: BTreeMap<PublicKey, u64> =
            self.proven.iter().filter(|(_, r)| **r < self.round).map(|(k, r)| (*k, *r)).collect();
        self.ledger.next(shard0, &proven)
    }
}

/// Keep `r` as its signer's result in `held` unless that signer has one
/// there already: a different one is a `TwoResults` proof. Whether `r`
/// was new.
fn keep_first(held: &mut BTreeMap<PublicKey, ShardResult>, r: &ShardResult) -> Result<bool, Box<FraudProof>> {
    match held.get(&r.signer) {
        Some(old) if old != r => Err(Box::new(FraudProof::TwoResults { a: old.clone(), b: r.clone() })),
        Some(_) => Ok(false),
        None => {
            held.insert(r.signer, r.clone());
            Ok(true)
        }
    }
}
