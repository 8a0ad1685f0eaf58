//! Fuzz target: entry ids as text and JSON (`memtape_fuzz::entry_id`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::entry_id(data));
