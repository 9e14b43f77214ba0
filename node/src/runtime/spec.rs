//! Runs as the node sees them: the built-in default RunSpec (tiny preset,
//! synthetic data, norm filter on), the model shape a spec names, and the
//! genesis state: a deterministic function of the spec (init_params(config,
//! seed)), or, in a run that starts from a given model, that model's
//! parameters, checked against the ParamsId the spec names.

use murmur_protocol::dataset::MAX_TOKENIZER_VOCAB;
use murmur_protocol::{
    initial_momentum, params_id, AdmissionPolicy, Codec, InnerOptimizer, ModelShape, OuterOptimizer,
    ParamsId, PublicKey, RobustMode, RunSpec, TrainingState,
};
use thiserror::Error;

use crate::model::{init_params, ModelConfig};

/// A spec this build cannot run.
#[derive(Debug, Error)]
pub enum SpecError {
    #[error("run spec names model preset `{0}`, which this build does not know")]
    UnknownPreset(String),
    #[error("run spec's model shape does not match preset `{0}` in this build")]
    ShapeMismatch(String),
    #[error(
        "this run needs at least {need_gib:.1} GiB of memory (batch {batch} × {context} tokens, {steps} inner steps, on the {device} backend) and this machine has {have_gib:.1} GiB: {with_checkpointing}ask the run's operator for a smaller --batch, or join from a machine with more memory"
    )]
    TooBig {
        need_gib: f64,
        have_gib: f64,
        batch: u32,
        context: u32,
        steps: u32,
        device: &'static str,
        /// What activation checkpointing would need, when it would fit.
        with_checkpointing: String,
    },
    #[error(
        "this run starts from a given model (parameters {0}), which this node does not hold: join it with --bootstrap so the node fetches its genesis state"
    )]
    GenesisNotHeld(ParamsId),
    #[error("not this run's genesis state: {0}")]
    NotGenesis(&'static str),
    #[error(
        "the model has {got} parameters and preset `{preset}` has {want}: start the run with the preset the model was trained as"
    )]
    ParamCount { got: usize, want: u64, preset: String },
}

/// Knobs of the default run (what `murmur-bootstrap` flags change).
#[derive(Debug, Clone, PartialEq)]
pub struct RunParams {
    pub preset: String,
    pub data: String,
    pub inner_steps: u32,
    pub batch_size: u32,
    pub lr: f32,
    pub warmup_steps: u32,
    pub quorum: u32,
    pub round_deadline_secs: u32,
    pub codec: Codec,
    pub robust: RobustMode,
    pub admission: AdmissionPolicy,
    pub seed: u64,
    /// Owners per shard k (1, the default: one owner per shard, with
    /// backups; k ≥ 2: committees of k).
    pub committee_size: u32,
    /// Overlapped or blocking rounds, fixed H or a time budget.
    pub pacing: murmur_protocol::Pacing,
    /// The genesis parameters' hash when the run starts from a given model.
    pub genesis_params: Option<ParamsId>,
    /// The model's vocabulary when it is not the preset's: the size of a
    /// dataset's own tokenizer.
    pub vocab: Option<u32>,
}

impl Default for RunParams {
    fn default() -> Self {
        Self {
            preset: "tiny".into(),
            data: "synthetic".into(),
            inner_steps: 100,
            batch_size: 8,
            lr: 3e-3,
            warmup_steps: 20,
            quorum: 1,
            round_deadline_secs: 120,
            codec: Codec::Int8Block { block: 256 },
            // Defended by default: leave out deltas whose norm exceeds 3× the median.
            robust: RobustMode::NormFilter { multiple: 3.0 },
            admission: AdmissionPolicy::Open,
            seed: 1,
            committee_size: 1,
            pacing: murmur_protocol::Pacing::default(),
            genesis_params: None,
            vocab: None,
        }
    }
}

