//! The Llama architecture's forward and backward passes over the model's
//! tensors: token embedding, then per block RMSNorm → qkv → rotary
//! embeddings → grouped-query attention → output projection → residual,
//! RMSNorm → gate and up → SwiGLU → down projection → residual; a final
//! RMSNorm, the LM head (tied to the embedding or its own) and the fused
//! softmax cross-entropy. No biases.
//!
//! The embedding runs through the encoder op with a zero position table
//! (Llama's positions enter through the rotary embeddings), whose gradient
//! goes to a scratch buffer: `t × C` floats each, against a block's many.
//!
//! With activation checkpointing the workspace keeps only each block's
//! input (the residual stream, `B·T × C`) and one block's activations: the
//! backward recomputes a block's forward from its input just before it
//! differentiates it. The forward ops are deterministic, so the gradients
//! are the same bits as without it, for one more forward pass of compute.

use super::{backward_matmul, forward_matmul, Gpt, Work, STAT_LOSS0};
use crate::compute::{AttentionShape, Backend, EncoderShape, LogitsShape, MatmulShape};
use crate::model::config::{LlamaShape, ModelConfig};
use crate::model::params::llama::{layer_index, norm_index, LlamaParam as P};
use crate::model::params::{head_index, WTE};

/// Activations of one block.
struct LayerActs<T> {
    ln1: T,
    ln1_rstd: T,
    /// q and k rotated in place by the rotary embedding.
    qkv: T,
    atty: T,
    att: T,
    attproj: T,
    residual2: T,
    ln2: T,
    ln2_rstd: T,
    /// `[gate | up]`, 2H a row.
    fch: T,
    /// silu(gate)·up, H a row.
    fch_act: T,
    fcproj: T,
}

/// Gradients of one block's activations, shared by every block in turn.
struct LayerGrads<T> {
    ln1: T,
    qkv: T,
    atty: T,
    ln2: T,
    fch: T,
    fch_act: T,
}

/// A Llama's activations and their gradients for one `(batch, seq)` shape.
pub(super) struct Workspace<T> {
    /// The residual stream between blocks: `residuals[l]` is block `l`'s
    /// input (`[0]` the embedding), `residuals[n_layer]` the last output.
    residuals: Vec<T>,
    /// The encoder's position table (zeros) and its gradient's scratch, `t × C`.
    zero_positions: T,
    dpositions: T,
    /// Every block's activations, or with checkpointing one block's,
    /// recomputed per block in the backward.
    layers: Vec<LayerActs<T>>,
    checkpointing: bool,
    lnf: T,
    lnf_rstd: T,
    pub(super) logits: T,
    probs: T,
    losses: T,
    /// The residual stream's gradient, carried down through the blocks in
    /// place (as in GPT-2's pass).
    dresidual: T,
    dlayer: LayerGrads<T>,
    dlnf: T,
    dlogits: T,
}

impl<T> Workspace<T> {
    /// The buffers for `(b, t)`, each made by `z` from its length in floats
    /// (`att`: the backend's attention scratch length).
    pub(super) fn build(
        z: &mut impl FnMut(usize) -> T,
        att: usize,
        cfg: &ModelConfig,
        shape: &LlamaShape,
        (b, t): (usize, usize),
        checkpointing: bool,
    ) -> Self {
        let (c, h, vp, bt) = (cfg.n_embd, shape.ffn_hidden, cfg.padded_vocab_size, b * t);
        let qw = cfg.qkv_width();
        let kept = if checkpointing { cfg.n_layer.min(1) } else { cfg.n_layer };
        let layers = (0..kept)
            .map(|_| LayerActs {
                ln1: z(bt * c),
                ln1_rstd: z(bt),
                qkv: z(bt * qw),
                atty: z(bt * c),
                att: z(att),
                attproj: z(bt * c),
                residual2: z(bt * c),
                ln2: z(bt * c),
                ln2_rstd: z(bt),
                fch: z(bt * 2 * h),
                fch_act: z(bt * h),
                fcproj: z(bt * c),
            })
            .collect();
        Workspace {
            residuals: (0..=cfg.n_layer).map(|_| z(bt * c)).collect(),
            zero_positions: z(t * c),
            dpositions: z(t * c),
            layers,
            checkpointing,
            lnf: z(bt * c),
            lnf_rstd: z(bt),
            logits: z(bt * vp),
            probs: z(bt * vp),
            losses: z(bt),
            dresidual: z(bt * c),
            dlayer: LayerGrads {
                ln1: z(bt * c),
                qkv: z(bt * qw),
                atty: z(bt * c),
                ln2: z(bt * c),
                fch: z(bt * 2 * h),
                fch_act: z(bt * h),
            },
            dlnf: z(bt * c),
            dlogits: z(bt * vp),
        }
    }
}

