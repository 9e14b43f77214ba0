//! A run's state as a model directory other tools load: the Hugging Face
//! files (`model.safetensors`, `config.json`, see `safetensors`) and
//! `murmur.json`, which says what the state is — its run, round, StateId,
//! ParamsId, data, the tokens the network trained on to reach it, and the
//! run's RunSpec — so `murmur eval` and `murmur-bootstrap --init-from` can
//! use it without asking the network.
//!
//! A directory is written whole under a temporary name beside it and then
//! renamed into place: a crash leaves either no export or a complete one.

use std::path::{Path, PathBuf};

use murmur_protocol::hash::{hex, unhex};
use murmur_protocol::{params_id, DataRef, RunSpec, TrainingState};
use serde::{Deserialize, Serialize};

use super::safetensors::{self, SafetensorsError};
use crate::data::hf_tokenizer::ExportTokenizer;
use crate::model::{split_params, ModelConfig};

/// The metadata file's name in an export directory.
pub const META_FILE: &str = "murmur.json";

/// Largest `murmur.json` read (it holds a RunSpec of at most a few KiB).
const MAX_META_BYTES: u64 = 1 << 20;

/// What an export directory holds (`murmur.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportMeta {
    /// RunId (hex).
    pub run: String,
    /// The round whose commit names this state, as the nodes report it
    /// (`None`: the run's genesis state).
    pub round: Option<u64>,
    /// Rounds of training in the state: its own round field (`round` + 1).
    pub rounds_trained: u64,
    /// StateId (hex) of the state the parameters come from.
    pub state_id: String,
    /// ParamsId (hex) of the parameters: what `--init-from` names.
    pub params_id: String,
    pub preset: String,
    /// DatasetId (hex) when the run trains on a dataset.
    pub dataset_id: Option<String>,
    /// The run's DataRef (`synthetic:…` or `dataset:…`).
    pub data: String,
    /// Tokens the included deltas of rounds `tokens_from_round ..= round`
    /// trained on, as the exporting node recorded them (every round's when
    /// `tokens_from_round` is 0).
    pub tokens_seen: u64,
    pub tokens_from_round: u64,
    /// The validation loss the exporting node measured for this state, if it did.
    pub val_loss: Option<f32>,
    /// The run's RunSpec, canonical bytes in hex.
    pub run_spec: String,
}

impl ExportMeta {
    /// The metadata of `state` of the run `spec`.
    pub fn of(spec: &RunSpec, state: &TrainingState) -> Self {
        let dataset_id = match spec.data_ref() {
            Ok(DataRef::Dataset { id, .. }) => Some(id.to_hex()),
            _ => None,
        };
        Self {
            run: spec.run_id().to_hex(),
            round: state.round.checked_sub(1),
            rounds_trained: state.round,
            state_id: state.id().to_hex(),
            params_id: params_id(&state.params).to_hex(),
            preset: spec.model.preset.clone(),
            dataset_id,
            data: spec.data.clone(),
            tokens_seen: 0,
            tokens_from_round: 0,
            val_loss: None,
            run_spec: hex(&spec.encode()),
        }
    }

    /// The run's RunSpec.
    pub fn spec(&self) -> Result<RunSpec, ExportError> {
        let bytes = unhex(&self.run_spec).ok_or(ExportError::Meta("run_spec is not hex".into()))?;
        RunSpec::decode(&bytes).map_err(|e| ExportError::Meta(format!("run_spec does not decode: {e}")))
    }
}

/// Why an export could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "{} already exists and is not empty: pass a new --out directory, or remove that one first",
        .0.display()
    )]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}; check free disk space and permissions")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Model(#[from] SafetensorsError),
    #[error("murmur.json: {0}")]
    Meta(String),
    #[error("the state has {got} parameters and the model {want}")]
    Shape { got: usize, want: usize },
}

/// The model's tensors from flat parameters of exactly its size.
pub fn tensors_of(cfg: &ModelConfig, flat: &[f32]) -> Result<Vec<Vec<f32>>, ExportError> {
    let want = cfg.param_count();
    if flat.len() != want {
        return Err(ExportError::Shape { got: flat.len(), want });
    }
    Ok(split_params(cfg, flat))
}

