//! The chunk tree of a content-addressed blob: fixed 1 MiB chunks whose
//! blake3 chaining values merge, along blake3's own tree, into the blob's id.
//!
//! A blob's id is a blake3 `derive_key` hash (the payload or state domain).
//! blake3 hashes a tree of 1 KiB chunks; every aligned 1 MiB piece is a whole
//! subtree, so its chaining value (CV) can be computed alone, and the list of
//! CVs ("chunk table") merges to the root. A receiver that holds the id can
//! therefore check a table received from an untrusted peer against the id,
//! and then each 1 MiB chunk against its table entry, before it has the rest.
//! Blobs of one chunk or less have a table of one entry: the id itself.

use blake3::hazmat::{self, ChainingValue, HasherExt, Mode};
use murmur_protocol::hash::{
    DOMAIN_DATASET_ID, DOMAIN_DATASET_SHARD, DOMAIN_PAYLOAD, DOMAIN_STATE_ID, DOMAIN_TOKENIZER,
};

/// Bytes per chunk (a power of two, at least blake3's 1 KiB chunk).
pub const CHUNK_LEN: u64 = 1 << 20;

/// Most chunks a blob may have: 2^31 elements × 8 bytes (params + momentum)
/// plus the header, in 1 MiB chunks.
pub const MAX_CHUNKS: u64 = 16_385;

/// What a blob is; decides the hash domain of its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlobKind {
    /// An encoded delta payload; its id is the PayloadHash.
    Delta,
    /// A training state payload; its id is the StateId.
    State,
    /// A dataset's token shard; its id is the ShardHash.
    DatasetShard,
    /// A dataset manifest; its id is the DatasetId.
    DatasetManifest,
    /// An owner's aggregated shard (f32 little-endian); its
    /// id is the ShardResult's `result_hash`.
    Aggregate,
    /// A state's ledger (roster and excluded keys); its id is
    /// `Ledger::hash`.
    Ledger,
    /// A dataset's own `tokenizer.json`; its id is the TokenizerHash.
    Tokenizer,
}

impl BlobKind {
    /// Every kind (the store keeps one directory each).
    pub const ALL: [BlobKind; 7] = [
        BlobKind::Delta,
        BlobKind::State,
        BlobKind::DatasetShard,
        BlobKind::DatasetManifest,
        BlobKind::Aggregate,
        BlobKind::Ledger,
        BlobKind::Tokenizer,
    ];

    /// The wire byte of this kind.
    pub fn to_u8(self) -> u8 {
        match self {
            BlobKind::Delta => 1,
            BlobKind::State => 2,
            BlobKind::DatasetShard => 3,
            BlobKind::DatasetManifest => 4,
            BlobKind::Aggregate => 5,
            BlobKind::Ledger => 6,
            BlobKind::Tokenizer => 7,
        }
    }

    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(BlobKind::Delta),
            2 => Some(BlobKind::State),
            3 => Some(BlobKind::DatasetShard),
            4 => Some(BlobKind::DatasetManifest),
            5 => Some(BlobKind::Aggregate),
            6 => Some(BlobKind::Ledger),
            7 => Some(BlobKind::Tokenizer),
            _ => None,
        }
    }

    /// Directory name in the store.
    pub fn dir_name(self) -> &'static str {
        match self {
            BlobKind::Delta => "delta",
            BlobKind::State => "state",
            BlobKind::DatasetShard => "dataset-shard",
            BlobKind::DatasetManifest => "dataset-manifest",
            BlobKind::Aggregate => "aggregate",
            BlobKind::Ledger => "ledger",
            BlobKind::Tokenizer => "tokenizer",
        }
    }

    /// The blake3 derive_key context of this kind's ids.
    pub fn domain(self) -> &'static str {
        match self {
            BlobKind::Delta => DOMAIN_PAYLOAD,
            BlobKind::State => DOMAIN_STATE_ID,
            BlobKind::DatasetShard => DOMAIN_DATASET_SHARD,
            BlobKind::DatasetManifest => DOMAIN_DATASET_ID,
            BlobKind::Aggregate => murmur_protocol::committee::messages::DOMAIN_AGGREGATE,
            BlobKind::Ledger => murmur_protocol::committee::ledger::DOMAIN_STATE_V2,
            BlobKind::Tokenizer => DOMAIN_TOKENIZER,
        }
    }

    /// The id of `bytes` as this kind of blob.
    pub fn hash(self, bytes: &[u8]) -> [u8; 32] {
        murmur_protocol::hash::domain_hash(self.domain(), bytes)
    }
}

/// Number of chunks of a blob of `len` bytes (0 for an empty blob, which is
/// never valid content).
pub fn chunk_count(len: u64) -> u64 {
    len.div_ceil(CHUNK_LEN)
}

/// Byte range (offset, length) of chunk `index` of a `len`-byte blob.
pub fn chunk_range(len: u64, index: u64) -> Option<(u64, usize)> {
    let offset = index.checked_mul(CHUNK_LEN)?;
    if offset >= len {
        return None;
    }
    let n = (len - offset).min(CHUNK_LEN);
    Some((offset, usize::try_from(n).ok()?))
}

