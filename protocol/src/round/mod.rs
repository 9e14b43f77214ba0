//! The round state machine (sans-IO): events in, actions out.
//!
//! The node feeds it decoded messages, payload verification results, peer
//! membership changes and timer ticks, each with a caller-supplied `now` in
//! milliseconds; it answers with actions to carry out (fetch, publish,
//! aggregate, re-sync, reject). It never reads a clock, never blocks, never
//! does I/O. The rules it implements are specified in docs/protocol.md §7.

#[cfg(test)]
mod admission_tests;
mod reason;
mod votes;

pub use reason::{PeerScore, Rejection, Scoreboard, MAX_SCORED_PEERS};
pub use votes::{ELECTORATE_ROUNDS, MAX_VOTERS, MAX_VOTE_ROUNDS};

use crate::admission::{Admission, TicketRefused};
use crate::codec::Codec;
use crate::commit::RoundCommit;
use crate::hash::{PayloadHash, RunId, StateId};
use crate::identity::{NodeKey, PublicKey, Signature};
use crate::manifest::DeltaManifest;
use crate::spec::{AdmissionPolicy, RunSpec};
use crate::ticket::{Ticket, TicketError};
use crate::wire::MAX_COMMIT_DELTAS;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
pub(crate) use votes::{Leader, Vote, Votes};

/// Most live members tracked.
pub const MAX_MEMBERS: usize = 65_536;
/// Most manifests of the next round kept until it opens (one per signer).
pub const MAX_EARLY_MANIFESTS: usize = 1_024;
/// First wait before asking again for a payload no peer served.
pub const PAYLOAD_RETRY_FIRST_MS: u64 = 200;
/// Longest wait between two asks for a payload.
pub const PAYLOAD_RETRY_MAX_MS: u64 = 2_000;
/// First wait before fetching a re-sync's state again.
pub const STATE_RETRY_FIRST_MS: u64 = 200;
/// Longest wait between two attempts at a re-sync's state.
pub const STATE_RETRY_MAX_MS: u64 = 10_000;

/// `first` doubled `tries − 1` times, at most `max`.
fn backoff(first: u64, max: u64, tries: u32) -> u64 {
    first.saturating_mul(1 << tries.saturating_sub(1).min(20)).min(max)
}

/// The state a re-sync wants, and when to try fetching it again.
#[derive(Debug, Clone)]
struct StateRetry {
    round: u64,
    state: StateId,
    peers: Vec<PublicKey>,
    tries: u32,
    at: Option<u64>,
}

/// What the machine needs from the RunSpec.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundConfig {
    pub run: RunId,
    pub codec: Codec,
    pub element_count: u64,
    pub quorum: u32,
    pub deadline_ms: u64,
    pub admission: AdmissionPolicy,
}

impl RoundConfig {
    pub fn from_spec(spec: &RunSpec) -> Self {
        Self {
            run: spec.run_id(),
            codec: spec.codec,
            element_count: spec.model.param_count,
            quorum: spec.quorum,
            deadline_ms: u64::from(spec.round_deadline_secs) * 1000,
            admission: spec.admission.clone(),
        }
    }
}

/// Whose fault a failed payload fetch was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadFault {
    /// The serving peer sent bytes that do not hash to the requested hash.
    HashMismatch,
    /// The bytes hash correctly but do not decode to a valid delta of the
    /// run's codec and shape (or hold non-finite values): the signer's fault.
    Undecodable,
}

