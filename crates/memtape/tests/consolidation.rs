//! nanobot's consolidation against a scripted model server on loopback, over the real
//! OpenAI-compatible HTTP protocol and a real SQLite file: what a good `save_memory` call
//! writes, and, for every way a model or its server can fail, that the pointer, HISTORY.md
//! and MEMORY.md stay as they were and the failed attempt is on the tape. Also the lossless
//! rewrite: a fact the model leaves out of MEMORY.md is kept, found by search and restored.
use std::time::Duration;

use memtape::events::{BuiltinEvent, LLM_CALL, LlmCall, MEMORY_DROPPED};
use memtape::memory::{Change, Op, paths};
use memtape::{
    ConsolidateOptions, Engine, Entry, Error, Filter, HistoryLimits, Index, IndexConfig, Kind,
    Message, Mode, Scope, SearchFilter, SearchRequest, Store,
};
use memtape_llm::{OpenAi, RetryPolicy};
use memtape_scripted::{Answer, Scripted, context_length_exceeded, status, text, tool_call};
use serde_json::{Value, json};

fn session() -> Scope {
    Scope::agent("t", "a").unwrap().with_session("s").unwrap()
}

fn memory() -> Scope {
    Scope::agent("t", "a").unwrap()
}

fn open(dir: &std::path::Path) -> Engine {
    let index = Index::open(&dir.join("index"), None, IndexConfig::plain()).unwrap();
    Engine::init(dir).unwrap().with_index(index).unwrap()
}

fn client(server: &Scripted) -> OpenAi {
    OpenAi::new(&server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_millis(400))
        .retry(RetryPolicy {
            max_retries: 2,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
            ..RetryPolicy::default()
        })
}

/// `n` messages, user and assistant in turn, each saying its number.
fn chat(engine: &Engine, n: usize) -> Vec<Entry> {
    let messages = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Message::user(format!("message {i} from the user"))
            } else {
                Message::assistant(format!("message {i} from the assistant"))
            }
        })
        .collect();
    engine.append_messages(&session(), messages).unwrap()
}

fn good_arguments() -> Value {
    json!({
        "history_entry": "[2026-03-10 14:30] The user counted messages.",
        "memory_update": "# Memory\n- The user counts messages\n"
    })
}

fn file(engine: &Engine, path: &str) -> Option<String> {
    engine
        .memory(&memory())
        .unwrap()
        .content(path)
        .map(str::to_owned)
}

fn pointer(engine: &Engine) -> u64 {
    engine
        .store()
        .scope_info(&session())
        .unwrap()
        .unwrap()
        .last_consolidated
        .0
}

fn calls(engine: &Engine) -> Vec<LlmCall> {
    let filter = Filter {
        kinds: vec![Kind::Event],
        name: Some(LLM_CALL.into()),
        ..Filter::default()
    };
    engine
        .store()
        .scan(&memory(), &filter)
        .unwrap()
        .iter()
        .map(|e| match BuiltinEvent::from_payload(&e.payload).unwrap() {
            Some(BuiltinEvent::LlmCall(c)) => c,
            other => panic!("not an llm.call: {other:?}"),
        })
        .collect()
}

