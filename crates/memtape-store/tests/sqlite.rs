//! SQLite-specific guarantees: persistence across reopen, schema versioning, refusal of
//! foreign and newer databases, append-only enforcement, and readers beside a writer.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::DateTime;
use memtape_core::{EntryId, Filter, Message, NewEntry, Payload, Scope};
use memtape_store::{SCHEMA_VERSION, SqliteStore, Store};

fn scope() -> Scope {
    Scope::agent("t", "a").unwrap().with_session("s").unwrap()
}

fn user(text: &str) -> NewEntry {
    NewEntry::new(
        scope(),
        Payload::Message(Message::user(text)),
        DateTime::UNIX_EPOCH,
    )
}

#[test]
fn entries_and_projections_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::create(dir.path()).unwrap();
        store.append(vec![user("one"), user("two")]).unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    let all = store.scan(&scope(), &Filter::default()).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].parent, Some(EntryId(1)));
    assert_eq!(
        store.scope_info(&scope()).unwrap().unwrap().head,
        Some(EntryId(2))
    );
    assert_eq!(
        store.append(vec![user("three")]).unwrap()[0].parent,
        Some(EntryId(2))
    );
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn opening_a_missing_store_says_how_to_create_one() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("no memtape store") && err.contains("memtape init"),
        "{err}"
    );
}

#[test]
fn a_database_from_a_newer_memtape_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::create(dir.path()).unwrap());
    let path = dir.path().join(SqliteStore::FILE_NAME);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    let err = SqliteStore::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(&format!("schema version {}", SCHEMA_VERSION + 1))
            && err.contains("upgrade memtape"),
        "{err}"
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION + 1);
}

#[test]
fn another_programs_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join(SqliteStore::FILE_NAME)).unwrap();
    conn.execute_batch("CREATE TABLE t(x);").unwrap();
    drop(conn);
    let err = SqliteStore::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a memtape store"), "{err}");
}

#[test]
fn a_foreign_sqlite_file_is_modified_before_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SqliteStore::FILE_NAME);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA journal_mode=DELETE; CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&path).unwrap();
    for open in [
        SqliteStore::open,
        SqliteStore::create,
        SqliteStore::open_read_only,
    ] {
        let err = open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a memtape store"), "{err}");
    }
    // Not a byte changed (the journal mode was switched to WAL before the check), and no
    // write-ahead log was left beside it.
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [SqliteStore::FILE_NAME]);
    // A file that is not SQLite at all says so.
    std::fs::write(
        &path,
        b"definitely not a database, just text padding it out......",
    )
    .unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not an SQLite database"), "{err}");
}

#[test]
fn a_read_only_store_reads_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::create(dir.path()).unwrap();
        store.append(vec![user("one")]).unwrap();
    }
    // The writer closes last, so a clean close leaves no write-ahead log behind.
    assert!(!dir.path().join("memtape.db-wal").exists());
    let before = std::fs::read(dir.path().join(SqliteStore::FILE_NAME)).unwrap();
    let store = SqliteStore::open_read_only(dir.path()).unwrap();
    assert_eq!(store.scan(&scope(), &Filter::default()).unwrap().len(), 1);
    let err = store.append(vec![user("two")]).unwrap_err().to_string();
    assert!(err.contains("read-only"), "{err}");
    drop(store);
    assert_eq!(
        std::fs::read(dir.path().join(SqliteStore::FILE_NAME)).unwrap(),
        before
    );
}

#[test]
fn the_database_itself_refuses_to_modify_or_delete_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    store.append(vec![user("never changes")]).unwrap();
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    for sql in ["UPDATE entries SET payload = '{}'", "DELETE FROM entries"] {
        let err = conn.execute(sql, []).unwrap_err().to_string();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    assert_eq!(
        store.scan(&scope(), &Filter::default()).unwrap()[0]
            .message()
            .unwrap()
            .content_text(),
        "never changes"
    );
}

#[test]
fn readers_work_while_a_writer_appends() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::create(dir.path()).unwrap());
    store.append(vec![user("seed")]).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            for i in 0..200 {
                store.append(vec![user(&format!("m{i}"))]).unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut reads = 0;
    let mut last_seen = 0;
    while !done.load(Ordering::SeqCst) {
        let n = store.scan(&scope(), &Filter::default()).unwrap().len();
        assert!(n >= last_seen, "a reader saw the tape shrink");
        last_seen = n;
        reads += 1;
    }
    writer.join().unwrap();
    assert!(reads > 1, "the reader never ran beside the writer");
    assert_eq!(store.scan(&scope(), &Filter::default()).unwrap().len(), 201);
}

/// Schema 7 indexes each tenant's entries (`entries_after_in`): a store of schema 6 gets
/// the index filled from its entries when it is first opened for writing.
#[test]
fn a_store_of_schema_6_gets_its_tenants_entries_indexed_on_opening() {
    let dir = tempfile::tempdir().unwrap();
    let other = Scope::agent("u", "a").unwrap().with_session("s").unwrap();
    {
        let store = SqliteStore::create(dir.path()).unwrap();
        store
            .append(vec![
                user("one"),
                NewEntry::new(
                    other.clone(),
                    Payload::Message(Message::user("theirs")),
                    DateTime::UNIX_EPOCH,
                ),
                user("two"),
            ])
            .unwrap();
    }
    {
        // Back to schema 6: what version 7 adds is not there.
        let conn = rusqlite::Connection::open(dir.path().join(SqliteStore::FILE_NAME)).unwrap();
        conn.execute_batch(
            "DROP TABLE tenant_entries; DROP TABLE tenants; PRAGMA user_version = 6;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    let ids = |tenant: &str| -> Vec<u64> {
        store
            .entries_after_in(tenant, EntryId(0), 10)
            .unwrap()
            .iter()
            .map(|e| e.id.0)
            .collect()
    };
    assert_eq!(ids("t"), [1, 3]);
    assert_eq!(ids("u"), [2]);
    store.append(vec![user("three")]).unwrap();
    assert_eq!(ids("t"), [1, 3, 4]);
    assert_eq!(store.integrity_check().unwrap(), "ok");
}
