//! Network namespaces for partition tests: a left and a right namespace
//! joined through a hub namespace that routes between them. Turning the
//! hub's IPv4 forwarding off cuts the two sides apart (each side still
//! reaches its own addresses); turning it on heals the link. Needs root and
//! iproute2 (`ip netns`); the namespaces are deleted when dropped.

use std::path::Path;
use std::process::Command;

/// The left side's address (the hub is 10.77.1.1).
pub const LEFT_ADDR: &str = "10.77.1.2";
/// The right side's address (the hub is 10.77.2.1).
pub const RIGHT_ADDR: &str = "10.77.2.2";

/// Which side of the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
}

impl Side {
    /// The address processes on this side listen on.
    pub fn addr(self) -> &'static str {
        match self {
            Side::Left => LEFT_ADDR,
            Side::Right => RIGHT_ADDR,
        }
    }
}

/// Two sides and a hub; deleted on drop.
pub struct Partitionable {
    left: String,
    right: String,
    hub: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Whether this machine can create network namespaces (root and iproute2),
/// or why not.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("network namespaces need root".into());
    }
    ip(&["netns", "list"]).map_err(|e| format!("iproute2 is missing or unusable: {e}"))
}

impl Partitionable {
    /// Create the three namespaces (named after `tag` and this process) and
    /// wire them: left 10.77.1.2/24 — hub — right 10.77.2.2/24, forwarding on.
    pub fn create(tag: &str) -> Result<Self, String> {
        let base = format!("mm{tag}{}", std::process::id());
        let p =
            Partitionable { left: format!("{base}l"), right: format!("{base}r"), hub: format!("{base}h") };
        for ns in [&p.left, &p.right, &p.hub] {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        for (ns, dev, addr, hub_dev, hub_addr) in [
            (&p.left, "eth0", "10.77.1.2/24", "left", "10.77.1.1/24"),
            (&p.right, "eth0", "10.77.2.2/24", "right", "10.77.2.1/24"),
        ] {
            ip(&["-n", ns, "link", "add", dev, "type", "veth", "peer", "name", hub_dev, "netns", &p.hub])?;
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", &p.hub, "addr", "add", hub_addr, "dev", hub_dev])?;
            ip(&["-n", &p.hub, "link", "set", hub_dev, "up"])?;
            let gateway = hub_addr.trim_end_matches("/24");
            ip(&["-n", ns, "route", "add", "default", "via", gateway])?;
        }
        p.set_forwarding(true)?;
        Ok(p)
    }

    fn set_forwarding(&self, on: bool) -> Result<(), String> {
        let value = format!("net.ipv4.ip_forward={}", u8::from(on));
        let out = Command::new("ip")
            .args(["netns", "exec", &self.hub, "sysctl", "-qw", &value])
            .output()
            .map_err(|e| format!("running sysctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("sysctl {value} in {}: {}", self.hub, String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    /// Cut the link between the sides.
    pub fn cut(&self) -> Result<(), String> {
        self.set_forwarding(false)
    }

    /// Restore the link.
    pub fn heal(&self) -> Result<(), String> {
        self.set_forwarding(true)
    }

    /// A command that runs `program` inside `side`'s namespace.
    pub fn command(&self, side: Side, program: &Path) -> Command {
        let ns = match side {
            Side::Left => &self.left,
            Side::Right => &self.right,
        };
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }
}

impl Drop for Partitionable {
    fn drop(&mut self) {
        for ns in [&self.left, &self.right, &self.hub] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