#[test]
fn a_good_save_memory_call_consolidates_all_but_the_newest_half_window() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let stored = chat(&engine, 120);
    let server = Scripted::start(vec![tool_call(
        "save_memory",
        Value::String(good_arguments().to_string()),
    )]);
    let done = engine
        .consolidate(&session(), &client(&server), ConsolidateOptions::default())
        .unwrap();
    // 120 messages, keep 50: the first 70 are consolidated, the pointer is on the 70th.
    assert_eq!(done.messages, 70);
    assert_eq!(done.through, Some(stored[69].id));
    assert_eq!(pointer(&engine), stored[69].id.0);
    assert!(done.memory_changed);
    assert_eq!(
        done.history_entry.as_deref(),
        Some("[2026-03-10 14:30] The user counted messages.")
    );
    let history = engine
        .history(&session(), &HistoryLimits::default())
        .unwrap();
    assert_eq!(history.len(), 50);
    assert_eq!(history[0].id, stored[70].id);
    assert_eq!(
        file(&engine, paths::HISTORY).unwrap(),
        "[2026-03-10 14:30] The user counted messages.\n\n"
    );
    assert_eq!(
        file(&engine, paths::MEMORY).unwrap(),
        "# Memory\n- The user counts messages\n"
    );
    // What the model was sent: nanobot's prompt, the tool, the tool forced.
    let body = server.body(0).unwrap();
    assert_eq!(body["tools"][0]["function"]["name"], "save_memory");
    assert_eq!(body["tool_choice"]["function"]["name"], "save_memory");
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("## Current Long-term Memory\n(empty)"),
        "{prompt}"
    );
    assert!(
        prompt.contains("] USER: message 0 from the user\n"),
        "{prompt}"
    );
    assert!(
        prompt.contains("] ASSISTANT: message 69 from the assistant"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("message 70 "),
        "kept messages are not sent"
    );
    assert_eq!(
        body["messages"][0]["content"],
        "You are a memory consolidation agent. Call the save_memory tool with your consolidation of the conversation."
    );
    // The call and its tokens are on the tape.
    let calls = calls(&engine);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].purpose, "consolidation");
    assert_eq!(calls[0].session.as_deref(), Some("s"));
    assert_eq!(
        (calls[0].prompt_tokens, calls[0].completion_tokens),
        (120, 30)
    );
    assert_eq!(calls[0].error, None);
    // The consolidation's writes are one transaction and one moment: in id order their
    // times never go back, so no moment sees the pointer moved without the memory.
    let tape = engine
        .store()
        .entries_after(memtape::EntryId(stored[119].id.0), 100)
        .unwrap();
    assert!(tape.len() >= 3, "{tape:?}");
    assert!(
        tape.windows(2).all(|w| w[0].created_at <= w[1].created_at),
        "{:?}",
        tape.iter()
            .map(|e| (e.id, e.created_at))
            .collect::<Vec<_>>()
    );
    // Nothing more to do until the window fills again: no call.
    let again = engine
        .consolidate(&session(), &client(&server), ConsolidateOptions::default())
        .unwrap();
    assert_eq!(again.through, None);
    assert_eq!(server.requests(), 1);
}

/// nanobot accepts the arguments as a JSON string, an object, a double-encoded string or a
/// list holding one object; a value that is not a string is kept as its JSON text; a
/// history entry without a stamp gets the time of the first consolidated message.
#[test]
fn every_form_of_arguments_providers_send_is_accepted() {
    let forms = [
        good_arguments(),
        Value::String(good_arguments().to_string()),
        Value::String(Value::String(good_arguments().to_string()).to_string()),
        json!([good_arguments()]),
    ];
    for arguments in forms {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path());
        chat(&engine, 4);
        let server = Scripted::start(vec![tool_call("save_memory", arguments.clone())]);
        let options = ConsolidateOptions {
            archive_all: true,
            ..Default::default()
        };
        let done = engine
            .consolidate(&session(), &client(&server), options)
            .unwrap_or_else(|e| panic!("{arguments}: {e}"));
        assert_eq!(done.messages, 4, "{arguments}");
        assert!(done.memory_changed, "{arguments}");
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let stored = chat(&engine, 4);
    let server = Scripted::start(vec![tool_call(
        "save_memory",
        json!({"history_entry": {"topic": "counting"}, "memory_update": ""}),
    )]);
    let options = ConsolidateOptions {
        archive_all: true,
        ..Default::default()
    };
    let done = engine
        .consolidate(&session(), &client(&server), options)
        .unwrap();
    let stamp = stored[0].created_at.format("%Y-%m-%d %H:%M");
    assert_eq!(
        done.history_entry.as_deref(),
        Some(format!("[{stamp}] {{\"topic\":\"counting\"}}").as_str())
    );
    // An empty memory_update never wipes MEMORY.md.
    assert!(!done.memory_changed);
    assert_eq!(file(&engine, paths::MEMORY), None);
}

