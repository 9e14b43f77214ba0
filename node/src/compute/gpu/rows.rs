//! Host side of the row kernels — encoder.wgsl, layernorm.wgsl,
//! softmax_xent.wgsl: rows are processed in chunks that fit the adapter's
//! binding and dispatch limits; the token embedding is walked in row windows.

use super::memory::chunks;
use super::pipelines::Kernel;
use super::reduce::COLUMN_GROUP;
use super::{GpuBackend, GpuTensor, GpuTokens};
use crate::compute::{EncoderShape, LogitsShape};

impl GpuBackend {
    /// Rows of `width` floats per chunk: bounded by bindings and by the
    /// workgroup grid (one workgroup row per tensor row).
    fn rows_per_chunk(&self, width: usize) -> usize {
        (self.rules.max_elems / width.max(1)).clamp(1, self.max_groups as usize)
    }

    pub(super) fn encoder_forward_impl(
        &self,
        out: &mut GpuTensor,
        tokens: &GpuTokens,
        wte: &GpuTensor,
        wpe: &GpuTensor,
        s: EncoderShape,
    ) {
        let c = s.c;
        let vocab = wte.len / c.max(1);
        let pipeline = self.pipeline(Kernel::EncoderForward);
        let tv = self.rules.window(&tokens.buffer, 0, GpuTokens::words(tokens.len)).0;
        let pv = self.rules.whole(wpe);
        let per = self.rows_per_chunk(c);
        for (r0, r1) in chunks(s.b * s.t, per) {
            let (ov, ob) = self.rules.window(&out.buffer, r0 * c, r1 * c);
            for (v0, v1) in chunks(vocab, per) {
                let (wv, wb) = self.rules.window(&wte.buffer, v0 * c, v1 * c);
                let args =
                    [c as u32, s.t as u32, r0 as u32, (r1 - r0) as u32, v0 as u32, v1 as u32, ob, wb, 0, 0];
                let views = [(1, ov), (2, tv), (3, wv), (4, pv)];
                self.rec.dispatch(&pipeline, &args, &views, (c.div_ceil(64) as u32, (r1 - r0) as u32, 1));
            }
        }
    }

