//! Text from the latest model: decode a committed training state and
//! continue a short prompt on the CPU backend, so the page can show what the
//! network's model writes now.

use std::sync::Arc;

use murmur_protocol::{RunSpec, TrainingState};

use crate::compute::cpu::CpuBackend;
use crate::data::{Corpus, DataSpec, Tokenizer};
use crate::model::sample::{generate, SampleOptions};
use crate::model::split_params;
use crate::model::{Gpt, ModelConfig};
use crate::runtime::spec::model_config;

/// New tokens per sample.
pub const SAMPLE_TOKENS: usize = 96;

/// Draws samples for one run.
pub struct Sampler {
    cfg: ModelConfig,
    tokenizer: Arc<dyn Tokenizer>,
    pub prompt: String,
    /// The data's entropy floor (nats per token) when it is known.
    pub entropy_floor: Option<f64>,
}

impl Sampler {
    /// The run's tokenizer: the corpus's own when the data is synthetic (its
    /// floor is known too), else `dataset`'s, the tokenizer the run's
    /// dataset names (fetched from peers by the caller).
    pub fn new(spec: &RunSpec, dataset: Option<Arc<dyn Tokenizer>>) -> Result<Self, String> {
        let cfg = model_config(spec).map_err(|e| e.to_string())?;
        // Only synthetic data is opened here (it is generated, not read): a
        // dataset is named by hash and never as a path.
        let synthetic = matches!(spec.data_ref(), Ok(murmur_protocol::DataRef::Synthetic(_)));
        let corpus =
            if synthetic { DataSpec::parse(&spec.data).and_then(|d| Corpus::open(&d)).ok() } else { None };
        let (tokenizer, entropy_floor) = match (corpus, dataset) {
            (Some(corpus), _) => (corpus.tokenizer(), corpus.entropy_floor()),
            (None, Some(tokenizer)) => (tokenizer, None),
            (None, None) => return Err("the run's dataset tokenizer is not known".into()),
        };
        if tokenizer.vocab_size() > cfg.vocab_size {
            return Err(format!(
                "the data's tokenizer has {} tokens but the model {}",
                tokenizer.vocab_size(),
                cfg.vocab_size
            ));
        }
        Ok(Self { cfg, tokenizer, prompt: "the ".into(), entropy_floor })
    }

    /// Continue the prompt from `state`'s parameters (deterministic: greedy-free
    /// sampling with a seed taken from the round).
    pub fn sample(&self, state: &TrainingState) -> String {
        let backend = CpuBackend::new();
        let values = split_params(&self.cfg, &state.params);
        let mut model = Gpt::new(&backend, self.cfg.clone(), &values, 1);
        let prompt = self.tokenizer.encode(&self.prompt);
        let opts =
            SampleOptions { max_new_tokens: SAMPLE_TOKENS, temperature: 0.8, top_k: 40, seed: state.round };
        let out = generate(&backend, &mut model, &prompt, opts, self.tokenizer.eot());
        self.tokenizer.decode(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::spec::{genesis, run_spec, RunParams};

    #[test]
    fn samples_text_from_a_state_with_the_runs_tokenizer() {
        let spec = run_spec(&RunParams::default()).expect("spec");
        let sampler = Sampler::new(&spec, None).expect("sampler");
        assert!(sampler.entropy_floor.is_some_and(|f| f > 0.5 && f < 2.0));
        let g = genesis(&spec).expect("genesis");
        let a = sampler.sample(&g);
        assert!(!a.is_empty() && a.len() <= SAMPLE_TOKENS * 4);
        assert_eq!(a, sampler.sample(&g), "sampling one state twice gives one text");
    }
}
