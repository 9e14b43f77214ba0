//! Training: the learning-rate schedule, the single-machine training loop
//! with checkpoints, and throughput benchmarks.

pub mod bench;
pub mod handoff;
pub mod schedule;
pub mod trainer;

pub use trainer::{train, OptimizerConfig, TrainConfig, TrainError, TrainEvent, TrainSummary};
