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
use memtape_store::erase::{EraseTransaction, Pending, STEP, StepStore};
use memtape_store::{
    Claim, EraseMode, EraseOutcome, EraseRequest, EraseTarget, MemoryStore, SqliteStore, Store,
};
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

/// Every file under `dir` (its folders too: the erasure's lock file lives in `locks/`)
/// that holds `needle` (UTF-8, UTF-16LE or as a JSON `\u` escape of its non-ASCII
/// letter).
fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let utf16: Vec<u8> = needle.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let escaped = needle.replace('Ë', "\\u00cb");
    let mut found = Vec::new();
    // PostgreSQL makes and removes files while the test reads its folder: one that is gone
    // by the time it is read holds nothing.
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let entries = match std::fs::read_dir(dir) {
        Err(e) if gone(&e) => return Vec::new(),
        entries => entries.unwrap(),
    };
    for entry in entries {
        let path = match entry {
            Err(e) if gone(&e) => continue,
            entry => entry.unwrap().path(),
        };
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Err(e) if gone(&e) => continue,
            bytes => bytes.unwrap(),
        };
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

/// A store whose erasure steps fail after the first `steps` (as if its process died
/// there: what the failed step would have written is rolled back, the rest stays), to
/// stop an erasure between its receipt and its end.
struct Interrupted<'a, S> {
    inner: &'a S,
    steps: std::sync::atomic::AtomicUsize,
}

impl<S: StepStore> StepStore for Interrupted<'_, S> {
    fn erase_step(
        &self,
        f: &mut dyn FnMut(&mut dyn EraseTransaction) -> memtape_store::Result<()>,
    ) -> memtape_store::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self
            .steps
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            return Err(memtape_store::Error::ReadOnly("interrupted".into()));
        }
        self.inner.erase_step(f)
    }

    fn pending_erasures(&self) -> memtape_store::Result<Vec<Pending>> {
        self.inner.pending_erasures()
    }

    fn wipe(&self) -> memtape_store::Result<bool> {
        self.inner.wipe()
    }
}

