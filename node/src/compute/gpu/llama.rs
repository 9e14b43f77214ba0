//! Host side of llama.wgsl (RMSNorm, rotary embeddings, SwiGLU): rows are
//! processed in chunks that fit the adapter's binding and dispatch limits,
//! one workgroup row per tensor row.

use super::memory::chunks;
use super::pipelines::Kernel;
use super::reduce::COLUMN_GROUP;
use super::{GpuBackend, GpuTensor};
use crate::compute::AttentionShape;

impl GpuBackend {
    /// Rows of `width` floats per chunk.
    fn llama_rows(&self, width: usize) -> usize {
        (self.rules.max_elems / width.max(1)).clamp(1, self.max_groups as usize)
    }

    /// llama.wgsl's arguments: the row fields, then RoPE's.
    fn llama_args(rows: usize, c: usize, bases: [u32; 4], rope: [u32; 7]) -> [u32; 13] {
        let [inp, out, dout, stat] = bases;
        let [t, heads, hs, width, row0, log2_theta, sign] = rope;
        [rows as u32, c as u32, inp, out, dout, stat, t, heads, hs, width, row0, log2_theta, sign]
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rmsnorm_forward_impl(
        &self,
        out: &mut GpuTensor,
        rstd: &mut GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        let pipeline = self.pipeline(Kernel::RmsnormForward);
        let wv = self.rules.whole(weight);
        for (r0, r1) in chunks(n, self.llama_rows(c)) {
            let (ov, ob) = self.rules.window(&out.buffer, r0 * c, r1 * c);
            let (iv, ib) = self.rules.window(&inp.buffer, r0 * c, r1 * c);
            let (rv, sb) = self.rules.window(&rstd.buffer, r0, r1);
            let args = Self::llama_args(r1 - r0, c, [ib, ob, 0, sb], [0; 7]);
            let views = [(1, ov), (2, rv), (3, iv), (4, wv)];
            self.rec.dispatch(&pipeline, &args, &views, ((r1 - r0) as u32, 1, 1));
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rmsnorm_backward_impl(
        &self,
        dinp: &mut GpuTensor,
        dweight: &mut GpuTensor,
        dout: &GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        rstd: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        let input = self.pipeline(Kernel::RmsnormBackwardInput);
        let params = self.pipeline(Kernel::RmsnormBackwardParams);
        let (wv, dwv) = (self.rules.whole(weight), self.rules.whole(dweight));
        for (r0, r1) in chunks(n, self.llama_rows(c)) {
            let (ov, ob) = self.rules.window(&dinp.buffer, r0 * c, r1 * c);
            let (iv, ib) = self.rules.window(&inp.buffer, r0 * c, r1 * c);
            let (gv, gb) = self.rules.window(&dout.buffer, r0 * c, r1 * c);
            let (rv, sb) = self.rules.window(&rstd.buffer, r0, r1);
            let args = Self::llama_args(r1 - r0, c, [ib, ob, gb, sb], [0; 7]);
            let views = [(1, ov), (2, rv), (3, iv), (4, wv), (5, gv)];
            self.rec.dispatch(&input, &args, &views, ((r1 - r0) as u32, 1, 1));
            let views = [(2, rv), (3, iv), (5, gv), (6, dwv)];
            self.rec.dispatch(&params, &args, &views, (c.div_ceil(COLUMN_GROUP) as u32, 1, 1));
        }
    }

    /// RoPE in place on a qkv tensor (`inverse`: its gradient).
    pub(super) fn rope_impl(&self, qkv: &mut GpuTensor, s: AttentionShape, theta: f32, inverse: bool) {
        let pipeline = self.pipeline(Kernel::Rope);
        let (hs, width) = (s.head_size(), s.qkv_width());
        let heads = s.nh + s.nkv;
        let sign: f32 = if inverse { -1.0 } else { 1.0 };
        let pairs = heads * hs / 2;
        for (r0, r1) in chunks(s.b * s.t, self.llama_rows(width)) {
            let (v, base) = self.rules.window(&qkv.buffer, r0 * width, r1 * width);
            let rope = [
                s.t as u32,
                heads as u32,
                hs as u32,
                width as u32,
                r0 as u32,
                theta.log2().to_bits(),
                sign.to_bits(),
            ];
            let args = Self::llama_args(r1 - r0, 0, [0, base, 0, 0], rope);
            self.rec.dispatch(&pipeline, &args, &[(1, v)], (pairs.div_ceil(64) as u32, (r1 - r0) as u32, 1));
        }
    }

    pub(super) fn swiglu_impl(
        &self,
        out: &mut GpuTensor,
        inp: &GpuTensor,
        dout: Option<&GpuTensor>,
        n: usize,
        h: usize,
    ) {
        let kernel = if dout.is_some() { Kernel::SwigluBackward } else { Kernel::SwigluForward };
        let pipeline = self.pipeline(kernel);
        // forward: out (n, h); backward: out is dinp (n, 2h)
        let out_width = if dout.is_some() { 2 * h } else { h };
        for (r0, r1) in chunks(n, self.llama_rows(2 * h)) {
            let (ov, ob) = self.rules.window(&out.buffer, r0 * out_width, r1 * out_width);
            let (iv, ib) = self.rules.window(&inp.buffer, r0 * 2 * h, r1 * 2 * h);
            let groups = (h.div_ceil(256) as u32, (r1 - r0) as u32, 1);
            match dout {
                Some(d) => {
                    let (dv, db) = self.rules.window(&d.buffer, r0 * h, r1 * h);
                    let args = Self::llama_args(r1 - r0, h, [ib, ob, db, 0], [0; 7]);
                    self.rec.dispatch(&pipeline, &args, &[(1, ov), (3, iv), (5, dv)], groups);
                }
                None => {
                    let args = Self::llama_args(r1 - r0, h, [ib, ob, 0, 0], [0; 7]);
                    self.rec.dispatch(&pipeline, &args, &[(1, ov), (3, iv)], groups);
                }
            }
        }
    }
}
