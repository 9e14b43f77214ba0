//! Causal multi-head attention on the CPU, fused and blocked (flash-style):
//! no T×T probability matrix is kept. Each (batch, head) is one task; it
//! copies its head's q, k, v into padded scratch (k and v also transposed),
//! then takes queries `QB` at a time against tiles of `W` keys, so scores
//! come from register tiles (`tile_dots`: `QB` rows × `W` keys, summed over
//! the head's channels in order) instead of one horizontal sum per key.
//!
//! The forward runs an online softmax over key tiles (running max and sum,
//! output rescaled when the max grows) and saves one logsumexp per (batch,
//! head, query) row; the backward recomputes each probability from it,
//! `p = exp(q·k·scale − lse)`. Every element's terms are added in a fixed
//! order (scores over channels, outputs and dq over keys, dk and dv over
//! queries) by code compiled once per path with correctly rounded fused
//! multiply-adds, so results are deterministic and the same on every
//! instruction-set path.
//! The materialised kernels (`reference`) stay as the oracle for these and
//! for the GPU backend, whose buffers keep the full matrix.

use rayon::prelude::*;

use super::isa::Isa;
use crate::compute::AttentionShape;

mod reference;
mod tiles;
mod wide;
pub use reference::{reference_backward, reference_forward};
use tiles::{backward_block, forward_block};

/// Queries a block takes at once (rows of a register tile).
const QB: usize = 4;
/// Keys, or head channels, per register tile (two 16-lane vectors).
const W: usize = 32;

/// Floats of the `att` buffer the fused kernels need: one logsumexp per row.
pub fn scratch_len(s: AttentionShape) -> usize {
    s.rows()
}

/// One (batch, head) of a qkv tensor and its sizes, padded for the tiles.
#[derive(Clone, Copy)]
struct Head<'a> {
    qkv: &'a [f32],
    /// Batch row, query head and the key/value head it reads.
    bi: usize,
    h: usize,
    kvh: usize,
    tt: usize,
    c: usize,
    /// Key/value heads, and floats of one position's qkv row.
    nkv: usize,
    c3: usize,
    hs: usize,
    scale: f32,
    /// Query rows padded to whole blocks, keys to whole tiles, channels to whole tiles.
    tq: usize,
    tk: usize,
    hp: usize,
    /// The tiles run `wide`'s AVX-512 forms (an AVX-512 path).
    wide: bool,
}

impl<'a> Head<'a> {
    fn new(isa: Isa, qkv: &'a [f32], s: AttentionShape, bh: usize) -> Head<'a> {
        let hs = s.head_size();
        Head {
            wide: isa.is_avx512() && isa.supported(),
            qkv,
            bi: bh / s.nh,
            h: bh % s.nh,
            kvh: (bh % s.nh) / (s.nh / s.nkv),
            tt: s.t,
            c: s.c,
            nkv: s.nkv,
            c3: s.qkv_width(),
            hs,
            scale: 1.0 / (hs as f32).sqrt(),
            tq: s.t.next_multiple_of(QB),
            tk: s.t.next_multiple_of(W),
            hp: hs.next_multiple_of(W),
        }
    }

    /// Offset of row t's part (0 = q, 1 = k, 2 = v) of this head in a
    /// (b, t, (nh + 2·nkv)·hs) tensor: its query head's q, its key/value
    /// head's k and v.
    fn at(&self, t: usize, part: usize) -> usize {
        let col = match part {
            0 => self.h * self.hs,
            1 => self.c + self.kvh * self.hs,
            _ => self.c + (self.nkv + self.kvh) * self.hs,
        };
        (self.bi * self.tt + t) * self.c3 + col
    }

    /// Copies part `part` into `rows`, one padded row per t, zeros in the
    /// padding (channels past hs, rows past tt).
    fn rows(&self, part: usize, rows: &mut [f32]) {
        let (hs, hp, tt) = (self.hs, self.hp, self.tt);
        for t in 0..tt {
            rows[t * hp..t * hp + hs].copy_from_slice(&self.qkv[self.at(t, part)..][..hs]);
            rows[t * hp + hs..(t + 1) * hp].fill(0.0);
        }
        rows[tt * hp..].fill(0.0);
    }

    /// Copies part `part` transposed into `cols`: channel d's row holds
    /// every t, zeros past tt.
    fn cols(&self, part: usize, cols: &mut [f32]) {
        for t in 0..self.tt {
            for (d, x) in self.qkv[self.at(t, part)..][..self.hs].iter().enumerate() {
                cols[d * self.tk + t] = *x;
            }
        }
        for d in 0..self.hs {
            cols[d * self.tk + self.tt..(d + 1) * self.tk].fill(0.0);
        }
    }
}

/// Per-task scratch, reused across the (batch, head) pairs a task takes.
#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    kt: Vec<f32>,
    vt: Vec<f32>,
    dout: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    /// A block's probabilities and score gradients (`QB × tk`), or its
    /// outputs (`QB × hp`) in the forward.
    p: Vec<f32>,
    dp: Vec<f32>,
}

/// Zero-fills `v` to `len` floats.
fn zeroed(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    v.clear();
    v.resize(len, 0.0);
    &mut v[..]
}

/// `v` as `len` floats, holding whatever it held: for buffers written
/// whole (padding included) before they are read.
fn sized(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    v.resize(len, 0.0);
    &mut v[..len]
}

