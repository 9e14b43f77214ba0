//! The GPU backend: every Backend op as a hand-written WGSL kernel (shaders/)
//! on wgpu, so any Vulkan, Metal or DX12 GPU can train.
//!
//! - `context`: adapter discovery and a device opened with the adapter's limits;
//! - `pipelines`: the embedded shaders, matmul tile configurations, pipeline cache;
//! - `memory`: tensors, token buffers, binding windows, transfer counters;
//! - `recorder`: one pending command stream per step, kernel-argument arena;
//! - `elementwise`, `reduce`, `rows`, `matmul`, `attention`, `llama`: the host
//!   side of each kernel family (chunking, arguments, dispatch).
//!
//! Tensors larger than the adapter's storage-binding limit (lavapipe: 128 MiB;
//! gpt2-124m's wte is 154 MB) are bound through windows: elementwise kernels,
//! reductions and row kernels walk them in chunks, the matmul splits M, N and
//! K, the encoder walks the embedding in row windows. Reductions never use
//! atomics and run in a fixed order, so reruns on one adapter are bit-identical.

mod attention;
pub mod context;
mod elementwise;
mod llama;
mod matmul;
pub mod memory;
pub mod pipelines;
mod recorder;
mod reduce;
mod rows;
pub mod testing;
#[cfg(test)]
mod tests;

use std::sync::Mutex;

pub use crate::compute::MatmulLayout;
pub use context::{
    adapter_available, list_adapters, quiet_probe_env, AdapterChoice, AdapterSummary, GpuError,
};
pub use memory::{GpuTensor, GpuTokens, TransferStats};
pub use pipelines::{MatmulFamily, TileConfig};

use super::{AdamWStep, AttentionShape, Backend, EncoderShape, LogitsShape, MatmulShape};
use crate::compute::tokens::token_layout;
use context::GpuContext;
use memory::BindingRules;
use pipelines::{Kernel, Pipelines};
use recorder::Recorder;

/// The matmul's input precision (`--precision` on the wgpu backend). Master
/// weights, optimizer state and every other kernel stay fp32 either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuPrecision {
    #[default]
    Fp32,
    /// A and B rounded to f16, products summed in f32: on cooperative
    /// matrices where the adapter has them, else in the tiled kernels.
    F16,
}

/// A grid of at least this many 128 × 128 blocks takes the 128-wide
/// configurations (wide, coop-large); smaller grids keep more, smaller
/// workgroups in flight with the 64-wide ones.
const WIDE_GRID: usize = 256;

/// Overrides for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default)]
pub struct GpuOptions {
    /// Matmul tiling for every shape; default: chosen per shape from the
    /// adapter and the precision (`GpuBackend::matmul_tiles`).
    pub tiles: Option<TileConfig>,
    pub precision: GpuPrecision,
    /// Pretend storage bindings are at most this many bytes (exercises the
    /// windowed paths on small tensors).
    pub max_binding_bytes: Option<u64>,
}

/// `MURMUR_GPU_TILES`: one matmul configuration for every shape (small,
/// large, wide, coop-small, coop-large), for benchmarks and diagnosis, as
/// `MURMUR_CPU_ISA` forces a CPU path.
fn tiles_from_env() -> Result<Option<TileConfig>, GpuError> {
    match std::env::var("MURMUR_GPU_TILES") {
        Err(_) => Ok(None),
        Ok(name) if name.is_empty() => Ok(None),
        Ok(name) => TileConfig::by_name(&name).map(Some).ok_or(GpuError::UnknownTiles(name)),
    }
}

/// Device scratch space reused across dispatches.
#[derive(Default)]
struct Scratch {
    partials: Option<wgpu::Buffer>,
    scores: Option<wgpu::Buffer>,
}

/// The wgpu backend.
pub struct GpuBackend {
    ctx: GpuContext,
    rec: Recorder,
    pipes: Pipelines,
    rules: BindingRules,
    /// The 64-wide matmul configuration the adapter's limits allow.
    base_tiles: TileConfig,
    /// `GpuOptions::tiles`, when set.
    forced_tiles: Option<TileConfig>,
    precision: GpuPrecision,
    max_groups: u32,
    scratch: Mutex<Scratch>,
    /// Bound where a kernel's optional input (a bias) is absent.
    dummy: wgpu::Buffer,
}

impl GpuBackend {
    /// Opens the best adapter `choice` allows.
    pub fn new(choice: AdapterChoice) -> Result<Self, GpuError> {
        Self::with_options(choice, GpuOptions::default())
    }

