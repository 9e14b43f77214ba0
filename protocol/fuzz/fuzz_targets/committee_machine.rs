//! The protocol-v2 committee round machine driven by an arbitrary sequence
//! of events from a cast of six signers: messages decoded from the fuzz
//! bytes with the real decoders (ShardedManifest, ShardDelta, ShardResult,
//! IncludedList, FraudProof), validly signed messages built from the fuzz
//! bytes (so the machine gets past its signature checks), the driver's
//! replies to the actions it asked for (aggregated, fetched, re-checked,
//! applied, fetched states), and timers with an increasing `now`.
//!
//! Checks: no panic; at most `action_bound` actions per event; the round
//! goes backwards only to a fetched state the machine asked for (a rival
//! chain, docs/protocol.md §10); everything the machine publishes is canonical, and
//! its signed messages and equivocation proofs verify; the actions are
//! well-formed (shards in range, proofs at most 16 hashes, Apply covers
//! every shard and carries a sorted roster).
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::codec::Codec;
use murmur_protocol::committee::merkle::MAX_PROOF_LEN;
use murmur_protocol::committee::{
    merkle_root, CommitteeAction, CommitteeConfig, CommitteeEvent, CommitteeMachine, FetchOutcome, FraudProof,
    IncludedList, IncludedSigners, Ledger, MerkleTree, ShardDelta, ShardLeaf, ShardResult, ShardRule, ShardedManifest,
    SignedRecord, SketchAudit,
};
use murmur_protocol::hash::{PayloadHash, RunId, StateId};
use murmur_protocol::identity::{NodeKey, PublicKey, Signature};
use murmur_protocol::spec::RobustMode;
use std::sync::OnceLock;

const CAST: usize = 6;
/// Four shards at most (MIN_SHARD_ELEMENTS is 1024).
const ELEMENTS: u64 = 4096;
const RUN: RunId = RunId([7; 32]);
/// What the driver remembers of each kind of request (oldest dropped).
const KEEP: usize = 16;

fn keys() -> &'static [NodeKey] {
    static KEYS: OnceLock<Vec<NodeKey>> = OnceLock::new();
    KEYS.get_or_init(|| (1..=CAST as u8).map(|i| NodeKey::from_seed([i; 32])).collect())
}

/// Most actions one event may yield: the round's Train, our manifest and
/// one shard per other roster member (twice over with fallbacks), one
/// aggregation, fetch and re-check request per shard, a proof, an Apply.
fn action_bound(m: &CommitteeMachine) -> usize {
    8 + 4 * (m.ledger().roster.len() + m.plan().shards() as usize)
}

/// The fuzz bytes as a stream that yields zeros once spent.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// Up to `n` bytes (a length-prefixed message for a decoder).
    fn bytes(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16() % 1024).min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// The leaves of cast member `i`'s delta, version `v`, cut into `shards`.
fn leaves(i: usize, v: u8, shards: u32) -> Vec<ShardLeaf> {
    (0..shards)
        .map(|s| {
            let mut h = [(i as u8) * 16 + v % 4; 32];
            h[0] = s as u8;
            ShardLeaf {
                shard: s,
                payload_hash: PayloadHash(h),
                payload_len: 100 + u64::from(v % 4),
                norm: 1.0,
            }
        })
        .collect()
}

fn manifest(i: usize, v: u8, round: u64, base: StateId, shards: u32) -> ShardedManifest {
    ShardedManifest {
        run: RUN,
        round,
        base,
        signer: PublicKey::default(),
        tokens: 100 + u64::from(v % 4),
        train_loss: 1.0,
        codec: Codec::F32,
        element_count: ELEMENTS,
        shards,
        norm: 4.0,
        root: merkle_root(&leaves(i, v, shards)),
        signature: Signature::default(),
    }
    .sign(&keys()[i])
}

