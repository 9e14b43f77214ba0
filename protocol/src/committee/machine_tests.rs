//! Tests of the committee round machine with a fake clock: a small in-test
//! network delivers every action at once, aggregates with the real
//! per-shard function, and advances time only to the machines' own
//! deadlines. Liars and withholders are played by the harness; the
//! machines are all the same honest code.

use super::machine::*;
use super::*;
use crate::codec::{decode_delta, encode_delta, Codec};
use crate::hash::{payload_hash_of, RunId, StateId};
use crate::identity::{NodeKey, PublicKey, Signature};
use crate::spec::RobustMode;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

const P: u64 = 3 * 1024;

fn cfg(k: u32) -> CommitteeConfig {
    CommitteeConfig {
        run: RunId([7; 32]),
        codec: Codec::Int8Block { block: 256 },
        element_count: P,
        k,
        rule: ShardRule::as_trained(RobustMode::NormFilter { multiple: 3.0 }),
        input_ms: 1_000,
        result_ms: 500,
        grace_ms: 300,
        audits: 4,
        operators: Vec::new(),
    }
}

/// A round as one node applied it: time, shards, ledger.
type Applied = (u64, Vec<Option<[u8; 32]>>, Ledger);

struct Net {
    keys: Vec<NodeKey>,
    machines: Vec<CommitteeMachine>,
    now: u64,
    payloads: HashMap<(usize, u32), (Vec<u8>, ShardLeaf)>,
    values: HashMap<[u8; 32], Vec<f32>>,
    /// Each result's included signers, against its aggregator's roster.
    lists: HashMap<[u8; 32], IncludedSigners>,
    liars: BTreeSet<usize>,
    withholders: BTreeSet<usize>,
    /// Nodes that publish results but serve no aggregate.
    silent: BTreeSet<usize>,
    /// Nodes that fail each asker's first ask for an aggregate (a
    /// congested link), and serve the next.
    flaky: BTreeSet<usize>,
    /// Sketch audits: (auditor, owner audited, verdict).
    sketches: Vec<(usize, usize, Option<bool>)>,
    /// Sketch actions: (time, auditor, audits in it).
    sketch_sends: Vec<(u64, usize, usize)>,
    /// Aggregate fetches asked: (time, asker, holder).
    asks: Vec<(u64, usize, usize)>,
    /// Per node, per round.
    applied: Vec<Vec<Applied>>,
    /// Per node: the last record of what it signed.
    records: Vec<Option<SignedRecord>>,
    /// Each aggregate's included list.
    included: HashMap<[u8; 32], IncludedList>,
    /// Results signed: (time, signer, result).
    published: Vec<(u64, usize, ShardResult)>,
    /// Nodes that miss every result's gossip.
    deaf: BTreeSet<usize>,
    /// Results pulled: (asker, shard, from).
    pulled: Vec<(usize, u32, Vec<PublicKey>)>,
    /// Nodes that are down: they do nothing and receive nothing.
    down: BTreeSet<usize>,
    /// Nodes that go down as soon as they published a result.
    down_after_publishing: BTreeSet<usize>,
    /// Nodes that answer no pull for their inputs (gone after sending).
    unpulled: BTreeSet<usize>,
    /// Input pulls asked: (asker, shard, from).
    input_pulls: Vec<(usize, u32, Vec<PublicKey>)>,
    /// Every served fetch is reported again, refuted (a driver that reports
    /// a fetch twice).
    stale_reports: bool,
    /// Per node: the results it applied (what it serves to pulls).
    served: Vec<Vec<ShardResult>>,

    inbox: VecDeque<(usize, CommitteeEvent)>,
}

impl Net {
    fn new(n: u8, k: u32) -> Self {
        Self::starting(n, k, true)
    }

    /// `on_roster`: the genesis roster holds every node (else it is empty).
    fn starting(n: u8, k: u32, on_roster: bool) -> Self {
        Self::seating(n, k, if on_roster { n } else { 0 })
    }

    /// The genesis roster holds the first `seated` nodes; the others are
    /// newcomers.
    fn seating(n: u8, k: u32, seated: u8) -> Self {
        let keys: Vec<NodeKey> = (0..n).map(|i| NodeKey::from_seed([i + 1; 32])).collect();
        let roster = keys.iter().take(seated.into()).map(NodeKey::public).collect();
        let ledger = Ledger::genesis(roster);
        let machines = keys
            .iter()
            .map(|key| CommitteeMachine::new(cfg(k), key.clone(), 0, StateId([1; 32]), ledger.clone(), 0))
            .collect();
        Self {
            keys,
            machines,
            now: 0,
            payloads: HashMap::new(),
            values: HashMap::new(),
            lists: HashMap::new(),
            liars: BTreeSet::new(),
            withholders: BTreeSet::new(),
            silent: BTreeSet::new(),
            flaky: BTreeSet::new(),
            asks: Vec::new(),
            sketches: Vec::new(),
            sketch_sends: Vec::new(),
            applied: vec![Vec::new(); n as usize],
            records: vec![None; n as usize],
            included: HashMap::new(),
            published: Vec::new(),
            deaf: BTreeSet::new(),
            pulled: Vec::new(),
            down: BTreeSet::new(),
            down_after_publishing: BTreeSet::new(),
            unpulled: BTreeSet::new(),
            input_pulls: Vec::new(),
            stale_reports: false,
            served: vec![Vec::new(); n as usize],
            inbox: VecDeque::new(),
        }
    }

    fn index(&self, key: &PublicKey) -> usize {
        self.keys.iter().position(|k| k.public() == *key).expect("a known key")
    }

    fn all(&mut self, from: usize, e: CommitteeEvent) {
        let result = matches!(e, CommitteeEvent::ResultReceived(_));
        for j in 0..self.keys.len() {
            if j != from && !(result && self.deaf.contains(&j)) {
                self.inbox.push_back((j, e.clone()));
            }
        }
    }

    fn act(&mut self, i: usize, a: CommitteeAction) {
        match a {
            CommitteeAction::Train { round, plan, .. } => {
                let layout = plan.layout();
                let delta: Vec<f32> = (0..P)
                    .map(|j| ((j as f32 + i as f32 * 7.0 + round as f32) * 0.37).sin() * 0.01)
                    .collect();
                let mut leaves = Vec::new();
                for s in 0..layout.shards() {
                    let payload = encode_delta(cfg(1).codec, &delta[layout.range(s)]).unwrap();
                    let values = decode_delta(&payload, cfg(1).codec, layout.len(s)).unwrap();
                    let leaf = ShardLeaf {
                        shard: s,
                        payload_hash: payload_hash_of(&payload),
                        payload_len: payload.len() as u64,
                        norm: shard_norm(&values),
                    };
                    leaves.push(leaf);
                    self.payloads.insert((i, s), (payload, leaf));
                }
                let norm = leaves.iter().map(|l| f64::from(l.norm).powi(2)).sum::<f64>().sqrt() as f32;
                self.inbox.push_back((
                    i,
                    CommitteeEvent::LocalDeltaReady { tokens: 10, train_loss: 1.0, norm, leaves },
                ));
            }
            CommitteeAction::PublishManifest(m) => self.all(i, CommitteeEvent::ManifestReceived(m)),
            CommitteeAction::SendShard { to, shard, shards, proof, manifest } => {
                let j = self.index(&to);
                let leaf = self.payloads[&(i, shard)].1;
                let signer = self.keys[i].public();
                self.inbox.push_back((j, CommitteeEvent::ManifestReceived(*manifest)));
                self.inbox.push_back((j, CommitteeEvent::ShardReceived { signer, shards, leaf, proof }));
            }
            CommitteeAction::AggregateShard { shard, inputs, leaves } => {
                if self.withholders.contains(&i) {
                    return;
                }
                let n = self.machines[i].plan().layout().len(shard);
                let decoded: Vec<Vec<f32>> = inputs
                    .iter()
                    .map(|m| {
                        let j = self.index(&m.signer);
                        decode_delta(&self.payloads[&(j, shard)].0, cfg(1).codec, n).unwrap()
                    })
                    .collect();
                let ins: Vec<ShardInput<'_>> = inputs
                    .iter()
                    .zip(&leaves)
                    .zip(&decoded)
                    .map(|((m, l), v)| ShardInput::of(m, l, v))
                    .collect();
                let codec = aggregate_codec(cfg(1).codec);
                let mut a = aggregate_shard(&ins, n, cfg(1).rule, codec).unwrap();
                if self.liars.contains(&i) {
                    a.values.iter_mut().for_each(|v| *v += 1.0);
                    a.payload = crate::codec::encode_delta(codec, &a.values).unwrap();
                    a.result_hash = messages::aggregate_hash(&a.payload);
                }
                self.values.insert(a.result_hash, a.values);
                self.included.insert(a.result_hash, a.included.clone());
                let signers = IncludedSigners::of(&a.included, &self.machines[i].ledger().roster);
                self.lists.insert(a.result_hash, signers);
                self.inbox.push_back((
                    i,
                    CommitteeEvent::ShardAggregated {
                        round: self.machines[i].round(),
                        shard,
                        included: a.included,
                        total_tokens: a.total_tokens,
                        result_hash: a.result_hash,
                    },
                ));
            }
            CommitteeAction::PublishResult(r) => {
                self.published.push((self.now, i, r.clone()));
                self.all(i, CommitteeEvent::ResultReceived(r));
                if self.down_after_publishing.contains(&i) {
                    self.down.insert(i);
                    let gone = self.keys[i].public();
                    self.all(i, CommitteeEvent::PeerDisconnected(gone));
                }
            }
            CommitteeAction::PullInputs { shard, from } => {
                self.input_pulls.push((i, shard, from.clone()));
                for k in from {
                    let j = self.index(&k);
                    if self.unpulled.contains(&j) {
                        continue;
                    }
                    let (Some(manifest), Some((_, leaf))) =
                        (self.machines[j].manifest_of(&k).cloned(), self.payloads.get(&(j, shard)).cloned())
                    else {
                        continue;
                    };
                    let leaves: Vec<ShardLeaf> =
                        (0..manifest.shards).map(|s| self.payloads[&(j, s)].1).collect();
                    let proof = MerkleTree::new(&leaves).proof(shard as usize);
                    let shards = manifest.shards;
                    self.inbox.push_back((i, CommitteeEvent::ManifestReceived(manifest)));
                    self.inbox
                        .push_back((i, CommitteeEvent::ShardReceived { signer: k, shards, leaf, proof }));
                }
            }
            CommitteeAction::PullResult { shard, from, held } => {
                self.pulled.push((i, shard, from.clone()));
                let round = self.machines[i].round();
                // A live node answers with the result it applied, else its own.
                let answer = from.iter().filter(|k| !self.down.contains(&self.index(k))).find_map(|k| {
                    let j = self.index(k);
                    let own = self
                        .published
                        .iter()
                        .find(|(_, s, r)| *s == j && r.round == round && r.shard == shard)
                        .map(|(_, _, r)| r);
                    let applied = self.served[j].iter().find(|r| r.round == round && r.shard == shard);
                    applied.or(own).filter(|r| !held.contains(&r.signer)).cloned()
                });
                if let Some(r) = answer {
                    self.inbox.push_back((i, CommitteeEvent::ResultReceived(r)));
                }
            }
            CommitteeAction::FetchAggregate { shard, result_hash, from } => {
                let holder = self.index(&from);
                self.asks.push((self.now, i, holder));
                let first = self.asks.iter().filter(|a| a.1 == i && a.2 == holder).count() == 1;
                let fails = self.silent.contains(&holder) || (first && self.flaky.contains(&holder));
                let outcome = match self.values.contains_key(&result_hash) && !fails {
                    true => FetchOutcome::Served,
                    false => FetchOutcome::Unavailable,
                };
                let included = (shard == 0).then(|| self.lists.get(&result_hash).cloned()).flatten();
                let norm = self.values.get(&result_hash).map_or(0.0, |v| shard_norm(v));
                self.inbox.push_back((
                    i,
                    CommitteeEvent::AggregateFetched { shard, result_hash, outcome, norm, included },
                ));
                if self.stale_reports && outcome == FetchOutcome::Served {
                    let late = FetchOutcome::Refuted;
                    let e = CommitteeEvent::AggregateFetched {
                        shard,
                        result_hash,
                        outcome: late,
                        norm,
                        included: None,
                    };
                    self.inbox.push_back((i, e));
                }
            }
            CommitteeAction::RequestIncluded { result } => {
                let j = self.index(&result.signer);
                if let Some(included) = self.machines[j].our_list(result.shard).cloned() {
                    self.inbox.push_back((i, CommitteeEvent::IncludedReceived { result, included }));
                }
            }
            CommitteeAction::Sketch(audits) => {
                self.sketch_sends.push((self.now, i, audits.len()));
                for SketchAudit { result, included, inputs, seed, .. } in audits {
                    // Every trainer answers honestly; the verdict is the real one.
                    let n = self.machines[i].plan().layout().len(result.shard);
                    let signs = sketch::SketchSigns::new(&seed, n);
                    let projections: Vec<[f64; sketch::PROJECTIONS]> = included
                        .entries
                        .iter()
                        .map(|(signer, _)| {
                            let j = self.index(signer);
                            let x =
                                decode_delta(&self.payloads[&(j, result.shard)].0, cfg(1).codec, n).unwrap();
                            sketch::project(&x, &signs).unwrap()
                        })
                        .collect();
                    let claims: Vec<rule::InputClaim> = inputs.iter().map(rule::InputClaim::of).collect();
                    let matches = self.values.get(&result.result_hash).and_then(|a| {
                        let codec = aggregate_codec(cfg(1).codec);
                        sketch::verdict(a, codec, cfg(1).rule, &seed, &claims, &projections)
                    });
                    self.sketches.push((i, self.index(&result.signer), matches));
                    self.inbox.push_back((i, CommitteeEvent::Sketched { result, included, matches }));
                }
            }
            CommitteeAction::Recheck { result, included, .. } => {
                // The honest recomputation is the harness's honest result
                // for the same included list.
                let matches = !self.liars.contains(&self.index(&result.signer));
                self.inbox.push_back((i, CommitteeEvent::Rechecked { result, included, matches }));
            }
            CommitteeAction::PublishProof(p) => self.all(i, CommitteeEvent::ProofReceived(p)),
            CommitteeAction::Apply { round, base, shards, ledger } => {
                let mut b = base.0.to_vec();
                for s in &shards {
                    b.extend_from_slice(&s.unwrap_or([0; 32]));
                }
                b.extend_from_slice(&ledger.encode());
                let new_state = StateId(*blake3::hash(&b).as_bytes());
                self.applied[i].push((self.now, shards, ledger));
                self.served[i].extend(self.machines[i].chosen_results());
                self.inbox.push_back((i, CommitteeEvent::Applied { round, new_state }));
            }
            CommitteeAction::FetchState { .. } => panic!("node {i} fell behind in a run that never splits"),
            CommitteeAction::Record(r) => self.records[i] = Some(r),
        }
    }

