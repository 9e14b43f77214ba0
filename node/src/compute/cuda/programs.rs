//! The CUDA kernels: shaders/cuda/*.cu embedded in the binary, compiled at
//! run time by NVRTC to a CUBIN for the device's compute capability, and
//! cached — in memory for the life of the process, and on disk under
//! `MURMUR_CUDA_CACHE` (default `$XDG_CACHE_HOME/murmur/cuda` or
//! `~/.cache/murmur/cuda`) keyed by blake3 of (source, architecture, NVRTC
//! version), so a node compiles each file once per machine.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use cudarc::nvrtc::{result as nvrtc, sys};

use super::libs::CudaLibrary;
use super::CudaError;

/// One `.cu` file: its name under shaders/cuda and its source (after
/// block.cuh, the block reductions every file shares).
#[derive(Clone, Copy, Debug)]
pub struct Program {
    pub file: &'static str,
    pub source: &'static str,
    /// The kernels (`extern "C" __global__`) the backend loads from it.
    pub kernels: &'static [&'static str],
}

macro_rules! program {
    ($file:literal, [$($k:literal),* $(,)?]) => {
        Program {
            file: $file,
            source: concat!(
                include_str!("../../../../shaders/cuda/block.cuh"),
                include_str!(concat!("../../../../shaders/cuda/", $file))
            ),
            kernels: &[$($k),*],
        }
    };
}

/// Every kernel family, one file each (mirroring shaders/*.wgsl).
pub const PROGRAMS: [Program; 10] = [
    program!("adamw.cu", ["adamw_update"]),
    program!("attention.cu", ["flash_forward", "flash_backward_q", "flash_backward_kv"]),
    program!("encoder.cu", ["encoder_forward", "encoder_backward_wpe", "encoder_backward_wte"]),
    program!("gelu.cu", ["gelu_forward", "gelu_backward"]),
    program!("layernorm.cu", ["layernorm_forward", "layernorm_backward_input", "layernorm_backward_params"]),
    program!(
        "llama.cu",
        [
            "rmsnorm_forward",
            "rmsnorm_backward_input",
            "rmsnorm_backward_params",
            "rope",
            "swiglu_forward",
            "swiglu_backward",
        ]
    ),
    program!("matmul.cu", ["bias_rows", "column_sums"]),
    program!("reduce.cu", ["reduce_partials", "reduce_final", "grad_clip_scale"]),
    program!("residual.cu", ["residual_forward"]),
    program!("softmax_xent.cu", ["softmax_xent_forward", "softmax_xent_backward"]),
];

/// NVRTC's version (major, minor), part of the cache key.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    if !CudaLibrary::Nvrtc.present() {
        return Err(CudaError::MissingLibrary(CudaLibrary::Nvrtc));
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers to live integers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::Nvrtc(format!("{e:?}")))?;
    Ok((major, minor))
}

/// Compiles `p` for `sm_{arch}` (e.g. 80, 90) to a CUBIN, uncached.
pub fn compile(p: &Program, arch: u32) -> Result<Vec<u8>, CudaError> {
    if !CudaLibrary::Nvrtc.present() {
        return Err(CudaError::MissingLibrary(CudaLibrary::Nvrtc));
    }
    let nv = |e: nvrtc::NvrtcError| CudaError::Nvrtc(format!("{}: {e:?}", p.file));
    let src = CString::new(p.source).map_err(|_| CudaError::Nvrtc(format!("{}: NUL in source", p.file)))?;
    let name = CString::new(p.file).map_err(|_| CudaError::Nvrtc(format!("{}: NUL in name", p.file)))?;
    let prog = nvrtc::create_program(&src, Some(name.as_c_str())).map_err(nv)?;
    let opts = [format!("--gpu-architecture=sm_{arch}"), "--std=c++17".to_string()];
    // SAFETY: `prog` was just created and is destroyed once, below.
    let out = unsafe {
        match nvrtc::compile_program(prog, &opts) {
            Ok(()) => cubin(prog).map_err(nv),
            Err(_) => {
                let log = nvrtc::get_program_log(prog).map(|l| c_chars(&l)).unwrap_or_default();
                Err(CudaError::Compile { file: p.file, arch, log })
            }
        }
    };
    // SAFETY: created above, not destroyed before.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    out
}

/// The compiled program's CUBIN.
///
/// # Safety
/// `prog` must be a live, successfully compiled NVRTC program.
unsafe fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, nvrtc::NvrtcError> {
    let mut size = 0usize;
    sys::nvrtcGetCUBINSize(prog, &mut size).result()?;
    let mut buf = vec![0u8; size];
    sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char).result()?;
    Ok(buf)
}

fn c_chars(v: &[c_char]) -> String {
    let bytes: Vec<u8> = v.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Where compiled kernels are kept between runs (None: no disk cache).
fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("MURMUR_CUDA_CACHE") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("murmur").join("cuda"))
}

/// A CUBIN larger than this in the disk cache is not ours.
const MAX_CACHED_BYTES: u64 = 64 << 20;

/// CUBINs compiled by this process, by (file, architecture).
type ProcessCache = Mutex<HashMap<(&'static str, u32), Vec<u8>>>;

/// `p` compiled for `sm_{arch}`, from the process cache, the disk cache, or NVRTC.
pub fn cached(p: &Program, arch: u32) -> Result<Vec<u8>, CudaError> {
    static MEMORY: OnceLock<ProcessCache> = OnceLock::new();
    let memory = MEMORY.get_or_init(Default::default);
    if let Some(bin) = memory.lock().unwrap_or_else(|e| e.into_inner()).get(&(p.file, arch)) {
        return Ok(bin.clone());
    }
    let (major, minor) = nvrtc_version()?;
    let key = blake3::hash(format!("{}\0sm_{arch}\0nvrtc {major}.{minor}\0", p.source).as_bytes());
    let path =
        cache_dir().map(|d| d.join(format!("{}-{}.cubin", p.file.trim_end_matches(".cu"), key.to_hex())));
    let from_disk = path.as_ref().and_then(|f| {
        let len = std::fs::metadata(f).ok()?.len();
        (len > 0 && len <= MAX_CACHED_BYTES).then(|| std::fs::read(f).ok()).flatten()
    });
    let bin = match from_disk {
        Some(bin) => bin,
        None => {
            let bin = compile(p, arch)?;
            if let Some(f) = &path {
                store(f, &bin);
            }
            bin
        }
    };
    memory.lock().unwrap_or_else(|e| e.into_inner()).insert((p.file, arch), bin.clone());
    Ok(bin)
}

/// Writes a cache entry atomically (temp file + rename); failures only cost a recompile.
fn store(path: &std::path::Path, bin: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, bin))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        tracing::debug!("CUDA kernel cache {}: {e}", path.display());
        let _ = std::fs::remove_file(&tmp);
    }
}
