//! Which compute backend runs: `--device auto|cpu|gpu|cuda` resolved against
//! the backends this build has (cargo features `gpu` and `cuda`) and the
//! devices this machine has, and `on_backend!`, which opens the chosen backend
//! and runs code generic over `Backend` on it.
//!
//! `auto` prefers a CUDA device, then a hardware wgpu adapter, then the CPU
//! backend; it never picks a software rasterizer (lavapipe) over the CPU.
//! bf16 GEMM inputs (`Precision::Bf16`) are a CPU-backend mode, so they make
//! `auto` pick the CPU; f16 inputs (`GpuPrecision::F16`) a wgpu one.

use thiserror::Error;

/// The backend a command or a node's trainer will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chosen {
    /// The CPU backend, its GEMM input precision, and the ISA path from
    /// `MURMUR_CPU_ISA` (checked when chosen).
    Cpu(crate::compute::cpu::Precision),
    /// The wgpu backend on an adapter `AdapterChoice` allows, and its
    /// matmul input precision.
    #[cfg(feature = "gpu")]
    Gpu(crate::compute::gpu::AdapterChoice, GpuPrecision),
    /// The CUDA backend on the device with this ordinal.
    #[cfg(feature = "cuda")]
    Cuda(usize),
}

impl Chosen {
    /// The backend's short name: "cpu", "gpu" or "cuda".
    pub fn name(self) -> &'static str {
        match self {
            Chosen::Cpu(_) => "cpu",
            #[cfg(feature = "gpu")]
            Chosen::Gpu(..) => "gpu",
            #[cfg(feature = "cuda")]
            Chosen::Cuda(_) => "cuda",
        }
    }
}

/// Why the requested backend cannot run here.
#[derive(Debug, Error)]
pub enum DeviceError {
    #[error(
        "--device {backend}: this build of murmur has no {backend} backend; rebuild with \
         `cargo build --release --features {feature}` or use --device cpu"
    )]
    NotBuilt { backend: &'static str, feature: &'static str },
    #[error(transparent)]
    Cpu(#[from] crate::compute::cpu::IsaError),
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] crate::compute::gpu::GpuError),
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] crate::compute::cuda::CudaError),
}

/// `--device cpu`, with a `MURMUR_CPU_ISA` this CPU can run.
pub fn cpu(precision: crate::compute::cpu::Precision) -> Result<Chosen, DeviceError> {
    crate::compute::cpu::CpuBackend::from_env(precision)?;
    Ok(Chosen::Cpu(precision))
}

#[cfg(feature = "gpu")]
pub use crate::compute::gpu::GpuPrecision;

/// The wgpu backend's matmul precision, in a build without it.
#[cfg(not(feature = "gpu"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuPrecision {
    Fp32,
    F16,
}

/// `--device gpu`: any wgpu adapter, software ones (lavapipe) included. The
/// adapter itself is looked for when the backend is opened.
#[cfg(feature = "gpu")]
pub fn gpu(precision: GpuPrecision) -> Result<Chosen, DeviceError> {
    Ok(Chosen::Gpu(crate::compute::gpu::AdapterChoice::Any, precision))
}

/// `--device auto --precision f16`: a hardware wgpu adapter, or why none.
#[cfg(feature = "gpu")]
pub fn gpu_hardware(precision: GpuPrecision) -> Result<Chosen, DeviceError> {
    use crate::compute::gpu::{adapter_available, AdapterChoice, GpuError};
    if !adapter_available(AdapterChoice::HardwareOnly) {
        return Err(GpuError::NoAdapter.into());
    }
    Ok(Chosen::Gpu(AdapterChoice::HardwareOnly, precision))
}

/// `--device gpu` in a build without the wgpu backend.
#[cfg(not(feature = "gpu"))]
pub fn gpu(_precision: GpuPrecision) -> Result<Chosen, DeviceError> {
    Err(DeviceError::NotBuilt { backend: "gpu", feature: "gpu" })
}

/// `--device auto --precision f16` in a build without the wgpu backend.
#[cfg(not(feature = "gpu"))]
pub fn gpu_hardware(_precision: GpuPrecision) -> Result<Chosen, DeviceError> {
    Err(DeviceError::NotBuilt { backend: "gpu", feature: "gpu" })
}