/// The model shape of `preset` in the spec's terms.
pub fn model_shape(preset: &str, vocab: Option<u32>) -> Result<ModelShape, SpecError> {
    let c = preset_config(preset, vocab)?;
    Ok(ModelShape {
        preset: preset.to_string(),
        vocab_size: c.vocab_size as u32,
        context_len: c.max_seq_len as u32,
        n_layer: c.n_layer as u32,
        n_head: c.n_head as u32,
        d_model: c.n_embd as u32,
        param_count: c.param_count() as u64,
    })
}

const ROBUST_MODES: &str = "use mean, median, norm-clip[:x], trimmed-mean[:x] or norm-filter[:x]";

/// Parse a robust mode as the bootstrap server's `--robust` takes it:
/// `mean`, `median`, `norm-clip[:multiple]` (2), `trimmed-mean[:trim]` (0.25)
/// or `norm-filter[:multiple]` (3).
pub fn parse_robust(s: &str) -> Result<RobustMode, String> {
    let (name, arg) = match s.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (s, None),
    };
    let num = |default: f32| -> Result<f32, String> {
        arg.map_or(Ok(default), |a| a.parse::<f32>().map_err(|_| format!("`{a}` is not a number")))
    };
    let mode = match name {
        "mean" if arg.is_none() => RobustMode::Mean,
        "median" if arg.is_none() => RobustMode::Median,
        "norm-clip" => RobustMode::NormClip { multiple: num(2.0)? },
        "trimmed-mean" => RobustMode::TrimmedMean { trim: num(0.25)? },
        "norm-filter" => RobustMode::NormFilter { multiple: num(3.0)? },
        _ => return Err(format!("unknown robust mode `{s}`: {ROBUST_MODES}")),
    };
    Ok(mode)
}

/// The admission policy `--admission MODE` and `--operator KEY…` describe:
/// `open` (with operators: open, but only their commits decide a state) or
/// `tickets` (the operators and the holders of their tickets; needs at
/// least one operator). Keys are sorted and deduplicated.
pub fn parse_admission(mode: &str, operators: &[PublicKey]) -> Result<AdmissionPolicy, String> {
    let mut ops = operators.to_vec();
    ops.sort();
    ops.dedup();
    if ops.len() > murmur_protocol::wire::MAX_OPERATORS {
        return Err(format!("at most {} operator keys", murmur_protocol::wire::MAX_OPERATORS));
    }
    match mode {
        "open" if ops.is_empty() => Ok(AdmissionPolicy::Open),
        "open" => Ok(AdmissionPolicy::OpenWithOperators { operators: ops }),
        "tickets" if ops.is_empty() => {
            Err("a ticket run needs at least one --operator <public key> to sign its tickets".into())
        }
        "tickets" => Ok(AdmissionPolicy::Tickets { operators: ops }),
        other => Err(format!("unknown admission `{other}`: use open or tickets")),
    }
}

/// Build a RunSpec from `p`.
pub fn run_spec(p: &RunParams) -> Result<RunSpec, SpecError> {
    Ok(RunSpec {
        model: model_shape(&p.preset, p.vocab)?,
        data: p.data.clone(),
        inner: InnerOptimizer {
            lr: p.lr,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
            warmup_steps: p.warmup_steps,
            batch_size: p.batch_size,
        },
        inner_steps: p.inner_steps,
        outer: OuterOptimizer::DILOCO,
        codec: p.codec,
        robust: p.robust,
        quorum: p.quorum,
        round_deadline_secs: p.round_deadline_secs,
        admission: p.admission.clone(),
        seed: p.seed,
        committee_size: p.committee_size,
        pacing: p.pacing,
        genesis_params: p.genesis_params,
    })
}

