//! The CPU backend's kernels, one plain function per op, forward beside
//! backward (llm.c's layout). Work is split over rows with rayon; every
//! output element is computed by one task in a fixed order, so results are
//! deterministic. Reductions across rows (weight gradients) run in row order.

use rayon::prelude::*;

use super::gemm::{gemm, gemm_packed_b, GemmOpts, Init, MatRef, WeightImage};
use super::isa::Isa;
use super::simd;
use crate::compute::{AdamWStep, EncoderShape, LogitsShape, MatmulShape};

const LN_EPS: f32 = 1e-5;
/// GELU's tanh argument is clamped here so no backend ever sees an overflow.
pub const GELU_TANH_CLAMP: f32 = 10.0;

pub fn encoder_forward(out: &mut [f32], tokens: &[u32], wte: &[f32], wpe: &[f32], s: EncoderShape) {
    let c = s.c;
    out[..s.b * s.t * c].par_chunks_mut(c).enumerate().for_each(|(bt, o)| {
        let tok = tokens[bt] as usize;
        let t = bt % s.t;
        let (we, pe) = (&wte[tok * c..(tok + 1) * c], &wpe[t * c..(t + 1) * c]);
        for ((o, w), p) in o.iter_mut().zip(we).zip(pe) {
            *o = w + p;
        }
    });
}

pub fn encoder_backward(
    isa: Isa,
    dwte: &mut [f32],
    dwpe: &mut [f32],
    dout: &[f32],
    tokens: &[u32],
    s: EncoderShape,
) {
    let c = s.c;
    for bt in 0..s.b * s.t {
        let tok = tokens[bt] as usize;
        let t = bt % s.t;
        let d = &dout[bt * c..(bt + 1) * c];
        simd::add_assign(isa, &mut dwte[tok * c..(tok + 1) * c], d);
        simd::add_assign(isa, &mut dwpe[t * c..(t + 1) * c], d);
    }
}

#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    isa: Isa,
    out: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    inp: &[f32],
    w: &[f32],
    b: &[f32],
    n: usize,
    c: usize,
) {
    out[..n * c]
        .par_chunks_mut(c)
        .zip(mean[..n].par_iter_mut().zip(rstd[..n].par_iter_mut()))
        .enumerate()
        .for_each(|(i, (o, (m, r)))| {
            let x = &inp[i * c..(i + 1) * c];
            let mu = simd::sum(isa, x) / c as f32;
            let var = simd::sum_sq_dev(isa, x, mu) / c as f32;
            let rs = 1.0 / (var + LN_EPS).sqrt();
            for (((o, x), w), b) in o.iter_mut().zip(x).zip(w).zip(b) {
                *o = (x - mu) * rs * w + b;
            }
            *m = mu;
            *r = rs;
        });
}

#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    isa: Isa,
    dinp: &mut [f32],
    dw: &mut [f32],
    db: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    mean: &[f32],
    rstd: &[f32],
    n: usize,
    c: usize,
) {
    let w = &w[..c];
    dinp[..n * c].par_chunks_mut(c).enumerate().for_each(|(i, di)| {
        let (x, d) = (&inp[i * c..(i + 1) * c], &dout[i * c..(i + 1) * c]);
        let (mu, rs) = (mean[i], rstd[i]);
        let (sum, sum_norm) = simd::ln_backward_sums(isa, x, d, w, mu, rs);
        simd::ln_backward_row(isa, di, x, d, w, [mu, rs, sum / c as f32, sum_norm / c as f32]);
    });
    // Parameter gradients: parallel over channel blocks, rows in order.
    const CB: usize = 64;
    dw[..c].par_chunks_mut(CB).zip(db[..c].par_chunks_mut(CB)).enumerate().for_each(|(blk, (dwb, dbb))| {
        let j0 = blk * CB;
        for i in 0..n {
            let row = i * c + j0..i * c + j0 + dwb.len();
            simd::ln_param_grads(isa, dwb, dbb, &inp[row.clone()], &dout[row], mean[i], rstd[i]);
        }
    });
}

