//! Datasets by hash (issue 13, done-when 1 and 2): a bootstrap server hosts
//! the built-in Tiny Shakespeare and four nodes started with only its
//! address fetch the manifest and just the shards their assignments touch,
//! train 5 rounds on one StateId per round with falling validation loss,
//! and log the dataset bytes they fetched. A shard served with wrong bytes
//! is rejected, the liar charged, and the shard fetched from an honest
//! peer. A RunSpec naming a local path is refused without opening it.

use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;
use murmur_node::compute::cpu::Precision;
use murmur_node::compute::device::Chosen;
use murmur_node::data::dataset::built_in;
use murmur_node::net::{
    self, ContentServer, NetConfig, NetEvent, NetRejection, PeerStatus, Role, XferRequest, XferResponse,
};
use murmur_node::runtime::dataset::{fetch_shard_from, DatasetOptions};
use murmur_node::runtime::server::StoreServer;
use murmur_node::runtime::spec::{run_spec, RunParams};
use murmur_node::runtime::{run_node, NodeOptions};
use murmur_node::store::{BlobKind, Store};
use murmur_protocol::{NodeKey, RunId};
use murmur_tests::{start_bootstrap_with, start_node, states_by_round, wait_until, Proc, RunSettings};

fn context(procs: &[&Proc]) -> String {
    procs.iter().map(|p| p.tail()).collect::<Vec<_>>().join("\n")
}

#[test]
fn four_nodes_train_on_shakespeare_fetched_by_hash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let settings = RunSettings { inner_steps: 8, batch: 4, quorum: 2, deadline: 20, seed: 13 };
    let (boot, addr) = start_bootstrap_with(d, &settings, &["--dataset", "shakespeare"]);
    let nodes: Vec<Proc> = ["a", "b", "c", "e"].iter().map(|n| start_node(d, n, &addr, &[])).collect();
    let all: Vec<&Proc> = nodes.iter().chain([&boot]).collect();
    wait_until(
        "5 rounds to close on every node",
        Duration::from_secs(300),
        || nodes.iter().all(|n| n.last_round().is_some_and(|r| r >= 4)),
        || context(&all),
    );
    let states: Vec<_> = nodes.iter().map(states_by_round).collect();
    for r in 0..=4u64 {
        let s0 = states[0].get(&r);
        assert!(s0.is_some(), "round {r} missing\n{}", context(&all));
        for (n, s) in nodes.iter().zip(&states) {
            assert_eq!(s.get(&r), s0, "{} disagrees in round {r}\n{}", n.name, context(&all));
        }
    }
    // Validation loss falls (byte-level: ln 256 ≈ 5.55 at genesis).
    let val: Vec<f64> = nodes[0]
        .events_of("round")
        .iter()
        .filter_map(|v| Some((v["round"].as_u64()?, v["val_loss"].as_f64()?)))
        .filter(|(r, _)| *r <= 4)
        .map(|(_, l)| l)
        .collect();
    assert!(val.len() >= 2, "val losses {val:?}\n{}", context(&all));
    assert!(val[val.len() - 1] < val[0] - 0.3, "val loss did not fall: {val:?}");
    // Each node fetched dataset bytes, and less than the whole dataset.
    for n in &nodes {
        let fetched = n.events_of("dataset_fetched");
        let last =
            fetched.last().unwrap_or_else(|| panic!("{} logged no dataset_fetched\n{}", n.name, n.tail()));
        let (got, total) =
            (last["fetched_bytes"].as_u64().unwrap_or(0), last["dataset_bytes"].as_u64().unwrap_or(0));
        eprintln!("{}: fetched {got} of {total} dataset bytes; val losses of a: {val:?}", n.name);
        assert!(got > 0, "{} fetched nothing: {last}", n.name);
        assert!(got < total, "{} fetched the whole dataset ({got} of {total})", n.name);
    }
}

/// Serves every dataset shard with one byte flipped.
struct Liar {
    bytes: Vec<u8>,
}

