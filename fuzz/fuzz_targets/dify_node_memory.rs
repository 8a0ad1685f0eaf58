//! Fuzz target: Dify's stored node memory: parse, render, import, export (`memtape_fuzz::dify_node_memory`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::dify_node_memory(data));
