//! Fuzz target: Bub tapes with memory zones: read and import (`memtape_fuzz::jsonl_bub`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::jsonl_bub(data));
