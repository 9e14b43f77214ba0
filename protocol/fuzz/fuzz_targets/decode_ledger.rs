//! Ledger::decode on arbitrary bytes (a ledger blob fetched from a peer):
//! canonical, a strictly increasing roster and excluded set, and a hash.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::Ledger;

fuzz_target!(|data: &[u8]| {
    if let Ok(l) = Ledger::decode(data) {
        assert_eq!(l.encode(), data, "decode then encode must give the same bytes");
        assert!(l.roster.windows(2).all(|p| p[0] < p[1]), "the roster ascends");
        let _ = l.hash();
    }
});
