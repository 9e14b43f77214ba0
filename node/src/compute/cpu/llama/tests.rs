//! The Llama kernels against f64 oracles on every instruction-set path:
//! forwards against the oracle's values, backwards against central finite
//! differences of the oracle (the gradient of Σ dout·f), and every path's
//! bits against the portable path's.

use super::*;

fn values(len: usize, seed: u64, amp: f32) -> Vec<f32> {
    let mut rng = crate::model::rng::Rng::new(seed);
    (0..len).map(|_| (rng.next_f64() as f32 * 2.0 - 1.0) * amp).collect()
}

fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|v| *v as f64).collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = *g as f64;
        assert!((g - w).abs() <= atol + rtol * w.abs(), "{what}[{i}]: {g} vs {w}");
    }
}

/// The paths to check: the one `MURMUR_CPU_ISA` forces, else every path
/// this CPU runs.
fn paths() -> Vec<Isa> {
    match Isa::is_forced() {
        true => vec![Isa::from_env().expect("MURMUR_CPU_ISA names a path this CPU runs")],
        false => Isa::supported_paths(),
    }
}

/// d/dx of `loss` at every coordinate of `x`, by central differences.
fn numeric_grad(x: &[f64], loss: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let h = 1e-6;
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let orig = x[i];
            x[i] = orig + h;
            let lp = loss(&x);
            x[i] = orig - h;
            let lm = loss(&x);
            x[i] = orig;
            (lp - lm) / (2.0 * h)
        })
        .collect()
}

fn dot(a: &[f64], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * *b as f64).sum()
}

// ---- oracles ----

fn rmsnorm_oracle(x: &[f64], w: &[f64], c: usize) -> Vec<f64> {
    x.chunks(c)
        .flat_map(|r| {
            let ms = r.iter().map(|v| v * v).sum::<f64>() / c as f64;
            let rs = 1.0 / (ms + RMS_EPS as f64).sqrt();
            r.iter().zip(w).map(move |(x, w)| x * rs * w)
        })
        .collect()
}

fn rope_oracle(qkv: &[f64], s: AttentionShape, theta: f64) -> Vec<f64> {
    let (hs, w) = (s.head_size(), s.qkv_width());
    let half = hs / 2;
    let mut out = qkv.to_vec();
    for row in 0..s.b * s.t {
        let pos = (row % s.t) as f64;
        for head in 0..s.nh + s.nkv {
            let at = row * w + head * hs;
            for i in 0..half {
                let angle = pos * theta.powf(-(2.0 * i as f64) / hs as f64);
                let (x0, x1) = (qkv[at + i], qkv[at + i + half]);
                out[at + i] = x0 * angle.cos() - x1 * angle.sin();
                out[at + i + half] = x1 * angle.cos() + x0 * angle.sin();
            }
        }
    }
    out
}

fn swiglu_oracle(inp: &[f64], h: usize) -> Vec<f64> {
    inp.chunks(2 * h).flat_map(|r| (0..h).map(move |j| r[j] / (1.0 + (-r[j]).exp()) * r[h + j])).collect()
}

// ---- RMSNorm ----

#[test]
fn rmsnorm_matches_its_f64_oracle_and_finite_differences_on_every_path() {
    for (n, c) in [(5, 24), (3, 67), (1, 1)] {
        let x = values(n * c, 1 + c as u64, 2.0);
        let w = values(c, 2 + c as u64, 1.5);
        let dout = values(n * c, 3 + c as u64, 1.0);
        let want = rmsnorm_oracle(&f64s(&x), &f64s(&w), c);
        let (x64, w64) = (f64s(&x), f64s(&w));
        let want_dx = numeric_grad(&x64, |x| dot(&rmsnorm_oracle(x, &w64, c), &dout));
        let want_dw = numeric_grad(&w64, |w| dot(&rmsnorm_oracle(&x64, w, c), &dout));
        for isa in paths() {
            let what = format!("{isa} n{n} c{c}");
            let (mut out, mut rstd) = (vec![0.0; n * c], vec![0.0; n]);
            rmsnorm_forward(isa, &mut out, &mut rstd, &x, &w, n, c);
            assert_close(&format!("{what} out"), &out, &want, 1e-6, 1e-5);
            // accumulated onto a start value, weight gradient too
            let (dx0, dw0) = (values(n * c, 4, 0.1), values(c, 5, 0.1));
            let (mut dx, mut dw) = (dx0.clone(), dw0.clone());
            rmsnorm_backward(isa, true, &mut dx, &mut dw, &dout, &x, &w, &rstd, n, c);
            let dx: Vec<f32> = dx.iter().zip(&dx0).map(|(a, b)| a - b).collect();
            let dw: Vec<f32> = dw.iter().zip(&dw0).map(|(a, b)| a - b).collect();
            assert_close(&format!("{what} dinp"), &dx, &want_dx, 1e-4, 1e-4);
            assert_close(&format!("{what} dweight"), &dw, &want_dw, 1e-4, 1e-4);
        }
    }
}

