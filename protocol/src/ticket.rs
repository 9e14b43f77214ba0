//! Admission tickets: an operator's signed statement that one public key may
//! take part in one run until a time. Its canonical bytes, its signature, and
//! the checks a peer makes before it counts anything the holder signs.
//!
//! A ticket is a bearer proof for its holder: anyone may relay it (only the
//! holder can sign with the holder's key), so a peer checks the operator's
//! signature, that the operator is one the run names, the run, and the
//! expiry by its own clock — and, when a peer presents a ticket as its own,
//! that the holder is that peer.

use crate::hash::RunId;
use crate::identity::{self, NodeKey, PublicKey, Signature, SignatureError, SIGN_TICKET};
use crate::wire::{MessageType, Reader, WireError, Writer};
use thiserror::Error;

/// Length of every ticket's canonical encoding.
pub const TICKET_BYTES: usize = 2 + 32 + 32 + 8 + 32 + 64;

/// "`holder` may contribute to `run` until `expires` (unix seconds)",
/// signed by `operator`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub run: RunId,
    pub holder: PublicKey,
    /// Unix time in seconds at which the ticket stops admitting its holder.
    pub expires: u64,
    pub operator: PublicKey,
    pub signature: Signature,
}

/// Why a ticket does not admit its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TicketError {
    #[error("the ticket's signature does not verify under its operator key")]
    BadSignature,
    #[error("the ticket is signed by a key the run does not name as an operator")]
    UnknownOperator,
    #[error("the ticket is for another run")]
    WrongRun,
    #[error("the ticket is for another key")]
    WrongHolder,
    #[error("the ticket expired (at unix time {expires}; now {now})")]
    Expired { expires: u64, now: u64 },
}

impl Ticket {
    /// Issue a ticket for `holder` in `run` until `expires`, signed by `operator`.
    pub fn issue(operator: &NodeKey, run: RunId, holder: PublicKey, expires: u64) -> Self {
        Ticket { run, holder, expires, operator: PublicKey::default(), signature: Signature::default() }
            .sign(operator)
    }

    /// The bytes the signature covers: the encoding without its signature.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::message(MessageType::Ticket);
        w.bytes(&self.run.0);
        w.bytes(&self.holder.0);
        w.u64(self.expires);
        w.bytes(&self.operator.0);
        w.finish()
    }

    /// The canonical bytes: `signed_bytes() || signature` (170 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.signed_bytes();
        b.extend_from_slice(&self.signature.0);
        b
    }

    /// Parse canonical bytes (signature not checked; see `verify`, `check`).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::message(bytes, MessageType::Ticket)?;
        let t = Ticket {
            run: RunId(r.array()?),
            holder: PublicKey(r.array()?),
            expires: r.u64()?,
            operator: PublicKey(r.array()?),
            signature: Signature(r.array()?),
        };
        r.finish()?;
        Ok(t)
    }

    /// Set `operator` to `key`'s public key and sign.
    pub fn sign(mut self, key: &NodeKey) -> Self {
        self.operator = key.public();
        self.signature = key.sign(SIGN_TICKET, &self.signed_bytes());
        self
    }

    /// Check the signature strictly against `operator`.
    pub fn verify(&self) -> Result<(), SignatureError> {
        identity::verify(&self.operator, SIGN_TICKET, &self.signed_bytes(), &self.signature)
    }

    /// Whether this ticket admits its holder to `run` at unix time `now`:
    /// signed by one of `operators`, for `run`, not expired.
    pub fn check(&self, run: &RunId, operators: &[PublicKey], now: u64) -> Result<(), TicketError> {
        if self.verify().is_err() {
            return Err(TicketError::BadSignature);
        }
        if !operators.contains(&self.operator) {
            return Err(TicketError::UnknownOperator);
        }
        if self.run != *run {
            return Err(TicketError::WrongRun);
        }
        if now >= self.expires {
            return Err(TicketError::Expired { expires: self.expires, now });
        }
        Ok(())
    }

    /// `check`, and that the ticket is `holder`'s (a peer presenting its own).
    pub fn check_for(
        &self,
        run: &RunId,
        operators: &[PublicKey],
        holder: &PublicKey,
        now: u64,
    ) -> Result<(), TicketError> {
        self.check(run, operators, now)?;
        if self.holder != *holder {
            return Err(TicketError::WrongHolder);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> NodeKey {
        NodeKey::from_seed([0x0f; 32])
    }

    fn sample() -> Ticket {
        Ticket::issue(&op(), RunId([1; 32]), NodeKey::from_seed([2; 32]).public(), 1_000)
    }

    #[test]
    fn encodes_decodes_and_verifies() {
        let t = sample();
        let bytes = t.encode();
        assert_eq!(bytes.len(), TICKET_BYTES);
        let back = Ticket::decode(&bytes).expect("decodes");
        assert_eq!(back, t);
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.verify(), Ok(()));
        assert_eq!(back.operator, op().public());
    }

    #[test]
    fn every_rule_is_checked() {
        let t = sample();
        let run = RunId([1; 32]);
        let ops = [op().public()];
        let holder = NodeKey::from_seed([2; 32]).public();
        assert_eq!(t.check_for(&run, &ops, &holder, 999), Ok(()));
        assert_eq!(t.check(&run, &ops, 1_000), Err(TicketError::Expired { expires: 1_000, now: 1_000 }));
        assert_eq!(t.check(&RunId([3; 32]), &ops, 0), Err(TicketError::WrongRun));
        assert_eq!(t.check(&run, &[PublicKey([9; 32])], 0), Err(TicketError::UnknownOperator));
        assert_eq!(t.check(&run, &[], 0), Err(TicketError::UnknownOperator));
        assert_eq!(t.check_for(&run, &ops, &PublicKey([7; 32]), 0), Err(TicketError::WrongHolder));
        // Any change to a signed field breaks the signature.
        let mut forged = t.clone();
        forged.expires = u64::MAX;
        assert_eq!(forged.check(&run, &ops, 0), Err(TicketError::BadSignature));
        let mut forged = t.clone();
        forged.holder = PublicKey([7; 32]);
        assert_eq!(forged.check(&run, &ops, 0), Err(TicketError::BadSignature));
        // A ticket signed by some other key, naming the operator, is refused.
        let mut stolen = Ticket::issue(&NodeKey::from_seed([5; 32]), run, holder, 1_000);
        stolen.operator = op().public();
        assert_eq!(stolen.check(&run, &ops, 0), Err(TicketError::BadSignature));
    }

    #[test]
    fn malformed_bytes_are_errors() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(Ticket::decode(&bytes[..n]).is_err(), "{n} bytes decoded");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Ticket::decode(&long), Err(WireError::TrailingBytes(1)));
        let mut wrong = bytes.clone();
        wrong[1] = MessageType::Telemetry as u8;
        assert!(matches!(Ticket::decode(&wrong), Err(WireError::WrongType { .. })));
    }
}
