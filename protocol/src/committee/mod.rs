//! The round: shards and their owners (docs/protocol.md §10, DESIGN §7.3). The parameter
//! vector is cut into shards; each round a committee of roster members per
//! shard aggregates that shard from every trainer's delta and signs the
//! result; every node fetches the aggregated shards and applies the outer
//! step itself. One honest member per committee suffices: a wrong result is
//! a fraud proof anyone can check by recomputing one shard.

pub mod aggregate;
pub mod catch_up;
pub mod gate;
pub mod ledger;
pub mod machine;
pub mod merkle;
pub mod messages;
pub mod plan;
pub mod rule;
pub mod signed;
pub mod sketch;

pub use aggregate::{aggregate_codec, aggregate_shard, shard_norm, ShardAggregate, ShardInput};
pub use catch_up::{CatchUp, CatchUpTarget, CommitTally};
pub use ledger::Ledger;
pub use machine::{
    CommitteeAction, CommitteeConfig, CommitteeEvent, CommitteeMachine, FetchOutcome, SeenSignatures,
    SketchAudit,
};
pub use merkle::{merkle_root, verify_proof, MerkleTree, ShardLeaf};
pub use messages::{
    FraudProof, IncludedList, IncludedSigners, ProofRefused, ShardDelta, ShardResult, ShardedManifest,
};
pub use plan::{CommitteePlan, ShardLayout};
pub use rule::ShardRule;
pub use signed::SignedRecord;

#[cfg(test)]
mod machine_tests;
