//! Compute backends: the set of device operations the GPT model is written
//! against, and the implementations of it (CPU always; the wgpu backend behind
//! the `gpu` cargo feature, the CUDA backend behind `cuda`).
//!
//! The model never touches memory directly: it allocates tensors on a backend,
//! uploads tokens, and calls the operations below. Every operation mirrors one
//! function of llm.c's train_gpt2.c, forward beside backward, so each kernel can
//! be tested alone against the CPU backend (the oracle).
//!
//! Conventions every backend follows:
//! - tensors are flat `f32` arrays, row-major, shapes given by the arguments;
//! - backward operations ACCUMULATE (`+=`) into their gradient outputs, so the
//!   caller zeroes gradients once per step (and micro-batches accumulate);
//! - weights are stored `(out_features, in_features)` as in llm.c, so
//!   `matmul_forward` computes `out = inp · weightᵀ + bias` (the NT layout);
//! - results are deterministic: the same inputs on the same device give the
//!   same bits, whatever the thread scheduling.

pub mod awake;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod kernel_bench;
#[cfg(all(test, any(feature = "gpu", feature = "cuda")))]
pub(crate) mod oracle;
pub mod required;
#[cfg(any(feature = "gpu", feature = "cuda"))]
pub mod tokens;

/// Runs `step` (a training step on `B`) on a worker of rayon's global pool
/// when `B`'s ops run there: its parallel ops then fork inside the pool,
/// where the other workers are still spinning, instead of each op being
/// injected from outside while the caller sleeps on a futex until it is done
/// (a wake-up per op, hundreds per step, whose latency swings with the
/// machine's load); the other workers are kept awake for the step
/// (`awake`). Other backends run `step` on the calling thread.
pub fn on_worker<B: Backend, R: Send>(step: impl FnOnce() -> R + Send) -> R {
    if B::ON_RAYON_POOL {
        awake::with_awake_workers(step)
    } else {
        step()
    }
}

/// Shape of a matmul: `n` rows of `c` input features mapped to `oc` outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    pub n: usize,
    pub c: usize,
    pub oc: usize,
}

/// Which product of a linear layer (weights are (out, in)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulLayout {
    /// Forward: out(n,oc) = inp(n,c) · weight(oc,c)ᵀ [+ bias].
    Nt,
    /// Input gradient: dinp(n,c) += dout(n,oc) · weight(oc,c).
    Nn,
    /// Weight gradient: dweight(oc,c) += dout(n,oc)ᵀ · inp(n,c).
    Tn,
}

impl MatmulLayout {
    pub const ALL: [MatmulLayout; 3] = [MatmulLayout::Nt, MatmulLayout::Nn, MatmulLayout::Tn];
    pub fn name(self) -> &'static str {
        match self {
            MatmulLayout::Nt => "NT",
            MatmulLayout::Nn => "NN",
            MatmulLayout::Tn => "TN",
        }
    }
}

/// Shape of causal self-attention with `nh` query heads of `c / nh`
/// channels sharing `nkv` key/value heads (grouped-query attention; `nkv ==
/// nh` is multi-head attention, GPT-2's). The qkv tensor is `(b, t, (nh +
/// 2·nkv)·hs)` laid out `[q (nh heads) | k (nkv heads) | v (nkv heads)]`;
/// query head `h` reads key/value head `h / (nh / nkv)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub nh: usize,
    pub nkv: usize,
}

impl AttentionShape {
    /// Multi-head attention: as many key/value heads as query heads, qkv `(b, t, 3c)`.
    pub fn mha(b: usize, t: usize, c: usize, nh: usize) -> Self {
        AttentionShape { b, t, c, nh, nkv: nh }
    }

    /// Channels of one head.
    pub fn head_size(&self) -> usize {
        self.c / self.nh
    }

    /// One per (batch, query head, position): the rows whose logsumexps
    /// the fused attention kernels keep.
    pub fn rows(&self) -> usize {
        self.b * self.nh * self.t
    }

