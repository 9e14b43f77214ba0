//! Model files: murmur's own checkpoints (parameters, optimizer state and
//! training position, checksummed), Hugging Face safetensors (GPT-2 and
//! Llama), and a run's state exported as a model directory.

mod hf_llama;
pub mod native;
pub mod run_export;
pub mod safetensors;

pub use native::{Checkpoint, CheckpointError, CheckpointMeta};
