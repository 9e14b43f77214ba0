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
