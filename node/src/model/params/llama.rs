//! The Llama parameter layout: canonical order, Hugging Face Llama's tensor
//! names (without the `model.` prefix), shapes and initialisation.
//!
//! Canonical order: `embed_tokens.weight`, then for each layer
//! `input_layernorm.weight`, `self_attn.qkv_proj.weight` (Hugging Face's
//! `q_proj`, `k_proj`, `v_proj` stacked by rows: n_head, then n_kv_head and
//! n_kv_head heads), `self_attn.o_proj.weight`,
//! `post_attention_layernorm.weight`, `mlp.gate_up_proj.weight`
//! (`gate_proj` then `up_proj` stacked by rows), `mlp.down_proj.weight`;
//! then `norm.weight`, and `lm_head.weight` when the embeddings are untied.
//! No biases. Weights are stored `(out, in)`, as Hugging Face's `Linear`.

use super::{Init, ParamSpec};
use crate::model::config::{LlamaShape, ModelConfig};

/// Per-layer tensor kinds, in canonical order within a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlamaParam {
    AttnNorm = 0,
    QkvW,
    OW,
    MlpNorm,
    GateUpW,
    DownW,
}

pub const PER_LAYER: usize = 6;

/// Index of a layer tensor in canonical order.
pub fn layer_index(layer: usize, p: LlamaParam) -> usize {
    1 + PER_LAYER * layer + p as usize
}

/// Index of the final RMSNorm's weight (`norm.weight`).
pub fn norm_index(cfg: &ModelConfig) -> usize {
    1 + PER_LAYER * cfg.n_layer
}

/// All parameter tensors in canonical order.
pub fn param_specs(cfg: &ModelConfig, shape: &LlamaShape) -> Vec<ParamSpec> {
    let (c, l, h, vp) = (cfg.n_embd, cfg.n_layer, shape.ffn_hidden, cfg.padded_vocab_size);
    let std = 0.02f32;
    // The residual projections scaled by 1/sqrt(2L), as GPT-2's.
    let proj_std = std / (2.0 * l as f32).sqrt();
    let spec =
        |name: String, shape: Vec<usize>, init: Init, decay: bool| ParamSpec { name, shape, init, decay };
    let mut out = vec![spec("embed_tokens.weight".into(), vec![vp, c], Init::Normal(std), true)];
    for i in 0..l {
        let n = |s: &str| format!("layers.{i}.{s}");
        out.push(spec(n("input_layernorm.weight"), vec![c], Init::Ones, false));
        out.push(spec(n("self_attn.qkv_proj.weight"), vec![cfg.qkv_width(), c], Init::Normal(std), true));
        out.push(spec(n("self_attn.o_proj.weight"), vec![c, c], Init::Normal(proj_std), true));
        out.push(spec(n("post_attention_layernorm.weight"), vec![c], Init::Ones, false));
        out.push(spec(n("mlp.gate_up_proj.weight"), vec![2 * h, c], Init::Normal(std), true));
        out.push(spec(n("mlp.down_proj.weight"), vec![c, h], Init::Normal(proj_std), true));
    }
    out.push(spec("norm.weight".into(), vec![c], Init::Ones, false));
    if !shape.tied_embeddings {
        out.push(spec("lm_head.weight".into(), vec![vp, c], Init::Normal(std), true));
    }
    out
}
