//! The content-transfer protocol `/murmur/xfer/1.0.0`: run status, chunk
//! tables and chunks of content-addressed blobs, as request-response frames.
//!
//! Every frame is a u32 little-endian length then that many bytes; the
//! length is checked against the frame cap before anything is allocated.
//! Decoders are total: malformed bytes are an error, never a panic.
//!
//! Chunks are the bulk of the traffic, so the codec moves them without
//! intermediate copies: a chunk response is written as its small header and
//! then the chunk's own bytes, and read straight into a buffer of the
//! chunk's (capped) length. Every other frame is encoded and decoded whole.

use bytes::Bytes;
use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::StreamProtocol;
use std::io;

use super::offer::ShardOffer;
use crate::store::tree::{BlobKind, CHUNK_LEN, MAX_CHUNKS};
use murmur_protocol::committee::sketch::PROJECTIONS;
use murmur_protocol::ticket::TICKET_BYTES;
use murmur_protocol::{PublicKey, Ticket};

/// Protocol id of the transfer protocol.
pub const XFER_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/xfer/1.0.0");
/// Wire version byte of every frame body.
pub const XFER_VERSION: u8 = 1;
/// Largest request frame body (a shard offer with its proof and manifest).
pub const MAX_REQUEST_BYTES: usize = 8192;
const _: () = assert!(super::offer::MAX_OFFER_BYTES + 16 <= MAX_REQUEST_BYTES);
/// Most (shard, seed) asks in one `Projections` request.
pub const MAX_PROJECTION_ASKS: usize = 16;
/// Largest included list served (entries of 64 bytes in one response frame).
pub const MAX_SERVED_LIST_BYTES: usize = 1 << 20;
/// Longest signed result served.
pub const MAX_SERVED_RESULT_BYTES: usize = 1024;
/// Largest RunSpec carried in a status response.
pub const MAX_SPEC_BYTES: usize = 256 * 1024;
/// Largest ticket carried in a status response.
pub const MAX_STATUS_TICKET_BYTES: usize = 1024;
/// Most backing results carried in a status response.
pub const MAX_STATUS_BACKING: usize = 128;
/// Largest backing result carried in a status response.
pub const MAX_STATUS_RESULT_BYTES: usize = 64 * 1024;
/// Most bytes of backing results and tickets a node puts in one status
/// (so that the spec, the backing and the framing fit a response frame).
pub const STATUS_BACKING_BUDGET: usize = 512 * 1024;
/// Largest response frame body: one chunk plus its framing.
pub const MAX_RESPONSE_BYTES: usize = CHUNK_LEN as usize + 64;
/// Response op of a chunk.
const OP_CHUNK: u8 = 3;
/// Bytes of a chunk response body before the chunk: version, op, `n: u32`.
const CHUNK_HEAD: usize = 6;
/// The first write of a chunk response carries its frame header and up to
/// this many body bytes, so the header never travels in a frame of its own.
const FIRST_WRITE: usize = 16 * 1024;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XferRequest {
    /// What run the peer serves and where it stands.
    Status,
    /// The chunk table of blob `id` (`len` bytes, as the requester expects).
    Table { kind: BlobKind, id: [u8; 32], len: u64 },
    /// Chunk `index` of blob `id` of `len` bytes.
    Chunk { kind: BlobKind, id: [u8; 32], len: u64, index: u64 },
    /// One shard of the sender's (or another signer's) delta
    /// for the receiver's committee; the receiver pulls the payload.
    Offer(ShardOffer),
    /// The included list behind the responder's result
    /// `result_hash` for `shard` of `round`.
    Included { round: u64, shard: u32, result_hash: [u8; 32] },
    /// The leaf and proof the responder holds of `signer`'s
    /// shard `shard` in `round` (re-checks pull inputs this way).
    Leaf { round: u64, shard: u32, signer: PublicKey },
    /// The included signers (IncludedSigners, against the
    /// round's roster) of the responder's result `result_hash`.
    Signers { round: u64, shard: u32, result_hash: [u8; 32] },
    /// The parts of state `state` the responder holds (its
    /// parameters' StateId and its ledger's hash and length).
    StateParts { state: [u8; 32] },
    /// The requester's own admission ticket, presented to a peer of a
    /// ticket run that answered `NotAdmitted`.
    Present(Ticket),
    /// The sketch projections (`committee::sketch`) of the
    /// responder's own shards of `round`, each (shard, seed) under the
    /// auditor's seed for it (1 to `MAX_PROJECTION_ASKS`, one per audited
    /// shard).
    Projections { round: u64, asks: Vec<(u32, [u8; 32])> },
    /// The responder's own signed result for `shard` of
    /// `round` (a node that missed its gossip asks the owner).
    Result { round: u64, shard: u32 },
}

