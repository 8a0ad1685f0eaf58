//! The embedded SQLite store: one database file in the data directory, WAL mode, every
//! append one durable transaction (synchronous=FULL), readers on their own connections so
//! they never wait for the writer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use memtape_core::{Entry, EntryId, Erasure, Filter, Kind, NewEntry, Order, Scope};
use rusqlite::types::Value as SqlValue;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params, params_from_iter,
};

use crate::erase::{EraseTransaction, Pending, Rewrite, StepStore};
use crate::locks::{file_lock, lock_dir};
use crate::row::{
    EntryRow, decode, from_nanos, scope_from_key, scope_key, sql_id, to_nanos, unsql,
};
use crate::rules::{Transaction, append_in, restore_in};
use crate::{
    Claim, EraseOutcome, EraseRequest, Error, NewVector, Restored, Result, ScopeInfo, Store,
    StoreLock, Wait,
};

/// The schema version this build writes. Databases with a higher version are refused.
pub const SCHEMA_VERSION: i64 = 7;

/// Marks the database file as memtape's ("mtap").
const APPLICATION_ID: i64 = 0x6d74_6170;

/// Migrations: `MIGRATIONS[v]` takes a database from version `v` to `v + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE scopes (
    scope_id          INTEGER PRIMARY KEY,
    tenant            TEXT NOT NULL,
    agent             TEXT NOT NULL,
    user              TEXT NOT NULL DEFAULT '',
    session           TEXT NOT NULL DEFAULT '',
    node              TEXT NOT NULL DEFAULT '',
    entries           INTEGER NOT NULL DEFAULT 0,
    messages          INTEGER NOT NULL DEFAULT 0,
    head              INTEGER,
    last_id           INTEGER,
    last_consolidated INTEGER NOT NULL DEFAULT 0,
    first_at          INTEGER,
    last_at           INTEGER,
    UNIQUE (tenant, agent, user, session, node)
);
CREATE TABLE entries (
    id         INTEGER PRIMARY KEY,
    scope_id   INTEGER NOT NULL REFERENCES scopes(scope_id),
    kind       TEXT NOT NULL,
    name       TEXT,
    parent     INTEGER REFERENCES entries(id),
    created_at INTEGER NOT NULL,
    payload    TEXT NOT NULL,
    meta       TEXT NOT NULL
);
CREATE INDEX entries_by_scope ON entries(scope_id, id);
CREATE INDEX entries_by_kind ON entries(scope_id, kind, id);
CREATE INDEX entries_by_name ON entries(scope_id, name, id) WHERE name IS NOT NULL;
CREATE INDEX entries_by_time ON entries(scope_id, created_at);
CREATE TRIGGER entries_append_only_update BEFORE UPDATE ON entries
    BEGIN SELECT RAISE(ABORT, 'memtape entries are append-only'); END;
CREATE TRIGGER entries_append_only_delete BEFORE DELETE ON entries
    BEGIN SELECT RAISE(ABORT, 'memtape entries are append-only'); END;
"#,
    r#"
CREATE TABLE tape (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    id   TEXT NOT NULL
);
INSERT INTO tape VALUES (1, lower(hex(randomblob(16))));
"#,
    r#"
CREATE TABLE request_keys (
    tenant      TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    status      INTEGER,
    body        BLOB,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX request_keys_by_time ON request_keys(created_at);
"#,
    // Erasure: an entry may have its content replaced (never its id, scope, kind, parent or
    // time), only inside an erasure's transaction, which fills `erasing` while it rewrites
    // and empties it before it commits; every other UPDATE still aborts.
    r#"
ALTER TABLE entries ADD COLUMN erased_by INTEGER;
ALTER TABLE entries ADD COLUMN erased_how TEXT;
CREATE INDEX entries_by_erasure ON entries(erased_by) WHERE erased_by IS NOT NULL;
CREATE TABLE erasing (only INTEGER PRIMARY KEY CHECK (only = 1));
DROP TRIGGER entries_append_only_update;
CREATE TRIGGER entries_append_only_update BEFORE UPDATE ON entries
    WHEN NOT EXISTS (SELECT 1 FROM erasing)
      OR NEW.id IS NOT OLD.id OR NEW.scope_id IS NOT OLD.scope_id OR NEW.kind IS NOT OLD.kind
      OR NEW.parent IS NOT OLD.parent OR NEW.created_at IS NOT OLD.created_at
      OR NEW.erased_by IS NULL OR NEW.erased_how IS NULL OR NEW.erased_how NOT IN ('whole', 'text')
    BEGIN SELECT RAISE(ABORT, 'memtape entries are append-only (an erasure only replaces content)'); END;
"#,
    // Erasure in steps: an erasure whose receipt is written and whose rewrites are not all
    // done, with what finishing it needs (`erase::Pending` as JSON).
    r#"
CREATE TABLE erasures_pending (
    receipt INTEGER PRIMARY KEY,
    tenant  TEXT NOT NULL,
    plan    TEXT NOT NULL
);
"#,
    // Vectors kept beside the tape (`Store::put_vectors`): each entry's vector under each
    // embedder that made one, the embedders' ids numbered so a row does not repeat them.
    r#"
CREATE TABLE embedders (
    embedder_id INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE
);
CREATE TABLE vectors (
    entry       INTEGER NOT NULL REFERENCES entries(id),
    embedder_id INTEGER NOT NULL REFERENCES embedders(embedder_id),
    vec         BLOB NOT NULL,
    PRIMARY KEY (entry, embedder_id)
) WITHOUT ROWID;
"#,
    // Each tenant's entries in id order (`Store::entries_after_in`): a projection of one
    // tenant (its search index shard) follows them without reading other tenants'. Kept
    // in the same transaction as every insert, append-only as the entries are.
    r#"
CREATE TABLE tenants (
    tenant_id INTEGER PRIMARY KEY,
    name      TEXT NOT NULL UNIQUE
);
INSERT INTO tenants (name) SELECT DISTINCT tenant FROM scopes ORDER BY tenant;
CREATE TABLE tenant_entries (
    tenant_id INTEGER NOT NULL REFERENCES tenants(tenant_id),
    id        INTEGER NOT NULL REFERENCES entries(id),
    PRIMARY KEY (tenant_id, id)
) WITHOUT ROWID;
INSERT INTO tenant_entries (tenant_id, id)
    SELECT t.tenant_id, e.id FROM entries e JOIN scopes s USING (scope_id)
    JOIN tenants t ON t.name = s.tenant;
CREATE TRIGGER tenant_entries_append_only_update BEFORE UPDATE ON tenant_entries
    BEGIN SELECT RAISE(ABORT, 'memtape entries are append-only'); END;
CREATE TRIGGER tenant_entries_append_only_delete BEFORE DELETE ON tenant_entries
    BEGIN SELECT RAISE(ABORT, 'memtape entries are append-only'); END;
"#,
];

