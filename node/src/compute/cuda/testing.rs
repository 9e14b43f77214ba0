//! Test support: `cuda_or_skip`, the one way CUDA tests get a device. With
//! `MURMUR_REQUIRE_CUDA=1` a missing device or library FAILS the test;
//! otherwise the test is skipped with the reason printed.

use super::{first_device, CudaBackend};

/// True when the environment demands a CUDA device (`MURMUR_REQUIRE_CUDA=1`).
pub fn cuda_required() -> bool {
    std::env::var("MURMUR_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

/// True when the environment demands NVRTC (`MURMUR_REQUIRE_NVRTC=1`).
pub fn nvrtc_required() -> bool {
    std::env::var("MURMUR_REQUIRE_NVRTC").is_ok_and(|v| v == "1")
}

/// What a test does with a missing prerequisite: Err (fail) when `required`,
/// Ok(None) (skip, reason printed) otherwise.
pub fn decide<T>(
    test: &str,
    opened: Result<T, String>,
    required: bool,
    var: &str,
) -> Result<Option<T>, String> {
    match opened {
        Ok(b) => Ok(Some(b)),
        Err(why) if required => Err(format!("{test}: {var}=1 but {why}")),
        Err(why) => {
            eprintln!("skipping {test}: {why}; set {var}=1 to make this a failure");
            Ok(None)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::decide;

    #[test]
    fn a_missing_device_fails_when_required_and_skips_otherwise() {
        let missing: Result<u8, String> = Err("no device".into());
        assert!(decide("t", missing.clone(), true, "V").is_err());
        assert_eq!(decide("t", missing, false, "V"), Ok(None));
        assert_eq!(decide("t", Ok(3u8), true, "V"), Ok(Some(3)));
    }
}
