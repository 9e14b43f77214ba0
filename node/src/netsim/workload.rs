//! What the simulated nodes train in `murmur netsim`: either a linear
//! regression that really trains (each node runs H steps of SGD on its own
//! seeded samples; the validation loss is the mean squared error on a
//! held-out set), or deltas drawn from a seeded normal distribution for
//! traffic-only runs at a million parameters and more.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The regression task: y = x·w* + noise, x uniform per coordinate with
/// variance 1/P.
#[derive(Debug, Clone)]
pub struct LinearTask {
    pub dim: usize,
    pub inner_steps: usize,
    pub batch: usize,
    pub lr: f32,
    target: Vec<f32>,
    val: Vec<(Vec<f32>, f32)>,
    seed: u64,
}

const NOISE: f32 = 0.01;

fn sample(rng: &mut SmallRng, target: &[f32]) -> (Vec<f32>, f32) {
    let half_width = (3.0 / target.len() as f32).sqrt();
    let x: Vec<f32> = (0..target.len()).map(|_| rng.gen_range(-half_width..half_width)).collect();
    let y = x.iter().zip(target).map(|(a, b)| a * b).sum::<f32>() + NOISE * normal(rng);
    (x, y)
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
        let val = (0..256).map(|_| sample(&mut rng, &target)).collect();
        Self { dim, inner_steps, batch, lr, target, val, seed }
    }

    /// H steps of SGD from `params` on node `node`'s samples of `round`;
    /// returns the pseudo-gradient (start − end) and the mean training loss.
    pub fn train(&self, params: &[f32], node: usize, round: u64) -> (Vec<f32>, f32) {
        let mut rng =
            SmallRng::seed_from_u64(self.seed ^ (round << 24) ^ (node as u64).wrapping_mul(0x9e37_79b9));
        let mut w = params.to_vec();
        let mut grad = vec![0f32; self.dim];
        let mut loss = 0f64;
        for _ in 0..self.inner_steps {
            grad.iter_mut().for_each(|g| *g = 0.0);
            for _ in 0..self.batch {
                let (x, y) = sample(&mut rng, &self.target);
                let err = x.iter().zip(&w).map(|(a, b)| a * b).sum::<f32>() - y;
                loss += f64::from(err * err);
                for (g, a) in grad.iter_mut().zip(&x) {
                    *g += 2.0 * err * a / self.batch as f32;
                }
            }
            for (p, g) in w.iter_mut().zip(&grad) {
                *p -= self.lr * g;
            }
        }
        let delta = params.iter().zip(&w).map(|(a, b)| a - b).collect();
        (delta, (loss / (self.inner_steps * self.batch) as f64) as f32)
    }

    /// Mean squared error on the held-out set.
    pub fn val_loss(&self, params: &[f32]) -> f64 {
        let total: f64 = self
            .val
            .iter()
            .map(|(x, y)| {
                let e = x.iter().zip(params).map(|(a, b)| a * b).sum::<f32>() - y;
                f64::from(e * e)
            })
            .sum();
        total / self.val.len() as f64
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
}
