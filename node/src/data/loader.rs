//! `BatchLoader`: deterministic batches of (inputs, targets) for training and
//! validation, with a small resumable position.
//!
//! Token data is cut into non-overlapping windows of `seq + 1` tokens (windows
//! never straddle two shards). Training epoch `e` visits the windows in a
//! permutation keyed by (seed, e) that every node computes identically; node
//! `i` of `n` takes positions `i, i + n, i + 2n, …`, so within an epoch the
//! nodes of a run read disjoint windows. Validation reads its windows in
//! order. The synthetic corpus draws window `w` of a stream from a generator
//! seeded by (stream, w), so every window is reproducible on its own.
//! A position is just the number of windows read, plus a fingerprint of the
//! stream so a checkpoint cannot resume onto different data by mistake.

use std::fs::File;
use std::sync::Arc;

use super::corpus::{CorpusBody, CorpusInner, Segment, TokenStore};
use super::error::DataError;
use super::rng::{derive_seed, SplitMix64, WindowPermutation};

const TRAIN_STREAM: u64 = 0x0074_7261_696e; // "train"
const VAL_STREAM: u64 = 0x0076_616c; // "val"

/// One batch: `inputs[b * seq + t]` is followed by `targets[b * seq + t]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
    pub batch: usize,
    pub seq: usize,
}

/// Where a loader stands, small enough to store in a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoaderPosition {
    /// Which stream this position belongs to (data, split, seed, shard, seq).
    pub stream: String,
    /// Windows (sequences) handed out so far.
    pub windows_read: u64,
}

/// Maps a window number to the tokens it covers.
#[derive(Clone, Debug)]
struct WindowIndex {
    segments: Vec<Segment>,
    /// `first_window[k]`: number of windows in segments before k.
    first_window: Vec<u64>,
    window_len: u64,
    total: u64,
}

impl WindowIndex {
    fn new(segments: &[Segment], window_len: u64) -> Self {
        let mut first_window = Vec::with_capacity(segments.len());
        let mut total = 0;
        for s in segments {
            first_window.push(total);
            total += s.len / window_len;
        }
        Self { segments: segments.to_vec(), first_window, window_len, total }
    }

    /// (store, first token) of window `w` (< total).
    fn locate(&self, w: u64) -> (usize, u64) {
        let k = self.first_window.partition_point(|&first| first <= w).saturating_sub(1);
        // Skip empty segments that share a first_window value.
        let k = (k..self.segments.len())
            .find(|&k| w < self.first_window[k] + self.segments[k].len / self.window_len)
            .unwrap_or(k);
        let s = self.segments[k];
        (s.store, s.start + (w - self.first_window[k]) * self.window_len)
    }
}

#[derive(Clone, Debug)]
enum WindowOrder {
    /// Synthetic stream: window `w` is generated from derive_seed(stream, w).
    Generated { stream: u64 },
    /// Validation: windows in order, wrapping around.
    Sequential { index: WindowIndex },
    /// Training: this node's share of a per-epoch permutation.
    Shuffled { index: WindowIndex, seed: u64, shard_index: u64, shard_count: u64, share: u64 },
}

/// Deterministic batches over one split of a corpus.
pub struct BatchLoader {
    corpus: Arc<CorpusInner>,
    batch: usize,
    seq: usize,
    order: WindowOrder,
    stream: String,
    windows_read: u64,
    open_shard: Option<(usize, File)>,
    window: Vec<u32>,
}

impl std::fmt::Debug for BatchLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchLoader")
            .field("stream", &self.stream)
            .field("batch", &self.batch)
            .field("seq", &self.seq)
            .field("windows_read", &self.windows_read)
            .finish()
    }
}

fn check_shape(batch: usize, seq: usize) -> Result<u64, DataError> {
    if batch == 0 || seq == 0 {
        return Err(DataError::BadBatchShape { batch, seq });
    }
    Ok(seq as u64 + 1)
}

impl BatchLoader {
    pub(crate) fn train(
        corpus: Arc<CorpusInner>,
        batch: usize,
        seq: usize,
        seed: u64,
        shard_index: u64,
        shard_count: u64,
    ) -> Result<Self, DataError> {
        let window_len = check_shape(batch, seq)?;
        if shard_index >= shard_count {
            return Err(DataError::BadShardAssignment { index: shard_index, count: shard_count });
        }
        let (order, stream) = match &corpus.body {
            CorpusBody::Synthetic(language) => {
                let stream = derive_seed(language.spec().seed, &[TRAIN_STREAM, seed, shard_index]);
                (
                    WindowOrder::Generated { stream },
                    format!("synthetic train seed={seed} shard={shard_index} seq={seq}"),
                )
            }
            CorpusBody::Tokens { train, .. } => {
                let index = WindowIndex::new(train, window_len);
                let available: u64 = train.iter().map(|s| s.len).sum();
                if index.total == 0 {
                    return Err(DataError::SequenceTooLong {
                        what: "training split",
                        needed: window_len,
                        available,
                    });
                }
                if index.total < shard_count {
                    return Err(DataError::TooFewWindows { windows: index.total, shard_count });
                }
                let share = (index.total - shard_index).div_ceil(shard_count);
                let stream = format!(
                    "train windows={} seed={seed} shard={shard_index}/{shard_count} seq={seq}",
                    index.total
                );
                (WindowOrder::Shuffled { index, seed, shard_index, shard_count, share }, stream)
            }
        };
        Ok(Self::new(corpus, batch, seq, order, stream))
    }