/// A matmul weight as the GEMMs read it: the `oc × c` values, and the
/// buffer of its images (`WeightImage`, written since the weight last
/// changed) when the caller keeps one.
#[derive(Clone, Copy)]
pub struct Weight<'a> {
    pub values: &'a [f32],
    pub image: Option<&'a [f32]>,
}

impl<'a> Weight<'a> {
    /// A weight with no image: the GEMMs pack it per call.
    pub fn plain(values: &'a [f32]) -> Self {
        Weight { values, image: None }
    }

    /// The image layout to read, when there is an image and `opts`' plan reads one.
    fn image(&self, oc: usize, c: usize, opts: GemmOpts) -> Option<(WeightImage, &'a [f32])> {
        let buf = self.image?;
        WeightImage::new(oc, c, opts).map(|img| (img, buf))
    }
}

pub fn matmul_forward(
    opts: GemmOpts,
    out: &mut [f32],
    inp: &[f32],
    weight: Weight<'_>,
    bias: Option<&[f32]>,
    s: MatmulShape,
) {
    let MatmulShape { n, c, oc } = s;
    let a = MatRef { data: inp, rs: c, cs: 1 };
    let init = match bias {
        Some(bias) => Init::Bias(bias),
        None => Init::Overwrite,
    };
    match weight.image(oc, c, opts) {
        Some((img, buf)) => gemm_packed_b(n, oc, c, a, img.nt(buf), out, oc, init, opts),
        None => {
            let b = MatRef { data: weight.values, rs: 1, cs: c }; // weightᵀ
            gemm(n, oc, c, a, b, out, oc, init, opts)
        }
    }
}

/// The backward of [`matmul_forward`]; `dinp_init` says whether dinp is
/// accumulated into or overwritten (dweight and dbias always accumulate).
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    opts: GemmOpts,
    (dinp_init, dweight_init): (Init<'_>, Init<'_>),
    dinp: &mut [f32],
    dweight: &mut [f32],
    dbias: Option<&mut [f32]>,
    dout: &[f32],
    inp: &[f32],
    weight: Weight<'_>,
    s: MatmulShape,
) {
    let MatmulShape { n, c, oc } = s;
    // NN: dinp(n,c) += dout(n,oc) · weight(oc,c)
    let a = MatRef { data: dout, rs: oc, cs: 1 };
    match weight.image(oc, c, opts) {
        Some((img, buf)) => gemm_packed_b(n, c, oc, a, img.nn(buf), dinp, c, dinp_init, opts),
        None => {
            let b = MatRef { data: weight.values, rs: c, cs: 1 };
            gemm(n, c, oc, a, b, dinp, c, dinp_init, opts)
        }
    }
    // TN: dweight(oc,c) += dout(n,oc)ᵀ · inp(n,c)
    gemm(
        oc,
        c,
        n,
        MatRef { data: dout, rs: 1, cs: oc },
        MatRef { data: inp, rs: c, cs: 1 },
        dweight,
        c,
        dweight_init,
        opts,
    );
    if let Some(db) = dbias {
        const CB: usize = 64;
        db[..oc].par_chunks_mut(CB).enumerate().for_each(|(blk, dbb)| {
            let o0 = blk * CB;
            for i in 0..n {
                simd::add_assign(opts.isa, dbb, &dout[i * oc + o0..i * oc + o0 + dbb.len()]);
            }
        });
    }
}

pub fn gelu_forward(isa: Isa, out: &mut [f32], inp: &[f32]) {
    out.par_chunks_mut(4096)
        .zip(inp.par_chunks(4096))
        .for_each(|(o, x)| simd::gelu_forward(isa, o, x, GELU_TANH_CLAMP));
}

