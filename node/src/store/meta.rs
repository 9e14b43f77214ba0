//! Small metadata in sled: the node's current state per run, what it
//! signed in its newest round, and a bounded round history. Large payloads never go
//! here (see `blob`); peer scores live in memory (`net::peers`), so a flood
//! of refusals writes nothing to disk.
//!
//! Every write that the node relies on after a crash is flushed before the
//! call returns; the state a record names is always written (as a blob) first.

use serde::{Deserialize, Serialize};

use super::StoreError;
use murmur_protocol::{PublicKey, RunId, StateId};

/// Where a node stands in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub round: u64,
    pub state: StateId,
}

/// What a node recorded about one closed round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    pub round: u64,
    /// Hex StateId after the round.
    pub state_id: String,
    pub included: usize,
    /// Tokens the included deltas trained on (what they claimed).
    #[serde(default)]
    pub round_tokens: u64,
    /// Hex StateId of the state blob, where it differs from `state_id`
    /// (the round names a state by its parameters and its ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_blob: Option<String>,
    pub val_loss: Option<f32>,
}

/// The sled database.
#[derive(Debug, Clone)]
pub struct MetaStore {
    db: sled::Db,
    positions: sled::Tree,
    history: sled::Tree,
    /// Per run, what the node signed in its newest round (a `SignedRecord`).
    committee_signed: sled::Tree,
    /// Per run and state (run ‖ parameters' StateId), the state's ledger's
    /// hash (the ledger itself is a Ledger blob): the current state's and,
    /// until the position names the next, the one being moved to.
    ledgers: sled::Tree,
    /// Per run, the keys that lately dropped off the roster (32 bytes each).
    former: sled::Tree,
}

/// Former roster members kept per run.
pub const MAX_FORMER: usize = 4096;

/// Round records kept per run (older ones are dropped as new ones come).
pub const MAX_HISTORY: usize = 4096;

