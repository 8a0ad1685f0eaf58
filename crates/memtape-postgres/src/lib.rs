//! memtape-postgres: the tape in PostgreSQL ([`PostgresStore`]), behind the same
//! [`Store`] trait and write rules as the embedded SQLite store, so that several memtape
//! servers can share one database.
//!
//! # Ids in commit order
//!
//! Projections (each server's search index) follow the tape by id: they read the entries
//! after the last id they have seen. That is only safe if an id can never commit after a
//! higher one has been read. Every write transaction therefore starts by locking the one
//! row of `memtape_tape` (`SELECT … FOR UPDATE`), takes its ids from the counter there and
//! holds the lock until it commits. The next writer gets the row only after that commit
//! (PostgreSQL makes a transaction visible before it releases its locks), so ids are given
//! and committed in the same order, across tenants and across servers, and a reader that
//! has seen id `n` has seen every id below it. The price is one writer at a time per
//! database: a batch is one transaction, so bulk writers send batches (the measured rates
//! are in docs/scaling.md).
//!
//! # Durability and isolation
//!
//! Every connection commits with `synchronous_commit = on`, so an append that returns has
//! reached the server's disk. A batch is one transaction: all of it or none. Entries
//! cannot be updated, deleted or truncated (triggers refuse it, whoever connects), and
//! every read is confined to a scope or a tenant, as in SQLite.
//!
//! # TLS
//!
//! Every connection goes through one rustls connector, set up from libpq's `sslmode`
//! (`disable`, `prefer` — the default —, `require`, `verify-ca`, `verify-full`) and
//! `sslrootcert` (a PEM file of root certificates, or `system`) in the address, with
//! libpq's meanings; without `sslrootcert` the verify modes trust the platform's roots.
//! A managed database is reached with
//! `postgres://user:password@host:5432/db?sslmode=verify-full&sslrootcert=/path/ca.pem`.
//!
//! ```no_run
//! use memtape_postgres::PostgresStore;
//! use memtape_store::Store;
//!
//! let store = PostgresStore::connect("postgres://memtape@127.0.0.1:5432/memtape")?;
//! println!("tape {} at id {}", store.tape_id()?, store.last_id()?);
//! # Ok::<(), memtape_store::Error>(())
//! ```

mod conn;
mod schema;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;

use std::collections::HashMap;

use memtape_core::{Entry, EntryId, Filter, Kind, NewEntry, Order, Scope};
use memtape_store::row::{
    EntryRow, decode, from_nanos, scope_from_key, scope_key, sql_id, to_nanos, unsql,
};
use memtape_store::rules::{Transaction, append_in, restore_in};
use memtape_store::{
    Claim, EraseOutcome, EraseRequest, Error, NewVector, Restored, ScopeInfo, Store, StoreLock,
    Wait,
};
use postgres::Row;
use postgres::types::ToSql;
use sha2::{Digest, Sha256};

use crate::conn::{Conn, Pool, Target};
pub use crate::conn::{MAX_OPEN, shown};
pub use crate::schema::SCHEMA_VERSION;

/// The result type of this crate (its errors are the store's: [`memtape_store::Error`]).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The channel every commit of new entries notifies (with the last id committed), so that
/// followers of the tape wake at once instead of at their next poll.
pub const CHANNEL: &str = "memtape_tape";

/// How many rows one INSERT statement carries at most.
const INSERT_CHUNK: usize = 5_000;

/// How many bytes of payload and metadata one INSERT statement carries at most (beyond one
/// row): PostgreSQL takes at most 1 GiB in one message, and an entry may take 256 MiB.
const INSERT_BYTES: usize = 64 << 20;

/// `rows` cut into runs of at most [`INSERT_CHUNK`] rows and, unless one row alone is
/// larger, [`INSERT_BYTES`] bytes, in order.
fn statements<T>(rows: &[T], bytes: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let b = bytes(row);
        if i > start && (i - start == INSERT_CHUNK || size + b > INSERT_BYTES) {
            out.push(&rows[start..i]);
            (start, size) = (i, 0);
        }
        size += b;
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

/// The tape in a PostgreSQL database.
pub struct PostgresStore {
    target: Target,
    pool: Pool,
    /// The connection that listens on [`CHANNEL`], opened by the first
    /// [`Store::wait_for_writes`]: notifications that come between two waits queue on it.
    listener: std::sync::Mutex<Option<postgres::Client>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("address", &self.target.address())
            .field("read_only", &self.target.read_only())
            .finish()
    }
}

/// Whether `address` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(address: &str) -> bool {
    let lower = address.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// Creates the database `name` on the cluster that `admin_url` reaches (the role needs
/// CREATEDB) and returns the address of the new database: for benchmarks and tests that
/// want a store of their own. `name` must be a plain identifier (letters, digits, `_`).
pub fn create_database(admin_url: &str, name: &str) -> Result<String> {
    let target = Target::parse(admin_url, false)?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(target.fail(format!("{name:?} is not a plain database name")));
    }
    let mut client = target.connect()?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .map_err(|e| target.err(e))?;
    Ok(with_database(admin_url, name))
}

/// Drops the database `name` (closing any connection still open to it), if it exists.
pub fn drop_database(admin_url: &str, name: &str) -> Result<()> {
    let target = Target::parse(admin_url, false)?;
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(target.fail(format!("{name:?} is not a plain database name")));
    }
    let mut client = target.connect()?;
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .map_err(|e| target.err(e))
}

/// `url` with its database name replaced by `db` (`postgres://user@host:port/db?options`).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |i| after_scheme + i);
    format!("{}/{db}{query}", &base[..host_end])
}

impl PostgresStore {
    /// The size of the database on disk, in bytes (`pg_database_size`).
    pub fn database_bytes(&self) -> Result<i64> {
        self.read(|c, t| {
            Ok(
                c.query_one(t, "SELECT pg_database_size(current_database())", &[])?
                    .get(0),
            )
        })
    }

