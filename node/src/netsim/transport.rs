//! The simulated network of `murmur netsim`: virtual time in milliseconds,
//! one uplink and one downlink per node with a bandwidth and a latency, and
//! a queue of deliveries. A transfer leaves when the sender's uplink is
//! free, takes `bytes / up` on it, travels `latency`, then waits for and
//! takes `bytes / down` on the receiver's downlink (store and forward).
//! Gossip (manifests, results, proofs) is charged as a mesh flood of degree
//! D: every online node sends and receives D copies, and it arrives after
//! ⌈log_D N⌉ hops. Bytes are counted per node per round.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One node's link.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Bytes per millisecond.
    pub up: f64,
    pub down: f64,
    pub latency_ms: u64,
}

impl Link {
    /// From megabits per second.
    pub fn mbps(up: f64, down: f64, latency_ms: u64) -> Self {
        Self { up: up * 125.0, down: down * 125.0, latency_ms }
    }
}

/// What bytes were for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Delta shards to committees.
    Shards = 0,
    /// Aggregated shards (and shard 0's included list) to every node.
    Aggregates = 1,
    /// Manifests, results, proofs.
    Gossip = 2,
    /// Re-checks and proof verification: included lists, input shards.
    Checks = 3,
    /// Whole states fetched by nodes that re-sync.
    States = 4,
}

/// Bytes one node moved in one round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub up: u64,
    pub down: u64,
    /// Up + down by `Kind`.
    pub by_kind: [u64; 5],
}

/// The queue of deliveries (`T` is the message) and the links' state.
pub struct Network<T> {
    links: Vec<Link>,
    up_free: Vec<f64>,
    down_free: Vec<f64>,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Option<T>>,
    free_slots: Vec<usize>,
    seq: u64,
    /// Per round, per node.
    pub traffic: Vec<Vec<Traffic>>,
    pub gossip_degree: u32,
}

impl<T> Network<T> {
    pub fn new(links: Vec<Link>, gossip_degree: u32) -> Self {
        let n = links.len();
        Self {
            links,
            up_free: vec![0.0; n],
            down_free: vec![0.0; n],
            queue: BinaryHeap::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            seq: 0,
            traffic: Vec::new(),
            gossip_degree: gossip_degree.max(1),
        }
    }

    fn count(&mut self, round: u64, node: usize, kind: Kind, up: u64, down: u64) {
        let r = round as usize;
        while self.traffic.len() <= r {
            self.traffic.push(vec![Traffic::default(); self.links.len()]);
        }
        let t = &mut self.traffic[r][node];
        t.up += up;
        t.down += down;
        t.by_kind[kind as usize] += up + down;
    }

    /// Deliver `msg` to `to` at `at` (no bytes moved: a local event).
    pub fn at(&mut self, at: u64, to: usize, msg: T) {
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = Some(msg);
                i
            }
            None => {
                self.slots.push(Some(msg));
                self.slots.len() - 1
            }
        };
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, (to << 32) | slot)));
    }

    /// Send `bytes` from `from` to `to` starting at `now`, counted in `round`.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        now: u64,
        round: u64,
        kind: Kind,
        from: usize,
        to: usize,
        bytes: u64,
        msg: T,
    ) -> u64 {
        let b = bytes as f64;
        let start = self.up_free[from].max(now as f64);
        let sent = start + b / self.links[from].up;
        self.up_free[from] = sent;
        let arrive = sent + self.links[from].latency_ms as f64;
        let begin = self.down_free[to].max(arrive);
        let done = begin + b / self.links[to].down;
        self.down_free[to] = done;
        self.count(round, from, kind, bytes, 0);
        self.count(round, to, kind, 0, bytes);
        let at = done.ceil() as u64;
        self.at(at, to, msg);
        at
    }

    /// Charge a gossiped message of `bytes` to every node in `online` and
    /// return when it reaches all of them (sent at `now`).
    pub fn gossip_cost(&mut self, now: u64, round: u64, online: &[usize], bytes: u64) -> u64 {
        let d = u64::from(self.gossip_degree);
        for &i in online {
            self.count(round, i, Kind::Gossip, d * bytes, d * bytes);
        }
        let n = online.len().max(2) as f64;
        let hops = (n.ln() / (self.gossip_degree.max(2) as f64).ln()).ceil().max(1.0) as u64;
        let slowest = self.links.iter().map(|l| l.up.min(l.down)).fold(f64::INFINITY, f64::min).max(1e-9);
        let per_hop =
            self.links.iter().map(|l| l.latency_ms).max().unwrap_or(0) as f64 + bytes as f64 / slowest;
        now + (hops as f64 * per_hop).ceil() as u64
    }

    /// The next delivery: (time, node, message).
    pub fn pop(&mut self) -> Option<(u64, usize, T)> {
        let Reverse((at, _, key)) = self.queue.pop()?;
        let (to, slot) = (key >> 32, key & 0xffff_ffff);
        let msg = self.slots[slot].take()?;
        self.free_slots.push(slot);
        Some((at, to, msg))
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_waits_for_both_links_and_counts_its_bytes() {
        // 8 Mbit/s = 1000 bytes/ms up, 16 Mbit/s down, 10 ms latency.
        let mut n: Network<u8> = Network::new(vec![Link::mbps(8.0, 16.0, 10); 2], 6);
        let a = n.send(0, 0, Kind::Shards, 0, 1, 10_000, 1);
        assert_eq!(a, 25, "10 ms up, 10 ms latency, 5 ms down");
        let b = n.send(0, 0, Kind::Shards, 0, 1, 10_000, 2);
        assert!(b >= a + 10, "the second waits for the uplink");
        assert_eq!(n.traffic[0][0], Traffic { up: 20_000, down: 0, by_kind: [20_000, 0, 0, 0, 0] });
        assert_eq!(n.traffic[0][1], Traffic { up: 0, down: 20_000, by_kind: [20_000, 0, 0, 0, 0] });
        assert_eq!(n.pop().map(|x| x.2), Some(1));
    }
}
