//! The tables of the tape in PostgreSQL and their migrations: a version recorded in the
//! database, steps applied in one transaction under an advisory lock (two servers starting
//! on a fresh database do not both create it), and a database of a newer version refused
//! before anything is written to it.

use memtape_store::Error;

use crate::Result;
use crate::conn::{Conn, Target};

/// The schema version this build writes. Databases with a higher version are refused.
pub const SCHEMA_VERSION: i32 = 6;

/// The advisory lock (single 64-bit key: a key space of its own, apart from the store's
/// named locks, which use two 32-bit keys) that migrations take: "mtap".
const MIGRATION_LOCK: i64 = 0x6d74_6170;

/// `MIGRATIONS[v]` takes a database from version `v` to `v + 1`.
///
/// - `memtape_tape`: one row: the tape's id, the schema version and the last id given.
///   Every write locks this row first and holds it to its commit, so writers commit one
///   after another in id order, and a reader that has seen id `n` has seen every id
///   below it (see the crate's documentation).
/// - `memtape_scopes`: each scope's projection, updated in the same transaction as its
///   entries (as SQLite's table of the same shape).
/// - `memtape_entries`: the tape. Rows cannot be updated, deleted or truncated: triggers
///   refuse it, whoever connects.
/// - `memtape_request_keys` (version 2): idempotency keys, per tenant, with the answer of
///   the request that claimed each (memtape-store's `requests` module).
/// - Version 3, erasure: an entry may have its content replaced (never its id, tenant,
///   scope, kind, parent or time), and is then marked (`erased_by`, `erased_how`), only in
///   a transaction that set `memtape.erasing` for itself (`SET LOCAL`, as an erasure does
///   around its rewrites); every other UPDATE, and every DELETE, still fails.
/// - Version 4, erasure in steps: `memtape_erasures_pending` holds each erasure whose
///   receipt is written and whose rewrites are not all done, with what finishing it needs
///   (memtape-store's `erase::Pending` as JSON).
/// - Version 5, vectors kept beside the tape (`Store::put_vectors`): `memtape_vectors`
///   holds each entry's vector under each embedder that made one (`memtape_embedders`
///   numbers the embedders so a row does not repeat their ids).
/// - Version 6, each tenant's entries in id order (`Store::entries_after_in`): an index on
///   (tenant, id), so a projection of one tenant follows it without reading the others.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE memtape_tape (
    only_row       boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    tape_id        text NOT NULL,
    schema_version integer NOT NULL,
    last_id        bigint NOT NULL DEFAULT 0 CHECK (last_id >= 0)
);
INSERT INTO memtape_tape (tape_id, schema_version)
    VALUES (replace(gen_random_uuid()::text, '-', ''), 0);
CREATE TABLE memtape_scopes (
    scope_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant            text NOT NULL,
    agent             text NOT NULL,
    "user"            text NOT NULL DEFAULT '',
    session           text NOT NULL DEFAULT '',
    node              text NOT NULL DEFAULT '',
    entries           bigint NOT NULL DEFAULT 0,
    messages          bigint NOT NULL DEFAULT 0,
    head              bigint,
    last_id           bigint,
    last_consolidated bigint NOT NULL DEFAULT 0,
    first_at          bigint,
    last_at           bigint,
    UNIQUE (tenant, agent, "user", session, node)
);
CREATE TABLE memtape_entries (
    id         bigint PRIMARY KEY CHECK (id > 0),
    tenant     text NOT NULL,
    scope_id   bigint NOT NULL REFERENCES memtape_scopes (scope_id),
    kind       text NOT NULL,
    name       text,
    parent     bigint REFERENCES memtape_entries (id),
    created_at bigint NOT NULL,
    payload    text NOT NULL,
    meta       text NOT NULL
);
CREATE INDEX memtape_entries_by_scope ON memtape_entries (scope_id, id);
CREATE INDEX memtape_entries_by_kind ON memtape_entries (scope_id, kind, id);
CREATE INDEX memtape_entries_by_name ON memtape_entries (scope_id, name, id) WHERE name IS NOT NULL;
CREATE INDEX memtape_entries_by_time ON memtape_entries (scope_id, created_at);
CREATE FUNCTION memtape_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'memtape entries are append-only (% on %)', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER memtape_entries_append_only BEFORE UPDATE OR DELETE ON memtape_entries
    FOR EACH ROW EXECUTE FUNCTION memtape_refuse_change();
CREATE TRIGGER memtape_entries_no_truncate BEFORE TRUNCATE ON memtape_entries
    FOR EACH STATEMENT EXECUTE FUNCTION memtape_refuse_change();
CREATE TRIGGER memtape_scopes_kept BEFORE DELETE ON memtape_scopes
    FOR EACH ROW EXECUTE FUNCTION memtape_refuse_change();
CREATE TRIGGER memtape_scopes_no_truncate BEFORE TRUNCATE ON memtape_scopes
    FOR EACH STATEMENT EXECUTE FUNCTION memtape_refuse_change();
"#,
    r#"