/// The embedded SQLite store.
///
/// Opened for writing ([`SqliteStore::create`], [`SqliteStore::open`]) it holds one writer
/// connection and a pool of read-only ones. Opened read-only
/// ([`SqliteStore::open_read_only`]) it holds readers only and never writes a byte, so
/// reads and backups work on a full or read-only disk.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    // Declared before the writer so they close first: the writer, closing last, checkpoints
    // the write-ahead log and removes it (a read-only connection cannot).
    readers: Mutex<Vec<Connection>>,
    /// parking_lot's lock, which is eventually fair: a thread waiting for the writer gets
    /// it within about half a millisecond, however busy another keeps it (an erasure's
    /// steps among a stream of appends: with std's lock the appender could re-take it for
    /// seconds on end).
    writer: Option<parking_lot::Mutex<Connection>>,
    /// Readers open the file as immutable: it sits on a read-only filesystem with no
    /// write-ahead log beside it, so no writer can change it while we read.
    immutable: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every write is a transaction that rolls back on error, so a poisoned lock guards
    // nothing half-done.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqliteStore {
    /// The database's file name inside the data directory.
    pub const FILE_NAME: &'static str = "memtape.db";

    /// Opens the store in `dir`, creating the directory and database if needed.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        Self::open_at(dir.join(Self::FILE_NAME), true)
    }

    /// Opens the existing store in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_at(dir.join(Self::FILE_NAME), false)
    }

    /// Opens the existing store in `dir` for reading only: nothing is written, not even a
    /// migration (a store of an older schema is migrated by opening it for writing once,
    /// which is tried first), so reads work on a full or read-only disk. Appends fail with
    /// [`Error::ReadOnly`].
    pub fn open_read_only(dir: &Path) -> Result<Self> {
        let path = dir.join(Self::FILE_NAME);
        if !path.exists() {
            return Err(Error::Missing(path));
        }
        let mut store = SqliteStore {
            path,
            readers: Mutex::new(Vec::new()),
            writer: None,
            immutable: false,
        };
        let identity = match store.read(|c| identity(c, &store.path)) {
            Ok(found) => found,
            Err(first) => {
                // SQLite could not set up its shared-memory file (a read-only folder, a
                // full disk). With no write-ahead log there is nothing uncommitted to
                // miss: read the file as immutable.
                if wal_has_frames(&store.path) {
                    return Err(first);
                }
                lock(&store.readers).clear();
                store.immutable = true;
                store.read(|c| identity(c, &store.path))?
            }
        };
        if identity.version < SCHEMA_VERSION {
            // One write brings an older store up to date, then it is opened read-only again.
            // Where nothing can be written (a full or read-only disk), the older schema is
            // read as it is: its entries read the same; only what later versions added
            // (the tape id) is missing.
            if Self::open_at(store.path.clone(), false).is_ok() {
                drop(store);
                return Self::open_read_only(dir);
            }
        }
        Ok(store)
    }

    fn open_at(path: PathBuf, create: bool) -> Result<Self> {
        if !create && !path.exists() {
            return Err(Error::Missing(path));
        }
        let open = || -> Result<Connection> {
            if path.exists() {
                // Identity first, on a read-only connection: a file that is not memtape's
                // is refused before anything (the journal mode included) is written to it.
                identity(&read_only_connection(&path, false)?, &path)?;
            }
            let mut writer = Connection::open(&path)?;
            // SQLite falls back to reading when it cannot write the file (a read-only
            // filesystem that still has the WAL's files of an earlier reader): that is a
            // failure to open for writing, diagnosed like any other.
            if writer.is_readonly(rusqlite::MAIN_DB)? {
                return Err(Error::Sqlite(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
                    Some("the database file opened read-only".into()),
                )));
            }
            configure(&writer, &path)?;
            crate::checkpoint::checkpoint_behind(&mut writer, &path)?;
            migrate(&mut writer, &path)?;
            Ok(writer)
        };
        let writer = open().map_err(|e| diagnose(e, &path))?;
        Ok(SqliteStore {
            path,
            readers: Mutex::new(Vec::new()),
            writer: Some(parking_lot::Mutex::new(writer)),
            immutable: false,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs SQLite's integrity check; `"ok"` when the file is sound.
    pub fn integrity_check(&self) -> Result<String> {
        self.read(|c| Ok(c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?))
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = lock(&self.readers).pop();
        let conn = match conn {
            Some(c) => c,
            None => read_only_connection(&self.path, self.immutable)?,
        };
        let out = f(&conn);
        lock(&self.readers).push(conn);
        out
    }

    /// Runs `f` in one IMMEDIATE transaction with the scopes it touches cached, writes the
    /// touched scope projections back and commits (durably) only if `f` succeeds.
    fn write<T>(&self, f: impl FnOnce(&mut Writer<'_>) -> Result<T>) -> Result<T> {
        let writer = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::ReadOnly(self.path.display().to_string()))?;
        let mut conn = writer.lock();
        let run = |conn: &mut Connection| -> Result<T> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut w = Writer {
                tx: &tx,
                scopes: HashMap::new(),
                tenants: HashMap::new(),
            };
            let out = f(&mut w)?;
            for (scope_id, info) in w.scopes.values() {
                save_scope(&tx, *scope_id, info)?;
            }
            tx.commit()?;
            Ok(out)
        };
        run(&mut conn).map_err(|e| diagnose(e, &self.path))
    }
}

