//! Fetching the state a majority of a committee run's electorate signed
//! (the machine decides when, `murmur_protocol::committee::catch_up`): its
//! parts — the parameters (a State blob) and the ledger (a Ledger blob) —
//! from those committers, each checked against the state's StateId.

use libp2p::PeerId;
use murmur_protocol::committee::ledger::state_id_of_parts;
use murmur_protocol::committee::Ledger;
use murmur_protocol::state::StateHeader;
use murmur_protocol::{PublicKey, RunSpec, StateId, TrainingState};

use crate::net::{fetch_blob, peer_id_of, NetHandle, XferRequest, XferResponse};
use crate::store::{BlobKind, Position, Store};

/// Largest ledger fetched (65,536 roster and 65,536 excluded keys).
pub const MAX_LEDGER_BYTES: u64 = 8 + 65_536 * 32 + 65_536 * 40;

/// A state fetched from its holders, both parts checked against it.
pub struct FetchedState {
    pub state: TrainingState,
    pub ledger: Ledger,
    /// The parts' encodings, as fetched (a State and a Ledger blob).
    pub state_bytes: Vec<u8>,
    pub ledger_bytes: Vec<u8>,
    /// The Ledger blob's id.
    pub ledger_id: [u8; 32],
}

/// Fetch the committed state `id` from `peers` (for an export, the archive
/// or the dashboard): its parameters, checked with its ledger against `id`.
pub async fn fetch_committed_state(
    net: &NetHandle,
    spec: &RunSpec,
    id: StateId,
    peers: &[PeerId],
) -> Result<TrainingState, String> {
    let keys: Vec<PublicKey> = peers.iter().filter_map(crate::net::public_key_of).collect();
    fetch_parts(net, spec, id, &keys).await.map(|f| f.state)
}

/// Fetch state `target` from `holders`: its parts, then the ledger and
/// the parameters, each checked against `target`.
pub async fn fetch_parts(
    net: &NetHandle,
    spec: &RunSpec,
    target: StateId,
    holders: &[PublicKey],
) -> Result<FetchedState, String> {
    let peers: Vec<PeerId> = holders.iter().filter_map(peer_id_of).collect();
    let n = spec.model.param_count;
    let state_len = StateHeader {
        run: spec.run_id(),
        round: 0,
        element_count: n,
        has_momentum: spec.outer.has_momentum(),
    }
    .payload_len();
    for peer in &peers {
        let ask = net.request(*peer, XferRequest::StateParts { state: target.0 });
        let Ok(Ok(XferResponse::StateParts { params, ledger, ledger_len })) =
            tokio::time::timeout(std::time::Duration::from_secs(10), ask).await
        else {
            continue;
        };
        if state_id_of_parts(StateId(params), ledger) != target || ledger_len > MAX_LEDGER_BYTES {
            continue;
        }
        let Ok(l) = fetch_blob(net, BlobKind::Ledger, ledger, ledger_len, MAX_LEDGER_BYTES, &peers).await
        else {
            continue;
        };
        let Ok(ledger_value) = Ledger::decode(&l.bytes) else { continue };
        let Ok(s) = fetch_blob(net, BlobKind::State, params, state_len, state_len, &peers).await else {
            continue;
        };
        let Ok(state) = TrainingState::decode(&s.bytes, n as usize) else { continue };
        if state.run != spec.run_id() || state.id() != StateId(params) {
            continue;
        }
        return Ok(FetchedState {
            state,
            ledger: ledger_value,
            state_bytes: s.bytes,
            ledger_bytes: l.bytes,
            ledger_id: ledger,
        });
    }
    Err(format!("no holder of {} served its parts", target.to_hex()))
}

/// Fetch state `target` from `holders` (`fetch_parts`); both parts are
/// stored and the position recorded.
pub async fn fetch_state(
    net: &NetHandle,
    store: &Store,
    spec: &RunSpec,
    target: StateId,
    holders: &[PublicKey],
) -> Result<(TrainingState, Ledger), String> {
    let f = fetch_parts(net, spec, target, holders).await?;
    let params = f.state.id();
    store.blobs.put(BlobKind::Ledger, &f.ledger_bytes).map_err(|e| e.to_string())?;
    store.blobs.put(BlobKind::State, &f.state_bytes).map_err(|e| e.to_string())?;
    store.meta.set_ledger_of(&spec.run_id(), &params, &f.ledger_id).map_err(|e| e.to_string())?;
    store
        .meta
        .set_position(&spec.run_id(), Position { round: f.state.round, state: params })
        .map_err(|e| e.to_string())?;
    Ok((f.state, f.ledger))
}

/// The ledger stored for the node's current state `params`, if any.
pub fn stored_ledger(store: &Store, spec: &RunSpec, params: StateId) -> Option<Ledger> {
    let hash = store.meta.ledger_of(&spec.run_id(), &params).ok()??;
    let bytes = store.blobs.get(BlobKind::Ledger, &hash).ok()?;
    Ledger::decode(&bytes).ok().filter(|l| l.hash() == hash)
}