/// A signed result a peer offers as backing for its state, with the
/// signer's ticket when the run admits by ticket (canonical bytes each;
/// the receiver decodes and checks them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusBacking {
    pub result: Vec<u8>,
    pub ticket: Option<Vec<u8>>,
}

impl StatusBacking {
    /// Bytes this entry takes in a status frame.
    pub fn wire_len(&self) -> usize {
        4 + self.result.len() + 2 + self.ticket.as_ref().map_or(0, Vec::len)
    }
}

/// A peer's status: its run and its current position.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeerStatus {
    /// Canonical RunSpec bytes.
    pub spec: Vec<u8>,
    /// Round the peer is in.
    pub round: u64,
    /// The state it trains from in that round, when it holds one it serves.
    pub state: Option<[u8; 32]>,
    /// Whether the peer trains (bootstrap servers and observers do not).
    pub trainer: bool,
    /// The peer's own admission ticket (canonical bytes), if it has one.
    pub ticket: Option<Vec<u8>>,
    /// Recent signed results (newest rounds first) backing where it stands.
    pub backing: Vec<StatusBacking>,
}

/// A response.
#[derive(Debug, Clone, PartialEq)]
pub enum XferResponse {
    Status(PeerStatus),
    Table(Vec<[u8; 32]>),
    /// A chunk's bytes (shared, not copied, when served from a cache).
    Chunk(Bytes),
    NotFound,
    Busy,
    /// A shard offer was taken (the payload will be pulled).
    Accepted,
    /// An included list or included signers (the canonical IncludedList or
    /// IncludedSigners bytes the request asked for, decoded by the asker).
    Included(Vec<u8>),
    /// A signed ShardResult (canonical bytes, decoded and checked by the
    /// asker), at most `MAX_SERVED_RESULT_BYTES`.
    Result(Vec<u8>),
    Leaf(ShardOffer),
    StateParts {
        params: [u8; 32],
        ledger: [u8; 32],
        ledger_len: u64,
    },
    /// A presented ticket admitted its holder.
    Admitted,
    /// The requester is not admitted to this ticket run (and a presented
    /// ticket did not admit it): nothing is served to it.
    NotAdmitted,
    /// The projections a `Projections` request asked for, one set per ask
    /// in its order (finite).
    Projections(Vec<[f64; PROJECTIONS]>),
}

/// Why a frame was refused (carried inside the `io::Error` the codec returns,
/// so the swarm can charge the sender with a typed reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame exceeds its cap")]
    Oversized,
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

impl FrameError {
    /// The frame error inside an I/O error from the codec, if any.
    pub fn of(e: &io::Error) -> Option<FrameError> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<FrameError>()).copied()
    }
}

/// Malformed frame.
pub(crate) fn malformed(what: &'static str) -> io::Error {
    bad(what)
}

