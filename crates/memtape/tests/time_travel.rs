//! Time travel and provenance through the engine on a real SQLite file: every tier as of a
//! time or an entry (memory, files through the read tools, history, the prompt, search),
//! and blame from a memory line to the tool call, the captured message or the consolidated
//! span and model call that put it there.
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use memtape::memory::paths;
use memtape::{
    AsOf, ConsolidateOptions, ContextRequest, Engine, Entry, EntryId, Filter, HistoryLimits, Index,
    IndexConfig, Kind, Message, Mode, Scope, SearchFilter, SearchRequest, Store, ToolCall,
};
use memtape_llm::{OpenAi, RetryPolicy};
use memtape_scripted::{Scripted, tool_call};
use serde_json::{Value, json};

fn session() -> Scope {
    Scope::agent("t", "a").unwrap().with_session("s").unwrap()
}

fn agent() -> Scope {
    Scope::agent("t", "a").unwrap()
}

/// An engine whose clock reads `minute` minutes after 2026-03-01 10:00.
fn open(dir: &std::path::Path, minute: &Arc<AtomicI64>) -> Engine {
    let index = Index::open(&dir.join("index"), None, IndexConfig::plain()).unwrap();
    let clock = Arc::clone(minute);
    Engine::init(dir)
        .unwrap()
        .with_clock(move || at(clock.load(Ordering::SeqCst)))
        .with_index(index)
        .unwrap()
}

fn at(minute: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap() + chrono::Duration::minutes(minute)
}

fn texts(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e.message())
        .map(|m| m.content_text().into_owned())
        .collect()
}

#[test]
fn memory_and_files_as_of_a_time_or_an_entry_and_writes_do_not_travel() {
    let dir = tempfile::tempdir().unwrap();
    let minute = Arc::new(AtomicI64::new(0));
    let e = open(dir.path(), &minute);
    let user = agent().with_user("ada").unwrap();
    e.record_memory(
        &agent(),
        memtape::memory::Change::one(
            memtape::memory::Op::Write {
                path: paths::AGENTS.into(),
                content: "Be brief.".into(),
            },
            "test",
        ),
    )
    .unwrap();
    let first = e.save_long_term(&user, "likes tea").unwrap();
    minute.store(10, Ordering::SeqCst);
    e.save_long_term(&user, "likes coffee").unwrap();
    e.record_memory(
        &agent(),
        memtape::memory::Change::one(
            memtape::memory::Op::Write {
                path: paths::AGENTS.into(),
                content: "Be thorough.".into(),
            },
            "test",
        ),
    )
    .unwrap();

    for moment in [AsOf::Time(at(5)), AsOf::Entry(first.id)] {
        let then = e.memory_as_of(&user, Some(&moment)).unwrap();
        assert_eq!(then.content(paths::MEMORY), Some("likes tea"), "{moment}");
        // The agent's shared file, layered under the user's, as of the same moment.
        assert_eq!(then.content(paths::AGENTS), Some("Be brief."), "{moment}");
        let view = e
            .call_tool_as_of(
                &user,
                "memory",
                &json!({"command": "view", "path": "/memories"}),
                Some(&moment),
            )
            .unwrap();
        assert!(!view.is_error, "{}", view.text);
        let read = e
            .call_tool_as_of(
                &user,
                "read_workspace_memory_file",
                &json!({"filename": "MEMORY.md"}),
                Some(&moment),
            )
            .unwrap();
        assert!(read.text.contains("likes tea"), "{}", read.text);
        let show = e
            .call_tool_as_of(&user, "memory.show", &json!({}), Some(&moment))
            .unwrap();
        assert!(show.text.contains("version 1,"), "{}", show.text);
        assert!(show.text.contains("likes tea"), "{}", show.text);
    }
    let now = e.memory_as_of(&user, None).unwrap();
    assert_eq!(now.content(paths::MEMORY), Some("likes coffee"));
    assert_eq!(now, e.memory(&user).unwrap());
    assert!(
        e.memory_as_of(&user, Some(&AsOf::Time(at(-1))))
            .unwrap()
            .files
            .is_empty()
    );

    // Writing "as of" the past is refused and changes nothing.
    let before = e.memory_log(&user).unwrap().0.version();
    for (tool, input) in [
        ("memory.save", json!({"content": "x"})),
        (
            "memory",
            json!({"command": "create", "path": "/memories/x.md", "file_text": "x"}),
        ),
        (
            "write_workspace_memory_file",
            json!({"filename": "x.md", "content": "x"}),
        ),
        ("memory_search", json!({"query": "tea"})),
    ] {
        let out = e
            .call_tool_as_of(&user, tool, &input, Some(&AsOf::Time(at(5))))
            .unwrap();
        assert!(out.is_error, "{tool}");
        assert!(
            out.text.contains("only reads travel in time"),
            "{tool}: {}",
            out.text
        );
    }
    assert_eq!(e.memory_log(&user).unwrap().0.version(), before);

    // In a Bub session a tool call writes the session's memory zone; a read of the past
    // writes nothing.
    let bub = user.with_session("bub").unwrap();
    e.set_history_view(&bub, memtape::HistoryView::Bub).unwrap();
    let count = || e.store().scan(&bub, &Filter::default()).unwrap().len();
    let entries = count();
    let read = e
        .call_tool_as_of(&bub, "memory.show", &json!({}), Some(&AsOf::Time(at(5))))
        .unwrap();
    assert!(!read.is_error, "{}", read.text);
    assert_eq!(count(), entries, "a read as of then wrote to the tape");
    e.call_tool(&bub, "memory.show", &json!({})).unwrap();
    assert!(count() > entries, "a call now writes the zone");
}

