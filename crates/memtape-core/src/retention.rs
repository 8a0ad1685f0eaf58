//! Retention: how long a tenant's or agent's raw conversation is kept (messages, tool
//! calls, tool results), the policy that says so, and which entries it lets go at a given
//! moment. Memory (memory versions, dropped facts, summaries) is never expired: it is kept
//! until erased. Expiring is an erasure ([`crate::erasure`]), so an expired entry becomes a
//! tombstone and a `tape.erased` receipt records the run.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::{Entry, EntryId, Error, Kind, Result};

/// The longest retention a policy may name: 100 years, in days.
pub const MAX_RETENTION_DAYS: u32 = 36_500;

/// A retention policy as written (in `memtape.toml`, over REST, or on the tape as a
/// `retention.policy` event): each field unset inherits from the policy under it (an
/// agent's from its tenant's, a tenant's from the default), and unset all the way down
/// means "kept until erased".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Days the raw conversation is kept (messages, tool calls and results, system
    /// messages, and the attachments they reference); at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_days: Option<u32>,
    /// Days tool results are kept, when shorter than the conversation's; at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results_days: Option<u32>,
    /// Expire only what consolidation has already absorbed into memory (the entries up to
    /// its session's consolidation pointer, nanobot's `last_consolidated`): a session no
    /// model consolidates then keeps its conversation. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_consolidated: Option<bool>,
}

impl Retention {
    /// Checks the day counts: each at least 1 (a policy of 0 days would erase a whole
    /// conversation the moment it is written, most likely by mistake) and at most
    /// [`MAX_RETENTION_DAYS`].
    pub fn validate(&self) -> Result<()> {
        for (name, days) in [
            ("messages_days", self.messages_days),
            ("tool_results_days", self.tool_results_days),
        ] {
            if let Some(days) = days
                && !(1..=MAX_RETENTION_DAYS).contains(&days)
            {
                return Err(Error::InvalidEntry(format!(
                    "retention {name} is {days}; it must be 1 to {MAX_RETENTION_DAYS} days \
                     (leave it out to keep entries until they are erased)"
                )));
            }
        }
        Ok(())
    }

    /// This policy over `base`: each field this one leaves unset comes from `base`.
    pub fn over(self, base: Retention) -> Retention {
        Retention {
            messages_days: self.messages_days.or(base.messages_days),
            tool_results_days: self.tool_results_days.or(base.tool_results_days),
            only_consolidated: self.only_consolidated.or(base.only_consolidated),
        }
    }

    /// Whether the policy expires anything at all.
    pub fn expires(&self) -> bool {
        self.messages_days.is_some() || self.tool_results_days.is_some()
    }

    /// What the policy lets go at `now`: `None` when it expires nothing.
    pub fn expiry(&self, now: DateTime<Utc>) -> Option<Expiry> {
        if !self.expires() {
            return None;
        }
        let before = |days: Option<u32>| {
            days.map(|d| {
                now.checked_sub_signed(Duration::days(i64::from(d)))
                    .unwrap_or(DateTime::<Utc>::MIN_UTC)
            })
        };
        let messages_before = before(self.messages_days);
        // A tool result is raw conversation too: it goes at the sooner of the two.
        let tool_results_before = match (messages_before, before(self.tool_results_days)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Some(Expiry {
            messages_before,
            tool_results_before,
            only_consolidated: self.only_consolidated.unwrap_or(false),
        })
    }
}

/// The entries a retention policy lets go at one moment: conversational entries written
/// strictly before their cutoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expiry {
    /// Messages, tool calls and system messages written before this go.
    pub messages_before: Option<DateTime<Utc>>,
    /// Tool results written before this go.
    pub tool_results_before: Option<DateTime<Utc>>,
    /// Only entries up to their session's consolidation pointer go.
    pub only_consolidated: bool,
}

