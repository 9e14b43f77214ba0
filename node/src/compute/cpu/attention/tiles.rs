//! The register-tiled blocks of the fused attention: a block of `QB`
//! queries against tiles of `W` keys, forward (online softmax) and backward
//! (probabilities recomputed from the logsumexps), compiled once per
//! instruction-set path from the same code. The tiles' products accumulate
//! through fused multiply-adds (`mul_add`: one rounding, the same on every
//! path, a library call where the path lacks FMA), so every path gives the
//! same bits.

use super::super::simd::{self, multiversion};
use super::{Head, Scratch, QB, W};

multiversion! {
    /// The unnormalised outputs (`o`, `QB × hp`) of queries t0.. over every
    /// key they see, with each row's running max and sum of exponentials.
    fn forward_block(hd: Head<'_>, t0: usize, q: &[f32], kt: &[f32], v: &[f32], o: &mut [f32]) -> ([f32; QB], [f32; QB]) {
        let (hs, hp, tk) = (hd.hs, hd.hp, hd.tk);
        let n = QB.min(hd.tt - t0);
        let keys = t0 + n;
        o.fill(0.0);
        let mut maxv = [f32::NEG_INFINITY; QB];
        let mut sum = [0f32; QB];
        let mut p = [[0f32; W]; QB];
        for j0 in (0..keys).step_by(W) {
            let s = tile_dots(hd.wide, &q[t0 * hp..], hp, kt, tk, j0, hs);
            for i in 0..QB {
                // keys j0..j0+seen of this tile are at or before query t0+i
                let seen = if i < n { (t0 + i + 1).saturating_sub(j0).min(W) } else { 0 };
                p[i] = [0.0; W];
                if seen == 0 {
                    continue;
                }
                let x: [f32; W] = std::array::from_fn(|l| if l < seen { s[i][l] * hd.scale } else { f32::NEG_INFINITY });
                let bmax = lane_max(&x);
                if bmax > maxv[i] {
                    let corr = simd::exp(maxv[i] - bmax);
                    sum[i] *= corr;
                    for x in &mut o[i * hp..(i + 1) * hp] {
                        *x *= corr;
                    }
                    maxv[i] = bmax;
                }
                for l in 0..W {
                    let e = simd::exp(x[l] - maxv[i]);
                    p[i][l] = if l < seen { e } else { 0.0 };
                }
                sum[i] += lane_sum(&p[i]);
            }
            let flat: [f32; QB * W] = std::array::from_fn(|x| p[x / W][x % W]);
            let kn = W.min(keys - j0);
            for c0 in (0..hp).step_by(W) {
                let mut acc: [[f32; W]; QB] = std::array::from_fn(|i| tile(&o[i * hp + c0..]));
                tile_axpys(hd.wide, &mut acc, &flat, W, &v[j0 * hp..], hp, c0, kn);
                for (i, a) in acc.iter().enumerate() {
                    o[i * hp + c0..][..W].copy_from_slice(a);
                }
            }
        }
        (maxv, sum)
    }
}

multiversion! {
    /// One block of queries t0..: probabilities and their gradients against
    /// every key the block sees, then dq of the block's rows (keys in order)
    /// and dk, dv of those keys (the block's queries in order).
    fn backward_block(hd: Head<'_>, t0: usize, lse: &[f32], ws: &mut Scratch) {
        let (hs, hp, tk) = (hd.hs, hd.hp, hd.tk);
        let n = QB.min(hd.tt - t0);
        let keys = t0 + n;
        let (q, d) = (&ws.q[t0 * hp..], &ws.dout[t0 * hp..]);
        for j0 in (0..keys).step_by(W) {
            let s = tile_dots(hd.wide, q, hp, &ws.kt, tk, j0, hs);
            let g = tile_dots(hd.wide, d, hp, &ws.vt, tk, j0, hs);
            for i in 0..QB {
                let seen = if i < n { (t0 + i + 1).saturating_sub(j0).min(W) } else { 0 };
                let (p, dp) = (&mut ws.p[i * tk + j0..][..W], &mut ws.dp[i * tk + j0..][..W]);
                let row_lse = lse[t0 + i.min(n - 1)];
                for l in 0..W {
                    let e = simd::exp(s[i][l] * hd.scale - row_lse);
                    (p[l], dp[l]) = if l < seen { (e, g[i][l]) } else { (0.0, 0.0) };
                }
            }
        }
        // D = Σ p·dp over the row's keys (`LANES` interleaved partial sums, then
        // those in order); dp becomes p·(dp − D)·scale.
        let span = keys.next_multiple_of(W);
        for i in 0..QB {
            let (p, dp) = (&ws.p[i * tk..][..span], &mut ws.dp[i * tk..][..span]);
            let mut acc = [0f32; LANES];
            for (a, b) in p.chunks_exact(LANES).zip(dp.chunks_exact(LANES)) {
                for l in 0..LANES {
                    acc[l] += a[l] * b[l];
                }
            }
            let dsum: f32 = acc.into_iter().sum();
            for (a, b) in p.iter().zip(dp.iter_mut()) {
                *b = a * (*b - dsum) * hd.scale;
            }
        }
        for c0 in (0..hp).step_by(W) {
            let dq = &mut ws.dq[t0 * hp..];
            let mut acc: [[f32; W]; QB] = std::array::from_fn(|i| tile(&dq[i * hp + c0..]));
            tile_axpys(hd.wide, &mut acc, &ws.dp, tk, &ws.k, hp, c0, keys);
            for (i, a) in acc.iter().enumerate() {
                dq[i * hp + c0..][..W].copy_from_slice(a);
            }
            spread_rows(hd.wide, &mut ws.dk, hp, &ws.dp, tk, q, hp, c0, keys);
            spread_rows(hd.wide, &mut ws.dv, hp, &ws.p, tk, d, hp, c0, keys);
        }
    }
}

