//! A dataset's own tokenizer: a Hugging Face `tokenizer.json`, trained here
//! as a byte-level BPE (`murmur data add --tokenizer bpe:VOCAB`) or read from
//! a file the user brings (`--tokenizer path/to/tokenizer.json`), run through
//! the `tokenizers` crate so murmur and transformers tokenize alike.
//!
//! The file's bytes are what a dataset names (their TokenizerHash is in the
//! manifest), so a tokenizer is always held with its exact bytes. A trained
//! tokenizer has `<|endoftext|>` as id 0 (placed between documents), the 256
//! byte symbols next, then the merges: every text encodes without unknowns.

use std::collections::HashSet;
use std::sync::Arc;

use murmur_protocol::dataset::{DatasetTokenizer, MAX_TOKENIZER_BYTES, MAX_TOKENIZER_VOCAB};
use murmur_protocol::hash::{tokenizer_hash_of, TokenizerHash};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::AddedToken;

use super::error::DataError;
use super::tokenizer::Tokenizer;

/// The end-of-text token a trained tokenizer has (id 0).
pub const BPE_EOT: &str = "<|endoftext|>";
/// End-of-text tokens recognised in a tokenizer brought from elsewhere, in order.
const EOT_NAMES: [&str; 4] = [BPE_EOT, "</s>", "<|end_of_text|>", "<eos>"];
/// The smallest vocabulary `bpe:VOCAB` trains: end-of-text and the 256 bytes.
pub const MIN_BPE_VOCAB: u32 = 257;

/// A tokenizer.json and the tokenizer it describes.
#[derive(Clone)]
pub struct BpeTokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    json: Arc<[u8]>,
    hash: TokenizerHash,
    vocab: u32,
    /// The end-of-text token's id and text.
    eot: Option<(u32, &'static str)>,
}

impl std::fmt::Debug for BpeTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpeTokenizer").field("vocab", &self.vocab).field("hash", &self.hash).finish()
    }
}

fn bad(what: &str, reason: impl Into<String>) -> DataError {
    DataError::BadTokenizer { what: what.to_string(), reason: reason.into() }
}

impl BpeTokenizer {
    /// Train a byte-level BPE of `vocab` ids on `texts` (each a piece of
    /// the corpus; documents are not merged across pieces).
    pub fn train<I>(texts: I, vocab: u32) -> Result<Self, DataError>
    where
        I: Iterator + Send,
        I::Item: AsRef<str> + Send,
    {
        if !(MIN_BPE_VOCAB..=MAX_TOKENIZER_VOCAB).contains(&vocab) {
            return Err(bad(
                &format!("bpe:{vocab}"),
                format!("the vocabulary must be in {MIN_BPE_VOCAB}..={MAX_TOKENIZER_VOCAB} (end-of-text, 256 bytes, then merges; token shards hold u16 ids)"),
            ));
        }
        let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
        let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
            .vocab_size(vocab as usize)
            .min_frequency(0)
            .show_progress(false)
            .special_tokens(vec![AddedToken::from(BPE_EOT, true)])
            .initial_alphabet(alphabet)
            .build()
            .into();
        let mut tokenizer = tokenizers::Tokenizer::new(BPE::default());
        tokenizer
            .with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)))
            .with_post_processor(Some(ByteLevel::default().trim_offsets(false)))
            .with_decoder(Some(ByteLevel::default()));
        tokenizer.train(&mut trainer, texts).map_err(|e| bad(&format!("bpe:{vocab}"), e.to_string()))?;
        let json = tokenizer.to_string(false).map_err(|e| bad(&format!("bpe:{vocab}"), e.to_string()))?;
        Self::from_json(json.as_bytes(), "the trained tokenizer")
    }

    /// Read a tokenizer.json's bytes; `what` names them in errors.
    pub fn from_json(json: &[u8], what: &str) -> Result<Self, DataError> {
        if json.is_empty() || json.len() > MAX_TOKENIZER_BYTES as usize {
            return Err(bad(
                what,
                format!("a tokenizer.json holds 1..={MAX_TOKENIZER_BYTES} bytes, this one {}", json.len()),
            ));
        }
        let mut inner = tokenizers::Tokenizer::from_bytes(json).map_err(|e| {
            bad(what, format!("not a Hugging Face tokenizer.json ({e}); give the file `tokenizer.json` of a tokenizer or train one with `--tokenizer bpe:VOCAB`"))
        })?;
        // murmur tokenizes whole documents: a file's truncation would drop
        // text and its padding would add tokens (or ask for any length).
        inner
            .with_truncation(None)
            .map_err(|e| bad(what, format!("its truncation cannot be turned off ({e})")))?
            .with_padding(None);
        let vocab = inner.get_vocab_size(true);
        if vocab == 0 || vocab > MAX_TOKENIZER_VOCAB as usize {
            return Err(bad(
                what,
                format!("its vocabulary has {vocab} tokens; murmur's token shards hold at most {MAX_TOKENIZER_VOCAB} (train a smaller one with `--tokenizer bpe:VOCAB`)"),
            ));
        }
        // Ids must be exactly 0..vocab: a model's embedding has one row per id.
        let top = inner.get_vocab(true).into_values().max().unwrap_or(0);
        if top as usize + 1 != vocab {
            return Err(bad(
                what,
                format!("its {vocab} token ids are not 0..{vocab} (the largest is {top})"),
            ));
        }
        let eot = EOT_NAMES.iter().find_map(|&name| Some((inner.token_to_id(name)?, name)));
        Ok(Self {
            inner: Arc::new(inner),
            json: json.into(),
            hash: tokenizer_hash_of(json),
            vocab: vocab as u32,
            eot,
        })
    }

    /// A dataset's own tokenizer from the tokenizer.json `json` its manifest
    /// names as `named` (None for the built-in tokenizers); refused when the
    /// file is missing or not the one named.
    pub fn of_dataset(
        named: DatasetTokenizer,
        json: Option<&[u8]>,
        what: &str,
    ) -> Result<Option<Self>, DataError> {
        if !matches!(named, DatasetTokenizer::Bpe { .. }) {
            return Ok(None);
        }
        let json =
            json.ok_or_else(|| bad(what, "the dataset names its own tokenizer.json, which is missing"))?;
        let bpe = Self::from_json(json, what)?;
        bpe.check_named(named, what)?;
        Ok(Some(bpe))
    }

    /// The tokenizer.json bytes.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// What a dataset manifest says of this tokenizer.
    pub fn dataset_tokenizer(&self) -> DatasetTokenizer {
        DatasetTokenizer::Bpe { vocab: self.vocab, json_len: self.json.len() as u32, hash: self.hash }
    }

    /// The end-of-text token's text.
    pub fn eot_text(&self) -> Option<&'static str> {
        self.eot.map(|(_, name)| name)
    }

    /// The token a byte-level tokenizer gives `text`, if exactly one.
    #[cfg(test)]
    pub fn token_of(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// Check that these bytes are the file a manifest names.
    pub fn check_named(&self, named: DatasetTokenizer, what: &str) -> Result<(), DataError> {
        if named != self.dataset_tokenizer() {
            return Err(bad(
                what,
                format!(
                    "it is not the tokenizer the dataset names ({} ids, {} bytes, hash {}; the file has {} ids, {} bytes, hash {}); the copy is corrupt or from another dataset",
                    named.vocab_size(),
                    match named {
                        DatasetTokenizer::Bpe { json_len, .. } => json_len,
                        _ => 0,
                    },
                    match named {
                        DatasetTokenizer::Bpe { hash, .. } => hash.to_hex(),
                        _ => String::from("none"),
                    },
                    self.vocab,
                    self.json.len(),
                    self.hash.to_hex()
                ),
            ));
        }
        Ok(())
    }
}

