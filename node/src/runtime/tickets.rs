//! Admission tickets on the node's side: reading its own ticket file (and
//! refusing to start with one that cannot admit it), the wall clock tickets
//! are checked by, and how often the node gossips its own.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use murmur_protocol::hash::{hex, unhex};
use murmur_protocol::ticket::TICKET_BYTES;
use murmur_protocol::{PublicKey, RunSpec, Ticket};

use super::RuntimeError;

/// How often a node gossips its own ticket (gossipsub drops a message seen
/// within about a minute as a duplicate, so more often would be wasted).
pub const TICKET_GOSSIP_EVERY: std::time::Duration = std::time::Duration::from_secs(61);

/// Largest ticket file read (a ticket is 340 hex characters).
const MAX_TICKET_FILE: u64 = 4096;

/// Unix time now, in seconds (0 if the clock is before 1970).
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A public key given on a command line: 64 hex characters, or the libp2p
/// peer id a node prints (`12D3Koo…`), which carries the same key.
pub fn parse_public_key(s: &str) -> Result<PublicKey, String> {
    let s = s.trim();
    if let Some(bytes) = unhex(s).filter(|b| b.len() == 32) {
        let mut k = [0u8; 32];
        k.copy_from_slice(&bytes);
        return Ok(PublicKey(k));
    }
    s.parse::<libp2p::PeerId>()
        .ok()
        .and_then(|p| crate::net::public_key_of(&p))
        .ok_or_else(|| format!("`{s}` is neither a public key (64 hex characters) nor an ed25519 peer id"))
}

/// An expiry as `murmur ticket issue --expires` takes it: a duration from
/// `now` (`90s`, `30m`, `12h`, `30d`) or a unix time in seconds; it must lie
/// in the future.
pub fn parse_expiry(s: &str, now: u64) -> Result<u64, String> {
    let t = s.trim();
    let unit = match t.chars().last() {
        Some('s') => Some(1),
        Some('m') => Some(60),
        Some('h') => Some(3600),
        Some('d') => Some(86_400),
        _ => None,
    };
    let bad =
        || format!("`{s}` is not an expiry: give a duration (90s, 30m, 12h, 30d) or a unix time in seconds");
    let at = match unit {
        Some(mul) => {
            let n: u64 = t[..t.len() - 1].parse().map_err(|_| bad())?;
            n.checked_mul(mul).and_then(|d| now.checked_add(d)).ok_or_else(bad)?
        }
        None => t.parse::<u64>().map_err(|_| bad())?,
    };
    if at <= now {
        return Err(format!("expiry {at} is not in the future (now is {now})"));
    }
    Ok(at)
}

/// The text of a ticket file: the canonical bytes in lower-case hex and a newline.
pub fn ticket_file_text(t: &Ticket) -> String {
    format!("{}\n", hex(&t.encode()))
}

/// Read a ticket file (hex; surrounding whitespace ignored), bounded in size.
pub fn read_ticket_file(path: &Path) -> Result<Ticket, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut text = String::new();
    f.take(MAX_TICKET_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {}: {e} (a ticket file is hex text)", path.display()))?;
    if text.len() as u64 > MAX_TICKET_FILE {
        return Err(format!("{} is not a ticket file: longer than {MAX_TICKET_FILE} bytes", path.display()));
    }
    let bytes = unhex(text.trim())
        .ok_or_else(|| format!("{} is not a ticket file: it must hold the ticket in hex", path.display()))?;
    if bytes.len() != TICKET_BYTES {
        return Err(format!(
            "{} is not a ticket file: {} bytes of hex, a ticket has {TICKET_BYTES}",
            path.display(),
            bytes.len()
        ));
    }
    Ticket::decode(&bytes).map_err(|e| format!("{} holds no valid ticket: {e}", path.display()))
}

