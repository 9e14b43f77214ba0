//! The round's transfers, each one task: offering a shard (with its
//! manifest) to a committee member, pulling an offered shard's payload,
//! fetching an aggregated shard (with shard 0's included signers), asking
//! for a result's included list, and gathering a re-check's inputs with
//! their signers' manifests. Every byte is checked against a hash the
//! caller already trusts (a leaf under a signed root, a signed result)
//! before it is stored or used; nothing here decides anything.

use std::collections::BTreeMap;
use std::time::Duration;

use libp2p::PeerId;
use murmur_protocol::committee::{
    shard_norm, verify_proof, FetchOutcome, IncludedList, IncludedSigners, ShardResult,
};
use murmur_protocol::{decode_delta, Codec, PublicKey, RunId};

use crate::net::offer::ShardOffer;
use crate::net::{fetch_blob, peer_id_of, NetHandle, XferRequest, XferResponse};
use crate::store::tree::CHUNK_LEN;
use crate::store::{BlobKind, Store};

/// How long one request may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn ask(net: &NetHandle, peer: PeerId, req: XferRequest) -> Option<XferResponse> {
    tokio::time::timeout(ASK_TIMEOUT, net.request(peer, req)).await.ok()?.ok()
}

/// Offer `offer` to `to`, with its payload (read from the store) when it
/// is short enough to travel inline (one attempt: whether it was taken;
/// the machine decides whether and when to offer it again).
pub async fn send_offer(net: NetHandle, store: &Store, to: PublicKey, mut offer: ShardOffer) -> bool {
    let Some(peer) = peer_id_of(&to) else { return false };
    if offer.travels_inline() {
        match store.blobs.get(BlobKind::Delta, &offer.leaf.payload_hash.0) {
            Ok(bytes) => offer.payload = Some(bytes),
            Err(_) => return false,
        }
    }
    matches!(ask(&net, peer, XferRequest::Offer(offer)).await, Some(XferResponse::Accepted))
}

/// Store an offer's inline payload when it is the leaf's: its length and
/// its hash (a payload this short is one chunk, whose hash is its id).
pub fn store_inline(store: &Store, offer: &ShardOffer) -> bool {
    let Some(payload) = offer.payload.as_deref() else { return false };
    payload.len() as u64 == offer.leaf.payload_len
        && payload.len() as u64 <= CHUNK_LEN
        && BlobKind::Delta.hash(payload) == offer.leaf.payload_hash.0
        && store.blobs.put(BlobKind::Delta, payload).is_ok()
}

/// Pull the payload an offer names (from its signer, then `more`) and
/// store it; `cap` is the codec's length for the shard.
pub async fn pull_payload(
    net: &NetHandle,
    store: &Store,
    offer: &ShardOffer,
    cap: u64,
    more: &[PeerId],
) -> Result<(), String> {
    let id = offer.leaf.payload_hash.0;
    if store.blobs.len_of(BlobKind::Delta, &id) == Some(offer.leaf.payload_len) {
        return Ok(());
    }
    let mut peers: Vec<PeerId> = peer_id_of(&offer.signer).into_iter().collect();
    for p in more {
        if !peers.contains(p) {
            peers.push(*p);
        }
    }
    let got = fetch_blob(net, BlobKind::Delta, id, offer.leaf.payload_len, cap, &peers)
        .await
        .map_err(|e| e.to_string())?;
    store.blobs.put(BlobKind::Delta, &got.bytes).map_err(|e| e.to_string())?;
    Ok(())
}

/// Fetch aggregate `hash` of `shard` of `round` from `from` unless it is
/// held (or another fetch of it is under way: then after that one), and
/// for shard 0 its result's included signers: the outcome
/// (`FetchOutcome`), the L2 norm of its decoded values once served, and
/// those signers.
pub async fn fetch_aggregate(
    net: NetHandle,
    store: std::sync::Arc<Store>,
    fetches: &AggregateFetches,
    (round, shard, hash): (u64, u32, [u8; 32]),
    (codec, elements): (Codec, usize),
    from: PublicKey,
) -> (FetchOutcome, f32, Option<IncludedSigners>) {
    let unavailable = (FetchOutcome::Unavailable, 0.0, None);
    let Some(peer) = peer_id_of(&from) else { return unavailable };
    let Some(len) = codec.payload_len(elements as u64) else { return (FetchOutcome::Refuted, 0.0, None) };
    let turn = fetches.turn(hash);
    let turn = turn.lock().await;
    let norm = if store.blobs.len_of(BlobKind::Aggregate, &hash) == Some(len) {
        held_aggregate_norm(&store, &hash, (codec, elements))
    } else {
        let Ok(got) = fetch_blob(&net, BlobKind::Aggregate, hash, len, len, &[peer]).await else {
            return unavailable;
        };
        // A signed hash of bytes that do not decode is a wrong claim.
        match decode_delta(&got.bytes, codec, elements) {
            Ok(values) if store.blobs.put(BlobKind::Aggregate, &got.bytes).is_ok() => {
                Some(shard_norm(&values))
            }
            Ok(_) => return unavailable,
            Err(_) => None,
        }
    };
    drop(turn);
    let Some(norm) = norm else { return (FetchOutcome::Refuted, 0.0, None) };
    if shard != 0 {
        return (FetchOutcome::Served, norm, None);
    }
    // The machine checks the signers against the claim's root; a holder
    // that serves none (or bytes that are no list) did not serve shard 0.
    let signers = match ask(&net, peer, XferRequest::Signers { round, shard, result_hash: hash }).await {
        Some(XferResponse::Included(b)) => IncludedSigners::decode(&b).ok(),
        _ => None,
    };
    match signers {
        Some(signers) => (FetchOutcome::Served, norm, Some(signers)),
        None => unavailable,
    }
}

