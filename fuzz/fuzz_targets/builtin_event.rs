//! Fuzz target: built-in event payloads: the typed decoder and its encoding (`memtape_fuzz::builtin_event`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::builtin_event(data));