/// The ticket this node presents, checked against the run, its key and the
/// clock: `Ok(None)` when it needs none (the run does not admit by ticket,
/// or the node is an operator); an error that says what to do otherwise.
pub fn own_ticket(
    spec: &RunSpec,
    me: &PublicKey,
    path: Option<&Path>,
) -> Result<Option<Ticket>, RuntimeError> {
    let policy = &spec.admission;
    let fail = |why: String| RuntimeError::Config(why);
    if !policy.uses_tickets() {
        return match path {
            Some(p) => Err(fail(format!(
                "--ticket {}: run {} does not admit by ticket; start without --ticket",
                p.display(),
                spec.run_id()
            ))),
            None => Ok(None),
        };
    }
    let Some(path) = path else {
        if policy.admits(me) {
            return Ok(None);
        }
        return Err(fail(format!(
            "run {} admits only holders of an operator's ticket. Ask an operator of the run for a ticket \
             for your key {me} (`murmur ticket issue --holder {me} …`) and start again with --ticket FILE",
            spec.run_id()
        )));
    };
    let t = read_ticket_file(path).map_err(|e| fail(format!("--ticket: {e}")))?;
    t.check_for(&spec.run_id(), policy.operators(), me, unix_now()).map_err(|e| {
        fail(format!(
            "--ticket {}: {e} (it is for run {}, key {}, signed by {}; this node is key {me} in run {})",
            path.display(),
            t.run,
            t.holder,
            t.operator,
            spec.run_id()
        ))
    })?;
    Ok(Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::{AdmissionPolicy, NodeKey, RunId};

    fn ticket_spec(op: &NodeKey) -> RunSpec {
        let mut spec = crate::runtime::spec::run_spec(&Default::default()).expect("spec");
        spec.admission = AdmissionPolicy::Tickets { operators: vec![op.public()] };
        spec
    }

    #[test]
    fn ticket_files_round_trip_and_bad_files_are_clear_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let op = NodeKey::from_seed([1; 32]);
        let t = Ticket::issue(&op, RunId([2; 32]), PublicKey([3; 32]), 99);
        let path = dir.path().join("t.ticket");
        std::fs::write(&path, ticket_file_text(&t)).expect("write");
        assert_eq!(read_ticket_file(&path), Ok(t.clone()));
        for (bytes, want) in [
            (b"not hex".to_vec(), "in hex"),
            (b"abcd".to_vec(), "a ticket has 170"),
            (vec![b'a'; 5000], "longer than"),
            (hex(&t.encode()[..169]).into_bytes(), "a ticket has 170"),
        ] {
            std::fs::write(&path, bytes).expect("write");
            let e = read_ticket_file(&path).expect_err(want);
            assert!(e.contains(want), "{e}");
        }
        let mut wrong = t.encode();
        wrong[1] = 3;
        std::fs::write(&path, hex(&wrong)).expect("write");
        assert!(read_ticket_file(&path).expect_err("wrong type").contains("no valid ticket"));
        assert!(read_ticket_file(&dir.path().join("missing")).expect_err("missing").contains("cannot open"));
    }

    #[test]
    fn a_node_starts_only_with_a_ticket_that_admits_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let op = NodeKey::from_seed([1; 32]);
        let me = NodeKey::from_seed([4; 32]).public();
        let spec = ticket_spec(&op);
        let path = dir.path().join("t.ticket");
        let write = |t: &Ticket| std::fs::write(&path, ticket_file_text(t)).expect("write");
        let msg = |r: Result<Option<Ticket>, RuntimeError>| r.expect_err("refused").to_string();
        assert!(msg(own_ticket(&spec, &me, None)).contains("Ask an operator"));
        assert_eq!(own_ticket(&spec, &op.public(), None).ok(), Some(None), "operators need none");
        let good = Ticket::issue(&op, spec.run_id(), me, unix_now() + 3600);
        write(&good);
        assert_eq!(own_ticket(&spec, &me, Some(&path)).ok(), Some(Some(good)));
        write(&Ticket::issue(&op, spec.run_id(), me, unix_now() - 1));
        assert!(msg(own_ticket(&spec, &me, Some(&path))).contains("expired"));
        write(&Ticket::issue(&op, spec.run_id(), PublicKey([9; 32]), unix_now() + 3600));
        assert!(msg(own_ticket(&spec, &me, Some(&path))).contains("another key"));
        write(&Ticket::issue(&op, RunId([9; 32]), me, unix_now() + 3600));
        assert!(msg(own_ticket(&spec, &me, Some(&path))).contains("another run"));
        write(&Ticket::issue(&NodeKey::from_seed([7; 32]), spec.run_id(), me, unix_now() + 3600));
        assert!(msg(own_ticket(&spec, &me, Some(&path))).contains("operator"));
        let open = crate::runtime::spec::run_spec(&Default::default()).expect("spec");
        assert!(msg(own_ticket(&open, &me, Some(&path))).contains("does not admit by ticket"));
        assert_eq!(own_ticket(&open, &me, None).ok(), Some(None));
    }

    #[test]
    fn keys_and_expiries_parse_with_clear_errors() {
        let k = NodeKey::from_seed([3; 32]).public();
        assert_eq!(parse_public_key(&hex(&k.0)), Ok(k));
        let peer = crate::net::peer_id_of(&k).expect("peer id").to_string();
        assert_eq!(parse_public_key(&peer), Ok(k));
        assert!(parse_public_key("abcd").is_err_and(|e| e.contains("64 hex")));
        assert_eq!(parse_expiry("90s", 1000), Ok(1090));
        assert_eq!(parse_expiry("2h", 1000), Ok(8200));
        assert_eq!(parse_expiry("30d", 0), Ok(2_592_000));
        assert_eq!(parse_expiry("5000", 1000), Ok(5000));
        assert!(parse_expiry("500", 1000).is_err_and(|e| e.contains("not in the future")));
        assert!(parse_expiry("soon", 1000).is_err_and(|e| e.contains("duration")));
        assert!(parse_expiry("99999999999999999999d", 0).is_err());
    }
}
