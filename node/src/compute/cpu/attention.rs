//! Causal multi-head attention on the CPU, fused and blocked (flash-style):
//! no T×T probability matrix is kept. The forward walks each query's keys in
//! blocks of `KB` with an online softmax (running max and sum, output
//! rescaled when the max grows) and saves one logsumexp per (batch, head,
//! query) row; the backward recomputes each row's probabilities from it,
//! `p = exp(q·k·scale − lse)`, in a scratch of T floats per task.
//!
//! Tasks are (batch, head) pairs, each owning that head's columns of the
//! outputs, and keys run in order, so results are deterministic. The
//! materialised kernels (`reference_*`) stay as the oracle for the fused
//! ones and for the GPU backend, whose buffers keep the full matrix.

use rayon::prelude::*;

use super::isa::Isa;
use super::simd;
use crate::compute::AttentionShape;

/// Keys per block of the online softmax.
const KB: usize = 64;

/// Floats of the `att` buffer the fused kernels need: one logsumexp per row.
pub fn scratch_len(s: AttentionShape) -> usize {
    s.b * s.nh * s.t
}

/// out(b, t, c) = softmax(q·kᵀ·scale, causal)·v per head; `lse` (b, nh, t)
/// gets each row's logsumexp of the scaled scores.
pub fn forward(isa: Isa, out: &mut [f32], lse: &mut [f32], qkv: &[f32], s: AttentionShape) {
    let AttentionShape { b, t: tt, c, nh } = s;
    let hs = c / nh;
    let scale = 1.0 / (hs as f32).sqrt();
    let c3 = 3 * c;
    assert!(out.len() >= b * tt * c && lse.len() >= b * nh * tt && qkv.len() >= b * tt * c3);
    let outp = SharedMut(out.as_mut_ptr());
    lse[..b * nh * tt].par_chunks_mut(tt).enumerate().for_each(|(bh, lse_bh)| {
        let (bi, h) = (bh / nh, bh % nh);
        let mut scores = [0f32; KB];
        for (t, lse_t) in lse_bh.iter_mut().enumerate() {
            let q = &qkv[(bi * tt + t) * c3 + h * hs..][..hs];
            // SAFETY: (bi, h) owns out[(bi*tt+t)*c + h*hs ..][..hs] for every
            // t; no other task writes there, and `out` outlives the scope.
            let o = unsafe { std::slice::from_raw_parts_mut(outp.ptr().add((bi * tt + t) * c + h * hs), hs) };
            o.fill(0.0);
            let (mut maxv, mut sum) = (f32::NEG_INFINITY, 0f32);
            for k0 in (0..=t).step_by(KB) {
                let kn = KB.min(t + 1 - k0);
                let block = &mut scores[..kn];
                let key = |j: usize| &qkv[(bi * tt + k0 + j) * c3 + c + h * hs..][..hs];
                let value = |j: usize| &qkv[(bi * tt + k0 + j) * c3 + 2 * c + h * hs..][..hs];
                let whole = kn / 4 * 4;
                for j in (0..whole).step_by(4) {
                    let d = simd::dot4(isa, q, [key(j), key(j + 1), key(j + 2), key(j + 3)]);
                    for (sc, d) in block[j..j + 4].iter_mut().zip(d) {
                        *sc = d * scale;
                    }
                }
                for (j, sc) in block.iter_mut().enumerate().skip(whole) {
                    *sc = simd::dot(isa, q, key(j)) * scale;
                }
                let bmax = simd::max(isa, block);
                if bmax > maxv {
                    let corr = simd::exp(maxv - bmax);
                    sum *= corr;
                    simd::scale(isa, o, corr);
                    maxv = bmax;
                }
                sum += simd::exp_shifted_in_place(isa, block, maxv);
                for j in (0..whole).step_by(4) {
                    let p = [block[j], block[j + 1], block[j + 2], block[j + 3]];
                    simd::axpy4(isa, o, p, [value(j), value(j + 1), value(j + 2), value(j + 3)]);
                }
                for (j, p) in block.iter().enumerate().skip(whole) {
                    simd::axpy(isa, o, *p, value(j));
                }
            }
            simd::scale(isa, o, 1.0 / sum);
            *lse_t = maxv + sum.ln();
        }
    });
}

/// Queries the backward takes at once: dk and dv rows are read and written
/// once per `QB` queries (through `axpy4`, the bits of four `axpy`s in turn).
const QB: usize = 4;

