//! Host side of llama.cu (RMSNorm, rotary embeddings, SwiGLU): grid sizes,
//! arguments and launch order; RMSNorm's rows one block each, its weight
//! gradient one 32 × 32 block per 32 channels, RoPE one thread per rotated
//! pair with one grid column per tensor row, SwiGLU one thread per element.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::launch::{columns, elements, launch, rows, u, BLOCK};
use super::{CudaBackend, CudaTensor};
use crate::compute::AttentionShape;

impl CudaBackend {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rmsnorm_forward_impl(
        &self,
        out: &mut CudaTensor,
        rstd: &mut CudaTensor,
        inp: &CudaTensor,
        weight: &CudaTensor,
        n: usize,
        c: usize,
    ) {
        let (nu, cu) = (u(n), u(c));
        launch!(self, "rmsnorm_forward", rows(n); &mut out.buf, &mut rstd.buf, &inp.buf, &weight.buf, &nu, &cu);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rmsnorm_backward_impl(
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
        let (nu, cu) = (u(n), u(c));
        launch!(self, "rmsnorm_backward_input", rows(n);
            &mut dinp.buf, &dout.buf, &inp.buf, &weight.buf, &rstd.buf, &nu, &cu);
        launch!(self, "rmsnorm_backward_params", columns(c); &mut dweight.buf, &dout.buf, &inp.buf, &rstd.buf, &nu, &cu);
    }

    /// RoPE in place on a qkv tensor (`inverse`: its gradient).
    pub(super) fn rope_impl(&self, qkv: &mut CudaTensor, s: AttentionShape, theta: f32, inverse: bool) {
        let (hs, width, heads, n) = (s.head_size(), s.qkv_width(), s.nh + s.nkv, s.b * s.t);
        assert!(hs.is_multiple_of(2), "RoPE pairs the channels of a head: {s:?}");
        let pairs = heads * hs / 2;
        let grid_y = u32::try_from(pairs.div_ceil(BLOCK as usize).max(1)).ok().filter(|&p| p <= 65_535);
        let grid_y = grid_y.unwrap_or_else(|| panic!("{pairs} pairs a row: RoPE grid too large"));
        let cfg = LaunchConfig {
            grid_dim: (u(n.max(1)), grid_y, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let sign: f32 = if inverse { -1.0 } else { 1.0 };
        let (nu, tu, headsu, hsu, widthu) = (u(n), u(s.t), u(heads), u(hs), u(width));
        launch!(self, "rope", cfg; &mut qkv.buf, &nu, &tu, &headsu, &hsu, &widthu, &theta, &sign);
    }

    /// out(n, h) = silu(gate)·up.
    pub(super) fn swiglu_forward_impl(&self, out: &mut CudaTensor, inp: &CudaTensor, n: usize, h: usize) {
        let (nu, hu) = (u(n), u(h));
        launch!(self, "swiglu_forward", elements(n * h); &mut out.buf, &inp.buf, &nu, &hu);
    }

    /// dinp(n, 2h) written with SwiGLU's gradient.
    pub(super) fn swiglu_backward_impl(
        &self,
        dinp: &mut CudaTensor,
        inp: &CudaTensor,
        dout: &CudaTensor,
        n: usize,
        h: usize,
    ) {
        let (nu, hu) = (u(n), u(h));
        launch!(self, "swiglu_backward", elements(n * h); &mut dinp.buf, &inp.buf, &dout.buf, &nu, &hu);
    }
}
