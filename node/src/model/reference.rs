//! A deliberately naive f64 forward pass (GPT-2 here, Llama in `llama`),
//! used only by tests: the loss it computes is the ground truth for the f32
//! backends' forward pass and, by central finite differences, for their
//! analytic gradients.

use super::config::{Architecture, ModelConfig};
use super::params::{layer_index, lnf_index, LayerParam as P, WPE, WTE};

fn layernorm(x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    let c = x.len() as f64;
    let mu = x.iter().sum::<f64>() / c;
    let var = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / c;
    let rs = 1.0 / (var + 1e-5).sqrt();
    x.iter().zip(w).zip(b).map(|((x, w), b)| (x - mu) * rs * w + b).collect()
}

/// out[o] = Σ_i x[i]·w[o, i] + b[o]
fn linear(x: &[f64], w: &[f64], b: Option<&[f64]>, oc: usize) -> Vec<f64> {
    let c = x.len();
    (0..oc)
        .map(|o| {
            x.iter().zip(&w[o * c..(o + 1) * c]).map(|(a, b)| a * b).sum::<f64>() + b.map_or(0.0, |b| b[o])
        })
        .collect()
}

fn gelu(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + u.clamp(-10.0, 10.0).tanh())
}

mod llama;

/// Mean cross-entropy of the model on `(inputs, targets)`, both `b × t`.
pub fn loss(
    cfg: &ModelConfig,
    params: &[Vec<f64>],
    inputs: &[u32],
    targets: &[u32],
    b: usize,
    t: usize,
) -> f64 {
    if let Architecture::Llama(shape) = &cfg.arch {
        return llama::loss(cfg, shape, params, inputs, targets, b, t);
    }
    let (c, nh, v) = (cfg.n_embd, cfg.n_head, cfg.vocab_size);
    let hs = c / nh;
    let mut total = 0.0;
    for bi in 0..b {
        // residual stream, one row per position
        let mut x: Vec<Vec<f64>> = (0..t)
            .map(|ti| {
                let tok = inputs[bi * t + ti] as usize;
                (0..c).map(|j| params[WTE][tok * c + j] + params[WPE][ti * c + j]).collect()
            })
            .collect();
        for l in 0..cfg.n_layer {
            let w = |k: P| &params[layer_index(l, k)][..];
            let ln1: Vec<Vec<f64>> = x.iter().map(|r| layernorm(r, w(P::Ln1W), w(P::Ln1B))).collect();
            let qkv: Vec<Vec<f64>> =
                ln1.iter().map(|r| linear(r, w(P::QkvW), Some(w(P::QkvB)), 3 * c)).collect();
            let mut y = vec![vec![0.0; c]; t];
            for h in 0..nh {
                for ti in 0..t {
                    let q = &qkv[ti][h * hs..(h + 1) * hs];
                    let scores: Vec<f64> = (0..=ti)
                        .map(|t2| {
                            let k = &qkv[t2][c + h * hs..c + (h + 1) * hs];
                            q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hs as f64).sqrt()
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for (t2, ev) in e.iter().enumerate() {
                        for j in 0..hs {
                            y[ti][h * hs + j] += ev / z * qkv[t2][2 * c + h * hs + j];
                        }
                    }
                }
            }
            for (xr, yr) in x.iter_mut().zip(&y) {
                let proj = linear(yr, w(P::AttProjW), Some(w(P::AttProjB)), c);
                xr.iter_mut().zip(proj).for_each(|(a, p)| *a += p);
            }
            for xr in x.iter_mut() {
                let h = layernorm(xr, w(P::Ln2W), w(P::Ln2B));
                let f: Vec<f64> =
                    linear(&h, w(P::FcW), Some(w(P::FcB)), 4 * c).into_iter().map(gelu).collect();
                let proj = linear(&f, w(P::FcProjW), Some(w(P::FcProjB)), c);
                xr.iter_mut().zip(proj).for_each(|(a, p)| *a += p);
            }
        }
        let lnf = lnf_index(cfg);
        for (ti, xr) in x.iter().enumerate() {
            let h = layernorm(xr, &params[lnf], &params[lnf + 1]);
            let logits = linear(&h, &params[WTE], None, v);
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
            total += lse - logits[targets[bi * t + ti] as usize];
        }
    }
    total / (b * t) as f64
}