    /// Floats of one position's qkv row: `(nh + 2·nkv)·hs`.
    pub fn qkv_width(&self) -> usize {
        self.c + 2 * self.nkv * self.head_size()
    }
}

/// Shape of the token + position encoder: `(b, t)` tokens into `c` channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderShape {
    pub b: usize,
    pub t: usize,
    pub c: usize,
}

/// Shape of the fused softmax + cross-entropy: `n` positions over `v` real
/// vocabulary entries, stored with row stride `vp` (the padded vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogitsShape {
    pub n: usize,
    pub v: usize,
    pub vp: usize,
}

/// One AdamW update's hyper-parameters (decoupled weight decay, as in
/// Loshchilov & Hutter). `step` counts from 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub step: u32,
}

impl AdamWStep {
    /// The bias corrections `1 − β1^step` and `1 − β2^step`, the powers by
    /// squaring in f32 (the multiplications compiler-rt's `powi` does),
    /// written out so that a call the compiler folds at build time gives the
    /// bits of one run at run time (LLVM folds `powi` with other rounding).
    pub fn bias_corrections(&self) -> (f32, f32) {
        fn pow(mut a: f32, mut e: u32) -> f32 {
            let mut r = 1.0f32;
            loop {
                if e & 1 == 1 {
                    r *= a;
                }
                e /= 2;
                if e == 0 {
                    return r;
                }
                a *= a;
            }
        }
        (1.0 - pow(self.beta1, self.step), 1.0 - pow(self.beta2, self.step))
    }
}

/// The operations the GPT model needs from a device.
///
/// `Tensor` holds `f32`s, `Tokens` holds `u32` token ids; both live on the
/// device. Only `upload*` and `download` move data between host and device.
#[allow(clippy::too_many_arguments)]
pub trait Backend: Sync {
    type Tensor: Send;
    type Tokens: Send;

    /// Whether the ops run on rayon's global pool (the CPU backend), so a
    /// training step belongs on a pool worker (`on_worker`).
    const ON_RAYON_POOL: bool = false;

    /// Human-readable description: backend kind and device name.
    fn describe(&self) -> String;

    // ---- memory ----
    /// Bytes free for new tensors on the device, when the backend can tell
    /// (the CPU backend: the host's available memory; CUDA: the device's
    /// free memory).
    fn memory_available(&self) -> Option<u64> {
        None
    }
    /// A zero-filled tensor of `len` floats.
    fn tensor(&self, len: usize) -> Self::Tensor;
    /// A zero-filled token buffer of `len` ids.
    fn tokens(&self, len: usize) -> Self::Tokens;
    fn len(&self, t: &Self::Tensor) -> usize;
    fn upload(&self, dst: &mut Self::Tensor, src: &[f32]);
    fn upload_tokens(&self, dst: &mut Self::Tokens, src: &[u32]);
    fn download(&self, src: &Self::Tensor) -> Vec<f32>;
    fn zero(&self, t: &mut Self::Tensor);

    // ---- encoder: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] ----
    fn encoder_forward(
        &self,
        out: &mut Self::Tensor,
        tokens: &Self::Tokens,
        wte: &Self::Tensor,
        wpe: &Self::Tensor,
        s: EncoderShape,
    );
    fn encoder_backward(
        &self,
        dwte: &mut Self::Tensor,
        dwpe: &mut Self::Tensor,
        dout: &Self::Tensor,
        tokens: &Self::Tokens,
        s: EncoderShape,
    );

    // ---- layernorm over the last axis of an (n, c) tensor, eps = 1e-5 ----
    fn layernorm_forward(
        &self,
        out: &mut Self::Tensor,
        mean: &mut Self::Tensor,
        rstd: &mut Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        bias: &Self::Tensor,
        n: usize,
        c: usize,
    );
    fn layernorm_backward(
        &self,
        dinp: &mut Self::Tensor,
        dweight: &mut Self::Tensor,
        dbias: &mut Self::Tensor,
        dout: &Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        mean: &Self::Tensor,
        rstd: &Self::Tensor,
        n: usize,
        c: usize,
    );

