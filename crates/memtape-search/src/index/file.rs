//! The index file: its schema, identity and meta (the embedder, the tape it is bound to,
//! its build id and the covered mark), and reading it into memory.
//!
//! A file that is not a SQLite database, or a memtape index of another format version, is
//! recreated (with a warning), never used; a SQLite file of another application is refused
//! untouched. Recreation happens under an exclusive lock on a sidecar `.lock` file, so two
//! processes that find the same broken file do not delete each other's fresh one.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::DateTime;
use memtape_core::{EntryId, Scope};
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::{AddedDoc, DocMeta, Docs};
use crate::vectors::{Quantized, SpillAt};
use crate::when::Period;
use crate::{Error, Result};

/// "mtai": marks a SQLite file as a memtape search index.
const APPLICATION_ID: i64 = 0x6d74_6169;
/// The index file format; a file of another version is rebuilt, never guessed at.
/// Version 3 added the tape binding, the build id and the CJK column; version 5 the
/// speaker of each message and the period its dates name; version 6 embeds a message's
/// own words without its speaker's name; version 7 lets rows be deleted from the
/// contentless FTS5 table (`contentless_delete`) with nothing of them left in its pages
/// (`secure-delete`), for erasure; version 8 is one tenant's shard (its `tenant` in meta).
pub(crate) const FORMAT_VERSION: i64 = 8;
/// Each connection's page cache, in KiB as SQLite's `cache_size` takes it (negative).
pub(crate) const CACHE_KIB: i64 = -512;
/// How long a connection waits for another process's catch-up before giving up.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(300);

pub(super) const SCHEMA: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE scopes (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL, agent TEXT NOT NULL, user TEXT, session TEXT, node TEXT
);
CREATE TABLE docs (
    id INTEGER PRIMARY KEY,
    scope INTEGER NOT NULL REFERENCES scopes (id),
    kind TEXT NOT NULL,
    role TEXT,
    at INTEGER NOT NULL,
    vec BLOB,
    speaker TEXT,
    event_start INTEGER,
    event_end INTEGER
);
CREATE VIRTUAL TABLE fts USING fts5 (
    text, context, cjk, content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
INSERT INTO fts (fts, rank) VALUES ('secure-delete', 1);
";

/// What the meta table says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    /// The embedder the vectors come from ("none" for BM25 only).
    pub embedder: String,
    /// The tape id the index is bound to ("" until its first catch-up).
    pub tape: String,
    /// A random id made each time the index is (re)built: another process holding this
    /// file reloads its mirror when it changes.
    pub build: String,
    /// The last tape id covered.
    pub covered: EntryId,
    /// The last tape id whose document has its vector (files from before vectors could
    /// be behind have no such key: everything covered is embedded).
    pub embedded: EntryId,
    /// The build id of the file's creation or last full rebuild ("" in files from before
    /// it was kept): an erasure changes the build, not the origin, so the inverted index
    /// of a large shard can follow an erasure without being rebuilt.
    pub origin: String,
}

/// Reads the meta table.
pub(crate) fn meta(conn: &Connection) -> Result<Meta> {
    let mut stmt = conn.prepare_cached("SELECT key, value FROM meta")?;
    let pairs: HashMap<String, String> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let get = |k: &str| pairs.get(k).cloned().unwrap_or_default();
    let covered = EntryId(get("covered").parse().unwrap_or(0));
    let embedded = pairs
        .get("embedded")
        .and_then(|v| v.parse().ok())
        .map_or(covered, EntryId);
    Ok(Meta {
        embedder: get("embedder"),
        tape: get("tape"),
        build: get("build"),
        covered,
        embedded: embedded.min(covered),
        origin: get("origin"),
    })
}

/// Sets one meta value.
pub(crate) fn set_meta(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO meta VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )?;
    Ok(())
}

/// Binds a shard file to `tenant` (recorded in its meta the first time), or refuses a
/// file bound to another tenant: a shard is one tenant's, whatever its file is named.
pub(crate) fn bind_tenant(conn: &Connection, path: &Path, tenant: &str) -> Result<()> {
    let read = |conn: &Connection| -> Result<Option<String>> {
        Ok(conn
            .query_row("SELECT value FROM meta WHERE key = 'tenant'", [], |r| {
                r.get(0)
            })
            .optional()?)
    };
    let found = match read(conn)? {
        Some(found) => found,
        None => {
            let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
            let found = read(&tx)?;
            if found.is_none() {
                set_meta(&tx, "tenant", tenant)?;
            }
            tx.commit()?;
            found.unwrap_or_else(|| tenant.to_owned())
        }
    };
    if found != tenant {
        return Err(Error::OtherTenant {
            path: path.to_owned(),
            found,
            tenant: tenant.to_owned(),
        });
    }
    Ok(())
}

