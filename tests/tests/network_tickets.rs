//! A ticket run against identities without tickets (issue 13, done-when 4):
//! two honest nodes hold tickets an operator issued with `murmur ticket
//! issue`; ten identities without one join as trainers, gossip valid
//! manifests (their payloads served and decodable), commits for a state of
//! their own and self-signed tickets, every round. None is counted — each is
//! refused as `not admitted` — none is included in a round, and none moves
//! an honest node's state: the honest nodes close every round with their
//! own two deltas and agree on every state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use libp2p::{Multiaddr, PeerId};
use murmur_node::net::{self, ContentServer, NetConfig, NetHandle, PeerStatus, Role, TopicKind};
use murmur_node::net::{XferRequest, XferResponse};
use murmur_node::runtime::startup::discover_spec;
use murmur_node::store::BlobKind;
use murmur_protocol::hash::payload_hash_of;
use murmur_protocol::{
    encode_delta, DeltaManifest, NodeKey, PayloadHash, PublicKey, RoundCommit, RunSpec, Signature, StateId,
    Ticket,
};
use murmur_tests::{
    issue_ticket, start_node, start_ticket_run, states_by_round, wait_until, write_node_key, RunSettings,
    TicketRun,
};

/// An outsider's server: its status (a trainer of the run, no ticket) and
/// its one delta payload (a single chunk, so no table is needed).
struct Outsider {
    spec: Vec<u8>,
    payload: Bytes,
    hash: PayloadHash,
}

impl ContentServer for Outsider {
    fn status(&self, _: PeerId) -> PeerStatus {
        PeerStatus { spec: self.spec.clone(), trainer: true, ..PeerStatus::default() }
    }
    fn serve(&self, _: PeerId, r: &XferRequest) -> XferResponse {
        match *r {
            XferRequest::Table { kind: BlobKind::Delta, id, .. } if id == self.hash.0 => {
                XferResponse::Table(vec![id])
            }
            XferRequest::Chunk { kind: BlobKind::Delta, id, index: 0, .. } if id == self.hash.0 => {
                XferResponse::Chunk(self.payload.clone())
            }
            _ => XferResponse::NotFound,
        }
    }
}

/// The fake state every outsider commits to.
const FAKE: StateId = StateId([0x66; 32]);

