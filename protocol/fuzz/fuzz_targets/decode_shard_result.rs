//! ShardResult::decode + verify on arbitrary bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::committee::messages::SHARD_RESULT_BYTES;
use murmur_protocol::committee::ShardResult;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = ShardResult::decode(data) {
        assert_eq!(r.encode(), data, "decode then encode must give the same bytes");
        assert_eq!(data.len(), SHARD_RESULT_BYTES);
        let _ = r.verify();
    }
});
