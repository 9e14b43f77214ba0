//! A dataset directory, as `murmur data add --out DIR` writes it and
//! `--dataset DIR` reads it: `DIR/manifest` (the manifest's canonical bytes),
//! `DIR/shards/<ShardHash hex>` (each shard's u16 tokens) and, for a dataset
//! with its own tokenizer, `DIR/tokenizer.json`. Every file is written to a
//! temporary name, fsynced and renamed; every shard is checked against its
//! hash when read, the tokenizer when the directory is opened.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use murmur_protocol::dataset::{DatasetManifest, DatasetTokenizer};
use murmur_protocol::hash::{hex, shard_hash_of, DatasetId, ShardHash};

use super::build::ShardSink;
use crate::data::bpe::BpeTokenizer;
use crate::data::error::DataError;
use crate::data::tokenizer::{named_tokenizer, Tokenizer};

/// File name of the manifest inside a dataset directory.
pub const MANIFEST_FILE: &str = "manifest";
/// Folder of the shards inside a dataset directory.
pub const SHARDS_DIR: &str = "shards";
/// File name of a dataset's own tokenizer inside a dataset directory.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = File::create(&tmp).map_err(|e| DataError::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| DataError::io(&tmp, e))?;
    f.sync_all().map_err(|e| DataError::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| DataError::io(path, e))
}

/// Writes shards into `DIR/shards/`.
#[derive(Debug)]
pub struct DirSink {
    dir: PathBuf,
}

impl DirSink {
    /// Create (or reuse) the dataset directory `dir`.
    pub fn create(dir: &Path) -> Result<Self, DataError> {
        let shards = dir.join(SHARDS_DIR);
        fs::create_dir_all(&shards).map_err(|e| DataError::io(&shards, e))?;
        Ok(Self { dir: dir.to_path_buf() })
    }

    /// Write the manifest last (a directory with a manifest is complete).
    pub fn finish(self, manifest: &DatasetManifest) -> Result<DatasetId, DataError> {
        let bytes = manifest.encode();
        write_atomic(&self.dir.join(MANIFEST_FILE), &bytes)?;
        Ok(manifest.id())
    }
}

impl ShardSink for DirSink {
    fn put(&mut self, hash: &ShardHash, bytes: Vec<u8>) -> Result<(), DataError> {
        let path = self.dir.join(SHARDS_DIR).join(hex(&hash.0));
        if path.is_file() {
            return Ok(());
        }
        write_atomic(&path, &bytes)
    }

    fn put_tokenizer(&mut self, json: &[u8]) -> Result<(), DataError> {
        write_atomic(&self.dir.join(TOKENIZER_FILE), json)
    }
}

/// `dir/tokenizer.json`, which must be the file `named` (of `json_len` bytes).
fn read_tokenizer(dir: &Path, named: DatasetTokenizer, json_len: u32) -> Result<BpeTokenizer, DataError> {
    let path = dir.join(TOKENIZER_FILE);
    let what = path.display().to_string();
    let len = fs::metadata(&path).map_err(|e| DataError::io(&path, e))?.len();
    if len != u64::from(json_len) {
        return Err(DataError::BadTokenizer {
            what,
            reason: format!("{len} bytes where the manifest names a file of {json_len}; the copy is corrupt, rebuild it with `murmur data add`"),
        });
    }
    let tokenizer = BpeTokenizer::from_json(&fs::read(&path).map_err(|e| DataError::io(&path, e))?, &what)?;
    tokenizer.check_named(named, &what)?;
    Ok(tokenizer)
}

/// A dataset directory opened for reading.
#[derive(Debug, Clone)]
pub struct DatasetDir {
    pub dir: PathBuf,
    pub manifest: DatasetManifest,
    pub manifest_bytes: Vec<u8>,
    /// The dataset's own tokenizer, when the manifest names one (checked).
    pub tokenizer: Option<BpeTokenizer>,
}

impl DatasetDir {
    /// Open `dir` and decode its manifest (shards are checked when read).
    pub fn open(dir: &Path) -> Result<Self, DataError> {
        let path = dir.join(MANIFEST_FILE);
        let meta = fs::metadata(&path).map_err(|e| DataError::io(&path, e))?;
        if meta.len() > u64::from(murmur_protocol::spec::MAX_MANIFEST_BYTES) {
            return Err(DataError::BadDataset {
                what: dir.display().to_string(),
                reason: "the manifest is larger than any valid manifest".into(),
            });
        }
        let bytes = fs::read(&path).map_err(|e| DataError::io(&path, e))?;
        let manifest = DatasetManifest::decode(&bytes).map_err(|e| DataError::BadDataset {
            what: dir.display().to_string(),
            reason: format!(
                "{MANIFEST_FILE} is not a valid dataset manifest ({e}); rebuild it with `murmur data add`"
            ),
        })?;
        let tokenizer = match manifest.tokenizer {
            DatasetTokenizer::Bpe { json_len, .. } => {
                Some(read_tokenizer(dir, manifest.tokenizer, json_len)?)
            }
            DatasetTokenizer::Byte | DatasetTokenizer::Gpt2 => None,
        };
        Ok(Self { dir: dir.to_path_buf(), manifest, manifest_bytes: bytes, tokenizer })
    }

