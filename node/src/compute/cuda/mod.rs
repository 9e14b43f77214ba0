//! The CUDA backend (cargo feature `cuda`): every Backend op on an NVIDIA GPU
//! through the CUDA driver API — GEMMs by cuBLAS, everything else a
//! hand-written kernel in shaders/cuda/*.cu compiled at run time by NVRTC.
//!
//! - `libs`: finding libcuda, libnvrtc and libcublas at run time (dlopen);
//! - `context`: device discovery and the backend's errors;
//! - `programs`: the embedded `.cu` files, NVRTC compilation and its caches;
//! - `memory`: tensors, token buffers, transfer counters;
//! - `launch`: the host side of each kernel family (attention's in
//!   `attention`, the Llama ops' in `llama`);
//! - `backend`: the Backend trait on top of `launch` and `blas`;
//! - `blas`: cuBLAS in the NT/NN/TN layouts, in a deterministic mode.
//!
//! Deterministic like the other backends: reductions are two-pass with fixed
//! trees, gradients that sum over rows give each output to one thread, no
//! float atomics anywhere, one stream, and cuBLAS with atomics disallowed,
//! pedantic (no TF32) math and a fixed workspace.

mod attention;
mod backend;
mod blas;
pub mod context;
mod launch;
pub mod libs;
mod llama;
pub mod memory;
pub mod programs;
pub mod testing;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream};
use cudarc::nvrtc::Ptx;

pub use context::{first_device, list_devices, CudaDeviceSummary, CudaError};
pub use memory::{CudaTensor, CudaTokens, TransferStats};

use memory::TransferCounters;

/// The CUDA backend on one device.
pub struct CudaBackend {
    stream: Arc<CudaStream>,
    blas: blas::Blas,
    kernels: HashMap<&'static str, CudaFunction>,
    name: String,
    arch: u32,
    memory_bytes: usize,
    transfers: TransferCounters,
    /// Reduction partials and the attention backward's row sums, grown on demand.
    scratch: Mutex<Scratch>,
}

#[derive(Default)]
struct Scratch {
    partials: Option<CudaSlice<f32>>,
    row_sums: Option<CudaSlice<f32>>,
}

impl Scratch {
    fn partials_slot(&mut self) -> &mut Option<CudaSlice<f32>> {
        &mut self.partials
    }
    fn row_sums_slot(&mut self) -> &mut Option<CudaSlice<f32>> {
        &mut self.row_sums
    }
}

impl CudaBackend {
    /// Opens device `ordinal`, compiles (or loads from the cache) every
    /// kernel for its compute capability, and sets up cuBLAS.
    pub fn new(ordinal: usize) -> Result<Self, CudaError> {
        context::require(&[libs::CudaLibrary::Driver, libs::CudaLibrary::Nvrtc, libs::CudaLibrary::Cublas])?;
        let ctx =
            CudaContext::new(ordinal).map_err(CudaError::driver(format!("opening device {ordinal}")))?;
        // One stream: the order of launches is the order of the work.
        // SAFETY: no other stream ever touches this context's buffers.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let (major, minor) = context::compute_capability(ordinal)?;
        let arch = major * 10 + minor;
        let name = ctx.name().map_err(CudaError::driver("reading the device name"))?;
        let memory_bytes = ctx.total_mem().map_err(CudaError::driver("reading the device memory"))?;
        let mut kernels = HashMap::new();
        for p in &programs::PROGRAMS {
            let module = match ctx.load_module(Ptx::from_binary(programs::cached(p, arch)?)) {
                Ok(m) => m,
                // A damaged disk-cache entry: compile afresh.
                Err(_) => ctx
                    .load_module(Ptx::from_binary(programs::compile(p, arch)?))
                    .map_err(CudaError::driver(format!("loading shaders/cuda/{}", p.file)))?,
            };
            for k in p.kernels {
                let f = module.load_function(k).map_err(CudaError::driver(format!("finding kernel {k}")))?;
                kernels.insert(*k, f);
            }
        }
        let blas = blas::Blas::new(stream.clone())?;
        Ok(CudaBackend {
            stream,
            blas,
            kernels,
            name,
            arch,
            memory_bytes,
            transfers: TransferCounters::default(),
            scratch: Mutex::new(Scratch::default()),
        })
    }

    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// Host↔device tensor transfers so far.
    pub fn transfer_stats(&self) -> TransferStats {
        self.transfers.snapshot()
    }

    pub fn reset_transfer_stats(&self) {
        self.transfers.reset();
    }

    /// Waits for the device to finish all submitted work.
    pub fn synchronize(&self) {
        if let Err(e) = self.stream.synchronize() {
            panic!("CUDA device error: {e}");
        }
    }

    fn function(&self, name: &'static str) -> &CudaFunction {
        match self.kernels.get(name) {
            Some(f) => f,
            None => panic!("CUDA kernel {name} is not in programs::PROGRAMS"),
        }
    }

    fn alloc<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> CudaSlice<T> {
        match self.stream.alloc_zeros::<T>(len.max(1)) {
            Ok(b) => b,
            Err(e) => panic!(
                "CUDA: cannot allocate {len} elements on {} ({} MiB): {e}; use a smaller model or batch",
                self.name,
                self.memory_bytes >> 20
            ),
        }
    }

    /// A scratch buffer of at least `len` floats, grown on demand.
    fn scratch(
        &self,
        which: fn(&mut Scratch) -> &mut Option<CudaSlice<f32>>,
        len: usize,
    ) -> std::sync::MutexGuard<'_, Scratch> {
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let slot = which(&mut s);
        if slot.as_ref().is_none_or(|b| b.len() < len.max(1)) {
            *slot = Some(self.alloc(len));
        }
        s
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Let queued work finish before buffers are freed.
        let _ = self.stream.synchronize();
    }
}
