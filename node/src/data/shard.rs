//! llm.c token shards: a 256×int32 little-endian header (magic 20240520,
//! version 1, token count) followed by that many uint16 tokens. Reading checks
//! the header against the real file size before anything is allocated, and
//! reads windows on demand so shards need not fit in memory.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::DataError;

/// `header[0]` of every llm.c token shard.
pub const SHARD_MAGIC: i32 = 20240520;
/// `header[1]`: version 1 stores uint16 tokens.
pub const SHARD_VERSION: i32 = 1;
/// 256 int32 values.
pub const SHARD_HEADER_BYTES: u64 = 256 * 4;

/// A token shard whose header has been validated against its file size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenShard {
    path: PathBuf,
    tokens: u64,
}

impl TokenShard {
    /// Opens and validates `path`: magic, version, a non-negative count, and a
    /// file size of exactly header + 2·count bytes.
    pub fn open(path: &Path) -> Result<Self, DataError> {
        let mut file = File::open(path).map_err(|e| DataError::io(path, e))?;
        let size = file.metadata().map_err(|e| DataError::io(path, e))?.len();
        if size == 0 {
            return Err(DataError::EmptyFile { path: path.to_path_buf() });
        }
        if size < SHARD_HEADER_BYTES {
            return Err(DataError::TruncatedShard {
                path: path.to_path_buf(),
                claimed: 0,
                expected_bytes: SHARD_HEADER_BYTES,
                actual_bytes: size,
            });
        }
        let mut header = [0u8; SHARD_HEADER_BYTES as usize];
        file.read_exact(&mut header).map_err(|e| DataError::io(path, e))?;
        let field = |i: usize| {
            i32::from_le_bytes([header[4 * i], header[4 * i + 1], header[4 * i + 2], header[4 * i + 3]])
        };
        let (magic, version, count) = (field(0), field(1), field(2));
        if magic != SHARD_MAGIC {
            return Err(DataError::BadShardMagic { path: path.to_path_buf(), found: magic });
        }
        if version != SHARD_VERSION {
            return Err(DataError::BadShardVersion { path: path.to_path_buf(), found: version });
        }
        if count < 0 {
            return Err(DataError::BadShardCount {
                path: path.to_path_buf(),
                claimed: count.into(),
                reason: "negative",
            });
        }
        if count == 0 {
            return Err(DataError::BadShardCount {
                path: path.to_path_buf(),
                claimed: 0,
                reason: "a shard must hold at least one token",
            });
        }
        let tokens = count as u64;
        let expected_bytes = SHARD_HEADER_BYTES + 2 * tokens;
        if size < expected_bytes {
            return Err(DataError::TruncatedShard {
                path: path.to_path_buf(),
                claimed: tokens,
                expected_bytes,
                actual_bytes: size,
            });
        }
        if size > expected_bytes {
            return Err(DataError::TrailingShardBytes {
                path: path.to_path_buf(),
                claimed: tokens,
                extra_bytes: size - expected_bytes,
            });
        }
        Ok(Self { path: path.to_path_buf(), tokens })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of tokens in the shard.
    pub fn len(&self) -> u64 {
        self.tokens
    }

    pub fn is_empty(&self) -> bool {
        self.tokens == 0
    }

    /// Reads tokens `start..start + out.len()` through `file` (an open handle
    /// on this shard), checking each is below `vocab`.
    pub(crate) fn read_into(
        &self,
        file: &mut File,
        start: u64,
        out: &mut [u32],
        vocab: usize,
    ) -> Result<(), DataError> {
        let count = out.len() as u64;
        if start.checked_add(count).is_none_or(|end| end > self.tokens) {
            // The loader computes ranges from validated lengths; a failure here
            // means the file changed underneath us.
            return Err(DataError::TruncatedShard {
                path: self.path.clone(),
                claimed: self.tokens,
                expected_bytes: SHARD_HEADER_BYTES + 2 * self.tokens,
                actual_bytes: SHARD_HEADER_BYTES + 2 * start,
            });
        }
        let mut bytes = vec![0u8; out.len() * 2];
        file.seek(SeekFrom::Start(SHARD_HEADER_BYTES + 2 * start))
            .map_err(|e| DataError::io(&self.path, e))?;
        file.read_exact(&mut bytes).map_err(|e| DataError::io(&self.path, e))?;
        for (k, (slot, pair)) in out.iter_mut().zip(bytes.chunks_exact(2)).enumerate() {
            let token = u32::from(u16::from_le_bytes([pair[0], pair[1]]));
            if token as usize >= vocab {
                return Err(DataError::TokenOutOfRange {
                    source_name: self.path.display().to_string(),
                    token,
                    position: start + k as u64,
                    vocab,
                });
            }
            *slot = token;
        }
        Ok(())
    }

    /// Reads every token (for small shards and tools; a 100M-token shard takes 200 MB).
    pub fn read_all(&self, vocab: usize) -> Result<Vec<u32>, DataError> {
        let mut file = File::open(&self.path).map_err(|e| DataError::io(&self.path, e))?;
        let len = usize::try_from(self.tokens).map_err(|_| DataError::BadShardCount {
            path: self.path.clone(),
            claimed: self.tokens as i64,
            reason: "too large for this machine's address space",
        })?;
        let mut out = vec![0u32; len];
        self.read_into(&mut file, 0, &mut out, vocab)?;
        Ok(out)
    }
}

/// Writes `tokens` as an llm.c version-1 shard at `path` (overwriting it).
pub fn write_shard(path: &Path, tokens: &[u32]) -> Result<(), DataError> {
    if tokens.is_empty() {
        return Err(DataError::EmptyFile { path: path.to_path_buf() });
    }
    let count = i32::try_from(tokens.len()).map_err(|_| DataError::BadShardCount {
        path: path.to_path_buf(),
        claimed: tokens.len() as i64,
        reason: "more than 2^31-1 tokens; split into several shards",
    })?;
    let mut header = [0i32; 256];
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = count;
    let mut body = Vec::with_capacity(SHARD_HEADER_BYTES as usize + 2 * tokens.len());
    for value in header {
        body.extend_from_slice(&value.to_le_bytes());
    }
    for &token in tokens {
        let narrow = u16::try_from(token).map_err(|_| DataError::TokenTooWideForShard { token })?;
        body.extend_from_slice(&narrow.to_le_bytes());
    }
    let file = File::create(path).map_err(|e| DataError::io(path, e))?;
    let mut writer = BufWriter::new(file);
    writer.write_all(&body).map_err(|e| DataError::io(path, e))?;
    writer.flush().map_err(|e| DataError::io(path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(magic: i32, version: i32, count: i32) -> Vec<u8> {
        let mut header = vec![0u8; SHARD_HEADER_BYTES as usize];
        header[0..4].copy_from_slice(&magic.to_le_bytes());
        header[4..8].copy_from_slice(&version.to_le_bytes());
        header[8..12].copy_from_slice(&count.to_le_bytes());
        header
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train_000.bin");
        let tokens: Vec<u32> = (0..5000).map(|i| (i * 7919) % 50257).collect();
        write_shard(&path, &tokens).unwrap();
        let shard = TokenShard::open(&path).unwrap();
        assert_eq!(shard.len(), 5000);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1024 + 2 * 5000);
        assert_eq!(shard.read_all(50257).unwrap(), tokens);
        let mut file = File::open(&path).unwrap();
        let mut window = vec![0u32; 10];
        shard.read_into(&mut file, 100, &mut window, 50257).unwrap();
        assert_eq!(window, tokens[100..110]);
    }

    #[test]
    fn bad_magic_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.bin");
        let mut bytes = header_bytes(12345, 1, 4);
        bytes.extend_from_slice(&[0u8; 8]);
        std::fs::write(&path, bytes).unwrap();
        let err = TokenShard::open(&path).unwrap_err();
        assert!(matches!(err, DataError::BadShardMagic { found: 12345, .. }), "{err}");
        assert!(err.to_string().contains("20240520"), "{err}");
    }

    #[test]
    fn bad_version_and_count_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.bin");
        std::fs::write(&path, header_bytes(SHARD_MAGIC, 2, 0)).unwrap();
        assert!(matches!(TokenShard::open(&path), Err(DataError::BadShardVersion { found: 2, .. })));
        std::fs::write(&path, header_bytes(SHARD_MAGIC, 1, -5)).unwrap();
        assert!(matches!(TokenShard::open(&path), Err(DataError::BadShardCount { claimed: -5, .. })));
    }

