//! Tests of the codecs: sizes, error bounds (property-tested), canonical
//! rejection, totality on arbitrary bytes, and error feedback.

use super::*;
use proptest::prelude::*;

const ALL: [Codec; 10] = [
    Codec::F32,
    Codec::F16,
    Codec::Bf16,
    Codec::Int8Block { block: 64 },
    Codec::Int8Block { block: 7 },
    Codec::Int4Block { block: 32 },
    Codec::TopK { density_ppm: 100_000, block: 16 },
    Codec::TopK { density_ppm: 1_000_000, block: 5 },
    Codec::TopKMask { density_ppm: 200_000, block: 3 },
    Codec::TopKMask { density_ppm: 1_000_000, block: 64 },
];

/// Check `decoded` against each codec's stated per-element bound.
fn check_bound(codec: Codec, x: &[f32], y: &[f32]) -> Result<(), String> {
    let err = |i: usize| (f64::from(y[i]) - f64::from(x[i])).abs();
    let blockwise = |vals: &[f32], b: u32, levels: f32, i_of: &dyn Fn(usize) -> usize| {
        for (bi, chunk) in vals.chunks(b as usize).enumerate() {
            let bound = block_bound(block::absmax(chunk), levels);
            for j in 0..chunk.len() {
                let i = i_of(bi * b as usize + j);
                if err(i) > bound {
                    return Err(format!("{codec:?} element {i}: {} vs {} > {bound}", y[i], x[i]));
                }
            }
        }
        Ok(())
    };
    match codec {
        Codec::F32 => (0..x.len()).try_for_each(|i| {
            if y[i].to_bits() == x[i].to_bits() {
                Ok(())
            } else {
                Err(format!("f32 changed {i}"))
            }
        }),
        Codec::F16 | Codec::Bf16 => (0..x.len()).try_for_each(|i| {
            let bound = if codec == Codec::F16 { f16_bound(x[i]) } else { bf16_bound(x[i]) };
            if err(i) <= bound {
                Ok(())
            } else {
                Err(format!("{codec:?} element {i}: {} vs {}", y[i], x[i]))
            }
        }),
        Codec::Int8Block { block } => blockwise(x, block, 127.0, &|i| i),
        Codec::Int4Block { block } => blockwise(x, block, 7.0, &|i| i),
        Codec::TopK { density_ppm, block } | Codec::TopKMask { density_ppm, block } => {
            // Kept values are int8 (TopK) or int4 (TopKMask) over blocks of kept values.
            let levels = if matches!(codec, Codec::TopK { .. }) { 127.0 } else { 7.0 };
            let kept = topk::select(x, density_ppm);
            let picked: Vec<f32> = kept.iter().map(|&i| x[i as usize]).collect();
            blockwise(&picked, block, levels, &|j| kept[j] as usize)?;
            let tau = picked.iter().fold(f32::INFINITY, |m, v| m.min(v.abs()));
            for i in 0..x.len() {
                if kept.binary_search(&(i as u32)).is_err() && (y[i] != 0.0 || x[i].abs() > tau) {
                    return Err(format!("{codec:?} dropped element {i} = {} above τ = {tau}", x[i]));
                }
            }
            Ok(())
        }
    }
}

fn values() -> impl Strategy<Value = Vec<f32>> {
    let elem = prop_oneof![
        8 => -10.0f32..10.0,
        1 => -1e-30f32..1e-30,
        1 => -1e6f32..1e6,
        1 => Just(0.0f32),
        1 => proptest::num::f32::NORMAL | proptest::num::f32::SUBNORMAL | proptest::num::f32::ZERO,
    ];
    proptest::collection::vec(elem, 0..300)
        .prop_map(|v| v.into_iter().map(|x| x.clamp(-MAX_ABS_VALUE, MAX_ABS_VALUE)).collect())
}

