//! The Llama architecture's kernels on the CPU: RMSNorm, rotary position
//! embeddings (RoPE) and the SwiGLU gate, forward beside backward.
//!
//! The per-row work is compiled once per instruction-set path
//! (`multiversion!`) from the same code, with no fused multiply-adds, so
//! every path gives the same bits; rows are split over rayon and every
//! output element is written by one task, and the RMSNorm weight gradient
//! adds rows in order, so results are deterministic.

use rayon::prelude::*;

use super::isa::Isa;
use super::simd::{self, multiversion};
use crate::compute::AttentionShape;

/// RMSNorm's epsilon (Llama 2 and 3 use 1e-5).
pub const RMS_EPS: f32 = 1e-5;

multiversion! {
    /// out = x·rs·w for one row.
    fn rms_row(out: &mut [f32], x: &[f32], w: &[f32], rs: f32) {
        for ((o, x), w) in out.iter_mut().zip(x).zip(w) {
            *o = x * rs * w;
        }
    }
}

multiversion! {
    /// Σ w·d·x over one row, in 8 interleaved partial sums combined in a fixed order.
    fn rms_backward_dot(x: &[f32], d: &[f32], w: &[f32]) -> f32 {
        const LANES: usize = 8;
        let mut acc = [0f32; LANES];
        let n = x.len() / LANES * LANES;
        for i in (0..n).step_by(LANES) {
            for l in 0..LANES {
                acc[l] += w[i + l] * d[i + l] * x[i + l];
            }
        }
        let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for i in n..x.len() {
            s += w[i] * d[i] * x[i];
        }
        s
    }
}

multiversion! {
    /// dinp (+)= rs·w·d − x·rs³·dot/c for one row (`k` = [rs, rs³·dot/c]).
    fn rms_backward_row(di: &mut [f32], x: &[f32], d: &[f32], w: &[f32], k: [f32; 2], accumulate: bool) {
        let [rs, coef] = k;
        for (((di, x), d), w) in di.iter_mut().zip(x).zip(d).zip(w) {
            let g = rs * w * d - x * coef;
            *di = if accumulate { *di + g } else { g };
        }
    }
}

multiversion! {
    /// dw += d·x·rs for one row's slice of channels.
    fn rms_param_grads(dw: &mut [f32], x: &[f32], d: &[f32], rs: f32) {
        for ((dw, x), d) in dw.iter_mut().zip(x).zip(d) {
            *dw += d * x * rs;
        }
    }
}

/// out(n, c) = inp · rstd · weight per row, rstd = 1/√(mean(inp²) + ε);
/// `rstd` (n) keeps each row's for the backward pass.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_forward(
    isa: Isa,
    out: &mut [f32],
    rstd: &mut [f32],
    inp: &[f32],
    w: &[f32],
    n: usize,
    c: usize,
) {
    let w = &w[..c];
    out[..n * c].par_chunks_mut(c).zip(rstd[..n].par_iter_mut()).enumerate().for_each(|(i, (o, r))| {
        let x = &inp[i * c..(i + 1) * c];
        let ms = simd::sum_sq_dev(isa, x, 0.0) / c as f32;
        let rs = 1.0 / (ms + RMS_EPS).sqrt();
        rms_row(isa, o, x, w, rs);
        *r = rs;
    });
}

/// dinp (+)= the input gradient of [`rmsnorm_forward`] (written when
/// `accumulate` is false); dweight += its weight gradient (rows in order).
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_backward(
    isa: Isa,
    accumulate: bool,
    dinp: &mut [f32],
    dw: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    rstd: &[f32],
    n: usize,
    c: usize,
) {
    let w = &w[..c];
    dinp[..n * c].par_chunks_mut(c).enumerate().for_each(|(i, di)| {
        let (x, d) = (&inp[i * c..(i + 1) * c], &dout[i * c..(i + 1) * c]);
        let rs = rstd[i];
        let dot = rms_backward_dot(isa, x, d, w);
        let coef = rs * rs * rs * dot / c as f32;
        rms_backward_row(isa, di, x, d, w, [rs, coef], accumulate);
    });
    // The weight gradient: parallel over channel blocks, rows in order.
    const CB: usize = 64;
    dw[..c].par_chunks_mut(CB).enumerate().for_each(|(blk, dwb)| {
        let j0 = blk * CB;
        for (i, rs) in rstd[..n].iter().enumerate() {
            let row = i * c + j0..i * c + j0 + dwb.len();
            rms_param_grads(isa, dwb, &inp[row.clone()], &dout[row], *rs);
        }
    });
}

