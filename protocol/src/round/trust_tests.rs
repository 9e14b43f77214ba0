//! Unit tests of the trust rule while a node runs: one admitted key, or any
//! minority of the committers of the node's last round, never moves it —
//! not with a commit for a round far ahead, nor with an empty commit for the
//! current round — in open and ticket runs alike; a majority of them still
//! moves a node left behind forward, however far.
//!
//! Every test here but the last fails before the electorate rule
//! (`RoundMachine::electorate_backs`): at quorum 1 the single commit decided
//! its round, the node re-synced to the attacker's state at the attacker's
//! round, and the honest commits of its own round were then refused as
//! `Replay`.

use super::admission_tests::{operator, ticket, WALL};
use super::tests::{commit, drain, genesis, key, rejects};
use super::*;

fn cfg(admission: AdmissionPolicy) -> RoundConfig {
    // Quorum 1: the default of a run.
    RoundConfig { quorum: 1, ..super::admission_tests::cfg(admission) }
}

fn state(i: u8) -> StateId {
    StateId([i; 32])
}

fn send(
    m: &mut RoundMachine,
    now: u64,
    signer: u8,
    round: u64,
    new_state: StateId,
    included: Vec<PayloadHash>,
) {
    let k = key(signer);
    let c = commit(&k, round, genesis(), included, new_state);
    m.handle(now, Event::CommitReceived { from: k.public(), commit: c });
}

/// A node (key 1) that followed keys 2–5 from round 0 to round 1 (state 0x21):
/// its electorate is {2, 3, 4, 5}. In a ticket run each holds a ticket.
fn at_round_one(admission: AdmissionPolicy) -> RoundMachine {
    let tickets = matches!(admission, AdmissionPolicy::Tickets { .. });
    let mut m = RoundMachine::new(cfg(admission), key(1), 0, genesis(), 0);
    drain(&mut m);
    for i in 2..=5u8 {
        if tickets {
            let t = ticket(&key(i), 3600);
            m.handle(1, Event::TicketPresented { from: key(i).public(), ticket: t, unix_secs: WALL });
        }
        send(&mut m, 2, i, 0, state(0x21), vec![]);
    }
    let actions = drain(&mut m);
    assert!(matches!(actions.first(), Some(Action::Resync { round: 1, .. })), "{actions:?}");
    assert_eq!((m.round(), m.base()), (1, state(0x21)));
    m
}

fn resyncs(actions: &[Action]) -> Vec<(u64, StateId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Resync { round, state, .. } => Some((*round, *state)),
            _ => None,
        })
        .collect()
}

/// After an attack, the honest keys 3, 4, 5 commit round 1: the node follows
/// them to round 2 and refuses none of them.
fn honest_round_one_still_decides(m: &mut RoundMachine) {
    for i in 3..=5u8 {
        send(m, 20, i, 1, state(0x31), vec![]);
    }
    let actions = drain(m);
    assert!(rejects(&actions).is_empty(), "honest commits refused: {actions:?}");
    assert_eq!(resyncs(&actions), vec![(2, state(0x31))]);
    assert_eq!((m.round(), m.base()), (2, state(0x31)));
}

#[test]
fn one_admitted_keys_far_future_commit_moves_no_node() {
    for ahead in [5u64, 1_000_000] {
        let mut m = at_round_one(AdmissionPolicy::Open);
        send(&mut m, 10, 2, 1 + ahead, state(0x66), vec![]);
        let actions = drain(&mut m);
        assert!(resyncs(&actions).is_empty(), "{ahead} rounds ahead: {actions:?}");
        assert_eq!((m.round(), m.base()), (1, state(0x21)), "{ahead} rounds ahead");
        honest_round_one_still_decides(&mut m);
    }
}

