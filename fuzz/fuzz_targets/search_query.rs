//! Fuzz target: search query parsing and a real BM25 search (`memtape_fuzz::search_query`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::search_query(data));
