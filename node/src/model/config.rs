//! Model shapes: the GPT configuration, the named presets, and the counts
//! derived from a shape (parameters, FLOPs per token, bytes to train).

use serde::{Deserialize, Serialize};

/// A GPT decoder's shape (llm.c's GPT2Config plus the padded vocabulary).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Longest context the position embedding covers.
    pub max_seq_len: usize,
    /// Real vocabulary size (tokens the data can hold).
    pub vocab_size: usize,
    /// Vocabulary rounded up to a multiple of 128 (rows of `wte`).
    pub padded_vocab_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
}

/// A shape that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown model preset `{0}`: choose tiny, small or gpt2-124m")]
    UnknownPreset(String),
    #[error("n_embd ({n_embd}) must be a positive multiple of n_head ({n_head})")]
    HeadsDoNotDivide { n_embd: usize, n_head: usize },
    #[error("model shape has a zero dimension ({0}); every dimension must be at least 1")]
    ZeroDimension(&'static str),
    #[error("model shape too large: {0} parameters (limit {1})")]
    TooLarge(u64, u64),
}

/// The named presets, smallest first.
pub const PRESETS: &[&str] = &["tiny", "small", "gpt2-124m"];

/// Largest parameter count accepted from a file or flag (2^33 floats = 32 GiB).
const MAX_PARAMS: u64 = 1 << 33;

impl ModelConfig {
    /// Builds and validates a shape; the padded vocabulary is derived.
    pub fn new(
        n_layer: usize,
        n_embd: usize,
        n_head: usize,
        vocab_size: usize,
        max_seq_len: usize,
    ) -> Result<Self, ConfigError> {
        for (v, name) in [
            (n_layer, "layers"),
            (n_embd, "channels"),
            (n_head, "heads"),
            (vocab_size, "vocab"),
            (max_seq_len, "sequence length"),
        ] {
            if v == 0 {
                return Err(ConfigError::ZeroDimension(name));
            }
        }
        if !n_embd.is_multiple_of(n_head) {
            return Err(ConfigError::HeadsDoNotDivide { n_embd, n_head });
        }
        let cfg = ModelConfig {
            max_seq_len,
            vocab_size,
            padded_vocab_size: vocab_size.div_ceil(128) * 128,
            n_layer,
            n_head,
            n_embd,
        };
        let count = cfg.param_count_u64();
        if count > MAX_PARAMS {
            return Err(ConfigError::TooLarge(count, MAX_PARAMS));
        }
        Ok(cfg)
    }

    /// A named preset.
    ///
    /// | preset    | layers | channels | heads | context | vocab (padded)  | params  |
    /// |-----------|--------|----------|-------|---------|-----------------|---------|
    /// | tiny      | 4      | 128      | 4     | 64      | 256 (256)       | 0.83 M  |
    /// | small     | 6      | 384      | 6     | 256     | 50257 (50304)   | 30.1 M  |
    /// | gpt2-124m | 12     | 768      | 12    | 1024    | 50257 (50304)   | 124.5 M |
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        match name {
            "tiny" => Self::new(4, 128, 4, 256, 64),
            "small" => Self::new(6, 384, 6, 50257, 256),
            "gpt2-124m" => Self::new(12, 768, 12, 50257, 1024),
            other => Err(ConfigError::UnknownPreset(other.to_string())),
        }
    }

    pub fn head_size(&self) -> usize {
        self.n_embd / self.n_head
    }

    fn param_count_u64(&self) -> u64 {
        let (l, c, vp, t) =
            (self.n_layer as u64, self.n_embd as u64, self.padded_vocab_size as u64, self.max_seq_len as u64);
        vp * c + t * c + l * (12 * c * c + 13 * c) + 2 * c
    }

    /// Number of parameters (including the padded vocabulary rows).
    pub fn param_count(&self) -> usize {
        self.param_count_u64() as usize
    }

    /// Bytes the model's buffers take to train on `batch` sequences of `t`
    /// tokens (`Gpt::new` and its activations for one shape): parameters,
    /// gradients and both AdamW moments, then per token every block's
    /// activations (18·C + 4 floats and the N_head·T attention scores), one
    /// block's activation gradients (14·C), the embeddings and final norm
    /// with their gradients (4·C + 3), logits, probabilities and their
    /// gradient (3·V), and two token ids. A lower bound (the CPU backend's
    /// weight images come on top); u64 arithmetic that saturates, so any
    /// batch a peer names gets an answer instead of an overflow.
    pub fn training_bytes(&self, batch: u64, t: u64) -> u64 {
        let (l, c, nh, vp) =
            (self.n_layer as u64, self.n_embd as u64, self.n_head as u64, self.padded_vocab_size as u64);
        let per_layer = (18 * c + 4).saturating_add(nh.saturating_mul(t));
        let per_token = l.saturating_mul(per_layer).saturating_add(18 * c + 3 + 3 * vp + 2);
        let tokens = batch.saturating_mul(t);
        let floats = (4 * self.param_count_u64()).saturating_add(tokens.saturating_mul(per_token));
        floats.saturating_mul(4)
    }

    /// Training FLOPs per token at sequence length `t`, as llm.c counts them:
    /// 6·N for the matmuls plus 6·L·C·T for attention.
    pub fn flops_per_token(&self, t: usize) -> f64 {
        6.0 * self.param_count() as f64 + 6.0 * (self.n_layer * self.n_embd * t) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_documented_sizes() {
        let gpt2 = ModelConfig::preset("gpt2-124m").unwrap();
        assert_eq!(gpt2.padded_vocab_size, 50304);
        // llm.c reports 124,475,904 parameters for GPT-2 small with padded vocab.
        assert_eq!(gpt2.param_count(), 124_475_904);
        let tiny = ModelConfig::preset("tiny").unwrap();
        assert_eq!(tiny.padded_vocab_size, 256);
        assert_eq!(tiny.param_count(), 834_304);
        assert_eq!(ModelConfig::preset("small").unwrap().param_count(), 30_062_592);
    }

    #[test]
    fn training_bytes_count_the_buffers_of_one_shape() {
        let tiny = ModelConfig::preset("tiny").unwrap();
        // 4 copies of 834,304 parameters, then 512 tokens of
        // 4·(18·128 + 4 + 4·64) + 18·128 + 3 + 3·256 + 2 floats.
        let per_token = 4 * (18 * 128 + 4 + 4 * 64) + 18 * 128 + 3 + 3 * 256 + 2;
        assert_eq!(tiny.training_bytes(8, 64), 4 * (4 * 834_304 + 512 * per_token));
        // GPT-2 small at B=4, T=1024: the attention scores alone are
        // 4·12·1024² floats a layer, the logits' three 4096 × 50304; about
        // 9.8 GB in all.
        let gpt2 = ModelConfig::preset("gpt2-124m").unwrap();
        let bytes = gpt2.training_bytes(4, 1024);
        assert!((9_500_000_000..10_000_000_000).contains(&bytes), "{bytes}");
        assert_eq!(gpt2.training_bytes(u64::MAX, 1024), u64::MAX);
    }

    #[test]
    fn bad_shapes_are_rejected() {
        assert!(matches!(ModelConfig::preset("huge"), Err(ConfigError::UnknownPreset(_))));
        assert!(matches!(ModelConfig::new(2, 130, 4, 256, 64), Err(ConfigError::HeadsDoNotDivide { .. })));
        assert!(matches!(ModelConfig::new(0, 128, 4, 256, 64), Err(ConfigError::ZeroDimension(_))));
        assert!(matches!(ModelConfig::new(1000, 100000, 4, 256, 64), Err(ConfigError::TooLarge(..))));
    }
}
