//! memtape-cli's integration tests, one binary: each module was a test file of its own, and
//! each runs the real `memtape` binary (or a server of it) in a scratch directory. Linking one
//! binary instead of nineteen saves minutes and gigabytes of disk on a 2-core build.

#![allow(clippy::unwrap_used)] // Tests panic on failure by design.

mod attachments;
mod bench_qa;
mod bub;
mod chat;
mod cli;
mod common;
mod consolidate;
mod context;
mod dify;
mod disk;
mod edges;
mod erase;
mod friction;
mod lifecycle;
mod mcp;
mod memory;
mod models;
mod postgres;
mod readme;
mod search;
mod seed_edges;
mod serve;
mod serve_crash;
mod stress;
