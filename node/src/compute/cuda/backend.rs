//! The Backend trait on the CUDA backend: memory and transfers here, every
//! op forwarded to its launch in `launch` or its GEMM in `blas`.

use super::{CudaBackend, CudaTensor, CudaTokens};
use crate::compute::kernel_bench::TimedBackend;
use crate::compute::tokens::token_layout;
use crate::compute::{
    AdamWStep, AttentionShape, Backend, EncoderShape, LogitsShape, MatmulLayout, MatmulShape,
};

impl TimedBackend for CudaBackend {
    fn synchronize(&self) {
        CudaBackend::synchronize(self);
    }
    fn matmul_in(
        &self,
        layout: MatmulLayout,
        out: &mut CudaTensor,
        x: &CudaTensor,
        y: &CudaTensor,
        s: MatmulShape,
    ) {
        let beta = if layout == MatmulLayout::Nt { 0.0 } else { 1.0 };
        self.blas.gemm(layout, &mut out.buf, &x.buf, &y.buf, s, beta);
    }
    fn matmul_kind(&self, _m: usize, _n: usize) -> String {
        "cuBLAS sgemm".into()
    }
}

#[allow(clippy::too_many_arguments)]
impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type Tokens = CudaTokens;

    fn describe(&self) -> String {
        format!("cuda ({}, sm_{}, {} MiB, matmul cuBLAS)", self.name, self.arch, self.memory_bytes >> 20)
    }

    /// The device's free memory (cuMemGetInfo), so `murmur train` checks
    /// a shape against the GPU as it does against the host on the CPU.
    fn memory_available(&self) -> Option<u64> {
        self.stream.context().mem_get_info().ok().map(|(free, _total)| free as u64)
    }

    fn tensor(&self, len: usize) -> CudaTensor {
        CudaTensor { buf: self.alloc(len), len }
    }
    fn tokens(&self, len: usize) -> CudaTokens {
        CudaTokens { buf: self.alloc(CudaTokens::words(len)), len, groups: 0 }
    }
    fn len(&self, t: &CudaTensor) -> usize {
        t.len
    }
    fn upload(&self, dst: &mut CudaTensor, src: &[f32]) {
        let n = src.len().min(dst.len);
        if n == 0 {
            return;
        }
        if let Err(e) = self.stream.memcpy_htod(&src[..n], &mut dst.buf.slice_mut(..n)) {
            panic!("CUDA upload of {n} floats failed: {e}");
        }
        self.transfers.upload(false, 4 * n);
    }
    fn upload_tokens(&self, dst: &mut CudaTokens, src: &[u32]) {
        let (words, groups) = token_layout(src, dst.len.max(1));
        dst.groups = groups;
        if let Err(e) = self.stream.memcpy_htod(&words[..], &mut dst.buf.slice_mut(..words.len())) {
            panic!("CUDA upload of {} tokens failed: {e}", src.len());
        }
        self.transfers.upload(true, 4 * words.len());
    }
    fn download(&self, src: &CudaTensor) -> Vec<f32> {
        if src.len == 0 {
            return Vec::new();
        }
        let out = self
            .stream
            .clone_dtoh(&src.buf.slice(..src.len))
            .and_then(|v| self.stream.synchronize().map(|_| v));
        match out {
            Ok(v) => {
                self.transfers.download(4 * src.len);
                v
            }
            Err(e) => panic!("CUDA download of {} floats failed: {e}", src.len),
        }
    }
    fn zero(&self, t: &mut CudaTensor) {
        if let Err(e) = self.stream.memset_zeros(&mut t.buf) {
            panic!("CUDA memset failed: {e}");
        }
    }

    fn encoder_forward(
        &self,
        out: &mut CudaTensor,
        tokens: &CudaTokens,
        wte: &CudaTensor,
        wpe: &CudaTensor,
        s: EncoderShape,
    ) {
        self.encoder_forward_impl(out, tokens, wte, wpe, s);
    }
    fn encoder_backward(
        &self,
        dwte: &mut CudaTensor,
        dwpe: &mut CudaTensor,
        dout: &CudaTensor,
        tokens: &CudaTokens,
        s: EncoderShape,
    ) {
        self.encoder_backward_impl(dwte, dwpe, dout, tokens, s);
    }

    fn layernorm_forward(
        &self,
        out: &mut CudaTensor,
        mean: &mut CudaTensor,
        rstd: &mut CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        bias: &CudaTensor,
        n: usize,
        c: usize,
    ) {
        self.layernorm_forward_impl(out, mean, rstd, inp, weight, bias, n, c);
    }
    fn layernorm_backward(
        &self,
        dinp: &mut CudaTensor,
        dweight: &mut CudaTensor,
        dbias: &mut CudaTensor,
        dout: &CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        mean: &CudaTensor,
        rstd: &CudaTensor,
        n: usize,
        c: usize,
    ) {
        self.layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c);
    }

    fn matmul_forward(
        &self,
        out: &mut CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        bias: Option<&CudaTensor>,
        s: MatmulShape,
    ) {
        self.matmul_forward_impl(out, inp, weight, bias, s);
    }
    fn matmul_backward(
        &self,
        dinp: &mut CudaTensor,
        dweight: &mut CudaTensor,
        dbias: Option<&mut CudaTensor>,
        dout: &CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        s: MatmulShape,
    ) {
        self.blas.gemm(MatmulLayout::Nn, &mut dinp.buf, &dout.buf, &weight.buf, s, 1.0);
        self.blas.gemm(MatmulLayout::Tn, &mut dweight.buf, &dout.buf, &inp.buf, s, 1.0);
        if let Some(db) = dbias {
            self.column_sums_impl(db, dout, s.n, s.oc);
        }
    }

    /// The flash kernels keep one logsumexp per row, not the T×T matrix.
    fn attention_scratch_len(&self, s: AttentionShape) -> usize {
        s.rows()
    }
    fn attention_forward(
        &self,
        out: &mut CudaTensor,
        att: &mut CudaTensor,
        qkv: &CudaTensor,
        s: AttentionShape,
    ) {
        self.attention_forward_impl(out, att, qkv, s);
    }
    fn attention_backward(
        &self,
        dqkv: &mut CudaTensor,
        dout: &CudaTensor,
        qkv: &CudaTensor,
        att: &CudaTensor,
        s: AttentionShape,
    ) {
        self.attention_backward_impl(dqkv, dout, qkv, att, s);
    }

    fn rmsnorm_forward(
        &self,
        out: &mut CudaTensor,
        rstd: &mut CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        n: usize,
        c: usize,
    ) {
        self.rmsnorm_forward_impl(out, rstd, inp, weight, n, c);
    }
    fn rmsnorm_backward(
        &self,
        dinp: &mut CudaTensor,
        dweight: &mut CudaTensor,
        dout: &CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        rstd: &CudaTensor,
        n: usize,
        c: usize,
    ) {
        self.rmsnorm_backward_impl(dinp, dweight, dout, inp, weight, rstd, n, c);
    }
    fn rope_forward(&self, qkv: &mut CudaTensor, s: AttentionShape, theta: f32) {
        self.rope_impl(qkv, s, theta, false);
    }
    fn rope_backward(&self, dqkv: &mut CudaTensor, s: AttentionShape, theta: f32) {
        self.rope_impl(dqkv, s, theta, true);
    }
    fn swiglu_forward(&self, out: &mut CudaTensor, inp: &CudaTensor, n: usize, h: usize) {
        self.swiglu_forward_impl(out, inp, n, h);
    }
    fn swiglu_backward_fresh(
        &self,
        dinp: &mut CudaTensor,
        inp: &CudaTensor,
        dout: &CudaTensor,
        n: usize,
        h: usize,
    ) {
        self.swiglu_backward_impl(dinp, inp, dout, n, h);
    }

    fn gelu_forward(&self, out: &mut CudaTensor, inp: &CudaTensor) {
        self.gelu_forward_impl(out, inp);
    }
    fn gelu_backward(&self, dinp: &mut CudaTensor, inp: &CudaTensor, dout: &CudaTensor) {
        self.gelu_backward_impl(dinp, inp, dout);
    }

    fn residual_forward(&self, out: &mut CudaTensor, a: &CudaTensor, b: &CudaTensor) {
        self.residual_forward_impl(out, a, b);
    }

    fn softmax_xent_forward(
        &self,
        losses: &mut CudaTensor,
        probs: &mut CudaTensor,
        logits: &CudaTensor,
        targets: &CudaTokens,
        s: LogitsShape,
    ) {
        self.softmax_xent_forward_impl(losses, probs, logits, targets, s);
    }
    fn softmax_xent_backward(
        &self,
        dlogits: &mut CudaTensor,
        probs: &CudaTensor,
        targets: &CudaTokens,
        dloss: f32,
        s: LogitsShape,
    ) {
        self.softmax_xent_backward_impl(dlogits, probs, targets, dloss, s);
    }

    fn sum_into(&self, out: &mut CudaTensor, slot: usize, x: &CudaTensor, scale: f32) {
        self.reduce_into(out, slot, x, scale, false);
    }
    fn sum_squares_into(&self, out: &mut CudaTensor, slot: usize, x: &CudaTensor) {
        self.reduce_into(out, slot, x, 1.0, true);
    }
    fn grad_clip_scale(
        &self,
        stats: &mut CudaTensor,
        norm_slot: usize,
        scale_slot: usize,
        partials: &CudaTensor,
        count: usize,
        max_norm: f32,
        unscale: f32,
    ) {
        self.grad_clip_scale_impl(stats, norm_slot, scale_slot, partials, count, max_norm, unscale);
    }
    fn adamw_update(
        &self,
        param: &mut CudaTensor,
        grad: &CudaTensor,
        m: &mut CudaTensor,
        v: &mut CudaTensor,
        stats: &CudaTensor,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        self.adamw_impl(param, grad, m, v, stats, scale_slot, hp);
    }
}
