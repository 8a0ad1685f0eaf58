//! The engine end to end on a real SQLite file: history across the consolidation pointer
//! and regenerated threads, Bub anchor queries, and lossless/foreign JSONL round trips.

use memtape::{
    AnchorRange, AppendOptions, Engine, EntryId, Format, HistoryLimits, Message, Placement, Role,
    Scope, SqliteStore, TapeQuery, ToolCall,
};
use memtape::{Kind, Store};

fn engine(dir: &tempfile::TempDir) -> Engine<SqliteStore> {
    Engine::init(dir.path()).unwrap()
}

fn session(name: &str) -> Scope {
    Scope::agent("default", "default")
        .unwrap()
        .with_session(name)
        .unwrap()
}

fn texts(entries: &[memtape::Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.message().unwrap().content_text().into_owned())
        .collect()
}

fn say(e: &Engine<SqliteStore>, s: &Scope, m: Message) -> EntryId {
    e.append(s, m, AppendOptions::default()).unwrap().id
}

#[test]
fn history_is_the_unconsolidated_tail_of_the_current_thread() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let s = session("s");
    let a = say(&e, &s, Message::user("A"));
    say(&e, &s, Message::assistant("A'"));
    say(&e, &s, Message::user("B"));
    say(&e, &s, Message::assistant("B'"));
    // Dify: the user regenerates the first answer; the new branch continues from it.
    e.append(
        &s,
        Message::assistant("A''"),
        AppendOptions {
            parent: Some(a),
            ..Default::default()
        },
    )
    .unwrap();
    say(&e, &s, Message::user("C"));
    say(&e, &s, Message::assistant("C'"));
    let limits = HistoryLimits::default();
    assert_eq!(
        texts(&e.history(&s, &limits).unwrap()),
        ["A", "A''", "C", "C'"]
    );

    // Consolidating through A'' leaves C, C'.
    let thread = e.history(&s, &limits).unwrap();
    e.mark_consolidated(&s, thread[1].id).unwrap();
    assert_eq!(texts(&e.history(&s, &limits).unwrap()), ["C", "C'"]);
    // Nothing was removed: the whole thread is still on the tape.
    let leaf = thread[3].id;
    assert_eq!(
        texts(
            &e.thread(&Scope::agent("default", "default").unwrap(), leaf)
                .unwrap()
        ),
        ["A", "A''", "C", "C'"]
    );
}

#[test]
fn history_token_limit_uses_the_real_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let s = session("s");
    for i in 0..10 {
        say(&e, &s, Message::user(format!("question number {i}")));
        say(&e, &s, Message::assistant(format!("answer number {i}")));
    }
    let limits = HistoryLimits {
        max_messages: 500,
        max_tokens: Some(40),
    };
    let h = e.history(&s, &limits).unwrap();
    let cost: usize = h
        .iter()
        .map(|x| e.tokens().count_message(x.message().unwrap()))
        .sum();
    assert!(cost <= 40 && !h.is_empty(), "{cost}");
    assert_eq!(h[0].message().unwrap().role, Role::User);
    assert_eq!(texts(&h).last().unwrap(), "answer number 9");
}