#[test]
fn one_ticket_holders_far_future_commit_moves_no_node() {
    let mut m = at_round_one(AdmissionPolicy::Tickets { operators: vec![operator().public()] });
    assert!(m.admits(&key(2).public()));
    send(&mut m, 10, 2, 1_000_000, state(0x66), vec![]);
    assert!(resyncs(&drain(&mut m)).is_empty());
    assert_eq!(m.round(), 1);
    honest_round_one_still_decides(&mut m);
}

#[test]
fn an_empty_commit_for_the_current_round_sent_first_moves_no_node() {
    let mut m = at_round_one(AdmissionPolicy::Open);
    send(&mut m, 10, 2, 1, state(0x66), vec![]);
    assert!(resyncs(&drain(&mut m)).is_empty());
    assert_eq!((m.round(), m.base()), (1, state(0x21)));
    // The honest three outvote it in its own round.
    honest_round_one_still_decides(&mut m);
}

#[test]
fn a_node_left_behind_follows_a_majority_of_its_electorate_however_far() {
    let mut m = at_round_one(AdmissionPolicy::Open);
    for i in 3..=5u8 {
        send(&mut m, 10, i, 5_000, state(0x77), vec![]);
    }
    assert_eq!(resyncs(&drain(&mut m)), vec![(5_001, state(0x77))]);
    assert_eq!((m.round(), m.base()), (5_001, state(0x77)));
}

/// A node (key 1) that closed round 0 with keys 2–7, then `apart` rounds
/// with keys 2, 3, 4 only (its side of a partition).
fn on_one_side_of_a_partition(apart: u64) -> RoundMachine {
    let mut m = RoundMachine::new(cfg(AdmissionPolicy::Open), key(1), 0, genesis(), 0);
    drain(&mut m);
    for i in 2..=7u8 {
        send(&mut m, 1, i, 0, state(0x21), vec![]);
    }
    for q in 1..=apart {
        for i in 2..=4u8 {
            send(&mut m, 1 + q, i, q, state(0x40 + q as u8), vec![]);
        }
    }
    drain(&mut m);
    assert_eq!(m.round(), apart + 1);
    m
}

#[test]
fn the_side_of_a_healed_partition_that_closed_fewer_rounds_follows_the_other_half() {
    // The other half (5, 6, 7) closed rounds much faster: its commits name
    // round 40 while this node is at round 4. Its last round counted only
    // 2, 3, 4, but 5, 6, 7 committed round 0, within ELECTORATE_ROUNDS: the
    // electorate is {2, …, 7}, and three of six back the state.
    let mut m = on_one_side_of_a_partition(3);
    for i in 5..=7u8 {
        send(&mut m, 100, i, 40, state(0x99), vec![]);
    }
    assert_eq!(resyncs(&drain(&mut m)), vec![(41, state(0x99))]);
    // Two of the six do not.
    let mut m = on_one_side_of_a_partition(3);
    for i in 5..=6u8 {
        send(&mut m, 100, i, 40, state(0x99), vec![]);
    }
    assert!(resyncs(&drain(&mut m)).is_empty());
    assert_eq!(m.round(), 4);
}

#[test]
fn committers_seen_more_than_electorate_rounds_ago_are_out_of_the_electorate() {
    let apart = ELECTORATE_ROUNDS + 1;
    let mut m = on_one_side_of_a_partition(apart);
    for i in 5..=7u8 {
        send(&mut m, 100, i, 400, state(0x99), vec![]);
    }
    assert!(resyncs(&drain(&mut m)).is_empty());
    assert_eq!(m.round(), apart + 1);
}

#[test]
fn during_a_partition_a_node_follows_a_majority_of_its_own_sides_last_round() {
    // Keys 5, 6, 7 are cut off: keys 2 and 3 commit round 4, two of the
    // three committers of the node's last round (though two of six of the
    // span's).
    let mut m = on_one_side_of_a_partition(3);
    for i in 2..=3u8 {
        send(&mut m, 100, i, 4, state(0x99), vec![]);
    }
    assert_eq!(resyncs(&drain(&mut m)), vec![(5, state(0x99))]);
}
