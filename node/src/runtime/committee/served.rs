//! What a node answers on the transfer protocol beyond blobs:
//! shard offers (handed to the loop through a bounded queue), the leaves it
//! holds of this and the last round's shards (for re-checkers), signed
//! shard results (its own, and those its rounds applied: for nodes that
//! missed the gossip), the included lists behind its own (for auditors),
//! and the sketch projections
//! of its own shards (for auditors; a bounded number per requester and
//! round, each costing one pass over one shard).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use libp2p::PeerId;
use murmur_protocol::committee::sketch::{self, SketchSigns, PROJECTIONS};
use murmur_protocol::{decode_delta, Codec, PublicKey};
use tokio::sync::mpsc;

use crate::net::offer::ShardOffer;
use crate::net::xfer::{MAX_SERVED_LIST_BYTES, MAX_SERVED_RESULT_BYTES};
use crate::net::{public_key_of, XferRequest, XferResponse};
use crate::store::{BlobKind, BlobStore};

/// Offers queued for the loop before new ones are answered `Busy`.
pub const OFFER_QUEUE: usize = 4096;
/// Offers one peer may have queued at once: a trainer sends a node its
/// shard, and its backups' when they take shards over, a round.
pub const OFFERS_PER_PEER: usize = 64;
/// Most leaves held (this and the last round).
pub const MAX_HELD_LEAVES: usize = 1 << 17;
/// Most included lists held.
const MAX_HELD_LISTS: usize = 4096;
/// Most signed results of our own held (this and the last round).
const MAX_HELD_RESULTS: usize = 4096;
/// Most applied results held (this and the last round: a result a shard,
/// up to 65,536 shards a round).
const MAX_HELD_APPLIED: usize = 1 << 17;
/// Most projections (shards) one peer has had answered per round: an
/// auditor asks each trainer for each shard it audits.
pub const MAX_PROJECTIONS_PER_PEER: u32 = 64;
/// Most peers whose projection requests are counted per round.
const MAX_COUNTED_PEERS: usize = 1 << 16;

type LeafKey = (u64, u32, PublicKey);
type ListKey = (u64, u32, [u8; 32]);

/// A state's parts: the parameters' StateId, the ledger's hash and length.
pub type StateParts = ([u8; 32], [u8; 32], u64);

/// What the node serves of this and the last round, and of its states.
#[derive(Default)]
struct Catalogue {
    leaves: HashMap<LeafKey, ShardOffer>,
    /// Our results' included lists and included signers (canonical bytes).
    lists: HashMap<ListKey, (Vec<u8>, Vec<u8>)>,
    /// Our signed results: (round, shard) → canonical bytes.
    results: HashMap<(u64, u32), Vec<u8>>,
    /// The results our rounds applied: (round, shard) → canonical bytes.
    applied: HashMap<(u64, u32), Vec<u8>>,
    /// The current and the previous state, by StateId.
    states: Vec<([u8; 32], StateParts)>,
    /// Our own shards: (round, shard) → payload hash and element count.
    own: HashMap<(u64, u32), ([u8; 32], usize)>,
    /// Projection requests answered: (round, requester) → count.
    projected: HashMap<(u64, PeerId), u32>,
    /// Each round's roster (ascending): its members audit it, so only they
    /// are answered projections (anyone, in a round without a roster).
    rosters: BTreeMap<u64, Vec<PublicKey>>,
}

/// Shared between the loop (which fills it) and the network's blocking
/// serving tasks (which read it).
pub struct CommitteeServed {
    offers: mpsc::Sender<(PeerId, ShardOffer)>,
    /// Offers queued, by the peer that sent them: no one peer fills the
    /// queue the roster's trainers need.
    queued: Mutex<HashMap<PeerId, usize>>,
    /// The run's delta codec (our shards' payloads are in it).
    codec: Codec,
    catalogue: Mutex<Catalogue>,
}

impl CommitteeServed {
    pub fn new(codec: Codec) -> (Self, mpsc::Receiver<(PeerId, ShardOffer)>) {
        let (tx, rx) = mpsc::channel(OFFER_QUEUE);
        let queued = Mutex::new(HashMap::new());
        (Self { offers: tx, queued, codec, catalogue: Mutex::new(Catalogue::default()) }, rx)
    }

    /// The loop took an offer `from` sent off the queue.
    pub fn offer_taken(&self, from: &PeerId) {
        let mut q = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = q.get_mut(from) {
            *n -= 1;
            if *n == 0 {
                q.remove(from);
            }
        }
    }

