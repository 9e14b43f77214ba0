//! Why the round machine refused something, what each refusal costs the peer
//! charged with it, and the scoreboard that counts them.

use crate::identity::PublicKey;
use std::collections::BTreeMap;

/// Most peers the scoreboard tracks individually; beyond it, refusals are
/// still counted globally but new peers get no individual score.
pub const MAX_SCORED_PEERS: usize = 65_536;

/// A typed reason for refusing a message or a delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rejection {
    /// The signature does not verify (charged to the peer that delivered it).
    BadSignature,
    /// The signer is not admitted by the run's admission policy.
    NotAdmitted,
    /// The message names another run.
    WrongRun,
    /// A message for a round older than the previous one.
    Replay,
    /// A delta for a round that has already closed (staleness rule).
    Late,
    /// A message for a round this node has not reached.
    FutureRound,
    /// A delta trained from a different base state.
    WrongBase,
    /// A delta encoded with a codec other than the run's.
    WrongCodec,
    /// A delta whose element count is not the model's.
    WrongShape,
    /// A delta claiming zero tokens.
    ZeroTokens,
    /// The same manifest or commit again (a no-op).
    Duplicate,
    /// Two different deltas from one signer in one round: both rejected.
    Equivocation,
    /// A payload hash already announced by another signer.
    PayloadReuse,
    /// The payload matches its hash but is not a valid delta (signer's fault).
    InvalidPayload,
    /// A peer served bytes that do not match the requested hash.
    PayloadHashMismatch,
    /// The round already tracks the most deltas or votes it may.
    RoundFull,
    /// Two different commits from one signer for one round.
    CommitEquivocation,
    /// A delta the aggregation step refused (e.g. non-finite values).
    AggregationRejected,
    /// An accepted delta whose payload was not verified when the round closed.
    Unfetched,
    /// A verification report for a payload this round does not track.
    UnknownPayload,
    /// Our own delta arrived for a round or base we have since left.
    StaleLocalDelta,
    /// A ticket that expired by this node's clock (clocks differ a little,
    /// so it is only counted).
    ExpiredTicket,
    /// A commit from an admitted signer whose commits the run does not
    /// count (an open run with operators counts only theirs): only counted.
    NotCommitter,
}

impl Rejection {
    /// What the refusal costs the charged peer's score. Zero-cost reasons
    /// are ordinary network noise (late or early gossip) and are only counted.
    pub fn penalty(self) -> u64 {
        use Rejection::*;
        match self {
            Late | FutureRound | Duplicate | RoundFull | Unfetched | UnknownPayload | StaleLocalDelta
            | ExpiredTicket | NotCommitter => 0,
            Replay | WrongBase => 1,
            WrongRun => 5,
            NotAdmitted | ZeroTokens => 10,
            WrongCodec | WrongShape => 20,
            PayloadHashMismatch | AggregationRejected => 50,
            BadSignature | PayloadReuse | InvalidPayload => 100,
            Equivocation | CommitEquivocation => 1000,
        }
    }
}

/// One peer's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerScore {
    /// Sum of penalties charged.
    pub penalty: u64,
    /// Number of refusals charged (including zero-cost ones).
    pub rejections: u64,
    /// Whether the peer ever equivocated.
    pub equivocated: bool,
}

/// Per-reason counts and per-peer scores.
#[derive(Debug, Clone, Default)]
pub struct Scoreboard {
    counts: BTreeMap<Rejection, u64>,
    peers: BTreeMap<PublicKey, PeerScore>,
}

impl Scoreboard {
    /// Count `reason` and charge it to `peer`.
    pub fn charge(&mut self, peer: PublicKey, reason: Rejection) {
        *self.counts.entry(reason).or_insert(0) += 1;
        let tracked = self.peers.contains_key(&peer) || self.peers.len() < MAX_SCORED_PEERS;
        if tracked {
            let s = self.peers.entry(peer).or_default();
            s.penalty = s.penalty.saturating_add(reason.penalty());
            s.rejections += 1;
            s.equivocated |= matches!(reason, Rejection::Equivocation | Rejection::CommitEquivocation);
        }
    }

    /// How many times `reason` was counted.
    pub fn count(&self, reason: Rejection) -> u64 {
        self.counts.get(&reason).copied().unwrap_or(0)
    }

    /// All non-zero counts.
    pub fn counts(&self) -> impl Iterator<Item = (Rejection, u64)> + '_ {
        self.counts.iter().map(|(r, c)| (*r, *c))
    }

    /// The score of `peer` (default when never charged).
    pub fn peer(&self, peer: &PublicKey) -> PeerScore {
        self.peers.get(peer).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_accumulate() {
        let mut s = Scoreboard::default();
        let p = PublicKey([1; 32]);
        s.charge(p, Rejection::BadSignature);
        s.charge(p, Rejection::Duplicate);
        s.charge(p, Rejection::Equivocation);
        assert_eq!(s.peer(&p), PeerScore { penalty: 1100, rejections: 3, equivocated: true });
        assert_eq!(s.count(Rejection::Duplicate), 1);
        assert_eq!(s.peer(&PublicKey([2; 32])), PeerScore::default());
        assert_eq!(s.counts().count(), 3);
    }
}
