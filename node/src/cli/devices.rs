//! `murmur devices`: the compute devices this build can use on this machine —
//! CUDA devices (name, compute capability, memory), wgpu adapters (backend,
//! type, the limits the GPU backend depends on, and features) and the CPU
//! backend's instruction-set paths.

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use crate::compute::cpu::Isa;

#[derive(Args, Debug)]
pub struct DevicesArgs {
    /// One JSON object `{ "cuda": [...], "gpu": [...], "cpu_paths": [...] }` instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Everything `murmur devices --json` prints; a backend this build lacks is
/// absent from the object.
#[derive(Serialize)]
struct Devices {
    #[cfg(feature = "cuda")]
    cuda: Vec<crate::compute::cuda::CudaDeviceSummary>,
    #[cfg(feature = "gpu")]
    gpu: Vec<crate::compute::gpu::AdapterSummary>,
    /// The CPU backend's instruction-set paths this CPU runs, widest (the
    /// default) first.
    cpu_paths: Vec<String>,
}

pub fn run(args: DevicesArgs) -> Result<()> {
    let devices = Devices {
        #[cfg(feature = "cuda")]
        cuda: crate::compute::cuda::list_devices().unwrap_or_default(),
        #[cfg(feature = "gpu")]
        gpu: crate::compute::gpu::list_adapters(),
        cpu_paths: Isa::supported_paths().into_iter().map(|i| i.to_string()).collect(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&devices)?);
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    print_cuda();
    #[cfg(not(feature = "cuda"))]
    println!("CUDA: not in this build (cargo build --release --features cuda)");
    #[cfg(feature = "gpu")]
    print_adapters(&devices.gpu);
    #[cfg(not(feature = "gpu"))]
    println!("wgpu GPU backend: not in this build (cargo build --release --features gpu)");
    println!("the CPU backend is always available: --device cpu");
    // One line scripts read (scripts/test.sh forces each path but the first).
    println!("CPU paths: {} (widest first; MURMUR_CPU_ISA forces one)", devices.cpu_paths.join(" "));
    Ok(())
}

#[cfg(feature = "cuda")]
fn print_cuda() {
    match crate::compute::cuda::list_devices() {
        Err(e) => println!("CUDA: {e}"),
        Ok(list) if list.is_empty() => println!("CUDA: no devices"),
        Ok(list) => {
            for d in list {
                println!(
                    "cuda:{} {} (compute capability {}.{}, {} MiB)",
                    d.ordinal,
                    d.name,
                    d.compute_capability.0,
                    d.compute_capability.1,
                    d.memory_bytes >> 20
                );
            }
        }
    }
}

#[cfg(feature = "gpu")]
fn print_adapters(adapters: &[crate::compute::gpu::AdapterSummary]) {
    if adapters.is_empty() {
        println!("no GPU adapters");
    }
    for (i, a) in adapters.iter().enumerate() {
        let kind = if a.software { " — software, used only with --device gpu" } else { "" };
        println!("[{i}] {} ({}, {}){kind}", a.name, a.backend, a.device_type);
        println!("    driver: {}", a.driver);
        println!(
            "    max buffer {} MiB, max storage binding {} MiB, {} storage buffers/stage, offset alignment {} B",
            a.max_buffer_size >> 20,
            a.max_storage_buffer_binding_size >> 20,
            a.max_storage_buffers_per_shader_stage,
            a.min_storage_buffer_offset_alignment
        );
        println!(
            "    workgroup: {} invocations, {} KiB shared, {} groups/dimension; subgroup size {}..{}",
            a.max_compute_invocations_per_workgroup,
            a.max_compute_workgroup_storage_size >> 10,
            a.max_compute_workgroups_per_dimension,
            a.subgroup_sizes.0,
            a.subgroup_sizes.1
        );
        let matmul = if a.cooperative_matrix_f16 {
            "fp32 tiled; --precision f16 on cooperative matrices (16x16 f16, f32 sums)"
        } else {
            "fp32 tiled; --precision f16 in the tiled kernels (no f16 cooperative matrices)"
        };
        println!("    matmul: {matmul}");
        println!("    features: {}", if a.features.is_empty() { "-".into() } else { a.features.join(", ") });
    }
}
