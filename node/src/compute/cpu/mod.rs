//! The CPU backend: the correctness oracle for every other backend and a real,
//! multi-threaded backend for volunteers without a GPU.
//!
//! Tensors are plain `Vec<f32>`; the kernels live in `kernels` (the Llama
//! architecture's in `llama`), the GEMM in
//! `gemm` (micro-kernels in `microkernel`), vector helpers in `simd`, the
//! instruction-set and precision choice in `isa`. Threads come from rayon's
//! global pool (`RAYON_NUM_THREADS` sets its size).

pub mod attention;
pub mod bench;
pub mod gemm;
pub mod isa;
pub mod kernels;
pub mod llama;
pub mod microkernel;
pub mod simd;

use super::{AdamWStep, AttentionShape, Backend, EncoderShape, LogitsShape, MatmulShape};
use gemm::{GemmOpts, Init, WeightImage};
pub use isa::{Isa, IsaError, Precision};
use kernels::{GradIn, Weight};

/// The CPU backend: an instruction-set path and a GEMM input precision; all
/// data lives in the tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuBackend {
    isa: Isa,
    precision: Precision,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl CpuBackend {
    /// fp32 on the path `MURMUR_CPU_ISA` names, else the widest the CPU has.
    ///
    /// # Panics
    /// When `MURMUR_CPU_ISA` names an unknown path or one the CPU lacks (a
    /// forced path must never run silently as another); commands call
    /// [`CpuBackend::from_env`] to report it as an error instead.
    pub fn new() -> Self {
        match CpuBackend::from_env(Precision::Fp32) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    /// The path `MURMUR_CPU_ISA` names (else the widest) at `precision`.
    pub fn from_env(precision: Precision) -> Result<Self, IsaError> {
        Ok(CpuBackend { isa: Isa::from_env()?, precision })
    }

    /// A forced path and precision (tests, benchmarks).
    pub fn with_options(isa: Isa, precision: Precision) -> Result<Self, IsaError> {
        Ok(CpuBackend { isa: isa.checked()?, precision })
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    fn gemm_opts(&self) -> GemmOpts {
        GemmOpts { isa: self.isa, precision: self.precision }
    }

    /// `kernels::matmul_backward` with this backend's GEMM options.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        (dinp_init, dweight_init): (Init<'_>, Init<'_>),
        dinp: &mut [f32],
        dweight: &mut [f32],
        dbias: Option<&mut Vec<f32>>,
        dout: &[f32],
        inp: &[f32],
        weight: Weight<'_>,
        s: MatmulShape,
    ) {
        let dbias = dbias.map(|b| b.as_mut_slice());
        let inits = (dinp_init, dweight_init);
        kernels::matmul_backward(self.gemm_opts(), inits, dinp, dweight, dbias, dout, inp, weight, s);
    }

    /// The images this backend's GEMMs read for an `oc × c` weight, if any.
    fn weight_image(&self, oc: usize, c: usize) -> Option<WeightImage> {
        WeightImage::new(oc, c, self.gemm_opts())
    }
}

/// Field `field` of /proc/meminfo (`MemTotal`, `MemAvailable`) in bytes,
/// where the system says (Linux); None elsewhere or when it cannot be read.
pub fn meminfo(field: &str) -> Option<u64> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open("/proc/meminfo").ok()?.take(64 * 1024).read_to_string(&mut text).ok()?;
    parse_meminfo(&text, field)
}

/// `<field>:  <n> kB` of a meminfo text, in bytes.
fn parse_meminfo(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let mut words = line.split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(())?;
    kib.checked_mul(1024)
}

impl Backend for CpuBackend {
    type Tensor = Vec<f32>;
    type Tokens = Vec<u32>;
    const ON_RAYON_POOL: bool = true;

    fn describe(&self) -> String {
        format!("cpu ({} threads, {}, {})", rayon::current_num_threads(), self.isa, self.precision)
    }

