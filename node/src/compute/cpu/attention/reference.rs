//! The materialised attention kernels: the T×T probability matrix kept in
//! memory. The oracle the fused kernels and the GPU backend are checked
//! against (the GPU's buffers keep the full matrix too).

use rayon::prelude::*;

use super::super::isa::Isa;
use super::super::simd;
use super::SharedMut;
use crate::compute::AttentionShape;

/// Attention with the probabilities materialised: `att` (b, nh, t, t) gets the
/// softmaxed scores. The reference the fused kernels and the GPU are checked
/// against.
pub fn reference_forward(isa: Isa, out: &mut [f32], att: &mut [f32], qkv: &[f32], s: AttentionShape) {
    let AttentionShape { b, t: tt, c, nh, nkv } = s;
    let hs = s.head_size();
    let scale = 1.0 / (hs as f32).sqrt();
    let (c3, group) = (s.qkv_width(), nh / nkv);
    let outp = SharedMut(out.as_mut_ptr());
    assert!(out.len() >= b * tt * c && att.len() >= b * nh * tt * tt);
    att[..b * nh * tt * tt].par_chunks_mut(tt * tt).enumerate().for_each(|(bh, att_bh)| {
        let (bi, h) = (bh / nh, bh % nh);
        let (k0, v0) = (c + (h / group) * hs, c + (nkv + h / group) * hs);
        for t in 0..tt {
            let q = &qkv[(bi * tt + t) * c3 + h * hs..][..hs];
            let row = &mut att_bh[t * tt..(t + 1) * tt];
            let mut maxv = f32::NEG_INFINITY;
            for (t2, r) in row.iter_mut().enumerate().take(t + 1) {
                let k = &qkv[(bi * tt + t2) * c3 + k0..][..hs];
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
                let v = &qkv[(bi * tt + t2) * c3 + v0..][..hs];
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
    let AttentionShape { b, t: tt, c, nh, nkv } = s;
    let hs = s.head_size();
    let scale = 1.0 / (hs as f32).sqrt();
    let (c3, group) = (s.qkv_width(), nh / nkv);
    assert!(dqkv.len() >= b * tt * c3 && att.len() >= b * nh * tt * tt);
    let dp = SharedMut(dqkv.as_mut_ptr());
    // One task per (batch row, key/value head): the query heads of a group
    // add into the same dk and dv, in head order.
    (0..b * nkv).into_par_iter().for_each_init(
        || vec![0f32; tt],
        |datt, bkv| {
            let (bi, kvh) = (bkv / nkv, bkv % nkv);
            let (k0, v0) = (c + kvh * hs, c + (nkv + kvh) * hs);
            // SAFETY: the (bi, kvh) task owns the q columns of its group's
            // query heads and the kvh-th k and v columns of batch row bi in
            // dqkv; tasks never overlap and dqkv outlives them.
            let slot = |t: usize, at: usize| unsafe {
                std::slice::from_raw_parts_mut(dp.ptr().add((bi * tt + t) * c3 + at), hs)
            };
            for h in kvh * group..(kvh + 1) * group {
                let bh = bi * nh + h;
                let att_bh = &att[bh * tt * tt..(bh + 1) * tt * tt];
                for t in 0..tt {
                    let row = &att_bh[t * tt..(t + 1) * tt];
                    let d = &dout[(bi * tt + t) * c + h * hs..][..hs];
                    // through the weighted sum of values
                    for t2 in 0..=t {
                        let v = &qkv[(bi * tt + t2) * c3 + v0..][..hs];
                        datt[t2] = simd::dot(isa, d, v);
                        simd::axpy(isa, slot(t2, v0), row[t2], d);
                    }
                    // through the softmax
                    let mut s_dot = 0f32;
                    for t2 in 0..=t {
                        s_dot += row[t2] * datt[t2];
                    }
                    let q = &qkv[(bi * tt + t) * c3 + h * hs..][..hs];
                    for t2 in 0..=t {
                        let dpre = row[t2] * (datt[t2] - s_dot) * scale;
                        let k = &qkv[(bi * tt + t2) * c3 + k0..][..hs];
                        simd::axpy(isa, slot(t, h * hs), dpre, k);
                        simd::axpy(isa, slot(t2, k0), dpre, q);
                    }
                }
            }
        },
    );
}
