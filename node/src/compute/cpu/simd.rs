//! Vector helpers for the CPU backend: dot products, axpy, sums and a fast
//! `exp`, written in 8-lane blocks so the compiler vectorises them, and
//! compiled three times (AVX-512, AVX2 and baseline), chosen by the caller's
//! `Isa`.
//!
//! All variants perform the same operations in the same order (no fused
//! multiply-add contraction), so they give bit-identical results: a node's
//! numbers do not depend on which path its CPU takes.

use super::isa::Isa;

/// Defines `pub fn $name(isa, ...)` that runs `$body` compiled for the given
/// instruction-set path (AVX-512, AVX2 or the baseline target). A path the
/// CPU lacks runs the baseline code.
macro_rules! multiversion {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        pub fn $name(isa: $crate::compute::cpu::isa::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { generic($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? { generic($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            if isa.supported() {
                use $crate::compute::cpu::isa::Isa;
                match isa {
                    // SAFETY: the CPU supports the path (checked just above).
                    Isa::Avx512 | Isa::Avx512Bf16 => return unsafe { avx512($($arg),*) },
                    Isa::Avx2 => return unsafe { avx2($($arg),*) },
                    Isa::Portable => {}
                }
            }
            generic($($arg),*)
        }
    };
}
// The attention tiles are compiled the same way.
pub(super) use multiversion;

const LANES: usize = 8;

mod four;
pub use four::{axpy4, dot4};

#[inline(always)]
fn hsum(acc: [f32; LANES]) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

multiversion! {
    /// Σ a[i]·b[i] over the common length.
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0f32; LANES];
        let mut ca = a.chunks_exact(LANES);
        let mut cb = b.chunks_exact(LANES);
        for (x, y) in (&mut ca).zip(&mut cb) {
            for l in 0..LANES {
                acc[l] += x[l] * y[l];
            }
        }
        let mut s = hsum(acc);
        for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
            s += x * y;
        }
        s
    }
}

multiversion! {
    /// y[i] += alpha·x[i].
    fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
        for (yv, xv) in y.iter_mut().zip(x) {
            *yv += alpha * *xv;
        }
    }
}

multiversion! {
    /// y[i] += x[i].
    fn add_assign(y: &mut [f32], x: &[f32]) {
        for (yv, xv) in y.iter_mut().zip(x) {
            *yv += *xv;
        }
    }
}

multiversion! {
    /// Σ x[i], in 8 interleaved partial sums combined in a fixed order.
    fn sum(x: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        let mut c = x.chunks_exact(LANES);
        for v in &mut c {
            for l in 0..LANES {
                acc[l] += v[l];
            }
        }
        let mut s = hsum(acc);
        for v in c.remainder() {
            s += v;
        }
        s
    }
}

multiversion! {
    /// Σ x[i]², in 8 interleaved partial sums (f64) combined in a fixed order.
    fn sum_squares(x: &[f32]) -> f64 {
        let mut acc = [0f64; LANES];
        let mut c = x.chunks_exact(LANES);
        for v in &mut c {
            for l in 0..LANES {
                acc[l] += (v[l] as f64) * (v[l] as f64);
            }
        }
        let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for v in c.remainder() {
            s += (*v as f64) * (*v as f64);
        }
        s
    }
}

/// e^x for f32, relative error below 5e-7 on [-87, 88]; branch-free so
/// loops over it vectorise. Inputs are clamped to [-88, 88.7]: tiny
/// arguments flush to 0, huge ones give +inf.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-88.0, 88.7);
    // Round to nearest by the 1.5·2^23 trick: branch-free and vectorisable
    // without SSE4.1 (|x·log2 e| < 2^22 after the clamp).
    const ROUND: f32 = 12_582_912.0;
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // 6th-order Taylor/minimax hybrid on |r| <= ln2/2.
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (0.166_666_67 + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    // The biased exponent k + 127 read from the low mantissa bits of
    // k + 127 + 1.5·2^23 (exact: k is a whole number, |k| ≤ 128): integer
    // lanes only, where `k as i32` (saturating, NaN to 0) ran lane by lane.
    let biased = ((k + 127.0 + ROUND).to_bits() as i32 - ROUND.to_bits() as i32).clamp(0, 255);
    p * f32::from_bits((biased as u32) << 23)
}

