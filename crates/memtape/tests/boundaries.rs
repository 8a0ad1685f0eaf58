//! Regression tests for issue 10's boundary defects, each named after the defect: what
//! came in through an import, an append or a read and bricked a store, crossed a scope or
//! escaped the data directory. All on the real SQLite store in a temporary directory.
use memtape::{
    Engine, EntryId, Error, Format, Message, Placement, Scope, SqliteStore, Store, events,
};
use serde_json::json;

fn engine(dir: &tempfile::TempDir) -> Engine<SqliteStore> {
    Engine::init(dir.path()).unwrap()
}

fn agent(tenant: &str) -> Scope {
    Scope::agent(tenant, "default").unwrap()
}

fn chat(tenant: &str, session: &str) -> Scope {
    agent(tenant).with_session(session).unwrap()
}

/// One memtape-format line: a user message with `id` in `scope`.
fn message_line(id: u64, scope: &Scope, text: &str) -> String {
    json!({
        "id": id,
        "scope": scope,
        "kind": "message",
        "created_at": "2026-01-01T00:00:00Z",
        "payload": {"role": "user", "content": text},
    })
    .to_string()
}

/// One memtape-format line: an event with `id` in `scope`.
fn event_line(id: u64, scope: &Scope, name: &str, data: serde_json::Value) -> String {
    json!({
        "id": id,
        "scope": scope,
        "kind": "event",
        "created_at": "2026-01-01T00:00:00Z",
        "payload": {"name": name, "data": data},
    })
    .to_string()
}

fn say(e: &Engine<SqliteStore>, scope: &Scope, text: &str) -> EntryId {
    e.append(scope, Message::user(text), Default::default())
        .unwrap()
        .id
}

#[test]
fn ids_out_of_range_brick_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    say(&e, &chat("default", "before"), "hello");
    // 2^63 was stored wrapped, 2^63-1 took the last id SQLite has, 2^64-1 became -1.
    for id in [1u64 << 63, (1u64 << 63) - 1, u64::MAX, 1u64 << 53] {
        let line = message_line(id, &chat("default", &format!("s{id}")), "x");
        let err = e
            .import(Format::Memtape, &line, &agent("default"), None)
            .unwrap_err();
        assert!(err.to_string().contains("not an entry id"), "{id}: {err}");
    }
    // The largest id there is imports, but renumbered, so appends still have ids.
    let line = message_line(EntryId::MAX.0, &chat("default", "edge"), "at the edge");
    let report = e
        .import(Format::Memtape, &line, &agent("default"), None)
        .unwrap();
    assert_eq!(report.placement, Placement::Renumbered);
    let next = say(&e, &chat("default", "after"), "still appending");
    assert_eq!(next, EntryId(3));
    // And the store's own export re-imports into a fresh store, identically.
    let mut backup = Vec::new();
    e.export_store(&mut backup).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = engine(&dir2);
    let report = e2
        .restore_store(std::str::from_utf8(&backup).unwrap())
        .unwrap();
    assert_eq!((report.entries, report.placement), (3, Placement::KeptIds));
    let mut again = Vec::new();
    e2.export_store(&mut again).unwrap();
    assert_eq!(backup, again);
}

#[test]
fn a_malformed_builtin_event_bricks_memory() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    e.save_long_term(&agent("default"), "Likes tea").unwrap();
    let bad = [
        event_line(
            10,
            &agent("default"),
            events::MEMORY_CHANGE,
            json!({"ops": "x"}),
        ),
        event_line(
            10,
            &agent("default"),
            events::MEMORY_CHANGE,
            json!({"ops": [{"op": "write", "path": "../../outside.md", "content": "x"}]}),
        ),
        event_line(
            10,
            &agent("default"),
            events::MEMORY_CHANGE,
            json!({"ops": [{"op": "write", "path": "/etc/passwd", "content": "x"}]}),
        ),
        event_line(
            10,
            &chat("default", "s"),
            events::SESSION_CONSOLIDATED,
            json!({"through": "all"}),
        ),
        event_line(
            10,
            &chat("default", "s"),
            events::CONTEXT_COMPACTION,
            json!({"policy": "qanot"}),
        ),
    ];
    for line in &bad {
        let err = e
            .import(Format::Memtape, line, &agent("default"), None)
            .unwrap_err();
        assert!(
            matches!(err, Error::Invalid(_)) && err.to_string().contains("line 1"),
            "{line}: {err}"
        );
    }
    // The same decoder guards appends.
    let err = e
        .event(
            &agent("default"),
            events::MEMORY_CHANGE,
            json!({"ops": "x"}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("memory.change"), "{err}");
    let err = e
        .event(
            &chat("default", "s"),
            events::CONTEXT_WORKING_BUFFER,
            json!({"through": -3}),
        )
        .unwrap_err();
    assert!(err.to_string().contains("context.working_buffer"), "{err}");
    // Memory still reads; a free-form event of the caller's is still free.
    assert_eq!(
        e.memory(&agent("default")).unwrap().content("MEMORY.md"),
        Some("Likes tea")
    );
    e.event(&agent("default"), "memory.note", json!("anything"))
        .unwrap();
}

