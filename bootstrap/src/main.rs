//! murmur-bootstrap: the bootstrap server. It keeps a persistent identity,
//! serves the DHT (Kademlia server), relays for nodes behind NAT (relay
//! server, AutoNAT), hosts a run — its RunSpec, genesis state and dataset — so that
//! `murmur node --bootstrap <multiaddr>` is all a volunteer needs, relays
//! the run's gossip, and exposes metrics.
//!
//! Each listen address is printed on its own stdout line, ending in
//! `/p2p/<peer id>`, once listening.

mod metrics;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use libp2p::Multiaddr;
use murmur_node::checkpoint::run_export::{load_model, ExportMeta};
use murmur_node::data::dataset::{built_in, LocalDataset};
use murmur_node::data::hf_tokenizer::ExportTokenizer;
use murmur_node::model::ModelConfig;
use murmur_node::net::GossipMessage;
use murmur_node::net::{self, NetConfig, NetEvent, Role};
use murmur_node::runtime::archive::{fetch_settled, Archive, ArchiveOptions, Follower, Settled};
use murmur_node::runtime::dataset::import_local;
use murmur_node::runtime::server::{ServedStatus, StoreServer};
use murmur_node::runtime::spec::{genesis, genesis_with, parse_admission, run_spec, RunParams};
use murmur_node::runtime::tickets::parse_public_key;
use murmur_node::store::{keyfile, BlobKind, Store};
use murmur_protocol::Codec;

