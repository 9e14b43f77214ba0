//! What each exchange of `murmur netsim` costs on the node's wire: the
//! transfer protocol's frames as the node encodes them (`net::xfer`,
//! `net::offer`), one libp2p stream per request, and gossip as the node's
//! gossipsub sends it (anonymous envelopes on the run's topics, mesh degree
//! `net::behaviour::MESH_DEGREE`). The simulator charges these byte counts; it does
//! not encode real frames for every message.

use murmur_protocol::committee::{ShardLeaf, ShardedManifest};

use murmur_protocol::committee::sketch::PROJECTIONS;

use crate::net::offer::ShardOffer;
use crate::net::xfer::MAX_PROJECTION_ASKS;
use crate::net::{XferRequest, XferResponse};
use crate::store::tree::{chunk_count, CHUNK_LEN};
use crate::store::BlobKind;

/// Bytes a request-response stream costs per direction beyond its frame:
/// multistream-select's two protocol lines (about 40 bytes), yamux's frame
/// headers for opening, writing and closing the stream (12 bytes each),
/// and noise's length and tag on each transport message (18 bytes each).
/// An estimate from those protocols' framing, not a measurement.
pub const STREAM_BYTES: u64 = 120;

/// Bytes one gossip copy costs beyond its `data`: the topic
/// (`murmur/1/<64 hex>/<kind>`, about 85 bytes), the protobuf fields of an
/// anonymous message and its RPC (about 10), and one yamux header and noise
/// frame (30). An estimate, as `STREAM_BYTES` is.
pub const GOSSIP_ENVELOPE_BYTES: u64 = 125;

/// A frame: its `u32` length prefix and its body.
fn frame(body: usize) -> u64 {
    4 + body as u64 + STREAM_BYTES
}

/// One request and its answer, both directions.
pub fn exchange(request: &XferRequest, response: &XferResponse) -> u64 {
    frame(request.encode().len()) + frame(response.encode().len())
}

/// A request whose answer is `body` bytes after the answer's header.
fn exchange_with_body(request: &XferRequest, header: usize, body: u64) -> u64 {
    frame(request.encode().len()) + frame(header) + body
}

/// Fetching a `len`-byte blob from one peer: its chunk table when it has
/// more than one chunk, then every chunk.
pub fn blob(len: u64) -> u64 {
    let (kind, id) = (BlobKind::Delta, [0; 32]);
    let n = chunk_count(len);
    let table =
        if n > 1 { exchange_with_body(&XferRequest::Table { kind, id, len }, 2 + 4, 32 * n) } else { 0 };
    let chunk = |i: u64| (len - i * CHUNK_LEN).min(CHUNK_LEN);
    let chunks: u64 = (0..n)
        .map(|index| exchange_with_body(&XferRequest::Chunk { kind, id, len, index }, 2 + 4, chunk(index)))
        .sum();
    table + chunks
}

/// Sending a shard: the offer and its `Accepted`, then the pull of the
/// payload unless it travelled inline.
pub fn offer(offer: &ShardOffer) -> u64 {
    let bare = ShardOffer { payload: None, ..offer.clone() };
    let sent = exchange(&XferRequest::Offer(bare), &XferResponse::Accepted);
    if offer.travels_inline() {
        sent + offer.leaf.payload_len
    } else {
        sent + blob(offer.leaf.payload_len)
    }
}

/// Asking for an included list (or included signers) of `body` bytes.
pub fn included(body: usize) -> u64 {
    let request = XferRequest::Included { round: 0, shard: 0, result_hash: [0; 32] };
    exchange_with_body(&request, 2 + 4, body as u64)
}

