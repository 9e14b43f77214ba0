//! decode_delta on arbitrary bytes. The first byte chooses whether to trust
//! the payload's own header for the codec and element count (capped), so the
//! fuzzer reaches every codec body, or to use a codec and count it picks.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::codec::{decode_delta, encode_delta, Codec, DeltaPayloadHeader};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let (codec, n) = match DeltaPayloadHeader::decode_prefix(rest) {
        Ok((h, _)) if first & 1 == 0 && h.element_count <= 1 << 16 => (h.codec, h.element_count as usize),
        _ => {
            let codec = match first >> 5 {
                0 => Codec::F32,
                1 => Codec::F16,
                2 => Codec::Bf16,
                3 => Codec::Int8Block { block: 3 },
                4 => Codec::Int4Block { block: 5 },
                5 => Codec::TopK { density_ppm: 300_000, block: 2 },
                _ => Codec::TopKMask { density_ppm: 300_000, block: 2 },
            };
            (codec, usize::from(first & 0x1e))
        }
    };
    if let Ok(values) = decode_delta(rest, codec, n) {
        assert_eq!(values.len(), n);
        assert!(values.iter().all(|v| v.is_finite()));
        // Whatever decodes can be encoded again with the same codec.
        let again = encode_delta(codec, &values);
        assert!(again.is_ok(), "{again:?}");
    }
});
