//! Packing for the GEMM: copies a `rows × kc` block of A (or of Bᵀ) into the
//! strips the micro-kernels read, `steps × r` values per strip, zero-padded to
//! whole strips (and, for bf16 pairs, to whole pairs).
//!
//! At the model's small shapes packing costs a third as much as the multiply,
//! so the two layouts the model uses have their own paths: a source whose
//! strip rows lie contiguous along the strip (`rs == 1`: a straight copy of
//! `r` floats per step, fixed-length so it compiles to vector moves; on
//! AVX-512 a whole block per step, each source row read once) and one whose
//! rows are contiguous along k (`cs == 1`: a transpose, in 16 × 16 blocks on
//! AVX-512 and 8 × 8 with AVX2 shuffles: `avx512`, `avx2`). bf16 pairs,
//! the AVX-512-BF16 kernel's operands, are rounded and interleaved 16 lanes
//! at a time (`avx512`): a source contiguous along the strip a whole block
//! per pair of k (each source row read once, start to end), one contiguous
//! along k a strip at a time through 16 × 16 transposes. Every path writes
//! the same values (bf16 rounding included), so packing never changes a
//! result.

use super::super::isa::{bf16_bits, round_bf16, Isa};
use super::MatRef;

/// How packing writes an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PackMode {
    F32,
    /// f32 slots holding values rounded to bf16 (bf16 on paths without `vdpbf16ps`).
    F32RoundedBf16,
    /// One 32-bit slot per pair of k: bf16(k) high, bf16(k+1) low (`vdpbf16ps`
    /// adds the high half's product first, so C's terms go in ascending k).
    Bf16Pairs,
}

impl PackMode {
    /// Packed steps for `kc` values of k.
    pub(super) fn steps(self, kc: usize) -> usize {
        match self {
            PackMode::Bf16Pairs => kc.div_ceil(2),
            _ => kc,
        }
    }
}

/// Where one strip's values come from: `h` rows (of the strip's `r`) of
/// `kc` values of k, row i's value at k = p at `x.data[base + i*x.rs + p*x.cs]`.
#[derive(Clone, Copy)]
struct Source<'a> {
    x: MatRef<'a>,
    base: usize,
    kc: usize,
    r: usize,
    h: usize,
    /// Round to bf16 (f32 slots).
    round: bool,
    /// Non-temporal stores where a whole aligned vector is written (see `pack_to`).
    stream: bool,
}

impl Source<'_> {
    #[inline(always)]
    fn at(&self, i: usize, p: usize) -> f32 {
        self.x.data[self.base + i * self.x.rs + p * self.x.cs]
    }
}

/// Packs `X[r0..r0+rows, p0..p0+kc]` (X(i, p) = `x.data[i*x.rs + p*x.cs]`) as
/// consecutive `steps × r` strips, zero-padded to whole strips and pairs.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack(
    isa: Isa,
    dst: &mut [f32],
    x: MatRef<'_>,
    r0: usize,
    rows: usize,
    p0: usize,
    kc: usize,
    r: usize,
    mode: PackMode,
) {
    pack_to(isa, dst, x, r0, rows, p0, kc, r, mode, false)
}

/// [`pack`], with `stream` for a destination read much later (a weight
/// image, read by the next step's GEMMs): the AVX-512 paths then write
/// whole aligned vectors with non-temporal stores, which skip reading the
/// destination's lines into cache first (AdamW, which writes the images,
/// is bound by memory traffic). The values are the same either way. With
/// `stream` the caller runs [`fence_streams`] before anything reads `dst`
/// (once after many packs: each fence waits for the stores to drain).
#[allow(clippy::too_many_arguments)]
pub(super) fn pack_to(
    isa: Isa,
    dst: &mut [f32],
    x: MatRef<'_>,
    r0: usize,
    rows: usize,
    p0: usize,
    kc: usize,
    r: usize,
    mode: PackMode,
    stream: bool,
) {
    let steps = mode.steps(kc);
    let round = mode == PackMode::F32RoundedBf16;
    #[cfg(target_arch = "x86_64")]
    if x.rs == 1 && isa.is_avx512() && isa.supported() {
        let base = r0 + p0 * x.cs;
        match mode {
            // SAFETY: the CPU has the AVX-512-BF16 path, so AVX-512 F, BW and BF16.
            PackMode::Bf16Pairs if simd_pairs(isa) => {
                return unsafe { avx512::pair_block(dst, x, base, rows, kc, r, stream) }
            }
            PackMode::Bf16Pairs => {}
            // SAFETY: the CPU has this AVX-512 path, so AVX-512 F and BW.
            _ => return unsafe { avx512::copy_block(dst, x, base, rows, kc, r, round, stream) },
        }
    }
    for (s, i0) in (0..rows).step_by(r).enumerate() {
        let strip = &mut dst[s * steps * r..(s + 1) * steps * r];
        let h = r.min(rows - i0);
        let src = Source { x, base: (r0 + i0) * x.rs + p0 * x.cs, kc, r, h, round, stream };
        match mode {
            PackMode::F32 | PackMode::F32RoundedBf16 if x.rs == 1 => copy_strip(isa, strip, src),
            PackMode::F32 | PackMode::F32RoundedBf16 if x.cs == 1 => transpose_strip(isa, strip, src),
            PackMode::F32 | PackMode::F32RoundedBf16 => gather_strip(strip, src),
            PackMode::Bf16Pairs => pair_strip(isa, strip, src),
        }
    }
}

