//! The node runtime: the one place where compute and network meet.
//!
//! `run_node` learns the run (from a bootstrap server), reopens the node's
//! store, starts the network and the trainer thread, meets its first peers,
//! and then runs the round loop (`committee`): train H steps, send each
//! shard of the delta to its owner, aggregate the shards it owns, fetch
//! and check the others' aggregates, audit a few, catch up when a majority
//! of the roster moved on.
//!
//! - `spec`: default run, model shape, genesis.
//! - `memory`: whether a run fits this machine's memory.
//! - `startup`: spec discovery, stored or fetched genesis, stored position, the first peers.
//! - `export`: committed states of a data directory or a live run, written as models.
//! - `archive`: every R-th committed state of a run kept as an export (the bootstrap server's).
//! - `tickets`: the node's own ticket, the wall clock, the tickets it verified.
//! - `backing`: the results a status offers, and the state gathered ones back.
//! - `dataset`: the run's dataset: manifest, assigned windows, shard fetching.
//! - `trainer`: the compute thread.
//! - `hashed_state`: the state the loop holds, with its StateId computed once.
//! - `server`: what the node serves on the transfer protocol.
//! - `committee`: the event loop of the round (docs/protocol.md §10).
//! - `report`: JSON / human output.
//! - `telemetry`: the signed progress reports the loop gossips.

pub mod archive;
pub mod backing;
pub mod committee;
pub mod dataset;
pub mod export;
pub mod hashed_state;
pub mod memory;
pub mod report;
pub mod server;
pub mod spec;
pub mod startup;
pub mod telemetry;
pub mod tickets;
pub mod trainer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::Multiaddr;
use murmur_protocol::RunSpec;
use serde_json::json;
use thiserror::Error;

use crate::net::{self, NetConfig, NetError, Role};
use crate::store::{keyfile, Store, StoreError};
use report::Reporter;
use server::{ServedStatus, StoreServer};

/// Why the node could not run.
#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error("{0}")]
    Config(String),
    #[error("trainer: {0}")]
    Trainer(String),
}

/// How `murmur node` runs.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub bootstrap: Vec<Multiaddr>,
    pub data_dir: PathBuf,
    pub listen: Vec<Multiaddr>,
    /// Accept no inbound connections: dial out, listen through a relay circuit.
    pub private: bool,
    pub mdns: bool,
    pub json: bool,
    /// The run to start when no bootstrap server is given.
    pub spec: Option<RunSpec>,
    /// How long to wait for peers before choosing a starting state.
    pub discovery_wait: Duration,
    /// The compute backend the trainer runs on.
    pub device: crate::compute::device::Chosen,
    /// Serve Prometheus metrics over HTTP here (`--metrics`).
    pub metrics: Option<std::net::SocketAddr>,
    /// `--dataset` and `--data-cache`.
    pub dataset: dataset::DatasetOptions,
    /// `--ticket`: this node's admission ticket (runs that admit by ticket).
    pub ticket: Option<PathBuf>,
    /// Evaluate after every N-th round (0: never).
    pub eval_every: u64,
    /// Activation checkpointing (Llama; `--checkpointing`).
    pub checkpointing: bool,
    /// `--max-peers-per-ip`: strangers that may connect in from one address.
    pub max_peers_per_ip: u32,
}

