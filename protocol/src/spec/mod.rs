//! The RunSpec: everything that defines a training run, its canonical bytes,
//! and its RunId (blake3 of those bytes under the run-id domain).
//!
//! Two nodes are in the same run exactly when their RunSpecs encode to the
//! same bytes; every field that changes what honest nodes compute is here.

use crate::codec::Codec;
use crate::hash::{run_id_of, unhex, DatasetId, ParamsId, RunId};
use crate::identity::PublicKey;
use crate::wire::{
    MessageType, Reader, WireError, Writer, MAX_ALLOWLIST, MAX_ELEMENTS, MAX_OPERATORS, MAX_STRING_BYTES,
};

/// Longest model preset name.
pub const MAX_PRESET_BYTES: usize = 64;

/// The model architecture: a preset name plus the shape numbers it implies,
/// so a node can check it builds the same model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelShape {
    pub preset: String,
    pub vocab_size: u32,
    pub context_len: u32,
    pub n_layer: u32,
    pub n_head: u32,
    pub d_model: u32,
    /// Number of f32 parameters: the element count of every state and delta.
    pub param_count: u64,
}

/// The inner optimizer (AdamW) each node runs for H steps per round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InnerOptimizer {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Global gradient-norm clip (0 = off).
    pub grad_clip: f32,
    pub warmup_steps: u32,
    /// Sequences per inner step.
    pub batch_size: u32,
}

/// The outer optimizer applied to the aggregated pseudo-gradient.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OuterOptimizer {
    /// Nesterov momentum: m ← μ·m + Δ; θ ← θ − lr·(Δ + μ·m).
    Nesterov { lr: f32, momentum: f32 },
    /// Plain averaging: θ ← θ − Δ (lr 1, no momentum state).
    Average,
}

impl OuterOptimizer {
    /// DiLoCo's defaults: Nesterov, lr 0.7, momentum 0.9.
    pub const DILOCO: OuterOptimizer = OuterOptimizer::Nesterov { lr: 0.7, momentum: 0.9 };

    /// Whether the state carries a momentum buffer.
    pub fn has_momentum(&self) -> bool {
        matches!(self, OuterOptimizer::Nesterov { .. })
    }
}

/// How the accepted deltas of a round are combined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RobustMode {
    /// Token-weighted mean.
    Mean,
    /// Scale each delta whose L2 norm exceeds `multiple` × the median norm
    /// down to that norm, then take the token-weighted mean (weights capped
    /// at twice the median token count).
    NormClip { multiple: f32 },
    /// Per coordinate, drop ⌊trim·n⌋ lowest and highest values, average the rest.
    TrimmedMean { trim: f32 },
    /// Per coordinate median.
    Median,
    /// Leave out every delta whose L2 norm exceeds `multiple` × the median
    /// norm (an outlier: scaled, flipped-and-amplified or noise-filled), then
    /// take the token-weighted mean of the rest (weights capped at twice the
    /// median token count). `multiple` ≥ 1.
    NormFilter { multiple: f32 },
}

/// Largest dataset manifest a RunSpec may name (65,536 shards of 36 bytes plus the header).
pub const MAX_MANIFEST_BYTES: u32 = 2_400_000;

/// What a RunSpec's `data` field names. A run's data is named only by
/// content (a DatasetId) or generated (synthetic parameters): nothing that
/// arrives from a peer can make a node open a local path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataRef {
    /// `synthetic` or `synthetic:key=value,…` (the options after the colon).
    Synthetic(String),
    /// `dataset:<64 hex DatasetId>:<manifest bytes>`: a content-addressed
    /// dataset; the manifest's length lets a node bound and chunk its fetch
    /// before it holds the manifest.
    Dataset { id: DatasetId, manifest_len: u32 },
}

/// Why a `data` string is not a DataRef.
pub const DATA_RULE: &str =
    "must be `synthetic[:options]` or `dataset:<64 hex DatasetId>:<manifest bytes>`; a run spec never names a local path";

