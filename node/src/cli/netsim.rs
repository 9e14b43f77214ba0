//! `murmur netsim`: run the round of N nodes over a
//! simulated network and print per-round traffic, agreement, exclusions and
//! validation loss (a table, or `--json`).

use anyhow::{bail, Result};
use clap::Args;
use murmur_protocol::committee::machine::DEFAULT_AUDITS;
use murmur_protocol::{Codec, OuterOptimizer, RobustMode};

use crate::netsim::{run as simulate, Adversaries, NetsimConfig, NetsimReport, Workload};

/// Settings of `murmur netsim`.
#[derive(Args, Debug)]
pub struct NetsimArgs {
    /// Nodes in the network.
    #[arg(long, default_value_t = 32)]
    pub nodes: usize,
    /// Committee size k (1: one owner per shard, with backups).
    #[arg(long, default_value_t = 1)]
    pub k: u32,
    #[arg(long, default_value_t = 3)]
    pub rounds: u64,
    /// Parameters of the model (or of the drawn deltas).
    #[arg(long, default_value_t = 1 << 20)]
    pub params: usize,
    /// `linear` (a regression that trains) or `drawn` (traffic only).
    #[arg(long, default_value = "drawn")]
    pub workload: String,
    /// Inner SGD learning rate of the linear workload (samples have norm ≈ 1).
    #[arg(long, default_value_t = 4.0)]
    pub lr: f32,
    /// Delta codec, as `murmur sim` takes it.
    #[arg(long, default_value = "int8")]
    pub codec: String,
    /// Norm filter multiple (the run's robust mode).
    #[arg(long, default_value_t = 3.0)]
    pub norm_filter: f32,
    #[arg(long, default_value_t = 50.0)]
    pub up_mbps: f64,
    #[arg(long, default_value_t = 200.0)]
    pub down_mbps: f64,
    #[arg(long, default_value_t = 40)]
    pub latency_ms: u64,
    /// Virtual training time of a round.
    #[arg(long, default_value_t = 10_000)]
    pub train_ms: u64,
    /// Round opening to input deadline.
    #[arg(long, default_value_t = 60_000)]
    pub input_ms: u64,
    #[arg(long, default_value_t = 20_000)]
    pub result_ms: u64,
    #[arg(long, default_value_t = 10_000)]
    pub grace_ms: u64,
    /// Random shards each node audits per round (by a sketch of their
    /// inputs' projections under the linear robust modes, else by
    /// recomputing them).
    #[arg(long, default_value_t = DEFAULT_AUDITS)]
    pub audits: u32,
    /// Copies of each gossip message a node sends and receives (the
    /// node's gossipsub mesh degree unless set).
    #[arg(long, default_value_t = crate::net::behaviour::MESH_DEGREE as u32)]
    pub gossip_degree: u32,
    #[arg(long, default_value_t = 0)]
    pub poisoners: usize,
    #[arg(long, default_value_t = 0)]
    pub liars: usize,
    #[arg(long, default_value_t = 0)]
    pub withholders: usize,
    #[arg(long, default_value_t = 0)]
    pub equivocators: usize,
    /// Chance an honest node sits a round out.
    #[arg(long, default_value_t = 0.0)]
    pub churn: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the whole report as JSON.
    #[arg(long)]
    pub json: bool,
}

impl NetsimArgs {
    pub fn config(&self) -> Result<NetsimConfig> {
        let workload = match self.workload.as_str() {
            "linear" => Workload::Linear { inner_steps: 8, batch: 16, lr: self.lr },
            "drawn" => Workload::Drawn { sigma: 1e-3 },
            w => bail!("--workload {w}: expected linear or drawn"),
        };
        if !(0.0..=1.0).contains(&self.churn) {
            bail!("--churn {}: expected a probability in 0..=1", self.churn);
        }
        Ok(NetsimConfig {
            nodes: self.nodes,
            k: self.k,
            rounds: self.rounds,
            params: self.params,
            codec: self.codec.parse::<Codec>()?,
            robust: RobustMode::NormFilter { multiple: self.norm_filter },
            outer: OuterOptimizer::DILOCO,
            workload,
            up_mbps: self.up_mbps,
            down_mbps: self.down_mbps,
            latency_ms: self.latency_ms,
            train_ms: self.train_ms,
            input_ms: self.input_ms,
            result_ms: self.result_ms,
            grace_ms: self.grace_ms,
            audits: self.audits,
            gossip_degree: self.gossip_degree,
            adversaries: Adversaries {
                poisoners: self.poisoners,
                liars: self.liars,
                withholders: self.withholders,
                equivocators: self.equivocators,
            },
            churn: self.churn,
            seed: self.seed,
        })
    }
}

pub fn run(a: NetsimArgs) -> Result<()> {
    let report = simulate(a.config()?)?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn mb(b: f64) -> f64 {
    b / 1e6
}

/// The human-readable report.
pub fn print_table(r: &NetsimReport) {
    println!(
        "netsim: {} nodes, k = {}, {} shards, {} parameters, delta {:.2} MB",
        r.nodes,
        r.k,
        r.shards,
        r.params,
        mb(r.delta_bytes as f64)
    );
    println!(
        "round  max MB/node  mean MB/node  v1 MB/node  round s  states  applied  caught up  excluded  val loss"
    );
    let mut kinds = [0f64; 5];
    for x in &r.rounds {
        println!(
            "{:>5}  {:>11.2}  {:>12.2}  {:>10.2}  {:>7.1}  {:>6}  {:>7}  {:>9}  {:>8}  {}",
            x.round,
            mb(x.max_bytes as f64),
            mb(x.mean_bytes),
            mb(x.v1_bytes as f64),
            x.max_round_ms as f64 / 1000.0,
            x.honest_states,
            x.honest_applied,
            x.honest_caught_up,
            x.excluded,
            x.val_loss.map_or("-".into(), |v| format!("{v:.5}"))
        );
        for (k, b) in kinds.iter_mut().zip(x.mean_by_kind) {
            *k += b / r.rounds.len() as f64;
        }
    }
    println!(
        "mean MB/node/round by kind: shards {:.2}, aggregates {:.2}, gossip {:.2}, checks {:.2}, states {:.2}",
        mb(kinds[0]),
        mb(kinds[1]),
        mb(kinds[2]),
        mb(kinds[3]),
        mb(kinds[4])
    );
    for o in &r.offenders {
        println!(
            "offender {:>4} {:<12} first offence {:>5}  excluded from round {}",
            o.node,
            o.kind,
            o.first_offence.map_or("-".into(), |r| r.to_string()),
            o.excluded_from.map_or("-".into(), |r| r.to_string())
        );
    }
}
