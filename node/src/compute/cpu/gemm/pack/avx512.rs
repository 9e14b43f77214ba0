//! AVX-512 packing, 16 lanes at a time with masked loads and stores: f32
//! strips (copied a block at a time, or transposed in 16 × 16 blocks), with
//! the rounding of `round_bf16` done in integer lanes (ties to even, NaN
//! kept quiet, denormals kept) so the bits equal the element-wise path's;
//! and bf16 pairs (the AVX-512-BF16 kernel's operands), converted by
//! `vcvtne2ps2bf16`, whose bits are `pair_bits`' (ties to even, NaN kept
//! quiet, denormal inputs flushed to signed zero).

use std::arch::x86_64::*;

use super::super::MatRef;
use super::{pair_bits, Source};

/// `v` rounded to bf16 precision in f32 slots, as `round_bf16` rounds: ties
/// to even in integer lanes, NaN kept quiet, denormals kept.
#[inline(always)]
unsafe fn rounded_f32(v: __m512) -> __m512 {
    let b = _mm512_castps_si512(v);
    let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
    let rounded = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    let nan = _mm512_or_si512(b, _mm512_set1_epi32(0x0040_0000));
    let is_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    let high = _mm512_mask_blend_epi32(is_nan, rounded, nan);
    _mm512_castsi512_ps(_mm512_and_si512(high, _mm512_set1_epi32(0xffff_0000u32 as i32)))
}

/// The first `n` (≤ 16) lanes.
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        ((1u32 << n) - 1) as u16
    }
}

/// Word w of `vcvtne2ps2bf16(hi, lo)` for w < 16 is bf16(lo[w]), for
/// w ≥ 16 bf16(hi[w − 16]); this index puts bf16(lo[j]) (low half) and
/// bf16(hi[j]) (high half) side by side in 32-bit lane j.
const INTERLEAVE: [i16; 32] = {
    let mut idx = [0i16; 32];
    let mut j = 0;
    while j < 16 {
        idx[2 * j] = j as i16;
        idx[2 * j + 1] = (j + 16) as i16;
        j += 1;
    }
    idx
};

/// `vcvtne2ps2bf16`: words 0–15 are bf16 of `lo`'s lanes, 16–31 of `hi`'s.
#[inline(always)]
unsafe fn bf16_words(hi: __m512, lo: __m512) -> __m512i {
    std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo))
}

/// 32 consecutive floats at `src` as 16 pairs along k: lane j holds
/// bf16(src[2j]) high and bf16(src[2j+1]) low (the converted words come in
/// memory order, k low; one rotate per lane swaps the halves).
#[inline(always)]
unsafe fn pairs32(src: *const f32) -> __m512i {
    _mm512_rol_epi32::<16>(bf16_words(_mm512_loadu_ps(src.add(16)), _mm512_loadu_ps(src)))
}

