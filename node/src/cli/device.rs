//! `--device auto|cpu|gpu|cuda` and `--precision fp32|bf16`: choosing the
//! compute backend a command runs on, and running generic code on whichever
//! was chosen.

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::compute::cpu::Precision;
use crate::compute::gpu::{adapter_available, AdapterChoice};

/// The `--precision` flag: the GEMMs' input precision. Master weights,
/// optimizer state, deltas and states stay fp32 either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    #[default]
    Fp32,
    /// bf16 GEMM inputs with fp32 accumulation (CPU backend only).
    Bf16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Precision {
        match p {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Bf16 => Precision::Bf16,
        }
    }
}

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
    Cpu(Precision),
    Gpu(AdapterChoice),
}

/// Resolves `--device` and `--precision` to an available backend, or says
/// why it cannot. bf16 is a CPU-backend mode, so it makes `auto` pick the CPU.
pub fn choose(device: DeviceArg, precision: PrecisionArg) -> Result<Chosen> {
    let bf16 = precision == PrecisionArg::Bf16;
    match device {
        DeviceArg::Auto if !bf16 && adapter_available(AdapterChoice::HardwareOnly) => {
            Ok(Chosen::Gpu(AdapterChoice::HardwareOnly))
        }
        DeviceArg::Auto | DeviceArg::Cpu => {
            let precision = precision.into();
            // Check MURMUR_CPU_ISA here so a bad value is an error, not a panic later.
            crate::compute::cpu::CpuBackend::from_env(precision)?;
            Ok(Chosen::Cpu(precision))
        }
        DeviceArg::Gpu | DeviceArg::Cuda if bf16 => {
            bail!("--precision bf16 runs on the CPU backend only; pass --device cpu or --precision fp32")
        }
        DeviceArg::Gpu => Ok(Chosen::Gpu(AdapterChoice::Any)),
        DeviceArg::Cuda => bail!("--device cuda: this build has no CUDA backend; use --device gpu or cpu"),
    }
}

/// Runs `$body` with `$b` bound to a reference to the chosen backend.
macro_rules! with_backend {
    ($device:expr, $precision:expr, |$b:ident| $body:expr) => {
        match $crate::cli::device::choose($device, $precision)? {
            $crate::cli::device::Chosen::Cpu(precision) => {
                let backend = $crate::compute::cpu::CpuBackend::from_env(precision)?;
                tracing::info!("compute: {}", $crate::compute::Backend::describe(&backend));
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