// ---- RoPE ----

#[test]
fn rope_matches_its_f64_oracle_and_its_backward_is_the_transpose_on_every_path() {
    let shapes = [
        AttentionShape { b: 2, t: 7, c: 16, nh: 2, nkv: 2 },
        AttentionShape { b: 1, t: 33, c: 64, nh: 4, nkv: 1 },
        AttentionShape { b: 2, t: 5, c: 24, nh: 6, nkv: 3 },
    ];
    for (k, s) in shapes.into_iter().enumerate() {
        let len = s.b * s.t * s.qkv_width();
        let theta = [10_000.0, 500_000.0, 100.0][k];
        let qkv = values(len, 10 + k as u64, 2.0);
        let dout = values(len, 20 + k as u64, 1.0);
        let want = rope_oracle(&f64s(&qkv), s, theta as f64);
        let want_d = numeric_grad(&f64s(&qkv), |x| dot(&rope_oracle(x, s, theta as f64), &dout));
        for isa in paths() {
            let what = format!("{isa} {s:?}");
            let mut got = qkv.clone();
            rope(isa, false, &mut got, s, theta);
            assert_close(&format!("{what} forward"), &got, &want, 1e-6, 1e-5);
            // the v heads are left as they were
            let (w, v0) = (s.qkv_width(), (s.nh + s.nkv) * s.head_size());
            for row in 0..s.b * s.t {
                assert_eq!(&got[row * w + v0..(row + 1) * w], &qkv[row * w + v0..(row + 1) * w], "{what} v");
            }
            let mut d = dout.clone();
            rope(isa, true, &mut d, s, theta);
            assert_close(&format!("{what} backward"), &d, &want_d, 1e-5, 1e-4);
        }
    }
}

// ---- SwiGLU ----

#[test]
fn swiglu_matches_its_f64_oracle_and_finite_differences_on_every_path() {
    for (n, h) in [(4, 19), (2, 64), (1, 1)] {
        // Gates past ±20 too: σ saturates without overflow.
        let mut inp = values(n * 2 * h, 30 + h as u64, 4.0);
        inp[0] = 30.0;
        inp[n * 2 * h - 1 - h] = -30.0;
        let dout = values(n * h, 31 + h as u64, 1.0);
        let want = swiglu_oracle(&f64s(&inp), h);
        let want_d = numeric_grad(&f64s(&inp), |x| dot(&swiglu_oracle(x, h), &dout));
        for isa in paths() {
            let what = format!("{isa} n{n} h{h}");
            let mut out = vec![0.0; n * h];
            swiglu_forward(isa, &mut out, &inp, n, h);
            assert_close(&format!("{what} out"), &out, &want, 1e-6, 1e-5);
            let mut fresh = vec![f32::NAN; n * 2 * h];
            swiglu_backward(isa, false, &mut fresh, &inp, &dout, n, h);
            assert_close(&format!("{what} dinp"), &fresh, &want_d, 1e-5, 1e-4);
            // accumulating onto zeros gives the written bits
            let mut acc = vec![0.0; n * 2 * h];
            swiglu_backward(isa, true, &mut acc, &inp, &dout, n, h);
            assert_eq!(acc, fresh, "{what}: accumulate onto zeros");
        }
    }
}

/// Every path gives the portable path's bits for every Llama kernel.
#[test]
fn llama_kernels_give_the_same_bits_on_every_path() {
    let s = AttentionShape { b: 2, t: 21, c: 64, nh: 4, nkv: 2 };
    let (n, c, h) = (s.b * s.t, s.c, 88);
    let run = |isa: Isa| {
        let x = values(n * c, 40, 2.0);
        let w = values(c, 41, 1.0);
        let d = values(n * c, 42, 1.0);
        let (mut out, mut rstd, mut dx, mut dw) =
            (vec![0.0; n * c], vec![0.0; n], vec![0.0; n * c], vec![0.0; c]);
        rmsnorm_forward(isa, &mut out, &mut rstd, &x, &w, n, c);
        rmsnorm_backward(isa, false, &mut dx, &mut dw, &d, &x, &w, &rstd, n, c);
        let mut qkv = values(n * s.qkv_width(), 43, 2.0);
        rope(isa, false, &mut qkv, s, 10_000.0);
        let mut dqkv = values(n * s.qkv_width(), 44, 1.0);
        rope(isa, true, &mut dqkv, s, 10_000.0);
        let inp = values(n * 2 * h, 45, 3.0);
        let (mut act, mut dinp) = (vec![0.0; n * h], vec![0.0; n * 2 * h]);
        swiglu_forward(isa, &mut act, &inp, n, h);
        swiglu_backward(isa, false, &mut dinp, &inp, &values(n * h, 46, 1.0), n, h);
        [out, rstd, dx, dw, qkv, dqkv, act, dinp].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
    };
    let want = run(Isa::Portable);
    for isa in paths() {
        assert!(run(isa) == want, "{isa} differs from portable");
    }
}
