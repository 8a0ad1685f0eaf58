//! What the client tests share: the scripted model server (memtape-scripted) and a retry
//! policy that waits only milliseconds.
#![allow(dead_code)] // Not every test file uses every part.

use std::time::Duration;

use memtape_llm::RetryPolicy;
pub use memtape_scripted::*;

/// `n` retries with millisecond waits.
pub fn fast_retries(n: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries: n,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(5),
        ..RetryPolicy::default()
    }
}
