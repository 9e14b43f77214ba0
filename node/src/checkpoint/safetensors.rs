//! Export and import of Hugging Face checkpoints: `model.safetensors` with
//! the architecture's tensor names and layouts, a `config.json` that
//! `transformers.GPT2LMHeadModel` or `LlamaForCausalLM` reads, and, with
//! the model's tokenizer (built in or the dataset's own), `tokenizer.json`
//! and `tokenizer_config.json` for `AutoTokenizer`. GPT-2's mapping is
//! below; Llama's is `hf_llama`'s. Import reads GPT-2 checkpoints.
//!
//! Mapping (murmur → Hugging Face):
//! - `wte.weight`: first `vocab_size` rows of murmur's padded `(Vp, C)` table;
//! - `wpe.weight`, `ln_*`, all biases: unchanged;
//! - `h.N.attn.c_attn`, `attn.c_proj`, `mlp.c_fc`, `mlp.c_proj` weights:
//!   transposed, since GPT-2's Conv1D stores `(in, out)` and murmur `(out, in)`.
//!
//! The LM head is tied to `wte`, as in GPT-2, so no `lm_head.weight` is written.
//!
//! The file format itself is the `safetensors` crate's: it lays out and
//! validates the header (offsets contiguous, in bounds, not overlapping,
//! matching each shape and dtype). Writing streams one tensor at a time to a
//! temporary file renamed into place; reading takes the header, then reads
//! only the tensors the model needs, one at a time, so a file is never held
//! in memory whole.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::Metadata;
use safetensors::{Dtype, View};
use serde_json::{json, Value};

use super::hf_llama;
use crate::data::hf_tokenizer::ExportTokenizer;
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

/// One f32 tensor to write: murmur's values, written as they are or
/// transposed (`rows` × `cols` in memory), converted when the writer asks.
pub(crate) struct F32Tensor<'a> {
    shape: Vec<usize>,
    values: &'a [f32],
    transpose: Option<(usize, usize)>,
}

impl<'a> F32Tensor<'a> {
    /// `values` as they are, in `shape`.
    pub(crate) fn plain(shape: Vec<usize>, values: &'a [f32]) -> Self {
        F32Tensor { shape, values, transpose: None }
    }
}

