//! murmur's own checkpoint file: model shape, parameters, AdamW moments and
//! training position, sealed with a blake3 checksum so a truncated or corrupt
//! file is recognised before anything is loaded.
//!
//! Layout (all integers little-endian):
//! ```text
//! magic    8 bytes  "MURMURCK"
//! version  u32      1
//! meta_len u64      length of the JSON metadata (at most 16 MiB)
//! meta     JSON     CheckpointMeta
//! data     f32[]    parameters, then (if has_moments) AdamW m, then v,
//!                   each in canonical tensor order
//! checksum 32 bytes blake3 of everything above
//! ```
//! Files are written to a temporary name, fsynced, then renamed into place.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::{param_specs, ModelConfig};

const MAGIC: &[u8; 8] = b"MURMURCK";
const VERSION: u32 = 1;
const MAX_META: u64 = 16 << 20;

/// What a checkpoint says about itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub model: ModelConfig,
    /// Optimizer steps completed.
    pub step: u64,
    pub has_moments: bool,
    /// Free-form training state (options, data position) owned by the trainer.
    pub train_state: serde_json::Value,
}

/// Tensors in canonical order.
pub type Tensors = Vec<Vec<f32>>;

/// A loaded checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub meta: CheckpointMeta,
    pub params: Vec<Vec<f32>>,
    /// AdamW (m, v) when saved.
    pub moments: Option<(Tensors, Tensors)>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot open checkpoint {path}: {source}; check the path (checkpoints are written as <dir>/ckpt-<step>.murmur)")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot write checkpoint {path}: {source}; check free disk space and permissions")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a murmur checkpoint (bad magic bytes); pass a file written by `murmur train`")]
    BadMagic { path: PathBuf },
    #[error(
        "{path} has checkpoint format version {found}; this murmur reads version {VERSION}, upgrade murmur"
    )]
    BadVersion { path: PathBuf, found: u32 },
    #[error("{path} is truncated: {expected} bytes expected, {found} present; it was cut off while being written, use an earlier checkpoint")]
    Truncated { path: PathBuf, expected: u64, found: u64 },
    #[error("{path} is corrupt: its checksum does not match its contents; use an earlier checkpoint")]
    Corrupt { path: PathBuf },
    #[error("{path} has invalid metadata: {reason}; the file is damaged or not from this murmur version")]
    BadMeta { path: PathBuf, reason: String },
}