/// Something that happened, reported by the node.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A decoded DeltaManifest delivered by peer `from` (signature unchecked).
    ManifestReceived {
        from: PublicKey,
        manifest: DeltaManifest,
    },
    /// The payload with this hash was fetched, hash-checked and decoded.
    PayloadVerified {
        payload_hash: PayloadHash,
    },
    /// Fetching or decoding the payload failed; `from` served the bytes.
    PayloadInvalid {
        payload_hash: PayloadHash,
        from: PublicKey,
        fault: PayloadFault,
    },
    /// One attempt at fetching the payload got it from no peer; the machine
    /// asks again after a back-off while the round still wants it.
    PayloadUnavailable {
        payload_hash: PayloadHash,
    },
    /// One attempt at fetching a re-sync's state failed; the machine asks
    /// again (`Resync` once more) after a back-off while it still wants it.
    StateUnavailable {
        state: StateId,
    },
    /// A training member connected (not observers such as dashboards).
    PeerJoined {
        peer: PublicKey,
    },
    PeerLeft {
        peer: PublicKey,
    },
    /// A ticket delivered by peer `from` (unchecked), with the node's wall
    /// clock (unix seconds) now. The machine checks it (operator signature,
    /// run, expiry) and admits its holder until it expires; a holder that
    /// joined before its ticket arrived becomes a member then.
    TicketPresented {
        from: PublicKey,
        ticket: Ticket,
        unix_secs: u64,
    },
    /// The time returned by `next_timeout` has come.
    TimerFired,
    /// A decoded RoundCommit delivered by peer `from` (signature unchecked).
    CommitReceived {
        from: PublicKey,
        commit: RoundCommit,
    },
    /// This node finished training: its encoded payload is stored locally.
    LocalDeltaReady {
        round: u64,
        base: StateId,
        payload_hash: PayloadHash,
        tokens: u64,
        train_loss: f32,
    },
    /// Our own manifest, signed (and perhaps published) before a restart,
    /// for the round the node resumed at; its payload is stored locally. It
    /// is announced again as it is: a node never signs two different deltas
    /// for one round, so a crash is never taken for equivocation.
    LocalDeltaRestored {
        manifest: DeltaManifest,
    },
    /// The node carried out `Action::Aggregate` and the outer step.
    Aggregated {
        round: u64,
        included: Vec<PayloadHash>,
        new_state: StateId,
    },
    /// Aggregation found no valid delta among those offered; they are all
    /// dropped and the round keeps collecting.
    AggregationFailed {
        round: u64,
    },
}

/// An accepted, verified delta handed to aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptedDelta {
    pub payload_hash: PayloadHash,
    pub signer: PublicKey,
    pub tokens: u64,
}

/// Something the node must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A round began: train from `base` (fetching that state first if the
    /// node does not hold it).
    RoundOpened { round: u64, base: StateId },
    /// Fetch this payload (any peer holding it may serve it; `from`
    /// announced it), check its hash, decode it, and report back.
    FetchPayload { payload_hash: PayloadHash, payload_len: u64, signer: PublicKey, from: PublicKey },
    /// Gossip this (signed) manifest of our own delta.
    PublishManifest(DeltaManifest),
    /// Aggregate exactly these deltas (sorted by hash) onto `base`, apply the
    /// outer step, and report `Event::Aggregated` or `AggregationFailed`.
    Aggregate { round: u64, base: StateId, deltas: Vec<AcceptedDelta> },
    /// Gossip this (signed) commit.
    PublishCommit(RoundCommit),
    /// At least half of the committers hold another state: fetch `state` and continue from
    /// it as the base of `round` (a `RoundOpened` follows). One attempt: a
    /// failed one is reported as `StateUnavailable` and asked for again.
    Resync { round: u64, state: StateId, peers: Vec<PublicKey> },
    /// Charge `peer` for `reason` (only reasons with a non-zero penalty).
    Reject { peer: PublicKey, reason: Rejection },
}

/// Where the current round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Collecting,
    Aggregating,
}

#[derive(Debug, Clone)]
struct Entry {
    manifest: DeltaManifest,
    announced_by: PublicKey,
    verified: bool,
}

