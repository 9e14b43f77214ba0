//! A deliberately naive f64 Llama forward pass, for tests: RMSNorm, rotary
//! embeddings in the rotate-half layout, grouped-query causal attention,
//! SwiGLU, no biases, the LM head tied or not.

use super::linear;
use crate::model::config::{LlamaShape, ModelConfig};
use crate::model::params::llama::{layer_index, norm_index, LlamaParam as P};
use crate::model::params::{head_index, WTE};

fn rmsnorm(x: &[f64], w: &[f64]) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let rs = 1.0 / (ms + 1e-5).sqrt();
    x.iter().zip(w).map(|(x, w)| x * rs * w).collect()
}

/// Rotates one head (channel i with i + hs/2) to position `pos`.
fn rotate(head: &mut [f64], pos: usize, theta: f64) {
    let hs = head.len();
    for i in 0..hs / 2 {
        let angle = pos as f64 * theta.powf(-(2.0 * i as f64) / hs as f64);
        let (x0, x1) = (head[i], head[i + hs / 2]);
        head[i] = x0 * angle.cos() - x1 * angle.sin();
        head[i + hs / 2] = x1 * angle.cos() + x0 * angle.sin();
    }
}

/// Mean cross-entropy of a Llama on `(inputs, targets)`, both `b × t`.
pub fn loss(
    cfg: &ModelConfig,
    shape: &LlamaShape,
    params: &[Vec<f64>],
    inputs: &[u32],
    targets: &[u32],
    b: usize,
    t: usize,
) -> f64 {
    let (c, nh, nkv, v, h) = (cfg.n_embd, cfg.n_head, shape.n_kv_head, cfg.vocab_size, shape.ffn_hidden);
    let (hs, group, theta) = (c / nh, nh / nkv, shape.rope_theta as f64);
    let mut total = 0.0;
    for bi in 0..b {
        let mut x: Vec<Vec<f64>> = (0..t)
            .map(|ti| {
                let tok = inputs[bi * t + ti] as usize;
                params[WTE][tok * c..(tok + 1) * c].to_vec()
            })
            .collect();
        for l in 0..cfg.n_layer {
            let w = |k: P| &params[layer_index(l, k)][..];
            // per position: q heads, then k heads, then v heads
            let qkv: Vec<Vec<f64>> = x
                .iter()
                .enumerate()
                .map(|(pos, r)| {
                    let mut row = linear(&rmsnorm(r, w(P::AttnNorm)), w(P::QkvW), None, cfg.qkv_width());
                    for head in row[..(nh + nkv) * hs].chunks_mut(hs) {
                        rotate(head, pos, theta);
                    }
                    row
                })
                .collect();
            let mut y = vec![vec![0.0; c]; t];
            for hq in 0..nh {
                let (k0, v0) = (c + (hq / group) * hs, c + (nkv + hq / group) * hs);
                for ti in 0..t {
                    let q = &qkv[ti][hq * hs..(hq + 1) * hs];
                    let scores: Vec<f64> = (0..=ti)
                        .map(|t2| {
                            let k = &qkv[t2][k0..k0 + hs];
                            q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hs as f64).sqrt()
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for (t2, ev) in e.iter().enumerate() {
                        for j in 0..hs {
                            y[ti][hq * hs + j] += ev / z * qkv[t2][v0 + j];
                        }
                    }
                }
            }
            for (xr, yr) in x.iter_mut().zip(&y) {
                let proj = linear(yr, w(P::OW), None, c);
                xr.iter_mut().zip(proj).for_each(|(a, p)| *a += p);
            }
            for xr in x.iter_mut() {
                let gu = linear(&rmsnorm(xr, w(P::MlpNorm)), w(P::GateUpW), None, 2 * h);
                let act: Vec<f64> = (0..h).map(|j| gu[j] / (1.0 + (-gu[j]).exp()) * gu[h + j]).collect();
                let proj = linear(&act, w(P::DownW), None, c);
                xr.iter_mut().zip(proj).for_each(|(a, p)| *a += p);
            }
        }
        let head = &params[head_index(cfg)];
        for (ti, xr) in x.iter().enumerate() {
            let logits = linear(&rmsnorm(xr, &params[norm_index(cfg)]), head, None, v);
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
            total += lse - logits[targets[bi * t + ti] as usize];
        }
    }
    total / (b * t) as f64
}