    pub(super) fn encoder_backward_impl(
        &self,
        dwte: &mut GpuTensor,
        dwpe: &mut GpuTensor,
        dout: &GpuTensor,
        tokens: &GpuTokens,
        s: EncoderShape,
    ) {
        let c = s.c;
        let bt = s.b * s.t;
        let dv = self.rules.window(&dout.buffer, 0, bt * c).0;
        let tv = self.rules.window(&tokens.buffer, 0, GpuTokens::words(tokens.len)).0;
        // Positions: dwpe[t] += Σ_b dout[b, t] (batch rows in order).
        let args = [c as u32, s.t as u32, 0, bt as u32, 0, 0, 0, 0, 0, 0];
        let pv = self.rules.whole(dwpe);
        let positions = self.pipeline(Kernel::EncoderBackwardPositions);
        self.rec.dispatch(&positions, &args, &[(1, pv), (5, dv)], (c.div_ceil(64) as u32, s.t as u32, 1));
        // Tokens: each distinct token's rows summed in position order.
        let vocab = dwte.len / c.max(1);
        let pipeline = self.pipeline(Kernel::EncoderBackwardTokens);
        let per = self.rows_per_chunk(c);
        for (g0, g1) in chunks(tokens.groups, self.max_groups as usize) {
            for (v0, v1) in chunks(vocab, per) {
                let (wv, wb) = self.rules.window(&dwte.buffer, v0 * c, v1 * c);
                let args = [
                    c as u32,
                    s.t as u32,
                    0,
                    bt as u32,
                    v0 as u32,
                    v1 as u32,
                    wb,
                    0,
                    0,
                    0,
                    tokens.order_offset() as u32,
                    tokens.group_token_offset() as u32,
                    tokens.group_start_offset() as u32,
                    g0 as u32,
                    (g1 - g0) as u32,
                ];
                let views = [(1, wv), (2, tv), (5, dv)];
                self.rec.dispatch(&pipeline, &args, &views, (c.div_ceil(64) as u32, (g1 - g0) as u32, 1));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn layernorm_forward_impl(
        &self,
        out: &mut GpuTensor,
        mean: &mut GpuTensor,
        rstd: &mut GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        bias: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        let pipeline = self.pipeline(Kernel::LayernormForward);
        let (wv, bv) = (self.rules.whole(weight), self.rules.whole(bias));
        for (r0, r1) in chunks(n, self.rows_per_chunk(c)) {
            let (ov, ob) = self.rules.window(&out.buffer, r0 * c, r1 * c);
            let (iv, ib) = self.rules.window(&inp.buffer, r0 * c, r1 * c);
            let (mv, sb) = self.rules.window(&mean.buffer, r0, r1);
            let (rv, _) = self.rules.window(&rstd.buffer, r0, r1);
            let args = [(r1 - r0) as u32, c as u32, 0, ib, ob, 0, sb];
            let views = [(1, ov), (2, mv), (3, rv), (4, iv), (5, wv), (6, bv)];
            self.rec.dispatch(&pipeline, &args, &views, ((r1 - r0) as u32, 1, 1));
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn layernorm_backward_impl(
        &self,
        dinp: &mut GpuTensor,
        dweight: &mut GpuTensor,
        dbias: &mut GpuTensor,
        dout: &GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        mean: &GpuTensor,
        rstd: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        let input = self.pipeline(Kernel::LayernormBackwardInput);
        let params = self.pipeline(Kernel::LayernormBackwardParams);
        let wv = self.rules.whole(weight);
        let (dwv, dbv) = (self.rules.whole(dweight), self.rules.whole(dbias));
        for (r0, r1) in chunks(n, self.rows_per_chunk(c)) {
            let (ov, ob) = self.rules.window(&dinp.buffer, r0 * c, r1 * c);
            let (iv, ib) = self.rules.window(&inp.buffer, r0 * c, r1 * c);
            let (gv, gb) = self.rules.window(&dout.buffer, r0 * c, r1 * c);
            let (mv, sb) = self.rules.window(&mean.buffer, r0, r1);
            let (rv, _) = self.rules.window(&rstd.buffer, r0, r1);
            let args = [(r1 - r0) as u32, c as u32, 0, ib, ob, gb, sb];
            let views = [(1, ov), (2, mv), (3, rv), (4, iv), (5, wv), (7, gv)];
            self.rec.dispatch(&input, &args, &views, ((r1 - r0) as u32, 1, 1));
            let views = [(2, mv), (3, rv), (4, iv), (7, gv), (8, dwv), (9, dbv)];
            self.rec.dispatch(&params, &args, &views, (c.div_ceil(COLUMN_GROUP) as u32, 1, 1));
        }
    }

    pub(super) fn softmax_xent_forward_impl(
        &self,
        losses: &mut GpuTensor,
        probs: &mut GpuTensor,
        logits: &GpuTensor,
        targets: &GpuTokens,
        s: LogitsShape,
    ) {
        let pipeline = self.pipeline(Kernel::SoftmaxXentForward);
        let tv = self.rules.window(&targets.buffer, 0, targets.len.max(1)).0;
        for (r0, r1) in chunks(s.n, self.rows_per_chunk(s.vp)) {
            let (pv, pb) = self.rules.window(&probs.buffer, r0 * s.vp, r1 * s.vp);
            let (lv, lb) = self.rules.window(&logits.buffer, r0 * s.vp, r1 * s.vp);
            let (sv, sb) = self.rules.window(&losses.buffer, r0, r1);
            let args = [(r1 - r0) as u32, s.v as u32, s.vp as u32, r0 as u32, lb, pb, sb, 0];
            let views = [(1, pv), (2, sv), (3, lv), (4, tv)];
            self.rec.dispatch(&pipeline, &args, &views, ((r1 - r0) as u32, 1, 1));
        }
    }

    pub(super) fn softmax_xent_backward_impl(
        &self,
        dlogits: &mut GpuTensor,
        probs: &GpuTensor,
        targets: &GpuTokens,
        dloss: f32,
        s: LogitsShape,
    ) {
        let pipeline = self.pipeline(Kernel::SoftmaxXentBackward);
        let tv = self.rules.window(&targets.buffer, 0, targets.len.max(1)).0;
        for (r0, r1) in chunks(s.n, self.rows_per_chunk(s.vp)) {
            let (dv, db) = self.rules.window(&dlogits.buffer, r0 * s.vp, r1 * s.vp);
            let (pv, pb) = self.rules.window(&probs.buffer, r0 * s.vp, r1 * s.vp);
            let args = [(r1 - r0) as u32, s.v as u32, s.vp as u32, r0 as u32, pb, db, 0, dloss.to_bits()];
            let views = [(1, dv), (3, pv), (4, tv)];
            self.rec.dispatch(&pipeline, &args, &views, (s.v.div_ceil(256) as u32, (r1 - r0) as u32, 1));
        }
    }
}
