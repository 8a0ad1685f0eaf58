//! Erasure in the stores: what each target selects, tombstones and redaction, the receipt,
//! dry runs, scope as a boundary, the database's own guard, and (SQLite) no byte of the
//! erased text left in the store's files; every test of what is selected and how runs on
//! the memory store, SQLite and PostgreSQL alike.

#![allow(clippy::unwrap_used)] // Test helpers panic on failure by design.

use chrono::{DateTime, Duration, Utc};
use memtape_core::erasure::{ERASED_TEXT, Erased, Selector, TOMBSTONE};
use memtape_core::events::BuiltinEvent;
use memtape_core::{
    Entry, EntryId, ErasedHow, Event, Filter, Kind, Message, NewEntry, Payload, Scope, ToolCall,
};
use memtape_store::{Claim, EraseMode, EraseRequest, EraseTarget, MemoryStore, SqliteStore, Store};
use serde_json::json;

const SECRET: &str = "4111-1111-ZOË";

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::seconds(1_700_000_000 + secs)
}

fn agent(tenant: &str) -> Scope {
    Scope::agent(tenant, "bot").unwrap()
}

fn session(tenant: &str, user: &str, name: &str) -> Scope {
    agent(tenant)
        .with_user(user)
        .unwrap()
        .with_session(name)
        .unwrap()
}

fn msg(scope: &Scope, m: Message) -> NewEntry {
    NewEntry::new(scope.clone(), Payload::Message(m), t(0))
}

fn request(
    target: EraseTarget,
    mode: EraseMode,
    receipt: Scope,
    selector: Selector,
) -> EraseRequest {
    EraseRequest {
        target,
        mode,
        receipt_scope: receipt,
        selector,
        by: "cli".into(),
        reason: "the user asked".into(),
        at: t(100),
        dry_run: false,
    }
}

/// A tape with the secret in a user message, a tool call's arguments (escaped), a tool
/// result, meta, an event, and a session of another user and of another tenant.
fn fill(store: &dyn Store) -> Vec<Entry> {
    let s1 = session("acme", "ann", "s1");
    let s2 = session("acme", "bob", "s2");
    let other = session("zeta", "ann", "s1");
    let mut user = Message::user(format!("my card is {SECRET}"));
    user.name = Some("ann".into());
    let mut with_meta = msg(&s1, user);
    with_meta.meta.insert("note".into(), json!(SECRET));
    let escaped = serde_json::to_string(&json!({ "card": SECRET })).unwrap();
    let escaped = escaped.replace('Ë', "\\u00cb");
    let mut all = store
        .append(vec![
            with_meta,
            msg(
                &s1,
                Message::assistant_tool_calls(vec![ToolCall::function("c1", "pay", escaped)]),
            ),
            msg(&s1, Message::tool_result("c1", format!("charged {SECRET}"))),
            msg(&s1, Message::assistant("done")),
            NewEntry::new(
                agent("acme").with_user("ann").unwrap(),
                Payload::Event(Event {
                    name: "note.saved".into(),
                    data: json!({ "text": SECRET }),
                }),
                t(1),
            ),
            msg(&s2, Message::user(format!("bob's own {SECRET}"))),
            msg(&other, Message::user(format!("zeta keeps {SECRET}"))),
        ])
        .unwrap();
    all.sort_by_key(|e| e.id);
    all
}