/// Every way a model or its server can fail: the pointer does not move, HISTORY.md and
/// MEMORY.md keep their version, the attempt is recorded with its error, and the next
/// consolidation (with a good answer) still has every message.
#[test]
fn nothing_is_lost_whatever_the_model_or_its_server_does() {
    let truncated = r#"{"history_entry": "[2026-03-10 14:30] cut"#;
    let cases: Vec<(&str, Vec<Answer>)> = vec![
        ("no tool call", vec![text("I'd rather chat.")]),
        (
            "the wrong tool",
            vec![tool_call("memory_save", good_arguments())],
        ),
        (
            "malformed arguments",
            vec![tool_call("save_memory", json!("not json at all"))],
        ),
        (
            "truncated JSON",
            vec![tool_call("save_memory", Value::String(truncated.into()))],
        ),
        (
            "arguments that are a number",
            vec![tool_call("save_memory", json!(42))],
        ),
        (
            "a missing history_entry",
            vec![tool_call("save_memory", json!({"memory_update": "x"}))],
        ),
        (
            "an empty history_entry",
            vec![tool_call(
                "save_memory",
                json!({"history_entry": " ", "memory_update": "x"}),
            )],
        ),
        (
            "a missing memory_update",
            vec![tool_call("save_memory", json!({"history_entry": "x"}))],
        ),
        (
            "a MEMORY.md past the size limit",
            vec![tool_call(
                "save_memory",
                json!({"history_entry": "x", "memory_update": "y".repeat(300 * 1024)}),
            )],
        ),
        (
            "a NUL byte",
            vec![tool_call(
                "save_memory",
                json!({"history_entry": "x\u{0}y", "memory_update": "z"}),
            )],
        ),
        (
            "500 forever",
            vec![
                status(500, "boom"),
                status(500, "boom"),
                status(500, "boom"),
            ],
        ),
        (
            "a hang past the timeout",
            vec![Answer::Hang, Answer::Hang, Answer::Hang],
        ),
        ("context_length_exceeded", vec![context_length_exceeded()]),
        (
            "a reply that is not JSON",
            vec![Answer::Reply(200, Vec::new(), "<html>".into())],
        ),
    ];
    for (what, script) in cases {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path());
        engine
            .save_long_term(&memory(), "# Memory\n- Ada likes tea\n")
            .unwrap();
        let stored = chat(&engine, 120);
        let before = engine.memory(&memory()).unwrap();
        let server = Scripted::start(script);
        let err = engine
            .consolidate(&session(), &client(&server), ConsolidateOptions::default())
            .expect_err(what);
        assert!(
            matches!(err, Error::Llm(_) | Error::Model(_) | Error::Invalid(_)),
            "{what}: {err:?}"
        );
        assert_eq!(pointer(&engine), 0, "{what}: the pointer moved");
        assert_eq!(engine.memory(&memory()).unwrap(), before, "{what}");
        let calls = calls(&engine);
        assert_eq!(calls.len(), 1, "{what}");
        let error = calls[0]
            .error
            .as_deref()
            .unwrap_or_else(|| panic!("{what}: no error recorded"));
        assert!(!error.is_empty(), "{what}");
        // A good answer later consolidates the same messages: none was lost.
        let server = Scripted::start(vec![tool_call("save_memory", good_arguments())]);
        let done = engine
            .consolidate(&session(), &client(&server), ConsolidateOptions::default())
            .unwrap();
        assert_eq!(done.through, Some(stored[69].id), "{what}");
        let prompt = server.body(0).unwrap()["messages"][1]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(prompt.contains("message 0 from the user"), "{what}");
        assert!(prompt.contains("- Ada likes tea"), "{what}");
    }
}

/// 429 then success: the client retries, the consolidation succeeds, the attempts show.
/// A server that refuses a forced tool choice is asked again with `auto` (nanobot).
#[test]
fn transient_errors_and_a_refused_tool_choice_are_retried() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    chat(&engine, 120);
    let server = Scripted::start(vec![
        status(429, "slow down"),
        tool_call("save_memory", good_arguments()),
    ]);
    engine
        .consolidate(&session(), &client(&server), ConsolidateOptions::default())
        .unwrap();
    assert_eq!(calls(&engine)[0].attempts, 2);

    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    chat(&engine, 120);
    let server = Scripted::start(vec![
        status(400, "tool_choice 'function' is not supported by this model"),
        tool_call("save_memory", good_arguments()),
    ]);
    let done = engine
        .consolidate(&session(), &client(&server), ConsolidateOptions::default())
        .unwrap();
    assert!(done.memory_changed);
    assert!(server.body(0).unwrap().get("tool_choice").is_some());
    assert!(server.body(1).unwrap().get("tool_choice").is_none());
    let calls = calls(&engine);
    assert_eq!(calls.len(), 2);
    assert!(calls[0].error.as_deref().unwrap().contains("tool_choice"));
    assert_eq!(calls[1].error, None);
}