impl View for F32Tensor<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        let values: Cow<'_, [f32]> = match self.transpose {
            Some((rows, cols)) => Cow::Owned(transpose(self.values, rows, cols)),
            None => Cow::Borrowed(self.values),
        };
        if cfg!(target_endian = "little") {
            match values {
                Cow::Borrowed(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
                Cow::Owned(v) => Cow::Owned(bytemuck::cast_slice(&v).to_vec()),
            }
        } else {
            Cow::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
    }
    fn data_len(&self) -> usize {
        self.values.len() * 4
    }
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

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> SafetensorsError {
    let path = path.to_path_buf();
    move |source| SafetensorsError::Write { path, source }
}

/// Writes `dir/model.safetensors`, `dir/config.json` and, with a
/// tokenizer, `dir/tokenizer.json` and `dir/tokenizer_config.json`.
pub fn export(
    dir: &Path,
    cfg: &ModelConfig,
    params: &[Vec<f32>],
    tokenizer: Option<&ExportTokenizer>,
) -> Result<(), SafetensorsError> {
    std::fs::create_dir_all(dir).map_err(write_error(dir))?;
    let (tensors, config) = match cfg.arch.llama() {
        Some(shape) => {
            let tensors = hf_llama::tensors(cfg, shape, params)
                .map_err(|e| write_error(dir)(std::io::Error::other(e)))?;
            (tensors, hf_llama::config(cfg, shape, tokenizer.and_then(ExportTokenizer::eot)))
        }
        None => (gpt2_tensors(dir, cfg, params)?, hf_config(cfg)),
    };
    for (name, t) in &tensors {
        let want: usize = t.shape.iter().product();
        if t.values.len() != want {
            return Err(write_error(dir)(std::io::Error::other(format!(
                "{name} holds {} values, its shape {:?} needs {want}",
                t.values.len(),
                t.shape
            ))));
        }
    }
    let about: HashMap<String, String> =
        [("format", "pt"), ("producer", "murmur")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
    let st = dir.join("model.safetensors");
    safetensors::serialize_to_file(tensors, Some(about), &st).map_err(|e| match e {
        safetensors::SafeTensorError::IoError(source) => write_error(&st)(source),
        other => write_error(&st)(std::io::Error::other(other.to_string())),
    })?;
    write_json(&dir.join("config.json"), &config)?;
    if let Some(t) = tokenizer {
        let json = t.tokenizer_json().map_err(|e| write_error(dir)(std::io::Error::other(e.to_string())))?;
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, json).map_err(write_error(&path))?;
        write_json(&dir.join("tokenizer_config.json"), &t.tokenizer_config())?;
    }
    Ok(())
}

fn write_json(path: &Path, value: &Value) -> Result<(), SafetensorsError> {
    let text =
        serde_json::to_string_pretty(value).map_err(|e| write_error(path)(std::io::Error::other(e)))?;
    std::fs::write(path, text).map_err(write_error(path))
}

/// GPT-2's tensors under their Hugging Face names.
fn gpt2_tensors<'a>(
    dir: &Path,
    cfg: &ModelConfig,
    params: &'a [Vec<f32>],
) -> Result<Vec<(String, F32Tensor<'a>)>, SafetensorsError> {
    let mut tensors = Vec::new();
    for (i, (spec, data)) in param_specs(cfg).iter().zip(params).enumerate() {
        let tensor = if i == WTE {
            let rows = cfg.vocab_size * cfg.n_embd;
            let values = data.get(..rows).ok_or_else(|| {
                write_error(dir)(std::io::Error::other(format!(
                    "wte.weight holds {} values, fewer than {rows}",
                    data.len()
                )))
            })?;
            F32Tensor { shape: vec![cfg.vocab_size, cfg.n_embd], values, transpose: None }
        } else if is_conv1d(&spec.name) {
            let (o, n) = (spec.shape[0], spec.shape[1]);
            F32Tensor { shape: vec![n, o], values: data, transpose: Some((o, n)) }
        } else {
            F32Tensor { shape: spec.shape.clone(), values: data, transpose: None }
        };
        tensors.push((spec.name.clone(), tensor));
    }
    Ok(tensors)
}

/// A tensor read back: its shape and its values as f32.
type ReadTensor = (Vec<usize>, Vec<f32>);

/// An open safetensors file whose header has been read and validated;
/// tensors are read from it one at a time.
pub(super) struct SafetensorsFile {
    path: PathBuf,
    file: File,
    meta: Metadata,
    /// Where the tensor data starts (after the length and the header).
    data_start: u64,
}

impl SafetensorsFile {
    pub(super) fn open(path: &Path) -> Result<Self, SafetensorsError> {
        let rerr = |source| SafetensorsError::Read { path: path.to_path_buf(), source };
        let fmt = |reason: String| SafetensorsError::Format { path: path.to_path_buf(), reason };
        let mut file = File::open(path).map_err(rerr)?;
        let file_len = file.metadata().map_err(rerr)?.len();
        if file_len < 8 {
            return Err(fmt(format!("file is {file_len} bytes, shorter than the 8-byte header length")));
        }
        let mut len = [0u8; 8];
        file.read_exact(&mut len).map_err(rerr)?;
        let hlen = u64::from_le_bytes(len);
        if hlen > MAX_HEADER || 8 + hlen > file_len {
            return Err(fmt(format!(
                "header length {hlen} does not fit in a {file_len}-byte file (at most {MAX_HEADER} bytes are read)"
            )));
        }
        let mut header = vec![0u8; hlen as usize];
        file.read_exact(&mut header).map_err(rerr)?;
        // The crate's header type checks every tensor's offsets: in order,
        // contiguous, without overlap, and as long as shape × dtype.
        let meta: Metadata = serde_json::from_slice(&header).map_err(|e| fmt(format!("header: {e}")))?;
        let data_start = 8 + hlen;
        let want = data_start.saturating_add(meta.data_len() as u64);
        if want != file_len {
            return Err(fmt(format!(
                "the header describes {} bytes of tensor data, the file holds {} (it is {})",
                meta.data_len(),
                file_len - data_start,
                if want > file_len { "truncated" } else { "followed by stray bytes" }
            )));
        }
        Ok(Self { path: path.to_path_buf(), file, meta, data_start })
    }