fn write_f32s(out: &mut Vec<u8>, tensors: &[Vec<f32>]) {
    for t in tensors {
        for v in t {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Writes a checkpoint atomically (temp file, fsync, rename).
pub fn save(path: &Path, ckpt: &Checkpoint) -> Result<(), CheckpointError> {
    let werr = |source| CheckpointError::Write { path: path.to_path_buf(), source };
    let meta = serde_json::to_vec(&ckpt.meta).map_err(|e| werr(std::io::Error::other(e)))?;
    let mut buf = Vec::with_capacity(64 + meta.len() + 12 * ckpt.meta.model.param_count());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    buf.extend_from_slice(&meta);
    write_f32s(&mut buf, &ckpt.params);
    if let Some((m, v)) = &ckpt.moments {
        write_f32s(&mut buf, m);
        write_f32s(&mut buf, v);
    }
    let sum = blake3::hash(&buf);
    buf.extend_from_slice(sum.as_bytes());
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(werr)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(werr)?;
    f.write_all(&buf).map_err(werr)?;
    f.sync_all().map_err(werr)?;
    std::fs::rename(&tmp, path).map_err(werr)?;
    Ok(())
}

/// Reads and fully validates a checkpoint.
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let p = || path.to_path_buf();
    let mut f = File::open(path).map_err(|source| CheckpointError::Open { path: p(), source })?;
    let size = f.metadata().map_err(|source| CheckpointError::Open { path: p(), source })?.len();
    let mut head = [0u8; 20];
    let got = read_up_to(&mut f, &mut head).map_err(|source| CheckpointError::Open { path: p(), source })?;
    if got < 8 || &head[..8] != MAGIC {
        return Err(CheckpointError::BadMagic { path: p() });
    }
    if got < 20 {
        return Err(CheckpointError::Truncated { path: p(), expected: 20, found: size });
    }
    let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    if version != VERSION {
        return Err(CheckpointError::BadVersion { path: p(), found: version });
    }
    let meta_len = u64::from_le_bytes(head[12..20].try_into().expect("8 bytes"));
    if meta_len > MAX_META {
        return Err(CheckpointError::BadMeta {
            path: p(),
            reason: format!("metadata length {meta_len} exceeds 16 MiB"),
        });
    }
    if size < 20 + meta_len + 32 {
        return Err(CheckpointError::Truncated { path: p(), expected: 20 + meta_len + 32, found: size });
    }
    let mut meta_bytes = vec![0u8; meta_len as usize];
    f.read_exact(&mut meta_bytes).map_err(|source| CheckpointError::Open { path: p(), source })?;
    let meta: CheckpointMeta = serde_json::from_slice(&meta_bytes)
        .map_err(|e| CheckpointError::BadMeta { path: p(), reason: e.to_string() })?;
    let m = &meta.model;
    let model = m.checked().map_err(|e| CheckpointError::BadMeta { path: p(), reason: e.to_string() })?;
    let copies: u64 = if meta.has_moments { 3 } else { 1 };
    let data_len = copies * 4 * model.param_count() as u64;
    let expected = 20 + meta_len + data_len + 32;
    if size != expected {
        return Err(CheckpointError::Truncated { path: p(), expected, found: size });
    }
    let mut data = vec![0u8; (data_len + 32) as usize];
    f.read_exact(&mut data).map_err(|source| CheckpointError::Open { path: p(), source })?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(&head);
    hasher.update(&meta_bytes);
    hasher.update(&data[..data_len as usize]);
    if hasher.finalize().as_bytes() != &data[data_len as usize..] {
        return Err(CheckpointError::Corrupt { path: p() });
    }
    let specs = param_specs(&model);
    let mut floats =
        data[..data_len as usize].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let mut take =
        || -> Vec<Vec<f32>> { specs.iter().map(|s| floats.by_ref().take(s.numel()).collect()).collect() };
    let params = take();
    let moments = if meta.has_moments { Some((take(), take())) } else { None };
    Ok(Checkpoint { meta, params, moments })
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::init_params;

    fn sample() -> Checkpoint {
        let model = ModelConfig::new(1, 8, 2, 10, 4).unwrap();
        let params = init_params(&model, 1);
        let m: Vec<Vec<f32>> = params.iter().map(|t| t.iter().map(|x| x * 0.5).collect()).collect();
        let meta =
            CheckpointMeta { model, step: 7, has_moments: true, train_state: serde_json::json!({"a": 1}) };
        Checkpoint { meta, moments: Some((m.clone(), m)), params }
    }

    #[test]
    fn round_trip_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.murmur");
        let c = sample();
        save(&path, &c).unwrap();
        assert_eq!(load(&path).unwrap(), c);
    }

    #[test]
    fn truncated_corrupt_and_foreign_files_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.murmur");
        save(&path, &sample()).unwrap();
        let bytes = std::fs::read(&path).unwrap();

        std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
        let e = load(&path).unwrap_err();
        assert!(matches!(e, CheckpointError::Truncated { .. }), "{e}");
        assert!(e.to_string().contains("truncated"));

        let mut flipped = bytes.clone();
        let mid = flipped.len() - 200;
        flipped[mid] ^= 0x10;
        std::fs::write(&path, &flipped).unwrap();
        let e = load(&path).unwrap_err();
        assert!(matches!(e, CheckpointError::Corrupt { .. }), "{e}");

        std::fs::write(&path, b"hello world, not a checkpoint").unwrap();
        assert!(matches!(load(&path).unwrap_err(), CheckpointError::BadMagic { .. }));

        let mut huge_meta = bytes[..12].to_vec();
        huge_meta.extend_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(&path, &huge_meta).unwrap();
        assert!(matches!(load(&path).unwrap_err(), CheckpointError::BadMeta { .. }));

        let e = load(&dir.path().join("missing.murmur")).unwrap_err();
        assert!(matches!(e, CheckpointError::Open { .. }));
    }
}