pub(super) fn attention_shape(cfg: &ModelConfig, b: usize, t: usize) -> AttentionShape {
    AttentionShape { b, t, c: cfg.n_embd, nh: cfg.n_head, nkv: cfg.n_kv_head() }
}

impl<B: Backend> Gpt<B> {
    /// The Llama forward pass over the uploaded inputs; with targets, the
    /// mean loss goes to the stats tensor.
    pub(super) fn forward_llama(&mut self, backend: &B, with_targets: bool, b: usize, t: usize) {
        let cfg = &self.config;
        let (c, bt) = (cfg.n_embd, b * t);
        let p = &self.params;
        let Some(Work::Llama(ws)) = self.acts.as_mut() else {
            unreachable!("Llama activations allocated by ensure_shape")
        };
        let enc = EncoderShape { b, t, c };
        backend.encoder_forward(&mut ws.residuals[0], &self.inputs, &p[WTE], &ws.zero_positions, enc);
        for l in 0..cfg.n_layer {
            let a = &mut ws.layers[if ws.checkpointing { 0 } else { l }];
            let (inputs, outputs) = ws.residuals.split_at_mut(l + 1);
            let block = Block { backend, cfg, params: p, images: &self.images, l, b, t };
            block.forward(a, &inputs[l], Some(&mut outputs[0]));
        }
        let last = &ws.residuals[cfg.n_layer];
        backend.rmsnorm_forward(&mut ws.lnf, &mut ws.lnf_rstd, last, &p[norm_index(cfg)], bt, c);
        let (vp, head) = (cfg.padded_vocab_size, head_index(cfg));
        let hs = MatmulShape { n: bt, c, oc: vp };
        forward_matmul(backend, &mut ws.logits, &ws.lnf, &p[head], self.images[head].as_ref(), None, hs);
        if with_targets {
            let ls = LogitsShape { n: bt, v: cfg.vocab_size, vp };
            backend.softmax_xent_forward(&mut ws.losses, &mut ws.probs, &ws.logits, &self.targets, ls);
            let slot = STAT_LOSS0 + self.micro.min(self.max_micro - 1);
            backend.sum_into(&mut self.stats, slot, &ws.losses, 1.0 / bt as f32);
            self.micro = (self.micro + 1).min(self.max_micro);
        }
    }

    /// The Llama backward pass of the last forward (which had targets).
    pub(super) fn backward_llama(&mut self, backend: &B, accum: usize) {
        let (b, t) = self.shape;
        let cfg = &self.config;
        let shape = *cfg.arch.llama().expect("a llama config");
        let (c, h, bt, qw, vp) =
            (cfg.n_embd, shape.ffn_hidden, b * t, cfg.qkv_width(), cfg.padded_vocab_size);
        let (theta, ashape) = (shape.rope_theta as f32, attention_shape(cfg, b, t));
        let p = &self.params;
        let img = |i: usize| self.images[i].as_ref();
        let gp = &mut self.grads;
        let Some(Work::Llama(ws)) = self.acts.as_mut() else { panic!("forward before backward") };
        self.grads_zeroed = false;
        let fresh = std::mem::take(&mut self.imaged_grads_stale);
        backend.zero(&mut ws.dlogits);
        self.loss_scale = backend.loss_scale(bt);
        let dloss = self.loss_scale / (bt * accum.max(1)) as f32;
        let ls = LogitsShape { n: bt, v: cfg.vocab_size, vp };
        backend.softmax_xent_backward(&mut ws.dlogits, &ws.probs, &self.targets, dloss, ls);
        let head = head_index(cfg);
        let head_shape = MatmulShape { n: bt, c, oc: vp };
        let (dlogits, lnf) = (&ws.dlogits, &ws.lnf);
        let head_w = (&p[head], img(head));
        backward_matmul(backend, &mut ws.dlnf, &mut gp[head], None, dlogits, lnf, head_w, head_shape, fresh);
        let norm = norm_index(cfg);
        let last = &ws.residuals[cfg.n_layer];
        backend.zero(&mut ws.dresidual);
        backend.rmsnorm_backward(
            &mut ws.dresidual,
            &mut gp[norm],
            &ws.dlnf,
            last,
            &p[norm],
            &ws.lnf_rstd,
            bt,
            c,
        );
        let mm = |oc, ic| MatmulShape { n: bt, c: ic, oc };
        for l in (0..cfg.n_layer).rev() {
            let residual = &ws.residuals[l];
            let a = if ws.checkpointing {
                // The forward left the top block's activations in the one
                // set kept; every block below is recomputed from its input.
                if l + 1 < cfg.n_layer {
                    let block = Block { backend, cfg, params: p, images: &self.images, l, b, t };
                    block.forward(&mut ws.layers[0], residual, None);
                }
                &ws.layers[0]
            } else {
                &ws.layers[l]
            };
            let (gl, dres) = (&mut ws.dlayer, &mut ws.dresidual);
            let i = |k: P| layer_index(l, k);
            let w = |k: P| (&p[i(k)], img(i(k)));

            // MLP branch: its output gradient is the block's.
            let (dw, x) = (&mut gp[i(P::DownW)], &a.fch_act);
            backward_matmul(backend, &mut gl.fch_act, dw, None, dres, x, w(P::DownW), mm(c, h), fresh);
            backend.swiglu_backward_fresh(&mut gl.fch, &a.fch, &gl.fch_act, bt, h);
            let (dw, x) = (&mut gp[i(P::GateUpW)], &a.ln2);
            backward_matmul(backend, &mut gl.ln2, dw, None, &gl.fch, x, w(P::GateUpW), mm(2 * h, c), fresh);
            // dres becomes residual2's gradient: the pass-through plus the norm's.
            let (dw, norm_w) = (&mut gp[i(P::MlpNorm)], &p[i(P::MlpNorm)]);
            backend.rmsnorm_backward(dres, dw, &gl.ln2, &a.residual2, norm_w, &a.ln2_rstd, bt, c);

            // Attention branch: its output gradient is residual2's.
            let (dw, x) = (&mut gp[i(P::OW)], &a.atty);
            backward_matmul(backend, &mut gl.atty, dw, None, dres, x, w(P::OW), mm(c, c), fresh);
            backend.attention_backward_fresh(&mut gl.qkv, &gl.atty, &a.qkv, &a.att, ashape);
            backend.rope_backward(&mut gl.qkv, ashape, theta);
            let (dw, x) = (&mut gp[i(P::QkvW)], &a.ln1);
            backward_matmul(backend, &mut gl.ln1, dw, None, &gl.qkv, x, w(P::QkvW), mm(qw, c), fresh);
            // dres becomes the block input's gradient.
            let (dw, norm_w) = (&mut gp[i(P::AttnNorm)], &p[i(P::AttnNorm)]);
            backend.rmsnorm_backward(dres, dw, &gl.ln1, residual, norm_w, &a.ln1_rstd, bt, c);
        }
        backend.zero(&mut ws.dpositions);
        let enc = EncoderShape { b, t, c };
        backend.encoder_backward(&mut gp[WTE], &mut ws.dpositions, &ws.dresidual, &self.inputs, enc);
    }
}

