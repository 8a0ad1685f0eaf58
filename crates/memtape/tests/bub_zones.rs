//! Bub's memory zones at the Bub tape boundary (seed 001) on a real SQLite store: a Bub
//! tape's sealed zones become memtape memory versions, and memtape's memory versions are
//! exported as zones (memory/open, the memory, memory/seal, increasing versions) that Bub's
//! reader finds. The reader below follows the seed's `_load_snapshot`.
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use memtape::memory::{Change, MemoryView, Op, paths};
use memtape::{AnchorRange, Engine, Format, HistoryLimits, Message, Scope, TapeQuery};
use serde_json::Value;

fn noon(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 2, day, 12, 0, 0).unwrap()
}

fn agent() -> Scope {
    Scope::agent("default", "default").unwrap()
}

/// Bub's memory as its reader sees a tape (seed 001, 3.4): the highest-version
/// `memory/seal`, the nearest `memory/open` of that version before it, and the
/// `memory.long_term` / `memory.daily` events between them.
#[derive(Debug, PartialEq)]
struct BubSnapshot {
    version: u64,
    long_term: String,
    dailies: Vec<(String, String)>,
}

fn bub_read(tape: &str) -> Option<BubSnapshot> {
    let entries: Vec<Value> = tape
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let version_of = |e: &Value, name: &str| -> Option<u64> {
        (e["kind"] == "anchor" && e["payload"]["name"] == name)
            .then(|| e["payload"]["state"]["version"].as_u64())
            .flatten()
    };
    let (mut seal, mut best) = (None, 0);
    for (i, e) in entries.iter().enumerate() {
        if let Some(v) = version_of(e, "memory/seal")
            && v > best
        {
            (seal, best) = (Some(i), v);
        }
    }
    let seal = seal?;
    let open = (0..seal)
        .rev()
        .find(|&i| version_of(&entries[i], "memory/open") == Some(best))?;
    let mut snap = BubSnapshot {
        version: best,
        long_term: String::new(),
        dailies: Vec::new(),
    };
    for e in &entries[open + 1..seal] {
        let data = &e["payload"]["data"];
        match e["payload"]["name"].as_str() {
            Some("memory.long_term") if e["kind"] == "event" => {
                snap.long_term = data["content"].as_str().unwrap().to_owned();
            }
            Some("memory.daily") if e["kind"] == "event" => snap.dailies.push((
                data["date"].as_str().unwrap().to_owned(),
                data["content"].as_str().unwrap().to_owned(),
            )),
            _ => {}
        }
    }
    snap.dailies.sort_by(|a, b| b.0.cmp(&a.0));
    Some(snap)
}

/// The parts of a view a round trip keeps: each file's text and MateClaw flags.
fn files(view: &MemoryView) -> Vec<(String, String, bool, i64)> {
    view.files
        .iter()
        .map(|(p, f)| (p.clone(), f.content.clone(), f.enabled, f.sort_order))
        .collect()
}

