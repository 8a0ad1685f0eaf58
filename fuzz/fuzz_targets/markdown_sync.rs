//! Fuzz target: markdown sync input: a path and a file's bytes into the fold (`memtape_fuzz::markdown_sync`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::markdown_sync(data));