CREATE TABLE memtape_request_keys (
    tenant      text NOT NULL,
    key         text NOT NULL,
    fingerprint text NOT NULL,
    created_at  bigint NOT NULL,
    status      integer,
    body        bytea,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX memtape_request_keys_by_time ON memtape_request_keys (created_at);
"#,
    r#"
ALTER TABLE memtape_entries ADD COLUMN erased_by bigint;
ALTER TABLE memtape_entries ADD COLUMN erased_how text
    CHECK (erased_how IN ('whole', 'text'));
ALTER TABLE memtape_entries ADD CONSTRAINT memtape_entries_erasure_mark
    CHECK ((erased_by IS NULL) = (erased_how IS NULL));
CREATE INDEX memtape_entries_by_erasure ON memtape_entries (erased_by)
    WHERE erased_by IS NOT NULL;
CREATE FUNCTION memtape_only_erasure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('memtape.erasing', true) = 'on'
       AND NEW.id = OLD.id AND NEW.tenant = OLD.tenant AND NEW.scope_id = OLD.scope_id
       AND NEW.kind = OLD.kind AND NEW.parent IS NOT DISTINCT FROM OLD.parent
       AND NEW.created_at = OLD.created_at AND NEW.erased_by IS NOT NULL THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'memtape entries are append-only (an erasure only replaces content)'
        USING ERRCODE = 'restrict_violation';
END
$$;
DROP TRIGGER memtape_entries_append_only ON memtape_entries;
CREATE TRIGGER memtape_entries_only_erasure BEFORE UPDATE ON memtape_entries
    FOR EACH ROW EXECUTE FUNCTION memtape_only_erasure();
CREATE TRIGGER memtape_entries_no_delete BEFORE DELETE ON memtape_entries
    FOR EACH ROW EXECUTE FUNCTION memtape_refuse_change();
"#,
    r#"
CREATE TABLE memtape_erasures_pending (
    receipt bigint PRIMARY KEY,
    tenant  text NOT NULL,
    plan    text NOT NULL
);
"#,
    r#"
CREATE TABLE memtape_embedders (
    embedder_id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE
);
CREATE TABLE memtape_vectors (
    entry       bigint NOT NULL REFERENCES memtape_entries (id),
    embedder_id integer NOT NULL REFERENCES memtape_embedders (embedder_id),
    vec         bytea NOT NULL,
    PRIMARY KEY (entry, embedder_id)
);
"#,
    r#"
CREATE INDEX memtape_entries_by_tenant ON memtape_entries (tenant, id);
"#,
];

/// The schema version of the database `conn` is connected to: `None` when it has no
/// memtape tables (in the schema new tables go to, the first of the search path). Reads
/// only. The catalog is read with an ordinary query, whose snapshot sees what another
/// process committed meanwhile (`to_regclass` reads a cache that an advisory lock does not
/// refresh).
fn version(conn: &mut Conn, target: &Target) -> Result<Option<i32>> {
    let exists: bool = conn
        .query_one(
            target,
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relname = 'memtape_tape' AND n.nspname = current_schema())",
            &[],
        )?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let row = conn.query_opt(target, "SELECT schema_version FROM memtape_tape", &[])?;
    Ok(Some(row.map_or(0, |r| r.get(0))))
}

fn refuse_newer(target: &Target, found: i32) -> Error {
    Error::NewerSchema {
        store: target.address().to_owned(),
        found: i64::from(found),
        supported: i64::from(SCHEMA_VERSION),
    }
}

/// Checks the database's schema and, for a store that may write, brings it up to date.
/// A database of this version is only read; one of a newer version is refused before
/// anything is written; a read-only store refuses a database without memtape's tables.
pub(crate) fn prepare(conn: &mut Conn, target: &Target) -> Result<()> {
    match version(conn, target)? {
        Some(v) if v > SCHEMA_VERSION => return Err(refuse_newer(target, v)),
        Some(SCHEMA_VERSION) => return Ok(()),
        None if target.read_only() => {
            return Err(target.fail(
                "this database has no memtape tables; open it once for writing (e.g. `memtape init --database URL`) to create them",
            ));
        }
        // An older schema lacks columns every read names (the erasure marks).
        Some(v) if target.read_only() => {
            return Err(target.fail(format!(
                "this database's memtape schema is version {v}, older than this build's \
                 {SCHEMA_VERSION}; open it once for writing to bring it up to date"
            )));
        }
        _ => {}
    }
    let run = |conn: &mut Conn| -> Result<()> {
        conn.client
            .batch_execute("BEGIN")
            .map_err(|e| target.err(e))?;
        conn.execute(
            target,
            "SELECT pg_advisory_xact_lock($1)",
            &[&MIGRATION_LOCK],
        )?;
        // Another process may have migrated while this one waited for the lock.
        let from = match version(conn, target)? {
            Some(v) if v > SCHEMA_VERSION => return Err(refuse_newer(target, v)),
            Some(v) => v,
            None => 0,
        };
        for (v, sql) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(from).unwrap_or(0))
        {
            conn.client.batch_execute(sql).map_err(|e| target.err(e))?;
            let next = i32::try_from(v + 1).unwrap_or(i32::MAX);
            conn.client
                .execute("UPDATE memtape_tape SET schema_version = $1", &[&next])
                .map_err(|e| target.err(e))?;
        }
        conn.client
            .batch_execute("COMMIT")
            .map_err(|e| target.err(e))
    };
    let out = run(conn);
    if out.is_err() {
        let _ = conn.client.batch_execute("ROLLBACK");
    }
    out
}