#[test]
fn history_context_and_search_as_of_see_only_what_existed_then() {
    let dir = tempfile::tempdir().unwrap();
    let minute = Arc::new(AtomicI64::new(0));
    let e = open(dir.path(), &minute);
    let s = session();
    let early = e
        .append_messages(
            &s,
            vec![
                Message::user("I moved to Oslo"),
                Message::assistant("Oslo is lovely"),
            ],
        )
        .unwrap();
    e.save_long_term(&agent(), "lives in Oslo").unwrap();
    let cut = early[1].id;
    minute.store(30, Ordering::SeqCst);
    let late = e
        .append_messages(
            &s,
            vec![
                Message::user("Now I live in Bergen"),
                Message::assistant("Bergen is rainy"),
            ],
        )
        .unwrap();
    // The later conversation was consolidated away, and memory rewritten.
    e.mark_consolidated(&s, late[1].id).unwrap();
    e.save_long_term(&agent(), "lives in Bergen").unwrap();

    let limits = HistoryLimits::default();
    assert!(
        e.history(&s, &limits).unwrap().is_empty(),
        "all consolidated now"
    );
    for moment in [AsOf::Time(at(10)), AsOf::Entry(cut)] {
        let then = e.history_as_of(&s, &limits, Some(&moment)).unwrap();
        assert_eq!(
            texts(&then),
            ["I moved to Oslo", "Oslo is lovely"],
            "{moment}"
        );
    }
    // Just before the pointer moved: all four messages, none consolidated yet.
    let before_mark = e
        .history_as_of(&s, &limits, Some(&AsOf::Entry(late[1].id)))
        .unwrap();
    assert_eq!(before_mark.len(), 4);

    // The prompt as of then: that memory, that history, and nothing recorded.
    let entries_before = e.store().scan(&s, &Filter::default()).unwrap().len();
    let request = ContextRequest {
        as_of: Some(AsOf::Time(at(10))),
        ..ContextRequest::default()
    };
    let then = e.context(&s, &request).unwrap();
    let system = then.messages[0].content_text().into_owned();
    assert!(system.contains("lives in Oslo"), "{system}");
    assert!(!system.contains("Bergen"), "{system}");
    assert!(
        system.contains("2026-03-01"),
        "the clock of that moment: {system}"
    );
    let said: Vec<String> = then.messages[1..]
        .iter()
        .map(|m| m.content_text().into_owned())
        .collect();
    assert_eq!(said, ["I moved to Oslo", "Oslo is lovely"]);
    assert_eq!(
        e.store().scan(&s, &Filter::default()).unwrap().len(),
        entries_before
    );
    let now = e.context(&s, &ContextRequest::default()).unwrap();
    assert!(now.messages[0].content_text().contains("lives in Bergen"));

    // Search as of then finds only what existed then.
    let search = |q: &str, as_of: Option<AsOf>| -> Vec<EntryId> {
        let mut filter = SearchFilter::within(&agent());
        filter.as_of = as_of;
        let mut request = SearchRequest::new(q, filter);
        request.mode = Mode::Bm25;
        e.search(&request)
            .unwrap()
            .iter()
            .map(|h| h.entry.id)
            .collect()
    };
    assert!(search("Bergen", None).contains(&late[0].id));
    assert!(search("Bergen", Some(AsOf::Time(at(10)))).is_empty());
    assert!(search("Oslo", Some(AsOf::Entry(cut))).contains(&early[0].id));
    assert!(!search("Oslo", Some(AsOf::Entry(early[0].id))).contains(&early[1].id));
}

