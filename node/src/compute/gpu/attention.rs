//! Host side of attention.wgsl (multi-head and grouped-query): batches are
//! processed in chunks whose qkv,
//! scores and output windows fit the adapter's binding limit; the backward's
//! score gradients live in a scratch tensor sized to one chunk.

use super::memory::chunks;
use super::pipelines::Kernel;
use super::{GpuBackend, GpuTensor};
use crate::compute::AttentionShape;

impl GpuBackend {
    /// Batch entries per chunk.
    fn attention_chunk(&self, s: AttentionShape) -> usize {
        let widest = (s.t * s.qkv_width()).max(s.nh * s.t * s.t).max(1);
        (self.rules.max_elems / widest).clamp(1, (self.max_groups as usize / s.nh.max(1)).max(1))
    }

    fn attention_args(s: AttentionShape, bases: [u32; 5]) -> [u32; 11] {
        let hs = s.c / s.nh.max(1);
        let scale = 1.0 / (hs as f32).sqrt();
        let [qkv, out, att, att_in, dout] = bases;
        let (t, c, nh, nkv) = (s.t as u32, s.c as u32, s.nh as u32, s.nkv as u32);
        [t, c, nh, hs as u32, scale.to_bits(), qkv, out, att, att_in, dout, nkv]
    }

    pub(super) fn attention_forward_impl(
        &self,
        out: &mut GpuTensor,
        att: &mut GpuTensor,
        qkv: &GpuTensor,
        s: AttentionShape,
    ) {
        let AttentionShape { t, c, nh, .. } = s;
        let w = s.qkv_width();
        let pipeline = self.pipeline(Kernel::AttentionForward);
        for (b0, b1) in chunks(s.b, self.attention_chunk(s)) {
            let (ov, ob) = self.rules.window(&out.buffer, b0 * t * c, b1 * t * c);
            let (av, ab) = self.rules.window(&att.buffer, b0 * nh * t * t, b1 * nh * t * t);
            let (qv, qb) = self.rules.window(&qkv.buffer, b0 * t * w, b1 * t * w);
            let args = Self::attention_args(s, [qb, ob, ab, 0, 0]);
            let views = [(1, ov), (2, av), (3, qv)];
            self.rec.dispatch(&pipeline, &args, &views, (t as u32, ((b1 - b0) * nh) as u32, 1));
        }
    }

    pub(super) fn attention_backward_impl(
        &self,
        dqkv: &mut GpuTensor,
        dout: &GpuTensor,
        qkv: &GpuTensor,
        att: &GpuTensor,
        s: AttentionShape,
    ) {
        let AttentionShape { t, c, nh, .. } = s;
        let w = s.qkv_width();
        let per = self.attention_chunk(s);
        let scratch = self.scratch(|x| &mut x.scores, per.min(s.b) * nh * t * t);
        let scores = self.pipeline(Kernel::AttentionBackwardScores);
        let grads = self.pipeline(Kernel::AttentionBackwardQkv);
        for (b0, b1) in chunks(s.b, per) {
            let (gv, gb) = self.rules.window(&dqkv.buffer, b0 * t * w, b1 * t * w);
            let (sv, sb) = self.rules.window(&scratch, 0, (b1 - b0) * nh * t * t);
            let (qv, qb) = self.rules.window(&qkv.buffer, b0 * t * w, b1 * t * w);
            let (av, ab) = self.rules.window(&att.buffer, b0 * nh * t * t, b1 * nh * t * t);
            let (dv, db) = self.rules.window(&dout.buffer, b0 * t * c, b1 * t * c);
            let args = Self::attention_args(s, [qb, gb, sb, ab, db]);
            let groups = (t as u32, ((b1 - b0) * nh) as u32, 1);
            self.rec.dispatch(&scores, &args, &[(2, sv), (3, qv), (4, av), (5, dv)], groups);
            self.rec.dispatch(&grads, &args, &[(1, gv), (2, sv), (3, qv), (4, av), (5, dv)], groups);
        }
    }
}