/// 16 transposed 32-bit lanes: `out[j]` lane l = `r[l]` lane j.
#[inline(always)]
unsafe fn transpose16(r: &[__m512i; 16]) -> [__m512i; 16] {
    // Within each 128-bit lane: pairs of rows, then columns of four rows.
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4i+c], 128-bit lane ℓ = column 4ℓ+c of rows 4i..4i+4.
    let mut u = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        let b = 4 * i;
        u[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
        u[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
        u[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
        u[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
    }
    // A 4 × 4 transpose of 128-bit lanes across u[c], u[4+c], u[8+c], u[12+c].
    let mut out = [_mm512_setzero_si512(); 16];
    for c in 0..4 {
        let x0 = _mm512_shuffle_i32x4::<0x44>(u[c], u[4 + c]);
        let x1 = _mm512_shuffle_i32x4::<0xee>(u[c], u[4 + c]);
        let x2 = _mm512_shuffle_i32x4::<0x44>(u[8 + c], u[12 + c]);
        let x3 = _mm512_shuffle_i32x4::<0xee>(u[8 + c], u[12 + c]);
        out[c] = _mm512_shuffle_i32x4::<0x88>(x0, x2);
        out[4 + c] = _mm512_shuffle_i32x4::<0xdd>(x0, x2);
        out[8 + c] = _mm512_shuffle_i32x4::<0x88>(x1, x3);
        out[12 + c] = _mm512_shuffle_i32x4::<0xdd>(x1, x3);
    }
    out
}

/// One source row's bf16 pairs (`pack_rows`) for its whole blocks of 32
/// floats, 16 pairs at a time; returns the pairs written (the caller
/// writes the tail).
///
/// # Safety
/// The CPU supports AVX-512 F, BW and BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn pair_blocks(d: &mut [f32], src: &[f32]) -> usize {
    let blocks = src.len() / 32;
    assert!(d.len() >= blocks * 16, "pack: pair row too short");
    for blk in 0..blocks {
        // SAFETY: blk·32 + 32 ≤ src.len(), blk·16 + 16 ≤ d.len().
        _mm512_storeu_si512(
            d.as_mut_ptr().add(blk * 16) as *mut __m512i,
            pairs32(src.as_ptr().add(blk * 32)),
        );
    }
    blocks * 16
}

/// `pair_strip` for a source contiguous along k (`cs == 1`; sources
/// contiguous along the strip go a block at a time through `pair_block`).
///
/// # Safety
/// The CPU supports AVX-512 F, BW and BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn pair_strip(strip: &mut [f32], s: Source<'_>) {
    let Source { x, base, kc, r, h, stream, .. } = s;
    let steps = kc.div_ceil(2);
    assert!(
        x.cs == 1 && strip.len() >= steps * r && h <= r && r <= 32,
        "pack: source not contiguous along k, strip too small or wider than 32"
    );
    let out = strip.as_mut_ptr();
    let rows: [&[f32]; 32] =
        std::array::from_fn(|i| if i < h { &x.data[base + i * x.rs..][..kc] } else { &[] });
    // Blocks of 16 pairs (32 floats of k) from 16 rows at a time.
    let blocks = kc / 32;
    for g in (0..r).step_by(16) {
        let store = lanes(r - g);
        for blk in 0..blocks {
            let p = blk * 32;
            let mut v = [_mm512_setzero_si512(); 16];
            for (l, v) in v.iter_mut().enumerate() {
                if g + l < h {
                    // SAFETY: rows[g+l] holds kc ≥ p + 32 floats.
                    *v = pairs32(rows[g + l].as_ptr().add(p));
                }
            }
            for (j, t) in transpose16(&v).into_iter().enumerate() {
                // SAFETY: (blk·16 + j)·r + g + lanes ≤ steps·r ≤ strip.len().
                self::store(out.add((blk * 16 + j) * r + g), store, t, stream);
            }
        }
    }
    for q in blocks * 16..steps {
        for (i, d) in strip[q * r..(q + 1) * r].iter_mut().enumerate() {
            *d = if i < h {
                let next = if 2 * q + 1 < kc { rows[i][2 * q + 1] } else { 0.0 };
                pair_bits(rows[i][2 * q], next)
            } else {
                0.0
            };
        }
    }
}

/// How many pair steps ahead `pair_block` prefetches its source rows.
const PAIR_AHEAD: usize = 2;

/// Every strip of a block at once, for a source contiguous along the strip
/// (`rs == 1`): step q reads the block's two source rows (k = 2q, 2q+1)
/// once, start to end, and writes their pairs into step q of each strip.
///
/// # Safety
/// The CPU supports AVX-512 F, BW and BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn pair_block(
    dst: &mut [f32],
    x: MatRef<'_>,
    base: usize,
    rows: usize,
    kc: usize,
    r: usize,
    stream: bool,
) {
    let steps = kc.div_ceil(2);
    let strips = rows.div_ceil(r);
    assert!(
        x.rs == 1 && dst.len() >= strips * steps * r && r <= 32,
        "pack: block too small or strips wider than 32"
    );
    let out = dst.as_mut_ptr();
    let idx = _mm512_loadu_epi16(INTERLEAVE.as_ptr());
    for q in 0..steps {
        // The source rows PAIR_AHEAD steps on, a line at a time: each row
        // is its own stream (often its own page), which the hardware
        // prefetcher picks up late.
        if 2 * (q + PAIR_AHEAD) + 1 < kc {
            let ahead = x.data.as_ptr().wrapping_add(base + 2 * (q + PAIR_AHEAD) * x.cs);
            for line in (0..rows).step_by(16) {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(x.cs + line) as *const i8);
            }
        }
        // Bounds-checked once: the masked loads below stay inside these.
        let first_row = &x.data[base + 2 * q * x.cs..][..rows];
        let next_row = (2 * q + 1 < kc).then(|| &x.data[base + (2 * q + 1) * x.cs..][..rows]);
        for s in 0..strips {
            let i0 = s * r;
            let h = r.min(rows - i0);
            for g in (0..r).step_by(16) {
                let load = lanes(h.saturating_sub(g));
                let first = _mm512_maskz_loadu_ps(load, first_row.as_ptr().wrapping_add(i0 + g));
                let next = match next_row {
                    Some(row) => _mm512_maskz_loadu_ps(load, row.as_ptr().wrapping_add(i0 + g)),
                    None => _mm512_setzero_ps(),
                };
                // Row k's words go to the high halves, row k+1's to the low.
                let v = _mm512_permutexvar_epi16(idx, bf16_words(first, next));
                // SAFETY: s·steps·r + q·r + g + lanes ≤ strips·steps·r ≤ dst.len().
                store(out.add(s * steps * r + q * r + g), lanes(r - g), v, stream);
            }
        }
    }
}

