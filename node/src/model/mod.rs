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

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
