//! The training state a node holds, with its StateId computed once.
//!
//! A StateId hashes every parameter and momentum value (240 MB for the
//! `small` preset, a quarter of a second of one core): the round loops ask
//! for it on every event they handle, so it is kept beside the state and
//! the two are only ever replaced together.

use std::sync::Arc;

use murmur_protocol::{StateId, TrainingState};

/// A state and its id.
#[derive(Clone)]
pub struct HashedState {
    state: Arc<TrainingState>,
    id: StateId,
}

impl HashedState {
    /// Hold `state` (hashes it once).
    pub fn new(state: TrainingState) -> Self {
        Self::shared(Arc::new(state))
    }

    /// Hold a state already shared elsewhere (hashes it once).
    pub fn shared(state: Arc<TrainingState>) -> Self {
        let id = state.id();
        HashedState { state, id }
    }

    /// Hold a state whose canonical bytes were just stored in, or read and
    /// checked from, the state blob `id`: the blob store hashed them, and a
    /// StateId is that hash, so it is not computed again.
    pub fn stored(state: TrainingState, id: StateId) -> Self {
        debug_assert_eq!(state.id(), id, "a state blob's id is its StateId");
        HashedState { state: Arc::new(state), id }
    }

    pub fn id(&self) -> StateId {
        self.id
    }

    /// The state, to hand to the trainer or a blocking task.
    pub fn state(&self) -> &Arc<TrainingState> {
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::hash::RunId;

    #[test]
    fn the_id_is_the_states() {
        let s = TrainingState {
            run: RunId([3; 32]),
            round: 7,
            params: vec![1.0, -2.0],
            momentum: Some(vec![0.5, 0.0]),
        };
        let held = HashedState::new(s.clone());
        assert_eq!(held.id(), s.id());
        assert_eq!(**held.state(), s);
        let other = TrainingState { round: 8, ..s };
        assert_ne!(HashedState::new(other).id(), held.id());
    }
}
