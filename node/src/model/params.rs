//! The model's parameter tensors: their canonical order, names, shapes and
//! initialisation. GPT-2's layout is here, Llama's in `llama`.
//!
//! GPT-2's canonical order (used for flattening, hashing, checkpoints and deltas):
//! `wte`, `wpe`, then for each layer `ln_1.{weight,bias}`,
//! `attn.c_attn.{weight,bias}`, `attn.c_proj.{weight,bias}`,
//! `ln_2.{weight,bias}`, `mlp.c_fc.{weight,bias}`, `mlp.c_proj.{weight,bias}`,
//! and last `ln_f.{weight,bias}`. Names are Hugging Face GPT-2's; weights are
//! stored `(out, in)` as in llm.c (Hugging Face's Conv1D stores `(in, out)`).

use super::config::{Architecture, ModelConfig};
use super::rng::Rng;

pub mod llama;

/// Per-layer tensor kinds, in canonical order within a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerParam {
    Ln1W = 0,
    Ln1B,
    QkvW,
    QkvB,
    AttProjW,
    AttProjB,
    Ln2W,
    Ln2B,
    FcW,
    FcB,
    FcProjW,
    FcProjB,
}

pub const PER_LAYER: usize = 12;
pub const WTE: usize = 0;
pub const WPE: usize = 1;

/// How a tensor is initialised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Normal(f32),
    Zeros,
    Ones,
}

/// One parameter tensor's description.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    /// Shape as stored here (`(out, in)` for matmul weights).
    pub shape: Vec<usize>,
    pub init: Init,
    /// Whether AdamW's weight decay applies (2-D weights only).
    pub decay: bool,
}

impl ParamSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Index of a layer tensor in canonical order.
pub fn layer_index(layer: usize, p: LayerParam) -> usize {
    2 + PER_LAYER * layer + p as usize
}

/// Index of the final layernorm weight (`ln_f.weight`); its bias follows.
pub fn lnf_index(cfg: &ModelConfig) -> usize {
    2 + PER_LAYER * cfg.n_layer
}

/// Index of the LM head's weight: the token embedding when tied (always
/// for GPT-2), else Llama's `lm_head.weight`, the last tensor.
pub fn head_index(cfg: &ModelConfig) -> usize {
    match cfg.arch {
        Architecture::Llama(l) if !l.tied_embeddings => llama::norm_index(cfg) + 1,
        _ => WTE,
    }
}

/// All parameter tensors in canonical order.
pub fn param_specs(cfg: &ModelConfig) -> Vec<ParamSpec> {
    match &cfg.arch {
        Architecture::Gpt2 => gpt2_specs(cfg),
        Architecture::Llama(shape) => llama::param_specs(cfg, shape),
    }
}

/// GPT-2's tensors in canonical order.
fn gpt2_specs(cfg: &ModelConfig) -> Vec<ParamSpec> {
    let (c, l) = (cfg.n_embd, cfg.n_layer);
    let std = 0.02f32;
    // GPT-2 scales the residual projections by 1/sqrt(2L).
    let proj_std = std / (2.0 * l as f32).sqrt();
    let spec =
        |name: String, shape: Vec<usize>, init: Init, decay: bool| ParamSpec { name, shape, init, decay };
    let mut out = vec![
        spec("wte.weight".into(), vec![cfg.padded_vocab_size, c], Init::Normal(std), true),
        spec("wpe.weight".into(), vec![cfg.max_seq_len, c], Init::Normal(0.01), true),
    ];
    for i in 0..l {
        let n = |s: &str| format!("h.{i}.{s}");
        out.push(spec(n("ln_1.weight"), vec![c], Init::Ones, false));
        out.push(spec(n("ln_1.bias"), vec![c], Init::Zeros, false));
        out.push(spec(n("attn.c_attn.weight"), vec![3 * c, c], Init::Normal(std), true));
        out.push(spec(n("attn.c_attn.bias"), vec![3 * c], Init::Zeros, false));
        out.push(spec(n("attn.c_proj.weight"), vec![c, c], Init::Normal(proj_std), true));
        out.push(spec(n("attn.c_proj.bias"), vec![c], Init::Zeros, false));
        out.push(spec(n("ln_2.weight"), vec![c], Init::Ones, false));
        out.push(spec(n("ln_2.bias"), vec![c], Init::Zeros, false));
        out.push(spec(n("mlp.c_fc.weight"), vec![4 * c, c], Init::Normal(std), true));
        out.push(spec(n("mlp.c_fc.bias"), vec![4 * c], Init::Zeros, false));
        out.push(spec(n("mlp.c_proj.weight"), vec![c, 4 * c], Init::Normal(proj_std), true));
        out.push(spec(n("mlp.c_proj.bias"), vec![c], Init::Zeros, false));
    }
    out.push(spec("ln_f.weight".into(), vec![c], Init::Ones, false));
    out.push(spec("ln_f.bias".into(), vec![c], Init::Zeros, false));
    out
}

