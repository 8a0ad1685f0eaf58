//! The session routes against a real server on 127.0.0.1: anchors, consolidation, /new,
//! Bub's start, threads and the context build, each the way a client uses it, and bad
//! input (malformed JSON, wrong types, ids at the integer edges, NUL bytes) answered with
//! a clear 4xx that stores nothing.
use crate::common::Server;
use memtape_server::{KeyStore, Limits, Role};
use serde_json::{Value, json};

/// Sends `body` as it is (not necessarily JSON) with a JSON content type.
fn raw(s: &Server, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let url = s.url(path);
    let request = match method {
        "POST" => agent.post(&url),
        "PUT" => agent.put(&url),
        "PATCH" => agent.patch(&url),
        other => panic!("method {other}"),
    };
    let mut response = request
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Appends `messages` to `session` and returns their ids.
fn append(s: &Server, session: &str, messages: Value) -> Vec<u64> {
    let (status, body) = s.post(
        &format!("/v1/sessions/{session}/messages"),
        &json!({ "messages": messages }),
    );
    assert_eq!(status, 201, "{body}");
    body["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn entry_count(s: &Server, session: &str) -> usize {
    let (status, page) = s.get(&format!("/v1/sessions/{session}/entries?limit=1000"));
    assert_eq!(status, 200, "{page}");
    page["entries"].as_array().unwrap().len()
}

#[test]
fn anchors_slice_the_tape_and_consolidation_moves_history() {
    let s = Server::start();
    let ids = append(
        &s,
        "chat",
        json!([
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"}
        ]),
    );
    let (status, anchor) = s.post(
        "/v1/sessions/chat/anchors",
        &json!({"name": "handoff", "state": {"summary": "talked about one thing"}}),
    );
    assert_eq!(status, 201, "{anchor}");
    let anchor_id = anchor["id"].as_u64().unwrap();
    assert!(anchor_id > ids[1]);
    let later = append(
        &s,
        "chat",
        json!([{"role": "user", "content": "second question"}]),
    );
    let (status, page) = s.get("/v1/sessions/chat/entries?after_anchor=handoff");
    assert_eq!(status, 200, "{page}");
    let after: Vec<u64> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert_eq!(after, later, "only what follows the anchor");
    let (_, all) = s.get("/v1/sessions/chat/entries?kind=anchor");
    assert_eq!(
        all["entries"][0]["payload"],
        json!({"name": "handoff", "state": {"summary": "talked about one thing"}})
    );

    let (status, moved) = s.post("/v1/sessions/chat/consolidate", &json!({"through": ids[1]}));
    assert_eq!(status, 201, "{moved}");
    assert!(moved["id"].as_u64().unwrap() > later[0]);
    let (_, history) = s.get("/v1/sessions/chat/history");
    assert_eq!(
        history["messages"],
        json!([{"role": "user", "content": "second question"}]),
        "the consolidated messages left the history"
    );
    let (_, sessions) = s.get("/v1/sessions");
    assert_eq!(sessions["sessions"][0]["last_consolidated"], ids[1]);
}

#[test]
fn anchor_and_consolidate_refuse_bad_input_and_store_nothing() {
    let s = Server::start();
    let ids = append(&s, "chat", json!([{"role": "user", "content": "hello"}]));
    let before = entry_count(&s, "chat");
    let cases: Vec<(&str, &[u8], u16)> = vec![
        ("/v1/sessions/chat/anchors", b"{\"name\": \"x\"", 400),
        ("/v1/sessions/chat/anchors", b"{\"name\": 5}", 422),
        (
            "/v1/sessions/chat/anchors",
            b"{\"name\": \"x\", \"state\": [1]}",
            422,
        ),
        (
            "/v1/sessions/chat/anchors",
            b"{\"name\": \"x\", \"extra\": 1}",
            422,
        ),
        ("/v1/sessions/chat/anchors", b"{\"name\": \"  \"}", 400),
        ("/v1/sessions/chat/consolidate", b"{\"through\": -1}", 422),
        (
            "/v1/sessions/chat/consolidate",
            b"{\"through\": \"3\"}",
            422,
        ),
        (
            "/v1/sessions/chat/consolidate",
            b"{\"through\": 18446744073709551616}",
            422,
        ),
        // 2^53: above the largest id a store accepts.
        (
            "/v1/sessions/chat/consolidate",
            b"{\"through\": 9007199254740992}",
            400,
        ),
        (
            "/v1/sessions/chat/consolidate",
            b"{\"through\": 18446744073709551615}",
            400,
        ),
        // In range, but no entry of this session yet.
        (
            "/v1/sessions/chat/consolidate",
            b"{\"through\": 9007199254740991}",
            400,
        ),
    ];
    for (path, body, want) in cases {
        let (status, answer) = raw(&s, "POST", path, body);
        assert_eq!(
            status,
            want,
            "{path} {}: {answer}",
            String::from_utf8_lossy(body)
        );
        assert!(answer["error"]["message"].as_str().is_some(), "{answer}");
    }
    let (status, answer) = s.post("/v1/sessions/a%00b/anchors", &json!({"name": "x"}));
    assert_eq!(status, 400, "a NUL in a session key: {answer}");
    let (status, answer) = s.post("/v1/sessions/nope/consolidate", &json!({"through": 0}));
    assert_eq!(status, 404, "{answer}");
    // Another session's entry is not this session's to consolidate through.
    append(
        &s,
        "other",
        json!([{"role": "user", "content": "elsewhere"}]),
    );
    let (status, answer) = s.post(
        "/v1/sessions/other/consolidate",
        &json!({"through": ids[0]}),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(entry_count(&s, "chat"), before, "nothing was stored");
    assert_eq!(s.get("/healthz").0, 200);
}

#[test]
fn a_thread_is_read_root_first_and_another_agents_entry_is_missing() {
    let s = Server::start();
    let ids = append(
        &s,
        "chat",
        json!([
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a1"}
        ]),
    );
    // A regenerated answer: a second reply to the same question.
    let (status, body) = s.post(
        "/v1/sessions/chat/messages",
        &json!({"role": "assistant", "content": "a2", "parent": ids[0]}),
    );
    assert_eq!(status, 201, "{body}");
    let regenerated = body["ids"][0].as_u64().unwrap();
    let (status, thread) = s.get(&format!("/v1/entries/{regenerated}/thread"));
    assert_eq!(status, 200, "{thread}");
    let contents: Vec<&str> = thread["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["q", "a2"]);

    // Another agent's view of the same id reads exactly like an id that does not exist.
    let (status, other) = s.get(&format!("/v1/entries/{regenerated}/thread?agent=other"));
    assert_eq!(status, 404, "{other}");
    let missing_id = regenerated + 1000;
    let (status, missing) = s.get(&format!("/v1/entries/{missing_id}/thread"));
    assert_eq!(status, 404);
    assert_eq!(
        other["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&regenerated.to_string(), "N"),
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&missing_id.to_string(), "N"),
    );
    // Ids at the integer edges.
    for (id, want) in [
        ("0", 404),
        ("9007199254740991", 404),
        ("9007199254740992", 400),
        ("18446744073709551615", 400),
        ("18446744073709551616", 400),
        ("-1", 400),
        ("abc", 400),
    ] {
        let (status, body) = s.get(&format!("/v1/entries/{id}/thread"));
        assert_eq!(status, want, "id {id}: {body}");
        assert!(body["error"]["code"].is_string());
    }
}

#[test]
fn new_archives_then_clears_and_a_missing_session_is_404() {
    let s = Server::start();
    append(
        &s,
        "chat",
        json!([
            {"role": "user", "content": "We decided to ship the Rust rewrite of the billing service in March."},
            {"role": "assistant", "content": "Noted: the billing service rewrite in Rust ships in March."}
        ]),
    );
    let (status, new) = s.post("/v1/sessions/chat/new", &json!({}));
    assert_eq!(status, 200, "{new}");
    assert_eq!(new["archived"], 2);
    assert!(new["boundary"].as_u64().is_some(), "{new}");
    let (_, history) = s.get("/v1/sessions/chat/history");
    assert_eq!(history["messages"], json!([]), "the session starts again");
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(new["history_version"], memory["version"], "{new}");
    assert!(
        memory["files"]["HISTORY.md"]["content"]
            .as_str()
            .unwrap()
            .contains("billing"),
        "{memory}"
    );
    // The old messages stay on the tape.
    assert!(entry_count(&s, "chat") >= 4);
    let (status, body) = s.post("/v1/sessions/nope/new", &json!({}));
    assert_eq!(status, 404, "{body}");
    let (status, body) = s.post("/v1/sessions/chat/new?retention_days=-1", &json!({}));
    assert_eq!(status, 400, "{body}");
}

#[test]
fn start_writes_the_bootstrap_anchor_once_and_takes_bubs_view() {
    let s = Server::start();
    let (status, saved) = s.post("/v1/memory/save", &json!({"content": "Ada likes tea."}));
    assert_eq!(status, 201, "{saved}");
    let (status, started) = s.post("/v1/sessions/bub/start", &json!({}));
    assert_eq!(status, 200, "{started}");
    assert!(started["bootstrap"].as_u64().is_some(), "{started}");
    assert!(
        started["zone"].as_u64().is_some(),
        "the memory zone: {started}"
    );
    let (status, again) = s.post("/v1/sessions/bub/start", &json!({}));
    assert_eq!(status, 200);
    assert!(again["bootstrap"].is_null(), "only once: {again}");
    assert!(again["zone"].is_null(), "memory did not change: {again}");
    let (_, anchors) = s.get("/v1/sessions/bub/entries?kind=anchor");
    assert_eq!(anchors["entries"][0]["payload"]["name"], "session/start");
}

/// Bub (seed 001, 3.3): a save made in a Bub session appends a new memory zone to its tape,
/// over REST as over MCP and the CLI; long-term memory over the recommended 4 KB is saved
/// with a warning.
#[test]
fn memory_writes_made_in_a_bub_session_write_its_zone() {
    let s = Server::start();
    let (status, started) = s.post("/v1/sessions/bub/start", &json!({}));
    assert_eq!(status, 200, "{started}");
    let zones = |s: &Server| {
        let (status, page) = s.get("/v1/sessions/bub/entries?kind=anchor&limit=1000");
        assert_eq!(status, 200, "{page}");
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["payload"]["name"] == "memory/seal")
            .count()
    };
    let before = zones(&s);
    // No session named: the memory changes, the tape does not.
    let (status, saved) = s.post("/v1/memory/save", &json!({"content": "Ada likes tea."}));
    assert_eq!(status, 201, "{saved}");
    assert!(
        saved["zone"].is_null() && saved["warning"].is_null(),
        "{saved}"
    );
    assert_eq!(zones(&s), before);
    // Made in the Bub session: a new zone each time, named in the answer.
    let (status, saved) = s.post(
        "/v1/memory/save?session=bub",
        &json!({"content": "Ada likes green tea."}),
    );
    assert_eq!(status, 201, "{saved}");
    assert!(saved["zone"].as_u64().is_some(), "{saved}");
    assert_eq!(zones(&s), before + 1);
    let (status, noted) = s.post(
        "/v1/memory/daily?session=bub",
        &json!({"content": "Talked about tea."}),
    );
    assert_eq!(status, 201, "{noted}");
    assert_eq!(zones(&s), before + 2);
    let (status, cleared) = s.post("/v1/memory/clear?session=bub", &json!({}));
    assert_eq!(status, 200, "{cleared}");
    assert!(cleared["recorded"]["zone"].as_u64().is_some(), "{cleared}");
    assert_eq!(zones(&s), before + 3);
    // A session with memtape's own view keeps no zone.
    append(&s, "plain", json!([{"role": "user", "content": "hi"}]));
    let (status, saved) = s.post("/v1/memory/save?session=plain", &json!({"content": "x"}));
    assert_eq!(status, 201, "{saved}");
    assert!(saved["zone"].is_null(), "{saved}");
    // A malformed session name is refused, and nothing is saved.
    let (status, refused) = s.post("/v1/memory/save?session=a%00b", &json!({"content": "y"}));
    assert_eq!(status, 400, "{refused}");
    let (_, memory) = s.get("/v1/memory");
    assert!(!memory.to_string().contains("\"y\""), "{memory}");

    // Over 4 KB: saved, with the warning, on REST and through the tool.
    let long = "Ada likes tea. ".repeat(300);
    let (status, saved) = s.post("/v1/memory/save", &json!({"content": long}));
    assert_eq!(status, 201, "{saved}");
    let warning = saved["warning"].as_str().unwrap();
    assert!(
        warning.contains("4500 bytes, over the recommended 4096"),
        "{warning}"
    );
    let (status, called) = s.post(
        "/v1/tools/memory.save",
        &json!({"input": {"content": long}}),
    );
    assert_eq!(status, 200, "{called}");
    assert!(
        called.to_string().contains("over the recommended 4096"),
        "{called}"
    );
    let (status, called) = s.post(
        "/v1/tools/memory.save",
        &json!({"input": {"content": "short"}}),
    );
    assert_eq!(status, 200, "{called}");
    assert!(!called.to_string().contains("Warning"), "{called}");
}

#[test]
fn context_builds_the_prompt_within_the_budget() {
    let s = Server::start();
    s.post(
        "/v1/memory/save",
        &json!({"content": "Ada prefers dark mode."}),
    );
    append(
        &s,
        "chat",
        json!([
            {"role": "user", "content": "Hello, I am Ada."},
            {"role": "assistant", "content": "Hi Ada."},
            {"role": "user", "content": "Which theme do I like?"}
        ]),
    );
    let (status, built) = s.post(
        "/v1/sessions/chat/context",
        &json!({"budget": 4000, "system": "You are a helpful assistant.", "dry_run": true}),
    );
    assert_eq!(status, 200, "{built}");
    let messages = built["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("dark mode"),
        "memory is in the prompt: {built}"
    );
    assert_eq!(
        messages.last().unwrap()["content"],
        "Which theme do I like?"
    );
    let tokens = built["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens <= 4000, "{built}");
    assert_eq!(built["max_input_tokens"], 4000);
    assert_eq!(built["policy"], "mateclaw");

    // A message not on the tape opens a session that has nothing yet.
    let (status, fresh) = s.post(
        "/v1/sessions/new-one/context",
        &json!({"message": "hi", "policy": "qanot", "time_precision": "day"}),
    );
    assert_eq!(status, 200, "{fresh}");
    assert_eq!(fresh["policy"], "qanot");
    // Without one, a session that does not exist is a 404.
    let (status, _) = s.post("/v1/sessions/nope/context", &json!({}));
    assert_eq!(status, 404);
    for (body, want) in [
        (json!({"budget": 0}), 400),
        (json!({"budget": "lots"}), 422),
        (json!({"budget": -5}), 422),
        (json!({"policy": "psychic"}), 422),
        (json!({"time_precision": "second"}), 422),
        (json!({"bogus": true}), 422),
    ] {
        let (status, answer) = s.post("/v1/sessions/chat/context", &body);
        assert_eq!(status, want, "{body}: {answer}");
    }
    let (status, _) = raw(&s, "POST", "/v1/sessions/chat/context", b"{budget: 5}");
    assert_eq!(status, 400);
}

#[test]
fn a_read_key_reads_but_does_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyStore::open(dir.path());
    let (writer, _) = keys.create("acme", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let s = Server::start_in(dir, Limits::default());
    let (status, body) = s.call(
        "POST",
        "/v1/sessions/chat/messages",
        Some(&json!({"role": "user", "content": "hi"})),
        Some(&writer),
    );
    assert_eq!(status, 201, "{body}");
    let id = body["ids"][0].as_u64().unwrap();
    for (path, body) in [
        ("/v1/sessions/chat/anchors", json!({"name": "x"})),
        ("/v1/sessions/chat/consolidate", json!({"through": id})),
        ("/v1/sessions/chat/new", json!({})),
        ("/v1/sessions/chat/start", json!({})),
        ("/v1/sessions/chat/context", json!({})),
    ] {
        let (status, answer) = s.call("POST", path, Some(&body), Some(&reader));
        assert_eq!(status, 403, "{path}: {answer}");
    }
    let (status, built) = s.call(
        "POST",
        "/v1/sessions/chat/context",
        Some(&json!({"dry_run": true})),
        Some(&reader),
    );
    assert_eq!(status, 200, "a preview only reads: {built}");
    let (status, _) = s.call(
        "GET",
        &format!("/v1/entries/{id}/thread"),
        None,
        Some(&reader),
    );
    assert_eq!(status, 200);
    // Another tenant's key does not see the entry.
    let (other, _) = KeyStore::open(s.dir.path())
        .create("globex", Role::Admin)
        .unwrap();
    let (status, _) = s.call(
        "GET",
        &format!("/v1/entries/{id}/thread"),
        None,
        Some(&other),
    );
    assert_eq!(status, 404);
}

#[test]
fn every_route_is_in_the_openapi_document() {
    let s = Server::start();
    let (status, doc) = s.get("/openapi.json");
    assert_eq!(status, 200);
    for (path, method) in [
        ("/v1/sessions/{session}/anchors", "post"),
        ("/v1/sessions/{session}/consolidate", "post"),
        ("/v1/sessions/{session}/new", "post"),
        ("/v1/sessions/{session}/start", "post"),
        ("/v1/sessions/{session}/context", "post"),
        ("/v1/entries/{id}/thread", "get"),
        ("/v1/memory", "get"),
        ("/v1/memory/save", "post"),
        ("/v1/memory/daily", "post"),
        ("/v1/memory/recall", "get"),
        ("/v1/memory/show", "get"),
        ("/v1/memory/versions", "get"),
        ("/v1/memory/diff", "get"),
        ("/v1/memory/undo", "post"),
        ("/v1/memory/forget", "post"),
        ("/v1/memory/clear", "post"),
        ("/v1/memory/prune", "post"),
        ("/v1/memory/flags", "put"),
        ("/v1/memories", "get"),
        ("/v1/memories", "put"),
        ("/v1/memories", "patch"),
        ("/v1/memories", "delete"),
        ("/v1/memories/rename", "post"),
        ("/v1/workspace/files", "get"),
        ("/v1/workspace/file", "get"),
        ("/v1/workspace/file", "put"),
        ("/v1/workspace/file", "patch"),
        ("/v1/export", "get"),
        ("/v1/import", "post"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        assert!(op["responses"].is_object(), "{method} {path}");
    }
}
