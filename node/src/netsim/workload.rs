//! What the simulated nodes train in `murmur netsim`: either a linear
//! regression that really trains (each node runs H steps of SGD on its own
//! seeded samples; the validation loss is the mean squared error on a
//! held-out set), or deltas drawn from a seeded normal distribution for
//! traffic-only runs at a million parameters and more.
//!
//! A sample's inputs are a hash of (sample key, coordinate), so they are
//! generated in parallel, chunk by chunk, and never stored: a step of 16
//! samples over a million weights costs two passes of hashing, not 64 MB of
//! inputs. Sums run per chunk and are combined in chunk order, so a run's
//! results do not depend on the number of threads.

use crate::data::rng::mix64;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// The regression task: y = x·w* + noise, x uniform per coordinate with
/// variance 1/P.
#[derive(Debug, Clone)]
pub struct LinearTask {
    pub dim: usize,
    pub inner_steps: usize,
    pub batch: usize,
    pub lr: f32,
    target: Vec<f32>,
    /// Labels of the held-out samples (their inputs are regenerated).
    val_labels: Vec<f32>,
    seed: u64,
}

const NOISE: f32 = 0.01;
/// Held-out samples.
const VAL_SAMPLES: u64 = 256;
/// Coordinates per unit of parallel work.
const CHUNK: usize = 16_384;
/// Lanes of a partial sum (f32 adds the compiler can vectorise).
const LANES: usize = 8;

/// murmur3's 32-bit finaliser.
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// One sample's inputs: coordinate j is uniform on (−h, h), h = √(3/P), a
/// hash of the sample's key and j.
#[derive(Debug, Clone, Copy)]
struct SampleInputs {
    key: u32,
    scale: f32,
    offset: f32,
}

impl SampleInputs {
    fn new(key: u64, dim: usize) -> Self {
        let half_width = (3.0 / dim as f32).sqrt();
        let mixed = mix64(key);
        Self {
            key: (mixed ^ (mixed >> 32)) as u32,
            scale: 2.0 * half_width / (1u32 << 24) as f32,
            offset: half_width,
        }
    }

    #[inline(always)]
    fn at(&self, j: u32) -> f32 {
        let h = fmix32(j.wrapping_mul(0x9e37_79b9).wrapping_add(self.key));
        (h >> 8) as f32 * self.scale - self.offset
    }

    /// Coordinates `start..start + LANES`.
    #[inline(always)]
    fn block(&self, start: u32) -> [f32; LANES] {
        let mut x = [0f32; LANES];
        for (l, v) in x.iter_mut().enumerate() {
            *v = self.at(start.wrapping_add(l as u32));
        }
        x
    }

