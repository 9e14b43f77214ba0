//! Fetching a content-addressed blob from several peers at once.
//!
//! The size is known before anything is asked (from a manifest or the run
//! spec) and capped by the caller; the buffer is allocated only after that
//! check. For a blob of more than one chunk, the chunk table comes first and
//! is checked against the blob id (`store::tree`); then chunks are requested
//! from every offered peer in parallel (a few in flight per peer, ties going
//! to the peer the caller listed first), each checked against its table
//! entry as it arrives. A peer that fails, lies or lacks the blob loses its
//! share, which goes to the others: a fetch resumes from the chunks it
//! holds, never from scratch.
//!
//! What a peer costs a fetch is counted per peer, never per chunk, so no
//! peer can use up the fetch for the others: bytes that do not match the
//! hash drop it at once (`NetRejection::BadChunk`); a `Busy` answer is
//! charged a little (`NetRejection::Busy`) and backs that peer off alone
//! (50 ms, doubling), and `MAX_BUSY` of them in a row drop it;
//! `MAX_FAILURES` failed or timed-out requests while the peer delivered no
//! chunk for `REQUEST_TIMEOUT` drop it (`NetRejection::Unresponsive`);
//! `NotFound` drops it uncharged, as does `NotAdmitted`. Every request has
//! its own `REQUEST_TIMEOUT`. The fetch fails only when no peer is left.
//! Admitted peers come first; a ticket run never asks a peer it does not
//! admit.
//!
//! Requests in flight to one peer share its link, so each peer has a
//! window: `FIRST_WINDOW` requests at first, one more for each chunk it
//! delivers (up to `IN_FLIGHT_PER_PEER`), halved at each failure. A peer
//! behind a congested uplink that still delivers is asked for fewer chunks
//! at once, each of which then arrives within its timeout, instead of
//! being left and its half-sent chunks asked for again. A failure it is
//! not charged for backs it off (100 ms, doubling, at most 3.2 s), so a
//! link that closed is not asked again in a loop.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use libp2p::PeerId;
use thiserror::Error;

use super::peers::NetRejection;
use super::xfer::{XferRequest, XferResponse};
use super::{NetError, NetHandle};
use crate::store::tree::{self, BlobKind};

/// Most chunk requests in flight to one peer (its window's ceiling).
pub const IN_FLIGHT_PER_PEER: usize = 8;
/// A peer's window when a fetch starts.
pub const FIRST_WINDOW: usize = 2;
/// How long one request may take, a 1 MiB chunk over a slow home link
/// included (libp2p's own request timeout is 60 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// `Busy` answers in a row after which a peer leaves the fetch.
pub const MAX_BUSY: u32 = 4;
/// Failed or timed-out requests, while the peer delivered nothing for
/// `REQUEST_TIMEOUT`, after which it leaves the fetch.
pub const MAX_FAILURES: u32 = 2;
/// The back-off after a peer's first `Busy` answer, doubled with each next.
const BUSY_BACKOFF: Duration = Duration::from_millis(50);

/// Why a fetch failed.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum FetchError {
    #[error("blob of {len} bytes exceeds the cap of {cap}")]
    TooLarge { len: u64, cap: u64 },
    #[error("an empty blob is never valid content")]
    Empty,
    #[error("no peer offered a valid chunk table")]
    NoTable,
    #[error("no peer left that serves the blob ({missing} chunks missing)")]
    NoPeers { missing: usize },
}

/// What a successful fetch returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub bytes: Vec<u8>,
    /// Chunks received from each peer.
    pub per_peer: Vec<(PeerId, usize)>,
}

/// One peer's standing in a fetch.
struct Source {
    peer: PeerId,
    in_flight: usize,
    /// Requests it may have in flight now.
    window: usize,
    served: usize,
    /// When it last delivered a good chunk.
    last_served: Option<tokio::time::Instant>,
    /// `Busy` answers since its last good chunk.
    busy: u32,
    /// Failures since its last good chunk that were not counted (it was
    /// still delivering): each backs it off longer.
    stalls: u32,
    failures: u32,
    /// Not asked again before this (after a `Busy`).
    resume_at: tokio::time::Instant,
}

