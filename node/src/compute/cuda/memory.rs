//! Device memory of the CUDA backend: tensors, token buffers (ids plus the
//! grouping the encoder's backward pass needs), and counters of host↔device
//! tensor transfers.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaSlice;

/// `len` floats on the device (at least one element is allocated).
pub struct CudaTensor {
    pub(super) buf: CudaSlice<f32>,
    pub(super) len: usize,
}

/// Token ids on the device, laid out in four regions of `len` words (see
/// `token_layout`), and how many distinct tokens the upload had.
pub struct CudaTokens {
    pub(super) buf: CudaSlice<u32>,
    pub(super) len: usize,
    pub(super) groups: usize,
}

impl CudaTokens {
    /// Words a buffer of `len` tokens needs.
    pub fn words(len: usize) -> usize {
        4 * len.max(1) + 1
    }
}

/// The token buffer's contents for `ids`: ids, positions sorted by token
/// (stable), each distinct token, and where its positions start; plus the
/// number of distinct tokens.
pub fn token_layout(ids: &[u32], capacity: usize) -> (Vec<u32>, usize) {
    let capacity = capacity.max(1);
    let n = ids.len().min(capacity);
    let ids = &ids[..n];
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by_key(|&p| ids[p as usize]); // stable: positions stay in order
    let mut group_token = Vec::new();
    let mut group_start = Vec::new();
    for (k, &p) in order.iter().enumerate() {
        let tok = ids[p as usize];
        if group_token.last() != Some(&tok) {
            group_token.push(tok);
            group_start.push(k as u32);
        }
    }
    group_start.push(n as u32);
    let groups = group_token.len();
    let mut words = vec![0u32; CudaTokens::words(capacity)];
    words[..n].copy_from_slice(ids);
    words[capacity..capacity + n].copy_from_slice(&order);
    words[2 * capacity..2 * capacity + groups].copy_from_slice(&group_token);
    words[3 * capacity..3 * capacity + groups + 1].copy_from_slice(&group_start);
    (words, groups)
}

/// Host↔device traffic so far. Kernel arguments and on-device clears are
/// not transfers and are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    pub tensor_uploads: u64,
    pub token_uploads: u64,
    pub downloads: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// The counters behind `TransferStats`.
#[derive(Default)]
pub(super) struct TransferCounters {
    tensor_uploads: AtomicU64,
    token_uploads: AtomicU64,
    downloads: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl TransferCounters {
    pub fn upload(&self, tokens: bool, bytes: usize) {
        let which = if tokens { &self.token_uploads } else { &self.tensor_uploads };
        which.fetch_add(1, Ordering::Relaxed);
        self.bytes_up.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub fn download(&self, bytes: usize) {
        self.downloads.fetch_add(1, Ordering::Relaxed);
        self.bytes_down.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> TransferStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TransferStats {
            tensor_uploads: get(&self.tensor_uploads),
            token_uploads: get(&self.token_uploads),
            downloads: get(&self.downloads),
            bytes_up: get(&self.bytes_up),
            bytes_down: get(&self.bytes_down),
        }
    }
    pub fn reset(&self) {
        for a in
            [&self.tensor_uploads, &self.token_uploads, &self.downloads, &self.bytes_up, &self.bytes_down]
        {
            a.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::token_layout;

    #[test]
    fn tokens_are_grouped_stably_by_id() {
        let (w, groups) = token_layout(&[5, 2, 5, 9, 2], 6);
        assert_eq!(groups, 3);
        assert_eq!(&w[..5], &[5, 2, 5, 9, 2]);
        assert_eq!(&w[6..11], &[1, 4, 0, 2, 3], "positions sorted by token, stable");
        assert_eq!(&w[12..15], &[2, 5, 9]);
        assert_eq!(&w[18..22], &[0, 2, 4, 5]);
    }
}