/// dqkv += the gradient of [`forward`] given dout(b, t, c), recomputing the
/// probabilities from the saved logsumexps.
///
/// Every element of dqkv gets its terms in the order of a walk over queries
/// one at a time (dk and dv rows in query order, dq in key order), so the
/// result does not depend on `QB`.
pub fn backward(isa: Isa, dqkv: &mut [f32], dout: &[f32], qkv: &[f32], lse: &[f32], s: AttentionShape) {
    let AttentionShape { b, t: tt, c, nh } = s;
    let hs = c / nh;
    let scale = 1.0 / (hs as f32).sqrt();
    let c3 = 3 * c;
    assert!(dqkv.len() >= b * tt * c3 && lse.len() >= b * nh * tt && dout.len() >= b * tt * c);
    let dp = SharedMut(dqkv.as_mut_ptr());
    (0..b * nh).into_par_iter().for_each_init(
        || (vec![0f32; QB * tt], vec![0f32; QB * tt]),
        |(prob, dpre), bh| {
            let (bi, h) = (bh / nh, bh % nh);
            // SAFETY: the (bi, h) task owns the h-th head's q, k and v columns of
            // batch row bi in dqkv; tasks never overlap and dqkv outlives them.
            let slot = |t: usize, part: usize| unsafe {
                std::slice::from_raw_parts_mut(dp.ptr().add((bi * tt + t) * c3 + part * c + h * hs), hs)
            };
            let query = |t: usize| &qkv[(bi * tt + t) * c3 + h * hs..][..hs];
            let key = |j: usize| &qkv[(bi * tt + j) * c3 + c + h * hs..][..hs];
            let value = |j: usize| &qkv[(bi * tt + j) * c3 + 2 * c + h * hs..][..hs];
            let dout_row = |t: usize| &dout[(bi * tt + t) * c + h * hs..][..hs];
            // Row r of the scratch: probabilities and d(pre-softmax) of query t.
            let row = |r: usize, t: usize, prob: &mut [f32], dpre: &mut [f32]| {
                let (q, d) = (query(t), dout_row(t));
                let (prob, dpre) = (&mut prob[r * tt..][..=t], &mut dpre[r * tt..][..=t]);
                let row_lse = lse[bh * tt + t];
                let whole = (t + 1) / 4 * 4;
                for j in (0..whole).step_by(4) {
                    let s = simd::dot4(isa, q, [key(j), key(j + 1), key(j + 2), key(j + 3)]);
                    let dv = simd::dot4(isa, d, [value(j), value(j + 1), value(j + 2), value(j + 3)]);
                    for i in 0..4 {
                        prob[j + i] = simd::exp(s[i] * scale - row_lse);
                        dpre[j + i] = dv[i];
                    }
                }
                for j in whole..=t {
                    prob[j] = simd::exp(simd::dot(isa, q, key(j)) * scale - row_lse);
                    dpre[j] = simd::dot(isa, d, value(j));
                }
                // D = Σ p·dp, in key order; then dp becomes p·(dp − D)·scale
                let mut dsum = 0f32;
                for (p, dp) in prob.iter().zip(dpre.iter()) {
                    dsum += p * dp;
                }
                for (p, dp) in prob.iter().zip(dpre.iter_mut()) {
                    *dp = p * (*dp - dsum) * scale;
                }
                // dq_t = Σ dpre·k in key order
                let dq = slot(t, 0);
                for j in (0..whole).step_by(4) {
                    let a = [dpre[j], dpre[j + 1], dpre[j + 2], dpre[j + 3]];
                    simd::axpy4(isa, dq, a, [key(j), key(j + 1), key(j + 2), key(j + 3)]);
                }
                for (j, a) in dpre.iter().enumerate().skip(whole) {
                    simd::axpy(isa, dq, *a, key(j));
                }
            };
            let mut t0 = 0;
            while t0 < tt {
                let n = QB.min(tt - t0);
                for r in 0..n {
                    row(r, t0 + r, prob, dpre);
                }
                // dv_j += p·dout_t and dk_j += dpre·q_t over the block's queries
                // t in order: keys every query sees four at once, then the
                // block's own diagonal one query at a time.
                let shared = if n == QB { t0 + 1 } else { 0 };
                if n == QB {
                    let ds = [dout_row(t0), dout_row(t0 + 1), dout_row(t0 + 2), dout_row(t0 + 3)];
                    let qs = [query(t0), query(t0 + 1), query(t0 + 2), query(t0 + 3)];
                    for j in 0..shared {
                        let at = |x: &[f32]| [x[j], x[tt + j], x[2 * tt + j], x[3 * tt + j]];
                        simd::axpy4(isa, slot(j, 2), at(prob), ds);
                        simd::axpy4(isa, slot(j, 1), at(dpre), qs);
                    }
                }
                for j in shared..t0 + n {
                    for r in j.saturating_sub(t0)..n {
                        simd::axpy(isa, slot(j, 2), prob[r * tt + j], dout_row(t0 + r));
                        simd::axpy(isa, slot(j, 1), dpre[r * tt + j], query(t0 + r));
                    }
                }
                t0 += n;
            }
        },
    );
}

