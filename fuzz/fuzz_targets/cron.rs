//! Fuzz target: the emergence schedule's five-field cron expressions and their next runs (`memtape_fuzz::cron`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| memtape_fuzz::cron(data));