/// Orders the non-temporal stores of earlier `pack_to` calls with `stream`
/// before every later store of this thread (`sfence`), so a thread that
/// sees those later stores sees the packed values.
pub(super) fn fence_streams() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE, and so `sfence`, is part of every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

/// Packs `X[r0..r0+rows, p0..p0+kc]` from a source contiguous along k
/// (`x.cs == 1`) as strips of `r` rows, each row `row` slots after the
/// last (the `_a_rows` kernels' A): strip s at `s·r·row`, its row i at
/// `i·row`, `steps` slots of it written (pairs for `Bf16Pairs`). Rows of
/// the last strip past `rows` are left as they are: the kernels compute
/// them but never store them.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack_rows(
    isa: Isa,
    dst: &mut [f32],
    x: MatRef<'_>,
    r0: usize,
    rows: usize,
    p0: usize,
    kc: usize,
    r: usize,
    row: usize,
    mode: PackMode,
) {
    let steps = mode.steps(kc);
    assert!(x.cs == 1 && steps <= row, "pack: rows not contiguous along k, or longer than a packed row");
    for i in 0..rows {
        let src = &x.data[(r0 + i) * x.rs + p0..][..kc];
        let d = &mut dst[(i / r) * r * row + (i % r) * row..][..steps];
        match mode {
            PackMode::F32 => d.copy_from_slice(src),
            PackMode::F32RoundedBf16 => {
                for (d, v) in d.iter_mut().zip(src) {
                    *d = round_bf16(*v);
                }
            }
            PackMode::Bf16Pairs => pair_row(isa, d, src),
        }
    }
}

/// One row's bf16 pairs: `d[q]` = (bf16 of `src[2q]`, of `src[2q+1]` or 0).
/// With AVX-512 the whole blocks of 32 floats go 16 pairs at a time, the
/// rest (and every pair on other paths) one at a time.
fn pair_row(isa: Isa, d: &mut [f32], src: &[f32]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if simd_pairs(isa) {
        // SAFETY: the CPU has the AVX-512-BF16 path, so AVX-512 F, BW and BF16.
        done = unsafe { avx512::pair_blocks(d, src) };
    }
    let _ = isa;
    for (q, d) in d[..src.len().div_ceil(2)].iter_mut().enumerate().skip(done) {
        *d = pair_bits(src[2 * q], src.get(2 * q + 1).copied().unwrap_or(0.0));
    }
}

#[inline(always)]
fn conv(v: f32, round: bool) -> f32 {
    if round {
        round_bf16(v)
    } else {
        v
    }
}

/// Strip rows contiguous along the strip: step p is `h` consecutive floats.
/// Whole strips written for a weight image (`stream`) go through AVX2's
/// non-temporal stores where the path has them.
fn copy_strip(isa: Isa, strip: &mut [f32], s: Source<'_>) {
    #[cfg(target_arch = "x86_64")]
    if s.stream && s.h == s.r && s.r.is_multiple_of(8) && s.r <= 32 && isa.runs_avx2() {
        // SAFETY: `runs_avx2`: this CPU has AVX2.
        return unsafe { avx2::copy_strip(strip, s) };
    }
    let _ = isa;
    /// A whole step of `R` floats: fixed length, so no call to memcpy.
    #[inline(always)]
    fn full<const R: usize>(strip: &mut [f32], s: Source<'_>) {
        for (p, d) in strip.chunks_exact_mut(R).take(s.kc).enumerate() {
            let d: &mut [f32; R] = d.try_into().expect("strip of R");
            let src: &[f32; R] = s.x.data[s.base + p * s.x.cs..][..R].try_into().expect("R floats");
            for (d, v) in d.iter_mut().zip(src) {
                *d = conv(*v, s.round);
            }
        }
    }
    match (s.h == s.r, s.r) {
        (true, 6) => full::<6>(strip, s),
        (true, 14) => full::<14>(strip, s),
        (true, 16) => full::<16>(strip, s),
        (true, 32) => full::<32>(strip, s),
        _ => {
            for (p, d) in strip.chunks_exact_mut(s.r).take(s.kc).enumerate() {
                let src = &s.x.data[s.base + p * s.x.cs..][..s.h];
                for (d, v) in d.iter_mut().zip(src) {
                    *d = conv(*v, s.round);
                }
                d[s.h..].fill(0.0);
            }
        }
    }
}

