//! Model shapes: the decoder configuration (GPT-2 or Llama), the named
//! presets, and the counts derived from a shape (parameters, FLOPs per
//! token, bytes to train).

use serde::{Deserialize, Serialize};

/// A decoder's shape (llm.c's GPT2Config plus the padded vocabulary, and
/// the architecture it builds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Longest context the model is trained for (GPT-2's position table
    /// covers this many positions; Llama's rotary embeddings any).
    pub max_seq_len: usize,
    /// Real vocabulary size (tokens the data can hold).
    pub vocab_size: usize,
    /// Vocabulary rounded up to a multiple of 128 (rows of `wte`).
    pub padded_vocab_size: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    /// GPT-2 when absent (every file written before Llama), and left out
    /// of a GPT-2 model's metadata so its bytes stay as they were.
    #[serde(default, skip_serializing_if = "Architecture::is_gpt2")]
    pub arch: Architecture,
}

/// Which decoder a shape builds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Architecture {
    /// GPT-2 (llm.c's train_gpt2.c): learned positions, LayerNorm with
    /// biases, multi-head attention, GELU MLP, LM head tied to `wte`.
    #[default]
    Gpt2,
    /// Llama: RMSNorm, rotary position embeddings, grouped-query
    /// attention, SwiGLU MLP, no biases.
    Llama(LlamaShape),
}

/// The numbers a Llama has beyond GPT-2's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlamaShape {
    /// Key/value heads; `n_head` must be a multiple (grouped-query
    /// attention; `n_kv_head == n_head` is multi-head attention).
    pub n_kv_head: usize,
    /// Hidden width of the SwiGLU MLP (each of its gate and up halves).
    pub ffn_hidden: usize,
    /// The LM head reads the token embedding (no `lm_head` tensor).
    pub tied_embeddings: bool,
    /// Base θ of the rotary embedding's frequencies θ^(−2i/head_size).
    pub rope_theta: u32,
}

impl Architecture {
    pub fn is_gpt2(&self) -> bool {
        matches!(self, Architecture::Gpt2)
    }

    /// The Llama numbers, when this is a Llama.
    pub fn llama(&self) -> Option<&LlamaShape> {
        match self {
            Architecture::Llama(l) => Some(l),
            Architecture::Gpt2 => None,
        }
    }

    /// The architecture's name: "gpt2" or "llama".
    pub fn name(&self) -> &'static str {
        match self {
            Architecture::Gpt2 => "gpt2",
            Architecture::Llama(_) => "llama",
        }
    }
}

/// A shape that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "unknown model preset `{0}`: choose tiny, small, gpt2-124m, llama-tiny, llama-60m, \
         llama-150m, llama-400m or llama-1b"
    )]
    UnknownPreset(String),
    #[error("n_embd ({n_embd}) must be a positive multiple of n_head ({n_head})")]
    HeadsDoNotDivide { n_embd: usize, n_head: usize },
    #[error("n_head ({n_head}) must be a positive multiple of n_kv_head ({n_kv_head})")]
    KvHeadsDoNotDivide { n_head: usize, n_kv_head: usize },
    #[error("head size {0} is odd: rotary embeddings rotate channel pairs")]
    OddHeadSize(usize),
    #[error("rope_theta {0} must be at least 2")]
    RopeTheta(u32),
    #[error("model shape has a zero dimension ({0}); every dimension must be at least 1")]
    ZeroDimension(&'static str),
    #[error("model shape too large: {0} parameters (limit {1})")]
    TooLarge(u64, u64),
    #[error("padded vocabulary {found} does not match vocabulary {vocab} (expected {expected})")]
    PaddedVocab { vocab: usize, found: usize, expected: usize },
}

/// The named presets, GPT-2's then Llama's, smallest first.
pub const PRESETS: &[&str] =
    &["tiny", "small", "gpt2-124m", "llama-tiny", "llama-60m", "llama-150m", "llama-400m", "llama-1b"];