impl ContentServer for Liar {
    fn status(&self, _: PeerId) -> PeerStatus {
        PeerStatus { trainer: true, ..PeerStatus::default() }
    }
    fn serve(&self, _: PeerId, request: &XferRequest) -> XferResponse {
        match request {
            XferRequest::Chunk { kind: BlobKind::DatasetShard, .. } => {
                let mut b = self.bytes.clone();
                b[0] ^= 1;
                XferResponse::Chunk(b.into())
            }
            _ => XferResponse::NotFound,
        }
    }
}

#[test]
fn a_lying_shard_server_is_charged_and_another_peer_serves_the_shard() {
    let dataset = built_in("shakespeare").expect("built in").expect("builds");
    let entry = dataset.manifest.train[3];
    let bytes = dataset.shards[&entry.hash].clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    store.blobs.put(BlobKind::DatasetShard, &bytes).expect("put");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let run = RunId([7; 32]);
        let listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("addr")];
        let start = |seed: u8, server: Arc<dyn ContentServer>| {
            let mut cfg = NetConfig::new(NodeKey::from_seed([seed; 32]), run, Role::Trainer);
            cfg.listen = listen.clone();
            cfg.mdns = false;
            net::start(cfg, server).expect("net")
        };
        let (honest, _he) = start(1, Arc::new(StoreServer::new(store.clone(), Vec::new(), true)));
        let (liar, _le) = start(2, Arc::new(Liar { bytes: bytes.clone() }));
        let (me, mut events) = start(3, Arc::new(Liar { bytes: Vec::new() }));
        tokio::time::sleep(Duration::from_millis(500)).await;
        for peer in [&honest, &liar] {
            for a in peer.listen_addrs().await {
                me.dial(a).await.expect("dial");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The liar is asked first.
        let got = fetch_shard_from(&me, &entry, &[liar.local, honest.local]).await.expect("fetched");
        assert_eq!(got, bytes, "the verified shard is the honest one");
        let charged = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(ev) = events.recv().await {
                if let NetEvent::Rejected { peer, reason: NetRejection::BadChunk } = ev {
                    return Some(peer);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        assert_eq!(charged, Some(liar.local), "the lying peer is charged bad_chunk");
        // Only the liar: a fetch from it alone fails.
        assert!(fetch_shard_from(&me, &entry, &[liar.local]).await.is_err());
    });
}

#[cfg(unix)]
#[test]
fn a_run_spec_naming_a_local_path_is_refused_without_opening_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A FIFO: opening it for reading would block until a writer comes, so a
    // node that tried to open it would hang instead of failing at once.
    let fifo = dir.path().join("secret");
    let c = std::ffi::CString::new(fifo.display().to_string()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    for data in
        [fifo.display().to_string(), format!("text:{}", fifo.display()), format!("shards:{}", fifo.display())]
    {
        let spec = run_spec(&RunParams { data: data.clone(), ..Default::default() }).expect("spec");
        assert!(murmur_protocol::RunSpec::decode(&spec.encode()).is_err(), "{data} decoded");
        let opts = NodeOptions {
            bootstrap: Vec::new(),
            data_dir: dir.path().join("node"),
            listen: Vec::new(),
            private: false,
            mdns: false,
            json: true,
            spec: Some(spec),
            discovery_wait: Duration::from_secs(0),
            device: Chosen::Cpu(Precision::Fp32),
            metrics: None,
            dataset: DatasetOptions::default(),
            ticket: None,
            eval_every: 1,
            checkpointing: false,
            max_peers_per_ip: murmur_node::net::slots::MAX_PER_IP,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            let _ = tx.send(rt.block_on(run_node(opts)).map_err(|e| e.to_string()));
        });
        let result = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the node returned instead of blocking on the path");
        let err = result.expect_err("a node must refuse a spec naming a path");
        assert!(err.contains("never names a local path") && err.contains("--dataset"), "{err}");
    }
}