/// `preset`'s model with vocabulary `vocab` (1..=65536) instead of its own.
fn preset_config(preset: &str, vocab: Option<u32>) -> Result<ModelConfig, SpecError> {
    let c = ModelConfig::preset(preset).map_err(|_| SpecError::UnknownPreset(preset.to_string()))?;
    match vocab {
        Some(v) if v as usize != c.vocab_size => {
            if v == 0 || v > MAX_TOKENIZER_VOCAB {
                return Err(SpecError::ShapeMismatch(preset.to_string()));
            }
            c.with_vocab(v as usize).map_err(|_| SpecError::ShapeMismatch(preset.to_string()))
        }
        _ => Ok(c),
    }
}

/// The model configuration of a spec, checked against this build's preset
/// (with the spec's vocabulary, which a dataset's own tokenizer sets).
pub fn model_config(spec: &RunSpec) -> Result<ModelConfig, SpecError> {
    let preset = &spec.model.preset;
    let vocab = Some(spec.model.vocab_size);
    let c = preset_config(preset, vocab)?;
    if model_shape(preset, vocab)? != spec.model {
        return Err(SpecError::ShapeMismatch(preset.clone()));
    }
    Ok(c)
}

/// The genesis state S_0 of a run whose genesis parameters follow from the
/// spec; a run that starts from a given model has to fetch its genesis
/// (`GenesisNotHeld`).
pub fn genesis(spec: &RunSpec) -> Result<TrainingState, SpecError> {
    if let Some(p) = spec.genesis_params {
        return Err(SpecError::GenesisNotHeld(p));
    }
    let cfg = model_config(spec)?;
    let params: Vec<f32> = init_params(&cfg, spec.seed).into_iter().flatten().collect();
    let momentum = initial_momentum(spec.outer, params.len());
    Ok(TrainingState { run: spec.run_id(), round: 0, params, momentum })
}

/// The genesis state of `spec` with parameters `params` (a run that starts
/// from a given model; the spec must name their ParamsId).
pub fn genesis_with(spec: &RunSpec, params: Vec<f32>) -> Result<TrainingState, SpecError> {
    let state = TrainingState {
        run: spec.run_id(),
        round: 0,
        momentum: initial_momentum(spec.outer, params.len()),
        params,
    };
    check_genesis(spec, &state)?;
    Ok(state)
}

/// Check that `state` is `spec`'s genesis: its run, round 0, the initial
/// momentum, and parameters that hash to the spec's `genesis_params` (or
/// equal `init_params` when it names none).
pub fn check_genesis(spec: &RunSpec, state: &TrainingState) -> Result<(), SpecError> {
    let want = spec.model.param_count;
    if state.params.len() as u64 != want {
        let preset = spec.model.preset.clone();
        return Err(SpecError::ParamCount { got: state.params.len(), want, preset });
    }
    if state.run != spec.run_id() || state.round != 0 {
        return Err(SpecError::NotGenesis("it is of another run or round"));
    }
    if state.momentum != initial_momentum(spec.outer, state.params.len()) {
        return Err(SpecError::NotGenesis("its outer momentum is not the initial one"));
    }
    match spec.genesis_params {
        Some(p) if params_id(&state.params) != p => {
            Err(SpecError::NotGenesis("its parameters do not hash to the run's genesis ParamsId"))
        }
        Some(_) => Ok(()),
        None if state.id() != genesis(spec)?.id() => {
            Err(SpecError::NotGenesis("its parameters are not the run's initial ones"))
        }
        None => Ok(()),
    }
}

/// Tokens one delta trains on when it takes all H inner steps.
pub fn tokens_per_delta(spec: &RunSpec) -> u64 {
    u64::from(spec.inner_steps) * u64::from(spec.inner.batch_size) * u64::from(spec.model.context_len)
}

