//! The model over any Backend: explicit forward and backward passes, one
//! backend op per step of llm.c's train_gpt2.c (GPT-2 here, the Llama
//! architecture's passes in `llama`), and the optimizer update.
//!
//! Owns the device tensors: parameters, their gradients, AdamW moments,
//! activations and activation gradients for one `(batch, seq)` shape, and a
//! small `stats` tensor (losses, gradient norm) that is the only thing read
//! back per step.

use super::config::{Architecture, ModelConfig};
use super::params::{layer_index, lnf_index, param_specs, LayerParam as P, ParamSpec, WPE, WTE};
use crate::compute::{AdamWStep, AttentionShape, Backend, EncoderShape, LogitsShape, MatmulShape};

mod llama;
mod memory;

pub use memory::{check_fits, MemoryNeed};

/// Slots of the stats tensor.
const STAT_NORM: usize = 0;
const STAT_SCALE: usize = 1;
const STAT_LOSS0: usize = 2;

/// Activations of one transformer block.
struct LayerActs<T> {
    ln1: T,
    ln1_mean: T,
    ln1_rstd: T,
    qkv: T,
    atty: T,
    att: T,
    attproj: T,
    residual2: T,
    ln2: T,
    ln2_mean: T,
    ln2_rstd: T,
    fch: T,
    fch_gelu: T,
    fcproj: T,
    residual3: T,
}

/// Gradients of one block's activations, live only while that block's
/// backward runs: one set serves every block in turn (zeroed before each),
/// so the step's working set stays one block's size.
struct LayerGrads<T> {
    ln1: T,
    qkv: T,
    atty: T,
    ln2: T,
    fch: T,
    fch_gelu: T,
}

struct Acts<T> {
    encoded: T,
    layers: Vec<LayerActs<T>>,
    lnf: T,
    lnf_mean: T,
    lnf_rstd: T,
    logits: T,
    probs: T,
    losses: T,
}

/// Activations and their gradients for one `(batch, seq)` shape, of the
/// model's architecture.
enum Work<T> {
    Gpt2(Workspace<T>),
    Llama(llama::Workspace<T>),
}

/// GPT-2's activations and their gradients for one `(batch, seq)` shape.
struct Workspace<T> {
    acts: Acts<T>,
    grads: Grads<T>,
}

struct Grads<T> {
    /// The residual stream's gradient, carried down through the blocks in
    /// place: a block's output gradient is the gradient of its MLP branch
    /// (a residual add passes it through unchanged), becomes the gradient
    /// of its middle residual once the second LayerNorm's backward adds into
    /// it, is the attention branch's gradient, and becomes the block's input
    /// gradient once the first LayerNorm's backward adds into it; after
    /// block 0 it is the embeddings' gradient.
    residual: T,
    /// The block being differentiated (shared by all blocks).
    layer: LayerGrads<T>,
    lnf: T,
    logits: T,
}

impl<T> Workspace<T> {
    /// GPT-2's buffers for `(b, t)`, each made by `z` from its length in
    /// floats (`att`: the backend's attention scratch length).
    fn build(z: &mut impl FnMut(usize) -> T, att: usize, cfg: &ModelConfig, (b, t): (usize, usize)) -> Self {
        let (c, vp, bt) = (cfg.n_embd, cfg.padded_vocab_size, b * t);
        let layers = (0..cfg.n_layer)
            .map(|_| LayerActs {
                ln1: z(bt * c),
                ln1_mean: z(bt),
                ln1_rstd: z(bt),
                qkv: z(bt * 3 * c),
                atty: z(bt * c),
                att: z(att),
                attproj: z(bt * c),
                residual2: z(bt * c),
                ln2: z(bt * c),
                ln2_mean: z(bt),
                ln2_rstd: z(bt),
                fch: z(bt * 4 * c),
                fch_gelu: z(bt * 4 * c),
                fcproj: z(bt * c),
                residual3: z(bt * c),
            })
            .collect();
        let glayer = LayerGrads {
            ln1: z(bt * c),
            qkv: z(bt * 3 * c),
            atty: z(bt * c),
            ln2: z(bt * c),
            fch: z(bt * 4 * c),
            fch_gelu: z(bt * 4 * c),
        };
        let acts = Acts {
            encoded: z(bt * c),
            layers,
            lnf: z(bt * c),
            lnf_mean: z(bt),
            lnf_rstd: z(bt),
            logits: z(bt * vp),
            probs: z(bt * vp),
            losses: z(bt),
        };
        let grads = Grads { residual: z(bt * c), layer: glayer, lnf: z(bt * c), logits: z(bt * vp) };
        Workspace { acts, grads }
    }
}

