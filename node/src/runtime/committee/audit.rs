//! Sketch audits on the node (`committee::sketch`): for each audited result
//! the aggregate (fetched unless held), and the projections of every
//! included input — computed here for an input this node holds, else asked
//! of its trainer (one request per trainer for all the shards the audits
//! name of it), else computed from the input pulled from the shard's
//! holders, as a re-check pulls it — then each audit's verdict. Nothing
//! here decides what an audit means: the machine gets the verdicts.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::join_all;
use murmur_protocol::committee::rule::InputClaim;
use murmur_protocol::committee::sketch::{self, SketchSigns, PROJECTIONS};
use murmur_protocol::committee::{aggregate_codec, FetchOutcome, ShardLayout, ShardRule, SketchAudit};
use murmur_protocol::{decode_delta, Codec, PublicKey, RunId};

use super::served::CommitteeServed;
use super::transfer::{self, RecheckInputs};
use crate::net::xfer::MAX_PROJECTION_ASKS;
use crate::net::{peer_id_of, NetHandle, XferRequest, XferResponse};
use crate::store::{BlobKind, Store};

/// How the node reads a round's shards.
#[derive(Clone, Copy)]
pub struct ShardReading {
    pub run: RunId,
    pub round: u64,
    pub layout: ShardLayout,
    pub codec: Codec,
    pub rule: ShardRule,
}

type Projections = [f64; PROJECTIONS];
/// An input's place: (audit, entry of its included list).
type Place = (usize, usize);
/// A projection to ask for: where it goes, and (shard, seed).
type Ask = (Place, (u32, [u8; 32]));

/// Each audit's verdict (None: it could not tell; the machine re-checks).
pub async fn sketch(
    net: NetHandle,
    store: Arc<Store>,
    served: Arc<CommitteeServed>,
    fetching: Arc<transfer::AggregateFetches>,
    reading: ShardReading,
    audits: Vec<SketchAudit>,
) -> Vec<(SketchAudit, Option<bool>)> {
    let fetches = audits.iter().map(|a| {
        let r = &a.result;
        let form = (aggregate_codec(reading.codec), reading.layout.len(r.shard));
        let (net, store) = (net.clone(), store.clone());
        transfer::fetch_aggregate(net, store, &fetching, (r.round, r.shard, r.result_hash), form, r.signer)
    });
    let fetched: Vec<bool> =
        join_all(fetches).await.into_iter().map(|(outcome, ..)| outcome == FetchOutcome::Served).collect();
    // What to ask each trainer: (audit, entry) → (shard, seed), for
    // inputs this node does not hold.
    let mut asks: BTreeMap<PublicKey, Vec<Ask>> = BTreeMap::new();
    for (i, a) in audits.iter().enumerate().filter(|(i, _)| fetched[*i]) {
        for (e, (signer, _)) in a.included.entries.iter().enumerate() {
            if served.leaf(reading.round, a.result.shard, *signer).is_none() {
                asks.entry(*signer).or_default().push(((i, e), (a.result.shard, a.seed)));
            }
        }
    }
    let batches: Vec<(PublicKey, Vec<_>)> = asks
        .into_iter()
        .flat_map(|(signer, list)| {
            let chunks: Vec<Vec<_>> = list.chunks(MAX_PROJECTION_ASKS).map(<[_]>::to_vec).collect();
            chunks.into_iter().map(move |b| (signer, b))
        })
        .collect();
    let answers =
        join_all(batches.into_iter().map(|(signer, b)| ask_trainer(net.clone(), reading.round, signer, b)))
            .await;
    let mut known: BTreeMap<Place, Projections> = answers.into_iter().flatten().collect();
    let mut verdicts = Vec::with_capacity(audits.len());
    for (i, a) in audits.into_iter().enumerate() {
        if !fetched[i] {
            verdicts.push((a, None));
            continue;
        }
        let entries = a.included.entries.iter().enumerate().map(|(e, (signer, root))| {
            let asked = known.remove(&(i, e));
            let (net, store, served, a) = (&net, &store, &served, &a);
            async move {
                match asked {
                    Some(p) => Some(p),
                    None => from_input(net, store, served, reading, a, *signer, *root).await,
                }
            }
        });
        let projections: Option<Vec<Projections>> = join_all(entries).await.into_iter().collect();
        let verdict = match projections {
            Some(p) => verdict(&store, reading, &a, p).await,
            None => None,
        };
        verdicts.push((a, verdict));
    }
    verdicts
}

/// Ask `signer` for the projections of its shards in `batch`: each
/// (audit, entry) with the answer, or nothing when it did not answer them
/// all.
async fn ask_trainer(
    net: NetHandle,
    round: u64,
    signer: PublicKey,
    batch: Vec<Ask>,
) -> Vec<(Place, Projections)> {
    let Some(peer) = peer_id_of(&signer) else { return Vec::new() };
    let asks: Vec<(u32, [u8; 32])> = batch.iter().map(|(_, ask)| *ask).collect();
    match transfer::ask(&net, peer, XferRequest::Projections { round, asks }).await {
        Some(XferResponse::Projections(sets)) if sets.len() == batch.len() => {
            batch.into_iter().map(|(at, _)| at).zip(sets).collect()
        }
        _ => Vec::new(),
    }
}

/// The projections of `signer`'s input to `a`'s shard from the input
/// itself: held, else pulled from its signer or a holder.
async fn from_input(
    net: &NetHandle,
    store: &Arc<Store>,
    served: &CommitteeServed,
    reading: ShardReading,
    a: &SketchAudit,
    signer: PublicKey,
    root: [u8; 32],
) -> Option<Projections> {
    let shard = a.result.shard;
    let elements = reading.layout.len(shard);
    let want = RecheckInputs {
        run: reading.run,
        round: reading.round,
        shard,
        shards: reading.layout.shards(),
        inputs: vec![(signer, root)],
        held: vec![served.leaf(reading.round, shard, signer)],
        holders: a.holders.clone(),
        cap: reading.codec.payload_len(elements as u64)?,
    };
    let offer = transfer::gather_inputs(net, store, &want).await?.pop()?;
    let (store, seed, codec) = (store.clone(), a.seed, reading.codec);
    tokio::task::spawn_blocking(move || {
        let payload = store.blobs.get(BlobKind::Delta, &offer.leaf.payload_hash.0).ok()?;
        let values = decode_delta(&payload, codec, elements).ok()?;
        sketch::project(&values, &SketchSigns::new(&seed, elements))
    })
    .await
    .ok()?
}

/// `sketch::verdict` of `a`'s aggregate (in the store) against its inputs'
/// projections.
async fn verdict(
    store: &Arc<Store>,
    reading: ShardReading,
    a: &SketchAudit,
    projections: Vec<Projections>,
) -> Option<bool> {
    let (store, hash, shard) = (store.clone(), a.result.result_hash, a.result.shard);
    let claims: Vec<InputClaim> = a.inputs.iter().map(InputClaim::of).collect();
    let seed = a.seed;
    tokio::task::spawn_blocking(move || {
        let codec = aggregate_codec(reading.codec);
        let payload = store.blobs.get(BlobKind::Aggregate, &hash).ok()?;
        let aggregate = decode_delta(&payload, codec, reading.layout.len(shard)).ok()?;
        sketch::verdict(&aggregate, codec, reading.rule, &seed, &claims, &projections)
    })
    .await
    .ok()?
}