/// Turns an SQLite failure to write into one that names the cause, when the folder itself
/// cannot be written (full, read-only, no permission): SQLite's own words ("disk I/O
/// error") do not say which. Other errors pass through.
fn diagnose(err: Error, path: &Path) -> Error {
    use rusqlite::ErrorCode::{CannotOpen, DiskFull, ReadOnly, SystemIoFailure};
    let Error::Sqlite(source) = err else {
        return err;
    };
    if !matches!(
        source.sqlite_error_code(),
        Some(DiskFull | ReadOnly | CannotOpen | SystemIoFailure)
    ) {
        return Error::Sqlite(source);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let probe = dir.join(".memtape-write-probe");
    let tried = std::fs::File::create_new(&probe).and_then(|mut f| {
        use std::io::Write;
        f.write_all(&[0; 4096])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    let cause = match tried {
        Ok(()) => return Error::Sqlite(source),
        Err(e) => match e.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                "the disk is full".to_owned()
            }
            std::io::ErrorKind::ReadOnlyFilesystem => "the filesystem is read-only".to_owned(),
            std::io::ErrorKind::PermissionDenied => {
                format!("no permission to write in {}", dir.display())
            }
            _ => format!("{} cannot be written: {e}", dir.display()),
        },
    };
    Error::Unwritable {
        path: path.to_owned(),
        cause,
        source,
    }
}

/// The writer connection's page cache, in KiB as SQLite's `cache_size` takes it
/// (negative).
const WRITER_CACHE_KIB: i64 = -16 * 1024;

/// How far apart `n` wanted ids may lie for [`Store::vectors_of`] to scan the vectors
/// kept in their range once instead of looking each id up: about twice their number (a
/// page of the tape, or a tenant's part of one where it has at least half the entries).
fn dense_span(n: usize) -> u64 {
    2 * n as u64 + 64
}

/// A read-only connection to `path`; `immutable` reads it without any locking or
/// shared memory (only for a file nothing can be writing).
fn read_only_connection(path: &Path, immutable: bool) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let c = if immutable {
        Connection::open_with_flags(format!("{}?immutable=1", file_uri(path)), flags)?
    } else {
        Connection::open_with_flags(path, flags)?
    };
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    plan_once(&c)?;
    before_erasure(&c)?;
    Ok(c)
}

/// On a store of a schema before erasure (version 3 or 4, read where it cannot be
/// migrated), temporary views in this connection's own `temp` schema, which is searched
/// before `main`, stand in for what it lacks: `entries` with the erasure columns as NULL
/// (such a store has no erased entry), and no unfinished erasure.
fn before_erasure(c: &Connection) -> Result<()> {
    // A file that is not a database fails here; the identity check names that.
    let Ok(version) = c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)) else {
        return Ok(());
    };
    if (1..4).contains(&version) {
        c.execute_batch(
            "CREATE TEMP VIEW IF NOT EXISTS entries AS
             SELECT *, NULL AS erased_by, NULL AS erased_how FROM main.entries",
        )?;
    }
    if (1..5).contains(&version) {
        c.execute_batch(
            "CREATE TEMP VIEW IF NOT EXISTS erasures_pending AS
             SELECT NULL AS receipt, NULL AS tenant, NULL AS plan WHERE 0",
        )?;
    }
    Ok(())
}

/// Copies a write-ahead log into its database and truncates it to nothing, so what a write
/// replaced is left in neither: runs `checkpoint` (a `PRAGMA wal_checkpoint(TRUNCATE)`,
/// answering its first column: 1 when a reader held an older snapshot) every 20 ms until
/// it gets through, or `wait` passes (`false`: the next checkpoint finishes it). For the
/// store's file and the search index's.
pub fn truncate_wal(
    wait: std::time::Duration,
    mut checkpoint: impl FnMut() -> rusqlite::Result<i64>,
) -> rusqlite::Result<bool> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if checkpoint()? == 0 {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Makes SQLite plan each statement once, whatever values are bound to it later.
///
/// By default SQLite plans some statements with the values bound at the time (a `LIMIT ?`,
/// a `col = ?` it weighs as 0 or 1) and marks them to be planned again when those values
/// change; and clearing the bindings — which rusqlite's statement cache does each time a
/// statement goes back to it — re-prepares every statement so marked. Under load that was
/// a fifth of the indexer thread's time, parsing the same scans over and over. Every plan
/// in memtape's files (the store's and the search index's, whose connections call this
/// too) comes from their indexes whatever the values, and no `ANALYZE` statistics are
/// kept, so the query planner stability guarantee loses nothing.
pub fn plan_once(c: &Connection) -> rusqlite::Result<()> {
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// `path` as an SQLite `file:` URI, with the characters URIs reserve escaped.
fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for ch in path.to_string_lossy().chars() {
        match ch {
            '%' | '?' | '#' => uri.push_str(&format!("%{:02X}", ch as u32)),
            c => uri.push(c),
        }
    }
    uri
}

/// Whether a write-ahead log with content sits beside the database (frames a reader
/// needs, which an immutable open would not see).
fn wal_has_frames(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(PathBuf::from(wal)).is_ok_and(|m| m.len() > 0)
}

/// What a database file says about itself.
struct Identity {
    version: i64,
}

/// Reads the file's application id and schema version without writing anything, and
/// refuses a file that is not a memtape store (or is a newer one).
fn identity(conn: &Connection, path: &Path) -> Result<Identity> {
    let not_sqlite = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => Error::NotSqlite(path.to_owned()),
        _ => Error::Sqlite(e),
    };
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(not_sqlite)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(not_sqlite)?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(not_sqlite)?;
    if app != APPLICATION_ID && (app != 0 || tables > 0) {
        return Err(Error::NotMemtape {
            path: path.to_owned(),
            found: app,
        });
    }
    if version > SCHEMA_VERSION {
        return Err(Error::NewerSchema {
            store: path.display().to_string(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(Identity { version })
}

fn configure(conn: &Connection, path: &Path) -> Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    plan_once(conn)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        // Without WAL, readers would block the writer: refuse rather than run degraded.
        return Err(Error::NoWal {
            path: path.to_owned(),
            mode,
        });
    }
    // secure_delete: whatever a write frees (an erased entry's old content) is zeroed, not
    // left in the file's free space.
    conn.execute_batch(
        "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA secure_delete=ON;",
    )?;
    // The writer's page cache: each append reads the rows of the scopes it touches and
    // the right edges of the tape's indexes, a working set that outgrows SQLite's default
    // 2 MB on a tape of many tenants (a thousand scopes an append at random in
    // gigabytes). 16 MB took 1M entries over 1,000 tenants from 15,793 to 18,035 a
    // second (docs/scaling.md, "The write path"); readers keep the default.
    conn.pragma_update(None, "cache_size", WRITER_CACHE_KIB)?;
    Ok(())
}

/// Brings the schema up to date. A store already at this version is only read, so opening
/// it writes nothing (a full disk does not stop it from opening).
fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    if app == APPLICATION_ID && identity(conn, path)?.version == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version = identity(&tx, path)?.version;
    for (v, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(version).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", v as i64 + 1)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.commit()?;
    Ok(())
}

struct Writer<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    scopes: HashMap<Scope, (i64, ScopeInfo)>,
    /// The row ids of the tenants this transaction wrote to.
    tenants: HashMap<String, i64>,
}

impl Writer<'_> {
    /// The row id of `tenant` in `tenants`, added if new.
    fn tenant_id(&mut self, tenant: &str) -> Result<i64> {
        if let Some(id) = self.tenants.get(tenant) {
            return Ok(*id);
        }
        self.tx
            .prepare_cached("INSERT INTO tenants (name) VALUES (?1) ON CONFLICT DO NOTHING")?
            .execute([tenant])?;
        let id: i64 = self
            .tx
            .prepare_cached("SELECT tenant_id FROM tenants WHERE name = ?1")?
            .query_row([tenant], |r| r.get(0))?;
        self.tenants.insert(tenant.to_owned(), id);
        Ok(id)
    }
}

