//! The dashboard's web server: a small HTTP/1.1 server on tokio for a local
//! page. `GET /` and the embedded assets, `GET /api/snapshot` (the board as
//! JSON) and `GET /api/events` (Server-Sent Events: one `snapshot` event per
//! change). Request heads are read with a size cap and a timeout; anything
//! else gets a 404 or 405. Assets are compiled in: no CDN, works offline.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// SSE comment sent when nothing changed, so proxies keep the stream open.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Most connections served at once.
const MAX_CLIENTS: usize = 64;

const INDEX_HTML: &str = include_str!("assets/index.html");
const DASHBOARD_JS: &str = include_str!("assets/dashboard.js");
const DASHBOARD_CSS: &str = include_str!("assets/dashboard.css");

/// The latest snapshot JSON, shared with every client.
pub type Snapshots = watch::Receiver<Arc<String>>;

/// Serve the page on `listener` until the process ends.
pub async fn serve(listener: TcpListener, snapshots: Snapshots) {
    let clients = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        let Ok((sock, _)) = listener.accept().await else { continue };
        let Ok(permit) = clients.clone().try_acquire_owned() else {
            drop(sock);
            continue;
        };
        let rx = snapshots.clone();
        tokio::spawn(async move {
            if let Err(e) = handle(sock, rx).await {
                tracing::debug!("dashboard client: {e}");
            }
            drop(permit);
        });
    }
}

/// Read the request head (up to the blank line) within the caps.
async fn read_head(sock: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = match tokio::time::timeout(HEAD_TIMEOUT, sock.read(&mut chunk)).await {
            Ok(r) => r?,
            Err(_) => return Ok(None),
        };
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
    sock.write_all(head.as_bytes()).await?;
    if !head_only {
        sock.write_all(body).await?;
    }
    sock.flush().await
}

async fn handle(mut sock: TcpStream, mut snapshots: Snapshots) -> std::io::Result<()> {
    let Some(head) = read_head(&mut sock).await? else {
        return respond(&mut sock, false, "400 Bad Request", "text/plain", b"bad request\n").await;
    };
    let Some((method, path)) = request_line(&head) else {
        return respond(&mut sock, false, "400 Bad Request", "text/plain", b"bad request\n").await;
    };
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
            sock.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            )
            .await?;
            sock.flush().await
        }
        "/api/events" => {
            sock.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: keep-alive\r\n\r\n",
            )
            .await?;
            loop {
                let body = snapshots.borrow_and_update().clone();
                sock.write_all(format!("event: snapshot\ndata: {body}\n\n").as_bytes()).await?;
                sock.flush().await?;
                loop {
                    match tokio::time::timeout(KEEPALIVE, snapshots.changed()).await {
                        Ok(Ok(())) => break,
                        Ok(Err(_)) => return Ok(()),
                        Err(_) => sock.write_all(b": keepalive\n\n").await?,
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
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(format!("{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.expect("write");
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
        s.write_all(b"GET /api/events HTTP/1.1\r\n\r\n").await.expect("write");
        let mut seen = String::new();
        read_until(&mut s, &mut seen, "data: {\"n\":1}").await;
        tx.send(Arc::new("{\"n\":2}".into())).expect("send");
        read_until(&mut s, &mut seen, "data: {\"n\":2}").await;
        assert!(seen.contains("text/event-stream") && seen.contains("event: snapshot"), "{seen}");
    }
}
