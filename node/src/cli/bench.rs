//! `murmur bench`: throughput measurements (training steps; kernels and
//! codecs are added by the GPU and protocol work).

use anyhow::Result;
use clap::{Args, Subcommand};

use super::device::{with_backend, DeviceArg};
use crate::model::ModelConfig;
use crate::train::bench::bench_train;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Full training steps (forward, backward, AdamW) on one shape.
    Train(BenchTrainArgs),
}

#[derive(Args, Debug)]
pub struct BenchTrainArgs {
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    #[arg(long, default_value_t = 256)]
    pub channels: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long, default_value_t = 256)]
    pub vocab: usize,
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    #[arg(long, default_value_t = 64)]
    pub seq: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Timed steps.
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Train(a) => {
            let cfg = ModelConfig::new(a.layers, a.channels, a.heads, a.vocab, a.seq)?;
            let r = with_backend!(a.device, |backend| bench_train(
                backend, &cfg, a.batch, a.seq, a.warmup, a.steps
            ));
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{}: L{} C{} H{} V{} B{} T{} ({:.2}M params): {:.1} ms/step, {:.0} tokens/s, {:.1} GFLOP/s",
                    r.backend,
                    r.layers,
                    r.channels,
                    r.heads,
                    r.vocab,
                    r.batch,
                    r.seq,
                    r.params as f64 / 1e6,
                    r.ms_per_step,
                    r.tokens_per_s,
                    r.gflops
                );
            }
            Ok(())
        }
    }
}