/// dinp (+)= GELU'(inp)·dout: accumulated, or written when `accumulate` is false.
pub fn gelu_backward(isa: Isa, accumulate: bool, dinp: &mut [f32], inp: &[f32], dout: &[f32]) {
    dinp.par_chunks_mut(4096)
        .zip(inp.par_chunks(4096).zip(dout.par_chunks(4096)))
        .for_each(|(di, (x, d))| simd::gelu_backward(isa, di, x, d, GELU_TANH_CLAMP, accumulate));
}

pub fn residual_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
    out.par_chunks_mut(4096).zip(a.par_chunks(4096).zip(b.par_chunks(4096))).for_each(|(o, (a, b))| {
        for ((o, a), b) in o.iter_mut().zip(a).zip(b) {
            *o = a + b;
        }
    });
}

pub fn softmax_xent_forward(
    isa: Isa,
    losses: &mut [f32],
    probs: &mut [f32],
    logits: &[f32],
    targets: &[u32],
    s: LogitsShape,
) {
    let LogitsShape { n, v, vp } = s;
    probs[..n * vp].par_chunks_mut(vp).zip(losses[..n].par_iter_mut()).enumerate().for_each(
        |(i, (p, loss))| {
            let l = &logits[i * vp..i * vp + v];
            let maxv = simd::max(isa, l);
            let sum = simd::exp_shifted_sum(isa, &mut p[..v], l, maxv);
            simd::scale(isa, &mut p[..v], 1.0 / sum);
            p[v..].fill(0.0);
            let tgt = targets[i] as usize;
            // -ln p computed from the logits keeps precision when p underflows.
            *loss = sum.ln() + maxv - l[tgt.min(v - 1)];
        },
    );
}

pub fn softmax_xent_backward(
    dlogits: &mut [f32],
    probs: &[f32],
    targets: &[u32],
    dloss: f32,
    s: LogitsShape,
) {
    let LogitsShape { n, v, vp } = s;
    dlogits[..n * vp].par_chunks_mut(vp).enumerate().for_each(|(i, dl)| {
        let p = &probs[i * vp..i * vp + v];
        let tgt = targets[i] as usize;
        for (j, (d, p)) in dl[..v].iter_mut().zip(p).enumerate() {
            let ind = if j == tgt { 1.0 } else { 0.0 };
            *d += (p - ind) * dloss;
        }
    });
}

/// Σ x in fixed 64Ki blocks combined in order (f64 between blocks).
pub fn sum(isa: Isa, x: &[f32]) -> f64 {
    x.par_chunks(1 << 16).map(|c| simd::sum(isa, c) as f64).collect::<Vec<_>>().iter().sum()
}

pub fn sum_squares(isa: Isa, x: &[f32]) -> f64 {
    x.par_chunks(1 << 16).map(|c| simd::sum_squares(isa, c)).collect::<Vec<_>>().iter().sum()
}

/// AdamW over a tensor in fixed chunks; with `GradIn::Zero`, each chunk's
/// gradient is zeroed in the same pass (the next step accumulates from it).
#[allow(clippy::too_many_arguments)]
pub fn adamw_update(
    isa: Isa,
    p: &mut [f32],
    g: GradIn<'_>,
    m: &mut [f32],
    v: &mut [f32],
    grad_scale: f32,
    hp: AdamWStep,
) {
    let (bc1, bc2) = hp.bias_corrections();
    let k = [grad_scale, bc1, bc2];
    const CH: usize = 8192;
    let chunks = p.par_chunks_mut(CH).zip(m.par_chunks_mut(CH).zip(v.par_chunks_mut(CH)));
    match g {
        GradIn::Keep(g) => {
            chunks.zip(g.par_chunks(CH)).for_each(|((p, (m, v)), g)| simd::adamw(isa, p, g, m, v, k, hp))
        }
        GradIn::Zero(g) => chunks
            .zip(g.par_chunks_mut(CH))
            .for_each(|((p, (m, v)), g)| simd::adamw_zero_grad(isa, p, g, m, v, k, hp)),
    }
}