    // ---- matmul: out(n,oc) = inp(n,c) · weight(oc,c)ᵀ + bias(oc) ----
    fn matmul_forward(
        &self,
        out: &mut Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        s: MatmulShape,
    );
    /// dinp += dout·weight (NN), dweight += doutᵀ·inp (TN), dbias += Σₙ dout.
    fn matmul_backward(
        &self,
        dinp: &mut Self::Tensor,
        dweight: &mut Self::Tensor,
        dbias: Option<&mut Self::Tensor>,
        dout: &Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        s: MatmulShape,
    );
    /// [`matmul_backward`](Backend::matmul_backward) with `dinp` written, not
    /// accumulated into (its old contents ignored): no zeroing pass where a
    /// backend writes it directly.
    fn matmul_backward_fresh_dinp(
        &self,
        dinp: &mut Self::Tensor,
        dweight: &mut Self::Tensor,
        dbias: Option<&mut Self::Tensor>,
        dout: &Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        s: MatmulShape,
    ) {
        self.zero(dinp);
        self.matmul_backward(dinp, dweight, dbias, dout, inp, weight, s);
    }

    // ---- weight images: a backend's own copy of a matmul weight, laid out
    // as its GEMMs read it (the CPU's bf16 GEMM: packed bf16 pairs). The
    // caller allocates `weight_image_len` floats, has the image written
    // whenever the weight changes other than through `adamw_update_imaged`,
    // and passes it beside the weight. An imaged weight's gradient is not
    // zeroed between steps: AdamW leaves it as it was and the next backward
    // writes it (`fresh_dweight`), one pass over it fewer each way.
    /// Floats of the image of an `oc × c` weight; 0 when the backend keeps none
    /// (then the `_imaged` ops are never called).
    fn weight_image_len(&self, oc: usize, c: usize) -> usize {
        let _ = (oc, c);
        0
    }
    /// Writes `image` from `weight` (`oc × c`).
    fn write_weight_image(&self, image: &mut Self::Tensor, weight: &Self::Tensor, oc: usize, c: usize) {
        let _ = (image, weight, oc, c);
    }
    /// [`matmul_forward`](Backend::matmul_forward) reading `weight`'s image.
    fn matmul_forward_imaged(
        &self,
        out: &mut Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        image: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        s: MatmulShape,
    ) {
        let _ = image;
        self.matmul_forward(out, inp, weight, bias, s);
    }
    /// [`matmul_backward_fresh_dinp`](Backend::matmul_backward_fresh_dinp)
    /// reading `weight`'s image; with `fresh_dweight`, `dweight` is written,
    /// not added to (its old contents ignored).
    #[allow(clippy::too_many_arguments)]
    fn matmul_backward_fresh_dinp_imaged(
        &self,
        dinp: &mut Self::Tensor,
        dweight: &mut Self::Tensor,
        dbias: Option<&mut Self::Tensor>,
        dout: &Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        image: &Self::Tensor,
        s: MatmulShape,
        fresh_dweight: bool,
    ) {
        let _ = image;
        if fresh_dweight {
            self.zero(dweight);
        }
        self.matmul_backward_fresh_dinp(dinp, dweight, dbias, dout, inp, weight, s);
    }