/// f32 strips, every strip of a block at once, for a source contiguous
/// along the strip (`rs == 1`): step p reads the block's source row once,
/// start to end, and writes each strip's `r` values of step p (zeros past
/// the block's rows).
///
/// # Safety
/// The CPU supports AVX-512 F and BW.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn copy_block(
    dst: &mut [f32],
    x: MatRef<'_>,
    base: usize,
    rows: usize,
    kc: usize,
    r: usize,
    round: bool,
    stream: bool,
) {
    let strips = rows.div_ceil(r);
    assert!(
        x.rs == 1 && dst.len() >= strips * kc * r && r <= 32,
        "pack: block too small or strips wider than 32"
    );
    let out = dst.as_mut_ptr();
    for p in 0..kc {
        // Bounds-checked once: the masked loads below stay inside it.
        let row = &x.data[base + p * x.cs..][..rows];
        for s in 0..strips {
            let i0 = s * r;
            let h = r.min(rows - i0);
            for g in (0..r).step_by(16) {
                let mut v =
                    _mm512_maskz_loadu_ps(lanes(h.saturating_sub(g)), row.as_ptr().wrapping_add(i0 + g));
                if round {
                    v = rounded_f32(v);
                }
                // SAFETY: s·kc·r + p·r + g + lanes ≤ strips·kc·r ≤ dst.len().
                store(out.add(s * kc * r + p * r + g), lanes(r - g), _mm512_castps_si512(v), stream);
            }
        }
    }
}

/// Stores the `mask` lanes of `v` at `p`: a non-temporal store when
/// `stream` asks for one and the vector is whole and 64-byte aligned.
///
/// # Safety
/// The `mask` lanes at `p` are writable; the CPU supports AVX-512 F.
#[inline(always)]
unsafe fn store(p: *mut f32, mask: __mmask16, v: __m512i, stream: bool) {
    if stream && mask == 0xffff && (p as usize).is_multiple_of(64) {
        _mm512_stream_si512(p as *mut __m512i, v);
    } else {
        _mm512_mask_storeu_epi32(p as *mut i32, mask, v);
    }
}

/// How far ahead along a source row `transpose_strip` prefetches (floats):
/// 64 gave 1.01x (0.99-1.02) on the small training step over 8 alternated
/// pairs; 128 no more; the same in `copy_block` nothing.
const AHEAD: usize = 64;

/// `transpose_strip` for a source contiguous along k (`cs == 1`): 16 rows
/// × 16 steps at a time through a 16 × 16 transpose, rows past `h` read as
/// zeros, the k tail through masked loads.
///
/// # Safety
/// The CPU supports AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn transpose_strip(strip: &mut [f32], s: Source<'_>) {
    let Source { x, base, kc, r, h, round, stream } = s;
    assert!(
        x.cs == 1 && strip.len() >= kc * r && h <= r && r <= 32,
        "pack: source not contiguous along k, strip too small or wider than 32"
    );
    // Bounds-checked once: every masked load below stays inside these rows.
    let rows: [&[f32]; 32] =
        std::array::from_fn(|i| if i < h { &x.data[base + i * x.rs..][..kc] } else { &[] });
    let out = strip.as_mut_ptr();
    for g in (0..r).step_by(16) {
        let store = lanes(r - g);
        for p in (0..kc).step_by(16) {
            let steps = 16.min(kc - p);
            let mut v = [_mm512_setzero_si512(); 16];
            for (l, v) in v.iter_mut().enumerate() {
                if g + l < h {
                    if p + AHEAD < kc {
                        // A row is a short stream (kc floats) that the
                        // hardware prefetcher barely follows; ask for its
                        // line AHEAD floats on (in bounds: p + AHEAD < kc).
                        _mm_prefetch::<_MM_HINT_T0>(rows[g + l].as_ptr().add(p + AHEAD) as *const i8);
                    }
                    let mut x = _mm512_maskz_loadu_ps(lanes(steps), rows[g + l].as_ptr().wrapping_add(p));
                    if round {
                        x = rounded_f32(x);
                    }
                    *v = _mm512_castps_si512(x);
                }
            }
            for (q, t) in transpose16(&v).into_iter().take(steps).enumerate() {
                // SAFETY: (p+q)·r + g + lanes ≤ kc·r ≤ strip.len().
                self::store(out.add((p + q) * r + g), store, t, stream);
            }
        }
    }
}