    fn memory_available(&self) -> Option<u64> {
        meminfo("MemAvailable")
    }
    fn tensor(&self, len: usize) -> Vec<f32> {
        vec![0.0; len]
    }
    fn tokens(&self, len: usize) -> Vec<u32> {
        vec![0; len]
    }
    fn len(&self, t: &Vec<f32>) -> usize {
        t.len()
    }
    fn upload(&self, dst: &mut Vec<f32>, src: &[f32]) {
        dst[..src.len()].copy_from_slice(src);
    }
    fn upload_tokens(&self, dst: &mut Vec<u32>, src: &[u32]) {
        dst[..src.len()].copy_from_slice(src);
    }
    fn download(&self, src: &Vec<f32>) -> Vec<f32> {
        src.clone()
    }
    fn zero(&self, t: &mut Vec<f32>) {
        kernels::zero(t);
    }

    fn encoder_forward(
        &self,
        out: &mut Vec<f32>,
        tokens: &Vec<u32>,
        wte: &Vec<f32>,
        wpe: &Vec<f32>,
        s: EncoderShape,
    ) {
        kernels::encoder_forward(out, tokens, wte, wpe, s);
    }
    fn encoder_backward(
        &self,
        dwte: &mut Vec<f32>,
        dwpe: &mut Vec<f32>,
        dout: &Vec<f32>,
        tokens: &Vec<u32>,
        s: EncoderShape,
    ) {
        kernels::encoder_backward(self.isa, dwte, dwpe, dout, tokens, s);
    }

    fn layernorm_forward(
        &self,
        out: &mut Vec<f32>,
        mean: &mut Vec<f32>,
        rstd: &mut Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        bias: &Vec<f32>,
        n: usize,
        c: usize,
    ) {
        kernels::layernorm_forward(self.isa, out, mean, rstd, inp, weight, bias, n, c);
    }
    fn layernorm_backward(
        &self,
        dinp: &mut Vec<f32>,
        dweight: &mut Vec<f32>,
        dbias: &mut Vec<f32>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        mean: &Vec<f32>,
        rstd: &Vec<f32>,
        n: usize,
        c: usize,
    ) {
        kernels::layernorm_backward(self.isa, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c);
    }

    fn matmul_forward(
        &self,
        out: &mut Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        bias: Option<&Vec<f32>>,
        s: MatmulShape,
    ) {
        let w = Weight::plain(weight);
        kernels::matmul_forward(self.gemm_opts(), out, inp, w, bias.map(|b| b.as_slice()), s);
    }
    fn matmul_backward(
        &self,
        dinp: &mut Vec<f32>,
        dweight: &mut Vec<f32>,
        dbias: Option<&mut Vec<f32>>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        s: MatmulShape,
    ) {
        let inits = (Init::Accumulate, Init::Accumulate);
        self.backward(inits, dinp, dweight, dbias, dout, inp, Weight::plain(weight), s);
    }

    fn matmul_backward_fresh_dinp(
        &self,
        dinp: &mut Vec<f32>,
        dweight: &mut Vec<f32>,
        dbias: Option<&mut Vec<f32>>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        s: MatmulShape,
    ) {
        let inits = (Init::Overwrite, Init::Accumulate);
        self.backward(inits, dinp, dweight, dbias, dout, inp, Weight::plain(weight), s);
    }

