//! `murmur bench transfer`: move a state-sized blob between nodes on
//! loopback with the real network stack (TCP, Noise, Yamux, the transfer
//! protocol, chunk verification) and report the throughput, from one
//! serving peer and from several at once.

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
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct TransferResult {
    bytes: u64,
    transport: String,
    one_peer_mb_s: f64,
    many_peers: usize,
    many_peers_mb_s: f64,
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
            "transfer of {} MiB over {} on loopback: 1 peer {:.0} MB/s, {} peers {:.0} MB/s",
            r.bytes >> 20,
            r.transport,
            r.one_peer_mb_s,
            r.many_peers,
            r.many_peers_mb_s
        );
    }
    Ok(())
}

async fn bench(a: &BenchTransferArgs) -> Result<TransferResult> {
    let listen = match a.transport.as_str() {
        "tcp" => "/ip4/127.0.0.1/tcp/0",
        "quic" => "/ip4/127.0.0.1/udp/0/quic-v1",
        other => bail!("--transport {other}: choose tcp or quic"),
    };
    let len = a.mib << 20;
    let bytes: Vec<u8> = (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let dir = tempfile_dir()?;
    let mut servers = Vec::new();
    let mut id = [0u8; 32];
    for i in 0..a.peers.max(1) {
        let store = Arc::new(Store::open(&dir.join(format!("server{i}")))?);
        id = store.blobs.put(BlobKind::State, &bytes)?;
        let _ = store.blobs.table(BlobKind::State, &id)?;
        servers.push(start_peer(10 + i as u8, listen, store).await?);
    }
    drop(bytes);
    let client_store = Arc::new(Store::open(&dir.join("client"))?);
    let (client, _) = start_peer(1, listen, client_store).await?;
    let mut ids: Vec<PeerId> = Vec::new();
    for (h, addr) in &servers {
        client.dial(addr.clone()).await?;
        ids.push(h.local);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let time = |peers: Vec<PeerId>| {
        let client = client.clone();
        async move {
            let t0 = Instant::now();
            let f =
                fetch_blob(&client, BlobKind::State, id, len, len, &peers).await.context("fetch failed")?;
            let secs = t0.elapsed().as_secs_f64();
            anyhow::ensure!(f.bytes.len() as u64 == len, "short fetch");
            Ok::<f64, anyhow::Error>(len as f64 / secs / 1e6)
        }
    };
    let mut one: f64 = 0.0;
    let mut many: f64 = 0.0;
    for _ in 0..a.reps.max(1) {
        one = one.max(time(ids[..1].to_vec()).await?);
        many = many.max(time(ids.clone()).await?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(TransferResult {
        bytes: len,
        transport: a.transport.clone(),
        one_peer_mb_s: one,
        many_peers: ids.len(),
        many_peers_mb_s: many,
    })
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("murmur-bench-transfer-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