    /// Carry out every action and deliver every message, without moving
    /// the clock.
    fn settle(&mut self) {
        while self.step(u64::MAX) {}
    }

    /// Carry out the pending actions of the live machines still before
    /// `round` (one that reached it waits there: one that ran on would
    /// keep the clock from moving for the rest) and deliver the messages
    /// sent; whether there was any.
    fn step(&mut self, round: u64) -> bool {
        let mut busy = false;
        for i in 0..self.machines.len() {
            if self.machines[i].round() >= round || self.down.contains(&i) {
                continue;
            }
            while let Some(a) = self.machines[i].poll_action() {
                busy = true;
                self.act(i, a);
            }
        }
        while let Some((i, e)) = self.inbox.pop_front() {
            busy = true;
            if !self.down.contains(&i) {
                self.machines[i].handle(self.now, e);
            }
        }
        busy
    }

    /// Node `i` opens round 0 at `at`, after the others (a fresh machine).
    fn open_late(&mut self, i: usize, at: u64) {
        let ledger = self.machines[0].ledger().clone();
        self.machines[i] =
            CommitteeMachine::new(cfg(1), self.keys[i].clone(), 0, StateId([1; 32]), ledger, at);
    }

    /// Let the live nodes send what they send at time 0, then start node 0
    /// again at `at` (a fresh machine that entered round 0 mid-way), and
    /// run everyone to round 1.
    fn restart_node_0_at(&mut self, at: u64) {
        self.settle();
        self.now = at;
        let ledger = Ledger::genesis(self.keys.iter().map(NodeKey::public).collect());
        let mut m = CommitteeMachine::new(cfg(1), self.keys[0].clone(), 0, StateId([1; 32]), ledger, at);
        m.entered_mid_round();
        self.machines[0] = m;
        self.down.remove(&0);
        self.run_to(1, 20_000);
    }

    /// Run until every machine reached `round` (or time `limit`).
    fn run_to(&mut self, round: u64, limit: u64) {
        loop {
            let live = |i: &usize| !self.down.contains(i);
            if (0..self.machines.len()).filter(live).all(|i| self.machines[i].round() >= round) {
                return;
            }
            let busy = self.step(round);
            if busy {
                continue;
            }
            let down = &self.down;
            let next = (0..self.machines.len())
                .filter(|i| !down.contains(i))
                .filter_map(|i| self.machines[i].next_timeout())
                .min();
            match next {
                Some(t) if t <= limit => {
                    self.now = t;
                    for (i, m) in self.machines.iter_mut().enumerate() {
                        if m.next_timeout() == Some(t) && !self.down.contains(&i) {
                            m.handle(t, CommitteeEvent::TimerFired);
                        }
                    }
                }
                _ => panic!(
                    "stuck at {} (rounds {:?})",
                    self.now,
                    self.machines.iter().map(|m| m.round()).collect::<Vec<_>>()
                ),
            }
        }
    }
}

#[test]
fn an_honest_round_applies_the_same_shards_everywhere_before_any_deadline() {
    let mut net = Net::new(12, 4);
    assert_eq!(net.machines[0].plan().shards(), 3);
    net.run_to(1, 10_000);
    let first = &net.applied[0][0];
    for a in &net.applied {
        assert_eq!(a[0].1, first.1, "every node applies the same shards");
        assert!(a[0].1.iter().all(Option::is_some));
        assert!(a[0].0 < 1_000, "every roster member's shard came, so nobody waited for the input deadline");
    }
    assert_eq!(first.2.roster.len(), 12, "everyone stays on the roster");
    // The applied shard is the mean of the decoded shards (equal tokens).
    let values = &net.values[&first.1[0].unwrap()];
    let n = values.len();
    let mean: f64 = (0..12)
        .map(|i| f64::from(decode_delta(&net.payloads[&(i, 0)].0, cfg(1).codec, n).unwrap()[5]))
        .sum::<f64>()
        / 12.0;
    assert!((f64::from(values[5]) - mean).abs() < 1e-6);
}

#[test]
fn a_round_with_no_roster_is_one_committee_of_every_announcer_and_seats_them_all() {
    let mut net = Net::starting(9, 4, false);
    assert_eq!(net.machines[0].plan().shards(), 1);
    assert!(net.machines[0].plan().committee(0).is_empty());
    net.run_to(1, 10_000);
    let (c, first) = (cfg(4), net.applied[0][0].clone());
    for a in &net.applied {
        assert_eq!(a[0].1, first.1, "every node applies the same shard");
        assert_eq!(a[0].2, first.2, "and the same ledger");
    }
    assert!(first.1[0].is_some());
    // With no roster nobody knows who else will come: inputs close a grace
    // period after the last announcement, and the claim is taken once
    // every announcer signed it, before the input deadline.
    assert!(first.0 >= c.grace_ms && first.0 < c.input_ms, "applied at {}", first.0);
    let everyone: Vec<PublicKey> = {
        let mut k: Vec<PublicKey> = net.keys.iter().map(NodeKey::public).collect();
        k.sort();
        k
    };
    assert_eq!(first.2.roster, everyone, "every announcer is seated for the next round");
    assert_eq!(net.values[&first.1[0].unwrap()].len(), P as usize, "one shard is the whole vector");
    // Round 1 runs on committees (9 nodes, k = 4: two shards) and needs no deadline.
    net.run_to(2, 20_000);
    assert_eq!(net.machines[0].plan().shards(), 2);
    let second = &net.applied[0][1];
    assert!(second.0 < first.0 + c.input_ms, "round 1 closed before its input deadline");
    assert!(net.applied.iter().all(|a| a[1].1 == second.1));
}