impl Transaction for Writer<'_> {
    fn scope(&mut self, scope: &Scope) -> Result<(i64, ScopeInfo)> {
        if let Some(found) = self.scopes.get(scope) {
            return Ok(found.clone());
        }
        let found = match load_scope(self.tx, scope)? {
            Some(found) => found,
            None => {
                self.tx.execute(
                    "INSERT INTO scopes (tenant, agent, user, session, node) VALUES (?1, ?2, ?3, ?4, ?5)",
                    scope_key(scope),
                )?;
                (self.tx.last_insert_rowid(), ScopeInfo::empty(scope.clone()))
            }
        };
        self.scopes.insert(scope.clone(), found.clone());
        Ok(found)
    }

    fn last_id(&mut self) -> Result<EntryId> {
        last_id(self.tx)
    }

    fn lookup(&mut self, id: EntryId) -> Result<Option<(Scope, Kind)>> {
        let row = self
            .tx
            .prepare_cached(
                "SELECT s.tenant, s.agent, s.user, s.session, s.node, e.kind
                 FROM entries e JOIN scopes s USING (scope_id) WHERE e.id = ?1",
            )?
            .query_row([sql_id(id)], |r| {
                Ok((scope_from_row(r, 0)?, r.get::<_, String>(5)?))
            })
            .optional()?;
        match row {
            None => Ok(None),
            Some((scope, kind)) => Ok(Some((scope?, kind.parse::<Kind>()?))),
        }
    }

    fn insert(&mut self, scope_id: i64, entry: &Entry) -> Result<()> {
        let row = EntryRow::encode(entry)?;
        self.tx
            .prepare_cached(
                "INSERT INTO entries (id, scope_id, kind, name, parent, created_at, payload, meta, erased_by, erased_how)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?
            .execute(params![
                row.id,
                scope_id,
                row.kind,
                row.name,
                row.parent,
                row.created_at,
                row.payload,
                row.meta,
                row.erased_by,
                row.erased_how,
            ])?;
        let tenant = self.tenant_id(entry.scope.tenant())?;
        self.tx
            .prepare_cached("INSERT INTO tenant_entries (tenant_id, id) VALUES (?1, ?2)")?
            .execute(params![tenant, row.id])?;
        let (_, info) = self
            .scopes
            .get_mut(&entry.scope)
            .ok_or_else(|| Error::Corrupt {
                id: sql_id(entry.id),
                why: "scope not loaded".into(),
            })?;
        info.apply(entry);
        Ok(())
    }
}

impl EraseTransaction for Writer<'_> {
    fn entries_after(&mut self, tenant: &str, after: EntryId) -> Result<Vec<Entry>> {
        // CROSS JOIN: the entries by id first (few, after a recent id), then each scope.
        let sql = format!(
            "SELECT s.tenant, s.agent, s.user, s.session, s.node, {} FROM entries e CROSS JOIN scopes s USING (scope_id)
             WHERE e.id > ?1 AND s.tenant = ?2 ORDER BY e.id",
            prefixed_entry_columns()
        );
        let mut stmt = self.tx.prepare_cached(&sql)?;
        let mut rows = stmt.query(params![sql_id(after), tenant])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let scope = scope_from_row(row, 0)??;
            out.push(entry_from_row(&scope, row, 5)??);
        }
        Ok(out)
    }

    fn begin(&mut self) -> Result<()> {
        self.tx.execute("INSERT INTO erasing VALUES (1)", [])?;
        Ok(())
    }

    fn rewrite(&mut self, rewrite: &Rewrite, by: Erasure) -> Result<()> {
        let meta = crate::row::meta_text(rewrite.id, &rewrite.meta)?;
        self.tx
            .prepare_cached(
                "UPDATE entries SET payload = ?2, meta = ?3, name = ?4, erased_by = ?5, erased_how = ?6
                 WHERE id = ?1",
            )?
            .execute(params![
                sql_id(rewrite.id),
                rewrite.payload.to_json().to_string(),
                meta,
                rewrite.payload.name(),
                sql_id(by.by),
                by.how.as_str(),
            ])?;
        // A vector was made of the text the rewrite takes (secure_delete zeroes its bytes).
        self.tx
            .prepare_cached("DELETE FROM vectors WHERE entry = ?1")?
            .execute([sql_id(rewrite.id)])?;
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        self.tx.execute("DELETE FROM erasing", [])?;
        Ok(())
    }

    fn append_receipt(&mut self, receipt: NewEntry) -> Result<Entry> {
        let mut stored = crate::rules::append_checked_in(self, vec![receipt])?;
        stored.pop().ok_or_else(|| Error::Corrupt {
            id: 0,
            why: "an erasure's receipt was not written".into(),
        })
    }

    fn add_pending(&mut self, pending: &Pending) -> Result<()> {
        self.tx.execute(
            "INSERT INTO erasures_pending (receipt, tenant, plan) VALUES (?1, ?2, ?3)",
            params![sql_id(pending.receipt), pending.tenant, pending.to_json()?],
        )?;
        Ok(())
    }

    fn remove_pending(&mut self, receipt: EntryId) -> Result<()> {
        self.tx.execute(
            "DELETE FROM erasures_pending WHERE receipt = ?1",
            [sql_id(receipt)],
        )?;
        Ok(())
    }

    fn scrub_requests(&mut self, tenant: &str, receipt: EntryId) -> Result<()> {
        self.tx.execute(
            "UPDATE request_keys SET fingerprint = 'erased:' || ?2,
                 body = CASE WHEN status IS NULL THEN NULL ELSE CAST('{\"erased\":' || ?2 || '}' AS BLOB) END
             WHERE tenant = ?1",
            params![tenant, sql_id(receipt)],
        )?;
        Ok(())
    }
}