/// tanh for f32 through `exp`; exact sign, saturates cleanly.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let e = exp(-2.0 * x.abs());
    let t = (1.0 - e) / (1.0 + e);
    t.copysign(x)
}

multiversion! {
    /// out[i] = GELU(x[i]) with the tanh argument clamped to ±`clamp`.
    fn gelu_forward(out: &mut [f32], x: &[f32], clamp: f32) {
        for (o, &x) in out.iter_mut().zip(x) {
            let u = (GELU_SCALE * (x + 0.044715 * x * x * x)).clamp(-clamp, clamp);
            *o = 0.5 * x * (1.0 + tanh(u));
        }
    }
}

multiversion! {
    /// dinp[i] += GELU'(x[i])·dout[i]; the tanh term's derivative is 0 where
    /// its argument was clamped.
    fn gelu_backward(dinp: &mut [f32], x: &[f32], dout: &[f32], clamp: f32, accumulate: bool) {
        for ((di, &x), &d) in dinp.iter_mut().zip(x).zip(dout) {
            let u = GELU_SCALE * (x + 0.044715 * x * x * x);
            let th = tanh(u.clamp(-clamp, clamp));
            let sech2 = if u.abs() < clamp { 1.0 - th * th } else { 0.0 };
            let grad = 0.5 * (1.0 + th) + 0.5 * x * sech2 * GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x);
            *di = if accumulate { *di + grad * d } else { grad * d };
        }
    }
}

multiversion! {
    /// LayerNorm backward's two row sums, Σ w·d and Σ w·d·(x − mu)·rs, in 8
    /// interleaved partial sums each, combined in a fixed order.
    fn ln_backward_sums(x: &[f32], d: &[f32], w: &[f32], mu: f32, rs: f32) -> (f32, f32) {
        let n = x.len().min(d.len()).min(w.len());
        let (x, d, w) = (&x[..n], &d[..n], &w[..n]);
        let (mut a, mut b) = ([0f32; LANES], [0f32; LANES]);
        let split = n - n % LANES;
        for j0 in (0..split).step_by(LANES) {
            for l in 0..LANES {
                let dnorm = w[j0 + l] * d[j0 + l];
                a[l] += dnorm;
                b[l] += dnorm * ((x[j0 + l] - mu) * rs);
            }
        }
        let (mut sa, mut sb) = (hsum(a), hsum(b));
        for j in split..n {
            let dnorm = w[j] * d[j];
            sa += dnorm;
            sb += dnorm * ((x[j] - mu) * rs);
        }
        (sa, sb)
    }
}

multiversion! {
    /// LayerNorm backward's input gradient for one row: di += (w·d −
    /// dnorm_mean − (x − mu)·rs·dnorm_norm_mean)·rs, with `stats` = [mu, rs,
    /// dnorm_mean, dnorm_norm_mean].
    fn ln_backward_row(di: &mut [f32], x: &[f32], d: &[f32], w: &[f32], stats: [f32; 4]) {
        let [mu, rs, dnorm_mean, dnorm_norm_mean] = stats;
        for (((di, x), d), w) in di.iter_mut().zip(x).zip(d).zip(w) {
            let norm = (x - mu) * rs;
            let dnorm = w * d;
            *di += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
    }
}

multiversion! {
    /// One row's share of LayerNorm's parameter gradients: dw += (x − mu)·rs·d,
    /// db += d.
    fn ln_param_grads(dw: &mut [f32], db: &mut [f32], x: &[f32], d: &[f32], mu: f32, rs: f32) {
        for (((dw, db), x), d) in dw.iter_mut().zip(db.iter_mut()).zip(x).zip(d) {
            *dw += (x - mu) * rs * d;
            *db += d;
        }
    }
}

multiversion! {
    /// Σ (x[i] − mu)², in 8 interleaved partial sums combined in a fixed order.
    fn sum_sq_dev(x: &[f32], mu: f32) -> f32 {
        let mut acc = [0f32; LANES];
        let mut c = x.chunks_exact(LANES);
        for v in &mut c {
            for l in 0..LANES {
                let d = v[l] - mu;
                acc[l] += d * d;
            }
        }
        let mut s = hsum(acc);
        for v in c.remainder() {
            s += (v - mu) * (v - mu);
        }
        s
    }
}

multiversion! {
    /// max x[i] (−inf for an empty slice; NaN-free inputs).
    fn max(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; LANES];
        let mut c = x.chunks_exact(LANES);
        for v in &mut c {
            for l in 0..LANES {
                acc[l] = if v[l] > acc[l] { v[l] } else { acc[l] };
            }
        }
        let mut m = acc.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
        for v in c.remainder() {
            m = m.max(*v);
        }
        m
    }
}

