//! Fuzz target: `memtape.toml`'s `[lifecycle]` and `[llm]` tables with the environment over them (`memtape_fuzz::lifecycle_config`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::lifecycle_config(data));