    pub fn with_options(choice: AdapterChoice, opts: GpuOptions) -> Result<Self, GpuError> {
        let opts = GpuOptions { tiles: opts.tiles.or(tiles_from_env()?), ..opts };
        let wants_coop =
            opts.precision == GpuPrecision::F16 || opts.tiles.is_some_and(|t| t.family == MatmulFamily::Coop);
        let ctx = GpuContext::open(choice, wants_coop)?;
        if opts.tiles.is_some_and(|t| t.family == MatmulFamily::Coop) && !ctx.coop_f16 {
            return Err(GpuError::NoCooperativeMatrices(ctx.info.name.clone()));
        }
        let base_tiles = TileConfig::for_adapter(&ctx.info, &ctx.limits);
        let limit = ctx.limits.max_storage_buffer_binding_size.min(ctx.limits.max_buffer_size);
        let limit = opts.max_binding_bytes.map_or(limit, |m| m.min(limit));
        let rules = BindingRules::new(limit, ctx.limits.min_storage_buffer_offset_alignment);
        let rec = Recorder::new(ctx.device.clone(), ctx.queue.clone());
        let dummy = rec.buffer(16, "absent input");
        Ok(GpuBackend {
            max_groups: ctx.limits.max_compute_workgroups_per_dimension.max(1),
            rec,
            pipes: Pipelines::default(),
            rules,
            base_tiles,
            forced_tiles: opts.tiles,
            precision: opts.precision,
            scratch: Mutex::new(Scratch::default()),
            dummy,
            ctx,
        })
    }

    /// The matmul configuration for a product of `m × n` outputs: the
    /// forced one if any, else the 128-wide configuration for grids of at
    /// least `WIDE_GRID` blocks on hardware GPUs and the adapter's 64-wide
    /// one below; cooperative matrices when the precision is f16 and the
    /// device has them. f16 inputs in every configuration under f16.
    pub fn matmul_tiles(&self, m: usize, n: usize) -> TileConfig {
        let f16 = self.precision == GpuPrecision::F16;
        if let Some(t) = self.forced_tiles {
            return t.with_f16_inputs(f16);
        }
        let coop = f16 && self.ctx.coop_f16;
        let (wide, narrow) = match coop {
            true => (TileConfig::COOP_LARGE, TileConfig::COOP_SMALL),
            false => (TileConfig::WIDE, self.base_tiles),
        };
        let blocks = m.div_ceil(wide.tile_m as usize) * n.div_ceil(wide.tile_n as usize);
        let hardware = !self.ctx.is_software();
        let t = if hardware && blocks >= WIDE_GRID && wide.fits(&self.ctx.limits) { wide } else { narrow };
        t.with_f16_inputs(f16)
    }

    /// How products are done, for logs and `murmur devices`: precision,
    /// and whether cooperative matrices carry them.
    pub fn matmul_path(&self) -> String {
        match (self.precision, self.ctx.coop_f16) {
            (GpuPrecision::Fp32, _) => {
                format!("fp32, tiled ({} / {})", self.base_tiles.name, TileConfig::WIDE.name)
            }
            (GpuPrecision::F16, true) => "f16 inputs on cooperative matrices, f32 sums".to_string(),
            (GpuPrecision::F16, false) => {
                "f16 inputs in the tiled kernels (no cooperative matrices), f32 sums".to_string()
            }
        }
    }

    pub fn adapter_name(&self) -> &str {
        &self.ctx.info.name
    }

    pub fn is_software(&self) -> bool {
        self.ctx.is_software()
    }

    /// Host↔device tensor transfers so far (see `TransferStats`).
    pub fn transfer_stats(&self) -> TransferStats {
        self.rec.transfer_stats()
    }

    pub fn reset_transfer_stats(&self) {
        self.rec.reset_transfer_stats();
    }

    /// Submits recorded work and waits for the device to finish it.
    pub fn synchronize(&self) {
        self.rec.flush();
        let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
    }

    fn pipeline(&self, k: Kernel) -> wgpu::ComputePipeline {
        self.pipes.get(&self.ctx.device, k)
    }

    /// A scratch buffer of at least `len` floats (grown on demand).
    fn scratch(&self, which: fn(&mut Scratch) -> &mut Option<wgpu::Buffer>, len: usize) -> wgpu::Buffer {
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let slot = which(&mut s);
        match slot {
            Some(b) if b.size() >= 4 * len as u64 => b.clone(),
            _ => {
                let b = self.rec.buffer(4 * len as u64, "scratch");
                *slot = Some(b.clone());
                b
            }
        }
    }
}

