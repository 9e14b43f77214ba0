//! `--device auto|cpu|gpu|cuda` and `--precision fp32|bf16|f16`: the flags,
//! their resolution (by `compute::device`), and running generic code on
//! whichever backend they chose.

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::compute::cpu::Precision;
use crate::compute::device::{self, Chosen, GpuPrecision};

/// The `--precision` flag: the GEMMs' input precision. Master weights,
/// optimizer state, deltas and states stay fp32 either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    #[default]
    Fp32,
    /// bf16 GEMM inputs with fp32 accumulation (CPU backend).
    Bf16,
    /// f16 GEMM inputs with fp32 accumulation (wgpu backend: on cooperative
    /// matrices where the GPU has them).
    F16,
}

impl PrecisionArg {
    /// The CPU backend's precision, or why it has none such.
    pub fn for_cpu(self) -> Result<Precision> {
        match self {
            PrecisionArg::Fp32 => Ok(Precision::Fp32),
            PrecisionArg::Bf16 => Ok(Precision::Bf16),
            PrecisionArg::F16 => {
                bail!("--precision f16 runs on the wgpu backend; pass --device gpu, or --precision bf16 on the CPU")
            }
        }
    }

    fn for_gpu(self) -> Result<GpuPrecision> {
        match self {
            PrecisionArg::Fp32 => Ok(GpuPrecision::Fp32),
            PrecisionArg::F16 => Ok(GpuPrecision::F16),
            PrecisionArg::Bf16 => {
                bail!("--precision bf16 runs on the CPU backend; pass --device cpu, or --precision f16 on a GPU")
            }
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
/// why it cannot. bf16 is a CPU-backend mode and f16 a wgpu one, so they
/// make `auto` pick that backend.
pub fn choose(arg: DeviceArg, precision: PrecisionArg) -> Result<Chosen> {
    Ok(match (arg, precision) {
        (DeviceArg::Auto, PrecisionArg::F16) => device::gpu_hardware(precision.for_gpu()?)?,
        (DeviceArg::Auto, _) => device::auto(precision.for_cpu()?)?,
        (DeviceArg::Cpu, _) => device::cpu(precision.for_cpu()?)?,
        (DeviceArg::Gpu, _) => device::gpu(precision.for_gpu()?)?,
        (DeviceArg::Cuda, PrecisionArg::Fp32) => device::cuda()?,
        (DeviceArg::Cuda, _) => {
            bail!("--device cuda runs in fp32; pass --precision fp32, or --device gpu --precision f16")
        }
    })
}

/// Runs `$body` with `$b` bound to a reference to the chosen backend; a
/// backend that cannot be opened returns its error from the caller.
macro_rules! with_backend {
    (chosen $chosen:expr, |$b:ident| $body:expr) => {
        $crate::compute::device::on_backend!(
            $chosen,
            |backend| {
                tracing::info!("compute: {}", $crate::compute::Backend::describe(&backend));
                let $b = &backend;
                $body
            },
            |e| return Err(e.into())
        )
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_precision_names_the_backend_that_has_it() {
        let err = |d, p| choose(d, p).expect_err("refused").to_string();
        assert!(err(DeviceArg::Cpu, PrecisionArg::F16).contains("--device gpu"));
        assert!(err(DeviceArg::Gpu, PrecisionArg::Bf16).contains("--device cpu"));
        assert!(err(DeviceArg::Cuda, PrecisionArg::F16).contains("fp32"));
        assert!(err(DeviceArg::Cuda, PrecisionArg::Bf16).contains("fp32"));
        assert_eq!(choose(DeviceArg::Cpu, PrecisionArg::Bf16).ok(), Some(Chosen::Cpu(Precision::Bf16)));
    }

    #[cfg(feature = "gpu")]
    #[test]
    fn f16_on_any_adapter_is_the_wgpu_backend_in_f16() {
        let chosen = choose(DeviceArg::Gpu, PrecisionArg::F16).expect("gpu is always resolvable");
        assert_eq!(chosen, Chosen::Gpu(crate::compute::gpu::AdapterChoice::Any, GpuPrecision::F16));
    }
}
