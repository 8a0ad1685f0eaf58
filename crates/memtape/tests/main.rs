//! memtape's integration tests, one binary: each module was a test file of its own (the
//! engine, memory tiers, tools, history, search, the seeds' reference behaviours). Linking one
//! binary instead of twenty saves minutes and gigabytes of disk on a 2-core build.

#![allow(clippy::unwrap_used)] // Tests panic on failure by design.

mod boundaries;
mod bub_zones;
mod compat;
mod consolidation;
mod context;
mod dify;
mod engine;
mod erase;
mod hooks;
mod lifecycle;
mod mateclaw;
mod memory;
mod node;
mod refs_bub;
mod refs_nanobot;
mod retention;
mod search;
mod time_travel;
mod tools;
mod usage;
mod wal;
mod workspace;
