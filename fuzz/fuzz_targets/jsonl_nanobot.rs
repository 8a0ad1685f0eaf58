//! Fuzz target: nanobot session files: parse and import (`memtape_fuzz::jsonl_nanobot`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::jsonl_nanobot(data));
