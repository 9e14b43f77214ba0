//! DeltaManifest::decode + verify on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::DeltaManifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = DeltaManifest::decode(data) {
        assert_eq!(m.encode(), data, "decode then encode must give the same bytes");
        let _ = m.verify();
    }
});
