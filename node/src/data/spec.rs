//! `DataSpec`: what `--data` (and `--tokenizer`) name, parsed from a string.
//!
//! Accepted forms: `synthetic`, `synthetic:seed=7,words=48,…` (see
//! `SyntheticSpec::set`), `text:PATH`, `shards:PATH`, or a bare PATH whose kind
//! is decided when it is opened (a dataset directory written by `murmur data
//! add` as that dataset, a `.bin` file or a folder holding `.bin` files as
//! llm.c token shards, anything else as UTF-8 text).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use super::error::DataError;
use super::synthetic::SyntheticSpec;
use super::tokenizer::TokenizerKind;

/// Where training tokens come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataSource {
    /// The seeded synthetic language (byte-level, known entropy floor).
    Synthetic(SyntheticSpec),
    /// A text file or a folder of text files (recursive, sorted).
    Text(PathBuf),
    /// An llm.c `.bin` token shard or a folder of them.
    Shards(PathBuf),
    /// A path whose kind is detected at open time.
    Path(PathBuf),
}

/// A parsed `--data` value plus the tokenizer choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSpec {
    pub source: DataSource,
    /// `None` picks the default: byte for text, gpt2 for shards; synthetic is
    /// always byte-level.
    pub tokenizer: Option<TokenizerKind>,
}

impl DataSpec {
    /// Parses a `--data` string (tokenizer left at its default).
    pub fn parse(spec: &str) -> Result<Self, DataError> {
        let bad = |reason: &str| DataError::BadSpec { spec: spec.to_string(), reason: reason.to_string() };
        let trimmed = spec.trim();
        if trimmed.is_empty() {
            return Err(bad("it is empty"));
        }
        let source = if trimmed == "synthetic" {
            DataSource::Synthetic(SyntheticSpec::default())
        } else if let Some(options) = trimmed.strip_prefix("synthetic:") {
            let mut synthetic = SyntheticSpec::default();
            for option in options.split(',').filter(|o| !o.trim().is_empty()) {
                let (key, value) = option
                    .split_once('=')
                    .ok_or_else(|| bad(&format!("synthetic option `{option}` is not key=value")))?;
                synthetic.set(key, value).map_err(|reason| bad(&reason))?;
            }
            synthetic.validate().map_err(|e| bad(&e.to_string()))?;
            DataSource::Synthetic(synthetic)
        } else if let Some(path) = trimmed.strip_prefix("text:") {
            DataSource::Text(non_empty_path(path).ok_or_else(|| bad("`text:` needs a path after it"))?)
        } else if let Some(path) = trimmed.strip_prefix("shards:") {
            DataSource::Shards(non_empty_path(path).ok_or_else(|| bad("`shards:` needs a path after it"))?)
        } else {
            DataSource::Path(PathBuf::from(trimmed))
        };
        Ok(Self { source, tokenizer: None })
    }

    /// The same spec with an explicit tokenizer.
    pub fn with_tokenizer(mut self, tokenizer: TokenizerKind) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// The default data of the tiny preset and the testnet.
    pub fn synthetic() -> Self {
        Self { source: DataSource::Synthetic(SyntheticSpec::default()), tokenizer: None }
    }
}

fn non_empty_path(path: &str) -> Option<PathBuf> {
    let path = path.trim();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

impl FromStr for DataSpec {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, DataError> {
        DataSpec::parse(s)
    }
}

/// The canonical string form (parses back to an equal spec, tokenizer aside).
impl fmt::Display for DataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataSource::Synthetic(s) => write!(
                f,
                "synthetic:seed={},words={},min_len={},max_len={},successors={}",
                s.seed, s.words, s.min_word_len, s.max_word_len, s.successors
            ),
            DataSource::Text(p) => write!(f, "text:{}", p.display()),
            DataSource::Shards(p) => write!(f, "shards:{}", p.display()),
            DataSource::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

impl fmt::Display for DataSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tokenizer {
            Some(t) => write!(f, "{} (tokenizer {t})", self.source),
            None => write!(f, "{}", self.source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_synthetic_forms() {
        assert_eq!(DataSpec::parse("synthetic").unwrap(), DataSpec::synthetic());
        let spec = DataSpec::parse("synthetic:seed=7,words=32").unwrap();
        let DataSource::Synthetic(s) = &spec.source else { panic!("not synthetic: {spec:?}") };
        assert_eq!((s.seed, s.words), (7, 32));
        assert_eq!(DataSpec::parse(&spec.source.to_string()).unwrap(), spec);
    }

    #[test]
    fn parses_paths() {
        assert_eq!(
            DataSpec::parse("data/tiny.txt").unwrap().source,
            DataSource::Path("data/tiny.txt".into())
        );
        assert_eq!(DataSpec::parse("text:corpus/").unwrap().source, DataSource::Text("corpus/".into()));
        assert_eq!(
            DataSpec::parse("shards:fineweb10B").unwrap().source,
            DataSource::Shards("fineweb10B".into())
        );
        let spec = DataSpec::parse("x.bin").unwrap().with_tokenizer(TokenizerKind::Gpt2);
        assert_eq!(spec.tokenizer, Some(TokenizerKind::Gpt2));
    }

    #[test]
    fn malformed_specs_are_clear_errors() {
        for bad in [
            "",
            "   ",
            "synthetic:seed",
            "synthetic:seed=x",
            "synthetic:colour=red",
            "synthetic:words=1",
            "text:",
            "shards: ",
        ] {
            let err = DataSpec::parse(bad).unwrap_err();
            assert!(matches!(err, DataError::BadSpec { .. }), "{bad:?}: {err}");
            assert!(err.to_string().contains("malformed data spec"), "{err}");
        }
    }
}