    /// Connects to the database at `url` (a `postgres://` URL or a libpq key=value
    /// string, with `sslmode` and `sslrootcert` as libpq reads them), creating memtape's
    /// tables or migrating them when needed. A database whose schema is newer than this
    /// build is refused untouched; a server certificate the mode refuses is an error
    /// saying so.
    pub fn connect(url: &str) -> Result<Self> {
        Self::open(Target::parse(url, false)?)
    }

    /// Connects for reading only: the connections cannot write (the server enforces it),
    /// nothing is migrated, and appends fail with [`Error::ReadOnly`].
    pub fn connect_read_only(url: &str) -> Result<Self> {
        Self::open(Target::parse(url, true)?)
    }

    fn open(target: Target) -> Result<Self> {
        let store = PostgresStore {
            target,
            pool: Pool::default(),
            listener: std::sync::Mutex::new(None),
        };
        let mut conn = store.pool.take(&store.target)?;
        schema::prepare(&mut conn, &store.target)?;
        store.pool.give(conn);
        Ok(store)
    }

    /// The database's address as messages show it (`postgres://user@host:port/db`, never
    /// the password).
    pub fn address(&self) -> &str {
        self.target.address()
    }

    fn read<T>(&self, f: impl FnOnce(&mut Conn, &Target) -> Result<T>) -> Result<T> {
        let mut conn = self.pool.take(&self.target)?;
        let out = f(&mut conn, &self.target);
        self.pool.give(conn);
        out
    }

    /// Runs `f` in one transaction that holds the tape's row lock from its start to its
    /// commit (see the crate documentation), then writes the new entries, the touched
    /// scope projections and the counter, notifies [`CHANNEL`] and commits. Nothing is
    /// written when `f` or any step fails.
    fn write<T>(&self, f: impl FnOnce(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        if self.target.read_only() {
            return Err(Error::ReadOnly(self.target.address().to_owned()));
        }
        let target = &self.target;
        let mut conn = self.pool.take(target)?;
        let run = |conn: &mut Conn| -> Result<T> {
            conn.client
                .batch_execute("BEGIN")
                .map_err(|e| target.err(e))?;
            let last: i64 = conn
                .query_one(target, "SELECT last_id FROM memtape_tape FOR UPDATE", &[])?
                .get(0);
            let mut tx = Tx {
                conn,
                target,
                last: unsql(last),
                scopes: HashMap::new(),
                pending: HashMap::new(),
                rows: Vec::new(),
                rewrites: Vec::new(),
            };
            let out = f(&mut tx)?;
            tx.flush()?;
            conn.client
                .batch_execute("COMMIT")
                .map_err(|e| target.err(e))?;
            Ok(out)
        };
        let out = run(&mut conn);
        match &out {
            Ok(_) => self.pool.give(conn),
            // A connection that cannot roll back is in no state to be used again.
            Err(_) => {
                if conn.client.batch_execute("ROLLBACK").is_ok() {
                    self.pool.give(conn);
                } else {
                    self.pool.discard(conn);
                }
            }
        }
        out
    }
}

/// One write transaction: the scopes it has touched (their ids and projections so far),
/// the entries it will insert, and the last id given.
struct Tx<'a> {
    conn: &'a mut Conn,
    target: &'a Target,
    last: EntryId,
    scopes: HashMap<Scope, (i64, ScopeInfo)>,
    /// Where each entry of this transaction belongs, for references within the batch.
    pending: HashMap<EntryId, (Scope, Kind)>,
    rows: Vec<(i64, EntryRow, String)>,
    /// An erasure's rewrites, written together when it ends.
    rewrites: Vec<RewriteRow>,
}

/// One entry's new content, as an erasure writes it.
struct RewriteRow {
    id: i64,
    payload: String,
    meta: String,
    name: Option<String>,
    by: i64,
    how: &'static str,
}

const SCOPE_COLUMNS: &str = r#"scope_id, tenant, agent, "user", session, node, entries, messages, head, last_id, last_consolidated, first_at, last_at"#;

fn scope_of(r: &Row, at: usize) -> Result<Scope> {
    scope_from_key(
        r.get(at),
        r.get(at + 1),
        r.get(at + 2),
        r.get(at + 3),
        r.get(at + 4),
    )
}

fn info_of(r: &Row) -> Result<(i64, ScopeInfo)> {
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok((
        r.get(0),
        ScopeInfo {
            scope: scope_of(r, 1)?,
            entries: count(r.get(6)),
            messages: count(r.get(7)),
            head: r.get::<_, Option<i64>>(8).map(unsql),
            last_id: r.get::<_, Option<i64>>(9).map(unsql),
            last_consolidated: unsql(r.get(10)),
            first_at: r.get::<_, Option<i64>>(11).map(from_nanos),
            last_at: r.get::<_, Option<i64>>(12).map(from_nanos),
        },
    ))
}

fn load_scope(conn: &mut Conn, target: &Target, scope: &Scope) -> Result<Option<(i64, ScopeInfo)>> {
    let [tenant, agent, user, session, node] = scope_key(scope);
    let sql = format!(
        r#"SELECT {SCOPE_COLUMNS} FROM memtape_scopes
           WHERE tenant = $1 AND agent = $2 AND "user" = $3 AND session = $4 AND node = $5"#
    );
    conn.query_opt(target, &sql, &[&tenant, &agent, &user, &session, &node])?
        .map(|r| info_of(&r))
        .transpose()
}

/// The columns an entry is read with, after the five of its scope.
const ENTRY_SELECT: &str = r#"SELECT s.tenant, s.agent, s."user", s.session, s.node,
    e.id, e.kind, e.parent, e.created_at, e.payload, e.meta, e.erased_by, e.erased_how
    FROM memtape_entries e JOIN memtape_scopes s USING (scope_id)"#;