/// Largest parameter count accepted from a file or flag (2^33 floats = 32 GiB).
const MAX_PARAMS: u64 = 1 << 33;

/// The GPT-2 BPE vocabulary the larger presets have (a run on a dataset
/// with its own tokenizer takes that tokenizer's instead); padded to 50304.
const GPT2_VOCAB: usize = 50257;

impl ModelConfig {
    /// Builds and validates a GPT-2 shape; the padded vocabulary is derived.
    pub fn new(
        n_layer: usize,
        n_embd: usize,
        n_head: usize,
        vocab_size: usize,
        max_seq_len: usize,
    ) -> Result<Self, ConfigError> {
        Self::with_arch(n_layer, n_embd, n_head, vocab_size, max_seq_len, Architecture::Gpt2)
    }

    /// Builds and validates a Llama shape.
    pub fn llama(
        n_layer: usize,
        n_embd: usize,
        n_head: usize,
        vocab_size: usize,
        max_seq_len: usize,
        shape: LlamaShape,
    ) -> Result<Self, ConfigError> {
        Self::with_arch(n_layer, n_embd, n_head, vocab_size, max_seq_len, Architecture::Llama(shape))
    }

    /// The same model with a vocabulary of `vocab_size` tokens (a dataset's
    /// own tokenizer sets it).
    pub fn with_vocab(&self, vocab_size: usize) -> Result<Self, ConfigError> {
        Self::with_arch(self.n_layer, self.n_embd, self.n_head, vocab_size, self.max_seq_len, self.arch)
    }

    /// Builds and validates a shape of either architecture.
    pub fn with_arch(
        n_layer: usize,
        n_embd: usize,
        n_head: usize,
        vocab_size: usize,
        max_seq_len: usize,
        arch: Architecture,
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
        if let Architecture::Llama(l) = &arch {
            if l.n_kv_head == 0 || !n_head.is_multiple_of(l.n_kv_head) {
                return Err(ConfigError::KvHeadsDoNotDivide { n_head, n_kv_head: l.n_kv_head });
            }
            if l.ffn_hidden == 0 {
                return Err(ConfigError::ZeroDimension("ffn hidden"));
            }
            if !(n_embd / n_head).is_multiple_of(2) {
                return Err(ConfigError::OddHeadSize(n_embd / n_head));
            }
            if l.rope_theta < 2 {
                return Err(ConfigError::RopeTheta(l.rope_theta));
            }
        }
        let cfg = ModelConfig {
            max_seq_len,
            vocab_size,
            padded_vocab_size: vocab_size.div_ceil(128) * 128,
            n_layer,
            n_head,
            n_embd,
            arch,
        };
        let count = cfg.param_count_u64();
        if count > MAX_PARAMS {
            return Err(ConfigError::TooLarge(count, MAX_PARAMS));
        }
        Ok(cfg)
    }

    /// This shape rebuilt and validated from its own numbers (a shape read
    /// from a file): an error for one that cannot be built, or whose
    /// padded vocabulary is not the one its vocabulary implies.
    pub fn checked(&self) -> Result<Self, ConfigError> {
        let c = Self::with_arch(
            self.n_layer,
            self.n_embd,
            self.n_head,
            self.vocab_size,
            self.max_seq_len,
            self.arch,
        )?;
        if c.padded_vocab_size != self.padded_vocab_size {
            return Err(ConfigError::PaddedVocab {
                vocab: self.vocab_size,
                found: self.padded_vocab_size,
                expected: c.padded_vocab_size,
            });
        }
        Ok(c)
    }

