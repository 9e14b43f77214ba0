//! `--device auto|cpu|gpu|cuda`: choosing the compute backend a command runs
//! on, and running generic code on whichever was chosen.

use anyhow::{bail, Result};
use clap::ValueEnum;

/// The `--device` flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// A hardware GPU when one is present, else the CPU backend.
    #[default]
    Auto,
    Cpu,
    Gpu,
    Cuda,
}

/// The backend a command will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chosen {
    Cpu,
}

/// Resolves `--device` to an available backend, or says why it cannot.
pub fn choose(device: DeviceArg) -> Result<Chosen> {
    match device {
        DeviceArg::Auto | DeviceArg::Cpu => Ok(Chosen::Cpu),
        DeviceArg::Gpu => bail!("--device gpu: this build has no GPU backend yet; use --device cpu"),
        DeviceArg::Cuda => bail!("--device cuda: this build has no CUDA backend; use --device cpu"),
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
        }
    };
}
pub(crate) use with_backend;
