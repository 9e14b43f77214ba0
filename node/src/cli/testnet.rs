//! `murmur testnet`: a local network on this machine — bootstrap server, N
//! nodes and the dashboard — with one progress line per round (the README's
//! first command runs it through `scripts/testnet.sh`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::testnet::links::HomeLinks;
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
    /// Seconds after a round opens at which owners aggregate the shards
    /// they have, if some roster member's is still missing.
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
    /// Training data: a built-in dataset (`shakespeare`, or
    /// `shakespeare-bpe` in a BPE of 4,096 tokens trained on it), a dataset
    /// directory (`murmur data add`), each hosted by the bootstrap server and
    /// fetched by the nodes, or `synthetic[:options]` (known entropy floor).
    /// Default: `shakespeare-bpe` for the Llama presets, else `shakespeare`.
    #[arg(long)]
    pub data: Option<String>,
    /// Owners per shard (docs/protocol.md §10): 1, the default, gives each
    /// shard one owner with backups; k > 1 has committees of k nodes
    /// aggregate one shard each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub committee_size: u32,
    /// Overlapped rounds: nodes train round r + 1 while round r is exchanged
    /// (docs/protocol.md §6.3).
    #[arg(long)]
    pub overlap: bool,
    /// Seconds of inner training per round, at most H steps (0: exactly H
    /// steps; docs/protocol.md §6.4).
    #[arg(long, default_value_t = 0.0)]
    pub inner_budget: f64,
    /// Nodes evaluate the validation loss after every N-th round (0: never;
    /// an evaluation is trainer time not spent in inner steps).
    #[arg(long, default_value_t = 1)]
    pub eval_every: u64,
    /// `K:V`: the last K nodes compute at speed V (0 < V < 1), e.g. `1:0.25`.
    #[arg(long, value_name = "K:V", value_parser = parse_slow)]
    pub slow: Option<(usize, f64)>,
    /// `UP:DOWN:RTT`: run every process in its own network namespace, each
    /// node behind a link of UP Mbit/s up, DOWN Mbit/s down and RTT ms round
    /// trip (e.g. 20:50:40). Needs root; no dashboard.
    #[arg(long, value_name = "UP:DOWN:RTT")]
    pub home_links: Option<HomeLinks>,
    /// The bootstrap server archives every R-th committed state as an
    /// export under <dir>/data/checkpoints (`murmur-bootstrap --checkpoint-every`).
    #[arg(long, value_name = "R")]
    pub checkpoint_every: Option<u64>,
    /// With --checkpoint-every: exports kept.
    #[arg(long, default_value_t = 3)]
    pub keep: usize,
    /// Ticket admission: the bootstrap server admits by ticket, and an
    /// operator key (written to <dir>/data/operator.key) signs one for each node.
    #[arg(long)]
    pub tickets: bool,
}

/// `--slow K:V`.
fn parse_slow(s: &str) -> Result<(usize, f64), String> {
    let bad = || format!("`{s}` is not K:V (K nodes at speed V, 0 < V < 1), e.g. 1:0.25");
    let (k, v) = s.split_once(':').ok_or_else(bad)?;
    let (k, v) = (k.parse::<usize>().map_err(|_| bad())?, v.parse::<f64>().map_err(|_| bad())?);
    if !(v > 0.0 && v < 1.0) {
        return Err(bad());
    }
    Ok((k, v))
}

pub fn run(a: TestnetArgs) -> Result<()> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let opts = TestnetOptions {
        nodes: a.nodes,
        preset: a.preset.clone(),
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
        data: a.data.unwrap_or_else(|| {
            let bpe = a.preset.starts_with("llama");
            (if bpe { "shakespeare-bpe" } else { "shakespeare" }).to_string()
        }),
        overlap: a.overlap,
        inner_budget: a.inner_budget,
        eval_every: a.eval_every,
        slow: a.slow,
        links: a.home_links,
        archive: a.checkpoint_every.map(|every| (every, a.keep)),
        tickets: a.tickets,
    };
    if let Some((k, _)) = opts.slow {
        if k > opts.nodes {
            anyhow::bail!("--slow names {k} nodes of {}", opts.nodes);
        }
    }
    if run_testnet(opts)? {
        Ok(())
    } else {
        anyhow::bail!("the surviving nodes did not agree on one StateId")
    }
}