/// A GPT model living on backend `B`.
pub struct Gpt<B: Backend> {
    pub config: ModelConfig,
    specs: Vec<ParamSpec>,
    params: Vec<B::Tensor>,
    grads: Vec<B::Tensor>,
    adam_m: Vec<B::Tensor>,
    adam_v: Vec<B::Tensor>,
    /// The backend's images of the matmul weights (`Backend::weight_image_len`)
    /// by parameter index: None for other tensors, or all None when the
    /// backend keeps no images.
    images: Vec<Option<B::Tensor>>,
    /// The images hold the current weights (false after an upload; AdamW
    /// rewrites them as it updates).
    images_fresh: bool,
    /// Per-tensor squared gradient norms.
    partials: B::Tensor,
    stats: B::Tensor,
    /// Activation buffers for `shape`, allocated on first use.
    acts: Option<Work<B::Tensor>>,
    /// Llama: keep only each block's input and recompute the block in the
    /// backward (`set_checkpointing`).
    checkpointing: bool,
    shape: (usize, usize),
    inputs: B::Tokens,
    targets: B::Tokens,
    /// Micro-batch losses recorded since the last `zero_grad`.
    micro: usize,
    /// Every parameter gradient is zero (after `zero_grad`, or after
    /// `optimizer_step`, which zeroes them as it reads them), the imaged
    /// weights' counting as zero while `imaged_grads_stale`.
    grads_zeroed: bool,
    /// The gradients of the weights with images hold an earlier step's
    /// values, which count as zero: AdamW reads them without zeroing, and
    /// the next backward writes them instead of adding (one pass over them
    /// fewer each way, and no dirty lines to write back).
    imaged_grads_stale: bool,
    /// The gradients are held this many times their value (the backend's
    /// `loss_scale` for the micro-batches since the last optimizer step).
    loss_scale: f32,
    max_micro: usize,
}

/// `(out, in)` of tensor `i` when it is a matmul weight: the 2-D tensors
/// but GPT-2's position table and an untied Llama's token embedding, which
/// are only gathered from.
fn matmul_weight_dims(cfg: &ModelConfig, i: usize, spec: &ParamSpec) -> Option<(usize, usize)> {
    let gathered = match cfg.arch {
        Architecture::Gpt2 => i == WPE,
        Architecture::Llama(l) => i == WTE && !l.tied_embeddings,
    };
    match spec.shape[..] {
        [oc, c] if !gathered => Some((oc, c)),
        _ => None,
    }
}

/// `matmul_forward`, through the weight's image when there is one.
fn forward_matmul<B: Backend>(
    backend: &B,
    out: &mut B::Tensor,
    inp: &B::Tensor,
    weight: &B::Tensor,
    image: Option<&B::Tensor>,
    bias: Option<&B::Tensor>,
    s: MatmulShape,
) {
    match image {
        Some(image) => backend.matmul_forward_imaged(out, inp, weight, image, bias, s),
        None => backend.matmul_forward(out, inp, weight, bias, s),
    }
}

/// `matmul_backward_fresh_dinp`, through the weight's image when there is
/// one (`fresh_dweight`: that weight's gradient is stale, to be written).
#[allow(clippy::too_many_arguments)]
fn backward_matmul<B: Backend>(
    backend: &B,
    dinp: &mut B::Tensor,
    dweight: &mut B::Tensor,
    dbias: Option<&mut B::Tensor>,
    dout: &B::Tensor,
    inp: &B::Tensor,
    (weight, image): (&B::Tensor, Option<&B::Tensor>),
    s: MatmulShape,
    fresh_dweight: bool,
) {
    match image {
        Some(image) => backend.matmul_backward_fresh_dinp_imaged(
            dinp,
            dweight,
            dbias,
            dout,
            inp,
            weight,
            image,
            s,
            fresh_dweight,
        ),
        None => backend.matmul_backward_fresh_dinp(dinp, dweight, dbias, dout, inp, weight, s),
    }
}