/// [`adamw_update`] for an `oc × c` matmul weight (its gradient left as it
/// was) whose images `image` rewrites into `buf`: each 32-row
/// chunk is updated a KC block of columns at a time, and that tile's images
/// are written while it is still in cache. The updated values are the bits
/// `adamw_update` gives (AdamW is element by element).
#[allow(clippy::too_many_arguments)]
pub fn adamw_update_imaged(
    isa: Isa,
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    grad_scale: f32,
    hp: AdamWStep,
    image: WeightImage,
    buf: &mut [f32],
    c: usize,
) {
    let (bc1, bc2) = hp.bias_corrections();
    let k = [grad_scale, bc1, bc2];
    let chunk = WeightImage::CHUNK_ROWS * c;
    let writer = image.begin_write(buf);
    let chunks = p
        .par_chunks_mut(chunk)
        .zip(g.par_chunks(chunk).zip(m.par_chunks_mut(chunk).zip(v.par_chunks_mut(chunk))));
    chunks.enumerate().for_each(|(ch, (p, (g, (m, v))))| {
        for tile in 0..image.tiles_per_chunk() {
            let cols = image.tile_columns(tile);
            for r in 0..p.len() / c {
                let at = r * c + cols.start..r * c + cols.end;
                simd::adamw(isa, &mut p[at.clone()], &g[at.clone()], &mut m[at.clone()], &mut v[at], k, hp);
            }
            writer.write_tile(p, ch * WeightImage::CHUNK_ROWS, tile);
        }
    });
}