#[test]
fn a_lying_member_is_proven_at_once_and_excluded_by_the_ledger_after_the_next_round() {
    let mut net = Net::new(12, 4);
    let liar = net.index(&net.machines[0].plan().committee(1)[0]);
    net.liars.insert(liar);
    let liar_key = net.keys[liar].public();
    net.run_to(1, 10_000);
    for (i, m) in net.machines.iter().enumerate() {
        if i != liar {
            assert_eq!(m.proven().get(&liar_key), Some(&0), "node {i} holds the proof");
        }
    }
    let lie = net.applied[0][0].1[1];
    assert!(net.applied.iter().enumerate().filter(|(i, _)| *i != liar).all(|(_, a)| a[0].1[1] == lie));
    assert!(!net.values[&lie.unwrap()].iter().any(|v| *v > 0.5), "the honest claim won");
    assert!(!net.applied[0][0].2.is_excluded(&liar_key), "a proof changes a state only a round later");
    net.run_to(2, 20_000);
    let ledger = &net.applied[0][1].2;
    assert_eq!(ledger.excluded.get(&liar_key), Some(&0));
    assert!(!ledger.roster.contains(&liar_key));
    assert!(net.machines[0].plan().seat_of(&liar_key).is_none(), "round 2 seats no liar");
}

#[test]
fn a_committee_that_withholds_is_replaced_by_its_fallback_committee() {
    let mut net = Net::new(12, 4);
    let quiet: Vec<usize> = net.machines[0].plan().committee(1).iter().map(|k| net.index(k)).collect();
    net.withholders.extend(quiet.iter().copied());
    net.run_to(1, 10_000);
    let (cfg, first) = (cfg(4), &net.applied[0][0]);
    assert!(first.1.iter().all(Option::is_some), "shard 1 was aggregated by the fallback committee");
    let result_deadline = cfg.input_ms + cfg.result_ms;
    assert!(
        first.0 >= result_deadline && first.0 <= result_deadline + 2 * cfg.grace_ms,
        "applied at {}",
        first.0
    );
    for a in &net.applied {
        assert_eq!(a[0].1, first.1);
    }
}

#[test]
fn with_no_result_and_no_fallback_the_shard_is_applied_as_zero_at_the_result_deadline() {
    let mut net = Net::new(4, 8);
    net.withholders.extend(0..4);
    net.run_to(1, 10_000);
    let c = cfg(8);
    for a in &net.applied {
        assert_eq!(a[0].1, vec![None]);
        assert_eq!(a[0].0, c.input_ms + c.result_ms);
    }
}

#[test]
fn a_lone_machine_walks_its_deadlines_in_order() {
    let key = NodeKey::from_seed([1; 32]);
    let others: Vec<PublicKey> = (2..6).map(|i| NodeKey::from_seed([i; 32]).public()).collect();
    let mut roster = others.clone();
    roster.push(key.public());
    let c = cfg(8);
    let mut m = CommitteeMachine::new(c.clone(), key, 0, StateId([1; 32]), Ledger::genesis(roster), 0);
    assert!(matches!(m.poll_action(), Some(CommitteeAction::Train { round: 0, .. })));
    assert_eq!(m.next_timeout(), Some(c.input_ms));
    m.handle(c.input_ms, CommitteeEvent::TimerFired);
    assert_eq!(m.poll_action(), None, "nothing to aggregate");
    assert_eq!(m.next_timeout(), Some(c.input_ms + c.result_ms));
    m.handle(c.input_ms + c.result_ms, CommitteeEvent::TimerFired);
    match m.poll_action() {
        Some(CommitteeAction::Apply { round: 0, shards, .. }) => assert_eq!(shards, vec![None]),
        a => panic!("expected the round applied as zero, got {a:?}"),
    }
    assert_eq!(m.next_timeout(), None, "no timer while the outer step runs");
}

fn manifest(key: &NodeKey, root: u8) -> ShardedManifest {
    ShardedManifest {
        run: RunId([7; 32]),
        round: 0,
        base: StateId([1; 32]),
        signer: key.public(),
        tokens: 10,
        train_loss: 1.0,
        codec: Codec::Int8Block { block: 256 },
        element_count: P,
        shards: 1,
        norm: 1.0,
        root: [root; 32],
        signature: Signature([0; 64]),
    }
    .sign(key)
}

#[test]
fn a_node_takes_inputs_only_for_the_shard_it_aggregates_until_it_has() {
    let keys: Vec<NodeKey> = (1..=3).map(|i| NodeKey::from_seed([i; 32])).collect();
    let ledger = Ledger::genesis(keys.iter().map(NodeKey::public).collect());
    let me = keys[0].clone();
    let mut m = CommitteeMachine::new(cfg(1), me.clone(), 0, StateId([1; 32]), ledger, 0);
    while m.poll_action().is_some() {}
    let seat = m.plan().seat_of(&me.public()).expect("a seat");
    assert!(m.takes_inputs(seat));
    let others: Vec<u32> = (0..m.plan().shards()).filter(|s| *s != seat).collect();
    assert!(!others.is_empty());
    assert!(others.iter().all(|s| !m.takes_inputs(*s)), "no duty, no inputs");
    // Past the input deadline the shard is aggregated: later inputs are
    // not taken.
    m.handle(1_000, CommitteeEvent::TimerFired);
    assert!(!m.takes_inputs(seat));
}

#[test]
fn a_proof_against_a_key_off_the_roster_is_dropped_and_one_recorded_is_let_go() {
    let (me, other, stranger) =
        (NodeKey::from_seed([1; 32]), NodeKey::from_seed([2; 32]), NodeKey::from_seed([3; 32]));
    let ledger = Ledger::genesis(vec![me.public(), other.public()]);
    let mut m = CommitteeMachine::new(cfg(8), me, 0, StateId([1; 32]), ledger.clone(), 0);
    while m.poll_action().is_some() {}
    let proof_against = |key: &NodeKey| {
        Box::new(FraudProof::TwoManifests { a: manifest(key, 1), b: manifest(key, 2) }.canonical())
    };
    // Two manifests signed by a key nobody admitted: a valid proof, but
    // of nothing a round of this roster counts.
    let fake = proof_against(&stranger);
    assert_eq!(fake.check(), Ok(()));
    m.handle(1, CommitteeEvent::ProofReceived(fake));
    assert!(m.proven().is_empty(), "a key off the roster is never proven");
    assert_eq!(m.poll_action(), None);
    m.handle(2, CommitteeEvent::ProofReceived(proof_against(&other)));
    assert_eq!(m.proven().get(&other.public()), Some(&0));
    assert!(matches!(m.poll_action(), Some(CommitteeAction::PublishProof(_))), "passed on");
    // Once a ledger records the key, the proof is let go, and the same
    // proof again is nothing.
    let mut recorded = ledger.next(None, m.proven());
    assert!(recorded.is_excluded(&other.public()));
    recorded.roster.retain(|k| *k != other.public());
    m.handle(3, CommitteeEvent::CaughtUp { round: 1, state: StateId([2; 32]), ledger: recorded });
    assert!(m.proven().is_empty());
    while m.poll_action().is_some() {}
    m.handle(4, CommitteeEvent::ProofReceived(proof_against(&other)));
    assert!(m.proven().is_empty());
    assert!(!std::iter::from_fn(|| m.poll_action()).any(|a| matches!(a, CommitteeAction::PublishProof(_))));
}

#[test]
fn a_made_up_wrong_result_proof_does_not_shield_its_signer_from_a_real_one() {
    let keys: Vec<NodeKey> = (0..3u8).map(|i| NodeKey::from_seed([i + 1; 32])).collect();
    let ledger = Ledger::genesis(keys.iter().map(NodeKey::public).collect());
    let base = StateId([1; 32]);
    let mut m = CommitteeMachine::new(cfg(1), keys[0].clone(), 0, base, ledger, 0);
    while m.poll_action().is_some() {}
    let liar = &keys[1];
    let seat = m.plan().seat_of(&liar.public()).expect("a seat");
    let included = IncludedList { entries: vec![(keys[2].public(), [4; 32])] };
    let signed = |shard: u32, hash: u8| {
        let mut r = result_of(liar, 0, base);
        (r.shard, r.result_hash, r.included_root, r.included_count) = (shard, [hash; 32], included.root(), 1);
        r.sign(liar)
    };
    let proof = |r: ShardResult| Box::new(FraudProof::WrongResult { result: r, included: included.clone() });
    let rechecks = |m: &mut CommitteeMachine| {
        std::iter::from_fn(|| m.poll_action())
            .filter_map(|a| match a {
                CommitteeAction::Recheck { result, .. } => Some(result.shard),
                _ => None,
            })
            .collect::<Vec<u32>>()
    };
    // The liar accuses itself of a result for a shard the round has not.
    m.handle(1, CommitteeEvent::ProofReceived(proof(signed(99, 5))));
    assert_eq!(rechecks(&mut m), Vec::<u32>::new(), "no such shard, nothing to re-check");
    // A proof against the result it signed for its seat is re-checked.
    m.handle(3, CommitteeEvent::ProofReceived(proof(signed(seat, 6))));
    assert_eq!(rechecks(&mut m), vec![seat]);
    // Another result for its seat is a second word: proven at once.
    m.handle(4, CommitteeEvent::ProofReceived(proof(signed(seat, 7))));
    assert!(m.proven().contains_key(&liar.public()));
}

#[test]
fn two_manifests_from_one_key_are_a_proof_and_a_proof_is_believed_once() {
    let (me, other) = (NodeKey::from_seed([1; 32]), NodeKey::from_seed([2; 32]));
    let ledger = Ledger::genesis(vec![me.public(), other.public()]);
    let mut m = CommitteeMachine::new(cfg(8), me, 0, StateId([1; 32]), ledger, 0);
    while m.poll_action().is_some() {}
    m.handle(1, CommitteeEvent::ManifestReceived(manifest(&other, 1)));
    m.handle(2, CommitteeEvent::ManifestReceived(manifest(&other, 2)));
    match m.poll_action() {
        Some(CommitteeAction::PublishProof(p)) => {
            assert!(matches!(*p, FraudProof::TwoManifests { .. }));
            assert_eq!(p.check(), Ok(()));
        }
        a => panic!("expected a proof, got {a:?}"),
    }
    assert_eq!(m.proven().get(&other.public()), Some(&0));
    m.handle(3, CommitteeEvent::ManifestReceived(manifest(&other, 3)));
    assert_eq!(m.poll_action(), None, "one proof per key");
}

