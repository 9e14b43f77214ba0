//! The dashboard's web server: a small HTTP/1.1 server on tokio for a local
//! page. `GET /` and the embedded assets, `GET /api/snapshot` (the board as
//! JSON) and `GET /api/events` (Server-Sent Events: one `snapshot` event per
//! change). A request head is read with a size cap and one deadline for the
//! whole head, so clients that send it a byte at a time cannot hold the
//! server's slots; every write has a timeout, so a client that stops
//! reading loses its connection; a request whose Host is not this server's
//! (`host`) gets a 403. Anything else gets a 404 or 405. Assets are compiled
//! in: no CDN, works offline.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::host::{host_header, AllowedHosts};

/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its whole request head; also how
/// long a connection waits for a slot when all are taken.
const HEAD_DEADLINE: Duration = Duration::from_secs(3);
/// How long one write (a response, an event) may wait for the client to
/// read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// What a connection that found no slot within `HEAD_DEADLINE` is told.
const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";
/// SSE comment sent when nothing changed, so proxies keep the stream open.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Most connections served at once.
const MAX_CLIENTS: usize = 64;

const INDEX_HTML: &str = include_str!("assets/index.html");
const DASHBOARD_JS: &str = include_str!("assets/dashboard.js");
const DASHBOARD_CSS: &str = include_str!("assets/dashboard.css");

/// The latest snapshot JSON, shared with every client.
pub type Snapshots = watch::Receiver<Arc<String>>;

/// Serve the page on `listener` until the process ends. When all
/// `MAX_CLIENTS` slots are taken a new connection waits up to
/// `HEAD_DEADLINE` for one (as long as a head may hold it), then gets a 503.
pub async fn serve(listener: TcpListener, snapshots: Snapshots) {
    let hosts = match listener.local_addr() {
        Ok(addr) => AllowedHosts::new(addr),
        Err(e) => {
            tracing::warn!("dashboard: the listener has no address ({e}); not serving");
            return;
        }
    };
    let clients = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        let sock = match listener.accept().await {
            Ok((sock, _)) => sock,
            Err(e) => {
                // Out of file descriptors and the like: wait, do not spin.
                tracing::debug!("dashboard: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match tokio::time::timeout(HEAD_DEADLINE, clients.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                let _ = sock.try_write(BUSY);
                continue;
            }
        };
        let rx = snapshots.clone();
        tokio::spawn(async move {
            if let Err(e) = handle(sock, rx, hosts).await {
                tracing::debug!("dashboard client: {e}");
            }
            drop(permit);
        });
    }
}

/// Read the request head (up to the blank line) within the size cap and
/// `HEAD_DEADLINE` for the whole of it; None when it is too long or late.
async fn read_head(sock: &mut TcpStream) -> std::io::Result<Option<String>> {
    match tokio::time::timeout(HEAD_DEADLINE, read_until_blank_line(sock)).await {
        Ok(head) => head,
        Err(_) => Ok(None),
    }
}

