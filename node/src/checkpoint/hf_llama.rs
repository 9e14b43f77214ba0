//! Hugging Face `LlamaForCausalLM` tensors and `config.json` for a murmur
//! Llama, for `safetensors::export`.
//!
//! Mapping (murmur → Hugging Face), every weight `(out, in)` on both sides:
//! - `embed_tokens.weight`, `lm_head.weight` (untied only): the first
//!   `vocab_size` rows of murmur's padded `(Vp, C)` tables, under `model.`
//!   and at the top level respectively;
//! - `layers.N.self_attn.qkv_proj.weight` → `q_proj` (n_head heads), `k_proj`
//!   and `v_proj` (n_kv_head heads each): consecutive row blocks;
//! - `layers.N.mlp.gate_up_proj.weight` → `gate_proj`, `up_proj`: its two
//!   row halves;
//! - norms, `o_proj`, `down_proj`: unchanged.
//!
//! Rotary embeddings are murmur's rotate-half layout, the one transformers'
//! Llama applies, so no row of `q_proj` or `k_proj` is permuted.

use serde_json::{json, Value};

use super::safetensors::F32Tensor;
use crate::model::config::{LlamaShape, ModelConfig};
use crate::model::params::llama::{layer_index, norm_index, LlamaParam};
use crate::model::params::{head_index, WTE};

/// The `config.json` transformers needs for `LlamaForCausalLM`; `eot` is
/// the end-of-text token of the run's tokenizer, if it has one.
pub fn config(cfg: &ModelConfig, shape: &LlamaShape, eot: Option<u32>) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.n_embd,
        "intermediate_size": shape.ffn_hidden,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": shape.n_kv_head,
        "head_dim": cfg.head_size(),
        "max_position_embeddings": cfg.max_seq_len,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": f64::from(shape.rope_theta),
        "rope_scaling": null,
        "attention_bias": false,
        "attention_dropout": 0.0,
        "mlp_bias": false,
        "tie_word_embeddings": shape.tied_embeddings,
        "initializer_range": 0.02,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": null,
        "use_cache": true,
        "torch_dtype": "float32"
    })
}

/// Rows `from..to` of a `(rows, cols)` tensor, as a tensor of that shape.
fn rows<'a>(
    name: &str,
    data: &'a [f32],
    cols: usize,
    from: usize,
    to: usize,
) -> Result<F32Tensor<'a>, String> {
    let values = data
        .get(from * cols..to * cols)
        .ok_or_else(|| format!("{name} holds {} values, fewer than {} rows of {cols}", data.len(), to))?;
    Ok(F32Tensor::plain(vec![to - from, cols], values))
}

