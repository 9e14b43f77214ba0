//! The run's dataset as the node runtime sees it: resolve the RunSpec's
//! DataRef (synthetic, or a DatasetId whose manifest, and tokenizer.json when
//! the dataset has its own, come from the node's own `--dataset` copy, its
//! store, or its peers), and the `DatasetFeed` the
//! trainer thread draws each round's batches from — it computes the round's
//! window assignment, fetches the shards those windows touch (verified
//! against the manifest, from several peers; a peer serving wrong bytes is
//! charged and the shard fetched from another), keeps them in the store
//! within `--data-cache` bytes, and reports how many dataset bytes it fetched.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use murmur_protocol::assignment::assigned_windows;
use murmur_protocol::dataset::{DatasetManifest, DatasetTokenizer, ShardEntry, Split};
use murmur_protocol::hash::{hex, DatasetId, ShardHash, TokenizerHash};
use murmur_protocol::{DataRef, PublicKey, RunSpec};
use serde_json::json;

use super::report::Reporter;
use super::RuntimeError;
use crate::data::dataset::{batches_of, shard_tokens, LocalDataset, ShardLru};
use crate::data::hf_tokenizer::ExportTokenizer;
use crate::data::{named_tokenizer, Batch};
use crate::net::fetch::fetch_blob;
use crate::net::NetHandle;
use crate::store::{BlobKind, Store};

/// How long a node waits for some peer to serve the dataset manifest.
const MANIFEST_WAIT: Duration = Duration::from_secs(60);

/// The dataset settings from the node's own command line.
#[derive(Debug, Clone, Default)]
pub struct DatasetOptions {
    /// A local copy (`--dataset DIR` or a built-in name); must hash to the run's DatasetId.
    pub local: Option<String>,
    /// Most bytes of shards to keep (`--data-cache`).
    pub cache_bytes: u64,
}

/// Refuse a RunSpec whose data is not a DataRef, before anything is opened.
pub fn check_data(spec: &RunSpec) -> Result<DataRef, RuntimeError> {
    spec.data_ref().map_err(|e| {
        RuntimeError::Config(format!(
            "the run spec's data `{}` is refused ({e}); a run names its data by DatasetId or `synthetic:` parameters, and local data is given with `--dataset DIR` on this node's command line",
            spec.data.escape_debug()
        ))
    })
}

/// Import a local copy into the store (pinned) after checking it is the run's dataset.
pub fn import_local(
    store: &Store,
    local: &LocalDataset,
    want: Option<DatasetId>,
) -> Result<(), RuntimeError> {
    if let Some(want) = want {
        if local.id() != want {
            return Err(RuntimeError::Config(format!(
                "--dataset holds dataset {} but the run trains on {want}; point --dataset at a copy of the run's dataset (or leave it out to fetch from peers)",
                local.id()
            )));
        }
    }
    let err = |e: crate::data::DataError| RuntimeError::Config(format!("--dataset: {e}"));
    store.blobs.put(BlobKind::DatasetManifest, local.manifest_bytes())?;
    if let Some(json) = local.tokenizer_json() {
        store.blobs.put(BlobKind::Tokenizer, json)?;
    }
    let m = local.manifest();
    for e in m.train.iter().chain(&m.val) {
        if !store.blobs.contains(BlobKind::DatasetShard, &e.hash.0) {
            store.blobs.put(BlobKind::DatasetShard, &local.read_shard(&e.hash).map_err(err)?)?;
        }
    }
    Ok(())
}

