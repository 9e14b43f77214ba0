//! The WGSL kernels (shaders/, embedded at build time), the matmul tile
//! configurations, and the compiled-pipeline cache (compiled on first use).

use std::collections::HashMap;
use std::sync::Mutex;

/// Every shader file in shaders/, by name.
pub const SHADERS: &[(&str, &str)] = &[
    ("adamw.wgsl", include_str!("../../../../shaders/adamw.wgsl")),
    ("attention.wgsl", include_str!("../../../../shaders/attention.wgsl")),
    ("encoder.wgsl", include_str!("../../../../shaders/encoder.wgsl")),
    ("gelu.wgsl", include_str!("../../../../shaders/gelu.wgsl")),
    ("layernorm.wgsl", include_str!("../../../../shaders/layernorm.wgsl")),
    ("matmul.wgsl", include_str!("../../../../shaders/matmul.wgsl")),
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
    Matmul,
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
            Matmul => ("matmul.wgsl", "matmul"),
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

/// Register and workgroup tiling of the matmul kernel: each workgroup owns a
/// `tile_m × tile_n` block of C, stepping K by `tile_k`; each invocation owns
/// `thread_m × thread_n` outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig {
    pub name: &'static str,
    pub tile_m: u32,
    pub tile_n: u32,
    pub tile_k: u32,
    pub thread_m: u32,
    pub thread_n: u32,
}

impl TileConfig {
    /// 256 invocations, 4×4 outputs each, 8 KiB of workgroup memory: discrete
    /// and integrated GPUs.
    pub const LARGE: TileConfig =
        TileConfig { name: "64x64x16/4x4", tile_m: 64, tile_n: 64, tile_k: 16, thread_m: 4, thread_n: 4 };
    /// 64 invocations, 4×4 outputs each, 4 KiB: small workgroup limits and
    /// software adapters (lavapipe runs a workgroup on one CPU thread).
    pub const SMALL: TileConfig =
        TileConfig { name: "32x32x16/4x4", tile_m: 32, tile_n: 32, tile_k: 16, thread_m: 4, thread_n: 4 };
    pub const ALL: [TileConfig; 2] = [TileConfig::LARGE, TileConfig::SMALL];

    pub fn invocations(&self) -> u32 {
        (self.tile_m / self.thread_m) * (self.tile_n / self.thread_n)
    }

    pub fn workgroup_bytes(&self) -> u32 {
        4 * self.tile_k * (self.tile_m + self.tile_n)
    }

    /// The configuration for an adapter: LARGE where its limits allow and it
    /// is a hardware GPU, else SMALL.
    pub fn for_adapter(info: &wgpu::AdapterInfo, limits: &wgpu::Limits) -> TileConfig {
        let l = TileConfig::LARGE;
        let fits = limits.max_compute_invocations_per_workgroup >= l.invocations()
            && limits.max_compute_workgroup_size_x >= l.tile_n / l.thread_n
            && limits.max_compute_workgroup_size_y >= l.tile_m / l.thread_m
            && limits.max_compute_workgroup_storage_size >= l.workgroup_bytes();
        if fits && info.device_type != wgpu::DeviceType::Cpu {
            l
        } else {
            TileConfig::SMALL
        }
    }

    pub fn by_name(name: &str) -> Option<TileConfig> {
        TileConfig::ALL.into_iter().find(|t| t.name == name || name.eq_ignore_ascii_case(t.label()))
    }

    /// Short label: "large" or "small".
    pub fn label(&self) -> &'static str {
        if *self == TileConfig::LARGE {
            "large"
        } else {
            "small"
        }
    }

    /// matmul.wgsl with this configuration's constants written in.
    pub fn specialize(&self, src: &str) -> String {
        let mut out = String::with_capacity(src.len());
        for line in src.lines() {
            let replaced = [
                ("const TILE_M: u32", self.tile_m),
                ("const TILE_N: u32", self.tile_n),
                ("const TILE_K: u32", self.tile_k),
                ("const THREAD_M: u32", self.thread_m),
                ("const THREAD_N: u32", self.thread_n),
            ]
            .iter()
            .find(|(prefix, _)| line.starts_with(prefix))
            .map(|(prefix, v)| format!("{prefix} = {v}u;"));
            out.push_str(replaced.as_deref().unwrap_or(line));
            out.push('\n');
        }
        out
    }
}

/// Compiled pipelines, one per kernel, built on first use.
pub struct Pipelines {
    tiles: TileConfig,
    cache: Mutex<HashMap<Kernel, wgpu::ComputePipeline>>,
}

impl Pipelines {
    pub fn new(tiles: TileConfig) -> Self {
        Pipelines { tiles, cache: Mutex::new(HashMap::new()) }
    }

    pub fn tiles(&self) -> TileConfig {
        self.tiles
    }

    pub fn get(&self, device: &wgpu::Device, kernel: Kernel) -> wgpu::ComputePipeline {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(kernel)
            .or_insert_with(|| {
                let (file, entry) = kernel.entry();
                let src = shader_source(file).unwrap_or_default();
                let src = if kernel == Kernel::Matmul { self.tiles.specialize(src) } else { src.to_string() };
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(file),
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                });
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
