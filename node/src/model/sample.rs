//! Text generation from a model: autoregressive sampling with temperature
//! and top-k, re-running the forward pass over a sliding context window.

use super::gpt::Gpt;
use super::rng::Rng;
use crate::compute::Backend;

/// Sampling settings.
#[derive(Clone, Copy, Debug)]
pub struct SampleOptions {
    pub max_new_tokens: usize,
    /// 0 means greedy.
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: all).
    pub top_k: usize,
    pub seed: u64,
}

/// Extends `prompt` by up to `max_new_tokens` tokens; stops early at `stop`.
pub fn generate<B: Backend>(
    backend: &B,
    model: &mut Gpt<B>,
    prompt: &[u32],
    opts: SampleOptions,
    stop: Option<u32>,
) -> Vec<u32> {
    let cfg = model.config.clone();
    let t = cfg.max_seq_len;
    let mut rng = Rng::new(opts.seed);
    let mut tokens: Vec<u32> = prompt.iter().map(|&x| x.min(cfg.vocab_size as u32 - 1)).collect();
    if tokens.is_empty() {
        tokens.push(stop.unwrap_or(0));
    }
    let start = tokens.len();
    for _ in 0..opts.max_new_tokens {
        let ctx_start = tokens.len().saturating_sub(t);
        let ctx = &tokens[ctx_start..];
        let pos = ctx.len() - 1;
        let logits = context_logits(backend, model, ctx);
        let row = &logits[pos * cfg.padded_vocab_size..pos * cfg.padded_vocab_size + cfg.vocab_size];
        let next = pick(row, opts, &mut rng);
        tokens.push(next);
        if Some(next) == stop {
            break;
        }
    }
    tokens[start..].to_vec()
}

/// The logits (padded vocabulary rows, `max_seq_len` of them) of one
/// forward pass over `ctx`, at most `max_seq_len` tokens, padded with token
/// 0 (causal attention: rows up to `ctx.len() − 1` do not see the padding).
pub fn context_logits<B: Backend>(backend: &B, model: &mut Gpt<B>, ctx: &[u32]) -> Vec<f32> {
    let t = model.config.max_seq_len;
    let mut input = ctx.to_vec();
    input.resize(t, 0);
    model.forward(backend, &input, None, 1, t);
    model.download_logits(backend)
}

fn pick(logits: &[f32], opts: SampleOptions, rng: &mut Rng) -> u32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if opts.temperature <= 0.0 {
        return order[0] as u32;
    }
    if opts.top_k > 0 {
        order.truncate(opts.top_k);
    }
    let maxv = logits[order[0]];
    let weights: Vec<f64> =
        order.iter().map(|&i| (((logits[i] - maxv) / opts.temperature) as f64).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut coin = rng.next_f64() * total;
    for (w, &i) in weights.iter().zip(&order) {
        if coin < *w {
            return i as u32;
        }
        coin -= w;
    }
    order[order.len() - 1] as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_argmax_and_top_k_limits_choices() {
        let logits = [0.1, 3.0, -1.0, 2.9];
        let mut rng = Rng::new(1);
        let greedy = SampleOptions { max_new_tokens: 1, temperature: 0.0, top_k: 0, seed: 1 };
        assert_eq!(pick(&logits, greedy, &mut rng), 1);
        let top2 = SampleOptions { temperature: 1.0, top_k: 2, ..greedy };
        for _ in 0..200 {
            let k = pick(&logits, top2, &mut rng);
            assert!(k == 1 || k == 3);
        }
    }
}