/// Write `state` of the run `spec` (model `cfg`) as an export directory
/// `out`, which must not exist or be empty, with `tokenizer` beside it.
pub fn write(
    out: &Path,
    cfg: &ModelConfig,
    state: &TrainingState,
    meta: &ExportMeta,
    tokenizer: Option<&ExportTokenizer>,
) -> Result<(), ExportError> {
    if out.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(ExportError::Exists(out.to_path_buf()));
    }
    let tensors = tensors_of(cfg, &state.params)?;
    let name = out.file_name().map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Write { path, source }
    };
    std::fs::create_dir_all(&parent).map_err(werr(&parent))?;
    let tmp = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let written = (|| {
        safetensors::export(&tmp, cfg, &tensors, tokenizer)?;
        let text = serde_json::to_string_pretty(meta).map_err(|e| ExportError::Meta(e.to_string()))?;
        let mp = tmp.join(META_FILE);
        std::fs::write(&mp, text).map_err(werr(&mp))?;
        for f in ["model.safetensors", "config.json", META_FILE] {
            let p = tmp.join(f);
            std::fs::File::open(&p).and_then(|f| f.sync_all()).map_err(werr(&p))?;
        }
        if out.exists() {
            std::fs::remove_dir(out).map_err(werr(out))?;
        }
        std::fs::rename(&tmp, out).map_err(werr(out))?;
        crate::store::fsync_dir(&parent).map_err(werr(&parent))
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
}

/// Read `murmur.json` of an export directory.
pub fn read_meta(dir: &Path) -> Result<ExportMeta, ExportError> {
    let path = dir.join(META_FILE);
    let rerr = |source| ExportError::Read { path: path.clone(), source };
    let len = std::fs::metadata(&path).map_err(rerr)?.len();
    if len > MAX_META_BYTES {
        return Err(ExportError::Meta(format!(
            "{len} bytes, more than the {MAX_META_BYTES} a murmur.json may hold"
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(rerr)?;
    serde_json::from_str(&text).map_err(|e| ExportError::Meta(e.to_string()))
}

/// A model read from a file: a Hugging Face GPT-2 directory or
/// `.safetensors` file, or a murmur checkpoint (`.murmur`).
pub fn load_model(path: &Path) -> Result<(ModelConfig, Vec<Vec<f32>>), String> {
    if path.extension().is_some_and(|e| e == "murmur") {
        let ckpt = super::native::load(path).map_err(|e| e.to_string())?;
        Ok((ckpt.meta.model, ckpt.params))
    } else {
        safetensors::import(path).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::init_params;
    use crate::runtime::spec::{genesis, run_spec, RunParams};

    #[test]
    fn an_export_reads_back_bit_identically_and_is_never_half_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = run_spec(&RunParams::default()).expect("spec");
        let cfg = ModelConfig::preset("tiny").expect("preset");
        let mut state = genesis(&spec).expect("genesis");
        state.round = 7;
        let meta = ExportMeta { tokens_seen: 1234, ..ExportMeta::of(&spec, &state) };
        let out = dir.path().join("model");
        write(&out, &cfg, &state, &meta, None).expect("export");
        let (back_cfg, back) = load_model(&out).expect("import");
        assert_eq!(back_cfg, cfg);
        let flat: Vec<f32> = back.into_iter().flatten().collect();
        assert_eq!(
            flat.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            state.params.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let read = read_meta(&out).expect("meta");
        assert_eq!(read, meta);
        assert_eq!(read.spec().expect("spec"), spec);
        assert_eq!(read.params_id, params_id(&state.params).to_hex());
        // A second export to the same place is refused and leaves the first.
        let err = write(&out, &cfg, &state, &meta, None).expect_err("overwrote an export");
        assert!(err.to_string().contains("pass a new --out"), "{err}");
        assert_eq!(read_meta(&out).expect("meta"), meta);
        // Nothing but the export is left beside it.
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("ls").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("model")]);
        // Parameters of another shape are refused before anything is written.
        let small = init_params(&cfg, 1).into_iter().flatten().take(10).collect();
        let bad = TrainingState { params: small, ..state };
        assert!(matches!(
            write(&dir.path().join("bad"), &cfg, &bad, &meta, None),
            Err(ExportError::Shape { .. })
        ));
        assert!(!dir.path().join("bad").exists());
    }
}