/// Sets a fresh random build id and returns it.
pub(crate) fn new_build(conn: &Connection) -> Result<String> {
    let build: String = conn.query_row("SELECT lower(hex(randomblob(16)))", [], |r| r.get(0))?;
    set_meta(conn, "build", &build)?;
    Ok(build)
}

/// Why an existing file is not used as it is.
enum Open {
    Ready(Connection),
    /// Recreate the file; the reason is logged.
    Recreate(String),
}

/// Opens the index file at `path` (creating it with `embedder` recorded if it is new),
/// recreating a broken or outdated one.
pub(crate) fn open(path: &Path, embedder: &str) -> Result<Connection> {
    if let Open::Ready(conn) = try_open(path, embedder)? {
        return Ok(conn);
    }
    // Recreate under the lock, after checking again: another process may have done it.
    let _lock = FileLock::take(path)?;
    match try_open(path, embedder)? {
        Open::Ready(conn) => Ok(conn),
        Open::Recreate(why) => {
            tracing::warn!(
                "search index {}: {why}; rebuilding it from the tape",
                path.display()
            );
            remove(path)?;
            match try_open(path, embedder)? {
                Open::Ready(conn) => Ok(conn),
                Open::Recreate(why) => Err(Error::Unreadable {
                    path: path.to_owned(),
                    why,
                }),
            }
        }
    }
}

fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    )
}

fn try_open(path: &Path, embedder: &str) -> Result<Open> {
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    memtape_store::plan_once(&conn)?;
    // Identify the file before changing anything about it.
    // One read transaction, so another process creating the file is seen whole or not at all.
    let identity = (|| -> rusqlite::Result<(i64, i64, i64)> {
        let tx = conn.transaction()?;
        let tables = tx.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        let app = tx.pragma_query_value(None, "application_id", |r| r.get(0))?;
        let version = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        tx.commit()?;
        Ok((app, version, tables))
    })();
    let (app, version, tables) = match identity {
        Ok(found) => found,
        Err(e) if is_corrupt(&e) => return Ok(Open::Recreate(format!("unreadable ({e})"))),
        Err(e) => return Err(e.into()),
    };
    if tables > 0 && app != APPLICATION_ID {
        return Err(Error::Unreadable {
            path: path.to_owned(),
            why: format!("application id {app:#x}"),
        });
    }
    if tables > 0 && version != FORMAT_VERSION {
        return Ok(Open::Recreate(format!(
            "format version {version}, this build uses {FORMAT_VERSION}"
        )));
    }
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Many shards are open at once: each keeps a small page cache, and its log's file is
    // cut back to 1 MiB after each checkpoint, so neither memory nor disk grows much with
    // the number of shards.
    conn.pragma_update(None, "cache_size", CACHE_KIB)?;
    conn.pragma_update(None, "journal_size_limit", 1 << 20)?;
    // What a write frees (an erased document's rows) is zeroed, not left in free space.
    conn.pragma_update(None, "secure_delete", "ON")?;
    // The writer's catch-up does not wait for checkpoints.
    memtape_store::checkpoint::checkpoint_behind(&mut conn, path)?;
    if tables == 0 {
        // Schema, identity and first marks in one transaction: a crash leaves either an
        // empty file or a complete index. Another process may create it first.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let tables: i64 = tx.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if tables == 0 {
            tx.execute_batch(&format!(
                "{SCHEMA} PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {FORMAT_VERSION};"
            ))?;
            tx.execute(
                "INSERT INTO meta VALUES ('embedder', ?1), ('covered', '0'), ('tape', '')",
                [embedder],
            )?;
            let build = new_build(&tx)?;
            set_meta(&tx, "origin", &build)?;
        }
        tx.commit()?;
    }
    match conn.query_row("SELECT count(*) FROM meta", [], |r| r.get::<_, i64>(0)) {
        Ok(_) => Ok(Open::Ready(conn)),
        Err(e) if is_corrupt(&e) => Ok(Open::Recreate(format!("unreadable ({e})"))),
        Err(e) => Err(e.into()),
    }
}

