//! GEMM micro-kernels: one register tile of C updated from packed strips of A
//! and B, one kernel per instruction-set path.
//!
//! | kernel        | tile (MR × NR) | inputs       | accumulators            |
//! |---------------|----------------|--------------|-------------------------|
//! | portable      | 6 × 16         | f32          | plain arrays            |
//! | avx2          | 6 × 16         | f32          | 12 ymm                  |
//! | avx512        | 14 × 32        | f32          | 28 zmm (of 32)          |
//! | avx512bf16    | 14 × 32        | bf16 pairs   | 28 zmm, `vdpbf16ps`     |
//!
//! Packed layout: an A strip is `steps × MR` elements, a B strip `steps × NR`;
//! a step is one k for f32 and a pair (k, k+1) for bf16, both halves in one
//! 32-bit slot (the even k in the high half, whose product `vdpbf16ps` adds
//! first, so every kernel adds C's terms in ascending k). The AVX-512 kernels also come
//! in an `_a_rows` version that reads A's strip as rows (step p of row i at
//! `i·a_row + p`: packed `A_ROW` apart, or, fp32, A itself in place), and
//! fp32 in `avx512_strided`, which reads A stored along its rows and B
//! along n where they lie; the same products in the same order. Every
//! kernel walks the steps in order, so each element of C sees its products
//! in a fixed order.
//!
//! Each kernel writes the tile to C: `first` overwrites (adding `bias[j]` when
//! one is given), otherwise adds to what C holds. Only the top-left `h × w` of
//! the tile reaches C.

/// A kernel's entry point (all share one signature). `a_row` is the slots
/// between A's rows for the fp32 `_a_rows` kernel (A in place, or packed
/// `A_ROW` apart); the other kernels ignore it.
///
/// # Safety
/// `a` holds `steps·MR` and `b` `steps·NR` packed elements (for a row
/// kernel: rows `a_row` apart, each with `steps` values, as many rows as
/// [`tile_rows_read`] of `h`); `c` addresses an `h × w` block with row
/// stride `ldc` (`h ≤ MR`, `w ≤ NR`); `bias`, when not null, holds `w`
/// floats; the CPU supports the kernel's target features.
pub type KernelFn = unsafe fn(
    steps: usize,
    a: *const f32,
    a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
);

/// The entry point of a kernel reading A and B in place ([`avx512_strided`]).
pub type StridedFn = unsafe fn(
    steps: usize,
    a: *const f32,
    a_step: usize,
    b: *const f32,
    b_step: usize,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
);

/// Writes a finished tile (held in an array) to C.
///
/// # Safety
/// As for [`KernelFn`].
#[inline(always)]
unsafe fn store_tile<const MR: usize, const NR: usize>(
    tile: &[[f32; NR]; MR],
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    for (i, trow) in tile.iter().enumerate().take(h) {
        let crow = std::slice::from_raw_parts_mut(c.add(i * ldc), w);
        if first {
            if bias.is_null() {
                crow.copy_from_slice(&trow[..w]);
            } else {
                let bias = std::slice::from_raw_parts(bias, w);
                for ((cv, tv), bv) in crow.iter_mut().zip(&trow[..w]).zip(bias) {
                    *cv = *tv + *bv;
                }
            }
        } else {
            for (cv, tv) in crow.iter_mut().zip(&trow[..w]) {
                *cv += *tv;
            }
        }
    }
}

/// Tile of the portable and AVX2 kernels.
pub const MR_6: usize = 6;
pub const NR_16: usize = 16;

/// Portable micro-kernel: a 6 × 16 tile of dot products.
///
/// # Safety
/// As for [`KernelFn`] (no target features needed).
#[allow(clippy::too_many_arguments)]
pub unsafe fn portable(
    steps: usize,
    a: *const f32,
    _a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    let a = std::slice::from_raw_parts(a, steps * MR_6);
    let b = std::slice::from_raw_parts(b, steps * NR_16);
    let mut tile = [[0f32; NR_16]; MR_6];
    for p in 0..steps {
        let bp = &b[p * NR_16..(p + 1) * NR_16];
        for (i, trow) in tile.iter_mut().enumerate() {
            let av = a[p * MR_6 + i];
            for (t, bv) in trow.iter_mut().zip(bp) {
                *t += av * *bv;
            }
        }
    }
    store_tile(&tile, c, ldc, h, w, first, bias);
}