fn each_store(check: impl Fn(&dyn Store)) {
    check(&MemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    check(&SqliteStore::create(dir.path()).unwrap());
    let db = memtape_postgres::testing::Scratch::new();
    check(&memtape_postgres::PostgresStore::connect(db.url()).unwrap());
}

fn receipt_of(entry: &Entry) -> Erased {
    match BuiltinEvent::from_payload(&entry.payload).unwrap() {
        Some(BuiltinEvent::Erased(e)) => e,
        other => panic!("not a receipt: {other:?}"),
    }
}

#[test]
fn a_session_erasure_leaves_tombstones_with_their_structure_and_a_receipt() {
    each_store(|store| {
        let all = fill(store);
        let s1 = session("acme", "ann", "s1");
        assert_eq!(store.last_erasure().unwrap(), EntryId(0));
        store.claim_request("acme", "k", "fp", t(0)).unwrap();
        store
            .finish_request("acme", "k", 201, SECRET.as_bytes())
            .unwrap();
        store.claim_request("zeta", "k", "fp", t(0)).unwrap();
        let out = store
            .erase(&request(
                EraseTarget::Within(s1.clone()),
                EraseMode::Whole,
                s1.clone(),
                Selector::Session {
                    session: "s1".into(),
                },
            ))
            .unwrap();
        assert_eq!((out.entries, out.redacted), (4, 0));
        assert_eq!(out.ids, all[..4].iter().map(|e| e.id).collect::<Vec<_>>());
        let receipt = out.receipt.unwrap();
        assert_eq!(receipt.scope, s1);
        assert_eq!(store.last_erasure().unwrap(), receipt.id);
        // The tenant's idempotency records are scrubbed; another tenant's are not.
        assert_eq!(
            store.claim_request("acme", "k", "fp", t(1)).unwrap(),
            Claim::Answered {
                fingerprint: format!("erased:{}", receipt.id),
                status: 201,
                body: format!("{{\"erased\":{}}}", receipt.id).into_bytes(),
            }
        );
        assert_eq!(
            store.claim_request("zeta", "k", "fp", t(1)).unwrap(),
            Claim::Running {
                fingerprint: "fp".into()
            }
        );
        let erased = receipt_of(&receipt);
        assert_eq!(erased.ids, vec![(all[0].id, all[3].id)]);
        assert_eq!(erased.reason, "the user asked");
        assert!(!serde_json::to_string(&receipt).unwrap().contains("4111"));

        let after = store.scan(&s1, &Filter::default()).unwrap();
        assert_eq!(after.len(), 5, "four tombstones and the receipt");
        for (old, new) in all[..4].iter().zip(&after) {
            assert_eq!(
                (new.id, new.kind(), new.parent, new.created_at),
                (old.id, old.kind(), old.parent, old.created_at)
            );
            assert!(new.is_tombstone());
            assert_eq!(new.erased.unwrap().by, receipt.id);
            assert!(new.meta.is_empty());
            let text = serde_json::to_string(new).unwrap();
            assert!(!text.contains("4111") && !text.contains("done"), "{text}");
        }
        // Calls and results still pair.
        assert_eq!(after[1].message().unwrap().tool_calls[0].id, "c1");
        assert_eq!(
            after[2].message().unwrap().tool_call_id.as_deref(),
            Some("c1")
        );
        // Bob, ann's memory event and the other tenant are untouched.
        for keep in &all[4..] {
            let now = store.get(keep.scope.tenant(), keep.id).unwrap().unwrap();
            assert_eq!(&now, keep);
        }
        // A second erasure of the same session finds nothing new; its receipt says so.
        let again = store
            .erase(&request(
                EraseTarget::Within(s1.clone()),
                EraseMode::Whole,
                s1.clone(),
                Selector::Session {
                    session: "s1".into(),
                },
            ))
            .unwrap();
        assert_eq!((again.entries, again.redacted), (0, 0));
        assert!(receipt_of(&again.receipt.unwrap()).ids.is_empty());
    });
}

#[test]
fn an_erasure_by_text_redacts_every_string_in_its_scope_and_nothing_else() {
    each_store(|store| {
        let all = fill(store);
        let ann = agent("acme").with_user("ann").unwrap();
        let out = store
            .erase(&request(
                EraseTarget::Within(ann.clone()),
                EraseMode::Text(SECRET.into()),
                ann.clone(),
                Selector::Text,
            ))
            .unwrap();
        // ann's message (text and meta), the escaped call, the result and the event.
        assert_eq!((out.entries, out.redacted), (0, 4));
        for e in &all[..5] {
            let now = store.get("acme", e.id).unwrap().unwrap();
            let text = serde_json::to_string(&now).unwrap();
            assert!(!text.contains("4111") && !text.contains("u00cb"), "{text}");
            if e.id == all[3].id {
                assert_eq!(&now, e, "the entry without the text is left alone");
            } else {
                assert_eq!(now.erased.unwrap().how, ErasedHow::Text);
                assert!(text.contains(ERASED_TEXT), "{text}");
            }
        }
        let first = store.get("acme", all[0].id).unwrap().unwrap();
        assert_eq!(
            first.message().unwrap().content_text(),
            "my card is [erased]"
        );
        assert_eq!(first.meta["note"], json!(ERASED_TEXT));
        // Bob (another user) and zeta (another tenant) keep theirs.
        for keep in &all[5..] {
            assert_eq!(
                &store.get(keep.scope.tenant(), keep.id).unwrap().unwrap(),
                keep
            );
        }
        // A name holding the text makes the entry a tombstone.
        let named = store
            .append(vec![NewEntry::new(
                ann.clone(),
                Payload::Event(Event {
                    name: format!("tag.{SECRET}"),
                    data: json!({}),
                }),
                t(2),
            )])
            .unwrap();
        store
            .erase(&request(
                EraseTarget::Within(ann.clone()),
                EraseMode::Text(SECRET.into()),
                ann,
                Selector::Text,
            ))
            .unwrap();
        let now = store.get("acme", named[0].id).unwrap().unwrap();
        assert_eq!(now.payload.name(), Some(TOMBSTONE));
        assert!(now.is_tombstone());
    });
}

#[test]
fn a_user_erasure_takes_every_agent_and_a_dry_run_changes_nothing() {
    each_store(|store| {
        let all = fill(store);
        let elsewhere = Scope::agent("acme", "other-bot")
            .unwrap()
            .with_user("ann")
            .unwrap()
            .with_session("x")
            .unwrap();
        store
            .append(vec![msg(&elsewhere, Message::user("hello"))])
            .unwrap();
        let mut req = request(
            EraseTarget::User {
                tenant: "acme".into(),
                user: "ann".into(),
            },
            EraseMode::Whole,
            agent("acme"),
            Selector::User { user: "ann".into() },
        );
        req.dry_run = true;
        let last = store.last_id().unwrap();
        let dry = store.erase(&req).unwrap();
        assert_eq!((dry.entries, dry.redacted, dry.receipt), (6, 0, None));
        assert_eq!(store.last_id().unwrap(), last, "a dry run writes nothing");
        assert_eq!(&store.get("acme", all[0].id).unwrap().unwrap(), &all[0]);

        req.dry_run = false;
        let out = store.erase(&req).unwrap();
        assert_eq!(out.ids, dry.ids);
        assert!(
            store
                .scan(&elsewhere, &Filter::default())
                .unwrap()
                .iter()
                .all(Entry::is_tombstone)
        );
        assert!(
            !store
                .get("acme", all[5].id)
                .unwrap()
                .unwrap()
                .is_tombstone()
        );
    });
}

#[test]
fn entries_by_id_are_taken_only_inside_the_callers_scope() {
    each_store(|store| {
        let all = fill(store);
        let ann = agent("acme").with_user("ann").unwrap();
        // ann's first message, bob's message, zeta's message, an id that does not exist and
        // the largest id there is.
        let ids = vec![all[0].id, all[5].id, all[6].id, EntryId(999), EntryId::MAX];
        let out = store
            .erase(&request(
                EraseTarget::Entries {
                    within: ann.clone(),
                    ids,
                },
                EraseMode::Whole,
                ann,
                Selector::Entries,
            ))
            .unwrap();
        assert_eq!(out.ids, vec![all[0].id]);
        assert_eq!(&store.get("acme", all[5].id).unwrap().unwrap(), &all[5]);
        assert_eq!(&store.get("zeta", all[6].id).unwrap().unwrap(), &all[6]);
    });
}

#[test]
fn bad_requests_are_refused_before_anything_changes() {
    each_store(|store| {
        let all = fill(store);
        let ann = agent("acme").with_user("ann").unwrap();
        for (mode, receipt, why) in [
            (EraseMode::Text("ab".into()), ann.clone(), "shorter than 4"),
            (EraseMode::Text("   ".into()), ann.clone(), "empty"),
            (EraseMode::Whole, agent("zeta"), "tenant"),
        ] {
            let err = store
                .erase(&request(
                    EraseTarget::Within(ann.clone()),
                    mode,
                    receipt,
                    Selector::Text,
                ))
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{err}");
        }
        let mut long = request(
            EraseTarget::Within(ann.clone()),
            EraseMode::Whole,
            ann.clone(),
            Selector::Text,
        );
        long.reason = "x".repeat(5000);
        assert!(
            store
                .erase(&long)
                .unwrap_err()
                .to_string()
                .contains("reason")
        );
        assert_eq!(&store.get("acme", all[0].id).unwrap().unwrap(), &all[0]);
        // Nobody may write a tombstone as a new entry.
        let fake = NewEntry::new(
            ann,
            Payload::Event(Event {
                name: TOMBSTONE.into(),
                data: json!(null),
            }),
            t(3),
        );
        assert!(store.append(vec![fake]).is_err());
    });
}

/// Every file under `dir`, and whether any holds `needle` (UTF-8, UTF-16LE or as a JSON
/// `\u` escape of its non-ASCII letter).
fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let utf16: Vec<u8> = needle.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let escaped = needle.replace('Ë', "\\u00cb");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        for pattern in [needle.as_bytes(), &utf16, escaped.as_bytes(), b"4111-1111"] {
            if bytes.windows(pattern.len()).any(|w| w == pattern) {
                found.push(path.display().to_string());
                break;
            }
        }
    }
    found
}

