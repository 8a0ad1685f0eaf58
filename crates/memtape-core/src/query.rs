//! Tape queries: Bub's anchor slices (from the last anchor, after or between named anchors)
//! combined with kind and time filters, and the low-level scan filter stores implement.

use chrono::{DateTime, Utc};

use crate::{Entry, EntryId, Kind};

/// Which stretch of a scope's tape a query reads, delimited by anchors (Bub's TapeService).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AnchorRange {
    /// The whole tape.
    #[default]
    All,
    /// Entries after the last anchor of any name.
    FromLast,
    /// Entries after the last anchor named so.
    After(String),
    /// Entries after the last anchor named by the first, up to (not including) the first
    /// anchor named by the second that follows it; an error if none follows (as Bub's
    /// `between_anchors` raises not_found).
    Between(String, String),
}

/// A query over one scope's tape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TapeQuery {
    /// The anchor-delimited stretch to read.
    pub range: AnchorRange,
    /// Keep only these kinds (all kinds when empty).
    pub kinds: Vec<Kind>,
    /// Keep entries created at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Keep entries created before this time.
    pub until: Option<DateTime<Utc>>,
    /// At most this many entries (the first ones in tape order, or the last ones with
    /// `last`).
    pub limit: Option<usize>,
    /// Only entries with a greater id (a cursor, within the range).
    pub after: Option<EntryId>,
    /// Only entries with a smaller id (a cursor, within the range).
    pub before: Option<EntryId>,
    /// With `limit`: the last entries of the selection instead of the first (still in
    /// tape order), to page backwards.
    pub last: bool,
}

/// The order a scan returns entries in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    #[default]
    Asc,
    /// Newest first.
    Desc,
}

/// The filter a store applies when it scans one scope. Bounds are exclusive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only entries with a greater id.
    pub after: Option<EntryId>,
    /// Only entries with a smaller id.
    pub before: Option<EntryId>,
    /// Only these kinds (all when empty).
    pub kinds: Vec<Kind>,
    /// Only anchors or events with this name.
    pub name: Option<String>,
    /// Only entries created at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only entries created before this time.
    pub until: Option<DateTime<Utc>>,
    /// The order of the result.
    pub order: Order,
    /// At most this many entries.
    pub limit: Option<usize>,
}

impl Filter {
    /// Whether `entry` passes every condition except the scope, order and limit.
    pub fn matches(&self, entry: &Entry) -> bool {
        self.after.is_none_or(|a| entry.id > a)
            && self.before.is_none_or(|b| entry.id < b)
            && (self.kinds.is_empty() || self.kinds.contains(&entry.kind()))
            && self
                .name
                .as_deref()
                .is_none_or(|n| entry.payload.name() == Some(n))
            && self.since.is_none_or(|s| entry.created_at >= s)
            && self.until.is_none_or(|u| entry.created_at < u)
    }
}
