//! `--device auto|cpu|gpu|cuda` and `--precision fp32|bf16`: the flags, their
//! resolution (by `compute::device`), and running generic code on whichever
//! backend they chose.

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::compute::cpu::Precision;
use crate::compute::device::{self, Chosen};

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
    /// A CUDA device, else a hardware GPU, else the CPU backend (never a
    /// software rasterizer such as lavapipe).
    #[default]
    Auto,
    Cpu,
    /// Any GPU adapter, software ones (lavapipe) included (builds with the
    /// `gpu` feature, the default).
    Gpu,
    /// An NVIDIA GPU through CUDA (builds with the `cuda` feature).
    Cuda,
}

/// Resolves `--device` and `--precision` to an available backend, or says
/// why it cannot. bf16 is a CPU-backend mode, so it makes `auto` pick the CPU.
pub fn choose(arg: DeviceArg, precision: PrecisionArg) -> Result<Chosen> {
    let bf16 = precision == PrecisionArg::Bf16;
    Ok(match arg {
        DeviceArg::Auto => device::auto(precision.into())?,
        DeviceArg::Cpu => device::cpu(precision.into())?,
        DeviceArg::Gpu | DeviceArg::Cuda if bf16 => {
            bail!("--precision bf16 runs on the CPU backend only; pass --device cpu or --precision fp32")
        }
        DeviceArg::Gpu => device::gpu()?,
        DeviceArg::Cuda => device::cuda()?,
    })
}

/// Runs `$body` with `$b` bound to a reference to the chosen backend; a
/// backend that cannot be opened returns its error from the caller.
macro_rules! with_backend {
    ($device:expr, $precision:expr, |$b:ident| $body:expr) => {
        $crate::compute::device::on_backend!(
            $crate::cli::device::choose($device, $precision)?,
            |backend| {
                tracing::info!("compute: {}", $crate::compute::Backend::describe(&backend));
                let $b = &backend;
                $body
            },
            |e| return Err(e.into())
        )
    };
}
pub(crate) use with_backend;