/// The columns of an entry without its scope, as [`entry_in`] reads them.
const ENTRY_COLUMNS: &str = "id, kind, parent, created_at, payload, meta, erased_by, erased_how";

fn entry_of(r: &Row) -> Result<Entry> {
    let scope = scope_of(r, 0)?;
    entry_in(&scope, r, 5)
}

/// The entry whose columns ([`ENTRY_COLUMNS`]) start at `at`.
fn entry_in(scope: &Scope, r: &Row, at: usize) -> Result<Entry> {
    let id: i64 = r.get(at);
    let erased = memtape_store::row::erasure(id, r.get(at + 6), r.get(at + 7))?;
    decode(
        id,
        scope,
        r.get(at + 1),
        r.get(at + 2),
        r.get(at + 3),
        r.get(at + 4),
        r.get(at + 5),
    )
    .map(|entry| Entry { erased, ..entry })
}

impl Transaction for Tx<'_> {
    fn last_id(&mut self) -> Result<EntryId> {
        Ok(self.last)
    }

    fn scope(&mut self, scope: &Scope) -> Result<(i64, ScopeInfo)> {
        if let Some(found) = self.scopes.get(scope) {
            return Ok(found.clone());
        }
        let found = match load_scope(self.conn, self.target, scope)? {
            Some(found) => found,
            None => {
                let [tenant, agent, user, session, node] = scope_key(scope);
                let id: i64 = self
                    .conn
                    .query_one(
                        self.target,
                        r#"INSERT INTO memtape_scopes (tenant, agent, "user", session, node)
                           VALUES ($1, $2, $3, $4, $5) RETURNING scope_id"#,
                        &[&tenant, &agent, &user, &session, &node],
                    )?
                    .get(0);
                (id, ScopeInfo::empty(scope.clone()))
            }
        };
        self.scopes.insert(scope.clone(), found.clone());
        Ok(found)
    }

    fn load_scopes(&mut self, scopes: &[&Scope]) -> Result<()> {
        let missing: Vec<&Scope> = scopes
            .iter()
            .copied()
            .filter(|s| !self.scopes.contains_key(*s))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut keys: [Vec<&str>; 5] = Default::default();
        for scope in &missing {
            for (column, value) in keys.iter_mut().zip(scope_key(scope)) {
                column.push(value);
            }
        }
        let [tenants, agents, users, sessions, nodes] = &keys;
        let params: [&(dyn ToSql + Sync); 5] = [tenants, agents, users, sessions, nodes];
        // The rows that are missing, made in one statement (under the tape lock: no other
        // append makes them meanwhile), then every row read in one.
        self.conn.execute(
            self.target,
            r#"INSERT INTO memtape_scopes (tenant, agent, "user", session, node)
               SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
               ON CONFLICT DO NOTHING"#,
            &params,
        )?;
        let sql = format!(
            r#"SELECT s.{columns} FROM memtape_scopes s
               JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                    AS w(tenant, agent, usr, session, node)
               ON s.tenant = w.tenant AND s.agent = w.agent AND s."user" = w.usr
                  AND s.session = w.session AND s.node = w.node"#,
            columns = SCOPE_COLUMNS.replace(", ", ", s.")
        );
        for row in self.conn.query(self.target, &sql, &params)? {
            let (id, info) = info_of(&row)?;
            self.scopes.insert(info.scope.clone(), (id, info));
        }
        Ok(())
    }

    fn lookup(&mut self, id: EntryId) -> Result<Option<(Scope, Kind)>> {
        if let Some(found) = self.pending.get(&id) {
            return Ok(Some(found.clone()));
        }
        let row = self.conn.query_opt(
            self.target,
            r#"SELECT s.tenant, s.agent, s."user", s.session, s.node, e.kind
               FROM memtape_entries e JOIN memtape_scopes s USING (scope_id) WHERE e.id = $1"#,
            &[&sql_id(id)],
        )?;
        match row {
            None => Ok(None),
            Some(r) => {
                let kind: &str = r.get(5);
                Ok(Some((scope_of(&r, 0)?, kind.parse::<Kind>()?)))
            }
        }
    }

    /// Queues `entry` (already checked) for insertion and folds it into its scope.
    fn insert(&mut self, scope_id: i64, entry: &Entry) -> Result<()> {
        let row = EntryRow::encode(entry)?;
        self.rows
            .push((scope_id, row, entry.scope.tenant().to_owned()));
        self.pending
            .insert(entry.id, (entry.scope.clone(), entry.kind()));
        self.last = self.last.max(entry.id);
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

impl memtape_store::erase::EraseTransaction for Tx<'_> {
    fn entries_after(&mut self, tenant: &str, after: EntryId) -> Result<Vec<Entry>> {
        let sql = format!("{ENTRY_SELECT} WHERE e.id > $1 AND e.tenant = $2 ORDER BY e.id");
        self.conn
            .query(self.target, &sql, &[&sql_id(after), &tenant])?
            .iter()
            .map(entry_of)
            .collect()
    }

    fn begin(&mut self) -> Result<()> {
        self.conn
            .execute(self.target, "SET LOCAL memtape.erasing = 'on'", &[])?;
        Ok(())
    }

    fn rewrite(
        &mut self,
        rewrite: &memtape_store::erase::Rewrite,
        by: memtape_core::Erasure,
    ) -> Result<()> {
        let meta = memtape_store::row::meta_text(rewrite.id, &rewrite.meta)?;
        self.rewrites.push(RewriteRow {
            id: sql_id(rewrite.id),
            payload: rewrite.payload.to_json().to_string(),
            meta,
            name: rewrite.payload.name().map(str::to_owned),
            by: sql_id(by.by),
            how: by.how.as_str(),
        });
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        // The rewrites go in a few statements (one round trip per row took minutes for
        // 100,000 rows), while the erasure's setting is still on.
        let rows = std::mem::take(&mut self.rewrites);
        let size = |r: &RewriteRow| r.payload.len() + r.meta.len();
        for chunk in statements(&rows, size) {
            let ids: Vec<i64> = chunk.iter().map(|r| r.id).collect();
            let payloads: Vec<&str> = chunk.iter().map(|r| r.payload.as_str()).collect();
            let metas: Vec<&str> = chunk.iter().map(|r| r.meta.as_str()).collect();
            let names: Vec<Option<&str>> = chunk.iter().map(|r| r.name.as_deref()).collect();
            let bys: Vec<i64> = chunk.iter().map(|r| r.by).collect();
            let hows: Vec<&str> = chunk.iter().map(|r| r.how).collect();
            self.conn.execute(
                self.target,
                "UPDATE memtape_entries e SET payload = v.payload, meta = v.meta, name = v.name,
                     erased_by = v.erased_by, erased_how = v.erased_how
                 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[],
                             $6::text[]) AS v(id, payload, meta, name, erased_by, erased_how)
                 WHERE e.id = v.id",
                &[&ids, &payloads, &metas, &names, &bys, &hows],
            )?;
            // A vector was made of the text the rewrite takes.
            self.conn.execute(
                self.target,
                "DELETE FROM memtape_vectors WHERE entry = ANY($1)",
                &[&ids],
            )?;
        }
        self.conn
            .execute(self.target, "SET LOCAL memtape.erasing = 'off'", &[])?;
        Ok(())
    }

    fn append_receipt(&mut self, receipt: NewEntry) -> Result<Entry> {
        let mut stored = memtape_store::rules::append_checked_in(self, vec![receipt])?;
        stored.pop().ok_or_else(|| Error::Corrupt {
            id: 0,
            why: "an erasure's receipt was not written".into(),
        })
    }

    fn add_pending(&mut self, pending: &memtape_store::erase::Pending) -> Result<()> {
        self.conn.execute(
            self.target,
            "INSERT INTO memtape_erasures_pending (receipt, tenant, plan) VALUES ($1, $2, $3)",
            &[
                &sql_id(pending.receipt),
                &pending.tenant,
                &pending.to_json()?,
            ],
        )?;
        Ok(())
    }

    fn remove_pending(&mut self, receipt: EntryId) -> Result<()> {
        let id = sql_id(receipt);
        self.conn.execute(
            self.target,
            "DELETE FROM memtape_erasures_pending WHERE receipt = $1",
            &[&id],
        )?;
        // Followers stopped before the receipt: they may go on (delivered at commit).
        self.conn.execute(
            self.target,
            "SELECT pg_notify($1, $2)",
            &[&CHANNEL, &id.to_string()],
        )?;
        Ok(())
    }

    fn scrub_requests(&mut self, tenant: &str, receipt: EntryId) -> Result<()> {
        let id = sql_id(receipt);
        self.conn.execute(
            self.target,
            "UPDATE memtape_request_keys SET fingerprint = 'erased:' || $2::bigint,
                 body = CASE WHEN status IS NULL THEN NULL
                        ELSE convert_to('{\"erased\":' || $2::bigint || '}', 'UTF8') END
             WHERE tenant = $1",
            &[&tenant, &id],
        )?;
        Ok(())
    }
}