/// Every tensor under its Hugging Face name, in the order transformers
/// lists them. `params` are murmur's tensors in canonical order.
pub fn tensors<'a>(
    cfg: &ModelConfig,
    shape: &LlamaShape,
    params: &'a [Vec<f32>],
) -> Result<Vec<(String, F32Tensor<'a>)>, String> {
    let (c, v, h) = (cfg.n_embd, cfg.vocab_size, shape.ffn_hidden);
    let (q, kv) = (cfg.n_head * cfg.head_size(), shape.n_kv_head * cfg.head_size());
    let get = |i: usize| params.get(i).map(Vec::as_slice).ok_or_else(|| format!("tensor {i} is missing"));
    let mut out =
        vec![("model.embed_tokens.weight".to_string(), rows("embed_tokens.weight", get(WTE)?, c, 0, v)?)];
    for l in 0..cfg.n_layer {
        let name = |s: &str| format!("model.layers.{l}.{s}");
        let at = |p: LlamaParam| get(layer_index(l, p));
        let qkv = at(LlamaParam::QkvW)?;
        let gate_up = at(LlamaParam::GateUpW)?;
        out.push((name("input_layernorm.weight"), F32Tensor::plain(vec![c], at(LlamaParam::AttnNorm)?)));
        out.push((name("self_attn.q_proj.weight"), rows("qkv_proj", qkv, c, 0, q)?));
        out.push((name("self_attn.k_proj.weight"), rows("qkv_proj", qkv, c, q, q + kv)?));
        out.push((name("self_attn.v_proj.weight"), rows("qkv_proj", qkv, c, q + kv, q + 2 * kv)?));
        out.push((name("self_attn.o_proj.weight"), F32Tensor::plain(vec![c, q], at(LlamaParam::OW)?)));
        out.push((
            name("post_attention_layernorm.weight"),
            F32Tensor::plain(vec![c], at(LlamaParam::MlpNorm)?),
        ));
        out.push((name("mlp.gate_proj.weight"), rows("gate_up_proj", gate_up, c, 0, h)?));
        out.push((name("mlp.up_proj.weight"), rows("gate_up_proj", gate_up, c, h, 2 * h)?));
        out.push((name("mlp.down_proj.weight"), F32Tensor::plain(vec![c, h], at(LlamaParam::DownW)?)));
    }
    out.push(("model.norm.weight".to_string(), F32Tensor::plain(vec![c], get(norm_index(cfg))?)));
    if !shape.tied_embeddings {
        out.push(("lm_head.weight".to_string(), rows("lm_head.weight", get(head_index(cfg))?, c, 0, v)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::safetensors::{export, SafetensorsFile};
    use crate::model::params::llama::{layer_index, LlamaParam};
    use crate::model::{init_params, ModelConfig};

    #[test]
    fn an_export_splits_the_stacked_projections_under_transformers_names() {
        let cfg = ModelConfig::preset("llama-tiny").unwrap();
        let shape = *cfg.arch.llama().unwrap();
        let params = init_params(&cfg, 3);
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = crate::data::hf_tokenizer::ExportTokenizer::for_vocabulary(cfg.vocab_size);
        export(dir.path(), &cfg, &params, tokenizer.as_ref()).unwrap();
        let mut st = SafetensorsFile::open(&dir.path().join("model.safetensors")).unwrap();
        let (c, hs, h) = (cfg.n_embd, cfg.head_size(), shape.ffn_hidden);
        let (q, kv) = (cfg.n_head * hs, shape.n_kv_head * hs);
        let qkv = &params[layer_index(1, LlamaParam::QkvW)];
        let read = |st: &mut SafetensorsFile, name: &str| st.read(name).unwrap().unwrap();
        assert_eq!(
            read(&mut st, "model.layers.1.self_attn.q_proj.weight"),
            (vec![q, c], qkv[..q * c].to_vec())
        );
        let k = read(&mut st, "model.layers.1.self_attn.k_proj.weight");
        assert_eq!(k, (vec![kv, c], qkv[q * c..(q + kv) * c].to_vec()));
        let v = read(&mut st, "model.layers.1.self_attn.v_proj.weight");
        assert_eq!(v, (vec![kv, c], qkv[(q + kv) * c..].to_vec()));
        let gate_up = &params[layer_index(3, LlamaParam::GateUpW)];
        let up = read(&mut st, "model.layers.3.mlp.up_proj.weight");
        assert_eq!(up, (vec![h, c], gate_up[h * c..].to_vec()));
        assert_eq!(read(&mut st, "model.embed_tokens.weight").0, vec![cfg.vocab_size, c]);
        assert_eq!(read(&mut st, "lm_head.weight").0, vec![cfg.vocab_size, c]);
        assert!(st.read("model.layers.0.self_attn.qkv_proj.weight").is_none());

        let config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
        assert_eq!(config["architectures"][0], "LlamaForCausalLM");
        assert_eq!(config["num_key_value_heads"], shape.n_kv_head);
        assert_eq!(config["intermediate_size"], h);
        assert_eq!(config["tie_word_embeddings"], false);
        // The byte vocabulary's tokenizer goes with it.
        let tok: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("tokenizer.json")).unwrap()).unwrap();
        assert_eq!(tok["model"]["vocab"].as_object().map(|v| v.len()), Some(256));
    }
}