    /// The shape and values (as f32) of tensor `name`; `None` if absent.
    pub(super) fn read(&mut self, name: &str) -> Option<Result<ReadTensor, SafetensorsError>> {
        let info = self.meta.info(name)?.clone();
        Some(self.read_info(name, &info))
    }

    fn read_info(
        &mut self,
        name: &str,
        info: &safetensors::tensor::TensorInfo,
    ) -> Result<ReadTensor, SafetensorsError> {
        let fmt = |reason: String| SafetensorsError::Format { path: self.path.clone(), reason };
        if !matches!(info.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(fmt(format!(
                "tensor {name} has dtype {:?}; only F32, F16 and BF16 are read (convert the model to float32 first)",
                info.dtype
            )));
        }
        let (begin, end) = info.data_offsets;
        // Within the file: `open` checked the offsets against its length.
        let mut raw = vec![0u8; end - begin];
        let rerr = |source| SafetensorsError::Read { path: self.path.clone(), source };
        self.file.seek(SeekFrom::Start(self.data_start + begin as u64)).map_err(rerr)?;
        let rerr = |source| SafetensorsError::Read { path: self.path.clone(), source };
        self.file.read_exact(&mut raw).map_err(rerr)?;
        let values: Vec<f32> = match info.dtype {
            Dtype::F32 => raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => {
                raw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
            }
            _ => raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        };
        Ok((info.shape.clone(), values))
    }
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
    let mut file = SafetensorsFile::open(&st)?;
    let mut params = Vec::new();
    for (i, spec) in param_specs(&cfg).iter().enumerate() {
        let (shape, values) = file
            .read(&spec.name)
            .or_else(|| file.read(&format!("transformer.{}", spec.name)))
            .ok_or_else(|| merr(format!("tensor {} is missing", spec.name)))??;
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
        export(dir.path(), &cfg, &params, ExportTokenizer::for_vocabulary(cfg.vocab_size).as_ref()).unwrap();
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
        // Conv1D layout on disk: c_attn is (in=C, out=3C), stored transposed.
        let mut raw = SafetensorsFile::open(&dir.path().join("model.safetensors")).unwrap();
        let (shape, values) = raw.read("h.0.attn.c_attn.weight").unwrap().unwrap();
        assert_eq!(shape, vec![16, 48]);
        let at = param_specs(&cfg).iter().position(|p| p.name == "h.0.attn.c_attn.weight").unwrap();
        let c_attn = &params[at];
        assert_eq!(values, transpose(c_attn, 48, 16));
        assert_eq!(raw.read("wte.weight").unwrap().unwrap().0, vec![37, 16]);
        assert!(raw.read("lm_head.weight").is_none());
    }