/// The per-node round state machine.
#[derive(Debug)]
pub struct RoundMachine {
    cfg: RoundConfig,
    key: NodeKey,
    me: PublicKey,
    round: u64,
    base: StateId,
    phase: Phase,
    opened_at: u64,
    now: u64,
    /// Who is admitted: the policy plus the ticket holders seen.
    admission: Admission,
    /// Training peers connected (admitted or not, at most `MAX_MEMBERS`);
    /// the admitted ones are the live members a round waits for.
    joined: BTreeSet<PublicKey>,
    entries: BTreeMap<PublicKey, Entry>,
    by_hash: BTreeMap<PayloadHash, PublicKey>,
    /// Signers excluded from the current round, and why.
    excluded: BTreeMap<PublicKey, Rejection>,
    offered: Vec<AcceptedDelta>,
    votes: Votes,
    scores: Scoreboard,
    /// Payloads of this round to ask for again: hash → (asks failed, when).
    payload_retry: BTreeMap<PayloadHash, (u32, Option<u64>)>,
    state_retry: Option<StateRetry>,
    actions: VecDeque<Action>,
    /// Signed manifests of round + 1 that arrived before it opened (a peer
    /// that closed the round sooner, or trains ahead in an overlapped run),
    /// with who delivered them; checked again when that round opens.
    early: Vec<(PublicKey, DeltaManifest)>,
    /// This round's manifests on another base (refused as `WrongBase`),
    /// kept (once per signer, bounded) in case a re-sync moves the node to
    /// that base in this same round: they are checked again then, rather
    /// than lost, since gossip delivers a manifest once.
    other_base: Vec<(PublicKey, DeltaManifest)>,
}

impl RoundMachine {
    /// Start at `round` from state `base` at time `now`; emits `RoundOpened`.
    pub fn new(cfg: RoundConfig, key: NodeKey, round: u64, base: StateId, now: u64) -> Self {
        let me = key.public();
        let admission = Admission::new(cfg.run, cfg.admission.clone());
        let mut m = Self {
            admission,
            joined: BTreeSet::new(),
            cfg,
            key,
            me,
            round,
            base,
            phase: Phase::Collecting,
            opened_at: now,
            now,
            entries: BTreeMap::new(),
            by_hash: BTreeMap::new(),
            excluded: BTreeMap::new(),
            offered: Vec::new(),
            votes: Votes::default(),
            scores: Scoreboard::default(),
            payload_retry: BTreeMap::new(),
            state_retry: None,
            actions: VecDeque::new(),
            early: Vec::new(),
            other_base: Vec::new(),
        };
        m.open(round, base);
        m
    }

    pub fn round(&self) -> u64 {
        self.round
    }
    pub fn base(&self) -> StateId {
        self.base
    }
    pub fn phase(&self) -> Phase {
        self.phase
    }
    pub fn scores(&self) -> &Scoreboard {
        &self.scores
    }
    /// The live members: connected training peers admitted now.
    pub fn members(&self) -> impl Iterator<Item = &PublicKey> {
        self.joined.iter().filter(|p| self.admits(p))
    }
    /// Whether `key` is admitted now (by the policy or an unexpired ticket).
    pub fn admits(&self, key: &PublicKey) -> bool {
        self.admission.admits(key, self.now)
    }
    /// Whether `key`'s commits count now when deciding a state.
    pub fn counts_commits_of(&self, key: &PublicKey) -> bool {
        self.admission.counts_commits_of(key, self.now)
    }
    /// Verified deltas collected so far in the current round.
    pub fn ready_count(&self) -> usize {
        self.entries.values().filter(|e| e.verified).count()
    }

    /// When the node should send `TimerFired`: the current round's deadline
    /// (while it lies in the future and the round is collecting), or the
    /// next fetch retry the machine owns, whichever comes first.
    pub fn next_timeout(&self) -> Option<u64> {
        let deadline = self.opened_at.saturating_add(self.cfg.deadline_ms);
        let deadline = (self.phase == Phase::Collecting && deadline > self.now).then_some(deadline);
        let payload = self.payload_retry.values().filter_map(|(_, at)| *at).min();
        let state = self.state_retry.as_ref().and_then(|r| r.at);
        [deadline, payload, state].into_iter().flatten().min()
    }

