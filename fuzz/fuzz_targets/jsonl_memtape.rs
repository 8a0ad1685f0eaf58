//! Fuzz target: memtape's own JSONL: parse, round trip, import confined to one scope (`memtape_fuzz::jsonl_memtape`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::jsonl_memtape(data));
