//! DatasetManifest::decode on arbitrary bytes: never panics; what decodes is
//! canonical and its window arithmetic stays in range.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::dataset::{DatasetManifest, Split};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = DatasetManifest::decode(data) {
        assert_eq!(m.encode(), data, "decode then encode must give the same bytes");
        let _ = m.id();
        for split in [Split::Train, Split::Val] {
            for len in [1u64, 65, 1025] {
                let n = m.windows(split, len);
                if n > 0 {
                    let (shard, first) = m.locate(split, len, n - 1).expect("last window locates");
                    let entry = m.shards(split)[shard];
                    assert!(first + len <= u64::from(entry.tokens));
                }
                assert!(m.locate(split, len, n).is_none());
            }
        }
    }
});
