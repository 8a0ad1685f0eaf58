//! Fuzz target: a model's text reply read as JSON (`memtape_fuzz::json_reply`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::json_reply(data));