fn export(engine: &Engine, session: &Scope) -> String {
    let mut out = Vec::new();
    engine.export(Format::Bub, session, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Seed 001: "every save is a new version" — memtape's memory versions go out as Bub zones
/// with increasing versions, Bub's reader finds the current memory in the last one, and
/// importing the tape gives back the same memory, version by version.
#[test]
fn seed_bub_memory_zones_round_trip_through_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap().with_clock(|| noon(10));
    let a = agent();
    let s = a.clone().with_session("chat").unwrap();
    let day = |d| NaiveDate::from_ymd_opt(2026, 2, d);
    engine
        .append(&s, Message::user("hello"), Default::default())
        .unwrap();
    engine.save_long_term(&a, "User likes Python").unwrap();
    engine
        .append(&s, Message::assistant("Got it"), Default::default())
        .unwrap();
    engine
        .append_daily(&a, "- Designed memory architecture", day(9))
        .unwrap();
    engine
        .append_daily(&a, "- Implemented tape memory zone", None)
        .unwrap();
    engine
        .record_memory(
            &a,
            Change::one(
                Op::Write {
                    path: "memories/notes.md".into(),
                    content: "free-form\n".into(),
                },
                "memory_20250818.create",
            ),
        )
        .unwrap();
    engine
        .record_memory(
            &a,
            Change::one(
                Op::Flags {
                    path: paths::MEMORY.into(),
                    enabled: Some(true),
                    sort_order: Some(9),
                },
                "flags",
            ),
        )
        .unwrap();
    engine
        .save_long_term(&a, "User likes Python and Rust")
        .unwrap();
    engine
        .append_history(&a, "Talked about languages.")
        .unwrap();
    engine
        .record_memory(
            &a,
            Change::one(
                Op::Delete {
                    path: paths::daily(day(9).unwrap()),
                },
                "prune",
            ),
        )
        .unwrap();
    engine
        .append(&s, Message::user("thanks"), Default::default())
        .unwrap();
    let (original, _) = engine.memory_log(&a).unwrap();
    assert_eq!(original.version(), 8);

    let tape = export(&engine, &s);
    let lines: Vec<Value> = tape
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let zone_versions: Vec<(String, u64)> = lines
        .iter()
        .filter(|l| l["kind"] == "anchor")
        .map(|l| {
            (
                l["payload"]["name"].as_str().unwrap().to_owned(),
                l["payload"]["state"]["version"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = (1..=8)
        .flat_map(|v| [("memory/open".to_owned(), v), ("memory/seal".to_owned(), v)])
        .collect();
    assert_eq!(
        zone_versions, expected,
        "one sealed zone per version, in order"
    );
    // The first save came after "hello" and before "Got it": zones sit where saves happened.
    assert_eq!(lines[0]["payload"]["content"], "hello");
    assert_eq!(lines[1]["payload"]["name"], "memory/open");
    assert_eq!(lines.last().unwrap()["payload"]["content"], "thanks");

    assert_eq!(
        bub_read(&tape).unwrap(),
        BubSnapshot {
            version: 8,
            long_term: "User likes Python and Rust".into(),
            dailies: vec![(
                "2026-02-10".into(),
                "# 2026-02-10\n\n- Implemented tape memory zone\n".into()
            )],
        },
        "Bub's reader sees memtape's current memory"
    );

    let dir2 = tempfile::tempdir().unwrap();
    let engine2 = Engine::init(dir2.path()).unwrap();
    let report = engine2
        .import(Format::Bub, &tape, &a, Some("chat"))
        .unwrap();
    assert_eq!(report.memory_versions, 8);
    assert_eq!(report.sessions, std::slice::from_ref(&s));
    let (imported, _) = engine2.memory_log(&a).unwrap();
    assert_eq!(imported.version(), original.version());
    for v in 1..=original.version() {
        assert_eq!(
            files(&imported.view_at(v)),
            files(&original.view_at(v)),
            "version {v}"
        );
    }
    assert_eq!(
        imported.changes()[0].at,
        original.changes()[0].at,
        "a version keeps its time"
    );
    let history: Vec<String> = engine2
        .history(&s, &HistoryLimits::default())
        .unwrap()
        .iter()
        .map(|e| e.message().unwrap().content_text().into_owned())
        .collect();
    assert_eq!(history, ["hello", "Got it", "thanks"]);
    // And out again: the same tape, line for line.
    assert_eq!(export(&engine2, &s), tape);
}

/// Seed 001's tape data flow (5.1 to 5.3), written by hand: `ensure()`'s empty version 1,
/// a `memory.save` zone (version 2) and a zone with daily notes (version 3). The empty
/// version 1 is memtape's version 0; the two saves are memtape versions 1 and 2, and the
/// tape stays whole, zones included.
#[test]
fn seed_bub_hand_written_tape_with_two_saved_versions() {
    let tape = r##"{"id": 0, "kind": "anchor", "payload": {"name": "session/start", "state": {"owner": "human"}}, "meta": {}, "date": "2026-02-09T09:00:00+00:00"}
{"id": 1, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 1}}, "meta": {}, "date": "2026-02-09T09:00:00+00:00"}
{"id": 2, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 1}}, "meta": {}, "date": "2026-02-09T09:00:00+00:00"}
{"id": 3, "kind": "message", "payload": {"role": "user", "content": "hello"}, "meta": {}, "date": "2026-02-09T09:01:00+00:00"}
{"id": 4, "kind": "message", "payload": {"role": "assistant", "content": "Hi! How can I help?"}, "meta": {}, "date": "2026-02-09T09:01:05+00:00"}
{"id": 5, "kind": "message", "payload": {"role": "user", "content": "remember: I like Python"}, "meta": {}, "date": "2026-02-09T10:00:00+00:00"}
{"id": 6, "kind": "tool_call", "payload": {"calls": [{"id": "call_1", "type": "function", "function": {"name": "memory_save", "arguments": "{\"content\": \"User likes Python\"}"}}]}, "meta": {}, "date": "2026-02-09T10:00:01+00:00"}
{"id": 7, "kind": "tool_result", "payload": {"results": ["saved to long-term memory"]}, "meta": {}, "date": "2026-02-09T10:00:02+00:00"}
{"id": 8, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 2}}, "meta": {}, "date": "2026-02-09T10:00:02+00:00"}
{"id": 9, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "User likes Python", "updated_at": "2026-02-09T10:00:02+00:00"}}, "meta": {}, "date": "2026-02-09T10:00:02+00:00"}
{"id": 10, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 2}}, "meta": {}, "date": "2026-02-09T10:00:02+00:00"}
{"id": 11, "kind": "message", "payload": {"role": "assistant", "content": "Got it, I'll remember that!"}, "meta": {}, "date": "2026-02-09T10:00:03+00:00"}
{"id": 20, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 3}}, "meta": {}, "date": "2026-02-10T10:05:00+00:00"}
{"id": 21, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "User likes Python"}}, "meta": {}, "date": "2026-02-10T10:05:00+00:00"}
{"id": 22, "kind": "event", "payload": {"name": "memory.daily", "data": {"date": "2026-02-09", "content": "# 2026-02-09\n\n- Designed memory architecture"}}, "meta": {}, "date": "2026-02-10T10:05:00+00:00"}
{"id": 23, "kind": "event", "payload": {"name": "memory.daily", "data": {"date": "2026-02-10", "content": "# 2026-02-10\n\n- Implemented tape memory zone"}}, "meta": {}, "date": "2026-02-10T10:05:00+00:00"}
{"id": 24, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 3}}, "meta": {}, "date": "2026-02-10T10:05:00+00:00"}
"##;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let a = agent();
    let s = a.clone().with_session("bub1").unwrap();
    let report = engine.import(Format::Bub, tape, &a, Some("bub1")).unwrap();
    assert_eq!(report.memory_versions, 2);
    assert_eq!(report.sessions, std::slice::from_ref(&s));

    let (log, _) = engine.memory_log(&a).unwrap();
    assert_eq!(log.version(), 2);
    let sources: Vec<&str> = log
        .changes()
        .iter()
        .map(|r| r.change.source.as_str())
        .collect();
    assert_eq!(
        sources,
        ["bub memory zone version 2", "bub memory zone version 3"]
    );
    assert_eq!(
        log.changes()[0].at.to_rfc3339(),
        "2026-02-09T10:00:02+00:00"
    );
    assert_eq!(
        log.view_at(1).content(paths::MEMORY),
        Some("User likes Python")
    );
    let view = engine.memory(&a).unwrap();
    assert_eq!(view.content(paths::MEMORY), Some("User likes Python"));
    assert_eq!(
        view.content("memory/2026-02-09.md"),
        Some("# 2026-02-09\n\n- Designed memory architecture")
    );
    assert_eq!(
        view.content("memory/2026-02-10.md"),
        Some("# 2026-02-10\n\n- Implemented tape memory zone")
    );
    assert_eq!(view.files.len(), 3);

    // The tape is kept whole: every line is an entry of the session, in place (after the
    // session's settings, which give it Bub's history view), so Bub's anchor queries find
    // the zones.
    let entries = engine.query(&s, &Default::default()).unwrap();
    let names: Vec<String> = entries
        .iter()
        .map(|e| {
            e.payload
                .name()
                .map(str::to_owned)
                .unwrap_or_else(|| e.message().unwrap().content_text().into_owned())
        })
        .collect();
    assert_eq!(names[..2], ["session.settings", "session/start"]);
    assert_eq!(entries.len(), 1 + 17, "{names:?}");
    let after_seal = engine
        .query(
            &s,
            &TapeQuery {
                range: AnchorRange::After("memory/seal".into()),
                ..TapeQuery::default()
            },
        )
        .unwrap();
    assert!(after_seal.is_empty(), "the last zone ends the tape");
    let last_zone = engine
        .query(
            &s,
            &TapeQuery {
                range: AnchorRange::Between("memory/open".into(), "memory/seal".into()),
                ..TapeQuery::default()
            },
        )
        .unwrap();
    assert_eq!(
        last_zone.len(),
        3,
        "version 3's long-term memory and two notes"
    );
    // Bub's history: the conversation after the last anchor that is not a zone's.
    let history: Vec<String> = engine
        .history(&s, &HistoryLimits::default())
        .unwrap()
        .iter()
        .map(|e| e.message().unwrap().content_text().into_owned())
        .collect();
    assert_eq!(history.len(), 6, "{history:?}");
    assert_eq!(history[0], "hello");

    // Exported again: the same tape, line for line (ids are renumbered from 1).
    let out = export(&engine, &s);
    let strip = |text: &str| -> Vec<Value> {
        text.lines()
            .map(|l| {
                let mut v: Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("id");
                v
            })
            .collect()
    };
    assert_eq!(strip(&out), strip(tape));
    assert_eq!(bub_read(&out), bub_read(tape));
}