    /// Every plan: both packed images (`gemm::WeightImage`).
    fn weight_image_len(&self, oc: usize, c: usize) -> usize {
        self.weight_image(oc, c).map_or(0, |img| img.buffer_len())
    }
    fn write_weight_image(&self, image: &mut Vec<f32>, weight: &Vec<f32>, oc: usize, c: usize) {
        if let Some(img) = self.weight_image(oc, c) {
            img.write(image, weight);
        }
    }
    fn matmul_forward_imaged(
        &self,
        out: &mut Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        image: &Vec<f32>,
        bias: Option<&Vec<f32>>,
        s: MatmulShape,
    ) {
        let w = Weight { values: weight, image: Some(image) };
        kernels::matmul_forward(self.gemm_opts(), out, inp, w, bias.map(|b| b.as_slice()), s);
    }
    fn matmul_backward_fresh_dinp_imaged(
        &self,
        dinp: &mut Vec<f32>,
        dweight: &mut Vec<f32>,
        dbias: Option<&mut Vec<f32>>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        image: &Vec<f32>,
        s: MatmulShape,
        fresh_dweight: bool,
    ) {
        let dweight_init = if fresh_dweight { Init::Overwrite } else { Init::Accumulate };
        self.backward(
            (Init::Overwrite, dweight_init),
            dinp,
            dweight,
            dbias,
            dout,
            inp,
            Weight { values: weight, image: Some(image) },
            s,
        );
    }
    fn adamw_update_imaged(
        &self,
        param: &mut Vec<f32>,
        grad: &Vec<f32>,
        m: &mut Vec<f32>,
        v: &mut Vec<f32>,
        image: &mut Vec<f32>,
        (oc, c): (usize, usize),
        stats: &Vec<f32>,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        match self.weight_image(oc, c) {
            Some(img) => kernels::adamw_update_imaged(
                self.isa,
                param,
                grad,
                m,
                v,
                stats[scale_slot],
                hp,
                img,
                image,
                c,
            ),
            None => self.adamw_update(param, grad, m, v, stats, scale_slot, hp),
        }
    }

    /// The fused kernels keep one logsumexp per row, not the T×T matrix.
    fn attention_scratch_len(&self, s: AttentionShape) -> usize {
        attention::scratch_len(s)
    }
    fn attention_forward(&self, out: &mut Vec<f32>, att: &mut Vec<f32>, qkv: &Vec<f32>, s: AttentionShape) {
        attention::forward(self.isa, out, att, qkv, s);
    }
    fn attention_backward(
        &self,
        dqkv: &mut Vec<f32>,
        dout: &Vec<f32>,
        qkv: &Vec<f32>,
        att: &Vec<f32>,
        s: AttentionShape,
    ) {
        attention::backward(self.isa, true, dqkv, dout, qkv, att, s);
    }
    fn attention_backward_fresh(
        &self,
        dqkv: &mut Vec<f32>,
        dout: &Vec<f32>,
        qkv: &Vec<f32>,
        att: &Vec<f32>,
        s: AttentionShape,
    ) {
        attention::backward(self.isa, false, dqkv, dout, qkv, att, s);
    }

    fn gelu_forward(&self, out: &mut Vec<f32>, inp: &Vec<f32>) {
        kernels::gelu_forward(self.isa, out, inp);
    }
    fn gelu_backward(&self, dinp: &mut Vec<f32>, inp: &Vec<f32>, dout: &Vec<f32>) {
        kernels::gelu_backward(self.isa, true, dinp, inp, dout);
    }
    fn gelu_backward_fresh(&self, dinp: &mut Vec<f32>, inp: &Vec<f32>, dout: &Vec<f32>) {
        kernels::gelu_backward(self.isa, false, dinp, inp, dout);
    }

    fn rmsnorm_forward(
        &self,
        out: &mut Vec<f32>,
        rstd: &mut Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        n: usize,
        c: usize,
    ) {
        llama::rmsnorm_forward(self.isa, out, rstd, inp, weight, n, c);
    }
    fn rmsnorm_backward(
        &self,
        dinp: &mut Vec<f32>,
        dweight: &mut Vec<f32>,
        dout: &Vec<f32>,
        inp: &Vec<f32>,
        weight: &Vec<f32>,
        rstd: &Vec<f32>,
        n: usize,
        c: usize,
    ) {
        llama::rmsnorm_backward(self.isa, true, dinp, dweight, dout, inp, weight, rstd, n, c);
    }
    fn rope_forward(&self, qkv: &mut Vec<f32>, s: AttentionShape, theta: f32) {
        llama::rope(self.isa, false, qkv, s, theta);
    }
    fn rope_backward(&self, dqkv: &mut Vec<f32>, s: AttentionShape, theta: f32) {
        llama::rope(self.isa, true, dqkv, s, theta);
    }
    fn swiglu_forward(&self, out: &mut Vec<f32>, inp: &Vec<f32>, n: usize, h: usize) {
        llama::swiglu_forward(self.isa, out, inp, n, h);
    }
    fn swiglu_backward_fresh(
        &self,
        dinp: &mut Vec<f32>,
        inp: &Vec<f32>,
        dout: &Vec<f32>,
        n: usize,
        h: usize,
    ) {
        llama::swiglu_backward(self.isa, false, dinp, inp, dout, n, h);
    }

