//! AVX2 packing: the transpose of sources contiguous along k, in 8 × 8
//! blocks, with bf16 rounding that gives `round_bf16`'s bits.

use std::arch::x86_64::*;

use super::{conv, Source};

/// Rounds 8 floats to bf16 precision exactly as `round_bf16` does (ties
/// to even; NaN stays a quiet NaN).
#[inline(always)]
unsafe fn round8(v: __m256) -> __m256 {
    let b = _mm256_castps_si256(v);
    let lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    let rounded = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    let nan = _mm256_or_si256(b, _mm256_set1_epi32(0x0040_0000));
    let is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    let out = _mm256_blendv_epi8(rounded, nan, is_nan);
    _mm256_castsi256_ps(_mm256_and_si256(out, _mm256_set1_epi32(0xffff_0000u32 as i32)))
}

/// Transposes 8 rows of 8 floats: `out[p]` holds `rows[0..8][p]`.
#[inline(always)]
unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xee>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xee>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xee>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xee>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// `transpose_strip` in blocks of 8 rows × 8 steps; the last group of a
/// strip narrower than 8 is stored through a lane mask, rows past `h`
/// read as zeros, and steps past the last whole block go one by one.
///
/// # Safety
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn transpose_strip(strip: &mut [f32], s: Source<'_>) {
    let Source { x, base, kc, r, h, round, .. } = s;
    assert!(strip.len() >= kc * r && h <= r && r <= 32, "pack: strip too small or wider than 32");
    // Bounds-checked once: every read below stays inside these rows.
    let rows: [&[f32]; 32] =
        std::array::from_fn(|i| if i < h { &x.data[base + i * x.rs..][..kc] } else { &[] });
    let blocks = kc / 8;
    let out = strip.as_mut_ptr();
    for g in (0..r).step_by(8) {
        let lanes = 8.min(r - g);
        let mask =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for blk in 0..blocks {
            let p = blk * 8;
            let v: [__m256; 8] = std::array::from_fn(|l| {
                let i = g + l;
                if i < h {
                    // SAFETY: rows[i] holds kc ≥ p + 8 floats.
                    unsafe { _mm256_loadu_ps(rows[i].as_ptr().add(p)) }
                } else {
                    _mm256_setzero_ps()
                }
            });
            let t = transpose8(v);
            for (q, mut t) in t.into_iter().enumerate() {
                if round {
                    t = round8(t);
                }
                // SAFETY: (p+q)·r + g + lanes ≤ kc·r ≤ strip.len().
                let d = out.add((p + q) * r + g);
                if lanes == 8 {
                    _mm256_storeu_ps(d, t);
                } else {
                    _mm256_maskstore_ps(d, mask, t);
                }
            }
        }
    }
    for p in blocks * 8..kc {
        let d = &mut strip[p * r..(p + 1) * r];
        for (i, d) in d.iter_mut().enumerate() {
            *d = if i < h { conv(rows[i][p], round) } else { 0.0 };
        }
    }
}
