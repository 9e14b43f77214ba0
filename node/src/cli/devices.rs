//! `murmur devices`: the GPU adapters this machine exposes, with backend,
//! type, the limits the GPU backend depends on, and features.

use anyhow::Result;
use clap::Args;

use crate::compute::gpu::list_adapters;

#[derive(Args, Debug)]
pub struct DevicesArgs {
    /// One JSON array instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DevicesArgs) -> Result<()> {
    let adapters = list_adapters();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&adapters)?);
        return Ok(());
    }
    if adapters.is_empty() {
        println!("no GPU adapters (the CPU backend is always available: --device cpu)");
        return Ok(());
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
        println!("    features: {}", if a.features.is_empty() { "-".into() } else { a.features.join(", ") });
    }
    Ok(())
}
