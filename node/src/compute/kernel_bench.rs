//! `murmur bench kernels`: device kernel throughput — GFLOP/s of the matmul
//! in each layout and GB/s of the memory-bound kernels — at given shapes, on
//! any backend that can time itself (`TimedBackend`: wgpu, CUDA).
//! Each figure is the best of `iters` timed runs after one warm-up run. A
//! timed run records the kernel as many times as fill about 5 ms (at most
//! 200; as a training step records many kernels before it waits) and ends
//! with `synchronize`, so the device's work is inside the timing and one
//! submission's fixed cost is spread over the repeats.

use std::time::Instant;

use serde::Serialize;

use crate::compute::{AdamWStep, Backend, LogitsShape, MatmulLayout, MatmulShape};

/// A device backend whose kernels can be timed one by one.
pub trait TimedBackend: Backend {
    /// Waits until all submitted work has finished.
    fn synchronize(&self);
    /// One linear-layer product in `layout` (see `MatmulLayout`), no bias.
    fn matmul_in(
        &self,
        layout: MatmulLayout,
        out: &mut Self::Tensor,
        x: &Self::Tensor,
        y: &Self::Tensor,
        s: MatmulShape,
    );
    /// How a product of `m × n` outputs is done, e.g. the tile configuration.
    fn matmul_kind(&self, m: usize, n: usize) -> String;
}

/// Shapes to measure.
#[derive(Clone, Copy, Debug)]
pub struct KernelBenchShape {
    /// Matmul rows (batch × sequence).
    pub rows: usize,
    /// Matmul input features.
    pub channels: usize,
    /// Matmul output features.
    pub out_channels: usize,
    /// Elements of the elementwise kernels.
    pub elems: usize,
    /// Rows and vocabulary of the softmax-cross-entropy (padded to 128).
    pub logit_rows: usize,
    pub vocab: usize,
    pub iters: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct MatmulFigure {
    pub layout: &'static str,
    /// The kernel or configuration that ran it.
    pub kernel: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ms: f64,
    pub gflops: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryFigure {
    pub kernel: &'static str,
    pub elems: usize,
    pub bytes: u64,
    pub ms: f64,
    pub gbps: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelBench {
    pub device: String,
    pub matmul: Vec<MatmulFigure>,
    pub memory: Vec<MemoryFigure>,
}

/// Milliseconds per run of `run`: the best of `iters` timed batches, sized
/// by a run timed after the warm-up (which compiles the pipelines).
fn best_ms<G: TimedBackend>(g: &G, iters: usize, mut run: impl FnMut()) -> f64 {
    run();
    g.synchronize();
    let t = Instant::now();
    run();
    g.synchronize();
    let first = t.elapsed().as_secs_f64() * 1e3;
    let repeats = (5.0 / first.max(1e-3)).clamp(1.0, 200.0) as usize;
    let mut best = f64::INFINITY;
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        for _ in 0..repeats {
            run();
        }
        g.synchronize();
        best = best.min(t.elapsed().as_secs_f64() * 1e3 / repeats as f64);
    }
    best
}

fn filled<G: TimedBackend>(g: &G, len: usize, v: f32) -> G::Tensor {
    let mut t = g.tensor(len);
    g.upload(&mut t, &vec![v; len]);
    t
}

pub fn bench_kernels<G: TimedBackend>(g: &G, s: KernelBenchShape) -> KernelBench {
    let KernelBenchShape { rows: n, channels: c, out_channels: oc, .. } = s;
    let shape = MatmulShape { n, c, oc };
    let (inp, w, dout) = (filled(g, n * c, 0.5), filled(g, oc * c, 0.25), filled(g, n * oc, 0.125));
    let (mut out, mut dinp, mut dw) = (g.tensor(n * oc), g.tensor(n * c), g.tensor(oc * c));
    let mut matmul = Vec::new();
    for layout in MatmulLayout::ALL {
        let ms = best_ms(g, s.iters, || match layout {
            MatmulLayout::Nt => g.matmul_in(layout, &mut out, &inp, &w, shape),
            MatmulLayout::Nn => g.matmul_in(layout, &mut dinp, &dout, &w, shape),
            MatmulLayout::Tn => g.matmul_in(layout, &mut dw, &dout, &inp, shape),
        });
        let (m, nn, k) = match layout {
            MatmulLayout::Nt => (n, oc, c),
            MatmulLayout::Nn => (n, c, oc),
            MatmulLayout::Tn => (oc, c, n),
        };
        let gflops = 2.0 * (m * nn * k) as f64 / (ms * 1e6);
        matmul.push(MatmulFigure {
            layout: layout.name(),
            kernel: g.matmul_kind(m, nn),
            m,
            n: nn,
            k,
            ms,
            gflops,
        });
    }

    let e = s.elems;
    let (x, y) = (filled(g, e, 0.5), filled(g, e, -0.5));
    let mut o = g.tensor(e);
    let mut memory = Vec::new();
    let mut push = |kernel: &'static str, elems: usize, bytes: u64, ms: f64| {
        memory.push(MemoryFigure { kernel, elems, bytes, ms, gbps: bytes as f64 / (ms * 1e6) });
    };
    let ms = best_ms(g, s.iters, || g.gelu_forward(&mut o, &x));
    push("gelu_forward", e, 8 * e as u64, ms);
    let ms = best_ms(g, s.iters, || g.gelu_backward(&mut o, &x, &y));
    push("gelu_backward", e, 16 * e as u64, ms);
    let ms = best_ms(g, s.iters, || g.residual_forward(&mut o, &x, &y));
    push("residual_forward", e, 12 * e as u64, ms);
    let (mut m, mut v, stats) = (g.tensor(e), g.tensor(e), filled(g, 4, 1.0));
    let hp = AdamWStep { lr: 1e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, step: 1 };
    let ms = best_ms(g, s.iters, || g.adamw_update(&mut o, &x, &mut m, &mut v, &stats, 0, hp));
    push("adamw_update", e, 28 * e as u64, ms);
    let mut sink = g.tensor(4);
    let ms = best_ms(g, s.iters, || g.sum_squares_into(&mut sink, 0, &x));
    push("sum_squares", e, 4 * e as u64, ms);
    let rows = (e / c.max(1)).max(1);
    let (mut mean, mut rstd) = (g.tensor(rows), g.tensor(rows));
    let (lw, lb) = (filled(g, c, 1.0), filled(g, c, 0.0));
    let ms = best_ms(g, s.iters, || g.layernorm_forward(&mut o, &mut mean, &mut rstd, &x, &lw, &lb, rows, c));
    push("layernorm_forward", rows * c, 8 * (rows * c) as u64, ms);
    let vp = s.vocab.div_ceil(128) * 128;
    let ls = LogitsShape { n: s.logit_rows, v: s.vocab, vp };
    let logits = filled(g, s.logit_rows * vp, 0.1);
    let (mut probs, mut losses) = (g.tensor(s.logit_rows * vp), g.tensor(s.logit_rows));
    let mut targets = g.tokens(s.logit_rows);
    g.upload_tokens(&mut targets, &vec![1; s.logit_rows]);
    let ms = best_ms(g, s.iters, || g.softmax_xent_forward(&mut losses, &mut probs, &logits, &targets, ls));
    push("softmax_xent_forward", s.logit_rows * vp, 8 * (s.logit_rows * vp) as u64, ms);

    KernelBench { device: g.describe(), matmul, memory }
}
