//! `murmur bench`: throughput measurements (training steps, CPU GEMMs, GPU
//! kernels, delta codecs).

use anyhow::Result;
use clap::{Args, Subcommand};

use super::device::{with_backend, DeviceArg, PrecisionArg};
use crate::model::ModelConfig;
use crate::sim::codec_bench::{bench_codec, synthetic_delta, DEFAULT_CODECS};
use crate::train::bench::bench_train;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Full training steps (forward, backward, AdamW) on one shape.
    Train(BenchTrainArgs),
    /// CPU GEMM GFLOP/s per instruction-set path and precision, at 1024³
    /// and at the model's own shapes (NT forward, NN/TN backward).
    Gemm(BenchGemmArgs),
    /// GPU kernels: matmul GFLOP/s per layout, GB/s of memory-bound kernels.
    Kernels(BenchKernelsArgs),
    /// Delta codecs: compression ratio, relative L2 error, encode/decode GB/s.
    Codecs(BenchCodecsArgs),
    /// Move a state-sized blob between nodes on loopback (real network stack).
    Transfer(super::transfer::BenchTransferArgs),
}

#[derive(Args, Debug)]
pub struct BenchKernelsArgs {
    /// gpu (any adapter, lavapipe included) or auto (hardware GPUs only).
    #[arg(long, value_enum, default_value = "gpu")]
    pub device: DeviceArg,
    /// Matmul configuration for every shape: small, large, wide, coop-small
    /// or coop-large (default: chosen per shape for the adapter).
    #[arg(long)]
    pub tiles: Option<String>,
    /// Matmul input precision: fp32, or f16 (on cooperative matrices where
    /// the GPU has them).
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionArg,
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
pub struct BenchGemmArgs {
    /// One path (avx512bf16, avx512, avx2, portable); default: every path
    /// this CPU supports, alternated shape by shape.
    #[arg(long)]
    pub isa: Option<String>,
    /// One precision; default: fp32 and bf16.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Only shapes whose name contains this (e.g. "square", "124m", "c256").
    #[arg(long)]
    pub only: Option<String>,
    /// Timed runs per GEMM (the best is reported).
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// One JSON object per measurement per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BenchCodecsArgs {
    /// Elements of the synthetic pseudo-gradient.
    #[arg(long, default_value_t = 10_000_000)]
    pub elements: usize,
    /// Codecs to measure (repeatable); default: f32, f16, bf16, int8-b256,
    /// int4-b64 and top-k at 10%, 5% and 1%.
    #[arg(long = "codec")]
    pub codecs: Vec<String>,
    /// Timed repetitions (the best is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One JSON object per codec per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BenchTrainArgs {
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceArg,
    /// A model preset (e.g. llama-60m) instead of the GPT-2 shape flags;
    /// --vocab then sets its vocabulary only when given.
    #[arg(long, conflicts_with_all = ["layers", "channels", "heads"])]
    pub preset: Option<String>,
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    #[arg(long, default_value_t = 256)]
    pub channels: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long)]
    pub vocab: Option<usize>,
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    #[arg(long, default_value_t = 64)]
    pub seq: usize,
    /// GEMM input precision (bf16: CPU backend; f16: wgpu backend).
    #[arg(long, value_enum, default_value = "fp32")]
    pub precision: PrecisionArg,
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
        BenchCommand::Codecs(a) => bench_codecs(a),
        BenchCommand::Gemm(a) => bench_gemm(a),
        BenchCommand::Transfer(a) => super::transfer::run(a),
        BenchCommand::Train(a) => {
            let cfg = match &a.preset {
                Some(preset) => {
                    let c = ModelConfig::preset(preset)?;
                    match a.vocab {
                        Some(v) => c.with_vocab(v)?,
                        None => c,
                    }
                }
                None => ModelConfig::new(a.layers, a.channels, a.heads, a.vocab.unwrap_or(256), a.seq)?,
            };
            if a.seq > cfg.max_seq_len {
                anyhow::bail!("--seq {} is longer than the model's context {}", a.seq, cfg.max_seq_len);
            }
            let r = with_backend!(a.device, a.precision, |backend| bench_train(
                backend, &cfg, a.batch, a.seq, a.warmup, a.steps
            ));
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                let ns = |t: Option<f64>| t.map_or("-".to_string(), |t| format!("{t:.0}"));
                println!(
                    "{}: {}L{} C{} H{} V{} B{} T{} ({:.2}M params): {:.1} ms/step, {:.0} tokens/s, {:.1} GFLOP/s; cores {}/{} ns apart",
                    r.backend,
                    a.preset.as_ref().map_or(String::new(), |p| format!("{p} ")),
                    r.layers,
                    r.channels,
                    r.heads,
                    r.vocab,
                    r.batch,
                    r.seq,
                    r.params as f64 / 1e6,
                    r.ms_per_step,
                    r.tokens_per_s,
                    r.gflops,
                    ns(r.handoff_ns[0]),
                    ns(r.handoff_ns[1])
                );
            }
            Ok(())
        }
    }
}

