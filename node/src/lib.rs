//! murmur-node: the library behind the `murmur` binary.
//!
//! - `compute`: the Backend trait and its implementations (CPU; wgpu behind
//!   the `gpu` feature, CUDA behind `cuda`).
//! - `data`: tokenizers, corpora (text, llm.c shards, synthetic), batching.
//! - `model`: the GPT model, explicit forward and backward over a Backend.
//! - `train`: optimizer schedule, the single-machine training loop, checkpoints.
//! - `sim`: the in-process DiLoCo / data-parallel simulator and codec benchmark.
//! - `netsim`: the round of up to thousands of nodes over a
//!   simulated network in virtual time (`murmur netsim`).
//! - `store`: content-addressed blobs, sled metadata, key files.
//! - `net`: the libp2p network (knows messages and blob ids, never tensors).
//! - `runtime`: the node runtime, where compute and network meet.
//! - `dashboard`: the observing peer and its local web page.
//! - `metrics`: Prometheus metrics of nodes and the bootstrap server, and their endpoint.
//! - `testnet`: a local network of real processes (`murmur testnet`).

pub mod checkpoint;
pub mod cli;
pub mod compute;
pub mod dashboard;
pub mod data;
pub mod metrics;
pub mod model;
pub mod net;
pub mod netsim;
pub mod runtime;
pub mod sim;
pub mod store;
pub mod testnet;
pub mod train;
