//! `murmur bench transfer`: move a state-sized blob between nodes on
//! loopback with the real network stack (TCP, Noise, Yamux, the transfer
//! protocol, chunk verification) and report the throughput, from one
//! serving peer and from several at once.
//!
//! The one-peer and the many-peer fetches use different servers, so the
//! first fetch of each is "cold": its servers read every chunk from disk and
//! check it against the blob's table as they serve it. Later repetitions are
//! "warm": the servers answer from their cache of chunks checked when first
//! read (`store::cache`), as a node does for a state or delta that several
//! peers ask for. The client checks every chunk either way.
//!
//! Every node runs in this one process; by default each on a tokio runtime
//! of its own (its own worker threads, as separate processes would have),
//! with `--runtimes shared` all on one. Besides wall throughput the bench
//! reports MB moved per CPU-second of the whole process (client and servers
//! together), which depends far less than wall time on what else the
//! machine is running.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use libp2p::{Multiaddr, PeerId};
use murmur_protocol::{NodeKey, RunId};
use serde::Serialize;

use crate::net::{self, fetch_blob, NetConfig, NetEvent, NetHandle, Role};
use crate::runtime::server::StoreServer;
use crate::store::{BlobKind, Store};

#[derive(Args, Debug)]
pub struct BenchTransferArgs {
    /// Blob size in MiB.
    #[arg(long, default_value_t = 256)]
    pub mib: u64,
    /// Serving peers for the parallel measurement.
    #[arg(long, default_value_t = 3)]
    pub peers: usize,
    /// Repetitions (the best is reported).
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// Transport: tcp or quic.
    #[arg(long, default_value = "tcp")]
    pub transport: String,
    /// Tokio runtimes: `per-node` (each node its own, as separate processes
    /// would have) or `shared` (every node on one).
    #[arg(long, default_value = "per-node")]
    pub runtimes: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct TransferResult {
    bytes: u64,
    transport: String,
    runtimes: String,
    /// Best over the repetitions (warm servers once `reps` > 1).
    one_peer_mb_s: f64,
    many_peers: usize,
    many_peers_mb_s: f64,
    /// The first fetch of each kind, from servers that read from disk.
    one_peer_cold_mb_s: f64,
    many_peers_cold_mb_s: f64,
    /// MB moved per CPU-second of the process (best over the repetitions).
    one_peer_mb_per_cpu_s: f64,
    many_peers_mb_per_cpu_s: f64,
}

/// CPU time used so far by this process (every thread), in seconds.
fn process_cpu_secs() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if r != 0 {
        return f64::NAN;
    }
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

async fn start_peer(seed: u8, listen: &str, store: Arc<Store>) -> Result<(NetHandle, Multiaddr)> {
    let mut cfg = NetConfig::new(NodeKey::from_seed([seed; 32]), RunId([7; 32]), Role::Trainer);
    cfg.listen = vec![listen.parse()?];
    let server = Arc::new(StoreServer::new(store, Vec::new(), true));
    let (h, mut ev) = net::start(cfg, server)?;
    let addr = loop {
        match tokio::time::timeout(Duration::from_secs(10), ev.recv()).await {
            Ok(Some(NetEvent::Listening(a))) => break a,
            Ok(Some(_)) => {}
            _ => bail!("peer {seed} did not start listening"),
        }
    };
    tokio::spawn(async move { while ev.recv().await.is_some() {} });
    Ok((h, addr))
}

pub fn run(a: BenchTransferArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let r = rt.block_on(bench(&a))?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "transfer of {} MiB over {} on loopback: 1 peer {:.0} MB/s (cold {:.0}; {:.0} MB per CPU-s), \
             {} peers {:.0} MB/s (cold {:.0}; {:.0} MB per CPU-s)",
            r.bytes >> 20,
            r.transport,
            r.one_peer_mb_s,
            r.one_peer_cold_mb_s,
            r.one_peer_mb_per_cpu_s,
            r.many_peers,
            r.many_peers_mb_s,
            r.many_peers_cold_mb_s,
            r.many_peers_mb_per_cpu_s
        );
    }
    Ok(())
}

/// Where each node runs: on the bench's runtime, or on one of its own.
struct Runtimes {
    own: Vec<tokio::runtime::Runtime>,
    per_node: bool,
}

