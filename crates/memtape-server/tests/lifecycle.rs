//! The model-driven memory lifecycle through the REST API, on a real server with a
//! scripted OpenAI-compatible model on loopback: background consolidation after appends
//! (the append is answered before the model is), consolidation on demand (502 with
//! nothing changed when the model fails, 503 without a model), /new through the model,
//! and the dropped facts listed and restored.
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::Server;
use memtape::LifecycleConfig;
use memtape_llm::{OpenAi, RetryPolicy};
use memtape_scripted::{Answer, Scripted, text, tool_call};
use memtape_server::ModelSetup;
use serde_json::{Value, json};

/// The scripted model with consolidation at `window` messages and no automatic extraction
/// (each test scripts exactly the calls it expects).
fn model(server: &Scripted, window: usize) -> ModelSetup {
    let mut setup = model_with_extraction(server, window);
    setup.lifecycle.extraction.enabled = false;
    setup
}

fn model_with_extraction(server: &Scripted, window: usize) -> ModelSetup {
    let llm = OpenAi::new(&server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_secs(5))
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        });
    ModelSetup {
        llm: Arc::new(llm),
        lifecycle: LifecycleConfig {
            memory_window: window,
            ..LifecycleConfig::default()
        },
    }
}

fn save_memory(memory: &str) -> Answer {
    tool_call(
        "save_memory",
        json!({"history_entry": "[2026-03-10 14:30] Talked about kayaks.", "memory_update": memory}),
    )
}

fn say(server: &Server, n: usize) {
    let messages: Vec<Value> = (0..n)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("kayak message {i}")})
        })
        .collect();
    let (status, _) = server.call(
        "POST",
        "/v1/sessions/s1/messages",
        Some(&json!({"messages": messages})),
        None,
    );
    assert_eq!(status, 201);
}

fn history_len(server: &Server) -> usize {
    let (status, body) = server.call("GET", "/v1/sessions/s1/history", None, None);
    assert_eq!(status, 200);
    body["messages"].as_array().unwrap().len()
}

#[test]
fn appends_start_a_background_consolidation_at_the_window() {
    let model_server = Scripted::start(vec![Answer::Delayed(
        Duration::from_millis(500),
        Box::new(save_memory("# Memory\n- Likes kayaks\n")),
    )]);
    let server = Server::start_with_model(model(&model_server, 10));
    say(&server, 10);
    // The append was answered; the model is still thinking.
    let deadline = Instant::now() + Duration::from_secs(20);
    while model_server.requests() == 0 {
        assert!(Instant::now() < deadline, "no consolidation started");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        history_len(&server),
        10,
        "nothing moved before the model answered"
    );
    loop {
        let (_, memory) = server.call("GET", "/v1/memory", None, None);
        if memory.to_string().contains("Likes kayaks") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the consolidation never landed: {memory}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // 10 messages, keep 5; nanobot's history then drops a leading assistant message.
    assert!(history_len(&server) <= 5);
    assert_eq!(model_server.requests(), 1);
}

#[test]
fn consolidation_on_demand_changes_nothing_when_the_model_fails() {
    let model_server = Scripted::start(vec![
        text("no tools"),
        save_memory("# Memory\n- Ada likes kayaks\n"),
    ]);
    let server = Server::start_with_model(model(&model_server, 100));
    server.call(
        "POST",
        "/v1/memory/save",
        Some(&json!({"content": "# Memory\n- Ada is allergic to penicillin\n"})),
        None,
    );
    say(&server, 4);
    let (status, body) = server.call(
        "POST",
        "/v1/sessions/s1/consolidation",
        Some(&json!({"all": true})),
        None,
    );
    assert_eq!(status, 502, "{body}");
    assert!(body.to_string().contains("save_memory"), "{body}");
    assert_eq!(history_len(&server), 4);

    let (status, done) = server.call(
        "POST",
        "/v1/sessions/s1/consolidation",
        Some(&json!({"all": true})),
        None,
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["messages"], 4);
    assert_eq!(done["dropped"], 1);
    assert_eq!(history_len(&server), 0);

    let (status, list) = server.call("GET", "/v1/memory/dropped", None, None);
    assert_eq!(status, 200);
    let fact = &list["dropped"][0];
    assert_eq!(fact["text"], "- Ada is allergic to penicillin");
    assert_eq!(fact["present"], false);
    let id = fact["id"].as_u64().unwrap();
    let (status, restored) = server.call(
        "POST",
        &format!("/v1/memory/dropped/{id}/restore"),
        None,
        None,
    );
    assert_eq!(status, 200, "{restored}");
    assert!(restored["recorded"]["version"].as_u64().is_some());
    let (_, list) = server.call("GET", "/v1/memory/dropped", None, None);
    assert_eq!(list["dropped"][0]["present"], true);
    // Another agent cannot restore it.
    let (status, _) = server.call(
        "POST",
        &format!("/v1/memory/dropped/{id}/restore?agent=other"),
        None,
        None,
    );
    assert_eq!(status, 404);
}

#[test]
fn without_a_model_consolidation_is_unavailable_and_new_is_extractive() {
    let server = Server::start();
    say(&server, 4);
    let (status, body) = server.call(
        "POST",
        "/v1/sessions/s1/consolidation",
        Some(&json!({})),
        None,
    );
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("MEMTAPE_LLM_MODEL"), "{body}");
    let (status, new) = server.call("POST", "/v1/sessions/s1/new", None, None);
    assert_eq!(status, 200);
    assert!(new.get("consolidation").is_none());
}

