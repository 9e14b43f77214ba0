//! `--device auto|cpu|gpu|cuda`: choosing the compute backend a command runs
//! on, and running generic code on whichever was chosen.

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::compute::gpu::{adapter_available, AdapterChoice};

/// The `--device` flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// A hardware GPU when one is present, else the CPU backend (never a
    /// software rasterizer such as lavapipe).
    #[default]
    Auto,
    Cpu,
    /// Any GPU adapter, software ones (lavapipe) included.
    Gpu,
    Cuda,
}

/// The backend a command will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chosen {
    Cpu,
    Gpu(AdapterChoice),
}

/// Resolves `--device` to an available backend, or says why it cannot.
pub fn choose(device: DeviceArg) -> Result<Chosen> {
    match device {
        DeviceArg::Auto if adapter_available(AdapterChoice::HardwareOnly) => {
            Ok(Chosen::Gpu(AdapterChoice::HardwareOnly))
        }
        DeviceArg::Auto | DeviceArg::Cpu => Ok(Chosen::Cpu),
        DeviceArg::Gpu => Ok(Chosen::Gpu(AdapterChoice::Any)),
        DeviceArg::Cuda => bail!("--device cuda: this build has no CUDA backend; use --device gpu or cpu"),
    }
}

/// Runs `$body` with `$b` bound to a reference to the chosen backend.
macro_rules! with_backend {
    ($device:expr, |$b:ident| $body:expr) => {
        match $crate::cli::device::choose($device)? {
            $crate::cli::device::Chosen::Cpu => {
                let backend = $crate::compute::cpu::CpuBackend::new();
                let $b = &backend;
                $body
            }
            $crate::cli::device::Chosen::Gpu(choice) => {
                let backend = $crate::compute::gpu::GpuBackend::new(choice)?;
                tracing::info!("compute: {}", $crate::compute::Backend::describe(&backend));
                let $b = &backend;
                $body
            }
        }
    };
}
pub(crate) use with_backend;
