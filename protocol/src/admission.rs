//! Who is admitted right now: the RunSpec's policy plus the holders of the
//! tickets seen so far, each until its ticket expires. Bounded (at most
//! `MAX_ADMITTED` holders) and clock-agnostic: the caller's `now` is in
//! milliseconds of whatever monotonic clock it uses (the round machine's),
//! and each ticket is checked against the wall clock given with it.

use crate::hash::RunId;
use crate::identity::PublicKey;
use crate::spec::AdmissionPolicy;
use crate::ticket::{Ticket, TicketError};
use std::collections::BTreeMap;
use thiserror::Error;

/// Most ticket holders remembered at once.
pub const MAX_ADMITTED: usize = 65_536;

/// Why a presented ticket admitted nobody.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TicketRefused {
    #[error(transparent)]
    Ticket(#[from] TicketError),
    #[error("the run does not admit by ticket")]
    NoTickets,
    #[error("too many ticket holders are admitted already")]
    Full,
}

/// The run's admission policy and the ticket holders admitted under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    run: RunId,
    policy: AdmissionPolicy,
    /// Holder → the caller's `now` at which its ticket expires.
    holders: BTreeMap<PublicKey, u64>,
    /// No holder expires before this (u64::MAX when there are none).
    earliest: u64,
}

impl Admission {
    pub fn new(run: RunId, policy: AdmissionPolicy) -> Self {
        Self { run, policy, holders: BTreeMap::new(), earliest: u64::MAX }
    }

    pub fn policy(&self) -> &AdmissionPolicy {
        &self.policy
    }

    /// Whether `key` is admitted at `now`: by the policy alone (operators,
    /// allowlist, open runs) or by a ticket that has not expired.
    pub fn admits(&self, key: &PublicKey, now: u64) -> bool {
        self.policy.admits(key) || self.holders.get(key).is_some_and(|&until| until > now)
    }

    /// Whether `key` is admitted and its commits count when deciding a state.
    pub fn counts_commits_of(&self, key: &PublicKey, now: u64) -> bool {
        self.admits(key, now) && self.policy.counts_commits_of(key)
    }

    /// Check `ticket` (operator signature, run, expiry against `unix_secs`,
    /// the wall clock now) and admit its holder until it expires, measured
    /// on the caller's clock from `now`. A later expiry extends an earlier
    /// one; an earlier one never shortens it. Returns the holder.
    pub fn present(&mut self, ticket: &Ticket, unix_secs: u64, now: u64) -> Result<PublicKey, TicketRefused> {
        if !self.policy.uses_tickets() {
            return Err(TicketRefused::NoTickets);
        }
        ticket.check(&self.run, self.policy.operators(), unix_secs)?;
        let left_ms = ticket.expires.saturating_sub(unix_secs).saturating_mul(1000);
        let until = now.saturating_add(left_ms);
        if !self.holders.contains_key(&ticket.holder) && self.holders.len() >= MAX_ADMITTED {
            self.prune(now);
            if self.holders.len() >= MAX_ADMITTED {
                return Err(TicketRefused::Full);
            }
        }
        let e = self.holders.entry(ticket.holder).or_insert(until);
        *e = (*e).max(until);
        self.earliest = self.earliest.min(*e);
        Ok(ticket.holder)
    }

    /// Forget holders whose tickets expired by `now`.
    pub fn prune(&mut self, now: u64) {
        self.holders.retain(|_, until| *until > now);
        self.earliest = self.holders.values().min().copied().unwrap_or(u64::MAX);
    }

    /// No holder's ticket expires before this (to prune at), if any is held.
    pub fn next_expiry(&self) -> Option<u64> {
        (self.earliest != u64::MAX).then_some(self.earliest)
    }