/// out(b, t, c) = softmax(q·kᵀ·scale, causal)·v per head; `lse` (b, nh, t)
/// gets each row's logsumexp of the scaled scores.
pub fn forward(isa: Isa, out: &mut [f32], lse: &mut [f32], qkv: &[f32], s: AttentionShape) {
    let AttentionShape { b, t: tt, c, nh, nkv } = s;
    assert!(nkv > 0 && nh.is_multiple_of(nkv), "query heads in whole groups");
    assert!(out.len() >= b * tt * c && lse.len() >= b * nh * tt && qkv.len() >= b * tt * s.qkv_width());
    let outp = SharedMut(out.as_mut_ptr());
    lse[..b * nh * tt].par_chunks_mut(tt).enumerate().for_each_init(Scratch::default, |ws, (bh, lse_bh)| {
        let hd = Head::new(isa, qkv, s, bh);
        let (hs, hp) = (hd.hs, hd.hp);
        hd.rows(0, sized(&mut ws.q, hd.tq * hp));
        hd.rows(2, sized(&mut ws.v, hd.tk * hp));
        hd.cols(1, sized(&mut ws.kt, hs * hd.tk));
        // `forward_block` clears its outputs first.
        let o = sized(&mut ws.p, QB * hp);
        for t0 in (0..tt).step_by(QB) {
            let n = QB.min(tt - t0);
            let (maxv, sum) = forward_block(isa, hd, t0, &ws.q, &ws.kt, &ws.v, o);
            for i in 0..n {
                let row = &o[i * hp..][..hs];
                // SAFETY: (bi, h) owns out[(bi*tt+t)*c + h*hs ..][..hs] for every
                // t; no other task writes there, and `out` outlives the scope.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(outp.ptr().add((hd.bi * tt + t0 + i) * c + hd.h * hs), hs)
                };
                let inv = 1.0 / sum[i];
                for (d, x) in dst.iter_mut().zip(row) {
                    *d = x * inv;
                }
                lse_bh[t0 + i] = maxv[i] + sum[i].ln();
            }
        }
    });
}

/// dqkv (+)= the gradient of [`forward`] given dout(b, t, c) (written instead
/// of accumulated when `accumulate` is false), recomputing the
/// probabilities from the saved logsumexps. One task per (batch row,
/// key/value head): its k and v are loaded once, the group's query heads
/// run in order, each head's dq goes to dqkv as it finishes, and the
/// group's dk and dv (summed over its heads in that order) at the end.
pub fn backward(
    isa: Isa,
    accumulate: bool,
    dqkv: &mut [f32],
    dout: &[f32],
    qkv: &[f32],
    lse: &[f32],
    s: AttentionShape,
) {
    let AttentionShape { b, t: tt, c, nh, nkv } = s;
    assert!(nkv > 0 && nh.is_multiple_of(nkv), "query heads in whole groups");
    assert!(dqkv.len() >= b * tt * s.qkv_width() && lse.len() >= b * nh * tt && dout.len() >= b * tt * c);
    let group = nh / nkv;
    let dp = SharedMut(dqkv.as_mut_ptr());
    (0..b * nkv).into_par_iter().for_each_init(Scratch::default, |ws, bkv| {
        let (bi, kvh) = (bkv / nkv, bkv % nkv);
        let first = Head::new(isa, qkv, s, bi * nh + kvh * group);
        let (hs, hp, tk) = (first.hs, first.hp, first.tk);
        first.rows(1, sized(&mut ws.k, tk * hp));
        first.cols(1, sized(&mut ws.kt, hs * tk));
        first.cols(2, sized(&mut ws.vt, hs * tk));
        zeroed(&mut ws.dk, tk * hp);
        zeroed(&mut ws.dv, tk * hp);
        // A block writes its probabilities and score gradients for every key
        // tile it sees before reading them.
        sized(&mut ws.p, QB * tk);
        sized(&mut ws.dp, QB * tk);
        // SAFETY: the (bi, kvh) task owns its group's q columns and the
        // kvh-th k and v columns of batch row bi in dqkv; tasks never
        // overlap and dqkv outlives them.
        let write = |at: usize, src: &[f32]| {
            let dst = unsafe { std::slice::from_raw_parts_mut(dp.ptr().add(at), hs) };
            for (x, g) in dst.iter_mut().zip(src) {
                *x = if accumulate { *x + g } else { *g };
            }
        };
        for bh in bi * nh + kvh * group..bi * nh + (kvh + 1) * group {
            let hd = Head::new(isa, qkv, s, bh);
            hd.rows(0, sized(&mut ws.q, hd.tq * hp));
            let d = sized(&mut ws.dout, hd.tq * hp);
            for t in 0..tt {
                d[t * hp..t * hp + hs].copy_from_slice(&dout[(hd.bi * tt + t) * c + hd.h * hs..][..hs]);
                d[t * hp + hs..(t + 1) * hp].fill(0.0);
            }
            d[tt * hp..].fill(0.0);
            zeroed(&mut ws.dq, hd.tq * hp);
            let lse_bh = &lse[bh * tt..(bh + 1) * tt];
            for t0 in (0..tt).step_by(QB) {
                backward_block(isa, hd, t0, lse_bh, ws);
            }
            for t in 0..tt {
                write(hd.at(t, 0), &ws.dq[t * hp..]);
            }
        }
        for t in 0..tt {
            write(first.at(t, 1), &ws.dk[t * hp..]);
            write(first.at(t, 2), &ws.dv[t * hp..]);
        }
    });
}

/// Shares a mutable base pointer with tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct SharedMut(*mut f32);
// SAFETY: only used where each task writes a disjoint set of indices.
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// The base pointer (a method, so closures capture the whole wrapper).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests;
