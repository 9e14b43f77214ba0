//! Ticket admission for a local testnet (`murmur testnet --tickets`): an
//! operator key, written where `murmur ticket issue --operator-key` can use
//! it, and for each node a key in its data directory and a ticket that
//! operator signed for it. Keys are derived from the testnet's seed, so a
//! node keeps its key (and its ticket) across chaos restarts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use murmur_protocol::{NodeKey, RunId, Ticket};

use crate::runtime::tickets::ticket_file_text;
use crate::store::keyfile;

/// How long a testnet's tickets stay valid.
const TICKET_SECS: u64 = 7 * 24 * 3600;

/// The operator of a testnet's ticket run.
pub struct TicketDesk {
    operator: NodeKey,
    seed: u64,
}

/// A key derived from the testnet's seed and a name.
fn derived_key(seed: u64, name: &str) -> NodeKey {
    let mut material = seed.to_le_bytes().to_vec();
    material.extend_from_slice(name.as_bytes());
    NodeKey::from_seed(blake3::derive_key("murmur 2026-12 testnet key", &material))
}

impl TicketDesk {
    /// The operator for `seed`, its key file written to `<dir>/operator.key`.
    pub fn new(dir: &Path, seed: u64) -> Result<Self> {
        let operator = derived_key(seed, "operator");
        let path = dir.join("operator.key");
        keyfile::write_key(&path, &operator.seed())
            .with_context(|| format!("writing the operator key {}", path.display()))?;
        Ok(TicketDesk { operator, seed })
    }

    /// The operator's public key, as `murmur-bootstrap --operator` takes it.
    pub fn operator_hex(&self) -> String {
        self.operator.public().to_string()
    }

    /// Give the node whose data directory is `data_dir` its key (kept if it
    /// is there already) and a ticket for `run`; returns the ticket file.
    pub fn admit(&self, name: &str, data_dir: &Path, run: RunId) -> Result<PathBuf> {
        std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let key_path = data_dir.join("node.key");
        let key = if key_path.exists() {
            keyfile::load(&key_path).with_context(|| format!("reading {}", key_path.display()))?
        } else {
            let key = derived_key(self.seed, name);
            keyfile::write_key(&key_path, &key.seed())
                .with_context(|| format!("writing {}", key_path.display()))?;
            key
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let ticket = Ticket::issue(&self.operator, run, key.public(), now + TICKET_SECS);
        let path = data_dir.join("node.ticket");
        std::fs::write(&path, ticket_file_text(&ticket))
            .with_context(|| format!("writing the ticket {}", path.display()))?;
        Ok(path)
    }
}

/// The run a bootstrap server's log says it hosts
/// (`murmur-bootstrap: hosting run <64 hex> …`).
pub fn hosted_run(log: &str) -> Option<RunId> {
    let hex = log.split("hosting run ").nth(1)?.split_whitespace().next()?;
    let bytes = murmur_protocol::hash::unhex(hex)?;
    Some(RunId(<[u8; 32]>::try_from(bytes.as_slice()).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_is_read_from_the_servers_log() {
        let id = RunId([0xab; 32]);
        let log = format!("murmur-bootstrap: hosting run {id} (tiny preset, 3 parameters)\n");
        assert_eq!(hosted_run(&log), Some(id));
        assert_eq!(hosted_run("murmur-bootstrap: hosting run abc (tiny"), None);
        assert_eq!(hosted_run("nothing"), None);
    }

    #[test]
    fn a_node_keeps_its_key_and_holds_a_ticket_the_operator_signed_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let desk = TicketDesk::new(dir.path(), 7).expect("desk");
        let run = RunId([3; 32]);
        let data = dir.path().join("node-1");
        let first = desk.admit("node-1", &data, run).expect("ticket");
        let key = keyfile::load(&data.join("node.key")).expect("key");
        let text = std::fs::read_to_string(&first).expect("ticket file");
        let ticket = crate::runtime::tickets::read_ticket_file(&first).expect("parses");
        assert_eq!(ticket.holder, key.public());
        let operators = [desk.operator.public()];
        assert!(ticket.check(&run, &operators, ticket.expires - 1).is_ok(), "{text}");
        assert_eq!(desk.operator_hex(), operators[0].to_string());
        // Started again (a chaos restart): the same key, a fresh ticket.
        desk.admit("node-1", &data, run).expect("ticket again");
        assert_eq!(keyfile::load(&data.join("node.key")).expect("key").public(), key.public());
        let other = desk.admit("node-2", &dir.path().join("node-2"), run).expect("ticket");
        let other = crate::runtime::tickets::read_ticket_file(&other).expect("parses");
        assert_ne!(other.holder, key.public(), "each node its own key");
    }
}