/// Shares a mutable base pointer with tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct SharedMut(*mut f32);
// SAFETY: only used where each task writes a disjoint set of indices.
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// The base pointer (a method, so closures capture the whole wrapper).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

/// Attention with the probabilities materialised: `att` (b, nh, t, t) gets the
/// softmaxed scores. The reference the fused kernels and the GPU are checked
/// against.
pub fn reference_forward(isa: Isa, out: &mut [f32], att: &mut [f32], qkv: &[f32], s: AttentionShape) {
    let AttentionShape { b, t: tt, c, nh } = s;
    let hs = c / nh;
    let scale = 1.0 / (hs as f32).sqrt();
    let c3 = 3 * c;
    let outp = SharedMut(out.as_mut_ptr());
    assert!(out.len() >= b * tt * c && att.len() >= b * nh * tt * tt);
    att[..b * nh * tt * tt].par_chunks_mut(tt * tt).enumerate().for_each(|(bh, att_bh)| {
        let (bi, h) = (bh / nh, bh % nh);
        for t in 0..tt {
            let q = &qkv[(bi * tt + t) * c3 + h * hs..][..hs];
            let row = &mut att_bh[t * tt..(t + 1) * tt];
            let mut maxv = f32::NEG_INFINITY;
            for (t2, r) in row.iter_mut().enumerate().take(t + 1) {
                let k = &qkv[(bi * tt + t2) * c3 + c + h * hs..][..hs];
                *r = simd::dot(isa, q, k) * scale;
                maxv = maxv.max(*r);
            }
            let mut sum = 0f32;
            for r in row.iter_mut().take(t + 1) {
                *r = simd::exp(*r - maxv);
                sum += *r;
            }
            let inv = 1.0 / sum;
            for r in row.iter_mut().take(t + 1) {
                *r *= inv;
            }
            row[t + 1..].fill(0.0);
            // SAFETY: (bi, t, h) owns out[(bi*tt+t)*c + h*hs ..][..hs]; no
            // other task writes there, and `out` outlives the scope.
            let o = unsafe { std::slice::from_raw_parts_mut(outp.ptr().add((bi * tt + t) * c + h * hs), hs) };
            o.fill(0.0);
            for (t2, a) in row.iter().enumerate().take(t + 1) {
                let v = &qkv[(bi * tt + t2) * c3 + 2 * c + h * hs..][..hs];
                simd::axpy(isa, o, *a, v);
            }
        }
    });
}

/// Backward of [`reference_forward`] from the stored probabilities.
pub fn reference_backward(
    isa: Isa,
    dqkv: &mut [f32],
    dout: &[f32],
    qkv: &[f32],
    att: &[f32],
    s: AttentionShape,
) {
    let AttentionShape { b, t: tt, c, nh } = s;
    let hs = c / nh;
    let scale = 1.0 / (hs as f32).sqrt();
    let c3 = 3 * c;
    assert!(dqkv.len() >= b * tt * c3 && att.len() >= b * nh * tt * tt);
    let dp = SharedMut(dqkv.as_mut_ptr());
    (0..b * nh).into_par_iter().for_each_init(
        || vec![0f32; tt],
        |datt, bh| {
            let (bi, h) = (bh / nh, bh % nh);
            // SAFETY: the (bi, h) task owns the h-th head's q, k and v columns of
            // batch row bi in dqkv; tasks never overlap and dqkv outlives them.
            let slot = |t: usize, part: usize| unsafe {
                std::slice::from_raw_parts_mut(dp.ptr().add((bi * tt + t) * c3 + part * c + h * hs), hs)
            };
            let att_bh = &att[bh * tt * tt..(bh + 1) * tt * tt];
            for t in 0..tt {
                let row = &att_bh[t * tt..(t + 1) * tt];
                let d = &dout[(bi * tt + t) * c + h * hs..][..hs];
                // through the weighted sum of values
                for t2 in 0..=t {
                    let v = &qkv[(bi * tt + t2) * c3 + 2 * c + h * hs..][..hs];
                    datt[t2] = simd::dot(isa, d, v);
                    simd::axpy(isa, slot(t2, 2), row[t2], d);
                }
                // through the softmax
                let mut s_dot = 0f32;
                for t2 in 0..=t {
                    s_dot += row[t2] * datt[t2];
                }
                let q = &qkv[(bi * tt + t) * c3 + h * hs..][..hs];
                for t2 in 0..=t {
                    let dpre = row[t2] * (datt[t2] - s_dot) * scale;
                    let k = &qkv[(bi * tt + t2) * c3 + c + h * hs..][..hs];
                    simd::axpy(isa, slot(t, 0), dpre, k);
                    simd::axpy(isa, slot(t2, 1), dpre, q);
                }
            }
        },
    );
}

#[cfg(test)]
mod tests;
