//! Emulated home links for a testnet (`murmur testnet --home-links`): every
//! process in its own network namespace, joined to a bridge in a hub
//! namespace by a veth pair. Each node's upload is capped by a token-bucket
//! filter (`tc qdisc tbf`) on its own end of the pair and its download by
//! one on the hub's end; round-trip latency is injected in the application
//! (`MURMUR_NET_DELAY_MS`, half the RTT on each side: net/delay.rs), since
//! this kernel's `tc` has no netem. Needs root and iproute2; the namespaces
//! are deleted when the `Namespaces` value is dropped.

use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;

use anyhow::{bail, Context, Result};

/// A home link: upload and download caps and the round-trip time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HomeLinks {
    pub up_mbit: f64,
    pub down_mbit: f64,
    pub rtt_ms: u64,
}

impl HomeLinks {
    /// The receive delay each process adds (half the round trip).
    pub fn delay_ms(&self) -> u64 {
        self.rtt_ms / 2
    }
}

impl FromStr for HomeLinks {
    type Err = String;
    /// `UP:DOWN:RTT`: Mbit/s up, Mbit/s down, round trip in ms (`20:50:40`).
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad =
            || format!("`{s}` is not UP:DOWN:RTT (Mbit/s up, Mbit/s down, ms round trip), e.g. 20:50:40");
        let [up, down, rtt] = parts.as_slice() else { return Err(bad()) };
        let (Ok(up_mbit), Ok(down_mbit), Ok(rtt_ms)) =
            (up.parse::<f64>(), down.parse::<f64>(), rtt.parse::<u64>())
        else {
            return Err(bad());
        };
        let rate_ok = |r: f64| r.is_finite() && (0.1..=10_000.0).contains(&r);
        if !rate_ok(up_mbit) || !rate_ok(down_mbit) {
            return Err(format!("`{s}`: rates must lie between 0.1 and 10000 Mbit/s"));
        }
        if rtt_ms > 4_000 {
            return Err(format!("`{s}`: a round trip of at most 4000 ms"));
        }
        Ok(Self { up_mbit, down_mbit, rtt_ms })
    }
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program).args(args).output().with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    run("ip", args)
}

/// A token bucket of `mbit` Mbit/s on `dev` in namespace `ns`.
fn cap(ns: &str, dev: &str, mbit: f64) -> Result<()> {
    let rate = format!("{}kbit", (mbit * 1000.0).round() as u64);
    run(
        "ip",
        &[
            "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst",
            "64kb", "latency", "400ms",
        ],
    )
}

/// Whether this machine can build the namespaces, or why not.
pub fn available() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("--home-links needs root (network namespaces and tc)");
    }
    ip(&["netns", "list"]).context("--home-links needs iproute2 (`ip netns`)")?;
    Ok(())
}

/// One process's namespace and address.
#[derive(Debug, Clone)]
struct Member {
    name: String,
    ns: String,
    addr: String,
}

/// The hub and one namespace per process; deleted on drop.
#[derive(Debug)]
pub struct Namespaces {
    hub: String,
    members: Vec<Member>,
}

impl Namespaces {
    /// Create the hub's bridge and one namespace per name in `open` (links
    /// left uncapped: the bootstrap server) and in `capped` (home links).
    /// Addresses are 10.79.0.2 … on one /24.
    pub fn create(open: &[String], capped: &[String], links: HomeLinks) -> Result<Self> {
        let total = open.len() + capped.len();
        if total > 250 {
            bail!("--home-links supports at most 250 processes");
        }
        let base = format!("mmh{}", std::process::id());
        let mut ns = Namespaces { hub: format!("{base}hub"), members: Vec::new() };
        ip(&["netns", "add", &ns.hub])?;
        ip(&["-n", &ns.hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &ns.hub, "link", "set", "br0", "up"])?;
        for (i, name) in open.iter().chain(capped).enumerate() {
            let member =
                Member { name: name.clone(), ns: format!("{base}m{i}"), addr: format!("10.79.0.{}", i + 2) };
            ip(&["netns", "add", &member.ns])?;
            ns.members.push(member.clone());
            let port = format!("p{i}");
            ip(&["-n", &member.ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n", &member.ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns",
                &ns.hub,
            ])?;
            ip(&["-n", &member.ns, "addr", "add", &format!("{}/24", member.addr), "dev", "eth0"])?;
            ip(&["-n", &member.ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns.hub, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &ns.hub, "link", "set", &port, "up"])?;
            if i >= open.len() {
                cap(&member.ns, "eth0", links.up_mbit)?;
                cap(&ns.hub, &port, links.down_mbit)?;
            }
        }
        Ok(ns)
    }

    fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// The namespace file `name` runs in (for setns).
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.member(name).map(|m| PathBuf::from("/var/run/netns").join(&m.ns))
    }

    /// The address `name` listens on.
    pub fn addr(&self, name: &str) -> Option<&str> {
        self.member(name).map(|m| m.addr.as_str())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for m in &self.members {
            let _ = ip(&["netns", "del", &m.ns]);
        }
        let _ = ip(&["netns", "del", &self.hub]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_and_bad_ones_say_what_is_wrong() {
        let l: HomeLinks = "20:50:40".parse().expect("parses");
        assert_eq!(l, HomeLinks { up_mbit: 20.0, down_mbit: 50.0, rtt_ms: 40 });
        assert_eq!(l.delay_ms(), 20);
        for (bad, says) in [
            ("20:50", "UP:DOWN:RTT"),
            ("fast:50:40", "UP:DOWN:RTT"),
            ("0:50:40", "between 0.1 and 10000"),
            ("20:50:9000", "at most 4000"),
        ] {
            let e = bad.parse::<HomeLinks>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
