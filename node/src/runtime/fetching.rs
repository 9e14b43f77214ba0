//! Fetch tasks of the node runtime: a round's delta payloads and the states
//! a re-sync or cold start needs, from several peers at once, verified
//! against their hashes. Decoding, hashing and writing run on the blocking
//! pool; results go back to the event loop as `WorkDone` messages.
//!
//! Each task makes one attempt (asking every peer it was given at once, as
//! `fetch_blob` does) and reports what came of it; asking again, and when,
//! is the round machine's decision (`Event::PayloadUnavailable`,
//! `Event::StateUnavailable`, docs/protocol.md §7). When every committer
//! backing the state is banned by this node, their bans are lifted (and the
//! node says so): a state is content-addressed and checked chunk by chunk,
//! so fetching it from a peer we distrust risks only bandwidth, while not
//! fetching it would leave the node waiting forever.

use libp2p::PeerId;
use murmur_protocol::{decode_delta, PayloadFault, PayloadHash, PublicKey, RunSpec, StateId, TrainingState};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::held::HeldState;
use super::node::WorkDone;
use super::report::Reporter;
use super::spec::state_len;
use crate::net::{fetch_blob, NetHandle};
use crate::store::{BlobKind, Position, Store};
use std::sync::Arc;

/// One payload to fetch for the current round.
pub struct PayloadFetch {
    /// The round it was asked for in (the store forgets it with that round).
    pub round: u64,
    pub hash: PayloadHash,
    pub len: u64,
    /// The peer that announced it (charged when the bytes are bad).
    pub from: PublicKey,
    /// Peers to ask, best first.
    pub peers: Vec<PeerId>,
}

/// Fetch a delta payload, check its hash and that it decodes, store it.
pub(crate) fn spawn_payload_fetch(
    net: NetHandle,
    store: Arc<Store>,
    spec: RunSpec,
    f: PayloadFetch,
    tx: mpsc::UnboundedSender<WorkDone>,
) {
    tokio::spawn(async move {
        let PayloadFetch { round, hash, len, from, peers } = f;
        let (s, h) = (store.clone(), hash);
        let held = tokio::task::spawn_blocking(move || s.blobs.contains(BlobKind::Delta, &h.0)).await;
        let fault = if held.unwrap_or(false) {
            None
        } else {
            match fetch_blob(&net, BlobKind::Delta, hash.0, len, len, &peers).await {
                Ok(f) => {
                    let n = spec.model.param_count as usize;
                    let codec = spec.codec;
                    let checked = tokio::task::spawn_blocking(move || {
                        decode_delta(&f.bytes, codec, n).map(|_| store.blobs.put(BlobKind::Delta, &f.bytes))
                    })
                    .await;
                    match checked {
                        Ok(Ok(Ok(_))) => None,
                        Ok(Ok(Err(_))) | Err(_) => Some(None),
                        Ok(Err(_)) => Some(Some(PayloadFault::Undecodable)),
                    }
                }
                Err(e) => {
                    tracing::debug!("fetching payload {hash:?}: {e}");
                    Some(None)
                }
            }
        };
        let _ = tx.send(WorkDone::Payload { round, hash, from, fault });
    });
}

/// A state a re-sync needs.
pub struct StateFetch {
    pub round: u64,
    pub id: StateId,
    /// The committers whose signed commits back the state.
    pub voters: Vec<PeerId>,
    /// Everyone to ask (the voters first).
    pub peers: Vec<PeerId>,
    /// The state the node currently wants; the task stops when it changes.
    pub wanted: watch::Receiver<Option<StateId>>,
}

