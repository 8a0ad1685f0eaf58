//! Fuzz target: names that look alike (`memtape_fuzz::names`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::names(data));