impl StepStore for SqliteStore {
    fn erase_step(&self, f: &mut dyn FnMut(&mut dyn EraseTransaction) -> Result<()>) -> Result<()> {
        self.write(|w| f(w))
    }

    fn pending_erasures(&self) -> Result<Vec<Pending>> {
        self.read(|c| {
            let mut stmt =
                c.prepare_cached("SELECT receipt, plan FROM erasures_pending ORDER BY receipt")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
            rows.map(|r| {
                let (receipt, plan) = r?;
                Pending::from_json(receipt, &plan)
            })
            .collect()
        })
    }

    /// Takes what an erasure left in the write-ahead log out of the files: copies the log
    /// into the database and truncates it to nothing (the freed space in the database's
    /// pages was zeroed as it was freed: the writer runs with `secure_delete`). A reader in
    /// this or another process that still holds an older snapshot keeps the log in use;
    /// this waits up to 10 seconds for it, then says `false`, and the next checkpoint (at
    /// the latest, the writer's close) finishes the job.
    fn wipe(&self) -> Result<bool> {
        let Some(writer) = self.writer.as_ref() else {
            return Ok(false);
        };
        // The writer is taken for each try only, so appends go on between them.
        truncate_wal(std::time::Duration::from_secs(10), || {
            writer
                .lock()
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        })
        .map_err(|e| diagnose(e.into(), &self.path))
    }
}

