//! `murmur bench gemm`: GFLOP/s of the CPU GEMM per instruction-set path,
//! precision and layout, at 1024³ and at the model's own shapes.

use std::time::Instant;

use serde::Serialize;

use super::gemm::{gemm, gemm_packed_b, GemmOpts, Init, MatRef, WeightImage};
use super::isa::{Isa, Precision};
use crate::compute::awake::with_awake_workers;

/// Which of the model's three products a GEMM is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Layout {
    /// out = inp · Wᵀ (forward).
    NT,
    /// dinp = dout · W (backward, input gradient).
    NN,
    /// dW = doutᵀ · inp (backward, weight gradient).
    TN,
}

/// One GEMM to time: C[m×n] = A[m×k] · B[k×n] in a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GemmShape {
    pub name: &'static str,
    pub layout: Layout,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// The default set: 1024³ in every layout, then GPT-2 124M at B4 T64
/// (256 rows) and every GEMM of the L4 C256 test shape (its attproj and LM
/// head are the 256³ ones), forward and backward.
pub fn default_shapes() -> Vec<GemmShape> {
    let s = |name, layout, m, n, k| GemmShape { name, layout, m, n, k };
    use Layout::*;
    vec![
        s("square", NT, 1024, 1024, 1024),
        s("square", NN, 1024, 1024, 1024),
        s("square", TN, 1024, 1024, 1024),
        s("124m qkv", NT, 256, 2304, 768),
        s("124m attproj", NT, 256, 768, 768),
        s("124m fc", NT, 256, 3072, 768),
        s("124m fcproj", NT, 256, 768, 3072),
        s("124m fc dinp", NN, 256, 768, 3072),
        s("124m fc dW", TN, 3072, 768, 256),
        s("124m lm head", NT, 256, 50304, 768),
        s("124m lm dinp", NN, 256, 768, 50304),
        s("124m lm dW", TN, 50304, 768, 256),
        s("c256 qkv", NT, 256, 768, 256),
        s("c256 attproj", NT, 256, 256, 256),
        s("c256 fc", NT, 256, 1024, 256),
        s("c256 fcproj", NT, 256, 256, 1024),
        s("c256 qkv dinp", NN, 256, 256, 768),
        s("c256 fc dinp", NN, 256, 256, 1024),
        s("c256 fcproj dinp", NN, 256, 1024, 256),
        s("c256 qkv dW", TN, 768, 256, 256),
        s("c256 fc dW", TN, 1024, 256, 256),
        s("c256 fcproj dW", TN, 256, 1024, 256),
    ]
}

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub struct GemmBench {
    pub shape: GemmShape,
    pub isa: String,
    pub precision: String,
    pub threads: usize,
    /// How B reaches the kernel: `packed per call`, or `image` (a weight
    /// image written beforehand, as a training step's bf16 GEMMs read the
    /// weights: `WeightImage`).
    pub b: &'static str,
    /// Best time of the timed runs.
    pub ms: f64,
    pub gflops: f64,
    /// Cross-core round trip just before the timing (`train::handoff`),
    /// where the caller measured it: about 60 ns near, 350 far on the
    /// benchmark VM.
    pub handoff_ns: Option<f64>,
}

/// Whether `shape`'s B is a weight (NT, NN) that `opts`' GEMMs read from an image.
pub fn has_image(shape: GemmShape, opts: GemmOpts) -> bool {
    weight_image(shape, opts).is_some()
}

/// The weight image of `shape`'s B, if it is a weight read through one.
fn weight_image(shape: GemmShape, opts: GemmOpts) -> Option<WeightImage> {
    let GemmShape { n, k, layout, .. } = shape;
    match layout {
        Layout::NT => WeightImage::new(n, k, opts),
        Layout::NN => WeightImage::new(k, n, opts),
        Layout::TN => None,
    }
}

/// How long `bench_gemm` runs a GEMM before timing it.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(50);

/// Times `shape` (best of `iters` after at least `WARM_UP` of warm-up) on one path; with
/// `image`, B is read from its weight image (written before the timing).
///
/// # Panics
/// With `image` on a shape `has_image` says has none.
pub fn bench_gemm(shape: GemmShape, opts: GemmOpts, iters: usize, image: bool) -> GemmBench {
    let GemmShape { m, n, k, layout, .. } = shape;
    let fill = |len: usize, seed: u64| -> Vec<f32> {
        (0..len as u64).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
    };
    let (a, b) = (fill(m * k, 1), fill(k * n, 2));
    // The views the model's kernels use for each layout.
    let (av, bv) = match layout {
        Layout::NT => (MatRef { data: &a, rs: k, cs: 1 }, MatRef { data: &b, rs: 1, cs: k }),
        Layout::NN => (MatRef { data: &a, rs: k, cs: 1 }, MatRef { data: &b, rs: n, cs: 1 }),
        Layout::TN => (MatRef { data: &a, rs: 1, cs: m }, MatRef { data: &b, rs: n, cs: 1 }),
    };
    let mut c = vec![0f32; m * n];
    let init = if layout == Layout::NT { Init::Overwrite } else { Init::Accumulate };
    let mut buf = Vec::new();
    let packed = image.then(|| {
        let img = weight_image(shape, opts).expect("bench gemm: this shape has no weight image");
        buf = vec![0f32; img.buffer_len()];
        img.write(&mut buf, &b);
        match layout {
            Layout::NT => img.nt(&buf),
            _ => img.nn(&buf),
        }
    });
    let run = |c: &mut [f32]| match packed {
        Some(pb) => gemm_packed_b(m, n, k, av, pb, c, n, init, opts),
        None => gemm(m, n, k, av, bv, c, n, init, opts),
    };
    // Timed on a pool worker with the others kept awake, as a training step
    // runs its GEMMs (`on_worker`) and as torch.matmul's OpenMP threads
    // spin between calls: otherwise each timed GEMM would start by waking a
    // sleeping worker.
    let best = with_awake_workers(|| {
        // Warm up for WARM_UP, not one call: right after the workers wake,
        // the OS may still run both on one core (in 5 timed calls of a
        // 0.3 ms GEMM, a third of the processes timed the one-thread rate).
        let warm = Instant::now();
        run(&mut c);
        while warm.elapsed() < WARM_UP {
            run(&mut c);
        }
        let mut best = f64::INFINITY;
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            run(&mut c);
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    });
    GemmBench {
        shape,
        isa: opts.isa.to_string(),
        precision: opts.precision.to_string(),
        threads: rayon::current_num_threads(),
        b: if image { "image" } else { "packed per call" },
        ms: best * 1e3,
        gflops: 2.0 * (m * n * k) as f64 / best / 1e9,
        handoff_ns: None,
    }
}

/// Every (path, precision) pair to compare: the given ones, or every path
/// this CPU supports in both precisions.
pub fn bench_paths(isa: Option<Isa>, precision: Option<Precision>) -> Vec<GemmOpts> {
    let isas = isa.map(|i| vec![i]).unwrap_or_else(Isa::supported_paths);
    let precs = precision.map(|p| vec![p]).unwrap_or_else(|| vec![Precision::Fp32, Precision::Bf16]);
    let mut out = Vec::new();
    for p in precs {
        for &i in &isas {
            out.push(GemmOpts { isa: i, precision: p });
        }
    }
    out
}
