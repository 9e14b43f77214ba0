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
/// `compute::tokens::token_layout`), and how many distinct tokens the upload had.
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
