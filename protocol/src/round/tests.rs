//! Unit tests of every round-machine behaviour, driven by a fake clock
//! (plain u64 milliseconds).

use super::*;
use crate::hash::PayloadHash;

pub(super) const N: u64 = 10;
pub(super) const DEADLINE: u64 = 1000;

pub(super) fn key(i: u8) -> NodeKey {
    NodeKey::from_seed([i; 32])
}

fn cfg() -> RoundConfig {
    RoundConfig {
        run: RunId([0xAA; 32]),
        codec: Codec::F32,
        element_count: N,
        quorum: 2,
        deadline_ms: DEADLINE,
        admission: AdmissionPolicy::Open,
    }
}

pub(super) fn genesis() -> StateId {
    StateId([0x11; 32])
}

fn hash(i: u8) -> PayloadHash {
    PayloadHash([i; 32])
}

pub(super) fn manifest(k: &NodeKey, round: u64, base: StateId, h: u8) -> DeltaManifest {
    DeltaManifest {
        run: cfg().run,
        round,
        base,
        signer: k.public(),
        tokens: 1000,
        train_loss: 2.5,
        codec: Codec::F32,
        element_count: N,
        payload_len: Codec::F32.payload_len(N).unwrap_or(0),
        payload_hash: hash(h),
        signature: Signature::default(),
    }
    .sign(k)
}

pub(super) fn commit(
    k: &NodeKey,
    round: u64,
    base: StateId,
    included: Vec<PayloadHash>,
    new_state: StateId,
) -> RoundCommit {
    RoundCommit {
        run: cfg().run,
        round,
        base,
        included,
        new_state,
        signer: k.public(),
        signature: Signature::default(),
    }
    .sign(k)
}

fn machine() -> RoundMachine {
    let mut m = RoundMachine::new(cfg(), key(1), 0, genesis(), 0);
    drain(&mut m);
    m
}

pub(super) fn drain(m: &mut RoundMachine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn local(m: &mut RoundMachine, now: u64, h: u8) {
    let (round, base) = (m.round(), m.base());
    m.handle(
        now,
        Event::LocalDeltaReady { round, base, payload_hash: hash(h), tokens: 500, train_loss: 2.0 },
    );
}

/// Peer `i` announces delta `h` for the current round and it verifies.
fn peer_delta(m: &mut RoundMachine, now: u64, i: u8, h: u8) {
    let (round, base) = (m.round(), m.base());
    let k = key(i);
    m.handle(now, Event::ManifestReceived { from: k.public(), manifest: manifest(&k, round, base, h) });
    m.handle(now, Event::PayloadVerified { payload_hash: hash(h) });
}

fn aggregate_of(actions: &[Action]) -> Option<Vec<PayloadHash>> {
    actions.iter().find_map(|a| match a {
        Action::Aggregate { deltas, .. } => Some(deltas.iter().map(|d| d.payload_hash).collect()),
        _ => None,
    })
}

pub(super) fn rejects(actions: &[Action]) -> Vec<(PublicKey, Rejection)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Reject { peer, reason } => Some((*peer, *reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn opens_the_first_round_with_a_deadline() {
    let mut m = RoundMachine::new(cfg(), key(1), 5, genesis(), 100);
    assert_eq!(drain(&mut m), vec![Action::RoundOpened { round: 5, base: genesis() }]);
    assert_eq!(m.next_timeout(), Some(100 + DEADLINE));
    assert_eq!(m.phase(), Phase::Collecting);
}

#[test]
fn local_delta_is_signed_and_published() {
    let mut m = machine();
    local(&mut m, 1, 9);
    let actions = drain(&mut m);
    let Some(Action::PublishManifest(man)) = actions.first() else { panic!("no manifest: {actions:?}") };
    assert_eq!(man.verify(), Ok(()));
    assert_eq!((man.round, man.base, man.payload_hash, man.signer), (0, genesis(), hash(9), key(1).public()));
    assert_eq!(DeltaManifest::decode(&man.encode()).as_ref(), Ok(man));
    // A second local delta in the same round is never published (no self-equivocation).
    local(&mut m, 2, 10);
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.scores().count(Rejection::StaleLocalDelta), 1);
}

#[test]
fn manifest_triggers_a_fetch_from_its_announcer() {
    let mut m = machine();
    let (b, relay) = (key(2), key(7));
    m.handle(1, Event::ManifestReceived { from: relay.public(), manifest: manifest(&b, 0, genesis(), 5) });
    let payload_len = Codec::F32.payload_len(N).unwrap_or(0);
    assert_eq!(
        drain(&mut m),
        vec![Action::FetchPayload {
            payload_hash: hash(5),
            payload_len,
            signer: b.public(),
            from: relay.public()
        }]
    );
}

#[test]
fn closes_early_when_every_live_member_is_in() {
    let mut m = machine();
    m.handle(0, Event::PeerJoined { peer: key(2).public() });
    m.handle(0, Event::PeerJoined { peer: key(3).public() });
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    assert_eq!(aggregate_of(&drain(&mut m)), None);
    peer_delta(&mut m, 3, 3, 10);
    let agg = aggregate_of(&drain(&mut m));
    assert_eq!(agg, Some(vec![hash(10), hash(20), hash(30)]), "sorted by payload hash");
    assert_eq!(m.phase(), Phase::Aggregating);
    assert_eq!(m.next_timeout(), None);
}

#[test]
fn waits_for_missing_members_until_the_deadline() {
    let mut m = machine();
    for i in [2, 3] {
        m.handle(0, Event::PeerJoined { peer: key(i).public() });
    }
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    let c = key(3);
    m.handle(3, Event::ManifestReceived { from: c.public(), manifest: manifest(&c, 0, genesis(), 40) });
    drain(&mut m);
    m.handle(DEADLINE - 1, Event::TimerFired);
    assert_eq!(aggregate_of(&drain(&mut m)), None);
    m.handle(DEADLINE, Event::TimerFired);
    assert_eq!(aggregate_of(&drain(&mut m)), Some(vec![hash(20), hash(30)]));
    assert_eq!(m.scores().count(Rejection::Unfetched), 1);
}

#[test]
fn deadline_without_quorum_keeps_waiting() {
    let mut m = machine();
    local(&mut m, 1, 30);
    m.handle(DEADLINE * 3, Event::TimerFired);
    assert_eq!(aggregate_of(&drain(&mut m)), None);
    assert_eq!(m.next_timeout(), None, "the deadline has passed; only quorum is awaited");
    peer_delta(&mut m, DEADLINE * 4, 2, 20);
    assert_eq!(aggregate_of(&drain(&mut m)), Some(vec![hash(20), hash(30)]));
}

#[test]
fn a_leaving_member_no_longer_holds_the_round() {
    let mut m = machine();
    for i in [2, 3] {
        m.handle(0, Event::PeerJoined { peer: key(i).public() });
    }
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    drain(&mut m);
    m.handle(5, Event::PeerLeft { peer: key(3).public() });
    assert_eq!(aggregate_of(&drain(&mut m)), Some(vec![hash(20), hash(30)]));
}

#[test]
fn duplicate_manifest_is_a_no_op() {
    let mut m = machine();
    let b = key(2);
    let man = manifest(&b, 0, genesis(), 5);
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: man.clone() });
    drain(&mut m);
    m.handle(2, Event::ManifestReceived { from: key(3).public(), manifest: man });
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.scores().count(Rejection::Duplicate), 1);
    assert_eq!(m.scores().peer(&b.public()).penalty, 0);
}

