//! memtape-server's integration tests, one binary: each module was a test file of its own.
//! Linking one binary instead of thirteen saves minutes and gigabytes of disk on a 2-core
//! build; the tests share one process, as the tests of one file always did. rest_transfer.rs
//! stays a binary of its own: it measures the process's resident memory.

#![allow(clippy::unwrap_used)] // Tests panic on failure by design.

mod chat_parity;
mod common;
mod cross_site;
mod group_commit;
mod hardening;
mod isolation;
mod lifecycle;
mod mateclaw_compat;
mod mcp;
mod metrics;
mod openapi;
mod postgres;
mod rest;
mod rest_attachments;
mod rest_erase;
mod rest_files;
mod rest_memory;
mod rest_node;
mod rest_session;
mod rest_time_travel;
mod slow_clients;
mod ui;
