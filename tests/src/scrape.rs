//! Reading a node's or bootstrap server's Prometheus endpoint in a test: a
//! raw HTTP/1.1 request over loopback, and a sample's value from the text.

use std::io::{Read, Write};
use std::time::Duration;

/// Raw `GET`/`HEAD` of `url` (`http://host:port/path`): (status line and
/// headers, body).
pub fn fetch(method: &str, url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut s = std::net::TcpStream::connect(host).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(s, "{method} /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the response");
    let (head, body) = out.split_once("\r\n\r\n").expect("a response head");
    (head.to_string(), body.to_string())
}

/// The value of the first sample of `name` (no labels) in `text`.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
