//! The bootstrap server's Prometheus metrics: the network's (peers, bytes,
//! requests served, refusals by reason, bans), the store's size and uptime
//! from murmur-node's exporter, plus the runs this server hosts. Served by
//! murmur-node's metrics endpoint (`GET /metrics`).

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};
use murmur_node::metrics::{http, Exporter};
use murmur_node::net::NetHandle;

/// Serve the metrics at `addr`; returns the bound address.
pub async fn start(addr: SocketAddr, net: NetHandle, store_dir: &Path) -> Result<SocketAddr> {
    let registry = prometheus_registry()?;
    let exporter = Exporter::new(registry, net, store_dir)?;
    http::start(addr, exporter).await.with_context(|| format!("--metrics {addr}: cannot listen there"))
}

/// The registry with the bootstrap server's own metrics.
fn prometheus_registry() -> Result<murmur_node::metrics::Registry> {
    let registry = murmur_node::metrics::Registry::new();
    let runs =
        murmur_node::metrics::IntGauge::new("murmur_runs_hosted", "Runs this bootstrap server hosts.")?;
    runs.set(1);
    registry.register(Box::new(runs))?;
    Ok(registry)
}
