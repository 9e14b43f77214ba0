//! The tokenizer an export carries (`ExportTokenizer`): murmur's built-in
//! tokenizers written as Hugging Face `tokenizer.json` (the `tokenizers`
//! library's format), or a dataset's own tokenizer.json byte for byte, each
//! with a `tokenizer_config.json`, so that `transformers.AutoTokenizer` reads
//! an exported model's tokens as murmur does.
//!
//! Both are byte-level BPE models: each byte is GPT-2's printable stand-in
//! for it (`byte_to_unicode`). The byte tokenizer is that alphabet in byte
//! order with no merges and no pre-tokenizer split (token id = byte); GPT-2
//! is its embedded `encoder.json` and `vocab.bpe` with GPT-2's pre-tokenizer
//! regex and `<|endoftext|>` as a special token.

use serde_json::{json, Map, Value};

use murmur_protocol::dataset::DatasetTokenizer;

use super::bpe::BpeTokenizer;
use super::error::DataError;
use super::gpt2::{byte_to_unicode, ENCODER_JSON, GPT2_EOT, VOCAB_BPE};
use super::tokenizer::{Tokenizer, TokenizerKind};

/// The tokenizer written beside an exported model.
#[derive(Clone, Debug)]
pub enum ExportTokenizer {
    BuiltIn(TokenizerKind),
    /// A dataset's own tokenizer.json, written as it is.
    Own(BpeTokenizer),
}

impl ExportTokenizer {
    /// The tokenizer a dataset names (`json`: its own tokenizer.json).
    pub fn of_dataset(named: DatasetTokenizer, json: Option<&[u8]>) -> Result<Self, DataError> {
        Ok(match (named, BpeTokenizer::of_dataset(named, json, "of the dataset")?) {
            (_, Some(bpe)) => ExportTokenizer::Own(bpe),
            (DatasetTokenizer::Gpt2, None) => ExportTokenizer::BuiltIn(TokenizerKind::Gpt2),
            (_, None) => ExportTokenizer::BuiltIn(TokenizerKind::Byte),
        })
    }

    /// Without the dataset at hand: the built-in tokenizer a model of
    /// `vocab_size` tokens was made for, if any.
    pub fn for_vocabulary(vocab_size: usize) -> Option<Self> {
        TokenizerKind::for_vocabulary(vocab_size).map(ExportTokenizer::BuiltIn)
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            ExportTokenizer::BuiltIn(kind) => kind.vocab_size(),
            ExportTokenizer::Own(bpe) => bpe.vocab_size(),
        }
    }

    /// The end-of-text id.
    pub fn eot(&self) -> Option<u32> {
        match self {
            ExportTokenizer::BuiltIn(kind) => kind.eot(),
            ExportTokenizer::Own(bpe) => bpe.eot(),
        }
    }

    /// `tokenizer.json`'s bytes.
    pub fn tokenizer_json(&self) -> Result<Vec<u8>, DataError> {
        match self {
            ExportTokenizer::BuiltIn(kind) => serde_json::to_vec_pretty(&tokenizer_json(*kind)?)
                .map_err(|e| DataError::TokenizerAsset { reason: e.to_string() }),
            ExportTokenizer::Own(bpe) => Ok(bpe.json().to_vec()),
        }
    }

    /// `tokenizer_config.json`.
    pub fn tokenizer_config(&self) -> Value {
        let eot = match self {
            ExportTokenizer::BuiltIn(TokenizerKind::Gpt2) => Some("<|endoftext|>"),
            ExportTokenizer::BuiltIn(TokenizerKind::Byte) => None,
            ExportTokenizer::Own(bpe) => bpe.eot_text(),
        };
        tokenizer_config(eot)
    }
}

fn byte_level(use_regex: bool) -> Value {
    json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex })
}

fn bpe(vocab: Value, merges: Vec<Value>) -> Value {
    json!({
        "type": "BPE",
        "dropout": null,
        "unk_token": null,
        "continuing_subword_prefix": null,
        "end_of_word_suffix": null,
        "fuse_unk": false,
        "byte_fallback": false,
        "ignore_merges": false,
        "vocab": vocab,
        "merges": merges
    })
}

/// `tokenizer.json` for `kind`.
fn tokenizer_json(kind: TokenizerKind) -> Result<Value, DataError> {
    let (model, added, use_regex) = match kind {
        TokenizerKind::Byte => {
            let vocab: Map<String, Value> =
                byte_to_unicode().iter().enumerate().map(|(b, c)| (c.to_string(), json!(b))).collect();
            (bpe(Value::Object(vocab), Vec::new()), Vec::new(), false)
        }
        TokenizerKind::Gpt2 => {
            let vocab: Value = serde_json::from_str(ENCODER_JSON)
                .map_err(|e| DataError::TokenizerAsset { reason: format!("encoder.json: {e}") })?;
            let merges = VOCAB_BPE.lines().skip(1).filter(|l| !l.is_empty()).map(|l| json!(l)).collect();
            let eot = json!({
                "id": GPT2_EOT, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": true, "special": true
            });
            (bpe(vocab, merges), vec![eot], true)
        }
    };
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level(use_regex),
        "post_processor": null,
        "decoder": byte_level(use_regex),
        "model": model
    }))
}

/// `tokenizer_config.json` with end-of-text `eot`: the generic fast
/// tokenizer, so that transformers adds no token of its own (a Llama
/// tokenizer class would put a beginning-of-sequence token in front).
fn tokenizer_config(eot: Option<&str>) -> Value {
    json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1_000_000_000_000_000_000u64,
        "clean_up_tokenization_spaces": false,
        "bos_token": eot,
        "eos_token": eot
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_vocabulary_is_every_byte_in_order() {
        let j = tokenizer_json(TokenizerKind::Byte).expect("json");
        let vocab = j["model"]["vocab"].as_object().expect("vocab");
        assert_eq!(vocab.len(), 256);
        let ids: std::collections::BTreeSet<u64> = vocab.values().filter_map(Value::as_u64).collect();
        assert_eq!(ids, (0..256).collect());
        assert_eq!(vocab["A"], json!(u32::from(b'A')));
        assert_eq!(j["model"]["merges"], json!([]));
    }

    #[test]
    fn gpt2_has_its_merges_and_end_of_text() {
        let j = tokenizer_json(TokenizerKind::Gpt2).expect("json");
        assert_eq!(j["model"]["vocab"].as_object().map(Map::len), Some(50257));
        assert_eq!(j["model"]["merges"].as_array().map(Vec::len), Some(50000));
        assert_eq!(j["model"]["merges"][0], json!("Ġ t"));
        assert_eq!(j["added_tokens"][0]["id"], json!(GPT2_EOT));
    }
}