#[test]
fn bub_anchor_queries() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let s = session("s");
    e.anchor(&s, "session/start", None).unwrap();
    say(&e, &s, Message::user("one"));
    e.anchor(&s, "phase/a", None).unwrap();
    say(&e, &s, Message::user("two"));
    e.anchor(&s, "phase/b", None).unwrap();
    say(&e, &s, Message::user("three"));
    let q = |range| {
        let query = TapeQuery {
            range,
            kinds: vec![Kind::Message],
            ..TapeQuery::default()
        };
        texts(&e.query(&s, &query).unwrap())
    };
    assert_eq!(q(AnchorRange::FromLast), ["three"]);
    assert_eq!(q(AnchorRange::After("phase/a".into())), ["two", "three"]);
    assert_eq!(
        q(AnchorRange::Between(
            "session/start".into(),
            "phase/b".into()
        )),
        ["one", "two"]
    );
    assert_eq!(q(AnchorRange::All), ["one", "two", "three"]);
    let err = e.query(
        &s,
        &TapeQuery {
            range: AnchorRange::After("nope".into()),
            ..Default::default()
        },
    );
    assert!(err.unwrap_err().to_string().contains("no anchor nope"));
    // Bub: between_anchors(A, B) with no B after A raises not_found, it does not read on
    // to the end of the tape.
    let err = e.query(
        &s,
        &TapeQuery {
            range: AnchorRange::Between("phase/b".into(), "phase/a".into()),
            ..Default::default()
        },
    );
    let text = err.unwrap_err().to_string();
    assert!(text.contains("no anchor phase/a after phase/b"), "{text}");
}

#[test]
fn memtape_format_round_trips_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let s = session("s");
    let node = s.clone().with_node("llm-1").unwrap();
    let mut m = Message::user("look at this");
    m.name = Some("ada".into());
    m.files = vec![serde_json::from_str(r#"{"type":"image","transfer_method":"tool_file","tool_file_id":"tf1","belongs_to":"user"}"#).unwrap()];
    let mut meta = serde_json::Map::new();
    meta.insert("z".into(), 1.into());
    meta.insert("a".into(), serde_json::json!({"nested": [1, 2]}));
    e.append(
        &s,
        m,
        AppendOptions {
            meta,
            ..Default::default()
        },
    )
    .unwrap();
    let mut call =
        Message::assistant_tool_calls(vec![ToolCall::function("c1", "search", r#"{"q":"x"}"#)]);
    call.reasoning_content = Some("hmm".into());
    say(&e, &s, call);
    say(&e, &s, Message::tool_result("c1", "found"));
    e.anchor(
        &s,
        "memory/open",
        Some(serde_json::from_str(r#"{"version":2}"#).unwrap()),
    )
    .unwrap();
    say(&e, &node, Message::user("node memory"));
    e.mark_consolidated(&s, EntryId(1)).unwrap();

    let mut first = Vec::new();
    let agent = Scope::agent("default", "default").unwrap();
    e.export(Format::Memtape, &agent, &mut first).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = engine(&dir2);
    let report = e2
        .import(
            Format::Memtape,
            std::str::from_utf8(&first).unwrap(),
            &agent,
            None,
        )
        .unwrap();
    assert_eq!((report.entries, report.placement), (6, Placement::KeptIds));
    let mut second = Vec::new();
    e2.export(Format::Memtape, &agent, &mut second).unwrap();
    assert_eq!(
        String::from_utf8(first).unwrap(),
        String::from_utf8(second).unwrap()
    );
    assert_eq!(
        e2.store()
            .scope_info(&s)
            .unwrap()
            .unwrap()
            .last_consolidated,
        EntryId(1)
    );
}

const NANOBOT: &str = r#"{"_type": "metadata", "key": "telegram:42", "created_at": "2026-03-10T14:30:00", "updated_at": "2026-03-10T14:31:00", "metadata": {"lang": "en"}, "last_consolidated": 2}
{"role": "user", "content": "hi", "timestamp": "2026-03-10T14:30:00"}
{"role": "assistant", "content": "hello", "timestamp": "2026-03-10T14:30:01"}
{"role": "user", "content": "run it", "timestamp": "2026-03-10T14:30:02"}
{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}], "timestamp": "2026-03-10T14:30:03"}
{"role": "tool", "content": "done", "tool_call_id": "c1", "name": "exec", "timestamp": "2026-03-10T14:30:04"}
"#;

#[test]
fn nanobot_sessions_import_with_their_pointer_and_export_back() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let base = Scope::agent("default", "default").unwrap();
    let report = e.import(Format::Nanobot, NANOBOT, &base, None).unwrap();
    let s = session("telegram:42");
    assert_eq!(report.sessions, std::slice::from_ref(&s));
    // Pointer index 2 → the first two messages are consolidated.
    assert_eq!(
        texts(&e.history(&s, &HistoryLimits::default()).unwrap()),
        ["run it", "", "done"]
    );

    let mut out = Vec::new();
    e.export(Format::Nanobot, &s, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let original: Vec<serde_json::Value> = NANOBOT
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["last_consolidated"], 2);
    assert_eq!(lines[0]["metadata"], original[0]["metadata"]);
    assert_eq!(lines[0]["key"], "telegram:42");
    for (got, want) in lines[1..].iter().zip(&original[1..]) {
        for key in ["role", "content", "tool_calls", "tool_call_id", "name"] {
            assert_eq!(got.get(key), want.get(key), "{key}");
        }
        assert_eq!(
            got["timestamp"].as_str().unwrap()[..19],
            want["timestamp"].as_str().unwrap()[..19]
        );
    }
    assert_eq!(lines.len(), original.len());
}

#[test]
fn bub_tapes_round_trip() {
    let tape = r#"{"id": 1, "kind": "anchor", "payload": {"name": "session/start"}, "meta": {}}
{"id": 2, "kind": "message", "payload": {"role": "user", "content": "weather?"}, "meta": {}}
{"id": 3, "kind": "tool_call", "payload": {"calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}, {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}, "meta": {}}
{"id": 4, "kind": "tool_result", "payload": {"results": ["sunny", "21C"]}, "meta": {}}
{"id": 5, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "likes sun"}}, "meta": {"by": "agent"}}
"#;
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let base = Scope::agent("default", "default").unwrap();
    e.import(Format::Bub, tape, &base, Some("bub1")).unwrap();
    let mut out = Vec::new();
    e.export(Format::Bub, &session("bub1"), &mut out).unwrap();
    let strip = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("date");
                v
            })
            .collect()
    };
    assert_eq!(strip(std::str::from_utf8(&out).unwrap()), strip(tape));
}

