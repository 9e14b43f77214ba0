//! Cache-blocked, multi-threaded single-precision GEMM for the CPU backend.
//!
//! `C (+)= A · B` with arbitrary row/column strides on A and B, so one routine
//! serves the three layouts the model needs (NT forward, NN and TN backward).
//! Structure (Goto/BLIS): B is packed into `KC × NC` panels of `NR`-wide
//! strips, A into `MC × KC` blocks of `MR`-tall strips, and a register-tiled
//! `MR × NR` micro-kernel (AVX2+FMA where the CPU has it, portable otherwise)
//! runs over the packed data. Threads split the rows of C into fixed blocks and
//! the K loop runs in a fixed order, so results do not depend on scheduling.

use rayon::prelude::*;

use super::simd;

/// Micro-tile height (rows of C per kernel call).
pub const MR: usize = 6;
/// Micro-tile width (columns of C per kernel call): two 8-lane vectors.
pub const NR: usize = 16;
/// Depth of one packed panel.
const KC: usize = 256;
/// Width of one packed B panel.
const NC: usize = 512;
/// Largest block of rows one task handles.
const MC_MAX: usize = 96;

/// A read-only matrix view: element (i, j) lives at `data[i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl MatRef<'_> {
    #[inline(always)]
    fn at(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// `C[m×n] = A[m×k]·B[k×n]` (or `+=` when `accumulate`), C row-major with
/// leading dimension `ldc`.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "gemm: C too small");
    if k == 0 {
        if !accumulate {
            for row in c.chunks_mut(ldc).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let mc = row_block(m);
    let mut bpack = vec![0f32; KC * NC.min(n.next_multiple_of(NR))];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            pack_b(&mut bpack, b, pc, kc, jc, nc);
            let first = pc == 0 && !accumulate;
            let bp = &bpack[..];
            c[..(m - 1) * ldc + n].par_chunks_mut(mc * ldc).enumerate().for_each_init(
                || vec![0f32; MC_MAX.next_multiple_of(MR) * KC],
                |apack, (blk, cblk)| {
                    let ic = blk * mc;
                    let rows = mc.min(m - ic);
                    pack_a(apack, a, ic, rows, pc, kc);
                    macro_block(rows, nc, kc, apack, bp, &mut cblk[jc..], ldc, first);
                },
            );
        }
    }
}

/// Rows per task: an even split over the pool, at most `MC_MAX`, a multiple of `MR`.
fn row_block(m: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let mut tasks = m.div_ceil(MC_MAX).max(threads);
    tasks = tasks.div_ceil(threads) * threads;
    m.div_ceil(tasks).next_multiple_of(MR).min(MC_MAX)
}

/// Packs `B[pc..pc+kc, jc..jc+nc]` as consecutive `kc × NR` strips, zero-padded.
fn pack_b(dst: &mut [f32], b: MatRef<'_>, pc: usize, kc: usize, jc: usize, nc: usize) {
    for (s, j0) in (0..nc).step_by(NR).enumerate() {
        let strip = &mut dst[s * kc * NR..(s + 1) * kc * NR];
        let w = NR.min(nc - j0);
        for p in 0..kc {
            let row = &mut strip[p * NR..(p + 1) * NR];
            if b.cs == 1 {
                let base = (pc + p) * b.rs + jc + j0;
                row[..w].copy_from_slice(&b.data[base..base + w]);
            } else if b.rs != 1 {
                for (j, r) in row[..w].iter_mut().enumerate() {
                    *r = b.at(pc + p, jc + j0 + j);
                }
            }
            row[w..].fill(0.0);
        }
        if b.rs == 1 && b.cs != 1 {
            // Transposed B (the NT layout): read each column contiguously.
            for j in 0..w {
                let col = &b.data[(jc + j0 + j) * b.cs + pc..][..kc];
                for (p, v) in col.iter().enumerate() {
                    strip[p * NR + j] = *v;
                }
            }
        }
    }
}

/// Packs `A[ic..ic+rows, pc..pc+kc]` as consecutive `kc × MR` strips, zero-padded.
fn pack_a(dst: &mut [f32], a: MatRef<'_>, ic: usize, rows: usize, pc: usize, kc: usize) {
    for (s, i0) in (0..rows).step_by(MR).enumerate() {
        let strip = &mut dst[s * kc * MR..(s + 1) * kc * MR];
        let h = MR.min(rows - i0);
        if a.rs == 1 {
            // Column-contiguous A (the TN layout): copy MR-wide runs.
            for p in 0..kc {
                let base = (pc + p) * a.cs + ic + i0;
                strip[p * MR..p * MR + h].copy_from_slice(&a.data[base..base + h]);
                strip[p * MR + h..(p + 1) * MR].fill(0.0);
            }
        } else {
            for i in 0..MR {
                if i < h {
                    let base = (ic + i0 + i) * a.rs + pc * a.cs;
                    for p in 0..kc {
                        strip[p * MR + i] = a.data[base + p * a.cs];
                    }
                } else {
                    for p in 0..kc {
                        strip[p * MR + i] = 0.0;
                    }
                }
            }
        }
    }
}

