//! murmur-node: the library behind the `murmur` binary.
//!
//! - `compute`: the Backend trait and its implementations (CPU; GPU via wgpu).
//! - `data`: tokenizers, corpora (text, llm.c shards, synthetic), batching.
//! - `model`: the GPT model, explicit forward and backward over a Backend.
//! - `train`: optimizer schedule, the single-machine training loop, checkpoints.
//! - `sim`: the in-process DiLoCo / data-parallel simulator and codec benchmark.

pub mod checkpoint;
pub mod cli;
pub mod compute;
pub mod data;
pub mod model;
pub mod sim;
pub mod train;
