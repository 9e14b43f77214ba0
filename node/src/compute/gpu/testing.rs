//! Test support: `gpu_or_skip`, the one way GPU tests get an adapter. With
//! `MURMUR_REQUIRE_GPU=1` (CI, where lavapipe is installed) a missing adapter
//! FAILS the test; otherwise the test is skipped with the reason printed.

use std::sync::OnceLock;

use super::{AdapterChoice, GpuBackend, GpuOptions};

/// True when the environment demands a GPU (`MURMUR_REQUIRE_GPU=1`).
pub fn gpu_required() -> bool {
    std::env::var("MURMUR_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// What a test does with the outcome of opening a GPU.
pub fn decide<T>(test: &str, opened: Result<T, String>, required: bool) -> Result<Option<T>, String> {
    match opened {
        Ok(b) => Ok(Some(b)),
        Err(why) if required => Err(format!("{test}: MURMUR_REQUIRE_GPU=1 but no GPU backend: {why}")),
        Err(why) => {
            eprintln!(
                "skipping {test}: no GPU backend ({why}); set MURMUR_REQUIRE_GPU=1 to make this a failure"
            );
            Ok(None)
        }
    }
}

fn open_or_fail<T>(test: &str, opened: Result<T, String>) -> Option<T> {
    match decide(test, opened, gpu_required()) {
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

#[cfg(test)]
mod tests {
    use super::decide;

    #[test]
    fn a_missing_gpu_fails_when_required_and_skips_otherwise() {
        let missing: Result<u8, String> = Err("no adapter".into());
        assert!(decide("t", missing.clone(), true).is_err());
        assert_eq!(decide("t", missing, false), Ok(None));
        assert_eq!(decide("t", Ok(3u8), true), Ok(Some(3)));
    }
}