/// AVX2+FMA micro-kernel: 12 accumulators (6 rows × 2 vectors of 8), A
/// packed in steps of 6.
///
/// # Safety
/// As for [`KernelFn`]; needs AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn avx2(
    steps: usize,
    a: *const f32,
    _a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    avx2_rows::<MR_6, MR_6, 1>(steps, a, 1, b, c, ldc, h, w, first, bias)
}

/// Writes the AVX2 kernels' `R × 16` accumulators (rows past `h` unused) to
/// C: whole-width tiles straight from the registers (the same additions as
/// `store_tile`), others through `store_tile`. Always inlined into the
/// kernels, under their target features.
///
/// # Safety
/// As for [`KernelFn`]; only called from the AVX2 kernels.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_ymm<const R: usize>(
    acc: &[[std::arch::x86_64::__m256; 2]; R],
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    use std::arch::x86_64::*;
    if w == NR_16 {
        let bias = (first && !bias.is_null()).then(|| (_mm256_loadu_ps(bias), _mm256_loadu_ps(bias.add(8))));
        for (i, row) in acc.iter().enumerate().take(h) {
            let cr = c.add(i * ldc);
            let (v0, v1) = match (first, bias) {
                (true, None) => (row[0], row[1]),
                (true, Some((b0, b1))) => (_mm256_add_ps(row[0], b0), _mm256_add_ps(row[1], b1)),
                (false, _) => (
                    _mm256_add_ps(_mm256_loadu_ps(cr), row[0]),
                    _mm256_add_ps(_mm256_loadu_ps(cr.add(8)), row[1]),
                ),
            };
            _mm256_storeu_ps(cr, v0);
            _mm256_storeu_ps(cr.add(8), v1);
        }
        return;
    }
    let mut tile = [[0f32; NR_16]; MR_6];
    for (row, out) in acc.iter().zip(tile.iter_mut()) {
        _mm256_storeu_ps(out.as_mut_ptr(), row[0]);
        _mm256_storeu_ps(out.as_mut_ptr().add(8), row[1]);
    }
    store_tile(&tile, c, ldc, h, w, first, bias);
}

/// [`avx2`] with A in rows `a_row` apart, packed ([`A_ROW`]) or A itself
/// read in place: row i's value at step p is `a[p + i·a_row]`. It reads
/// exactly the tile's `h` rows ([`avx2_rows_read`]). The products and
/// their order are [`avx2`]'s, so the bits are too.
///
/// # Safety
/// As for [`avx2`], with A holding `h` rows of `steps` values `a_row` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn avx2_a_rows(
    steps: usize,
    a: *const f32,
    a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    match h {
        1 => avx2_rows::<1, 1, RUNTIME_ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        2 => avx2_rows::<2, 1, RUNTIME_ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        3 => avx2_rows::<3, 1, RUNTIME_ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        4 => avx2_rows::<4, 1, RUNTIME_ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        5 => avx2_rows::<5, 1, RUNTIME_ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        _ => avx2_rows::<MR_6, 1, RUNTIME_ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
    }
}

/// Rows of A [`avx2_a_rows`] reads for a tile of `h` rows: exactly `h`.
pub const fn avx2_rows_read(h: usize) -> usize {
    h
}

/// The AVX2 kernel on the first `R` rows of a 6-row strip: row i's value
/// at step p is `a[p·STEP + i·ROW]`, or `a[p·STEP + i·a_row]` where ROW is
/// [`RUNTIME_ROW`] (packed steps: STEP 6, ROW 1; rows: STEP 1).
///
/// # Safety
/// As for [`avx2`] or [`avx2_a_rows`], with `h ≤ R ≤ 6`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx2_rows<const R: usize, const STEP: usize, const ROW: usize>(
    steps: usize,
    a: *const f32,
    a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    // Rows 0–2 and 3–5 from one pointer each (`+ row`, `+ 2·row`: one
    // scaled index register at run time). Rows past R are never read.
    let row = if ROW == RUNTIME_ROW { a_row } else { ROW };
    let (mut p0, mut p3) = (a, a.wrapping_add(3 * row));
    let (r1, r2) = (row, 2 * row);
    let mut bp = b;
    macro_rules! step {
        ($s:expr) => {{
            let b0 = _mm256_loadu_ps(bp.add($s * NR_16));
            let b1 = _mm256_loadu_ps(bp.add($s * NR_16 + 8));
            macro_rules! row {
                ($i:literal, $p:ident, $off:expr) => {
                    if let Some(acc) = acc.get_mut($i) {
                        let av = _mm256_broadcast_ss(&*$p.add($off + $s * STEP));
                        acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
                        acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
                    }
                };
            }
            row!(0, p0, 0);
            row!(1, p0, r1);
            row!(2, p0, r2);
            row!(3, p3, 0);
            row!(4, p3, r1);
            row!(5, p3, r2);
        }};
    }
    // Four steps an iteration (less loop overhead per FMA); the order of
    // the steps, and so every sum, is the same as one at a time.
    for _ in 0..steps / 4 {
        step!(0);
        step!(1);
        step!(2);
        step!(3);
        p0 = p0.wrapping_add(4 * STEP);
        p3 = p3.wrapping_add(4 * STEP);
        bp = bp.add(4 * NR_16);
    }
    for _ in 0..steps % 4 {
        step!(0);
        p0 = p0.wrapping_add(STEP);
        p3 = p3.wrapping_add(STEP);
        bp = bp.add(NR_16);
    }
    store_ymm(&acc, c, ldc, h, w, first, bias);
}

