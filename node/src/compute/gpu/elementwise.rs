//! Host side of the elementwise kernels (gelu.wgsl, residual.wgsl,
//! adamw.wgsl): each tensor is walked in windows the adapter can bind, one
//! dispatch per window.

use super::memory::{chunks, View};
use super::pipelines::Kernel;
use super::{GpuBackend, GpuTensor};
use crate::compute::AdamWStep;

const WG: usize = 256;

impl GpuBackend {
    /// Runs `kernel` over the first `n` elements of `tensors` (bound at
    /// bindings 1, 2, ...). Arguments: `n`, the window base of each tensor
    /// (padded to `base_slots`), then `extra`. `fixed` views are bound whole.
    fn elementwise(
        &self,
        kernel: Kernel,
        n: usize,
        tensors: &[(u32, &wgpu::Buffer)],
        base_slots: usize,
        fixed: &[(u32, View<'_>)],
        extra: &[u32],
    ) {
        let pipeline = self.pipeline(kernel);
        let per = self.rules.max_elems.min(WG * self.max_groups as usize);
        for (s, e) in chunks(n, per) {
            let mut args = vec![(e - s) as u32];
            let mut views = Vec::with_capacity(tensors.len() + fixed.len());
            for (binding, buffer) in tensors {
                let (view, base) = self.rules.window(buffer, s, e);
                args.push(base);
                views.push((*binding, view));
            }
            args.resize(1 + base_slots, 0);
            args.extend_from_slice(extra);
            views.extend_from_slice(fixed);
            self.rec.dispatch(&pipeline, &args, &views, ((e - s).div_ceil(WG) as u32, 1, 1));
        }
    }

    pub(super) fn gelu_forward_impl(&self, out: &mut GpuTensor, inp: &GpuTensor) {
        let n = out.len.min(inp.len);
        self.elementwise(Kernel::GeluForward, n, &[(1, &out.buffer), (2, &inp.buffer)], 3, &[], &[]);
    }

    pub(super) fn gelu_backward_impl(&self, dinp: &mut GpuTensor, inp: &GpuTensor, dout: &GpuTensor) {
        let n = dinp.len.min(inp.len).min(dout.len);
        let t = [(1, &dinp.buffer), (2, &inp.buffer), (3, &dout.buffer)];
        self.elementwise(Kernel::GeluBackward, n, &t, 3, &[], &[]);
    }

    pub(super) fn residual_forward_impl(&self, out: &mut GpuTensor, a: &GpuTensor, b: &GpuTensor) {
        let n = out.len.min(a.len).min(b.len);
        let t = [(1, &out.buffer), (2, &a.buffer), (3, &b.buffer)];
        self.elementwise(Kernel::ResidualForward, n, &t, 3, &[], &[]);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn adamw_impl(
        &self,
        param: &mut GpuTensor,
        grad: &GpuTensor,
        m: &mut GpuTensor,
        v: &mut GpuTensor,
        stats: &GpuTensor,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        let n = param.len.min(grad.len).min(m.len).min(v.len);
        // Bias corrections computed exactly as the CPU backend does.
        let (bc1, bc2) = hp.bias_corrections();
        let extra = [
            scale_slot as u32,
            hp.lr.to_bits(),
            hp.beta1.to_bits(),
            hp.beta2.to_bits(),
            hp.eps.to_bits(),
            hp.weight_decay.to_bits(),
            bc1.to_bits(),
            bc2.to_bits(),
        ];
        let t = [(1, &param.buffer), (2, &grad.buffer), (3, &m.buffer), (4, &v.buffer)];
        let stats_view = self.rules.whole(stats);
        self.elementwise(Kernel::AdamW, n, &t, 4, &[(5, stats_view)], &extra);
    }
}