/// One block of the model: what its forward pass reads.
struct Block<'a, B: Backend> {
    backend: &'a B,
    cfg: &'a ModelConfig,
    params: &'a [B::Tensor],
    images: &'a [Option<B::Tensor>],
    l: usize,
    b: usize,
    t: usize,
}

impl<B: Backend> Block<'_, B> {
    /// Block `l`'s forward from `input` into `a`, and its output (the next
    /// residual) into `output` when given (a recomputation needs none).
    fn forward(&self, a: &mut LayerActs<B::Tensor>, input: &B::Tensor, output: Option<&mut B::Tensor>) {
        let (backend, cfg, p) = (self.backend, self.cfg, self.params);
        let shape = *cfg.arch.llama().expect("a llama config");
        let (c, h, bt, qw) = (cfg.n_embd, shape.ffn_hidden, self.b * self.t, cfg.qkv_width());
        let (theta, ashape) = (shape.rope_theta as f32, attention_shape(cfg, self.b, self.t));
        let img = |i: usize| self.images[i].as_ref();
        let mm = |oc, ic| MatmulShape { n: bt, c: ic, oc };
        let i = |k: P| layer_index(self.l, k);
        backend.rmsnorm_forward(&mut a.ln1, &mut a.ln1_rstd, input, &p[i(P::AttnNorm)], bt, c);
        let (qkv, o) = (i(P::QkvW), i(P::OW));
        forward_matmul(backend, &mut a.qkv, &a.ln1, &p[qkv], img(qkv), None, mm(qw, c));
        backend.rope_forward(&mut a.qkv, ashape, theta);
        backend.attention_forward(&mut a.atty, &mut a.att, &a.qkv, ashape);
        forward_matmul(backend, &mut a.attproj, &a.atty, &p[o], img(o), None, mm(c, c));
        backend.residual_forward(&mut a.residual2, input, &a.attproj);
        backend.rmsnorm_forward(&mut a.ln2, &mut a.ln2_rstd, &a.residual2, &p[i(P::MlpNorm)], bt, c);
        let (gate_up, down) = (i(P::GateUpW), i(P::DownW));
        forward_matmul(backend, &mut a.fch, &a.ln2, &p[gate_up], img(gate_up), None, mm(2 * h, c));
        backend.swiglu_forward(&mut a.fch_act, &a.fch, bt, h);
        forward_matmul(backend, &mut a.fcproj, &a.fch_act, &p[down], img(down), None, mm(c, h));
        if let Some(output) = output {
            backend.residual_forward(output, &a.residual2, &a.fcproj);
        }
    }
}