/// Table entry of chunk `index` holding `bytes` in a blob of `len` bytes:
/// the chunk's chaining value, or the root hash when the blob is one chunk.
/// `None` when `bytes` is not exactly the chunk's length.
pub fn chunk_entry(kind: BlobKind, len: u64, index: u64, bytes: &[u8]) -> Option<[u8; 32]> {
    let (offset, n) = chunk_range(len, index)?;
    if bytes.len() != n {
        return None;
    }
    if chunk_count(len) == 1 {
        return Some(kind.hash(bytes));
    }
    let key = hazmat::hash_derive_key_context(kind.domain());
    let mut h = blake3::Hasher::new_from_context_key(&key);
    h.set_input_offset(offset);
    h.update(bytes);
    Some(h.finalize_non_root())
}

/// The full chunk table of `bytes`.
pub fn table_of(kind: BlobKind, bytes: &[u8]) -> Vec<[u8; 32]> {
    let len = bytes.len() as u64;
    (0..chunk_count(len))
        .filter_map(|i| {
            let (o, n) = chunk_range(len, i)?;
            let o = usize::try_from(o).ok()?;
            chunk_entry(kind, len, i, bytes.get(o..o + n)?)
        })
        .collect()
}

/// The id that `table`, the chunk table of a `len`-byte blob, merges to
/// (a one-entry table is the id itself); `None` when it has the wrong
/// number of entries.
pub fn root_of(kind: BlobKind, len: u64, table: &[[u8; 32]]) -> Option<[u8; 32]> {
    if len == 0 || table.len() as u64 != chunk_count(len) {
        return None;
    }
    if table.len() == 1 {
        return Some(table[0]);
    }
    let key = hazmat::hash_derive_key_context(kind.domain());
    let mode = Mode::DeriveKeyMaterial(&key);
    Some(merge(table, len, mode, true))
}

/// Whether `table` is the chunk table of a `len`-byte blob with id `id`.
pub fn table_matches(kind: BlobKind, id: &[u8; 32], len: u64, table: &[[u8; 32]]) -> bool {
    root_of(kind, len, table) == Some(*id)
}

/// Merge the CVs of a (multi-chunk) subtree of `len` bytes.
fn merge(cvs: &[ChainingValue], len: u64, mode: Mode<'_>, root: bool) -> [u8; 32] {
    if cvs.len() <= 1 {
        return cvs.first().copied().unwrap_or_default();
    }
    let left_len = hazmat::left_subtree_len(len);
    let nl = usize::try_from(left_len / CHUNK_LEN).unwrap_or(0).clamp(1, cvs.len() - 1);
    let l = merge(&cvs[..nl], left_len, mode, false);
    let r = merge(&cvs[nl..], len - left_len, mode, false);
    if root {
        *hazmat::merge_subtrees_root(&l, &r, mode).as_bytes()
    } else {
        hazmat::merge_subtrees_non_root(&l, &r, mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn tables_merge_to_the_id_at_any_length() {
        let c = CHUNK_LEN as usize;
        for n in [1, 1000, c, c + 1, 2 * c, 3 * c - 7, 5 * c + 1024] {
            let b = bytes(n);
            for kind in [BlobKind::Delta, BlobKind::State] {
                let id = kind.hash(&b);
                let table = table_of(kind, &b);
                assert_eq!(table.len() as u64, chunk_count(n as u64));
                assert!(table_matches(kind, &id, n as u64, &table), "n = {n}");
                // A multi-chunk table also binds the hash domain (a one-chunk
                // table is the id itself; its chunk is checked by hashing).
                let other = if kind == BlobKind::Delta { BlobKind::State } else { BlobKind::Delta };
                assert_eq!(table_matches(other, &id, n as u64, &table), n <= c, "n = {n}");
            }
        }
    }

    #[test]
    fn an_aggregate_blob_id_is_the_results_hash_of_its_payload() {
        let values: Vec<f32> = (0..300_000).map(|i| (i as f32 * 0.01).sin()).collect();
        let b = murmur_protocol::encode_delta(murmur_protocol::Codec::Int8Block { block: 256 }, &values)
            .expect("encodes");
        let id = murmur_protocol::committee::messages::aggregate_hash(&b);
        assert_eq!(BlobKind::Aggregate.hash(&b), id);
        assert!(table_matches(BlobKind::Aggregate, &id, b.len() as u64, &table_of(BlobKind::Aggregate, &b)));
    }

    #[test]
    fn a_wrong_entry_length_or_chunk_is_caught() {
        let c = CHUNK_LEN as usize;
        let b = bytes(3 * c + 5);
        let kind = BlobKind::State;
        let id = kind.hash(&b);
        let mut table = table_of(kind, &b);
        table[1][0] ^= 1;
        assert!(!table_matches(kind, &id, b.len() as u64, &table));
        let table = table_of(kind, &b);
        // The table fixes the tree, not the length inside the last chunk:
        // that chunk's own entry does, so a wrong length fails there.
        let last = b.len() / c;
        let mut longer = b[last * c..].to_vec();
        longer.push(0);
        assert_ne!(chunk_entry(kind, b.len() as u64 + 1, last as u64, &longer), Some(table[last]));
        assert!(!table_matches(kind, &id, b.len() as u64, &table[..3]));
        let mut chunk = b[c..2 * c].to_vec();
        assert_eq!(chunk_entry(kind, b.len() as u64, 1, &chunk), Some(table[1]));
        chunk[7] ^= 1;
        assert_ne!(chunk_entry(kind, b.len() as u64, 1, &chunk), Some(table[1]));
        assert_eq!(chunk_entry(kind, b.len() as u64, 1, &chunk[1..]), None);
        assert_eq!(chunk_entry(kind, b.len() as u64, 4, &chunk), None);
    }
}