impl crate::compute::kernel_bench::TimedBackend for GpuBackend {
    fn synchronize(&self) {
        GpuBackend::synchronize(self);
    }
    fn matmul_in(
        &self,
        layout: MatmulLayout,
        out: &mut GpuTensor,
        x: &GpuTensor,
        y: &GpuTensor,
        s: MatmulShape,
    ) {
        self.matmul(layout, out, x, y, None, s);
    }
    fn matmul_kind(&self, m: usize, n: usize) -> String {
        self.matmul_tiles(m, n).name.to_string()
    }
}

#[allow(clippy::too_many_arguments)]
impl Backend for GpuBackend {
    type Tensor = GpuTensor;
    type Tokens = GpuTokens;

    fn describe(&self) -> String {
        let i = &self.ctx.info;
        format!("gpu ({}, {:?}, {:?}, matmul {})", i.name, i.backend, i.device_type, self.matmul_path())
    }

    fn tensor(&self, len: usize) -> GpuTensor {
        let bytes = 4 * len as u64;
        assert!(
            bytes <= self.ctx.limits.max_buffer_size,
            "a tensor of {len} floats exceeds this GPU's largest buffer ({} bytes); use a smaller shape or --device cpu",
            self.ctx.limits.max_buffer_size
        );
        GpuTensor { buffer: self.rec.buffer(bytes, "tensor"), len }
    }
    fn tokens(&self, len: usize) -> GpuTokens {
        let words = GpuTokens::words(len) as u64;
        GpuTokens { buffer: self.rec.buffer(4 * words, "tokens"), len, groups: 0 }
    }
    fn len(&self, t: &GpuTensor) -> usize {
        t.len
    }
    fn upload(&self, dst: &mut GpuTensor, src: &[f32]) {
        let n = src.len().min(dst.len);
        self.rec.upload_tensor(&dst.buffer, &src[..n]);
    }
    fn upload_tokens(&self, dst: &mut GpuTokens, src: &[u32]) {
        let n = src.len().min(dst.len);
        let (words, groups) = token_layout(&src[..n], dst.len);
        dst.groups = groups;
        self.rec.upload_tokens(&dst.buffer, &words);
    }
    fn download(&self, src: &GpuTensor) -> Vec<f32> {
        self.rec.download(&src.buffer, src.len)
    }
    fn zero(&self, t: &mut GpuTensor) {
        self.rec.clear(&t.buffer);
    }

    fn encoder_forward(
        &self,
        out: &mut GpuTensor,
        tokens: &GpuTokens,
        wte: &GpuTensor,
        wpe: &GpuTensor,
        s: EncoderShape,
    ) {
        self.encoder_forward_impl(out, tokens, wte, wpe, s);
    }
    fn encoder_backward(
        &self,
        dwte: &mut GpuTensor,
        dwpe: &mut GpuTensor,
        dout: &GpuTensor,
        tokens: &GpuTokens,
        s: EncoderShape,
    ) {
        self.encoder_backward_impl(dwte, dwpe, dout, tokens, s);
    }