/// Read the state from the store or fetch it (one attempt, while it is
/// wanted); sends `WorkDone::State`, `WorkDone::StateAbandoned` (no longer
/// wanted) or `WorkDone::StateUnavailable` (the attempt failed).
pub(crate) fn spawn_state_fetch(
    net: NetHandle,
    store: Arc<Store>,
    spec: RunSpec,
    f: StateFetch,
    out: Reporter,
    tx: mpsc::UnboundedSender<WorkDone>,
) {
    tokio::spawn(async move {
        let StateFetch { round, id, voters, peers, wanted } = f;
        let still_wanted = |w: &watch::Receiver<Option<StateId>>| *w.borrow() == Some(id);
        let n = spec.model.param_count as usize;
        let s = store.clone();
        let run = spec.run_id();
        let held = tokio::task::spawn_blocking(move || {
            s.blobs
                .get(BlobKind::State, &id.0)
                .ok()
                .and_then(|b| TrainingState::decode(&b, n).ok())
                .filter(|s| s.round == round && s.run == run)
                .map(|s| HeldState::stored(s, id))
        })
        .await
        .ok()
        .flatten();
        if let Some(state) = held {
            let _ = tx.send(WorkDone::State { round, id, state });
            return;
        }
        if !still_wanted(&wanted) {
            let _ = tx.send(WorkDone::StateAbandoned { id });
            return;
        }
        let banned = net.banned().await;
        if !voters.is_empty() && voters.iter().all(|p| banned.contains(p)) {
            for p in &voters {
                net.unban(*p);
                out.event(
                    "unbanned",
                    json!({
                        "peer": p.to_string(),
                        "why": format!("it holds state {id}, backed by the round's commits, and no other peer does"),
                    }),
                );
            }
        }
        // A state the machine no longer wants by the time it arrives is not
        // written (`fetch_state` asks `keep` just before writing); every
        // attempt ends in `State` or `StateUnavailable`, so whatever was
        // written is tracked (and collected) by the loop.
        let keep = wanted.clone();
        let fetched =
            fetch_state(&net, &store, &spec, id, round, &peers, move || *keep.borrow() == Some(id)).await;
        match fetched {
            Ok(state) => {
                let state = HeldState::stored(state, id);
                let _ = tx.send(WorkDone::State { round, id, state });
            }
            Err(e) => {
                tracing::warn!(
                    "fetching state {id} of round {round} failed: {e}; the round machine asks again"
                );
                let _ = tx.send(WorkDone::StateUnavailable { id });
            }
        }
    });
}

/// Fetch the committed state `id` that opens round `opens`, from `peers`:
/// in a committee run its parameters and ledger (`committee::sync`), each
/// checked against `id`; in a version-1 run the state itself.
pub async fn fetch_committed_state(
    net: &NetHandle,
    spec: &RunSpec,
    id: StateId,
    opens: u64,
    peers: &[PeerId],
) -> Result<TrainingState, String> {
    if spec.committee_size > 0 {
        let keys: Vec<PublicKey> = peers.iter().filter_map(crate::net::public_key_of).collect();
        return super::committee::sync::fetch_parts(net, spec, id, &keys).await.map(|f| f.state);
    }
    fetch_checked_state(net, spec, id, opens, peers).await.map(|(s, _)| s)
}

/// Fetch state `id` (expected at `round` of `spec`'s run) from `peers` at
/// once and decode it on the blocking pool; returns the state and its bytes.
pub async fn fetch_checked_state(
    net: &NetHandle,
    spec: &RunSpec,
    id: StateId,
    round: u64,
    peers: &[PeerId],
) -> Result<(TrainingState, Vec<u8>), String> {
    let len = state_len(spec);
    let fetched = fetch_blob(net, BlobKind::State, id.0, len, len, peers).await.map_err(|e| e.to_string())?;
    let (run, n) = (spec.run_id(), spec.model.param_count as usize);
    tokio::task::spawn_blocking(move || {
        let state = TrainingState::decode(&fetched.bytes, n).map_err(|e| e.to_string())?;
        if state.run != run || state.round != round {
            return Err(format!(
                "state {id} is for round {} of another or the same run, not round {round}",
                state.round
            ));
        }
        Ok((state, fetched.bytes))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Fetch state `id` (expected at `round`) from `peers` at once, verify,
/// store and record it as the node's position (decoding and writing on the
/// blocking pool) — unless `still_wanted` says no by then, so a state the
/// node moved past is not written.
pub async fn fetch_state(
    net: &NetHandle,
    store: &Arc<Store>,
    spec: &RunSpec,
    id: StateId,
    round: u64,
    peers: &[PeerId],
    still_wanted: impl Fn() -> bool + Send + 'static,
) -> Result<TrainingState, String> {
    let (state, bytes) = fetch_checked_state(net, spec, id, round, peers).await?;
    let (store, run) = (store.clone(), spec.run_id());
    tokio::task::spawn_blocking(move || {
        if !still_wanted() {
            return Err(format!("state {id} is no longer wanted"));
        }
        store.blobs.put(BlobKind::State, &bytes).map_err(|e| e.to_string())?;
        store.meta.set_position(&run, Position { round, state: id }).map_err(|e| e.to_string())?;
        Ok(state)
    })
    .await
    .map_err(|e| e.to_string())?
}
