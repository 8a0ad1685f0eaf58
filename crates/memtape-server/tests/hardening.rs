//! Issue 31, sections 1 and 4: the server under concurrent clients and slow work. The WAL
//! keeps every capture of 64 clients writing at once; a write that takes longer than the
//! request timeout answers what it committed instead of a 408 a client would retry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memtape::LifecycleConfig;
use memtape_llm::{OpenAi, RetryPolicy};
use memtape_scripted::{Answer, Scripted, tool_call};
use memtape_server::{Limits, ModelSetup};
use serde_json::json;

use crate::common::Server;

#[test]
fn wal_captures_of_64_clients_at_once_all_reach_session_state() {
    let server = Server::start();
    let server = &server;
    std::thread::scope(|s| {
        for client in 0..64 {
            s.spawn(move || {
                for k in 0..5 {
                    let (status, body) = server.post(
                        &format!("/v1/sessions/c{client}/messages"),
                        &json!({"role": "user", "content": format!("my order {} ships Friday", 10_000 + client * 10 + k)}),
                    );
                    assert_eq!(status, 201, "{body}");
                    assert_eq!(body["captured"][0]["category"], "specific_value", "{body}");
                }
            });
        }
    });
    let (status, memory) = server.get("/v1/memory");
    assert_eq!(status, 200);
    let state = memory["files"]["SESSION-STATE.md"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no working state: {memory}"));
    for client in 0..64 {
        for k in 0..5 {
            let line = format!("my order {} ships Friday", 10_000 + client * 10 + k);
            assert_eq!(state.matches(&line).count(), 1, "{line} once");
        }
    }
}

/// One request of many user messages: each is captured (a change naming it), and all in
/// one transaction.
#[test]
fn the_captures_of_one_request_are_each_kept() {
    let server = Server::start();
    let messages: Vec<_> = (0..300)
        .map(|i| json!({"role": "user", "content": format!("my ticket is {}", 1000 + i)}))
        .collect();
    let (status, body) = server.post("/v1/sessions/bulk/messages", &json!({"messages": messages}));
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["captured"].as_array().map(Vec::len), Some(300));
    let (_, versions) = server.get("/v1/memory/versions");
    assert_eq!(
        versions["versions"].as_array().map(Vec::len),
        Some(300),
        "{versions}"
    );
}

fn save_memory(memory: &str) -> Answer {
    tool_call(
        "save_memory",
        json!({"history_entry": "[2026-03-10 14:30] Talked about kayaks.", "memory_update": memory}),
    )
}

#[test]
fn a_write_slower_than_the_timeout_answers_what_it_committed() {
    // The model takes 1.5 s; the request timeout is 0.5 s.
    let model_server = Scripted::start(vec![Answer::Delayed(
        Duration::from_millis(1500),
        Box::new(save_memory("# Memory\n- Likes kayaks\n")),
    )]);
    let llm = OpenAi::new(&model_server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_secs(5))
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        });
    let mut lifecycle = LifecycleConfig {
        memory_window: 100,
        ..LifecycleConfig::default()
    };
    lifecycle.extraction.enabled = false;
    let limits = Limits {
        request_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = Server::start_with_model_and(
        ModelSetup {
            llm: Arc::new(llm),
            lifecycle,
        },
        limits,
    );
    let messages: Vec<_> = (0..4)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("kayak talk {i}")}))
        .collect();
    let (status, _) = server.post("/v1/sessions/s1/messages", &json!({"messages": messages}));
    assert_eq!(status, 201);
    let started = Instant::now();
    let (status, done) = server.post("/v1/sessions/s1/consolidation", &json!({"all": true}));
    assert!(
        started.elapsed() > Duration::from_millis(500),
        "slower than the timeout"
    );
    // Not a 408 for a consolidation that then lands: the answer says what was committed.
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["messages"], 4, "{done}");
    let (_, memory) = server.get("/v1/memory");
    assert!(memory.to_string().contains("Likes kayaks"), "{memory}");
    assert_eq!(model_server.requests(), 1);
}

