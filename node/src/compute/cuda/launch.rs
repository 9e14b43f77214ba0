//! Host side of the kernels in shaders/cuda: grid sizes, arguments and the
//! order of launches for each op. Elementwise kernels take one thread per
//! element; row kernels one block of `BLOCK` threads per row; column
//! reductions one block of 32 × 32 threads per 32 columns. Attention's
//! kernels are in `attention`, the Llama kernels (llama.cu) in `llama`.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{CudaBackend, CudaTensor, CudaTokens, Scratch};
use crate::compute::{AdamWStep, EncoderShape, LogitsShape, MatmulLayout, MatmulShape};

/// Threads per block; the row kernels' trees assume exactly this many.
pub(super) const BLOCK: u32 = 256;
/// Elements one `reduce_partials` block folds (BLOCK · ITEMS in reduce.cu).
const REDUCE_CHUNK: usize = 256 * 16;

/// One thread per element of `n`.
pub(super) fn elements(n: usize) -> LaunchConfig {
    let blocks = u32::try_from(n.div_ceil(BLOCK as usize).max(1))
        .unwrap_or_else(|_| panic!("{n} elements: grid too large"));
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// One block per row.
pub(super) fn rows(n: usize) -> LaunchConfig {
    let blocks = u32::try_from(n.max(1)).unwrap_or_else(|_| panic!("{n} rows: grid too large"));
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// Column reductions (`column_sums`, `layernorm_backward_params`): one block
/// of `COLUMN_WIDTH × COLUMN_LANES` threads per `COLUMN_WIDTH` columns (the
/// kernels' COLS × LANES).
const COLUMN_WIDTH: u32 = 32;
const COLUMN_LANES: u32 = 32;
pub(super) fn columns(n: usize) -> LaunchConfig {
    let blocks = u32::try_from(n.div_ceil(COLUMN_WIDTH as usize).max(1))
        .unwrap_or_else(|_| panic!("{n} columns: grid too large"));
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (COLUMN_WIDTH, COLUMN_LANES, 1), shared_mem_bytes: 0 }
}

/// A size as the kernels' `unsigned`.
pub(super) fn u(v: usize) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("size {v} exceeds the CUDA kernels' 32-bit indices"))
}

/// Launches kernel `$name` with `$cfg` and the arguments (places, not temporaries).
macro_rules! launch {
    ($be:expr, $name:literal, $cfg:expr; $($arg:expr),+ $(,)?) => {{
        let mut b = $be.stream.launch_builder($be.function($name));
        $( b.arg($arg); )+
        // SAFETY: the arguments match the kernel's parameter list in
        // shaders/cuda, and every index the kernel touches is bounded by the
        // sizes passed, which the tensors hold.
        if let Err(e) = unsafe { b.launch($cfg) } {
            panic!("CUDA kernel {} failed: {e}", $name);
        }
    }};
}
pub(super) use launch;

impl CudaBackend {
    pub(super) fn encoder_forward_impl(
        &self,
        out: &mut CudaTensor,
        tokens: &CudaTokens,
        wte: &CudaTensor,
        wpe: &CudaTensor,
        s: EncoderShape,
    ) {
        let (bt, t, c) = (u(s.b * s.t), u(s.t), u(s.c));
        launch!(self, "encoder_forward", elements(s.b * s.t * s.c); &mut out.buf, &tokens.buf, &wte.buf, &wpe.buf, &bt, &t, &c);
    }