#[test]
fn results_from_outside_the_committee_and_bad_signatures_do_not_count() {
    let mut net = Net::new(12, 4);
    let plan = net.machines[0].plan().clone();
    let outsider = net.index(&plan.committee(2)[0]);
    let forged = ShardResult {
        run: RunId([7; 32]),
        round: 0,
        base: StateId([1; 32]),
        shard: 0,
        included_count: 1,
        included_root: [0; 32],
        total_tokens: 10,
        result_hash: [9; 32],
        signer: net.keys[outsider].public(),
        signature: Signature([0; 64]),
    }
    .sign(&net.keys[outsider]);
    let mut bad_sig = forged.clone();
    bad_sig.signer = plan.committee(0)[0];
    for i in 0..12 {
        net.inbox.push_back((i, CommitteeEvent::ResultReceived(forged.clone())));
        net.inbox.push_back((i, CommitteeEvent::ResultReceived(bad_sig.clone())));
    }
    net.run_to(1, 10_000);
    assert!(net.applied.iter().all(|a| a[0].1[0] != Some([9; 32])));
}

#[test]
fn a_proof_against_an_honest_result_does_not_hold_and_excludes_nobody() {
    let mut net = Net::new(12, 4);
    net.run_to(0, 0);
    // Let round 0's results come in, then accuse an honest member.
    let mut steps = 0;
    while net.machines[0].our_list(net.machines[0].plan().seat_of(&net.keys[0].public()).unwrap()).is_none() {
        let a = net.machines[0].poll_action();
        match a {
            Some(a) => net.act(0, a),
            None => {
                let Some((i, e)) = net.inbox.pop_front() else { break };
                net.machines[i].handle(0, e);
                for j in 0..12 {
                    while let Some(a) = net.machines[j].poll_action() {
                        net.act(j, a);
                    }
                }
            }
        }
        steps += 1;
        assert!(steps < 100_000);
    }
    let s = net.machines[0].plan().seat_of(&net.keys[0].public()).unwrap();
    let included = net.machines[0].our_list(s).cloned().unwrap();
    while let Some(a) = net.machines[0].poll_action() {
        net.act(0, a);
    }
    let honest = net.published.iter().find(|(_, i, r)| *i == 0 && r.shard == s).map(|p| p.2.clone());
    let proof =
        FraudProof::WrongResult { result: honest.expect("node 0 signed its seat's result"), included };
    for i in 1..12 {
        net.inbox.push_back((i, CommitteeEvent::ProofReceived(Box::new(proof.clone()))));
    }
    net.run_to(1, 10_000);
    assert!(net.machines.iter().all(|m| m.proven().is_empty()), "the recomputation matched: no exclusion");
}

#[test]
fn a_lying_majority_of_a_committee_loses_to_its_one_honest_member() {
    let mut net = Net::new(12, 4);
    let committee: Vec<usize> = net.machines[0].plan().committee(2).iter().map(|k| net.index(k)).collect();
    assert_eq!(committee.len(), 4);
    net.liars.extend(committee[..3].iter().copied());
    net.run_to(1, 10_000);
    for (i, a) in net.applied.iter().enumerate() {
        let chosen = a[0].1[2].expect("shard 2 applied");
        assert!(!net.values[&chosen].iter().any(|v| *v > 0.5), "node {i} applied the honest values");
    }
    let bystander = (0..12).find(|i| !committee.contains(i)).unwrap();
    for &liar in &committee[..3] {
        let key = net.keys[liar].public();
        assert!(
            net.machines[committee[3]].proven().contains_key(&key),
            "every signer of the wrong claim is accused"
        );
        assert!(net.machines[bystander].proven().contains_key(&key));
    }
}

#[test]
fn a_backup_committee_decides_by_its_members_not_by_the_first_result_that_came() {
    let mut net = Net::new(12, 4);
    let plan = net.machines[0].plan().clone();
    let members = |s: u32| -> Vec<usize> { plan.committee(s).iter().map(|k| net.index(k)).collect() };
    let (owners, backup) = (members(1), members(plan.fallback(1, 1).expect("a backup")));
    // Shard 1's committee withholds, and so does one member of its backup,
    // which instead signs a made-up result for shard 1 before the round
    // handed the shard to its committee.
    let liar = backup[0];
    net.withholders.extend(owners.iter().copied());
    net.withholders.insert(liar);
    let mut bogus = result_of(&net.keys[liar], 0, StateId([1; 32]));
    (bogus.shard, bogus.result_hash) = (1, [5; 32]);
    let bogus = bogus.sign(&net.keys[liar]);
    for i in 0..12 {
        net.inbox.push_back((i, CommitteeEvent::ResultReceived(bogus.clone())));
    }
    net.run_to(1, 10_000);
    for (i, a) in net.applied.iter().enumerate() {
        let chosen = a[0].1[1].expect("shard 1 applied");
        assert_ne!(chosen, [5; 32], "node {i} took the backup's claim, not the first result");
        assert!(net
            .published
            .iter()
            .any(|(_, j, r)| backup.contains(j) && r.shard == 1 && r.result_hash == chosen));
    }
}

#[test]
fn an_aggregate_fetch_that_fails_is_retried_at_the_next_holder_after_a_back_off() {
    let mut net = Net::new(12, 4);
    let committee: Vec<usize> = net.machines[0].plan().committee(1).iter().map(|k| net.index(k)).collect();
    net.silent.extend(committee[..3].iter().copied());
    net.run_to(1, 10_000);
    for a in &net.applied {
        assert!(a[0].1[1].is_some(), "shard 1 fetched from its one serving member");
    }
    // A node that asked a silent holder first asked again later, at another.
    let asks_of = |i: usize| net.asks.iter().filter(|a| a.1 == i && committee.contains(&a.2)).count();
    let asker = (0..12).filter(|i| !committee.contains(i)).max_by_key(|&i| asks_of(i)).unwrap();
    assert!(asks_of(asker) >= 2, "some node met a silent holder first");
    let asks: Vec<(u64, usize)> =
        net.asks.iter().filter(|a| a.1 == asker && committee.contains(&a.2)).map(|a| (a.0, a.2)).collect();
    assert!(asks.len() <= 4, "each holder at most once: {asks:?}");
    assert_eq!(asks.last().map(|a| a.1), Some(committee[3]), "it ends at the holder that serves");
    for w in asks.windows(2) {
        assert!(w[1].0 >= w[0].0 + FETCH_RETRY_FIRST_MS, "back-off between asks: {asks:?}");
        assert_ne!(w[0].1, w[1].1);
    }
    assert_eq!(fetch_backoff(1), 200);
    assert_eq!(fetch_backoff(3), 800);
    assert_eq!(fetch_backoff(30), FETCH_RETRY_MAX_MS);
}

#[test]
fn a_lone_owner_that_fails_an_ask_is_asked_again_before_its_claim_is_given_up() {
    // One owner per shard (three shards of `P`): the first ask of each
    // node for shard 1 fails.
    let mut net = Net::new(3, 1);
    assert_eq!(net.machines[0].plan().committee(1).len(), 1);
    let owner = net.index(&net.machines[0].plan().committee(1)[0]);
    net.flaky.insert(owner);
    net.run_to(1, 10_000);
    let signed = net.published.iter().find(|p| p.1 == owner && p.2.shard == 1).map(|p| p.2.result_hash);
    assert!(signed.is_some(), "the owner signed shard 1");
    for (i, a) in net.applied.iter().enumerate() {
        assert_eq!(a[0].1[1], signed, "node {i} applied the owner's result");
    }
    for i in (0..3).filter(|&i| i != owner) {
        let asks: Vec<u64> = net.asks.iter().filter(|a| a.1 == i && a.2 == owner).map(|a| a.0).collect();
        assert_eq!(asks.len(), 2, "node {i} asked the owner once more: {asks:?}");
        assert!(asks[1] >= asks[0] + FETCH_RETRY_MAX_MS, "a pass's back-off: {asks:?}");
    }
    let backups = net.published.iter().filter(|p| p.2.shard == 1 && p.1 != owner).count();
    assert_eq!(backups, 0, "no backup took the shard");
}

#[test]
fn a_flood_of_newcomer_manifests_is_bounded() {
    let me = NodeKey::from_seed([1; 32]);
    let ledger = Ledger::genesis(vec![me.public()]);
    let mut m = CommitteeMachine::new(cfg(8), me, 0, StateId([1; 32]), ledger, 0);
    while m.poll_action().is_some() {}
    let mut seed = [0u8; 32];
    for i in 0..(MAX_NEWCOMERS as u32 + 50) {
        seed[..4].copy_from_slice(&i.to_le_bytes());
        seed[4] = 0xee;
        m.handle(1, CommitteeEvent::ManifestReceived(manifest(&NodeKey::from_seed(seed), 1)));
    }
    let held = (0..(MAX_NEWCOMERS as u32 + 50))
        .filter(|i| {
            seed[..4].copy_from_slice(&i.to_le_bytes());
            m.manifest_of(&NodeKey::from_seed(seed).public()).is_some()
        })
        .count();
    assert_eq!(held, MAX_NEWCOMERS + 1, "the roster's one slot plus the newcomer bound");
}

#[test]
fn a_shard_that_could_not_be_delivered_is_sent_again_after_a_back_off_a_bounded_number_of_times() {
    let keys: Vec<NodeKey> = (1..=2).map(|i| NodeKey::from_seed([i; 32])).collect();
    let ledger = Ledger::genesis(keys.iter().map(NodeKey::public).collect());
    let mut m = CommitteeMachine::new(cfg(2), keys[0].clone(), 0, StateId([1; 32]), ledger, 0);
    while m.poll_action().is_some() {}
    let values = vec![0.01f32; P as usize];
    let payload = encode_delta(cfg(1).codec, &values).unwrap();
    let leaf = ShardLeaf {
        shard: 0,
        payload_hash: payload_hash_of(&payload),
        payload_len: payload.len() as u64,
        norm: shard_norm(&decode_delta(&payload, cfg(1).codec, P as usize).unwrap()),
    };
    m.handle(
        10,
        CommitteeEvent::LocalDeltaReady { tokens: 5, train_loss: 1.0, norm: leaf.norm, leaves: vec![leaf] },
    );
    let other = keys[1].public();
    let sends = |m: &mut CommitteeMachine| {
        std::iter::from_fn(|| m.poll_action())
            .filter(|a| matches!(a, CommitteeAction::SendShard { to, shard: 0, .. } if *to == other))
            .count()
    };
    assert_eq!(sends(&mut m), 1);
    // A report for a key that is no target, or a shard that does not
    // exist, schedules nothing.
    let stranger = NodeKey::from_seed([9; 32]).public();
    m.handle(10, CommitteeEvent::ShardUndelivered { to: stranger, shard: 0 });
    m.handle(10, CommitteeEvent::ShardUndelivered { to: other, shard: 7 });
    assert_eq!(m.next_timeout(), Some(cfg(2).input_ms), "only the input deadline is pending");
    let mut now = 10;
    for tries in 1..MAX_SEND_TRIES {
        m.handle(now, CommitteeEvent::ShardUndelivered { to: other, shard: 0 });
        assert_eq!(sends(&mut m), 0, "not at once");
        let at = now + fetch_backoff(tries as usize);
        assert!(m.next_timeout().is_some_and(|t| t <= at), "a timer by the retry (or a deadline before it)");
        m.handle(at, CommitteeEvent::TimerFired);
        assert_eq!(sends(&mut m), 1, "sent again after {} ms", at - now);
        now = at;
    }
    // The last failure is the last attempt.
    m.handle(now, CommitteeEvent::ShardUndelivered { to: other, shard: 0 });
    assert_ne!(m.next_timeout(), Some(now + fetch_backoff(MAX_SEND_TRIES as usize)));
    m.handle(now + 10_000, CommitteeEvent::TimerFired);
    assert_eq!(sends(&mut m), 0);
}

