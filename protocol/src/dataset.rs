//! The dataset manifest: what a content-addressed dataset holds (its
//! tokenizer, for a dataset's own BPE the hash of its `tokenizer.json`; shard
//! size; the blake3 and token count of every shard, split into training and
//! validation shards), its canonical bytes, and its DatasetId.
//!
//! Shards are plain little-endian u16 token arrays (no header); every shard of
//! a split holds exactly `shard_tokens` tokens except the split's last, which
//! holds 1..=`shard_tokens`. That rule makes window arithmetic O(1): training
//! window `w` of `L` tokens lies in shard `w / ⌊shard_tokens / L⌋`
//! (`DatasetManifest::locate_train_window`). The decoder is total and bounded:
//! at most [`MAX_DATASET_SHARDS`] shards, checked against the remaining input
//! before anything is allocated.

use crate::hash::{dataset_id_of, DatasetId, ShardHash, TokenizerHash};
use crate::wire::{MessageType, Reader, WireError, Writer, MAX_DATASET_SHARDS};

/// The manifest format this build writes and reads.
pub const DATASET_FORMAT: u8 = 1;
/// Most tokens one shard may hold (16 MiB of u16 tokens).
pub const MAX_SHARD_TOKENS: u32 = 1 << 23;
/// Bytes per token in a shard.
pub const TOKEN_BYTES: u64 = 2;
/// Bytes of one encoded shard entry (hash + token count).
const ENTRY_BYTES: usize = 36;

/// Most bytes a dataset's `tokenizer.json` may take.
pub const MAX_TOKENIZER_BYTES: u32 = 16 << 20;
/// Most token ids a dataset's own tokenizer may have (shards hold u16 ids).
pub const MAX_TOKENIZER_VOCAB: u32 = 1 << 16;

/// How a dataset's text was turned into tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatasetTokenizer {
    /// One token per UTF-8 byte (vocabulary 256).
    Byte,
    /// GPT-2 BPE (vocabulary 50257).
    Gpt2,
    /// The dataset's own tokenizer: a Hugging Face `tokenizer.json` of
    /// `json_len` bytes whose TokenizerHash is `hash`, with ids `0..vocab`.
    /// It travels with the dataset like a shard (blob kind `tokenizer`).
    Bpe { vocab: u32, json_len: u32, hash: TokenizerHash },
}

impl DatasetTokenizer {
    /// The wire tag (the fields of `Bpe` follow it).
    pub fn tag(self) -> u8 {
        match self {
            DatasetTokenizer::Byte => 0,
            DatasetTokenizer::Gpt2 => 1,
            DatasetTokenizer::Bpe { .. } => 2,
        }
    }

    /// Token ids are `0..vocab_size`.
    pub fn vocab_size(self) -> u32 {
        match self {
            DatasetTokenizer::Byte => 256,
            DatasetTokenizer::Gpt2 => 50_257,
            DatasetTokenizer::Bpe { vocab, .. } => vocab,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DatasetTokenizer::Byte => "byte",
            DatasetTokenizer::Gpt2 => "gpt2",
            DatasetTokenizer::Bpe { .. } => "bpe",
        }
    }

    fn write(self, w: &mut Writer) {
        w.u8(self.tag());
        if let DatasetTokenizer::Bpe { vocab, json_len, hash } = self {
            w.u32(vocab);
            w.u32(json_len);
            w.bytes(&hash.0);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        match r.u8()? {
            0 => Ok(DatasetTokenizer::Byte),
            1 => Ok(DatasetTokenizer::Gpt2),
            2 => Ok(DatasetTokenizer::Bpe {
                vocab: r.u32()?,
                json_len: r.u32()?,
                hash: TokenizerHash(r.array()?),
            }),
            tag => Err(WireError::BadTag { field: "dataset.tokenizer", tag }),
        }
    }

    fn validate(self) -> Result<(), WireError> {
        if let DatasetTokenizer::Bpe { vocab, json_len, .. } = self {
            if vocab == 0 || vocab > MAX_TOKENIZER_VOCAB {
                return Err(invalid("dataset.tokenizer.vocab", "must be in 1..=65536"));
            }
            if json_len == 0 || json_len > MAX_TOKENIZER_BYTES {
                return Err(invalid("dataset.tokenizer.json_len", "must be in 1..=16 MiB"));
            }
        }
        Ok(())
    }
}

/// One shard: its hash and how many tokens it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardEntry {
    pub hash: ShardHash,
    pub tokens: u32,
}

impl ShardEntry {
    /// Bytes of the shard file.
    pub fn byte_len(&self) -> u64 {
        u64::from(self.tokens) * TOKEN_BYTES
    }
}

/// Which split a shard belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    Val,
}

/// A dataset: its tokenizer, shard size and shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetManifest {
    pub tokenizer: DatasetTokenizer,
    /// Tokens per shard (every shard of a split but its last holds exactly this many).
    pub shard_tokens: u32,
    /// Training shards, in stream order (non-empty).
    pub train: Vec<ShardEntry>,
    /// Validation shards, in stream order (non-empty).
    pub val: Vec<ShardEntry>,
}