#[test]
fn a_bad_line_imports_nothing_and_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let base = Scope::agent("default", "default").unwrap();
    let broken = NANOBOT.replace(r#""tool_call_id": "c1", "#, "");
    let err = e
        .import(Format::Nanobot, &broken, &base, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("line 6:") && err.contains("tool_call_id"),
        "{err}"
    );
    assert_eq!(e.store().last_id().unwrap(), EntryId(0));
    assert!(e.sessions("default").unwrap().is_empty());
}

#[test]
fn imports_never_mix_into_an_existing_session() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let base = Scope::agent("default", "default").unwrap();
    e.import(Format::Nanobot, NANOBOT, &base, None).unwrap();
    let before = e.store().last_id().unwrap();
    let err = e
        .import(Format::Nanobot, NANOBOT, &base, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("already has"), "{err}");
    assert_eq!(e.store().last_id().unwrap(), before);
    // Into a new session it goes, renumbered after the existing entries.
    let report = e
        .import(Format::Nanobot, NANOBOT, &base, Some("copy"))
        .unwrap();
    assert_eq!(report.placement, Placement::Renumbered);
    assert_eq!(
        texts(
            &e.history(&session("copy"), &HistoryLimits::default())
                .unwrap()
        ),
        ["run it", "", "done"]
    );
}

#[test]
fn nanobot_export_carries_the_current_thread() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let s = session("s");
    let q = say(&e, &s, Message::user("Q"));
    say(&e, &s, Message::assistant("first answer"));
    e.append(
        &s,
        Message::assistant("regenerated"),
        AppendOptions {
            parent: Some(q),
            ..Default::default()
        },
    )
    .unwrap();
    let mut out = Vec::new();
    e.export(Format::Nanobot, &s, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        !out.contains("first answer") && out.contains("regenerated"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 3);
}