    /// Queue `offer` from `from` for the loop: `Busy` when the queue, or
    /// that peer's share of it, is full.
    fn queue_offer(&self, from: PeerId, offer: &ShardOffer) -> XferResponse {
        let mut q = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        let n = q.get(&from).copied().unwrap_or(0);
        if n >= OFFERS_PER_PEER {
            return XferResponse::Busy;
        }
        match self.offers.try_send((from, offer.clone())) {
            Ok(()) => {
                q.insert(from, n + 1);
                XferResponse::Accepted
            }
            Err(_) => XferResponse::Busy,
        }
    }

    fn catalogue(&self) -> std::sync::MutexGuard<'_, Catalogue> {
        self.catalogue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Round `round` opened on `roster`: what is older than the last round
    /// is dropped, and so is anything of a later round (a chain this node
    /// left for a rival one that had closed fewer rounds).
    pub fn open_round(&self, round: u64, roster: &[PublicKey]) {
        let keep = round.saturating_sub(1)..=round;
        let mut h = self.catalogue();
        h.rosters.insert(round, roster.to_vec());
        h.rosters.retain(|r, _| keep.contains(r));
        h.leaves.retain(|k, _| keep.contains(&k.0));
        h.lists.retain(|k, _| keep.contains(&k.0));
        h.results.retain(|k, _| keep.contains(&k.0));
        h.applied.retain(|k, _| keep.contains(&k.0));
        h.own.retain(|k, _| keep.contains(&k.0));
        h.projected.retain(|k, _| keep.contains(&k.0));
    }

    /// Serve projections of our own shard `shard` of `round` (its payload
    /// is in the store) of `elements` values.
    pub fn hold_own(&self, round: u64, shard: u32, payload_hash: [u8; 32], elements: usize) {
        self.catalogue().own.insert((round, shard), (payload_hash, elements));
    }

    /// The projections of our own shards of `round`, each (shard, seed) of
    /// `asks` (payloads read from `blobs`), charged to `from` a shard each:
    /// None when we hold any of them not, when `from` is not on the
    /// round's roster, or once `from` had `MAX_PROJECTIONS_PER_PEER` this
    /// round.
    pub fn projections(
        &self,
        from: PeerId,
        round: u64,
        asks: &[(u32, [u8; 32])],
        blobs: &BlobStore,
    ) -> Option<Vec<[f64; PROJECTIONS]>> {
        let own: Vec<([u8; 32], usize)> = {
            let mut h = self.catalogue();
            let own =
                asks.iter().map(|(shard, _)| h.own.get(&(round, *shard)).copied()).collect::<Option<_>>()?;
            // Free identities never take the room of the roster's auditors.
            let roster = h.rosters.get(&round).map_or(&[][..], Vec::as_slice);
            let member = || public_key_of(&from).is_some_and(|k| roster.binary_search(&k).is_ok());
            if !roster.is_empty() && !member() {
                return None;
            }
            if h.projected.len() >= MAX_COUNTED_PEERS && !h.projected.contains_key(&(round, from)) {
                return None;
            }
            let asked = h.projected.entry((round, from)).or_insert(0);
            let n = asks.len() as u32;
            if *asked + n > MAX_PROJECTIONS_PER_PEER {
                return None;
            }
            *asked += n;
            own
        };
        own.iter()
            .zip(asks)
            .map(|((hash, elements), (_, seed))| {
                let payload = blobs.get(BlobKind::Delta, hash).ok()?;
                let values = decode_delta(&payload, self.codec, *elements).ok()?;
                sketch::project(&values, &SketchSigns::new(seed, *elements))
            })
            .collect()
    }

    /// Serve the parts of state `state` (its blobs are in the store);
    /// the one before stays served too.
    pub fn hold_state(&self, state: [u8; 32], parts: StateParts) {
        let mut h = self.catalogue();
        h.states.retain(|(s, _)| *s != state);
        h.states.push((state, parts));
        while h.states.len() > 2 {
            h.states.remove(0);
        }
    }

    /// Serve this verified leaf (with its proof) to re-checkers.
    pub fn hold_leaf(&self, offer: ShardOffer) {
        let mut h = self.catalogue();
        if h.leaves.len() < MAX_HELD_LEAVES {
            h.leaves.insert((offer.round, offer.leaf.shard, offer.signer), offer);
        }
    }

    /// The leaf held of `signer`'s shard, if any.
    pub fn leaf(&self, round: u64, shard: u32, signer: PublicKey) -> Option<ShardOffer> {
        self.catalogue().leaves.get(&(round, shard, signer)).cloned()
    }

