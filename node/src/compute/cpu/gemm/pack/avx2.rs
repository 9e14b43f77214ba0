//! AVX2 packing: the transpose of sources contiguous along k, in 8 × 8
//! blocks, and whole strips of sources contiguous along the strip (with
//! non-temporal stores for weight images), with bf16 rounding that gives
//! `round_bf16`'s bits.

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

/// Stores 8 floats at `d`: non-temporal where `stream` asks for it and
/// `d` is 32-byte aligned (a weight image's writes, which the next step's
/// GEMMs read long after), else a plain store.
#[inline(always)]
unsafe fn store8(d: *mut f32, v: __m256, stream: bool) {
    if stream && (d as usize).is_multiple_of(32) {
        _mm256_stream_ps(d, v);
    } else {
        _mm256_storeu_ps(d, v);
    }
}

/// `copy_strip` of a whole strip (`h == r`, a multiple of 8 up to 32):
/// step p is `r` consecutive floats, copied (rounded for bf16) 8 at a
/// time, with non-temporal stores where `stream` asks for them.
///
/// # Safety
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn copy_strip(strip: &mut [f32], s: Source<'_>) {
    let Source { x, base, kc, r, h, round, stream } = s;
    assert!(h == r && r.is_multiple_of(8) && r <= 32 && strip.len() >= kc * r, "pack: not a whole strip");
    // Bounds-checked once: step p reads x.data[base + p·cs..][..r].
    assert!(kc == 0 || base + (kc - 1) * x.cs + r <= x.data.len(), "pack: source too short");
    let (src, out) = (x.data.as_ptr().add(base), strip.as_mut_ptr());
    for p in 0..kc {
        for g in (0..r).step_by(8) {
            let mut v = _mm256_loadu_ps(src.add(p * x.cs + g));
            if round {
                v = round8(v);
            }
            store8(out.add(p * r + g), v, stream);
        }
    }
}

/// `transpose_strip` in blocks of 8 rows × 8 steps (all of a strip's row
/// groups for one block of steps before the next, so each step's `r`
/// floats are written together: whole lines for non-temporal stores); the
/// last group of a strip narrower than 8 is stored through a lane mask,
/// rows past `h` read as zeros, and steps past the last whole block go
/// one by one.
///
/// # Safety
/// The CPU supports AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn transpose_strip(strip: &mut [f32], s: Source<'_>) {
    let Source { x, base, kc, r, h, round, stream } = s;
    assert!(strip.len() >= kc * r && h <= r && r <= 32, "pack: strip too small or wider than 32");
    // Bounds-checked once: every read below stays inside these rows.
    let rows: [&[f32]; 32] =
        std::array::from_fn(|i| if i < h { &x.data[base + i * x.rs..][..kc] } else { &[] });
    let blocks = kc / 8;
    let out = strip.as_mut_ptr();
    // The lanes of a strip's last group when it is narrower than 8 (the
    // only group that is).
    let tail =
        _mm256_cmpgt_epi32(_mm256_set1_epi32((r % 8) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for blk in 0..blocks {
        let p = blk * 8;
        for g in (0..r).step_by(8) {
            let lanes = 8.min(r - g);
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
                    store8(d, t, stream);
                } else {
                    _mm256_maskstore_ps(d, tail, t);
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