/// Run a training node until the process is stopped.
pub async fn run_node(opts: NodeOptions) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let out = Reporter { json: opts.json };
    let store = Arc::new(Store::open(&opts.data_dir)?);
    let key = keyfile::load_or_create(&store.key_path())?;
    // The ticket is checked against the run once its spec is known
    // (`own_ticket`); a ticket run's bootstrap server asks for it first.
    let presented = opts.ticket.as_deref().map(tickets::read_ticket_file).transpose();
    let who = startup::Identity {
        key: key.clone(),
        ticket: presented.map_err(|e| RuntimeError::Config(format!("--ticket: {e}")))?,
    };
    let spec = if !opts.bootstrap.is_empty() {
        startup::discover_spec(&who, &opts.bootstrap, Duration::from_secs(60)).await?
    } else if let Some(s) = opts.spec.clone() {
        s
    } else if let Some(s) = store.meta.spec()?.and_then(|b| RunSpec::decode(&b).ok()) {
        s
    } else {
        spec::run_spec(&spec::RunParams::default())?
    };
    if spec.committee_size == 0 {
        return Err(RuntimeError::Config(format!(
            "run {} uses version 1's round (committee size 0), which this node no longer runs; \
             start the run anew with a committee size of 1 or more (`murmur-bootstrap --committee-size 1`)",
            spec.run_id()
        )));
    }
    dataset::check_data(&spec)?;
    let own_ticket = tickets::own_ticket(&spec, &key.public(), opts.ticket.as_deref())?;
    store.meta.set_spec(&spec.encode())?;
    let cfg = spec::model_config(&spec)?;
    if opts.checkpointing && cfg.arch.is_gpt2() {
        tracing::warn!(
            "--checkpointing is for Llama models; this run's {} is GPT-2, so it is off",
            spec.model.preset
        );
    }
    let model = memory::host_model_need(&spec, &cfg, opts.device, opts.checkpointing);
    let checkpointed = (!cfg.arch.is_gpt2() && !opts.checkpointing)
        .then(|| memory::host_model_need(&spec, &cfg, opts.device, true));
    memory::check_fits(&spec, &cfg, (opts.device.name(), model, checkpointed), memory::physical_memory())?;
    let fetch_genesis = spec.genesis_params.is_some() && store.meta.position(&spec.run_id())?.is_none();
    if fetch_genesis {
        startup::fetch_genesis(&who, &opts.bootstrap, &store, &spec, Duration::from_secs(60)).await?;
    }
    let (mine, resumed) = startup::load_position(&store, &spec)?;
    // A genesis fetched just now is recorded as a position, but nothing resumed.
    let resumed = resumed && !fetch_genesis;
    // Deltas from before a restart other than the shards signed for the
    // round resumed at are of no further use; older states neither.
    startup::prune_after_restart(&store, &spec.run_id(), mine.round, mine.id())?;
    let peer_id = net::peer_id_of(&key.public()).map(|p| p.to_string()).unwrap_or_default();
    out.event(
        "started",
        json!({
            "peer_id": peer_id,
            "run": spec.run_id().to_hex(),
            "round": mine.round,
            "state_id": mine.id().to_hex(),
            "resumed": resumed,
            "params": spec.model.param_count,
            "data_dir": opts.data_dir.display().to_string(),
        }),
    );
    let server = Arc::new(
        StoreServer::new(store.clone(), spec.encode(), true)
            .with_ticket(own_ticket.as_ref().map(|t| t.encode())),
    );
    server.set_status(ServedStatus { round: mine.round, state: Some(mine.id().0) });
    let role = if opts.private { Role::Private } else { Role::Trainer };
    let mut ncfg = NetConfig::new(key.clone(), spec.run_id(), role);
    ncfg.max_per_ip = opts.max_peers_per_ip;
    ncfg.listen = if opts.private { Vec::new() } else { opts.listen.clone() };
    ncfg.bootstrap = opts.bootstrap.clone();
    ncfg.mdns = opts.mdns;
    ncfg.admission = spec.admission.clone();
    ncfg.ticket = own_ticket.clone();
    let (net, mut events) = net::start(ncfg, server.clone())?;
    let metrics = start_metrics(opts.metrics, &net, &store, out).await?;
    // The node starts from its own position and catches up inside the
    // round machine (`committee::sync`) on what the roster signed.
    let replay = startup::meet_peers(&mut events, opts.discovery_wait, out).await;
    let state = mine;
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let shard = u64::from(u16::from_le_bytes([key.public().0[0], key.public().0[1]]));
    let feed =
        dataset::prepare(&spec, &opts.dataset, store.clone(), net.clone(), key.public(), cfg.vocab_size, out)
            .await?;
    let trainer_setup = trainer::TrainerSetup {
        spec: spec.clone(),
        cfg,
        shard,
        device: opts.device,
        feed,
        checkpointing: opts.checkpointing,
    };
    let trainer = trainer::spawn(&trainer_setup, done_tx).map_err(RuntimeError::Trainer)?;
    let mut done_rx = done_rx;
    // A node that starts a run measures the genesis state first, so the
    // run's curve starts at its model's loss (a given model's, with --init-from).
    let val_loss = if opts.eval_every > 0 && state.round == 0 {
        trainer.submit(trainer::Job::Evaluate { round: 0, state: Arc::new(state.clone()) });
        match done_rx.recv().await {
            Some(trainer::JobDone::Evaluated { val_loss: Ok(val_loss), .. }) => Some(val_loss),
            Some(trainer::JobDone::Panicked(what)) => {
                return Err(RuntimeError::Trainer(format!("evaluating the genesis state panicked: {what}")));
            }
            other => {
                tracing::warn!("evaluating the genesis state: {other:?}");
                None
            }
        }
    } else {
        None
    };
    out.event(
        "joined",
        json!({
            "round": state.round,
            "state_id": state.id().to_hex(),
            "val_loss": val_loss,
            "device": trainer.device,
            "backend": trainer.backend,
        }),
    );
    let start = committee::CommitteeStart {
        spec,
        key,
        store,
        net,
        server,
        trainer,
        done_rx,
        trainer_setup,
        state,
        out,
        started,
        own_ticket,
        metrics,
        eval_every: opts.eval_every,
        resumed,
    };
    committee::run_committee_node(start, events, replay).await
}

/// Serve the node's metrics at `addr` (if given) and say where; the handle
/// the loop calls is switched off without it.
async fn start_metrics(
    addr: Option<std::net::SocketAddr>,
    net: &net::NetHandle,
    store: &Store,
    out: Reporter,
) -> Result<crate::metrics::NodeMetrics, RuntimeError> {
    use crate::metrics::{http, Exporter, NodeMetrics};
    let Some(addr) = addr else { return Ok(NodeMetrics::default()) };
    let fail = |e: String| RuntimeError::Config(format!("--metrics {addr}: {e}"));
    let metrics = NodeMetrics::new().map_err(|e| fail(e.to_string()))?;
    let registry = metrics.registry().cloned().unwrap_or_default();
    let exporter = Exporter::new(registry, net.clone(), &store.dir).map_err(|e| fail(e.to_string()))?;
    let bound = http::start(addr, exporter).await.map_err(|e| fail(format!("cannot listen there: {e}")))?;
    out.event("metrics", json!({ "url": format!("http://{bound}/metrics") }));
    Ok(metrics)
}
