//! Time travel: "as of" a moment, the tape as it stood then. Every read that takes an
//! [`AsOf`] sees only the entries that existed at that moment, and every projection (memory,
//! history, the prompt, search) is rebuilt from them.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};

use crate::{Entry, EntryId, Error, Filter, Result};

/// A moment of the tape: a time, or an entry (the tape right after that entry was written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsOf {
    /// Every entry written at or before this time.
    Time(DateTime<Utc>),
    /// Every entry up to and including this id (ids are given in commit order).
    Entry(EntryId),
}

impl AsOf {
    /// Whether an entry with this id, written at `at`, existed at this moment.
    pub fn includes(&self, id: EntryId, at: DateTime<Utc>) -> bool {
        match self {
            AsOf::Time(t) => at <= *t,
            AsOf::Entry(last) => id <= *last,
        }
    }

    /// Whether `entry` existed at this moment.
    pub fn includes_entry(&self, entry: &Entry) -> bool {
        self.includes(entry.id, entry.created_at)
    }

    /// `filter`, narrowed to the entries that existed at this moment.
    pub fn narrow(&self, mut filter: Filter) -> Filter {
        match self {
            AsOf::Time(t) => {
                // `until` is exclusive; times are kept to the nanosecond.
                let end = t.checked_add_signed(Duration::nanoseconds(1)).unwrap_or(*t);
                filter.until = Some(filter.until.map_or(end, |u| u.min(end)));
            }
            AsOf::Entry(last) => {
                let end = EntryId(last.0.saturating_add(1));
                filter.before = Some(filter.before.map_or(end, |b| b.min(end)));
            }
        }
        filter
    }

    /// [`AsOf::narrow`] when there is a moment, `filter` as it is when there is none.
    pub fn narrow_opt(as_of: Option<&AsOf>, filter: Filter) -> Filter {
        match as_of {
            Some(a) => a.narrow(filter),
            None => filter,
        }
    }
}

impl FromStr for AsOf {
    type Err = Error;

    /// An entry id (`1234`) or an RFC 3339 time (`2026-03-01T10:00:00Z`, any offset).
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(AsOf::Entry(s.parse()?));
        }
        DateTime::parse_from_rfc3339(s)
            .map(|t| AsOf::Time(t.with_timezone(&Utc)))
            .map_err(|e| {
                Error::InvalidAsOf(format!(
                    "{s:?} is neither an entry id nor an RFC 3339 time \
                     (like 2026-03-01T10:00:00Z): {e}"
                ))
            })
    }
}

impl fmt::Display for AsOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsOf::Time(t) => write!(f, "{}", t.to_rfc3339()),
            AsOf::Entry(id) => write!(f, "{id}"),
        }
    }
}

impl serde::Serialize for AsOf {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            AsOf::Time(_) => s.collect_str(self),
            AsOf::Entry(id) => s.serialize_u64(id.0),
        }
    }
}

impl<'de> serde::Deserialize<'de> for AsOf {
    /// An entry id as a JSON number or string, or an RFC 3339 time as a string.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Id(EntryId),
            Text(String),
        }
        match Wire::deserialize(d)? {
            Wire::Id(id) => Ok(AsOf::Entry(id)),
            Wire::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ids_and_times_and_names_what_is_wrong() {
        assert_eq!("42".parse::<AsOf>().unwrap(), AsOf::Entry(EntryId(42)));
        let t: AsOf = "2026-03-01T12:00:00+02:00".parse().unwrap();
        assert_eq!(t.to_string(), "2026-03-01T10:00:00+00:00");
        let too_big = "9007199254740992".parse::<AsOf>().unwrap_err();
        assert!(too_big.to_string().contains("2^53"), "{too_big}");
        for bad in ["", "yesterday", "2026-03-01", "-1", "1e3", "12 34"] {
            let err = bad.parse::<AsOf>().unwrap_err().to_string();
            assert!(err.contains("RFC 3339"), "{bad}: {err}");
        }
    }

    #[test]
    fn narrows_a_filter_to_the_moment_and_keeps_a_tighter_bound() {
        let t: DateTime<Utc> = "2026-03-01T10:00:00Z".parse().unwrap();
        let f = AsOf::Time(t).narrow(Filter::default());
        assert_eq!(f.until, Some(t + Duration::nanoseconds(1)));
        let earlier = t - Duration::hours(1);
        let f = AsOf::Time(t).narrow(Filter {
            until: Some(earlier),
            ..Filter::default()
        });
        assert_eq!(f.until, Some(earlier));
        let f = AsOf::Entry(EntryId(7)).narrow(Filter::default());
        assert_eq!(f.before, Some(EntryId(8)));
        let f = AsOf::Entry(EntryId::MAX).narrow(Filter {
            before: Some(EntryId(3)),
            ..Filter::default()
        });
        assert_eq!(f.before, Some(EntryId(3)));
        assert!(AsOf::Time(t).includes(EntryId(1), t));
        assert!(!AsOf::Time(t).includes(EntryId(1), t + Duration::nanoseconds(1)));
        assert!(AsOf::Entry(EntryId(7)).includes(EntryId(7), t));
        assert!(!AsOf::Entry(EntryId(7)).includes(EntryId(8), t));
    }

    #[test]
    fn travels_as_json_as_a_number_or_a_string() {
        let id: AsOf = serde_json::from_str("12").unwrap();
        assert_eq!(id, AsOf::Entry(EntryId(12)));
        assert_eq!(serde_json::to_string(&id).unwrap(), "12");
        let t: AsOf = serde_json::from_str("\"2026-03-01T10:00:00Z\"").unwrap();
        assert_eq!(
            serde_json::from_str::<AsOf>(&serde_json::to_string(&t).unwrap()).unwrap(),
            t
        );
        assert!(serde_json::from_str::<AsOf>("\"soon\"").is_err());
        assert!(serde_json::from_str::<AsOf>("-3").is_err());
        assert!(serde_json::from_str::<AsOf>("true").is_err());
    }
}