    // ---- causal multi-head attention ----
    /// Floats of the `att` buffer `attention_forward` fills for the backward
    /// pass: by default the softmaxed scores (b, nh, t, t); a backend with
    /// fused kernels keeps less (the CPU: one logsumexp per row).
    fn attention_scratch_len(&self, s: AttentionShape) -> usize {
        s.b * s.nh * s.t * s.t
    }
    /// qkv is `s`'s layout (`[q | k | v]`, `qkv_width` floats a position);
    /// out is (b, t, c); att keeps
    /// what the backward pass needs (`attention_scratch_len` floats).
    fn attention_forward(
        &self,
        out: &mut Self::Tensor,
        att: &mut Self::Tensor,
        qkv: &Self::Tensor,
        s: AttentionShape,
    );
    fn attention_backward(
        &self,
        dqkv: &mut Self::Tensor,
        dout: &Self::Tensor,
        qkv: &Self::Tensor,
        att: &Self::Tensor,
        s: AttentionShape,
    );
    /// [`attention_backward`](Backend::attention_backward) with `dqkv`
    /// written, not accumulated into.
    fn attention_backward_fresh(
        &self,
        dqkv: &mut Self::Tensor,
        dout: &Self::Tensor,
        qkv: &Self::Tensor,
        att: &Self::Tensor,
        s: AttentionShape,
    ) {
        self.zero(dqkv);
        self.attention_backward(dqkv, dout, qkv, att, s);
    }

    // ---- GELU (tanh approximation, argument of tanh clamped) ----
    fn gelu_forward(&self, out: &mut Self::Tensor, inp: &Self::Tensor);
    fn gelu_backward(&self, dinp: &mut Self::Tensor, inp: &Self::Tensor, dout: &Self::Tensor);
    /// [`gelu_backward`](Backend::gelu_backward) with `dinp` written, not
    /// accumulated into.
    fn gelu_backward_fresh(&self, dinp: &mut Self::Tensor, inp: &Self::Tensor, dout: &Self::Tensor) {
        self.zero(dinp);
        self.gelu_backward(dinp, inp, dout);
    }

    // ---- the Llama architecture: RMSNorm, rotary embeddings, SwiGLU ----
    /// out(n, c) = inp · rstd · weight per row, rstd = 1/√(mean(inp²) + 1e-5)
    /// kept in `rstd` (n) for the backward pass.
    fn rmsnorm_forward(
        &self,
        out: &mut Self::Tensor,
        rstd: &mut Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        n: usize,
        c: usize,
    );
    /// dinp += the input gradient, dweight += the weight gradient.
    fn rmsnorm_backward(
        &self,
        dinp: &mut Self::Tensor,
        dweight: &mut Self::Tensor,
        dout: &Self::Tensor,
        inp: &Self::Tensor,
        weight: &Self::Tensor,
        rstd: &Self::Tensor,
        n: usize,
        c: usize,
    );
    /// Rotates the q and k heads of a qkv tensor (`s`'s layout) in place by
    /// each row's position in its sequence: channel i of a head pairs with
    /// i + hs/2 at angle pos·θ^(−2i/hs) (Hugging Face Llama's rotate-half
    /// layout). The v heads are left alone.
    fn rope_forward(&self, qkv: &mut Self::Tensor, s: AttentionShape, theta: f32);
    /// The backward of [`rope_forward`](Backend::rope_forward), in place on
    /// the gradient: each pair rotated back (a rotation's transpose).
    fn rope_backward(&self, dqkv: &mut Self::Tensor, s: AttentionShape, theta: f32);
    /// out(n, h) = silu(gate)·up, each row of `inp` (n, 2h) `[gate | up]`.
    fn swiglu_forward(&self, out: &mut Self::Tensor, inp: &Self::Tensor, n: usize, h: usize);
    /// dinp(n, 2h) written (not accumulated) with the gradient of
    /// [`swiglu_forward`](Backend::swiglu_forward) given dout(n, h).
    fn swiglu_backward_fresh(
        &self,
        dinp: &mut Self::Tensor,
        inp: &Self::Tensor,
        dout: &Self::Tensor,
        n: usize,
        h: usize,
    );

    // ---- residual ----
    /// The backward needs no op: the model carries the residual stream's
    /// gradient in one buffer, and each branch's backward adds into it.
    fn residual_forward(&self, out: &mut Self::Tensor, a: &Self::Tensor, b: &Self::Tensor);