/// The gradient AdamW reads: kept, or zeroed once read.
pub enum GradIn<'a> {
    Keep(&'a [f32]),
    Zero(&'a mut [f32]),
}

/// x = 0, in parallel chunks.
pub fn zero(x: &mut [f32]) {
    x.par_chunks_mut(1 << 15).for_each(|c| c.fill(0.0));
}

#[cfg(test)]
mod tests {
    use super::super::CpuBackend;
    use crate::compute::{AttentionShape, Backend, MatmulShape};

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len as u32).map(|i| (i.wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5).collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The `_fresh` backward ops ignore what their output held (NaN here) and
    /// give exactly the bits of zeroing it and accumulating into it.
    #[test]
    fn fresh_backward_ops_write_what_zero_then_accumulate_gives() {
        let be = CpuBackend::new();
        let s = MatmulShape { n: 19, c: 24, oc: 40 };
        let (dout, inp, w) = (values(19 * 40, 1), values(19 * 24, 2), values(40 * 24, 3));
        let (mut dw, mut db) = (vec![0.0; 40 * 24], vec![0.0; 40]);
        let mut want = vec![0.0; 19 * 24];
        be.matmul_backward(&mut want, &mut dw, Some(&mut db), &dout, &inp, &w, s);
        let mut got = vec![f32::NAN; 19 * 24];
        be.matmul_backward_fresh_dinp(&mut got, &mut dw, Some(&mut db), &dout, &inp, &w, s);
        assert_eq!(bits(&got), bits(&want), "matmul dinp");

        let (x, d) = (values(333, 4), values(333, 5));
        let mut want = vec![0.0; 333];
        be.gelu_backward(&mut want, &x, &d);
        let mut got = vec![f32::NAN; 333];
        be.gelu_backward_fresh(&mut got, &x, &d);
        assert_eq!(bits(&got), bits(&want), "gelu");

        let a = AttentionShape::mha(2, 9, 16, 2);
        let qkv = values(2 * 9 * 48, 6);
        let (mut out, mut att) = (vec![0.0; 2 * 9 * 16], vec![0.0; be.attention_scratch_len(a)]);
        be.attention_forward(&mut out, &mut att, &qkv, a);
        let d = values(2 * 9 * 16, 7);
        let mut want = vec![0.0; 2 * 9 * 48];
        be.attention_backward(&mut want, &d, &qkv, &att, a);
        let mut got = vec![f32::NAN; 2 * 9 * 48];
        be.attention_backward_fresh(&mut got, &d, &qkv, &att, a);
        assert_eq!(bits(&got), bits(&want), "attention");
    }

    /// The written-out bias corrections are what `powi` gives at run time
    /// (the bits every earlier run used), for small and large steps.
    #[test]
    fn bias_corrections_are_run_time_powi() {
        use crate::compute::AdamWStep;
        use std::hint::black_box;
        for step in [1u32, 2, 3, 7, 100, 1000, 4097, 123_457] {
            let hp = AdamWStep { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0, step };
            let (bc1, bc2) = hp.bias_corrections();
            let powi = |b: f32| 1.0 - black_box(b).powi(black_box(step as i32));
            assert_eq!(bc1.to_bits(), powi(0.9).to_bits(), "β1 step {step}");
            assert_eq!(bc2.to_bits(), powi(0.95).to_bits(), "β2 step {step}");
        }
    }

    /// AdamW that writes the weight's images updates every value, moment
    /// and gradient to the bits of plain AdamW, and leaves the images a
    /// whole write of the new weight gives (every plan has images).
    #[test]
    fn imaged_adamw_updates_like_adamw_and_leaves_the_new_images() {
        use super::super::gemm::{GemmOpts, WeightImage};
        use super::super::isa::{Isa, Precision};
        for isa in Isa::supported_paths() {
            for precision in [Precision::Fp32, Precision::Bf16] {
                let opts = GemmOpts { isa, precision };
                assert!(WeightImage::new(64, 64, opts).is_some(), "{opts:?}: a plan without images");
                imaged_adamw_case(opts);
            }
        }
    }

    fn imaged_adamw_case(opts: super::super::gemm::GemmOpts) {
        use super::super::gemm::WeightImage;
        use super::{adamw_update, adamw_update_imaged, GradIn};
        use crate::compute::AdamWStep;
        let isa = opts.isa;
        let hp = AdamWStep { lr: 3e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1, step: 7 };
        // A second KC block of columns, a partial last row chunk.
        for (oc, c) in [(83, 530), (64, 256), (3, 5)] {
            let n = oc * c;
            let (p, g, m) = (values(n, 11), values(n, 12), values(n, 13));
            let v: Vec<f32> = values(n, 14).iter().map(|x| x.abs()).collect();
            let (mut pw, gw, mut mw, mut vw) = (p.clone(), g.clone(), m.clone(), v.clone());
            adamw_update(isa, &mut pw, GradIn::Keep(&gw), &mut mw, &mut vw, 0.7, hp);
            let img = WeightImage::new(oc, c, opts).expect("a plan with images");
            let mut want_img = vec![0.0; img.buffer_len()];
            img.write(&mut want_img, &pw);
            let (mut pg, gg, mut mg, mut vg) = (p, g, m, v);
            let mut got_img = vec![f32::NAN; img.buffer_len()];
            adamw_update_imaged(isa, &mut pg, &gg, &mut mg, &mut vg, 0.7, hp, img, &mut got_img, c);
            let ctx = format!("{opts:?} oc{oc} c{c}");
            assert_eq!(bits(&pg), bits(&pw), "{ctx} weights");
            assert_eq!(bits(&mg), bits(&mw), "{ctx} m");
            assert_eq!(bits(&vg), bits(&vw), "{ctx} v");
            assert_eq!(bits(&gg), bits(&gw), "{ctx} gradient left as it was");
            assert_eq!(bits(img.nt(&got_img)), bits(img.nt(&want_img)), "{ctx} NT image");
            assert_eq!(bits(img.nn(&got_img)), bits(img.nn(&want_img)), "{ctx} NN image");
        }
    }
}