/// FTS5's merges for a shard that keeps the inverted index, where FTS5 answers only the
/// searches that index does not (a filter inside the tenant, a period, CJK phrases):
/// a level of segments is merged once it holds 16 (FTS5's default is 4), so each
/// document is rewritten about half as often, and a query reads up to four times as
/// many segments a level. 1M entries, one tenant: ingest 14,092 → 15,576 a second
/// (docs/scaling.md, "The write path"). The settings are kept in the file.
pub(crate) fn merge_less(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "INSERT INTO fts (fts, rank) VALUES ('automerge', 16);
         INSERT INTO fts (fts, rank) VALUES ('crisismerge', 32);",
    )?;
    Ok(())
}

/// Copies the write-ahead log into the file and truncates it to nothing, so what a write
/// replaced (an erased document) is left in neither; waits up to two seconds for readers
/// holding an older snapshot, then says `false` (the next checkpoint finishes it).
pub(crate) fn truncate_wal(conn: &Connection) -> Result<bool> {
    Ok(memtape_store::truncate_wal(Duration::from_secs(2), || {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
    })?)
}

/// Removes the index file and its WAL and shared-memory files.
fn remove(path: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let file = with_suffix(path, suffix);
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(Error::Remove { path: file, source }),
        }
    }
    Ok(())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut file = path.as_os_str().to_owned();
    file.push(suffix);
    PathBuf::from(file)
}

/// An exclusive lock on `<index>.lock`, held while a broken index file is replaced.
struct FileLock(std::fs::File);

impl FileLock {
    fn take(path: &Path) -> Result<FileLock> {
        let lock_path = with_suffix(path, ".lock");
        let io = |source| Error::Lock {
            path: lock_path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io)?;
        file.lock().map_err(io)?;
        Ok(FileLock(file))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the file releases the lock as well; unlocking first is only tidier.
        let _ = self.0.unlock();
    }
}

fn bad(path: &Path, why: String) -> Error {
    Error::Unreadable {
        path: path.to_owned(),
        why,
    }
}

/// Reads the whole index file into memory. `room` is told how many bytes the documents
/// will hold once read, before they are read (their collections are reserved first).
pub(crate) fn load(
    conn: &Connection,
    dim: usize,
    path: &Path,
    spill: Option<SpillAt>,
    room: &dyn Fn(u64),
) -> Result<Docs> {
    // One snapshot for the meta and every chunk (the caller's transaction, or this one,
    // only read, so dropped unfinished).
    let _snapshot = if conn.is_autocommit() {
        Some(conn.unchecked_transaction()?)
    } else {
        None
    };
    let meta = meta(conn)?;
    let mut docs = Docs::empty(dim, meta.build.clone(), spill);
    let rows: i64 = conn.query_row(
        "SELECT count(*) FROM docs WHERE id <= ?1",
        [meta.covered.0 as i64],
        |r| r.get(0),
    )?;
    let scopes: i64 = conn.query_row("SELECT count(*) FROM scopes", [], |r| r.get(0))?;
    docs.reserve_exact(
        usize::try_from(rows).unwrap_or(0),
        usize::try_from(scopes).unwrap_or(0),
    );
    room(docs.memory() as u64);
    // A chunk at a time, so that a large shard's documents are never all held twice (as
    // read, and as mirrored) and its vectors can move to disk as they come.
    loop {
        let added = load_some(conn, &docs, &meta, path, LOAD_CHUNK)?;
        let more = added.docs.len() == LOAD_CHUNK;
        docs.extend(added);
        if !more {
            docs.shrink_to_fit();
            return Ok(docs);
        }
    }
}

/// How many documents [`load`] reads at once.
const LOAD_CHUNK: usize = 65_536;

/// Documents and scopes another process committed since `docs` was read: scopes after
/// its last one, documents after its covered mark up to `meta`'s. A document after
/// `meta`'s embedded mark may lack its vector.
pub(crate) fn load_after(
    conn: &Connection,
    docs: &Docs,
    meta: &Meta,
    path: &Path,
) -> Result<super::Added> {
    load_some(conn, docs, meta, path, usize::MAX)
}

