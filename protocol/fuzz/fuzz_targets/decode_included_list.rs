//! IncludedList::decode and IncludedSigners::decode on arbitrary bytes:
//! canonical, strictly increasing signers (so `new` leaves a list as it
//! is), and their roots computable (the signers' against a roster built
//! from the bytes, which may not fit it).
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::{IncludedList, IncludedSigners};
use murmur_protocol::PublicKey;

fuzz_target!(|data: &[u8]| {
    if let Ok(l) = IncludedList::decode(data) {
        assert_eq!(l.encode(), data, "decode then encode must give the same bytes");
        assert_eq!(IncludedList::new(l.entries.clone()), l, "a decoded list is sorted and unique");
        let _ = l.root();
    }
    if let Ok(s) = IncludedSigners::decode(data) {
        assert_eq!(s.encode(), data, "decode then encode must give the same bytes");
        let roster: Vec<PublicKey> = (0..(data.len() % 64) as u8).map(|i| PublicKey([i; 32])).collect();
        if let Ok(signers) = s.signers(&roster) {
            assert!(signers.windows(2).all(|p| p[0] < p[1]), "signers ascend");
            assert!(s.root(&roster).is_ok());
        }
    }
});