    /// The next action to carry out, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Feed one event at time `now` (ms; a `now` earlier than one seen
    /// before is treated as the latest seen).
    pub fn handle(&mut self, now: u64, event: Event) {
        self.now = self.now.max(now);
        self.expire_tickets();
        match event {
            Event::ManifestReceived { from, manifest } => self.on_manifest(from, manifest),
            Event::PayloadVerified { payload_hash } => self.on_verified(payload_hash),
            Event::PayloadInvalid { payload_hash, from, fault } => self.on_invalid(payload_hash, from, fault),
            Event::PeerJoined { peer } => {
                if self.joined.len() < MAX_MEMBERS {
                    self.joined.insert(peer);
                }
            }
            Event::PeerLeft { peer } => {
                self.joined.remove(&peer);
            }
            Event::TicketPresented { from, ticket, unix_secs } => self.on_ticket(from, &ticket, unix_secs),
            Event::PayloadUnavailable { payload_hash } => self.on_unavailable(payload_hash),
            Event::StateUnavailable { state } => {
                let now = self.now;
                if let Some(r) = self.state_retry.as_mut().filter(|r| r.state == state && self.base == state)
                {
                    r.tries += 1;
                    r.at = Some(now + backoff(STATE_RETRY_FIRST_MS, STATE_RETRY_MAX_MS, r.tries));
                }
            }
            Event::TimerFired => self.retry_due(),
            Event::CommitReceived { from, commit } => self.on_commit(from, commit),
            Event::LocalDeltaReady { round, base, payload_hash, tokens, train_loss } => {
                self.on_local(round, base, payload_hash, tokens, train_loss)
            }
            Event::LocalDeltaRestored { manifest } => self.on_restored(manifest),
            Event::Aggregated { round, included, new_state } => {
                self.on_aggregated(round, included, new_state)
            }
            Event::AggregationFailed { round } => self.on_aggregation_failed(round),
        }
        self.maybe_close();
    }

    fn reject(&mut self, peer: PublicKey, reason: Rejection) {
        self.scores.charge(peer, reason);
        if reason.penalty() > 0 {
            self.actions.push_back(Action::Reject { peer, reason });
        }
    }

    fn open(&mut self, round: u64, base: StateId) {
        if let Some(last) = self.round.checked_sub(1).filter(|_| round > self.round) {
            self.votes.remember_committers(last);
        }
        self.round = round;
        self.base = base;
        self.payload_retry.clear();
        if self.state_retry.as_ref().is_some_and(|r| r.state != base) {
            self.state_retry = None;
        }
        self.phase = Phase::Collecting;
        self.opened_at = self.now;
        self.entries.clear();
        self.by_hash.clear();
        self.excluded.clear();
        self.offered.clear();
        self.votes.prune_below(round.saturating_sub(1));
        self.actions.push_back(Action::RoundOpened { round, base });
        // Manifests of this round that came early, or on the base the node
        // has just moved to, are checked now.
        let other_base = std::mem::take(&mut self.other_base);
        let moved_to = other_base.into_iter().filter(|(_, m)| m.base == base);
        for (from, m) in moved_to.chain(std::mem::take(&mut self.early)) {
            if m.round == round {
                self.on_manifest(from, m);
            }
        }
    }

    /// Forget ticket holders whose tickets expired (they are no longer
    /// admitted, so no longer members, either way).
    fn expire_tickets(&mut self) {
        if self.admission.next_expiry().is_some_and(|t| t <= self.now) {
            self.admission.prune(self.now);
        }
    }

    fn on_ticket(&mut self, from: PublicKey, ticket: &Ticket, unix_secs: u64) {
        match self.admission.present(ticket, unix_secs, self.now) {
            // A holder already connected is a member from now on.
            Ok(_) => {}
            Err(refused) => {
                let reason = match refused {
                    TicketRefused::Ticket(TicketError::BadSignature) => Rejection::BadSignature,
                    TicketRefused::Ticket(TicketError::WrongRun) => Rejection::WrongRun,
                    TicketRefused::Ticket(TicketError::Expired { .. }) => Rejection::ExpiredTicket,
                    TicketRefused::Full => Rejection::RoundFull,
                    TicketRefused::Ticket(TicketError::UnknownOperator | TicketError::WrongHolder)
                    | TicketRefused::NoTickets => Rejection::NotAdmitted,
                };
                self.reject(from, reason);
            }
        }
    }

    /// Checks shared by manifests and commits; charges `from` or the signer.
    fn screen(&mut self, from: PublicKey, signer: PublicKey, run: RunId, valid_sig: bool) -> bool {
        if !valid_sig {
            self.reject(from, Rejection::BadSignature);
        } else if !self.admits(&signer) {
            self.reject(signer, Rejection::NotAdmitted);
        } else if run != self.cfg.run {
            self.reject(from, Rejection::WrongRun);
        } else {
            return true;
        }
        false
    }