#[test]
fn equivocation_rejects_both_deltas_and_flags_the_signer() {
    // A third member keeps the round open while B equivocates.
    let mut m = machine();
    for i in [2, 3] {
        m.handle(0, Event::PeerJoined { peer: key(i).public() });
    }
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    let b = key(2);
    m.handle(3, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 21) });
    let actions = drain(&mut m);
    assert_eq!(rejects(&actions), vec![(b.public(), Rejection::Equivocation)]);
    assert!(m.scores().peer(&b.public()).equivocated);
    // A third delta from the same signer is refused too.
    m.handle(4, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 22) });
    assert_eq!(rejects(&drain(&mut m)), vec![(b.public(), Rejection::Equivocation)]);
    // C arrives; B is excluded so the round closes without it.
    peer_delta(&mut m, 5, 3, 40);
    assert_eq!(aggregate_of(&drain(&mut m)), Some(vec![hash(30), hash(40)]));
}

#[test]
fn replays_late_and_future_deltas_are_dropped_and_counted() {
    let mut m = RoundMachine::new(cfg(), key(1), 5, genesis(), 0);
    drain(&mut m);
    let b = key(2);
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 3, genesis(), 1) });
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 4, genesis(), 2) });
    // Round 6 is the next one: kept for when it opens, not refused; round 7 is.
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 6, genesis(), 3) });
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 7, genesis(), 4) });
    let actions = drain(&mut m);
    assert!(actions.iter().all(|a| !matches!(a, Action::FetchPayload { .. })), "{actions:?}");
    assert_eq!(rejects(&actions), vec![(b.public(), Rejection::Replay)]);
    assert_eq!(m.scores().count(Rejection::Late), 1);
    assert_eq!(m.scores().count(Rejection::FutureRound), 1);
    // A delta for the round being aggregated is late as well.
    local(&mut m, 2, 30);
    peer_delta(&mut m, 3, 3, 40);
    m.handle(DEADLINE, Event::TimerFired);
    drain(&mut m);
    assert_eq!(m.phase(), Phase::Aggregating);
    m.handle(
        DEADLINE + 1,
        Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 5, genesis(), 9) },
    );
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.scores().count(Rejection::Late), 2);
    // After the round advances, round-5 deltas are still late: never applied to round 6.
    m.handle(
        DEADLINE + 2,
        Event::Aggregated { round: 5, included: vec![hash(30), hash(40)], new_state: StateId([6; 32]) },
    );
    drain(&mut m);
    m.handle(
        DEADLINE + 3,
        Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 5, genesis(), 9) },
    );
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.scores().count(Rejection::Late), 3);
}