/// The span is fixed before the call: a message that arrives while the model is working
/// stays unconsolidated, and a line another writer adds to MEMORY.md meanwhile is carried
/// into the model's rewrite instead of being overwritten.
#[test]
fn writes_made_while_the_model_works_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let stored = chat(&engine, 120);
    let server = Scripted::start(vec![Answer::Delayed(
        Duration::from_millis(300),
        Box::new(tool_call("save_memory", good_arguments())),
    )]);
    let late = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            engine.consolidate(&session(), &client(&server), ConsolidateOptions::default())
        });
        while server.requests() == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let late = engine
            .append(
                &session(),
                Message::user("a late message"),
                Default::default(),
            )
            .unwrap();
        engine
            .record_memory(
                &memory(),
                Change::one(
                    Op::Append {
                        path: paths::MEMORY.into(),
                        text: "- Captured by the WAL meanwhile\n".into(),
                        heading: None,
                    },
                    "wal",
                ),
            )
            .unwrap();
        let done = run.join().unwrap().unwrap();
        assert_eq!(done.through, Some(stored[69].id));
        assert_eq!(done.dropped, 0);
        late
    });
    let history = engine
        .history(&session(), &HistoryLimits::default())
        .unwrap();
    assert_eq!(history.len(), 51);
    assert_eq!(history.last().unwrap().id, late.id);
    assert_eq!(
        file(&engine, paths::MEMORY).unwrap(),
        "# Memory\n- The user counts messages\n- Captured by the WAL meanwhile\n"
    );
}

/// Lossless rewrites: the model "forgets" a fact in its rewrite of MEMORY.md. The fact is
/// kept as a memory.dropped event, found by search, listed, and restored with one call.
#[test]
fn a_fact_the_model_forgets_is_kept_searchable_and_restorable() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine
        .save_long_term(
            &memory(),
            "# Memory\n## Facts\n- Ada is allergic to penicillin\n- Ada lives in Oslo\n",
        )
        .unwrap();
    chat(&engine, 120);
    let forgetful = json!({
        "history_entry": "[2026-03-10 14:30] Counting.",
        "memory_update": "# Memory\n## Facts\n- Ada lives in Oslo\n- The user counts messages\n"
    });
    let server = Scripted::start(vec![tool_call("save_memory", forgetful)]);
    let done = engine
        .consolidate(&session(), &client(&server), ConsolidateOptions::default())
        .unwrap();
    assert_eq!(done.dropped, 1);
    assert!(!file(&engine, paths::MEMORY).unwrap().contains("penicillin"));

    let hits = engine
        .search(
            &SearchRequest::new("penicillin allergy", SearchFilter::tenant("t")).mode(Mode::Bm25),
        )
        .unwrap();
    let dropped_hit = hits
        .iter()
        .find(|h| h.entry.payload.name() == Some(MEMORY_DROPPED))
        .expect("the dropped fact is found by search");
    let listed = engine.dropped_facts(&memory()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, dropped_hit.entry.id);
    assert_eq!(listed[0].fact.text, "- Ada is allergic to penicillin");
    assert_eq!(listed[0].fact.section.as_deref(), Some("## Facts"));
    assert_eq!(listed[0].fact.by, "consolidation");
    assert!(!listed[0].present);

    let restored = engine.restore_dropped(&memory(), listed[0].id).unwrap();
    assert!(restored.is_some());
    assert_eq!(
        file(&engine, paths::MEMORY).unwrap(),
        "# Memory\n## Facts\n- Ada lives in Oslo\n- The user counts messages\n- Ada is allergic to penicillin\n"
    );
    assert!(engine.dropped_facts(&memory()).unwrap()[0].present);
    // Restoring again changes nothing; another scope cannot restore it.
    assert_eq!(
        engine.restore_dropped(&memory(), listed[0].id).unwrap(),
        None
    );
    let other = Scope::agent("t", "b").unwrap();
    assert!(matches!(
        engine.restore_dropped(&other, listed[0].id),
        Err(Error::NoEntry(_))
    ));
    let elsewhere = Scope::agent("u", "a").unwrap();
    assert!(engine.restore_dropped(&elsewhere, listed[0].id).is_err());
}