    pub(super) fn encoder_backward_impl(
        &self,
        dwte: &mut CudaTensor,
        dwpe: &mut CudaTensor,
        dout: &CudaTensor,
        tokens: &CudaTokens,
        s: EncoderShape,
    ) {
        let (b, t, c) = (u(s.b), u(s.t), u(s.c));
        let (cap, groups) = (u(tokens.len.max(1)), u(tokens.groups));
        if tokens.groups > 0 {
            launch!(self, "encoder_backward_wte", elements(tokens.groups * s.c); &mut dwte.buf, &dout.buf, &tokens.buf, &cap, &groups, &c);
        }
        launch!(self, "encoder_backward_wpe", elements(s.t * s.c); &mut dwpe.buf, &dout.buf, &b, &t, &c);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn layernorm_forward_impl(
        &self,
        out: &mut CudaTensor,
        mean: &mut CudaTensor,
        rstd: &mut CudaTensor,
        inp: &CudaTensor,
        w: &CudaTensor,
        b: &CudaTensor,
        n: usize,
        c: usize,
    ) {
        let (nu, cu) = (u(n), u(c));
        launch!(self, "layernorm_forward", rows(n); &mut out.buf, &mut mean.buf, &mut rstd.buf, &inp.buf, &w.buf, &b.buf, &nu, &cu);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn layernorm_backward_impl(
        &self,
        dinp: &mut CudaTensor,
        dw: &mut CudaTensor,
        db: &mut CudaTensor,
        dout: &CudaTensor,
        inp: &CudaTensor,
        w: &CudaTensor,
        mean: &CudaTensor,
        rstd: &CudaTensor,
        n: usize,
        c: usize,
    ) {
        let (nu, cu) = (u(n), u(c));
        launch!(self, "layernorm_backward_input", rows(n); &mut dinp.buf, &dout.buf, &inp.buf, &w.buf, &mean.buf, &rstd.buf, &nu, &cu);
        launch!(self, "layernorm_backward_params", columns(c); &mut dw.buf, &mut db.buf, &dout.buf, &inp.buf, &mean.buf, &rstd.buf, &nu, &cu);
    }

    /// out(n,oc) = inp · weightᵀ (+ bias broadcast first, then accumulated onto).
    pub(super) fn matmul_forward_impl(
        &self,
        out: &mut CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        bias: Option<&CudaTensor>,
        s: MatmulShape,
    ) {
        let beta = match bias {
            Some(bias) => {
                let (n, oc) = (u(s.n), u(s.oc));
                launch!(self, "bias_rows", elements(s.n * s.oc); &mut out.buf, &bias.buf, &n, &oc);
                1.0
            }
            None => 0.0,
        };
        self.blas.gemm(MatmulLayout::Nt, &mut out.buf, &inp.buf, &weight.buf, s, beta);
    }

    /// dbias[j] += Σ_i dout[i, j], in a fixed order (matmul.cu).
    pub(super) fn column_sums_impl(&self, dbias: &mut CudaTensor, dout: &CudaTensor, n: usize, oc: usize) {
        let (nu, ocu) = (u(n), u(oc));
        launch!(self, "column_sums", columns(oc); &mut dbias.buf, &dout.buf, &nu, &ocu);
    }

    pub(super) fn gelu_forward_impl(&self, out: &mut CudaTensor, inp: &CudaTensor) {
        let n = u(out.len.min(inp.len));
        launch!(self, "gelu_forward", elements(n as usize); &mut out.buf, &inp.buf, &n);
    }

    pub(super) fn gelu_backward_impl(&self, dinp: &mut CudaTensor, inp: &CudaTensor, dout: &CudaTensor) {
        let n = u(dinp.len.min(inp.len).min(dout.len));
        launch!(self, "gelu_backward", elements(n as usize); &mut dinp.buf, &inp.buf, &dout.buf, &n);
    }

    pub(super) fn residual_forward_impl(&self, out: &mut CudaTensor, a: &CudaTensor, b: &CudaTensor) {
        let n = u(out.len.min(a.len).min(b.len));
        launch!(self, "residual_forward", elements(n as usize); &mut out.buf, &a.buf, &b.buf, &n);
    }

    pub(super) fn softmax_xent_forward_impl(
        &self,
        losses: &mut CudaTensor,
        probs: &mut CudaTensor,
        logits: &CudaTensor,
        targets: &CudaTokens,
        s: LogitsShape,
    ) {
        let (n, v, vp) = (u(s.n), u(s.v), u(s.vp));
        launch!(self, "softmax_xent_forward", rows(s.n); &mut losses.buf, &mut probs.buf, &logits.buf, &targets.buf, &n, &v, &vp);
    }

    pub(super) fn softmax_xent_backward_impl(
        &self,
        dlogits: &mut CudaTensor,
        probs: &CudaTensor,
        targets: &CudaTokens,
        dloss: f32,
        s: LogitsShape,
    ) {
        let (n, v, vp) = (u(s.n), u(s.v), u(s.vp));
        launch!(self, "softmax_xent_backward", elements(s.n * s.v); &mut dlogits.buf, &probs.buf, &targets.buf, &dloss, &n, &v, &vp);
    }

    /// out[slot] = scale · Σ x (or Σ x²), two passes with fixed trees.
    pub(super) fn reduce_into(
        &self,
        out: &mut CudaTensor,
        slot: usize,
        x: &CudaTensor,
        scale: f32,
        square: bool,
    ) {
        let count = x.len.div_ceil(REDUCE_CHUNK);
        let mut guard = self.scratch(Scratch::partials_slot, count);
        let Some(partials) = guard.partials.as_mut() else { unreachable!("scratch() fills the slot") };
        let (n, sq, countu, slotu) = (u(x.len), u(square as usize), u(count), u(slot));
        if count > 0 {
            launch!(self, "reduce_partials", rows(count); &mut *partials, &x.buf, &n, &sq);
        }
        let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        launch!(self, "reduce_final", one; &mut out.buf, &*partials, &countu, &slotu, &scale);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn grad_clip_scale_impl(
        &self,
        stats: &mut CudaTensor,
        norm_slot: usize,
        scale_slot: usize,
        partials: &CudaTensor,
        count: usize,
        max_norm: f32,
        unscale: f32,
    ) {
        let (countu, ns, ss) = (u(count), u(norm_slot), u(scale_slot));
        let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        launch!(self, "grad_clip_scale", one; &mut stats.buf, &partials.buf, &countu, &ns, &ss, &max_norm, &unscale);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn adamw_impl(
        &self,
        param: &mut CudaTensor,
        grad: &CudaTensor,
        m: &mut CudaTensor,
        v: &mut CudaTensor,
        stats: &CudaTensor,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        // bias corrections as the CPU backend computes them
        let (bc1, bc2) = hp.bias_corrections();
        let (slot, n) = (u(scale_slot), u(param.len.min(grad.len)));
        launch!(self, "adamw_update", elements(n as usize);
            &mut param.buf, &grad.buf, &mut m.buf, &mut v.buf, &stats.buf, &slot, &n,
            &hp.lr, &hp.beta1, &hp.beta2, &hp.eps, &hp.weight_decay, &bc1, &bc2);
    }
}