#[test]
fn wrong_run_base_codec_shape_and_tokens_are_typed() {
    let mut m = machine();
    let b = key(2);
    let send = |m: &mut RoundMachine, man: DeltaManifest| {
        m.handle(1, Event::ManifestReceived { from: b.public(), manifest: man.sign(&b) });
        rejects(&drain(m))
    };
    let mut x = manifest(&b, 0, genesis(), 1);
    x.run = RunId([0xBB; 32]);
    assert_eq!(send(&mut m, x), vec![(b.public(), Rejection::WrongRun)]);
    assert_eq!(send(&mut m, manifest(&b, 0, StateId([9; 32]), 1)), vec![(b.public(), Rejection::WrongBase)]);
    let mut x = manifest(&b, 0, genesis(), 1);
    x.codec = Codec::F16;
    x.payload_len = Codec::F16.payload_len(N).unwrap_or(0);
    assert_eq!(send(&mut m, x), vec![(b.public(), Rejection::WrongCodec)]);
    let mut x = manifest(&b, 0, genesis(), 1);
    x.element_count = N + 1;
    x.payload_len = Codec::F32.payload_len(N + 1).unwrap_or(0);
    assert_eq!(send(&mut m, x), vec![(b.public(), Rejection::WrongShape)]);
    let mut x = manifest(&b, 0, genesis(), 1);
    x.tokens = 0;
    assert_eq!(send(&mut m, x), vec![(b.public(), Rejection::ZeroTokens)]);
    assert_eq!(m.scores().peer(&b.public()).rejections, 5);
}

#[test]
fn bad_signatures_are_charged_to_the_deliverer() {
    let mut m = machine();
    let (b, relay) = (key(2), key(3));
    let mut man = manifest(&b, 0, genesis(), 1);
    man.tokens += 1;
    m.handle(1, Event::ManifestReceived { from: relay.public(), manifest: man });
    assert_eq!(rejects(&drain(&mut m)), vec![(relay.public(), Rejection::BadSignature)]);
    let mut c = commit(&b, 0, genesis(), vec![], StateId([1; 32]));
    c.round = 1;
    m.handle(1, Event::CommitReceived { from: relay.public(), commit: c });
    assert_eq!(rejects(&drain(&mut m)), vec![(relay.public(), Rejection::BadSignature)]);
}

#[test]
fn allowlist_admission_refuses_outsiders() {
    let mut c = cfg();
    c.admission = AdmissionPolicy::Allowlist(vec![key(1).public()]);
    let mut m = RoundMachine::new(c, key(1), 0, genesis(), 0);
    drain(&mut m);
    let b = key(2);
    m.handle(1, Event::PeerJoined { peer: b.public() });
    assert_eq!(m.members().count(), 0);
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 1) });
    assert_eq!(rejects(&drain(&mut m)), vec![(b.public(), Rejection::NotAdmitted)]);
}

#[test]
fn a_payload_hash_belongs_to_one_signer() {
    let mut m = machine();
    let (b, c) = (key(2), key(3));
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 1) });
    m.handle(1, Event::ManifestReceived { from: c.public(), manifest: manifest(&c, 0, genesis(), 1) });
    assert_eq!(rejects(&drain(&mut m)), vec![(c.public(), Rejection::PayloadReuse)]);
}

#[test]
fn payload_faults_charge_the_right_peer() {
    let mut m = machine();
    for i in [2, 3] {
        m.handle(0, Event::PeerJoined { peer: key(i).public() });
    }
    let (b, server) = (key(2), key(5));
    m.handle(1, Event::ManifestReceived { from: b.public(), manifest: manifest(&b, 0, genesis(), 1) });
    drain(&mut m);
    let fault = |f| Event::PayloadInvalid { payload_hash: hash(1), from: server.public(), fault: f };
    m.handle(2, fault(PayloadFault::HashMismatch));
    let actions = drain(&mut m);
    assert_eq!(rejects(&actions), vec![(server.public(), Rejection::PayloadHashMismatch)]);
    assert!(
        matches!(actions.last(), Some(Action::FetchPayload { from, .. }) if *from == b.public()),
        "retry from the announcer"
    );
    m.handle(3, fault(PayloadFault::Undecodable));
    assert_eq!(rejects(&drain(&mut m)), vec![(b.public(), Rejection::InvalidPayload)]);
    // The signer is out for the round: local + C close it.
    local(&mut m, 4, 30);
    peer_delta(&mut m, 5, 3, 40);
    assert_eq!(aggregate_of(&drain(&mut m)), Some(vec![hash(30), hash(40)]));
    // Verification of an unknown payload is counted, not charged.
    m.handle(6, Event::PayloadVerified { payload_hash: hash(99) });
    assert_eq!(m.scores().count(Rejection::UnknownPayload), 1);
}

