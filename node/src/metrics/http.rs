//! The metrics endpoint: a minimal HTTP/1.1 server answering `GET /metrics`
//! (and `HEAD /metrics`, headers only) with the exporter's text. Other paths
//! get 404, other methods 405. At most `MAX_CLIENTS` connections are served
//! at once (more are closed unanswered), and a request head must arrive
//! within `HEAD_TIMEOUT` and `MAX_HEAD` bytes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Exporter, CONTENT_TYPE};

/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing a response may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once.
const MAX_CLIENTS: usize = 16;

/// Bind `addr` (port 0 picks a free one) and serve `exporter` there on a
/// task; returns the bound address.
pub async fn start(addr: SocketAddr, exporter: Exporter) -> std::io::Result<SocketAddr> {
    start_with(addr, exporter, HEAD_TIMEOUT).await
}

/// `start` with the time a client may take to send its request head.
async fn start_with(
    addr: SocketAddr,
    exporter: Exporter,
    head_timeout: Duration,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(serve(listener, Arc::new(exporter), head_timeout));
    Ok(bound)
}

/// Serve `exporter` on `listener` until the process ends.
async fn serve(listener: TcpListener, exporter: Arc<Exporter>, head_timeout: Duration) {
    let clients = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        let sock = match listener.accept().await {
            Ok((sock, _)) => sock,
            Err(e) => {
                // Out of file descriptors and the like: wait, do not spin.
                tracing::debug!("metrics endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = clients.clone().try_acquire_owned() else {
            drop(sock);
            continue;
        };
        let exporter = exporter.clone();
        tokio::spawn(async move {
            let mut sock = sock;
            if let Err(e) = handle(&mut sock, &exporter, head_timeout).await {
                tracing::debug!("metrics client: {e}");
            }
            // The place is given back before the socket closes, so a client
            // that has seen its connection end can always connect again.
            drop(permit);
            drop(sock);
        });
    }
}

/// Read the request head (up to the blank line) within the caps; `None`
/// when it is too long, too slow or cut off.
async fn read_head(sock: &mut TcpStream, timeout: Duration) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = match tokio::time::timeout_at(deadline, sock.read(&mut chunk)).await {
            Ok(r) => r?,
            Err(_) => return Ok(None),
        };
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            return Ok(Some(buf));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// What a request gets: status line, extra headers, content type, body.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics { head_only: bool },
    NotFound { head_only: bool },
    MethodNotAllowed,
    BadRequest,
}

fn route(head: &[u8]) -> Route {
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::MethodNotAllowed,
    };
    match target.split('?').next().unwrap_or(target) {
        "/metrics" => Route::Metrics { head_only },
        _ => Route::NotFound { head_only },
    }
}

async fn handle(sock: &mut TcpStream, exporter: &Exporter, head_timeout: Duration) -> std::io::Result<()> {
    let route = match read_head(sock, head_timeout).await? {
        Some(head) => route(&head),
        None => Route::BadRequest,
    };
    let (status, extra, ctype, body, head_only) = match route {
        Route::Metrics { head_only } => ("200 OK", "", CONTENT_TYPE, exporter.render().await, head_only),
        Route::NotFound { head_only } => {
            ("404 Not Found", "", "text/plain", "not found: metrics are at /metrics\n".to_string(), head_only)
        }
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n",
            "text/plain",
            "only GET and HEAD\n".to_string(),
            false,
        ),
        Route::BadRequest => ("400 Bad Request", "", "text/plain", "bad request\n".to_string(), false),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{}",
        body.len(),
        if head_only { "" } else { body.as_str() }
    );
    match tokio::time::timeout(WRITE_TIMEOUT, async {
        sock.write_all(response.as_bytes()).await?;
        sock.flush().await
    })
    .await
    {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "writing the response timed out")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n"), Route::Metrics { head_only: false });
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics { head_only: false });
        assert_eq!(route(b"HEAD /metrics HTTP/1.1\r\n\r\n"), Route::Metrics { head_only: true });
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound { head_only: false });
        assert_eq!(route(b"GET /metrics/x HTTP/1.1\r\n\r\n"), Route::NotFound { head_only: false });
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::MethodNotAllowed);
        assert_eq!(route(b"GET /metrics\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(b"GET /metrics SPDY/3\r\n\r\n"), Route::BadRequest);
        assert_eq!(route(b"\r\n\r\n"), Route::BadRequest);
    }

    async fn request(addr: SocketAddr, raw: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let _ = s.write_all(raw).await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the endpoint kept a connection open");
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A real swarm (no peers) behind a real exporter, on an ephemeral port.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serves_metrics_at_one_path_with_caps() {
        let key = murmur_protocol::NodeKey::from_seed([7; 32]);
        let cfg =
            crate::net::NetConfig::new(key, murmur_protocol::hash::RunId([1; 32]), crate::net::Role::Trainer);
        let (net, _events) =
            crate::net::start(cfg, Arc::new(crate::runtime::startup::Nothing)).expect("network");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("blob"), [1u8; 4096]).expect("write");
        let node = super::super::NodeMetrics::new().expect("metrics");
        node.round_opened(1);
        node.round_closed(1);
        let exporter =
            Exporter::new(node.registry().expect("on").clone(), net, dir.path()).expect("exporter");
        // The idle connections below must outlive the head timeout however
        // slowly a loaded machine runs this test, so it is long here.
        let addr = start_with("127.0.0.1:0".parse().expect("addr"), exporter, Duration::from_secs(600))
            .await
            .expect("bind");

        let get = request(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let (head, body) = get.split_once("\r\n\r\n").expect("a head and a body");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
        for name in [
            "murmur_rounds_closed_total 1",
            "murmur_round_duration_seconds_count 1",
            "murmur_store_bytes 4096",
            "murmur_peers_connected 0",
            "murmur_sent_bytes_total",
            "murmur_uptime_seconds",
        ] {
            assert!(body.contains(name), "{name} missing from\n{body}");
        }
        let head = request(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200 OK") && head.ends_with("\r\n\r\n"), "HEAD got a body: {head}");
        assert!(request(addr, b"GET / HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404"));
        let post = request(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"), "{post}");
        // An oversized head is refused (400, or a reset when the unread
        // rest is dropped), never buffered without end.
        let big = request(addr, &vec![b'a'; MAX_HEAD + 4096]).await;
        assert!(big.is_empty() || big.starts_with("HTTP/1.1 400"), "{big}");

        // Idle connections beyond the cap are closed at once, unanswered;
        // once they go, the endpoint answers again.
        let mut idle = Vec::new();
        for _ in 0..MAX_CLIENTS {
            idle.push(TcpStream::connect(addr).await.expect("connect"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused = request(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        assert!(refused.is_empty(), "a connection past the cap was served: {refused}");
        drop(idle);
        // Their handlers see the close and give their places back; on a
        // loaded machine that can take a while, so ask again for up to 60 s.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let again = request(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
            if again.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(again.is_empty(), "neither served nor refused: {again}");
            assert!(
                tokio::time::Instant::now() < deadline,
                "the endpoint never answered again after the idle clients left"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