/// The entries with these ids (a chunk of at most 500) that exist in `tenant`, in no
/// particular order.
fn entries_by_id(conn: &Connection, tenant: &str, ids: &[EntryId]) -> Result<Vec<Entry>> {
    let marks = vec!["?"; ids.len()].join(", ");
    // CROSS JOIN keeps SQLite to this order: the entries by id, then each one's scope.
    // Left to choose, it walked every scope of the tenant and probed each for the ids
    // (0.6 s a chunk with 9,000 scopes).
    let sql = format!(
        "SELECT s.tenant, s.agent, s.user, s.session, s.node, {} FROM entries e CROSS JOIN scopes s USING (scope_id)
         WHERE s.tenant = ? AND e.id IN ({marks})",
        prefixed_entry_columns()
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut args: Vec<SqlValue> = vec![SqlValue::Text(tenant.to_owned())];
    args.extend(ids.iter().map(|id| SqlValue::Integer(sql_id(*id))));
    let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
    let mut out = Vec::with_capacity(ids.len());
    while let Some(row) = rows.next()? {
        let scope = scope_from_row(row, 0)??;
        out.push(entry_from_row(&scope, row, 5)??);
    }
    Ok(out)
}

/// The highest id given (the next entry's comes after it).
fn last_id(conn: &Connection) -> Result<EntryId> {
    let id: Option<i64> = conn.query_row("SELECT max(id) FROM entries", [], |r| r.get(0))?;
    Ok(unsql(id.unwrap_or(0)))
}

/// The highest id a follower of the tape may read ([`Store::last_id`]): the one before
/// the receipt of the first erasure not yet ended, else the highest.
fn followed_id(conn: &Connection) -> Result<EntryId> {
    let id: Option<i64> = conn.query_row(
        "SELECT coalesce((SELECT min(receipt) - 1 FROM erasures_pending), (SELECT max(id) FROM entries))",
        [],
        |r| r.get(0),
    )?;
    Ok(unsql(id.unwrap_or(0)))
}

fn scope_from_row(r: &Row<'_>, at: usize) -> rusqlite::Result<Result<Scope>> {
    Ok(scope_from_key(
        r.get(at)?,
        r.get(at + 1)?,
        r.get(at + 2)?,
        r.get(at + 3)?,
        r.get(at + 4)?,
    ))
}

const SCOPE_COLUMNS: &str = "scope_id, tenant, agent, user, session, node, entries, messages, head, last_id, last_consolidated, first_at, last_at";

fn info_from_row(r: &Row<'_>) -> rusqlite::Result<Result<(i64, ScopeInfo)>> {
    let scope = match scope_from_row(r, 1)? {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let id = |v: Option<i64>| v.map(unsql);
    Ok(Ok((
        r.get(0)?,
        ScopeInfo {
            scope,
            entries: r.get::<_, i64>(6)? as u64,
            messages: r.get::<_, i64>(7)? as u64,
            head: id(r.get(8)?),
            last_id: id(r.get(9)?),
            last_consolidated: unsql(r.get(10)?),
            first_at: r.get::<_, Option<i64>>(11)?.map(from_nanos),
            last_at: r.get::<_, Option<i64>>(12)?.map(from_nanos),
        },
    )))
}

fn load_scope(conn: &Connection, scope: &Scope) -> Result<Option<(i64, ScopeInfo)>> {
    let sql = format!(
        "SELECT {SCOPE_COLUMNS} FROM scopes WHERE tenant = ?1 AND agent = ?2 AND user = ?3 AND session = ?4 AND node = ?5"
    );
    conn.prepare_cached(&sql)?
        .query_row(scope_key(scope), info_from_row)
        .optional()?
        .transpose()
}

fn save_scope(conn: &Connection, scope_id: i64, info: &ScopeInfo) -> Result<()> {
    let id = |v: Option<EntryId>| v.map(sql_id);
    conn.prepare_cached(
        "UPDATE scopes SET entries = ?2, messages = ?3, head = ?4, last_id = ?5, last_consolidated = ?6,
         first_at = ?7, last_at = ?8 WHERE scope_id = ?1",
    )?
    .execute(params![
        scope_id,
        info.entries as i64,
        info.messages as i64,
        id(info.head),
        id(info.last_id),
        sql_id(info.last_consolidated),
        info.first_at.map(to_nanos).transpose()?,
        info.last_at.map(to_nanos).transpose()?,
    ])?;
    Ok(())
}

const ENTRY_COLUMNS: &str = "id, kind, parent, created_at, payload, meta, erased_by, erased_how";

/// [`ENTRY_COLUMNS`] qualified with the `e.` table alias.
fn prefixed_entry_columns() -> String {
    ENTRY_COLUMNS
        .split(", ")
        .map(|c| format!("e.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The statement of [`Store::entries_after`].
fn entries_after_query() -> String {
    format!(
        "SELECT s.tenant, s.agent, s.user, s.session, s.node, {} FROM entries e JOIN scopes s USING (scope_id)
         WHERE e.id > ?1
           AND e.id < (SELECT coalesce(min(receipt), 9223372036854775807) FROM erasures_pending)
         ORDER BY e.id LIMIT ?2",
        prefixed_entry_columns()
    )
}

/// The statement and arguments of [`Store::scan`] in the scope with row id `scope_id`.
fn scan_query(scope_id: i64, filter: &Filter) -> Result<(String, Vec<SqlValue>)> {
    let mut sql = format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE scope_id = ?");
    let mut args: Vec<SqlValue> = vec![SqlValue::Integer(scope_id)];
    if let Some(a) = filter.after {
        sql.push_str(" AND id > ?");
        args.push(SqlValue::Integer(sql_id(a)));
    }
    if let Some(b) = filter.before {
        sql.push_str(" AND id < ?");
        args.push(SqlValue::Integer(sql_id(b)));
    }
    if !filter.kinds.is_empty() {
        sql.push_str(&format!(
            " AND kind IN ({})",
            vec!["?"; filter.kinds.len()].join(", ")
        ));
        args.extend(
            filter
                .kinds
                .iter()
                .map(|k| SqlValue::Text(k.as_str().to_owned())),
        );
    }
    if let Some(n) = &filter.name {
        sql.push_str(" AND name = ?");
        args.push(SqlValue::Text(n.clone()));
    }
    if let Some(s) = filter.since {
        sql.push_str(" AND created_at >= ?");
        args.push(SqlValue::Integer(to_nanos(s)?));
    }
    if let Some(u) = filter.until {
        sql.push_str(" AND created_at < ?");
        args.push(SqlValue::Integer(to_nanos(u)?));
    }
    sql.push_str(match filter.order {
        Order::Asc => " ORDER BY id ASC",
        Order::Desc => " ORDER BY id DESC",
    });
    if let Some(l) = filter.limit {
        sql.push_str(" LIMIT ?");
        args.push(SqlValue::Integer(i64::try_from(l).unwrap_or(i64::MAX)));
    }
    Ok((sql, args))
}

/// Reads the entry columns (in [`ENTRY_COLUMNS`] order) starting at column `at`.
fn entry_from_row(scope: &Scope, r: &Row<'_>, at: usize) -> rusqlite::Result<Result<Entry>> {
    let kind: String = r.get(at + 1)?;
    let payload: String = r.get(at + 4)?;
    let meta: String = r.get(at + 5)?;
    let id: i64 = r.get(at)?;
    let how: Option<String> = r.get(at + 7)?;
    let erased = match crate::row::erasure(id, r.get(at + 6)?, how.as_deref()) {
        Ok(erased) => erased,
        Err(e) => return Ok(Err(e)),
    };
    Ok(decode(
        id,
        scope,
        &kind,
        r.get(at + 2)?,
        r.get(at + 3)?,
        &payload,
        &meta,
    )
    .map(|entry| Entry { erased, ..entry }))
}

impl Store for SqliteStore {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        self.write(|w| append_in(w, entries))
    }

    fn append_reserved(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        self.write(|w| crate::rules::append_checked_in(w, entries))
    }

    fn append_then(
        &self,
        entries: Vec<NewEntry>,
        then: &mut dyn FnMut(&[Entry]) -> Vec<NewEntry>,
    ) -> Result<(Vec<Entry>, Vec<Entry>)> {
        self.write(|w| {
            let stored = append_in(w, entries)?;
            let derived = then(&stored);
            let derived = append_in(w, derived)?;
            Ok((stored, derived))
        })
    }

    fn restore(&self, entries: Vec<Entry>) -> Result<Restored> {
        self.write(|w| restore_in(w, entries))
    }

    fn erase_with(
        &self,
        request: &EraseRequest,
        before_end: crate::erase::BeforeEnd<'_>,
    ) -> Result<EraseOutcome> {
        crate::erase::erase(self, request, before_end)
    }

    fn finish_erasures_with(
        &self,
        before_end: crate::erase::BeforeEnd<'_>,
    ) -> Result<Vec<EraseOutcome>> {
        if self.writer.is_none() {
            return Ok(Vec::new());
        }
        crate::erase::finish(self, before_end)
    }

    fn get_many(&self, tenant: &str, ids: &[EntryId]) -> Result<Vec<Entry>> {
        let mut found: HashMap<u64, Entry> = HashMap::new();
        self.read(|c| {
            // One statement per chunk, well under SQLite's limit on bound parameters.
            for chunk in ids.chunks(500) {
                found.extend(
                    entries_by_id(c, tenant, chunk)?
                        .into_iter()
                        .map(|e| (e.id.0, e)),
                );
            }
            Ok(())
        })?;
        Ok(ids.iter().filter_map(|id| found.remove(&id.0)).collect())
    }

    fn claim_request(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Claim> {
        crate::requests::check_key(key)?;
        self.write(|w| {
            w.tx.execute(
                "DELETE FROM request_keys WHERE created_at < ?1",
                [crate::requests::expired_before(now)],
            )?;
            let claimed = w.tx.execute(
                "INSERT INTO request_keys (tenant, key, fingerprint, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT DO NOTHING",
                rusqlite::params![tenant, key, fingerprint, now.timestamp()],
            )?;
            if claimed == 1 {
                return Ok(Claim::Claimed);
            }
            let (fingerprint, status, body): (String, Option<u16>, Option<Vec<u8>>) = w.tx.query_row(
                "SELECT fingerprint, status, body FROM request_keys WHERE tenant = ?1 AND key = ?2",
                [tenant, key],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            Ok(match status {
                Some(status) => Claim::Answered {
                    fingerprint,
                    status,
                    body: body.unwrap_or_default(),
                },
                None => Claim::Running { fingerprint },
            })
        })
    }

    fn finish_request(&self, tenant: &str, key: &str, status: u16, body: &[u8]) -> Result<()> {
        self.write(|w| {
            w.tx.execute(
                "UPDATE request_keys SET status = ?3, body = ?4 WHERE tenant = ?1 AND key = ?2",
                rusqlite::params![tenant, key, status, body],
            )?;
            Ok(())
        })
    }

    fn release_request(&self, tenant: &str, key: &str) -> Result<()> {
        self.write(|w| {
            w.tx.execute(
                "DELETE FROM request_keys WHERE tenant = ?1 AND key = ?2 AND status IS NULL",
                [tenant, key],
            )?;
            Ok(())
        })
    }

    fn erasures_under_way(&self) -> Result<Vec<EntryId>> {
        Ok(<Self as crate::erase::StepStore>::pending_erasures(self)?
            .into_iter()
            .map(|p| p.receipt)
            .collect())
    }

    fn vectors(
        &self,
        tenant: &str,
        embedder: &str,
        ids: &[EntryId],
    ) -> Result<Vec<(EntryId, Vec<u8>)>> {
        let wanted: Vec<(&str, EntryId)> = ids.iter().map(|id| (tenant, *id)).collect();
        self.vectors_of(embedder, &wanted)
    }

    fn vectors_of(
        &self,
        embedder: &str,
        wanted: &[(&str, EntryId)],
    ) -> Result<Vec<(EntryId, Vec<u8>)>> {
        let (Some(lo), Some(hi)) = (
            wanted.iter().map(|(_, id)| *id).min(),
            wanted.iter().map(|(_, id)| *id).max(),
        ) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(wanted.len());
        if hi.0 - lo.0 <= dense_span(wanted.len()) {
            // The ids lie close together (a page of the tape): one scan of the vectors
            // kept in their range, each row checked against the tenant its id was asked
            // with. A fresh page has none kept, and costs one probe instead of one a row.
            let asked: HashMap<EntryId, Vec<&str>> =
                wanted.iter().fold(HashMap::new(), |mut m, (tenant, id)| {
                    m.entry(*id).or_default().push(*tenant);
                    m
                });
            self.read(|c| {
                let mut stmt = c.prepare_cached(
                    "SELECT v.entry, v.vec, s.tenant FROM vectors v
                     CROSS JOIN entries e ON e.id = v.entry CROSS JOIN scopes s USING (scope_id)
                     WHERE v.entry BETWEEN ?1 AND ?2
                       AND v.embedder_id = (SELECT embedder_id FROM embedders WHERE name = ?3)",
                )?;
                let mut rows = stmt.query(params![sql_id(lo), sql_id(hi), embedder])?;
                while let Some(r) = rows.next()? {
                    let id = unsql(r.get(0)?);
                    let tenant: String = r.get(2)?;
                    if asked.get(&id).is_some_and(|t| t.contains(&tenant.as_str())) {
                        out.push((id, r.get::<_, Vec<u8>>(1)?));
                    }
                }
                Ok(())
            })?;
        } else {
            // One reading connection and one statement for every id, each with its tenant.
            self.read(|c| {
                let mut stmt = c.prepare_cached(
                    "SELECT v.vec FROM entries e CROSS JOIN scopes s USING (scope_id)
                     CROSS JOIN vectors v ON v.entry = e.id
                     WHERE e.id = ?1 AND s.tenant = ?2
                       AND v.embedder_id = (SELECT embedder_id FROM embedders WHERE name = ?3)",
                )?;
                for (tenant, id) in wanted {
                    if let Some(vec) = stmt
                        .query_row(params![sql_id(*id), tenant, embedder], |r| {
                            r.get::<_, Vec<u8>>(0)
                        })
                        .optional()?
                    {
                        out.push((*id, vec));
                    }
                }
                Ok(())
            })?;
        }
        out.sort_by_key(|(id, _)| *id);
        out.dedup_by_key(|(id, _)| *id);
        Ok(out)
    }

    fn put_vectors(&self, embedder: &str, vectors: &[NewVector]) -> Result<()> {
        crate::vectors::check(embedder, vectors)?;
        if vectors.is_empty() {
            return Ok(());
        }
        let writer = self
            .writer
            .as_ref()
            .ok_or_else(|| Error::ReadOnly(self.path.display().to_string()))?;
        let mut conn = writer.lock();
        // Vectors can be made again from the tape: their commit does not wait for the disk
        // (in WAL mode the next durable commit, an append's, syncs them too).
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let run = |conn: &mut Connection| -> Result<()> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT INTO embedders (name) VALUES (?1) ON CONFLICT DO NOTHING",
                [embedder],
            )?;
            let embedder_id: i64 = tx.query_row(
                "SELECT embedder_id FROM embedders WHERE name = ?1",
                [embedder],
                |r| r.get(0),
            )?;
            let mut mark = tx.prepare_cached("SELECT erased_by FROM entries WHERE id = ?1")?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO vectors (entry, embedder_id, vec) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            )?;
            for v in vectors {
                let found: Option<Option<i64>> =
                    mark.query_row([sql_id(v.id)], |r| r.get(0)).optional()?;
                let Some(erased_by) = found else {
                    return Err(Error::BadVector(format!(
                        "entry {} is not on the tape",
                        v.id
                    )));
                };
                // Kept only if the entry is still as the embedder read it.
                if erased_by.map(unsql) == v.erased_by {
                    insert.execute(params![sql_id(v.id), embedder_id, v.bytes])?;
                }
            }
            drop((mark, insert));
            tx.commit()?;
            Ok(())
        };
        let out = run(&mut conn).map_err(|e| diagnose(e, &self.path));
        let restored = conn.pragma_update(None, "synchronous", "FULL");
        out?;
        restored?;
        Ok(())
    }

    fn lock(&self, tenant: &str, name: &str, wait: Wait) -> Result<Option<StoreLock>> {
        if self.writer.is_none() {
            // A lock guards a write, and this store cannot write.
            return Err(Error::ReadOnly(self.path.display().to_string()));
        }
        file_lock(&lock_dir(&self.path), tenant, name, wait)
    }

    fn entries_after(&self, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(&entries_after_query())?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut rows = stmt.query(params![sql_id(after), limit])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let scope = scope_from_row(row, 0)??;
                out.push(entry_from_row(&scope, row, 5)??);
            }
            Ok(out)
        })
    }

    fn entries_after_in(&self, tenant: &str, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        self.read(|c| {
            // The tenant's ids in order first, then each entry and its scope.
            let sql = format!(
                "SELECT s.tenant, s.agent, s.user, s.session, s.node, {}
                 FROM tenant_entries te CROSS JOIN entries e ON e.id = te.id
                 CROSS JOIN scopes s USING (scope_id)
                 WHERE te.tenant_id = (SELECT tenant_id FROM tenants WHERE name = ?1)
                   AND te.id > ?2
                   AND te.id < (SELECT coalesce(min(receipt), 9223372036854775807) FROM erasures_pending)
                 ORDER BY te.id LIMIT ?3",
                prefixed_entry_columns()
            );
            let mut stmt = c.prepare_cached(&sql)?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut rows = stmt.query(params![tenant, sql_id(after), limit])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let scope = scope_from_row(row, 0)??;
                out.push(entry_from_row(&scope, row, 5)??);
            }
            Ok(out)
        })
    }

    fn get(&self, tenant: &str, id: EntryId) -> Result<Option<Entry>> {
        self.read(|c| {
            // `LIMIT +?` for the reason given in `scan`.
            let sql = format!(
                "SELECT s.tenant, s.agent, s.user, s.session, s.node, {} FROM entries e JOIN scopes s USING (scope_id)
                 WHERE e.id = ?1 AND s.tenant = ?2",
                prefixed_entry_columns()
            );
            let mut stmt = c.prepare_cached(&sql)?;
            let mut rows = stmt.query(params![sql_id(id), tenant])?;
            let Some(row) = rows.next()? else {
                return Ok(None);
            };
            let scope = scope_from_row(row, 0)??;
            let entry = entry_from_row(&scope, row, 5)??;
            Ok(Some(entry))
        })
    }

    fn scan(&self, scope: &Scope, filter: &Filter) -> Result<Vec<Entry>> {
        self.read(|c| {
            let Some((scope_id, _)) = load_scope(c, scope)? else {
                return Ok(Vec::new());
            };
            let (sql, args) = scan_query(scope_id, filter)?;
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map(params_from_iter(args), |r| entry_from_row(scope, r, 0))?;
            rows.map(|r| r?).collect()
        })
    }

    fn scope_info(&self, scope: &Scope) -> Result<Option<ScopeInfo>> {
        self.read(|c| Ok(load_scope(c, scope)?.map(|(_, info)| info)))
    }

    fn previous_messages(&self, wanted: &[(Scope, EntryId)]) -> Result<Vec<Option<Entry>>> {
        let kinds: Vec<String> = memtape_core::Kind::conversational()
            .map(|k| format!("'{}'", k.as_str()))
            .collect();
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE scope_id = ?1 AND id < ?2
               AND kind IN ({}) ORDER BY id DESC LIMIT 1",
            kinds.join(", ")
        );
        // One reading connection and one statement for every scope.
        self.read(|c| {
            let mut stmt = c.prepare_cached(&sql)?;
            wanted
                .iter()
                .map(|(scope, before)| {
                    let Some((scope_id, _)) = load_scope(c, scope)? else {
                        return Ok(None);
                    };
                    stmt.query_row(params![scope_id, sql_id(*before)], |r| {
                        entry_from_row(scope, r, 0)
                    })
                    .optional()?
                    .transpose()
                })
                .collect()
        })
    }

    fn scopes(&self, tenant: &str) -> Result<Vec<ScopeInfo>> {
        self.read(|c| {
            let sql = format!(
                "SELECT {SCOPE_COLUMNS} FROM scopes WHERE tenant = ?1 AND entries > 0 ORDER BY agent, user, session, node"
            );
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map([tenant], info_from_row)?;
            rows.map(|r| Ok(r??.1)).collect()
        })
    }

    fn last_erasure(&self) -> Result<EntryId> {
        self.read(|c| {
            // Down the erasure index from the top, past erasures not yet ended.
            let id: Option<i64> = c
                .query_row(
                    "SELECT erased_by FROM entries
                     WHERE erased_by IS NOT NULL
                       AND erased_by NOT IN (SELECT receipt FROM erasures_pending)
                     ORDER BY erased_by DESC LIMIT 1",
                    [],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(unsql(id.unwrap_or(0)))
        })
    }

    fn tenants(&self) -> Result<Vec<String>> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT DISTINCT tenant FROM scopes WHERE entries > 0 ORDER BY tenant",
            )?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
        })
    }

    fn tape_id(&self) -> Result<String> {
        self.read(|c| Ok(c.query_row("SELECT id FROM tape", [], |r| r.get(0))?))
    }

    fn last_id(&self) -> Result<EntryId> {
        self.read(followed_id)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests panic on failure by design.

    use chrono::DateTime;
    use memtape_core::{Filter, Kind, Message, NewEntry, Order, Payload, Scope};
    use rusqlite::StatementStatus;

    use super::*;

    /// How many times SQLite has prepared `sql` again since it was first prepared on a
    /// reader connection.
    fn reprepared(store: &SqliteStore, sql: &str) -> i32 {
        store
            .read(|c| {
                Ok(c.prepare_cached(sql)?
                    .get_status(StatementStatus::RePrepare))
            })
            .unwrap()
    }

    #[test]
    fn scans_are_planned_once_not_each_time_they_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(dir.path()).unwrap();
        let scope = Scope::agent("t", "a").unwrap().with_session("s").unwrap();
        let user = |text: &str| {
            NewEntry::new(
                scope.clone(),
                Payload::Message(Message::user(text)),
                DateTime::UNIX_EPOCH,
            )
        };
        store
            .append(vec![user("one"), user("two"), user("three")])
            .unwrap();
        let filter = |n: usize| Filter {
            kinds: vec![Kind::Message],
            order: Order::Desc,
            limit: Some(n),
            ..Filter::default()
        };
        for n in 1..=20 {
            assert_eq!(
                store.scan(&scope, &filter(n % 4)).unwrap().len(),
                (n % 4).min(3)
            );
            assert_eq!(
                store.entries_after(EntryId(0), n % 4).unwrap().len(),
                (n % 4).min(3)
            );
        }
        let scope_id = store
            .read(|c| Ok(load_scope(c, &scope)?.unwrap().0))
            .unwrap();
        let (scan, _) = scan_query(scope_id, &filter(1)).unwrap();
        // Without the planner's stability guarantee: 20 each (once per run).
        assert!(
            reprepared(&store, &scan) <= 1,
            "{}",
            reprepared(&store, &scan)
        );
        let after = entries_after_query();
        assert!(
            reprepared(&store, &after) <= 1,
            "{}",
            reprepared(&store, &after)
        );
    }
}
