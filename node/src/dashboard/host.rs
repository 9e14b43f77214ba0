//! Which `Host` a dashboard request may name, the guard against DNS
//! rebinding: a web page on a name its owner points at 127.0.0.1 reaches the
//! dashboard through a visitor's browser, but the browser sends that name as
//! the Host. Only the listen address, `localhost` and the loopback addresses
//! (`127.0.0.1`, `[::1]`) are answered, with the listen port; when the
//! dashboard listens on every interface (`0.0.0.0` or `[::]`), any IP
//! address is too, since an address typed as such is no name an attacker
//! can point elsewhere.

use std::net::{IpAddr, SocketAddr};

/// The Host values a dashboard listening on one address answers.
#[derive(Debug, Clone, Copy)]
pub struct AllowedHosts {
    listen: SocketAddr,
}

impl AllowedHosts {
    pub fn new(listen: SocketAddr) -> Self {
        Self { listen }
    }

    /// Whether a request naming `host` (a Host header's value) is answered.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else { return false };
        if port != self.listen.port() {
            return false;
        }
        if name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        match name.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || ip == self.listen.ip() || self.listen.ip().is_unspecified(),
            Err(_) => false,
        }
    }
}

/// A Host value's name (an IPv6 address without its brackets) and port
/// (80 when none is given); None when it is not of that form.
fn split_host(host: &str) -> Option<(&str, u16)> {
    let (name, rest) = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']')?,
        None => host.find(':').map_or((host, ""), |i| host.split_at(i)),
    };
    let port = match rest {
        "" => 80,
        _ => rest.strip_prefix(':')?.parse().ok()?,
    };
    (!name.is_empty()).then_some((name, port))
}

/// The value of a request head's one `Host` header; None when there is
/// none or more than one.
pub fn host_header(head: &str) -> Option<&str> {
    let mut hosts = head.lines().skip(1).take_while(|line| !line.is_empty()).filter_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim().eq_ignore_ascii_case("host").then(|| value.trim())
    });
    let host = hosts.next()?;
    hosts.next().is_none().then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_the_listen_address_with_its_port_are_allowed() {
        let local = AllowedHosts::new("127.0.0.1:8080".parse().expect("addr"));
        for host in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080", "[::1]:8080", "127.0.0.2:8080"] {
            assert!(local.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example:8080",
            "127.0.0.1:8081",
            "127.0.0.1",
            "192.168.1.5:8080",
            "::1:8080",
            "[::1]x",
            "[::1",
            ":8080",
            "",
        ] {
            assert!(!local.allows(host), "{host}");
        }
        // On every interface any address is answered, still no other name.
        let all = AllowedHosts::new("0.0.0.0:80".parse().expect("addr"));
        assert!(all.allows("192.168.1.5") && all.allows("192.168.1.5:80") && all.allows("[fe80::1]"));
        assert!(!all.allows("evil.example") && !all.allows("192.168.1.5:81"));
        let lan = AllowedHosts::new("10.0.0.7:9000".parse().expect("addr"));
        assert!(lan.allows("10.0.0.7:9000") && lan.allows("localhost:9000") && !lan.allows("10.0.0.8:9000"));
    }

    #[test]
    fn the_one_host_header_is_found() {
        assert_eq!(host_header("GET / HTTP/1.1\r\nhOsT:  a:1 \r\nAccept: */*\r\n\r\n"), Some("a:1"));
        assert_eq!(host_header("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"), None);
        assert_eq!(host_header("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), None);
        // The request line is not a header, whatever it holds.
        assert_eq!(host_header("Host: a\r\n\r\n"), None);
        // Nor is anything after the head.
        assert_eq!(host_header("GET / HTTP/1.1\r\nHost: a\r\n\r\nHost: b\r\n"), Some("a"));
    }
}
