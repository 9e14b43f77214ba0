//! Test support: `gpu_or_skip`, the one way GPU tests get an adapter. With
//! `MURMUR_REQUIRE_GPU=1` (CI, where lavapipe is installed) a missing adapter
//! FAILS the test; otherwise the test is skipped with the reason printed.
//! `coop_or_skip` does the same for adapters with f16 cooperative matrices
//! under `MURMUR_REQUIRE_COOP=1` (lavapipe has none, so CI skips those tests
//! with a message; on a GPU machine they must run).

use std::sync::OnceLock;

use super::{AdapterChoice, GpuBackend, GpuOptions};

/// True when the environment demands a GPU (`MURMUR_REQUIRE_GPU=1`).
pub fn gpu_required() -> bool {
    std::env::var("MURMUR_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// True when the environment demands cooperative matrices (`MURMUR_REQUIRE_COOP=1`).
pub fn coop_required() -> bool {
    std::env::var("MURMUR_REQUIRE_COOP").is_ok_and(|v| v == "1")
}

/// What a test does with the outcome of opening a GPU; `var` is the
/// variable that makes a missing one a failure (set when `required`).
pub fn decide<T>(
    test: &str,
    opened: Result<T, String>,
    required: bool,
    var: &str,
) -> Result<Option<T>, String> {
    match opened {
        Ok(b) => Ok(Some(b)),
        Err(why) if required => Err(format!("{test}: {var}=1 but no such GPU backend: {why}")),
        Err(why) => {
            eprintln!("skipping {test}: no such GPU backend ({why}); set {var}=1 to make this a failure");
            Ok(None)
        }
    }
}

fn open_or_fail<T>(test: &str, opened: Result<T, String>) -> Option<T> {
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
    let opened = GpuBackend::with_options(AdapterChoice::Any, opts).map_err(|e| e.to_string());
    match decide(test, opened, coop_required(), "MURMUR_REQUIRE_COOP") {
        Ok(b) => b,
        Err(msg) => panic!("{msg}"),
    }
}

#[cfg(test)]
mod tests {
    use super::decide;

    #[test]
    fn a_missing_gpu_fails_when_required_and_skips_otherwise() {
        let missing: Result<u8, String> = Err("no adapter".into());
        let v = "MURMUR_REQUIRE_GPU";
        assert!(decide("t", missing.clone(), true, v).is_err_and(|e| e.contains(v)));
        assert_eq!(decide("t", missing, false, v), Ok(None));
        assert_eq!(decide("t", Ok(3u8), true, v), Ok(Some(3)));
    }
}