fn invalid(field: &'static str, why: &'static str) -> WireError {
    WireError::Invalid { field, why }
}

fn write_entries(w: &mut Writer, entries: &[ShardEntry]) {
    w.u32(u32::try_from(entries.len()).unwrap_or(u32::MAX));
    for e in entries {
        w.bytes(&e.hash.0);
        w.u32(e.tokens);
    }
}

fn read_entries(r: &mut Reader<'_>, field: &'static str, cap: usize) -> Result<Vec<ShardEntry>, WireError> {
    let n = r.count(field, cap, ENTRY_BYTES)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(ShardEntry { hash: ShardHash(r.array()?), tokens: r.u32()? });
    }
    Ok(out)
}

impl DatasetManifest {
    /// The canonical bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::DatasetManifest);
        w.u8(DATASET_FORMAT);
        self.tokenizer.write(&mut w);
        w.u32(self.shard_tokens);
        write_entries(&mut w, &self.train);
        write_entries(&mut w, &self.val);
        w.finish()
    }

    /// Parse and validate canonical bytes (total on arbitrary input).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::DatasetManifest)?;
        let format = r.u8()?;
        if format != DATASET_FORMAT {
            return Err(WireError::BadTag { field: "dataset.format", tag: format });
        }
        let tokenizer = DatasetTokenizer::read(&mut r)?;
        let shard_tokens = r.u32()?;
        let train = read_entries(&mut r, "dataset.train", MAX_DATASET_SHARDS)?;
        let val = read_entries(&mut r, "dataset.val", MAX_DATASET_SHARDS - train.len())?;
        r.finish()?;
        let m = DatasetManifest { tokenizer, shard_tokens, train, val };
        m.validate()?;
        Ok(m)
    }

    /// The rules `decode` enforces beyond the byte format.
    pub fn validate(&self) -> Result<(), WireError> {
        self.tokenizer.validate()?;
        if self.shard_tokens == 0 || self.shard_tokens > MAX_SHARD_TOKENS {
            return Err(invalid("dataset.shard_tokens", "must be in 1..=2^23"));
        }
        if self.train.len() + self.val.len() > MAX_DATASET_SHARDS {
            return Err(invalid("dataset.shards", "more than 65536 shards"));
        }
        for (field, split) in [("dataset.train", &self.train), ("dataset.val", &self.val)] {
            let Some((last, full)) = split.split_last() else {
                return Err(invalid(field, "a dataset needs at least one shard in each split"));
            };
            if full.iter().any(|e| e.tokens != self.shard_tokens) {
                return Err(invalid(field, "every shard but the last must hold shard_tokens tokens"));
            }
            if last.tokens == 0 || last.tokens > self.shard_tokens {
                return Err(invalid(field, "the last shard must hold 1..=shard_tokens tokens"));
            }
        }
        Ok(())
    }

    /// blake3 (dataset-id domain) of the canonical bytes.
    pub fn id(&self) -> DatasetId {
        dataset_id_of(&self.encode())
    }

    /// The shards of `split`.
    pub fn shards(&self, split: Split) -> &[ShardEntry] {
        match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
        }
    }

    /// Tokens in `split`.
    pub fn tokens(&self, split: Split) -> u64 {
        self.shards(split).iter().map(|e| u64::from(e.tokens)).sum()
    }

    /// Bytes of every shard together.
    pub fn total_bytes(&self) -> u64 {
        self.train.iter().chain(&self.val).map(ShardEntry::byte_len).sum()
    }

    /// Windows of `window_len` tokens in `split` (windows never straddle shards).
    pub fn windows(&self, split: Split, window_len: u64) -> u64 {
        if window_len == 0 {
            return 0;
        }
        self.shards(split).iter().map(|e| u64::from(e.tokens) / window_len).sum()
    }

    /// (shard index, first token within the shard) of window `w` of `split`,
    /// or `None` when `w` is not below `windows(split, window_len)`.
    pub fn locate(&self, split: Split, window_len: u64, w: u64) -> Option<(usize, u64)> {
        let per_shard = u64::from(self.shard_tokens).checked_div(window_len)?;
        if per_shard == 0 || w >= self.windows(split, window_len) {
            return None;
        }
        let shard = usize::try_from(w / per_shard).ok()?;
        Some((shard, (w % per_shard) * window_len))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_manifest() -> DatasetManifest {
        DatasetManifest {
            tokenizer: DatasetTokenizer::Byte,
            shard_tokens: 1000,
            train: vec![
                ShardEntry { hash: ShardHash([1; 32]), tokens: 1000 },
                ShardEntry { hash: ShardHash([2; 32]), tokens: 1000 },
                ShardEntry { hash: ShardHash([3; 32]), tokens: 130 },
            ],
            val: vec![ShardEntry { hash: ShardHash([4; 32]), tokens: 500 }],
        }
    }

    #[test]
    fn round_trips_and_hashes_stably() {
        let m = sample_manifest();
        let bytes = m.encode();
        assert_eq!(DatasetManifest::decode(&bytes).as_ref(), Ok(&m));
        assert_eq!(m.id(), sample_manifest().id());
        let mut other = sample_manifest();
        other.tokenizer = DatasetTokenizer::Gpt2;
        assert_ne!(other.id(), m.id());
        let bpe = DatasetTokenizer::Bpe { vocab: 4096, json_len: 300_000, hash: TokenizerHash([7; 32]) };
        let with_bpe = DatasetManifest { tokenizer: bpe, ..sample_manifest() };
        assert_eq!(DatasetManifest::decode(&with_bpe.encode()), Ok(with_bpe.clone()));
        let other_file =
            DatasetTokenizer::Bpe { vocab: 4096, json_len: 300_000, hash: TokenizerHash([8; 32]) };
        assert_ne!(DatasetManifest { tokenizer: other_file, ..sample_manifest() }.id(), with_bpe.id());
        assert_eq!(m.tokens(Split::Train), 2130);
        assert_eq!(m.total_bytes(), 2 * 2630);
    }

    #[test]
    fn windows_are_located_without_straddling_shards() {
        let m = sample_manifest();
        // 1000 / 65 = 15 windows per full shard, 130 / 65 = 2 in the last.
        assert_eq!(m.windows(Split::Train, 65), 32);
        assert_eq!(m.locate(Split::Train, 65, 0), Some((0, 0)));
        assert_eq!(m.locate(Split::Train, 65, 14), Some((0, 14 * 65)));
        assert_eq!(m.locate(Split::Train, 65, 15), Some((1, 0)));
        assert_eq!(m.locate(Split::Train, 65, 31), Some((2, 65)));
        assert_eq!(m.locate(Split::Train, 65, 32), None);
        assert_eq!(m.locate(Split::Train, 2000, 0), None);
        assert_eq!(m.locate(Split::Train, 0, 0), None);
        assert_eq!(m.windows(Split::Val, 65), 7);
    }

    #[test]
    fn invalid_manifests_are_rejected() {
        let cases: Vec<(DatasetManifest, &str)> = vec![
            (DatasetManifest { shard_tokens: 0, ..sample_manifest() }, "dataset.shard_tokens"),
            (DatasetManifest { val: Vec::new(), ..sample_manifest() }, "dataset.val"),
            (DatasetManifest { train: Vec::new(), ..sample_manifest() }, "dataset.train"),
            (
                DatasetManifest {
                    train: vec![
                        ShardEntry { hash: ShardHash([1; 32]), tokens: 999 },
                        ShardEntry { hash: ShardHash([2; 32]), tokens: 5 },
                    ],
                    ..sample_manifest()
                },
                "dataset.train",
            ),
            (
                DatasetManifest {
                    val: vec![ShardEntry { hash: ShardHash([1; 32]), tokens: 0 }],
                    ..sample_manifest()
                },
                "dataset.val",
            ),
            (
                DatasetManifest {
                    tokenizer: DatasetTokenizer::Bpe {
                        vocab: 70_000,
                        json_len: 10,
                        hash: TokenizerHash([1; 32]),
                    },
                    ..sample_manifest()
                },
                "dataset.tokenizer.vocab",
            ),
            (
                DatasetManifest {
                    tokenizer: DatasetTokenizer::Bpe {
                        vocab: 4096,
                        json_len: MAX_TOKENIZER_BYTES + 1,
                        hash: TokenizerHash([1; 32]),
                    },
                    ..sample_manifest()
                },
                "dataset.tokenizer.json_len",
            ),
        ];
        for (m, want) in cases {
            match DatasetManifest::decode(&m.encode()) {
                Err(WireError::Invalid { field, .. }) => assert_eq!(field, want),
                other => panic!("{want}: {other:?}"),
            }
        }
        let mut bytes = sample_manifest().encode();
        bytes[2] = 9;
        assert!(matches!(
            DatasetManifest::decode(&bytes),
            Err(WireError::BadTag { field: "dataset.format", tag: 9 })
        ));
        let mut bytes = sample_manifest().encode();
        bytes.push(0);
        assert_eq!(DatasetManifest::decode(&bytes), Err(WireError::TrailingBytes(1)));
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        let mut w = Writer::message(MessageType::DatasetManifest);
        w.u8(DATASET_FORMAT);
        w.u8(0);
        w.u32(1000);
        w.u32(u32::MAX);
        assert!(matches!(DatasetManifest::decode(&w.finish()), Err(WireError::TooLong { .. })));
        let mut w = Writer::message(MessageType::DatasetManifest);
        w.u8(DATASET_FORMAT);
        w.u8(0);
        w.u32(1000);
        w.u32(60_000);
        assert!(matches!(DatasetManifest::decode(&w.finish()), Err(WireError::Truncated { .. })));
        for n in 0..sample_manifest().encode().len() {
            assert!(DatasetManifest::decode(&sample_manifest().encode()[..n]).is_err());
        }
    }
}
