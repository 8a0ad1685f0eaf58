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
