//! Connection slots: how many of a node's connections strangers may hold,
//! so that the peers the run names (`Gate::preferred`: its bootstrap
//! servers, operators, allowlisted keys, ticket holders) always find room.
//!
//! Strangers — peers that are not preferred — hold at most
//! `max_connections - reserved` connections together, and at most
//! `max_per_ip` of them may be connected in from one IP address (an IPv6
//! address counts by its /64, what one host is usually given). A stranger's
//! connection past either limit is closed as soon as it is established,
//! without a charge; preferred peers pass both. Whether a peer is preferred
//! is asked anew at each count, so a stranger a ticket later admits moves
//! to the reserve with its connections. Bounded: one entry per connection
//! the swarm holds open.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use libp2p::core::ConnectedPoint;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId};

/// Strangers that may be connected in from one IP address, by default
/// (`NetConfig::max_per_ip`, `--max-peers-per-ip`).
pub const MAX_PER_IP: u32 = 16;

/// Why a stranger's connection was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Strangers already hold their share of the connections.
    Strangers,
    /// `max_per_ip` strangers are already connected in from its address.
    SameAddress,
}

impl Overflow {
    pub fn name(self) -> &'static str {
        match self {
            Overflow::Strangers => "strangers_full",
            Overflow::SameAddress => "address_full",
        }
    }
}

/// One open connection as the limits see it.
#[derive(Debug, Clone, Copy)]
struct Open {
    peer: PeerId,
    /// The address it came in from (`address_key`); None when this node
    /// dialled it, or it came through a relay circuit.
    from: Option<IpAddr>,
}

/// The connections a node keeps, and the limits on strangers' ones.
#[derive(Debug)]
pub struct ConnectionSlots {
    strangers_max: usize,
    per_address: usize,
    open: HashMap<ConnectionId, Open>,
}

impl ConnectionSlots {
    /// Limits for a node of `max_connections` connections, `reserved` of them
    /// kept for preferred peers, `max_per_ip` strangers per address.
    pub fn new(max_connections: u32, reserved: u32, max_per_ip: u32) -> Self {
        ConnectionSlots {
            strangers_max: max_connections.saturating_sub(reserved) as usize,
            per_address: max_per_ip as usize,
            open: HashMap::new(),
        }
    }

    /// A connection to `peer` was established: kept (Ok, and counted until
    /// `closed`), or past a limit (Err: the caller closes it; it is not counted).
    pub fn opened(
        &mut self,
        peer: PeerId,
        id: ConnectionId,
        endpoint: &ConnectedPoint,
        preferred: impl Fn(&PeerId) -> bool,
    ) -> Result<(), Overflow> {
        let from = match endpoint {
            ConnectedPoint::Listener { send_back_addr, .. } => address_key(send_back_addr),
            ConnectedPoint::Dialer { .. } => None,
        };
        if !preferred(&peer) {
            if self.strangers_full(&preferred) {
                return Err(Overflow::Strangers);
            }
            if let Some(ip) = from {
                let there: HashSet<PeerId> = self
                    .open
                    .values()
                    .filter(|o| o.from == Some(ip) && !preferred(&o.peer))
                    .map(|o| o.peer)
                    .collect();
                if !there.contains(&peer) && there.len() >= self.per_address {
                    return Err(Overflow::SameAddress);
                }
            }
        }
        self.open.insert(id, Open { peer, from });
        Ok(())
    }

    /// A connection closed (kept or not).
    pub fn closed(&mut self, id: ConnectionId) {
        self.open.remove(&id);
    }

    /// Whether strangers hold their whole share: another stranger's
    /// connection would be closed (so dialling one is wasted).
    pub fn strangers_full(&self, preferred: impl Fn(&PeerId) -> bool) -> bool {
        self.open.values().filter(|o| !preferred(&o.peer)).count() >= self.strangers_max
    }
}

