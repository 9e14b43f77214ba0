//! Test support: `gpu_or_skip`, the one way GPU tests get an adapter. With
//! `MURMUR_REQUIRE_GPU=1` (CI, where lavapipe is installed) a missing adapter
//! FAILS the test; otherwise the test is skipped with the reason printed.
//! `coop_or_skip` does the same for adapters with f16 cooperative matrices
//! under `MURMUR_REQUIRE_COOP=1` (lavapipe has none, so CI skips those tests
//! with a message; on a GPU machine they must run).

use std::sync::OnceLock;

use super::{AdapterChoice, GpuBackend, GpuOptions};
use crate::compute::required::{decide, required};

/// True when the environment demands a GPU (`MURMUR_REQUIRE_GPU=1`).
pub fn gpu_required() -> bool {
    required("MURMUR_REQUIRE_GPU")
}

/// True when the environment demands cooperative matrices (`MURMUR_REQUIRE_COOP=1`).
pub fn coop_required() -> bool {
    required("MURMUR_REQUIRE_COOP")
}

fn open_or_fail<T>(test: &str, opened: Result<T, String>) -> Option<T> {
    let opened = opened.map_err(|why| format!("no GPU backend: {why}"));
    match decide(test, opened, gpu_required(), "MURMUR_REQUIRE_GPU") {
        Ok(b) => b,
        Err(msg) => panic!("{msg}"),
    }
}

/// The process-wide GPU backend (any adapter, lavapipe included), or None
/// after printing why the test is skipped. Panics when a GPU is required.
pub fn gpu_or_skip(test: &str) -> Option<&'static GpuBackend> {
    static SHARED: OnceLock<Result<GpuBackend, String>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| GpuBackend::new(AdapterChoice::Any).map_err(|e| e.to_string()));
    open_or_fail(test, shared.as_ref().map_err(|e| e.clone()))
}

/// A fresh backend with `opts` (its own device and counters), same rules.
pub fn fresh_gpu_or_skip(test: &str, opts: GpuOptions) -> Option<GpuBackend> {
    open_or_fail(test, GpuBackend::with_options(AdapterChoice::Any, opts).map_err(|e| e.to_string()))
}

/// A fresh backend with `opts` (a cooperative-matrix configuration), or
/// None after printing why; fails under `MURMUR_REQUIRE_COOP=1`.
pub fn coop_or_skip(test: &str, opts: GpuOptions) -> Option<GpuBackend> {
    let opened =
        GpuBackend::with_options(AdapterChoice::Any, opts).map_err(|e| format!("no such GPU backend: {e}"));
    match decide(test, opened, coop_required(), "MURMUR_REQUIRE_COOP") {
        Ok(b) => b,
        Err(msg) => panic!("{msg}"),
    }
}