/// Defines a kernel entry point with the [`KernelFn`] signature that runs
/// `$tile::<STEP, ROW>` (A's row i at step p at `a[p·STEP + i·ROW]`, or
/// `a[p·STEP + i·a_row]` where ROW is [`RUNTIME_ROW`]) under `$features`.
macro_rules! kernel_entry {
    ($(#[$doc:meta])* $name:ident = $tile:ident::<$step:tt, $row:tt>, $features:literal) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            steps: usize,
            a: *const f32,
            a_row: usize,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            h: usize,
            w: usize,
            first: bool,
            bias: *const f32,
        ) {
            $tile::<$step, $row>(steps, a, a_row, b, c, ldc, h, w, first, bias)
        }
    };
}

/// Tile of the AVX-512 kernels: 14 rows × 2 vectors of 16 uses 28 of the 32
/// zmm registers for accumulators, 2 for B and 1 for the broadcast of A.
pub const MR_14: usize = 14;
pub const NR_32: usize = 32;

/// Slots between rows of an A strip packed in rows (the `_a_rows` kernels):
/// one KC block's steps on the AVX-512 plans (256 floats, or 256 pairs of
/// a 512-deep bf16 block; the bf16 kernel has it as a constant, the fp32
/// one takes any stride at run time). Such strips are straight copies of
/// A's rows where A is stored along k (the forward's activations, the input
/// gradient's output gradient), with no transpose.
pub const A_ROW: usize = 256;

/// Writes the 14 × 32 accumulators to C with masked loads/stores. Always
/// inlined into the kernels (whose target features it then runs under), so
/// the accumulators go from registers to C: as a call, they were spilled to
/// the stack and read back, 5–7% of a GEMM's time.
///
/// # Safety
/// As for [`KernelFn`]; only called from the AVX-512 kernels.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_zmm<const R: usize>(
    acc: &[[std::arch::x86_64::__m512; 2]; R],
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    use std::arch::x86_64::*;
    let m0: __mmask16 = if w >= 16 { 0xffff } else { ((1u32 << w) - 1) as u16 };
    let m1: __mmask16 = if w >= 32 {
        0xffff
    } else if w > 16 {
        ((1u32 << (w - 16)) - 1) as u16
    } else {
        0
    };
    let (bias0, bias1) = if first && !bias.is_null() {
        (_mm512_maskz_loadu_ps(m0, bias), _mm512_maskz_loadu_ps(m1, bias.add(16)))
    } else {
        (_mm512_setzero_ps(), _mm512_setzero_ps())
    };
    for (i, row) in acc.iter().enumerate() {
        if i >= h {
            break;
        }
        let cr = c.add(i * ldc);
        let (v0, v1) = if first {
            (_mm512_add_ps(row[0], bias0), _mm512_add_ps(row[1], bias1))
        } else {
            (
                _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), row[0]),
                _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr.add(16)), row[1]),
            )
        };
        _mm512_mask_storeu_ps(cr, m0, v0);
        _mm512_mask_storeu_ps(cr.add(16), m1, v1);
    }
}

kernel_entry! {
    /// AVX-512 fp32 micro-kernel, 14 × 32. A tile of at most 4 or 8 rows (the
    /// last of a block whose rows are not a multiple of 14: 256 = 18·14 + 4)
    /// runs a kernel of that many rows instead of multiplying padding; every
    /// row's products are the same, in the same order, so the bits are too.
    ///
    /// # Safety
    /// As for [`KernelFn`]; needs AVX-512 F/BW/VL.
    avx512 = avx512_tile::<MR_14, 1>, "avx512f,avx512bw,avx512vl,avx2,fma"
}

/// `ROW` of a kernel whose A rows are `a_row` apart, read at run time.
const RUNTIME_ROW: usize = 0;