/// cos and sin of every (position, frequency) pair of a head of `hs`
/// channels: `t × hs/2` of each, angle = pos · θ^(−2i/hs), computed in f64
/// and rounded once.
fn rope_table(t: usize, hs: usize, theta: f32) -> (Vec<f32>, Vec<f32>) {
    let half = hs / 2;
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    let inv_freq: Vec<f64> = (0..half).map(|i| (theta as f64).powf(-((2 * i) as f64) / hs as f64)).collect();
    for pos in 0..t {
        for f in &inv_freq {
            let angle = pos as f64 * f;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

multiversion! {
    /// Rotates one head's channel pairs (i, i + hs/2) by the row's angles;
    /// `sign` −1 rotates back (the transpose, for gradients).
    fn rotate_head(x: &mut [f32], cos: &[f32], sin: &[f32], sign: f32) {
        let half = cos.len();
        let (lo, hi) = x.split_at_mut(half);
        for (((a, b), c), s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
            let s = sign * s;
            let (x0, x1) = (*a, *b);
            *a = x0 * c - x1 * s;
            *b = x1 * c + x0 * s;
        }
    }
}

/// Rotates the q and k heads of a `(b, t, (nh + 2·nkv)·hs)` qkv tensor in
/// place by their position (the row's index within its sequence), in
/// Hugging Face Llama's rotate-half layout: channel i pairs with i + hs/2
/// at frequency θ^(−2i/hs). `inverse` rotates the other way: the backward
/// pass, applied to the gradient (a rotation's transpose is its inverse).
pub fn rope(isa: Isa, inverse: bool, qkv: &mut [f32], s: AttentionShape, theta: f32) {
    let hs = s.head_size();
    let (w, half) = (s.qkv_width(), hs / 2);
    let heads = s.nh + s.nkv; // q heads then k heads: the first (nh + nkv)·hs channels
    let (cos, sin) = rope_table(s.t, hs, theta);
    let sign = if inverse { -1.0 } else { 1.0 };
    qkv[..s.b * s.t * w].par_chunks_mut(w).enumerate().for_each(|(row, x)| {
        let pos = row % s.t;
        let (c, sn) = (&cos[pos * half..(pos + 1) * half], &sin[pos * half..(pos + 1) * half]);
        for head in x[..heads * hs].chunks_exact_mut(hs) {
            rotate_head(isa, head, c, sn, sign);
        }
    });
}

multiversion! {
    /// out = silu(g)·u for one chunk (silu(g) = g·σ(g)).
    fn swiglu_row(out: &mut [f32], g: &[f32], u: &[f32]) {
        for ((o, g), u) in out.iter_mut().zip(g).zip(u) {
            let sig = 1.0 / (1.0 + simd::exp(-g));
            *o = g * sig * u;
        }
    }
}

multiversion! {
    /// dg, du (+)= the gradients of silu(g)·u given d.
    fn swiglu_backward_row(dg: &mut [f32], du: &mut [f32], g: &[f32], u: &[f32], d: &[f32], accumulate: bool) {
        for ((((dg, du), g), u), d) in dg.iter_mut().zip(du.iter_mut()).zip(g).zip(u).zip(d) {
            let sig = 1.0 / (1.0 + simd::exp(-g));
            let silu = g * sig;
            let dsilu = sig * (1.0 + g * (1.0 - sig));
            let (a, b) = (d * u * dsilu, d * silu);
            (*dg, *du) = if accumulate { (*dg + a, *du + b) } else { (a, b) };
        }
    }
}

/// out(n, h) = silu(gate)·up, where each row of `inp` (n, 2h) is
/// `[gate (h) | up (h)]`.
pub fn swiglu_forward(isa: Isa, out: &mut [f32], inp: &[f32], n: usize, h: usize) {
    out[..n * h].par_chunks_mut(h).enumerate().for_each(|(i, o)| {
        let row = &inp[i * 2 * h..(i + 1) * 2 * h];
        swiglu_row(isa, o, &row[..h], &row[h..]);
    });
}

/// dinp(n, 2h) (+)= the gradient of [`swiglu_forward`] given dout(n, h):
/// accumulated, or written when `accumulate` is false.
pub fn swiglu_backward(
    isa: Isa,
    accumulate: bool,
    dinp: &mut [f32],
    inp: &[f32],
    dout: &[f32],
    n: usize,
    h: usize,
) {
    dinp[..n * 2 * h].par_chunks_mut(2 * h).enumerate().for_each(|(i, di)| {
        let row = &inp[i * 2 * h..(i + 1) * 2 * h];
        let (dg, du) = di.split_at_mut(h);
        swiglu_backward_row(isa, dg, du, &row[..h], &row[h..], &dout[i * h..(i + 1) * h], accumulate);
    });
}

#[cfg(test)]
mod tests;