    /// Σ x_j·a_j and Σ x_j·b_j over the coordinates `start..start + a.len()`.
    fn dots(&self, start: usize, a: &[f32], b: &[f32]) -> (f64, f64) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { self.dots_avx2(start, a, b) };
        }
        self.dots_portable(start, a, b)
    }

    /// `dots_portable` in AVX2 registers: the same operations in the same
    /// order, lane by lane (no fused multiply-add), so the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn dots_avx2(&self, start: usize, a: &[f32], b: &[f32]) -> (f64, f64) {
        use std::arch::x86_64::*;
        let blocks = a.len() / LANES;
        let (mut sa, mut sb) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for k in 0..blocks {
            let x = self.block_avx2((start + k * LANES) as u32);
            let ca = _mm256_loadu_ps(a[k * LANES..].as_ptr());
            let cb = _mm256_loadu_ps(b[k * LANES..].as_ptr());
            sa = _mm256_add_ps(sa, _mm256_mul_ps(x, ca));
            sb = _mm256_add_ps(sb, _mm256_mul_ps(x, cb));
        }
        let (mut la, mut lb) = ([0f32; LANES], [0f32; LANES]);
        _mm256_storeu_ps(la.as_mut_ptr(), sa);
        _mm256_storeu_ps(lb.as_mut_ptr(), sb);
        self.finish_dots(start, blocks * LANES, a, b, la, lb)
    }

    fn dots_portable(&self, start: usize, a: &[f32], b: &[f32]) -> (f64, f64) {
        let (mut sa, mut sb) = ([0f32; LANES], [0f32; LANES]);
        let blocks = a.len() / LANES;
        for k in 0..blocks {
            let x = self.block((start + k * LANES) as u32);
            for l in 0..LANES {
                sa[l] += x[l] * a[k * LANES + l];
                sb[l] += x[l] * b[k * LANES + l];
            }
        }
        self.finish_dots(start, blocks * LANES, a, b, sa, sb)
    }

    /// The coordinates from `head` on (fewer than a block) into lane 0, then
    /// the lanes summed in f64 in lane order.
    fn finish_dots(
        &self,
        start: usize,
        head: usize,
        a: &[f32],
        b: &[f32],
        mut sa: [f32; LANES],
        mut sb: [f32; LANES],
    ) -> (f64, f64) {
        for j in head..a.len() {
            let x = self.at((start + j) as u32);
            sa[0] += x * a[j];
            sb[0] += x * b[j];
        }
        let sum = |s: [f32; LANES]| s.iter().fold(0f64, |acc, &v| acc + f64::from(v));
        (sum(sa), sum(sb))
    }

    /// p_j −= coeff · x_j over the coordinates `start..start + p.len()`.
    fn step(&self, start: usize, coeff: f32, p: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above).
            return unsafe { self.step_avx2(start, coeff, p) };
        }
        self.step_portable(start, coeff, p)
    }

    /// `step_portable` in AVX2 registers (the same bits, as `dots_avx2`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn step_avx2(&self, start: usize, coeff: f32, p: &mut [f32]) {
        use std::arch::x86_64::*;
        let blocks = p.len() / LANES;
        let c = _mm256_set1_ps(coeff);
        for k in 0..blocks {
            let x = self.block_avx2((start + k * LANES) as u32);
            let at = p[k * LANES..].as_mut_ptr();
            _mm256_storeu_ps(at, _mm256_sub_ps(_mm256_loadu_ps(at), _mm256_mul_ps(c, x)));
        }
        self.finish_step(start, blocks * LANES, coeff, p);
    }

    /// `block` in AVX2 registers: the same integer hash and the same f32
    /// multiply and subtract, lane by lane.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn block_avx2(&self, start: u32) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let j = _mm256_add_epi32(_mm256_set1_epi32(start as i32), lanes);
        let mut h = _mm256_add_epi32(
            _mm256_mullo_epi32(j, _mm256_set1_epi32(0x9e37_79b9_u32 as i32)),
            _mm256_set1_epi32(self.key as i32),
        );
        h = _mm256_xor_si256(h, _mm256_srli_epi32::<16>(h));
        h = _mm256_mullo_epi32(h, _mm256_set1_epi32(0x85eb_ca6b_u32 as i32));
        h = _mm256_xor_si256(h, _mm256_srli_epi32::<13>(h));
        h = _mm256_mullo_epi32(h, _mm256_set1_epi32(0xc2b2_ae35_u32 as i32));
        h = _mm256_xor_si256(h, _mm256_srli_epi32::<16>(h));
        let f = _mm256_cvtepi32_ps(_mm256_srli_epi32::<8>(h));
        _mm256_sub_ps(_mm256_mul_ps(f, _mm256_set1_ps(self.scale)), _mm256_set1_ps(self.offset))
    }

    fn step_portable(&self, start: usize, coeff: f32, p: &mut [f32]) {
        let blocks = p.len() / LANES;
        for k in 0..blocks {
            let x = self.block((start + k * LANES) as u32);
            for l in 0..LANES {
                p[k * LANES + l] -= coeff * x[l];
            }
        }
        self.finish_step(start, blocks * LANES, coeff, p);
    }

    /// The coordinates from `head` on (fewer than a block).
    fn finish_step(&self, start: usize, head: usize, coeff: f32, p: &mut [f32]) {
        for (j, v) in p.iter_mut().enumerate().skip(head) {
            *v -= coeff * self.at((start + j) as u32);
        }
    }
}

/// Σ over chunks of `dots`, combined in chunk order.
fn dots(inputs: &SampleInputs, a: &[f32], b: &[f32]) -> (f64, f64) {
    let parts: Vec<(f64, f64)> = a
        .par_chunks(CHUNK)
        .zip(b.par_chunks(CHUNK))
        .enumerate()
        .map(|(c, (ca, cb))| inputs.dots(c * CHUNK, ca, cb))
        .collect();
    parts.into_iter().fold((0.0, 0.0), |(x, y), (a, b)| (x + a, y + b))
}

