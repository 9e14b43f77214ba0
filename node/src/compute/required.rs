//! What a device test does when the device or library it needs is missing:
//! it fails where an environment variable demands it (`MURMUR_REQUIRE_GPU`,
//! `MURMUR_REQUIRE_COOP`, `MURMUR_REQUIRE_CUDA`, `MURMUR_REQUIRE_NVRTC`: CI
//! and the GPU machine) and is skipped, with the reason printed, elsewhere.
//! Shared by the wgpu and CUDA backends' test support.

/// True when `var` is set to 1.
pub fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// Err (fail, saying why) when `required`, Ok(None) (skip, reason printed)
/// otherwise; what was opened passes through.
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

#[cfg(test)]
mod tests {
    use super::decide;

    #[test]
    fn a_missing_device_fails_when_required_and_skips_otherwise() {
        let missing: Result<u8, String> = Err("no device".into());
        let v = "MURMUR_REQUIRE_GPU";
        assert!(
            decide("t", missing.clone(), true, v).is_err_and(|e| e.contains(v) && e.contains("no device"))
        );
        assert_eq!(decide("t", missing, false, v), Ok(None));
        assert_eq!(decide("t", Ok(3u8), true, v), Ok(Some(3)));
    }
}