/// Every read and write as the store underneath does it.
impl<S: StepStore> Store for Interrupted<'_, S> {
    fn append(&self, entries: Vec<NewEntry>) -> memtape_store::Result<Vec<Entry>> {
        self.inner.append(entries)
    }
    fn append_reserved(&self, entries: Vec<NewEntry>) -> memtape_store::Result<Vec<Entry>> {
        self.inner.append_reserved(entries)
    }
    fn append_then(
        &self,
        entries: Vec<NewEntry>,
        then: &mut dyn FnMut(&[Entry]) -> Vec<NewEntry>,
    ) -> memtape_store::Result<(Vec<Entry>, Vec<Entry>)> {
        self.inner.append_then(entries, then)
    }
    fn restore(&self, entries: Vec<Entry>) -> memtape_store::Result<memtape_store::Restored> {
        self.inner.restore(entries)
    }
    fn erase_with(
        &self,
        request: &EraseRequest,
        before_end: memtape_store::erase::BeforeEnd<'_>,
    ) -> memtape_store::Result<EraseOutcome> {
        memtape_store::erase::erase(self, request, before_end)
    }
    fn finish_erasures_with(
        &self,
        before_end: memtape_store::erase::BeforeEnd<'_>,
    ) -> memtape_store::Result<Vec<EraseOutcome>> {
        memtape_store::erase::finish(self, before_end)
    }
    fn last_erasure(&self) -> memtape_store::Result<EntryId> {
        self.inner.last_erasure()
    }
    fn get(&self, tenant: &str, id: EntryId) -> memtape_store::Result<Option<Entry>> {
        self.inner.get(tenant, id)
    }
    fn get_many(&self, tenant: &str, ids: &[EntryId]) -> memtape_store::Result<Vec<Entry>> {
        self.inner.get_many(tenant, ids)
    }
    fn scan(&self, scope: &Scope, filter: &Filter) -> memtape_store::Result<Vec<Entry>> {
        self.inner.scan(scope, filter)
    }
    fn scope_info(&self, scope: &Scope) -> memtape_store::Result<Option<memtape_store::ScopeInfo>> {
        self.inner.scope_info(scope)
    }
    fn scopes(&self, tenant: &str) -> memtape_store::Result<Vec<memtape_store::ScopeInfo>> {
        self.inner.scopes(tenant)
    }
    fn tenants(&self) -> memtape_store::Result<Vec<String>> {
        self.inner.tenants()
    }
    fn tape_id(&self) -> memtape_store::Result<String> {
        self.inner.tape_id()
    }
    fn last_id(&self) -> memtape_store::Result<EntryId> {
        self.inner.last_id()
    }
    fn entries_after(&self, after: EntryId, limit: usize) -> memtape_store::Result<Vec<Entry>> {
        self.inner.entries_after(after, limit)
    }
    fn erasures_under_way(&self) -> memtape_store::Result<Vec<EntryId>> {
        self.inner.erasures_under_way()
    }
    fn entries_after_in(
        &self,
        tenant: &str,
        after: EntryId,
        limit: usize,
    ) -> memtape_store::Result<Vec<Entry>> {
        self.inner.entries_after_in(tenant, after, limit)
    }
    fn vectors(
        &self,
        tenant: &str,
        embedder: &str,
        ids: &[EntryId],
    ) -> memtape_store::Result<Vec<(EntryId, Vec<u8>)>> {
        self.inner.vectors(tenant, embedder, ids)
    }
    fn put_vectors(
        &self,
        embedder: &str,
        vectors: &[memtape_store::NewVector],
    ) -> memtape_store::Result<()> {
        self.inner.put_vectors(embedder, vectors)
    }
    fn lock(
        &self,
        tenant: &str,
        name: &str,
        wait: memtape_store::Wait,
    ) -> memtape_store::Result<Option<memtape_store::StoreLock>> {
        self.inner.lock(tenant, name, wait)
    }
    fn claim_request(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> memtape_store::Result<Claim> {
        self.inner.claim_request(tenant, key, fingerprint, now)
    }
    fn finish_request(
        &self,
        tenant: &str,
        key: &str,
        status: u16,
        body: &[u8],
    ) -> memtape_store::Result<()> {
        self.inner.finish_request(tenant, key, status, body)
    }
    fn release_request(&self, tenant: &str, key: &str) -> memtape_store::Result<()> {
        self.inner.release_request(tenant, key)
    }
}