impl DataRef {
    /// Parse a RunSpec's `data` field.
    pub fn parse(s: &str) -> Result<DataRef, WireError> {
        if s == "synthetic" {
            return Ok(DataRef::Synthetic(String::new()));
        }
        if let Some(options) = s.strip_prefix("synthetic:") {
            let ok = options
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b',' | b'_' | b'.' | b'-'));
            if !ok {
                return Err(invalid("data", "synthetic options are key=value pairs of [A-Za-z0-9_.-]"));
            }
            return Ok(DataRef::Synthetic(options.to_string()));
        }
        let Some(rest) = s.strip_prefix("dataset:") else { return Err(invalid("data", DATA_RULE)) };
        let Some((hex, len)) = rest.split_once(':') else { return Err(invalid("data", DATA_RULE)) };
        let id = if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            unhex(hex).and_then(|v| <[u8; 32]>::try_from(v).ok()).map(DatasetId)
        } else {
            None
        };
        let Some(id) = id else { return Err(invalid("data", DATA_RULE)) };
        let manifest_len = match len.parse::<u32>() {
            Ok(n) if n > 0 && n <= MAX_MANIFEST_BYTES && len == n.to_string() => n,
            _ => return Err(invalid("data", "the manifest length must be a plain number in 1..=2400000")),
        };
        Ok(DataRef::Dataset { id, manifest_len })
    }
}

impl std::fmt::Display for DataRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataRef::Synthetic(o) if o.is_empty() => f.write_str("synthetic"),
            DataRef::Synthetic(o) => write!(f, "synthetic:{o}"),
            DataRef::Dataset { id, manifest_len } => write!(f, "dataset:{id}:{manifest_len}"),
        }
    }
}

/// Who may contribute deltas and commits, and whose commits decide which
/// state a joining or re-syncing node takes (docs/protocol.md §7.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionPolicy {
    /// Anyone; identities are free, so a count of committers proves little.
    Open,
    /// Only these signers (strictly increasing by bytes, non-empty).
    Allowlist(Vec<PublicKey>),
    /// The operators (strictly increasing, 1..=64 keys) and the holders of
    /// an unexpired [`Ticket`](crate::ticket::Ticket) for the run signed by
    /// one of them.
    Tickets { operators: Vec<PublicKey> },
    /// Anyone contributes deltas, but only the operators' commits (strictly
    /// increasing, 1..=64 keys) are counted when deciding a state.
    OpenWithOperators { operators: Vec<PublicKey> },
}

impl AdmissionPolicy {
    /// Whether `key` is admitted without a ticket: anyone in open runs, the
    /// listed keys of an allowlist, the operators of a ticket run.
    pub fn admits(&self, key: &PublicKey) -> bool {
        match self {
            AdmissionPolicy::Open | AdmissionPolicy::OpenWithOperators { .. } => true,
            AdmissionPolicy::Allowlist(keys) => keys.binary_search(key).is_ok(),
            AdmissionPolicy::Tickets { operators } => operators.binary_search(key).is_ok(),
        }
    }

    /// Whether holders of the operators' tickets are admitted.
    pub fn uses_tickets(&self) -> bool {
        matches!(self, AdmissionPolicy::Tickets { .. })
    }

    /// The operator keys the RunSpec names (none for Open and Allowlist).
    pub fn operators(&self) -> &[PublicKey] {
        match self {
            AdmissionPolicy::Tickets { operators } | AdmissionPolicy::OpenWithOperators { operators } => {
                operators
            }
            AdmissionPolicy::Open | AdmissionPolicy::Allowlist(_) => &[],
        }
    }

    /// Whether an (admitted) signer's signed results count when deciding a
    /// state: only the operators' in an open run that names operators.
    pub fn counts_commits_of(&self, key: &PublicKey) -> bool {
        match self {
            AdmissionPolicy::OpenWithOperators { operators } => operators.binary_search(key).is_ok(),
            _ => true,
        }
    }
}

fn write_keys(w: &mut Writer, keys: &[PublicKey]) {
    w.u32(u32::try_from(keys.len()).unwrap_or(u32::MAX));
    for k in keys {
        w.bytes(&k.0);
    }
}

fn read_keys(r: &mut Reader<'_>, field: &'static str, cap: usize) -> Result<Vec<PublicKey>, WireError> {
    let n = r.count(field, cap, 32)?;
    let mut keys = Vec::with_capacity(n);
    for _ in 0..n {
        keys.push(PublicKey(r.array()?));
    }
    Ok(keys)
}

fn check_keys(
    keys: &[PublicKey],
    field: &'static str,
    cap: usize,
    why_count: &'static str,
) -> Result<(), WireError> {
    if keys.is_empty() || keys.len() > cap {
        return Err(invalid(field, why_count));
    }
    if keys.windows(2).any(|p| p[0] >= p[1]) {
        return Err(invalid(field, "keys must strictly increase"));
    }
    Ok(())
}

