//! Vector helpers for the CPU backend: dot products, axpy, sums and a fast
//! `exp`, written in 8-lane blocks so the compiler vectorises them, and
//! compiled twice (AVX2 and baseline) with a runtime switch.
//!
//! Both variants perform the same operations in the same order (no fused
//! multiply-add contraction), so they give bit-identical results: a node's
//! numbers do not depend on which path its CPU takes.

use std::sync::OnceLock;

/// Whether this CPU has AVX2 and FMA (checked once).
pub fn has_avx2_fma() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Defines `pub fn $name` that runs `$body` compiled for AVX2 when the CPU has
/// it and for the baseline target otherwise.
macro_rules! multiversion {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { generic($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            if has_avx2_fma() {
                // SAFETY: the CPU supports AVX2 (checked at run time).
                return unsafe { avx2($($arg),*) };
            }
            generic($($arg),*)
        }
    };
}

const LANES: usize = 8;

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
    let bits = ((k as i32 + 127).clamp(0, 255) as u32) << 23;
    p * f32::from_bits(bits)
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
    fn gelu_backward(dinp: &mut [f32], x: &[f32], dout: &[f32], clamp: f32) {
        for ((di, &x), &d) in dinp.iter_mut().zip(x).zip(dout) {
            let u = GELU_SCALE * (x + 0.044715 * x * x * x);
            let th = tanh(u.clamp(-clamp, clamp));
            let sech2 = if u.abs() < clamp { 1.0 - th * th } else { 0.0 };
            let grad = 0.5 * (1.0 + th) + 0.5 * x * sech2 * GELU_SCALE * (1.0 + 3.0 * 0.044715 * x * x);
            *di += grad * d;
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
    fn reductions_match_f64() {
        let v: Vec<f32> = (0..1003).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
        let w: f64 = v.iter().map(|x| *x as f64).sum();
        assert!((sum(&v) as f64 - w).abs() < 1e-3);
        let d: f64 = v.iter().map(|x| (*x as f64) * (*x as f64)).sum();
        assert!((dot(&v, &v) as f64 - d).abs() < 1e-3);
        assert!((sum_squares(&v) - d).abs() < 1e-9);
    }
}
