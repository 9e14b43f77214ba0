//! A tiny HTTP endpoint serving the bootstrap server's counters in the
//! Prometheus text format (`GET /metrics`, or any path).

use std::sync::Arc;
use std::time::Instant;

use murmur_node::net::{NetHandle, NetStats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Render the counters.
pub async fn render(net: &NetHandle, started: Instant) -> String {
    let s: &Arc<NetStats> = &net.stats;
    let peers = net.peers().await;
    let trainers = peers.iter().filter(|p| p.role.is_some_and(|r| r.trains())).count();
    let mut out = String::new();
    let mut put = |name: &str, kind: &str, help: &str, v: u64| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
    };
    put("murmur_bootstrap_connected_peers", "gauge", "Peers connected now.", peers.len() as u64);
    put("murmur_bootstrap_trainers", "gauge", "Connected training peers of the hosted run.", trainers as u64);
    put(
        "murmur_bootstrap_requests_served_total",
        "counter",
        "Transfer requests answered.",
        NetStats::get(&s.requests_served),
    );
    put(
        "murmur_bootstrap_served_bytes_total",
        "counter",
        "Blob bytes served.",
        NetStats::get(&s.served_bytes),
    );
    put(
        "murmur_bootstrap_gossip_bytes_in_total",
        "counter",
        "Gossip bytes received.",
        NetStats::get(&s.gossip_bytes_in),
    );
    put(
        "murmur_bootstrap_rejections_total",
        "counter",
        "Peer messages refused.",
        NetStats::get(&s.rejections),
    );
    put("murmur_bootstrap_bans_total", "counter", "Peers banned.", NetStats::get(&s.bans));
    put("murmur_bootstrap_uptime_seconds", "gauge", "Seconds since start.", started.elapsed().as_secs());
    out
}

/// Serve metrics on `listener` forever.
pub async fn serve(listener: TcpListener, net: NetHandle, started: Instant) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else { continue };
        let net = net.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), sock.read(&mut buf)).await;
            let body = render(&net, started).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
        });
    }
}
