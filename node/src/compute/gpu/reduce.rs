//! Host side of reduce.wgsl: sums and sums of squares into one slot of a
//! device tensor (two passes, fixed order), the gradient-clip factor, and
//! column sums (bias gradients).

use super::memory::chunks;
use super::pipelines::Kernel;
use super::{GpuBackend, GpuTensor};

/// Elements per partial (reduce.wgsl's BLOCK = WG * ITEMS).
const BLOCK: usize = 256 * 16;
/// Columns per workgroup of the column reductions (`reduce_columns` here,
/// `layernorm_backward_params` in rows.rs): the shaders' COLS and PCOLS.
pub(super) const COLUMN_GROUP: usize = 32;

impl GpuBackend {
    /// out[slot] = scale · Σ x (or Σ x² when `square`).
    pub(super) fn reduce_into(
        &self,
        out: &mut GpuTensor,
        slot: usize,
        x: &GpuTensor,
        scale: f32,
        square: bool,
    ) {
        let per = (self.rules.max_elems / BLOCK * BLOCK).max(BLOCK).min(BLOCK * self.max_groups as usize);
        let spans: Vec<(usize, usize)> = chunks(x.len, per).collect();
        let count: usize = spans.iter().map(|(s, e)| (e - s).div_ceil(BLOCK)).sum();
        let partials = self.scratch(|s| &mut s.partials, count.max(1));
        let first = self.pipeline(Kernel::ReducePartials);
        let mut at = 0usize;
        for (s, e) in spans {
            let blocks = (e - s).div_ceil(BLOCK);
            let (xv, xb) = self.rules.window(&x.buffer, s, e);
            let (pv, pb) = self.rules.window(&partials, at, at + blocks);
            let args = [(e - s) as u32, xb, pb, square as u32];
            self.rec.dispatch(&first, &args, &[(1, pv), (2, xv)], (blocks as u32, 1, 1));
            at += blocks;
        }
        let (ov, ob) = self.rules.window(&out.buffer, slot, slot + 1);
        let (pv, pb) = self.rules.window(&partials, 0, count.max(1));
        let args = [count as u32, pb, ob, 0, scale.to_bits()];
        self.rec.dispatch(&self.pipeline(Kernel::ReduceFinal), &args, &[(1, ov), (2, pv)], (1, 1, 1));
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn grad_clip_scale_impl(
        &self,
        stats: &mut GpuTensor,
        norm_slot: usize,
        scale_slot: usize,
        partials: &GpuTensor,
        count: usize,
        max_norm: f32,
        unscale: f32,
    ) {
        let (pv, pb) = self.rules.window(&partials.buffer, 0, count.max(1));
        let sv = self.rules.whole(stats);
        let args = [
            count as u32,
            pb,
            0,
            0,
            unscale.to_bits(),
            norm_slot as u32,
            scale_slot as u32,
            max_norm.to_bits(),
        ];
        self.rec.dispatch(&self.pipeline(Kernel::GradClipScale), &args, &[(1, sv), (2, pv)], (1, 1, 1));
    }

    /// out[j] += Σᵢ x[i·cols + j] in a fixed order (x is rows × cols; one
    /// workgroup per 32 columns, reduce.wgsl).
    pub(super) fn column_sums_into(&self, out: &mut GpuTensor, x: &GpuTensor, rows: usize, cols: usize) {
        let pipeline = self.pipeline(Kernel::ReduceColumns);
        let per = (self.rules.max_elems / cols.max(1)).max(1);
        let (ov, ob) = self.rules.window(&out.buffer, 0, cols);
        for (s, e) in chunks(rows, per) {
            let (xv, xb) = self.rules.window(&x.buffer, s * cols, e * cols);
            let args = [(e - s) as u32, xb, ob, 0, 0, 0, 0, 0, cols as u32];
            self.rec.dispatch(
                &pipeline,
                &args,
                &[(1, ov), (2, xv)],
                (cols.div_ceil(COLUMN_GROUP) as u32, 1, 1),
            );
        }
    }
}