    /// A named preset.
    ///
    /// | preset     | layers | channels | heads (kv) | MLP hidden | context | vocab (padded) | embeddings | params |
    /// |------------|--------|----------|------------|------------|---------|----------------|------------|--------|
    /// | tiny       | 4      | 128      | 4          | 512 GELU   | 64      | 256 (256)      | tied       | 0.83 M |
    /// | small      | 6      | 384      | 6          | 1536 GELU  | 256     | 50257 (50304)  | tied       | 30.1 M |
    /// | gpt2-124m  | 12     | 768      | 12         | 3072 GELU  | 1024    | 50257 (50304)  | tied       | 124.5 M |
    /// | llama-tiny | 4      | 128      | 4 (2)      | 384 SwiGLU | 64      | 256 (256)      | untied     | 0.85 M |
    /// | llama-60m  | 10     | 512      | 8 (8)      | 1408 SwiGLU| 1024    | 50257 (50304)  | tied       | 57.9 M |
    /// | llama-150m | 12     | 768      | 12 (4)     | 2048 SwiGLU| 1024    | 50257 (50304)  | untied     | 152.8 M |
    /// | llama-400m | 24     | 1024     | 16 (8)     | 2816 SwiGLU| 1024    | 50257 (50304)  | untied     | 386.2 M |
    /// | llama-1b   | 22     | 2048     | 32 (4)     | 5632 SwiGLU| 2048    | 50257 (50304)  | tied       | 1072.0 M |
    ///
    /// Every Llama preset has head size 64 (but `llama-tiny`'s 32), rotary
    /// θ = 10000 and no biases; its MLP hidden is 8/3 of the channels
    /// rounded up to a multiple of 64 (256 from `llama-400m` up);
    /// `llama-1b` is TinyLlama's shape. (The exact counts are in the tests.)
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let llama = |n_kv_head, ffn_hidden, tied_embeddings| LlamaShape {
            n_kv_head,
            ffn_hidden,
            tied_embeddings,
            rope_theta: 10_000,
        };
        match name {
            "tiny" => Self::new(4, 128, 4, 256, 64),
            "small" => Self::new(6, 384, 6, GPT2_VOCAB, 256),
            "gpt2-124m" => Self::new(12, 768, 12, GPT2_VOCAB, 1024),
            "llama-tiny" => Self::llama(4, 128, 4, 256, 64, llama(2, 384, false)),
            "llama-60m" => Self::llama(10, 512, 8, GPT2_VOCAB, 1024, llama(8, 1408, true)),
            "llama-150m" => Self::llama(12, 768, 12, GPT2_VOCAB, 1024, llama(4, 2048, false)),
            "llama-400m" => Self::llama(24, 1024, 16, GPT2_VOCAB, 1024, llama(8, 2816, false)),
            "llama-1b" => Self::llama(22, 2048, 32, GPT2_VOCAB, 2048, llama(4, 5632, true)),
            other => Err(ConfigError::UnknownPreset(other.to_string())),
        }
    }

    pub fn head_size(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Key/value heads: `n_head` for GPT-2.
    pub fn n_kv_head(&self) -> usize {
        self.arch.llama().map_or(self.n_head, |l| l.n_kv_head)
    }

    /// Floats of one position's qkv row: `(n_head + 2·n_kv_head)·head_size`.
    pub fn qkv_width(&self) -> usize {
        self.n_embd + 2 * self.n_kv_head() * self.head_size()
    }

    fn param_count_u64(&self) -> u64 {
        let (l, c, vp, t) =
            (self.n_layer as u64, self.n_embd as u64, self.padded_vocab_size as u64, self.max_seq_len as u64);
        match self.arch {
            Architecture::Gpt2 => vp * c + t * c + l * (12 * c * c + 13 * c) + 2 * c,
            Architecture::Llama(s) => {
                let (qkv, h) = (self.qkv_width() as u64, s.ffn_hidden as u64);
                let head = if s.tied_embeddings { 0 } else { vp * c };
                // per layer: two norms, qkv, output projection, gate+up, down
                vp * c + head + l * (2 * c + qkv * c + c * c + 3 * h * c) + c
            }
        }
    }

    /// Number of parameters (including the padded vocabulary rows).
    pub fn param_count(&self) -> usize {
        self.param_count_u64() as usize
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
    fn bad_shapes_are_rejected() {
        assert!(matches!(ModelConfig::preset("huge"), Err(ConfigError::UnknownPreset(_))));
        assert!(matches!(ModelConfig::new(2, 130, 4, 256, 64), Err(ConfigError::HeadsDoNotDivide { .. })));
        assert!(matches!(ModelConfig::new(0, 128, 4, 256, 64), Err(ConfigError::ZeroDimension(_))));
        assert!(matches!(ModelConfig::new(1000, 100000, 4, 256, 64), Err(ConfigError::TooLarge(..))));
        let l = |n_kv_head, ffn_hidden, rope_theta| LlamaShape {
            n_kv_head,
            ffn_hidden,
            tied_embeddings: true,
            rope_theta,
        };
        let bad = |n_embd, n_head, shape| ModelConfig::llama(2, n_embd, n_head, 256, 64, shape);
        assert!(matches!(bad(128, 4, l(3, 64, 10_000)), Err(ConfigError::KvHeadsDoNotDivide { .. })));
        assert!(matches!(bad(128, 4, l(0, 64, 10_000)), Err(ConfigError::KvHeadsDoNotDivide { .. })));
        assert!(matches!(bad(128, 4, l(2, 0, 10_000)), Err(ConfigError::ZeroDimension(_))));
        assert!(matches!(bad(12, 4, l(2, 64, 10_000)), Err(ConfigError::OddHeadSize(3))));
        assert!(matches!(bad(128, 4, l(2, 64, 1)), Err(ConfigError::RopeTheta(1))));
        assert!(bad(128, 4, l(2, 64, 10_000)).is_ok());
    }

    #[test]
    fn llama_presets_have_documented_shapes_and_sizes() {
        let count = |name: &str| ModelConfig::preset(name).unwrap().param_count();
        // 256·128 (embeddings) + 256·128 (LM head) + 4 layers of
        // 2·128 + 256·128 (qkv: 4 + 2·2 heads of 32) + 128·128 + 3·384·128, + 128
        assert_eq!(count("llama-tiny"), 2 * 32_768 + 4 * (256 + 32_768 + 16_384 + 147_456) + 128);
        assert_eq!(count("llama-60m"), 57_879_040);
        assert_eq!(count("llama-150m"), 152_783_616);
        assert_eq!(count("llama-400m"), 386_188_288);
        assert_eq!(count("llama-1b"), 1_071_998_976);
        for name in PRESETS.iter().filter(|n| n.starts_with("llama-")) {
            let cfg = ModelConfig::preset(name).unwrap();
            let l = *cfg.arch.llama().expect("a llama preset builds a llama");
            assert_eq!(cfg.head_size(), if *name == "llama-tiny" { 32 } else { 64 }, "{name}");
            // SwiGLU hidden: 8/3 of the channels rounded up to a multiple of 64
            let eight_thirds = (8 * cfg.n_embd).div_ceil(3);
            assert!(l.ffn_hidden >= eight_thirds && l.ffn_hidden - eight_thirds < 256, "{name}");
            assert!(l.ffn_hidden.is_multiple_of(64), "{name}");
        }
        // GQA in the larger ones
        assert!(ModelConfig::preset("llama-1b").unwrap().n_kv_head() < 32);
        // A GPT-2 shape's metadata is what it was before Llama; a Llama's
        // carries its architecture and reads back.
        let gpt = serde_json::to_string(&ModelConfig::preset("tiny").unwrap()).unwrap();
        assert!(!gpt.contains("arch"), "{gpt}");
        let old = r#"{"max_seq_len":64,"vocab_size":256,"padded_vocab_size":256,"n_layer":4,"n_head":4,"n_embd":128}"#;
        assert_eq!(serde_json::from_str::<ModelConfig>(old).unwrap(), ModelConfig::preset("tiny").unwrap());
        let llama = ModelConfig::preset("llama-tiny").unwrap();
        let json = serde_json::to_string(&llama).unwrap();
        assert_eq!(serde_json::from_str::<ModelConfig>(&json).unwrap(), llama);
        assert_eq!(llama.checked(), Ok(llama.clone()));
    }
}