/// One round of mischief by outsider `k`: a manifest for the honest nodes'
/// round and base, commits to `FAKE` for this round and the one before,
/// and a ticket it signed itself.
async fn misbehave(
    net: &NetHandle,
    k: &NodeKey,
    spec: &RunSpec,
    round: u64,
    base: StateId,
    hash: PayloadHash,
) {
    let run = spec.run_id();
    let (codec, n) = (spec.codec, spec.model.param_count);
    let manifest = DeltaManifest {
        run,
        round,
        base,
        signer: PublicKey::default(),
        tokens: 4096,
        train_loss: 3.0,
        codec,
        element_count: n,
        payload_len: codec.payload_len(n).unwrap_or(0),
        payload_hash: hash,
        signature: Signature::default(),
    }
    .sign(k);
    let commit = |r: u64| {
        RoundCommit {
            run,
            round: r,
            base,
            included: vec![hash],
            new_state: FAKE,
            signer: PublicKey::default(),
            signature: Signature::default(),
        }
        .sign(k)
    };
    let mut messages =
        vec![(TopicKind::Manifest, manifest.encode()), (TopicKind::Commit, commit(round).encode())];
    if round > 0 {
        messages.push((TopicKind::Commit, commit(round - 1).encode()));
    }
    let ticket = Ticket::issue(k, run, k.public(), u64::MAX);
    messages.push((TopicKind::Ticket, ticket.encode()));
    for (kind, bytes) in messages {
        for _ in 0..10 {
            if net.publish(kind, bytes.clone()).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[test]
fn identities_without_tickets_count_for_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 60, batch: 4, quorum: 2, deadline: 20, seed: 43 };
    let TicketRun { boot: _boot, addr, operator_key, .. } = start_ticket_run(d, &settings, [0x0b; 32]);
    let mut honest = Vec::new();
    for (name, seed) in [("a", [0xa1; 32]), ("b", [0xb1; 32])] {
        let holder = write_node_key(d, name, seed);
        let ticket = issue_ticket(d, &operator_key, &["--bootstrap", &addr], &holder, name);
        honest.push(start_node(d, name, &addr, &["--ticket", &ticket.display().to_string()]));
    }
    let (a, b) = (&honest[0], &honest[1]);
    let ctx = || format!("{}\n{}", a.tail(), b.tail());
    wait_until("round 0 to close", Duration::from_secs(240), || a.last_round().is_some(), ctx);
    let targets: Vec<(PeerId, Multiaddr)> = [a, b]
        .iter()
        .filter_map(|p| {
            let addr: Multiaddr = p.events_of("listening").first()?["addr"].as_str()?.parse().ok()?;
            Some((p.peer_id()?.parse().ok()?, addr))
        })
        .collect();
    assert_eq!(targets.len(), 2, "{}", ctx());

    let outsiders: Vec<NodeKey> = (0..10u8).map(|i| NodeKey::from_seed([0x40 + i; 32])).collect();
    let outsider_ids: Vec<String> =
        outsiders.iter().filter_map(|k| net::peer_id_of(&k.public())).map(|p| p.to_string()).collect();
    let r0 = a.last_round().unwrap_or(0);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let boot: Multiaddr = addr.parse().expect("addr");
        let spec = discover_spec(&outsiders[0], &[boot], Duration::from_secs(30)).await.expect("spec");
        let n = spec.model.param_count as usize;
        let mut swarms = Vec::new();
        for (i, k) in outsiders.iter().enumerate() {
            // A small, valid delta of the run's codec and shape, different per outsider.
            let values: Vec<f32> = (0..n).map(|j| ((j * 7 + i * 13) % 101) as f32 * 1e-6).collect();
            let payload = encode_delta(spec.codec, &values).expect("delta");
            let hash = payload_hash_of(&payload);
            let server = Outsider { spec: spec.encode(), payload: Bytes::from(payload), hash };
            let mut cfg = NetConfig::new(k.clone(), spec.run_id(), Role::Trainer);
            cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
            let (net, events) = net::start(cfg, Arc::new(server)).expect("net");
            for (_, t) in &targets {
                let _ = net.dial(t.clone()).await;
            }
            swarms.push((net, events, hash));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Every round the honest nodes open, every outsider joins in.
        let t0 = Instant::now();
        let mut done_round = None;
        let attacked =
            |t0: Instant| t0.elapsed() >= Duration::from_secs(20) && a.last_round() >= Some(r0 + 4);
        while t0.elapsed() < Duration::from_secs(300) && !attacked(t0) {
            let asked = swarms[0].0.request(targets[0].0, XferRequest::Status).await;
            if let Ok(XferResponse::Status(PeerStatus { round, state: Some(base), .. })) = asked {
                if done_round != Some(round) {
                    done_round = Some(round);
                    for (k, (net, _, hash)) in outsiders.iter().zip(&swarms) {
                        misbehave(net, k, &spec, round, StateId(base), *hash).await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    wait_until("four rounds under attack", Duration::from_secs(60), || a.last_round() >= Some(r0 + 4), ctx);

    let honest_ids: Vec<String> = [a, b].iter().filter_map(|p| p.peer_id()).collect();
    for p in [a, b] {
        // Nothing an outsider signed was counted, included or followed.
        for v in p.events_of("round") {
            let contributors: Vec<&str> =
                v["contributors"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
            assert!(
                contributors.iter().all(|c| honest_ids.iter().any(|h| h == c)),
                "{}: an outsider's delta was included: {v}\n{}",
                p.name,
                p.tail()
            );
            assert!(v["included"].as_u64().unwrap_or(0) <= 2, "{}: {v}", p.name);
        }
        let fake = FAKE.to_hex();
        assert!(
            p.lines().iter().all(|l| !l.contains(&fake)),
            "{} took or reported the outsiders' state\n{}",
            p.name,
            p.tail()
        );
        // Each outsider's messages were refused as not admitted.
        let refused: std::collections::BTreeSet<String> = p
            .events_of("rejected")
            .iter()
            .filter(|v| v["reason"].as_str() == Some("round_notadmitted"))
            .filter_map(|v| v["peer"].as_str().map(String::from))
            .collect();
        let missed: Vec<&String> = outsider_ids.iter().filter(|o| !refused.contains(*o)).collect();
        assert!(
            missed.is_empty(),
            "{}: outsiders never refused as not admitted: {missed:?}\n{}",
            p.name,
            p.tail()
        );
        // The honest pair closed rounds with both of their own deltas.
        let both = p
            .events_of("round")
            .iter()
            .filter(|v| v["round"].as_u64() > Some(r0) && v["included"].as_u64() == Some(2))
            .count();
        assert!(both >= 2, "{}: rounds after {r0} did not include both honest deltas\n{}", p.name, p.tail());
    }
    let (sa, sb) = (states_by_round(a), states_by_round(b));
    let common: Vec<_> = sb.iter().filter(|(r, _)| sa.contains_key(r)).collect();
    assert!(common.len() >= 3, "{sa:?} {sb:?}");
    for (r, s) in common {
        assert_eq!(sa.get(r), Some(s), "round {r}: the honest nodes disagree");
    }
}
