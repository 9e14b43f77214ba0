//! CPU backend (being written).
