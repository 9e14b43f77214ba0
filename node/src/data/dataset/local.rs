//! A dataset the node holds from its own command line (`--dataset DIR` or a
//! built-in name). Only the command line names local data: a RunSpec or
//! anything else from a peer names a dataset by its hash.

use std::path::Path;

use murmur_protocol::dataset::DatasetManifest;
use murmur_protocol::hash::{dataset_id_of, DatasetId, ShardHash};

use super::builtin::{built_in, MemoryDataset, BUILT_IN};
use super::dir::DatasetDir;
use crate::data::error::DataError;

/// A local copy of a dataset.
#[derive(Debug, Clone)]
pub enum LocalDataset {
    Dir(Box<DatasetDir>),
    BuiltIn(&'static MemoryDataset),
}

impl LocalDataset {
    /// A built-in name (`shakespeare`) or a dataset directory.
    pub fn open(arg: &str) -> Result<Self, DataError> {
        if let Some(d) = built_in(arg) {
            return Ok(LocalDataset::BuiltIn(d?));
        }
        let path = Path::new(arg);
        if !path.exists() {
            return Err(DataError::BadDataset {
                what: arg.to_string(),
                reason: format!(
                    "no such directory and no built-in dataset of that name (built in: {}); make one with `murmur data add`",
                    BUILT_IN.join(", ")
                ),
            });
        }
        Ok(LocalDataset::Dir(Box::new(DatasetDir::open(path)?)))
    }

    pub fn manifest(&self) -> &DatasetManifest {
        match self {
            LocalDataset::Dir(d) => &d.manifest,
            LocalDataset::BuiltIn(m) => &m.manifest,
        }
    }

    pub fn manifest_bytes(&self) -> &[u8] {
        match self {
            LocalDataset::Dir(d) => &d.manifest_bytes,
            LocalDataset::BuiltIn(m) => &m.manifest_bytes,
        }
    }

    pub fn id(&self) -> DatasetId {
        dataset_id_of(self.manifest_bytes())
    }

    /// The dataset's own tokenizer.json, when it has one (checked when opened).
    pub fn tokenizer_json(&self) -> Option<&[u8]> {
        match self {
            LocalDataset::Dir(d) => d.tokenizer.as_ref().map(|t| t.json()),
            LocalDataset::BuiltIn(m) => m.tokenizer.as_deref(),
        }
    }

    /// The RunSpec `data` string naming this dataset.
    pub fn data_ref(&self) -> String {
        murmur_protocol::DataRef::Dataset { id: self.id(), manifest_len: self.manifest_bytes().len() as u32 }
            .to_string()
    }

    /// The bytes of shard `hash`, checked against it.
    pub fn read_shard(&self, hash: &ShardHash) -> Result<Vec<u8>, DataError> {
        match self {
            LocalDataset::Dir(d) => d.read_shard(hash),
            LocalDataset::BuiltIn(m) => m.shards.get(hash).cloned().ok_or_else(|| DataError::BadDataset {
                what: "built-in".into(),
                reason: "shard missing from the built-in dataset".into(),
            }),
        }
    }
}