#[test]
fn aggregation_result_publishes_a_commit_and_opens_the_next_round() {
    let mut m = machine();
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    m.handle(DEADLINE, Event::TimerFired);
    drain(&mut m);
    let s1 = StateId([0x22; 32]);
    m.handle(DEADLINE + 5, Event::Aggregated { round: 0, included: vec![hash(30), hash(20)], new_state: s1 });
    let actions = drain(&mut m);
    let Some(Action::PublishCommit(c)) = actions.first() else { panic!("{actions:?}") };
    assert_eq!(c.verify(), Ok(()));
    assert_eq!((c.round, c.base, c.new_state), (0, genesis(), s1));
    assert_eq!(c.included, vec![hash(20), hash(30)]);
    assert_eq!(actions.get(1), Some(&Action::RoundOpened { round: 1, base: s1 }));
    assert_eq!((m.round(), m.base(), m.phase()), (1, s1, Phase::Collecting));
    assert_eq!(m.next_timeout(), Some(DEADLINE + 5 + DEADLINE));
    // A stale aggregation report is ignored.
    m.handle(DEADLINE + 6, Event::Aggregated { round: 0, included: vec![], new_state: s1 });
    assert!(drain(&mut m).is_empty());
}

#[test]
fn deltas_refused_by_aggregation_are_charged() {
    let mut m = machine();
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    m.handle(DEADLINE, Event::TimerFired);
    drain(&mut m);
    m.handle(
        DEADLINE,
        Event::Aggregated { round: 0, included: vec![hash(30), hash(77)], new_state: StateId([3; 32]) },
    );
    let actions = drain(&mut m);
    assert_eq!(rejects(&actions), vec![(key(2).public(), Rejection::AggregationRejected)]);
    let Some(Action::PublishCommit(c)) = actions.get(1) else { panic!("{actions:?}") };
    assert_eq!(c.included, vec![hash(30)], "only offered hashes are committed");
}

#[test]
fn failed_aggregation_returns_to_collecting() {
    let mut m = machine();
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    m.handle(DEADLINE, Event::TimerFired);
    drain(&mut m);
    m.handle(DEADLINE + 1, Event::AggregationFailed { round: 0 });
    assert_eq!(rejects(&drain(&mut m)).len(), 2);
    assert_eq!((m.phase(), m.ready_count()), (Phase::Collecting, 0));
}

/// A machine that closed round 0 on state 0x22 with its own delta (30)
/// and key 2's (20); returns it and another state, 0x33.
fn closed_round_zero() -> (RoundMachine, StateId) {
    let mut m = machine();
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    m.handle(DEADLINE, Event::TimerFired);
    drain(&mut m);
    let ours = StateId([0x22; 32]);
    m.handle(DEADLINE, Event::Aggregated { round: 0, included: vec![hash(20), hash(30)], new_state: ours });
    drain(&mut m);
    (m, StateId([0x33; 32]))
}

#[test]
fn resyncs_when_most_committers_report_another_state() {
    let (mut m, theirs) = closed_round_zero();
    // One dissenter only ties (1 of 2); a tie goes to the smaller StateId, ours.
    let inc = vec![hash(20), hash(30)];
    m.handle(
        DEADLINE + 1,
        Event::CommitReceived {
            from: key(2).public(),
            commit: commit(&key(2), 0, genesis(), inc.clone(), theirs),
        },
    );
    assert!(drain(&mut m).is_empty());
    // A second dissenter makes 2 of 3 ≥ quorum 2: re-sync to their state, same round.
    m.handle(
        DEADLINE + 2,
        Event::CommitReceived { from: key(3).public(), commit: commit(&key(3), 0, genesis(), inc, theirs) },
    );
    let actions = drain(&mut m);
    assert_eq!(
        actions.first(),
        Some(&Action::Resync { round: 1, state: theirs, peers: vec![key(2).public(), key(3).public()] })
    );
    assert_eq!(actions.get(1), Some(&Action::RoundOpened { round: 1, base: theirs }));
    assert_eq!((m.round(), m.base()), (1, theirs));
}