/// The IP address in `addr` that the per-address limit counts by: an IPv4
/// address (or one mapped into IPv6) as it is, an IPv6 address by its /64.
/// None for an address without one (a relay circuit's `/p2p/<peer>`).
pub fn address_key(addr: &Multiaddr) -> Option<IpAddr> {
    addr.iter().find_map(|p| match p {
        Protocol::Ip4(ip) => Some(IpAddr::V4(ip)),
        Protocol::Ip6(ip) => Some(match ip.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(ip) & !((1u128 << 64) - 1)).into()),
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use libp2p::core::transport::PortUse;
    use libp2p::core::Endpoint;

    fn inbound(from: &str) -> ConnectedPoint {
        ConnectedPoint::Listener {
            local_addr: "/ip4/127.0.0.1/tcp/4001".parse().expect("addr"),
            send_back_addr: from.parse().expect("addr"),
        }
    }

    fn outbound(to: &str) -> ConnectedPoint {
        ConnectedPoint::Dialer {
            address: to.parse().expect("addr"),
            role_override: Endpoint::Dialer,
            port_use: PortUse::Reuse,
        }
    }

    #[test]
    fn strangers_hold_at_most_their_share_and_preferred_peers_the_rest() {
        let named: Vec<PeerId> = (0..3).map(|_| PeerId::random()).collect();
        let preferred = |p: &PeerId| named.contains(p);
        let mut slots = ConnectionSlots::new(8, 2, 100);
        let mut next = 0;
        let mut id = || {
            next += 1;
            ConnectionId::new_unchecked(next)
        };
        let kept = (0..10)
            .filter(|i| {
                let e = if i % 2 == 0 {
                    inbound(&format!("/ip4/10.0.0.{i}/tcp/1"))
                } else {
                    outbound("/ip4/10.0.1.1/tcp/1")
                };
                slots.opened(PeerId::random(), id(), &e, preferred).is_ok()
            })
            .count();
        assert_eq!(kept, 6, "strangers get max_connections - reserved, whichever way they connected");
        assert!(slots.strangers_full(preferred));
        assert_eq!(
            slots.opened(PeerId::random(), id(), &inbound("/ip4/10.0.0.99/tcp/1"), preferred),
            Err(Overflow::Strangers)
        );
        for p in &named {
            assert_eq!(slots.opened(*p, id(), &inbound("/ip4/10.0.0.1/tcp/2"), preferred), Ok(()));
        }
        // A stranger that leaves frees its slot for the next.
        let gone = slots.open.iter().find(|(_, o)| !preferred(&o.peer)).map(|(c, _)| *c).expect("a stranger");
        slots.closed(gone);
        assert!(!slots.strangers_full(preferred));
        assert_eq!(slots.opened(PeerId::random(), id(), &outbound("/ip4/10.0.2.1/tcp/1"), preferred), Ok(()));
        assert!(slots.strangers_full(preferred));
    }

    #[test]
    fn one_address_lets_in_max_per_ip_strangers_and_any_preferred_peer() {
        let op = PeerId::random();
        let preferred = |p: &PeerId| *p == op;
        let mut slots = ConnectionSlots::new(128, 32, 4);
        let strangers: Vec<PeerId> = (0..6).map(|_| PeerId::random()).collect();
        let verdicts: Vec<_> = strangers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let from = format!("/ip4/127.0.0.1/tcp/{}", 5000 + i);
                slots.opened(*p, ConnectionId::new_unchecked(i), &inbound(&from), preferred)
            })
            .collect();
        assert_eq!(verdicts.iter().filter(|v| v.is_ok()).count(), 4);
        assert_eq!(verdicts[4], Err(Overflow::SameAddress));
        // A kept stranger's second connection from there adds no peer.
        let again = slots.opened(
            strangers[0],
            ConnectionId::new_unchecked(10),
            &inbound("/ip4/127.0.0.1/tcp/6000"),
            preferred,
        );
        assert_eq!(again, Ok(()));
        // Preferred peers, other addresses and this node's own dials are not limited.
        assert_eq!(
            slots.opened(op, ConnectionId::new_unchecked(11), &inbound("/ip4/127.0.0.1/tcp/1"), preferred),
            Ok(())
        );
        let other = slots.opened(
            PeerId::random(),
            ConnectionId::new_unchecked(12),
            &inbound("/ip4/127.0.0.2/tcp/1"),
            preferred,
        );
        assert_eq!(other, Ok(()));
        let dialled = slots.opened(
            PeerId::random(),
            ConnectionId::new_unchecked(13),
            &outbound("/ip4/127.0.0.1/tcp/7"),
            preferred,
        );
        assert_eq!(dialled, Ok(()));
        // Relayed connections carry no address of their own.
        let relayed = slots.opened(
            PeerId::random(),
            ConnectionId::new_unchecked(14),
            &inbound(&format!("/p2p/{}", PeerId::random())),
            preferred,
        );
        assert_eq!(relayed, Ok(()));
        // When one of them leaves, the next from that address is let in.
        slots.closed(ConnectionId::new_unchecked(1));
        let late = slots.opened(
            PeerId::random(),
            ConnectionId::new_unchecked(15),
            &inbound("/ip4/127.0.0.1/tcp/8"),
            preferred,
        );
        assert_eq!(late, Ok(()));
    }

    #[test]
    fn a_stranger_admitted_later_moves_out_of_the_strangers_share() {
        let later = PeerId::random();
        let admitted = std::cell::Cell::new(false);
        let preferred = |p: &PeerId| admitted.get() && *p == later;
        let mut slots = ConnectionSlots::new(3, 1, 16);
        assert_eq!(
            slots.opened(later, ConnectionId::new_unchecked(1), &outbound("/ip4/10.0.0.1/tcp/1"), preferred),
            Ok(())
        );
        assert_eq!(
            slots.opened(
                PeerId::random(),
                ConnectionId::new_unchecked(2),
                &outbound("/ip4/10.0.0.2/tcp/1"),
                preferred
            ),
            Ok(())
        );
        assert!(slots.strangers_full(preferred));
        admitted.set(true);
        assert!(!slots.strangers_full(preferred), "its connection now counts against the reserve");
    }

    #[test]
    fn addresses_count_by_ip_and_ipv6_by_its_64() {
        let key = |s: &str| address_key(&s.parse().expect("addr"));
        assert_eq!(key("/ip4/1.2.3.4/tcp/5"), key("/ip4/1.2.3.4/udp/9/quic-v1"));
        assert_ne!(key("/ip4/1.2.3.4/tcp/5"), key("/ip4/1.2.3.5/tcp/5"));
        assert_eq!(key("/ip6/2001:db8:1:2:aaaa::1/tcp/5"), key("/ip6/2001:db8:1:2:bbbb::7/tcp/5"));
        assert_ne!(key("/ip6/2001:db8:1:2::1/tcp/5"), key("/ip6/2001:db8:1:3::1/tcp/5"));
        assert_eq!(key("/ip6/::ffff:1.2.3.4/tcp/5"), key("/ip4/1.2.3.4/tcp/5"));
        assert_eq!(key(&format!("/p2p/{}", PeerId::random())), None);
    }
}