#[test]
fn blame_leads_each_line_to_the_tool_call_or_message_that_caused_it() {
    let dir = tempfile::tempdir().unwrap();
    let minute = Arc::new(AtomicI64::new(0));
    let e = open(dir.path(), &minute);
    let s = session();
    // An agent's tool call, appended before the tool runs (as agents do).
    let asked = e
        .append(
            &s,
            Message::user("remember that I like tea"),
            Default::default(),
        )
        .unwrap();
    let call = e
        .append(
            &s,
            Message::assistant_tool_calls(vec![ToolCall::function(
                "c1",
                "memory",
                r#"{"command":"create","path":"/memories/facts.md","file_text":"likes tea\n"}"#,
            )]),
            Default::default(),
        )
        .unwrap();
    let out = e
        .call_tool(
            &s,
            "memory",
            &json!({"command": "create", "path": "/memories/facts.md", "file_text": "likes tea\n"}),
        )
        .unwrap();
    assert!(!out.is_error, "{}", out.text);
    // A hand edit adds a line: no conversation caused it.
    e.record_memory(
        &agent(),
        memtape::memory::Change::one(
            memtape::memory::Op::Append {
                path: "memories/facts.md".into(),
                text: "born 1990\n".into(),
                heading: None,
            },
            "sync",
        ),
    )
    .unwrap();
    // Qanot's WAL on a stored user message: what it captures names the message.
    let message = e
        .append(&s, Message::user("My name is Ada"), Default::default())
        .unwrap();
    let captured = e.capture_entry(&message).unwrap();
    assert!(captured.recorded.is_some());

    let blame = e
        .blame(&agent(), "memories/facts.md", None)
        .unwrap()
        .unwrap();
    let lines: Vec<(&str, &[EntryId])> = blame
        .lines
        .iter()
        .map(|l| (l.text.as_str(), l.origin.change.caused_by.as_slice()))
        .collect();
    assert_eq!(
        lines,
        [("likes tea", &[call.id][..]), ("born 1990", &[][..])]
    );
    assert_eq!(blame.causes[&call.id].id, call.id);
    assert_ne!(call.id, asked.id);

    let state = e
        .blame(&agent(), paths::SESSION_STATE, None)
        .unwrap()
        .unwrap();
    let line = state.lines.iter().find(|l| l.text.contains("Ada")).unwrap();
    assert_eq!(line.origin.change.caused_by, [message.id]);
    assert_eq!(state.causes[&message.id].scope, s);

    // As of the tool's change, before the hand edit, the file had one line.
    let first = e.memory_log(&agent()).unwrap().0.changes()[0].id;
    let then = e
        .blame(&agent(), "memories/facts.md", Some(&AsOf::Entry(first)))
        .unwrap()
        .unwrap();
    assert_eq!(then.lines.len(), 1);
    assert_eq!(then.version, 1);
    assert!(
        e.blame(&agent(), "memories/none.md", None)
            .unwrap()
            .is_none()
    );
    assert!(e.blame(&agent(), "../etc/passwd", None).is_err());

    // Another user's conversation is not shown to a user who reads the shared file.
    let bob = agent().with_user("bob").unwrap();
    let shared = e.blame(&bob, "memories/facts.md", None).unwrap().unwrap();
    assert_eq!(shared.memory, agent());
    assert_eq!(shared.lines[0].origin.change.caused_by, [call.id]);
    assert!(
        !shared.causes.contains_key(&call.id),
        "a session of no user is not a user's to read (Scope::contains)"
    );
    let alice_session = agent()
        .with_user("alice")
        .unwrap()
        .with_session("x")
        .unwrap();
    let said = e
        .append(
            &alice_session,
            Message::user("call me Al"),
            Default::default(),
        )
        .unwrap();
    e.capture_entry(&said).unwrap();
    let alice_state = e
        .blame(
            &agent().with_user("alice").unwrap(),
            paths::SESSION_STATE,
            None,
        )
        .unwrap()
        .unwrap();
    assert!(alice_state.causes.contains_key(&said.id));
    let from_bob = e.blame(&bob, paths::SESSION_STATE, None).unwrap().unwrap();
    assert!(
        !from_bob.causes.contains_key(&said.id),
        "alice's message stays hers"
    );
}