/// Split flat parameters into the model's tensors (canonical order); a
/// tensor past the end of `flat` comes out empty.
pub fn split_params(cfg: &ModelConfig, flat: &[f32]) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    let mut at = 0;
    for s in param_specs(cfg) {
        let n = s.numel();
        out.push(flat.get(at..at + n).map(<[f32]>::to_vec).unwrap_or_default());
        at += n;
    }
    out
}

/// Initial values for every tensor, deterministic in `seed`. Padded
/// vocabulary rows of the embedding and the LM head start at zero (they are
/// never read by the loss).
pub fn init_params(cfg: &ModelConfig, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    let head = head_index(cfg);
    param_specs(cfg)
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut v = match s.init {
                Init::Normal(std) => (0..s.numel()).map(|_| (rng.normal() * std as f64) as f32).collect(),
                Init::Zeros => vec![0.0; s.numel()],
                Init::Ones => vec![1.0; s.numel()],
            };
            if i == WTE || i == head {
                v[cfg.vocab_size * cfg.n_embd..].fill(0.0);
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_cover_every_parameter_once() {
        let cfg = ModelConfig::preset("tiny").unwrap();
        let specs = param_specs(&cfg);
        assert_eq!(specs.len(), 2 + PER_LAYER * cfg.n_layer + 2);
        assert_eq!(specs.iter().map(|s| s.numel()).sum::<usize>(), cfg.param_count());
        assert_eq!(specs[layer_index(1, LayerParam::FcW)].name, "h.1.mlp.c_fc.weight");
        assert_eq!(specs[lnf_index(&cfg)].name, "ln_f.weight");
        let a = init_params(&cfg, 3);
        assert_eq!(a, init_params(&cfg, 3));
        assert_ne!(a, init_params(&cfg, 4));
    }

    #[test]
    fn llama_specs_cover_every_parameter_once() {
        use llama::{layer_index, norm_index, LlamaParam};
        for name in ["llama-tiny", "llama-60m"] {
            let cfg = ModelConfig::preset(name).unwrap();
            let untied = !cfg.arch.llama().unwrap().tied_embeddings;
            let specs = param_specs(&cfg);
            assert_eq!(specs.len(), 1 + llama::PER_LAYER * cfg.n_layer + 1 + untied as usize, "{name}");
            assert_eq!(specs.iter().map(|s| s.numel()).sum::<usize>(), cfg.param_count(), "{name}");
            assert_eq!(specs[layer_index(1, LlamaParam::DownW)].name, "layers.1.mlp.down_proj.weight");
            assert_eq!(specs[norm_index(&cfg)].name, "norm.weight");
            let head = head_index(&cfg);
            assert_eq!(specs[head].name, if untied { "lm_head.weight" } else { "embed_tokens.weight" });
            // no biases: every 1-D tensor is a norm's weight, starting at one
            for s in specs.iter().filter(|s| s.shape.len() == 1) {
                assert!(s.name.ends_with("norm.weight") && s.init == Init::Ones, "{}", s.name);
            }
            if name == "llama-tiny" {
                let p = init_params(&cfg, 1);
                let real = cfg.vocab_size * cfg.n_embd;
                assert!(p[head][..real].iter().any(|x| *x != 0.0));
                assert_eq!(p.len(), specs.len());
            }
        }
    }
}