multiversion! {
    /// out[i] = e^(x[i] − shift); returns Σ out[i] in 8 partial sums.
    fn exp_shifted_sum(out: &mut [f32], x: &[f32], shift: f32) -> f32 {
        let n = out.len().min(x.len());
        let (out, x) = (&mut out[..n], &x[..n]);
        let mut acc = [0f32; LANES];
        let mut co = out.chunks_exact_mut(LANES);
        let mut cx = x.chunks_exact(LANES);
        for (o, v) in (&mut co).zip(&mut cx) {
            for l in 0..LANES {
                o[l] = exp(v[l] - shift);
                acc[l] += o[l];
            }
        }
        let mut s = hsum(acc);
        for (o, v) in co.into_remainder().iter_mut().zip(cx.remainder()) {
            *o = exp(v - shift);
            s += *o;
        }
        s
    }
}

multiversion! {
    /// x[i] = e^(x[i] − shift); returns Σ x[i] in 8 partial sums.
    fn exp_shifted_in_place(x: &mut [f32], shift: f32) -> f32 {
        let mut acc = [0f32; LANES];
        let mut c = x.chunks_exact_mut(LANES);
        for v in &mut c {
            for l in 0..LANES {
                v[l] = exp(v[l] - shift);
                acc[l] += v[l];
            }
        }
        let mut s = hsum(acc);
        for v in c.into_remainder() {
            *v = exp(*v - shift);
            s += *v;
        }
        s
    }
}

multiversion! {
    /// x[i] *= alpha.
    fn scale(x: &mut [f32], alpha: f32) {
        for v in x.iter_mut() {
            *v *= alpha;
        }
    }
}

/// AdamW on one element; `k` = [grad scale, 1 − β1^t, 1 − β2^t].
#[inline(always)]
fn adamw_one(p: &mut f32, g: f32, m: &mut f32, v: &mut f32, k: [f32; 3], hp: &crate::compute::AdamWStep) {
    let [grad_scale, bc1, bc2] = k;
    let gi = g * grad_scale;
    *m = hp.beta1 * *m + (1.0 - hp.beta1) * gi;
    *v = hp.beta2 * *v + (1.0 - hp.beta2) * gi * gi;
    let mhat = *m / bc1;
    let vhat = *v / bc2;
    *p -= hp.lr * (mhat / (vhat.sqrt() + hp.eps) + hp.weight_decay * *p);
}

multiversion! {
    /// AdamW on one chunk; `k` = [grad scale, 1 − β1^t, 1 − β2^t].
    fn adamw(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: [f32; 3], hp: crate::compute::AdamWStep) {
        let n = p.len().min(g.len()).min(m.len()).min(v.len());
        let (p, g, m, v) = (&mut p[..n], &g[..n], &mut m[..n], &mut v[..n]);
        for i in 0..n {
            adamw_one(&mut p[i], g[i], &mut m[i], &mut v[i], k, &hp);
        }
    }
}

multiversion! {
    /// [`adamw`], then the gradient zeroed in the same pass.
    fn adamw_zero_grad(p: &mut [f32], g: &mut [f32], m: &mut [f32], v: &mut [f32], k: [f32; 3], hp: crate::compute::AdamWStep) {
        let n = p.len().min(g.len()).min(m.len()).min(v.len());
        let (p, g, m, v) = (&mut p[..n], &mut g[..n], &mut m[..n], &mut v[..n]);
        for i in 0..n {
            adamw_one(&mut p[i], g[i], &mut m[i], &mut v[i], k, &hp);
            g[i] = 0.0;
        }
    }
}