kernel_entry! {
    /// [`avx512`] with A in rows `a_row` apart: packed ([`A_ROW`]) or A
    /// itself, read in place.
    ///
    /// # Safety
    /// As for [`avx512`], with A holding rows of `steps` values `a_row` apart.
    avx512_a_rows = avx512_tile::<1, RUNTIME_ROW>, "avx512f,avx512bw,avx512vl,avx2,fma"
}

/// Rows of A the AVX-512 kernels read for a tile of `h` rows: 4, 8 or 14
/// (the rows past `h` only feed accumulators that are never stored).
pub const fn tile_rows_read(h: usize) -> usize {
    match h {
        0..=4 => 4,
        5..=8 => 8,
        _ => MR_14,
    }
}

/// The fp32 kernel with as many rows as the tile needs (4, 8 or 14), A's
/// row i at step p at `a[p·STEP + i·ROW]`.
///
/// # Safety
/// As for [`avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512_tile<const STEP: usize, const ROW: usize>(
    steps: usize,
    a: *const f32,
    a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    match tile_rows_read(h) {
        4 => avx512_rows::<4, STEP, ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        8 => avx512_rows::<8, STEP, ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        _ => avx512_rows::<MR_14, STEP, ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
    }
}

/// The fp32 kernel on the first `R` rows of a 14-row strip; row i's value
/// at step p is `a[p·STEP + i·ROW]`.
///
/// # Safety
/// As for [`avx512`], with `h ≤ R ≤ 14`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512_rows<const R: usize, const STEP: usize, const ROW: usize>(
    steps: usize,
    a: *const f32,
    a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let mut bp = b;
    if ROW == RUNTIME_ROW {
        // Rows 3j, 3j+1, 3j+2 from one pointer each (`+ a_row`, `+ 2·a_row`:
        // one scaled index register), so the run-time stride costs five
        // pointers, not fourteen. Written out row by row (locals, not
        // arrays) so that LLVM keeps pointers and accumulators in registers.
        let at = |j: usize| a.wrapping_add(3 * j * a_row);
        let (mut p0, mut p3, mut p6, mut p9, mut p12) = (at(0), at(1), at(2), at(3), at(4));
        let (r1, r2) = (a_row, 2 * a_row);
        for _ in 0..steps {
            let b0 = _mm512_loadu_ps(bp);
            let b1 = _mm512_loadu_ps(bp.add(16));
            macro_rules! row {
                ($i:literal, $p:ident, $off:expr) => {
                    if let Some(acc) = acc.get_mut($i) {
                        let av = _mm512_set1_ps(*$p.add($off));
                        acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                        acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
                    }
                };
            }
            row!(0, p0, 0);
            row!(1, p0, r1);
            row!(2, p0, r2);
            row!(3, p3, 0);
            row!(4, p3, r1);
            row!(5, p3, r2);
            row!(6, p6, 0);
            row!(7, p6, r1);
            row!(8, p6, r2);
            row!(9, p9, 0);
            row!(10, p9, r1);
            row!(11, p9, r2);
            row!(12, p12, 0);
            row!(13, p12, r1);
            p0 = p0.wrapping_add(STEP);
            p3 = p3.wrapping_add(STEP);
            p6 = p6.wrapping_add(STEP);
            p9 = p9.wrapping_add(STEP);
            p12 = p12.wrapping_add(STEP);
            bp = bp.add(NR_32);
        }
    } else {
        let mut ap = a;
        for _ in 0..steps {
            let b0 = _mm512_loadu_ps(bp);
            let b1 = _mm512_loadu_ps(bp.add(16));
            for (i, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(i * ROW));
                acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
            }
            ap = ap.add(STEP);
            bp = bp.add(NR_32);
        }
    }
    store_zmm(&acc, c, ldc, h, w, first, bias);
}

/// Rows of A [`avx512_strided`] reads for a tile of `h` rows: exactly `h`
/// for 1–4, 8 and 14 rows, else [`tile_rows_read`].
pub const fn strided_rows_read(h: usize) -> usize {
    if h < 4 {
        h
    } else {
        tile_rows_read(h)
    }
}

