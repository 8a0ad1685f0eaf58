//! Fuzz target: tool-call arguments for every memory tool (`memtape_fuzz::tool_args`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::tool_args(data));
