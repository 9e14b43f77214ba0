//! The `Tokenizer` trait, the byte-level tokenizer, `TokenizerKind` (the
//! built-in tokenizers: byte and GPT-2 BPE), `TokenizerChoice` (what
//! `murmur data add --tokenizer` names: one of those, a BPE to train, or a
//! tokenizer.json), and `named_tokenizer`, the tokenizer a dataset names.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use murmur_protocol::dataset::DatasetTokenizer;

use super::bpe::BpeTokenizer;
use super::error::DataError;
use super::gpt2::Gpt2Tokenizer;

/// Turns text into token ids and back.
pub trait Tokenizer: Send + Sync {
    /// Number of distinct token ids (ids are `0..vocab_size`).
    fn vocab_size(&self) -> usize;
    /// Token ids for `text`.
    fn encode(&self, text: &str) -> Vec<u32>;
    /// Token ids for `text`, or why this tokenizer cannot encode it (a
    /// tokenizer.json brought from elsewhere may fail where murmur's own
    /// cannot; `encode` then gives no tokens).
    fn try_encode(&self, text: &str) -> Result<Vec<u32>, String> {
        Ok(self.encode(text))
    }
    /// Text for `ids`; invalid UTF-8 and unknown ids become U+FFFD.
    fn decode(&self, ids: &[u32]) -> String;
    /// The end-of-text token placed between documents, if the tokenizer has one.
    fn eot(&self) -> Option<u32>;
    /// Short name, as accepted by `--tokenizer`.
    fn name(&self) -> &str;
}

/// One token per byte of UTF-8: vocabulary 256, no end-of-text token.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByteTokenizer;

impl Tokenizer for ByteTokenizer {
    fn vocab_size(&self) -> usize {
        256
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().map(|&id| u8::try_from(id).unwrap_or(b'?')).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn eot(&self) -> Option<u32> {
        None
    }

    fn name(&self) -> &str {
        "byte"
    }
}

/// Which tokenizer to use for text data (and to interpret token shards).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// `ByteTokenizer`: vocabulary 256.
    Byte,
    /// `Gpt2Tokenizer`: OpenAI's GPT-2 BPE, vocabulary 50257.
    Gpt2,
}

impl TokenizerKind {
    /// Builds the tokenizer. GPT-2 parses its embedded vocabulary (tens of ms).
    pub fn build(self) -> Result<Arc<dyn Tokenizer>, DataError> {
        Ok(match self {
            TokenizerKind::Byte => Arc::new(ByteTokenizer),
            TokenizerKind::Gpt2 => Arc::new(Gpt2Tokenizer::new()?),
        })
    }

    /// Vocabulary size without building the tokenizer.
    pub fn vocab_size(self) -> usize {
        match self {
            TokenizerKind::Byte => 256,
            TokenizerKind::Gpt2 => super::gpt2::GPT2_VOCAB_SIZE,
        }
    }

    /// The end-of-text token, without building the tokenizer.
    pub fn eot(self) -> Option<u32> {
        match self {
            TokenizerKind::Byte => None,
            TokenizerKind::Gpt2 => Some(super::gpt2::GPT2_EOT),
        }
    }

    /// The tokenizer whose vocabulary a model of `vocab_size` tokens was
    /// made for: byte at 256 or fewer, GPT-2 at exactly 50257, none else.
    pub fn for_vocabulary(vocab_size: usize) -> Option<Self> {
        match vocab_size {
            0..=256 => Some(TokenizerKind::Byte),
            super::gpt2::GPT2_VOCAB_SIZE => Some(TokenizerKind::Gpt2),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenizerKind::Byte => "byte",
            TokenizerKind::Gpt2 => "gpt2",
        }
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TokenizerKind {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, DataError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "byte" | "bytes" => Ok(TokenizerKind::Byte),
            "gpt2" | "gpt-2" => Ok(TokenizerKind::Gpt2),
            other => Err(DataError::BadSpec {
                spec: other.to_string(),
                reason: "unknown tokenizer, choose `byte` or `gpt2`".to_string(),
            }),
        }
    }
}

/// What `murmur data add --tokenizer` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenizerChoice {
    /// A built-in tokenizer (`byte`, `gpt2`).
    Kind(TokenizerKind),
    /// A byte-level BPE of this many ids, trained on the input (`bpe:VOCAB`).
    TrainBpe(u32),
    /// An existing Hugging Face `tokenizer.json`.
    File(PathBuf),
}

