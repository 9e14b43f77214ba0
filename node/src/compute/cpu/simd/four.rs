//! Four dot products (or four axpys) at once, for attention's walks over
//! keys: the four sums run as independent chains, and an axpy's output row is
//! loaded and stored once for four inputs. Each gives exactly the bits of four
//! calls of [`dot`](super::dot) / [`axpy`](super::axpy) — the same multiplies
//! and adds in the same order, never fused — so using them changes no result.
//!
//! The AVX2 code is written with intrinsics (the compiler's own vectorisation
//! of the interleaved loops shuffles lanes instead); AVX-512 machines run it
//! too, and the portable path runs the plain loops.

use super::{hsum, Isa, LANES};

/// Four dot products of `a` with `b[0..4]` (each at least as long as `a`),
/// each summed in [`dot`](super::dot)'s order.
pub fn dot4(isa: Isa, a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    let n = a.len();
    let b = b.map(|x| &x[..n]);
    #[cfg(target_arch = "x86_64")]
    if isa.runs_avx2() {
        // SAFETY: `runs_avx2`: this CPU has AVX2; all five slices hold n floats.
        return unsafe { avx2::dot4(a, b) };
    }
    let _ = isa;
    let whole = n / LANES * LANES;
    let mut acc = [[0f32; LANES]; 4];
    for c in (0..whole).step_by(LANES) {
        let x = &a[c..c + LANES];
        for (acc, bi) in acc.iter_mut().zip(&b) {
            for l in 0..LANES {
                acc[l] += x[l] * bi[c + l];
            }
        }
    }
    finish(a, b, whole, acc)
}

/// The horizontal sums and the tail past the last whole vector, in order.
#[inline(always)]
fn finish(a: &[f32], b: [&[f32]; 4], whole: usize, acc: [[f32; LANES]; 4]) -> [f32; 4] {
    let mut out = [0f32; 4];
    for ((o, acc), bi) in out.iter_mut().zip(acc).zip(b) {
        let mut s = hsum(acc);
        for (x, y) in a[whole..].iter().zip(&bi[whole..]) {
            s += x * y;
        }
        *o = s;
    }
    out
}

/// y[i] += alpha[j]·x[j][i] for j = 0, 1, 2, 3 in turn (each x[j] at least
/// as long as y).
pub fn axpy4(isa: Isa, y: &mut [f32], alpha: [f32; 4], x: [&[f32]; 4]) {
    let n = y.len();
    let x = x.map(|v| &v[..n]);
    // Whole vectors on AVX2; the tail (and everything on portable) below.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `runs_avx2`: this CPU has AVX2; all slices hold n floats.
    let start = if isa.runs_avx2() { unsafe { avx2::axpy4(y, alpha, x) } } else { 0 };
    #[cfg(not(target_arch = "x86_64"))]
    let start = {
        let _ = isa;
        0
    };
    for i in start..n {
        let mut v = y[i];
        v += alpha[0] * x[0][i];
        v += alpha[1] * x[1][i];
        v += alpha[2] * x[2][i];
        v += alpha[3] * x[3][i];
        y[i] = v;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::LANES;

    /// # Safety
    /// The CPU supports AVX2; every `b[i]` holds `a.len()` floats.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot4(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let n = a.len();
        let whole = n / LANES * LANES;
        let mut acc = [_mm256_setzero_ps(); 4];
        for c in (0..whole).step_by(LANES) {
            let x = _mm256_loadu_ps(a.as_ptr().add(c));
            for (acc, bi) in acc.iter_mut().zip(&b) {
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(x, _mm256_loadu_ps(bi.as_ptr().add(c))));
            }
        }
        let lanes = acc.map(|v| {
            let mut l = [0f32; LANES];
            _mm256_storeu_ps(l.as_mut_ptr(), v);
            l
        });
        super::finish(a, b, whole, lanes)
    }

    /// Whole vectors of y; returns where the scalar tail starts.
    ///
    /// # Safety
    /// The CPU supports AVX2; every `x[i]` holds `y.len()` floats.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn axpy4(y: &mut [f32], alpha: [f32; 4], x: [&[f32]; 4]) -> usize {
        let whole = y.len() / LANES * LANES;
        let al = alpha.map(|a| _mm256_set1_ps(a));
        for c in (0..whole).step_by(LANES) {
            let p = y.as_mut_ptr().add(c);
            let mut v = _mm256_loadu_ps(p);
            for (al, xi) in al.iter().zip(&x) {
                v = _mm256_add_ps(v, _mm256_mul_ps(*al, _mm256_loadu_ps(xi.as_ptr().add(c))));
            }
            _mm256_storeu_ps(p, v);
        }
        whole
    }
}