impl memtape_store::erase::StepStore for PostgresStore {
    fn erase_step(
        &self,
        f: &mut dyn FnMut(&mut dyn memtape_store::erase::EraseTransaction) -> Result<()>,
    ) -> Result<()> {
        self.write(|tx| f(tx))
    }

    fn pending_erasures(&self) -> Result<Vec<memtape_store::erase::Pending>> {
        self.read(|c, t| {
            c.query(
                t,
                "SELECT receipt, plan FROM memtape_erasures_pending ORDER BY receipt",
                &[],
            )?
            .iter()
            .map(|r| memtape_store::erase::Pending::from_json(r.get(0), r.get(1)))
            .collect()
        })
    }

    /// Vacuums the tables an erasure rewrote, so the old row versions (dead tuples) are
    /// removed now rather than whenever autovacuum comes by. Says whether it ran (a
    /// failure is not an error: the erasure has ended).
    fn wipe(&self) -> Result<bool> {
        Ok(self
            .read(|c, t| {
                c.client
                    .batch_execute(
                        "VACUUM memtape_entries, memtape_request_keys, memtape_erasures_pending",
                    )
                    .map_err(|e| t.err(e))
            })
            .is_ok())
    }
}

impl Tx<'_> {
    /// Writes what the transaction queued: the entries (a few statements, however many),
    /// the scope projections and the counter; and notifies [`CHANNEL`] (delivered at
    /// commit).
    fn flush(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let size = |(_, row, _): &(i64, EntryRow, String)| row.payload.len() + row.meta.len();
        for chunk in statements(&self.rows, size) {
            let mut ids = Vec::with_capacity(chunk.len());
            let mut tenants = Vec::with_capacity(chunk.len());
            let mut scope_ids = Vec::with_capacity(chunk.len());
            let mut kinds = Vec::with_capacity(chunk.len());
            let mut names = Vec::with_capacity(chunk.len());
            let mut parents = Vec::with_capacity(chunk.len());
            let mut times = Vec::with_capacity(chunk.len());
            let mut payloads = Vec::with_capacity(chunk.len());
            let mut metas = Vec::with_capacity(chunk.len());
            let mut erased_by = Vec::with_capacity(chunk.len());
            let mut erased_how = Vec::with_capacity(chunk.len());
            for (scope_id, row, tenant) in chunk {
                erased_by.push(row.erased_by);
                erased_how.push(row.erased_how);
                ids.push(row.id);
                tenants.push(tenant.as_str());
                scope_ids.push(*scope_id);
                kinds.push(row.kind);
                names.push(row.name.as_deref());
                parents.push(row.parent);
                times.push(row.created_at);
                payloads.push(row.payload.as_str());
                metas.push(row.meta.as_str());
            }
            self.conn.execute(
                self.target,
                "INSERT INTO memtape_entries (id, tenant, scope_id, kind, name, parent, created_at, payload, meta,
                                              erased_by, erased_how)
                 SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[],
                                      $6::bigint[], $7::bigint[], $8::text[], $9::text[],
                                      $10::bigint[], $11::text[])",
                &[
                    &ids, &tenants, &scope_ids, &kinds, &names, &parents, &times, &payloads,
                    &metas, &erased_by, &erased_how,
                ],
            )?;
        }
        // Every scope's projection in one statement.
        let count = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let id = |v: Option<EntryId>| v.map(sql_id);
        let (mut ids, mut entries, mut messages, mut heads) = (vec![], vec![], vec![], vec![]);
        let (mut lasts, mut consolidated, mut firsts, mut ats) = (vec![], vec![], vec![], vec![]);
        for (scope_id, info) in self.scopes.values() {
            ids.push(*scope_id);
            entries.push(count(info.entries));
            messages.push(count(info.messages));
            heads.push(id(info.head));
            lasts.push(id(info.last_id));
            consolidated.push(sql_id(info.last_consolidated));
            firsts.push(info.first_at.map(to_nanos).transpose()?);
            ats.push(info.last_at.map(to_nanos).transpose()?);
        }
        self.conn.execute(
            self.target,
            "UPDATE memtape_scopes s SET entries = u.entries, messages = u.messages, head = u.head,
                 last_id = u.last_id, last_consolidated = u.last_consolidated,
                 first_at = u.first_at, last_at = u.last_at
             FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                         $6::bigint[], $7::bigint[], $8::bigint[])
                  AS u(scope_id, entries, messages, head, last_id, last_consolidated, first_at, last_at)
             WHERE s.scope_id = u.scope_id",
            &[
                &ids,
                &entries,
                &messages,
                &heads,
                &lasts,
                &consolidated,
                &firsts,
                &ats,
            ],
        )?;
        let last = sql_id(self.last);
        self.conn.execute(
            self.target,
            "UPDATE memtape_tape SET last_id = $1",
            &[&last],
        )?;
        self.conn.execute(
            self.target,
            "SELECT pg_notify($1, $2)",
            &[&CHANNEL, &last.to_string()],
        )?;
        Ok(())
    }
}

