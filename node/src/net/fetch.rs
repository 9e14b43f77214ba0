//! Fetching a content-addressed blob from several peers at once.
//!
//! The size is known before anything is asked (from a manifest or the run
//! spec) and capped by the caller; the buffer is allocated only after that
//! check. For a blob of more than one chunk, the chunk table comes first and
//! is checked against the blob id (`store::tree`); then chunks are requested
//! from every offered peer in parallel (a few in flight per peer), each
//! checked against its table entry as it arrives. A peer that fails, lies or
//! lacks the blob loses its share, which goes to the others: a fetch resumes
//! from the chunks it holds, never from scratch. Peers that send bytes not
//! matching the hash are charged (`NetRejection::BadChunk`).

use std::collections::VecDeque;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use libp2p::PeerId;
use thiserror::Error;

use super::peers::NetRejection;
use super::xfer::{XferRequest, XferResponse};
use super::NetHandle;
use crate::store::tree::{self, BlobKind};

/// Chunk requests in flight per peer.
pub const IN_FLIGHT_PER_PEER: usize = 8;
/// Attempts per chunk before the fetch gives up.
const MAX_ATTEMPTS: u32 = 6;

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

/// Fetch blob `id` of `kind`, exactly `len` bytes (at most `cap`), from
/// `peers` (tried in order for the table; all used for chunks).
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
    let n = tree::chunk_count(len);
    let table = if n == 1 { vec![id] } else { fetch_table(net, kind, id, len, peers).await? };
    let size = usize::try_from(len).map_err(|_| FetchError::TooLarge { len, cap })?;
    let mut bytes = vec![0u8; size];
    let mut todo: VecDeque<u64> = (0..n).collect();
    let mut attempts = vec![0u32; table.len()];
    let mut pool: Vec<(PeerId, usize, usize)> = peers.iter().map(|p| (*p, 0usize, 0usize)).collect(); // (peer, in flight, served)
    pool.dedup_by_key(|e| e.0);
    let mut in_flight = FuturesUnordered::new();
    let mut missing = n as usize;
    while missing > 0 {
        // Hand out chunks to peers with room, least-loaded first.
        while let Some(&index) = todo.front() {
            let Some(slot) = pool.iter_mut().filter(|e| e.1 < IN_FLIGHT_PER_PEER).min_by_key(|e| e.1) else {
                break;
            };
            slot.1 += 1;
            let peer = slot.0;
            todo.pop_front();
            let net = net.clone();
            in_flight.push(async move {
                let r = net.request(peer, XferRequest::Chunk { kind, id, len, index }).await;
                (peer, index, r)
            });
        }
        let Some((peer, index, result)) = in_flight.next().await else {
            return Err(FetchError::NoPeers { missing });
        };
        let slot = pool.iter().position(|e| e.0 == peer);
        if let Some(i) = slot {
            pool[i].1 = pool[i].1.saturating_sub(1);
        }
        let entry = usize::try_from(index).ok().and_then(|i| table.get(i).copied());
        let good = match &result {
            Ok(XferResponse::Chunk(b)) => entry.is_some() && tree::chunk_entry(kind, len, index, b) == entry,
            _ => false,
        };
        if good {
            if let (Ok(XferResponse::Chunk(b)), Some((offset, _))) = (result, tree::chunk_range(len, index)) {
                let o = offset as usize;
                bytes[o..o + b.len()].copy_from_slice(&b);
                missing -= 1;
                if let Some(i) = slot {
                    pool[i].2 += 1;
                }
            }
            continue;
        }
        // The chunk goes back to the queue; the peer is charged or dropped.
        let i = usize::try_from(index).unwrap_or(0).min(attempts.len().saturating_sub(1));
        attempts[i] += 1;
        if attempts[i] > MAX_ATTEMPTS {
            return Err(FetchError::NoPeers { missing });
        }
        todo.push_back(index);
        match result {
            Ok(XferResponse::Chunk(_)) => {
                net.penalize(peer, NetRejection::BadChunk);
                pool.retain(|e| e.0 != peer);
            }
            Ok(XferResponse::Busy) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            _ => pool.retain(|e| e.0 != peer),
        }
        if pool.is_empty() && in_flight.is_empty() {
            return Err(FetchError::NoPeers { missing });
        }
    }
    Ok(Fetched { bytes, per_peer: pool.iter().map(|e| (e.0, e.2)).collect() })
}

async fn fetch_table(
    net: &NetHandle,
    kind: BlobKind,
    id: [u8; 32],
    len: u64,
    peers: &[PeerId],
) -> Result<Vec<[u8; 32]>, FetchError> {
    for peer in peers {
        match net.request(*peer, XferRequest::Table { kind, id, len }).await {
            Ok(XferResponse::Table(t)) if tree::table_matches(kind, &id, len, &t) => return Ok(t),
            Ok(XferResponse::Table(_)) => net.penalize(*peer, NetRejection::BadChunk),
            _ => {}
        }
    }
    Err(FetchError::NoTable)
}