/// A standard normal draw (Box–Muller).
pub fn normal(rng: &mut SmallRng) -> f32 {
    let u: f32 = rng.gen_range(1e-7f32..1.0);
    let v: f32 = rng.gen();
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

impl LinearTask {
    pub fn new(dim: usize, inner_steps: usize, batch: usize, lr: f32, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let target: Vec<f32> = (0..dim).map(|_| normal(&mut rng)).collect();
        let mut task = Self { dim, inner_steps, batch, lr, target, val_labels: Vec::new(), seed };
        task.val_labels = (0..VAL_SAMPLES)
            .map(|i| {
                let inputs = task.val_inputs(i);
                dots(&inputs, &task.target, &task.target).0 as f32 + NOISE * normal(&mut rng)
            })
            .collect();
        task
    }

    fn val_inputs(&self, i: u64) -> SampleInputs {
        SampleInputs::new(mix64(self.seed ^ 0x76a1_0000_0000_0000) ^ i, self.dim)
    }

    /// H steps of SGD from `params` on node `node`'s samples of `round`;
    /// returns the pseudo-gradient (start − end) and the mean training loss.
    pub fn train(&self, params: &[f32], node: usize, round: u64) -> (Vec<f32>, f32) {
        let stream = mix64(self.seed ^ (round << 24) ^ (node as u64).wrapping_mul(0x9e37_79b9));
        let mut noise = SmallRng::seed_from_u64(stream);
        let mut w = params.to_vec();
        let mut loss = 0f64;
        let b = self.batch;
        for step in 0..self.inner_steps {
            let inputs: Vec<SampleInputs> = (0..b)
                .map(|k| SampleInputs::new(stream ^ mix64(((step * b + k) as u64) + 1), self.dim))
                .collect();
            // Each sample's error from the weights at the step's start.
            let coeffs: Vec<f32> = inputs
                .iter()
                .map(|x| {
                    let (xw, xt) = dots(x, &w, &self.target);
                    let err = (xw - xt) as f32 - NOISE * normal(&mut noise);
                    loss += f64::from(err * err);
                    self.lr * 2.0 * err / b as f32
                })
                .collect();
            // w ← w − lr · (2/B) Σ_b err_b · x_b, the inputs regenerated.
            w.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
                for (x, &coeff) in inputs.iter().zip(&coeffs) {
                    x.step(c * CHUNK, coeff, chunk);
                }
            });
        }
        let delta = params.iter().zip(&w).map(|(a, b)| a - b).collect();
        (delta, (loss / (self.inner_steps * self.batch) as f64) as f32)
    }

    /// Mean squared error on the held-out set.
    pub fn val_loss(&self, params: &[f32]) -> f64 {
        let total: f64 = (0..VAL_SAMPLES)
            .zip(&self.val_labels)
            .map(|(i, &y)| {
                let e = dots(&self.val_inputs(i), params, params).0 as f32 - y;
                f64::from(e * e)
            })
            .sum();
        total / VAL_SAMPLES as f64
    }
}

/// A drawn delta: `n` values ~ N(0, σ²), seeded by (seed, node, round).
pub fn drawn_delta(n: usize, sigma: f32, seed: u64, node: usize, round: u64) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed ^ (round << 32) ^ (node as u64).wrapping_mul(0x2545_f491));
    (0..n).map(|_| normal(&mut rng) * sigma).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgd_on_the_task_lowers_the_validation_loss() {
        let task = LinearTask::new(256, 20, 16, 0.5, 7);
        let mut w = vec![0f32; 256];
        let before = task.val_loss(&w);
        for r in 0..5 {
            let (d, _) = task.train(&w, 0, r);
            w.iter_mut().zip(&d).for_each(|(p, d)| *p -= d);
        }
        assert!(task.val_loss(&w) < 0.7 * before, "{} → {}", before, task.val_loss(&w));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_inputs_give_the_portable_bits() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: only the portable path runs");
            return;
        }
        let inputs = SampleInputs::new(42, 1000);
        for len in [1, 7, 8, 9, 100, 1003] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let portable = inputs.dots_portable(5, &a, &b);
            // SAFETY: the CPU has AVX2 (checked above).
            let avx2 = unsafe { inputs.dots_avx2(5, &a, &b) };
            assert_eq!(
                (portable.0.to_bits(), portable.1.to_bits()),
                (avx2.0.to_bits(), avx2.1.to_bits()),
                "{len}"
            );
            let (mut p, mut q) = (a.clone(), a.clone());
            inputs.step_portable(5, 0.3, &mut p);
            // SAFETY: as above.
            unsafe { inputs.step_avx2(5, 0.3, &mut q) };
            assert!(p.iter().zip(&q).all(|(x, y)| x.to_bits() == y.to_bits()), "{len}");
            assert!(p.iter().zip(&a).all(|(x, y)| x != y), "the step moves every coordinate");
        }
    }
}
