//! Model files: murmur's own checkpoints (parameters, optimizer state and
//! training position, checksummed), Hugging Face GPT-2 safetensors, and a
//! run's state exported as a model directory.

pub mod native;
pub mod run_export;
pub mod safetensors;

pub use native::{Checkpoint, CheckpointError, CheckpointMeta};