    /// Serve the included list and the included signers (canonical bytes
    /// each) of our result.
    pub fn hold_list(&self, round: u64, shard: u32, result_hash: [u8; 32], list: Vec<u8>, signers: Vec<u8>) {
        let mut h = self.catalogue();
        if h.lists.len() < MAX_HELD_LISTS && list.len().max(signers.len()) <= MAX_SERVED_LIST_BYTES {
            h.lists.insert((round, shard, result_hash), (list, signers));
        }
    }

    /// Serve our signed result for `shard` of `round` (canonical bytes).
    pub fn hold_result(&self, round: u64, shard: u32, result: Vec<u8>) {
        let mut h = self.catalogue();
        if h.results.len() < MAX_HELD_RESULTS && result.len() <= MAX_SERVED_RESULT_BYTES {
            h.results.insert((round, shard), result);
        }
    }

    /// Serve the result round `round` applied for `shard` (canonical
    /// bytes); it is answered before our own.
    pub fn hold_applied_result(&self, round: u64, shard: u32, result: Vec<u8>) {
        let mut h = self.catalogue();
        if h.applied.len() < MAX_HELD_APPLIED && result.len() <= MAX_SERVED_RESULT_BYTES {
            h.applied.insert((round, shard), result);
        }
    }

    pub fn list(&self, round: u64, shard: u32, result_hash: [u8; 32]) -> Option<Vec<u8>> {
        self.catalogue().lists.get(&(round, shard, result_hash)).map(|(list, _)| list.clone())
    }

    pub fn signers(&self, round: u64, shard: u32, result_hash: [u8; 32]) -> Option<Vec<u8>> {
        self.catalogue().lists.get(&(round, shard, result_hash)).map(|(_, signers)| signers.clone())
    }

