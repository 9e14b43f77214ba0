//! The tokens of a dataset's windows, as training or validation batches.
//! A window is `seq + 1` consecutive tokens inside one shard
//! (`DatasetManifest::locate`); its first `seq` tokens are the inputs and
//! its last `seq` the targets.

use murmur_protocol::dataset::{DatasetManifest, Split};

use crate::data::error::DataError;
use crate::data::loader::Batch;

/// The u16 tokens of a shard's bytes, each checked to be below `vocab`.
pub fn shard_tokens(bytes: &[u8], vocab: u32, name: &str) -> Result<Vec<u16>, DataError> {
    if !bytes.len().is_multiple_of(2) {
        return Err(DataError::BadDataset {
            what: name.into(),
            reason: "a shard has an odd number of bytes".into(),
        });
    }
    let tokens: Vec<u16> = bytes.chunks_exact(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
    if let Some((position, &t)) = tokens.iter().enumerate().find(|(_, &t)| u32::from(t) >= vocab) {
        return Err(DataError::TokenOutOfRange {
            source_name: name.into(),
            token: u32::from(t),
            position: position as u64,
            vocab: vocab as usize,
        });
    }
    Ok(tokens)
}

/// Batches of `batch` windows each from `windows` (numbers of `split`'s
/// windows of `seq + 1` tokens, in order); `shard(i)` gives the tokens of
/// the split's shard `i`. A trailing partial batch is dropped.
pub fn batches_of<'a>(
    manifest: &DatasetManifest,
    split: Split,
    windows: &[u64],
    batch: usize,
    seq: usize,
    shard: &dyn Fn(usize) -> Option<&'a [u16]>,
) -> Result<Vec<Batch>, DataError> {
    let window_len = seq as u64 + 1;
    let mut out = Vec::with_capacity(windows.len() / batch.max(1));
    for group in windows.chunks_exact(batch.max(1)) {
        let mut inputs = Vec::with_capacity(batch * seq);
        let mut targets = Vec::with_capacity(batch * seq);
        for &w in group {
            let (i, first) = manifest.locate(split, window_len, w).ok_or(DataError::SequenceTooLong {
                what: "dataset shard",
                needed: window_len,
                available: u64::from(manifest.shard_tokens),
            })?;
            let tokens = shard(i).ok_or_else(|| DataError::BadDataset {
                what: "round data".into(),
                reason: format!("shard {i} was not loaded"),
            })?;
            let first = first as usize;
            let window = tokens.get(first..first + seq + 1).ok_or_else(|| DataError::BadDataset {
                what: "round data".into(),
                reason: format!("shard {i} is shorter than the manifest says"),
            })?;
            inputs.extend(window[..seq].iter().map(|&t| u32::from(t)));
            targets.extend(window[1..].iter().map(|&t| u32::from(t)));
        }
        out.push(Batch { inputs, targets, batch, seq });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::dataset::{DatasetTokenizer, ShardEntry};
    use murmur_protocol::hash::ShardHash;

    #[test]
    fn windows_become_shifted_batches_from_the_right_shard() {
        let m = DatasetManifest {
            tokenizer: DatasetTokenizer::Byte,
            shard_tokens: 100,
            train: vec![
                ShardEntry { hash: ShardHash([1; 32]), tokens: 100 },
                ShardEntry { hash: ShardHash([2; 32]), tokens: 40 },
            ],
            val: vec![ShardEntry { hash: ShardHash([3; 32]), tokens: 10 }],
        };
        let shards: Vec<Vec<u16>> = vec![(0..100).collect(), (100..140).collect()];
        let get = |i: usize| shards.get(i).map(Vec::as_slice);
        // seq 9 → windows of 10: 10 in shard 0, 4 in shard 1.
        let b = batches_of(&m, Split::Train, &[0, 12, 3], 2, 9, &get).unwrap();
        assert_eq!(b.len(), 1, "the partial batch is dropped");
        assert_eq!(b[0].inputs[..9], (0..9).collect::<Vec<u32>>()[..]);
        assert_eq!(b[0].targets[9..], (121..130).collect::<Vec<u32>>()[..]);
        assert!(batches_of(&m, Split::Train, &[14], 1, 9, &get).is_err());
        assert!(shard_tokens(&[1, 0, 2], 256, "s").is_err());
        assert!(matches!(
            shard_tokens(&[0, 1], 256, "s"),
            Err(DataError::TokenOutOfRange { token: 256, .. })
        ));
        assert_eq!(shard_tokens(&[7, 0, 255, 0], 256, "s").unwrap(), vec![7, 255]);
    }
}