/// Strip rows contiguous along k: a transpose of `h` rows of `kc` floats.
fn transpose_strip(isa: Isa, strip: &mut [f32], s: Source<'_>) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() && isa.supported() {
        // SAFETY: the CPU has this AVX-512 path, so AVX-512 F and BW.
        return unsafe { avx512::transpose_strip(strip, s) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa.runs_avx2() {
        // SAFETY: `runs_avx2`: this CPU has AVX2.
        return unsafe { avx2::transpose_strip(strip, s) };
    }
    let _ = isa;
    gather_strip(strip, s)
}

/// Any layout, one element at a time, step by step (writes in order).
fn gather_strip(strip: &mut [f32], s: Source<'_>) {
    for (p, d) in strip.chunks_exact_mut(s.r).take(s.kc).enumerate() {
        for (i, d) in d[..s.h].iter_mut().enumerate() {
            *d = conv(s.at(i, p), s.round);
        }
        d[s.h..].fill(0.0);
    }
}

/// One packed pair: bf16(first) in the high half, bf16(next) in the low
/// half (first is k, next k+1: `vdpbf16ps` adds the high product first),
/// as `vcvtne2ps2bf16` converts: ties to even, NaN kept quiet, and a
/// denormal input flushed to zero of its sign (`vdpbf16ps` reads bf16
/// denormals as zero anyway; only inputs that would round up to the
/// smallest normal bf16 change).
#[inline(always)]
fn pair_bits(first: f32, next: f32) -> f32 {
    let word = |x: f32| {
        let x = if x.is_subnormal() { f32::from_bits(x.to_bits() & 0x8000_0000) } else { x };
        bf16_bits(x) as u32
    };
    f32::from_bits(word(first) << 16 | word(next))
}

/// Whether bf16 pairs are made with `vcvtne2ps2bf16` (the AVX-512-BF16
/// path, the only one whose plans pack pairs; others, in tests, pack them
/// one element at a time).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn simd_pairs(isa: Isa) -> bool {
    isa == Isa::Avx512Bf16 && isa.supported()
}

/// bf16 pairs for `vdpbf16ps`: bf16(k) in the high half, bf16(k+1) low.
/// With AVX-512, a source contiguous along k goes 16 lanes at a time
/// (`avx512`; one contiguous along the strip never gets here, `pack` takes
/// it a block at a time); otherwise sources contiguous along the strip are
/// read step by step, others row by row (each read in address order).
fn pair_strip(isa: Isa, strip: &mut [f32], s: Source<'_>) {
    #[cfg(target_arch = "x86_64")]
    if s.x.cs == 1 && simd_pairs(isa) {
        // SAFETY: the CPU has the AVX-512-BF16 path, so AVX-512 F, BW and BF16.
        return unsafe { avx512::pair_strip(strip, s) };
    }
    let _ = isa;
    pair_strip_scalar(strip, s)
}