/// Importing into an agent-and-user scope puts the zones in that user's memory; the
/// agent's own memory is untouched.
#[test]
fn seed_bub_zones_land_in_the_memory_scope_of_the_import() {
    let tape = r#"{"id": 1, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 1}}}
{"id": 2, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "Ada's facts"}}}
{"id": 3, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 1}}}
"#;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let user = agent().with_user("ada").unwrap();
    engine.save_long_term(&agent(), "shared facts").unwrap();
    let report = engine.import(Format::Bub, tape, &user, Some("t1")).unwrap();
    // The settings, the zone's three lines, and the memory change they project to.
    assert_eq!((report.entries, report.memory_versions), (5, 1));
    assert_eq!(
        engine
            .memory_log(&user)
            .unwrap()
            .0
            .view()
            .content(paths::MEMORY),
        Some("Ada's facts")
    );
    assert_eq!(
        engine.memory(&agent()).unwrap().content(paths::MEMORY),
        Some("shared facts")
    );
}

/// Seed 001, 3.3: in a Bub session, every save appends a new zone to the tape; memtape's
/// memory tools do the same for a session that takes Bub's view, and write nothing when
/// the memory did not change. Other sessions' tapes are left alone.
#[test]
fn seed_bub_a_memory_tool_in_a_bub_session_appends_a_zone() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap().with_clock(|| noon(10));
    let bub = agent().with_session("bub").unwrap();
    let plain = agent().with_session("plain").unwrap();
    engine
        .append(&plain, Message::user("hello"), Default::default())
        .unwrap();
    let started = engine.start_session(&bub).unwrap();
    assert_eq!(started.zone, Some(1));
    let save = serde_json::json!({"content": "User likes Rust"});
    let out = engine.call_tool(&bub, "memory.save", &save).unwrap();
    assert!(!out.is_error, "{}", out.text);
    let zone = engine
        .query(
            &bub,
            &TapeQuery {
                range: AnchorRange::Between("memory/open".into(), "memory/seal".into()),
                ..TapeQuery::default()
            },
        )
        .unwrap();
    assert_eq!(zone.len(), 1);
    assert_eq!(
        zone[0].payload.to_json()["data"]["content"],
        "User likes Rust"
    );
    let seals = |s: &Scope| {
        engine
            .query(
                s,
                &TapeQuery {
                    kinds: vec![memtape::Kind::Anchor],
                    ..TapeQuery::default()
                },
            )
            .unwrap()
            .len()
    };
    assert_eq!(seals(&bub), 1 + 2 * 2, "bootstrap and two zones");
    // Reading memory changes nothing, so no zone.
    let show = engine
        .call_tool(&bub, "memory.show", &serde_json::json!({}))
        .unwrap();
    assert!(!show.is_error);
    assert_eq!(seals(&bub), 5);
    // The same tool from a session in memtape's own view writes no zone anywhere.
    engine.call_tool(&plain, "memory.save", &save).unwrap();
    assert_eq!(seals(&plain), 0);
    // Bub's reader on the exported tape sees the current memory.
    let snap = bub_read(&export(&engine, &bub)).unwrap();
    assert_eq!(snap.long_term, "User likes Rust");
}