/// Bytes of every state payload of this run.
pub fn state_len(spec: &RunSpec) -> u64 {
    let copies = if spec.outer.has_momentum() { 2 } else { 1 };
    murmur_protocol::state::STATE_HEADER_LEN as u64 + 4 * copies * spec.model.param_count
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec names a Llama by its preset (the wire format is unchanged):
    /// the preset's numbers check the shape, and a spec that pairs a Llama
    /// preset with another shape's numbers is refused.
    #[test]
    fn a_llama_preset_builds_a_llama_and_its_shape_is_checked() {
        let p = RunParams { preset: "llama-tiny".into(), ..RunParams::default() };
        let spec = run_spec(&p).expect("spec");
        spec.validate().expect("valid");
        assert_eq!(RunSpec::decode(&spec.encode()).expect("decodes"), spec);
        let cfg = model_config(&spec).expect("a preset this build has");
        assert!(matches!(cfg.arch, crate::model::Architecture::Llama(_)));
        assert_eq!(genesis(&spec).expect("genesis").params.len(), cfg.param_count());
        let mut forged = spec.clone();
        forged.model = ModelShape { preset: "llama-tiny".into(), ..model_shape("tiny", None).expect("tiny") };
        assert!(matches!(model_config(&forged), Err(SpecError::ShapeMismatch(_))));
    }

    #[test]
    fn default_spec_is_valid_and_genesis_is_deterministic() {
        let spec = run_spec(&RunParams::default()).expect("spec");
        spec.validate().expect("valid");
        assert_eq!(RunSpec::decode(&spec.encode()).expect("decodes"), spec);
        let a = genesis(&spec).expect("genesis");
        let b = genesis(&spec).expect("genesis");
        assert_eq!(a.id(), b.id());
        assert_eq!(a.params.len() as u64, spec.model.param_count);
        assert_eq!(a.encode().len() as u64, state_len(&spec));
        let other = RunParams { seed: 2, ..Default::default() };
        assert_ne!(genesis(&run_spec(&other).expect("spec")).expect("genesis").id(), a.id());
    }

    #[test]
    fn admission_parses_and_says_what_it_needs() {
        let (a, b) = (PublicKey([2; 32]), PublicKey([1; 32]));
        assert_eq!(parse_admission("open", &[]), Ok(AdmissionPolicy::Open));
        assert_eq!(
            parse_admission("tickets", &[a, b, a]),
            Ok(AdmissionPolicy::Tickets { operators: vec![b, a] })
        );
        assert_eq!(
            parse_admission("open", &[a]),
            Ok(AdmissionPolicy::OpenWithOperators { operators: vec![a] })
        );
        assert!(parse_admission("tickets", &[]).is_err_and(|e| e.contains("--operator")));
        assert!(parse_admission("allowlist", &[a]).is_err_and(|e| e.contains("open or tickets")));
        let p =
            RunParams { admission: AdmissionPolicy::Tickets { operators: vec![a] }, ..Default::default() };
        let spec = run_spec(&p).expect("spec");
        assert_eq!(RunSpec::decode(&spec.encode()).expect("decodes").admission, p.admission);
    }

    #[test]
    fn robust_modes_parse_with_defaults_and_bad_ones_say_what_to_use() {
        assert_eq!(parse_robust("mean"), Ok(RobustMode::Mean));
        assert_eq!(parse_robust("norm-filter"), Ok(RobustMode::NormFilter { multiple: 3.0 }));
        assert_eq!(parse_robust("trimmed-mean:0.1"), Ok(RobustMode::TrimmedMean { trim: 0.1 }));
        assert_eq!(parse_robust("norm-clip:1.5"), Ok(RobustMode::NormClip { multiple: 1.5 }));
        assert!(parse_robust("norm-filter:x").is_err_and(|e| e.contains("not a number")));
        assert!(parse_robust("krum").is_err_and(|e| e.contains("norm-filter")));
        assert_eq!(
            RunParams::default().robust,
            RobustMode::NormFilter { multiple: 3.0 },
            "defended by default"
        );
        let p = RunParams { robust: RobustMode::Mean, ..Default::default() };
        let spec = run_spec(&p).expect("spec");
        spec.validate().expect("valid");
        assert_ne!(spec.run_id(), run_spec(&RunParams::default()).expect("spec").run_id());
    }
}
