//! TrainingState::decode on arbitrary bytes, expecting the element count
//! the header claims (capped small), or a count from the first byte.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::{StateHeader, TrainingState};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let expected = match StateHeader::decode_prefix(rest) {
        Ok(h) if first % 2 == 0 && h.element_count <= 1 << 16 => h.element_count as usize,
        _ => usize::from(first),
    };
    if let Ok(s) = TrainingState::decode(rest, expected) {
        assert_eq!(s.encode(), rest, "decode then encode must give the same bytes");
        assert!(s.params.iter().all(|v| v.is_finite()));
        let _ = s.id();
    }
});
