//! Sketch audits on the node (`committee::sketch`): for each audited result
//! the aggregate (fetched unless held), and the projections of every
//! included input — computed here for an input this node holds, else asked
//! of its trainer (one request per trainer for all the shards the audits
//! name of it), else computed from the input pulled from the shard's
//! holders, as a re-check pulls it — then each audit's verdict. Nothing
//! here decides what an audit means: the machine gets the verdicts.
//!
//! No peer holds back another's audit: each audit's aggregate has its own
//! deadline (`deadline_for`, a floor plus its bytes at `MIN_RATE`), past
//! which that audit reports no verdict (the machine then re-checks from
//! the inputs); each verdict is reported as soon as it is reached, its
//! inputs' projections within a deadline of their own.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
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

/// What any audit may wait for its bytes, however few.
pub const FETCH_FLOOR: Duration = Duration::from_secs(20);
/// The slowest a peer may serve an audit's bytes (128 KiB/s) before the
/// audit stops waiting for it.
pub const MIN_RATE: u64 = 128 << 10;

/// How long an audit waits for `bytes` from peers: `FETCH_FLOOR`, plus
/// their length at `MIN_RATE`.
pub fn deadline_for(bytes: u64) -> Duration {
    FETCH_FLOOR + Duration::from_millis(bytes.saturating_mul(1000) / MIN_RATE)
}

/// Audit `audits` by sketch, calling `report` with each audit's verdict
/// (None: it could not tell; the machine re-checks) as soon as it is
/// reached.
pub async fn sketch(
    net: NetHandle,
    store: Arc<Store>,
    served: Arc<CommitteeServed>,
    fetching: Arc<transfer::AggregateFetches>,
    reading: ShardReading,
    audits: Vec<SketchAudit>,
    mut report: impl FnMut(SketchAudit, Option<bool>),
) {
    let fetches = audits.iter().map(|a| {
        let r = &a.result;
        let elements = reading.layout.len(r.shard);
        let form = (aggregate_codec(reading.codec), elements);
        let bytes = form.0.payload_len(elements as u64).unwrap_or(0);
        let (net, store, fetching) = (net.clone(), store.clone(), fetching.clone());
        let (key, signer) = ((r.round, r.shard, r.result_hash), r.signer);
        let fetch = async move {
            let (outcome, ..) = transfer::fetch_aggregate(net, store, &fetching, key, form, signer).await;
            outcome == FetchOutcome::Served
        };
        (fetch, deadline_for(bytes))
    });
    let fetched = within_deadlines(fetches).await;
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
            report(a, None);
            continue;
        }
        let asked: Vec<Option<Projections>> =
            (0..a.included.entries.len()).map(|e| known.remove(&(i, e))).collect();
        // The inputs this node may still pull, at most one shard's worth each.
        let missing = asked.iter().filter(|p| p.is_none()).count() as u64;
        let bytes = missing.saturating_mul(
            reading.codec.payload_len(reading.layout.len(a.result.shard) as u64).unwrap_or(0),
        );
        let (net, store, served, audit) = (net.clone(), store.clone(), served.clone(), a.clone());
        let verdict = async move {
            let a = audit;
            let entries = a.included.entries.iter().zip(asked).map(|((signer, root), asked)| {
                let (net, store, served, a) = (&net, &store, &served, &a);
                async move {
                    match asked {
                        Some(p) => Some(p),
                        None => from_input(net, store, served, reading, a, *signer, *root).await,
                    }
                }
            });
            let projections: Option<Vec<Projections>> = join_all(entries).await.into_iter().collect();
            match projections {
                Some(p) => verdict(&store, reading, &a, p).await,
                None => None,
            }
        };
        verdicts.push((a, verdict, deadline_for(bytes)));
    }
    report_each(verdicts, report).await;
}

/// Run `fetches` side by side, each within its own deadline: whether each
/// ended with its bytes by then.
async fn within_deadlines<F: Future<Output = bool>>(
    fetches: impl Iterator<Item = (F, Duration)>,
) -> Vec<bool> {
    join_all(fetches.map(|(f, wait)| async move { tokio::time::timeout(wait, f).await.unwrap_or(false) }))
        .await
}

/// Run `verdicts` side by side and report each with its audit as it is
/// reached; one not reached within its deadline is reported then, as no
/// verdict.
async fn report_each<T, F: Future<Output = Option<bool>>>(
    verdicts: Vec<(T, F, Duration)>,
    mut report: impl FnMut(T, Option<bool>),
) {
    let mut running: FuturesUnordered<_> = verdicts
        .into_iter()
        .map(|(audit, f, wait)| async move { (audit, tokio::time::timeout(wait, f).await.ok().flatten()) })
        .collect();
    while let Some((audit, verdict)) = running.next().await {
        report(audit, verdict);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::sync::Mutex;
    use tokio::time::Instant;

    type Fetch = Pin<Box<dyn Future<Output = bool>>>;
    type Verdict = Pin<Box<dyn Future<Output = Option<bool>>>>;

    #[tokio::test]
    async fn a_peer_that_serves_an_audit_slowly_holds_back_only_that_audit() {
        // Audit 0's aggregate never comes in time; audit 1's comes at once.
        let wait = Duration::from_millis(300);
        let started = Instant::now();
        let trickle: Fetch = Box::pin(std::future::pending());
        let quick: Fetch = Box::pin(async { true });
        let fetched = within_deadlines([(trickle, wait), (quick, wait)].into_iter()).await;
        assert_eq!(fetched, vec![false, true]);
        assert!(started.elapsed() >= wait, "the slow one is given up at its deadline");
        // Verdicts: audit 0 waits on a trainer that never answers; audit 1
        // is reached at once and reported before audit 0's deadline.
        let reported: Mutex<Vec<(u32, Option<bool>, Duration)>> = Mutex::new(Vec::new());
        let started = Instant::now();
        let silent: Verdict = Box::pin(std::future::pending());
        let reached: Verdict = Box::pin(async { Some(true) });
        report_each(vec![(0u32, silent, wait), (1, reached, wait)], |a, v| {
            reported.lock().expect("reports").push((a, v, started.elapsed()))
        })
        .await;
        let reported = reported.into_inner().expect("reports");
        assert_eq!(reported.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(), vec![(1, Some(true)), (0, None)]);
        assert!(reported[0].2 < wait, "reported before the slow audit's deadline: {reported:?}");
        assert!(reported[1].2 >= wait, "the slow audit at its deadline: {reported:?}");
    }

    #[test]
    fn an_audits_deadline_grows_with_its_bytes_at_the_slowest_rate_taken() {
        assert_eq!(deadline_for(0), FETCH_FLOOR);
        assert_eq!(deadline_for(MIN_RATE * 10), FETCH_FLOOR + Duration::from_secs(10));
        assert_eq!(deadline_for(u64::MAX), FETCH_FLOOR + Duration::from_millis(u64::MAX / MIN_RATE));
    }
}