#[test]
fn a_healed_partition_tie_goes_to_the_smaller_state() {
    // Two halves of three closed round 0 apart: we and keys 2, 3 on one
    // state, keys 4, 5, 6 on another. 3 of 6 is a tie.
    let mut m = machine();
    local(&mut m, 1, 30);
    peer_delta(&mut m, 2, 2, 20);
    m.handle(DEADLINE, Event::TimerFired);
    drain(&mut m);
    let (ours, theirs) = (StateId([0x55; 32]), StateId([0x11; 32]));
    let inc = vec![hash(20), hash(30)];
    m.handle(DEADLINE, Event::Aggregated { round: 0, included: inc.clone(), new_state: ours });
    drain(&mut m);
    for i in [2, 3] {
        let c = commit(&key(i), 0, genesis(), inc.clone(), ours);
        m.handle(DEADLINE + 1, Event::CommitReceived { from: key(i).public(), commit: c });
    }
    let other = vec![hash(40), hash(50)];
    for i in [4, 5] {
        let c = commit(&key(i), 0, genesis(), other.clone(), theirs);
        m.handle(DEADLINE + 2, Event::CommitReceived { from: key(i).public(), commit: c });
    }
    // 3 to 2: we stay.
    assert!(drain(&mut m).is_empty());
    let c = commit(&key(6), 0, genesis(), other, theirs);
    m.handle(DEADLINE + 3, Event::CommitReceived { from: key(6).public(), commit: c });
    let actions = drain(&mut m);
    let mut peers = vec![key(4).public(), key(5).public(), key(6).public()];
    peers.sort();
    assert_eq!(actions.first(), Some(&Action::Resync { round: 1, state: theirs, peers }));
    assert_eq!((m.round(), m.base()), (1, theirs));
}

#[test]
fn manifests_on_the_base_a_resync_moves_to_are_not_lost() {
    let (mut m, theirs) = closed_round_zero();
    // Key 4's round-1 delta is on their state: refused while the node is on its own.
    let k4 = key(4);
    m.handle(
        DEADLINE + 1,
        Event::ManifestReceived { from: k4.public(), manifest: manifest(&k4, 1, theirs, 40) },
    );
    assert_eq!(rejects(&drain(&mut m)), vec![(k4.public(), Rejection::WrongBase)]);
    let inc = vec![hash(20), hash(30)];
    for i in 2..=3u8 {
        let c = commit(&key(i), 0, genesis(), inc.clone(), theirs);
        m.handle(DEADLINE + 2, Event::CommitReceived { from: key(i).public(), commit: c });
    }
    // The re-sync to (1, theirs) checks it again: it is fetched now.
    let actions = drain(&mut m);
    assert_eq!((m.round(), m.base()), (1, theirs));
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::FetchPayload { payload_hash, .. } if *payload_hash == hash(40))),
        "{actions:?}"
    );
}

#[test]
fn a_node_left_behind_resyncs_forward() {
    let mut m = machine();
    let s = StateId([0x44; 32]);
    for i in [2, 3, 4] {
        m.handle(
            1,
            Event::CommitReceived {
                from: key(i).public(),
                commit: commit(&key(i), 6, StateId([5; 32]), vec![hash(1)], s),
            },
        );
    }
    let actions = drain(&mut m);
    assert!(
        matches!(actions.first(), Some(Action::Resync { round: 7, state, .. }) if *state == s),
        "{actions:?}"
    );
    assert_eq!((m.round(), m.base()), (7, s));
    // Further commits agreeing with us change nothing.
    m.handle(
        2,
        Event::CommitReceived {
            from: key(5).public(),
            commit: commit(&key(5), 6, StateId([5; 32]), vec![hash(1)], s),
        },
    );
    assert!(drain(&mut m).is_empty());
}

#[test]
fn a_majority_commit_closes_the_round_by_recomputing_when_we_hold_its_deltas() {
    let mut m = machine();
    for i in [2, 3, 4] {
        m.handle(0, Event::PeerJoined { peer: key(i).public() });
    }
    peer_delta(&mut m, 1, 2, 20);
    peer_delta(&mut m, 1, 3, 40);
    drain(&mut m);
    let s = StateId([0x55; 32]);
    let inc = vec![hash(20), hash(40)];
    for i in [2, 3] {
        m.handle(
            2,
            Event::CommitReceived {
                from: key(i).public(),
                commit: commit(&key(i), 0, genesis(), inc.clone(), s),
            },
        );
    }
    let actions = drain(&mut m);
    assert_eq!(aggregate_of(&actions), Some(inc));
    assert!(!actions.iter().any(|a| matches!(a, Action::Resync { .. })));
}

