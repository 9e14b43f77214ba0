//! The attention tiles' three products in AVX-512 intrinsics: the same
//! fused multiply-adds in the same order as `tiles`' portable forms (so the
//! same bits), with each tile's accumulators held in eight registers, which
//! the portable forms' 128-float arrays are not (LLVM keeps those on the
//! stack and stores them back every step).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::{QB, W};

const _: () = assert!(W == 32, "the wide tiles hold W as two 16-float vectors");

/// The two 16-float halves of the `W` floats at `p`.
#[inline(always)]
unsafe fn load(p: *const f32) -> [__m512; 2] {
    [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))]
}

#[inline(always)]
unsafe fn store(p: *mut f32, v: [__m512; 2]) {
    _mm512_storeu_ps(p, v[0]);
    _mm512_storeu_ps(p.add(16), v[1]);
}

/// v = x·c + v, lane by lane (one rounding).
#[inline(always)]
unsafe fn fma(x: __m512, c: [__m512; 2], v: [__m512; 2]) -> [__m512; 2] {
    [_mm512_fmadd_ps(x, c[0], v[0]), _mm512_fmadd_ps(x, c[1], v[1])]
}

/// See `tiles::tile_dots`.
///
/// # Safety
/// The CPU runs AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_dots(
    a: &[f32],
    lda: usize,
    bt: &[f32],
    ldb: usize,
    j0: usize,
    depth: usize,
) -> [[f32; W]; QB] {
    let mut out = [[0f32; W]; QB];
    if depth == 0 {
        return out;
    }
    assert!(
        a.len() >= (QB - 1) * lda + depth && bt.len() >= (depth - 1) * ldb + j0 + W,
        "attention tile: short operand"
    );
    let (ap, bp) = (a.as_ptr(), bt.as_ptr().add(j0));
    let z = [_mm512_setzero_ps(); 2];
    let mut acc = [z; QB];
    for dd in 0..depth {
        let col = load(bp.add(dd * ldb));
        for (i, acc) in acc.iter_mut().enumerate() {
            *acc = fma(_mm512_set1_ps(*ap.add(i * lda + dd)), col, *acc);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        store(o.as_mut_ptr(), a);
    }
    out
}

/// See `tiles::tile_axpys`.
///
/// # Safety
/// The CPU runs AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_axpys(
    acc: &mut [[f32; W]; QB],
    p: &[f32],
    ldp: usize,
    x: &[f32],
    ldx: usize,
    c0: usize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    assert!(
        p.len() >= (QB - 1) * ldp + n && x.len() >= (n - 1) * ldx + c0 + W,
        "attention tile: short operand"
    );
    let (pp, xp) = (p.as_ptr(), x.as_ptr().add(c0));
    let mut v: [[__m512; 2]; QB] = std::array::from_fn(|i| load(acc[i].as_ptr()));
    for j in 0..n {
        let xr = load(xp.add(j * ldx));
        for (i, v) in v.iter_mut().enumerate() {
            *v = fma(_mm512_set1_ps(*pp.add(i * ldp + j)), xr, *v);
        }
    }
    for (a, v) in acc.iter_mut().zip(v) {
        store(a.as_mut_ptr(), v);
    }
}

/// See `tiles::spread_rows`.
///
/// # Safety
/// The CPU runs AVX-512 F.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn spread_rows(
    y: &mut [f32],
    ldy: usize,
    a: &[f32],
    lda: usize,
    x: &[f32],
    ldx: usize,
    c0: usize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    assert!(
        y.len() >= (n - 1) * ldy + c0 + W
            && a.len() >= (QB - 1) * lda + n
            && x.len() >= (QB - 1) * ldx + c0 + W,
        "attention tile: short operand"
    );
    let xs: [[__m512; 2]; QB] = std::array::from_fn(|i| load(x.as_ptr().add(i * ldx + c0)));
    let (yp, ap) = (y.as_mut_ptr().add(c0), a.as_ptr());
    for j in 0..n {
        let mut v = load(yp.add(j * ldy));
        for (i, x) in xs.iter().enumerate() {
            v = fma(_mm512_set1_ps(*ap.add(i * lda + j)), *x, v);
        }
        store(yp.add(j * ldy), v);
    }
}
