//! The `murmur` command line: subcommands, their flags, and dispatch.

pub mod bench;
pub mod bench_kernels;
pub mod dashboard;
pub mod data;
pub mod device;
pub mod devices;
pub mod identity;
pub mod model_io;
pub mod netsim;
pub mod node;
pub mod sim;
pub mod testnet;
pub mod ticket;
pub mod train;
pub mod transfer;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// murmur: volunteers train one model together.
#[derive(Parser, Debug)]
#[command(name = "murmur", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a model on this machine alone.
    Train(Box<train::TrainArgs>),
    /// Join a training run (or start one) and train with the network.
    Node(node::NodeArgs),
    /// Write a model as a Hugging Face GPT-2 directory: a checkpoint, a
    /// node's committed state (--data-dir), or a live run's (--bootstrap).
    Export(model_io::ExportArgs),
    /// Read a Hugging Face GPT-2 model into a murmur checkpoint.
    Import(model_io::ImportArgs),
    /// Measure an exported model's validation loss on its run's data.
    Eval(model_io::EvalArgs),
    /// Generate text from a checkpoint.
    Sample(model_io::SampleArgs),
    /// Measure throughput.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// List GPU adapters (backend, type, limits, features).
    Devices(devices::DevicesArgs),
    /// Simulate N workers training together (DiLoCo or data parallel) in one process.
    Sim(sim::SimArgs),
    /// Simulate a network of N nodes running the round, in virtual time.
    Netsim(netsim::NetsimArgs),
    /// Watch a run and serve a live web page of it (trains nothing).
    Dashboard(dashboard::DashboardArgs),
    /// Run a local network on this machine: a bootstrap server, N nodes and the dashboard.
    Testnet(testnet::TestnetArgs),
    /// Prepare datasets: `murmur data add <input> --tokenizer byte|gpt2|bpe:VOCAB|tokenizer.json`.
    #[command(subcommand)]
    Data(data::DataCommand),
    /// Admission tickets: `murmur ticket issue` (operators of a ticket run).
    #[command(subcommand)]
    Ticket(ticket::TicketCommand),
}

/// Logs to stderr, at `RUST_LOG`'s level (default: warnings).
pub(crate) fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// A multi-threaded tokio runtime with every driver enabled.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("starting the async runtime: {e}"))
}

/// Run `service` on a multi-threaded tokio runtime until it ends or Ctrl-C.
pub(crate) fn run_until_ctrl_c<E>(service: impl std::future::Future<Output = Result<(), E>>) -> Result<()>
where
    anyhow::Error: From<E>,
{
    runtime()?.block_on(async move {
        tokio::select! {
            r = service => r.map_err(anyhow::Error::from),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

/// Run `task` on a multi-threaded tokio runtime to its end.
pub(crate) fn run_until_done<T, E>(task: impl std::future::Future<Output = Result<T, E>>) -> Result<T>
where
    anyhow::Error: From<E>,
{
    runtime()?.block_on(task).map_err(anyhow::Error::from)
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(a) => train::run(*a),
        Command::Node(a) => node::run(a),
        Command::Export(a) => model_io::export(a),
        Command::Import(a) => model_io::import(a),
        Command::Eval(a) => model_io::eval(a),
        Command::Sample(a) => model_io::sample(a),
        Command::Bench(c) => bench::run(c),
        Command::Devices(a) => devices::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Netsim(a) => netsim::run(a),
        Command::Dashboard(a) => dashboard::run(a),
        Command::Testnet(a) => testnet::run(a),
        Command::Data(c) => data::run(c),
        Command::Ticket(c) => ticket::run(c),
    }
}