/// The context builder gives a Bub session Bub's view: the conversation after the last
/// anchor that is not a memory zone's, with the zone's memory in the `<memory>` block and
/// not as messages.
#[test]
fn seed_bub_the_prompt_of_a_bub_session_takes_bub_s_view() {
    let tape = r#"{"id": 1, "kind": "anchor", "payload": {"name": "session/start", "state": {"owner": "human"}}, "meta": {}}
{"id": 2, "kind": "message", "payload": {"role": "user", "content": "the old phase"}, "meta": {}}
{"id": 3, "kind": "message", "payload": {"role": "assistant", "content": "done with it"}, "meta": {}}
{"id": 4, "kind": "anchor", "payload": {"name": "phase/2", "state": {"summary": "old phase done"}}, "meta": {}}
{"id": 5, "kind": "message", "payload": {"role": "user", "content": "the new phase"}, "meta": {}}
{"id": 6, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 1}}, "meta": {}}
{"id": 7, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "User works in phases"}}, "meta": {}}
{"id": 8, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 1}}, "meta": {}}
{"id": 9, "kind": "message", "payload": {"role": "assistant", "content": "on it"}, "meta": {}}
"#;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let a = agent();
    let s = a.clone().with_session("phases").unwrap();
    engine
        .import(Format::Bub, tape, &a, Some("phases"))
        .unwrap();
    let request = memtape::ContextRequest {
        message: Some(Message::user("next?")),
        ..Default::default()
    };
    let context = engine.context(&s, &request).unwrap();
    let texts: Vec<String> = context
        .messages
        .iter()
        .map(|m| m.content_text().into_owned())
        .collect();
    assert!(texts.iter().any(|t| t == "the new phase"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "on it"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("old phase")), "{texts:?}");
    assert!(texts[0].contains("User works in phases"), "{texts:?}");
    // memtape's own view of the same session still has the whole thread.
    engine
        .set_history_view(&s, memtape::HistoryView::Thread)
        .unwrap();
    let context = engine.context(&s, &request).unwrap();
    assert!(
        context
            .messages
            .iter()
            .any(|m| m.content_text().contains("the old phase"))
    );
}

