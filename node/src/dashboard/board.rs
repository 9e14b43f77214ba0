//! The board: what the dashboard knows of the run, built only from what it
//! observes (validated gossip — telemetry and the round's results — its own
//! refusals and the text samples it draws), and the JSON snapshot the web
//! page renders. Pure and bounded: every list is capped, nothing here does
//! I/O, and time comes in as milliseconds since the dashboard started.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use murmur_protocol::committee::ShardResult;
use murmur_protocol::{PublicKey, RunSpec, StateId, Telemetry};
use serde_json::{json, Value};

/// Most nodes tracked (the longest unseen is forgotten first).
pub const MAX_NODES: usize = 256;
/// Rounds of history kept per node and for the timeline.
pub const MAX_ROUNDS: usize = 400;
/// Rounds shown on the timeline.
pub const TIMELINE_ROUNDS: usize = 16;
/// Recent events listed.
pub const MAX_EVENTS: usize = 40;
/// A node unseen for this long is drawn as gone.
pub const ALIVE_MS: u64 = 30_000;

/// One node's report at the close of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundPoint {
    pub round: u64,
    pub val_loss: Option<f32>,
    pub train_loss: f32,
    pub tokens_per_sec: f32,
    /// Bytes the node sent since its previous round report.
    pub bytes_sent: Option<u64>,
}

/// A training node as its telemetry describes it.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub peer: String,
    pub key: PublicKey,
    pub last: Telemetry,
    pub last_seen_ms: u64,
    pub history: VecDeque<RoundPoint>,
    /// bytes_sent at the node's last round report.
    sent_at_last_round: Option<(u64, u64)>,
}

/// A round as the gossip showed it.
#[derive(Debug, Clone, Default)]
struct RoundView {
    first_commit_ms: Option<u64>,
    /// Signers by the StateId they ended the round on.
    commits: BTreeMap<StateId, CommitGroup>,
    /// Nodes alive when the round closed (for stragglers).
    alive_at_close: Vec<PublicKey>,
    /// Messages the nodes refused while this round was open, by reason.
    refused: BTreeMap<String, u64>,
}

/// The signers of one round that ended it on the same StateId.
#[derive(Debug, Clone)]
struct CommitGroup {
    /// The state the round was trained from (as the first signer's word says).
    base: StateId,
    committers: Vec<PublicKey>,
}

impl RoundView {
    /// The new StateId most committers reported, and its group.
    fn majority(&self) -> Option<(&StateId, &CommitGroup)> {
        self.commits.iter().max_by_key(|(_, g)| g.committers.len())
    }
}

/// A text sample drawn from a committed state.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub round: u64,
    pub state: StateId,
    pub prompt: String,
    pub text: String,
}

/// What the dashboard knows.
pub struct Board {
    spec: RunSpec,
    entropy_floor: Option<f64>,
    /// Peer id (text) → how the page should label it.
    roles: HashMap<String, &'static str>,
    nodes: HashMap<PublicKey, NodeView>,
    rounds: BTreeMap<u64, RoundView>,
    events: VecDeque<Value>,
    own_rejections: BTreeMap<String, u64>,
    sample: Option<Sample>,
    peer_id_of: fn(&PublicKey) -> String,
    /// A bootstrap address of the run, for the export command shown.
    bootstrap: Option<String>,
}

