//! Finding the CUDA libraries at run time. cudarc opens them with dlopen by
//! their sonames (libcuda.so.1, libnvrtc.so.12, libcublas.so.12), so a build
//! with the `cuda` feature links none of them and runs where CUDA is absent.
//!
//! Directories named in `MURMUR_CUDA_LIB_DIR` (':'-separated; e.g. the `lib`
//! folders of PyPI's nvidia-cuda-nvrtc-cu12 and nvidia-cublas-cu12 wheels) are
//! searched first: the libraries found there are loaded by full path, and a
//! later dlopen of the same soname returns the library already loaded.
//! Otherwise the dynamic loader's own search applies (LD_LIBRARY_PATH,
//! ld.so.cache).

use std::path::Path;
use std::sync::Once;

/// The environment variable naming extra directories to load CUDA libraries from.
pub const LIB_DIR_ENV: &str = "MURMUR_CUDA_LIB_DIR";

/// A CUDA library the backend needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaLibrary {
    /// The driver API (libcuda.so.1), installed with the NVIDIA driver.
    Driver,
    /// The run-time compiler for the kernels in shaders/cuda (libnvrtc.so.12).
    Nvrtc,
    /// cuBLAS, for the matmuls (libcublas.so.12, which loads libcublasLt.so.12).
    Cublas,
}

impl CudaLibrary {
    pub fn describe(self) -> &'static str {
        match self {
            CudaLibrary::Driver => "the CUDA driver library (libcuda.so.1)",
            CudaLibrary::Nvrtc => "NVRTC, CUDA 12's run-time compiler (libnvrtc.so.12)",
            CudaLibrary::Cublas => "cuBLAS 12 (libcublas.so.12)",
        }
    }

    /// What to install to get it.
    pub fn remedy(self) -> &'static str {
        match self {
            CudaLibrary::Driver => "install the NVIDIA driver (525 or newer)",
            CudaLibrary::Nvrtc => {
                "install the CUDA 12 toolkit's runtime libraries, or `pip install nvidia-cuda-nvrtc-cu12` \
                 and set MURMUR_CUDA_LIB_DIR to its nvidia/cuda_nvrtc/lib folder"
            }
            CudaLibrary::Cublas => {
                "install the CUDA 12 toolkit's runtime libraries, or `pip install nvidia-cublas-cu12` \
                 and add its nvidia/cublas/lib folder to MURMUR_CUDA_LIB_DIR"
            }
        }
    }

    /// True when the library can be loaded.
    pub fn present(self) -> bool {
        preload_from_env();
        // SAFETY: these only try dlopen on the library's candidate names.
        unsafe {
            match self {
                CudaLibrary::Driver => cudarc::driver::sys::is_culib_present(),
                CudaLibrary::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                CudaLibrary::Cublas => cudarc::cublas::sys::is_culib_present(),
            }
        }
    }
}

/// File names loaded from MURMUR_CUDA_LIB_DIR, dependencies first.
fn wanted(name: &str) -> bool {
    name == "libnvrtc.so.12"
        || (name.starts_with("libnvrtc-builtins.so.12") && !name.contains(".alt."))
        || name == "libcublasLt.so.12"
        || name == "libcublas.so.12"
}

/// Loads the libraries found in MURMUR_CUDA_LIB_DIR once per process.
pub fn preload_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(dirs) = std::env::var_os(LIB_DIR_ENV) else { return };
        for dir in std::env::split_paths(&dirs) {
            preload_dir(&dir);
        }
    });
}

fn preload_dir(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        tracing::warn!("{LIB_DIR_ENV}: cannot read {}", dir.display());
        return;
    };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| wanted(n)).collect();
    // builtins before nvrtc, cublasLt before cublas: each one's dependency first
    names.sort_by_key(|n| (!n.contains("builtins") && !n.contains("Lt"), n.clone()));
    for name in names {
        let path = dir.join(&name);
        // SAFETY: loading a CUDA library runs its initialisers, which is what
        // cudarc does anyway when it opens the same library by soname.
        match unsafe { libloading::Library::new(&path) } {
            // Kept loaded for the life of the process, as cudarc keeps its own handles.
            Ok(lib) => std::mem::forget(lib),
            Err(e) => tracing::warn!("{LIB_DIR_ENV}: cannot load {}: {e}", path.display()),
        }
    }
}