/// `pair_strip` one element at a time.
fn pair_strip_scalar(strip: &mut [f32], s: Source<'_>) {
    let hi = |i: usize, q: usize| if 2 * q + 1 < s.kc { s.at(i, 2 * q + 1) } else { 0.0 };
    if s.x.rs == 1 {
        for (q, d) in strip.chunks_exact_mut(s.r).enumerate() {
            for (i, d) in d[..s.h].iter_mut().enumerate() {
                *d = pair_bits(s.at(i, 2 * q), hi(i, q));
            }
        }
    } else {
        for i in 0..s.h {
            for (q, d) in strip.chunks_exact_mut(s.r).enumerate() {
                d[i] = pair_bits(s.at(i, 2 * q), hi(i, q));
            }
        }
    }
    for d in strip.chunks_exact_mut(s.r) {
        d[s.h..].fill(0.0);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path packs exactly what the one-element-at-a-time gather (for
    /// bf16 pairs, the scalar pair strip) packs, for both source layouts,
    /// whole and partial strips, k tails, and bf16 rounding of ties, NaN,
    /// infinities and denormals.
    #[test]
    fn every_path_packs_the_same_bits_as_the_gather() {
        let (n_rows, n_k) = (37, 77);
        let mut vals: Vec<f32> = (0..n_rows * n_k)
            .map(|i| ((i as u32).wrapping_mul(2654435761) % 2001) as f32 / 997.0 - 1.0)
            .collect();
        vals[3] = f32::NAN;
        vals[50] = f32::INFINITY;
        vals[77] = 1.0 + 1.0 / 256.0; // a tie: rounds to even
        vals[100] = -0.0;
        // Denormals: kept in f32 slots, flushed to signed zero in pairs.
        vals[120] = f32::from_bits(0x0000_8001);
        vals[121] = f32::from_bits(0x007f_c000); // would round up to the smallest normal
        vals[2 * n_k + 5] = -f32::from_bits(0x0040_0001); // inside a 32-float block
        vals[2 * n_k + 6] = -f32::from_bits(0x007f_c000);
        vals[3 * n_k + 40] = 3.0e38; // rounds up to infinity
        let cm: Vec<f32> = (0..n_rows * n_k).map(|x| vals[(x % n_rows) * n_k + x / n_rows]).collect();
        let layouts = [MatRef { data: &vals, rs: n_k, cs: 1 }, MatRef { data: &cm, rs: 1, cs: n_rows }];
        for isa in Isa::supported_paths() {
            for x in layouts {
                for mode in [PackMode::F32, PackMode::F32RoundedBf16, PackMode::Bf16Pairs] {
                    for r in [6, 14, 16, 32] {
                        for (r0, rows, p0, kc) in [
                            (0usize, 37usize, 0usize, 45usize),
                            (5, 20, 3, 17),
                            (1, 6, 8, 8),
                            (2, 33, 0, 1),
                            (0, 37, 3, 72),
                        ] {
                            let len = rows.div_ceil(r) * mode.steps(kc) * r;
                            let mut want = vec![f32::MAX; len];
                            let mut got = vec![f32::MIN; len];
                            let round = mode == PackMode::F32RoundedBf16;
                            let steps = mode.steps(kc);
                            for (s, i0) in (0..rows).step_by(r).enumerate() {
                                let strip = &mut want[s * steps * r..(s + 1) * steps * r];
                                let base = (r0 + i0) * x.rs + p0 * x.cs;
                                let src =
                                    Source { x, base, kc, r, h: r.min(rows - i0), round, stream: false };
                                if mode == PackMode::Bf16Pairs {
                                    pair_strip_scalar(strip, src);
                                } else {
                                    gather_strip(strip, src);
                                }
                            }
                            pack(isa, &mut got, x, r0, rows, p0, kc, r, mode);
                            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                            assert_eq!(
                                bits(&got),
                                bits(&want),
                                "{isa} rs{} r{r} rows{rows} kc{kc} round {round}",
                                x.rs
                            );
                            // With non-temporal stores (a weight image's),
                            // into a 64-byte aligned buffer and one float on.
                            let mut lines = vec![super::super::Line([f32::MIN; 16]); len.div_ceil(16) + 1];
                            // SAFETY: `Line` is 16 plain f32s with no padding.
                            let all = unsafe {
                                std::slice::from_raw_parts_mut(
                                    lines.as_mut_ptr() as *mut f32,
                                    lines.len() * 16,
                                )
                            };
                            for shift in [0, 1] {
                                let dst = &mut all[shift..shift + len];
                                pack_to(isa, dst, x, r0, rows, p0, kc, r, mode, true);
                                fence_streams();
                                assert_eq!(
                                    bits(dst),
                                    bits(&want),
                                    "{isa} rs{} r{r} rows{rows} kc{kc} round {round} streamed, shift {shift}",
                                    x.rs
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// `pack_rows` (the `_a_rows` kernels' A) gives every path the bits of
    /// the element-wise conversions, in whole 32-float blocks and tails,
    /// with NaN, ties and denormals among the values.
    #[test]
    fn pack_rows_gives_the_element_wise_bits_on_every_path() {
        let (n_rows, n_k, row) = (9, 101, 112);
        let mut vals: Vec<f32> = (0..n_rows * n_k)
            .map(|i| ((i as u32).wrapping_mul(2654435761) % 3001) as f32 / 1499.0 - 1.0)
            .collect();
        vals[4] = f32::NAN;
        vals[n_k + 33] = 1.0 + 1.0 / 256.0;
        vals[2 * n_k + 7] = f32::from_bits(0x007f_c000);
        vals[3 * n_k + 70] = -f32::from_bits(0x0000_0101);
        let x = MatRef { data: &vals, rs: n_k, cs: 1 };
        for isa in Isa::supported_paths() {
            for mode in [PackMode::F32, PackMode::F32RoundedBf16, PackMode::Bf16Pairs] {
                for (r0, rows, p0, kc, r) in
                    [(0usize, 9usize, 0usize, 101usize, 14usize), (2, 5, 3, 64, 4), (1, 7, 0, 33, 6)]
                {
                    let steps = mode.steps(kc);
                    let len = rows.div_ceil(r) * r * row;
                    let mut got = vec![f32::MIN; len];
                    pack_rows(isa, &mut got, x, r0, rows, p0, kc, r, row, mode);
                    for i in 0..rows {
                        let d = &got[(i / r) * r * row + (i % r) * row..][..steps];
                        let src = |p: usize| vals[(r0 + i) * n_k + p0 + p];
                        for (q, d) in d.iter().enumerate() {
                            let want = match mode {
                                PackMode::F32 => src(q),
                                PackMode::F32RoundedBf16 => round_bf16(src(q)),
                                PackMode::Bf16Pairs => {
                                    pair_bits(src(2 * q), if 2 * q + 1 < kc { src(2 * q + 1) } else { 0.0 })
                                }
                            };
                            assert_eq!(d.to_bits(), want.to_bits(), "{isa} {mode:?} row {i} slot {q}");
                        }
                    }
                }
            }
        }
    }

    /// A pair's words are `vcvtne2ps2bf16`'s: ties to even, quiet NaN, and
    /// denormal inputs (even one that would round up to a normal) zero of
    /// their sign; normal inputs as `bf16_bits` rounds them.
    #[test]
    fn pair_bits_convert_as_vcvtne2ps2bf16_does() {
        let pair = |first: f32, next: f32| pair_bits(first, next).to_bits();
        assert_eq!(pair(-f32::from_bits(0x0000_0001), f32::from_bits(0x007f_c000)), 0x8000_0000);
        assert_eq!(pair(1.0 + 3.0 / 256.0, 1.0 + 1.0 / 256.0), 0x3f82_3f80);
        assert_eq!(pair(f32::NAN, f32::from_bits(0x0080_0000)), 0x7fc0_0080);
        assert_eq!(pair(-0.0, 3.0e38), 0x8000_7f62);
        assert_eq!(pair(1.5, f32::from_bits(0x7f7f_ffff)), 0x3fc0_7f80);
    }

    /// bf16 pairs: bf16(k) high, bf16(k+1) low (0 past an odd kc), zero rows
    /// past the block, from either source layout.
    #[test]
    fn bf16_pairs_hold_k_and_k_plus_one() {
        let (n_rows, n_k) = (19, 21);
        let vals: Vec<f32> = (0..n_rows * n_k).map(|i| i as f32 * 0.37 - 50.0).collect();
        let cm: Vec<f32> = (0..n_rows * n_k).map(|x| vals[(x % n_rows) * n_k + x / n_rows]).collect();
        let at = |i: usize, p: usize| vals[i * n_k + p];
        for x in [MatRef { data: &vals, rs: n_k, cs: 1 }, MatRef { data: &cm, rs: 1, cs: n_rows }] {
            for (r, r0, rows, p0, kc) in
                [(14usize, 0usize, 19usize, 0usize, 21usize), (32, 2, 15, 4, 9), (6, 1, 7, 3, 2)]
            {
                let steps = PackMode::Bf16Pairs.steps(kc);
                let mut got = vec![f32::MAX; rows.div_ceil(r) * steps * r];
                pack(Isa::Portable, &mut got, x, r0, rows, p0, kc, r, PackMode::Bf16Pairs);
                for (s, strip) in got.chunks_exact(steps * r).enumerate() {
                    for q in 0..steps {
                        for l in 0..r {
                            let i = s * r + l;
                            let want = if i < rows {
                                let next =
                                    if 2 * q + 1 < kc { bf16_bits(at(r0 + i, p0 + 2 * q + 1)) } else { 0 };
                                (bf16_bits(at(r0 + i, p0 + 2 * q)) as u32) << 16 | next as u32
                            } else {
                                0
                            };
                            assert_eq!(
                                strip[q * r + l].to_bits(),
                                want,
                                "rs{} r{r} strip {s} step {q} lane {l}",
                                x.rs
                            );
                        }
                    }
                }
            }
        }
    }
}