/// The owners of shards 0, 1 and 2 of a three-node net with one owner per
/// shard (each shard's backups are the next shards' owners).
fn owners_of_three(net: &Net) -> [usize; 3] {
    let plan = net.machines[0].plan();
    assert_eq!(plan.shards(), 3);
    [0, 1, 2].map(|s| net.index(&plan.committee(s)[0]))
}

#[test]
fn with_one_owner_per_shard_withholding_owners_pass_the_shard_down_their_backups() {
    let mut net = Net::new(3, 1);
    // Shard 0's owner and its first backup (shard 1's owner) withhold: the
    // second backup (shard 2's owner) ends up aggregating every shard.
    let [o0, o1, _] = owners_of_three(&net);
    net.withholders.extend([o0, o1]);
    net.run_to(1, 20_000);
    let c = cfg(1);
    let first = &net.applied[0][0];
    assert!(first.1.iter().all(Option::is_some), "every shard was aggregated by a backup");
    let result_deadline = c.input_ms + c.result_ms;
    assert!(first.0 >= result_deadline + 2 * c.grace_ms, "shard 0 waited for its second backup: {}", first.0);
    assert!(first.0 <= result_deadline + 4 * c.grace_ms, "applied at {}", first.0);
    for a in &net.applied {
        assert_eq!(a[0].1, first.1);
    }
}

#[test]
fn a_node_that_hands_a_shard_to_its_backup_after_the_backup_signed_takes_that_result() {
    let mut net = Net::new(3, 1);
    // Shard 0's owner withholds; its first backup is shard 1's owner, its
    // second shard 2's. That one, `slow`, opened the round two grace
    // periods after the others: they hand shard 0 to the first backup,
    // which signs its result, before `slow`'s own result deadline passes.
    let [withholder, backup, slow] = owners_of_three(&net);
    net.withholders.insert(withholder);
    let c = cfg(1);
    net.open_late(slow, 2 * c.grace_ms);
    net.run_to(1, 20_000);
    let slow_deadline = 2 * c.grace_ms + c.input_ms + c.result_ms;
    let signed = net.published.iter().find(|(_, i, r)| *i == backup && r.shard == 0);
    let (at, backup_result) = signed.map(|(t, _, r)| (*t, r.result_hash)).expect("the first backup signed");
    assert!(at < slow_deadline, "the first backup signed at {at}, before the slow node's deadline");
    let first = &net.applied[withholder][0];
    assert_eq!(first.1[0], Some(backup_result), "the first backup's result is applied");
    for (i, a) in net.applied.iter().enumerate() {
        assert_eq!(a[0].1, first.1, "node {i} applied other shards");
    }
}

#[test]
fn the_audit_draw_comes_from_the_nodes_own_signature() {
    let (run, base) = (RunId([7; 32]), StateId([1; 32]));
    let key = NodeKey::from_seed([9; 32]);
    let a = audit_draw(&key, run, 4, base, 100, 3);
    assert_eq!(a.len(), 3, "distinct shards");
    assert!(a.iter().all(|s| *s < 100));
    assert_eq!(a, audit_draw(&key, run, 4, base, 100, 3), "the same key draws the same shards");
    assert_eq!(audit_draw(&key, run, 4, base, 2, 3).len(), 2, "never more than there are shards");
    // Other keys, rounds and bases draw other shards.
    let draws: BTreeSet<Vec<u32>> = (0..32u8)
        .map(|i| audit_draw(&NodeKey::from_seed([i; 32]), run, 4, base, 100, 3).into_iter().collect())
        .collect();
    assert!(draws.len() > 24, "{} distinct draws of 32", draws.len());
    assert_ne!(a, audit_draw(&key, run, 5, base, 100, 3));
    assert_ne!(a, audit_draw(&key, run, 4, StateId([2; 32]), 100, 3));
}

#[test]
fn sketch_audits_pass_honest_owners_and_send_a_lying_owner_to_a_recheck() {
    let mut net = Net::new(12, 1);
    let liar = net.index(&net.machines[0].plan().committee(1)[0]);
    net.liars.insert(liar);
    let liar_key = net.keys[liar].public();
    net.run_to(1, 10_000);
    assert!(net.sketches.len() >= 12, "every node audits: {:?}", net.sketches);
    for &(auditor, owner, verdict) in &net.sketches {
        let expected = Some(owner != liar);
        assert_eq!(verdict, expected, "node {auditor} on node {owner}'s result");
    }
    assert!(net.sketches.iter().any(|s| s.1 == liar), "someone audited the liar's result");
    for (i, m) in net.machines.iter().enumerate() {
        if i != liar {
            assert_eq!(m.proven().get(&liar_key), Some(&0), "node {i} holds the proof");
        }
    }
}

#[test]
fn an_aggregate_far_above_the_rounds_others_is_audited_before_any_honest_node_applies_it() {
    // Three shards of 1,024, one owner each.
    let mut net = Net::new(3, 1);
    assert_eq!(net.machines[0].plan().committee(1).len(), 1);
    let liar = net.index(&net.machines[0].plan().committee(1)[0]);
    net.liars.insert(liar);
    let liar_key = net.keys[liar].public();
    net.run_to(1, 20_000);
    let honest: Vec<usize> = (0..3).filter(|i| *i != liar).collect();
    let first = net.applied[honest[0]][0].1.clone();
    for &i in &honest {
        assert_eq!(net.applied[i][0].1, first, "node {i} applies what the others do");
        assert_eq!(net.machines[i].proven().get(&liar_key), Some(&0), "node {i} holds the proof");
    }
    // Shard 1 went to its backup, whose aggregate is the honest one.
    let applied = first[1].expect("the backup's aggregate");
    assert!(net.values[&applied].iter().all(|v| v.abs() < 0.5), "no honest node applied the lie");
    // Without the gate the lie would have gone in before the audit proved
    // it: the honest nodes applied only after the result deadline, when
    // the backup took the shard.
    let c = cfg(1);
    assert!(
        net.applied[honest[0]][0].0 >= c.input_ms + c.result_ms,
        "applied at {}",
        net.applied[honest[0]][0].0
    );
}

#[test]
fn a_rounds_sketches_go_out_together_and_wait_for_a_withheld_shard_a_bounded_time() {
    // Every owner answers: each auditor sends its sketches as one action
    // holding every shard it drew.
    let mut net = Net::new(12, 1);
    net.run_to(1, 10_000);
    let mut auditors = BTreeSet::new();
    for &(_, i, n) in &net.sketch_sends {
        assert!(
            auditors.insert(i),
            "node {i} sent its sketches in more than one action: {:?}",
            net.sketch_sends
        );
        let drawn = net.sketches.iter().filter(|s| s.0 == i).count();
        assert_eq!(n, drawn, "node {i}'s one action holds all its audits");
    }
    assert!(auditors.len() >= 10, "most nodes audit: {:?}", net.sketch_sends);
    assert!(net.sketch_sends.iter().any(|s| s.2 >= 2), "audits share an action: {:?}", net.sketch_sends);
    // A withheld shard gets no result until a backup takes it over:
    // whoever drew it sends its other sketches `SKETCH_WAIT_MS` after they
    // were ready (here at once), the rest before that.
    let mut net = Net::new(12, 1);
    let withheld = 1;
    let owners: Vec<usize> =
        net.machines[0].plan().committee(withheld).iter().map(|k| net.index(k)).collect();
    net.withholders.extend(owners.iter().copied());
    let shards = net.machines[0].plan().shards();
    net.run_to(1, 20_000);
    let waited = SKETCH_WAIT_MS;
    assert!(waited < cfg(1).input_ms + cfg(1).result_ms, "the wait ends before the result deadline");
    let mut first: BTreeMap<usize, u64> = BTreeMap::new();
    for &(at, i, _) in &net.sketch_sends {
        first.entry(i).or_insert(at);
    }
    for (i, at) in first {
        let drawn = audit_draw(&net.keys[i], cfg(1).run, 0, StateId([1; 32]), shards, cfg(1).audits);
        if drawn.contains(&withheld) && !owners.contains(&i) {
            assert_eq!(at, waited, "node {i} drew the withheld shard and sent at {at}");
        } else {
            assert!(at < waited, "node {i} did not draw it and sent at {at}");
        }
    }
    assert!(
        net.sketch_sends.iter().any(|s| s.0 == waited),
        "someone drew the withheld shard: {:?}",
        net.sketch_sends
    );
}

fn fetches(m: &mut CommitteeMachine) -> Vec<(u64, StateId, Vec<PublicKey>)> {
    let mut out = Vec::new();
    while let Some(a) = m.poll_action() {
        if let CommitteeAction::FetchState { round, state, holders } = a {
            out.push((round, state, holders));
        }
    }
    out
}

/// `key`'s signed result for `round` of shard 0, trained from `base`.
fn result_of(key: &NodeKey, round: u64, base: StateId) -> ShardResult {
    ShardResult {
        run: cfg(1).run,
        round,
        base,
        shard: 0,
        included_count: 1,
        included_root: [0; 32],
        total_tokens: 10,
        result_hash: [9; 32],
        signer: key.public(),
        signature: Signature([0; 64]),
    }
    .sign(key)
}

