//! Getting a run's model out: which committed states a node's data
//! directory holds and which one an export takes, and following a live run
//! as an observer to take the newest state the run's trust rule backs
//! (`murmur_protocol::trust`, over the trainers' signed results), checked against
//! its StateId before it is written.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use libp2p::Multiaddr;
use murmur_protocol::hash::unhex;
use murmur_protocol::{RunSpec, StateId, TrainingState};

use super::committee::sync::fetch_committed_state;
use super::report::Reporter;
use super::spec::model_config;
use super::startup::{ask_statuses, discover_spec, gather, Identity, Nothing};
use super::RuntimeError;
use crate::checkpoint::run_export::{self, ExportMeta};
use crate::net::{self, NetConfig, Role};
use crate::store::{BlobKind, RoundRecord, Store, StoreError};

/// Which state to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The newest committed state the directory holds.
    Latest,
    /// The state committed by this round.
    Round(u64),
    State(StateId),
}

/// A committed state a data directory knows of.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// The round whose commit names it (`None`: genesis).
    pub round: Option<u64>,
    pub state: StateId,
    /// The StateId the round reported, where it names more than the
    /// parameters (a committee run's: parameters and ledger).
    pub named: Option<StateId>,
    /// Whether its bytes are still stored (nodes keep only the newest few).
    pub held: bool,
    pub val_loss: Option<f32>,
}

fn parse_id(hex: &str) -> Option<StateId> {
    unhex(hex).and_then(|b| <[u8; 32]>::try_from(b).ok()).map(StateId)
}

/// The committed states of `spec`'s run that `store` knows of, oldest
/// first: every round its history records, and its position when that is
/// not among them (genesis, or a state a cold start synced to).
pub fn committed_states(store: &Store, spec: &RunSpec) -> Result<Vec<Committed>, StoreError> {
    let run = spec.run_id();
    let history = store.meta.history(&run)?;
    let mut out: Vec<Committed> = history
        .iter()
        .filter_map(|r| {
            let state = parse_id(r.state_blob.as_deref().unwrap_or(&r.state_id))?;
            let named = parse_id(&r.state_id).filter(|n| *n != state);
            let held = store.blobs.contains(BlobKind::State, &state.0);
            Some(Committed { round: Some(r.round), state, named, held, val_loss: r.val_loss })
        })
        .collect();
    if let Some(p) = store.meta.position(&run)? {
        if !out.iter().any(|c| c.state == p.state) {
            let held = store.blobs.contains(BlobKind::State, &p.state.0);
            let c = Committed {
                round: p.round.checked_sub(1),
                state: p.state,
                named: None,
                held,
                val_loss: None,
            };
            let at = out.iter().position(|o| o.round > c.round).unwrap_or(out.len());
            out.insert(at, c);
        }
    }
    Ok(out)
}

/// What a data directory holds, for an error message: the rounds whose
/// states it keeps, and how many older ones it recorded but deleted.
fn holdings(all: &[Committed]) -> String {
    let name = |c: &Committed| match c.round {
        Some(r) => format!("round {r} ({})", &c.state.to_hex()[..16]),
        None => format!("genesis ({})", &c.state.to_hex()[..16]),
    };
    let held: Vec<String> = all.iter().filter(|c| c.held).map(name).collect();
    let gone = all.iter().filter(|c| !c.held).count();
    let mut s = if held.is_empty() {
        "it holds no committed state".to_string()
    } else {
        format!("it holds the states of {}", held.join(", "))
    };
    if gone > 0 {
        s.push_str(&format!("; {gone} older rounds are recorded but their states were deleted"));
    }
    s
}

/// Open a node's data directory for reading its states.
fn open_data_dir(dir: &Path) -> Result<Store, RuntimeError> {
    if !dir.join("meta").is_dir() {
        return Err(RuntimeError::Config(format!(
            "{} is not a murmur node's data directory (it has no meta/); pass the --data-dir a node ran with",
            dir.display()
        )));
    }
    Store::open(dir).map_err(|e| match e {
        StoreError::Locked(_) => RuntimeError::Config(format!(
            "{e}; to export while the node runs, export from the network instead: murmur export --bootstrap <address> --out <dir>"
        )),
        e => e.into(),
    })
}

