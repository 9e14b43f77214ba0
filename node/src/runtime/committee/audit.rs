//! A sketch audit on the node (`committee::sketch`): the aggregate (fetched
//! unless held), the projections of every included input (computed here
//! for an input this node holds, else asked of its trainer, else computed
//! from the input pulled from the shard's holders, as a re-check pulls it),
//! and the verdict. Nothing here decides what an audit means: the machine
//! gets the verdict.

use std::sync::Arc;

use futures::future::join_all;
use murmur_protocol::committee::rule::InputClaim;
use murmur_protocol::committee::sketch::{self, SketchSigns, PROJECTIONS};
use murmur_protocol::committee::{aggregate_codec, IncludedList, ShardResult, ShardRule, ShardedManifest};
use murmur_protocol::{decode_delta, Codec, PublicKey, RunId};

use super::served::CommitteeServed;
use super::transfer::{self, RecheckInputs};
use crate::net::{peer_id_of, NetHandle, XferRequest, XferResponse};
use crate::store::{BlobKind, Store};

/// One sketch audit: the result, its included list with the manifests of
/// its entries (in list order), the seed, and what the node needs to read
/// the shard.
pub struct SketchAudit {
    pub run: RunId,
    pub shards: u32,
    pub result: ShardResult,
    pub included: IncludedList,
    pub inputs: Vec<ShardedManifest>,
    pub seed: [u8; 32],
    pub holders: Vec<PublicKey>,
    pub elements: usize,
    pub codec: Codec,
    pub rule: ShardRule,
    /// The codec's payload length for the shard.
    pub cap: u64,
}

/// The audit's verdict (None: it could not tell; the machine re-checks).
pub async fn sketch(
    net: NetHandle,
    store: Arc<Store>,
    served: Arc<CommitteeServed>,
    a: SketchAudit,
) -> Option<bool> {
    let r = &a.result;
    let form = (aggregate_codec(a.codec), a.elements);
    let (fetched, _) = transfer::fetch_aggregate(
        net.clone(),
        store.clone(),
        r.round,
        r.shard,
        r.result_hash,
        form,
        r.signer,
    )
    .await;
    if !fetched {
        return None;
    }
    let asks = a
        .included
        .entries
        .iter()
        .map(|(signer, root)| projections_of(&net, &store, &served, &a, *signer, *root));
    let projections: Vec<[f64; PROJECTIONS]> = join_all(asks).await.into_iter().collect::<Option<_>>()?;
    tokio::task::spawn_blocking(move || {
        let payload = store.blobs.get(BlobKind::Aggregate, &a.result.result_hash).ok()?;
        let aggregate = decode_delta(&payload, aggregate_codec(a.codec), a.elements).ok()?;
        let claims: Vec<InputClaim> = a.inputs.iter().map(InputClaim::of).collect();
        sketch::verdict(&aggregate, aggregate_codec(a.codec), a.rule, &a.seed, &claims, &projections)
    })
    .await
    .ok()?
}

/// The projections of `signer`'s input to the audited shard.
async fn projections_of(
    net: &NetHandle,
    store: &Arc<Store>,
    served: &CommitteeServed,
    a: &SketchAudit,
    signer: PublicKey,
    root: [u8; 32],
) -> Option<[f64; PROJECTIONS]> {
    let (round, shard) = (a.result.round, a.result.shard);
    let held = served.leaf(round, shard, signer);
    if held.is_none() {
        if let Some(peer) = peer_id_of(&signer) {
            let req = XferRequest::Projections { round, shard, seed: a.seed };
            if let Some(XferResponse::Projections(p)) = transfer::ask(net, peer, req).await {
                return Some(p);
            }
        }
    }
    // The input itself: held, else pulled from its signer or a holder.
    let want = RecheckInputs {
        run: a.run,
        round,
        shard,
        shards: a.shards,
        inputs: vec![(signer, root)],
        held: vec![held],
        holders: a.holders.clone(),
        cap: a.cap,
    };
    let offer = transfer::gather_inputs(net, store, &want).await?.pop()?;
    let (store, seed, codec, n) = (store.clone(), a.seed, a.codec, a.elements);
    tokio::task::spawn_blocking(move || {
        let payload = store.blobs.get(BlobKind::Delta, &offer.leaf.payload_hash.0).ok()?;
        let values = decode_delta(&payload, codec, n).ok()?;
        sketch::project(&values, &SketchSigns::new(&seed, n))
    })
    .await
    .ok()?
}