    /// The dataset's tokenizer (built in, or its own).
    pub fn open_tokenizer(&self) -> Result<std::sync::Arc<dyn Tokenizer>, DataError> {
        match &self.tokenizer {
            // Checked against the manifest when the directory was opened.
            Some(own) => Ok(std::sync::Arc::new(own.clone())),
            None => named_tokenizer(self.manifest.tokenizer, None, &self.dir.display().to_string()),
        }
    }

    pub fn id(&self) -> DatasetId {
        murmur_protocol::hash::dataset_id_of(&self.manifest_bytes)
    }

    /// The bytes of shard `hash`, checked against it.
    pub fn read_shard(&self, hash: &ShardHash) -> Result<Vec<u8>, DataError> {
        let path = self.dir.join(SHARDS_DIR).join(hex(&hash.0));
        let bytes = fs::read(&path).map_err(|e| DataError::io(&path, e))?;
        if shard_hash_of(&bytes) != *hash {
            return Err(DataError::BadDataset {
                what: self.dir.display().to_string(),
                reason: format!(
                    "shard {} does not match its hash; the copy is corrupt, rebuild it",
                    hex(&hash.0)
                ),
            });
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::dataset::build::{build, BuildOptions};
    use crate::data::tokenizer::{TokenizerChoice, TokenizerKind};

    #[test]
    fn a_built_directory_reopens_and_checks_its_shards() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        fs::write(&input, "to be or not to be\n".repeat(2000)).unwrap();
        let out = dir.path().join("ds");
        let mut sink = DirSink::create(&out).unwrap();
        let opts = BuildOptions {
            tokenizer: TokenizerChoice::Kind(TokenizerKind::Byte),
            shard_tokens: 4096,
            val_tokens: None,
        };
        let (manifest, _) = build(&input, opts, &mut sink, &|_| {}).unwrap();
        let id = sink.finish(&manifest).unwrap();
        let opened = DatasetDir::open(&out).unwrap();
        assert_eq!(opened.id(), id);
        let first = opened.manifest.train[0];
        assert_eq!(opened.read_shard(&first.hash).unwrap().len() as u64, first.byte_len());
        // A shard whose bytes changed is refused.
        let path = out.join(SHARDS_DIR).join(hex(&first.hash.0));
        let mut bytes = fs::read(&path).unwrap();
        bytes[0] ^= 1;
        fs::write(&path, bytes).unwrap();
        let err = opened.read_shard(&first.hash).unwrap_err();
        assert!(err.to_string().contains("does not match its hash"), "{err}");
        // A damaged manifest is a clear error.
        fs::write(out.join(MANIFEST_FILE), b"\x01\x07junk").unwrap();
        let err = DatasetDir::open(&out).unwrap_err();
        assert!(err.to_string().contains("not a valid dataset manifest"), "{err}");
    }

    #[test]
    fn a_directory_with_its_own_tokenizer_checks_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        fs::write(&input, &crate::data::dataset::builtin::SHAKESPEARE_TEXT[..40_000]).unwrap();
        let out = dir.path().join("ds");
        let mut sink = DirSink::create(&out).unwrap();
        let opts =
            BuildOptions { tokenizer: TokenizerChoice::TrainBpe(300), shard_tokens: 4096, val_tokens: None };
        let (manifest, _) = build(&input, opts, &mut sink, &|_| {}).unwrap();
        sink.finish(&manifest).unwrap();
        let opened = DatasetDir::open(&out).unwrap();
        let tokenizer = opened.open_tokenizer().unwrap();
        assert_eq!((tokenizer.name(), tokenizer.vocab_size()), ("bpe", 300));
        assert_eq!(tokenizer.decode(&tokenizer.encode("to be")), "to be");
        assert_eq!(opened.manifest.tokenizer.vocab_size(), 300);
        // A changed file, or none, is refused before anything trains on it.
        let path = out.join(TOKENIZER_FILE);
        let json = fs::read(&path).unwrap();
        let changed =
            String::from_utf8(json.clone()).unwrap().replacen("\"dropout\":null", "\"dropout\":0.00", 1);
        assert_eq!(changed.len(), json.len());
        fs::write(&path, changed).unwrap();
        let err = DatasetDir::open(&out).unwrap_err();
        assert!(err.to_string().contains("not the tokenizer the dataset names"), "{err}");
        fs::write(&path, &json[..json.len() - 1]).unwrap();
        let err = DatasetDir::open(&out).unwrap_err();
        assert!(err.to_string().contains("where the manifest names a file of"), "{err}");
        fs::remove_file(&path).unwrap();
        assert!(matches!(DatasetDir::open(&out), Err(DataError::MissingPath { .. })));
    }
}