#[test]
fn a_node_fetches_the_state_a_majority_of_its_roster_trained_from_and_no_minority_moves_it() {
    let keys: Vec<NodeKey> = (0..5u8).map(|i| NodeKey::from_seed([i + 1; 32])).collect();
    let roster = keys.iter().map(NodeKey::public).collect();
    // Node 0 ended round 0 on state 2 and is in round 1.
    let (ours, theirs) = (StateId([2; 32]), StateId([3; 32]));
    let mut m = CommitteeMachine::new(cfg(1), keys[0].clone(), 1, ours, Ledger::genesis(roster), 0);
    fetches(&mut m);
    // Forty keys off the roster, and two of five on it, sign round-1
    // results trained from another state (and off-roster keys far-future
    // ones): nothing moves.
    for s in 100..140u8 {
        let outsider = NodeKey::from_seed([s; 32]);
        m.handle(1, CommitteeEvent::ResultReceived(result_of(&outsider, 1, theirs)));
        m.handle(1, CommitteeEvent::ResultReceived(result_of(&outsider, 9, theirs)));
    }
    for k in &keys[1..3] {
        m.handle(2, CommitteeEvent::ResultReceived(result_of(k, 1, theirs)));
    }
    // A forged signature does not count.
    let mut forged = result_of(&keys[3], 1, theirs);
    forged.signature = Signature([9; 64]);
    m.handle(3, CommitteeEvent::ResultReceived(forged));
    assert!(fetches(&mut m).is_empty(), "a minority of the roster moves nobody");
    // The third of five is a majority: they ended round 0 on `theirs`.
    m.handle(4, CommitteeEvent::ResultReceived(result_of(&keys[3], 1, theirs)));
    let mut holders: Vec<PublicKey> = keys[1..4].iter().map(NodeKey::public).collect();
    holders.sort();
    // It asks them in key order from an index its own key gives, so
    // askers spread over the holders.
    let me = keys[0].public().0;
    holders.rotate_left((u64::from_le_bytes(me[..8].try_into().unwrap()) % 3) as usize);
    assert_eq!(fetches(&mut m), vec![(0, theirs, holders)]);
    // One fetch at a time; after a failed one, it asks again when its
    // back-off is up (not at once: no spin on holders that do not serve).
    m.handle(5, CommitteeEvent::ResultReceived(result_of(&keys[4], 1, theirs)));
    assert!(fetches(&mut m).is_empty(), "one fetch at a time");
    m.handle(6, CommitteeEvent::CatchUpFailed);
    assert!(fetches(&mut m).is_empty(), "not asked again within the back-off");
    let retry = 6 + fetch_backoff(1);
    let mut asked = Vec::new();
    while asked.is_empty() {
        let t = m.next_timeout().expect("a timer for the retry");
        assert!(t <= retry, "no timer fired by the end of the back-off (next at {t})");
        m.handle(t, CommitteeEvent::TimerFired);
        asked = fetches(&mut m);
        assert!(asked.is_empty() || t == retry, "asked again at {t}, before the back-off ended at {retry}");
    }
    assert_eq!(asked.len(), 1, "asks again after a failed fetch");
    // A stale state does not move it; the fetched one does.
    let ledger = m.ledger().clone();
    m.handle(7, CommitteeEvent::CaughtUp { round: 0, state: StateId([4; 32]), ledger: ledger.clone() });
    assert_eq!((m.round(), m.base()), (1, ours));
    m.handle(7, CommitteeEvent::CatchUpFailed);
    fetches(&mut m);
    m.handle(8, CommitteeEvent::CaughtUp { round: 1, state: theirs, ledger });
    assert_eq!((m.round(), m.base()), (1, theirs));
    assert!(fetches(&mut m).is_empty(), "on the majority's state there is nothing to fetch");
}

#[test]
fn in_a_run_with_operators_only_their_results_move_a_node() {
    // Roster 1..=5; key 9 is the run's only operator and off the roster.
    let keys: Vec<NodeKey> = (0..5u8).map(|i| NodeKey::from_seed([i + 1; 32])).collect();
    let operator = NodeKey::from_seed([9; 32]);
    let roster = keys.iter().map(NodeKey::public).collect();
    let (ours, theirs, operators) = (StateId([2; 32]), StateId([3; 32]), StateId([4; 32]));
    let with_operators = CommitteeConfig { operators: vec![operator.public()], ..cfg(1) };
    let mut m = CommitteeMachine::new(with_operators, keys[0].clone(), 1, ours, Ledger::genesis(roster), 0);
    fetches(&mut m);
    // Every other roster member names another state: they do not decide.
    for (t, k) in keys[1..].iter().enumerate() {
        m.handle(1 + t as u64, CommitteeEvent::ResultReceived(result_of(k, 1, theirs)));
    }
    assert!(fetches(&mut m).is_empty(), "a roster without the operators moves nobody");
    // The operator's word does, though it holds no seat.
    m.handle(9, CommitteeEvent::ResultReceived(result_of(&operator, 1, operators)));
    assert_eq!(fetches(&mut m), vec![(0, operators, vec![operator.public()])]);
}

#[test]
fn an_aggregation_that_comes_back_after_its_round_closed_signs_nothing() {
    // A backup's aggregation asked at the end of round 0 may come back
    // once round 1 opened: signed then, it would be a round-1 result from
    // round-0 inputs, and with the node's real round-1 result a proof of
    // two results against an honest key.
    let keys: Vec<NodeKey> = (0..3u8).map(|i| NodeKey::from_seed([i + 1; 32])).collect();
    let roster = keys.iter().map(NodeKey::public).collect();
    let mut m =
        CommitteeMachine::new(cfg(1), keys[0].clone(), 1, StateId([2; 32]), Ledger::genesis(roster), 0);
    let seat = m.plan().seat_of(&keys[0].public()).expect("a seat");
    let published = |m: &mut CommitteeMachine| {
        std::iter::from_fn(|| m.poll_action())
            .filter(|a| matches!(a, CommitteeAction::PublishResult(_)))
            .count()
    };
    published(&mut m);
    let aggregated = |round| CommitteeEvent::ShardAggregated {
        round,
        shard: seat,
        included: IncludedList::new(vec![(keys[1].public(), [5; 32])]),
        total_tokens: 10,
        result_hash: [1; 32],
    };
    m.handle(1, aggregated(0));
    assert_eq!(published(&mut m), 0, "round 0's aggregation signs nothing in round 1");
    m.handle(2, aggregated(1));
    assert_eq!(published(&mut m), 1);
}

#[test]
fn a_node_restarted_in_a_round_it_signed_in_signs_no_second_manifest_or_result() {
    let mut net = Net::new(4, 1);
    net.run_to(1, 10_000);
    let record = net.records[0].clone().expect("node 0 recorded what it signed");
    let (me, ledger) =
        (net.keys[0].public(), Ledger::genesis(net.keys.iter().map(NodeKey::public).collect()));
    assert_eq!(record.round, 0);
    assert_eq!(record.manifest.as_ref().map(|m| m.signer), Some(me));
    assert_eq!(record.results.len(), 1, "its own shard's result: {record:?}");
    let ours = record.results[0].clone();
    assert_eq!(SignedRecord::decode(&record.encode()).expect("decodes"), record);
    // The process restarts before round 0's state was stored: round 0 again,
    // with the record it had stored.
    let mut m = CommitteeMachine::new(cfg(1), net.keys[0].clone(), 0, StateId([1; 32]), ledger, 0);
    m.restore_signed(record.clone());
    assert_eq!(Some(ours.shard), m.plan().seat_of(&me), "the shard it owns");
    let mut actions = Vec::new();
    while let Some(a) = m.poll_action() {
        actions.push(a);
    }
    assert!(actions.iter().any(|a| matches!(a, CommitteeAction::Train { .. })), "{actions:?}");
    // It trained again: a different delta, which it does not sign.
    let mut leaves = record_leaves(&net, 0);
    leaves[0].norm += 1.0;
    m.handle(10, CommitteeEvent::LocalDeltaReady { tokens: 11, train_loss: 1.0, norm: 2.0, leaves });
    let sent: Vec<CommitteeAction> = std::iter::from_fn(|| m.poll_action()).collect();
    assert!(
        !sent.iter().any(|a| matches!(
            a,
            CommitteeAction::SendShard { .. }
                | CommitteeAction::PublishManifest(_)
                | CommitteeAction::Record(_)
        )),
        "a second manifest was signed: {sent:?}"
    );
    // Its shard aggregated again from other inputs: no second result.
    let list = net.included[&ours.result_hash].clone();
    let fewer = IncludedList { entries: list.entries[..list.entries.len() - 1].to_vec() };
    let again = |included: IncludedList, hash: [u8; 32]| CommitteeEvent::ShardAggregated {
        round: 0,
        shard: ours.shard,
        included,
        total_tokens: ours.total_tokens,
        result_hash: hash,
    };
    m.handle(20, again(fewer, [9; 32]));
    let out: Vec<CommitteeAction> = std::iter::from_fn(|| m.poll_action()).collect();
    assert!(!out.iter().any(|a| matches!(a, CommitteeAction::PublishResult(_))), "{out:?}");
    // From the same inputs: the recorded result again, as it was.
    m.handle(30, again(list, ours.result_hash));
    let out: Vec<CommitteeAction> = std::iter::from_fn(|| m.poll_action()).collect();
    let published: Vec<&ShardResult> = out
        .iter()
        .filter_map(|a| if let CommitteeAction::PublishResult(r) = a { Some(r) } else { None })
        .collect();
    assert_eq!(published, vec![&ours], "{out:?}");
    // A record of a past round binds nothing.
    let mut later = CommitteeMachine::new(
        cfg(1),
        net.keys[0].clone(),
        1,
        StateId([2; 32]),
        Ledger::genesis(Vec::new()),
        0,
    );
    later.restore_signed(record);
    while later.poll_action().is_some() {}
    later.handle(
        40,
        CommitteeEvent::LocalDeltaReady {
            tokens: 10,
            train_loss: 1.0,
            norm: 1.0,
            leaves: record_leaves(&net, 0)[..1].to_vec(),
        },
    );
    let out: Vec<CommitteeAction> = std::iter::from_fn(|| later.poll_action()).collect();
    assert!(out.iter().any(|a| matches!(a, CommitteeAction::Record(r) if r.round == 1)), "{out:?}");
}

/// Node `i`'s leaves of round 0, in shard order.
fn record_leaves(net: &Net, i: usize) -> Vec<ShardLeaf> {
    let shards = net.machines[i].plan().shards();
    (0..shards).map(|s| net.payloads[&(i, s)].1).collect()
}

/// When each node's result was published, by signer.
fn published_at(net: &Net) -> BTreeMap<usize, u64> {
    let mut at = BTreeMap::new();
    for (t, i, _) in &net.published {
        at.entry(*i).or_insert(*t);
    }
    at
}