    fn layernorm_forward(
        &self,
        out: &mut GpuTensor,
        mean: &mut GpuTensor,
        rstd: &mut GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        bias: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        self.layernorm_forward_impl(out, mean, rstd, inp, weight, bias, n, c);
    }
    fn layernorm_backward(
        &self,
        dinp: &mut GpuTensor,
        dweight: &mut GpuTensor,
        dbias: &mut GpuTensor,
        dout: &GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        mean: &GpuTensor,
        rstd: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        self.layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c);
    }

    fn matmul_forward(
        &self,
        out: &mut GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        bias: Option<&GpuTensor>,
        s: MatmulShape,
    ) {
        self.matmul(MatmulLayout::Nt, out, inp, weight, bias, s);
    }
    fn matmul_backward(
        &self,
        dinp: &mut GpuTensor,
        dweight: &mut GpuTensor,
        dbias: Option<&mut GpuTensor>,
        dout: &GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        s: MatmulShape,
    ) {
        self.matmul(MatmulLayout::Nn, dinp, dout, weight, None, s);
        self.matmul(MatmulLayout::Tn, dweight, dout, inp, None, s);
        if let Some(db) = dbias {
            self.column_sums_into(db, dout, s.n, s.oc);
        }
    }

    fn attention_forward(
        &self,
        out: &mut GpuTensor,
        att: &mut GpuTensor,
        qkv: &GpuTensor,
        s: AttentionShape,
    ) {
        self.attention_forward_impl(out, att, qkv, s);
    }
    fn attention_backward(
        &self,
        dqkv: &mut GpuTensor,
        dout: &GpuTensor,
        qkv: &GpuTensor,
        att: &GpuTensor,
        s: AttentionShape,
    ) {
        self.attention_backward_impl(dqkv, dout, qkv, att, s);
    }

    fn rmsnorm_forward(
        &self,
        out: &mut GpuTensor,
        rstd: &mut GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        self.rmsnorm_forward_impl(out, rstd, inp, weight, n, c);
    }
    fn rmsnorm_backward(
        &self,
        dinp: &mut GpuTensor,
        dweight: &mut GpuTensor,
        dout: &GpuTensor,
        inp: &GpuTensor,
        weight: &GpuTensor,
        rstd: &GpuTensor,
        n: usize,
        c: usize,
    ) {
        self.rmsnorm_backward_impl(dinp, dweight, dout, inp, weight, rstd, n, c);
    }
    fn rope_forward(&self, qkv: &mut GpuTensor, s: AttentionShape, theta: f32) {
        self.rope_impl(qkv, s, theta, false);
    }
    fn rope_backward(&self, dqkv: &mut GpuTensor, s: AttentionShape, theta: f32) {
        self.rope_impl(dqkv, s, theta, true);
    }
    fn swiglu_forward(&self, out: &mut GpuTensor, inp: &GpuTensor, n: usize, h: usize) {
        self.swiglu_impl(out, inp, None, n, h);
    }
    fn swiglu_backward_fresh(
        &self,
        dinp: &mut GpuTensor,
        inp: &GpuTensor,
        dout: &GpuTensor,
        n: usize,
        h: usize,
    ) {
        self.swiglu_impl(dinp, inp, Some(dout), n, h);
    }

    fn gelu_forward(&self, out: &mut GpuTensor, inp: &GpuTensor) {
        self.gelu_forward_impl(out, inp);
    }
    fn gelu_backward(&self, dinp: &mut GpuTensor, inp: &GpuTensor, dout: &GpuTensor) {
        self.gelu_backward_impl(dinp, inp, dout);
    }

    fn residual_forward(&self, out: &mut GpuTensor, a: &GpuTensor, b: &GpuTensor) {
        self.residual_forward_impl(out, a, b);
    }

    fn softmax_xent_forward(
        &self,
        losses: &mut GpuTensor,
        probs: &mut GpuTensor,
        logits: &GpuTensor,
        targets: &GpuTokens,
        s: LogitsShape,
    ) {
        self.softmax_xent_forward_impl(losses, probs, logits, targets, s);
    }
    fn softmax_xent_backward(
        &self,
        dlogits: &mut GpuTensor,
        probs: &GpuTensor,
        targets: &GpuTokens,
        dloss: f32,
        s: LogitsShape,
    ) {
        self.softmax_xent_backward_impl(dlogits, probs, targets, dloss, s);
    }

    fn sum_into(&self, out: &mut GpuTensor, slot: usize, x: &GpuTensor, scale: f32) {
        self.reduce_into(out, slot, x, scale, false);
    }
    fn sum_squares_into(&self, out: &mut GpuTensor, slot: usize, x: &GpuTensor) {
        self.reduce_into(out, slot, x, 1.0, true);
    }
    fn grad_clip_scale(
        &self,
        stats: &mut GpuTensor,
        norm_slot: usize,
        scale_slot: usize,
        partials: &GpuTensor,
        count: usize,
        max_norm: f32,
        unscale: f32,
    ) {
        self.grad_clip_scale_impl(stats, norm_slot, scale_slot, partials, count, max_norm, unscale);
    }
    fn loss_scale(&self, tokens: usize) -> f32 {
        match self.precision {
            GpuPrecision::F16 => tokens.max(1) as f32,
            GpuPrecision::Fp32 => 1.0,
        }
    }
    fn adamw_update(
        &self,
        param: &mut GpuTensor,
        grad: &GpuTensor,
        m: &mut GpuTensor,
        v: &mut GpuTensor,
        stats: &GpuTensor,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        self.adamw_impl(param, grad, m, v, stats, scale_slot, hp);
    }
}
