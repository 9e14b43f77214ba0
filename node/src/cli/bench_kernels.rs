//! `murmur bench kernels`: opens the GPU backend and prints the kernel
//! figures of `compute::gpu::bench` as text or JSON.

use anyhow::{bail, Context, Result};

use super::bench::BenchKernelsArgs;
use super::device::{choose, Chosen};
use crate::compute::gpu::bench::{bench_kernels, KernelBenchShape};
use crate::compute::gpu::{GpuBackend, GpuOptions, TileConfig};

pub fn run(a: BenchKernelsArgs) -> Result<()> {
    let Chosen::Gpu(choice) = choose(a.device, super::device::PrecisionArg::Fp32)? else {
        bail!("bench kernels measures the GPU backend and no hardware GPU was found; pass --device gpu to use a software adapter")
    };
    let tiles = match a.tiles.as_deref() {
        None => None,
        Some(name) => Some(TileConfig::by_name(name).context("--tiles: choose small or large")?),
    };
    let g = GpuBackend::with_options(choice, GpuOptions { tiles, ..Default::default() })?;
    let shape = KernelBenchShape {
        rows: a.rows.max(1),
        channels: a.channels.max(1),
        out_channels: a.out_channels.max(1),
        elems: a.elems.max(1),
        logit_rows: a.logit_rows.max(1),
        vocab: a.vocab.max(1),
        iters: a.iters,
    };
    let r = bench_kernels(&g, shape);
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!("{} (matmul tiles {})", r.device, r.tiles);
    for m in &r.matmul {
        println!("  matmul {} {}x{}x{}: {:.2} ms, {:.2} GFLOP/s", m.layout, m.m, m.n, m.k, m.ms, m.gflops);
    }
    for m in &r.memory {
        println!("  {} ({} floats): {:.2} ms, {:.2} GB/s", m.kernel, m.elems, m.ms, m.gbps);
    }
    Ok(())
}
