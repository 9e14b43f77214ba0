//! Export and import of Hugging Face GPT-2 checkpoints: `model.safetensors`
//! with GPT-2's tensor names and layouts, plus a `config.json` that
//! `transformers.GPT2LMHeadModel` reads.
//!
//! Mapping (murmur → Hugging Face):
//! - `wte.weight`: first `vocab_size` rows of murmur's padded `(Vp, C)` table;
//! - `wpe.weight`, `ln_*`, all biases: unchanged;
//! - `h.N.attn.c_attn`, `attn.c_proj`, `mlp.c_fc`, `mlp.c_proj` weights:
//!   transposed, since GPT-2's Conv1D stores `(in, out)` and murmur `(out, in)`.
//!
//! The LM head is tied to `wte`, as in GPT-2, so no `lm_head.weight` is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::model::params::WTE;
use crate::model::{param_specs, ModelConfig};

/// Largest safetensors JSON header accepted.
const MAX_HEADER: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}; check free disk space and permissions")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a valid safetensors file: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("{path} does not hold a GPT-2 model murmur can load: {reason}")]
    Model { path: PathBuf, reason: String },
}

fn is_conv1d(name: &str) -> bool {
    name.ends_with(".weight") && (name.contains(".attn.c_") || name.contains(".mlp.c_"))
}

fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = x[r * cols + c];
        }
    }
    out
}

/// The `config.json` transformers needs for `GPT2LMHeadModel`.
pub fn hf_config(cfg: &ModelConfig) -> Value {
    json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.max_seq_len,
        "n_ctx": cfg.max_seq_len,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": null,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": true,
        "bos_token_id": cfg.vocab_size - 1,
        "eos_token_id": cfg.vocab_size - 1,
        "torch_dtype": "float32"
    })
}

/// Writes `dir/model.safetensors` and `dir/config.json`.
pub fn export(dir: &Path, cfg: &ModelConfig, params: &[Vec<f32>]) -> Result<(), SafetensorsError> {
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SafetensorsError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(werr(dir))?;
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for (i, (spec, data)) in param_specs(cfg).iter().zip(params).enumerate() {
        let (shape, values) = if i == WTE {
            (vec![cfg.vocab_size, cfg.n_embd], data[..cfg.vocab_size * cfg.n_embd].to_vec())
        } else if is_conv1d(&spec.name) {
            let (o, n) = (spec.shape[0], spec.shape[1]);
            (vec![n, o], transpose(data, o, n))
        } else {
            (spec.shape.clone(), data.clone())
        };
        tensors.push((spec.name.clone(), shape, values));
    }
    let mut header = BTreeMap::new();
    header.insert("__metadata__".to_string(), json!({"format": "pt", "producer": "murmur"}));
    let mut offset = 0usize;
    for (name, shape, values) in &tensors {
        let end = offset + values.len() * 4;
        header.insert(name.clone(), json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}));
        offset = end;
    }
    let mut head = serde_json::to_vec(&header).map_err(|e| werr(dir)(std::io::Error::other(e)))?;
    while head.len() % 8 != 0 {
        head.push(b' ');
    }
    let mut buf = Vec::with_capacity(8 + head.len() + offset);
    buf.extend_from_slice(&(head.len() as u64).to_le_bytes());
    buf.extend_from_slice(&head);
    for (_, _, values) in &tensors {
        for v in values {
            buf.extend_from_slice(&v.to_le_bytes());
        }
    }
    let st = dir.join("model.safetensors");
    std::fs::write(&st, &buf).map_err(werr(&st))?;
    let cj = dir.join("config.json");
    let text =
        serde_json::to_string_pretty(&hf_config(cfg)).map_err(|e| werr(&cj)(std::io::Error::other(e)))?;
    std::fs::write(&cj, text).map_err(werr(&cj))?;
    Ok(())
}

/// Parsed safetensors: tensor name → (shape, f32 values).
type TensorMap = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

fn read_safetensors(path: &Path) -> Result<TensorMap, SafetensorsError> {
    let bytes =
        std::fs::read(path).map_err(|source| SafetensorsError::Read { path: path.to_path_buf(), source })?;
    let fmt = |reason: String| SafetensorsError::Format { path: path.to_path_buf(), reason };
    if bytes.len() < 8 {
        return Err(fmt(format!("file is {} bytes, shorter than the 8-byte header length", bytes.len())));
    }
    let hlen = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if hlen > MAX_HEADER || 8 + hlen > bytes.len() as u64 {
        return Err(fmt(format!("header length {hlen} does not fit in a {}-byte file", bytes.len())));
    }
    let header: BTreeMap<String, Value> =
        serde_json::from_slice(&bytes[8..8 + hlen as usize]).map_err(|e| fmt(format!("header JSON: {e}")))?;
    let data = &bytes[8 + hlen as usize..];
    let mut out = BTreeMap::new();
    for (name, info) in header {
        if name == "__metadata__" {
            continue;
        }
        let dtype = info["dtype"].as_str().unwrap_or("");
        let width = match dtype {
            "F32" => 4,
            "F16" | "BF16" => 2,
            other => {
                return Err(fmt(format!(
                    "tensor {name} has dtype {other:?}; only F32, F16 and BF16 are read"
                )))
            }
        };
        let shape: Vec<usize> = info["shape"]
            .as_array()
            .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
            .ok_or_else(|| fmt(format!("tensor {name} has no valid shape")))?;
        let offs: Vec<usize> = info["data_offsets"]
            .as_array()
            .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
            .filter(|v: &Vec<usize>| v.len() == 2)
            .ok_or_else(|| fmt(format!("tensor {name} has no valid data_offsets")))?;
        let numel = shape.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
        let (begin, end) = (offs[0], offs[1]);
        if begin > end || end > data.len() || numel.and_then(|n| n.checked_mul(width)) != Some(end - begin) {
            return Err(fmt(format!(
                "tensor {name}: offsets {begin}..{end} do not match shape {shape:?} {dtype}"
            )));
        }
        let raw = &data[begin..end];
        let values: Vec<f32> = match dtype {
            "F32" => raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            "F16" => raw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            _ => raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        };
        out.insert(name, (shape, values));
    }
    Ok(out)
}

