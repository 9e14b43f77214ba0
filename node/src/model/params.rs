//! The model's parameter tensors: their canonical order, names, shapes and
//! GPT-2 initialisation.
//!
//! Canonical order (used for flattening, hashing, checkpoints and deltas):
//! `wte`, `wpe`, then for each layer `ln_1.{weight,bias}`,
//! `attn.c_attn.{weight,bias}`, `attn.c_proj.{weight,bias}`,
//! `ln_2.{weight,bias}`, `mlp.c_fc.{weight,bias}`, `mlp.c_proj.{weight,bias}`,
//! and last `ln_f.{weight,bias}`. Names are Hugging Face GPT-2's; weights are
//! stored `(out, in)` as in llm.c (Hugging Face's Conv1D stores `(in, out)`).

use super::config::ModelConfig;
use super::rng::Rng;

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

/// All parameter tensors in canonical order.
pub fn param_specs(cfg: &ModelConfig) -> Vec<ParamSpec> {
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

/// GPT-2 initial values for every tensor, deterministic in `seed`. Padded
/// vocabulary rows of `wte` start at zero (they are never read by the loss).
pub fn init_params(cfg: &ModelConfig, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    param_specs(cfg)
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut v = match s.init {
                Init::Normal(std) => (0..s.numel()).map(|_| (rng.normal() * std as f64) as f32).collect(),
                Init::Zeros => vec![0.0; s.numel()],
                Init::Ones => vec![1.0; s.numel()],
            };
            if i == WTE {
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
}