/// Export the committed state `pick` of the run a data directory last
/// joined to `out`.
pub fn export_from_data_dir(dir: &Path, pick: Pick, out: &Path) -> Result<ExportMeta, RuntimeError> {
    let store = open_data_dir(dir)?;
    let spec = store
        .meta
        .spec()?
        .and_then(|b| RunSpec::decode(&b).ok())
        .ok_or_else(|| RuntimeError::Config(format!("{} has joined no run", dir.display())))?;
    let all = committed_states(&store, &spec)?;
    let chosen = match pick {
        Pick::Latest => all.iter().rev().find(|c| c.held),
        Pick::Round(r) => all.iter().find(|c| c.round == Some(r)),
        Pick::State(id) => all.iter().find(|c| c.state == id || c.named == Some(id)),
    };
    let what = match pick {
        Pick::Latest => "a committed state".to_string(),
        Pick::Round(r) => format!("the state of round {r}"),
        Pick::State(id) => format!("state {id} as a committed state"),
    };
    let Some(chosen) = chosen.filter(|c| c.held) else {
        return Err(RuntimeError::Config(format!(
            "{} does not hold {what}: {}",
            dir.display(),
            holdings(&all)
        )));
    };
    let n = spec.model.param_count as usize;
    let bytes = store.blobs.get(BlobKind::State, &chosen.state.0)?;
    let state = TrainingState::decode(&bytes, n)
        .map_err(|e| RuntimeError::Config(format!("stored state {} does not decode: {e}", chosen.state)))?;
    if state.run != spec.run_id() || state.id() != chosen.state {
        return Err(RuntimeError::Config(format!("stored state {} is not the one recorded", chosen.state)));
    }
    let history = store.meta.history(&spec.run_id())?;
    let meta = with_history(ExportMeta::of(&spec, &state), &history, chosen.val_loss);
    let cfg = model_config(&spec)?;
    let tokenizer = super::dataset::held_export_tokenizer(&store, &spec, cfg.vocab_size)?;
    run_export::write(out, &cfg, &state, &meta, tokenizer.as_ref())
        .map_err(|e| RuntimeError::Config(e.to_string()))?;
    Ok(meta)
}

/// Fill in the tokens seen up to `meta`'s round from a node's round records.
pub fn with_history(mut meta: ExportMeta, history: &[RoundRecord], val_loss: Option<f32>) -> ExportMeta {
    let upto = meta.round;
    let counted: Vec<&RoundRecord> = history.iter().filter(|r| upto.is_some_and(|u| r.round <= u)).collect();
    meta.tokens_seen = counted.iter().map(|r| r.round_tokens).sum();
    meta.tokens_from_round = counted.first().map_or(0, |r| r.round);
    meta.val_loss = val_loss;
    meta
}

/// Times an export asks the trainers again when the state their commitments
/// backed was gone before it was fetched (a run whose rounds are short
/// moves on while the export fetches).
const EXPORT_ATTEMPTS: usize = 3;

/// Join the run the bootstrap servers host as an observer, take the newest
/// state the signed commitments of admitted keys back (or `state`, if some
/// round's commitments back it), fetched from its holders and checked
/// against its StateId, and export it to `out`. Refuses when no such state
/// is backed: a state peers merely claim is never written.
pub async fn export_from_network(
    who: &Identity,
    bootstrap: &[Multiaddr],
    state: Option<StateId>,
    out: &Path,
    wait: Duration,
    report: Reporter,
) -> Result<ExportMeta, RuntimeError> {
    let spec = discover_spec(who, bootstrap, wait).await?;
    let cfg = model_config(&spec)?;
    let mut ncfg = NetConfig::new(who.key.clone(), spec.run_id(), Role::Observer);
    ncfg.bootstrap = bootstrap.to_vec();
    ncfg.admission = spec.admission.clone();
    ncfg.ticket = who.ticket.clone();
    let (net, mut events) = net::start(ncfg, Arc::new(Nothing))?;
    let mut found = gather(&net, &mut events, &spec, wait, report).await;
    let mut attempt = 1;
    let state = loop {
        let now = super::tickets::unix_now();
        let backed = match state {
            Some(id) => found.evidence.backing_of(&spec, now, id),
            None => found.evidence.backed(&spec, now),
        };
        let Some(b) = backed else {
            let which =
                state.map_or_else(|| "no state".to_string(), |id| format!("state {id} is not one that"));
            return Err(RuntimeError::Config(format!(
                "{which} of run {} is backed by the signed commitments of admitted keys ({} trainers answered; they offer their last 3 rounds'); nothing was written",
                spec.run_id(),
                found.trainers.len()
            )));
        };
        match fetch_committed_state(&net, &spec, b.state, &found.holders_of(&b)).await {
            Ok(s) => break s,
            Err(e) if attempt >= EXPORT_ATTEMPTS || state.is_some() => {
                return Err(RuntimeError::Config(format!(
                    "fetching state {} of round {}: {e}; nothing was written",
                    b.state, b.round
                )));
            }
            Err(e) => {
                tracing::info!("state {} of round {} was not fetched ({e}); asking again", b.state, b.round);
                attempt += 1;
                let (claims, evidence) = ask_statuses(&net, &found.trainers, &spec).await;
                (found.claims, found.evidence) = (claims, evidence);
            }
        }
    };
    let meta = ExportMeta::of(&spec, &state);
    let tokenizer = super::dataset::export_tokenizer_from_peers(&net, &spec, cfg.vocab_size).await?;
    run_export::write(out, &cfg, &state, &meta, tokenizer.as_ref())
        .map_err(|e| RuntimeError::Config(e.to_string()))?;
    Ok(meta)
}
