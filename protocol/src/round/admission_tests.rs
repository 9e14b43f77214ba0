//! Unit tests of the round machine's admission: tickets presented, members
//! admitted when their ticket arrives, expiry, outsiders' manifests and
//! commits refused, and operators' commits deciding in open runs.

use super::tests::{drain, genesis, key, manifest, rejects, DEADLINE, N};
use super::*;

/// The node's wall clock (unix seconds) when its machine clock is 0.
pub(super) const WALL: u64 = 1_700_000_000;

pub(super) fn operator() -> NodeKey {
    key(100)
}

pub(super) fn cfg(admission: AdmissionPolicy) -> RoundConfig {
    RoundConfig {
        run: RunId([0xAA; 32]),
        codec: Codec::F32,
        element_count: N,
        quorum: 2,
        deadline_ms: DEADLINE,
        admission,
    }
}

fn tickets() -> AdmissionPolicy {
    AdmissionPolicy::Tickets { operators: vec![operator().public()] }
}

fn commit(k: &NodeKey, round: u64, new_state: StateId) -> RoundCommit {
    super::tests::commit(k, round, genesis(), vec![], new_state)
}

/// A ticket for `holder` in the test run, `secs` past `WALL`.
pub(super) fn ticket(holder: &NodeKey, secs: u64) -> Ticket {
    Ticket::issue(&operator(), RunId([0xAA; 32]), holder.public(), WALL + secs)
}

fn machine(admission: AdmissionPolicy) -> RoundMachine {
    let mut m = RoundMachine::new(cfg(admission), key(1), 0, genesis(), 0);
    drain(&mut m);
    m
}

fn fetches(actions: &[Action]) -> usize {
    actions.iter().filter(|a| matches!(a, Action::FetchPayload { .. })).count()
}

#[test]
fn without_a_ticket_nothing_counts_and_with_one_it_does() {
    let mut m = machine(tickets());
    let b = key(2);
    m.handle(1, Event::PeerJoined { peer: b.public() });
    assert_eq!(m.members().count(), 0, "joined without a ticket: not a member");
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 1) });
    m.handle(1, Event::CommitReceived { from: b.public(), commit: commit(&b, 0, StateId([5; 32])) });
    let actions = drain(&mut m);
    assert_eq!(fetches(&actions), 0);
    assert_eq!(rejects(&actions), vec![(b.public(), Rejection::NotAdmitted); 2]);
    // The ticket arrives (relayed by someone else): b becomes a member and counts.
    m.handle(2, Event::TicketPresented { from: key(9).public(), ticket: ticket(&b, 3600), unix_secs: WALL });
    assert!(m.admits(&b.public()));
    assert_eq!(m.members().copied().collect::<Vec<_>>(), vec![b.public()]);
    m.handle(3, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 1) });
    let actions = drain(&mut m);
    assert_eq!((fetches(&actions), rejects(&actions).len()), (1, 0));
}

#[test]
fn operators_are_admitted_without_a_ticket() {
    let mut m = machine(tickets());
    let op = operator();
    m.handle(1, Event::PeerJoined { peer: op.public() });
    assert_eq!(m.members().count(), 1);
    m.handle(1, Event::ManifestReceived { from: op.public(), manifest: manifest(&op, 0, genesis(), 1) });
    assert_eq!(fetches(&drain(&mut m)), 1);
}

#[test]
fn an_expired_ticket_stops_admitting_its_holder() {
    let mut m = machine(tickets());
    let b = key(2);
    m.handle(0, Event::PeerJoined { peer: b.public() });
    // Presented 10 s after start with 5 s left: admitted until machine time 15 s.
    m.handle(
        10_000,
        Event::TicketPresented { from: b.public(), ticket: ticket(&b, 15), unix_secs: WALL + 10 },
    );
    assert!(m.admits(&b.public()) && m.members().count() == 1);
    m.handle(15_000, Event::TimerFired);
    assert!(!m.admits(&b.public()));
    assert_eq!(m.members().count(), 0, "an expired holder no longer holds the round");
    m.handle(15_001, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 1) });
    assert_eq!(rejects(&drain(&mut m)), vec![(b.public(), Rejection::NotAdmitted)]);
    // A ticket already expired by the node's clock admits nobody (counted, not charged).
    m.handle(
        16_000,
        Event::TicketPresented { from: b.public(), ticket: ticket(&b, 15), unix_secs: WALL + 16 },
    );
    assert!(rejects(&drain(&mut m)).is_empty());
    assert_eq!(m.scores().count(Rejection::ExpiredTicket), 1);
    assert!(!m.admits(&b.public()));
}

