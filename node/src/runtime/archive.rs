//! An operator's archive of a run: every R-th committed state written as an
//! export (`checkpoint::run_export`) under `DIR/round-<N>`, the newest K
//! kept. `murmur-bootstrap --checkpoint-dir` feeds it from the run's gossip
//! (`Follower`): it records the results and tickets it sees (bounded, for
//! recent rounds only), each result naming the state its signer trained the
//! round from, and once a round's results have had a few seconds to arrive
//! (or the next round's came, or every signer of the round before has
//! spoken) it takes the state the run's trust rule
//! backs for that round (`Evidence::backed_round`), never one a minority
//! signed, and fetches it from its signers (`fetch_settled`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use murmur_protocol::committee::ShardResult;
use murmur_protocol::{PublicKey, RunSpec, StateId, Ticket, TrainingState};

use super::backing::Evidence;
use super::committee::sync::fetch_committed_state;
use super::spec::model_config;
use super::tickets::unix_now;
use super::RuntimeError;
use crate::checkpoint::run_export::{self, ExportMeta};
use crate::data::hf_tokenizer::ExportTokenizer;
use crate::model::ModelConfig;
use crate::net::{peer_id_of, NetHandle};

/// How long after a round's first commit the follower decides it (unless
/// a later round's commits come first).
pub const SETTLE: Duration = Duration::from_secs(3);

/// Rounds of gossip a follower keeps.
const KEPT_ROUNDS: u64 = 8;

/// Signers of one round's results a follower keeps.
const MAX_SIGNERS: usize = 65_536;

/// Where and how often to archive.
#[derive(Debug, Clone)]
pub struct ArchiveOptions {
    pub dir: PathBuf,
    /// Archive the state of every round r with (r + 1) a multiple of this.
    pub every: u64,
    /// Exports kept (the newest).
    pub keep: usize,
}

/// The archive directory of one run.
pub struct Archive {
    opts: ArchiveOptions,
    cfg: ModelConfig,
    /// Written beside each export.
    tokenizer: Option<ExportTokenizer>,
}

impl Archive {
    pub fn new(
        opts: ArchiveOptions,
        spec: &RunSpec,
        tokenizer: Option<ExportTokenizer>,
    ) -> Result<Self, RuntimeError> {
        if opts.every == 0 || opts.keep == 0 {
            return Err(RuntimeError::Config("--checkpoint-every and --keep must be at least 1".into()));
        }
        std::fs::create_dir_all(&opts.dir)
            .map_err(|e| RuntimeError::Config(format!("--checkpoint-dir {}: {e}", opts.dir.display())))?;
        Ok(Self { cfg: model_config(spec)?, opts, tokenizer })
    }

    /// Whether the state round `round` commits is archived.
    pub fn due(&self, round: u64) -> bool {
        (round + 1).is_multiple_of(self.opts.every)
    }

    /// The directory of round `round`'s export.
    pub fn path_of(&self, round: u64) -> PathBuf {
        self.opts.dir.join(format!("round-{round:08}"))
    }

    /// Write `state` (committed by `meta.round`) and drop all but the
    /// newest `keep` exports; returns where it went. The export is written
    /// under a staging name first and renamed into place only after the
    /// older exports were pruned to `keep - 1`, so the directory never
    /// holds more than `keep` exports and a failed write removes nothing.
    pub fn write(&self, state: &TrainingState, meta: &ExportMeta) -> Result<PathBuf, String> {
        let round = meta.round.ok_or("the genesis state is not archived")?;
        let path = self.path_of(round);
        let pruning = |keep| {
            prune(&self.opts.dir, keep).map_err(|e| format!("pruning {}: {e}", self.opts.dir.display()))
        };
        if path.exists() {
            pruning(self.opts.keep)?;
            return Ok(path);
        }
        let staging = self.opts.dir.join(format!(".staging-round-{round:08}"));
        let _ = std::fs::remove_dir_all(&staging);
        run_export::write(&staging, &self.cfg, state, meta, self.tokenizer.as_ref())
            .map_err(|e| e.to_string())?;
        pruning(self.opts.keep - 1)?;
        std::fs::rename(&staging, &path)
            .map_err(|e| format!("moving {} into place: {e}", staging.display()))?;
        pruning(self.opts.keep)?;
        Ok(path)
    }
}

/// Remove all but the newest `keep` `round-<N>` exports in `dir`.
fn prune(dir: &Path, keep: usize) -> std::io::Result<()> {
    let mut rounds: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("round-").and_then(|n| n.parse().ok()).map(|r| (r, e.path()))
        })
        .collect();
    rounds.sort();
    let drop = rounds.len().saturating_sub(keep);
    for (_, path) in rounds.into_iter().take(drop) {
        std::fs::remove_dir_all(path)?;
    }
    Ok(())
}

/// A round the follower settled: the state its commits back, who signed
/// them, and the tokens its included deltas claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub round: u64,
    pub state: StateId,
    pub committers: Vec<PublicKey>,
    /// Tokens of rounds `tokens_from_round ..= round` (those followed).
    pub tokens_seen: u64,
    pub tokens_from_round: u64,
}

/// Follows a run's commits as gossip and settles each round once its
/// commits have had `SETTLE` to arrive.
pub struct Follower {
    spec: RunSpec,
    evidence: Evidence,
    /// When each unsettled round's first commit arrived.
    open: BTreeMap<u64, Instant>,
    /// Who signed results of each recent round, and the tokens shard 0's
    /// first result of the round signs.
    signers: BTreeMap<u64, BTreeSet<PublicKey>>,
    round_tokens: BTreeMap<u64, u64>,
    newest: u64,
    tokens_seen: u64,
    first_round: Option<u64>,
}