#[test]
fn owners_do_not_wait_for_the_shard_of_a_member_whose_connection_closed() {
    let c = cfg(1);
    // Node 3 is down from the start; the others saw its connection close.
    let mut net = Net::new(4, 1);
    net.down.insert(3);
    let gone = net.keys[3].public();
    for m in &mut net.machines[..3] {
        m.handle(0, CommitteeEvent::PeerDisconnected(gone));
    }
    net.run_to(1, 20_000);
    let at = published_at(&net);
    for i in 0..3 {
        assert!(at[&i] < c.input_ms, "owner {i} signed at {} without waiting for node 3", at[&i]);
    }
    // Node 3's shard went to its backup; every live node applied the same.
    assert!(net.applied[0][0].1.iter().all(Option::is_some));
    assert!((0..3).all(|i| net.applied[i][0].1 == net.applied[0][0].1));
    // Where no connection closed, owners wait for node 3 until the input deadline.
    let mut waiting = Net::new(4, 1);
    waiting.down.insert(3);
    waiting.run_to(1, 20_000);
    let at = published_at(&waiting);
    assert!((0..3).all(|i| at[&i] >= c.input_ms), "{at:?}");
}

#[test]
fn a_backup_that_takes_a_shard_over_after_its_trainers_did_pulls_the_inputs_they_sent() {
    let mut net = Net::new(3, 1);
    // Shard 0's owner withholds; its first backup opened the round a grace
    // period after the others, so they hand the shard to it (and send it
    // their inputs) before it takes the shard over itself.
    let [withholder, backup, _] = owners_of_three(&net);
    net.withholders.insert(withholder);
    net.open_late(backup, cfg(1).grace_ms);
    net.run_to(1, 20_000);
    let (_, _, r) = net
        .published
        .iter()
        .find(|(_, i, r)| *i == backup && r.shard == 0)
        .expect("the backup signed shard 0");
    assert_eq!(
        net.included[&r.result_hash].len(),
        3,
        "every trainer's input, those sent before the takeover too"
    );
    assert!(net.applied.iter().all(|a| a[0].1 == net.applied[0][0].1));
}

#[test]
fn a_backup_that_takes_a_shard_over_late_asks_a_newcomer_for_its_input_too() {
    // Three seated nodes and a newcomer that trains with them: as above,
    // the backup took no inputs for shard 0 when the trainers handed it
    // over, the newcomer's among them, and it asks each of them.
    let mut net = Net::seating(4, 1, 3);
    let newcomer = net.keys[3].public();
    let [withholder, backup, third] = owners_of_three(&net);
    net.withholders.insert(withholder);
    net.open_late(backup, cfg(1).grace_ms);
    net.run_to(1, 20_000);
    let asked: BTreeSet<PublicKey> = net
        .input_pulls
        .iter()
        .filter(|(i, s, _)| *i == backup && *s == 0)
        .flat_map(|p| p.2.clone())
        .collect();
    let expected: BTreeSet<PublicKey> =
        [withholder, third].map(|i| net.keys[i].public()).into_iter().collect();
    assert_eq!(asked, expected.into_iter().chain([newcomer]).collect());
}

#[test]
fn a_backup_that_takes_a_shard_over_between_deadlines_aggregates_a_grace_period_later() {
    let g = cfg(1).grace_ms;
    let mut net = Net::new(3, 1);
    // Shard 0's owner signs but serves nothing: its claim is given up
    // once the fetch passes run out, between two of the round's
    // deadlines, and shard 0 goes to its first backup then.
    let [o0, o1, o2] = owners_of_three(&net);
    net.silent.insert(o0);
    net.down.insert(o2);
    net.run_to(1, 20_000);
    let (at, _, _) =
        *net.published.iter().find(|(_, i, r)| *i == o1 && r.shard == 0).expect("the backup signed shard 0");
    let handed = net.asks.iter().filter(|(t, i, h)| *i == o1 && *h == o0 && *t <= at).map(|a| a.0).max();
    let handed = handed.expect("the backup asked the owner before it took over");
    assert!(at <= handed + g, "aggregated at {at}, took the shard over at {handed}");
}

#[test]
fn a_second_report_of_a_fetch_already_served_changes_nothing() {
    let mut clean = Net::new(4, 1);
    clean.run_to(1, 20_000);
    let mut net = Net::new(4, 1);
    net.stale_reports = true;
    net.run_to(1, 20_000);
    for i in 0..4 {
        assert_eq!(net.applied[i][0].1, clean.applied[i][0].1, "node {i} applies what it fetched");
    }
}