    fn on_manifest(&mut self, from: PublicKey, m: DeltaManifest) {
        let valid_sig = m.verify().is_ok();
        if !self.screen(from, m.signer, m.run, valid_sig) {
            return;
        }
        let signer = m.signer;
        if m.round == self.round.saturating_add(1) {
            // The next round's: kept (once per signer, bounded) until it opens.
            let known = self.early.iter().any(|(_, e)| e.signer == signer);
            if !known && self.early.len() < MAX_EARLY_MANIFESTS {
                self.early.push((from, m));
            } else {
                self.scores.charge(signer, Rejection::FutureRound);
            }
            return;
        }
        let reason = if m.round > self.round {
            Some(Rejection::FutureRound)
        } else if m.round + 1 < self.round {
            Some(Rejection::Replay)
        } else if m.round < self.round || self.phase == Phase::Aggregating {
            Some(Rejection::Late)
        } else if let Some(r) = self.excluded.get(&signer) {
            Some(*r)
        } else if m.base != self.base {
            Some(Rejection::WrongBase)
        } else if m.codec != self.cfg.codec {
            Some(Rejection::WrongCodec)
        } else if m.element_count != self.cfg.element_count
            || self.cfg.codec.payload_len(m.element_count) != Some(m.payload_len)
        {
            Some(Rejection::WrongShape)
        } else if m.tokens == 0 {
            Some(Rejection::ZeroTokens)
        } else {
            None
        };
        if reason == Some(Rejection::WrongBase) && m.round == self.round {
            let known = self.other_base.iter().any(|(_, e)| e.signer == signer);
            if !known && self.other_base.len() < MAX_EARLY_MANIFESTS {
                self.other_base.push((from, m.clone()));
            }
        }
        if let Some(reason) = reason {
            return self.reject(signer, reason);
        }
        if let Some(existing) = self.entries.get(&signer) {
            if existing.manifest == m {
                return self.scores.charge(signer, Rejection::Duplicate);
            }
            // Equivocation: drop both, exclude the signer for the round.
            let old_hash = existing.manifest.payload_hash;
            self.entries.remove(&signer);
            self.by_hash.remove(&old_hash);
            self.excluded.insert(signer, Rejection::Equivocation);
            return self.reject(signer, Rejection::Equivocation);
        }
        if self.by_hash.contains_key(&m.payload_hash) {
            return self.reject(signer, Rejection::PayloadReuse);
        }
        if self.entries.len() >= MAX_COMMIT_DELTAS {
            return self.scores.charge(signer, Rejection::RoundFull);
        }
        self.actions.push_back(Action::FetchPayload {
            payload_hash: m.payload_hash,
            payload_len: m.payload_len,
            signer,
            from,
        });
        self.by_hash.insert(m.payload_hash, signer);
        self.entries.insert(signer, Entry { manifest: m, announced_by: from, verified: false });
    }

    /// No peer served payload `hash`: ask again after a back-off, while it
    /// is still this round's and unverified.
    fn on_unavailable(&mut self, hash: PayloadHash) {
        if self.pending_payload(&hash).is_none() {
            return;
        }
        let now = self.now;
        let e = self.payload_retry.entry(hash).or_insert((0, None));
        e.0 += 1;
        e.1 = Some(now + backoff(PAYLOAD_RETRY_FIRST_MS, PAYLOAD_RETRY_MAX_MS, e.0));
    }

    /// Ask again for what is due: payloads still wanted, and a re-sync's
    /// state still wanted.
    fn retry_due(&mut self) {
        let now = self.now;
        let due: Vec<PayloadHash> = self
            .payload_retry
            .iter()
            .filter(|(_, (_, at))| at.is_some_and(|t| t <= now))
            .map(|(h, _)| *h)
            .collect();
        for hash in due {
            // The failure count stays; the time is set again by the next failure.
            if let Some(e) = self.payload_retry.get_mut(&hash) {
                e.1 = None;
            }
            if let Some((payload_len, signer, from)) = self.pending_payload(&hash) {
                self.actions.push_back(Action::FetchPayload {
                    payload_hash: hash,
                    payload_len,
                    signer,
                    from,
                });
            } else {
                self.payload_retry.remove(&hash);
            }
        }
        if let Some(r) = self.state_retry.as_mut().filter(|r| r.at.is_some_and(|t| t <= now)) {
            r.at = None;
            if r.state == self.base {
                let (round, state, peers) = (r.round, r.state, r.peers.clone());
                self.actions.push_back(Action::Resync { round, state, peers });
            }
        }
    }