impl Follower {
    pub fn new(spec: RunSpec) -> Self {
        Self {
            spec,
            evidence: Evidence::default(),
            open: BTreeMap::new(),
            signers: BTreeMap::new(),
            round_tokens: BTreeMap::new(),
            newest: 0,
            tokens_seen: 0,
            first_round: None,
        }
    }

    /// A result of round q: its signer's word that its base
    /// opened round q, which round q − 1 committed.
    pub fn on_result(&mut self, r: &ShardResult, now: Instant) {
        if r.run != self.spec.run_id() || r.round + KEPT_ROUNDS < self.newest {
            return;
        }
        if r.shard == 0 {
            self.round_tokens.entry(r.round).or_insert(r.total_tokens);
        }
        let signers = self.signers.entry(r.round).or_default();
        if signers.len() < MAX_SIGNERS {
            signers.insert(r.signer);
        }
        let Some(committed) = r.round.checked_sub(1) else { return };
        if self.first_round.is_none_or(|f| committed >= f) {
            self.open.entry(committed).or_insert(now);
            self.newest = self.newest.max(committed);
            self.evidence.add_result(r);
        }
    }

    /// Whether every signer of round `round`'s results has also signed a
    /// result of round `round + 1` (whose bases `round` committed).
    fn all_spoke(&self, round: u64) -> bool {
        let (Some(before), Some(now)) = (self.signers.get(&round), self.signers.get(&(round + 1))) else {
            return false;
        };
        !before.is_empty() && before.is_subset(now)
    }

    pub fn on_ticket(&mut self, presenter: PublicKey, t: Ticket) {
        self.evidence.add_ticket(presenter, t);
    }

    /// The rounds whose commits have settled by `now`, oldest first, each
    /// with the state the run's rule backs (rounds nothing backs are
    /// dropped). Old gossip is forgotten.
    pub fn settle(&mut self, now: Instant) -> Vec<Settled> {
        // A round is settled SETTLE after its first commit, or once a later
        // round's commits arrive (its own are then all sent): nodes keep
        // only their last few states, so a fast run must be followed closely.
        let newest = self.newest;
        let ready: Vec<u64> = self
            .open
            .iter()
            .filter(|(r, t)| **r < newest || now.duration_since(**t) >= SETTLE || self.all_spoke(**r))
            .map(|(r, _)| *r)
            .collect();
        let mut out = Vec::new();
        for round in ready {
            self.open.remove(&round);
            let Some(b) = self.evidence.backed_round(&self.spec, unix_now(), round) else {
                continue;
            };
            let tokens = self.round_tokens.get(&round).copied().unwrap_or(0);
            let first = *self.first_round.get_or_insert(round);
            self.tokens_seen += tokens;
            out.push(Settled {
                round,
                state: b.state,
                committers: b.committers,
                tokens_seen: self.tokens_seen,
                tokens_from_round: first,
            });
        }
        let keep_from = self.newest.saturating_sub(KEPT_ROUNDS);
        self.evidence.forget_before(keep_from);
        self.signers.retain(|r, _| *r >= keep_from);
        self.round_tokens.retain(|r, _| *r >= keep_from);
        out
    }
}

/// Fetch the state settled round `s` committed from its signers, checked
/// against its StateId (a committee run's names parameters and ledger).
pub async fn fetch_settled(net: &NetHandle, spec: &RunSpec, s: &Settled) -> Result<TrainingState, String> {
    let peers: Vec<_> = s.committers.iter().filter_map(peer_id_of).collect();
    // The state round r commits opens round r + 1.
    fetch_committed_state(net, spec, s.state, &peers).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_exports_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        for r in [1u64, 3, 5, 7, 9] {
            std::fs::create_dir_all(dir.path().join(format!("round-{r:08}"))).expect("mkdir");
        }
        std::fs::create_dir_all(dir.path().join("notes")).expect("mkdir");
        prune(dir.path(), 2).expect("prune");
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["notes", "round-00000007", "round-00000009"]);
    }

    #[test]
    fn a_committee_round_settles_once_every_signer_of_the_round_before_spoke() {
        let spec = crate::runtime::spec::run_spec(&Default::default()).expect("spec");
        let keys: Vec<murmur_protocol::NodeKey> =
            (1..=3u8).map(|i| murmur_protocol::NodeKey::from_seed([i; 32])).collect();
        let result = |k: &murmur_protocol::NodeKey, round: u64, base: u8| {
            ShardResult {
                run: spec.run_id(),
                round,
                base: StateId([base; 32]),
                shard: 0,
                included_count: 3,
                included_root: [0; 32],
                total_tokens: 100 + round,
                result_hash: [0; 32],
                signer: k.public(),
                signature: murmur_protocol::Signature::default(),
            }
            .sign(k)
        };
        let mut f = Follower::new(spec.clone());
        let t = Instant::now();
        for k in &keys {
            f.on_result(&result(k, 1, 7), t);
        }
        for k in &keys[..2] {
            f.on_result(&result(k, 2, 8), t);
        }
        let settled = f.settle(t);
        assert_eq!(settled.iter().map(|s| (s.round, s.state)).collect::<Vec<_>>(), [(0, StateId([7; 32]))]);
        assert_eq!(settled[0].tokens_seen, 0, "round 0's tokens were signed by results not followed");
        f.on_result(&result(&keys[2], 2, 8), t);
        let settled = f.settle(t);
        assert_eq!(settled.iter().map(|s| (s.round, s.state)).collect::<Vec<_>>(), [(1, StateId([8; 32]))]);
        assert_eq!(settled[0].tokens_seen, 101, "shard 0's result of round 1 signs its tokens");
        assert_eq!(settled[0].committers.len(), 3);
    }
}