fn short(s: &str) -> String {
    // Peer ids start with the same multihash prefix ("12D3KooW"); the tail tells them apart.
    let tail = s.len().saturating_sub(6);
    s.get(tail..).unwrap_or(s).to_string()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

impl Board {
    /// A board for `spec`; `peer_id_of` names a signer as its libp2p peer id.
    pub fn new(spec: RunSpec, entropy_floor: Option<f64>, peer_id_of: fn(&PublicKey) -> String) -> Self {
        Self {
            spec,
            entropy_floor,
            roles: HashMap::new(),
            nodes: HashMap::new(),
            rounds: BTreeMap::new(),
            events: VecDeque::new(),
            own_rejections: BTreeMap::new(),
            sample: None,
            peer_id_of,
            bootstrap: None,
        }
    }

    /// The bootstrap address the page's export command names.
    pub fn set_bootstrap(&mut self, addr: String) {
        self.bootstrap = Some(addr);
    }

    /// Label a peer that sends no telemetry (the bootstrap server, this dashboard).
    pub fn set_role(&mut self, peer: String, role: &'static str) {
        self.roles.insert(peer, role);
    }

    fn event(&mut self, at_ms: u64, kind: &str, text: String) {
        self.events.push_back(json!({ "at_ms": at_ms, "kind": kind, "text": text }));
        while self.events.len() > MAX_EVENTS {
            self.events.pop_front();
        }
    }

    fn round_mut(&mut self, round: u64) -> &mut RoundView {
        self.rounds.entry(round).or_default()
    }

    fn trim_rounds(&mut self) {
        while self.rounds.len() > MAX_ROUNDS {
            self.rounds.pop_first();
        }
    }

    /// A validated Telemetry message.
    pub fn on_telemetry(&mut self, t: Telemetry, now_ms: u64) {
        let key = t.signer;
        if !self.nodes.contains_key(&key) {
            if self.nodes.len() >= MAX_NODES {
                if let Some(oldest) = self.nodes.values().min_by_key(|n| n.last_seen_ms).map(|n| n.key) {
                    self.nodes.remove(&oldest);
                }
            }
            let peer = (self.peer_id_of)(&key);
            let text = format!("node {} joined ({})", short(&peer), t.device);
            self.event(now_ms, "join", text);
            self.nodes.insert(
                key,
                NodeView {
                    peer,
                    key,
                    last: t.clone(),
                    last_seen_ms: now_ms,
                    history: VecDeque::new(),
                    sent_at_last_round: None,
                },
            );
        }
        // Refusals counted since the node's previous report happened in the round in progress.
        let mut refused: Vec<(String, u64)> = Vec::new();
        if let Some(prev) = self.nodes.get(&key) {
            for r in &t.rejections {
                let before =
                    prev.last.rejections.iter().find(|p| p.reason == r.reason).map_or(0, |p| p.count);
                if r.count > before {
                    refused.push((r.reason.clone(), r.count - before));
                }
            }
        }
        if !refused.is_empty() {
            let open = self.round_mut(t.round.saturating_add(1));
            for (reason, n) in refused {
                if open.refused.len() < 64 || open.refused.contains_key(&reason) {
                    *open.refused.entry(reason).or_default() += n;
                }
            }
            self.trim_rounds();
        }
        let Some(node) = self.nodes.get_mut(&key) else { return };
        node.last_seen_ms = now_ms;
        // A round report (val loss present) for a round not yet recorded.
        let new_round = t.val_loss.is_some() && node.history.back().is_none_or(|p| p.round < t.round);
        if new_round {
            let bytes_sent = match node.sent_at_last_round {
                Some((r, sent)) if r < t.round => Some(t.bytes_sent.saturating_sub(sent)),
                _ => None,
            };
            node.sent_at_last_round = Some((t.round, t.bytes_sent));
            node.history.push_back(RoundPoint {
                round: t.round,
                val_loss: t.val_loss,
                train_loss: t.train_loss,
                tokens_per_sec: t.tokens_per_sec,
                bytes_sent,
            });
            while node.history.len() > MAX_ROUNDS {
                node.history.pop_front();
            }
        }
        node.last = t;
    }

    /// A validated ShardResult: its signer ended the round before on the
    /// result's base (every node signs a result each round).
    pub fn on_result(&mut self, r: &ShardResult, now_ms: u64) {
        let Some(round) = r.round.checked_sub(1) else { return };
        let base = round
            .checked_sub(1)
            .and_then(|before| self.rounds.get(&before))
            .and_then(|v| v.majority().map(|(state, _)| *state))
            .unwrap_or(r.base);
        self.note_commit(round, r.base, base, r.signer, now_ms);
    }

    /// `signer` ended `round`, trained from `base`, on `new_state`.
    fn note_commit(&mut self, round: u64, new_state: StateId, base: StateId, signer: PublicKey, now_ms: u64) {
        let alive: Vec<PublicKey> = self
            .nodes
            .values()
            .filter(|n| now_ms.saturating_sub(n.last_seen_ms) < ALIVE_MS)
            .map(|n| n.key)
            .collect();
        let r = self.round_mut(round);
        if r.first_commit_ms.is_none() {
            r.first_commit_ms = Some(now_ms);
            r.alive_at_close = alive;
        }
        if r.commits.len() >= MAX_NODES && !r.commits.contains_key(&new_state) {
            return;
        }
        let g = r.commits.entry(new_state).or_insert_with(|| CommitGroup { base, committers: Vec::new() });
        if !g.committers.contains(&signer) && g.committers.len() < MAX_NODES {
            g.committers.push(signer);
        }
        self.trim_rounds();
    }

    /// The dashboard itself refused a peer's message.
    pub fn on_own_rejection(&mut self, peer: &str, reason: &str, now_ms: u64) {
        if self.own_rejections.len() < 64 || self.own_rejections.contains_key(reason) {
            *self.own_rejections.entry(reason.to_string()).or_default() += 1;
        }
        self.event(now_ms, "rejection", format!("refused a message from {}: {reason}", short(peer)));
    }

    pub fn on_sample(&mut self, s: Sample) {
        self.sample = Some(s);
    }

    /// The newest round with a commit, and the StateId most committers reported.
    pub fn latest_commit(&self) -> Option<(u64, StateId, Vec<PublicKey>)> {
        self.rounds
            .iter()
            .rev()
            .find_map(|(round, r)| r.majority().map(|(state, g)| (*round, *state, g.committers.clone())))
    }

    /// Whether a node that reports `state` after `round` is on the network's
    /// chain: its state is the base or the result of the commit most
    /// committers reported for that round or a later one. (A report can trail
    /// the next commit by an evaluation, and before its first round a node
    /// reports round 0 with the genesis state, round 0's base.) `None` while
    /// the board knows no commit from `round` on; `false` only when it knows
    /// some and the node holds none of their states, i.e. it diverged.
    fn on_majority_state(&self, round: u64, state: StateId) -> Option<bool> {
        let mut known = false;
        for (new, g) in self.rounds.range(round..).filter_map(|(_, r)| r.majority()) {
            if *new == state || g.base == state {
                return Some(true);
            }
            known = true;
        }
        known.then_some(false)
    }

    /// Compressed bytes of one delta and of the same delta in f32.
    fn delta_sizes(&self) -> (Option<u64>, u64) {
        let n = self.spec.model.param_count;
        (self.spec.codec.payload_len(n), n.saturating_mul(4))
    }

    /// The whole picture as JSON for the page.
    pub fn snapshot(&self, now_ms: u64) -> Value {
        let spec = &self.spec;
        let (payload, f32_bytes) = self.delta_sizes();
        let run = json!({
            "id": spec.run_id().to_hex(),
            "preset": spec.model.preset,
            "params": spec.model.param_count,
            "data": spec.data,
            "codec": spec.codec.name(),
            "inner_steps": spec.inner_steps,
            "batch": spec.inner.batch_size,
            "quorum": spec.quorum,
            "deadline_secs": spec.round_deadline_secs,
            "entropy_floor": self.entropy_floor,
            "delta_bytes": payload,
            "f32_bytes": f32_bytes,
            "compression": payload.filter(|p| *p > 0).map(|p| f32_bytes as f64 / p as f64),
        });
        let majority_state = self.latest_commit().map(|(_, s, _)| s);
        let mut nodes: Vec<&NodeView> = self.nodes.values().collect();
        nodes.sort_by(|a, b| a.peer.cmp(&b.peer));
        let node_json: Vec<Value> = nodes
            .iter()
            .map(|n| {
                let t = &n.last;
                json!({
                    "peer": n.peer,
                    "short": short(&n.peer),
                    "device": t.device,
                    "backend": t.backend,
                    "round": t.round,
                    "state": t.state.to_hex(),
                    "on_majority_state": self.on_majority_state(t.round, t.state),
                    "train_loss": t.train_loss,
                    "val_loss": t.val_loss,
                    "tokens_per_sec": t.tokens_per_sec,
                    "bytes_sent": t.bytes_sent,
                    "bytes_recv": t.bytes_recv,
                    "peer_count": t.peer_count,
                    "trainer_restarts": t.trainer_restarts,
                    "alive": now_ms.saturating_sub(n.last_seen_ms) < ALIVE_MS,
                    "last_seen_ms": n.last_seen_ms,
                    "rejections": t.rejections.iter().map(|r| json!({"reason": r.reason, "count": r.count})).collect::<Vec<_>>(),
                    "history": n.history.iter().map(|p| json!({
                        "round": p.round,
                        "val_loss": p.val_loss,
                        "train_loss": p.train_loss,
                        "tokens_per_sec": p.tokens_per_sec,
                        "bytes_sent": p.bytes_sent,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        // Network-wide validation loss: the median of the nodes' reports per round.
        let mut by_round: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for n in &nodes {
            for p in &n.history {
                if let Some(v) = p.val_loss {
                    by_round.entry(p.round).or_default().push(f64::from(v));
                }
            }
        }
        let network_loss: Vec<Value> = by_round
            .into_iter()
            .filter_map(|(r, v)| median(v).map(|m| json!({"round": r, "val_loss": m})))
            .collect();
        let alive_nodes: Vec<&&NodeView> =
            nodes.iter().filter(|n| now_ms.saturating_sub(n.last_seen_ms) < ALIVE_MS).collect();
        let tokens_total: f64 = alive_nodes.iter().map(|n| f64::from(n.last.tokens_per_sec)).sum();
        // The peer graph: every node, the peers they name, and their links.
        let mut graph_peers: BTreeMap<String, &'static str> = BTreeMap::new();
        let mut links: BTreeMap<(String, String), bool> = BTreeMap::new();
        for n in &alive_nodes {
            graph_peers.insert(n.peer.clone(), "trainer");
            for l in &n.last.links {
                let other = (self.peer_id_of)(&l.peer);
                let role = if self.nodes.contains_key(&l.peer) {
                    "trainer"
                } else {
                    self.roles.get(&other).copied().unwrap_or("peer")
                };
                graph_peers.entry(other.clone()).or_insert(role);
                let key = if n.peer < other { (n.peer.clone(), other) } else { (other, n.peer.clone()) };
                // A link is direct if either end reports it direct.
                let e = links.entry(key).or_insert(true);
                *e = *e && l.relayed;
            }
        }
        let peers_json: Vec<Value> =
            graph_peers.iter().map(|(p, role)| json!({"peer": p, "short": short(p), "role": role})).collect();
        let links_json: Vec<Value> =
            links.iter().map(|((a, b), relayed)| json!({"a": a, "b": b, "relayed": relayed})).collect();
        let timeline: Vec<Value> = self
            .rounds
            .iter()
            .rev()
            .take(TIMELINE_ROUNDS)
            .map(|(round, r)| self.round_json(*round, r))
            .collect();
        let mut rejections: BTreeMap<String, u64> = self.own_rejections.clone();
        for n in &nodes {
            for r in &n.last.rejections {
                *rejections.entry(r.reason.clone()).or_default() += r.count;
            }
        }
        json!({
            "run": run,
            "now_ms": now_ms,
            "nodes": node_json,
            "network": {
                "val_loss": network_loss,
                "tokens_per_sec": tokens_total,
                "alive": alive_nodes.len(),
                "latest_round": self.latest_commit().map(|(r, _, _)| r),
                "latest_state": majority_state.map(|s| s.to_hex()),
            },
            "graph": { "peers": peers_json, "links": links_json },
            "rounds": timeline,
            "rejections": rejections.iter().map(|(k, v)| json!({"reason": k, "count": v})).collect::<Vec<_>>(),
            "events": self.events.iter().rev().cloned().collect::<Vec<_>>(),
            "sample": self.sample.as_ref().map(|s| json!({
                "round": s.round,
                "state": s.state.to_hex(),
                "prompt": s.prompt,
                "text": s.text,
                "export": self.bootstrap.as_ref().map(|b| format!(
                    "murmur export --bootstrap {b} --state {} --out model-round-{}/",
                    s.state.to_hex(),
                    s.round
                )),
            })),
        })
    }

    fn round_json(&self, round: u64, r: &RoundView) -> Value {
        let best = r.majority();
        let closed = r.first_commit_ms;
        // Nodes alive as the round closed that signed no result of the next.
        let contributors: HashSet<PublicKey> =
            r.commits.values().flat_map(|g| g.committers.iter().copied()).collect();
        let stragglers: Vec<String> = if closed.is_some() {
            r.alive_at_close
                .iter()
                .filter(|k| !contributors.contains(k))
                .map(|k| (self.peer_id_of)(k))
                .collect()
        } else {
            Vec::new()
        };
        let opened = self.rounds.get(&round.wrapping_sub(1)).and_then(|p| p.first_commit_ms);
        json!({
            "round": round,
            "opened_ms": opened,
            "closed_ms": closed,
            "committers": best.map(|(_, g)| g.committers.len()),
            "state": best.map(|(s, _)| s.to_hex()),
            "disagreeing_commits": r.commits.len().saturating_sub(1),
            "stragglers": stragglers,
            "refused": r.refused.iter().map(|(k, v)| json!({"reason": k, "count": v})).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::spec::{run_spec, RunParams};
    use murmur_protocol::{NodeKey, PeerLink, RejectionCount, Signature};

    fn name(k: &PublicKey) -> String {
        format!("peer-{:02x}{:02x}", k.0[0], k.0[1])
    }

    fn telemetry(key: &NodeKey, spec: &RunSpec, round: u64, val: Option<f32>, sent: u64) -> Telemetry {
        Telemetry {
            run: spec.run_id(),
            round,
            train_loss: 3.0,
            val_loss: val,
            tokens_per_sec: 100.0,
            device: "cpu (2 threads)".into(),
            bytes_sent: sent,
            bytes_recv: 0,
            peer_count: 1,
            state: StateId([round as u8; 32]),
            backend: "cpu".into(),
            links: Vec::new(),
            rejections: vec![RejectionCount { reason: "bad-signature".into(), count: 2 }],
            trainer_restarts: round as u32,
            signer: PublicKey::default(),
            signature: Signature::default(),
        }
        .sign(key)
    }

    #[test]
    fn rounds_nodes_links_and_stragglers_show_in_the_snapshot() {
        let spec = run_spec(&RunParams::default()).expect("spec");
        let mut board = Board::new(spec.clone(), Some(0.8354), name);
        let (a, b) = (NodeKey::from_seed([1; 32]), NodeKey::from_seed([2; 32]));
        board.set_role("boot".into(), "bootstrap");
        board.on_telemetry(telemetry(&a, &spec, 0, Some(5.0), 100), 10);
        board.on_telemetry(telemetry(&b, &spec, 0, Some(5.2), 50), 20);
        // Round 1 ends on state 2: a signs it; b, alive, signs nothing.
        board.note_commit(0, StateId([1; 32]), StateId([0; 32]), a.public(), 500);
        board.note_commit(1, StateId([2; 32]), StateId([1; 32]), a.public(), 2000);
        board.on_telemetry(telemetry(&a, &spec, 1, Some(4.0), 1100), 3000);
        board.on_telemetry(telemetry(&b, &spec, 1, Some(4.2), 50), 3100);
        // A heartbeat without val loss adds no history point; its links are the current ones.
        let mut beat = telemetry(&a, &spec, 1, None, 1200);
        beat.links = vec![PeerLink { peer: b.public(), relayed: true }];
        board.on_telemetry(beat.sign(&a), 4000);
        board.on_own_rejection("12D3KooWxyz", "malformed", 4100);
        // b refused three more bad signatures while round 2 was open.
        let mut later = telemetry(&b, &spec, 1, None, 60);
        later.rejections = vec![RejectionCount { reason: "bad-signature".into(), count: 5 }];
        board.on_telemetry(later.sign(&b), 4200);

        let s = board.snapshot(5000);
        assert_eq!(s["nodes"].as_array().map(Vec::len), Some(2));
        let nodes = s["nodes"].as_array().cloned().unwrap_or_default();
        let na = nodes.iter().find(|n| n["peer"] == name(&a.public())).expect("node a");
        assert_eq!(na["history"].as_array().map(Vec::len), Some(2));
        assert_eq!(na["history"][1]["bytes_sent"], 1000);
        assert_eq!(na["backend"], "cpu");
        // Its latest report (round 1) says the trainer was restarted once.
        assert_eq!(na["trainer_restarts"], 1);
        // Medians: round 0 (5.0, 5.2) → 5.1; round 1 (4.0, 4.2) → 4.1.
        let nl = s["network"]["val_loss"].as_array().cloned().unwrap_or_default();
        assert_eq!(nl.len(), 2);
        assert!((nl[0]["val_loss"].as_f64().unwrap_or(0.0) - 5.1).abs() < 1e-5, "{nl:?}");
        assert_eq!(s["network"]["latest_round"], 1);
        let r1 = s["rounds"]
            .as_array()
            .and_then(|r| r.iter().find(|x| x["round"] == 1).cloned())
            .expect("round 1");
        assert_eq!(r1["committers"], 1);
        assert_eq!((r1["opened_ms"].clone(), r1["closed_ms"].clone()), (json!(500), json!(2000)));
        assert_eq!(r1["stragglers"], json!([name(&b.public())]));
        // The link a reports relayed is drawn relayed; both ends are trainers.
        assert_eq!(s["graph"]["links"].as_array().map(Vec::len), Some(1));
        assert_eq!(s["graph"]["links"][0]["relayed"], true);
        assert!(s["graph"]["peers"].as_array().is_some_and(|p| p.iter().all(|x| x["role"] == "trainer")));
        // Rejections: 2 + 5 from the nodes' reports, 1 of the dashboard's own.
        let rej = s["rejections"].as_array().cloned().unwrap_or_default();
        assert!(rej.contains(&json!({"reason": "bad-signature", "count": 7})), "{rej:?}");
        let r2 = s["rounds"].as_array().and_then(|r| r.iter().find(|x| x["round"] == 2).cloned());
        assert_eq!(r2.map(|r| r["refused"].clone()), Some(json!([{"reason": "bad-signature", "count": 3}])));
        assert!(rej.contains(&json!({"reason": "malformed", "count": 1})), "{rej:?}");
        assert!(s["run"]["compression"].as_f64().is_some_and(|c| c > 3.5), "{}", s["run"]);
        assert_eq!(s["run"]["entropy_floor"], 0.8354);
    }

    #[test]
    fn only_a_node_holding_none_of_the_majority_states_is_flagged() {
        let spec = run_spec(&RunParams::default()).expect("spec");
        let mut board = Board::new(spec.clone(), None, name);
        let keys: Vec<NodeKey> = (1..=4).map(|i| NodeKey::from_seed([i; 32])).collect();
        let (genesis, s0, s1, forked) =
            (StateId([0; 32]), StateId([1; 32]), StateId([2; 32]), StateId([9; 32]));
        let report = |board: &mut Board, k: &NodeKey, round: u64, state: StateId, at: u64| {
            let mut t = telemetry(k, &spec, round, None, 0);
            t.state = state;
            board.on_telemetry(t.sign(k), at);
        };
        let commit =
            |board: &mut Board, k: &NodeKey, round: u64, base: StateId, new_state: StateId, at: u64| {
                board.note_commit(round, new_state, base, k.public(), at)
            };
        let flag = |board: &Board, k: &NodeKey| {
            let s = board.snapshot(100);
            let nodes = s["nodes"].as_array().cloned().unwrap_or_default();
            nodes.iter().find(|n| n["peer"] == name(&k.public())).map(|n| n["on_majority_state"].clone())
        };
        // Before any commit nothing is known either way.
        report(&mut board, &keys[0], 0, genesis, 1);
        assert_eq!(flag(&board, &keys[0]), Some(Value::Null));
        // Round 0: a and b commit s0 on genesis, c commits a state of its own.
        commit(&mut board, &keys[0], 0, genesis, s0, 10);
        commit(&mut board, &keys[1], 0, genesis, s0, 11);
        commit(&mut board, &keys[2], 0, genesis, forked, 12);
        // a still reports the genesis state it trained round 0 from: on the chain.
        assert_eq!(flag(&board, &keys[0]), Some(json!(true)));
        report(&mut board, &keys[1], 0, s0, 13);
        report(&mut board, &keys[2], 0, forked, 14);
        assert_eq!(flag(&board, &keys[1]), Some(json!(true)));
        assert_eq!(flag(&board, &keys[2]), Some(json!(false)));
        // Round 1 commits before b's round-1 report; b's state already moved on.
        commit(&mut board, &keys[0], 1, s0, s1, 20);
        report(&mut board, &keys[1], 0, s1, 21);
        assert_eq!(flag(&board, &keys[1]), Some(json!(true)));
        assert_eq!(flag(&board, &keys[2]), Some(json!(false)));
        // A report from past the newest commit is not judged.
        report(&mut board, &keys[3], 5, forked, 22);
        assert_eq!(flag(&board, &keys[3]), Some(Value::Null));
    }

    #[test]
    fn results_say_which_state_each_signer_ended_the_last_round_on() {
        let spec = run_spec(&RunParams::default()).expect("spec");
        let mut board = Board::new(spec.clone(), None, name);
        let keys: Vec<NodeKey> = (1..=3).map(|i| NodeKey::from_seed([i; 32])).collect();
        let (s0, forked) = (StateId([1; 32]), StateId([9; 32]));
        let result = |k: &NodeKey, round: u64, base: StateId| {
            ShardResult {
                run: spec.run_id(),
                round,
                base,
                shard: 0,
                included_count: 1,
                included_root: [0; 32],
                total_tokens: 10,
                result_hash: [5; 32],
                signer: PublicKey::default(),
                signature: Signature::default(),
            }
            .sign(k)
        };
        // Round-1 results trained from s0 (two) and from a fork (one):
        // round 0 ended on s0 for the majority; round-0 results say nothing.
        board.on_result(&result(&keys[0], 0, StateId([0; 32])), 5);
        board.on_result(&result(&keys[0], 1, s0), 10);
        board.on_result(&result(&keys[1], 1, s0), 11);
        board.on_result(&result(&keys[2], 1, forked), 12);
        let s = board.snapshot(100);
        let rounds = s["rounds"].as_array().cloned().unwrap_or_default();
        assert_eq!(rounds.len(), 1, "{rounds:?}");
        assert_eq!((rounds[0]["round"].clone(), rounds[0]["committers"].clone()), (json!(0), json!(2)));
        assert_eq!(board.latest_commit(), Some((0, s0, vec![keys[0].public(), keys[1].public()])));
    }

    #[test]
    fn silent_nodes_are_drawn_gone_and_lists_stay_bounded() {
        let spec = run_spec(&RunParams::default()).expect("spec");
        let mut board = Board::new(spec.clone(), None, name);
        let a = NodeKey::from_seed([1; 32]);
        board.on_telemetry(telemetry(&a, &spec, 0, Some(5.0), 0), 0);
        assert_eq!(board.snapshot(ALIVE_MS + 1)["nodes"][0]["alive"], false);
        for r in 0..(MAX_ROUNDS as u64 + 50) {
            board.note_commit(r, StateId([(r % 250) as u8; 32]), StateId([0; 32]), a.public(), r);
            board.on_telemetry(telemetry(&a, &spec, r + 1, Some(4.0), r), r);
        }
        assert!(board.rounds.len() <= MAX_ROUNDS);
        assert!(board.nodes.values().all(|n| n.history.len() <= MAX_ROUNDS));
        for i in 0..(MAX_NODES + 10) {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(i as u64 + 100).to_le_bytes());
            let k = NodeKey::from_seed(seed);
            board.on_telemetry(telemetry(&k, &spec, 1, None, 0), 1000 + i as u64);
        }
        assert_eq!(board.nodes.len(), MAX_NODES);
        assert!(board.events.len() <= MAX_EVENTS);
        assert_eq!(board.snapshot(2000)["rounds"].as_array().map(Vec::len), Some(TIMELINE_ROUNDS));
    }
}
