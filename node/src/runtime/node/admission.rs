//! The event loop's admission desk: tickets reach the round machine (the
//! node's own, those gathered at cold start, gossiped ones, and the one a
//! joining trainer's status presents), verified tickets are kept to hand on,
//! and the commits the machine counts are kept as the backing the node's
//! status offers (`backing`, docs/protocol.md §7.6). Peers' status answers
//! come in here too: their tickets, then their backing (`reconcile`).

use std::time::{Duration, Instant};

use libp2p::PeerId;
use murmur_protocol::{Event, PublicKey, RoundCommit, Ticket};

use super::{publish_with_retries, Node, WorkDone};
use crate::net::{public_key_of, PeerStatus, TopicKind, XferRequest, XferResponse};
use crate::runtime::tickets::unix_now;

/// How often a node gossips its own ticket (gossipsub drops a message seen
/// within about a minute as a duplicate, so more often would be wasted).
pub const TICKET_GOSSIP_EVERY: Duration = Duration::from_secs(61);
/// How long a status request may take.
const STATUS_WAIT: Duration = Duration::from_secs(5);

impl Node {
    /// Hand `ticket`, delivered by `from`, to the round machine, and keep it
    /// when it admits its holder now.
    pub(super) fn present_ticket(&mut self, from: PublicKey, ticket: Ticket) {
        if !self.spec.admission.uses_tickets() {
            return;
        }
        let unix = unix_now();
        self.feed(Event::TicketPresented { from, ticket: ticket.clone(), unix_secs: unix });
        if ticket.check(&self.spec.run_id(), self.spec.admission.operators(), unix).is_ok() {
            self.tickets.insert(ticket, unix);
            self.refresh_backing();
        }
    }

    /// A trainer joined: in a ticket run, ask it for its status to learn its
    /// ticket.
    pub(super) fn ask_ticket(&self, peer: PeerId) {
        if self.spec.admission.uses_tickets() {
            self.ask_status(peer);
        }
    }

    /// Ask `peer` for its status; the answer comes back as
    /// `WorkDone::PeerStatus`.
    pub(super) fn ask_status(&self, peer: PeerId) {
        let (net, tx) = (self.net.clone(), self.tx.clone());
        tokio::spawn(async move {
            let ask = tokio::time::timeout(STATUS_WAIT, net.request(peer, XferRequest::Status)).await;
            if let Ok(Ok(XferResponse::Status(status))) = ask {
                let _ = tx.send(WorkDone::PeerStatus { peer, status });
            }
        });
    }

    /// A peer's status: the ticket it presents as its own, then the commits
    /// it offers as backing (`reconcile`).
    pub(super) fn on_peer_status(&mut self, peer: PeerId, status: PeerStatus) {
        let own = status.ticket.as_deref().and_then(|b| Ticket::decode(b).ok());
        if let (Some(key), Some(t)) = (public_key_of(&peer), own) {
            if t.holder == key {
                self.present_ticket(key, t);
            }
        }
        self.take_backing(peer, &status.backing);
    }

    /// A commit the machine was fed (or our own): kept as backing when the
    /// signer's commits count now.
    pub(super) fn note_commit(&mut self, c: RoundCommit) {
        if (c.signer == self.key.public() || self.machine.counts_commits_of(&c.signer))
            && self.commits.record(c)
        {
            self.refresh_backing();
        }
    }

    fn refresh_backing(&self) {
        self.server.set_backing(self.commits.backing(&self.tickets, unix_now()));
    }

    /// Gossip our own ticket when joining and every `TICKET_GOSSIP_EVERY`.
    pub(super) fn gossip_ticket(&mut self) {
        let Some(t) = &self.own_ticket else { return };
        if self.last_ticket_gossip.is_some_and(|at| at.elapsed() < TICKET_GOSSIP_EVERY) {
            return;
        }
        self.last_ticket_gossip = Some(Instant::now());
        tokio::spawn(publish_with_retries(self.net.clone(), TopicKind::Ticket, t.encode(), 20));
    }
}