#[test]
fn a_consolidation_names_its_span_and_model_call_and_survives_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let minute = Arc::new(AtomicI64::new(0));
    let e = open(dir.path(), &minute);
    let s = session();
    let stored = e
        .append_messages(
            &s,
            (0..6)
                .map(|i| Message::user(format!("message {i}")))
                .collect(),
        )
        .unwrap();
    let server = Scripted::start(vec![tool_call(
        "save_memory",
        Value::String(
            json!({"history_entry": "[2026-03-01 10:00] Counted.", "memory_update": "# Memory\n- counts\n"})
                .to_string(),
        ),
    )]);
    let llm = OpenAi::new(&server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_secs(5))
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        });
    let done = e
        .consolidate(
            &s,
            &llm,
            ConsolidateOptions {
                archive_all: true,
                ..ConsolidateOptions::default()
            },
        )
        .unwrap();
    assert_eq!(done.through, Some(stored[5].id));
    let blame = e.blame(&agent(), paths::MEMORY, None).unwrap().unwrap();
    let causes = &blame.lines[1].origin.change.caused_by;
    assert_eq!(&causes[..2], &[stored[0].id, stored[5].id]);
    let call = &blame.causes[&causes[2]];
    assert_eq!(call.kind(), Kind::Event);
    assert!(matches!(&call.payload, memtape::Payload::Event(ev) if ev.name == "llm.call"));

    // Export and import into a store whose ids are taken: the causes follow their
    // entries through the renumbering.
    let mut jsonl = Vec::new();
    e.export(memtape::Format::Memtape, &agent(), &mut jsonl)
        .unwrap();
    let other = tempfile::tempdir().unwrap();
    let f = open(other.path(), &minute);
    let taken = Scope::agent("t", "z")
        .unwrap()
        .with_session("first")
        .unwrap();
    f.append_messages(
        &taken,
        (0..20).map(|i| Message::user(format!("{i}"))).collect(),
    )
    .unwrap();
    f.import(
        memtape::Format::Memtape,
        std::str::from_utf8(&jsonl).unwrap(),
        &agent(),
        None,
    )
    .unwrap();
    let blame = f.blame(&agent(), paths::MEMORY, None).unwrap().unwrap();
    let causes = &blame.lines[1].origin.change.caused_by;
    assert_eq!(causes.len(), 3);
    let first = &blame.causes[&causes[0]];
    assert_eq!(first.message().unwrap().content_text(), "message 0");
    assert_ne!(causes[0], stored[0].id, "renumbered");
}