/// Sends `body` to `path` with an `Idempotency-Key` (and a key, if given); returns the
/// status, the JSON answer and whether it was replayed.
fn keyed(
    server: &Server,
    path: &str,
    body: &serde_json::Value,
    idempotency: &str,
    auth: Option<&str>,
) -> (u16, serde_json::Value, bool) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let mut request = agent
        .post(&server.url(path))
        .header("Idempotency-Key", idempotency);
    if let Some(k) = auth {
        request = request.header("Authorization", &format!("Bearer {k}"));
    }
    let mut response = request.send_json(body).unwrap();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap(), replayed)
}

fn history_len(server: &Server, session: &str, auth: Option<&str>) -> usize {
    let (status, body) = server.call(
        "GET",
        &format!("/v1/sessions/{session}/history?max_messages=100000"),
        None,
        auth,
    );
    assert_eq!(status, 200, "{body}");
    body["messages"].as_array().unwrap().len()
}

#[test]
fn a_retried_write_with_an_idempotency_key_stores_once() {
    let server = Server::start();
    let body = json!({"role": "user", "content": "my order 55501 ships Friday"});
    let (status, first, replayed) =
        keyed(&server, "/v1/sessions/k/messages", &body, "retry-1", None);
    assert_eq!((status, replayed), (201, false), "{first}");
    let (status, again, replayed) =
        keyed(&server, "/v1/sessions/k/messages", &body, "retry-1", None);
    assert_eq!((status, replayed), (201, true), "{again}");
    assert_eq!(again, first, "the first answer, ids and captures");
    assert_eq!(history_len(&server, "k", None), 1, "stored once");
    // The same key for another request is refused, and stores nothing.
    let other = json!({"role": "user", "content": "something else"});
    let (status, refused, _) = keyed(&server, "/v1/sessions/k/messages", &other, "retry-1", None);
    assert_eq!(status, 422, "{refused}");
    assert_eq!(history_len(&server, "k", None), 1);
    // A write without a body is keyed too.
    let (status, _, _) = keyed(&server, "/v1/memory/clear", &json!({}), "clear-1", None);
    assert_eq!(status, 200);
    // Keys that are not keys.
    for bad in ["", &"x".repeat(256), "two words"] {
        let (status, answer, _) = keyed(&server, "/v1/sessions/k/messages", &body, bad, None);
        assert_eq!(status, 400, "{bad:?}: {answer}");
    }
    assert_eq!(history_len(&server, "k", None), 1);
}