/// The cast members in `mask`, each with its version-0 delta's root.
fn list(mask: u8, shards: u32) -> IncludedList {
    IncludedList::new(
        (0..CAST)
            .filter(|j| mask & (1 << j) != 0)
            .map(|j| (keys()[j].public(), merkle_root(&leaves(j, 0, shards))))
            .collect(),
    )
}

fn push<T>(v: &mut Vec<T>, x: T) {
    if v.len() == KEEP {
        v.remove(0);
    }
    v.push(x);
}

fn pick<T: Clone>(v: &[T], at: u8) -> Option<T> {
    (!v.is_empty()).then(|| v[usize::from(at) % v.len()].clone())
}

/// What the driver knows: results with their lists, and the machine's
/// outstanding requests.
#[derive(Default)]
struct Driver {
    lists: Vec<(ShardResult, IncludedList)>,
    jobs: Vec<(u32, Vec<ShardedManifest>)>,
    fetches: Vec<(u32, [u8; 32])>,
    requests: Vec<ShardResult>,
    rechecks: Vec<(ShardResult, IncludedList)>,
    sketches: Vec<(ShardResult, IncludedList)>,
    applies: Vec<u64>,
    /// States a FetchState asked for: (the round they ended, the state).
    states: Vec<(u64, StateId)>,
}

impl Driver {
    fn list_for(&self, m: &CommitteeMachine, r: &ShardResult) -> Option<IncludedList> {
        m.our_list(r.shard)
            .filter(|l| l.root() == r.included_root)
            .cloned()
            .or_else(|| self.lists.iter().find(|(_, l)| l.root() == r.included_root).map(|(_, l)| l.clone()))
    }
    fn list_with_hash(&self, m: &CommitteeMachine, shard: u32, hash: [u8; 32]) -> Option<IncludedList> {
        self.lists
            .iter()
            .find(|(r, _)| r.shard == shard && r.result_hash == hash)
            .map(|(_, l)| l.clone())
            .or_else(|| m.our_list(shard).cloned())
    }
}