    pub(crate) fn val(corpus: Arc<CorpusInner>, batch: usize, seq: usize) -> Result<Self, DataError> {
        let window_len = check_shape(batch, seq)?;
        let (order, stream) = match &corpus.body {
            CorpusBody::Synthetic(language) => {
                let stream = derive_seed(language.spec().seed, &[VAL_STREAM]);
                (WindowOrder::Generated { stream }, format!("synthetic val seq={seq}"))
            }
            CorpusBody::Tokens { val, .. } => {
                let index = WindowIndex::new(val, window_len);
                if index.total == 0 {
                    let available = val.iter().map(|s| s.len).sum();
                    return Err(DataError::SequenceTooLong {
                        what: "validation split",
                        needed: window_len,
                        available,
                    });
                }
                let stream = format!("val windows={} seq={seq}", index.total);
                (WindowOrder::Sequential { index }, stream)
            }
        };
        Ok(Self::new(corpus, batch, seq, order, stream))
    }

    fn new(corpus: Arc<CorpusInner>, batch: usize, seq: usize, order: WindowOrder, stream: String) -> Self {
        Self {
            corpus,
            batch,
            seq,
            order,
            stream,
            windows_read: 0,
            open_shard: None,
            window: vec![0; seq + 1],
        }
    }

    /// The next `batch × seq` inputs and their targets (inputs shifted by one).
    pub fn next_batch(&mut self) -> Result<Batch, DataError> {
        let (b_len, t_len) = (self.batch, self.seq);
        let mut inputs = Vec::with_capacity(b_len * t_len);
        let mut targets = Vec::with_capacity(b_len * t_len);
        let start = self.windows_read;
        for b in 0..b_len as u64 {
            if let Err(e) = self.fill_window(start + b) {
                self.windows_read = start;
                return Err(e);
            }
            inputs.extend_from_slice(&self.window[..t_len]);
            targets.extend_from_slice(&self.window[1..]);
        }
        self.windows_read = start + b_len as u64;
        Ok(Batch { inputs, targets, batch: b_len, seq: t_len })
    }

    /// Fills `self.window` with the tokens of the `k`-th window this loader hands out.
    fn fill_window(&mut self, k: u64) -> Result<(), DataError> {
        let (index, w) = match &self.order {
            WindowOrder::Generated { stream } => {
                if let CorpusBody::Synthetic(language) = &self.corpus.body {
                    language
                        .sample_window(&mut SplitMix64::new(derive_seed(*stream, &[k])), &mut self.window);
                }
                return Ok(());
            }
            WindowOrder::Sequential { index } => (index, k % index.total),
            WindowOrder::Shuffled { index, seed, shard_index, shard_count, share } => {
                let (epoch, j) = (k / share, k % share);
                let permutation =
                    WindowPermutation::new(index.total, derive_seed(*seed, &[TRAIN_STREAM, epoch]));
                (index, permutation.apply(shard_index + j * shard_count))
            }
        };
        let (store, first) = index.locate(w);
        let CorpusBody::Tokens { stores, .. } = &self.corpus.body else { return Ok(()) };
        match &stores[store] {
            TokenStore::Memory { tokens } => {
                let (first, len) = (first as usize, self.window.len());
                self.window.copy_from_slice(&tokens[first..first + len]);
            }
            TokenStore::Shard(shard) => {
                if self.open_shard.as_ref().is_none_or(|(open, _)| *open != store) {
                    let file = File::open(shard.path()).map_err(|e| DataError::io(shard.path(), e))?;
                    self.open_shard = Some((store, file));
                }
                if let Some((_, file)) = self.open_shard.as_mut() {
                    shard.read_into(file, first, &mut self.window, self.corpus.vocab)?;
                }
            }
        }
        Ok(())
    }

    /// Where this loader stands (store it in a checkpoint).
    pub fn position(&self) -> LoaderPosition {
        LoaderPosition { stream: self.stream.clone(), windows_read: self.windows_read }
    }

