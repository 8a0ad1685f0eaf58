//! Idempotency keys: a write sent again under the same key (a client retrying after a
//! timeout or a lost connection) is answered with the first answer and stores nothing. A
//! store remembers, per tenant, each key's request (a fingerprint of it) and, once it was
//! answered, the answer, for [`KEEP_REQUESTS`]. The key is claimed before the write runs,
//! in its own durable transaction, so two requests with one key never both run: the second
//! is told the first is under way. A request cut off before it answered (its server died)
//! keeps its key busy until the key expires, never lets a retry run it twice.

use chrono::{DateTime, Utc};

use crate::{Error, Result};

/// How long a key is remembered (Stripe's 24 hours).
pub const KEEP_REQUESTS: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// What a store found under an idempotency key ([`Store::claim_request`](crate::Store::claim_request)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The key was free: it now belongs to this request, whose answer
    /// [`finish_request`](crate::Store::finish_request) records (or
    /// [`release_request`](crate::Store::release_request) lets the key go).
    Claimed,
    /// A request with this key is under way, or stopped before it answered.
    Running {
        /// The fingerprint of that request.
        fingerprint: String,
    },
    /// The key's request was answered.
    Answered {
        /// The fingerprint of that request.
        fingerprint: String,
        /// Its answer's status.
        status: u16,
        /// Its answer's body.
        body: Vec<u8>,
    },
}

/// Checks a key: 1 to [`MAX_KEY_BYTES`] printable ASCII characters, no spaces (what
/// clients send: UUIDs, random tokens).
pub fn check_key(key: &str) -> Result<()> {
    let printable = key.bytes().all(|b| b.is_ascii_graphic());
    if key.is_empty() || key.len() > MAX_KEY_BYTES || !printable {
        return Err(Error::Invalid(memtape_core::Error::InvalidEntry(format!(
            "an idempotency key is 1 to {MAX_KEY_BYTES} printable ASCII characters without \
             spaces (a UUID, say); got {} bytes{}",
            key.len(),
            if printable {
                ""
            } else {
                " with other characters"
            }
        ))));
    }
    Ok(())
}

/// The oldest moment a key claimed at or after it is still remembered, as of `now`.
pub(crate) fn expired_before(now: DateTime<Utc>) -> i64 {
    (now - KEEP_REQUESTS).timestamp()
}