/// Set up the run's dataset: `None` for synthetic data (the trainer opens
/// it itself), else a feed over the manifest.
#[allow(clippy::too_many_arguments)]
pub async fn prepare(
    spec: &RunSpec,
    opts: &DatasetOptions,
    store: Arc<Store>,
    net: NetHandle,
    key: PublicKey,
    vocab: usize,
    out: Reporter,
) -> Result<Option<Arc<DatasetFeed>>, RuntimeError> {
    let DataRef::Dataset { id, manifest_len } = check_data(spec)? else {
        return Ok(None);
    };
    let mut pinned = false;
    if let Some(arg) = &opts.local {
        let local = LocalDataset::open(arg).map_err(|e| RuntimeError::Config(format!("--dataset: {e}")))?;
        import_local(&store, &local, Some(id))?;
        pinned = true;
    }
    let manifest_bytes = match store.blobs.get(BlobKind::DatasetManifest, &id.0) {
        Ok(b) => b,
        Err(_) => fetch_manifest(&net, id, u64::from(manifest_len), Some(&store)).await?,
    };
    let manifest = DatasetManifest::decode(&manifest_bytes)
        .map_err(|e| RuntimeError::Config(format!("dataset {id}: the manifest is invalid: {e}")))?;
    if let DatasetTokenizer::Bpe { json_len, hash, .. } = manifest.tokenizer {
        let json = match store.blobs.get(BlobKind::Tokenizer, &hash.0) {
            Ok(b) => b,
            Err(_) => fetch_tokenizer(&net, hash, u64::from(json_len), Some(&store)).await?,
        };
        named_tokenizer(manifest.tokenizer, Some(&json), &format!("of dataset {id}"))
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
    }
    if manifest.tokenizer.vocab_size() as usize > vocab {
        return Err(RuntimeError::Config(format!(
            "dataset {id} uses the {} tokenizer (vocabulary {}), larger than the model's {vocab}",
            manifest.tokenizer.name(),
            manifest.tokenizer.vocab_size()
        )));
    }
    let mut lru = ShardLru::new(opts.cache_bytes);
    let known: HashMap<ShardHash, &ShardEntry> =
        manifest.train.iter().chain(&manifest.val).map(|e| (e.hash, e)).collect();
    for held in store.blobs.list(BlobKind::DatasetShard)? {
        match known.get(&ShardHash(held)) {
            Some(e) => lru.insert(e.hash, e.byte_len(), pinned),
            None if !pinned => store.blobs.remove(BlobKind::DatasetShard, &held)?,
            None => {}
        }
    }
    out.event(
        "dataset",
        json!({
            "dataset": id.to_hex(),
            "tokenizer": manifest.tokenizer.name(),
            "train_tokens": manifest.tokens(Split::Train),
            "val_tokens": manifest.tokens(Split::Val),
            "dataset_bytes": manifest.total_bytes(),
            "local_copy": pinned,
        }),
    );
    Ok(Some(Arc::new(DatasetFeed {
        id,
        manifest,
        store,
        net,
        rt: tokio::runtime::Handle::current(),
        signer: key,
        seed: spec.seed,
        lru: Mutex::new(lru),
        fetched_bytes: AtomicU64::new(0),
        fetched_shards: AtomicU64::new(0),
        val: Mutex::new(None),
        out,
    })))
}