    fn on_verified(&mut self, hash: PayloadHash) {
        let signer = self.by_hash.get(&hash).copied();
        match signer.and_then(|s| self.entries.get_mut(&s)) {
            Some(e) if self.phase == Phase::Collecting => e.verified = true,
            _ => return self.scores.charge(self.me, Rejection::UnknownPayload),
        }
        // A majority's commit may have been waiting for this delta.
        self.check_votes(self.round);
    }

    fn on_invalid(&mut self, hash: PayloadHash, from: PublicKey, fault: PayloadFault) {
        match fault {
            PayloadFault::HashMismatch => {
                self.reject(from, Rejection::PayloadHashMismatch);
                // Ask the announcer again, unless it was the one serving bad bytes.
                let retry = self.by_hash.get(&hash).and_then(|s| self.entries.get(s)).and_then(|e| {
                    (!e.verified && e.announced_by != from && self.phase == Phase::Collecting).then_some(
                        Action::FetchPayload {
                            payload_hash: hash,
                            payload_len: e.manifest.payload_len,
                            signer: e.manifest.signer,
                            from: e.announced_by,
                        },
                    )
                });
                self.actions.extend(retry);
            }
            PayloadFault::Undecodable => {
                let Some(signer) = self.by_hash.get(&hash).copied() else {
                    return self.scores.charge(self.me, Rejection::UnknownPayload);
                };
                if self.phase != Phase::Collecting {
                    return;
                }
                self.entries.remove(&signer);
                self.by_hash.remove(&hash);
                self.excluded.insert(signer, Rejection::InvalidPayload);
                self.reject(signer, Rejection::InvalidPayload);
                // A majority that included it cannot be recomputed here now.
                self.check_votes(self.round);
            }
        }
    }

    fn on_local(&mut self, round: u64, base: StateId, hash: PayloadHash, tokens: u64, train_loss: f32) {
        let me = self.me;
        let stale = round != self.round
            || base != self.base
            || self.phase != Phase::Collecting
            || self.entries.contains_key(&me)
            || self.by_hash.contains_key(&hash)
            || tokens == 0
            || !train_loss.is_finite();
        if stale {
            return self.scores.charge(me, Rejection::StaleLocalDelta);
        }
        let codec = self.cfg.codec;
        let manifest = DeltaManifest {
            run: self.cfg.run,
            round,
            base,
            signer: me,
            tokens,
            train_loss,
            codec,
            element_count: self.cfg.element_count,
            payload_len: codec.payload_len(self.cfg.element_count).unwrap_or(0),
            payload_hash: hash,
            signature: Signature::default(),
        }
        .sign(&self.key);
        self.by_hash.insert(hash, me);
        self.entries.insert(me, Entry { manifest: manifest.clone(), announced_by: me, verified: true });
        self.actions.push_back(Action::PublishManifest(manifest));
    }

    /// Re-announce our own manifest signed before a restart (see
    /// `Event::LocalDeltaRestored`); anything else is a stale local delta.
    fn on_restored(&mut self, m: DeltaManifest) {
        let me = self.me;
        let fits = m.signer == me
            && m.verify().is_ok()
            && m.run == self.cfg.run
            && m.round == self.round
            && m.base == self.base
            && m.codec == self.cfg.codec
            && m.element_count == self.cfg.element_count
            && self.phase == Phase::Collecting
            && !self.entries.contains_key(&me)
            && !self.by_hash.contains_key(&m.payload_hash);
        if !fits {
            return self.scores.charge(me, Rejection::StaleLocalDelta);
        }
        self.by_hash.insert(m.payload_hash, me);
        self.entries.insert(me, Entry { manifest: m.clone(), announced_by: me, verified: true });
        self.actions.push_back(Action::PublishManifest(m));
    }

