//! The round state machine driven by an arbitrary sequence of events from a
//! small cast of signers. Checks: no panic, the round never goes backwards,
//! every Aggregate lists distinct hashes in ascending order, and everything
//! the machine publishes is validly signed and canonical.
#![no_main]
use libfuzzer_sys::fuzz_target;
use murmur_protocol::codec::Codec;
use murmur_protocol::hash::{PayloadHash, RunId, StateId};
use murmur_protocol::identity::{NodeKey, PublicKey, Signature};
use murmur_protocol::round::{Action, Event, PayloadFault, RoundConfig, RoundMachine};
use murmur_protocol::spec::AdmissionPolicy;
use murmur_protocol::{DeltaManifest, RoundCommit, Ticket};

const N: u64 = 16;

fn hash(b: u8) -> PayloadHash {
    PayloadHash([b % 16; 32])
}

fn state(b: u8) -> StateId {
    StateId([b % 4; 32])
}

fuzz_target!(|data: &[u8]| {
    let keys: Vec<NodeKey> = (1..=5u8).map(|i| NodeKey::from_seed([i; 32])).collect();
    let cfg = RoundConfig {
        run: RunId([7; 32]),
        codec: Codec::F32,
        element_count: N,
        quorum: 2,
        deadline_ms: 1000,
        // The first byte picks the admission: open, or by tickets signed by
        // the fifth key (its tickets arrive as events below).
        admission: if data.first().is_some_and(|b| b & 1 == 1) {
            AdmissionPolicy::Tickets { operators: vec![keys[4].public()] }
        } else {
            AdmissionPolicy::Open
        },
    };
    let run = cfg.run;
    let mut m = RoundMachine::new(cfg, keys[0].clone(), 0, state(0), 0);
    let mut now = 0u64;
    let mut last_offered: Vec<PayloadHash> = Vec::new();
    for op in data.chunks(4) {
        let [kind, a, b, c] = [op[0], *op.get(1).unwrap_or(&0), *op.get(2).unwrap_or(&0), *op.get(3).unwrap_or(&0)];
        let signer = &keys[usize::from(a % 5)];
        let from: PublicKey = keys[usize::from(b % 5)].public();
        let round = m.round().saturating_add(u64::from(b % 4)).saturating_sub(2);
        let ev = match kind % 13 {
            0 => {
                let man = DeltaManifest {
                    run,
                    round,
                    base: if c & 0x80 == 0 { m.base() } else { state(c) },
                    signer: PublicKey::default(),
                    tokens: u64::from(c % 3),
                    train_loss: 1.0,
                    codec: Codec::F32,
                    element_count: N,
                    payload_len: Codec::F32.payload_len(N).unwrap_or(0),
                    payload_hash: hash(c),
                    signature: Signature::default(),
                }
                .sign(signer);
                let mut man = man;
                if c & 0x40 != 0 {
                    man.tokens ^= 1; // break the signature
                }
                Event::ManifestReceived { from, manifest: man }
            }
            1 => Event::PayloadVerified { payload_hash: hash(c) },
            2 => Event::PayloadInvalid {
                payload_hash: hash(c),
                from,
                fault: if a & 1 == 0 { PayloadFault::HashMismatch } else { PayloadFault::Undecodable },
            },
            3 => Event::PeerJoined { peer: signer.public() },
            4 => Event::PeerLeft { peer: signer.public() },
            5 => {
                now = now.saturating_add(u64::from(c) * 16);
                Event::TimerFired
            }
            6 => {
                let included: Vec<PayloadHash> = {
                    let mut v: Vec<PayloadHash> = (0..4u8).filter(|i| c & (1 << i) != 0).map(|i| hash(i * 3)).collect();
                    v.sort();
                    v.dedup();
                    v
                };
                let commit = RoundCommit {
                    run,
                    round,
                    base: m.base(),
                    included,
                    new_state: state(c >> 4),
                    signer: PublicKey::default(),
                    signature: Signature::default(),
                }
                .sign(signer);
                Event::CommitReceived { from, commit }
            }
            7 => Event::LocalDeltaReady { round: m.round(), base: m.base(), payload_hash: hash(c), tokens: 10, train_loss: 1.0 },
            8 => Event::Aggregated {
                round: m.round(),
                included: last_offered.iter().copied().filter(|h| h.0[0] & c != 0 || c == 0).collect(),
                new_state: state(c),
            },
            9 => {
                // A ticket for `signer`, by the operator or (c's top bit) by
                // the signer itself, expiring c seconds after the wall clock.
                let issuer = if c & 0x80 == 0 { &keys[4] } else { signer };
                let ticket = Ticket::issue(issuer, run, signer.public(), 1_000 + u64::from(c & 0x7f));
                Event::TicketPresented { from, ticket, unix_secs: 1_000 + now / 1000 }
            }
            10 => Event::PayloadUnavailable { payload_hash: hash(c) },
            11 => Event::StateUnavailable { state: state(c) },
            _ => Event::AggregationFailed { round: m.round() },
        };
        let before = m.round();
        now = now.saturating_add(u64::from(a & 7));
        m.handle(now, ev);
        assert!(m.round() >= before, "the round went backwards");
        while let Some(action) = m.poll_action() {
            match action {
                Action::Aggregate { deltas, .. } => {
                    assert!(deltas.windows(2).all(|w| w[0].payload_hash < w[1].payload_hash));
                    last_offered = deltas.iter().map(|d| d.payload_hash).collect();
                }
                Action::PublishManifest(man) => {
                    assert!(man.verify().is_ok());
                    assert_eq!(DeltaManifest::decode(&man.encode()).ok().as_ref(), Some(&man));
                }
                Action::PublishCommit(c) => {
                    assert!(c.verify().is_ok());
                    assert_eq!(RoundCommit::decode(&c.encode()).ok().as_ref(), Some(&c));
                }
                _ => {}
            }
        }
        if let Some(t) = m.next_timeout() {
            assert!(t > now);
        }
    }
});