    /// Resumes from a stored position of the same stream.
    pub fn seek(&mut self, position: &LoaderPosition) -> Result<(), DataError> {
        if position.stream != self.stream {
            return Err(DataError::PositionMismatch {
                saved: position.stream.clone(),
                current: self.stream.clone(),
            });
        }
        self.windows_read = position.windows_read;
        Ok(())
    }

    /// Back to the first batch.
    pub fn reset(&mut self) {
        self.windows_read = 0;
    }

    /// Windows this loader visits per epoch (its share for training); `None`
    /// for the unbounded synthetic streams. For validation, the number of
    /// batches that cover the split once is `windows_per_epoch / batch` (rounded up).
    pub fn windows_per_epoch(&self) -> Option<u64> {
        match &self.order {
            WindowOrder::Generated { .. } => None,
            WindowOrder::Sequential { index } => Some(index.total),
            WindowOrder::Shuffled { share, .. } => Some(*share),
        }
    }

    /// Completed passes over this loader's share (0 for synthetic streams).
    pub fn epoch(&self) -> u64 {
        self.windows_per_epoch().map_or(0, |per| self.windows_read / per)
    }

    pub fn batch_size(&self) -> usize {
        self.batch
    }

    pub fn seq_len(&self) -> usize {
        self.seq
    }