/// Lanes of the tile reductions below (one 16-float vector).
const LANES: usize = 16;

/// The largest of a tile's values.
#[inline(always)]
fn lane_max(x: &[f32; W]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    for (l, v) in x.iter().enumerate() {
        m[l % LANES] = m[l % LANES].max(*v);
    }
    m.into_iter().fold(f32::NEG_INFINITY, f32::max)
}

/// Σ of a tile's values in a fixed order: `LANES` interleaved partial sums,
/// then those in order.
#[inline(always)]
fn lane_sum(x: &[f32; W]) -> f32 {
    let mut acc = [0f32; LANES];
    for (l, v) in x.iter().enumerate() {
        acc[l % LANES] += v;
    }
    acc.into_iter().sum()
}

/// The `W` floats at the start of `x`.
#[inline(always)]
fn tile(x: &[f32]) -> [f32; W] {
    x[..W].try_into().expect("W floats")
}

/// `QB × W` dot products: row i of `a` (rows `lda` apart) with columns
/// j0..j0+W of `bt` (rows `ldb` apart), summed over `depth` in order.
/// `wide`: through `wide`'s AVX-512 form (the same bits).
#[inline(always)]
fn tile_dots(
    wide: bool,
    a: &[f32],
    lda: usize,
    bt: &[f32],
    ldb: usize,
    j0: usize,
    depth: usize,
) -> [[f32; W]; QB] {
    #[cfg(target_arch = "x86_64")]
    if wide {
        // SAFETY: `wide` is set only on AVX-512 paths, which the CPU runs.
        return unsafe { super::wide::tile_dots(a, lda, bt, ldb, j0, depth) };
    }
    let rows: [&[f32]; QB] = std::array::from_fn(|i| &a[i * lda..][..depth]);
    let mut acc = [[0f32; W]; QB];
    for dd in 0..depth {
        let col = tile(&bt[dd * ldb + j0..]);
        for i in 0..QB {
            let x = rows[i][dd];
            for l in 0..W {
                acc[i][l] = x.mul_add(col[l], acc[i][l]);
            }
        }
    }
    acc
}

/// acc[i] += Σ_j p[i][j]·x_j[c0..c0+W] over j in 0..n in order (`p` rows
/// `ldp` apart, `x` rows `ldx` apart).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile_axpys(
    wide: bool,
    acc: &mut [[f32; W]; QB],
    p: &[f32],
    ldp: usize,
    x: &[f32],
    ldx: usize,
    c0: usize,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if wide {
        // SAFETY: as in `tile_dots`.
        return unsafe { super::wide::tile_axpys(acc, p, ldp, x, ldx, c0, n) };
    }
    let rows: [&[f32]; QB] = std::array::from_fn(|i| &p[i * ldp..][..n]);
    for j in 0..n {
        let xr = tile(&x[j * ldx + c0..]);
        for i in 0..QB {
            let a = rows[i][j];
            for l in 0..W {
                acc[i][l] = a.mul_add(xr[l], acc[i][l]);
            }
        }
    }
}

/// y_j[c0..c0+W] += Σ_i a[i][j]·x_i[c0..c0+W] for j in 0..n, the block's
/// rows i in order (`y`, `x` rows `ldy`, `ldx` apart; `a` rows `lda` apart).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn spread_rows(
    wide: bool,
    y: &mut [f32],
    ldy: usize,
    a: &[f32],
    lda: usize,
    x: &[f32],
    ldx: usize,
    c0: usize,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if wide {
        // SAFETY: as in `tile_dots`.
        return unsafe { super::wide::spread_rows(y, ldy, a, lda, x, ldx, c0, n) };
    }
    let xs: [[f32; W]; QB] = std::array::from_fn(|i| tile(&x[i * ldx + c0..]));
    let rows: [&[f32]; QB] = std::array::from_fn(|i| &a[i * lda..][..n]);
    for j in 0..n {
        let yr: &mut [f32; W] = (&mut y[j * ldy + c0..][..W]).try_into().expect("W floats");
        let mut v = *yr;
        for i in 0..QB {
            let s = rows[i][j];
            for l in 0..W {
                v[l] = s.mul_add(xs[i][l], v[l]);
            }
        }
        *yr = v;
    }
}
