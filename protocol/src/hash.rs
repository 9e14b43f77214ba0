//! Content identifiers and domain-separated blake3 hashing.
//!
//! Every hash the protocol computes uses blake3's `derive_key` mode with a
//! context string naming what is hashed, so a RunSpec's bytes can never be
//! mistaken for a state's or a payload's, whatever their contents.

use std::fmt;

/// blake3 derive_key context for [`RunId`]: hashes a RunSpec's canonical bytes.
pub const DOMAIN_RUN_ID: &str = "murmur 2025-01 v1 run-id";
/// blake3 derive_key context for [`StateId`]: hashes a state's canonical bytes.
pub const DOMAIN_STATE_ID: &str = "murmur 2025-01 v1 state-id";
/// blake3 derive_key context for [`PayloadHash`]: hashes a delta payload's bytes.
pub const DOMAIN_PAYLOAD: &str = "murmur 2025-01 v1 delta-payload";
/// blake3 derive_key context for [`DatasetId`]: hashes a dataset manifest's canonical bytes.
pub const DOMAIN_DATASET_ID: &str = "murmur 2025-01 v1 dataset-id";
/// blake3 derive_key context for [`ShardHash`]: hashes a dataset token shard's bytes.
pub const DOMAIN_DATASET_SHARD: &str = "murmur 2025-01 v1 dataset-shard";
/// blake3 derive_key context for [`TokenizerHash`]: hashes a dataset's `tokenizer.json` bytes.
pub const DOMAIN_TOKENIZER: &str = "murmur 2025-01 v1 tokenizer";
/// blake3 derive_key context for [`ParamsId`]: hashes a model's parameters.
pub const DOMAIN_PARAMS_ID: &str = "murmur 2025-01 v1 params-id";
/// blake3 derive_key context of the window-assignment key (see `assignment`).
pub const DOMAIN_ASSIGNMENT: &str = "murmur 2025-01 v1 window-assignment";

macro_rules! digest_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            pub const fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }
            /// Lower-case hex, 64 characters.
            pub fn to_hex(&self) -> String {
                hex(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), &self.to_hex()[..16])
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }
    };
}

digest_type!(
    /// Identifies a run: blake3 (domain [`DOMAIN_RUN_ID`]) of its RunSpec's canonical bytes.
    RunId
);
digest_type!(
    /// Identifies a training state: blake3 (domain [`DOMAIN_STATE_ID`]) of its canonical bytes.
    StateId
);
digest_type!(
    /// Identifies a model's parameters, whatever run or round they belong
    /// to: blake3 (domain [`DOMAIN_PARAMS_ID`]) of the parameters as f32
    /// little-endian, in the model's canonical order. A RunSpec that starts
    /// from a given model names its genesis parameters by this hash.
    ParamsId
);
digest_type!(
    /// Identifies a delta payload: blake3 (domain [`DOMAIN_PAYLOAD`]) of its bytes.
    PayloadHash
);

digest_type!(
    /// Identifies a dataset: blake3 (domain [`DOMAIN_DATASET_ID`]) of its manifest's canonical bytes.
    DatasetId
);
digest_type!(
    /// Identifies one token shard of a dataset: blake3 (domain [`DOMAIN_DATASET_SHARD`]) of its bytes.
    ShardHash
);

digest_type!(
    /// Identifies a dataset's own tokenizer: blake3 (domain [`DOMAIN_TOKENIZER`]) of its `tokenizer.json` bytes.
    TokenizerHash
);

/// Hash `bytes` under the derive_key context `domain`.
pub fn domain_hash(domain: &str, bytes: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key(domain);
    h.update(bytes);
    *h.finalize().as_bytes()
}

/// The RunId of a RunSpec's canonical bytes.
pub fn run_id_of(spec_bytes: &[u8]) -> RunId {
    RunId(domain_hash(DOMAIN_RUN_ID, spec_bytes))
}

/// The PayloadHash of a delta payload's bytes.
pub fn payload_hash_of(payload: &[u8]) -> PayloadHash {
    PayloadHash(domain_hash(DOMAIN_PAYLOAD, payload))
}

/// The DatasetId of a dataset manifest's canonical bytes.
pub fn dataset_id_of(manifest_bytes: &[u8]) -> DatasetId {
    DatasetId(domain_hash(DOMAIN_DATASET_ID, manifest_bytes))
}

/// The ShardHash of a token shard's bytes.
pub fn shard_hash_of(shard: &[u8]) -> ShardHash {
    ShardHash(domain_hash(DOMAIN_DATASET_SHARD, shard))
}

/// The TokenizerHash of a `tokenizer.json` file's bytes.
pub fn tokenizer_hash_of(json: &[u8]) -> TokenizerHash {
    TokenizerHash(domain_hash(DOMAIN_TOKENIZER, json))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Bytes from hex (either case, no separators); `None` if malformed.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2).map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_separate_identical_bytes() {
        let b = b"same bytes";
        assert_ne!(run_id_of(b).0, payload_hash_of(b).0);
        assert_ne!(domain_hash(DOMAIN_STATE_ID, b), domain_hash(DOMAIN_RUN_ID, b));
        assert_ne!(run_id_of(b).0, *blake3::hash(b).as_bytes());
    }

    #[test]
    fn hex_round_trips() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&b), "0001abff");
        assert_eq!(unhex("0001ABff").as_deref(), Some(&b[..]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }
}