/// The fp32 AVX-512 kernel with both operands read where they lie (no
/// packing): A's row i at step p at `a[p·a_step + i]` (A stored along its
/// rows), B's step p at `b[p·b_step..][..w]` (B stored along n, read with
/// masked loads, so nothing past column w). The products and their order
/// are [`avx512`]'s, so the bits are too.
///
/// # Safety
/// `a` holds `steps` steps of [`strided_rows_read`]`(h)` values `a_step`
/// apart, `b` `steps` rows of `w` values `b_step` apart; otherwise as for
/// [`avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn avx512_strided(
    steps: usize,
    a: *const f32,
    a_step: usize,
    b: *const f32,
    b_step: usize,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    match strided_rows_read(h) {
        1 => avx512_strided_rows::<1>(steps, a, a_step, b, b_step, c, ldc, h, w, first, bias),
        2 => avx512_strided_rows::<2>(steps, a, a_step, b, b_step, c, ldc, h, w, first, bias),
        3 => avx512_strided_rows::<3>(steps, a, a_step, b, b_step, c, ldc, h, w, first, bias),
        4 => avx512_strided_rows::<4>(steps, a, a_step, b, b_step, c, ldc, h, w, first, bias),
        8 => avx512_strided_rows::<8>(steps, a, a_step, b, b_step, c, ldc, h, w, first, bias),
        _ => avx512_strided_rows::<MR_14>(steps, a, a_step, b, b_step, c, ldc, h, w, first, bias),
    }
}

/// [`avx512_strided`] on the first `R` rows.
///
/// # Safety
/// As for [`avx512_strided`], with `h ≤ R ≤ 14`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512_strided_rows<const R: usize>(
    steps: usize,
    a: *const f32,
    a_step: usize,
    b: *const f32,
    b_step: usize,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    use std::arch::x86_64::*;
    let m0: __mmask16 = if w >= 16 { 0xffff } else { ((1u32 << w) - 1) as u16 };
    let m1: __mmask16 = if w >= 32 { 0xffff } else { ((1u32 << w.saturating_sub(16)) - 1) as u16 };
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let (mut ap, mut bp) = (a, b);
    for _ in 0..steps {
        let b0 = _mm512_maskz_loadu_ps(m0, bp);
        let b1 = _mm512_maskz_loadu_ps(m1, bp.wrapping_add(16));
        for (i, acc) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(i));
            acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
            acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
        }
        ap = ap.wrapping_add(a_step);
        bp = bp.wrapping_add(b_step);
    }
    store_zmm(&acc, c, ldc, h, w, first, bias);
}

kernel_entry! {
    /// AVX-512-BF16 micro-kernel, 14 × 32: each step multiplies a pair of k's
    /// in bf16 and adds both products to fp32 accumulators (`vdpbf16ps`). Short
    /// tiles run fewer rows, as in [`avx512`].
    ///
    /// # Safety
    /// As for [`KernelFn`], with A and B packed as bf16 pairs; needs AVX-512-BF16.
    avx512bf16 = avx512bf16_tile::<MR_14, 1>, "avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma"
}

kernel_entry! {
    /// [`avx512bf16`] with A in rows of pairs (`A_ROW` slots apart).
    ///
    /// # Safety
    /// As for [`avx512bf16`], with A holding `h` rows of `steps` pairs `A_ROW` apart.
    avx512bf16_a_rows = avx512bf16_tile::<1, A_ROW>, "avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma"
}

/// The bf16 kernel with as many rows as the tile needs (4, 8 or 14), A's
/// row i at step p at `a[p·STEP + i·ROW]`.
///
/// # Safety
/// As for [`avx512bf16`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512bf16_tile<const STEP: usize, const ROW: usize>(
    steps: usize,
    a: *const f32,
    a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    match tile_rows_read(h) {
        4 => avx512bf16_rows::<4, STEP, ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        8 => avx512bf16_rows::<8, STEP, ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
        _ => avx512bf16_rows::<MR_14, STEP, ROW>(steps, a, a_row, b, c, ldc, h, w, first, bias),
    }
}

/// The bf16 kernel on the first `R` rows of a 14-row strip; row i's pair
/// at step p is `a[p·STEP + i·ROW]`.
///
/// # Safety
/// As for [`avx512bf16`], with `h ≤ R ≤ 14`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512bf16_rows<const R: usize, const STEP: usize, const ROW: usize>(
    steps: usize,
    a: *const f32,
    _a_row: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    h: usize,
    w: usize,
    first: bool,
    bias: *const f32,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let mut ap = a as *const i32;
    let mut bp = b as *const __m512i;
    for _ in 0..steps {
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(1)));
        for (i, row) in acc.iter_mut().enumerate() {
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(i * ROW)));
            row[0] = _mm512_dpbf16_ps(row[0], av, b0);
            row[1] = _mm512_dpbf16_ps(row[1], av, b1);
        }
        ap = ap.add(STEP);
        bp = bp.add(2);
    }
    store_zmm(&acc, c, ldc, h, w, first, bias);
}