impl Default for TokenizerChoice {
    fn default() -> Self {
        TokenizerChoice::Kind(TokenizerKind::Byte)
    }
}

impl FromStr for TokenizerChoice {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, DataError> {
        let s = s.trim();
        if let Some(vocab) = s.strip_prefix("bpe:") {
            return vocab.trim().parse().map(TokenizerChoice::TrainBpe).map_err(|_| DataError::BadSpec {
                spec: s.to_string(),
                reason: "`bpe:` needs the vocabulary size after it, e.g. `bpe:4096`".to_string(),
            });
        }
        if let Ok(kind) = s.parse() {
            return Ok(TokenizerChoice::Kind(kind));
        }
        if s.ends_with(".json") || s.contains(std::path::MAIN_SEPARATOR) {
            return Ok(TokenizerChoice::File(PathBuf::from(s)));
        }
        Err(DataError::BadSpec {
            spec: s.to_string(),
            reason: "unknown tokenizer, choose `byte`, `gpt2`, `bpe:VOCAB` (train one on the input) or the path of a tokenizer.json".to_string(),
        })
    }
}

impl fmt::Display for TokenizerChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerChoice::Kind(k) => write!(f, "{k}"),
            TokenizerChoice::TrainBpe(vocab) => write!(f, "bpe:{vocab}"),
            TokenizerChoice::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The tokenizer a dataset manifest names; `json` is the dataset's
/// tokenizer.json when it names its own (checked against the manifest).
pub fn named_tokenizer(
    named: DatasetTokenizer,
    json: Option<&[u8]>,
    what: &str,
) -> Result<Arc<dyn Tokenizer>, DataError> {
    Ok(match (named, BpeTokenizer::of_dataset(named, json, what)?) {
        (_, Some(bpe)) => Arc::new(bpe),
        (DatasetTokenizer::Gpt2, None) => Arc::new(Gpt2Tokenizer::new()?),
        (_, None) => Arc::new(ByteTokenizer),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokenizer_round_trips_any_text() {
        let t = ByteTokenizer;
        for text in ["", "hello", "naïve café 日本 🚀", "tabs\tand\nnewlines"] {
            let ids = t.encode(text);
            assert_eq!(ids.len(), text.len());
            assert!(ids.iter().all(|&id| id < 256));
            assert_eq!(t.decode(&ids), text);
        }
        assert_eq!(t.vocab_size(), 256);
        assert_eq!(t.eot(), None);
    }

    #[test]
    fn byte_tokenizer_decodes_broken_utf8_lossily() {
        let t = ByteTokenizer;
        assert_eq!(t.decode(&[0x68, 0xff, 0x69]), "h\u{fffd}i");
        assert_eq!(t.decode(&[0x68, 300]), "h?");
    }

    #[test]
    fn tokenizer_kind_parses_and_builds() {
        assert_eq!("byte".parse::<TokenizerKind>().unwrap(), TokenizerKind::Byte);
        assert_eq!("GPT2".parse::<TokenizerKind>().unwrap(), TokenizerKind::Gpt2);
        assert!("unicode".parse::<TokenizerKind>().is_err());
        let t = TokenizerKind::Byte.build().unwrap();
        assert_eq!(t.name(), "byte");
        assert_eq!(TokenizerKind::Gpt2.vocab_size(), 50257);
    }

    #[test]
    fn tokenizer_choices_parse() {
        assert_eq!("gpt2".parse::<TokenizerChoice>().unwrap(), TokenizerChoice::Kind(TokenizerKind::Gpt2));
        assert_eq!("bpe:4096".parse::<TokenizerChoice>().unwrap(), TokenizerChoice::TrainBpe(4096));
        assert_eq!(
            "out/tokenizer.json".parse::<TokenizerChoice>().unwrap(),
            TokenizerChoice::File("out/tokenizer.json".into())
        );
        for bad in ["bpe:", "bpe:many", "unicode"] {
            let err = bad.parse::<TokenizerChoice>().unwrap_err();
            assert!(err.to_string().contains("bpe:"), "{bad}: {err}");
        }
    }
}
