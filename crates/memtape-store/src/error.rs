//! The one error type of memtape-store.

use std::path::PathBuf;

use memtape_core::EntryId;

/// What went wrong in a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An entry or scope broke a domain rule.
    #[error(transparent)]
    Invalid(#[from] memtape_core::Error),
    /// A parent reference that cannot be followed.
    #[error("parent {parent} of the new entry {why}")]
    BadParent {
        /// The parent given.
        parent: EntryId,
        /// Why it was refused.
        why: String,
    },
    /// A session.consolidated event pointing at something other than an entry of its scope.
    #[error("cannot move the consolidation pointer of {scope} to {through}: {why}")]
    BadPointer {
        /// The scope.
        scope: String,
        /// The target.
        through: u64,
        /// Why it was refused.
        why: String,
    },
    /// The database was written by a newer memtape.
    #[error(
        "the store at {store} has schema version {found}, newer than this memtape supports ({supported}); upgrade memtape to open it"
    )]
    NewerSchema {
        /// The database file, or the database's address (without its password).
        store: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The file is a SQLite database, but not memtape's.
    #[error("{path} is not a memtape store (application id {found:#x})")]
    NotMemtape {
        /// The database file.
        path: PathBuf,
        /// The application id found.
        found: i64,
    },
    /// The file is not an SQLite database at all.
    #[error(
        "{0} is not a memtape store (not an SQLite database); move it away or choose another --data-dir"
    )]
    NotSqlite(PathBuf),
    /// The store's folder cannot be written: the disk is full, the filesystem is read-only,
    /// or permissions forbid it. Read-only opens still work.
    #[error(
        "cannot write the store at {path}: {cause} ({source}); reads still work, so `memtape export` can take a backup"
    )]
    Unwritable {
        /// The database file.
        path: PathBuf,
        /// What the filesystem says, e.g. "the disk is full".
        cause: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A reader of the whole tape waited for an erasure under way, and it did not end.
    #[error(
        "the erasure with receipt #{receipt} is still under way after {secs}s, and the tape cannot be read past it until it ends: open the store for writing (a server, or any command that writes) to finish it, then try again"
    )]
    ErasureUnderWay {
        /// The erasure's receipt.
        receipt: EntryId,
        /// How long it was waited for.
        secs: u64,
    },
    /// This store cannot do what was asked yet (said where it is not built).
    #[error("{0}")]
    Unsupported(String),
    /// The store was opened read-only and cannot take writes.
    #[error("the store at {0} is open read-only: this command cannot write")]
    ReadOnly(String),
    /// The filesystem does not support SQLite's write-ahead log (e.g. some network mounts).
    #[error(
        "{path}: the filesystem refused WAL mode (journal mode is {mode}); put the data directory on a local disk"
    )]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite fell back to.
        mode: String,
    },
    /// No store exists at the path.
    #[error("no memtape store at {0} (run `memtape init` to create one)")]
    Missing(PathBuf),
    /// A compare-and-append found a newer entry than the writer had seen
    /// ([`memtape_core::NewEntry::if_last`]); nothing was appended. Read again and retry.
    #[error(
        "conflict in {scope}: the write expected entry {expected} to be the latest, but it is {actual}; nothing was written"
    )]
    Conflict {
        /// The scope.
        scope: String,
        /// The latest entry the writer had seen.
        expected: EntryId,
        /// The latest entry there is.
        actual: EntryId,
    },
    /// Every id up to [`EntryId::MAX`] is taken: the store can take no more entries.
    #[error(
        "the store has no ids left after {0} (ids end at 2^53 - 1); export it and import into a new store, which renumbers"
    )]
    IdsExhausted(EntryId),
    /// A vector given to [`crate::Store::put_vectors`] was refused; nothing was kept.
    #[error("vector refused: {0}")]
    BadVector(String),
    /// A stored row could not be read back.
    #[error("corrupt entry {id}: {why}")]
    Corrupt {
        /// The entry.
        id: i64,
        /// What is wrong.
        why: String,
    },
    /// A time outside the range the store can hold (1677–2262).
    #[error("time {0} is outside the range memtape stores (years 1677 to 2262)")]
    TimeOutOfRange(String),
    /// SQLite failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A database server (PostgreSQL) failed or could not be reached. The store at `store`
    /// (its address without the password) is named, and the server's own words follow.
    #[error("postgres at {store}: {source}")]
    Database {
        /// The database's address, without its password.
        store: String,
        /// The client's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The filesystem failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}