const GELU_SCALE: f32 = 0.797_884_6; // sqrt(2/pi)

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_tanh_are_accurate() {
        let mut x = -80.0f32;
        while x < 80.0 {
            let (e, w) = (exp(x) as f64, (x as f64).exp());
            assert!(((e - w) / w).abs() < 5e-7, "exp({x}) = {e}, want {w}");
            let (t, tw) = (tanh(x) as f64, (x as f64).tanh());
            assert!((t - tw).abs() < 3e-7, "tanh({x}) = {t}, want {tw}");
            x += 0.0137;
        }
        assert_eq!(exp(-1000.0), 0.0);
        assert_eq!(tanh(1e30), 1.0);
        assert_eq!(tanh(-1e30), -1.0);
    }

    #[test]
    fn dot4_and_axpy4_give_the_bits_of_four_calls() {
        let v = |seed: usize, n: usize| -> Vec<f32> {
            (0..n).map(|i| (((i * 7919 + seed * 104729) % 2003) as f32 / 1001.0 - 1.0) * 1.37).collect()
        };
        let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for isa in Isa::supported_paths() {
            for n in [1, 7, 8, 13, 64, 67] {
                let a = v(1, n);
                let bs: Vec<Vec<f32>> = (2..6).map(|s| v(s, n + 3)).collect();
                let b = [&bs[0][..], &bs[1][..], &bs[2][..], &bs[3][..]];
                let want: Vec<f32> = b.iter().map(|bi| dot(isa, &a, bi)).collect();
                assert_eq!(bits(&dot4(isa, &a, b)), bits(&want), "{isa} dot4 n{n}");
                let alpha = [0.31, -1.7, 2.3e-3, 0.9];
                let (mut y1, mut y4) = (v(9, n), v(9, n));
                for (al, bi) in alpha.iter().zip(b) {
                    axpy(isa, &mut y1, *al, bi);
                }
                axpy4(isa, &mut y4, alpha, b);
                assert_eq!(bits(&y4), bits(&y1), "{isa} axpy4 n{n}");
            }
        }
    }

    #[test]
    fn reductions_match_f64() {
        let v: Vec<f32> = (0..1003).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
        let w: f64 = v.iter().map(|x| *x as f64).sum();
        let d: f64 = v.iter().map(|x| (*x as f64) * (*x as f64)).sum();
        for isa in Isa::supported_paths() {
            assert!((sum(isa, &v) as f64 - w).abs() < 1e-3);
            assert!((dot(isa, &v, &v) as f64 - d).abs() < 1e-3);
            assert!((sum_squares(isa, &v) - d).abs() < 1e-9);
        }
    }

    #[test]
    fn every_path_gives_the_same_bits() {
        let v: Vec<f32> = (0..1003).map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0).collect();
        let d: Vec<f32> = (0..1003).map(|i| ((i * 11) % 31) as f32 / 15.0 - 1.0).collect();
        let run = |isa: Isa| {
            let mut g = vec![0f32; v.len()];
            gelu_forward(isa, &mut g, &v, 10.0);
            let mut gb = vec![0.5f32; v.len()];
            gelu_backward(isa, &mut gb, &v, &d, 10.0, true);
            let mut y = d.clone();
            axpy(isa, &mut y, 0.3, &v);
            // LayerNorm backward's pieces (w: the gradient's values again).
            let sums = ln_backward_sums(isa, &v, &d, &g, 0.1, 1.3);
            let mut di = d.clone();
            ln_backward_row(isa, &mut di, &v, &d, &g, [0.1, 1.3, sums.0, sums.1]);
            let (mut dw, mut db) = (g.clone(), d.clone());
            ln_param_grads(isa, &mut dw, &mut db, &v, &d, 0.1, 1.3);
            (sum(isa, &v), dot(isa, &v, &d), sum_squares(isa, &v), g, gb, y, (sums, di, dw, db))
        };
        let want = run(Isa::Portable);
        for isa in Isa::supported_paths() {
            assert_eq!(run(isa), want, "{isa}");
        }
    }
}