    /// Tokens of one batch (`batch × seq`, the number of predicted targets).
    pub fn tokens_per_batch(&self) -> usize {
        self.batch * self.seq
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::data::corpus::Corpus;
    use crate::data::shard::write_shard;
    use crate::data::spec::DataSpec;
    use crate::data::tokenizer::TokenizerKind;

    /// Two train shards whose token at global position p is p, and a val shard.
    fn counting_shards() -> (tempfile::TempDir, Corpus) {
        let dir = tempfile::tempdir().unwrap();
        let tokens: Vec<u32> = (0..10_000).collect();
        write_shard(&dir.path().join("count_train_000.bin"), &tokens[..5000]).unwrap();
        write_shard(&dir.path().join("count_train_001.bin"), &tokens[5000..]).unwrap();
        write_shard(&dir.path().join("count_val_000.bin"), &tokens[..1000]).unwrap();
        let corpus = Corpus::open(&DataSpec::parse(dir.path().to_str().unwrap()).unwrap()).unwrap();
        (dir, corpus)
    }

    #[test]
    fn targets_are_inputs_shifted_by_one() {
        let (_dir, corpus) = counting_shards();
        let mut loader = corpus.train_loader(4, 15, 1, 0, 1).unwrap();
        let batch = loader.next_batch().unwrap();
        assert_eq!((batch.inputs.len(), batch.targets.len()), (60, 60));
        for (x, y) in batch.inputs.iter().zip(&batch.targets) {
            assert_eq!(x + 1, *y);
        }
        for row in batch.inputs.chunks(15) {
            assert_eq!((row[0] % 5000) % 16, 0, "window starts are aligned in their shard");
        }
    }

    #[test]
    fn loaders_are_deterministic() {
        let (_dir, corpus) = counting_shards();
        let mut a = corpus.train_loader(3, 15, 42, 1, 3).unwrap();
        let mut b = corpus.train_loader(3, 15, 42, 1, 3).unwrap();
        let mut c = corpus.train_loader(3, 15, 43, 1, 3).unwrap();
        let (mut same, mut differs) = (true, false);
        for _ in 0..10 {
            let (x, y, z) = (a.next_batch().unwrap(), b.next_batch().unwrap(), c.next_batch().unwrap());
            same &= x == y;
            differs |= x != z;
        }
        assert!(same && differs);
    }

    #[test]
    fn shards_of_a_run_read_disjoint_windows_covering_the_epoch() {
        let (_dir, corpus) = counting_shards();
        let mut seen = Vec::new();
        for shard in 0..2 {
            let mut loader = corpus.train_loader(1, 15, 7, shard, 2).unwrap();
            let share = loader.windows_per_epoch().unwrap();
            let starts: HashSet<u32> = (0..share).map(|_| loader.next_batch().unwrap().inputs[0]).collect();
            assert_eq!(starts.len() as u64, share, "no window twice within an epoch");
            seen.push(starts);
        }
        assert!(seen[0].is_disjoint(&seen[1]));
        assert_eq!(seen[0].len() + seen[1].len(), 2 * (5000 / 16));
    }

    #[test]
    fn epochs_reshuffle() {
        let (_dir, corpus) = counting_shards();
        let mut loader = corpus.train_loader(1, 15, 7, 0, 1).unwrap();
        let per = loader.windows_per_epoch().unwrap();
        let first: Vec<u32> = (0..per).map(|_| loader.next_batch().unwrap().inputs[0]).collect();
        assert_eq!(loader.epoch(), 1);
        let second: Vec<u32> = (0..per).map(|_| loader.next_batch().unwrap().inputs[0]).collect();
        assert_ne!(first, second);
        let (a, b): (HashSet<_>, HashSet<_>) = (first.into_iter().collect(), second.into_iter().collect());
        assert_eq!(a, b);
    }

    #[test]
    fn position_resumes_the_same_batches() {
        let (_dir, corpus) = counting_shards();
        let mut loader = corpus.train_loader(2, 15, 5, 0, 2).unwrap();
        for _ in 0..7 {
            loader.next_batch().unwrap();
        }
        let saved = serde_json::to_string(&loader.position()).unwrap();
        let expected = loader.next_batch().unwrap();
        let mut resumed = corpus.train_loader(2, 15, 5, 0, 2).unwrap();
        resumed.seek(&serde_json::from_str(&saved).unwrap()).unwrap();
        assert_eq!(resumed.next_batch().unwrap(), expected);
        resumed.reset();
        assert_eq!(resumed.position().windows_read, 0);

        let mut other = corpus.train_loader(2, 15, 5, 1, 2).unwrap();
        let err = other.seek(&serde_json::from_str(&saved).unwrap()).unwrap_err();
        assert!(matches!(err, DataError::PositionMismatch { .. }), "{err}");
    }

    #[test]
    fn validation_reads_in_order_and_wraps() {
        let (_dir, corpus) = counting_shards();
        let mut val = corpus.val_loader(1, 15).unwrap();
        let per = val.windows_per_epoch().unwrap();
        assert_eq!(per, 1000 / 16);
        let starts: Vec<u32> = (0..per + 1).map(|_| val.next_batch().unwrap().inputs[0]).collect();
        assert_eq!(starts[..3], [0, 16, 32]);
        assert_eq!(starts[per as usize], 0);
    }

    #[test]
    fn synthetic_streams_are_seeded_per_node_and_val_is_shared() {
        let corpus = Corpus::open(&DataSpec::synthetic()).unwrap();
        let batch = |seed, shard| corpus.train_loader(2, 64, seed, shard, 4).unwrap().next_batch().unwrap();
        assert_eq!(batch(1, 0), batch(1, 0));
        assert_ne!(batch(1, 0), batch(1, 1));
        assert_ne!(batch(1, 0), batch(2, 0));
        let b = batch(1, 3);
        assert!(b.inputs.iter().all(|&t| t < 256));
        assert_eq!(b.inputs[1..64], b.targets[..63]);
        let v1 = corpus.val_loader(4, 64).unwrap().next_batch().unwrap();
        let v2 = corpus.val_loader(4, 64).unwrap().next_batch().unwrap();
        assert_eq!(v1, v2);
        assert_ne!(v1.inputs, batch(1, 0).inputs);
        assert_eq!(corpus.val_loader(4, 64).unwrap().windows_per_epoch(), None);
    }

    #[test]
    fn synthetic_position_resumes() {
        let corpus = Corpus::open(&DataSpec::parse("synthetic:seed=3").unwrap()).unwrap();
        let mut a = corpus.train_loader(4, 32, 9, 0, 1).unwrap();
        a.next_batch().unwrap();
        let position = a.position();
        let expected = a.next_batch().unwrap();
        let mut b = corpus.train_loader(4, 32, 9, 0, 1).unwrap();
        b.seek(&position).unwrap();
        assert_eq!(b.next_batch().unwrap(), expected);
    }

    #[test]
    fn impossible_shapes_are_clear_errors() {
        let (_dir, corpus) = counting_shards();
        let err = corpus.train_loader(1, 6000, 1, 0, 1).unwrap_err();
        assert!(matches!(err, DataError::SequenceTooLong { needed: 6001, .. }), "{err}");
        assert!(err.to_string().contains("shorter --seq"), "{err}");
        assert!(matches!(corpus.val_loader(1, 2000), Err(DataError::SequenceTooLong { .. })));
        assert!(matches!(corpus.train_loader(1, 15, 1, 2, 2), Err(DataError::BadShardAssignment { .. })));
        assert!(matches!(corpus.train_loader(0, 15, 1, 0, 1), Err(DataError::BadBatchShape { .. })));
        assert!(matches!(corpus.train_loader(1, 2499, 1, 0, 5), Err(DataError::TooFewWindows { .. })));
    }

    #[test]
    fn shard_tokens_outside_a_byte_vocabulary_fail_on_read() {
        let (dir, _) = counting_shards();
        let spec = DataSpec::parse(dir.path().to_str().unwrap()).unwrap().with_tokenizer(TokenizerKind::Byte);
        let corpus = Corpus::open(&spec).unwrap();
        let mut loader = corpus.train_loader(8, 15, 1, 0, 1).unwrap();
        let err = (0..100).find_map(|_| loader.next_batch().err()).expect("some window has tokens >= 256");
        assert!(matches!(err, DataError::TokenOutOfRange { vocab: 256, .. }), "{err}");
    }
}