/// The two 32-bit keys of the advisory lock `name` of `tenant`: from a hash of both, so a
/// tenant's locks never meet another tenant's, however the names are spelled.
fn lock_keys(tenant: &str, name: &str) -> (i32, i32) {
    let digest = Sha256::digest(format!("{tenant}\u{0}{name}").as_bytes());
    let half = |at: usize| {
        i32::from_be_bytes([digest[at], digest[at + 1], digest[at + 2], digest[at + 3]])
    };
    (half(0), half(4))
}

/// A held advisory lock: its own connection, which the lock belongs to. Dropping it
/// unlocks and closes the connection; if the process dies, the server drops the
/// connection and the lock with it.
struct HeldLock {
    client: std::sync::Mutex<Option<postgres::Client>>,
    keys: (i32, i32),
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let held = self
            .client
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let keys = self.keys;
        if let Some(mut client) = held {
            off_runtime(move || {
                // Unlocked at once rather than when the server notices the closed
                // connection, so a waiter does not wait for that.
                let _ = client.execute("SELECT pg_advisory_unlock($1, $2)", &[&keys.0, &keys.1]);
                let _ = client.close();
            });
        }
    }
}

/// Runs `f` on a thread of its own and waits for it. The synchronous client runs its own
/// small async runtime for every call, closing included, and an async runtime cannot be
/// entered from a thread that is driving one: a store dropped inside a server's runtime
/// (at shutdown) would abort the process. Used for what may run there: closing.
fn off_runtime(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        s.spawn(f);
    });
}

impl Drop for PostgresStore {
    /// Closes the idle connections and the listener away from any async runtime (see
    /// [`off_runtime`]).
    fn drop(&mut self) {
        let idle = self.pool.drain();
        let listener = self
            .listener
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        off_runtime(move || {
            drop(idle);
            drop(listener);
        });
    }
}

/// Appends the SQL of `filter` (after a `WHERE scope_id = $1`) and its parameters.
fn filter_clauses(
    filter: &Filter,
    sql: &mut String,
    args: &mut Vec<Box<dyn ToSql + Sync>>,
) -> Result<()> {
    let mut arg = |sql: &mut String, clause: &str, value: Box<dyn ToSql + Sync>| {
        args.push(value);
        sql.push_str(&clause.replace('?', &format!("${}", args.len())));
    };
    if let Some(a) = filter.after {
        arg(sql, " AND id > ?", Box::new(sql_id(a)));
    }
    if let Some(b) = filter.before {
        arg(sql, " AND id < ?", Box::new(sql_id(b)));
    }
    if !filter.kinds.is_empty() {
        let kinds: Vec<String> = filter.kinds.iter().map(|k| k.as_str().to_owned()).collect();
        arg(sql, " AND kind = ANY(?)", Box::new(kinds));
    }
    if let Some(n) = &filter.name {
        arg(sql, " AND name = ?", Box::new(n.clone()));
    }
    if let Some(s) = filter.since {
        arg(sql, " AND created_at >= ?", Box::new(to_nanos(s)?));
    }
    if let Some(u) = filter.until {
        arg(sql, " AND created_at < ?", Box::new(to_nanos(u)?));
    }
    sql.push_str(match filter.order {
        Order::Asc => " ORDER BY id ASC",
        Order::Desc => " ORDER BY id DESC",
    });
    if let Some(l) = filter.limit {
        arg(
            sql,
            " LIMIT ?",
            Box::new(i64::try_from(l).unwrap_or(i64::MAX)),
        );
    }
    Ok(())
}

