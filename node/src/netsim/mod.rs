//! `murmur netsim`: N round machines (`murmur_protocol::committee`)
//! with the real codecs, per-shard aggregation and outer step, over a
//! simulated network with per-node bandwidth and latency in virtual time
//! (`transport`), training a model that really trains or, for traffic-only
//! runs, drawn deltas (`workload`). Adversaries poison deltas, lie as
//! aggregators, withhold results or equivocate; honest nodes may churn.
//! The report gives per node per round the bytes up and down and the
//! virtual round time, and per round the StateId agreement among honest
//! nodes, the exclusions and the validation loss, beside version 1's bytes
//! for the same N (`v1_bytes`: everyone fetches every delta).

mod driver;
pub mod transport;
pub mod wire;
pub mod workload;

use murmur_protocol::committee::ShardRule;
use murmur_protocol::{Codec, OuterOptimizer, RobustMode};
use serde::Serialize;

pub use driver::run;

/// What the nodes train.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Workload {
    /// A linear regression of `params` weights, H SGD steps a round.
    Linear { inner_steps: usize, batch: usize, lr: f32 },
    /// Deltas drawn from N(0, σ²): traffic and agreement only.
    Drawn { sigma: f32 },
}

/// How many nodes of each adversary kind (honest nodes come first).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Adversaries {
    /// Send deltas scaled by −50.
    pub poisoners: usize,
    /// Sign and serve a wrong aggregate for their shard.
    pub liars: usize,
    /// Never publish or serve an aggregate.
    pub withholders: usize,
    /// Sign two different manifests each round.
    pub equivocators: usize,
}

impl Adversaries {
    pub fn total(&self) -> usize {
        self.poisoners + self.liars + self.withholders + self.equivocators
    }
}

#[derive(Debug, Clone)]
pub struct NetsimConfig {
    pub nodes: usize,
    pub k: u32,
    pub rounds: u64,
    pub params: usize,
    pub codec: Codec,
    pub robust: RobustMode,
    pub outer: OuterOptimizer,
    pub workload: Workload,
    pub up_mbps: f64,
    pub down_mbps: f64,
    pub latency_ms: u64,
    /// Virtual training time of a round.
    pub train_ms: u64,
    pub input_ms: u64,
    pub result_ms: u64,
    pub grace_ms: u64,
    pub audits: u32,
    pub gossip_degree: u32,
    pub adversaries: Adversaries,
    /// Chance that an honest node sits out a round (offline), per round.
    pub churn: f64,
    pub seed: u64,
}

impl NetsimConfig {
    /// How a shard's inputs combine: the robust mode, in fixed-H rounds
    /// (netsim trains no time budget).
    pub fn rule(&self) -> ShardRule {
        ShardRule::as_trained(self.robust)
    }
}

/// One node's figures for one round.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRound {
    pub node: usize,
    pub up: u64,
    pub down: u64,
    /// Virtual ms from the round's opening to its state applied.
    pub round_ms: Option<u64>,
}

/// One round's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RoundReport {
    pub round: u64,
    /// Largest up + down of any node.
    pub max_bytes: u64,
    pub mean_bytes: f64,
    /// Mean up + down per node by what it was for: shards, aggregates,
    /// gossip, checks (re-checks and proof verification), states (re-syncs).
    pub mean_by_kind: [f64; 5],
    /// Version 1's per-node up + down for the same N (formula in docs).
    pub v1_bytes: u64,
    /// Longest virtual round time of an honest node.
    pub max_round_ms: u64,
    /// Distinct StateIds the honest nodes ended the round on (after any
    /// catch-up), and how many of them ended it.
    pub honest_states: usize,
    pub honest_applied: usize,
    /// Honest nodes that ended the round on a state they caught up with
    /// (a majority of commits named it, and they fetched it whole).
    pub honest_caught_up: usize,
    /// Keys excluded by the ledger of the most common honest state.
    pub excluded: usize,
    pub val_loss: Option<f64>,
    pub nodes: Vec<NodeRound>,
}

/// When each adversary lied first and when the ledger excluded it.
#[derive(Debug, Clone, Serialize)]
pub struct Offender {
    pub node: usize,
    pub kind: &'static str,
    pub first_offence: Option<u64>,
    /// First round whose opening ledger excludes it.
    pub excluded_from: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NetsimReport {
    pub nodes: usize,
    pub k: u32,
    pub shards: u32,
    pub params: usize,
    pub delta_bytes: u64,
    pub rounds: Vec<RoundReport>,
    pub offenders: Vec<Offender>,
}

/// Version 1's bytes per node per round: every node fetches the N − 1 other
/// deltas (as blobs, `wire::blob`) and serves, on average, as many; plus
/// its gossip, D copies of a manifest (239 bytes) and a commit (206 + 32·N
/// bytes: it lists every included delta) from each node.
pub fn v1_bytes(n: usize, delta_bytes: u64, gossip_degree: u32) -> u64 {
    let (n64, d) = (n as u64, u64::from(gossip_degree));
    let others = n64.saturating_sub(1);
    let gossip = wire::gossip(239) + wire::gossip(206 + 32 * n);
    2 * others * wire::blob(delta_bytes) + 2 * d * n64 * gossip
}

#[cfg(test)]
mod tests;