/// Splits two distinct mutable elements out of one slice.
fn two_mut<T>(v: &mut [T], i: usize, j: usize) -> (&mut T, &mut T) {
    assert!(i < j);
    let (lo, hi) = v.split_at_mut(j);
    (&mut lo[i], &mut hi[0])
}

impl<B: Backend> Gpt<B> {
    /// A model with the given host parameter values (canonical order).
    /// `max_micro` bounds the micro-batches accumulated per optimizer step.
    pub fn new(backend: &B, config: ModelConfig, values: &[Vec<f32>], max_micro: usize) -> Self {
        let specs = param_specs(&config);
        assert_eq!(values.len(), specs.len(), "parameter tensor count");
        let alloc = |s: &ParamSpec| backend.tensor(s.numel());
        let mut params: Vec<B::Tensor> = specs.iter().map(alloc).collect();
        for (p, v) in params.iter_mut().zip(values) {
            backend.upload(p, v);
        }
        Self::with_params(backend, config, specs, params, max_micro)
    }

    /// `new`, taking the host values and freeing each once it is uploaded,
    /// so a large model's host copy and device copy are never both whole.
    pub fn from_values(backend: &B, config: ModelConfig, values: Vec<Vec<f32>>, max_micro: usize) -> Self {
        let specs = param_specs(&config);
        assert_eq!(values.len(), specs.len(), "parameter tensor count");
        let params = specs
            .iter()
            .zip(values)
            .map(|(s, v)| {
                let mut p = backend.tensor(s.numel());
                backend.upload(&mut p, &v);
                p
            })
            .collect();
        Self::with_params(backend, config, specs, params, max_micro)
    }