/// nanobot's /new with the model: archives every unconsolidated message, then clears; when
/// the model fails, the session is not cleared and nothing changes.
#[test]
fn new_with_the_model_archives_all_or_clears_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let stored = chat(&engine, 6);
    let server = Scripted::start(vec![text("no tool call")]);
    assert!(
        engine
            .new_session_with_model(&session(), &client(&server), Default::default())
            .is_err()
    );
    assert_eq!(pointer(&engine), 0);
    assert_eq!(
        engine
            .history(&session(), &HistoryLimits::default())
            .unwrap()
            .len(),
        6
    );
    let server = Scripted::start(vec![tool_call("save_memory", good_arguments())]);
    let new = engine
        .new_session_with_model(&session(), &client(&server), Default::default())
        .unwrap();
    assert_eq!(new.archived, 6);
    assert_eq!(pointer(&engine), stored[5].id.0);
    let boundary = new.boundary.unwrap();
    assert_eq!(boundary.payload.name(), Some(memtape::SESSION_NEW));
    assert!(
        engine
            .history(&session(), &HistoryLimits::default())
            .unwrap()
            .is_empty()
    );
    assert!(
        file(&engine, paths::HISTORY)
            .unwrap()
            .contains("counted messages")
    );
    // An empty session is cleared without a call.
    let again = engine
        .new_session_with_model(&session(), &client(&server), Default::default())
        .unwrap();
    assert_eq!(again.archived, 0);
    assert_eq!(server.requests(), 1);
}

/// A span with no text (tool calls only) has nothing to remember: the pointer moves
/// without a model call.
#[test]
fn a_span_without_text_moves_the_pointer_without_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let calls = (0..4)
        .map(|i| {
            Message::assistant_tool_calls(vec![memtape::ToolCall::function(
                format!("c{i}"),
                "noop",
                "{}",
            )])
        })
        .collect();
    let stored = engine.append_messages(&session(), calls).unwrap();
    let server = Scripted::start(Vec::new());
    let options = ConsolidateOptions {
        archive_all: true,
        ..Default::default()
    };
    let done = engine
        .consolidate(&session(), &client(&server), options)
        .unwrap();
    assert_eq!(done.through, Some(stored[3].id));
    assert_eq!(server.requests(), 0);
    assert_eq!(pointer(&engine), stored[3].id.0);
}

/// nanobot's background consolidation: a nudge after an append starts the consolidation
/// on its own thread once the window is full and returns at once (the model is still
/// thinking when it returns); a second nudge while it runs starts nothing; messages
/// appended meanwhile stay unconsolidated; the outcome reaches the callback.
#[test]
fn background_consolidation_starts_at_the_window_and_runs_once_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(open(dir.path()));
    let server = Scripted::start(vec![Answer::Delayed(
        Duration::from_millis(300),
        Box::new(tool_call("save_memory", good_arguments())),
    )]);
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = outcomes.clone();
    let config = memtape::LifecycleConfig {
        memory_window: 10,
        ..Default::default()
    };
    let background =
        memtape::Background::new(engine.clone(), std::sync::Arc::new(client(&server)), config)
            .on_done(move |s, outcome| {
                seen.lock().unwrap().push((
                    s.clone(),
                    outcome
                        .as_ref()
                        .map(|c| c.messages)
                        .map_err(|e| e.to_string()),
                ));
            });
    let stored = chat(&engine, 9);
    assert!(
        !background.nudge(&session()).unwrap(),
        "9 < the window of 10"
    );
    let stored = [stored, chat(&engine, 1)].concat();
    assert!(background.nudge(&session()).unwrap());
    assert!(
        background.is_running(&session()),
        "the nudge returned before the model answered"
    );
    assert!(
        !background.nudge(&session()).unwrap(),
        "one at a time per session"
    );
    // Once the model has the request, the span is read: what comes now is "meanwhile".
    let asked = std::time::Instant::now();
    while server.requests() == 0 {
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "the model was never asked"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let late = chat(&engine, 1);
    background.wait_idle();
    assert_eq!(
        *outcomes.lock().unwrap(),
        [(session(), Ok(5))],
        "10 messages, keep 5: the first 5 consolidated"
    );
    assert_eq!(pointer(&engine), stored[4].id.0);
    // The 5 kept and the late one are still unconsolidated.
    assert_eq!(engine.unconsolidated(&session(), 100).unwrap(), 6);
    let history = engine
        .history(&session(), &HistoryLimits::default())
        .unwrap();
    assert_eq!(history.last().unwrap().id, late[0].id);
    // A session busy in another process (its lock held elsewhere) is left to it.
    chat(&engine, 10);
    let other = Engine::open(dir.path()).unwrap();
    let held = other.lock_consolidation(&session()).unwrap();
    assert!(background.nudge(&session()).unwrap());
    background.wait_idle();
    assert_eq!(outcomes.lock().unwrap().len(), 1, "skipped: held elsewhere");
    drop(held);
    assert_eq!(server.requests(), 1);
}

