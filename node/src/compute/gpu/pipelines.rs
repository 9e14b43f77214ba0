//! The WGSL kernels (shaders/, embedded at build time), the matmul tile
//! configurations (which kernel of the matmul family, its tiles, and whether
//! its inputs are rounded to f16), and the compiled-pipeline cache (compiled
//! on first use).

use std::collections::HashMap;
use std::sync::Mutex;

/// Every shader file in shaders/, by name.
pub const SHADERS: &[(&str, &str)] = &[
    ("adamw.wgsl", include_str!("../../../../shaders/adamw.wgsl")),
    ("attention.wgsl", include_str!("../../../../shaders/attention.wgsl")),
    ("encoder.wgsl", include_str!("../../../../shaders/encoder.wgsl")),
    ("gelu.wgsl", include_str!("../../../../shaders/gelu.wgsl")),
    ("layernorm.wgsl", include_str!("../../../../shaders/layernorm.wgsl")),
    ("llama.wgsl", include_str!("../../../../shaders/llama.wgsl")),
    ("matmul.wgsl", include_str!("../../../../shaders/matmul.wgsl")),
    ("matmul_common.wgsl", include_str!("../../../../shaders/matmul_common.wgsl")),
    ("matmul_coop.wgsl", include_str!("../../../../shaders/matmul_coop.wgsl")),
    ("matmul_wide.wgsl", include_str!("../../../../shaders/matmul_wide.wgsl")),
    ("reduce.wgsl", include_str!("../../../../shaders/reduce.wgsl")),
    ("residual.wgsl", include_str!("../../../../shaders/residual.wgsl")),
    ("softmax_xent.wgsl", include_str!("../../../../shaders/softmax_xent.wgsl")),
];

/// One compute entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    EncoderForward,
    EncoderBackwardPositions,
    EncoderBackwardTokens,
    LayernormForward,
    LayernormBackwardInput,
    LayernormBackwardParams,
    RmsnormForward,
    RmsnormBackwardInput,
    RmsnormBackwardParams,
    Rope,
    SwigluForward,
    SwigluBackward,
    /// The matmul family member a configuration names, specialised.
    Matmul(TileConfig),
    AttentionForward,
    AttentionBackwardScores,
    AttentionBackwardQkv,
    GeluForward,
    GeluBackward,
    ResidualForward,
    SoftmaxXentForward,
    SoftmaxXentBackward,
    ReducePartials,
    ReduceFinal,
    GradClipScale,
    ReduceColumns,
    AdamW,
}

impl Kernel {
    /// (shader file, entry point).
    pub fn entry(self) -> (&'static str, &'static str) {
        use Kernel::*;
        match self {
            EncoderForward => ("encoder.wgsl", "encoder_forward"),
            EncoderBackwardPositions => ("encoder.wgsl", "encoder_backward_positions"),
            EncoderBackwardTokens => ("encoder.wgsl", "encoder_backward_tokens"),
            LayernormForward => ("layernorm.wgsl", "layernorm_forward"),
            LayernormBackwardInput => ("layernorm.wgsl", "layernorm_backward_input"),
            LayernormBackwardParams => ("layernorm.wgsl", "layernorm_backward_params"),
            RmsnormForward => ("llama.wgsl", "rmsnorm_forward"),
            RmsnormBackwardInput => ("llama.wgsl", "rmsnorm_backward_input"),
            RmsnormBackwardParams => ("llama.wgsl", "rmsnorm_backward_params"),
            Rope => ("llama.wgsl", "rope"),
            SwigluForward => ("llama.wgsl", "swiglu_forward"),
            SwigluBackward => ("llama.wgsl", "swiglu_backward"),
            Matmul(t) => (t.family.file(), "matmul"),
            AttentionForward => ("attention.wgsl", "attention_forward"),
            AttentionBackwardScores => ("attention.wgsl", "attention_backward_scores"),
            AttentionBackwardQkv => ("attention.wgsl", "attention_backward_qkv"),
            GeluForward => ("gelu.wgsl", "gelu_forward"),
            GeluBackward => ("gelu.wgsl", "gelu_backward"),
            ResidualForward => ("residual.wgsl", "residual_forward"),
            SoftmaxXentForward => ("softmax_xent.wgsl", "softmax_xent_forward"),
            SoftmaxXentBackward => ("softmax_xent.wgsl", "softmax_xent_backward"),
            ReducePartials => ("reduce.wgsl", "reduce_partials"),
            ReduceFinal => ("reduce.wgsl", "reduce_final"),
            GradClipScale => ("reduce.wgsl", "grad_clip_scale"),
            ReduceColumns => ("reduce.wgsl", "reduce_columns"),
            AdamW => ("adamw.wgsl", "adamw_update"),
        }
    }
}

/// The source of one shader file.
pub fn shader_source(file: &str) -> Option<&'static str> {
    SHADERS.iter().find(|(name, _)| *name == file).map(|(_, src)| *src)
}