    /// The answer to a round request from `from` (`None`: not one).
    pub fn answer(&self, from: PeerId, request: &XferRequest) -> Option<XferResponse> {
        Some(match request {
            XferRequest::Offer(o) => self.queue_offer(from, o),
            XferRequest::Included { round, shard, result_hash } => {
                self.list(*round, *shard, *result_hash).map_or(XferResponse::NotFound, XferResponse::Included)
            }
            XferRequest::Signers { round, shard, result_hash } => self
                .signers(*round, *shard, *result_hash)
                .map_or(XferResponse::NotFound, XferResponse::Included),
            XferRequest::Result { round, shard } => {
                let h = self.catalogue();
                let result = h.applied.get(&(*round, *shard)).or_else(|| h.results.get(&(*round, *shard)));
                result.cloned().map_or(XferResponse::NotFound, XferResponse::Result)
            }
            XferRequest::Leaf { round, shard, signer } => {
                self.leaf(*round, *shard, *signer).map_or(XferResponse::NotFound, XferResponse::Leaf)
            }
            XferRequest::StateParts { state } => {
                let catalogue = self.catalogue();
                match catalogue.states.iter().find(|(s, _)| s == state) {
                    Some((_, (params, ledger, ledger_len))) => {
                        XferResponse::StateParts { params: *params, ledger: *ledger, ledger_len: *ledger_len }
                    }
                    None => XferResponse::NotFound,
                }
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::committee::ShardLeaf;
    use murmur_protocol::PayloadHash;

    fn key(signer: u8) -> murmur_protocol::NodeKey {
        murmur_protocol::NodeKey::from_seed([signer; 32])
    }

    fn offer(round: u64, signer: u8) -> ShardOffer {
        ShardOffer {
            round,
            signer: key(signer).public(),
            shards: 2,
            leaf: ShardLeaf { shard: 1, payload_hash: PayloadHash([1; 32]), payload_len: 10, norm: 1.0 },
            proof: vec![[2; 32]],
            manifest: Box::new(crate::net::offer::test_manifest(&key(signer), round, 2)),
            payload: None,
        }
    }

    #[test]
    fn offers_are_queued_leaves_and_lists_served_and_old_rounds_dropped() {
        let (served, mut rx) = CommitteeServed::new(Codec::F32);
        let asker = PeerId::random();
        assert_eq!(served.answer(asker, &XferRequest::Offer(offer(3, 1))), Some(XferResponse::Accepted));
        assert_eq!(rx.try_recv().ok(), Some((asker, offer(3, 1))));
        served.offer_taken(&asker);
        served.hold_leaf(offer(3, 1));
        served.hold_list(3, 1, [5; 32], vec![9; 8], vec![7; 4]);
        served.hold_result(3, 1, vec![6; 250]);
        let result = XferRequest::Result { round: 3, shard: 1 };
        assert_eq!(served.answer(asker, &result), Some(XferResponse::Result(vec![6; 250])));
        let other = XferRequest::Result { round: 3, shard: 0 };
        assert_eq!(served.answer(asker, &other), Some(XferResponse::NotFound));
        // Once the round applied a result for the shard, that one is answered.
        served.hold_applied_result(3, 1, vec![8; 250]);
        assert_eq!(served.answer(asker, &result), Some(XferResponse::Result(vec![8; 250])));
        let ask = XferRequest::Leaf { round: 3, shard: 1, signer: key(1).public() };
        assert_eq!(served.answer(asker, &ask), Some(XferResponse::Leaf(offer(3, 1))));
        let list = XferRequest::Included { round: 3, shard: 1, result_hash: [5; 32] };
        assert_eq!(served.answer(asker, &list), Some(XferResponse::Included(vec![9; 8])));
        let signers = XferRequest::Signers { round: 3, shard: 1, result_hash: [5; 32] };
        assert_eq!(served.answer(asker, &signers), Some(XferResponse::Included(vec![7; 4])));
        assert_eq!(
            served.answer(asker, &XferRequest::Included { round: 3, shard: 0, result_hash: [5; 32] }),
            Some(XferResponse::NotFound)
        );
        served.open_round(4, &[]);
        assert!(served.leaf(3, 1, key(1).public()).is_some(), "the last round is kept");
        served.open_round(5, &[]);
        assert_eq!(served.answer(asker, &ask), Some(XferResponse::NotFound));
        assert_eq!(
            served.answer(asker, &result),
            Some(XferResponse::NotFound),
            "round 3's result went with it"
        );
        // Moved back to round 5 from a chain at round 7: round 7's go.
        served.hold_leaf(offer(7, 1));
        served.open_round(5, &[]);
        assert!(served.leaf(7, 1, key(1).public()).is_none());
        assert_eq!(served.answer(asker, &XferRequest::Status), None);
    }

    #[test]
    fn only_the_rounds_roster_is_answered_projections() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let blobs = BlobStore::open(dir.path()).expect("a blob store");
        let payload = murmur_protocol::codec::encode_delta(Codec::F32, &[1.0, -2.0, 3.0]).expect("encoded");
        let hash = blobs.put(BlobKind::Delta, &payload).expect("stored");
        let (served, _rx) = CommitteeServed::new(Codec::F32);
        let (member, stranger) = (key(1).public(), key(2).public());
        served.open_round(3, &[member]);
        served.hold_own(3, 0, hash, 3);
        let asks = [(0, [9; 32])];
        let peer = |k| crate::net::peer_id_of(&k).expect("an ed25519 key");
        assert!(served.projections(peer(stranger), 3, &asks, &blobs).is_none(), "not an auditor of round 3");
        assert!(served.projections(PeerId::random(), 3, &asks, &blobs).is_none());
        assert_eq!(served.projections(peer(member), 3, &asks, &blobs).map(|p| p.len()), Some(1));
        // A round without a roster answers anyone (within its share).
        served.open_round(4, &[]);
        served.hold_own(4, 0, hash, 3);
        assert!(served.projections(peer(stranger), 4, &asks, &blobs).is_some());
    }

    #[test]
    fn one_peer_fills_only_its_share_of_the_offer_queue_and_a_full_queue_answers_busy() {
        let (served, mut rx) = CommitteeServed::new(Codec::F32);
        let flooder = PeerId::random();
        let accepted = (0..OFFER_QUEUE)
            .filter(|i| {
                served.answer(flooder, &XferRequest::Offer(offer(*i as u64, 2)))
                    == Some(XferResponse::Accepted)
            })
            .count();
        assert_eq!(accepted, OFFERS_PER_PEER);
        let trainer = PeerId::random();
        assert_eq!(served.answer(trainer, &XferRequest::Offer(offer(3, 1))), Some(XferResponse::Accepted));
        // The loop takes one of the flooder's: it may queue one more.
        let (from, _) = rx.try_recv().expect("queued");
        served.offer_taken(&from);
        assert_eq!(served.answer(flooder, &XferRequest::Offer(offer(9, 2))), Some(XferResponse::Accepted));
        assert_eq!(served.answer(flooder, &XferRequest::Offer(offer(10, 2))), Some(XferResponse::Busy));
        // Many peers together fill the queue, which then answers Busy
        // rather than growing.
        while (0..OFFERS_PER_PEER).any(|i| {
            served.answer(PeerId::random(), &XferRequest::Offer(offer(i as u64, 3)))
                == Some(XferResponse::Accepted)
        }) {}
        assert_eq!(
            served.answer(PeerId::random(), &XferRequest::Offer(offer(9, 9))),
            Some(XferResponse::Busy)
        );
    }
}
