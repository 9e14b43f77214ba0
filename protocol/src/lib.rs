//! murmur-protocol: everything nodes must agree on byte for byte.
//!
//! Pure and deterministic: no I/O, no clocks, no threads, no async (sans-IO,
//! in the manner of quinn-proto and rustls). The node drives it: it feeds
//! decoded messages and a caller-supplied `now` into the round machine
//! (`committee`) and carries out the actions that come back. The wire format is specified in
//! docs/protocol.md.

pub mod admission;
pub mod aggregate;
pub mod assignment;
pub mod codec;
pub mod committee;
pub mod dataset;
pub mod hash;
pub mod identity;
pub mod outer;
pub mod spec;
pub mod state;
pub mod telemetry;
pub mod ticket;
pub mod trust;
pub mod wire;

pub use admission::{Admission, TicketRefused};
pub use aggregate::{
    aggregate, aggregate_weighted, Aggregate, AggregateError, AggregateRejection, DeltaInput, Weighting,
};
pub use codec::{
    decode_delta, decode_delta_into, encode_delta, Codec, CodecError, DeltaPayloadHeader, ErrorFeedback,
};
pub use dataset::{DatasetManifest, DatasetTokenizer, ShardEntry, Split};
pub use hash::{DatasetId, ParamsId, PayloadHash, RunId, ShardHash, StateId};
pub use identity::{NodeKey, PublicKey, Signature, SignatureError};
pub use outer::{
    eager_state, initial_momentum, land, lookahead_params, outer_step, OuterError, LANDING_KEEP,
};
pub use spec::{
    AdmissionPolicy, DataRef, InnerOptimizer, ModelShape, OuterOptimizer, Pacing, RobustMode, RunSpec,
};
pub use state::{params_id, state_id, StateHeader, TrainingState};
pub use telemetry::{PeerLink, RejectionCount, Telemetry};
pub use ticket::{Ticket, TicketError};
pub use trust::{backed_state, Backed, Commitment};
pub use wire::WireError;
