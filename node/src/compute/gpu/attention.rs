//! Host side of attention.wgsl (flash-style causal attention, multi-head and
//! grouped-query): each kernel's tiles (`attention_tiles`, within the
//! adapter's workgroup memory), written into its pipeline with the head
//! size; batches processed in chunks whose qkv and output windows fit the
//! adapter's binding limit. The forward keeps one logsumexp per (b, h, t)
//! row in `att`; the backward's row sums D live in a scratch tensor sized to
//! one chunk between its two kernels.

use super::memory::chunks;
use super::pipelines::{FlashConfig, Kernel};
use super::{GpuBackend, GpuTensor};
use crate::compute::attention_tiles::{padded_head, FlashKernel};
use crate::compute::AttentionShape;

impl GpuBackend {
    /// Batch entries per chunk: windows within the binding limit, workgroups
    /// within the grid's limit.
    fn attention_chunk(&self, s: AttentionShape) -> usize {
        let widest = (s.t * s.qkv_width()).max(s.nh * s.t).max(1);
        (self.rules.max_elems / widest).clamp(1, (self.max_groups as usize / s.nh.max(1)).max(1))
    }

    /// `kernel`'s pipeline for `s`'s head size and its workgroups for
    /// `heads` (batch entries × heads) rows of blocks.
    fn flash(
        &self,
        kernel: FlashKernel,
        s: AttentionShape,
        heads: usize,
    ) -> (wgpu::ComputePipeline, (u32, u32, u32)) {
        let hs = s.head_size();
        let limit = self.ctx.limits.max_compute_workgroup_storage_size as usize;
        let tiles = kernel.tiles(hs, limit).unwrap_or_else(|| {
            panic!("attention head size {hs}: {kernel:?}'s smallest tiles need more than the adapter's {limit} bytes of workgroup memory")
        });
        let config =
            FlashConfig { kernel, tiles, head: padded_head(hs), floats: kernel.shared_floats(tiles, hs) };
        let blocks = s.t.div_ceil(kernel.block_rows(tiles)).max(1);
        (self.pipeline(Kernel::Flash(config)), (heads as u32, blocks as u32, 1))
    }

    fn attention_args(s: AttentionShape, bases: [u32; 5]) -> [u32; 11] {
        let scale = 1.0 / (s.head_size() as f32).sqrt();
        let [qkv, out, rows, lse, dout] = bases;
        let (t, c, nh, nkv) = (s.t as u32, s.c as u32, s.nh as u32, s.nkv as u32);
        [t, c, nh, s.head_size() as u32, scale.to_bits(), qkv, out, rows, lse, dout, nkv]
    }

    pub(super) fn attention_forward_impl(
        &self,
        out: &mut GpuTensor,
        lse: &mut GpuTensor,
        qkv: &GpuTensor,
        s: AttentionShape,
    ) {
        let AttentionShape { t, c, nh, nkv, .. } = s;
        assert!(nkv > 0 && nh.is_multiple_of(nkv), "query heads in whole groups: {s:?}");
        let w = s.qkv_width();
        for (b0, b1) in chunks(s.b, self.attention_chunk(s)) {
            let (ov, ob) = self.rules.window(&out.buffer, b0 * t * c, b1 * t * c);
            let (lv, lb) = self.rules.window(&lse.buffer, b0 * nh * t, b1 * nh * t);
            let (qv, qb) = self.rules.window(&qkv.buffer, b0 * t * w, b1 * t * w);
            let args = Self::attention_args(s, [qb, ob, lb, 0, 0]);
            let (pipeline, groups) = self.flash(FlashKernel::Forward, s, (b1 - b0) * nh);
            self.rec.dispatch(&pipeline, &args, &[(1, ov), (2, lv), (3, qv)], groups);
        }
    }

    pub(super) fn attention_backward_impl(
        &self,
        dqkv: &mut GpuTensor,
        dout: &GpuTensor,
        qkv: &GpuTensor,
        lse: &GpuTensor,
        s: AttentionShape,
    ) {
        let AttentionShape { t, c, nh, nkv, .. } = s;
        assert!(nkv > 0 && nh.is_multiple_of(nkv), "query heads in whole groups: {s:?}");
        let w = s.qkv_width();
        let per = self.attention_chunk(s);
        let row_sums = self.scratch(|x| &mut x.row_sums, per.min(s.b) * nh * t);
        for (b0, b1) in chunks(s.b, per) {
            let (gv, gb) = self.rules.window(&dqkv.buffer, b0 * t * w, b1 * t * w);
            let (sv, sb) = self.rules.window(&row_sums, 0, (b1 - b0) * nh * t);
            let (qv, qb) = self.rules.window(&qkv.buffer, b0 * t * w, b1 * t * w);
            let (lv, lb) = self.rules.window(&lse.buffer, b0 * nh * t, b1 * nh * t);
            let (dv, db) = self.rules.window(&dout.buffer, b0 * t * c, b1 * t * c);
            let args = Self::attention_args(s, [qb, gb, sb, lb, db]);
            let views = [(1, gv), (2, sv), (3, qv), (4, lv), (5, dv)];
            let (pipeline, groups) = self.flash(FlashKernel::BackwardQ, s, (b1 - b0) * nh);
            self.rec.dispatch(&pipeline, &args, &views, groups);
            let (pipeline, groups) = self.flash(FlashKernel::BackwardKv, s, (b1 - b0) * nkv);
            self.rec.dispatch(&pipeline, &args, &views, groups);
        }
    }
}