/// [`load_after`]'s first `limit` documents: when there are that many, the marks are the
/// last one's id (at most `meta`'s), so that the next call goes on after it.
fn load_some(
    conn: &Connection,
    docs: &Docs,
    meta: &Meta,
    path: &Path,
    limit: usize,
) -> Result<super::Added> {
    let (covered, embedded) = (meta.covered, meta.embedded);
    let mut added = super::Added {
        covered,
        embedded,
        ..Default::default()
    };
    let mut stmt = conn.prepare_cached(
        "SELECT id, tenant, agent, user, session, node FROM scopes WHERE id >= ?1 ORDER BY id",
    )?;
    let mut rows = stmt.query([docs.scopes.len() as i64])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        if id as usize != docs.scopes.len() + added.scopes.len() {
            return Err(bad(path, format!("scope rows are not dense at {id}")));
        }
        let scope = Scope::from_parts(r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?);
        added
            .scopes
            .push(scope.map_err(|e| bad(path, e.to_string()))?);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT docs.id, scope, kind, role, at, vec, speaker, event_start, event_end, sz
         FROM docs LEFT JOIN fts_docsize ON fts_docsize.id = docs.id
         WHERE docs.id > ?1 AND docs.id <= ?2 ORDER BY docs.id LIMIT ?3",
    )?;
    let mut rows = stmt.query([
        docs.covered.0 as i64,
        covered.0 as i64,
        i64::try_from(limit).unwrap_or(i64::MAX),
    ])?;
    let dim = docs.vectors.dim();
    let scope_count = docs.scopes.len() + added.scopes.len();
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let kind: String = r.get(2)?;
        let role: Option<String> = r.get(3)?;
        let at: i64 = r.get(4)?;
        let meta = DocMeta {
            scope: r.get(1)?,
            kind: kind
                .parse()
                .map_err(|e: memtape_core::Error| bad(path, e.to_string()))?,
            role: role
                .map(|r| r.parse())
                .transpose()
                .map_err(|e: memtape_core::Error| bad(path, e.to_string()))?,
            at: super::Nanos::new(DateTime::from_timestamp_millis(at).unwrap_or_default()),
            speaker: super::MaybeRow::NONE,
            tokens: super::bm25::field_tokens(
                r.get::<_, Option<Vec<u8>>>(9)?
                    .as_deref()
                    .unwrap_or_default(),
            ),
        };
        if meta.scope as usize >= scope_count {
            return Err(bad(path, format!("document {id} names no known scope")));
        }
        let vector = match (dim, r.get::<_, Option<Vec<u8>>>(5)?) {
            (0, _) => None,
            (_, None) if id as u64 > embedded.0 => None,
            (_, Some(b)) => match Quantized::from_bytes(&b, dim) {
                Some(q) => Some(q),
                None => {
                    return Err(bad(
                        path,
                        format!("document {id} has no vector of length {dim}"),
                    ));
                }
            },
            _ => {
                return Err(bad(
                    path,
                    format!("document {id} has no vector of length {dim}"),
                ));
            }
        };
        let event = match (r.get::<_, Option<i64>>(7)?, r.get::<_, Option<i64>>(8)?) {
            (Some(start), Some(end)) => Some(Period {
                start: DateTime::from_timestamp_millis(start).unwrap_or_default(),
                end: DateTime::from_timestamp_millis(end).unwrap_or_default(),
            }),
            _ => None,
        };
        added.docs.push(AddedDoc {
            id: EntryId(id as u64),
            meta,
            vector,
            speaker: r.get(6)?,
            event,
        });
    }
    if added.docs.len() == limit
        && let Some(last) = added.docs.last()
    {
        added.covered = last.id;
        added.embedded = embedded.min(last.id);
    }
    Ok(added)
}

/// The vectors committed (by a pass embedding what catch-ups left behind) for documents
/// `docs` mirrors without one, up to `embedded`, in id order.
pub(crate) fn load_vectors(
    conn: &Connection,
    docs: &Docs,
    embedded: EntryId,
    path: &Path,
) -> Result<Vec<(EntryId, Quantized)>> {
    let dim = docs.vectors.dim();
    let Some(first) = docs.ids.get(docs.vectors.len()) else {
        return Ok(Vec::new());
    };
    if dim == 0 {
        return Ok(Vec::new());
    }
    let mut stmt =
        conn.prepare_cached("SELECT id, vec FROM docs WHERE id >= ?1 AND id <= ?2 ORDER BY id")?;
    // Documents after the mirror's covered mark come with their vectors (load_after).
    let upto = embedded.min(docs.covered);
    let mut rows = stmt.query([*first as i64, upto.0 as i64])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let bytes: Option<Vec<u8>> = r.get(1)?;
        match bytes.and_then(|b| Quantized::from_bytes(&b, dim)) {
            Some(q) => out.push((EntryId(id as u64), q)),
            None => {
                return Err(bad(
                    path,
                    format!("document {id} has no vector of length {dim}"),
                ));
            }
        }
    }
    Ok(out)
}
