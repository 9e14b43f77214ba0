//! Test support: `cuda_or_skip`, the one way CUDA tests get a device. With
//! `MURMUR_REQUIRE_CUDA=1` a missing device or library FAILS the test;
//! otherwise the test is skipped with the reason printed.

use super::{first_device, CudaBackend};
pub use crate::compute::required::decide;
use crate::compute::required::required;

/// True when the environment demands a CUDA device (`MURMUR_REQUIRE_CUDA=1`).
pub fn cuda_required() -> bool {
    required("MURMUR_REQUIRE_CUDA")
}

/// True when the environment demands NVRTC (`MURMUR_REQUIRE_NVRTC=1`).
pub fn nvrtc_required() -> bool {
    required("MURMUR_REQUIRE_NVRTC")
}

/// A fresh CUDA backend on the first device, or None after printing why the
/// test is skipped. Panics when MURMUR_REQUIRE_CUDA=1 and there is none.
pub fn cuda_or_skip(test: &str) -> Option<CudaBackend> {
    let opened = first_device().and_then(CudaBackend::new).map_err(|e| format!("no CUDA backend: {e}"));
    match decide(test, opened, cuda_required(), "MURMUR_REQUIRE_CUDA") {
        Ok(b) => b,
        Err(msg) => panic!("{msg}"),
    }
}
