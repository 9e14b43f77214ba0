//! Small metadata in sled: the node's current state per run, round history
//! and peer scores. Large payloads never go here (see `blob`).
//!
//! Every write that the node relies on after a crash is flushed before the
//! call returns; the state a record names is always written (as a blob) first.

use serde::{Deserialize, Serialize};

use super::StoreError;
use murmur_protocol::{RunId, StateId};

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
    pub val_loss: Option<f32>,
}

/// The sled database.
#[derive(Debug, Clone)]
pub struct MetaStore {
    db: sled::Db,
    positions: sled::Tree,
    history: sled::Tree,
    scores: sled::Tree,
}

impl MetaStore {
    pub fn open(path: &std::path::Path) -> Result<Self, StoreError> {
        let db = sled::Config::new().path(path).open()?;
        Ok(Self {
            positions: db.open_tree("positions")?,
            history: db.open_tree("history")?,
            scores: db.open_tree("scores")?,
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

    pub fn record_round(&self, run: &RunId, r: &RoundRecord) -> Result<(), StoreError> {
        let v = serde_json::to_vec(r).map_err(|_| StoreError::Corrupt("round record"))?;
        self.history.insert(Self::history_key(run, r.round), v)?;
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

    /// Add `penalty` to a peer's stored score; returns the new total.
    pub fn charge_peer(&self, peer: &[u8], penalty: u64) -> Result<u64, StoreError> {
        let old = self.peer_score(peer)?;
        let new = old.saturating_add(penalty);
        self.scores.insert(peer, new.to_le_bytes().to_vec())?;
        Ok(new)
    }

    pub fn peer_score(&self, peer: &[u8]) -> Result<u64, StoreError> {
        Ok(self
            .scores
            .get(peer)?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0))
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
    fn positions_history_and_scores_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = RunId([3; 32]);
        {
            let m = MetaStore::open(dir.path()).expect("open");
            assert_eq!(m.position(&run).expect("read"), None);
            m.set_position(&run, Position { round: 4, state: StateId([9; 32]) }).expect("write");
            m.record_round(
                &run,
                &RoundRecord { round: 3, state_id: "ab".into(), included: 2, val_loss: Some(1.5) },
            )
            .expect("record");
            assert_eq!(m.charge_peer(b"p", 100).expect("charge"), 100);
            assert_eq!(m.charge_peer(b"p", 50).expect("charge"), 150);
            m.flush().expect("flush");
        }
        let m = MetaStore::open(dir.path()).expect("reopen");
        assert_eq!(m.position(&run).expect("read"), Some(Position { round: 4, state: StateId([9; 32]) }));
        assert_eq!(m.history(&run).expect("history").len(), 1);
        assert_eq!(m.peer_score(b"p").expect("score"), 150);
    }
}
