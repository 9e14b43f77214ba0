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
    /// GPU kernels: matmul GFLOP/s per layout, GB/s of memory-bound kernels.
    Kernels(BenchKernelsArgs),
}

#[derive(Args, Debug)]
pub struct BenchKernelsArgs {
    /// gpu (any adapter, lavapipe included) or auto (hardware GPUs only).
    #[arg(long, value_enum, default_value = "gpu")]
    pub device: DeviceArg,
    /// Matmul tiling: small or large (default: chosen for the adapter).
    #[arg(long)]
    pub tiles: Option<String>,
    /// Matmul rows (batch × sequence).
    #[arg(long, default_value_t = 256)]
    pub rows: usize,
    /// Matmul input features.
    #[arg(long, default_value_t = 768)]
    pub channels: usize,
    /// Matmul output features.
    #[arg(long, default_value_t = 768)]
    pub out_channels: usize,
    /// Elements of the elementwise kernels.
    #[arg(long, default_value_t = 1 << 22)]
    pub elems: usize,
    /// Softmax-cross-entropy rows.
    #[arg(long, default_value_t = 64)]
    pub logit_rows: usize,
    #[arg(long, default_value_t = 50257)]
    pub vocab: usize,
    /// Timed runs per kernel (the best is reported).
    #[arg(long, default_value_t = 3)]
    pub iters: usize,
    #[arg(long)]
    pub json: bool,
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
        BenchCommand::Kernels(a) => super::bench_kernels::run(a),
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
