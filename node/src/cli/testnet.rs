//! `murmur testnet`: a local network on this machine — bootstrap server, N
//! nodes and the dashboard — with one progress line per round (the README's
//! first command runs it through `scripts/testnet.sh`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::testnet::{run_testnet, TestnetOptions};

/// Settings of `murmur testnet`.
#[derive(Args, Debug)]
pub struct TestnetArgs {
    /// Training nodes.
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
    /// Model preset.
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// Inner steps H per round.
    #[arg(long, default_value_t = 30)]
    pub inner_steps: u32,
    /// Sequences per inner step.
    #[arg(long, default_value_t = 8)]
    pub batch: u32,
    /// Seconds after which a round closes with a quorum.
    #[arg(long, default_value_t = 60)]
    pub deadline: u32,
    /// SIGKILL a random node every few rounds and restart it.
    #[arg(long)]
    pub chaos: bool,
    /// Rounds between chaos kills.
    #[arg(long, default_value_t = 2)]
    pub chaos_every: u64,
    /// Fraction of the nodes each chaos kill takes down at once (at least
    /// one; e.g. 0.25 kills a quarter of them).
    #[arg(long, default_value_t = 0.0)]
    pub chaos_fraction: f64,
    /// Start this many of the nodes late, once `--join-at` rounds have closed.
    #[arg(long, default_value_t = 0)]
    pub join_late: usize,
    /// The round after which late nodes join.
    #[arg(long, default_value_t = 3)]
    pub join_at: u64,
    /// Stop after this many rounds and check that the nodes agree (default: run until Ctrl-C).
    #[arg(long)]
    pub rounds: Option<u64>,
    /// Directory for the logs and the nodes' data (emptied at start).
    #[arg(long, default_value = "target/testnet")]
    pub dir: PathBuf,
    /// Where the dashboard serves its page (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub http: String,
    /// CPU threads per node (default: this machine's cores shared among the nodes).
    #[arg(long)]
    pub threads_per_node: Option<usize>,
    /// Run seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Training data: a built-in dataset (`shakespeare`, hosted by the
    /// bootstrap server and fetched by the nodes) or `synthetic[:options]`
    /// (known entropy floor).
    #[arg(long, default_value = "shakespeare")]
    pub data: String,
    /// Protocol v2: committees of this many nodes aggregate one shard each
    /// (docs/protocol.md §10); 0 runs version 1's round.
    #[arg(long, default_value_t = 0)]
    pub committee_size: u32,
}

pub fn run(a: TestnetArgs) -> Result<()> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let opts = TestnetOptions {
        nodes: a.nodes,
        preset: a.preset,
        inner_steps: a.inner_steps,
        batch: a.batch,
        deadline: a.deadline,
        committee_size: a.committee_size,
        chaos: a.chaos,
        chaos_every: a.chaos_every.max(1),
        chaos_fraction: if a.chaos_fraction.is_finite() { a.chaos_fraction.clamp(0.0, 1.0) } else { 0.0 },
        join_late: a.join_late,
        join_at: a.join_at,
        rounds: a.rounds,
        dir: a.dir,
        http: a.http,
        threads_per_node: a.threads_per_node.unwrap_or((cores / a.nodes.max(1)).max(1)),
        seed: a.seed,
        data: a.data,
    };
    if run_testnet(opts)? {
        Ok(())
    } else {
        anyhow::bail!("the surviving nodes did not agree on one StateId")
    }
}
