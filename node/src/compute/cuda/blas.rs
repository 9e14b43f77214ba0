//! cuBLAS for the linear layers, in the three layouts the model needs, on
//! row-major (out, in) weights. cuBLAS is column-major, so each row-major
//! product is computed as its transpose: a row-major (r, k) matrix is a
//! column-major (k, r) one with leading dimension k.
//!
//! Set up deterministic: atomics disallowed, pedantic math (plain fp32, no
//! TF32 even under NVIDIA_TF32_OVERRIDE), one stream and a fixed workspace,
//! so the same product on the same GPU gives the same bits.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublas::sys::{cublasAtomicsMode_t, cublasMath_t, cublasOperation_t};
use cudarc::cublas::{sys, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::CudaError;
use crate::compute::{MatmulLayout, MatmulShape};

/// Bytes of the fixed cuBLAS workspace.
const WORKSPACE_BYTES: usize = 32 << 20;

pub(super) struct Blas {
    handle: CudaBlas,
    /// Owned here so it outlives every GEMM that uses it.
    _workspace: CudaSlice<u8>,
}

impl Blas {
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, CudaError> {
        let handle = CudaBlas::new(stream.clone())
            .map_err(|e| CudaError::Cublas(format!("creating a handle: {e:?}")))?;
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(CudaError::driver("allocating the cuBLAS workspace"))?;
        let (ptr, _sync) = workspace.device_ptr(&stream);
        let h = *handle.handle();
        let cublas = |what: &str, s: sys::cublasStatus_t| {
            s.result().map_err(|e| CudaError::Cublas(format!("{what}: {e:?}")))
        };
        // SAFETY: `h` is the live handle; the workspace lives as long as it.
        unsafe {
            cublas(
                "atomics mode",
                sys::cublasSetAtomicsMode(h, cublasAtomicsMode_t::CUBLAS_ATOMICS_NOT_ALLOWED),
            )?;
            cublas("math mode", sys::cublasSetMathMode(h, cublasMath_t::CUBLAS_PEDANTIC_MATH))?;
            cublas("workspace", sys::cublasSetWorkspace_v2(h, ptr as *mut c_void, WORKSPACE_BYTES))?;
        }
        drop(_sync);
        Ok(Blas { handle, _workspace: workspace })
    }

    /// One linear-layer product (as the wgpu backend's `matmul`):
    /// NT: out(n,oc) = x(n,c)·y(oc,c)ᵀ + beta·out; NN: out(n,c) = x(n,oc)·y(oc,c) + beta·out;
    /// TN: out(oc,c) = x(n,oc)ᵀ·y(n,c) + beta·out.
    pub fn gemm(
        &self,
        layout: MatmulLayout,
        out: &mut CudaSlice<f32>,
        x: &CudaSlice<f32>,
        y: &CudaSlice<f32>,
        s: MatmulShape,
        beta: f32,
    ) {
        use cublasOperation_t::{CUBLAS_OP_N as N, CUBLAS_OP_T as T};
        let MatmulShape { n, c, oc } = s;
        // (op a, op b, m, n, k, lda, ldb, ldc) of the column-major product
        // outᵀ = op(a)·op(b) with a = y, b = x.
        let (transa, transb, m, nn, k, lda, ldb, ldc) = match layout {
            MatmulLayout::Nt => (T, N, oc, n, c, c, c, oc),
            MatmulLayout::Nn => (N, N, c, n, oc, c, oc, c),
            MatmulLayout::Tn => (N, T, c, oc, n, c, oc, c),
        };
        if m == 0 || nn == 0 {
            return;
        }
        let dim = |v: usize| {
            i32::try_from(v).unwrap_or_else(|_| panic!("matmul dimension {v} exceeds cuBLAS's i32"))
        };
        let cfg = GemmConfig {
            transa,
            transb,
            m: dim(m),
            n: dim(nn),
            k: dim(k),
            alpha: 1.0f32,
            lda: dim(lda),
            ldb: dim(ldb),
            beta,
            ldc: dim(ldc),
        };
        // SAFETY: the shapes above stay inside the tensors the model allocated
        // for this layer (x, y and out hold the products' operands).
        if let Err(e) = unsafe { self.handle.gemm(cfg, y, x, out) } {
            panic!("cuBLAS sgemm {} {s:?} failed: {e:?}", layout.name());
        }
    }
}
