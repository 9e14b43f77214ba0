//! ShardedManifest::decode + verify on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::ShardedManifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = ShardedManifest::decode(data) {
        assert_eq!(m.encode(), data, "decode then encode must give the same bytes");
        assert!(m.element_count >= 1 && m.shards >= 1 && u64::from(m.shards) <= m.element_count);
        let _ = m.verify();
    }
});
