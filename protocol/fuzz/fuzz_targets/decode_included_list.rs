//! IncludedList::decode on arbitrary bytes: canonical, strictly increasing
//! signers (so `new` leaves it as it is), and its root computable.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::IncludedList;

fuzz_target!(|data: &[u8]| {
    if let Ok(l) = IncludedList::decode(data) {
        assert_eq!(l.encode(), data, "decode then encode must give the same bytes");
        assert_eq!(IncludedList::new(l.entries.clone()), l, "a decoded list is sorted and unique");
        let _ = l.root();
    }
});