/// An erasure stopped after its receipt and its first step of rewrites (its process
/// died, or a step failed): the receipt stands and says what will go, the erasure is
/// under way (the entries of the steps done are rewritten, the rest not yet), no follower
/// of the tape passes its receipt, appends go on and are read at once by scope, and
/// whoever finishes it — `finish_erasures`, or the tenant's next erasure — rewrites the
/// rest exactly as the receipt says; then followers go on past it.
fn an_interrupted_erasure_is_finished_as_its_receipt_says<S: StepStore>(store: &S) {
    use std::sync::atomic::AtomicUsize;
    let ann = session("acme", "ann", "long");
    let bob = session("acme", "bob", "s1");
    let many: Vec<NewEntry> = (0..2 * STEP + 10)
        .map(|i| msg(&ann, Message::user(format!("line {i}: {SECRET}"))))
        .collect();
    let anns = store.append(many).unwrap();
    store.claim_request("acme", "k", "fp", t(0)).unwrap();
    let interrupted = Interrupted {
        inner: store,
        steps: AtomicUsize::new(2),
    };
    let user = |dry_run| EraseRequest {
        dry_run,
        ..request(
            EraseTarget::User {
                tenant: "acme".into(),
                user: "ann".into(),
            },
            EraseMode::Whole,
            agent("acme"),
            Selector::User { user: "ann".into() },
        )
    };
    let mut ends = 0;
    let mut count = |_: &mut EraseOutcome| ends += 1;
    assert!(memtape_store::erase::erase(&interrupted, &user(false), &mut count).is_err());
    assert_eq!(ends, 0, "stopped before its end");
    let pending = store.pending_erasures().unwrap();
    assert_eq!(pending.len(), 1);
    let receipt_id = pending[0].receipt;
    let receipt = store.get("acme", receipt_id).unwrap().unwrap();
    assert_eq!(receipt_of(&receipt).entries, anns.len() as u64);
    let read = store.scan(&ann, &Filter::default()).unwrap();
    let done = read.iter().filter(|e| e.erased.is_some()).count();
    assert_eq!(done, STEP, "the first step's rewrites stand, the rest wait");
    // Followers wait at the receipt; the memory logs' mark does not move yet.
    assert_eq!(store.last_id().unwrap(), EntryId(receipt_id.0 - 1));
    let before = EntryId(receipt_id.0 - 1);
    assert!(store.entries_after(before, 10).unwrap().is_empty());
    assert_eq!(store.last_erasure().unwrap(), EntryId(0));
    // Another user's append is stored and read at once by scope, followed later.
    let later = store
        .append(vec![msg(&bob, Message::user("meanwhile"))])
        .unwrap();
    assert_eq!(store.scan(&bob, &Filter::default()).unwrap(), later);
    assert!(store.entries_after(before, 10).unwrap().is_empty());
    assert!(
        store
            .entries_after_in("acme", before, 10)
            .unwrap()
            .is_empty()
    );
    // A dry run counts without waiting for the erasure.
    let dry = store.erase(&user(true)).unwrap();
    assert!(dry.receipt.is_none());

    let mut files_of = Vec::new();
    let finished = store
        .finish_erasures_with(&mut |o| files_of.push(o.receipt.as_ref().map(|r| r.id)))
        .unwrap();
    assert_eq!(files_of, vec![Some(receipt_id)], "before its end");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].entries, anns.len() as u64);
    assert_eq!(finished[0].receipt.as_ref().unwrap().id, receipt_id);
    assert!(store.pending_erasures().unwrap().is_empty());
    let read = store.scan(&ann, &Filter::default()).unwrap();
    assert!(
        read.iter()
            .all(|e| e.is_tombstone() && e.erased.unwrap().by == receipt_id)
    );
    assert_eq!(store.last_erasure().unwrap(), receipt_id);
    let followed: Vec<EntryId> = store
        .entries_after(before, 10)
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(followed, vec![receipt_id, later[0].id]);
    let followed_in: Vec<EntryId> = store
        .entries_after_in("acme", before, 10)
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(followed_in, followed, "one tenant's followers wait alike");
    // The idempotency records were scrubbed by the last step.
    assert_eq!(
        store.claim_request("acme", "k", "fp", t(0)).unwrap(),
        Claim::Running {
            fingerprint: format!("erased:{receipt_id}")
        }
    );

    // By text, stopped after its receipt: the tenant's next erasure finishes it first.
    let bobs = store
        .append(vec![msg(&bob, Message::user(format!("bob's {SECRET}")))])
        .unwrap();
    let interrupted = Interrupted {
        inner: store,
        steps: AtomicUsize::new(1),
    };
    let text = request(
        EraseTarget::Within(agent("acme")),
        EraseMode::Text(SECRET.into()),
        agent("acme"),
        Selector::Text,
    );
    assert!(memtape_store::erase::erase(&interrupted, &text, &mut |_| {}).is_err());
    assert_eq!(store.pending_erasures().unwrap().len(), 1);
    assert!(
        store
            .get("acme", bobs[0].id)
            .unwrap()
            .unwrap()
            .erased
            .is_none()
    );
    let next = store
        .erase(&request(
            EraseTarget::Session(bob.clone()),
            EraseMode::Whole,
            bob.clone(),
            Selector::Session {
                session: "s1".into(),
            },
        ))
        .unwrap();
    assert_eq!(next.finished.len(), 1);
    assert_eq!(next.finished[0].redacted, 1);
    assert!(store.pending_erasures().unwrap().is_empty());
    let bob_now = store.get("acme", bobs[0].id).unwrap().unwrap();
    assert!(bob_now.is_tombstone(), "redacted first, then erased whole");
    assert_eq!(bob_now.erased.unwrap().by, next.receipt.unwrap().id);

    // A reader of the whole tape (an export, a migration) does not stop at an erasure
    // under way: it finishes one a dead process left and reads on.
    let last = store.last_id().unwrap();
    let interrupted = Interrupted {
        inner: store,
        steps: AtomicUsize::new(1),
    };
    let entries = request(
        EraseTarget::Entries {
            within: agent("acme"),
            ids: vec![anns[0].id],
        },
        EraseMode::Whole,
        agent("acme"),
        Selector::Entries,
    );
    assert!(memtape_store::erase::erase(&interrupted, &entries, &mut |_| {}).is_err());
    let receipt = store.pending_erasures().unwrap()[0].receipt;
    let after = store
        .append(vec![msg(&bob, Message::user("after"))])
        .unwrap();
    assert_eq!(store.last_id().unwrap(), last);
    let all =
        memtape_store::erase::entries_after_all(store, last, 10, std::time::Duration::from_secs(5))
            .unwrap();
    let all: Vec<EntryId> = all.iter().map(|e| e.id).collect();
    assert_eq!(all, vec![receipt, after[0].id]);
    assert!(store.pending_erasures().unwrap().is_empty());
}