#[test]
fn imports_ignore_scope_and_path_rules() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    e.save_long_term(&agent("a"), "tenant a's memory").unwrap();
    // Tenant b's file names tenant a: refused, and a's MEMORY.md is untouched.
    let foreign = event_line(
        1,
        &agent("a"),
        events::MEMORY_CHANGE,
        json!({"ops": [{"op": "write", "path": "MEMORY.md", "content": "overwritten by b"}]}),
    );
    let err = e
        .import(Format::Memtape, &foreign, &agent("b"), None)
        .unwrap_err();
    assert!(matches!(err, Error::OutsideScope { .. }), "{err}");
    assert!(err.to_string().contains("--restore"), "{err}");
    // A user's import cannot reach another user's sessions or the agent's own memory.
    let u1 = agent("a").with_user("u1").unwrap();
    let u2_chat = agent("a")
        .with_user("u2")
        .unwrap()
        .with_session("s")
        .unwrap();
    let line = message_line(1, &u2_chat, "not yours");
    assert!(matches!(
        e.import(Format::Memtape, &line, &u1, None),
        Err(Error::OutsideScope { .. })
    ));
    assert!(matches!(
        e.import(Format::Memtape, &foreign, &u1.clone(), None),
        Err(Error::OutsideScope { .. })
    ));
    assert_eq!(
        e.memory(&agent("a")).unwrap().content("MEMORY.md"),
        Some("tenant a's memory")
    );
    // Inside its own scope the same file imports.
    e.import(Format::Memtape, &foreign, &agent("a"), None)
        .unwrap();
    assert_eq!(
        e.memory(&agent("a")).unwrap().content("MEMORY.md"),
        Some("overwritten by b")
    );
}

#[test]
fn scope_is_not_an_access_boundary_in_thread_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let u1 = agent("t").with_user("u1").unwrap();
    let u2 = agent("t").with_user("u2").unwrap();
    let secret = say(&e, &u1.clone().with_session("s").unwrap(), "u1's secret");
    say(&e, &u2.clone().with_session("s").unwrap(), "u2's note");
    let other_agent = Scope::agent("t", "other").unwrap();
    // u1's entry is not in u2's scope, nor in another agent's: it reads as missing.
    for scope in [&u2, &other_agent] {
        assert!(matches!(e.thread(scope, secret), Err(Error::NoEntry(_))));
    }
    assert_eq!(e.thread(&u1, secret).unwrap().len(), 1);
    assert_eq!(e.thread(&agent("t"), secret).unwrap().len(), 1);
    // Exporting u2 writes u2's data only.
    let mut out = Vec::new();
    e.export(Format::Memtape, &u2, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("u2's note") && !text.contains("secret"),
        "{text}"
    );
    // The agent's export holds both users; the whole store only comes from export_store.
    let mut out = Vec::new();
    e.export(Format::Memtape, &other_agent, &mut out).unwrap();
    assert!(out.is_empty());
}

#[test]
fn a_renumbered_restore_remaps_every_id_a_builtin_event_names() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let s = chat("default", "s");
    let first = say(&e, &s, "one");
    let second = say(&e, &s, "two");
    e.mark_consolidated(&s, first).unwrap();
    e.event(
        &s,
        events::CONTEXT_WORKING_BUFFER,
        json!({"through": second.0}),
    )
    .unwrap();
    let mut file = Vec::new();
    e.export(Format::Memtape, &agent("default"), &mut file)
        .unwrap();
    // Into a store that already has entries, under another session name: renumbered.
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = engine(&dir2);
    say(&e2, &chat("default", "x"), "occupies id 1");
    say(&e2, &chat("default", "x"), "and id 2");
    let report = e2
        .import(
            Format::Memtape,
            std::str::from_utf8(&file).unwrap(),
            &agent("default"),
            Some("copy"),
        )
        .unwrap();
    assert_eq!(report.placement, Placement::Renumbered);
    let copy = chat("default", "copy");
    let info = e2.store().scope_info(&copy).unwrap().unwrap();
    assert_eq!(info.last_consolidated, EntryId(3));
    let entries = e2.store().scan(&copy, &Default::default()).unwrap();
    let buffer = entries.last().unwrap();
    assert_eq!(buffer.payload.to_json()["data"], json!({"through": 4}));
}