fn event(
    inp: &mut Input<'_>,
    m: &mut CommitteeMachine,
    d: &mut Driver,
    now: &mut u64,
) -> Option<CommitteeEvent> {
    let [kind, a, b, c] = [inp.u8(), inp.u8(), inp.u8(), inp.u8()];
    let i = usize::from(a) % CAST;
    let s_now = m.plan().shards();
    let round =
        if b & 0x10 == 0 { m.round() } else { m.round().saturating_add(u64::from(b % 4)).saturating_sub(2) };
    let base = if c & 0x80 == 0 { m.base() } else { StateId([c % 4; 32]) };
    let shards = if c & 0x40 == 0 { s_now } else { u32::from(c % 5) + 1 };
    let v = b >> 6;
    *now = now.saturating_add(u64::from(a & 15));
    Some(match kind % 21 {
        0 => CommitteeEvent::ManifestReceived(ShardedManifest::decode(inp.bytes()).ok()?),
        1 => {
            let mut x = manifest(i, v, round, base, shards);
            if c & 0x20 != 0 {
                x.tokens ^= 1; // breaks the signature
            }
            CommitteeEvent::ManifestReceived(x)
        }
        2 => {
            let x = ShardDelta::decode(inp.bytes()).ok()?;
            CommitteeEvent::ShardReceived {
                signer: x.signer,
                shards: x.shards,
                leaf: x.leaf(),
                proof: x.proof,
            }
        }
        3 => {
            let ls = leaves(i, v, shards);
            let s = u32::from(b) % shards;
            let mut proof = MerkleTree::new(&ls).proof(s as usize);
            if c & 0x20 != 0 {
                proof.reverse();
                proof.push([c; 32]);
            }
            CommitteeEvent::ShardReceived { signer: keys()[i].public(), shards, leaf: ls[s as usize], proof }
        }
        4 => CommitteeEvent::ResultReceived(ShardResult::decode(inp.bytes()).ok()?),
        5 => {
            let l = list(c | (1 << i), s_now);
            let r = ShardResult {
                run: RUN,
                round,
                base,
                shard: u32::from(b) % (s_now + 1),
                // A lying signer's count may disagree with its list.
                included_count: l.len() as u32 + u32::from(a >> 7),
                included_root: l.root(),
                total_tokens: 100 * l.len() as u64,
                result_hash: [(b >> 5) % 4; 32],
                signer: PublicKey::default(),
                signature: Signature::default(),
            }
            .sign(&keys()[i]);
            push(&mut d.lists, (r.clone(), l));
            CommitteeEvent::ResultReceived(r)
        }
        6 => {
            let result = pick(&d.requests, c).or_else(|| pick(&d.lists, c).map(|x| x.0))?;
            let included =
                if a & 0x80 != 0 { IncludedList::decode(inp.bytes()).ok()? } else { d.list_for(m, &result)? };
            CommitteeEvent::IncludedReceived { result, included }
        }
        7 => CommitteeEvent::ProofReceived(Box::new(FraudProof::decode(inp.bytes()).ok()?)),
        8 => {
            let p = match c % 3 {
                0 => FraudProof::TwoManifests {
                    a: manifest(i, b & 3, round, base, shards),
                    b: manifest(i, (b >> 2) & 3, round, base, shards),
                },
                1 => {
                    let (x, _) = pick(&d.lists, b)?;
                    let mut y = x.clone();
                    y.result_hash[0] ^= 1 + (b & 1);
                    let k = keys().iter().find(|k| k.public() == x.signer)?;
                    FraudProof::TwoResults { a: x, b: y.sign(k) }
                }
                _ => {
                    let (result, included) = pick(&d.lists, b)?;
                    FraudProof::WrongResult { result, included }
                }
            };
            CommitteeEvent::ProofReceived(Box::new(p))
        }
        9 => {
            *now = now.saturating_add(u64::from(inp.u16()) * 4);
            CommitteeEvent::TimerFired
        }
        10 => CommitteeEvent::LocalDeltaReady {
            tokens: 100,
            train_loss: 1.0,
            norm: 4.0,
            leaves: leaves(0, v, if c & 0x40 == 0 { s_now } else { u32::from(c % 5) }),
        },
        11 => match pick(&d.jobs, c) {
            Some((shard, inputs)) if a & 0x80 == 0 => CommitteeEvent::ShardAggregated {
                round: m.round(),
                shard,
                included: IncludedList::new(inputs.iter().map(|x| (x.signer, x.root)).collect()),
                total_tokens: inputs.iter().map(|x| x.tokens).sum(),
                result_hash: [b % 4; 32],
            },
            _ => CommitteeEvent::ShardAggregated {
                // This round's, or a reply that outlived its round.
                round: m.round().saturating_sub(u64::from(c & 1)),
                shard: u32::from(b) % (s_now + 1),
                included: list(c, s_now),
                total_tokens: 7,
                result_hash: [b % 4; 32],
            },
        },
        12 => CommitteeEvent::ShardAggregationFailed {
            round: m.round(),
            shard: pick(&d.jobs, c).map_or(u32::from(b) % (s_now + 1), |j| j.0),
        },
        13 => {
            let (shard, result_hash) = pick(&d.fetches, c)?;
            let included = if shard == 0 {
                // Fuzzed bytes, or the signers of a list the driver holds
                // against this machine's roster.
                if a & 0x40 != 0 {
                    IncludedSigners::decode(inp.bytes()).ok()
                } else {
                    d.list_with_hash(m, shard, result_hash)
                        .map(|l| IncludedSigners::of(&l, &m.ledger().roster))
                }
            } else {
                None
            };
            // Sizes like the others', far above them, or not numbers.
            let norm = [1.0, 1.1, 0.9, 50.0, f32::NAN, f32::INFINITY, 0.0][usize::from(b % 7)];
            let outcome = match (a & 0x80 == 0, b & 0x80 == 0) {
                (true, _) => FetchOutcome::Served,
                (false, true) => FetchOutcome::Unavailable,
                (false, false) => FetchOutcome::Refuted,
            };
            CommitteeEvent::AggregateFetched { shard, result_hash, outcome, norm, included }
        }
        14 if a & 0x40 != 0 => {
            // A sketch's verdict: agrees, disagrees, or could not tell.
            let (result, included) = pick(&d.sketches, c)?;
            let matches = [Some(true), Some(false), None][usize::from(b % 3)];
            CommitteeEvent::Sketched { result, included, matches }
        }
        14 => {
            let (result, included) = pick(&d.rechecks, c)?;
            CommitteeEvent::Rechecked { result, included, matches: a & 0x80 == 0 }
        }
        15 => CommitteeEvent::Applied {
            round: if b & 1 == 0 { pick(&d.applies, c).unwrap_or(m.round()) } else { round },
            new_state: StateId([c % 8; 32]),
        },
        16 => CommitteeEvent::ShardUndelivered { to: keys()[i].public(), shard: u32::from(c) % (s_now + 1) },
        19 => CommitteeEvent::PeerDisconnected(keys()[i].public()),
        20 => CommitteeEvent::PeerConnected(keys()[i].public()),
        17 => {
            // A fetched state with its ledger: one a FetchState asked for,
            // or any.
            let roster: Vec<PublicKey> =
                (0..CAST).filter(|j| c & (1 << j) != 0).map(|j| keys()[j].public()).collect();
            let mut ledger = Ledger::genesis(roster);
            if b & 0x80 != 0 {
                ledger.excluded.insert(keys()[i].public(), round.saturating_sub(1));
            }
            let (round, state) = match pick(&d.states, c) {
                Some((r, s)) if a & 0x80 == 0 => (r + 1, s),
                _ => (round, StateId([c % 8; 32])),
            };
            CommitteeEvent::CaughtUp { round, state, ledger }
        }
        _ => CommitteeEvent::CatchUpFailed,
    })
}

