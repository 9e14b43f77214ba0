//! Learning-rate schedule: linear warmup, then cosine decay to a floor.

use serde::{Deserialize, Serialize};

/// Warmup + cosine schedule over `total` steps (steps count from 1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrSchedule {
    pub max_lr: f32,
    /// Final learning rate as a fraction of `max_lr`.
    pub min_lr_frac: f32,
    pub warmup: usize,
    pub total: usize,
}

impl LrSchedule {
    pub fn lr(&self, step: usize) -> f32 {
        let step = step.max(1);
        if step <= self.warmup {
            return self.max_lr * step as f32 / self.warmup as f32;
        }
        let min_lr = self.max_lr * self.min_lr_frac;
        let span = self.total.saturating_sub(self.warmup).max(1);
        let progress = ((step - self.warmup) as f32 / span as f32).min(1.0);
        let cos = 0.5 * (1.0 + (std::f32::consts::PI * progress).cos());
        min_lr + (self.max_lr - min_lr) * cos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine_to_floor() {
        let s = LrSchedule { max_lr: 1.0, min_lr_frac: 0.1, warmup: 10, total: 110 };
        assert!((s.lr(1) - 0.1).abs() < 1e-6);
        assert!((s.lr(10) - 1.0).abs() < 1e-6);
        assert!((s.lr(60) - 0.55).abs() < 1e-5);
        assert!((s.lr(110) - 0.1).abs() < 1e-6);
        assert!((s.lr(500) - 0.1).abs() < 1e-6);
        assert!(s.lr(30) > s.lr(31));
    }
}
