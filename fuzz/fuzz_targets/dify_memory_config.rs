//! Fuzz target: Dify's memory config, window and query template
//! (`memtape_fuzz::dify_memory_config`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::dify_memory_config(data));