/// The same safety through the Anthropic Messages API: a good tool_use block consolidates;
/// no tool call, another tool, input that is not an object, 500 forever, a hang past the
/// timeout, and "prompt is too long" each change nothing and are recorded.
#[test]
fn nothing_is_lost_through_the_anthropic_api_either() {
    use memtape_scripted::ok;
    let message = |content: Value| {
        ok(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": content, "stop_reason": "tool_use",
            "usage": {"input_tokens": 900, "output_tokens": 60}
        }))
    };
    let tool_use = |name: &str, input: Value| {
        message(json!([{"type": "tool_use", "id": "toolu_1", "name": name, "input": input}]))
    };
    let error = |status: u16, kind: &str, text: &str| {
        Answer::Reply(
            status,
            Vec::new(),
            json!({"type": "error", "error": {"type": kind, "message": text}}).to_string(),
        )
    };
    let anthropic = |server: &Scripted| {
        memtape_llm::Anthropic::new(&server.base, "claude")
            .unwrap()
            .timeout(Duration::from_millis(400))
            .retry(RetryPolicy {
                max_retries: 1,
                base: Duration::from_millis(1),
                cap: Duration::from_millis(5),
                ..RetryPolicy::default()
            })
    };
    let failures: Vec<(&str, Vec<Answer>)> = vec![
        (
            "no tool call",
            vec![message(json!([{"type": "text", "text": "no"}]))],
        ),
        (
            "another tool",
            vec![tool_use("memory_save", good_arguments())],
        ),
        (
            "input that is a number",
            vec![tool_use("save_memory", json!(7))],
        ),
        (
            "500 forever",
            vec![error(500, "api_error", "x"), error(500, "api_error", "x")],
        ),
        ("a hang", vec![Answer::Hang, Answer::Hang]),
        (
            "prompt is too long",
            vec![error(
                400,
                "invalid_request_error",
                "prompt is too long: 250000 tokens > 200000 maximum",
            )],
        ),
    ];
    for (what, script) in failures {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path());
        engine
            .save_long_term(&memory(), "# Memory\n- Ada likes tea\n")
            .unwrap();
        chat(&engine, 120);
        let before = engine.memory(&memory()).unwrap();
        let server = Scripted::start(script);
        let err = engine
            .consolidate(
                &session(),
                &anthropic(&server),
                ConsolidateOptions::default(),
            )
            .expect_err(what);
        assert!(
            matches!(err, Error::Llm(_) | Error::Model(_)),
            "{what}: {err:?}"
        );
        assert_eq!(pointer(&engine), 0, "{what}");
        assert_eq!(engine.memory(&memory()).unwrap(), before, "{what}");
        assert!(calls(&engine)[0].error.is_some(), "{what}");
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let stored = chat(&engine, 120);
    let server = Scripted::start(vec![tool_use("save_memory", good_arguments())]);
    let done = engine
        .consolidate(
            &session(),
            &anthropic(&server),
            ConsolidateOptions::default(),
        )
        .unwrap();
    assert_eq!(done.through, Some(stored[69].id));
    let body = server.body(0).unwrap();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "save_memory"})
    );
    assert_eq!(calls(&engine)[0].prompt_tokens, 900);
}