/// Asking one trainer for the projections of `n` of its shards: one
/// request per `MAX_PROJECTION_ASKS`, and the answers.
pub fn projections(n: usize) -> u64 {
    let batch = |k: usize| {
        let request = XferRequest::Projections { round: 0, asks: vec![(0, [0; 32]); k] };
        exchange(&request, &XferResponse::Projections(vec![[0.0; PROJECTIONS]; k]))
    };
    let full = n / MAX_PROJECTION_ASKS;
    let rest = n % MAX_PROJECTION_ASKS;
    full as u64 * batch(MAX_PROJECTION_ASKS) + if rest > 0 { batch(rest) } else { 0 }
}

/// Pulling one input for a re-check: its leaf (an offer without payload:
/// the leaf, its Merkle proof in a tree of `shards` leaves, `manifest`),
/// then its payload.
pub fn input(leaf: ShardLeaf, shards: u32, manifest: &ShardedManifest) -> u64 {
    let depth = (u32::BITS - shards.max(1).saturating_sub(1).leading_zeros()) as usize;
    let offer = ShardOffer {
        round: manifest.round,
        signer: manifest.signer,
        shards,
        leaf,
        proof: vec![[0; 32]; depth],
        manifest: Box::new(manifest.clone()),
        payload: None,
    };
    let request = XferRequest::Leaf { round: 0, shard: 0, signer: offer.signer };
    exchange(&request, &XferResponse::Leaf(offer)) + blob(leaf.payload_len)
}

/// Fetching a state: its parts, the ledger of `ledger_len` bytes and the
/// parameters of `state_len` bytes.
pub fn state(ledger_len: u64, state_len: u64) -> u64 {
    let parts = exchange(
        &XferRequest::StateParts { state: [0; 32] },
        &XferResponse::StateParts { params: [0; 32], ledger: [0; 32], ledger_len },
    );
    parts + blob(ledger_len) + blob(state_len)
}

/// One copy of a gossip message of `data` bytes.
pub fn gossip(data: usize) -> u64 {
    data as u64 + GOSSIP_ENVELOPE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::{NodeKey, PayloadHash};

    fn offer_of(payload_len: u64) -> ShardOffer {
        let key = NodeKey::from_seed([1; 32]);
        ShardOffer {
            round: 1,
            signer: key.public(),
            shards: 1000,
            leaf: ShardLeaf { shard: 3, payload_hash: PayloadHash([2; 32]), payload_len, norm: 1.0 },
            proof: vec![[3; 32]; 10],
            manifest: Box::new(crate::net::offer::test_manifest(&key, 1, 1000)),
            payload: None,
        }
    }

    #[test]
    fn a_short_shard_costs_one_exchange_and_a_long_one_adds_its_pull() {
        let m = offer_of(1).manifest.encode().len() as u64;
        let short = offer(&offer_of(1_100));
        // The offer's fields (93 bytes), its proof, its manifest and its
        // payload, framed, and the answer.
        assert_eq!(short, (4 + 2 + 93 + 320 + 2 + m + 2 + 1_100 + STREAM_BYTES) + (4 + 2 + STREAM_BYTES));
        let long = offer(&offer_of(5_000));
        let pull = blob(5_000);
        assert_eq!(long, (4 + 2 + 93 + 320 + 2 + m + 2 + STREAM_BYTES) + (4 + 2 + STREAM_BYTES) + pull);
        // One chunk: no table.
        assert_eq!(pull, (4 + 2 + 1 + 32 + 8 + 8 + STREAM_BYTES) + (4 + 2 + 4 + STREAM_BYTES) + 5_000);
        assert!(blob(3 * CHUNK_LEN) > 3 * pull.min(CHUNK_LEN), "a table and three chunks");
        // A re-check's input: the leaf with a 10-deep proof (1,000 shards)
        // and the manifest, then the payload.
        let o = offer_of(1_100);
        let leaf_answer = 4 + 2 + 93 + 320 + 2 + m + 2 + STREAM_BYTES;
        let leaf_ask = 4 + 2 + 8 + 4 + 32 + STREAM_BYTES;
        assert_eq!(input(o.leaf, 1000, &o.manifest), leaf_ask + leaf_answer + blob(1_100));
    }
}
