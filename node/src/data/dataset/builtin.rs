//! Built-in datasets, shipped inside the binary: `shakespeare`, about 1.1 MB
//! of public-domain Shakespeare plays (see docs/operations.md for where the
//! text comes from), byte-tokenized into 64 Ki-token shards with the first
//! 64 Ki tokens held out for validation; and `shakespeare-bpe`, the same
//! text in a byte-level BPE of 4,096 ids trained on it (its tokenizer.json
//! travels with it), in 16 Ki-token shards with the first 16 Ki held out.
//! Their DatasetIds are fixed by the text and these settings (BPE training
//! is deterministic).

use std::collections::HashMap;
use std::sync::OnceLock;

use murmur_protocol::dataset::DatasetManifest;
use murmur_protocol::hash::ShardHash;

use super::build::{build_text, pieces};
use crate::data::bpe::BpeTokenizer;
use crate::data::error::DataError;
use crate::data::tokenizer::ByteTokenizer;

/// The text of the built-in `shakespeare` dataset.
pub const SHAKESPEARE_TEXT: &str = include_str!("../../../assets/datasets/shakespeare.txt");
/// Tokens per shard of the built-in `shakespeare` dataset.
pub const SHAKESPEARE_SHARD_TOKENS: u32 = 1 << 16;
/// Tokens per shard (and held out) of the built-in `shakespeare-bpe`.
pub const SHAKESPEARE_BPE_SHARD_TOKENS: u32 = 1 << 14;
/// Vocabulary of the built-in `shakespeare-bpe`.
pub const SHAKESPEARE_BPE_VOCAB: u32 = 4096;
/// Names of the built-in datasets.
pub const BUILT_IN: &[&str] = &["shakespeare", "shakespeare-bpe"];

/// A dataset held in memory.
#[derive(Debug, Clone)]
pub struct MemoryDataset {
    pub manifest: DatasetManifest,
    pub manifest_bytes: Vec<u8>,
    pub shards: HashMap<ShardHash, Vec<u8>>,
    /// The dataset's own tokenizer.json, when it has one.
    pub tokenizer: Option<Vec<u8>>,
}

fn shakespeare() -> Result<MemoryDataset, DataError> {
    let (manifest, sink) = build_text(
        SHAKESPEARE_TEXT,
        &ByteTokenizer,
        murmur_protocol::DatasetTokenizer::Byte,
        SHAKESPEARE_SHARD_TOKENS,
        u64::from(SHAKESPEARE_SHARD_TOKENS),
    )?;
    Ok(MemoryDataset {
        manifest_bytes: manifest.encode(),
        manifest,
        shards: sink.shards.into_iter().collect(),
        tokenizer: None,
    })
}

fn shakespeare_bpe() -> Result<MemoryDataset, DataError> {
    let bpe = BpeTokenizer::train(pieces(SHAKESPEARE_TEXT), SHAKESPEARE_BPE_VOCAB)?;
    let (manifest, sink) = build_text(
        SHAKESPEARE_TEXT,
        &bpe,
        bpe.dataset_tokenizer(),
        SHAKESPEARE_BPE_SHARD_TOKENS,
        u64::from(SHAKESPEARE_BPE_SHARD_TOKENS),
    )?;
    Ok(MemoryDataset {
        manifest_bytes: manifest.encode(),
        manifest,
        shards: sink.shards.into_iter().collect(),
        tokenizer: Some(bpe.json().to_vec()),
    })
}

/// The built-in dataset called `name`, or `None` when there is none.
pub fn built_in(name: &str) -> Option<Result<&'static MemoryDataset, DataError>> {
    static SHAKESPEARE: OnceLock<Result<MemoryDataset, String>> = OnceLock::new();
    static SHAKESPEARE_BPE: OnceLock<Result<MemoryDataset, String>> = OnceLock::new();
    let (cell, make): (_, fn() -> Result<MemoryDataset, DataError>) = match name {
        "shakespeare" => (&SHAKESPEARE, shakespeare),
        "shakespeare-bpe" => (&SHAKESPEARE_BPE, shakespeare_bpe),
        _ => return None,
    };
    Some(
        cell.get_or_init(|| make().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| DataError::BadDataset { what: name.into(), reason: e.clone() }),
    )
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

    #[test]
    fn shakespeare_bpe_is_built_in_with_its_tokenizer() {
        let d = built_in("shakespeare-bpe").expect("known").expect("builds");
        let json = d.tokenizer.as_deref().expect("its tokenizer.json");
        let tokenizer =
            crate::data::named_tokenizer(d.manifest.tokenizer, Some(json), "built in").expect("named");
        assert_eq!(tokenizer.vocab_size(), SHAKESPEARE_BPE_VOCAB as usize);
        assert_eq!(d.manifest.tokens(Split::Val), u64::from(SHAKESPEARE_BPE_SHARD_TOKENS));
        let all = d.manifest.tokens(Split::Train) + d.manifest.tokens(Split::Val);
        // Shakespeare's English: more than three bytes a token.
        assert!(all * 3 < SHAKESPEARE_TEXT.len() as u64, "{all} tokens");
        assert_eq!(shakespeare_bpe().expect("builds").manifest.id(), d.manifest.id(), "deterministic");
    }
}
