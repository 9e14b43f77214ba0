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

mod audits;
mod claims;
mod inputs;
mod restart;
mod settle;

use audits::shards_of_draw;
pub use audits::{audit_draw, audit_seed, draw_signature, DOMAIN_AUDIT_DRAW, DOMAIN_AUDIT_SEED};

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
    /// Accused claims (signer, result hash) whose wrong-result proof is
    /// being recomputed.
    verifying: BTreeSet<(PublicKey, [u8; 32])>,
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

    /// The included list of our result for `shard`, to serve.
    pub fn our_list(&self, shard: u32) -> Option<&IncludedList> {
        self.our_lists.get(&shard)
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
        // A backup's duty taken between deadlines is due a grace period on.
        let duty = self
            .duty_since
            .iter()
            .filter(|(s, _)| self.duties.get(s) == Some(&false))
            .map(|(_, since)| since + self.cfg.grace_ms)
            .filter(|t| *t > self.now)
            .min();
        [
            deadline,
            duty,
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
}
