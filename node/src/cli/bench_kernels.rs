//! `murmur bench kernels`: opens the chosen device backend (wgpu or CUDA) and
//! prints the kernel figures of `compute::kernel_bench` as text or JSON.

use anyhow::{anyhow, Result};

use super::bench::BenchKernelsArgs;
use super::device::choose;
use crate::compute::device::Chosen;
use crate::compute::kernel_bench::{KernelBench, KernelBenchShape};

pub fn run(a: BenchKernelsArgs) -> Result<()> {
    let shape = KernelBenchShape {
        rows: a.rows.max(1),
        channels: a.channels.max(1),
        out_channels: a.out_channels.max(1),
        elems: a.elems.max(1),
        logit_rows: a.logit_rows.max(1),
        vocab: a.vocab.max(1),
        iters: a.iters,
    };
    let r = measure(choose(a.device, a.precision)?, a.tiles.as_deref(), shape)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    print(&r);
    Ok(())
}

/// Runs the kernel benchmark on the chosen device backend.
#[cfg_attr(not(any(feature = "gpu", feature = "cuda")), allow(unused_variables))]
fn measure(chosen: Chosen, tiles: Option<&str>, shape: KernelBenchShape) -> Result<KernelBench> {
    match chosen {
        Chosen::Cpu(_) => Err(anyhow!(
            "bench kernels measures a device backend and none was found or chosen; pass --device gpu \
             (a software adapter will do) or --device cuda"
        )),
        #[cfg(feature = "gpu")]
        Chosen::Gpu(choice, precision) => on_gpu(choice, precision, tiles, shape),
        #[cfg(feature = "cuda")]
        Chosen::Cuda(ordinal) => {
            if tiles.is_some() {
                anyhow::bail!("--tiles applies to the wgpu backend; the CUDA backend's matmul is cuBLAS");
            }
            let g = crate::compute::cuda::CudaBackend::new(ordinal)?;
            Ok(crate::compute::kernel_bench::bench_kernels(&g, shape))
        }
    }
}

#[cfg(feature = "gpu")]
fn on_gpu(
    choice: crate::compute::gpu::AdapterChoice,
    precision: crate::compute::gpu::GpuPrecision,
    tiles: Option<&str>,
    shape: KernelBenchShape,
) -> Result<KernelBench> {
    use crate::compute::gpu::{GpuBackend, GpuOptions, TileConfig};
    use anyhow::Context;
    let tiles = match tiles {
        None => None,
        Some(name) => Some(
            TileConfig::by_name(name)
                .context("--tiles: choose small, large, wide, coop-small or coop-large")?,
        ),
    };
    let g = GpuBackend::with_options(choice, GpuOptions { tiles, precision, ..Default::default() })?;
    Ok(crate::compute::kernel_bench::bench_kernels(&g, shape))
}

fn print(r: &KernelBench) {
    println!("{}", r.device);
    for m in &r.matmul {
        let (layout, kernel) = (m.layout, &m.kernel);
        println!(
            "  matmul {layout} {}x{}x{} ({kernel}): {:.3} ms, {:.1} GFLOP/s",
            m.m, m.n, m.k, m.ms, m.gflops
        );
    }
    for m in &r.memory {
        println!("  {} ({} floats): {:.2} ms, {:.2} GB/s", m.kernel, m.elems, m.ms, m.gbps);
    }
}
