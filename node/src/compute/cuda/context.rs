//! Finding CUDA devices (for `murmur devices` and `--device`) and why the
//! backend could not open one. Nothing here touches a library before checking
//! it can be loaded, since cudarc panics on a missing one.

use cudarc::driver::result as driver;
use cudarc::driver::sys::CUdevice_attribute;
use thiserror::Error;

use super::libs::CudaLibrary;

/// Why the CUDA backend could not run.
#[derive(Debug, Error)]
pub enum CudaError {
    #[error("--device cuda: {} was not found; {}", .0.describe(), .0.remedy())]
    MissingLibrary(CudaLibrary),
    #[error("--device cuda: the CUDA driver reports no devices (see nvidia-smi)")]
    NoDevice,
    #[error("CUDA driver: {what}: {source}")]
    Driver {
        what: String,
        #[source]
        source: cudarc::driver::DriverError,
    },
    #[error("NVRTC could not compile shaders/cuda/{file} for sm_{arch}: {log}")]
    Compile { file: &'static str, arch: u32, log: String },
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("cuBLAS: {0}")]
    Cublas(String),
}

impl CudaError {
    pub(crate) fn driver(what: impl Into<String>) -> impl FnOnce(cudarc::driver::DriverError) -> CudaError {
        let what = what.into();
        move |source| CudaError::Driver { what, source }
    }
}

/// One CUDA device as `murmur devices` reports it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CudaDeviceSummary {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (u32, u32),
    pub memory_bytes: u64,
}

/// Checks that `libs` can be loaded, first-missing first.
pub(crate) fn require(libs: &[CudaLibrary]) -> Result<(), CudaError> {
    match libs.iter().find(|l| !l.present()) {
        Some(l) => Err(CudaError::MissingLibrary(*l)),
        None => Ok(()),
    }
}

/// How many devices the driver sees (0 when it cannot be initialised).
fn device_count() -> Result<usize, CudaError> {
    require(&[CudaLibrary::Driver])?;
    driver::init().map_err(CudaError::driver("cuInit"))?;
    let n = driver::device::get_count().map_err(CudaError::driver("counting devices"))?;
    Ok(n.max(0) as usize)
}

/// The device `auto` and `--device cuda` use: ordinal 0, once the driver,
/// NVRTC and cuBLAS are all loadable.
pub fn first_device() -> Result<usize, CudaError> {
    if device_count()? == 0 {
        return Err(CudaError::NoDevice);
    }
    require(&[CudaLibrary::Nvrtc, CudaLibrary::Cublas])?;
    Ok(0)
}

/// The compute capability (major, minor) of the device `ordinal`.
pub fn compute_capability(ordinal: usize) -> Result<(u32, u32), CudaError> {
    let dev = driver::device::get(ordinal as i32).map_err(CudaError::driver("opening a device"))?;
    let attr = |a| {
        // SAFETY: `dev` came from cuDeviceGet after cuInit.
        unsafe { driver::device::get_attribute(dev, a) }.map_err(CudaError::driver("reading an attribute"))
    };
    let major = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok((major.max(0) as u32, minor.max(0) as u32))
}

/// Every CUDA device the driver sees, without creating contexts.
pub fn list_devices() -> Result<Vec<CudaDeviceSummary>, CudaError> {
    let n = device_count()?;
    (0..n)
        .map(|ordinal| {
            let dev = driver::device::get(ordinal as i32).map_err(CudaError::driver("opening a device"))?;
            let name = driver::device::get_name(dev).map_err(CudaError::driver("reading a name"))?;
            // SAFETY: `dev` came from cuDeviceGet after cuInit.
            let memory =
                unsafe { driver::device::total_mem(dev) }.map_err(CudaError::driver("reading memory"))?;
            Ok(CudaDeviceSummary {
                ordinal,
                name,
                compute_capability: compute_capability(ordinal)?,
                memory_bytes: memory as u64,
            })
        })
        .collect()
}