    /// The current round's announced payload `hash`, while it is not yet
    /// verified: (payload length, signer, announcer) — for the node to fetch
    /// it again after a fetch gave up.
    pub fn pending_payload(&self, hash: &PayloadHash) -> Option<(u64, PublicKey, PublicKey)> {
        if self.phase != Phase::Collecting {
            return None;
        }
        let e = self.entries.get(self.by_hash.get(hash)?)?;
        (!e.verified).then_some((e.manifest.payload_len, e.manifest.signer, e.announced_by))
    }

    /// Whether this node has signed a delta for the current round.
    pub fn has_local_delta(&self) -> bool {
        self.entries.contains_key(&self.me)
    }

    /// Close the round when quorum is met and either every live member's
    /// delta is in or the deadline has passed.
    fn maybe_close(&mut self) {
        if self.phase != Phase::Collecting {
            return;
        }
        let ready = self.ready_count();
        if ready < self.cfg.quorum as usize || ready == 0 {
            return;
        }
        let all_in = self
            .members()
            .chain(std::iter::once(&self.me))
            .filter(|p| !self.excluded.contains_key(p))
            .all(|p| self.entries.get(p).is_some_and(|e| e.verified));
        let deadline = self.now >= self.opened_at.saturating_add(self.cfg.deadline_ms);
        if all_in || deadline {
            let hashes: Vec<PayloadHash> =
                self.entries.values().filter(|e| e.verified).map(|e| e.manifest.payload_hash).collect();
            self.close(hashes);
        }
    }

    /// Offer exactly `hashes` (all verified) to aggregation.
    fn close(&mut self, mut hashes: Vec<PayloadHash>) {
        hashes.sort();
        let unfetched: Vec<PublicKey> = self
            .entries
            .iter()
            .filter(|(_, e)| !hashes.contains(&e.manifest.payload_hash))
            .map(|(k, _)| *k)
            .collect();
        for signer in unfetched {
            self.scores.charge(signer, Rejection::Unfetched);
        }
        self.offered = hashes
            .iter()
            .filter_map(|h| {
                let signer = *self.by_hash.get(h)?;
                let e = self.entries.get(&signer)?;
                Some(AcceptedDelta { payload_hash: *h, signer, tokens: e.manifest.tokens })
            })
            .collect();
        self.phase = Phase::Aggregating;
        self.actions.push_back(Action::Aggregate {
            round: self.round,
            base: self.base,
            deltas: self.offered.clone(),
        });
    }

    fn on_aggregated(&mut self, round: u64, mut included: Vec<PayloadHash>, new_state: StateId) {
        if self.phase != Phase::Aggregating || round != self.round {
            return;
        }
        included.sort();
        included.dedup();
        included.retain(|h| self.offered.iter().any(|d| d.payload_hash == *h));
        let refused: Vec<PublicKey> = self
            .offered
            .iter()
            .filter(|d| included.binary_search(&d.payload_hash).is_err())
            .map(|d| d.signer)
            .collect();
        for signer in refused {
            self.reject(signer, Rejection::AggregationRejected);
        }
        let commit = RoundCommit {
            run: self.cfg.run,
            round,
            base: self.base,
            included: included.clone(),
            new_state,
            signer: self.me,
            signature: Signature::default(),
        }
        .sign(&self.key);
        let _ = self.votes.record(round, self.me, Vote { state: new_state, included });
        self.actions.push_back(Action::PublishCommit(commit));
        self.open(round + 1, new_state);
        self.check_votes(round);
    }

    fn on_aggregation_failed(&mut self, round: u64) {
        if self.phase != Phase::Aggregating || round != self.round {
            return;
        }
        for d in std::mem::take(&mut self.offered) {
            self.entries.remove(&d.signer);
            self.by_hash.remove(&d.payload_hash);
            self.excluded.insert(d.signer, Rejection::AggregationRejected);
            self.reject(d.signer, Rejection::AggregationRejected);
        }
        self.phase = Phase::Collecting;
    }

