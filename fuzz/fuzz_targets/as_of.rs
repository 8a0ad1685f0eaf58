//! Fuzz target: moments of the tape, `--as-of` and `as_of=` (`memtape_fuzz::as_of`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::as_of(data));