/// What became of one answer, for the peer that gave it.
enum Verdict {
    Served,
    /// Out of this fetch, charged `NetRejection` if any.
    Dropped(Option<NetRejection>),
    /// Still in, asked again after its back-off; charged if any.
    BackedOff(Option<NetRejection>),
}

impl Source {
    fn new(peer: PeerId) -> Self {
        Source {
            peer,
            in_flight: 0,
            window: FIRST_WINDOW,
            served: 0,
            last_served: None,
            busy: 0,
            stalls: 0,
            failures: 0,
            resume_at: tokio::time::Instant::now(),
        }
    }

    /// Whether it delivered a chunk within the last `REQUEST_TIMEOUT`.
    fn delivering(&self, now: tokio::time::Instant) -> bool {
        self.last_served.is_some_and(|t| now.duration_since(t) < REQUEST_TIMEOUT)
    }

    fn judge(&mut self, answer: &Result<XferResponse, NetError>, good: bool) -> Verdict {
        match answer {
            _ if good => {
                self.served += 1;
                self.busy = 0;
                self.stalls = 0;
                self.last_served = Some(tokio::time::Instant::now());
                self.window = (self.window + 1).min(IN_FLIGHT_PER_PEER);
                Verdict::Served
            }
            Ok(XferResponse::Chunk(_)) => Verdict::Dropped(Some(NetRejection::BadChunk)),
            Ok(XferResponse::Busy) => {
                self.busy += 1;
                if self.busy >= MAX_BUSY {
                    return Verdict::Dropped(Some(NetRejection::Busy));
                }
                self.resume_at = tokio::time::Instant::now() + BUSY_BACKOFF * (1 << (self.busy - 1));
                Verdict::BackedOff(Some(NetRejection::Busy))
            }
            Ok(XferResponse::NotFound | XferResponse::NotAdmitted) => Verdict::Dropped(None),
            _ => {
                // Fewer requests at once share its link from now on; one
                // that still delivers is congested, not gone.
                self.window = (self.window / 2).max(1);
                let now = tokio::time::Instant::now();
                if self.delivering(now) {
                    // Not asked again at once: a link that closed fails
                    // every request the moment it is sent.
                    self.stalls += 1;
                    self.resume_at = now + BUSY_BACKOFF * (1 << self.stalls.min(6));
                    return Verdict::BackedOff(None);
                }
                self.failures += 1;
                match self.failures >= MAX_FAILURES {
                    true => Verdict::Dropped(Some(NetRejection::Unresponsive)),
                    false => Verdict::BackedOff(None),
                }
            }
        }
    }
}