impl Expiry {
    /// Whether `entry` expires, `consolidated` being its scope's consolidation pointer
    /// (entries up to and including it were consolidated; 0 when none were, or when the
    /// scope is not a session's conversation).
    pub fn takes(&self, entry: &Entry, consolidated: EntryId) -> bool {
        let kind = entry.kind();
        if !kind.is_conversational() || entry.is_tombstone() {
            return false;
        }
        let before = if kind == Kind::ToolResult {
            self.tool_results_before
        } else {
            self.messages_before
        };
        let old = before.is_some_and(|cutoff| entry.created_at < cutoff);
        old && (!self.only_consolidated || entry.id <= consolidated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, Payload, Scope};

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn entry(id: u64, payload: Payload, days_ago: i64, now: DateTime<Utc>) -> Entry {
        Entry {
            id: EntryId(id),
            scope: Scope::agent("t", "a").unwrap().with_session("s").unwrap(),
            parent: None,
            payload,
            meta: Default::default(),
            created_at: now - Duration::days(days_ago),
            erased: None,
        }
    }

    #[test]
    fn unset_fields_inherit_and_nothing_set_expires_nothing() {
        let tenant = Retention {
            messages_days: Some(90),
            only_consolidated: Some(true),
            ..Default::default()
        };
        let agent = Retention {
            tool_results_days: Some(7),
            only_consolidated: Some(false),
            ..Default::default()
        };
        let both = agent.over(tenant);
        assert_eq!(both.messages_days, Some(90));
        assert_eq!(both.tool_results_days, Some(7));
        assert_eq!(both.only_consolidated, Some(false));
        assert!(Retention::default().expiry(now()).is_none());
    }

    #[test]
    fn zero_or_absurd_days_are_refused() {
        for days in [0, MAX_RETENTION_DAYS + 1] {
            let p = Retention {
                messages_days: Some(days),
                ..Default::default()
            };
            let err = p.validate().unwrap_err().to_string();
            assert!(err.contains("messages_days"), "{err}");
        }
        let p = Retention {
            tool_results_days: Some(0),
            ..Default::default()
        };
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("tool_results_days")
        );
    }

    #[test]
    fn each_kind_goes_at_its_cutoff_and_memory_never() {
        let now = now();
        let policy = Retention {
            messages_days: Some(30),
            tool_results_days: Some(7),
            only_consolidated: None,
        };
        let e = policy.expiry(now).unwrap();
        let user = |days| entry(1, Payload::Message(Message::user("hi")), days, now);
        let result = |days| {
            entry(
                2,
                Payload::Message(Message::tool_result("c", "r")),
                days,
                now,
            )
        };
        assert!(e.takes(&user(31), EntryId(0)));
        assert!(!e.takes(&user(29), EntryId(0)));
        assert!(e.takes(&result(8), EntryId(0)));
        assert!(!e.takes(&result(6), EntryId(0)));
        let event = entry(
            3,
            Payload::Event(crate::Event {
                name: "memory.change".into(),
                data: serde_json::json!({}),
            }),
            400,
            now,
        );
        assert!(!e.takes(&event, EntryId(0)));
        // Tool results go at the sooner cutoff when the conversation's is shorter.
        let short = Retention {
            messages_days: Some(3),
            tool_results_days: Some(7),
            only_consolidated: None,
        }
        .expiry(now)
        .unwrap();
        assert!(short.takes(&result(4), EntryId(0)));
    }

    #[test]
    fn only_consolidated_keeps_what_the_pointer_has_not_passed() {
        let now = now();
        let e = Retention {
            messages_days: Some(1),
            tool_results_days: None,
            only_consolidated: Some(true),
        }
        .expiry(now)
        .unwrap();
        let old = entry(5, Payload::Message(Message::user("hi")), 10, now);
        assert!(!e.takes(&old, EntryId(0)));
        assert!(!e.takes(&old, EntryId(4)));
        assert!(e.takes(&old, EntryId(5)));
    }
}