#[test]
fn a_suspect_given_up_at_the_last_backup_still_lets_the_round_apply() {
    let mut net = Net::new(3, 1);
    // As above, but the trainers answer no pull for their inputs: the
    // backup aggregates its own input alone, an aggregate of unusual size.
    let [withholder, backup, third] = owners_of_three(&net);
    net.withholders.insert(withholder);
    net.open_late(backup, cfg(1).grace_ms);
    net.unpulled.extend([withholder, third]);
    // The withholder's gate holds it as a suspect, and its audit gets no
    // included list (the backup applied and moved on before it asked):
    // given up at the last backup, shard 0 settles at once as zero, with
    // no deadline left, and the round applies then, not never.
    net.run_to(1, 20_000);
    eprintln!(
        "DBG {:?}",
        net.applied
            .iter()
            .map(|a| (a[0].0, a[0].1.iter().map(|x| x.map(|h| h[0])).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    );
    assert_eq!(net.applied[withholder][0].1[0], None, "shard 0 given up, applied as zero");
    assert!(net.applied[withholder][0].1[1..].iter().all(Option::is_some));
    assert_eq!(net.applied[backup][0].1, net.applied[third][0].1);
}

#[test]
fn an_owner_that_restarted_mid_round_pulls_the_inputs_sent_to_it_before() {
    let c = cfg(1);
    let mut net = Net::new(4, 1);
    // Node 0 is down while the others train and send it their shards.
    net.down.insert(0);
    net.restart_node_0_at(10);
    let (at, _, r) = net.published.iter().find(|(_, i, _)| *i == 0).expect("node 0 signed its shard");
    assert!(*at < c.input_ms, "signed at {at}, before the input deadline");
    assert_eq!(
        net.included[&r.result_hash].len(),
        4,
        "every trainer's shard, the three sent before included"
    );
    assert!((0..4).all(|i| net.applied[i][0].1 == net.applied[0][0].1));
}

#[test]
fn a_node_that_missed_the_results_gossip_pulls_them_from_their_owners() {
    let c = cfg(1);
    let mut net = Net::new(4, 1);
    net.deaf.insert(3);
    net.run_to(1, 20_000);
    let (applied, others) = (&net.applied[3][0], &net.applied[0][0]);
    assert_eq!(applied.1, others.1, "the deaf node applies what the others did");
    assert!(applied.1.iter().all(Option::is_some));
    assert!(applied.0 < c.input_ms + c.result_ms, "before the result deadline: {}", applied.0);
    let pulls: Vec<_> = net.pulled.iter().filter(|(i, _, _)| *i == 3).collect();
    let shards: BTreeSet<u32> = pulls.iter().map(|(_, s, _)| *s).collect();
    assert_eq!(shards.len(), 3, "a pull for each shard it missed a result of: {pulls:?}");
    // Nobody has applied the round before it: it asks the signers alone.
    assert!(pulls.iter().all(|(_, _, from)| from.len() == 1), "{pulls:?}");
    assert!(net.pulled.iter().all(|(i, _, _)| *i == 3), "nodes that heard the gossip pull nothing");
}

/// Node 0 restarted in round 0 with `record`, fed the other three
/// trainers' shards of its seat: the actions it took on restoring, the
/// shard it then aggregated with its input count, its plan, and the
/// included list it serves for its seat.
type Restarted = (Vec<CommitteeAction>, Option<(u32, usize)>, CommitteePlan, Option<IncludedList>);
fn restart_with(net: &Net, record: SignedRecord) -> Restarted {
    let ledger = Ledger::genesis(net.keys.iter().map(NodeKey::public).collect());
    let mut m = CommitteeMachine::new(cfg(1), net.keys[0].clone(), 0, StateId([1; 32]), ledger, 0);
    m.restore_signed(record);
    let restored: Vec<CommitteeAction> = std::iter::from_fn(|| m.poll_action()).collect();
    let seat = m.plan().seat_of(&net.keys[0].public()).expect("node 0 owns a shard");
    for j in 1..4 {
        let leaves = record_leaves(net, j);
        let tree = MerkleTree::new(&leaves);
        let manifest = net.records[j].as_ref().and_then(|r| r.manifest.clone()).expect("a manifest");
        m.handle(5, CommitteeEvent::ManifestReceived(manifest));
        let (leaf, proof) = (leaves[seat as usize], tree.proof(seat as usize));
        let shards = m.plan().shards();
        m.handle(5, CommitteeEvent::ShardReceived { signer: net.keys[j].public(), shards, leaf, proof });
    }
    let aggregated = std::iter::from_fn(|| m.poll_action()).find_map(|a| match a {
        CommitteeAction::AggregateShard { shard, inputs, .. } => Some((shard, inputs.len())),
        _ => None,
    });
    let seat = m.plan().seat_of(&net.keys[0].public()).expect("node 0 owns a shard");
    (restored, aggregated, m.plan().clone(), m.our_list(seat).cloned())
}

#[test]
fn a_restarted_node_sends_the_delta_it_signed_again_or_does_not_wait_for_it() {
    let mut net = Net::new(4, 1);
    net.run_to(1, 10_000);
    let record = net.records[0].clone().expect("node 0 recorded its manifest");
    assert_eq!(record.leaves, record_leaves(&net, 0), "with the leaves under it");
    // Restarted before it signed its result.
    let record = SignedRecord { results: Vec::new(), ..record };
    // Its leaves recorded: it sends every other shard again and counts its own.
    let (restored, aggregated, plan, _) = restart_with(&net, record.clone());
    let me = net.keys[0].public();
    let seat = plan.seat_of(&me).expect("a seat");
    let sent: BTreeSet<(PublicKey, u32)> = restored
        .iter()
        .filter_map(|a| {
            if let CommitteeAction::SendShard { to, shard, .. } = a {
                Some((*to, *shard))
            } else {
                None
            }
        })
        .collect();
    let members: BTreeSet<(PublicKey, u32)> =
        (0..3).flat_map(|s| plan.committee(s).iter().filter(|k| **k != me).map(move |k| (*k, s))).collect();
    assert_eq!(sent, members, "a shard to every other member");
    assert_eq!(aggregated, Some((seat, 4)), "its own shard and the three others', at once");
    // Without its leaves it cannot: it aggregates the others' at once
    // rather than wait for its own until the input deadline.
    let bare = SignedRecord { leaves: Vec::new(), ..record };
    let (restored, aggregated, _, _) = restart_with(&net, bare);
    assert!(!restored.iter().any(|a| matches!(a, CommitteeAction::SendShard { .. })), "{restored:?}");
    assert_eq!(aggregated, Some((seat, 3)));
}

#[test]
fn an_owner_that_restarted_mid_round_waits_for_no_input_past_its_pulls() {
    let c = cfg(1);
    let mut net = Net::new(4, 1);
    // Node 3 never trains; node 0 restarts after the others sent their shards.
    net.down.extend([0, 3]);
    net.restart_node_0_at(10);
    let (at, _, r) = net.published.iter().find(|(_, i, _)| *i == 0).expect("node 0 signed its shard");
    let pulls_done = 10 + 4 * (c.grace_ms / 4);
    assert_eq!(*at, pulls_done, "it signs once its pulls are done, not at the input deadline");
    assert_eq!(net.included[&r.result_hash].len(), 3, "what it had: nodes 1 and 2, and its own");
    // The owners that never restarted wait for node 3 until the input deadline.
    let others = published_at(&net);
    assert!([1, 2].iter().all(|i| others[i] >= c.input_ms), "{others:?}");
}

#[test]
fn a_restarted_owner_gossips_the_result_it_signed_before_and_does_not_aggregate_again() {
    let mut net = Net::new(4, 1);
    net.run_to(1, 10_000);
    let record = net.records[0].clone().expect("node 0 recorded what it signed");
    let own = record.results.first().cloned().expect("its result among it");
    let list = record.lists.first().cloned().expect("with the included list behind it");
    assert_eq!(list.root(), own.included_root);
    let (restored, aggregated, _, served) = restart_with(&net, record.clone());
    assert!(restored.contains(&CommitteeAction::PublishResult(own)), "{restored:?}");
    assert_eq!(aggregated, None, "its shard is not aggregated a second time");
    assert_eq!(served, Some(list), "and its included list is served again");
    // Recorded without its list, the result is not published (its list
    // could not be served) and the shard is not aggregated either.
    let bare = SignedRecord { lists: Vec::new(), ..record };
    let (restored, aggregated, _, _) = restart_with(&net, bare);
    assert!(!restored.iter().any(|a| matches!(a, CommitteeAction::PublishResult(_))), "{restored:?}");
    assert_eq!(aggregated, None);
}

#[test]
fn a_node_that_missed_a_result_whose_signer_went_down_pulls_it_from_a_node_that_applied_it() {
    let mut net = Net::new(4, 1);
    net.deaf.insert(3);
    net.down_after_publishing.insert(1);
    let seat = net.machines[0].plan().seat_of(&net.keys[1].public()).expect("node 1 owns a shard");
    net.run_to(1, 20_000);
    let (applied, others) = (&net.applied[3][0], &net.applied[0][0]);
    assert_eq!(applied.1, others.1, "the deaf node applies what the others did");
    assert!(applied.1.iter().all(Option::is_some), "node 1's shard too");
    let asked: Vec<&Vec<PublicKey>> =
        net.pulled.iter().filter(|(i, s, _)| *i == 3 && *s == seat).map(|(_, _, from)| from).collect();
    assert!(!asked.is_empty() && asked.iter().all(|from| from.len() > 1), "beyond the signer: {asked:?}");
}

/// A machine of `keys[me]` in round 1 on `base` whose roster was `keys`
/// and is now `keys[..kept]`: the others are former members.
fn apart(keys: &[NodeKey], me: usize, kept: usize, base: StateId) -> CommitteeMachine {
    let all: Vec<PublicKey> = keys.iter().map(NodeKey::public).collect();
    let mut m = CommitteeMachine::new(cfg(1), keys[me].clone(), 1, StateId([1; 32]), Ledger::genesis(all), 0);
    let kept: Vec<PublicKey> = keys[..kept].iter().map(NodeKey::public).collect();
    m.jump(0, 5, base, Ledger::genesis(kept));
    fetches(&mut m);
    m
}

#[test]
fn a_larger_side_of_former_members_moves_a_node_and_strangers_never_do() {
    let keys: Vec<NodeKey> = (0..5u8).map(|i| NodeKey::from_seed([i + 1; 32])).collect();
    let (ours, theirs) = (StateId([2; 32]), StateId([3; 32]));
    // Node 0's side kept 0 and 1; 2, 3 and 4 ran apart on their own chain.
    let mut m = apart(&keys, 0, 2, ours);
    for s in 100..140u8 {
        let stranger = NodeKey::from_seed([s; 32]);
        m.handle(1, CommitteeEvent::ResultReceived(result_of(&stranger, 9, theirs)));
    }
    assert!(fetches(&mut m).is_empty(), "keys never on the roster move nobody");
    m.handle(2, CommitteeEvent::ResultReceived(result_of(&keys[2], 9, theirs)));
    assert!(fetches(&mut m).is_empty(), "one former member against a roster of two");
    m.handle(3, CommitteeEvent::ResultReceived(result_of(&keys[3], 9, theirs)));
    m.handle(3, CommitteeEvent::ResultReceived(result_of(&keys[4], 9, theirs)));
    let got = fetches(&mut m);
    assert_eq!(got.len(), 1, "three former members outrank a roster of two: {got:?}");
    assert_eq!((got[0].0, got[0].1), (8, theirs));
    // Their chain is ahead: the node moves there.
    let ledger = Ledger::genesis(keys[2..].iter().map(NodeKey::public).collect());
    m.handle(4, CommitteeEvent::CaughtUp { round: 9, state: theirs, ledger });
    assert_eq!((m.round(), m.base()), (9, theirs));
}

#[test]
fn of_two_equal_sides_exactly_one_moves_even_to_a_round_behind() {
    let keys: Vec<NodeKey> = (0..2u8).map(|i| NodeKey::from_seed([i + 7; 32])).collect();
    let (a_state, b_state) = (StateId([4; 32]), StateId([5; 32]));
    // Each of two nodes ran alone for a while: a reached round 12, b round 7.
    let order = [keys[0].clone(), keys[1].clone()];
    let mut a = apart(&order, 0, 1, a_state);
    a.jump(0, 12, a_state, Ledger::genesis(vec![keys[0].public()]));
    let mut b = apart(&[keys[1].clone(), keys[0].clone()], 0, 1, b_state);
    b.jump(0, 7, b_state, Ledger::genesis(vec![keys[1].public()]));
    fetches(&mut a);
    fetches(&mut b);
    a.handle(1, CommitteeEvent::ResultReceived(result_of(&keys[1], 7, b_state)));
    b.handle(1, CommitteeEvent::ResultReceived(result_of(&keys[0], 12, a_state)));
    let (fa, fb) = (fetches(&mut a), fetches(&mut b));
    assert_eq!(fa.len() + fb.len(), 1, "one side moves: {fa:?} {fb:?}");
    // The side whose key is the smallest stays; the other moves to it,
    // whatever its round.
    let b_wins = keys[1].public() < keys[0].public();
    let (mover, target, round) = if b_wins { (&mut a, b_state, 7) } else { (&mut b, a_state, 12) };
    let ledger = Ledger::genesis(vec![if b_wins { keys[1].public() } else { keys[0].public() }]);
    // A fetched state that opens another round than the one its signers
    // ended on is not theirs: the node stays.
    let before = (mover.round(), mover.base());
    mover.handle(2, CommitteeEvent::CaughtUp { round: round - 1, state: target, ledger: ledger.clone() });
    assert_eq!((mover.round(), mover.base()), before, "the state opens round {} instead", round - 1);
    // The rival's next word asks again once the failed fetch's back-off is
    // up, and its real state moves the node.
    let (signer, ended) = if b_wins { (&keys[1], 7) } else { (&keys[0], 12) };
    mover.handle(3, CommitteeEvent::ResultReceived(result_of(signer, ended, target)));
    assert!(fetches(mover).is_empty(), "asks again within the back-off");
    let after = 2 + fetch_backoff(1);
    mover.handle(after, CommitteeEvent::ResultReceived(result_of(signer, ended, target)));
    assert_eq!(fetches(mover).len(), 1, "asks again");
    mover.handle(after + 1, CommitteeEvent::CaughtUp { round, state: target, ledger });
    assert_eq!((mover.round(), mover.base()), (round, target));
}

#[test]
fn a_node_that_moved_to_a_side_which_went_on_without_it_follows_that_side() {
    // Node 0 moved to node 1's state for round 11: the ledger seats both,
    // but node 1 closed round 12 without it and goes on alone.
    let keys: Vec<NodeKey> = (0..3u8).map(|i| NodeKey::from_seed([i + 30; 32])).collect();
    // Node 0 in round 12 on a ledger that seats `seated`.
    let moved = |seated: &[NodeKey]| {
        let ledger = Ledger::genesis(seated.iter().map(NodeKey::public).collect());
        let mut m = CommitteeMachine::new(cfg(1), keys[0].clone(), 1, StateId([1; 32]), ledger.clone(), 0);
        m.jump(0, 12, StateId([2; 32]), ledger);
        fetches(&mut m);
        m
    };
    let mut m = moved(&keys[..2]);
    m.handle(1, CommitteeEvent::ResultReceived(result_of(&keys[1], 13, StateId([3; 32]))));
    assert!(fetches(&mut m).is_empty(), "a round the node has open is not one it is behind on");
    m.handle(2, CommitteeEvent::ResultReceived(result_of(&keys[1], 14, StateId([4; 32]))));
    let got = fetches(&mut m);
    assert_eq!(got.len(), 1, "the node has no word for round 13 to hold out with: {got:?}");
    assert_eq!((got[0].0, got[0].1), (13, StateId([4; 32])));
    // Of three, one other key ahead is no majority of the two that vote.
    let mut m = moved(&keys);
    m.handle(1, CommitteeEvent::ResultReceived(result_of(&keys[1], 14, StateId([4; 32]))));
    assert!(fetches(&mut m).is_empty(), "one of the two others");
    m.handle(2, CommitteeEvent::ResultReceived(result_of(&keys[2], 14, StateId([4; 32]))));
    assert_eq!(fetches(&mut m).len(), 1, "both others");
}