/// Loads a Hugging Face GPT-2 directory (`model.safetensors` + `config.json`)
/// or a `.safetensors` file with `config.json` beside it. Accepts names with
/// or without the `transformer.` prefix.
pub fn import(path: &Path) -> Result<(ModelConfig, Vec<Vec<f32>>), SafetensorsError> {
    let (st, cj) = if path.is_dir() {
        (path.join("model.safetensors"), path.join("config.json"))
    } else {
        (path.to_path_buf(), path.with_file_name("config.json"))
    };
    let merr = |reason: String| SafetensorsError::Model { path: st.clone(), reason };
    let conf_text =
        std::fs::read_to_string(&cj).map_err(|source| SafetensorsError::Read { path: cj.clone(), source })?;
    let conf: Value = serde_json::from_str(&conf_text)
        .map_err(|e| SafetensorsError::Format { path: cj.clone(), reason: format!("config.json: {e}") })?;
    let dim = |k: &str| -> Result<usize, SafetensorsError> {
        conf[k].as_u64().map(|v| v as usize).ok_or_else(|| merr(format!("config.json lacks a numeric `{k}`")))
    };
    let cfg = ModelConfig::new(
        dim("n_layer")?,
        dim("n_embd")?,
        dim("n_head")?,
        dim("vocab_size")?,
        dim("n_positions")?,
    )
    .map_err(|e| merr(e.to_string()))?;
    let mut tensors = read_safetensors(&st)?;
    let mut params = Vec::new();
    for (i, spec) in param_specs(&cfg).iter().enumerate() {
        let (shape, values) = tensors
            .remove(&spec.name)
            .or_else(|| tensors.remove(&format!("transformer.{}", spec.name)))
            .ok_or_else(|| merr(format!("tensor {} is missing", spec.name)))?;
        let values = if i == WTE {
            if shape != [cfg.vocab_size, cfg.n_embd] {
                return Err(merr(format!(
                    "wte.weight has shape {shape:?}, config says [{}, {}]",
                    cfg.vocab_size, cfg.n_embd
                )));
            }
            let mut padded = values;
            padded.resize(cfg.padded_vocab_size * cfg.n_embd, 0.0);
            padded
        } else if is_conv1d(&spec.name) {
            let (o, n) = (spec.shape[0], spec.shape[1]);
            if shape != [n, o] {
                return Err(merr(format!("{} has shape {shape:?}, expected [{n}, {o}]", spec.name)));
            }
            transpose(&values, n, o)
        } else {
            if shape != spec.shape {
                return Err(merr(format!("{} has shape {shape:?}, expected {:?}", spec.name, spec.shape)));
            }
            values
        };
        params.push(values);
    }
    Ok((cfg, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::cpu::CpuBackend;
    use crate::model::{init_params, Gpt};

    #[test]
    fn export_then_import_gives_bit_identical_logits() {
        let cfg = ModelConfig::new(2, 16, 2, 37, 8).unwrap();
        let mut params = init_params(&cfg, 9);
        // make every tensor non-trivial (biases and norms too)
        for (k, t) in params.iter_mut().enumerate() {
            for (i, x) in t.iter_mut().enumerate() {
                *x += ((i * 31 + k * 7) % 17) as f32 * 1e-3;
            }
        }
        params[WTE][cfg.vocab_size * cfg.n_embd..].fill(0.0);
        let dir = tempfile::tempdir().unwrap();
        export(dir.path(), &cfg, &params).unwrap();
        let (cfg2, params2) = import(dir.path()).unwrap();
        assert_eq!(cfg2, cfg);
        let be = CpuBackend::new();
        let tokens: Vec<u32> = (0..16).map(|i| (i * 5 % 37) as u32).collect();
        let mut a = Gpt::new(&be, cfg.clone(), &params, 1);
        let mut b = Gpt::new(&be, cfg2, &params2, 1);
        a.forward(&be, &tokens, None, 2, 8);
        b.forward(&be, &tokens, None, 2, 8);
        let (la, lb) = (a.download_logits(&be), b.download_logits(&be));
        assert_eq!(
            la.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            lb.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        // Conv1D layout on disk: c_attn is (in=C, out=3C)
        let raw = read_safetensors(&dir.path().join("model.safetensors")).unwrap();
        assert_eq!(raw["h.0.attn.c_attn.weight"].0, vec![16, 48]);
        assert_eq!(raw["wte.weight"].0, vec![37, 16]);
    }

    #[test]
    fn damaged_files_are_rejected_with_reasons() {
        let cfg = ModelConfig::new(1, 8, 2, 10, 4).unwrap();
        let dir = tempfile::tempdir().unwrap();
        export(dir.path(), &cfg, &init_params(&cfg, 1)).unwrap();
        let st = dir.path().join("model.safetensors");
        let bytes = std::fs::read(&st).unwrap();
        std::fs::write(&st, &bytes[..bytes.len() - 10]).unwrap();
        let e = import(dir.path()).unwrap_err();
        assert!(e.to_string().contains("do not match"), "{e}");
        std::fs::write(&st, [255u8; 16]).unwrap();
        assert!(matches!(import(dir.path()).unwrap_err(), SafetensorsError::Format { .. }));
    }
}
