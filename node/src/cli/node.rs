//! `murmur node`: join a run (or start one) and train with the network.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use libp2p::Multiaddr;

use crate::cli::device::{choose, DeviceArg, PrecisionArg};
use crate::runtime::dataset::DatasetOptions;
use crate::runtime::spec::{run_spec, RunParams};
use crate::runtime::{run_node, NodeOptions};

/// Settings of `murmur node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// Bootstrap server address, ending in /p2p/<peer id> (repeatable).
    #[arg(long, env = "MURMUR_BOOTSTRAP")]
    pub bootstrap: Vec<Multiaddr>,
    /// Directory for the key, the store and metadata.
    #[arg(long, env = "MURMUR_DATA_DIR", default_value = "murmur-data")]
    pub data_dir: PathBuf,
    /// Listen addresses (repeatable). Default: all interfaces, TCP and QUIC, random ports.
    #[arg(long, env = "MURMUR_LISTEN")]
    pub listen: Vec<Multiaddr>,
    /// Accept no inbound connections: only dial out, and listen through a
    /// relay circuit at the bootstrap server (for nodes behind NAT).
    #[arg(long)]
    pub private: bool,
    /// Do not discover peers on the local network with mDNS.
    #[arg(long)]
    pub no_mdns: bool,
    /// Seconds to wait for the first peers before the round loop starts.
    #[arg(long, default_value_t = 4.0)]
    pub discovery_wait: f64,
    /// Inner steps per round when starting a run without a bootstrap server.
    #[arg(long)]
    pub inner_steps: Option<u32>,
    /// Compute backend for the inner steps.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto, env = "MURMUR_DEVICE")]
    pub device: DeviceArg,
    /// Serve Prometheus metrics over HTTP at this address (e.g.
    /// 127.0.0.1:9100; port 0 picks a free port, printed at start). Off by default.
    #[arg(long, env = "MURMUR_METRICS")]
    pub metrics: Option<std::net::SocketAddr>,
    /// A local copy of the run's dataset: a directory from `murmur data add`
    /// or a built-in name (`shakespeare`). It must hash to the run's
    /// DatasetId; without it the node fetches the shards it needs from peers.
    /// Without --bootstrap, the run the node starts trains on it.
    #[arg(long, env = "MURMUR_DATASET")]
    pub dataset: Option<String>,
    /// Most bytes of dataset shards to keep (suffixes K, M, G; least recently
    /// used shards not needed by the current round are evicted).
    #[arg(long, default_value = "4G", value_parser = parse_bytes)]
    pub data_cache: u64,
    /// GEMM input precision of the inner steps: bf16 (CPU backend) or f16
    /// (wgpu backend) keep fp32 sums, master weights and optimizer state;
    /// deltas and states stay fp32.
    #[arg(long, value_enum, default_value = "fp32", env = "MURMUR_PRECISION")]
    pub precision: PrecisionArg,
    /// This node's admission ticket (a file from `murmur ticket issue`), for
    /// runs that admit by ticket; peers count nothing this node signs
    /// without one (operators need none).
    #[arg(long, env = "MURMUR_TICKET")]
    pub ticket: Option<PathBuf>,
    /// Evaluate the validation loss after every N-th round (0: never). An
    /// evaluation runs on the trainer between rounds, so it is time not
    /// spent in inner steps.
    #[arg(long, default_value_t = 1, env = "MURMUR_EVAL_EVERY")]
    pub eval_every: u64,
    /// Activation checkpointing (Llama presets): keep each block's input
    /// only and recompute the block in the backward, for a fraction of the
    /// activation memory at the cost of one more forward pass. The node
    /// checks before it trains that the run's shape fits the memory free.
    #[arg(long, env = "MURMUR_CHECKPOINTING")]
    pub checkpointing: bool,
    /// Most peers that may be connected in from one IP address (peers the
    /// run names — its bootstrap servers, operators, admitted keys — are
    /// not counted).
    #[arg(long, default_value_t = crate::net::slots::MAX_PER_IP)]
    pub max_peers_per_ip: u32,
    /// Print one JSON object per line.
    #[arg(long)]
    pub json: bool,
}

/// A byte count with an optional K/M/G (binary) suffix.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("`{s}` is not a byte count (e.g. 500M, 4G, 1048576)"))
}

pub fn run(a: NodeArgs) -> Result<()> {
    super::init_logs();
    let listen = if a.listen.is_empty() {
        vec!["/ip4/0.0.0.0/tcp/0".parse()?, "/ip4/0.0.0.0/udp/0/quic-v1".parse()?]
    } else {
        a.listen
    };
    let spec = if a.bootstrap.is_empty() {
        let mut p = RunParams::default();
        if let Some(h) = a.inner_steps {
            p.inner_steps = h;
        }
        // Starting a run alone: it trains on the --dataset given, if any.
        if let Some(arg) = &a.dataset {
            let local = crate::data::dataset::LocalDataset::open(arg)
                .map_err(|e| anyhow::anyhow!("--dataset: {e}"))?;
            p.data = local.data_ref();
        }
        Some(run_spec(&p)?)
    } else {
        None
    };
    let opts = NodeOptions {
        bootstrap: a.bootstrap,
        data_dir: a.data_dir,
        listen,
        private: a.private,
        mdns: !a.no_mdns,
        json: a.json,
        spec,
        discovery_wait: Duration::from_secs_f64(a.discovery_wait.clamp(0.0, 600.0)),
        device: choose(a.device, a.precision)?,
        metrics: a.metrics,
        dataset: DatasetOptions { local: a.dataset, cache_bytes: a.data_cache },
        ticket: a.ticket,
        eval_every: a.eval_every,
        checkpointing: a.checkpointing,
        max_peers_per_ip: a.max_peers_per_ip,
    };
    super::run_until_ctrl_c(run_node(opts))
}
