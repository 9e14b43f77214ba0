//! SignedRecord::decode on arbitrary bytes (the record of what a node
//! signed, read back from its data directory after a restart): what
//! decodes encodes to bytes that decode to the same record (included
//! lists that do not match their result are dropped on reading, so the
//! first reading may be shorter than the bytes).
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::SignedRecord;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = SignedRecord::decode(data) {
        let again = SignedRecord::decode(&r.encode()).expect("a decoded record encodes to a valid one");
        assert_eq!(again, r, "reading is idempotent");
    }
});