/// A shader file as it is compiled: the matmul kernels with
/// matmul_common.wgsl (their arguments, bindings, bounds-checked reads and
/// writes, and f16 rounding) appended.
pub fn kernel_source(file: &str) -> String {
    let src = shader_source(file).unwrap_or_default();
    let family = [MatmulFamily::Tiled, MatmulFamily::Wide, MatmulFamily::Coop];
    match family.iter().any(|f| f.file() == file) {
        true => format!("{src}\n{}", shader_source("matmul_common.wgsl").unwrap_or_default()),
        false => src.to_string(),
    }
}

/// The kernels of the matmul family (one arguments layout, one binding layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulFamily {
    /// matmul.wgsl: a 4 × 4 register tile per invocation, tiles as configured.
    Tiled,
    /// matmul_wide.wgsl: 8 × 8 per invocation, 128 × 128 per workgroup.
    Wide,
    /// matmul_coop.wgsl: 16×16 f16 cooperative matrices, 32 × 32 per subgroup.
    Coop,
}

impl MatmulFamily {
    pub fn file(self) -> &'static str {
        match self {
            MatmulFamily::Tiled => "matmul.wgsl",
            MatmulFamily::Wide => "matmul_wide.wgsl",
            MatmulFamily::Coop => "matmul_coop.wgsl",
        }
    }
}

/// One specialisation of the matmul family: each workgroup owns a
/// `tile_m × tile_n` block of C, stepping K by `tile_k`; in the tiled and
/// wide kernels each invocation owns `thread_m × thread_n` outputs, in the
/// cooperative one each subgroup 32 × 32. `f16_inputs` rounds A and B to f16
/// (saturating) before they are multiplied; the sums stay f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileConfig {
    pub name: &'static str,
    pub family: MatmulFamily,
    pub tile_m: u32,
    pub tile_n: u32,
    pub tile_k: u32,
    pub thread_m: u32,
    pub thread_n: u32,
    pub f16_inputs: bool,
}

impl TileConfig {
    /// 256 invocations, 4×4 outputs each, 8 KiB of workgroup memory: discrete
    /// and integrated GPUs.
    pub const LARGE: TileConfig = TileConfig::tiled("64x64x16/4x4", 64, 4);
    /// 64 invocations, 4×4 outputs each, 4 KiB: small workgroup limits and
    /// software adapters (lavapipe runs a workgroup on one CPU thread).
    pub const SMALL: TileConfig = TileConfig::tiled("32x32x16/4x4", 32, 4);
    /// 256 invocations, 8×8 outputs each, 8.25 KiB: grids of many 128 × 128
    /// blocks on hardware GPUs.
    pub const WIDE: TileConfig = TileConfig {
        name: "128x128x8/8x8",
        family: MatmulFamily::Wide,
        tile_m: 128,
        tile_n: 128,
        tile_k: 8,
        thread_m: 8,
        thread_n: 8,
        f16_inputs: false,
    };
    /// Cooperative matrices, 4 subgroups (128 invocations), 13 KiB.
    pub const COOP_SMALL: TileConfig = TileConfig::coop("coop 64x64x32", 64);
    /// Cooperative matrices, 16 subgroups (512 invocations), 35 KiB.
    pub const COOP_LARGE: TileConfig = TileConfig::coop("coop 128x128x32", 128);
    /// The fp32 configurations (each also runs with f16 inputs).
    pub const ALL: [TileConfig; 3] = [TileConfig::LARGE, TileConfig::SMALL, TileConfig::WIDE];
    /// The cooperative-matrix configurations (always f16 inputs).
    pub const COOP: [TileConfig; 2] = [TileConfig::COOP_SMALL, TileConfig::COOP_LARGE];

    const fn tiled(name: &'static str, tile: u32, thread: u32) -> TileConfig {
        TileConfig {
            name,
            family: MatmulFamily::Tiled,
            tile_m: tile,
            tile_n: tile,
            tile_k: 16,
            thread_m: thread,
            thread_n: thread,
            f16_inputs: false,
        }
    }

    const fn coop(name: &'static str, tile: u32) -> TileConfig {
        TileConfig {
            name,
            family: MatmulFamily::Coop,
            tile_m: tile,
            tile_n: tile,
            tile_k: 32,
            thread_m: 0,
            thread_n: 0,
            f16_inputs: true,
        }
    }

    /// This configuration with its inputs rounded to f16 (or not).
    pub fn with_f16_inputs(self, f16_inputs: bool) -> TileConfig {
        TileConfig { f16_inputs: f16_inputs || self.family == MatmulFamily::Coop, ..self }
    }

    pub fn invocations(&self) -> u32 {
        match self.family {
            MatmulFamily::Coop => 32 * (self.tile_m / 32) * (self.tile_n / 32),
            _ => (self.tile_m / self.thread_m) * (self.tile_n / self.thread_n),
        }
    }

    pub fn workgroup_bytes(&self) -> u32 {
        match self.family {
            MatmulFamily::Tiled => 4 * self.tile_k * (self.tile_m + self.tile_n),
            MatmulFamily::Wide => 2 * 16 * self.tile_k * (self.tile_m / 4 + 1),
            MatmulFamily::Coop => {
                let subgroups = (self.tile_m / 32) * (self.tile_n / 32);
                2 * (self.tile_m * (self.tile_k + 8) + self.tile_k * (self.tile_n + 8)) + 1024 * subgroups
            }
        }
    }