    /// Whether the leader's voters are at least half of an electorate: the
    /// committers counted for the node's last committed round (this round
    /// − 1), or those counted for it and its own rounds up to
    /// `ELECTORATE_ROUNDS` before. A commit for round q then moves the node
    /// only when keys that decided its recent rounds mostly back it: one
    /// admitted key's commit for a far-future round, or for this round with
    /// nothing included, is recorded and held, never acted on alone, and a
    /// node left behind still follows a majority of them forward, however
    /// far. The last round alone lets a node follow its own side of a
    /// partition (the other side's keys are gone from it); the span lets the
    /// side of a healed partition that closed fewer rounds, whose last round
    /// counted only its own half, follow the other half however far ahead
    /// that one went (it committed the rounds before the cut). Where the node
    /// has counted no commits for its last round (the run's first round, the
    /// first round after a cold start) the round's own rule
    /// (`Leader::decides`) stands alone.
    fn electorate_backs(&self, leader: &Leader) -> bool {
        let Some(last) = self.round.checked_sub(1) else { return true };
        let half_of = |electorate: &BTreeSet<PublicKey>| {
            let backing = leader.voters.iter().filter(|v| electorate.contains(v)).count();
            2 * backing >= electorate.len()
        };
        let last_round = self.votes.voters(last);
        if last_round.is_empty() || half_of(&last_round) {
            return true;
        }
        let mut span = last_round;
        span.extend(self.votes.earlier_committers(last));
        half_of(&span)
    }

    fn on_commit(&mut self, from: PublicKey, c: RoundCommit) {
        let valid_sig = c.verify().is_ok();
        if !self.screen(from, c.signer, c.run, valid_sig) {
            return;
        }
        if !self.admission.policy().counts_commits_of(&c.signer) {
            // Admitted to train, but only the operators' commits decide.
            return self.scores.charge(c.signer, Rejection::NotCommitter);
        }
        if c.round.saturating_add(1) < self.round {
            return self.reject(c.signer, Rejection::Replay);
        }
        let vote = Vote { state: c.new_state, included: c.included };
        match self.votes.record(c.round, c.signer, vote) {
            Ok(()) => self.check_votes(c.round),
            Err(reason) => self.reject(c.signer, reason),
        }
    }

    /// The re-sync rule: a StateId reported for round q by at least `quorum`
    /// committers who are at least half of q's committers wins; a tie goes
    /// to the smaller StateId (`Votes::leader`), so two halves of a healed
    /// partition that closed the same round apart end on one state. It must
    /// also be backed by the electorate (`electorate_backs`), so no minority
    /// of keys moves the node, whatever round they name.
    fn check_votes(&mut self, q: u64) {
        let Some(leader) = self.votes.leader(q) else { return };
        if !leader.decides(self.cfg.quorum as usize) || !self.electorate_backs(&leader) {
            return;
        }
        let next = q.saturating_add(1);
        if next == self.round && leader.state == self.base {
            return;
        }
        if q == self.round {
            if self.phase == Phase::Aggregating {
                // Our own result decides first; votes are re-checked after it.
                return;
            }
            let have_all = leader
                .included
                .iter()
                .all(|h| self.by_hash.get(h).and_then(|s| self.entries.get(s)).is_some_and(|e| e.verified));
            if have_all && !leader.included.is_empty() {
                // Recompute the majority's result from the same deltas.
                return self.close(leader.included);
            }
            let fetching = !leader.included.is_empty()
                && leader
                    .included
                    .iter()
                    .all(|h| self.by_hash.get(h).is_some_and(|s| !self.excluded.contains_key(s)));
            if fetching {
                // Every delta it included is announced and on its way here:
                // wait for them (each arrival re-checks the votes) rather
                // than fetch the whole state, which is several times larger
                // than the deltas on a slow link. The deadline still closes
                // the round, and a result that differs then re-syncs.
                return;
            }
        }
        if next < self.round {
            return;
        }
        self.state_retry = Some(StateRetry {
            round: next,
            state: leader.state,
            peers: leader.voters.clone(),
            tries: 0,
            at: None,
        });
        self.actions.push_back(Action::Resync { round: next, state: leader.state, peers: leader.voters });
        self.open(next, leader.state);
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod trust_tests;