fn check_action(m: &CommitteeMachine, d: &mut Driver, action: CommitteeAction) {
    match action {
        CommitteeAction::Train { plan, .. } => assert!(plan.shards() >= 1),
        CommitteeAction::PublishManifest(x) => {
            assert!(x.verify().is_ok(), "our manifest verifies");
            assert_eq!(ShardedManifest::decode(&x.encode()).as_ref(), Ok(&x));
        }
        CommitteeAction::SendShard { shard, shards, proof, manifest, .. } => {
            assert!(shard < shards && proof.len() <= MAX_PROOF_LEN);
            assert!(manifest.verify().is_ok() && manifest.shards == shards, "our manifest goes with it");
        }
        CommitteeAction::AggregateShard { shard, inputs, leaves } => {
            assert!(!inputs.is_empty() && inputs.len() == leaves.len());
            assert!(leaves.iter().all(|l| l.shard == shard));
            push(&mut d.jobs, (shard, inputs));
        }
        CommitteeAction::PublishResult(r) => {
            assert!(r.verify().is_ok(), "our result verifies");
            assert_eq!(ShardResult::decode(&r.encode()).as_ref(), Ok(&r));
            let l = m.our_list(r.shard).cloned().expect("a published result's list is served");
            assert_eq!((l.root(), l.len()), (r.included_root, r.included_count as usize));
            push(&mut d.lists, (r, l));
        }
        CommitteeAction::FetchAggregate { shard, result_hash, .. } => {
            assert!(shard < m.plan().shards());
            push(&mut d.fetches, (shard, result_hash));
        }
        CommitteeAction::RequestIncluded { result } => push(&mut d.requests, result),
        CommitteeAction::PullInputs { shard, from } | CommitteeAction::PullResult { shard, from, .. } => {
            assert!(shard < m.plan().shards() && !from.is_empty(), "a pull asks someone for a shard");
            assert!(!from.contains(&keys()[0].public()), "a node never asks itself");
        }
        CommitteeAction::Sketch(audits) => {
            assert!(!audits.is_empty(), "a sketch action carries an audit");
            for SketchAudit { result, included, inputs, .. } in audits {
                assert_eq!(included.root(), result.included_root, "a sketch's list is the result's");
                assert_eq!(inputs.len(), included.len(), "one manifest per included entry");
                for (m, (signer, root)) in inputs.iter().zip(&included.entries) {
                    assert_eq!((m.signer, m.root), (*signer, *root), "the manifests are the entries'");
                }
                push(&mut d.sketches, (result, included));
            }
        }
        CommitteeAction::Recheck { result, included, .. } => {
            assert_eq!(included.root(), result.included_root, "a re-check's list is the result's");
            push(&mut d.rechecks, (result, included));
        }
        CommitteeAction::PublishProof(p) => {
            assert_eq!(FraudProof::decode(&p.encode()).as_ref(), Ok(&*p));
            if !matches!(*p, FraudProof::WrongResult { .. }) {
                assert_eq!(p.check(), Ok(()), "a published equivocation proof holds");
            }
        }
        CommitteeAction::FetchState { round, state, holders } => {
            assert!(!holders.is_empty() && !holders.contains(&keys()[0].public()), "others hold the state");
            push(&mut d.states, (round, state));
        }
        CommitteeAction::Apply { round, shards, ledger, .. } => {
            assert_eq!(shards.len(), m.plan().shards() as usize);
            assert!(ledger.roster.windows(2).all(|w| w[0] < w[1]));
            assert!(ledger.roster.iter().all(|k| !ledger.is_excluded(k)));
            push(&mut d.applies, round);
        }
        CommitteeAction::Record(r) => {
            assert!(r.manifest.is_some() || !r.results.is_empty(), "a record holds what was signed");
            assert_eq!(SignedRecord::decode(&r.encode()).ok(), Some(r), "a record reads back");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    // The first byte: which of the cast is on the genesis roster (we are
    // member 0, on it or not), and the starting round.
    let first = inp.u8();
    let roster: Vec<PublicKey> =
        (0..CAST).filter(|j| first & (1 << j) != 0 || *j == 1).map(|j| keys()[j].public()).collect();
    let cfg = CommitteeConfig {
        run: RUN,
        codec: Codec::F32,
        element_count: ELEMENTS,
        k: 1 + u32::from(first >> 6),
        rule: ShardRule::as_trained(RobustMode::Mean),
        input_ms: 1000,
        result_ms: 1000,
        grace_ms: 500,
        audits: 4,
        operators: Vec::new(),
    };
    let mut now = 0u64;
    let mut m = CommitteeMachine::new(
        cfg,
        keys()[0].clone(),
        u64::from(first >> 7),
        StateId([0; 32]),
        Ledger::genesis(roster),
        now,
    );
    let mut d = Driver::default();
    while !inp.0.is_empty() {
        let before = m.round();
        let bound = action_bound(&m);
        let Some(ev) = event(&mut inp, &mut m, &mut d, &mut now) else {
            while let Some(a) = m.poll_action() {
                check_action(&m, &mut d, a);
            }
            continue;
        };
        // A round may go back only to a state the machine asked to fetch
        // (a rival chain it moves to), and then exactly to it.
        let asked = match &ev {
            CommitteeEvent::CaughtUp { round, state, .. } => {
                round.checked_sub(1).is_some_and(|r| d.states.contains(&(r, *state))).then_some((*round, *state))
            }
            _ => None,
        };
        m.handle(now, ev);
        let bound = bound.max(action_bound(&m));
        let mut n = 0;
        while let Some(a) = m.poll_action() {
            n += 1;
            assert!(n <= bound, "more than {bound} actions for one event");
            check_action(&m, &mut d, a);
        }
        assert!(
            m.round() >= before || asked == Some((m.round(), m.base())),
            "the round went backwards, not to a state it asked for"
        );
        if let Some(t) = m.next_timeout() {
            assert!(t > now, "a timeout in the past");
        }
    }
});
