//! RunSpec::decode on arbitrary bytes: never panics; what decodes is canonical.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::RunSpec;

fuzz_target!(|data: &[u8]| {
    if let Ok(spec) = RunSpec::decode(data) {
        assert_eq!(spec.encode(), data, "decode then encode must give the same bytes");
        let _ = spec.run_id();
    }
});
