//! The `Tokenizer` trait, the byte-level tokenizer, and `TokenizerKind`, the
//! user's choice between byte and GPT-2 BPE.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::error::DataError;
use super::gpt2::Gpt2Tokenizer;

/// Turns text into token ids and back.
pub trait Tokenizer: Send + Sync {
    /// Number of distinct token ids (ids are `0..vocab_size`).
    fn vocab_size(&self) -> usize;
    /// Token ids for `text`.
    fn encode(&self, text: &str) -> Vec<u32>;
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
}