#[test]
fn new_goes_through_the_model_and_clears_nothing_when_it_fails() {
    let model_server = Scripted::start(vec![
        text("no tools"),
        save_memory("# Memory\n- Ada likes kayaks\n"),
    ]);
    let server = Server::start_with_model(model(&model_server, 100));
    say(&server, 4);
    let (status, _) = server.call("POST", "/v1/sessions/s1/new", None, None);
    assert_eq!(status, 502);
    assert_eq!(history_len(&server), 4);
    let (status, new) = server.call("POST", "/v1/sessions/s1/new", None, None);
    assert_eq!(status, 200, "{new}");
    assert_eq!(new["archived"], 4);
    assert_eq!(new["consolidation"]["memory_changed"], true);
    assert_eq!(history_len(&server), 0);
}

/// MateClaw's post-conversation extraction runs after an exchange completes (the append
/// ends with the assistant's reply), off the reply's path; the agent's cooldown keeps the
/// next exchange from calling again. Manual extraction and emergence are routes too.
#[test]
fn a_completed_exchange_is_analysed_and_the_triggers_are_routes() {
    let reply = |v: Value| text(&v.to_string());
    let model_server = Scripted::start(vec![
        reply(json!({"should_update": true, "daily_entry": "## Kayak plans", "reason": "plan"})),
        reply(json!({"should_update": false, "reason": "manual run"})),
        reply(
            json!({"should_update": true, "memory_content": "# Memory\n- Kayaks\n", "reason": "recurs"}),
        ),
    ]);
    let server = Server::start_with_model(model_with_extraction(&model_server, 100));
    say(&server, 4);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, memory) = server.call("GET", "/v1/memory", None, None);
        if memory.to_string().contains("Kayak plans") {
            break;
        }
        assert!(Instant::now() < deadline, "no extraction landed: {memory}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another exchange within the cooldown: no call.
    say(&server, 2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(model_server.requests(), 1);
    let (status, run) = server.call("POST", "/v1/sessions/s1/extraction", None, None);
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["reason"], "manual run");
    let (status, run) = server.call(
        "POST",
        "/v1/memory/emergence",
        Some(&json!({"days": 3})),
        None,
    );
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["changed"], json!(["MEMORY.md"]));
    let (status, _) = server.call(
        "POST",
        "/v1/memory/emergence",
        Some(&json!({"days": 0})),
        None,
    );
    assert_eq!(status, 400);
    let (status, _) = server.call("POST", "/v1/sessions/nope/extraction", None, None);
    assert_eq!(status, 404);
}

/// With a model, the prompt's compaction summary is the model's (MateClaw).
#[test]
fn the_context_route_summarizes_with_the_model() {
    let model_server = Scripted::start(vec![text("Earlier: kayak talk, messages 0 to 15.")]);
    let server = Server::start_with_model(model(&model_server, 100));
    say(&server, 20);
    let (status, built) = server.call(
        "POST",
        "/v1/sessions/s1/context",
        Some(&json!({"budget": 200, "memory_skill": false})),
        None,
    );
    assert_eq!(status, 200, "{built}");
    assert!(built.to_string().contains("Earlier: kayak talk"), "{built}");
    let sent = model_server.body(0).unwrap()["messages"][1]["content"].to_string();
    assert!(sent.contains("kayak message 0"), "{sent}");
}
