//! How an entry and a scope become columns of a relational table and back: the one
//! encoding the SQL stores (SQLite here, PostgreSQL in memtape-postgres) share, so an entry
//! reads back the same, byte for byte, whichever database holds it.

use chrono::{DateTime, Utc};
use memtape_core::{Entry, EntryId, Erasure, Kind, Meta, Payload, Scope};

use crate::{Error, Result};

/// A time as nanoseconds since the epoch (the column type of every timestamp), or an
/// error for a time outside the years 1677 to 2262.
pub fn to_nanos(t: DateTime<Utc>) -> Result<i64> {
    t.timestamp_nanos_opt()
        .ok_or_else(|| Error::TimeOutOfRange(t.to_rfc3339()))
}

/// The time `n` nanoseconds after the epoch.
pub fn from_nanos(n: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_nanos(n)
}

/// An id as a signed 64-bit column. Ids above `i64::MAX` cannot exist; they saturate, so
/// `id > x` finds nothing and `id < x` finds everything, as they would for a huge number.
pub fn sql_id(id: EntryId) -> i64 {
    i64::try_from(id.0).unwrap_or(i64::MAX)
}

/// An id read from a column (never negative: ids are only ever written from [`sql_id`]).
pub fn unsql(v: i64) -> EntryId {
    EntryId(u64::try_from(v).unwrap_or(0))
}

/// The scope's key columns (tenant, agent, user, session, node); "" stands for none, which
/// no valid scope component can be.
pub fn scope_key(scope: &Scope) -> [&str; 5] {
    [
        scope.tenant(),
        scope.agent_name(),
        scope.user().unwrap_or(""),
        scope.session().unwrap_or(""),
        scope.node().unwrap_or(""),
    ]
}

/// The scope whose key columns are these (the inverse of [`scope_key`]).
pub fn scope_from_key(
    tenant: String,
    agent: String,
    user: String,
    session: String,
    node: String,
) -> Result<Scope> {
    let some = |s: String| (!s.is_empty()).then_some(s);
    Scope::from_stored(tenant, agent, some(user), some(session), some(node)).map_err(Error::Invalid)
}

/// The most an entry may take as stored (payload and metadata as JSON text): 256 MiB.
/// SQLite's and PostgreSQL's own limits on one value are about 1 GB, and an agent's memory
/// has no use for entries anywhere near that; past this an append is refused naming the
/// size, before any store tries it.
pub const MAX_ENTRY_BYTES: usize = 256 << 20;

/// Refuses an entry that would take `bytes` as stored, when that is over
/// [`MAX_ENTRY_BYTES`].
pub fn check_entry_size(bytes: usize) -> Result<()> {
    if bytes > MAX_ENTRY_BYTES {
        return Err(memtape_core::Error::InvalidEntry(format!(
            "an entry of {bytes} bytes is over the {MAX_ENTRY_BYTES} bytes (256 MiB) an entry may hold"
        ))
        .into());
    }
    Ok(())
}

/// An entry's columns, as stored.
#[derive(Clone, Debug)]
pub struct EntryRow {
    /// The id.
    pub id: i64,
    /// The payload's kind ([`Kind::as_str`]).
    pub kind: &'static str,
    /// The payload's name (an event's or anchor's), for lookups by name.
    pub name: Option<String>,
    /// The parent message.
    pub parent: Option<i64>,
    /// When it was written, in nanoseconds.
    pub created_at: i64,
    /// The payload as JSON text.
    pub payload: String,
    /// The metadata as JSON text.
    pub meta: String,
    /// The erasure that last changed it (its receipt's id), if one did.
    pub erased_by: Option<i64>,
    /// How it was erased ([`memtape_core::ErasedHow::as_str`]).
    pub erased_how: Option<&'static str>,
}

/// The `meta` column of entry `id`: its metadata as JSON text.
pub fn meta_text(id: EntryId, meta: &memtape_core::Meta) -> Result<String> {
    serde_json::to_string(meta).map_err(|e| Error::Corrupt {
        id: sql_id(id),
        why: e.to_string(),
    })
}

impl EntryRow {
    /// The columns of `entry`.
    pub fn encode(entry: &Entry) -> Result<Self> {
        let meta = meta_text(entry.id, &entry.meta)?;
        let payload = entry.payload.to_json().to_string();
        check_entry_size(payload.len() + meta.len())?;
        Ok(EntryRow {
            id: sql_id(entry.id),
            kind: entry.kind().as_str(),
            name: entry.payload.name().map(str::to_owned),
            parent: entry.parent.map(sql_id),
            created_at: to_nanos(entry.created_at)?,
            payload,
            meta,
            erased_by: entry.erased.map(|e| sql_id(e.by)),
            erased_how: entry.erased.map(|e| e.how.as_str()),
        })
    }
}

/// The erasure mark stored as these columns, if any.
pub fn erasure(id: i64, by: Option<i64>, how: Option<&str>) -> Result<Option<Erasure>> {
    match (by, how) {
        (None, None) => Ok(None),
        (Some(by), Some(how)) => Ok(Some(Erasure {
            by: unsql(by),
            how: how
                .parse()
                .map_err(|e: memtape_core::Error| Error::Corrupt {
                    id,
                    why: e.to_string(),
                })?,
        })),
        _ => Err(Error::Corrupt {
            id,
            why: "half an erasure mark".into(),
        }),
    }
}

/// The entry stored as these columns in `scope`; a row that does not decode is
/// [`Error::Corrupt`], naming the entry.
pub fn decode(
    id: i64,
    scope: &Scope,
    kind: &str,
    parent: Option<i64>,
    created_at: i64,
    payload: &str,
    meta: &str,
) -> Result<Entry> {
    let corrupt = |why: String| Error::Corrupt { id, why };
    let kind: Kind = kind
        .parse()
        .map_err(|e: memtape_core::Error| corrupt(e.to_string()))?;
    let value = serde_json::from_str(payload).map_err(|e| corrupt(e.to_string()))?;
    let payload = Payload::from_json(kind, value).map_err(|e| corrupt(e.to_string()))?;
    let meta: Meta = serde_json::from_str(meta).map_err(|e| corrupt(e.to_string()))?;
    Ok(Entry {
        id: unsql(id),
        scope: scope.clone(),
        payload,
        meta,
        created_at: from_nanos(created_at),
        parent: parent.map(unsql),
        // Set by the store that keeps erasure marks ([`erasure`]).
        erased: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_over_the_size_limit_is_refused_naming_its_size() {
        assert!(check_entry_size(MAX_ENTRY_BYTES).is_ok());
        let err = check_entry_size(MAX_ENTRY_BYTES + 1).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err:?}");
        assert!(err.to_string().contains("268435457 bytes"), "{err}");
    }
}