/// `--device cuda`: the first CUDA device, or why there is none.
#[cfg(feature = "cuda")]
pub fn cuda() -> Result<Chosen, DeviceError> {
    Ok(Chosen::Cuda(crate::compute::cuda::first_device()?))
}

/// `--device cuda` in a build without the CUDA backend.
#[cfg(not(feature = "cuda"))]
pub fn cuda() -> Result<Chosen, DeviceError> {
    Err(DeviceError::NotBuilt { backend: "cuda", feature: "cuda" })
}

/// `--device auto`: a CUDA device, else a hardware wgpu adapter, else the
/// CPU (always the CPU for bf16).
pub fn auto(precision: crate::compute::cpu::Precision) -> Result<Chosen, DeviceError> {
    if precision != crate::compute::cpu::Precision::Fp32 {
        return cpu(precision);
    }
    #[cfg(feature = "cuda")]
    {
        use crate::compute::cuda::{first_device, libs::CudaLibrary, CudaError};
        match first_device() {
            Ok(ordinal) => return Ok(Chosen::Cuda(ordinal)),
            // A GPU is there but a runtime library is not: say why it is not used.
            Err(e @ CudaError::MissingLibrary(CudaLibrary::Nvrtc | CudaLibrary::Cublas)) => {
                tracing::warn!("--device auto: not using the CUDA device: {e}")
            }
            Err(_) => {}
        }
    }
    #[cfg(feature = "gpu")]
    {
        use crate::compute::gpu::{adapter_available, AdapterChoice};
        if adapter_available(AdapterChoice::HardwareOnly) {
            return Ok(Chosen::Gpu(AdapterChoice::HardwareOnly, GpuPrecision::Fp32));
        }
    }
    cpu(precision)
}

/// Opens the backend `$chosen` names and evaluates `$body` with `$b` bound to
/// it (by value); if it cannot be opened, evaluates `$fail` with `$e` bound to
/// the `DeviceError`. Both arms must have the same type.
macro_rules! on_backend {
    ($chosen:expr, |$b:ident| $body:expr, |$e:ident| $fail:expr) => {
        match $chosen {
            $crate::compute::device::Chosen::Cpu(precision) => {
                match $crate::compute::cpu::CpuBackend::from_env(precision) {
                    Ok($b) => $body,
                    Err(err) => {
                        let $e = $crate::compute::device::DeviceError::from(err);
                        $fail
                    }
                }
            }
            #[cfg(feature = "gpu")]
            $crate::compute::device::Chosen::Gpu(choice, precision) => {
                let opts = $crate::compute::gpu::GpuOptions { precision, ..Default::default() };
                match $crate::compute::gpu::GpuBackend::with_options(choice, opts) {
                    Ok($b) => $body,
                    Err(err) => {
                        let $e = $crate::compute::device::DeviceError::from(err);
                        $fail
                    }
                }
            }
            #[cfg(feature = "cuda")]
            $crate::compute::device::Chosen::Cuda(ordinal) => {
                match $crate::compute::cuda::CudaBackend::new(ordinal) {
                    Ok($b) => $body,
                    Err(err) => {
                        let $e = $crate::compute::device::DeviceError::from(err);
                        $fail
                    }
                }
            }
        }
    };
}
pub(crate) use on_backend;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_always_there_and_auto_resolves() {
        use crate::compute::cpu::Precision;
        assert_eq!(cpu(Precision::Fp32).map(Chosen::name).ok(), Some("cpu"));
        let auto = auto(Precision::Fp32).map(Chosen::name).unwrap_or_default();
        assert!(["cpu", "gpu", "cuda"].contains(&auto));
        assert_eq!(super::auto(Precision::Bf16).map(Chosen::name).ok(), Some("cpu"));
    }

    #[cfg(not(feature = "gpu"))]
    #[test]
    fn gpu_in_a_build_without_it_says_how_to_get_it() {
        let e = gpu(GpuPrecision::F16).expect_err("no gpu feature").to_string();
        assert!(e.contains("no gpu backend") && e.contains("--features gpu"), "{e}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_in_a_build_without_it_says_how_to_get_it() {
        let e = cuda().expect_err("no cuda feature").to_string();
        assert!(e.contains("no cuda backend") && e.contains("--features cuda"), "{e}");
    }
}
