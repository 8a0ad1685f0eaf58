//! When to try a failed call again, and how long to wait: the official SDKs' policy (up to
//! 2 retries, exponential backoff from 0.5 s capped at 8 s, with jitter), and the server's
//! own `Retry-After` first when it gives one.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How a client retries calls that failed in a way that may pass ([`crate::Error::is_retryable`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff; each retry doubles it.
    pub base: Duration,
    /// The longest backoff.
    pub cap: Duration,
    /// The longest wait a server may ask for; asked more, the call fails at once with the
    /// server's answer, and the caller decides.
    pub max_server_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
            max_server_wait: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }

    /// How long to wait before retry number `retry` (0 for the first), given the wait the
    /// server asked for, if any; `None` when the call should not be retried.
    pub fn delay(&self, retry: u32, server: Option<Duration>) -> Option<Duration> {
        if retry >= self.max_retries {
            return None;
        }
        if let Some(wait) = server {
            return (wait <= self.max_server_wait).then_some(wait);
        }
        let backoff = self
            .base
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.cap);
        // Jitter between 75% and 100%, so clients that failed together do not retry together.
        Some(backoff.mul_f64(1.0 - 0.25 * fastrand::f64()))
    }
}

/// The wait a server asked for: `retry-after-ms` (milliseconds, a float), else `Retry-After`
/// as seconds (an integer or a float) or as an HTTP date (then measured from `now`; a date
/// in the past is no wait). `None` when neither says anything usable.
pub fn retry_after(ms: Option<&str>, value: Option<&str>, now: DateTime<Utc>) -> Option<Duration> {
    let seconds = |s: &str, scale: f64| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .and_then(|v| Duration::try_from_secs_f64(v / scale).ok())
    };
    if let Some(d) = ms.and_then(|m| seconds(m, 1000.0)) {
        return Some(d);
    }
    let value = value?.trim();
    seconds(value, 1.0).or_else(|| {
        let at = DateTime::parse_from_rfc2822(value)
            .ok()?
            .with_timezone(&Utc);
        Some((at - now).to_std().unwrap_or(Duration::ZERO))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap_and_stops_after_the_last_retry() {
        let policy = RetryPolicy {
            max_retries: 6,
            ..RetryPolicy::default()
        };
        for (retry, full) in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0)] {
            let d = policy.delay(retry, None).unwrap().as_secs_f64();
            assert!(d <= full && d >= 0.75 * full, "retry {retry}: {d}");
        }
        assert_eq!(policy.delay(6, None), None);
        assert_eq!(RetryPolicy::none().delay(0, None), None);
    }

    #[test]
    fn a_server_wait_is_honoured_unless_it_is_too_long() {
        let policy = RetryPolicy::default();
        let five = Duration::from_secs(5);
        assert_eq!(policy.delay(0, Some(five)), Some(five));
        assert_eq!(policy.delay(0, Some(Duration::from_secs(61))), None);
    }

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let now = DateTime::parse_from_rfc3339("2026-10-21T07:28:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let ms = |m| Some(Duration::from_millis(m));
        assert_eq!(retry_after(Some("250"), Some("9"), now), ms(250));
        assert_eq!(retry_after(None, Some("2"), now), ms(2000));
        assert_eq!(retry_after(None, Some("1.5"), now), ms(1500));
        assert_eq!(
            retry_after(None, Some("Wed, 21 Oct 2026 07:28:30 GMT"), now),
            ms(30_000)
        );
        assert_eq!(
            retry_after(None, Some("Wed, 21 Oct 2026 07:00:00 GMT"), now),
            ms(0)
        );
        for bad in ["", "soon", "-3", "NaN", "inf"] {
            assert_eq!(retry_after(None, Some(bad), now), None, "{bad:?}");
        }
        assert_eq!(retry_after(Some("x"), None, now), None);
    }
}