    fn with_params(
        backend: &B,
        config: ModelConfig,
        specs: Vec<ParamSpec>,
        params: Vec<B::Tensor>,
        max_micro: usize,
    ) -> Self {
        let alloc = |s: &ParamSpec| backend.tensor(s.numel());
        let max_micro = max_micro.max(1);
        let images = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (oc, c) = matmul_weight_dims(&config, i, s)?;
                let len = backend.weight_image_len(oc, c);
                (len > 0).then(|| backend.tensor(len))
            })
            .collect();
        Gpt {
            images,
            images_fresh: false,
            grads: specs.iter().map(alloc).collect(),
            adam_m: specs.iter().map(alloc).collect(),
            adam_v: specs.iter().map(alloc).collect(),
            partials: backend.tensor(specs.len()),
            stats: backend.tensor(STAT_LOSS0 + max_micro),
            params,
            specs,
            config,
            acts: None,
            checkpointing: false,
            shape: (0, 0),
            inputs: backend.tokens(0),
            targets: backend.tokens(0),
            micro: 0,
            grads_zeroed: true,
            imaged_grads_stale: false,
            loss_scale: 1.0,
            max_micro,
        }
    }

    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// Current parameter values, canonical order.
    pub fn download_params(&self, backend: &B) -> Vec<Vec<f32>> {
        self.params.iter().map(|p| backend.download(p)).collect()
    }

    /// Replaces parameter values (canonical order).
    pub fn upload_params(&mut self, backend: &B, values: &[Vec<f32>]) {
        for (p, v) in self.params.iter_mut().zip(values) {
            backend.upload(p, v);
        }
        self.images_fresh = false;
    }

    /// Current parameter values as one flat vector (canonical order).
    pub fn download_params_flat(&self, backend: &B) -> Vec<f32> {
        let mut flat = Vec::with_capacity(self.specs.iter().map(ParamSpec::numel).sum());
        for p in &self.params {
            flat.extend_from_slice(&backend.download(p));
        }
        flat
    }

    /// Replaces parameter values from one flat vector (canonical order);
    /// `flat` holds exactly the model's parameter count.
    pub fn upload_params_flat(&mut self, backend: &B, flat: &[f32]) {
        let mut at = 0;
        for (p, s) in self.params.iter_mut().zip(&self.specs) {
            let n = s.numel();
            backend.upload(p, &flat[at..at + n]);
            at += n;
        }
        self.images_fresh = false;
    }

    /// Rewrites the weight images if the weights changed since they were written.
    fn refresh_images(&mut self, backend: &B) {
        if self.images_fresh {
            return;
        }
        for (i, image) in self.images.iter_mut().enumerate() {
            if let (Some(image), Some((oc, c))) = (image, matmul_weight_dims(&self.config, i, &self.specs[i]))
            {
                backend.write_weight_image(image, &self.params[i], oc, c);
            }
        }
        self.images_fresh = true;
    }

    /// AdamW moments (m then v per tensor), for checkpoints.
    pub fn download_moments(&self, backend: &B) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        (
            self.adam_m.iter().map(|t| backend.download(t)).collect(),
            self.adam_v.iter().map(|t| backend.download(t)).collect(),
        )
    }

    pub fn upload_moments(&mut self, backend: &B, m: &[Vec<f32>], v: &[Vec<f32>]) {
        for (t, x) in self.adam_m.iter_mut().zip(m) {
            backend.upload(t, x);
        }
        for (t, x) in self.adam_v.iter_mut().zip(v) {
            backend.upload(t, x);
        }
    }

    /// Clears AdamW moments (a fresh inner optimizer).
    pub fn reset_moments(&mut self, backend: &B) {
        for t in self.adam_m.iter_mut().chain(self.adam_v.iter_mut()) {
            backend.zero(t);
        }
    }

    fn ensure_shape(&mut self, backend: &B, b: usize, t: usize) {
        if self.acts.is_some() && self.shape == (b, t) {
            return;
        }
        let cfg = &self.config;
        if let Architecture::Llama(shape) = &cfg.arch {
            let att = backend.attention_scratch_len(llama::attention_shape(cfg, b, t));
            let ws = llama::Workspace::build(
                &mut |n| backend.tensor(n),
                att,
                cfg,
                shape,
                (b, t),
                self.checkpointing,
            );
            self.acts = Some(Work::Llama(ws));
            self.shape = (b, t);
            self.inputs = backend.tokens(b * t);
            self.targets = backend.tokens(b * t);
            return;
        }
        let att = backend.attention_scratch_len(AttentionShape::mha(b, t, cfg.n_embd, cfg.n_head));
        let ws = Workspace::build(&mut |n| backend.tensor(n), att, cfg, (b, t));
        self.acts = Some(Work::Gpt2(ws));
        self.shape = (b, t);
        self.inputs = backend.tokens(b * t);
        self.targets = backend.tokens(b * t);
    }

    /// Activation checkpointing (the Llama architecture): keep each block's
    /// input only and recompute the block's activations in the backward,
    /// for the same gradients with one block's activations held instead of
    /// every block's. Returns false, changing nothing, for GPT-2.
    pub fn set_checkpointing(&mut self, on: bool) -> bool {
        if self.config.arch.is_gpt2() {
            return !on;
        }
        if on != self.checkpointing {
            self.checkpointing = on;
            self.acts = None;
        }
        true
    }

    /// Forward pass over `inputs` (b×t). With `targets`, computes the mean
    /// loss into the stats tensor (read it with `read_losses`).
    pub fn forward(&mut self, backend: &B, inputs: &[u32], targets: Option<&[u32]>, b: usize, t: usize) {
        assert!(t <= self.config.max_seq_len, "sequence longer than the model's context");
        assert_eq!(inputs.len(), b * t);
        self.ensure_shape(backend, b, t);
        self.refresh_images(backend);
        backend.upload_tokens(&mut self.inputs, inputs);
        if let Some(targets) = targets {
            assert_eq!(targets.len(), b * t);
            backend.upload_tokens(&mut self.targets, targets);
        }
        if !self.config.arch.is_gpt2() {
            return self.forward_llama(backend, targets.is_some(), b, t);
        }
        let cfg = &self.config;
        let (c, nh, bt) = (cfg.n_embd, cfg.n_head, b * t);
        let p = &self.params;
        let img = |i: usize| self.images[i].as_ref();
        let Some(Work::Gpt2(Workspace { acts, .. })) = self.acts.as_mut() else {
            unreachable!("GPT-2 activations allocated by ensure_shape")
        };
        backend.encoder_forward(&mut acts.encoded, &self.inputs, &p[WTE], &p[WPE], EncoderShape { b, t, c });
        for l in 0..cfg.n_layer {
            let (done, rest) = acts.layers.split_at_mut(l);
            let a = &mut rest[0];
            let residual = if l == 0 { &acts.encoded } else { &done[l - 1].residual3 };
            let w = |k: P| &p[layer_index(l, k)];
            backend.layernorm_forward(
                &mut a.ln1,
                &mut a.ln1_mean,
                &mut a.ln1_rstd,
                residual,
                w(P::Ln1W),
                w(P::Ln1B),
                bt,
                c,
            );
            let mm = |oc, ic| MatmulShape { n: bt, c: ic, oc };
            let i = |k: P| layer_index(l, k);
            let (qkv, attproj, fc, fcproj) = (i(P::QkvW), i(P::AttProjW), i(P::FcW), i(P::FcProjW));
            let qkv_bias = Some(w(P::QkvB));
            forward_matmul(backend, &mut a.qkv, &a.ln1, &p[qkv], img(qkv), qkv_bias, mm(3 * c, c));
            backend.attention_forward(&mut a.atty, &mut a.att, &a.qkv, AttentionShape::mha(b, t, c, nh));
            let (pw, pb) = (&p[attproj], Some(w(P::AttProjB)));
            forward_matmul(backend, &mut a.attproj, &a.atty, pw, img(attproj), pb, mm(c, c));
            backend.residual_forward(&mut a.residual2, residual, &a.attproj);
            backend.layernorm_forward(
                &mut a.ln2,
                &mut a.ln2_mean,
                &mut a.ln2_rstd,
                &a.residual2,
                w(P::Ln2W),
                w(P::Ln2B),
                bt,
                c,
            );
            forward_matmul(backend, &mut a.fch, &a.ln2, &p[fc], img(fc), Some(w(P::FcB)), mm(4 * c, c));
            backend.gelu_forward(&mut a.fch_gelu, &a.fch);
            let (pw, pb) = (&p[fcproj], Some(w(P::FcProjB)));
            forward_matmul(backend, &mut a.fcproj, &a.fch_gelu, pw, img(fcproj), pb, mm(c, 4 * c));
            backend.residual_forward(&mut a.residual3, &a.residual2, &a.fcproj);
        }
        let last = match acts.layers.last() {
            Some(l) => &l.residual3,
            None => &acts.encoded,
        };
        let lnf = lnf_index(cfg);
        backend.layernorm_forward(
            &mut acts.lnf,
            &mut acts.lnf_mean,
            &mut acts.lnf_rstd,
            last,
            &p[lnf],
            &p[lnf + 1],
            bt,
            c,
        );
        let vp = cfg.padded_vocab_size;
        let head = MatmulShape { n: bt, c, oc: vp };
        forward_matmul(backend, &mut acts.logits, &acts.lnf, &p[WTE], img(WTE), None, head);
        if targets.is_some() {
            let ls = LogitsShape { n: bt, v: cfg.vocab_size, vp };
            backend.softmax_xent_forward(&mut acts.losses, &mut acts.probs, &acts.logits, &self.targets, ls);
            let slot = STAT_LOSS0 + self.micro.min(self.max_micro - 1);
            backend.sum_into(&mut self.stats, slot, &acts.losses, 1.0 / bt as f32);
            self.micro = (self.micro + 1).min(self.max_micro);
        }
    }

    /// Logits of the last forward pass, downloaded (`b·t × padded vocab`).
    pub fn download_logits(&self, backend: &B) -> Vec<f32> {
        match &self.acts {
            Some(Work::Gpt2(w)) => backend.download(&w.acts.logits),
            Some(Work::Llama(w)) => backend.download(&w.logits),
            None => Vec::new(),
        }
    }

    /// Zeroes parameter gradients (already zero after `optimizer_step`) and
    /// the micro-batch loss record; the imaged weights' gradients are marked
    /// stale instead, for the next backward to overwrite.
    pub fn zero_grad(&mut self, backend: &B) {
        if !self.grads_zeroed {
            for (g, image) in self.grads.iter_mut().zip(&self.images) {
                if image.is_none() {
                    backend.zero(g);
                }
            }
            self.imaged_grads_stale = self.images.iter().any(Option::is_some);
            self.grads_zeroed = true;
        }
        self.micro = 0;
    }

    /// Backward pass of the last forward (which must have had targets),
    /// accumulating into the parameter gradients scaled by `1/accum` (and by
    /// the backend's loss scale, which `optimizer_step` divides out).
    pub fn backward(&mut self, backend: &B, accum: usize) {
        if !self.config.arch.is_gpt2() {
            return self.backward_llama(backend, accum);
        }
        let (b, t) = self.shape;
        let cfg = &self.config;
        let (c, nh, bt, vp) = (cfg.n_embd, cfg.n_head, b * t, cfg.padded_vocab_size);
        let p = &self.params;
        let img = |i: usize| self.images[i].as_ref();
        let gp = &mut self.grads;
        let Some(Work::Gpt2(Workspace { acts, grads: g })) = self.acts.as_mut() else {
            panic!("forward before backward")
        };
        self.grads_zeroed = false;
        // Each imaged weight's gradient comes from one product per
        // micro-batch, which writes it when it is stale.
        let fresh = std::mem::take(&mut self.imaged_grads_stale);
        backend.zero(&mut g.logits);
        self.loss_scale = backend.loss_scale(bt);
        let dloss = self.loss_scale / (bt * accum.max(1)) as f32;
        let ls = LogitsShape { n: bt, v: cfg.vocab_size, vp };
        backend.softmax_xent_backward(&mut g.logits, &acts.probs, &self.targets, dloss, ls);
        backward_matmul(
            backend,
            &mut g.lnf,
            &mut gp[WTE],
            None,
            &g.logits,
            &acts.lnf,
            (&p[WTE], img(WTE)),
            MatmulShape { n: bt, c, oc: vp },
            fresh,
        );
        let lnf = lnf_index(cfg);
        {
            let (dw, db) = two_mut(gp, lnf, lnf + 1);
            let last = acts.layers.last().map_or(&acts.encoded, |a| &a.residual3);
            backend.zero(&mut g.residual);
            backend.layernorm_backward(
                &mut g.residual,
                dw,
                db,
                &g.lnf,
                last,
                &p[lnf],
                &acts.lnf_mean,
                &acts.lnf_rstd,
                bt,
                c,
            );
        }
        for l in (0..cfg.n_layer).rev() {
            let a = &acts.layers[l];
            let residual = if l == 0 { &acts.encoded } else { &acts.layers[l - 1].residual3 };
            // The block's own gradients are each written first by a `_fresh`
            // op, so none is zeroed.
            let gl = &mut g.layer;
            let dres = &mut g.residual;
            let w = |k: P| &p[layer_index(l, k)];
            let idx = |k: P| layer_index(l, k);
            let mm = |oc, ic| MatmulShape { n: bt, c: ic, oc };

            // MLP branch: its output gradient is the block's (residual3 = residual2 + fcproj).
            let (dw, db) = two_mut(gp, idx(P::FcProjW), idx(P::FcProjB));
            backward_matmul(
                backend,
                &mut gl.fch_gelu,
                dw,
                Some(db),
                dres,
                &a.fch_gelu,
                (w(P::FcProjW), img(idx(P::FcProjW))),
                mm(c, 4 * c),
                fresh,
            );
            backend.gelu_backward_fresh(&mut gl.fch, &a.fch, &gl.fch_gelu);
            let (dw, db) = two_mut(gp, idx(P::FcW), idx(P::FcB));
            backward_matmul(
                backend,
                &mut gl.ln2,
                dw,
                Some(db),
                &gl.fch,
                &a.ln2,
                (w(P::FcW), img(idx(P::FcW))),
                mm(4 * c, c),
                fresh,
            );
            // dres becomes residual2's gradient: the pass-through plus LayerNorm 2's.
            let (dw, db) = two_mut(gp, idx(P::Ln2W), idx(P::Ln2B));
            backend.layernorm_backward(
                dres,
                dw,
                db,
                &gl.ln2,
                &a.residual2,
                w(P::Ln2W),
                &a.ln2_mean,
                &a.ln2_rstd,
                bt,
                c,
            );
            // Attention branch: its output gradient is residual2's.
            let (dw, db) = two_mut(gp, idx(P::AttProjW), idx(P::AttProjB));
            backward_matmul(
                backend,
                &mut gl.atty,
                dw,
                Some(db),
                dres,
                &a.atty,
                (w(P::AttProjW), img(idx(P::AttProjW))),
                mm(c, c),
                fresh,
            );
            backend.attention_backward_fresh(
                &mut gl.qkv,
                &gl.atty,
                &a.qkv,
                &a.att,
                AttentionShape::mha(b, t, c, nh),
            );
            let (dw, db) = two_mut(gp, idx(P::QkvW), idx(P::QkvB));
            backward_matmul(
                backend,
                &mut gl.ln1,
                dw,
                Some(db),
                &gl.qkv,
                &a.ln1,
                (w(P::QkvW), img(idx(P::QkvW))),
                mm(3 * c, c),
                fresh,
            );
            // dres becomes the block input's gradient: the pass-through plus LayerNorm 1's.
            let (dw, db) = two_mut(gp, idx(P::Ln1W), idx(P::Ln1B));
            backend.layernorm_backward(
                dres,
                dw,
                db,
                &gl.ln1,
                residual,
                w(P::Ln1W),
                &a.ln1_mean,
                &a.ln1_rstd,
                bt,
                c,
            );
        }
        let (dwte, dwpe) = two_mut(gp, WTE, WPE);
        backend.encoder_backward(dwte, dwpe, &g.residual, &self.inputs, EncoderShape { b, t, c });
    }

    /// Clips the global gradient norm to `max_norm` (≤ 0: no clipping) and
    /// applies AdamW; weight decay only on 2-D weights. The gradients are
    /// zeroed as AdamW reads them (the imaged weights' marked stale), ready
    /// for the next step.
    pub fn optimizer_step(&mut self, backend: &B, hp: AdamWStep, max_norm: f32) {
        self.zero_stale_grads(backend);
        for (i, g) in self.grads.iter().enumerate() {
            backend.sum_squares_into(&mut self.partials, i, g);
        }
        let n = self.grads.len();
        let unscale = 1.0 / self.loss_scale;
        backend.grad_clip_scale(&mut self.stats, STAT_NORM, STAT_SCALE, &self.partials, n, max_norm, unscale);
        // Last tensors first, so the first layers' weights are the ones still
        // in cache when the next forward starts (tensors update independently).
        for (i, spec) in self.specs.iter().enumerate().rev() {
            let hp = AdamWStep { weight_decay: if spec.decay { hp.weight_decay } else { 0.0 }, ..hp };
            let (p, g, m, v) =
                (&mut self.params[i], &mut self.grads[i], &mut self.adam_m[i], &mut self.adam_v[i]);
            match (&mut self.images[i], matmul_weight_dims(&self.config, i, spec)) {
                (Some(image), Some(dims)) => {
                    backend.adamw_update_imaged(p, g, m, v, image, dims, &self.stats, STAT_SCALE, hp)
                }
                _ => backend.adamw_update_zero_grad(p, g, m, v, &self.stats, STAT_SCALE, hp),
            }
        }
        // Every image was rewritten from the new weights.
        self.images_fresh = true;
        self.imaged_grads_stale = self.images.iter().any(Option::is_some);
        self.grads_zeroed = true;
    }

    /// Zeroes the imaged weights' gradients if they are stale, for a reader
    /// other than the backward that would overwrite them (a step with no
    /// backward since the last).
    fn zero_stale_grads(&mut self, backend: &B) {
        if std::mem::take(&mut self.imaged_grads_stale) {
            for (g, image) in self.grads.iter_mut().zip(&self.images) {
                if image.is_some() {
                    backend.zero(g);
                }
            }
        }
    }

    /// Reads the stats tensor once: the mean loss of each micro-batch since
    /// `zero_grad`, and the gradient norm of the last `optimizer_step`.
    pub fn read_stats(&self, backend: &B) -> StepStats {
        let s = backend.download(&self.stats);
        StepStats { losses: s[STAT_LOSS0..STAT_LOSS0 + self.micro].to_vec(), grad_norm: s[STAT_NORM] }
    }

    /// Parameter gradients (canonical order, the loss scale divided out),
    /// for tests and diagnostics.
    pub fn download_grads(&self, backend: &B) -> Vec<Vec<f32>> {
        let stale = |i: usize| self.imaged_grads_stale && self.images[i].is_some();
        let unscale = 1.0 / self.loss_scale;
        let grad = |(i, g): (usize, &B::Tensor)| match stale(i) {
            true => vec![0.0; self.specs[i].numel()],
            false if unscale == 1.0 => backend.download(g),
            false => backend.download(g).into_iter().map(|x| x * unscale).collect(),
        };
        self.grads.iter().enumerate().map(grad).collect()
    }
}

/// What one step reports.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    pub losses: Vec<f32>,
    pub grad_norm: f32,
}

impl StepStats {
    pub fn mean_loss(&self) -> f32 {
        if self.losses.is_empty() {
            return f32::NAN;
        }
        self.losses.iter().sum::<f32>() / self.losses.len() as f32
    }
}