#[test]
fn a_majority_commit_waits_for_announced_deltas_still_on_their_way_instead_of_resyncing() {
    let mut m = machine();
    for i in [2, 3, 4] {
        m.handle(0, Event::PeerJoined { peer: key(i).public() });
    }
    peer_delta(&mut m, 1, 2, 20);
    // Peer 3's delta is announced but still being fetched.
    let k3 = key(3);
    m.handle(1, Event::ManifestReceived { from: k3.public(), manifest: manifest(&k3, 0, genesis(), 40) });
    drain(&mut m);
    let s = StateId([0x55; 32]);
    let inc = vec![hash(20), hash(40)];
    for i in [2, 3] {
        let c = commit(&key(i), 0, genesis(), inc.clone(), s);
        m.handle(2, Event::CommitReceived { from: key(i).public(), commit: c });
    }
    // No re-sync (a state is several times a delta on a slow link): wait.
    let actions = drain(&mut m);
    assert!(!actions.iter().any(|a| matches!(a, Action::Resync { .. })), "{actions:?}");
    assert_eq!(aggregate_of(&actions), None);
    assert_eq!((m.round(), m.phase()), (0, Phase::Collecting));
    // It arrives: the round closes on the majority's set.
    m.handle(3, Event::PayloadVerified { payload_hash: hash(40) });
    assert_eq!(aggregate_of(&drain(&mut m)), Some(inc));
}

#[test]
fn a_majority_commit_of_an_unknown_or_undecodable_delta_resyncs_at_once() {
    let s = StateId([0x55; 32]);
    // A delta this node never saw announced: nothing to wait for.
    let mut m = machine();
    peer_delta(&mut m, 1, 2, 20);
    drain(&mut m);
    let inc = vec![hash(20), hash(60)];
    for i in [2, 3] {
        let c = commit(&key(i), 0, genesis(), inc.clone(), s);
        m.handle(2, Event::CommitReceived { from: key(i).public(), commit: c });
    }
    let actions = drain(&mut m);
    assert!(
        matches!(actions.first(), Some(Action::Resync { round: 1, state, .. }) if *state == s),
        "{actions:?}"
    );
    // A delta it was waiting for turns out undecodable here: re-sync then.
    let mut m = machine();
    peer_delta(&mut m, 1, 2, 20);
    let k3 = key(3);
    m.handle(1, Event::ManifestReceived { from: k3.public(), manifest: manifest(&k3, 0, genesis(), 40) });
    drain(&mut m);
    let inc = vec![hash(20), hash(40)];
    for i in [2, 3] {
        let c = commit(&key(i), 0, genesis(), inc.clone(), s);
        m.handle(2, Event::CommitReceived { from: key(i).public(), commit: c });
    }
    assert!(!drain(&mut m).iter().any(|a| matches!(a, Action::Resync { .. })));
    let fault = PayloadFault::Undecodable;
    m.handle(3, Event::PayloadInvalid { payload_hash: hash(40), from: k3.public(), fault });
    let actions = drain(&mut m);
    assert!(
        actions.iter().any(|a| matches!(a, Action::Resync { round: 1, state, .. } if *state == s)),
        "{actions:?}"
    );
}

#[test]
fn a_manifest_of_the_next_round_is_kept_until_that_round_opens() {
    let mut m = machine();
    m.handle(0, Event::PeerJoined { peer: key(2).public() });
    local(&mut m, 1, 30);
    drain(&mut m);
    // Peer 2 closed round 0 sooner and already announced round 1 (on the
    // state both will hold): nothing to fetch yet.
    let next = StateId([0x66; 32]);
    let k2 = key(2);
    m.handle(2, Event::ManifestReceived { from: k2.public(), manifest: manifest(&k2, 1, next, 50) });
    let actions = drain(&mut m);
    assert!(!actions.iter().any(|a| matches!(a, Action::FetchPayload { .. })), "{actions:?}");
    // Its round-0 delta, then our aggregation: round 1 opens and the early
    // manifest is fetched at once.
    peer_delta(&mut m, 3, 2, 20);
    drain(&mut m);
    m.handle(4, Event::Aggregated { round: 0, included: vec![hash(20), hash(30)], new_state: next });
    let actions = drain(&mut m);
    let opened = actions.iter().position(|a| matches!(a, Action::RoundOpened { round: 1, .. }));
    let fetch = actions
        .iter()
        .position(|a| matches!(a, Action::FetchPayload { payload_hash, .. } if *payload_hash == hash(50)));
    assert!(opened.is_some() && fetch > opened, "{actions:?}");
    // A manifest two rounds ahead is still refused, and the early list is
    // bounded: one per signer.
    let k3 = key(3);
    m.handle(5, Event::ManifestReceived { from: k3.public(), manifest: manifest(&k3, 3, next, 60) });
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.scores().count(Rejection::FutureRound), 1);
    // A second, different manifest of the next round from one signer is not kept twice.
    m.handle(6, Event::ManifestReceived { from: k3.public(), manifest: manifest(&k3, 2, next, 61) });
    m.handle(6, Event::ManifestReceived { from: k3.public(), manifest: manifest(&k3, 2, next, 62) });
    assert_eq!(m.scores().count(Rejection::FutureRound), 2);
}

