//! MateClaw's own memory paths (seed 003) on a real server over real HTTP, with a scripted
//! model on loopback: `/api/v1/memory/{agentId}/emergence` and
//! `/api/v1/memory/{agentId}/summarize/{conversationId}` answer in MateClaw's envelope
//! (`{"code": 200, "data": {...}}`, failures `{"code": CODE, "msg": ...}`), behind the same
//! keys and guard as `/v1`, confined to the caller's tenant.

use std::sync::Arc;
use std::time::Duration;

use crate::common::Server;
use memtape::LifecycleConfig;
use memtape_llm::{OpenAi, RetryPolicy};
use memtape_scripted::{Scripted, text};
use memtape_server::{KeyStore, ModelSetup, Role};
use serde_json::{Value, json};

fn model(server: &Scripted) -> ModelSetup {
    let llm = OpenAi::new(&server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_secs(5))
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        });
    ModelSetup {
        llm: Arc::new(llm),
        lifecycle: LifecycleConfig::default(),
    }
}

/// Five messages in conversation `conv` of agent `agent`, the last a user's (no exchange
/// completes, so no extraction runs on its own).
fn converse(s: &Server, key: Option<&str>, agent: &str, conv: &str) {
    let messages: Vec<Value> = (0..5)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("kayak trip plan number {i}")})
        })
        .collect();
    let (status, body) = s.call(
        "POST",
        &format!("/v1/sessions/{conv}/messages?agent={agent}"),
        Some(&json!({"messages": messages})),
        key,
    );
    assert_eq!(status, 201, "{body}");
}

/// A raw request: `content_type` as given (none when `None`), no body.
fn raw(s: &Server, method: &str, path: &str, content_type: Option<&str>) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n"
    );
    if let Some(t) = content_type {
        request.push_str(&format!("Content-Type: {t}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// The failure envelope: the HTTP status in `code`, and a message naming the problem.
fn failed(answer: &(u16, Value), status: u16, needle: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["code"], status, "{body}");
    assert_eq!(
        body.as_object().unwrap().len(),
        2,
        "code and msg only: {body}"
    );
    let msg = body["msg"].as_str().unwrap();
    assert!(msg.contains(needle), "{needle:?} in {msg}");
}

#[test]
fn a_mateclaw_client_triggers_extraction_and_emergence_on_its_own_paths() {
    let reply = |v: Value| text(&v.to_string());
    let model_server = Scripted::start(vec![
        reply(json!({"should_update": true, "daily_entry": "## Kayak plans", "reason": "a plan"})),
        reply(
            json!({"should_update": true, "memory_content": "# Memory\n- Kayaks\n", "reason": "recurs"}),
        ),
        text("this is not JSON"),
    ]);
    let s = Server::start_with_model(model(&model_server));
    converse(&s, None, "7", "conv-9");

    let (status, body) = s.call("POST", "/api/v1/memory/7/summarize/conv-9", None, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"code": 200, "data": {"status": "completed", "shouldUpdate": true,
            "reason": "a plan", "changed": [body["data"]["changed"][0].clone()]}})
    );
    assert!(
        body["data"]["changed"][0]
            .as_str()
            .unwrap()
            .starts_with("memory/"),
        "the daily note: {body}"
    );
    let (status, body) = s.call("POST", "/api/v1/memory/7/emergence", None, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"code": 200, "data": {"status": "completed", "shouldUpdate": true,
            "reason": "recurs", "changed": ["MEMORY.md"]}})
    );
    // It is agent 7's memory, as /v1 reads it; the default agent's is untouched.
    let (_, memory) = s.get("/v1/memory/file?agent=7&path=MEMORY.md");
    assert_eq!(memory["content"], "# Memory\n- Kayaks\n", "{memory}");
    let (status, _) = s.get("/v1/memory/file?path=MEMORY.md");
    assert_eq!(status, 404);

    // The model answers badly: 502 in the envelope, nothing changed.
    failed(
        &s.call("POST", "/api/v1/memory/7/emergence", None, None),
        502,
        "",
    );
    let (_, after) = s.get("/v1/memory/file?agent=7&path=MEMORY.md");
    assert_eq!(after["content"], "# Memory\n- Kayaks\n");
    assert_eq!(model_server.requests(), 3);

    // Every other failure, in the envelope with its code.
    failed(
        &s.call("POST", "/api/v1/memory/7/summarize/nope", None, None),
        404,
        "no session nope",
    );
    failed(&raw(&s, "GET", "/api/v1/memory/7/emergence", None), 405, "");
    failed(
        &s.call("POST", "/api/v1/memory/7/forget", None, None),
        404,
        "no such route",
    );
    failed(
        &raw(&s, "POST", "/api/v1/memory/7/emergence", None),
        415,
        "Content-Type: application/json",
    );
    failed(
        &raw(&s, "POST", "/api/v1/memory/7/emergence", Some("text/plain")),
        415,
        "must be sent as JSON",
    );
    failed(
        &s.call("POST", "/api/v1/memory/a%0Ab/emergence", None, None),
        400,
        "control character",
    );
    failed(
        &s.call("POST", "/api/v1/memory/7/summarize/a%00b", None, None),
        400,
        "control character",
    );
    assert_eq!(
        model_server.requests(),
        3,
        "no refused call reached the model"
    );
    // `/v1` keeps its own error shape.
    let (status, body) = s.call("POST", "/v1/sessions/nope/extraction", None, None);
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found", "{body}");
}

#[test]
fn without_a_model_the_envelope_says_so() {
    let s = Server::start();
    converse(&s, None, "7", "conv-9");
    failed(
        &s.call("POST", "/api/v1/memory/7/emergence", None, None),
        503,
        "model",
    );
    failed(
        &s.call("POST", "/api/v1/memory/7/summarize/conv-9", None, None),
        503,
        "model",
    );
}

#[test]
fn mateclaw_paths_sit_behind_the_same_keys_and_tenants() {
    let model_server = Scripted::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyStore::open(dir.path());
    let (acme, _) = keys.create("acme", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let (globex, _) = keys.create("globex", Role::Admin).unwrap();
    let s = Server::start_in_with_model(dir, model(&model_server));
    converse(&s, Some(&acme), "7", "conv-9");

    failed(
        &s.call("POST", "/api/v1/memory/7/emergence", None, None),
        401,
        "API key",
    );
    failed(
        &s.call(
            "POST",
            "/api/v1/memory/7/emergence",
            None,
            Some("mtk_nope_nope"),
        ),
        401,
        "not valid",
    );
    failed(
        &s.call(
            "POST",
            "/api/v1/memory/7/summarize/conv-9",
            None,
            Some(&reader),
        ),
        403,
        "read",
    );
    // Another tenant: acme's conversation reads as one that exists nowhere.
    let theirs = s.call(
        "POST",
        "/api/v1/memory/7/summarize/conv-9",
        None,
        Some(&globex),
    );
    let nowhere = s.call(
        "POST",
        "/api/v1/memory/7/summarize/conv-0",
        None,
        Some(&globex),
    );
    failed(&theirs, 404, "no session conv-9");
    assert_eq!(
        theirs.1["msg"].as_str().unwrap().replace('9', "0"),
        nowhere.1["msg"]
    );
    assert_eq!(
        model_server.requests(),
        0,
        "nothing of acme's went to the model"
    );
}