#[test]
fn an_interrupted_erasure_is_finished_on_every_store() {
    an_interrupted_erasure_is_finished_as_its_receipt_says(&MemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    an_interrupted_erasure_is_finished_as_its_receipt_says(
        &SqliteStore::create(dir.path()).unwrap(),
    );
    let db = memtape_postgres::testing::Scratch::new();
    an_interrupted_erasure_is_finished_as_its_receipt_says(
        &memtape_postgres::PostgresStore::connect(db.url()).unwrap(),
    );
}

#[test]
fn an_erasure_deletes_the_vectors_of_what_it_rewrites_and_a_stale_vector_is_not_kept() {
    each_store(|store| {
        let all = fill(store);
        let v = |e: &Entry, erased_by: Option<EntryId>| memtape_store::NewVector {
            id: e.id,
            erased_by,
            bytes: vec![7; 388],
        };
        let vectors: Vec<_> = all.iter().map(|e| v(e, None)).collect();
        store.put_vectors("m@1", &vectors).unwrap();
        let ids: Vec<EntryId> = all.iter().map(|e| e.id).collect();
        let acme_before = store.vectors("acme", "m@1", &ids).unwrap().len();
        assert_eq!(acme_before, all.len() - 1);
        let ann = agent("acme").with_user("ann").unwrap();
        let out = store
            .erase(&request(
                EraseTarget::Within(ann.clone()),
                EraseMode::Text(SECRET.into()),
                ann,
                Selector::Text,
            ))
            .unwrap();
        let rewritten: Vec<EntryId> = out.ids.clone();
        assert!(!rewritten.is_empty());
        let kept: Vec<EntryId> = store
            .vectors("acme", "m@1", &ids)
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        for id in &ids {
            let erased = rewritten.contains(id);
            let theirs = all
                .iter()
                .any(|e| e.id == *id && e.scope.tenant() == "zeta");
            assert_eq!(kept.contains(id), !erased && !theirs, "entry {id}");
        }
        // A vector made before the erasure (mark None) is not kept for a rewritten entry;
        // one made of the redacted text (its new mark) is.
        let first = store.get("acme", rewritten[0]).unwrap().unwrap();
        let mark = first.erased.as_ref().map(|e| e.by);
        assert!(mark.is_some());
        store.put_vectors("m@1", &[v(&first, None)]).unwrap();
        assert!(
            store
                .vectors("acme", "m@1", &[first.id])
                .unwrap()
                .is_empty()
        );
        store.put_vectors("m@1", &[v(&first, mark)]).unwrap();
        assert_eq!(store.vectors("acme", "m@1", &[first.id]).unwrap().len(), 1);
    });
}