/// The definition of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    pub model: ModelShape,
    /// What the run trains on, as a [`DataRef`] string: `synthetic[:options]`
    /// or `dataset:<DatasetId hex>:<manifest bytes>` (never a path).
    pub data: String,
    pub inner: InnerOptimizer,
    /// Inner steps H per round.
    pub inner_steps: u32,
    pub outer: OuterOptimizer,
    pub codec: Codec,
    pub robust: RobustMode,
    /// Fewest verified deltas a round may close with.
    pub quorum: u32,
    /// Seconds after a round opens at which it closes if quorum is met.
    pub round_deadline_secs: u32,
    pub admission: AdmissionPolicy,
    pub seed: u64,
    /// Owners per shard k (docs/protocol.md §10; 1: one owner per shard,
    /// with backups), in 1..=4096.
    pub committee_size: u32,
    /// Blocking or overlapped rounds, fixed steps or a time budget
    /// (docs/protocol.md §4.1, §6.3, §6.4). Written only when not the default.
    pub pacing: Pacing,
    /// The genesis parameters when the run starts from a given model
    /// (`murmur-bootstrap --init-from`): nodes fetch the genesis state and
    /// check its parameters against this hash. `None`: the genesis
    /// parameters are `init_params(model, seed)`. Written only when present.
    pub genesis_params: Option<ParamsId>,
}

/// How a run paces its rounds (docs/protocol.md §6.3, §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pacing {
    /// Round r's exchange runs while round r + 1 trains: each node starts
    /// round r + 1 from the canonical state of round r − 1 stepped with its
    /// own round-r delta (the eager, one-round-delayed outer step). `false`
    /// is version 1's blocking round.
    pub overlapped: bool,
    /// Milliseconds of inner training per round; 0 trains exactly
    /// `inner_steps`. With a budget each node trains until the budget is
    /// spent, at most `inner_steps` steps, and deltas are normalised by
    /// their claimed steps before they are combined.
    pub inner_budget_ms: u32,
}

impl Pacing {
    /// Whether deltas carry step counts that differ between nodes.
    pub fn is_budgeted(&self) -> bool {
        self.inner_budget_ms != 0
    }
}

/// Largest inner-phase budget a spec may name (one day).
pub const MAX_INNER_BUDGET_MS: u32 = 86_400_000;

/// Largest committee size a spec may name.
pub const MAX_COMMITTEE_SIZE: u32 = 4096;

/// Most tokens one inner step may train on, `batch_size × context_len`
/// (2^20: 1024 sequences of 1024 tokens). A node holds activations for
/// every one of them at once.
pub const MAX_STEP_TOKENS: u64 = 1 << 20;

/// Most inner steps H a round may name (with a time budget, the most a
/// node may take).
pub const MAX_INNER_STEPS: u32 = 1_000_000;

/// Most tokens one node may train on in a round, `H × batch_size ×
/// context_len` (2^28): a dataset run fetches and holds a round's windows
/// before it trains.
pub const MAX_ROUND_TOKENS: u64 = 1 << 28;

/// Longest round deadline a spec may name (seven days).
pub const MAX_ROUND_DEADLINE_SECS: u32 = 604_800;

fn invalid(field: &'static str, why: &'static str) -> WireError {
    WireError::Invalid { field, why }
}