/// 64 clients send the same keyed append at once (a retry storm): it is stored once; each
/// client gets the first answer or is told it is still running.
#[test]
fn sixty_four_retries_of_one_keyed_write_store_it_once() {
    let server = Server::start();
    let messages: Vec<_> = (0..2000)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("bulk {i}")}))
        .collect();
    let body = json!({"messages": messages});
    let answers: Vec<(u16, serde_json::Value, bool)> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..64)
            .map(|_| {
                s.spawn(|| keyed(&server, "/v1/sessions/storm/messages", &body, "storm", None))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let ran = answers.iter().filter(|a| a.0 == 201 && !a.2).count();
    assert_eq!(ran, 1, "one ran");
    for (status, answer, replayed) in &answers {
        assert!(
            (*status == 201 && answer["ids"].as_array().map(Vec::len) == Some(2000))
                || (*status == 409 && !replayed),
            "{status} {answer}"
        );
    }
    assert_eq!(history_len(&server, "storm", None), 2000, "stored once");
    // Once it has answered, every retry gets the first answer.
    let (status, again, replayed) =
        keyed(&server, "/v1/sessions/storm/messages", &body, "storm", None);
    assert_eq!((status, replayed), (201, true));
    let first = answers.iter().find(|a| a.0 == 201 && !a.2).unwrap();
    assert_eq!(again, first.1);
}

/// A key is one tenant's: another tenant's request under the same key runs on its own.
#[test]
fn idempotency_keys_belong_to_one_tenant() {
    let server = Server::start();
    let keys = memtape_server::KeyStore::open(server.dir.path());
    let (a, _) = keys.create("acme", memtape_server::Role::Write).unwrap();
    let (b, _) = keys.create("globex", memtape_server::Role::Write).unwrap();
    let body = json!({"role": "user", "content": "hello"});
    for key in [&a, &b] {
        let (status, answer, replayed) = keyed(
            &server,
            "/v1/sessions/s/messages",
            &body,
            "shared-key",
            Some(key),
        );
        assert_eq!((status, replayed), (201, false), "{answer}");
        assert_eq!(history_len(&server, "s", Some(key)), 1);
    }
}

/// Issue 31, section 6: a read key may look at memory files with the memory tool's `view`,
/// and still may not change them.
#[test]
fn a_read_key_may_view_with_the_memory_tool_and_not_write() {
    let server = Server::start();
    let keys = memtape_server::KeyStore::open(server.dir.path());
    let (writer, _) = keys.create("acme", memtape_server::Role::Write).unwrap();
    let (reader, _) = keys.create("acme", memtape_server::Role::Read).unwrap();
    let create = json!({"input": {"command": "create", "path": "/memories/plan.md", "file_text": "the plan\n"}});
    let (status, body) = server.call("POST", "/v1/tools/memory", Some(&create), Some(&writer));
    assert_eq!(status, 200, "{body}");
    let view = json!({"input": {"command": "view", "path": "/memories/plan.md"}});
    let (status, body) = server.call("POST", "/v1/tools/memory", Some(&view), Some(&reader));
    assert_eq!(status, 200, "{body}");
    assert!(
        body["text"].as_str().unwrap().contains("the plan"),
        "{body}"
    );
    let (status, body) = server.call("POST", "/v1/tools/memory", Some(&create), Some(&reader));
    assert_eq!(status, 403, "{body}");
}

/// Issue 31, section 6: a corrupt key file makes the server refuse requests, without
/// showing anyone where the server keeps its data.
#[test]
fn a_corrupt_key_file_does_not_show_the_servers_path() {
    let server = Server::start();
    let keys = memtape_server::KeyStore::open(server.dir.path());
    keys.create("acme", memtape_server::Role::Read).unwrap();
    std::fs::write(server.dir.path().join("keys.json"), "{ not json").unwrap();
    let (status, body) = server.get("/v1/memory");
    assert_eq!(status, 503, "{body}");
    let dir = server.dir.path().to_string_lossy().into_owned();
    assert!(!body.to_string().contains(&dir), "{body}");
    assert!(!body.to_string().contains("keys.json"), "{body}");
}

/// Issue 31, section 6: names on the REST way in: a session name with a bidi control is
/// refused naming it; a memory file written under a decomposed name is the composed one.
#[test]
fn names_that_look_alike_are_refused_or_made_one_over_rest() {
    let server = Server::start();
    let (status, body) = server.post(
        "/v1/sessions/ab%E2%80%AEcd/messages",
        &json!({"role": "user", "content": "hi"}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("U+202E"), "{body}");
    let create = |path: &str, text: &str| {
        server.post(
            "/v1/tools/memory",
            &json!({"input": {"command": "create", "path": path, "file_text": text}}),
        )
    };
    assert_eq!(create("/memories/cafe\u{301}.md", "first\n").0, 200);
    assert_eq!(create("/memories/caf\u{e9}.md", "second\n").0, 200);
    let (_, memory) = server.get("/v1/memory");
    let files: Vec<&String> = memory["files"].as_object().unwrap().keys().collect();
    assert_eq!(files, ["memories/caf\u{e9}.md"], "{memory}");
    let (status, out) = create("/memories/CAF\u{c9}.md", "third\n");
    assert_eq!(status, 200);
    assert_eq!(out["is_error"], true, "{out}");
    assert!(
        out["text"].as_str().unwrap().contains("only by case"),
        "{out}"
    );
}