/// murmur bootstrap server.
#[derive(Parser, Debug)]
#[command(name = "murmur-bootstrap", version, about)]
struct Args {
    /// Listen addresses (repeatable). Default: TCP and QUIC on port 4001, all interfaces.
    #[arg(long, env = "MURMUR_BOOTSTRAP_LISTEN")]
    listen: Vec<Multiaddr>,
    /// Directory for the key file and the genesis state.
    #[arg(long, env = "MURMUR_BOOTSTRAP_DATA_DIR", default_value = "murmur-bootstrap-data")]
    data_dir: PathBuf,
    /// Key file (32-byte ed25519 seed, created with mode 0600). Default: <data-dir>/bootstrap.key.
    #[arg(long)]
    key: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP at this address (e.g. 127.0.0.1:9100;
    /// port 0 picks a free port, printed on stderr at start). Off by default.
    #[arg(long, env = "MURMUR_BOOTSTRAP_METRICS")]
    metrics: Option<std::net::SocketAddr>,
    /// Do not use mDNS on the local network.
    #[arg(long)]
    no_mdns: bool,
    /// Model preset of the hosted run.
    #[arg(long, default_value = "tiny")]
    preset: String,
    /// Training data of the hosted run: `synthetic[:options]`, a built-in
    /// dataset name (`shakespeare`), or `dataset:<id>:<manifest bytes>`
    /// (hosted by other peers). Use --dataset to host a local dataset.
    #[arg(long, default_value = "synthetic")]
    data: String,
    /// Host this dataset and train the run on it: a directory written by
    /// `murmur data add`, or a built-in name (`shakespeare`). Overrides --data.
    #[arg(long)]
    dataset: Option<String>,
    /// Inner steps H per round.
    #[arg(long, default_value_t = 100)]
    inner_steps: u32,
    /// Sequences per inner step.
    #[arg(long, default_value_t = 8)]
    batch: u32,
    /// Inner learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    /// Fewest signers a reader of the run (export, the archive) needs
    /// behind a state before it takes it.
    #[arg(long, default_value_t = 1)]
    quorum: u32,
    /// Seconds after a round opens at which owners aggregate the shards
    /// they have, if some roster member's is still missing.
    #[arg(long, default_value_t = 120)]
    deadline: u32,
    /// Owners per shard (docs/protocol.md §10): 1, the default, gives each
    /// shard one owner with backups; k > 1 has committees of k nodes
    /// aggregate one shard each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    committee_size: u32,
    /// Overlapped rounds: each node trains round r + 1 while round r is
    /// exchanged, from round r's state carried by its outer momentum; the
    /// next state lands in the running job (docs/protocol.md §6.3).
    #[arg(long)]
    overlap: bool,
    /// Time-budgeted rounds: each node trains for this many seconds a round
    /// (at most --inner-steps steps) and deltas are normalised by their
    /// steps (docs/protocol.md §6.4); must be shorter than --deadline.
    /// 0: every node trains exactly --inner-steps steps.
    #[arg(long, default_value_t = 0.0)]
    inner_budget: f64,
    /// Delta codec: f32, f16, bf16, int8[-b<block>], int4[-b<block>], topk[-<n>ppm][-b<block>]
    /// or topkmask[-<n>ppm][-b<block>].
    #[arg(long, default_value = "int8-b256")]
    codec: String,
    /// How deltas are combined: mean, median, norm-clip[:x], trimmed-mean[:x] or
    /// norm-filter[:x] (leave out deltas whose norm exceeds x times the median; x = 3).
    /// New runs are defended by default (norm-filter); `mean` turns it off.
    #[arg(long, default_value = "norm-filter")]
    robust: String,
    /// Run seed (genesis parameters and data streams).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Who may take part: `open` (anyone) or `tickets` (the operators and the
    /// holders of tickets they sign with `murmur ticket issue`).
    #[arg(long, default_value = "open")]
    admission: String,
    /// An operator's public key (64 hex characters) or peer id (repeatable,
    /// at most 64). In a ticket run operators sign tickets; in an open run
    /// with operators only their signed results decide which state readers
    /// of the run (export, the archive) take.
    #[arg(long)]
    operator: Vec<String>,
    /// Start the run from this model instead of random parameters: a
    /// directory written by `murmur export` (or any Hugging Face GPT-2
    /// directory) or a `.murmur` checkpoint. Its shape must be --preset's.
    #[arg(long)]
    init_from: Option<PathBuf>,
    /// Keep an archive of the run here: every --checkpoint-every-th
    /// committed state, once the run's signed results back it, written as an export (`round-<N>/`, as `murmur
    /// export` writes), the newest --keep of them kept.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// With --checkpoint-dir: archive the state of every R-th round.
    #[arg(long, default_value_t = 10, requires = "checkpoint_dir")]
    checkpoint_every: u64,
    /// With --checkpoint-dir: how many exports to keep.
    #[arg(long, default_value_t = 3, requires = "checkpoint_dir")]
    keep: usize,
    /// Most peers that may be connected in from one IP address (the run's
    /// operators and admitted keys are not counted).
    #[arg(long, default_value_t = murmur_node::net::slots::MAX_PER_IP)]
    max_peers_per_ip: u32,
}

/// The parameters of the model at `path`, flat, if its shape is `preset`'s
/// (with vocabulary `vocab` when the hosted dataset brings its own tokenizer).
fn model_params(path: &std::path::Path, preset: &str, vocab: Option<u32>) -> Result<Vec<f32>> {
    let (cfg, tensors) = load_model(path).map_err(|e| anyhow::anyhow!("--init-from: {e}"))?;
    let mut want = ModelConfig::preset(preset).map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    if let Some(v) = vocab {
        want = want.with_vocab(v as usize).map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
    }
    if cfg != want {
        let shape = |c: &ModelConfig| {
            format!(
                "{} layers, {} heads, width {}, vocabulary {}, context {}",
                c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.max_seq_len
            )
        };
        anyhow::bail!(
            "--init-from: {} is a model of {}, and preset `{preset}` is one of {}; pass the --preset it was trained as",
            path.display(),
            shape(&cfg),
            shape(&want)
        );
    }
    Ok(tensors.into_iter().flatten().collect())
}

/// Fetch the state a settled round backs from its committers and archive
/// it (on a task; failures are logged and the next due round tried).
fn archive_state(net: net::NetHandle, archive: Arc<Archive>, spec: murmur_protocol::RunSpec, s: Settled) {
    tokio::spawn(async move {
        let state = match fetch_settled(&net, &spec, &s).await {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!("archive: fetching state {} of round {}: {e}", s.state, s.round);
                return;
            }
        };
        let written = tokio::task::spawn_blocking(move || {
            let meta = ExportMeta {
                tokens_seen: s.tokens_seen,
                tokens_from_round: s.tokens_from_round,
                ..ExportMeta::of(&spec, &state)
            };
            archive.write(&state, &meta)
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        match written {
            Ok(path) => eprintln!("murmur-bootstrap: archived round {} to {}", s.round, path.display()),
            Err(e) => tracing::warn!("archive: round {}: {e}", s.round),
        }
    });
}

/// `--inner-budget` seconds as the spec's milliseconds.
fn budget_ms(secs: f64) -> Result<u32> {
    if !(0.0..=86_400.0).contains(&secs) {
        anyhow::bail!("--inner-budget takes seconds from 0 to 86400 (got {secs})");
    }
    Ok((secs * 1000.0).round() as u32)
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let codec: Codec = a.codec.parse().map_err(|e| anyhow::anyhow!("--codec: {e}"))?;
    let hosted = match (&a.dataset, built_in(&a.data)) {
        (Some(arg), _) => Some(LocalDataset::open(arg).map_err(|e| anyhow::anyhow!("--dataset: {e}"))?),
        (None, Some(_)) => Some(LocalDataset::open(&a.data).map_err(|e| anyhow::anyhow!("--data: {e}"))?),
        (None, None) => None,
    };
    let data = hosted.as_ref().map_or_else(|| a.data.clone(), LocalDataset::data_ref);
    let operators = a
        .operator
        .iter()
        .map(|k| parse_public_key(k).map_err(|e| anyhow::anyhow!("--operator: {e}")))
        .collect::<Result<Vec<_>>>()?;
    // A dataset's own tokenizer sets the model's vocabulary.
    let vocab = hosted.as_ref().and_then(|d| match d.manifest().tokenizer {
        murmur_protocol::DatasetTokenizer::Bpe { vocab, .. } => Some(vocab),
        _ => None,
    });
    let init = a.init_from.as_deref().map(|p| model_params(p, &a.preset, vocab)).transpose()?;
    let params = RunParams {
        genesis_params: init.as_deref().map(murmur_protocol::params_id),
        preset: a.preset.clone(),
        data,
        inner_steps: a.inner_steps,
        batch_size: a.batch,
        lr: a.lr,
        warmup_steps: RunParams::default().warmup_steps,
        quorum: a.quorum,
        round_deadline_secs: a.deadline,
        codec,
        robust: murmur_node::runtime::spec::parse_robust(&a.robust)
            .map_err(|e| anyhow::anyhow!("--robust: {e}"))?,
        admission: parse_admission(&a.admission, &operators)
            .map_err(|e| anyhow::anyhow!("--admission: {e}"))?,
        seed: a.seed,
        committee_size: a.committee_size,
        pacing: murmur_protocol::Pacing {
            overlapped: a.overlap,
            inner_budget_ms: budget_ms(a.inner_budget)?,
        },
        vocab,
    };
    let spec = run_spec(&params)?;
    spec.validate().context(
        "the run spec is invalid (to train on local files, make a dataset with `murmur data add` and host it with --dataset DIR)",
    )?;
    let store = Arc::new(Store::open(&a.data_dir)?);
    if let Some(local) = &hosted {
        import_local(&store, local, None)?;
        eprintln!(
            "murmur-bootstrap: hosting dataset {} ({} tokenizer, {} bytes of shards)",
            local.id(),
            local.manifest().tokenizer.name(),
            local.manifest().total_bytes()
        );
    }
    let key = keyfile::load_or_create(&a.key.clone().unwrap_or_else(|| a.data_dir.join("bootstrap.key")))?;
    let g = match init {
        Some(params) => genesis_with(&spec, params)?,
        None => genesis(&spec)?,
    };
    let genesis_id = store.blobs.put(BlobKind::State, &g.encode())?;
    let archive = match &a.checkpoint_dir {
        Some(dir) => {
            let opts = ArchiveOptions { dir: dir.clone(), every: a.checkpoint_every, keep: a.keep };
            let vocab = murmur_node::runtime::spec::model_config(&spec)?.vocab_size;
            let tokenizer = match &hosted {
                Some(d) => Some(ExportTokenizer::of_dataset(d.manifest().tokenizer, d.tokenizer_json())?),
                None => ExportTokenizer::for_vocabulary(vocab),
            };
            Some(Arc::new(Archive::new(opts, &spec, tokenizer)?))
        }
        None => None,
    };
    let server = Arc::new(StoreServer::new(store, spec.encode(), false));
    server.set_status(ServedStatus { round: 0, state: Some(genesis_id) });
    let listen = if a.listen.is_empty() {
        vec!["/ip4/0.0.0.0/tcp/4001".parse()?, "/ip4/0.0.0.0/udp/4001/quic-v1".parse()?]
    } else {
        a.listen.clone()
    };
    eprintln!(
        "murmur-bootstrap: hosting run {} ({} preset, {} parameters, genesis {}{}, admission {})",
        spec.run_id(),
        spec.model.preset,
        spec.model.param_count,
        murmur_protocol::hash::hex(&genesis_id),
        a.init_from.as_ref().map_or_else(String::new, |p| format!(" from {}", p.display())),
        match &spec.admission {
            murmur_protocol::AdmissionPolicy::Tickets { operators } =>
                format!("by ticket of {} operator(s)", operators.len()),
            murmur_protocol::AdmissionPolicy::OpenWithOperators { operators } =>
                format!("open, {} operator(s) decide", operators.len()),
            _ => "open".into(),
        }
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let mut cfg = NetConfig::new(key, spec.run_id(), Role::Bootstrap);
        cfg.max_per_ip = a.max_peers_per_ip;
        cfg.listen = listen;
        cfg.mdns = !a.no_mdns;
        cfg.max_connections = 1024;
        cfg.admission = spec.admission.clone();
        let (net, mut events) = net::start(cfg, server)?;
        if let Some(addr) = a.metrics {
            let bound = metrics::start(addr, net.clone(), &a.data_dir).await?;
            eprintln!("murmur-bootstrap: metrics at http://{bound}/metrics");
        }
        let mut follower = archive.as_ref().map(|_| Follower::new(spec.clone()));
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(NetEvent::Listening(addr)) => {
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "{addr}")?;
                        out.flush()?;
                    }
                    Some(NetEvent::PeerJoined { peer, role }) => tracing::info!(%peer, role = role.name(), "peer joined"),
                    Some(NetEvent::Banned { peer }) => tracing::warn!(%peer, "peer banned"),
                    Some(NetEvent::Gossip { from, message }) => {
                        if let Some(f) = follower.as_mut() {
                            match *message {
                                GossipMessage::ShardResult(r) => f.on_result(&r, std::time::Instant::now()),
                                GossipMessage::Ticket(t) => {
                                    if let Some(k) = net::public_key_of(&from) {
                                        f.on_ticket(k, t);
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                    Some(_) => {}
                    None => break,
                },
                _ = tick.tick() => {
                    if let (Some(f), Some(archive)) = (follower.as_mut(), archive.as_ref()) {
                        for s in f.settle(std::time::Instant::now()) {
                            if archive.due(s.round) && !archive.path_of(s.round).exists() {
                                archive_state(net.clone(), archive.clone(), spec.clone(), s);
                            }
                        }
                    }
                }
                _ = tokio::signal::ctrl_c() => break,
            }
        }
        Ok::<(), anyhow::Error>(())
    })
}