impl RunSpec {
    /// The canonical bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::RunSpec);
        let m = &self.model;
        w.str(&m.preset);
        for v in [m.vocab_size, m.context_len, m.n_layer, m.n_head, m.d_model] {
            w.u32(v);
        }
        w.u64(m.param_count);
        w.str(&self.data);
        let i = &self.inner;
        for v in [i.lr, i.beta1, i.beta2, i.eps, i.weight_decay, i.grad_clip] {
            w.f32(v);
        }
        w.u32(i.warmup_steps);
        w.u32(i.batch_size);
        w.u32(self.inner_steps);
        match self.outer {
            OuterOptimizer::Average => w.u8(0),
            OuterOptimizer::Nesterov { lr, momentum } => {
                w.u8(1);
                w.f32(lr);
                w.f32(momentum);
            }
        }
        self.codec.write(&mut w);
        match self.robust {
            RobustMode::Mean => w.u8(0),
            RobustMode::NormClip { multiple } => {
                w.u8(1);
                w.f32(multiple);
            }
            RobustMode::TrimmedMean { trim } => {
                w.u8(2);
                w.f32(trim);
            }
            RobustMode::Median => w.u8(3),
            RobustMode::NormFilter { multiple } => {
                w.u8(4);
                w.f32(multiple);
            }
        }
        w.u32(self.quorum);
        w.u32(self.round_deadline_secs);
        match &self.admission {
            AdmissionPolicy::Open => w.u8(0),
            AdmissionPolicy::Allowlist(keys) => {
                w.u8(1);
                write_keys(&mut w, keys);
            }
            AdmissionPolicy::Tickets { operators } => {
                w.u8(2);
                write_keys(&mut w, operators);
            }
            AdmissionPolicy::OpenWithOperators { operators } => {
                w.u8(3);
                write_keys(&mut w, operators);
            }
        }
        w.u64(self.seed);
        // The committee size, then the optional tail, written only as far
        // as it differs from the defaults.
        let init = self.genesis_params.is_some();
        let paced = init || self.pacing != Pacing::default();
        w.u32(self.committee_size);
        if paced {
            w.u8(u8::from(self.pacing.overlapped));
            w.u32(self.pacing.inner_budget_ms);
        }
        if let Some(p) = &self.genesis_params {
            w.bytes(&p.0);
        }
        w.finish()
    }

    /// Parse and validate canonical bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::RunSpec)?;
        let model = ModelShape {
            preset: r.str("model.preset", MAX_PRESET_BYTES)?,
            vocab_size: r.u32()?,
            context_len: r.u32()?,
            n_layer: r.u32()?,
            n_head: r.u32()?,
            d_model: r.u32()?,
            param_count: r.u64()?,
        };
        let data = r.str("data", MAX_STRING_BYTES)?;
        let inner = InnerOptimizer {
            lr: r.f32("inner.lr")?,
            beta1: r.f32("inner.beta1")?,
            beta2: r.f32("inner.beta2")?,
            eps: r.f32("inner.eps")?,
            weight_decay: r.f32("inner.weight_decay")?,
            grad_clip: r.f32("inner.grad_clip")?,
            warmup_steps: r.u32()?,
            batch_size: r.u32()?,
        };
        let inner_steps = r.u32()?;
        let outer = match r.u8()? {
            0 => OuterOptimizer::Average,
            1 => OuterOptimizer::Nesterov { lr: r.f32("outer.lr")?, momentum: r.f32("outer.momentum")? },
            tag => return Err(WireError::BadTag { field: "outer", tag }),
        };
        let codec = Codec::read(&mut r)?;
        let robust = match r.u8()? {
            0 => RobustMode::Mean,
            1 => RobustMode::NormClip { multiple: r.f32("robust.multiple")? },
            2 => RobustMode::TrimmedMean { trim: r.f32("robust.trim")? },
            3 => RobustMode::Median,
            4 => RobustMode::NormFilter { multiple: r.f32("robust.multiple")? },
            tag => return Err(WireError::BadTag { field: "robust", tag }),
        };
        let quorum = r.u32()?;
        let round_deadline_secs = r.u32()?;
        let admission = match r.u8()? {
            0 => AdmissionPolicy::Open,
            1 => AdmissionPolicy::Allowlist(read_keys(&mut r, "admission.allowlist", MAX_ALLOWLIST)?),
            2 => AdmissionPolicy::Tickets {
                operators: read_keys(&mut r, "admission.operators", MAX_OPERATORS)?,
            },
            3 => AdmissionPolicy::OpenWithOperators {
                operators: read_keys(&mut r, "admission.operators", MAX_OPERATORS)?,
            },
            tag => return Err(WireError::BadTag { field: "admission", tag }),
        };
        let seed = r.u64()?;
        if r.remaining() < 4 {
            return Err(invalid(
                "committee_size",
                "missing: a spec without one is of version 1's round, which nodes no longer run",
            ));
        }
        let committee_size = r.u32()?;
        let has_pacing = r.remaining() >= 5;
        let pacing = if has_pacing {
            let overlapped = match r.u8()? {
                0 => false,
                1 => true,
                tag => return Err(WireError::BadTag { field: "pacing.overlapped", tag }),
            };
            Pacing { overlapped, inner_budget_ms: r.u32()? }
        } else {
            Pacing::default()
        };
        let genesis_params = if r.remaining() >= 32 { Some(ParamsId(r.array()?)) } else { None };
        // Canonical bytes stop after the last field that is not a default.
        if genesis_params.is_none() && has_pacing && pacing == Pacing::default() {
            return Err(invalid("pacing", "default pacing is written by leaving it out"));
        }
        r.finish()?;
        let spec = RunSpec {
            model,
            data,
            inner,
            inner_steps,
            outer,
            codec,
            robust,
            quorum,
            round_deadline_secs,
            admission,
            seed,
            committee_size,
            pacing,
            genesis_params,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// The range rules `decode` enforces beyond the byte format.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.model.preset.len() > MAX_PRESET_BYTES {
            return Err(invalid("model.preset", "longer than 64 bytes"));
        }
        if self.data.len() > MAX_STRING_BYTES {
            return Err(invalid("data", "longer than 1024 bytes"));
        }
        DataRef::parse(&self.data)?;
        if self.model.param_count == 0 || self.model.param_count > MAX_ELEMENTS {
            return Err(invalid("model.param_count", "must be in 1..=2^31"));
        }
        let finite = [
            self.inner.lr,
            self.inner.beta1,
            self.inner.beta2,
            self.inner.eps,
            self.inner.weight_decay,
            self.inner.grad_clip,
        ];
        if finite.iter().any(|v| !v.is_finite()) {
            return Err(invalid("inner", "hyperparameters must be finite"));
        }
        // What one step and one round make a node hold, before it holds any
        // of it: a spec from a peer must not make a volunteer abort on
        // allocation. The product is in u64, so it cannot wrap.
        let step_tokens = u64::from(self.inner.batch_size) * u64::from(self.model.context_len);
        if step_tokens == 0 || step_tokens > MAX_STEP_TOKENS {
            return Err(invalid(
                "inner.batch_size",
                "batch_size × context_len (tokens per inner step) must be in 1..=1048576; host the run with a smaller --batch",
            ));
        }
        if self.inner_steps == 0 || self.inner_steps > MAX_INNER_STEPS {
            return Err(invalid(
                "inner_steps",
                "must be in 1..=1000000; host the run with fewer --inner-steps",
            ));
        }
        if u64::from(self.inner_steps) * step_tokens > MAX_ROUND_TOKENS {
            return Err(invalid(
                "inner_steps",
                "inner_steps × batch_size × context_len (tokens per round) must be at most 268435456; host the run with fewer --inner-steps or a smaller --batch",
            ));
        }
        if let OuterOptimizer::Nesterov { lr, momentum } = self.outer {
            if !(lr.is_finite() && lr > 0.0) {
                return Err(invalid("outer.lr", "must be positive"));
            }
            if !(0.0..1.0).contains(&momentum) {
                return Err(invalid("outer.momentum", "must be in [0, 1)"));
            }
        }
        if !self.codec.is_valid() {
            return Err(invalid("codec", "parameters out of range"));
        }
        match self.robust {
            RobustMode::NormClip { multiple } if !(multiple.is_finite() && multiple > 0.0) => {
                return Err(invalid("robust.multiple", "must be positive"));
            }
            RobustMode::NormFilter { multiple } if !(multiple.is_finite() && multiple >= 1.0) => {
                return Err(invalid("robust.multiple", "must be at least 1"));
            }
            RobustMode::TrimmedMean { trim } if !(0.0..0.5).contains(&trim) => {
                return Err(invalid("robust.trim", "must be in [0, 0.5)"));
            }
            _ => {}
        }
        if self.quorum == 0 {
            return Err(invalid("quorum", "must be at least 1"));
        }
        if self.round_deadline_secs == 0 || self.round_deadline_secs > MAX_ROUND_DEADLINE_SECS {
            return Err(invalid(
                "round_deadline_secs",
                "must be in 1..=604800 (seven days); host the run with a shorter --deadline",
            ));
        }
        if self.committee_size == 0 || self.committee_size > MAX_COMMITTEE_SIZE {
            return Err(invalid(
                "committee_size",
                "must be in 1..=4096 (0 was version 1's round, which nodes no longer run)",
            ));
        }
        let budget = self.pacing.inner_budget_ms;
        if budget > MAX_INNER_BUDGET_MS || u64::from(budget) >= u64::from(self.round_deadline_secs) * 1000 {
            return Err(invalid(
                "pacing.inner_budget_ms",
                "must be at most one day and shorter than the round deadline",
            ));
        }
        match &self.admission {
            AdmissionPolicy::Open => {}
            AdmissionPolicy::Allowlist(keys) => {
                check_keys(keys, "admission.allowlist", MAX_ALLOWLIST, "must hold 1..=4096 keys")?
            }
            AdmissionPolicy::Tickets { operators } | AdmissionPolicy::OpenWithOperators { operators } => {
                check_keys(operators, "admission.operators", MAX_OPERATORS, "must name 1..=64 operator keys")?
            }
        }
        Ok(())
    }

    /// What the run trains on (validated by `decode`).
    pub fn data_ref(&self) -> Result<DataRef, WireError> {
        DataRef::parse(&self.data)
    }

    /// blake3 (run-id domain) of the canonical bytes.
    pub fn run_id(&self) -> RunId {
        run_id_of(&self.encode())
    }
}

#[cfg(test)]
pub(crate) mod tests;