    /// A file holding `tensors` (name, dtype, shape, offsets) over `data`
    /// bytes, with a header written by hand (to say what the writer never would).
    /// A header entry: name, dtype, shape, data offsets.
    type Entry<'a> = (&'a str, &'a str, &'a [usize], (usize, usize));

    fn hand_written(path: &Path, tensors: &[Entry<'_>], data: usize) {
        let mut header = serde_json::Map::new();
        for (name, dtype, shape, (b, e)) in tensors {
            header.insert(name.to_string(), json!({"dtype": dtype, "shape": shape, "data_offsets": [b, e]}));
        }
        let mut head = serde_json::to_vec(&header).unwrap();
        while !head.len().is_multiple_of(8) {
            head.push(b' ');
        }
        let mut bytes = (head.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&head);
        bytes.resize(bytes.len() + data, 0);
        std::fs::write(path, bytes).unwrap();
    }

    fn import_error(dir: &Path) -> String {
        let e = import(dir).unwrap_err();
        assert!(matches!(e, SafetensorsError::Format { .. } | SafetensorsError::Model { .. }), "{e:?}");
        e.to_string()
    }

    #[test]
    fn damaged_files_are_rejected_with_reasons() {
        let cfg = ModelConfig::new(1, 8, 2, 10, 4).unwrap();
        let dir = tempfile::tempdir().unwrap();
        export(
            dir.path(),
            &cfg,
            &init_params(&cfg, 1),
            ExportTokenizer::for_vocabulary(cfg.vocab_size).as_ref(),
        )
        .unwrap();
        let st = dir.path().join("model.safetensors");
        let bytes = std::fs::read(&st).unwrap();

        // Truncated: the header promises more data than the file holds.
        std::fs::write(&st, &bytes[..bytes.len() - 10]).unwrap();
        let e = import_error(dir.path());
        assert!(e.contains("truncated") && e.contains("model.safetensors"), "{e}");
        // Stray bytes after the data.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 4]);
        std::fs::write(&st, &longer).unwrap();
        assert!(import_error(dir.path()).contains("stray bytes"));
        // Not a safetensors file at all; shorter than the length field.
        std::fs::write(&st, [255u8; 16]).unwrap();
        assert!(import_error(dir.path()).contains("header length"));
        std::fs::write(&st, [1u8; 3]).unwrap();
        assert!(import_error(dir.path()).contains("shorter than the 8-byte header length"));

        // Overlapping offsets: b starts inside a.
        hand_written(&st, &[("a", "F32", &[4], (0, 16)), ("b", "F32", &[4], (8, 24))], 24);
        let e = import_error(dir.path());
        assert!(e.contains("header") && e.contains("invalid offset"), "{e}");
        // Offsets that disagree with shape × dtype.
        hand_written(&st, &[("a", "F32", &[3], (0, 16))], 16);
        assert!(import_error(dir.path()).contains("invalid shape, data type, or offset"));
        // A tensor the model needs in a dtype murmur does not read.
        let specs = param_specs(&cfg);
        let mut tensors = Vec::new();
        let mut at = 0;
        for s in &specs {
            let shape =
                if s.name == "wte.weight" { vec![cfg.vocab_size, cfg.n_embd] } else { s.shape.clone() };
            let shape = if is_conv1d(&s.name) { vec![shape[1], shape[0]] } else { shape };
            let n: usize = shape.iter().product::<usize>() * 4;
            let dtype = if s.name == "wpe.weight" { "I32" } else { "F32" };
            tensors.push((s.name.clone(), dtype, shape, (at, at + n)));
            at += n;
        }
        let refs: Vec<Entry<'_>> =
            tensors.iter().map(|(n, d, s, o)| (n.as_str(), *d, s.as_slice(), *o)).collect();
        hand_written(&st, &refs, at);
        let e = import_error(dir.path());
        assert!(e.contains("wpe.weight") && e.contains("I32") && e.contains("only F32, F16 and BF16"), "{e}");
        // The same file with every dtype F32 loads: only the dtype was wrong.
        let refs: Vec<Entry<'_>> =
            tensors.iter().map(|(n, _, s, o)| (n.as_str(), "F32", s.as_slice(), *o)).collect();
        hand_written(&st, &refs, at);
        assert!(import(dir.path()).is_ok());
    }
}