    /// Ticket holders admitted at `now`.
    pub fn holders(&self, now: u64) -> impl Iterator<Item = &PublicKey> {
        self.holders.iter().filter(move |(_, until)| **until > now).map(|(k, _)| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::NodeKey;

    const RUN: RunId = RunId([1; 32]);

    fn op() -> NodeKey {
        NodeKey::from_seed([0x0f; 32])
    }

    fn admission() -> Admission {
        Admission::new(RUN, AdmissionPolicy::Tickets { operators: vec![op().public()] })
    }

    #[test]
    fn tickets_admit_their_holder_until_they_expire() {
        let mut a = admission();
        let holder = PublicKey([2; 32]);
        assert!(a.admits(&op().public(), 0), "operators need no ticket");
        assert!(!a.admits(&holder, 0));
        // Wall clock 1000 s, machine clock 5 s: 100 s left → until 105 s.
        let t = Ticket::issue(&op(), RUN, holder, 1_100);
        assert_eq!(a.present(&t, 1_000, 5_000), Ok(holder));
        assert!(a.admits(&holder, 104_999));
        assert!(!a.admits(&holder, 105_000));
        // An earlier expiry never shortens; a later one extends.
        let short = Ticket::issue(&op(), RUN, holder, 1_001);
        assert_eq!(a.present(&short, 1_000, 5_000), Ok(holder));
        assert!(a.admits(&holder, 104_999));
        assert_eq!(a.next_expiry(), Some(105_000));
        a.prune(105_000);
        assert_eq!(a.holders(0).count(), 0);
    }

    #[test]
    fn bad_tickets_admit_nobody() {
        let mut a = admission();
        let holder = PublicKey([2; 32]);
        let other_op = NodeKey::from_seed([3; 32]);
        let cases = [
            (Ticket::issue(&other_op, RUN, holder, 2_000), TicketError::UnknownOperator),
            (Ticket::issue(&op(), RunId([9; 32]), holder, 2_000), TicketError::WrongRun),
            (Ticket::issue(&op(), RUN, holder, 1_000), TicketError::Expired { expires: 1_000, now: 1_000 }),
        ];
        for (t, why) in cases {
            assert_eq!(a.present(&t, 1_000, 0), Err(TicketRefused::Ticket(why)));
        }
        let mut forged = Ticket::issue(&op(), RUN, holder, 2_000);
        forged.holder = PublicKey([4; 32]);
        assert_eq!(a.present(&forged, 1_000, 0), Err(TicketRefused::Ticket(TicketError::BadSignature)));
        assert!(!a.admits(&holder, 0) && !a.admits(&PublicKey([4; 32]), 0));
        let mut open = Admission::new(RUN, AdmissionPolicy::Open);
        assert_eq!(
            open.present(&Ticket::issue(&op(), RUN, holder, 2_000), 0, 0),
            Err(TicketRefused::NoTickets)
        );
    }

    #[test]
    fn holders_are_bounded() {
        let mut a = admission();
        let k = op();
        for i in 0..MAX_ADMITTED as u32 {
            let mut h = [0u8; 32];
            h[..4].copy_from_slice(&i.to_le_bytes());
            a.holders.insert(PublicKey(h), 10);
        }
        a.earliest = 10;
        let t = Ticket::issue(&k, RUN, PublicKey([0xff; 32]), 2_000);
        assert_eq!(a.present(&t, 1_000, 0), Err(TicketRefused::Full));
        // Once the others expired there is room again.
        assert_eq!(a.present(&t, 1_000, 10), Ok(PublicKey([0xff; 32])));
        assert_eq!(a.holders(10).count(), 1);
    }

    #[test]
    fn open_runs_with_operators_count_only_operator_commits() {
        let a = Admission::new(RUN, AdmissionPolicy::OpenWithOperators { operators: vec![op().public()] });
        assert!(a.admits(&PublicKey([2; 32]), 0));
        assert!(!a.counts_commits_of(&PublicKey([2; 32]), 0));
        assert!(a.counts_commits_of(&op().public(), 0));
    }
}
