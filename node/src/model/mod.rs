//! The decoder models (llm.c's train_gpt2.c's GPT-2, and Llama): shapes and
//! presets, parameter layout and initialisation, and forward/backward over a
//! compute backend.

pub mod config;
pub mod gpt;
pub mod params;
pub mod rng;
pub mod sample;

pub use config::{Architecture, ConfigError, LlamaShape, ModelConfig, PRESETS};
pub use gpt::{check_fits, Gpt, MemoryNeed, StepStats};
pub use params::{init_params, param_specs, split_params, ParamSpec};

/// A model whose architecture the chosen backend cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{backend} cannot run this {arch} model: {}", crate::compute::NO_LLAMA_OPS)]
pub struct UnsupportedOnBackend {
    pub arch: &'static str,
    pub backend: String,
}

/// Whether `backend` runs `cfg`'s architecture (every backend runs GPT-2;
/// Llama needs the backend's Llama ops): check before building a model.
pub fn check_backend<B: crate::compute::Backend>(
    backend: &B,
    cfg: &ModelConfig,
) -> Result<(), UnsupportedOnBackend> {
    match cfg.arch {
        Architecture::Llama(_) if !backend.has_llama_ops() => {
            Err(UnsupportedOnBackend { arch: cfg.arch.name(), backend: backend.describe() })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