#[test]
fn commit_equivocation_and_replays_are_rejected() {
    let mut m = RoundMachine::new(cfg(), key(1), 5, genesis(), 0);
    drain(&mut m);
    let b = key(2);
    m.handle(
        1,
        Event::CommitReceived {
            from: b.public(),
            commit: commit(&b, 5, genesis(), vec![], StateId([1; 32])),
        },
    );
    m.handle(
        1,
        Event::CommitReceived {
            from: b.public(),
            commit: commit(&b, 5, genesis(), vec![], StateId([1; 32])),
        },
    );
    assert!(drain(&mut m).is_empty(), "a duplicate commit is a no-op");
    m.handle(
        1,
        Event::CommitReceived {
            from: b.public(),
            commit: commit(&b, 5, genesis(), vec![], StateId([2; 32])),
        },
    );
    assert_eq!(rejects(&drain(&mut m)), vec![(b.public(), Rejection::CommitEquivocation)]);
    m.handle(
        1,
        Event::CommitReceived {
            from: b.public(),
            commit: commit(&b, 3, genesis(), vec![], StateId([2; 32])),
        },
    );
    assert_eq!(rejects(&drain(&mut m)), vec![(b.public(), Rejection::Replay)]);
}

#[test]
fn stale_local_deltas_and_backwards_clocks() {
    let mut m = machine();
    m.handle(
        500,
        Event::LocalDeltaReady {
            round: 0,
            base: StateId([9; 32]),
            payload_hash: hash(1),
            tokens: 1,
            train_loss: 1.0,
        },
    );
    m.handle(
        100,
        Event::LocalDeltaReady {
            round: 3,
            base: genesis(),
            payload_hash: hash(1),
            tokens: 1,
            train_loss: 1.0,
        },
    );
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.scores().count(Rejection::StaleLocalDelta), 2);
    // Time never runs backwards: the deadline is still measured from 0.
    m.handle(10, Event::TimerFired);
    assert_eq!(m.next_timeout(), Some(DEADLINE));
}

#[test]
fn a_restarted_node_reannounces_the_manifest_it_signed_and_signs_no_other() {
    // Before the crash: the node signed and published a manifest for round 0.
    let mut before = machine();
    local(&mut before, 1, 9);
    let Some(Action::PublishManifest(signed)) = drain(&mut before).into_iter().next() else {
        panic!("no manifest")
    };
    // After the restart, at the same position: the same manifest is restored
    // and published again, byte for byte, and a fresh local delta is refused.
    let mut after = machine();
    after.handle(5, Event::LocalDeltaRestored { manifest: signed.clone() });
    assert!(after.has_local_delta());
    assert_eq!(drain(&mut after), vec![Action::PublishManifest(signed.clone())]);
    local(&mut after, 6, 10);
    assert!(drain(&mut after).is_empty());
    assert_eq!(after.scores().count(Rejection::StaleLocalDelta), 1);
    // A peer that saw both announcements counts a duplicate, not equivocation.
    let mut peer = RoundMachine::new(cfg(), key(2), 0, genesis(), 0);
    drain(&mut peer);
    peer.handle(2, Event::ManifestReceived { from: key(1).public(), manifest: signed.clone() });
    peer.handle(7, Event::ManifestReceived { from: key(1).public(), manifest: signed.clone() });
    assert_eq!(peer.scores().count(Rejection::Equivocation), 0);
    assert_eq!(peer.scores().count(Rejection::Duplicate), 1);
    assert!(rejects(&drain(&mut peer)).is_empty());
}

#[test]
fn a_restored_manifest_of_another_round_base_or_signer_is_refused() {
    let mut m = machine();
    for stale in [
        manifest(&key(1), 1, genesis(), 9),
        manifest(&key(1), 0, StateId([0x22; 32]), 9),
        manifest(&key(3), 0, genesis(), 9),
    ] {
        m.handle(1, Event::LocalDeltaRestored { manifest: stale });
    }
    let mut forged = manifest(&key(1), 0, genesis(), 9);
    forged.tokens += 1;
    m.handle(1, Event::LocalDeltaRestored { manifest: forged });
    assert!(drain(&mut m).is_empty());
    assert!(!m.has_local_delta());
    assert_eq!(m.scores().count(Rejection::StaleLocalDelta), 4);
}