#[test]
fn bad_tickets_are_charged_to_whoever_presented_them() {
    let mut m = machine(tickets());
    let (b, relay) = (key(2), key(3));
    let stranger = key(50);
    let mut forged = ticket(&b, 3600);
    forged.expires += 1;
    let cases = [
        (forged, Rejection::BadSignature),
        (Ticket::issue(&stranger, RunId([0xAA; 32]), b.public(), WALL + 3600), Rejection::NotAdmitted),
        (Ticket::issue(&operator(), RunId([0xBB; 32]), b.public(), WALL + 3600), Rejection::WrongRun),
    ];
    for (t, why) in cases {
        m.handle(1, Event::TicketPresented { from: relay.public(), ticket: t, unix_secs: WALL });
        assert_eq!(rejects(&drain(&mut m)), vec![(relay.public(), why)]);
        assert!(!m.admits(&b.public()));
    }
    // In a run that does not use tickets, a ticket admits nobody.
    let mut m = machine(AdmissionPolicy::Allowlist(vec![key(1).public()]));
    m.handle(1, Event::TicketPresented { from: relay.public(), ticket: ticket(&b, 3600), unix_secs: WALL });
    assert_eq!(rejects(&drain(&mut m)), vec![(relay.public(), Rejection::NotAdmitted)]);
    assert!(!m.admits(&b.public()));
}

#[test]
fn outsiders_cannot_outvote_admitted_committers() {
    let mut m = machine(tickets());
    let fake = StateId([0x66; 32]);
    for i in 10..20u8 {
        let k = key(i);
        m.handle(1, Event::CommitReceived { from: k.public(), commit: commit(&k, 0, fake) });
    }
    let actions = drain(&mut m);
    assert!(!actions.iter().any(|a| matches!(a, Action::Resync { .. })), "{actions:?}");
    assert_eq!(rejects(&actions).len(), 10);
    assert_eq!((m.round(), m.base()), (0, genesis()));
    // Two ticket holders agreeing are a majority of the admitted committers.
    for i in [2u8, 3] {
        let k = key(i);
        m.handle(2, Event::TicketPresented { from: k.public(), ticket: ticket(&k, 3600), unix_secs: WALL });
        m.handle(2, Event::CommitReceived { from: k.public(), commit: commit(&k, 0, StateId([0x77; 32])) });
    }
    let actions = drain(&mut m);
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Resync { state, .. } if *state == StateId([0x77; 32]))));
}

#[test]
fn an_open_run_with_operators_counts_only_their_commits() {
    let ops = {
        let mut v = vec![operator().public(), key(101).public()];
        v.sort();
        v
    };
    let mut m = machine(AdmissionPolicy::OpenWithOperators { operators: ops });
    // Anyone's delta is taken.
    let b = key(2);
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 1) });
    assert_eq!(fetches(&drain(&mut m)), 1);
    // Ten free identities' commits are counted, not charged, and move nothing.
    let fake = StateId([0x66; 32]);
    for i in 10..20u8 {
        let k = key(i);
        m.handle(1, Event::CommitReceived { from: k.public(), commit: commit(&k, 0, fake) });
    }
    let actions = drain(&mut m);
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(m.scores().count(Rejection::NotCommitter), 10);
    // The two operators agreeing decide.
    let good = StateId([0x77; 32]);
    for k in [operator(), key(101)] {
        m.handle(2, Event::CommitReceived { from: k.public(), commit: commit(&k, 0, good) });
    }
    let actions = drain(&mut m);
    assert!(
        actions.iter().any(|a| matches!(a, Action::Resync { state, .. } if *state == good)),
        "{actions:?}"
    );
}