async fn read_until_blank_line(sock: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// The method and path of a request head.
pub fn request_line(head: &str) -> Option<(&str, &str)> {
    let mut parts = head.lines().next()?.split_whitespace();
    let method = parts.next()?;
    let target = parts.next()?;
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

/// Write `bytes` and flush within `WRITE_TIMEOUT` (an error after it).
async fn send(sock: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let write = async {
        sock.write_all(bytes).await?;
        sock.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(done) => done,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client stopped reading")),
    }
}

/// Write a complete response. A HEAD request (`head_only`) gets the same
/// status and headers, `Content-Length` included, and no body.
async fn respond(
    sock: &mut TcpStream,
    head_only: bool,
    status: &str,
    ctype: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    send(sock, head.as_bytes()).await?;
    if !head_only {
        send(sock, body).await?;
    }
    Ok(())
}

async fn handle(mut sock: TcpStream, mut snapshots: Snapshots, hosts: AllowedHosts) -> std::io::Result<()> {
    let Some(head) = read_head(&mut sock).await? else {
        return respond(&mut sock, false, "400 Bad Request", "text/plain", b"bad request\n").await;
    };
    let Some((method, path)) = request_line(&head) else {
        return respond(&mut sock, false, "400 Bad Request", "text/plain", b"bad request\n").await;
    };
    match host_header(&head) {
        Some(host) if hosts.allows(host) => {}
        Some(_) => {
            let why = b"this dashboard answers only requests addressed to it by IP address or localhost, with its port (e.g. http://127.0.0.1:<port>/); open it by that address\n";
            return respond(&mut sock, false, "403 Forbidden", "text/plain", why).await;
        }
        None => {
            let why = b"a request needs one Host header\n";
            return respond(&mut sock, false, "400 Bad Request", "text/plain", why).await;
        }
    }
    if method != "GET" && method != "HEAD" {
        return respond(&mut sock, false, "405 Method Not Allowed", "text/plain", b"only GET and HEAD\n")
            .await;
    }
    let h = method == "HEAD";
    match path {
        "/" | "/index.html" => {
            respond(&mut sock, h, "200 OK", "text/html; charset=utf-8", INDEX_HTML.as_bytes()).await
        }
        "/dashboard.js" => {
            respond(&mut sock, h, "200 OK", "text/javascript; charset=utf-8", DASHBOARD_JS.as_bytes()).await
        }
        "/dashboard.css" => {
            respond(&mut sock, h, "200 OK", "text/css; charset=utf-8", DASHBOARD_CSS.as_bytes()).await
        }
        "/api/snapshot" => {
            let body = snapshots.borrow().clone();
            respond(&mut sock, h, "200 OK", "application/json", body.as_bytes()).await
        }
        "/api/events" if h => {
            send(
                &mut sock,
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            )
            .await
        }
        "/api/events" => {
            send(
                &mut sock,
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: keep-alive\r\n\r\n",
            )
            .await?;
            loop {
                let body = snapshots.borrow_and_update().clone();
                send(&mut sock, format!("event: snapshot\ndata: {body}\n\n").as_bytes()).await?;
                loop {
                    match tokio::time::timeout(KEEPALIVE, snapshots.changed()).await {
                        Ok(Ok(())) => break,
                        Ok(Err(_)) => return Ok(()),
                        Err(_) => send(&mut sock, b": keepalive\n\n").await?,
                    }
                }
            }
        }
        _ => respond(&mut sock, h, "404 Not Found", "text/plain", b"not found\n").await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> String {
        request_for(addr, &addr.to_string(), method, path).await
    }

    /// A request naming `host` in its Host header.
    async fn request_for(addr: std::net::SocketAddr, host: &str, method: &str, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        s.write_all(head.as_bytes()).await.expect("write");
        let mut out = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
        out
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        request(addr, "GET", path).await
    }

    async fn read_until(s: &mut TcpStream, seen: &mut String, want: &str) {
        let mut buf = [0u8; 4096];
        while !seen.contains(want) {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("stream stalled")
                .expect("read");
            assert!(n > 0, "stream closed");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }

    #[test]
    fn request_lines_parse() {
        assert_eq!(request_line("GET /api/snapshot?x=1 HTTP/1.1\r\n\r\n"), Some(("GET", "/api/snapshot")));
        assert_eq!(request_line(""), None);
        assert_eq!(request_line("GET\r\n"), None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn serves_the_page_the_snapshot_and_a_live_event_stream() {
        let (tx, rx) = watch::channel(Arc::new("{\"n\":1}".to_string()));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(listener, rx));
        let page = get(addr, "/").await;
        assert!(
            page.starts_with("HTTP/1.1 200 OK") && page.contains("<script src=\"/dashboard.js\">"),
            "{page}"
        );
        assert!(get(addr, "/dashboard.js").await.contains("EventSource"));
        assert!(get(addr, "/api/snapshot").await.ends_with("{\"n\":1}"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        assert!(request(addr, "POST", "/").await.starts_with("HTTP/1.1 405"));
        // HEAD: the GET response's status and headers (its Content-Length
        // too), and nothing after the blank line; the event stream ends.
        let head = request(addr, "HEAD", "/").await;
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}\r\n", INDEX_HTML.len())), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "HEAD got a body: {head}");
        let head = request(addr, "HEAD", "/nope").await;
        assert!(head.starts_with("HTTP/1.1 404") && head.ends_with("\r\n\r\n"), "{head}");
        let head = request(addr, "HEAD", "/api/events").await;
        assert!(head.contains("text/event-stream") && head.ends_with("\r\n\r\n"), "{head}");
        // An oversized head is refused (400, or the connection reset when
        // the unread rest is dropped), never buffered without end.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let _ = s.write_all(&vec![b'a'; MAX_HEAD + 2048]).await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        let out = String::from_utf8_lossy(&out);
        assert!(read.is_ok(), "the server kept an oversized request open");
        assert!(out.is_empty() || out.starts_with("HTTP/1.1 400"), "{out}");
        // The event stream sends the current snapshot, then each new one.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(format!("GET /api/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut seen = String::new();
        read_until(&mut s, &mut seen, "data: {\"n\":1}").await;
        tx.send(Arc::new("{\"n\":2}".into())).expect("send");
        read_until(&mut s, &mut seen, "data: {\"n\":2}").await;
        assert!(seen.contains("text/event-stream") && seen.contains("event: snapshot"), "{seen}");
    }

    async fn start(snapshot: &str) -> (watch::Sender<Arc<String>>, std::net::SocketAddr) {
        let (tx, rx) = watch::channel(Arc::new(snapshot.to_string()));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(listener, rx));
        (tx, addr)
    }

    /// Fails before the head had one deadline: each slow client's byte
    /// arrived within the 5 s a read could take, so all 64 slots stayed
    /// taken and the 65th connection was closed unanswered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sixty_four_slow_clients_do_not_keep_a_65th_request_waiting() {
        let (_tx, addr) = start("{\"n\":1}").await;
        let mut slow = Vec::new();
        for _ in 0..MAX_CLIENTS {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"G").await.expect("write");
            slow.push(s);
        }
        // One more byte of head from each every second, for up to a minute.
        let drip = tokio::spawn(async move {
            for _ in 0..60 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                for s in &mut slow {
                    let _ = s.write_all(b"E").await;
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t0 = std::time::Instant::now();
        let reply = tokio::time::timeout(Duration::from_secs(10), get(addr, "/api/snapshot")).await;
        let waited = t0.elapsed();
        drip.abort();
        let reply = reply.unwrap_or_default();
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with("{\"n\":1}"),
            "after {waited:?}: {reply:?}"
        );
        assert!(waited < Duration::from_secs(5), "the 65th request waited {waited:?}");
    }

    /// Fails before the Host check: a page on evil.example whose name
    /// resolves to 127.0.0.1 (DNS rebinding) was served the dashboard.
    #[tokio::test(flavor = "current_thread")]
    async fn a_request_for_another_host_is_refused() {
        let (_tx, addr) = start("{\"n\":1}").await;
        let port = addr.port();
        let ask = |host: String| async move { request_for(addr, &host, "GET", "/api/snapshot").await };
        for host in [
            "evil.example".to_string(),
            format!("evil.example:{port}"),
            format!("127.0.0.1.evil.example:{port}"),
        ] {
            let reply = ask(host.clone()).await;
            assert!(reply.starts_with("HTTP/1.1 403"), "Host {host}: {reply}");
            assert!(!reply.contains("\"n\""), "Host {host} got the snapshot: {reply}");
        }
        for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("LocalHost:{port}")] {
            let reply = ask(host.clone()).await;
            assert!(reply.starts_with("HTTP/1.1 200"), "Host {host}: {reply}");
        }
    }

    /// Fails before event writes had a timeout: a client that stops reading
    /// its event stream held the connection (and its slot) for good.
    #[tokio::test(flavor = "current_thread")]
    async fn an_event_stream_that_is_not_read_is_closed() {
        let (tx, addr) = start("{\"n\":1}").await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(format!("GET /api/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut seen = String::new();
        read_until(&mut s, &mut seen, "data: {\"n\":1}").await;
        // A snapshot larger than both sockets' buffers, then no more reads.
        tx.send(Arc::new(format!("\"{}\"", "x".repeat(64 << 20)))).expect("send");
        tokio::time::sleep(WRITE_TIMEOUT + Duration::from_secs(2)).await;
        // The server gave up on the write and closed: what is buffered
        // drains, then the stream ends (or is reset) within a bounded wait.
        let mut buf = vec![0u8; 1 << 20];
        let ended = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the server still writes to a client that stopped reading");
    }
}