/// Fetch blob `id` of `kind`, exactly `len` bytes (at most `cap`), from
/// `peers` (tried in order for the table; all used for chunks, the earlier
/// ones first among equally loaded peers). Admitted peers are asked before
/// strangers, and in a ticket run strangers never (`Gate::order`).
pub async fn fetch_blob(
    net: &NetHandle,
    kind: BlobKind,
    id: [u8; 32],
    len: u64,
    cap: u64,
    peers: &[PeerId],
) -> Result<Fetched, FetchError> {
    if len == 0 {
        return Err(FetchError::Empty);
    }
    if len > cap || tree::chunk_count(len) > tree::MAX_CHUNKS {
        return Err(FetchError::TooLarge { len, cap });
    }
    let peers = &net.gate.order(peers)[..];
    let n = tree::chunk_count(len);
    let table = if n == 1 { vec![id] } else { fetch_table(net, kind, id, len, peers).await? };
    let size = usize::try_from(len).map_err(|_| FetchError::TooLarge { len, cap })?;
    let mut bytes = vec![0u8; size];
    let mut todo: VecDeque<u64> = (0..n).collect();
    let mut pool: Vec<Source> = Vec::with_capacity(peers.len());
    for p in peers {
        if !pool.iter().any(|s| s.peer == *p) {
            pool.push(Source::new(*p));
        }
    }
    let mut served: Vec<(PeerId, usize)> = Vec::new();
    let mut in_flight = FuturesUnordered::new();
    let mut missing = n as usize;
    while missing > 0 {
        // Hand out chunks to peers with room and not backing off, least
        // loaded first (the earliest listed among equals).
        let now = tokio::time::Instant::now();
        while let Some(&index) = todo.front() {
            let ready = pool.iter_mut().filter(|s| s.in_flight < s.window && s.resume_at <= now);
            let Some(source) = ready.min_by_key(|s| s.in_flight) else {
                break;
            };
            source.in_flight += 1;
            let peer = source.peer;
            todo.pop_front();
            let net = net.clone();
            in_flight.push(async move {
                let r = net
                    .request_within(peer, XferRequest::Chunk { kind, id, len, index }, REQUEST_TIMEOUT)
                    .await;
                (peer, index, r)
            });
        }
        if pool.is_empty() && in_flight.is_empty() {
            return Err(FetchError::NoPeers { missing });
        }
        // Wait for an answer, or for the first backed-off peer to be askable.
        let wake = pool.iter().map(|s| s.resume_at).filter(|t| *t > now).min();
        let next = match (wake, in_flight.is_empty()) {
            (Some(at), true) => {
                tokio::time::sleep_until(at).await;
                continue;
            }
            (None, true) => return Err(FetchError::NoPeers { missing }),
            (Some(at), false) if !todo.is_empty() => tokio::select! {
                answer = in_flight.next() => answer,
                _ = tokio::time::sleep_until(at) => continue,
            },
            _ => in_flight.next().await,
        };
        let Some((peer, index, result)) = next else {
            continue;
        };
        let entry = usize::try_from(index).ok().and_then(|i| table.get(i).copied());
        let good = match &result {
            Ok(XferResponse::Chunk(b)) => entry.is_some() && tree::chunk_entry(kind, len, index, b) == entry,
            _ => false,
        };
        let verdict = match pool.iter_mut().position(|s| s.peer == peer) {
            Some(i) => {
                pool[i].in_flight = pool[i].in_flight.saturating_sub(1);
                let v = pool[i].judge(&result, good);
                if let Verdict::Dropped(_) = v {
                    let s = pool.remove(i);
                    served.push((s.peer, s.served));
                }
                v
            }
            // Already dropped: its late answers still count if good.
            None if good => Verdict::Served,
            None => Verdict::Dropped(None),
        };
        match (verdict, result) {
            (Verdict::Served, Ok(XferResponse::Chunk(b))) => {
                if let Some((offset, _)) = tree::chunk_range(len, index) {
                    let o = offset as usize;
                    bytes[o..o + b.len()].copy_from_slice(&b);
                    missing -= 1;
                }
            }
            (Verdict::Dropped(charge) | Verdict::BackedOff(charge), _) => {
                if let Some(reason) = charge {
                    net.penalize(peer, reason);
                }
                todo.push_front(index);
            }
            (Verdict::Served, _) => todo.push_front(index),
        }
    }
    served.extend(pool.iter().map(|s| (s.peer, s.served)));
    Ok(Fetched { bytes, per_peer: served })
}

async fn fetch_table(
    net: &NetHandle,
    kind: BlobKind,
    id: [u8; 32],
    len: u64,
    peers: &[PeerId],
) -> Result<Vec<[u8; 32]>, FetchError> {
    // Two passes: a peer that was busy on the first is asked once more.
    let mut busy: Vec<PeerId> = Vec::new();
    for pass in 0..2 {
        let asked: Vec<PeerId> = if pass == 0 { peers.to_vec() } else { std::mem::take(&mut busy) };
        if pass == 1 && !asked.is_empty() {
            tokio::time::sleep(BUSY_BACKOFF * 4).await;
        }
        for peer in asked {
            match net.request_within(peer, XferRequest::Table { kind, id, len }, REQUEST_TIMEOUT).await {
                Ok(XferResponse::Table(t)) if tree::table_matches(kind, &id, len, &t) => return Ok(t),
                Ok(XferResponse::Table(_)) => net.penalize(peer, NetRejection::BadChunk),
                Ok(XferResponse::Busy) if pass == 0 => busy.push(peer),
                Ok(XferResponse::Busy) => net.penalize(peer, NetRejection::Busy),
                _ => {}
            }
        }
    }
    Err(FetchError::NoTable)
}