/// Runs the micro-kernel over one packed A block and one packed B panel.
#[allow(clippy::too_many_arguments)]
fn macro_block(
    rows: usize,
    nc: usize,
    kc: usize,
    apack: &[f32],
    bpack: &[f32],
    c: &mut [f32],
    ldc: usize,
    first: bool,
) {
    let avx = simd::has_avx2_fma();
    for (sj, j0) in (0..nc).step_by(NR).enumerate() {
        let bs = &bpack[sj * kc * NR..(sj + 1) * kc * NR];
        let w = NR.min(nc - j0);
        for (si, i0) in (0..rows).step_by(MR).enumerate() {
            let as_ = &apack[si * kc * MR..(si + 1) * kc * MR];
            let h = MR.min(rows - i0);
            let mut tile = [[0f32; NR]; MR];
            if avx {
                // SAFETY: the CPU supports AVX2 and FMA (checked above); the
                // packed strips hold exactly kc*MR and kc*NR floats.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    kernel_avx2(kc, as_, bs, &mut tile)
                };
            } else {
                kernel_portable(kc, as_, bs, &mut tile);
            }
            for (i, trow) in tile.iter().enumerate().take(h) {
                let crow = &mut c[(i0 + i) * ldc + j0..(i0 + i) * ldc + j0 + w];
                if first {
                    crow.copy_from_slice(&trow[..w]);
                } else {
                    for (cv, tv) in crow.iter_mut().zip(&trow[..w]) {
                        *cv += *tv;
                    }
                }
            }
        }
    }
}

/// Portable micro-kernel: an `MR × NR` tile of dot products over `kc`.
fn kernel_portable(kc: usize, a: &[f32], b: &[f32], tile: &mut [[f32; NR]; MR]) {
    for p in 0..kc {
        let bp = &b[p * NR..(p + 1) * NR];
        for (i, trow) in tile.iter_mut().enumerate() {
            let av = a[p * MR + i];
            for (t, bv) in trow.iter_mut().zip(bp) {
                *t += av * *bv;
            }
        }
    }
}

/// AVX2+FMA micro-kernel: 12 accumulators (6 rows × 2 vectors of 8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_avx2(kc: usize, a: &[f32], b: &[f32], tile: &mut [[f32; NR]; MR]) {
    use std::arch::x86_64::*;
    debug_assert!(a.len() >= kc * MR && b.len() >= kc * NR);
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let mut ap = a.as_ptr();
    let mut bp = b.as_ptr();
    for _ in 0..kc {
        let b0 = _mm256_loadu_ps(bp);
        let b1 = _mm256_loadu_ps(bp.add(8));
        for (i, row) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*ap.add(i));
            row[0] = _mm256_fmadd_ps(av, b0, row[0]);
            row[1] = _mm256_fmadd_ps(av, b1, row[1]);
        }
        ap = ap.add(MR);
        bp = bp.add(NR);
    }
    for (row, out) in acc.iter().zip(tile.iter_mut()) {
        _mm256_storeu_ps(out.as_mut_ptr(), row[0]);
        _mm256_storeu_ps(out.as_mut_ptr().add(8), row[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: MatRef, b: MatRef) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a.at(i, p) as f64 * b.at(p, j) as f64).sum();
            }
        }
        c
    }

    fn fill(len: usize, seed: u32) -> Vec<f32> {
        (0..len).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    #[test]
    fn matches_naive_for_all_layouts_and_odd_shapes() {
        for &(m, n, k) in &[(1, 1, 1), (7, 17, 3), (13, 33, 300), (100, 530, 70), (6, 16, 256)] {
            let a_rm = fill(m * k, 1);
            let b_rm = fill(k * n, 2);
            // row-major and transposed views of the same logical matrices
            let a_cm: Vec<f32> = (0..m * k).map(|x| a_rm[(x % m) * k + x / m]).collect();
            let b_cm: Vec<f32> = (0..k * n).map(|x| b_rm[(x % k) * n + x / k]).collect();
            let a_views = [MatRef { data: &a_rm, rs: k, cs: 1 }, MatRef { data: &a_cm, rs: 1, cs: m }];
            let b_views = [MatRef { data: &b_rm, rs: n, cs: 1 }, MatRef { data: &b_cm, rs: 1, cs: k }];
            let want = naive(m, n, k, a_views[0], b_views[0]);
            for a in a_views {
                for b in b_views {
                    let mut c = vec![0.5f32; m * n];
                    gemm(m, n, k, a, b, &mut c, n, true);
                    for (x, w) in c.iter().zip(&want) {
                        assert!((*x as f64 - (w + 0.5)).abs() < 1e-4 * (1.0 + w.abs()));
                    }
                    gemm(m, n, k, a, b, &mut c, n, false);
                    for (x, w) in c.iter().zip(&want) {
                        assert!((*x as f64 - w).abs() < 1e-4 * (1.0 + w.abs()));
                    }
                }
            }
        }
    }

    #[test]
    fn portable_and_avx2_kernels_agree() {
        let kc = 37;
        let a = fill(kc * MR, 3);
        let b = fill(kc * NR, 4);
        let mut t1 = [[0f32; NR]; MR];
        kernel_portable(kc, &a, &b, &mut t1);
        #[cfg(target_arch = "x86_64")]
        if simd::has_avx2_fma() {
            let mut t2 = [[0f32; NR]; MR];
            unsafe { kernel_avx2(kc, &a, &b, &mut t2) };
            for (r1, r2) in t1.iter().zip(&t2) {
                for (x, y) in r1.iter().zip(r2) {
                    assert!((x - y).abs() < 1e-5);
                }
            }
        }
    }
}