    #[test]
    fn truncated_shard_is_a_clear_error_without_allocating_the_claim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.bin");
        // Claims two billion tokens but holds three.
        let mut bytes = header_bytes(SHARD_MAGIC, 1, i32::MAX);
        bytes.extend_from_slice(&[1, 0, 2, 0, 3, 0]);
        std::fs::write(&path, bytes).unwrap();
        let err = TokenShard::open(&path).unwrap_err();
        assert!(matches!(err, DataError::TruncatedShard { actual_bytes: 1030, .. }), "{err}");
        assert!(err.to_string().contains("truncated"), "{err}");

        std::fs::write(&path, &header_bytes(SHARD_MAGIC, 1, 4)[..100]).unwrap();
        assert!(matches!(TokenShard::open(&path), Err(DataError::TruncatedShard { .. })));
    }

    #[test]
    fn trailing_bytes_and_empty_files_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.bin");
        let mut bytes = header_bytes(SHARD_MAGIC, 1, 1);
        bytes.extend_from_slice(&[1, 0, 2, 0]);
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(TokenShard::open(&path), Err(DataError::TrailingShardBytes { extra_bytes: 2, .. })));
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(TokenShard::open(&path), Err(DataError::EmptyFile { .. })));
        assert!(matches!(
            TokenShard::open(&dir.path().join("absent.bin")),
            Err(DataError::MissingPath { .. })
        ));
    }

    #[test]
    fn tokens_outside_the_vocabulary_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wide.bin");
        write_shard(&path, &[1, 2, 300, 4]).unwrap();
        let err = TokenShard::open(&path).unwrap().read_all(256).unwrap_err();
        assert!(
            matches!(err, DataError::TokenOutOfRange { token: 300, position: 2, vocab: 256, .. }),
            "{err}"
        );
        assert!(matches!(
            write_shard(&path, &[70_000]),
            Err(DataError::TokenTooWideForShard { token: 70_000 })
        ));
    }
}
