//! Built-in datasets, shipped inside the binary: `shakespeare`, about 1.1 MB
//! of public-domain Shakespeare plays (see docs/operations.md for where the
//! text comes from), byte-tokenized into 64 Ki-token shards with the first
//! 64 Ki tokens held out for validation. Its DatasetId is fixed by the text
//! and these settings; `built_in_id` computes it.

use std::collections::HashMap;
use std::sync::OnceLock;

use murmur_protocol::dataset::DatasetManifest;
use murmur_protocol::hash::ShardHash;

use super::build::build_text;
use crate::data::error::DataError;
use crate::data::tokenizer::{ByteTokenizer, TokenizerKind};

/// The text of the built-in `shakespeare` dataset.
pub const SHAKESPEARE_TEXT: &str = include_str!("../../../assets/datasets/shakespeare.txt");
/// Tokens per shard of the built-in `shakespeare` dataset.
pub const SHAKESPEARE_SHARD_TOKENS: u32 = 1 << 16;
/// Names of the built-in datasets.
pub const BUILT_IN: &[&str] = &["shakespeare"];

/// A dataset held in memory.
#[derive(Debug, Clone)]
pub struct MemoryDataset {
    pub manifest: DatasetManifest,
    pub manifest_bytes: Vec<u8>,
    pub shards: HashMap<ShardHash, Vec<u8>>,
}

fn shakespeare() -> Result<MemoryDataset, DataError> {
    let (manifest, sink) = build_text(
        SHAKESPEARE_TEXT,
        &ByteTokenizer,
        TokenizerKind::Byte,
        SHAKESPEARE_SHARD_TOKENS,
        u64::from(SHAKESPEARE_SHARD_TOKENS),
    )?;
    Ok(MemoryDataset {
        manifest_bytes: manifest.encode(),
        manifest,
        shards: sink.shards.into_iter().collect(),
    })
}

/// The built-in dataset called `name`, or `None` when there is none.
pub fn built_in(name: &str) -> Option<Result<&'static MemoryDataset, DataError>> {
    static SHAKESPEARE: OnceLock<Result<MemoryDataset, String>> = OnceLock::new();
    match name {
        "shakespeare" => Some(
            SHAKESPEARE
                .get_or_init(|| shakespeare().map_err(|e| e.to_string()))
                .as_ref()
                .map_err(|e| DataError::BadDataset { what: name.into(), reason: e.clone() }),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::dataset::Split;
    use murmur_protocol::hash::shard_hash_of;

    #[test]
    fn shakespeare_is_built_in_and_stable() {
        assert_eq!(SHAKESPEARE_TEXT.len(), 1_115_366);
        let d = built_in("shakespeare").expect("known").expect("builds");
        assert_eq!(d.manifest.tokens(Split::Val), 65_536);
        assert_eq!(d.manifest.tokens(Split::Train), 1_115_366 - 65_536);
        assert_eq!(d.manifest.train.len(), 17);
        for (hash, bytes) in &d.shards {
            assert_eq!(shard_hash_of(bytes), *hash);
        }
        assert_eq!(shakespeare().expect("builds").manifest.id(), d.manifest.id());
        assert!(built_in("hamlet").is_none());
    }
}