/// Aggregates being fetched now, by hash. A second fetch of one (an audit
/// of a shard whose fetch for the round is still under way, on a slow
/// link) waits its turn and reads what the first stored, rather than
/// downloading the aggregate again; after a failed first fetch it fetches
/// itself.
#[derive(Debug, Default)]
pub struct AggregateFetches(std::sync::Mutex<BTreeMap<[u8; 32], std::sync::Arc<tokio::sync::Mutex<()>>>>);

impl AggregateFetches {
    fn turn(&self, hash: [u8; 32]) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        let mut fetching = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Hashes no fetch holds any more leave the map.
        fetching.retain(|_, t| std::sync::Arc::strong_count(t) > 1);
        fetching.entry(hash).or_default().clone()
    }
}

/// The L2 norm of the held aggregate `hash` (None: not held, or its bytes
/// do not decode as `elements` values of `codec`).
pub fn held_aggregate_norm(store: &Store, hash: &[u8; 32], (codec, elements): (Codec, usize)) -> Option<f32> {
    let bytes = store.blobs.get(BlobKind::Aggregate, hash).ok()?;
    decode_delta(&bytes, codec, elements).ok().map(|v| shard_norm(&v))
}

async fn included(
    net: &NetHandle,
    peer: PeerId,
    round: u64,
    shard: u32,
    hash: [u8; 32],
) -> Option<IncludedList> {
    match ask(net, peer, XferRequest::Included { round, shard, result_hash: hash }).await {
        Some(XferResponse::Included(b)) => IncludedList::decode(&b).ok(),
        _ => None,
    }
}

/// Ask `signer` for its own shard `shard` of `round` (leaf, proof and
/// manifest; the payload is pulled as for any offer).
pub async fn pull_input(net: &NetHandle, round: u64, shard: u32, signer: PublicKey) -> Option<ShardOffer> {
    let peer = peer_id_of(&signer)?;
    match ask(net, peer, XferRequest::Leaf { round, shard, signer }).await {
        Some(XferResponse::Leaf(o)) if o.signer == signer && o.round == round && o.leaf.shard == shard => {
            Some(o)
        }
        _ => None,
    }
}

/// Ask each of `from` in turn for a signed result of `shard` in `round`
/// (its own, or the one it applied) until one answers with one not signed
/// by one of `held` (decoded here; the machine checks its signature and
/// its signer's seat).
pub async fn pull_result(
    net: &NetHandle,
    round: u64,
    shard: u32,
    from: &[PublicKey],
    held: &[PublicKey],
) -> Option<ShardResult> {
    for key in from {
        let Some(peer) = peer_id_of(key) else { continue };
        if let Some(XferResponse::Result(b)) = ask(net, peer, XferRequest::Result { round, shard }).await {
            match ShardResult::decode(&b) {
                // Any signer: the machine takes only results it would
                // have taken from gossip.
                Ok(r) if r.round == round && r.shard == shard && !held.contains(&r.signer) => return Some(r),
                _ => continue,
            }
        }
    }
    None
}

/// Ask `result`'s signer for the included list behind it: its included
/// signers first (a bit per `roster` member), rebuilt with the manifest
/// `roots` this node holds, else the whole list.
pub async fn request_included(
    net: NetHandle,
    result: &ShardResult,
    roster: &[PublicKey],
    roots: &BTreeMap<PublicKey, [u8; 32]>,
) -> Option<IncludedList> {
    let peer = peer_id_of(&result.signer)?;
    let (round, shard, hash) = (result.round, result.shard, result.result_hash);
    if let Some(XferResponse::Included(b)) =
        ask(&net, peer, XferRequest::Signers { round, shard, result_hash: hash }).await
    {
        let rebuilt =
            IncludedSigners::decode(&b).ok().and_then(|s| s.list(roster, |k| roots.get(k).copied()));
        if let Some(list) = rebuilt.filter(|l| l.root() == result.included_root) {
            return Some(list);
        }
    }
    included(&net, peer, round, shard, hash).await
}