    /// Whether an adapter with `limits` can run this configuration (its
    /// features are the caller's to check).
    pub fn fits(&self, limits: &wgpu::Limits) -> bool {
        let (x, y) = match self.family {
            MatmulFamily::Coop => (self.invocations(), 1),
            _ => (self.tile_n / self.thread_n, self.tile_m / self.thread_m),
        };
        limits.max_compute_invocations_per_workgroup >= self.invocations()
            && limits.max_compute_workgroup_size_x >= x
            && limits.max_compute_workgroup_size_y >= y
            && limits.max_compute_workgroup_storage_size >= self.workgroup_bytes()
    }

    /// The base configuration for an adapter: LARGE where its limits allow
    /// and it is a hardware GPU, else SMALL.
    pub fn for_adapter(info: &wgpu::AdapterInfo, limits: &wgpu::Limits) -> TileConfig {
        if TileConfig::LARGE.fits(limits) && info.device_type != wgpu::DeviceType::Cpu {
            TileConfig::LARGE
        } else {
            TileConfig::SMALL
        }
    }

    pub fn by_name(name: &str) -> Option<TileConfig> {
        TileConfig::ALL
            .into_iter()
            .chain(TileConfig::COOP)
            .find(|t| t.name == name || name.eq_ignore_ascii_case(t.label()))
    }

    /// Short label: "large", "small", "wide", "coop-small" or "coop-large".
    pub fn label(&self) -> &'static str {
        match (self.family, self.tile_m) {
            (MatmulFamily::Wide, _) => "wide",
            (MatmulFamily::Coop, 64) => "coop-small",
            (MatmulFamily::Coop, _) => "coop-large",
            (MatmulFamily::Tiled, 64) => "large",
            (MatmulFamily::Tiled, _) => "small",
        }
    }

    /// The configuration's kernel source with its constants written in.
    pub fn specialize(&self, src: &str) -> String {
        let mut out = String::with_capacity(src.len());
        let consts: [(&str, String); 8] = [
            ("const TILE_M: u32", format!("{}u", self.tile_m)),
            ("const TILE_N: u32", format!("{}u", self.tile_n)),
            ("const TILE_K: u32", format!("{}u", self.tile_k)),
            ("const THREAD_M: u32", format!("{}u", self.thread_m)),
            ("const THREAD_N: u32", format!("{}u", self.thread_n)),
            ("const SG_M: u32", format!("{}u", self.tile_m / 32)),
            ("const SG_N: u32", format!("{}u", self.tile_n / 32)),
            ("const ROUND_F16: bool", self.f16_inputs.to_string()),
        ];
        let rewritten = |line: &str| match self.family {
            // The wide kernel's tiles are fixed; the cooperative one derives
            // its tiles from SG_M and SG_N and always rounds.
            MatmulFamily::Wide => line.starts_with("const ROUND_F16"),
            MatmulFamily::Coop => line.starts_with("const SG_"),
            MatmulFamily::Tiled => !line.starts_with("const SG_"),
        };
        for line in src.lines() {
            let replaced = consts
                .iter()
                .find(|(prefix, _)| line.starts_with(prefix) && rewritten(line))
                .map(|(prefix, v)| format!("{prefix} = {v};"));
            out.push_str(replaced.as_deref().unwrap_or(line));
            out.push('\n');
        }
        out
    }
}

/// Compiled pipelines, one per kernel (and matmul configuration), built on
/// first use.
#[derive(Default)]
pub struct Pipelines {
    cache: Mutex<HashMap<Kernel, wgpu::ComputePipeline>>,
}

impl Pipelines {
    pub fn get(&self, device: &wgpu::Device, kernel: Kernel) -> wgpu::ComputePipeline {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(kernel)
            .or_insert_with(|| {
                let (file, entry) = kernel.entry();
                let src = kernel_source(file);
                let src = match kernel {
                    Kernel::Matmul(tiles) => tiles.specialize(&src),
                    _ => src,
                };
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(file),
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                };
                let module = match kernel {
                    // naga's run-time checks (a bound on every loop, every
                    // workgroup index clamped) cost the matmul family 1.4–2.6×
                    // on an H200 (docs/benchmarks.md): it is built without them.
                    // SAFETY: each matmul kernel touches storage only through
                    // matmul_common.wgsl's a_at, b_at and store_c, which check
                    // (row, k), (k, col) and (row, col) against m, n and k,
                    // inside windows `matmul::plan` fits into the bound
                    // buffers; its workgroup indices stay inside the tiles by
                    // construction; every loop runs to a uniform bound (K, or
                    // a constant). Every configuration is run against the CPU
                    // in the oracle tests, windowed ones included.
                    Kernel::Matmul(_) => unsafe {
                        device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
                    },
                    _ => device.create_shader_module(desc),
                };
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: None,
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        constants: &[],
                        // Every kernel writes its workgroup memory before reading it.
                        zero_initialize_workgroup_memory: false,
                    },
                    cache: None,
                })
            })
            .clone()
    }
}