impl Runtimes {
    /// The runtime for the next node.
    fn next(&mut self) -> Result<tokio::runtime::Handle> {
        if !self.per_node {
            return Ok(tokio::runtime::Handle::current());
        }
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        let h = rt.handle().clone();
        self.own.push(rt);
        Ok(h)
    }
}

impl Drop for Runtimes {
    fn drop(&mut self) {
        for rt in self.own.drain(..) {
            rt.shutdown_background();
        }
    }
}

async fn bench(a: &BenchTransferArgs) -> Result<TransferResult> {
    let listen = match a.transport.as_str() {
        "tcp" => "/ip4/127.0.0.1/tcp/0",
        "quic" => "/ip4/127.0.0.1/udp/0/quic-v1",
        other => bail!("--transport {other}: choose tcp or quic"),
    };
    let mut runtimes = Runtimes {
        own: Vec::new(),
        per_node: match a.runtimes.as_str() {
            "per-node" => true,
            "shared" => false,
            other => bail!("--runtimes {other}: choose per-node or shared"),
        },
    };
    let listen = listen.to_string();
    let mut start = |seed: u8, store: Arc<Store>| {
        let rt = runtimes.next();
        let listen = listen.clone();
        async move {
            let rt = rt?;
            let node = rt.spawn(async move { start_peer(seed, &listen, store).await }).await??;
            Ok::<_, anyhow::Error>((rt, node))
        }
    };
    let len = a.mib << 20;
    let bytes: Vec<u8> = (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let dir = tempfile_dir()?;
    // Server 0 serves the one-peer fetches, servers 1..=peers the others.
    let mut servers = Vec::new();
    let mut id = [0u8; 32];
    for i in 0..=a.peers.max(1) {
        let store = Arc::new(Store::open(&dir.join(format!("server{i}")))?);
        id = store.blobs.put(BlobKind::State, &bytes)?;
        let _ = store.blobs.table(BlobKind::State, &id)?;
        servers.push(start(10 + i as u8, store).await?.1);
    }
    drop(bytes);
    let client_store = Arc::new(Store::open(&dir.join("client"))?);
    let (client_rt, (client, _)) = start(1, client_store).await?;
    let mut ids: Vec<PeerId> = Vec::new();
    for (h, addr) in &servers {
        client.dial(addr.clone()).await?;
        ids.push(h.local);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The fetch runs on the client's runtime, like the node's own tasks.
    let time = |peers: Vec<PeerId>| {
        let client = client.clone();
        let rt = client_rt.clone();
        async move {
            let (t0, cpu0) = (Instant::now(), process_cpu_secs());
            let f = rt
                .spawn(async move { fetch_blob(&client, BlobKind::State, id, len, len, &peers).await })
                .await?
                .context("fetch failed")?;
            let (secs, cpu) = (t0.elapsed().as_secs_f64(), process_cpu_secs() - cpu0);
            anyhow::ensure!(f.bytes.len() as u64 == len, "short fetch");
            drop(f);
            Ok::<(f64, f64), anyhow::Error>((len as f64 / secs / 1e6, len as f64 / cpu / 1e6))
        }
    };
    let (mut one, mut many) = (Vec::new(), Vec::new());
    for _ in 0..a.reps.max(1) {
        one.push(time(ids[..1].to_vec()).await?);
        many.push(time(ids[1..].to_vec()).await?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let wall = |v: &[(f64, f64)]| v.iter().map(|r| r.0).fold(0.0, f64::max);
    let per_cpu = |v: &[(f64, f64)]| v.iter().map(|r| r.1).filter(|x| x.is_finite()).fold(0.0, f64::max);
    Ok(TransferResult {
        bytes: len,
        transport: a.transport.clone(),
        runtimes: a.runtimes.clone(),
        one_peer_mb_s: wall(&one),
        many_peers: ids.len() - 1,
        many_peers_mb_s: wall(&many),
        one_peer_cold_mb_s: one[0].0,
        many_peers_cold_mb_s: many[0].0,
        one_peer_mb_per_cpu_s: per_cpu(&one),
        many_peers_mb_per_cpu_s: per_cpu(&many),
    })
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("murmur-bench-transfer-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
