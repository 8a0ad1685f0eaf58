//! Fuzz target: Qanot's WAL scanner and its dedup (`memtape_fuzz::wal_scan`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::wal_scan(data));