impl Tokenizer for BpeTokenizer {
    fn vocab_size(&self) -> usize {
        self.vocab as usize
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        self.try_encode(text).unwrap_or_default()
    }

    fn try_encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.inner.encode(text, false).map(|e| e.get_ids().to_vec()).map_err(|e| e.to_string())
    }

    fn decode(&self, ids: &[u32]) -> String {
        let known: Vec<u32> = ids.iter().map(|&id| if id < self.vocab { id } else { 0 }).collect();
        self.inner.decode(&known, false).unwrap_or_else(|_| "\u{fffd}".repeat(ids.len()))
    }

    fn eot(&self) -> Option<u32> {
        self.eot.map(|(id, _)| id)
    }

    fn name(&self) -> &str {
        "bpe"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n";

    fn trained(vocab: u32) -> BpeTokenizer {
        BpeTokenizer::train(std::iter::repeat_n(TEXT, 20), vocab).unwrap()
    }

    #[test]
    fn a_trained_bpe_round_trips_text_and_merges_frequent_words() {
        let t = trained(300);
        assert_eq!(t.vocab_size(), 300);
        assert_eq!(t.eot(), Some(0));
        for text in [TEXT, "naïve café 日本 🚀\ttabs", ""] {
            assert_eq!(t.decode(&t.encode(text)), text, "{text:?}");
        }
        let ids = t.encode(TEXT);
        assert!(ids.len() * 2 < TEXT.len(), "{} tokens for {} bytes", ids.len(), TEXT.len());
        assert!(ids.iter().all(|&id| id < 300));
        assert!(t.token_of("ĠCitizen").is_some(), "a frequent word is one token");
    }

    #[test]
    fn training_is_deterministic_and_the_file_names_it() {
        let (a, b) = (trained(290), trained(290));
        assert_eq!(a.json(), b.json());
        assert_eq!(a.dataset_tokenizer(), b.dataset_tokenizer());
        let back = BpeTokenizer::from_json(a.json(), "copy").unwrap();
        assert_eq!(back.encode(TEXT), a.encode(TEXT));
        back.check_named(a.dataset_tokenizer(), "copy").unwrap();
        let err = back.check_named(trained(280).dataset_tokenizer(), "copy").unwrap_err();
        assert!(err.to_string().contains("not the tokenizer the dataset names"), "{err}");
    }

    #[test]
    fn bad_vocabularies_and_files_are_clear_errors() {
        for vocab in [0, 256, 70_000] {
            let err = BpeTokenizer::train(std::iter::once(TEXT), vocab).unwrap_err();
            assert!(err.to_string().contains("257..=65536"), "{err}");
        }
        for (json, want) in [
            (&b""[..], "1..="),
            (b"{not json", "not a Hugging Face tokenizer.json"),
            (b"{\"model\":{\"type\":\"BPE\"}}", "not a Hugging Face tokenizer.json"),
        ] {
            let err = BpeTokenizer::from_json(json, "file").unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    #[test]
    fn a_tokenizer_with_a_gap_in_its_ids_is_refused() {
        let json = trained(300).json().to_vec();
        let text = String::from_utf8(json).unwrap().replace("\"<|endoftext|>\":0", "\"<|endoftext|>\":9000");
        let text = text.replace("\"id\":0,", "\"id\":9000,");
        let err = BpeTokenizer::from_json(text.as_bytes(), "gap").unwrap_err();
        assert!(err.to_string().contains("are not 0..300"), "{err}");
    }
}