#[test]
fn no_byte_of_the_erased_text_is_left_in_the_sqlite_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let ann = session("acme", "ann", "s1");
    // Enough text that entries spill into overflow pages and many pages are written.
    let long = format!("{SECRET} {}", "lorem ipsum ".repeat(2000));
    for i in 0..50 {
        store
            .append(vec![msg(&ann, Message::user(format!("{i}: {long}")))])
            .unwrap();
    }
    store
        .append(vec![msg(
            &session("acme", "bob", "s2"),
            Message::user("nothing secret"),
        )])
        .unwrap();
    // An answered request whose body quotes the text, and one under way.
    assert_eq!(
        store
            .claim_request("acme", "k1", &format!("fp {SECRET}"), t(0))
            .unwrap(),
        Claim::Claimed
    );
    store
        .finish_request(
            "acme",
            "k1",
            200,
            format!("{{\"text\":\"{SECRET}\"}}").as_bytes(),
        )
        .unwrap();
    store.claim_request("acme", "k2", "fp2", t(0)).unwrap();
    assert!(
        !files_holding(dir.path(), SECRET).is_empty(),
        "the text is there to erase"
    );
    // A reader in another connection has read (and let go): the log can be truncated.
    assert_eq!(store.scan(&ann, &Filter::default()).unwrap().len(), 50);
    let out = store
        .erase(&request(
            EraseTarget::User {
                tenant: "acme".into(),
                user: "ann".into(),
            },
            EraseMode::Whole,
            agent("acme"),
            Selector::User { user: "ann".into() },
        ))
        .unwrap();
    assert_eq!(out.entries, 50);
    assert!(out.wiped, "the write-ahead log was truncated");
    // A retry under either key is told the key belongs to another request: it never
    // runs again, and nothing of the first answer is left.
    let receipt = out.receipt.unwrap().id;
    assert_eq!(
        store
            .claim_request("acme", "k1", &format!("fp {SECRET}"), t(1))
            .unwrap(),
        Claim::Answered {
            fingerprint: format!("erased:{receipt}"),
            status: 200,
            body: format!("{{\"erased\":{receipt}}}").into_bytes(),
        }
    );
    assert_eq!(
        store.claim_request("acme", "k2", "fp2", t(1)).unwrap(),
        Claim::Running {
            fingerprint: format!("erased:{receipt}")
        }
    );
    assert_eq!(files_holding(dir.path(), SECRET), Vec::<String>::new());
    // The store is sound and reads the same after reopening.
    assert_eq!(store.integrity_check().unwrap(), "ok");
    drop(store);
    let store = SqliteStore::open(dir.path()).unwrap();
    let after = store.scan(&ann, &Filter::default()).unwrap();
    assert!(after.iter().all(Entry::is_tombstone));
    assert_eq!(after[0].kind(), Kind::Message);
    assert_eq!(files_holding(dir.path(), SECRET), Vec::<String>::new());
}

