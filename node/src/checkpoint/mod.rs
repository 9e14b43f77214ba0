//! Model files: murmur's own checkpoints (parameters, optimizer state and
//! training position, checksummed) and Hugging Face GPT-2 safetensors.

pub mod native;
pub mod safetensors;

pub use native::{Checkpoint, CheckpointError, CheckpointMeta};
