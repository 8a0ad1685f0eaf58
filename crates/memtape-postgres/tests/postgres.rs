//! What only the PostgreSQL store has to prove (the shared behaviour is the conformance
//! suite in memtape-store): ids that commit in id order under concurrent writers from
//! several stores, append-only enforced by the database itself, a newer schema refused
//! untouched, concurrent first opens, read-only connections, advisory locks across stores
//! and released when their connection dies, and names a text column cannot hold.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Utc;
use memtape_core::{Anchor, EntryId, Filter, Message, NewEntry, Payload, Scope};
use memtape_postgres::testing::Scratch;
use memtape_postgres::{PostgresStore, SCHEMA_VERSION};
use memtape_store::{Error, Store, Wait};

fn scope(tenant: &str, session: &str) -> Scope {
    Scope::agent(tenant, "bot")
        .unwrap()
        .with_session(session)
        .unwrap()
}

/// The text of a message entry.
fn text(e: &memtape_core::Entry) -> String {
    let m = e.payload.as_message().unwrap();
    m.content.as_ref().unwrap().text().into_owned()
}

fn msg(scope: &Scope, text: &str) -> NewEntry {
    NewEntry::new(
        scope.clone(),
        Payload::Message(Message::user(text)),
        Utc::now(),
    )
}