#[test]
fn the_database_lets_only_an_erasure_replace_content_and_never_structure() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let ann = session("acme", "ann", "s1");
    store
        .append(vec![msg(&ann, Message::user("keep"))])
        .unwrap();
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    for sql in [
        "UPDATE entries SET payload = '{}'",
        "UPDATE entries SET payload = '{}', erased_by = 9, erased_how = 'whole'",
        "DELETE FROM entries",
    ] {
        let err = conn.execute(sql, []).unwrap_err().to_string();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    // Even with the erasure's guard up, structure cannot change.
    let tx = conn.unchecked_transaction().unwrap();
    tx.execute("INSERT INTO erasing VALUES (1)", []).unwrap();
    for sql in [
        "UPDATE entries SET id = 99, erased_by = 9, erased_how = 'whole'",
        "UPDATE entries SET created_at = 0, erased_by = 9, erased_how = 'whole'",
        "UPDATE entries SET payload = '{}'",
        "UPDATE entries SET erased_by = 9, erased_how = 'gone'",
        "DELETE FROM entries",
    ] {
        let err = tx.execute(sql, []).unwrap_err().to_string();
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    drop(tx);
    assert_eq!(
        store.scan(&ann, &Filter::default()).unwrap()[0]
            .message()
            .unwrap()
            .content_text(),
        "keep"
    );
}

#[test]
fn a_session_erasure_takes_that_session_only_not_its_namesakes_of_other_users() {
    each_store(|store| {
        let agents_own = agent("acme").with_session("s1").unwrap();
        let anns = session("acme", "ann", "s1");
        let node = anns.clone().with_node("n1").unwrap();
        let ids: Vec<EntryId> = store
            .append(vec![
                msg(&agents_own, Message::user("the agent's own")),
                msg(&anns, Message::user("ann's")),
                msg(&node, Message::user("ann's node")),
            ])
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        let erase = |scope: &Scope| {
            store
                .erase(&request(
                    EraseTarget::Session(scope.clone()),
                    EraseMode::Whole,
                    scope.clone(),
                    Selector::Session {
                        session: "s1".into(),
                    },
                ))
                .unwrap()
        };
        // The agent's own session s1: not ann's s1.
        assert_eq!(erase(&agents_own).ids, vec![ids[0]]);
        // Ann's s1, with its node.
        assert_eq!(erase(&anns).ids, vec![ids[1], ids[2]]);
    });
}

/// The files of a PostgreSQL database (`base/<oid>/` of the cluster), and its client.
fn pg_files(db: &memtape_postgres::testing::Scratch) -> (std::path::PathBuf, postgres::Client) {
    let mut client = db.client();
    let dir: String = client.query_one("SHOW data_directory", &[]).unwrap().get(0);
    let oid: u32 = client
        .query_one(
            "SELECT oid FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    (
        std::path::Path::new(&dir).join(format!("base/{oid}")),
        client,
    )
}

/// On PostgreSQL the rows are rewritten and the erasure's vacuum removes the old row
/// versions: after it (and a checkpoint, which writes the pages out), no file of the
/// database holds the text, in a short message or in a long one kept out of line (TOAST).
#[test]
fn no_byte_of_the_erased_text_is_left_in_the_postgres_tables_after_the_vacuum() {
    let db = memtape_postgres::testing::Scratch::new();
    let store = memtape_postgres::PostgresStore::connect(db.url()).unwrap();
    let (dir, mut client) = pg_files(&db);
    let ann = session("acme", "ann", "s1");
    // Text that does not compress, so TOAST keeps it out of line as it is.
    let noise: String = (0..6000)
        .map(|_| char::from(b'a' + fastrand::u8(..26)))
        .collect();
    store
        .append(vec![
            msg(&ann, Message::user(format!("my card is {SECRET}"))),
            msg(&ann, Message::user(format!("{noise} {SECRET} {noise}"))),
        ])
        .unwrap();
    client.batch_execute("CHECKPOINT").unwrap();
    assert!(
        !files_holding(&dir, SECRET).is_empty(),
        "the scan sees the text before the erasure"
    );
    let outcome = store
        .erase(&request(
            EraseTarget::Within(agent("acme")),
            EraseMode::Text(SECRET.into()),
            agent("acme"),
            Selector::Text,
        ))
        .unwrap();
    assert_eq!(outcome.redacted, 2);
    assert!(outcome.wiped, "the vacuum ran");
    client.batch_execute("CHECKPOINT").unwrap();
    // The erasure's plain vacuum removes the dead row versions, but a page's free space
    // can keep their bytes (measured: the TOAST table's chunk of the long message).
    let toast: String = client
        .query_one(
            "SELECT pg_relation_filepath(reltoastrelid) FROM pg_class WHERE relname = 'memtape_entries'",
            &[],
        )
        .unwrap()
        .get(0);
    let left = files_holding(&dir, SECRET);
    assert!(left.iter().all(|f| f.ends_with(&toast)), "{left:?}");
    // The documented step: `compact` (VACUUM FULL) rewrites the tables into new files.
    store.compact().unwrap();
    client.batch_execute("CHECKPOINT").unwrap();
    assert_eq!(files_holding(&dir, SECRET), Vec::<String>::new());
    // The trigger: outside an erasure, nothing can be changed or deleted.
    for sql in [
        "UPDATE memtape_entries SET payload = '{}'",
        "UPDATE memtape_entries SET payload = '{}', erased_by = 9, erased_how = 'whole'",
        "DELETE FROM memtape_entries",
    ] {
        let err = client.batch_execute(sql).unwrap_err();
        assert!(format!("{err:?}").contains("append-only"), "{sql}: {err:?}");
    }
    // With the erasure's setting on, structure still cannot change.
    for sql in [
        "UPDATE memtape_entries SET id = id + 100, erased_by = 9, erased_how = 'whole'",
        "UPDATE memtape_entries SET created_at = 0, erased_by = 9, erased_how = 'whole'",
        "UPDATE memtape_entries SET payload = '{}'",
        "DELETE FROM memtape_entries",
    ] {
        let mut tx = client.transaction().unwrap();
        tx.batch_execute("SET LOCAL memtape.erasing = 'on'")
            .unwrap();
        let err = tx.batch_execute(sql).unwrap_err();
        assert!(format!("{err:?}").contains("append-only"), "{sql}: {err:?}");
    }
}
