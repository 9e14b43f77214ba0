//! RoundCommit::decode + verify on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::RoundCommit;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = RoundCommit::decode(data) {
        assert_eq!(c.encode(), data, "decode then encode must give the same bytes");
        let _ = c.verify();
    }
});