/// Writers on four stores (four connections each, as four servers would have) append
/// batches to two tenants while a follower reads the tape by id, as a projection does.
/// The follower must see every id, in order, exactly once: an id that committed after a
/// higher one had been read would be skipped, and show as a gap.
#[test]
fn a_follower_never_skips_an_id_under_concurrent_writers() {
    let db = Scratch::new();
    let url = db.url().to_owned();
    PostgresStore::connect(&url).unwrap();
    const WRITERS: usize = 4;
    const BATCHES: usize = 60;
    let done = Arc::new(AtomicBool::new(false));
    let follower = {
        let (url, done) = (url.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let store = PostgresStore::connect(&url).unwrap();
            let mut seen = Vec::new();
            let mut after = EntryId(0);
            loop {
                let finished = done.load(Ordering::SeqCst);
                let page = store.entries_after(after, 50).unwrap();
                for e in &page {
                    seen.push(e.id.0);
                    after = e.id;
                }
                if page.is_empty() && finished {
                    return seen;
                }
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let url = url.clone();
            std::thread::spawn(move || {
                let store = PostgresStore::connect(&url).unwrap();
                let s = scope(if w % 2 == 0 { "even" } else { "odd" }, &format!("w{w}"));
                for b in 0..BATCHES {
                    let n = 1 + (b % 3);
                    let batch = (0..n)
                        .map(|i| msg(&s, &format!("w{w} b{b} i{i}")))
                        .collect();
                    store.append(batch).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let seen = follower.join().unwrap();
    let store = PostgresStore::connect(&url).unwrap();
    let last = store.last_id().unwrap().0;
    let expected: Vec<u64> = (1..=last).collect();
    assert_eq!(last as usize, WRITERS * (BATCHES / 3) * (1 + 2 + 3));
    assert_eq!(seen, expected, "the follower saw every id once, in order");
    // And each session's messages chain in the order they were appended.
    for w in 0..WRITERS {
        let s = scope(if w % 2 == 0 { "even" } else { "odd" }, &format!("w{w}"));
        let entries = store.scan(&s, &Filter::default()).unwrap();
        for pair in entries.windows(2) {
            assert_eq!(pair[1].parent, Some(pair[0].id));
        }
    }
}

#[test]
fn the_database_itself_refuses_to_change_or_remove_entries() {
    let db = Scratch::new();
    let store = PostgresStore::connect(db.url()).unwrap();
    let s = scope("t", "s");
    store.append(vec![msg(&s, "keep me")]).unwrap();
    let mut raw = db.client();
    for sql in [
        "UPDATE memtape_entries SET payload = '{}'",
        "DELETE FROM memtape_entries",
        "TRUNCATE memtape_entries CASCADE",
        "TRUNCATE memtape_scopes CASCADE",
        "DELETE FROM memtape_scopes",
    ] {
        let err = raw.batch_execute(sql).unwrap_err();
        assert!(
            err.to_string().contains("append-only") || format!("{err:?}").contains("append-only"),
            "{sql}: {err:?}"
        );
    }
    let entries = store.scan(&s, &Filter::default()).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(text(&entries[0]), "keep me");
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let db = Scratch::new();
    let store = PostgresStore::connect(db.url()).unwrap();
    store.append(vec![msg(&scope("t", "s"), "hi")]).unwrap();
    drop(store);
    let mut raw = db.client();
    let newer = SCHEMA_VERSION + 1;
    raw.execute("UPDATE memtape_tape SET schema_version = $1", &[&newer])
        .unwrap();
    let snapshot = |raw: &mut postgres::Client| -> (i32, i64, i64) {
        let r = raw
            .query_one(
                "SELECT schema_version, last_id, (SELECT count(*) FROM memtape_entries) FROM memtape_tape",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    let before = snapshot(&mut raw);
    for open in [PostgresStore::connect, PostgresStore::connect_read_only] {
        match open(db.url()) {
            Err(Error::NewerSchema {
                found, supported, ..
            }) => {
                assert_eq!(
                    (found, supported),
                    (i64::from(newer), i64::from(SCHEMA_VERSION))
                );
            }
            other => panic!("expected NewerSchema, got {other:?}"),
        }
    }
    assert_eq!(snapshot(&mut raw), before);
}

#[test]
fn servers_opening_a_fresh_database_at_once_create_it_once() {
    let db = Scratch::new();
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let url = db.url().to_owned();
            std::thread::spawn(move || PostgresStore::connect(&url).map(|s| s.tape_id().unwrap()))
        })
        .collect();
    let ids: Vec<String> = opens
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one tape: {ids:?}");
    let version: i32 = db
        .client()
        .query_one("SELECT schema_version FROM memtape_tape", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn a_read_only_store_reads_and_cannot_write() {
    let db = Scratch::new();
    assert!(
        PostgresStore::connect_read_only(db.url()).is_err(),
        "a database without memtape's tables is not opened read-only"
    );
    let writer = PostgresStore::connect(db.url()).unwrap();
    let s = scope("t", "s");
    writer.append(vec![msg(&s, "hello")]).unwrap();
    let reader = PostgresStore::connect_read_only(db.url()).unwrap();
    assert_eq!(reader.scan(&s, &Filter::default()).unwrap().len(), 1);
    assert!(matches!(
        reader.append(vec![msg(&s, "no")]),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(
        reader.lock("t", "x", Wait::Try),
        Err(Error::ReadOnly(_))
    ));
    assert_eq!(writer.last_id().unwrap(), EntryId(1));
}

#[test]
fn advisory_locks_hold_across_stores_and_die_with_their_connection() {
    let db = Scratch::new();
    let a = PostgresStore::connect(db.url()).unwrap();
    let b = PostgresStore::connect(db.url()).unwrap();
    let held = a.lock("t", "consolidate/s1", Wait::Try).unwrap().unwrap();
    assert!(b.lock("t", "consolidate/s1", Wait::Try).unwrap().is_none());
    // Another name, or the same name of another tenant, is another lock.
    assert!(b.lock("t", "consolidate/s2", Wait::Try).unwrap().is_some());
    assert!(b.lock("u", "consolidate/s1", Wait::Try).unwrap().is_some());
    drop(held);
    let again = b.lock("t", "consolidate/s1", Wait::Try).unwrap().unwrap();
    // A waiter gets the lock when the holder lets go.
    let waiter = {
        let url = db.url().to_owned();
        std::thread::spawn(move || {
            let c = PostgresStore::connect(&url).unwrap();
            c.lock("t", "consolidate/s1", Wait::Block)
                .unwrap()
                .is_some()
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished(), "the waiter waits");
    drop(again);
    assert!(waiter.join().unwrap());
    // A holder whose connection dies (its process was killed) holds nothing.
    let _held = a.lock("t", "emergence", Wait::Try).unwrap().unwrap();
    let mut raw = db.client();
    let killed: i64 = raw
        .query_one(
            // Only this test's database: tests running beside it hold advisory locks too.
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if b.lock("t", "emergence", Wait::Try).unwrap().is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lock was never released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn names_a_text_column_cannot_hold_are_refused_before_the_database() {
    let db = Scratch::new();
    let store = PostgresStore::connect(db.url()).unwrap();
    let s = scope("t", "s");
    let bad = NewEntry::new(
        s.clone(),
        Payload::Anchor(Anchor {
            name: "phase\u{0}1".into(),
            state: None,
        }),
        Utc::now(),
    );
    let err = store.append(vec![msg(&s, "ok"), bad]).unwrap_err();
    assert!(err.to_string().contains("control character"), "{err}");
    // NUL inside message text is fine: the payload is JSON, which escapes it.
    store.append(vec![msg(&s, "a\u{0}b")]).unwrap();
    let entries = store.scan(&s, &Filter::default()).unwrap();
    assert_eq!(entries.len(), 1, "the failed batch left nothing");
    assert_eq!(text(&entries[0]), "a\u{0}b");
}

#[test]
fn a_bad_address_or_an_unreachable_server_is_a_clear_error() {
    let err = PostgresStore::connect("postgres://u:secret@127.0.0.1:1/db").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("postgres://u@127.0.0.1:1/db"), "{text}");
    assert!(
        !text.contains("secret"),
        "the password is never shown: {text}"
    );
    let err = PostgresStore::connect("postgres://host:notaport/db").unwrap_err();
    assert!(err.to_string().contains("--database"), "{err}");
}

#[test]
fn a_waiting_follower_wakes_when_another_store_commits() {
    let db = Scratch::new();
    let follower = PostgresStore::connect(db.url()).unwrap();
    let writer = PostgresStore::connect(db.url()).unwrap();
    // Nothing written: the wait lasts its whole timeout.
    let started = std::time::Instant::now();
    follower
        .wait_for_writes(Duration::from_millis(300))
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    // A commit elsewhere ends the wait at once, long before its timeout.
    let url = db.url().to_owned();
    let write = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let w = PostgresStore::connect(&url).unwrap();
        w.append(vec![msg(&scope("t", "s"), "wake up")]).unwrap();
    });
    let started = std::time::Instant::now();
    follower.wait_for_writes(Duration::from_secs(30)).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken by the commit, not the timeout"
    );
    write.join().unwrap();
    assert_eq!(follower.last_id().unwrap(), EntryId(1));
    // Commits made while nobody waited are not lost: the next wait returns at once.
    writer
        .append(vec![msg(&scope("t", "s"), "while away")])
        .unwrap();
    let started = std::time::Instant::now();
    follower.wait_for_writes(Duration::from_secs(30)).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_busy_store_opens_no_more_connections_than_its_bound() {
    let db = Scratch::new();
    let store = Arc::new(PostgresStore::connect(db.url()).unwrap());
    let s = scope("t", "s");
    store.append(vec![msg(&s, "one")]).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (mut raw, done) = (db.client(), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut most = 0i64;
            while !done.load(Ordering::SeqCst) {
                let open: i64 = raw
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity
                         WHERE datname = current_database() AND application_name = 'memtape'",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                most = most.max(open);
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        })
    };
    let workers: Vec<_> = (0..3 * memtape_postgres::MAX_OPEN)
        .map(|i| {
            let (store, s) = (Arc::clone(&store), s.clone());
            std::thread::spawn(move || {
                for _ in 0..20 {
                    assert!(!store.scan(&s, &Filter::default()).unwrap().is_empty());
                    if i % 8 == 0 {
                        store.append(vec![msg(&s, "more")]).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let most = monitor.join().unwrap();
    assert!(
        most >= 2 && most <= memtape_postgres::MAX_OPEN as i64,
        "at most {} connections open at once, saw {most}",
        memtape_postgres::MAX_OPEN
    );
}