impl Store for PostgresStore {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        self.write(|tx| append_in(tx, entries))
    }

    fn append_reserved(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        self.write(|tx| memtape_store::rules::append_checked_in(tx, entries))
    }

    fn last_erasure(&self) -> Result<EntryId> {
        self.read(|c, t| {
            let id: Option<i64> = c
                .query_opt(
                    t,
                    // Down the erasure index from the top, past erasures not yet ended.
                    "SELECT erased_by FROM memtape_entries
                     WHERE erased_by IS NOT NULL
                       AND erased_by NOT IN (SELECT receipt FROM memtape_erasures_pending)
                     ORDER BY erased_by DESC LIMIT 1",
                    &[],
                )?
                .map(|r| r.get(0));
            Ok(unsql(id.unwrap_or(0)))
        })
    }

    fn compact(&self) -> Result<()> {
        if self.target.read_only() {
            return Err(Error::ReadOnly(self.target.address().to_owned()));
        }
        self.read(|c, t| {
            c.client
                .batch_execute(
                    "VACUUM FULL memtape_entries, memtape_request_keys, memtape_erasures_pending",
                )
                .map_err(|e| t.err(e))
        })
    }

    /// The rows are rewritten in steps after the receipt (the same plan as SQLite's).
    /// PostgreSQL keeps the old row versions as dead tuples until a vacuum; the erasure
    /// runs `VACUUM` on the tables it changed right after its last step
    /// ([`EraseOutcome::wiped`] says whether that ran), and what a vacuum leaves (bytes in
    /// a page's free space, WAL segments, archives, backups) is set out in ARCHITECTURE.md.
    fn erase_with(
        &self,
        request: &EraseRequest,
        before_end: memtape_store::erase::BeforeEnd<'_>,
    ) -> Result<EraseOutcome> {
        memtape_store::erase::erase(self, request, before_end)
    }

    fn finish_erasures_with(
        &self,
        before_end: memtape_store::erase::BeforeEnd<'_>,
    ) -> Result<Vec<EraseOutcome>> {
        if self.target.read_only() {
            return Ok(Vec::new());
        }
        memtape_store::erase::finish(self, before_end)
    }

    fn append_then(
        &self,
        entries: Vec<NewEntry>,
        then: &mut dyn FnMut(&[Entry]) -> Vec<NewEntry>,
    ) -> Result<(Vec<Entry>, Vec<Entry>)> {
        self.write(|tx| {
            let stored = append_in(tx, entries)?;
            let derived = then(&stored);
            let derived = append_in(tx, derived)?;
            Ok((stored, derived))
        })
    }

    fn restore(&self, entries: Vec<Entry>) -> Result<Restored> {
        self.write(|tx| restore_in(tx, entries))
    }

    fn get(&self, tenant: &str, id: EntryId) -> Result<Option<Entry>> {
        self.read(|c, t| {
            let sql = format!("{ENTRY_SELECT} WHERE e.id = $1 AND e.tenant = $2");
            c.query_opt(t, &sql, &[&sql_id(id), &tenant])?
                .map(|r| entry_of(&r))
                .transpose()
        })
    }

    fn get_many(&self, tenant: &str, ids: &[EntryId]) -> Result<Vec<Entry>> {
        let wanted: Vec<i64> = ids.iter().map(|id| sql_id(*id)).collect();
        let mut found: HashMap<u64, Entry> = self.read(|c, t| {
            let sql = format!("{ENTRY_SELECT} WHERE e.tenant = $1 AND e.id = ANY($2)");
            c.query(t, &sql, &[&tenant, &wanted])?
                .iter()
                .map(|r| entry_of(r).map(|e| (e.id.0, e)))
                .collect()
        })?;
        Ok(ids.iter().filter_map(|id| found.remove(&id.0)).collect())
    }

    fn scan(&self, scope: &Scope, filter: &Filter) -> Result<Vec<Entry>> {
        self.read(|c, t| {
            let Some((scope_id, _)) = load_scope(c, t, scope)? else {
                return Ok(Vec::new());
            };
            let mut sql =
                format!("SELECT {ENTRY_COLUMNS} FROM memtape_entries WHERE scope_id = $1");
            let mut args: Vec<Box<dyn ToSql + Sync>> = vec![Box::new(scope_id)];
            filter_clauses(filter, &mut sql, &mut args)?;
            let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a.as_ref()).collect();
            c.query(t, &sql, &params)?
                .iter()
                .map(|r| entry_in(scope, r, 0))
                .collect()
        })
    }

    fn scope_info(&self, scope: &Scope) -> Result<Option<ScopeInfo>> {
        self.read(|c, t| Ok(load_scope(c, t, scope)?.map(|(_, info)| info)))
    }

    fn previous_messages(&self, wanted: &[(Scope, EntryId)]) -> Result<Vec<Option<Entry>>> {
        let mut out: Vec<Option<Entry>> = vec![None; wanted.len()];
        if wanted.is_empty() {
            return Ok(out);
        }
        // One round trip for every scope: each wanted scope's row, then its last
        // conversational entry before the id, on the index by (scope_id, id).
        let mut keys: [Vec<&str>; 5] = Default::default();
        for (scope, _) in wanted {
            for (column, value) in keys.iter_mut().zip(scope_key(scope)) {
                column.push(value);
            }
        }
        let before: Vec<i64> = wanted.iter().map(|(_, id)| sql_id(*id)).collect();
        let kinds: Vec<String> = Kind::conversational()
            .map(|k| k.as_str().to_owned())
            .collect();
        let sql = format!(
            r#"SELECT w.i, e.{columns}
               FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
                    WITH ORDINALITY AS w(tenant, agent, usr, session, node, before, i)
               JOIN memtape_scopes s ON s.tenant = w.tenant AND s.agent = w.agent
                    AND s."user" = w.usr AND s.session = w.session AND s.node = w.node
               CROSS JOIN LATERAL (
                   SELECT {ENTRY_COLUMNS} FROM memtape_entries x
                   WHERE x.scope_id = s.scope_id AND x.id < w.before AND x.kind = ANY($7)
                   ORDER BY x.id DESC LIMIT 1
               ) e"#,
            columns = ENTRY_COLUMNS.replace(", ", ", e.")
        );
        self.read(|c, t| {
            let [tenants, agents, users, sessions, nodes] = &keys;
            for row in c.query(
                t,
                &sql,
                &[tenants, agents, users, sessions, nodes, &before, &kinds],
            )? {
                let i: i64 = row.get(0);
                let Some(slot) = usize::try_from(i - 1).ok().filter(|i| *i < wanted.len()) else {
                    continue;
                };
                out[slot] = Some(entry_in(&wanted[slot].0, &row, 1)?);
            }
            Ok(out)
        })
    }

    fn scopes(&self, tenant: &str) -> Result<Vec<ScopeInfo>> {
        self.read(|c, t| {
            let sql = format!(
                r#"SELECT {SCOPE_COLUMNS} FROM memtape_scopes WHERE tenant = $1 AND entries > 0
                   ORDER BY agent, "user", session, node"#
            );
            c.query(t, &sql, &[&tenant])?
                .iter()
                .map(|r| info_of(r).map(|(_, info)| info))
                .collect()
        })
    }

    fn tenants(&self) -> Result<Vec<String>> {
        self.read(|c, t| {
            Ok(c.query(
                t,
                "SELECT DISTINCT tenant FROM memtape_scopes WHERE entries > 0 ORDER BY tenant",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
        })
    }

    fn tape_id(&self) -> Result<String> {
        self.read(|c, t| {
            Ok(c.query_one(t, "SELECT tape_id FROM memtape_tape", &[])?
                .get(0))
        })
    }

    fn last_id(&self) -> Result<EntryId> {
        self.read(|c, t| {
            // While an erasure is under way, followers stop before its receipt.
            let last: i64 = c
                .query_one(
                    t,
                    "SELECT coalesce((SELECT min(receipt) - 1 FROM memtape_erasures_pending), last_id)
                     FROM memtape_tape",
                    &[],
                )?
                .get(0);
            Ok(unsql(last))
        })
    }

    fn entries_after_in(&self, tenant: &str, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        self.read(|c, t| {
            // As `entries_after`, on the index by (tenant, id).
            let sql = format!(
                "{ENTRY_SELECT} WHERE e.tenant = $1 AND e.id > $2
                   AND e.id < coalesce((SELECT min(receipt) FROM memtape_erasures_pending),
                                       9223372036854775807)
                 ORDER BY e.id LIMIT $3"
            );
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            c.query(t, &sql, &[&tenant, &sql_id(after), &limit])?
                .iter()
                .map(entry_of)
                .collect()
        })
    }

    fn entries_after(&self, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        self.read(|c, t| {
            // Not past the receipt of an erasure under way (`Store::entries_after`).
            let sql = format!(
                "{ENTRY_SELECT} WHERE e.id > $1
                   AND e.id < coalesce((SELECT min(receipt) FROM memtape_erasures_pending),
                                       9223372036854775807)
                 ORDER BY e.id LIMIT $2"
            );
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            c.query(t, &sql, &[&sql_id(after), &limit])?
                .iter()
                .map(entry_of)
                .collect()
        })
    }

    fn wait_for_writes(&self, timeout: std::time::Duration) -> Result<()> {
        let mut listener = self
            .listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut client = match listener.take() {
            Some(c) if !c.is_closed() => c,
            _ => {
                let mut c = self.target.connect()?;
                c.batch_execute(&format!("LISTEN {CHANNEL}"))
                    .map_err(|e| self.target.err(e))?;
                c
            }
        };
        use postgres::fallible_iterator::FallibleIterator;
        {
            let mut notes = client.notifications();
            // A failed connection is an error; the next wait opens a new one.
            let first = notes.timeout_iter(timeout).next();
            first.map_err(|e| self.target.err(e))?;
            // Whatever else has queued says the same: drain it.
            while let Ok(Some(_)) = notes.iter().next() {}
        }
        *listener = Some(client);
        Ok(())
    }

    fn claim_request(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Claim> {
        memtape_store::requests::check_key(key)?;
        if self.target.read_only() {
            return Err(Error::ReadOnly(self.target.address().to_owned()));
        }
        let oldest = (now - memtape_store::requests::KEEP_REQUESTS).timestamp();
        self.read(|c, t| {
            c.execute(
                t,
                "DELETE FROM memtape_request_keys WHERE created_at < $1",
                &[&oldest],
            )?;
            let claimed = c.execute(
                t,
                "INSERT INTO memtape_request_keys (tenant, key, fingerprint, created_at)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                &[&tenant, &key, &fingerprint, &now.timestamp()],
            )?;
            if claimed == 1 {
                return Ok(Claim::Claimed);
            }
            let row = c.query_one(
                t,
                "SELECT fingerprint, status, body FROM memtape_request_keys
                 WHERE tenant = $1 AND key = $2",
                &[&tenant, &key],
            )?;
            let fingerprint: String = row.get(0);
            let status: Option<i32> = row.get(1);
            Ok(match status {
                Some(status) => Claim::Answered {
                    fingerprint,
                    status: u16::try_from(status).unwrap_or(500),
                    body: row.get::<_, Option<Vec<u8>>>(2).unwrap_or_default(),
                },
                None => Claim::Running { fingerprint },
            })
        })
    }

    fn finish_request(&self, tenant: &str, key: &str, status: u16, body: &[u8]) -> Result<()> {
        self.read(|c, t| {
            c.execute(
                t,
                "UPDATE memtape_request_keys SET status = $3, body = $4
                 WHERE tenant = $1 AND key = $2",
                &[&tenant, &key, &i32::from(status), &body],
            )?;
            Ok(())
        })
    }

    fn release_request(&self, tenant: &str, key: &str) -> Result<()> {
        self.read(|c, t| {
            c.execute(
                t,
                "DELETE FROM memtape_request_keys WHERE tenant = $1 AND key = $2 AND status IS NULL",
                &[&tenant, &key],
            )?;
            Ok(())
        })
    }

    fn erasures_under_way(&self) -> Result<Vec<EntryId>> {
        Ok(
            <Self as memtape_store::erase::StepStore>::pending_erasures(self)?
                .into_iter()
                .map(|p| p.receipt)
                .collect(),
        )
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
        let tenants: Vec<&str> = wanted.iter().map(|(t, _)| *t).collect();
        let ids: Vec<i64> = wanted.iter().map(|(_, id)| sql_id(*id)).collect();
        self.read(|c, t| {
            // One round trip for every tenant: each id counts only with its own tenant.
            Ok(c.query(
                t,
                "SELECT DISTINCT v.entry, v.vec FROM unnest($1::text[], $2::bigint[]) AS w(tenant, id)
                 JOIN memtape_entries e ON e.id = w.id AND e.tenant = w.tenant
                 JOIN memtape_vectors v ON v.entry = e.id
                 WHERE v.embedder_id = (SELECT embedder_id FROM memtape_embedders WHERE name = $3)
                 ORDER BY v.entry",
                &[&tenants, &ids, &embedder],
            )?
            .iter()
            .map(|r| (unsql(r.get(0)), r.get(1)))
            .collect())
        })
    }

    fn put_vectors(&self, embedder: &str, vectors: &[NewVector]) -> Result<()> {
        memtape_store::vectors::check(embedder, vectors)?;
        if vectors.is_empty() {
            return Ok(());
        }
        if self.target.read_only() {
            return Err(Error::ReadOnly(self.target.address().to_owned()));
        }
        let ids: Vec<i64> = vectors.iter().map(|v| sql_id(v.id)).collect();
        let marks: Vec<Option<i64>> = vectors.iter().map(|v| v.erased_by.map(sql_id)).collect();
        let bytes: Vec<&[u8]> = vectors.iter().map(|v| v.bytes.as_slice()).collect();
        let target = &self.target;
        let mut conn = self.pool.take(target)?;
        let run = |conn: &mut Conn| -> Result<()> {
            // Vectors can be made again from the tape: their commit does not wait for the
            // disk. No tape lock: they take no ids.
            conn.client
                .batch_execute("BEGIN; SET LOCAL synchronous_commit = off")
                .map_err(|e| target.err(e))?;
            let missing = conn.query_opt(
                target,
                "SELECT v.id FROM unnest($1::bigint[]) AS v(id)
                 WHERE NOT EXISTS (SELECT 1 FROM memtape_entries e WHERE e.id = v.id) LIMIT 1",
                &[&ids],
            )?;
            if let Some(row) = missing {
                return Err(Error::BadVector(format!(
                    "entry {} is not on the tape",
                    unsql(row.get(0))
                )));
            }
            conn.execute(
                target,
                "INSERT INTO memtape_embedders (name) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&embedder],
            )?;
            // Each entry's row is locked while its mark is compared: an erasure rewriting
            // it waits, or is waited for and then seen, so a vector of text an erasure
            // took (whose DELETE ran before this INSERT) is never kept.
            conn.execute(
                target,
                "INSERT INTO memtape_vectors (entry, embedder_id, vec)
                 SELECT e.id, (SELECT embedder_id FROM memtape_embedders WHERE name = $4), v.vec
                 FROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS v(id, mark, vec)
                 JOIN memtape_entries e ON e.id = v.id
                 WHERE e.erased_by IS NOT DISTINCT FROM v.mark
                 FOR SHARE OF e
                 ON CONFLICT DO NOTHING",
                &[&ids, &marks, &bytes, &embedder],
            )?;
            conn.client
                .batch_execute("COMMIT")
                .map_err(|e| target.err(e))
        };
        let out = run(&mut conn);
        if out.is_ok() || conn.client.batch_execute("ROLLBACK").is_ok() {
            self.pool.give(conn);
        } else {
            self.pool.discard(conn);
        }
        out
    }

    fn lock(&self, tenant: &str, name: &str, wait: Wait) -> Result<Option<StoreLock>> {
        if self.target.read_only() {
            // A lock guards a write, and this store cannot write.
            return Err(Error::ReadOnly(self.target.address().to_owned()));
        }
        let keys = lock_keys(tenant, name);
        let mut client = self.target.connect()?;
        let taken = match wait {
            Wait::Block => {
                client
                    .execute("SELECT pg_advisory_lock($1, $2)", &[&keys.0, &keys.1])
                    .map_err(|e| self.target.err(e))?;
                true
            }
            Wait::Try => client
                .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&keys.0, &keys.1])
                .map_err(|e| self.target.err(e))?
                .get(0),
        };
        if !taken {
            let _ = client.close();
            return Ok(None);
        }
        Ok(Some(StoreLock::new(
            name,
            HeldLock {
                client: std::sync::Mutex::new(Some(client)),
                keys,
            },
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_bounded_by_rows_and_by_bytes() {
        let lens = |parts: Vec<&[usize]>| parts.iter().map(|p| p.len()).collect::<Vec<_>>();
        let small = vec![10; 12_345];
        assert_eq!(lens(statements(&small, |b| *b)), [5_000, 5_000, 2_345]);
        let mib = 1 << 20;
        // 200 rows of 1 MiB: 64 to a statement.
        let big = vec![mib; 200];
        assert_eq!(lens(statements(&big, |b| *b)), [64, 64, 64, 8]);
        // A row larger than the bound goes alone.
        let huge = vec![mib, 100 * mib, mib];
        assert_eq!(lens(statements(&huge, |b| *b)), [1, 1, 1]);
        assert!(statements(&Vec::<usize>::new(), |b| *b).is_empty());
    }
}
