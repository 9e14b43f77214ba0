//! Ticket::decode + verify + check on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::{PublicKey, RunId, Ticket};

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = Ticket::decode(data) {
        assert_eq!(t.encode(), data, "decode then encode must give the same bytes");
        let _ = t.verify();
        let _ = t.check_for(&RunId([0; 32]), &[t.operator], &PublicKey([0; 32]), 0);
    }
});