    fn residual_forward(&self, out: &mut Vec<f32>, a: &Vec<f32>, b: &Vec<f32>) {
        kernels::residual_forward(out, a, b);
    }

    fn softmax_xent_forward(
        &self,
        losses: &mut Vec<f32>,
        probs: &mut Vec<f32>,
        logits: &Vec<f32>,
        targets: &Vec<u32>,
        s: LogitsShape,
    ) {
        kernels::softmax_xent_forward(self.isa, losses, probs, logits, targets, s);
    }
    fn softmax_xent_backward(
        &self,
        dlogits: &mut Vec<f32>,
        probs: &Vec<f32>,
        targets: &Vec<u32>,
        dloss: f32,
        s: LogitsShape,
    ) {
        kernels::softmax_xent_backward(dlogits, probs, targets, dloss, s);
    }

    fn sum_into(&self, out: &mut Vec<f32>, slot: usize, x: &Vec<f32>, scale: f32) {
        out[slot] = (kernels::sum(self.isa, x) * scale as f64) as f32;
    }
    fn sum_squares_into(&self, out: &mut Vec<f32>, slot: usize, x: &Vec<f32>) {
        out[slot] = kernels::sum_squares(self.isa, x) as f32;
    }
    fn grad_clip_scale(
        &self,
        stats: &mut Vec<f32>,
        norm_slot: usize,
        scale_slot: usize,
        partials: &Vec<f32>,
        count: usize,
        max_norm: f32,
        unscale: f32,
    ) {
        let total: f64 = partials[..count].iter().map(|x| *x as f64).sum();
        let norm = total.sqrt() as f32 * unscale;
        stats[norm_slot] = norm;
        let clip = if max_norm > 0.0 && norm > max_norm { max_norm / (norm + 1e-6) } else { 1.0 };
        stats[scale_slot] = unscale * clip;
    }
    fn adamw_update(
        &self,
        param: &mut Vec<f32>,
        grad: &Vec<f32>,
        m: &mut Vec<f32>,
        v: &mut Vec<f32>,
        stats: &Vec<f32>,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        kernels::adamw_update(self.isa, param, GradIn::Keep(grad), m, v, stats[scale_slot], hp);
    }
    /// One pass: the gradient is zeroed as AdamW reads it.
    fn adamw_update_zero_grad(
        &self,
        param: &mut Vec<f32>,
        grad: &mut Vec<f32>,
        m: &mut Vec<f32>,
        v: &mut Vec<f32>,
        stats: &Vec<f32>,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        kernels::adamw_update(self.isa, param, GradIn::Zero(grad), m, v, stats[scale_slot], hp);
    }
}

#[cfg(test)]
mod meminfo_tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree: 1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_meminfo(text, "MemTotal"), Some(24_576_000 * 1024));
        assert_eq!(parse_meminfo(text, "MemAvailable"), Some(2048 * 1024));
        assert_eq!(parse_meminfo(text, "Mem"), None);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n", "MemTotal"), None);
        assert_eq!(parse_meminfo("MemTotal: lots\n", "MemTotal"), None);
        assert_eq!(parse_meminfo("MemTotal: 99999999999999999 kB\n", "MemTotal"), None);
        if cfg!(target_os = "linux") {
            assert!(meminfo("MemAvailable").is_some_and(|b| b > 0));
        }
    }
}