fn bench_gemm(a: BenchGemmArgs) -> Result<()> {
    use crate::compute::cpu::bench::{bench_gemm, bench_paths, default_shapes, has_image, GemmBench};
    use crate::compute::cpu::Isa;
    let isa = match a.isa.as_deref() {
        Some(name) => Some(name.parse::<Isa>()?.checked()?),
        None => None,
    };
    let paths = bench_paths(isa, a.precision.map(PrecisionArg::for_cpu).transpose()?);
    let shapes: Vec<_> = default_shapes()
        .into_iter()
        .filter(|s| a.only.as_deref().is_none_or(|o| s.name.contains(o)))
        .collect();
    if shapes.is_empty() {
        anyhow::bail!("--only {:?} matches no shape; names contain square, 124m or c256", a.only);
    }
    for shape in shapes {
        // Where the GEMM reads a weight through its image (as training
        // does), it is timed both ways, the image second.
        let runs = paths
            .iter()
            .flat_map(|&o| [(o, false)].into_iter().chain(has_image(shape, o).then_some((o, true))));
        for (opts, image) in runs {
            // Which state the host is in (train/handoff.rs): taken before
            // each GEMM, as the GEMMs most sensitive to it are short.
            let handoff_ns = crate::train::handoff::round_trip_ns(std::time::Duration::from_secs(1));
            let r = GemmBench { handoff_ns, ..bench_gemm(shape, opts, a.iters, image) };
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "gemm {:<14} {:?} {}x{}x{} {:>10} {}, B {:<15} {} threads: {:8.2} ms, {:7.1} GFLOP/s; cores {} ns apart",
                    r.shape.name,
                    r.shape.layout,
                    r.shape.m,
                    r.shape.n,
                    r.shape.k,
                    r.isa,
                    r.precision,
                    r.b,
                    r.threads,
                    r.ms,
                    r.gflops,
                    r.handoff_ns.map_or("-".to_string(), |t| format!("{t:.0}"))
                );
            }
        }
    }
    Ok(())
}

fn bench_codecs(a: BenchCodecsArgs) -> Result<()> {
    let codecs: Vec<murmur_protocol::Codec> = if a.codecs.is_empty() {
        DEFAULT_CODECS.to_vec()
    } else {
        a.codecs.iter().map(|c| c.parse()).collect::<Result<_, _>>()?
    };
    let delta = synthetic_delta(a.elements, a.seed);
    if !a.json {
        println!(
            "{} elements, best of {} runs; GB/s counts the f32 side (4 bytes per element)",
            a.elements, a.reps
        );
        println!(
            "{:<22} {:>10} {:>12} {:>12} {:>12}",
            "codec", "ratio", "rel L2 err", "encode GB/s", "decode GB/s"
        );
    }
    for codec in codecs {
        let r = bench_codec(codec, &delta, a.reps)?;
        if a.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:<22} {:>10.2} {:>12.3e} {:>12.3} {:>12.3}",
                r.codec, r.ratio, r.rel_l2_error, r.encode_gb_s, r.decode_gb_s
            );
        }
    }
    Ok(())
}
