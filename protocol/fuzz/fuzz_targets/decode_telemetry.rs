//! Telemetry::decode + verify on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::Telemetry;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = Telemetry::decode(data) {
        assert_eq!(t.encode(), data, "decode then encode must give the same bytes");
        let _ = t.verify();
    }
});