fn codecs() -> impl Strategy<Value = Codec> {
    prop_oneof![
        Just(Codec::F32),
        Just(Codec::F16),
        Just(Codec::Bf16),
        (1u32..80).prop_map(|block| Codec::Int8Block { block }),
        (1u32..80).prop_map(|block| Codec::Int4Block { block }),
        (1u32..=PPM, 1u32..40).prop_map(|(density_ppm, block)| Codec::TopK { density_ppm, block }),
        (1u32..=PPM, 1u32..40).prop_map(|(density_ppm, block)| Codec::TopKMask { density_ppm, block }),
    ]
}

proptest! {
    #[test]
    fn round_trip_error_within_stated_bound(codec in codecs(), x in values()) {
        let payload = encode_delta(codec, &x).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(payload.len() as u64, codec.payload_len(x.len() as u64).unwrap_or(0));
        let y = decode_delta(&payload, codec, x.len()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        check_bound(codec, &x, &y).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn decoders_are_total(bytes in proptest::collection::vec(any::<u8>(), 0..200), codec in codecs(), n in 0usize..64) {
        // Never panics; on success every value is finite.
        if let Ok(v) = decode_delta(&bytes, codec, n) {
            prop_assert!(v.iter().all(|x| x.is_finite() && x.abs() <= MAX_ABS_VALUE));
            // What decodes can always be re-encoded with the same codec.
            prop_assert!(encode_delta(codec, &v).is_ok());
        }
    }

    #[test]
    fn corrupted_payloads_never_panic(codec in codecs(), x in values(), flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut payload = encode_delta(codec, &x).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let i = flip.index(payload.len());
        payload[i] ^= 1 << bit;
        let _ = decode_delta(&payload, codec, x.len());
    }
}

#[test]
fn sizes_match_the_formulas() {
    assert_eq!(Codec::F32.payload_len(10), Some(2 + 1 + 8 + 40));
    assert_eq!(Codec::Int8Block { block: 4 }.body_len(10), Some(3 * 4 + 10));
    assert_eq!(Codec::Int4Block { block: 4 }.body_len(9), Some(3 * 4 + 5));
    assert_eq!(topk_count(1000, 10_000), 10);
    assert_eq!(topk_count(1, 1), 1);
    assert_eq!(topk_count(0, 1), 0);
    assert_eq!(Codec::TopK { density_ppm: 10_000, block: 4 }.body_len(1000), Some(40 + 12 + 10));
    // 1000 elements at 14%: 140 kept; 125 mask bytes, 1 scale, 70 value bytes.
    assert_eq!(Codec::TopKMask { density_ppm: 140_000, block: 256 }.body_len(1000), Some(125 + 4 + 70));
    assert_eq!(Codec::TopKMask { density_ppm: 0, block: 256 }.body_len(1), None);
    assert_eq!(Codec::F32.body_len(MAX_ELEMENTS + 1), None);
    assert_eq!(Codec::Int8Block { block: 0 }.body_len(1), None);
    for c in ALL {
        let x: Vec<f32> = (0..50).map(|i| (i as f32 - 25.0) * 0.37).collect();
        let p = encode_delta(c, &x).expect("encodes");
        assert_eq!(p.len() as u64, c.payload_len(50).expect("len"), "{c:?}");
        let (h, len) = DeltaPayloadHeader::decode_prefix(&p).expect("header");
        assert_eq!((h.codec, h.element_count, len), (c, 50, header_len(c)));
    }
}

#[test]
fn encoder_rejects_non_finite_and_huge_values() {
    assert_eq!(encode_delta(Codec::F32, &[1.0, f32::NAN]), Err(CodecError::NonFinite { index: 1 }));
    assert_eq!(encode_delta(Codec::F16, &[f32::INFINITY]), Err(CodecError::NonFinite { index: 0 }));
    assert_eq!(encode_delta(Codec::F16, &[0.0, 1e30]), Err(CodecError::OutOfRange { index: 1 }));
}

#[test]
fn decoder_checks_codec_length_and_canonical_form() {
    let x = [1.0f32, -2.0, 3.0];
    let p = encode_delta(Codec::Int8Block { block: 2 }, &x).expect("encodes");
    assert!(matches!(decode_delta(&p, Codec::F32, 3), Err(CodecError::WrongCodec { .. })));
    assert!(matches!(
        decode_delta(&p, Codec::Int8Block { block: 2 }, 4),
        Err(CodecError::WrongLength { .. })
    ));
    assert!(matches!(
        decode_delta(&p[..p.len() - 1], Codec::Int8Block { block: 2 }, 3),
        Err(CodecError::BodyLength { .. })
    ));
    // A value of -128 is not canonical int8.
    let mut bad = p.clone();
    let last = bad.len() - 1;
    bad[last] = 0x80;
    assert!(matches!(decode_delta(&bad, Codec::Int8Block { block: 2 }, 3), Err(CodecError::NonCanonical(_))));
    // A negative scale is not canonical.
    let mut bad = p.clone();
    bad[header_len(Codec::Int8Block { block: 2 }) + 3] |= 0x80;
    assert!(matches!(decode_delta(&bad, Codec::Int8Block { block: 2 }, 3), Err(CodecError::NonCanonical(_))));
    // An odd int4 payload's padding nibble must be zero.
    let c4 = Codec::Int4Block { block: 8 };
    let mut bad = encode_delta(c4, &x).expect("encodes");
    let last = bad.len() - 1;
    bad[last] |= 0x10;
    assert!(matches!(decode_delta(&bad, c4, 3), Err(CodecError::NonCanonical(_))));
    // A finite value beyond what the encoder accepts is rejected too.
    let mut bad = encode_delta(Codec::F32, &x).expect("encodes");
    let h = header_len(Codec::F32);
    bad[h..h + 4].copy_from_slice(&1e30f32.to_bits().to_le_bytes());
    assert_eq!(decode_delta(&bad, Codec::F32, 3), Err(CodecError::OutOfRange { index: 0 }));
    let mut bad = encode_delta(Codec::Int8Block { block: 2 }, &x).expect("encodes");
    let h = header_len(Codec::Int8Block { block: 2 });
    bad[h..h + 4].copy_from_slice(&1e30f32.to_bits().to_le_bytes());
    assert_eq!(
        decode_delta(&bad, Codec::Int8Block { block: 2 }, 3),
        Err(CodecError::OutOfRange { index: 0 })
    );
    // f16 infinity on the wire is rejected.
    let mut bad = encode_delta(Codec::F16, &x).expect("encodes");
    let h = header_len(Codec::F16);
    bad[h..h + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
    assert_eq!(decode_delta(&bad, Codec::F16, 3), Err(CodecError::NonFinite { index: 0 }));
}

#[test]
fn topk_indices_must_increase_and_fit() {
    let c = Codec::TopK { density_ppm: PPM, block: 8 };
    let x = [1.0f32, 2.0];
    let p = encode_delta(c, &x).expect("encodes");
    let h = header_len(c);
    let mut bad = p.clone();
    bad[h..h + 4].copy_from_slice(&1u32.to_le_bytes()); // indices 1, 1
    assert!(matches!(decode_delta(&bad, c, 2), Err(CodecError::NonCanonical(_))));
    let mut bad = p.clone();
    bad[h + 4..h + 8].copy_from_slice(&2u32.to_le_bytes()); // index 2 of 2
    assert!(matches!(decode_delta(&bad, c, 2), Err(CodecError::NonCanonical(_))));
}

#[test]
fn topk_mask_marks_exactly_k_elements_within_range() {
    let c = Codec::TopKMask { density_ppm: 400_000, block: 8 };
    // 5 elements at 40%: keeps 7 and -7 (indices 0 and 3); scale 1, exact.
    let x = [7.0f32, 1.0, 0.0, -7.0, 2.0];
    let p = encode_delta(c, &x).expect("encodes");
    let mask = header_len(c);
    assert_eq!(p[mask], 0b0000_1001);
    assert_eq!(decode_delta(&p, c, 5).expect("decodes"), vec![7.0, 0.0, 0.0, -7.0, 0.0]);
    let mut bad = p.clone();
    bad[mask] = 0b0000_0001; // one bit instead of k = 2
    assert!(matches!(decode_delta(&bad, c, 5), Err(CodecError::NonCanonical(_))));
    let mut bad = p.clone();
    bad[mask] = 0b0010_0001; // bit 5 is past the 5 elements
    assert!(matches!(decode_delta(&bad, c, 5), Err(CodecError::NonCanonical(_))));
}

#[test]
fn topk_selection_is_deterministic_on_ties() {
    let x = [1.0f32, -1.0, 1.0, 0.5];
    assert_eq!(topk::select(&x, 500_000), vec![0, 1]);
}

#[test]
fn error_feedback_carries_what_was_dropped() {
    let c = Codec::TopK { density_ppm: 250_000, block: 4 };
    let delta = [4.0f32, 3.0, 2.0, 1.0];
    let mut ef = ErrorFeedback::new(4);
    let mut total = [0f32; 4];
    for _ in 0..10 {
        let p = ef.encode(c, &delta).expect("encodes");
        let d = decode_delta(&p, c, 4).expect("decodes");
        for (t, v) in total.iter_mut().zip(&d) {
            *t += v;
        }
    }
    // Every coordinate eventually got sent at least once.
    assert!(total.iter().all(|t| *t > 0.0), "{total:?}");
    let sent_plus_residual: Vec<f32> = total.iter().zip(ef.residual()).map(|(t, r)| t + r).collect();
    for (s, d) in sent_plus_residual.iter().zip(&delta) {
        assert!((s - 10.0 * d).abs() < 1e-4, "{sent_plus_residual:?}");
    }
    assert!(matches!(ef.encode(c, &[1.0]), Err(CodecError::WrongLength { .. })));
    ef.reset();
    assert!(ef.residual().iter().all(|r| *r == 0.0));
}

#[test]
fn error_feedback_over_ranges_keeps_what_each_range_dropped() {
    let c = Codec::Int8Block { block: 4 };
    let delta: Vec<f32> = (0..10).map(|i| (i as f32 * 0.7).sin()).collect();
    let ranges = [0..4, 4..7, 7..10];
    let mut ef = ErrorFeedback::new(10);
    let payloads = ef.encode_ranges(c, &delta, &ranges).expect("encodes");
    assert_eq!(payloads.len(), 3);
    for (p, r) in payloads.iter().zip(&ranges) {
        let d = decode_delta(p, c, r.len()).expect("decodes");
        for ((v, x), res) in d.iter().zip(&delta[r.clone()]).zip(&ef.residual()[r.clone()]) {
            assert!((v + res - x).abs() < 1e-6);
        }
    }
    assert!(ef.encode_ranges(c, &delta, std::slice::from_ref(&(0..11))).is_err());
    assert!(ef.encode_ranges(c, &delta[..9], &ranges).is_err());
}

#[test]
fn relative_error_is_reported() {
    assert_eq!(relative_l2_error(&[1.0, 0.0], &[1.0, 0.0]), 0.0);
    assert!((relative_l2_error(&[3.0, 4.0], &[3.0, 4.5]) - 0.1).abs() < 1e-12);
    assert_eq!(relative_l2_error(&[0.0], &[1.0]), f64::INFINITY);
}

#[test]
fn names_parse_back() {
    for c in ALL {
        assert_eq!(c.name().parse::<Codec>(), Ok(c));
    }
    assert_eq!("int8".parse::<Codec>(), Ok(Codec::Int8Block { block: 256 }));
    assert_eq!("topk".parse::<Codec>(), Ok(Codec::TopK { density_ppm: 10_000, block: 256 }));
    assert_eq!("topk-1000ppm".parse::<Codec>(), Ok(Codec::TopK { density_ppm: 1000, block: 256 }));
    assert_eq!("topkmask".parse::<Codec>(), Ok(Codec::TopKMask { density_ppm: 140_000, block: 256 }));
    for bad in [
        "",
        "f64",
        "int8-b0",
        "int8-5ppm",
        "f32-b4",
        "topk-0ppm",
        "int4-x",
        "topkmask-0ppm",
        "topkmask-1000001ppm",
        "topkmask-b0",
    ] {
        assert!(bad.parse::<Codec>().is_err(), "{bad}");
    }
}