/// Fetch blob `id` of `len` bytes from whichever peer serves it within
/// `MANIFEST_WAIT`, and keep it in `store` when given; the error says what
/// the last try met.
async fn fetch_from_peers(
    net: &NetHandle,
    kind: BlobKind,
    id: [u8; 32],
    len: u64,
    store: Option<&Store>,
) -> Result<Result<Vec<u8>, String>, RuntimeError> {
    let give_up = Instant::now() + MANIFEST_WAIT;
    let mut last = String::from("no peer connected");
    while Instant::now() < give_up {
        let peers: Vec<PeerId> = net.peers().await.into_iter().map(|p| p.peer).collect();
        if !peers.is_empty() {
            match fetch_blob(net, kind, id, len, len, &peers).await {
                Ok(f) => {
                    if let Some(store) = store {
                        store.blobs.put(kind, &f.bytes)?;
                    }
                    return Ok(Ok(f.bytes));
                }
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(Err(last))
}

async fn fetch_manifest(
    net: &NetHandle,
    id: DatasetId,
    len: u64,
    store: Option<&Store>,
) -> Result<Vec<u8>, RuntimeError> {
    fetch_from_peers(net, BlobKind::DatasetManifest, id.0, len, store).await?.map_err(|last| {
        RuntimeError::Config(format!(
            "no peer served the manifest of dataset {id} ({last}); start the node with --dataset DIR holding it, or ask the bootstrap operator to host it (`murmur-bootstrap --dataset`)"
        ))
    })
}

/// Fetch a dataset's tokenizer.json (`len` bytes, checked against `hash`).
async fn fetch_tokenizer(
    net: &NetHandle,
    hash: TokenizerHash,
    len: u64,
    store: Option<&Store>,
) -> Result<Vec<u8>, RuntimeError> {
    fetch_from_peers(net, BlobKind::Tokenizer, hash.0, len, store).await?.map_err(|last| {
        RuntimeError::Config(format!(
            "no peer served the dataset's tokenizer.json {hash} ({last}); start the node with --dataset DIR holding it"
        ))
    })
}

/// What the manifest of dataset `id` (of `manifest_len` bytes) says of its
/// tokenizer, and its own tokenizer.json when it has one, from peers: for a
/// watcher or exporter that holds no copy of the dataset.
pub async fn dataset_tokenizer_from_peers(
    net: &NetHandle,
    id: DatasetId,
    manifest_len: u32,
) -> Result<(DatasetTokenizer, Option<Vec<u8>>), RuntimeError> {
    let bytes = fetch_manifest(net, id, u64::from(manifest_len), None).await?;
    let manifest = DatasetManifest::decode(&bytes)
        .map_err(|e| RuntimeError::Config(format!("dataset {id}: the manifest is invalid: {e}")))?;
    let json = match manifest.tokenizer {
        DatasetTokenizer::Bpe { json_len, hash, .. } => {
            Some(fetch_tokenizer(net, hash, u64::from(json_len), None).await?)
        }
        DatasetTokenizer::Byte | DatasetTokenizer::Gpt2 => None,
    };
    Ok((manifest.tokenizer, json))
}

/// The tokenizer an export of `spec`'s model (of `vocab` tokens) carries,
/// from what `store` holds: its dataset's when the store holds the
/// dataset's manifest (and own tokenizer.json), else the built-in one the
/// vocabulary was made for.
pub fn held_export_tokenizer(
    store: &Store,
    spec: &RunSpec,
    vocab: usize,
) -> Result<Option<ExportTokenizer>, RuntimeError> {
    let Ok(DataRef::Dataset { id, .. }) = spec.data_ref() else {
        return Ok(ExportTokenizer::for_vocabulary(vocab));
    };
    let Ok(bytes) = store.blobs.get(BlobKind::DatasetManifest, &id.0) else {
        return Ok(ExportTokenizer::for_vocabulary(vocab));
    };
    let manifest = DatasetManifest::decode(&bytes)
        .map_err(|e| RuntimeError::Config(format!("dataset {id}: the stored manifest is invalid: {e}")))?;
    let json = match manifest.tokenizer {
        DatasetTokenizer::Bpe { hash, .. } => store.blobs.get(BlobKind::Tokenizer, &hash.0).ok(),
        DatasetTokenizer::Byte | DatasetTokenizer::Gpt2 => None,
    };
    export_tokenizer_of(manifest.tokenizer, json.as_deref())
}

/// The tokenizer an export of `spec`'s model (of `vocab` tokens) carries,
/// from `net`'s peers: its dataset's when the run names a dataset.
pub async fn export_tokenizer_from_peers(
    net: &NetHandle,
    spec: &RunSpec,
    vocab: usize,
) -> Result<Option<ExportTokenizer>, RuntimeError> {
    let Ok(DataRef::Dataset { id, manifest_len }) = spec.data_ref() else {
        return Ok(ExportTokenizer::for_vocabulary(vocab));
    };
    let (named, json) = dataset_tokenizer_from_peers(net, id, manifest_len).await?;
    export_tokenizer_of(named, json.as_deref())
}

fn export_tokenizer_of(
    named: DatasetTokenizer,
    json: Option<&[u8]>,
) -> Result<Option<ExportTokenizer>, RuntimeError> {
    ExportTokenizer::of_dataset(named, json)
        .map(Some)
        .map_err(|e| RuntimeError::Config(format!("the export's tokenizer: {e}")))
}

/// Validation batches made once: (batch, seq, count) and the batches.
type ValCache = Option<((usize, usize, usize), Vec<Batch>)>;

/// The trainer's view of a content-addressed dataset.
pub struct DatasetFeed {
    pub id: DatasetId,
    pub manifest: DatasetManifest,
    store: Arc<Store>,
    net: NetHandle,
    rt: tokio::runtime::Handle,
    signer: PublicKey,
    seed: u64,
    lru: Mutex<ShardLru>,
    fetched_bytes: AtomicU64,
    fetched_shards: AtomicU64,
    val: Mutex<ValCache>,
    out: Reporter,
}

impl DatasetFeed {
    /// Dataset bytes fetched from peers since start.
    pub fn fetched_bytes(&self) -> u64 {
        self.fetched_bytes.load(Ordering::Relaxed)
    }

    /// The `steps` batches of round `round` (blocking: call on the trainer thread).
    pub fn round_batches(
        &self,
        round: u64,
        batch: usize,
        seq: usize,
        steps: usize,
    ) -> Result<Vec<Batch>, String> {
        let total = self.manifest.windows(Split::Train, seq as u64 + 1);
        if total == 0 {
            return Err(format!(
                "dataset {}: its shards of {} tokens hold no window of {} tokens; rebuild it with a larger --shard-tokens",
                self.id,
                self.manifest.shard_tokens,
                seq + 1
            ));
        }
        let windows = assigned_windows(self.seed, round, &self.signer, total, steps * batch);
        let batches = self.batches(Split::Train, &windows, batch, seq)?;
        self.out.event(
            "dataset_fetched",
            json!({
                "round": round,
                "fetched_bytes": self.fetched_bytes(),
                "fetched_shards": self.fetched_shards.load(Ordering::Relaxed),
                "dataset_bytes": self.manifest.total_bytes(),
                "held_bytes": self.lru.lock().map(|l| l.held_bytes()).unwrap_or(0),
            }),
        );
        Ok(batches)
    }

    /// `count` validation batches (the same on every node) of windows
    /// spread evenly over the validation split, so the loss speaks for the
    /// whole split rather than its first few kilobytes.
    pub fn val_batches(&self, batch: usize, seq: usize, count: usize) -> Result<Vec<Batch>, String> {
        if let Some((shape, cached)) = self.val.lock().map_err(|e| e.to_string())?.as_ref() {
            if *shape == (batch, seq, count) {
                return Ok(cached.clone());
            }
        }
        let total = self.manifest.windows(Split::Val, seq as u64 + 1);
        if total == 0 {
            return Err(format!(
                "dataset {}: the validation split holds no window of {} tokens",
                self.id,
                seq + 1
            ));
        }
        let n = (batch * count) as u64;
        let windows: Vec<u64> = (0..n)
            .map(|i| if total >= n { (i as u128 * total as u128 / n as u128) as u64 } else { i % total })
            .collect();
        let batches = self.batches(Split::Val, &windows, batch, seq)?;
        if let Ok(mut v) = self.val.lock() {
            *v = Some(((batch, seq, count), batches.clone()));
        }
        Ok(batches)
    }

    fn batches(&self, split: Split, windows: &[u64], batch: usize, seq: usize) -> Result<Vec<Batch>, String> {
        let entries = self.manifest.shards(split);
        let mut indices: Vec<usize> = windows
            .iter()
            .filter_map(|&w| self.manifest.locate(split, seq as u64 + 1, w).map(|(i, _)| i))
            .collect();
        indices.sort_unstable();
        indices.dedup();
        let needed: HashSet<ShardHash> =
            indices.iter().filter_map(|&i| entries.get(i)).map(|e| e.hash).collect();
        let mut loaded: HashMap<usize, Vec<u16>> = HashMap::new();
        for i in indices {
            let entry = entries.get(i).copied().ok_or("shard index outside the manifest")?;
            let bytes = self.shard(&entry, &needed)?;
            let vocab = self.manifest.tokenizer.vocab_size();
            let tokens = shard_tokens(&bytes, vocab, &hex(&entry.hash.0)).map_err(|e| e.to_string())?;
            loaded.insert(i, tokens);
        }
        batches_of(&self.manifest, split, windows, batch, seq, &|i| loaded.get(&i).map(Vec::as_slice))
            .map_err(|e| e.to_string())
    }

    /// A shard's bytes from the store, or fetched from peers (making room first).
    fn shard(&self, entry: &ShardEntry, needed: &HashSet<ShardHash>) -> Result<Vec<u8>, String> {
        if let Ok(bytes) = self.store.blobs.get(BlobKind::DatasetShard, &entry.hash.0) {
            if let Ok(mut l) = self.lru.lock() {
                if !l.contains(&entry.hash) {
                    l.insert(entry.hash, entry.byte_len(), false);
                }
                l.touch(&entry.hash);
            }
            return Ok(bytes);
        }
        let evict = self.lru.lock().map(|mut l| l.make_room(entry.byte_len(), needed)).unwrap_or_default();
        for h in evict {
            let _ = self.store.blobs.remove(BlobKind::DatasetShard, &h.0);
        }
        let bytes = self.rt.block_on(fetch_shard(&self.net, entry))?;
        self.store.blobs.put(BlobKind::DatasetShard, &bytes).map_err(|e| e.to_string())?;
        self.fetched_bytes.fetch_add(entry.byte_len(), Ordering::Relaxed);
        self.fetched_shards.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut l) = self.lru.lock() {
            l.insert(entry.hash, entry.byte_len(), false);
        }
        Ok(bytes)
    }
}

/// Fetch one shard from the connected peers, verified against its manifest
/// entry chunk by chunk (`fetch_blob` charges a peer whose bytes do not
/// match and asks the others); retried for a while as peers come and go.
pub async fn fetch_shard(net: &NetHandle, entry: &ShardEntry) -> Result<Vec<u8>, String> {
    let give_up = Instant::now() + MANIFEST_WAIT;
    let mut last = String::from("no peer connected");
    while Instant::now() < give_up {
        let mut peers: Vec<PeerId> = net.peers().await.into_iter().map(|p| p.peer).collect();
        // Spread requests: each shard starts with a different peer.
        peers.sort_by_key(|p| blake3::keyed_hash(&entry.hash.0, &p.to_bytes()).as_bytes()[..8].to_vec());
        if !peers.is_empty() {
            match fetch_shard_from(net, entry, &peers).await {
                Ok(bytes) => return Ok(bytes),
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("could not fetch dataset shard {} from any peer: {last}", hex(&entry.hash.0)))
}

/// Fetch one shard from `peers` (asked in this order), verified against its
/// manifest entry; a peer whose bytes do not match is charged `bad_chunk`
/// and the shard is asked of the next.
pub async fn fetch_shard_from(
    net: &NetHandle,
    entry: &ShardEntry,
    peers: &[PeerId],
) -> Result<Vec<u8>, String> {
    let len = entry.byte_len();
    let f = fetch_blob(net, BlobKind::DatasetShard, entry.hash.0, len, len, peers)
        .await
        .map_err(|e| e.to_string())?;
    // fetch_blob checked every chunk against the hash; check the whole once more.
    if murmur_protocol::hash::shard_hash_of(&f.bytes) != entry.hash {
        return Err(format!("shard {} does not match the manifest", hex(&entry.hash.0)));
    }
    Ok(f.bytes)
}