impl MetaStore {
    pub fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        let db = sled::Config::new().path(path).open()?;
        Ok(Self {
            positions: db.open_tree("positions")?,
            history: db.open_tree("history")?,
            committee_signed: db.open_tree("committee_signed")?,
            ledgers: db.open_tree("ledgers")?,
            former: db.open_tree("former")?,
            db,
        })
    }

    /// The run spec this node last joined (its canonical bytes).
    pub fn spec(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get("spec")?.map(|v| v.to_vec()))
    }

    pub fn set_spec(&self, bytes: &[u8]) -> Result<(), StoreError> {
        self.db.insert("spec", bytes)?;
        self.db.flush()?;
        Ok(())
    }

    /// The node's last consistent position in `run`.
    pub fn position(&self, run: &RunId) -> Result<Option<Position>, StoreError> {
        let Some(v) = self.positions.get(run.0)? else { return Ok(None) };
        if v.len() != 40 {
            return Err(StoreError::Corrupt("position record"));
        }
        let mut round = [0u8; 8];
        round.copy_from_slice(&v[..8]);
        let mut state = [0u8; 32];
        state.copy_from_slice(&v[8..]);
        Ok(Some(Position { round: u64::from_le_bytes(round), state: StateId(state) }))
    }

    /// Record the position (flushed). Its state blob must already be stored.
    pub fn set_position(&self, run: &RunId, p: Position) -> Result<(), StoreError> {
        let mut v = Vec::with_capacity(40);
        v.extend_from_slice(&p.round.to_le_bytes());
        v.extend_from_slice(&p.state.0);
        self.positions.insert(run.0, v)?;
        self.db.flush()?;
        Ok(())
    }

    fn history_key(run: &RunId, round: u64) -> [u8; 40] {
        let mut k = [0u8; 40];
        k[..32].copy_from_slice(&run.0);
        k[32..].copy_from_slice(&round.to_be_bytes());
        k
    }

    /// Record a closed round (flushed: an export reads it after the node
    /// is killed); the oldest records past `MAX_HISTORY` go.
    pub fn record_round(&self, run: &RunId, r: &RoundRecord) -> Result<(), StoreError> {
        let v = serde_json::to_vec(r).map_err(|_| StoreError::Corrupt("round record"))?;
        self.history.insert(Self::history_key(run, r.round), v)?;
        let first_kept = r.round.saturating_sub(MAX_HISTORY as u64 - 1);
        let old = self.history.range(Self::history_key(run, 0)..Self::history_key(run, first_kept));
        for kv in old {
            self.history.remove(kv?.0)?;
        }
        self.db.flush()?;
        Ok(())
    }

    /// Round records of `run`, oldest first.
    pub fn history(&self, run: &RunId) -> Result<Vec<RoundRecord>, StoreError> {
        let mut out = Vec::new();
        for kv in self.history.scan_prefix(run.0) {
            let (_, v) = kv?;
            out.push(serde_json::from_slice(&v).map_err(|_| StoreError::Corrupt("round record"))?);
        }
        Ok(out)
    }

    /// What this node signed in its newest round of committee run `run`
    /// (a `SignedRecord`'s bytes).
    pub fn signed_record(&self, run: &RunId) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.committee_signed.get(run.0)?.map(|v| v.to_vec()))
    }

    /// Record what this node signed in a committee round (flushed) before
    /// any of it leaves the node: after a crash it signs nothing else for
    /// that round.
    pub fn set_signed_record(&self, run: &RunId, bytes: &[u8]) -> Result<(), StoreError> {
        self.committee_signed.insert(run.0, bytes)?;
        self.db.flush()?;
        Ok(())
    }

    fn ledger_key(run: &RunId, params: &StateId) -> [u8; 64] {
        let mut k = [0u8; 64];
        k[..32].copy_from_slice(&run.0);
        k[32..].copy_from_slice(&params.0);
        k
    }

    /// The ledger hash recorded for `params` in `run` (or in the one
    /// record per run that stores written before kept one per state).
    pub fn ledger_of(&self, run: &RunId, params: &StateId) -> Result<Option<[u8; 32]>, StoreError> {
        if let Some(v) = self.ledgers.get(Self::ledger_key(run, params))? {
            return Ok(<[u8; 32]>::try_from(&v[..]).ok());
        }
        let Some(v) = self.ledgers.get(run.0)? else { return Ok(None) };
        if v.len() != 64 || v[..32] != params.0 {
            return Ok(None);
        }
        Ok(<[u8; 32]>::try_from(&v[32..]).ok())
    }

    /// Record (flushed) that state `params` of `run` has ledger `ledger`,
    /// before the position moves to it: a crash between the two leaves the
    /// record of the position's state in place. Records of other states
    /// than `params` and the position's are dropped.
    pub fn set_ledger_of(&self, run: &RunId, params: &StateId, ledger: &[u8; 32]) -> Result<(), StoreError> {
        let current = self.position(run)?.map(|p| p.state);
        for entry in self.ledgers.scan_prefix(run.0) {
            let (k, _) = entry?;
            let keep = k[32..] == params.0 || current.is_some_and(|c| k[32..] == c.0);
            if !keep {
                self.ledgers.remove(k)?;
            }
        }
        self.ledgers.insert(Self::ledger_key(run, params), &ledger[..])?;
        self.db.flush()?;
        Ok(())
    }

    /// The former roster members recorded for `run` (none when the record
    /// is missing or not a whole number of keys).
    pub fn former_members(&self, run: &RunId) -> Result<Vec<PublicKey>, StoreError> {
        let Some(v) = self.former.get(run.0)? else { return Ok(Vec::new()) };
        if v.len() % 32 != 0 || v.len() / 32 > MAX_FORMER {
            return Ok(Vec::new());
        }
        Ok(v.chunks_exact(32)
            .map(|c| {
                let mut k = [0u8; 32];
                k.copy_from_slice(c);
                PublicKey(k)
            })
            .collect())
    }

    /// Record `run`'s former roster members (at most `MAX_FORMER`). Not
    /// flushed: losing the newest list in a crash loses nothing the next
    /// round does not write again.
    pub fn set_former_members(&self, run: &RunId, keys: &[PublicKey]) -> Result<(), StoreError> {
        let bytes: Vec<u8> = keys.iter().take(MAX_FORMER).flat_map(|k| k.0).collect();
        self.former.insert(run.0, bytes)?;
        Ok(())
    }

    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_history_and_signed_manifests_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = RunId([3; 32]);
        {
            let m = MetaStore::open(dir.path()).expect("open");
            assert_eq!(m.position(&run).expect("read"), None);
            m.set_position(&run, Position { round: 4, state: StateId([9; 32]) }).expect("write");
            m.record_round(
                &run,
                &RoundRecord {
                    round: 3,
                    state_id: "ab".into(),
                    included: 2,
                    round_tokens: 9,
                    state_blob: None,
                    val_loss: Some(1.5),
                },
            )
            .expect("record");
            m.set_signed_record(&run, b"record").expect("sign");
            m.set_former_members(&run, &[PublicKey([6; 32]), PublicKey([7; 32])]).expect("former");
            m.flush().expect("flush");
        }
        // sled's flusher thread may hold the lock a moment after the drop.
        let t0 = std::time::Instant::now();
        let m = loop {
            match MetaStore::open(dir.path()) {
                Ok(m) => break m,
                Err(e) if t0.elapsed() > std::time::Duration::from_secs(10) => panic!("reopen: {e}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        assert_eq!(m.position(&run).expect("read"), Some(Position { round: 4, state: StateId([9; 32]) }));
        assert_eq!(m.history(&run).expect("history").len(), 1);
        assert_eq!(m.signed_record(&run).expect("read").as_deref(), Some(&b"record"[..]));
        assert_eq!(m.signed_record(&RunId([4; 32])).expect("read"), None);
        assert_eq!(m.former_members(&run).expect("read"), vec![PublicKey([6; 32]), PublicKey([7; 32])]);
        assert_eq!(m.former_members(&RunId([4; 32])).expect("read"), vec![]);
        // A record that is not whole keys reads as none.
        m.former.insert(run.0, &[1u8; 33][..]).expect("write");
        assert_eq!(m.former_members(&run).expect("read"), vec![]);
    }

    #[test]
    fn the_ledger_of_the_state_moved_to_is_kept_beside_the_positions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = MetaStore::open(dir.path()).expect("open");
        let run = RunId([3; 32]);
        let (a, b, c) = (StateId([1; 32]), StateId([2; 32]), StateId([3; 32]));
        m.set_ledger_of(&run, &a, &[10; 32]).expect("write");
        m.set_position(&run, Position { round: 1, state: a }).expect("position");
        // The next state's ledger is recorded before the position moves:
        // a crash in between finds the position's ledger still there.
        m.set_ledger_of(&run, &b, &[11; 32]).expect("write");
        assert_eq!(m.ledger_of(&run, &a).expect("read"), Some([10; 32]));
        assert_eq!(m.ledger_of(&run, &b).expect("read"), Some([11; 32]));
        m.set_position(&run, Position { round: 2, state: b }).expect("position");
        m.set_ledger_of(&run, &c, &[12; 32]).expect("write");
        assert_eq!(m.ledger_of(&run, &a).expect("read"), None, "neither the position's nor the next");
        assert_eq!(m.ledger_of(&run, &b).expect("read"), Some([11; 32]));
        assert_eq!(m.ledger_of(&RunId([4; 32]), &b).expect("read"), None);
        // A store's one record per run from before is still read, and
        // dropped with the next write.
        let old = RunId([5; 32]);
        m.ledgers.insert(old.0, [a.0, [13; 32]].concat()).expect("write");
        assert_eq!(m.ledger_of(&old, &a).expect("read"), Some([13; 32]));
        assert_eq!(m.ledger_of(&old, &b).expect("read"), None);
        m.set_ledger_of(&old, &b, &[14; 32]).expect("write");
        assert_eq!(m.ledger_of(&old, &a).expect("read"), None);
    }

    #[test]
    fn round_history_is_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (run, other) = (RunId([3; 32]), RunId([5; 32]));
        let m = MetaStore::open(dir.path()).expect("open");
        let rec = |round| RoundRecord {
            round,
            state_id: "ab".into(),
            included: 1,
            round_tokens: 0,
            state_blob: None,
            val_loss: None,
        };
        m.record_round(&other, &rec(0)).expect("record");
        for round in 0..(MAX_HISTORY as u64 + 50) {
            m.record_round(&run, &rec(round)).expect("record");
        }
        let h = m.history(&run).expect("history");
        assert_eq!(h.len(), MAX_HISTORY);
        assert_eq!(h.first().map(|r| r.round), Some(50));
        assert_eq!(m.history(&other).expect("history").len(), 1, "other runs keep their records");
    }
}