    // ---- fused softmax + cross-entropy over the real vocabulary ----
    /// probs(n, vp) = softmax(logits) over the first v columns (padded columns
    /// get 0); losses(n) = -ln probs[target].
    fn softmax_xent_forward(
        &self,
        losses: &mut Self::Tensor,
        probs: &mut Self::Tensor,
        logits: &Self::Tensor,
        targets: &Self::Tokens,
        s: LogitsShape,
    );
    /// dlogits += (probs - onehot(target)) * dloss for the first v columns.
    fn softmax_xent_backward(
        &self,
        dlogits: &mut Self::Tensor,
        probs: &Self::Tensor,
        targets: &Self::Tokens,
        dloss: f32,
        s: LogitsShape,
    );

    // ---- reductions and the optimizer (results stay on the device) ----
    /// out[slot] = scale * Σ x, summed in a fixed order.
    fn sum_into(&self, out: &mut Self::Tensor, slot: usize, x: &Self::Tensor, scale: f32);
    /// out[slot] = Σ x², summed in a fixed order.
    fn sum_squares_into(&self, out: &mut Self::Tensor, slot: usize, x: &Self::Tensor);
    /// Global gradient-norm clipping of gradients held `1 / unscale` times
    /// their value (a loss scale; 1 without one): reads their per-tensor
    /// squared norms in `partials[0..count]`, writes the true norm (the
    /// partials' norm × unscale) to `stats[norm_slot]` and the factor
    /// unscale × min(1, max_norm / (norm + 1e-6)) to `stats[scale_slot]`
    /// (`max_norm <= 0` disables clipping: factor unscale).
    #[allow(clippy::too_many_arguments)]
    fn grad_clip_scale(
        &self,
        stats: &mut Self::Tensor,
        norm_slot: usize,
        scale_slot: usize,
        partials: &Self::Tensor,
        count: usize,
        max_norm: f32,
        unscale: f32,
    );
    /// The factor the loss gradient is multiplied by for a micro-batch of
    /// `tokens` tokens, so that per-token gradients, not their mean, enter
    /// the backward products: f16 GEMM inputs would lose the mean's small
    /// values below f16's range. `grad_clip_scale` divides it out. 1 for
    /// backends whose products take f32 or bf16 inputs.
    fn loss_scale(&self, tokens: usize) -> f32 {
        let _ = tokens;
        1.0
    }
    /// AdamW on one tensor with grad multiplied by `stats[scale_slot]` first.
    fn adamw_update(
        &self,
        param: &mut Self::Tensor,
        grad: &Self::Tensor,
        m: &mut Self::Tensor,
        v: &mut Self::Tensor,
        stats: &Self::Tensor,
        scale_slot: usize,
        hp: AdamWStep,
    );
    /// [`adamw_update`](Backend::adamw_update), then `grad` zeroed (the next
    /// step accumulates into it): one pass where a backend fuses the two.
    fn adamw_update_zero_grad(
        &self,
        param: &mut Self::Tensor,
        grad: &mut Self::Tensor,
        m: &mut Self::Tensor,
        v: &mut Self::Tensor,
        stats: &Self::Tensor,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        self.adamw_update(param, grad, m, v, stats, scale_slot, hp);
        self.zero(grad);
    }
    /// [`adamw_update`](Backend::adamw_update) for an `oc × c` matmul
    /// weight, rewriting its image from the new values. `grad` is left as it
    /// was: the next backward writes it (`fresh_dweight`).
    fn adamw_update_imaged(
        &self,
        param: &mut Self::Tensor,
        grad: &Self::Tensor,
        m: &mut Self::Tensor,
        v: &mut Self::Tensor,
        image: &mut Self::Tensor,
        (oc, c): (usize, usize),
        stats: &Self::Tensor,
        scale_slot: usize,
        hp: AdamWStep,
    ) {
        self.adamw_update(param, grad, m, v, stats, scale_slot, hp);
        self.write_weight_image(image, param, oc, c);
    }
}