/// Bub's view of a long session reads its tail a page at a time: the last `max_messages`
/// in tape order, Bub's `system` entries and `context: false` entries left out, then the
/// token limit from the oldest.
#[test]
fn bub_view_of_a_long_session_is_its_tail() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = agent().with_session("long").unwrap();
    engine.start_session(&s).unwrap();
    for i in 0..700 {
        let meta = if i % 100 == 5 {
            let mut m = memtape::Meta::new();
            m.insert("context".into(), Value::Bool(false));
            m
        } else {
            memtape::Meta::new()
        };
        let message = if i % 50 == 7 {
            Message::text(memtape::Role::System, format!("prompt {i}"))
        } else {
            Message::user(format!("m{i}"))
        };
        engine
            .append(&s, message, memtape::AppendOptions { parent: None, meta })
            .unwrap();
    }
    let limits = HistoryLimits {
        max_messages: 300,
        max_tokens: None,
    };
    let texts: Vec<String> = engine
        .history(&s, &limits)
        .unwrap()
        .iter()
        .map(|e| e.message().unwrap().content_text().into_owned())
        .collect();
    assert_eq!(texts.len(), 300);
    assert_eq!(texts.last().unwrap(), "m699");
    assert!(texts.windows(2).all(|w| {
        let n = |t: &str| t[1..].parse::<u32>().unwrap();
        n(&w[0]) < n(&w[1])
    }));
    assert!(!texts.iter().any(|t| t == "m605" || t.starts_with("prompt")));
    let limits = HistoryLimits {
        max_messages: 300,
        max_tokens: Some(20),
    };
    let few = engine.history(&s, &limits).unwrap();
    assert!(!few.is_empty() && few.len() < 20, "{}", few.len());
    assert_eq!(
        few.last().unwrap().message().unwrap().content_text(),
        "m699"
    );
}