/// What a re-check needs gathered: the included inputs (signer and
/// manifest root), the leaves this node already holds, who else holds
/// them, the round's run and shard count, and the payload cap.
pub struct RecheckInputs {
    pub run: RunId,
    pub round: u64,
    pub shard: u32,
    pub shards: u32,
    pub inputs: Vec<(PublicKey, [u8; 32])>,
    pub held: Vec<Option<ShardOffer>>,
    pub holders: Vec<PublicKey>,
    pub cap: u64,
}

impl RecheckInputs {
    /// Whether `o` is the input `(signer, root)` of this re-check: the
    /// shard, under a manifest of this run and round with that root and
    /// signature, proven against it.
    fn proves(&self, o: &ShardOffer, signer: &PublicKey, root: &[u8; 32]) -> bool {
        let m = &o.manifest;
        o.signer == *signer
            && o.leaf.shard == self.shard
            && m.signer == *signer
            && m.root == *root
            && m.run == self.run
            && m.round == self.round
            && m.shards == self.shards
            && verify_proof(root, m.shards, &o.leaf, &o.proof)
            && m.verify().is_ok()
    }
}

/// The leaves of a re-check's inputs with their signed manifests, each
/// proven against the included root, with the payloads in the store: asked
/// of the signer and the holders unless held already. None when any input
/// cannot be had (a re-check that cannot be completed proves nothing
/// either way).
pub async fn gather_inputs(net: &NetHandle, store: &Store, want: &RecheckInputs) -> Option<Vec<ShardOffer>> {
    let (round, shard) = (want.round, want.shard);
    let holder_peers: Vec<PeerId> = want.holders.iter().filter_map(peer_id_of).collect();
    let mut out = Vec::with_capacity(want.inputs.len());
    for ((signer, root), have) in want.inputs.iter().zip(&want.held) {
        let mut offer = have.clone().filter(|o| want.proves(o, signer, root));
        let mut asked: Vec<PeerId> = peer_id_of(signer).into_iter().collect();
        asked.extend(holder_peers.iter().copied());
        for peer in &asked {
            if offer.is_some() {
                break;
            }
            let req = XferRequest::Leaf { round, shard, signer: *signer };
            if let Some(XferResponse::Leaf(o)) = ask(net, *peer, req).await {
                offer = Some(o).filter(|o| want.proves(o, signer, root));
            }
        }
        let offer = offer?;
        pull_payload(net, store, &offer, want.cap, &asked).await.ok()?;
        out.push(offer);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::offer::test_manifest;
    use murmur_protocol::committee::ShardLeaf;
    use murmur_protocol::{NodeKey, PayloadHash};

    fn offer(payload: Vec<u8>, payload_hash: [u8; 32], payload_len: u64) -> ShardOffer {
        let key = NodeKey::from_seed([6; 32]);
        ShardOffer {
            round: 2,
            signer: key.public(),
            shards: 4,
            leaf: ShardLeaf { shard: 1, payload_hash: PayloadHash(payload_hash), payload_len, norm: 1.0 },
            proof: vec![[1; 32]; 2],
            manifest: Box::new(test_manifest(&key, 2, 4)),
            payload: Some(payload),
        }
    }

    #[test]
    fn an_inline_payload_is_stored_only_when_it_is_the_leafs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("store");
        let payload = vec![5u8; 1100];
        let hash = BlobKind::Delta.hash(&payload);
        // Another payload under this leaf's hash, or a leaf of another
        // length, stores nothing.
        assert!(!store_inline(&store, &offer(vec![6u8; 1100], hash, 1100)));
        assert!(!store_inline(&store, &offer(payload.clone(), hash, 1101)));
        assert_eq!(store.blobs.len_of(BlobKind::Delta, &hash), None);
        assert!(store_inline(&store, &offer(payload.clone(), hash, 1100)));
        assert_eq!(store.blobs.get(BlobKind::Delta, &hash).expect("stored"), payload);
    }

    #[tokio::test]
    async fn a_second_fetch_of_one_aggregate_waits_for_the_first_and_others_do_not() {
        let fetches = AggregateFetches::default();
        let a = fetches.turn([1; 32]);
        let first = a.lock().await;
        let b = fetches.turn([1; 32]);
        assert!(b.try_lock().is_err(), "the same aggregate waits its turn");
        let c = fetches.turn([2; 32]);
        assert!(c.try_lock().is_ok(), "another aggregate does not");
        drop(first);
        assert!(b.try_lock().is_ok(), "its turn comes when the first ends");
        drop((a, b, c));
        let _ = fetches.turn([3; 32]);
        assert_eq!(fetches.0.lock().expect("map").len(), 1, "ended fetches leave the map");
    }
}
