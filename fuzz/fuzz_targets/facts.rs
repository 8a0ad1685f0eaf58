//! Fuzz target: the fact diff of lossless rewrites: dropped facts, carry-over and restore (`memtape_fuzz::facts`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::facts(data));