#[test]
fn an_unverified_payload_stays_pending_until_verified_or_the_round_closes() {
    let mut m = machine();
    m.handle(1, Event::PeerJoined { peer: key(2).public() });
    m.handle(
        2,
        Event::ManifestReceived { from: key(3).public(), manifest: manifest(&key(2), 0, genesis(), 7) },
    );
    drain(&mut m);
    let len = Codec::F32.payload_len(N).unwrap_or(0);
    assert_eq!(m.pending_payload(&hash(7)), Some((len, key(2).public(), key(3).public())));
    assert_eq!(m.pending_payload(&hash(8)), None);
    m.handle(3, Event::PayloadVerified { payload_hash: hash(7) });
    assert_eq!(m.pending_payload(&hash(7)), None);
}

#[test]
fn a_payload_no_peer_served_is_asked_for_again_after_a_doubling_back_off() {
    let mut m = machine();
    m.handle(1, Event::PeerJoined { peer: key(2).public() });
    let k = key(2);
    m.handle(2, Event::ManifestReceived { from: k.public(), manifest: manifest(&k, 0, genesis(), 7) });
    drain(&mut m);
    let fetch = Action::FetchPayload {
        payload_hash: hash(7),
        payload_len: Codec::F32.payload_len(N).unwrap_or(0),
        signer: k.public(),
        from: k.public(),
    };
    let mut at = 10;
    for wait in [PAYLOAD_RETRY_FIRST_MS, 400, 800, 1600, PAYLOAD_RETRY_MAX_MS, PAYLOAD_RETRY_MAX_MS] {
        m.handle(at, Event::PayloadUnavailable { payload_hash: hash(7) });
        assert!(drain(&mut m).is_empty(), "nothing is asked before the back-off");
        let want = [Some(at + wait), (DEADLINE > at).then_some(DEADLINE)].into_iter().flatten().min();
        assert_eq!(m.next_timeout(), want, "the retry (or the round deadline) is the next timer");
        m.handle(at + wait - 1, Event::TimerFired);
        assert!(drain(&mut m).is_empty(), "not yet at {}", at + wait - 1);
        m.handle(at + wait, Event::TimerFired);
        let asked = drain(&mut m);
        assert!(asked.contains(&fetch), "asked again after {wait} ms: {asked:?}");
        at += wait;
    }
    // Once verified (or the round moved on) nothing is asked again.
    m.handle(at, Event::PayloadVerified { payload_hash: hash(7) });
    m.handle(at + 1, Event::PayloadUnavailable { payload_hash: hash(7) });
    m.handle(at + 10_000, Event::TimerFired);
    assert!(!drain(&mut m).contains(&fetch));
}

#[test]
fn a_resync_state_no_peer_served_is_fetched_again_while_it_is_wanted() {
    let mut m = machine();
    let theirs = StateId([0x33; 32]);
    for i in [2u8, 3] {
        let c = commit(&key(i), 0, genesis(), vec![hash(20)], theirs);
        m.handle(5, Event::CommitReceived { from: key(i).public(), commit: c });
    }
    let resync = Action::Resync { round: 1, state: theirs, peers: vec![key(2).public(), key(3).public()] };
    assert!(drain(&mut m).contains(&resync));
    m.handle(100, Event::StateUnavailable { state: theirs });
    assert_eq!(m.next_timeout(), Some(100 + STATE_RETRY_FIRST_MS));
    m.handle(100 + STATE_RETRY_FIRST_MS, Event::TimerFired);
    assert_eq!(drain(&mut m), vec![resync.clone()], "fetched again, nothing else");
    m.handle(400, Event::StateUnavailable { state: theirs });
    assert_eq!(m.next_timeout(), Some(400 + 2 * STATE_RETRY_FIRST_MS));
    // An unavailable report for a state not wanted changes nothing.
    m.handle(401, Event::StateUnavailable { state: StateId([9; 32]) });
    assert_eq!(m.next_timeout(), Some(400 + 2 * STATE_RETRY_FIRST_MS));
    let mut at = 400;
    for _ in 0..20 {
        let failed_at = at;
        m.handle(at, Event::StateUnavailable { state: theirs });
        // The next timer may be the round's deadline; the retry comes
        // within the longest back-off all the same.
        let mut asked = false;
        for _ in 0..3 {
            let t = m.next_timeout().expect("a retry is due");
            m.handle(t, Event::TimerFired);
            at = t;
            if drain(&mut m).contains(&resync) {
                asked = true;
                break;
            }
        }
        assert!(
            asked && at - failed_at <= STATE_RETRY_MAX_MS,
            "asked again {} ms after failing",
            at - failed_at
        );
    }
    assert_eq!(m.base(), theirs, "still waiting for the state the commits back");
}