/// Malformed frame.
fn bad(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, FrameError::Malformed(what))
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad("truncated frame"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> io::Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    /// `u16` length (0 = absent) then that many bytes, at most `cap`.
    fn opt_bytes(&mut self, cap: usize) -> io::Result<Option<Vec<u8>>> {
        let n = usize::from(self.u16()?);
        if n > cap {
            return Err(bad("ticket too long"));
        }
        (n > 0).then(|| self.take(n).map(<[u8]>::to_vec)).transpose()
    }
    fn u32(&mut self) -> io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> io::Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn id(&mut self) -> io::Result<[u8; 32]> {
        let mut a = [0u8; 32];
        a.copy_from_slice(self.take(32)?);
        Ok(a)
    }
    fn kind(&mut self) -> io::Result<BlobKind> {
        BlobKind::from_u8(self.u8()?).ok_or_else(|| bad("unknown blob kind"))
    }
    fn finish(self) -> io::Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(bad("trailing bytes"))
        }
    }
    fn header(&mut self) -> io::Result<u8> {
        if self.u8()? != XFER_VERSION {
            return Err(bad("unsupported transfer protocol version"));
        }
        self.u8()
    }
}

impl XferRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![XFER_VERSION];
        match self {
            XferRequest::Status => out.push(1),
            XferRequest::Table { kind, id, len } => {
                out.extend([2, kind.to_u8()]);
                out.extend_from_slice(id);
                out.extend_from_slice(&len.to_le_bytes());
            }
            XferRequest::Chunk { kind, id, len, index } => {
                out.extend([3, kind.to_u8()]);
                out.extend_from_slice(id);
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&index.to_le_bytes());
            }
            XferRequest::Offer(o) => {
                out.push(4);
                o.write(&mut out);
            }
            XferRequest::Included { round, shard, result_hash } => {
                out.push(5);
                out.extend_from_slice(&round.to_le_bytes());
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(result_hash);
            }
            XferRequest::Leaf { round, shard, signer } => {
                out.push(6);
                out.extend_from_slice(&round.to_le_bytes());
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(&signer.0);
            }
            XferRequest::StateParts { state } => {
                out.push(7);
                out.extend_from_slice(state);
            }
            XferRequest::Present(t) => {
                out.push(8);
                out.extend_from_slice(&t.encode());
            }
            XferRequest::Signers { round, shard, result_hash } => {
                out.push(9);
                out.extend_from_slice(&round.to_le_bytes());
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(result_hash);
            }
            XferRequest::Projections { round, asks } => {
                out.push(10);
                out.extend_from_slice(&round.to_le_bytes());
                out.push(asks.len() as u8);
                for (shard, seed) in asks {
                    out.extend_from_slice(&shard.to_le_bytes());
                    out.extend_from_slice(seed);
                }
            }
            XferRequest::Result { round, shard } => {
                out.push(11);
                out.extend_from_slice(&round.to_le_bytes());
                out.extend_from_slice(&shard.to_le_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> io::Result<Self> {
        let mut c = Cursor(bytes);
        let r = match c.header()? {
            1 => XferRequest::Status,
            2 => XferRequest::Table { kind: c.kind()?, id: c.id()?, len: c.u64()? },
            3 => XferRequest::Chunk { kind: c.kind()?, id: c.id()?, len: c.u64()?, index: c.u64()? },
            4 => {
                let (o, rest) = ShardOffer::read(c.0)?;
                c = Cursor(rest);
                XferRequest::Offer(o)
            }
            5 => XferRequest::Included { round: c.u64()?, shard: c.u32()?, result_hash: c.id()? },
            6 => XferRequest::Leaf { round: c.u64()?, shard: c.u32()?, signer: PublicKey(c.id()?) },
            7 => XferRequest::StateParts { state: c.id()? },
            8 => XferRequest::Present(
                Ticket::decode(c.take(TICKET_BYTES)?).map_err(|_| bad("malformed ticket"))?,
            ),
            9 => XferRequest::Signers { round: c.u64()?, shard: c.u32()?, result_hash: c.id()? },
            10 => {
                let round = c.u64()?;
                let n = usize::from(c.u8()?);
                if n == 0 || n > MAX_PROJECTION_ASKS {
                    return Err(bad("projection asks not in 1..=16"));
                }
                let asks = (0..n).map(|_| Ok((c.u32()?, c.id()?))).collect::<io::Result<Vec<_>>>()?;
                XferRequest::Projections { round, asks }
            }
            11 => XferRequest::Result { round: c.u64()?, shard: c.u32()? },
            _ => return Err(bad("unknown request")),
        };
        c.finish()?;
        Ok(r)
    }
}

impl XferResponse {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![XFER_VERSION];
        match self {
            XferResponse::Status(s) => {
                out.push(1);
                out.extend_from_slice(&(s.spec.len() as u32).to_le_bytes());
                out.extend_from_slice(&s.spec);
                out.extend_from_slice(&s.round.to_le_bytes());
                match s.state {
                    Some(id) => {
                        out.push(1);
                        out.extend_from_slice(&id);
                    }
                    None => out.push(0),
                }
                out.push(u8::from(s.trainer));
                put_opt_bytes(&mut out, s.ticket.as_deref());
                out.extend_from_slice(&(s.backing.len() as u16).to_le_bytes());
                for b in &s.backing {
                    out.extend_from_slice(&(b.result.len() as u32).to_le_bytes());
                    out.extend_from_slice(&b.result);
                    put_opt_bytes(&mut out, b.ticket.as_deref());
                }
            }
            XferResponse::Table(t) => {
                out.push(2);
                out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                for e in t {
                    out.extend_from_slice(e);
                }
            }
            XferResponse::Chunk(b) => {
                out.push(OP_CHUNK);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            XferResponse::NotFound => out.push(4),
            XferResponse::Busy => out.push(5),
            XferResponse::Accepted => out.push(6),
            XferResponse::Included(b) => {
                out.push(7);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            XferResponse::Leaf(o) => {
                out.push(8);
                o.write(&mut out);
            }
            XferResponse::StateParts { params, ledger, ledger_len } => {
                out.push(9);
                out.extend_from_slice(params);
                out.extend_from_slice(ledger);
                out.extend_from_slice(&ledger_len.to_le_bytes());
            }
            XferResponse::Admitted => out.push(10),
            XferResponse::NotAdmitted => out.push(11),
            XferResponse::Projections(sets) => {
                out.push(12);
                out.push(sets.len() as u8);
                for v in sets.iter().flatten() {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            XferResponse::Result(b) => {
                out.push(13);
                out.extend_from_slice(&(b.len() as u16).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> io::Result<Self> {
        let mut c = Cursor(bytes);
        let r = match c.header()? {
            1 => {
                let n = c.u32()? as usize;
                if n > MAX_SPEC_BYTES {
                    return Err(bad("run spec too long"));
                }
                let spec = c.take(n)?.to_vec();
                let round = c.u64()?;
                let state = match c.u8()? {
                    0 => None,
                    1 => Some(c.id()?),
                    _ => return Err(bad("bad flag")),
                };
                let trainer = match c.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(bad("bad flag")),
                };
                let ticket = c.opt_bytes(MAX_STATUS_TICKET_BYTES)?;
                let n = usize::from(c.u16()?);
                if n > MAX_STATUS_BACKING {
                    return Err(bad("too many backing results"));
                }
                let mut backing = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = c.u32()? as usize;
                    if len == 0 || len > MAX_STATUS_RESULT_BYTES {
                        return Err(bad("backing result length out of range"));
                    }
                    let result = c.take(len)?.to_vec();
                    backing.push(StatusBacking { result, ticket: c.opt_bytes(MAX_STATUS_TICKET_BYTES)? });
                }
                XferResponse::Status(PeerStatus { spec, round, state, trainer, ticket, backing })
            }
            2 => {
                let n = c.u32()? as usize;
                if n as u64 > MAX_CHUNKS || n.saturating_mul(32) > c.0.len() {
                    return Err(bad("chunk table too long"));
                }
                let mut t = Vec::with_capacity(n);
                for _ in 0..n {
                    t.push(c.id()?);
                }
                XferResponse::Table(t)
            }
            OP_CHUNK => {
                let n = c.u32()? as usize;
                if n as u64 > CHUNK_LEN {
                    return Err(bad("chunk too long"));
                }
                XferResponse::Chunk(Bytes::copy_from_slice(c.take(n)?))
            }
            4 => XferResponse::NotFound,
            5 => XferResponse::Busy,
            6 => XferResponse::Accepted,
            7 => {
                let n = c.u32()? as usize;
                if n > MAX_SERVED_LIST_BYTES {
                    return Err(bad("included list too long"));
                }
                XferResponse::Included(c.take(n)?.to_vec())
            }
            8 => {
                let (o, rest) = ShardOffer::read(c.0)?;
                c = Cursor(rest);
                XferResponse::Leaf(o)
            }
            9 => XferResponse::StateParts { params: c.id()?, ledger: c.id()?, ledger_len: c.u64()? },
            10 => XferResponse::Admitted,
            11 => XferResponse::NotAdmitted,
            12 => {
                let n = usize::from(c.u8()?);
                if n == 0 || n > MAX_PROJECTION_ASKS {
                    return Err(bad("projection sets not in 1..=16"));
                }
                let mut sets = vec![[0f64; PROJECTIONS]; n];
                for v in sets.iter_mut().flatten() {
                    *v = f64::from_le_bytes(c.take(8)?.try_into().map_err(|_| bad("short projection"))?);
                    if !v.is_finite() {
                        return Err(bad("projection not finite"));
                    }
                }
                XferResponse::Projections(sets)
            }
            13 => {
                let n = usize::from(c.u16()?);
                if n > MAX_SERVED_RESULT_BYTES {
                    return Err(bad("result too long"));
                }
                XferResponse::Result(c.take(n)?.to_vec())
            }
            _ => return Err(bad("unknown response")),
        };
        c.finish()?;
        Ok(r)
    }
}

/// A `u16` length (0 = absent) and the bytes.
fn put_opt_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    let b = b.unwrap_or_default();
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

/// Read a frame's length prefix and check it against `cap`.
async fn read_len<T: AsyncRead + Unpin + Send>(io: &mut T, cap: usize) -> io::Result<usize> {
    let mut len = [0u8; 4];
    io.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > cap {
        return Err(io::Error::new(io::ErrorKind::InvalidData, FrameError::Oversized));
    }
    Ok(len)
}

async fn read_frame<T: AsyncRead + Unpin + Send>(io: &mut T, cap: usize) -> io::Result<Vec<u8>> {
    let len = read_len(io, cap).await?;
    let mut buf = vec![0u8; len];
    io.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Read a response frame. A chunk goes straight into a buffer of its own
/// length (checked against `CHUNK_LEN` and the frame length first); any
/// other response is read whole and decoded.
async fn read_response_frame<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<XferResponse> {
    let len = read_len(io, MAX_RESPONSE_BYTES).await?;
    let mut head = [0u8; CHUNK_HEAD];
    let h = len.min(CHUNK_HEAD);
    io.read_exact(&mut head[..h]).await?;
    if h == CHUNK_HEAD && head[0] == XFER_VERSION && head[1] == OP_CHUNK {
        let n = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
        if n as u64 > CHUNK_LEN {
            return Err(bad("chunk too long"));
        }
        if len < CHUNK_HEAD + n {
            return Err(bad("truncated frame"));
        }
        if len > CHUNK_HEAD + n {
            return Err(bad("trailing bytes"));
        }
        let mut chunk = vec![0u8; n];
        io.read_exact(&mut chunk).await?;
        return Ok(XferResponse::Chunk(Bytes::from(chunk)));
    }
    let mut body = vec![0u8; len];
    body[..h].copy_from_slice(&head[..h]);
    io.read_exact(&mut body[h..]).await?;
    XferResponse::decode(&body)
}

async fn write_frame<T: AsyncWrite + Unpin + Send>(io: &mut T, body: &[u8]) -> io::Result<()> {
    io.write_all(&(body.len() as u32).to_le_bytes()).await?;
    io.write_all(body).await?;
    io.close().await
}

/// Write a response frame. A chunk is written from its own buffer (the
/// frame header and the chunk's first bytes together, then the rest), never
/// copied into an encoded body first.
async fn write_response_frame<T: AsyncWrite + Unpin + Send>(
    io: &mut T,
    res: &XferResponse,
) -> io::Result<()> {
    let XferResponse::Chunk(chunk) = res else {
        return write_frame(io, &res.encode()).await;
    };
    let n = u32::try_from(chunk.len())
        .ok()
        .filter(|n| u64::from(*n) <= CHUNK_LEN)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, FrameError::Oversized))?;
    let lead = chunk.len().min(FIRST_WRITE - 4 - CHUNK_HEAD);
    let mut first = Vec::with_capacity(4 + CHUNK_HEAD + lead);
    first.extend_from_slice(&(CHUNK_HEAD as u32 + n).to_le_bytes());
    first.extend_from_slice(&[XFER_VERSION, OP_CHUNK]);
    first.extend_from_slice(&n.to_le_bytes());
    first.extend_from_slice(&chunk[..lead]);
    io.write_all(&first).await?;
    io.write_all(&chunk[lead..]).await?;
    io.close().await
}

/// The request-response codec of the transfer protocol.
#[derive(Debug, Clone, Copy, Default)]
pub struct XferCodec;

impl libp2p::request_response::Codec for XferCodec {
    type Protocol = StreamProtocol;
    type Request = XferRequest;
    type Response = XferResponse;

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<XferRequest> {
        XferRequest::decode(&read_frame(io, MAX_REQUEST_BYTES).await?)
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<XferResponse> {
        read_response_frame(io).await
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: XferRequest,
    ) -> io::Result<()> {
        write_frame(io, &req.encode()).await
    }

    async fn write_response<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: XferResponse,
    ) -> io::Result<()> {
        write_response_frame(io, &res).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer() -> ShardOffer {
        use murmur_protocol::committee::ShardLeaf;
        let key = murmur_protocol::NodeKey::from_seed([2; 32]);
        ShardOffer {
            round: 4,
            signer: key.public(),
            shards: 1 << 16,
            leaf: ShardLeaf {
                shard: 65_535,
                payload_hash: murmur_protocol::PayloadHash([5; 32]),
                payload_len: 9,
                norm: 0.5,
            },
            proof: vec![[7; 32]; 16],
            manifest: Box::new(super::super::offer::test_manifest(&key, 4, 1 << 16)),
            payload: Some(vec![3; 9]),
        }
    }

    #[test]
    fn every_message_round_trips() {
        let reqs = [
            XferRequest::Status,
            XferRequest::Table { kind: BlobKind::State, id: [7; 32], len: 99 },
            XferRequest::Chunk { kind: BlobKind::Delta, id: [1; 32], len: 5 << 20, index: 3 },
            XferRequest::Offer(offer()),
            XferRequest::Included { round: 3, shard: 2, result_hash: [6; 32] },
            XferRequest::Signers { round: 3, shard: 0, result_hash: [6; 32] },
            XferRequest::Leaf { round: 3, shard: 2, signer: PublicKey([8; 32]) },
            XferRequest::StateParts { state: [4; 32] },
            XferRequest::Projections { round: 3, asks: vec![(2, [9; 32]), (5, [1; 32])] },
            XferRequest::Result { round: 3, shard: 7 },
            XferRequest::Present(Ticket::issue(
                &murmur_protocol::NodeKey::from_seed([1; 32]),
                murmur_protocol::RunId([2; 32]),
                PublicKey([3; 32]),
                77,
            )),
        ];
        for r in reqs {
            let b = r.encode();
            assert!(b.len() <= MAX_REQUEST_BYTES);
            assert_eq!(XferRequest::decode(&b).expect("decodes"), r);
        }
        let resps = [
            XferResponse::Status(PeerStatus {
                spec: vec![1, 2, 3],
                round: 9,
                state: Some([4; 32]),
                trainer: true,
                ticket: Some(vec![8; 170]),
                backing: vec![
                    StatusBacking { result: vec![3; 238], ticket: None },
                    StatusBacking { result: vec![4; 270], ticket: Some(vec![5; 170]) },
                ],
            }),
            XferResponse::Status(PeerStatus::default()),
            XferResponse::Table(vec![[1; 32], [2; 32]]),
            XferResponse::Chunk(Bytes::from(vec![5; 1000])),
            XferResponse::NotFound,
            XferResponse::Busy,
            XferResponse::Accepted,
            XferResponse::Included(vec![1; 200]),
            XferResponse::Leaf(offer()),
            XferResponse::StateParts { params: [1; 32], ledger: [2; 32], ledger_len: 72 },
            XferResponse::Admitted,
            XferResponse::NotAdmitted,
            XferResponse::Projections(vec![[1.5, -2.0, 0.0, 1e300, -1e-300, 3.0, 4.0, 5.0], [0.5; 8]]),
            XferResponse::Result(vec![6; 250]),
        ];
        for r in resps {
            assert_eq!(XferResponse::decode(&r.encode()).expect("decodes"), r);
        }
    }

    #[test]
    fn malformed_frames_are_errors() {
        assert!(XferRequest::decode(&[]).is_err());
        assert!(XferRequest::decode(&[2, 1]).is_err());
        assert!(XferRequest::decode(&[1, 9]).is_err());
        assert!(XferRequest::decode(&[1, 2, 3]).is_err());
        let mut b = XferRequest::Status.encode();
        b.push(0);
        assert!(XferRequest::decode(&b).is_err());
        // A table that claims more entries than it carries, or than any blob has.
        let mut t = vec![1, 2];
        t.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(XferResponse::decode(&t).is_err());
        let mut c = vec![1, 3];
        c.extend_from_slice(&((CHUNK_LEN as u32) + 1).to_le_bytes());
        assert!(XferResponse::decode(&c).is_err());
        // A result longer than any signed result.
        let mut r = vec![1, 13];
        r.extend_from_slice(&((MAX_SERVED_RESULT_BYTES as u16) + 1).to_le_bytes());
        r.resize(r.len() + MAX_SERVED_RESULT_BYTES + 1, 0);
        assert!(XferResponse::decode(&r).is_err());
        // Projections that are not finite, or too few.
        let mut p = XferResponse::Projections(vec![[1.0; PROJECTIONS]]).encode();
        p[3..11].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(XferResponse::decode(&p).is_err());
        let short = XferResponse::Projections(vec![[1.0; PROJECTIONS]; 2]).encode();
        assert!(XferResponse::decode(&short[..short.len() - 1]).is_err());
        // No asks, or more than 16; no sets, or more than 16.
        for n in [0, MAX_PROJECTION_ASKS + 1] {
            let req = XferRequest::Projections { round: 1, asks: vec![(0, [0; 32]); n] }.encode();
            assert!(XferRequest::decode(&req).is_err(), "{n} asks");
            let mut resp = vec![1, 12, n as u8];
            resp.extend(std::iter::repeat_n(0u8, 8 * PROJECTIONS * n));
            assert!(XferResponse::decode(&resp).is_err(), "{n} sets");
        }
        // A status whose ticket, backing count or result length is past its cap.
        let status = |ticket: u16, n: u16, len: u32| {
            let mut b = XferResponse::Status(PeerStatus::default()).encode();
            b.truncate(b.len() - 4);
            b.extend_from_slice(&ticket.to_le_bytes());
            b.extend(std::iter::repeat_n(7u8, usize::from(ticket)));
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
            b
        };
        assert!(XferResponse::decode(&status(1025, 0, 0)[..]).is_err());
        assert!(XferResponse::decode(&status(0, 129, 1)).is_err());
        assert!(XferResponse::decode(&status(0, 1, 65_537)).is_err());
        assert!(XferResponse::decode(&status(0, 1, 0)).is_err());
        assert!(XferResponse::decode(&status(0, 1, 5)).is_err(), "result shorter than claimed");
        for n in 0..40u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            let _ = XferResponse::decode(&junk);
            let _ = XferRequest::decode(&junk);
        }
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    fn read_back(wire: Vec<u8>) -> io::Result<XferResponse> {
        futures::executor::block_on(read_response_frame(&mut futures::io::Cursor::new(wire)))
    }

    #[test]
    fn streamed_responses_match_the_whole_frame_encoding() {
        let chunk: Vec<u8> = (0..CHUNK_LEN as usize).map(|i| (i * 7 % 251) as u8).collect();
        let resps = [
            XferResponse::Chunk(Bytes::from(chunk)),
            XferResponse::Chunk(Bytes::from(vec![9u8; 100])),
            XferResponse::Chunk(Bytes::new()),
            XferResponse::Table(vec![[3; 32]; 5]),
            XferResponse::Status(PeerStatus {
                spec: vec![1; 10],
                round: 2,
                trainer: true,
                backing: vec![StatusBacking { result: vec![1; 9], ticket: None }],
                ..PeerStatus::default()
            }),
            XferResponse::NotFound,
            XferResponse::Busy,
            XferResponse::Accepted,
            XferResponse::Included(vec![1; 200]),
            XferResponse::Leaf(offer()),
            XferResponse::StateParts { params: [1; 32], ledger: [2; 32], ledger_len: 72 },
            XferResponse::Admitted,
            XferResponse::NotAdmitted,
            XferResponse::Projections(vec![[1.5, -2.0, 0.0, 1e300, -1e-300, 3.0, 4.0, 5.0], [0.5; 8]]),
            XferResponse::Result(vec![6; 250]),
        ];
        for r in resps {
            let mut wire = futures::io::Cursor::new(Vec::new());
            futures::executor::block_on(write_response_frame(&mut wire, &r)).expect("writes");
            let wire = wire.into_inner();
            assert_eq!(wire, framed(&r.encode()), "same bytes on the wire");
            assert_eq!(read_back(wire).expect("reads"), r);
        }
    }

    #[test]
    fn streamed_chunk_reads_check_lengths_before_allocating() {
        let body = |n: u32, extra: usize| {
            let mut b = vec![XFER_VERSION, OP_CHUNK];
            b.extend_from_slice(&n.to_le_bytes());
            b.extend(std::iter::repeat_n(0u8, extra));
            b
        };
        // A frame over the cap is refused as oversized, whatever it claims.
        let mut huge = ((MAX_RESPONSE_BYTES + 1) as u32).to_le_bytes().to_vec();
        huge.extend(body(10, 10));
        let e = read_back(huge).expect_err("oversized");
        assert_eq!(FrameError::of(&e), Some(FrameError::Oversized));
        // A chunk longer than a chunk, a frame shorter or longer than its chunk.
        for wire in [framed(&body(CHUNK_LEN as u32 + 1, 0)), framed(&body(10, 9)), framed(&body(10, 11))] {
            let e = read_back(wire).expect_err("malformed");
            assert!(matches!(FrameError::of(&e), Some(FrameError::Malformed(_))));
        }
        // A frame that ends early is an I/O error, not a short chunk.
        let mut cut = framed(&body(10, 10));
        cut.truncate(cut.len() - 1);
        assert!(read_back(cut).is_err());
        // Short frames and other ops take the whole-frame path.
        assert!(read_back(framed(&[XFER_VERSION])).is_err());
        assert!(read_back(framed(&[XFER_VERSION, 9, 0, 0, 0, 0])).is_err());
        assert!(read_back(framed(&[2, OP_CHUNK, 0, 0, 0, 0])).is_err());
    }
}
