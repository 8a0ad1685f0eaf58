//! Issue 35, "the server does what `memtape chat` does", through REST and MCP on a real
//! server on 127.0.0.1: Qanot's automatic daily note per exchange, the memory skill in the
//! context's system text, MateClaw's trigger source, and HISTORY.md in the memory search.
use crate::common::Server;
use crate::mcp::client::{Client, ok};
use memtape::{DailyNotes, DailyNotesConfig, LifecycleConfig};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A server whose agents get Qanot's daily notes (`[lifecycle.daily_notes] format = "qanot"`),
/// but for the agent `quiet`.
fn with_daily_notes() -> Server {
    Server::start_configured(|state| {
        state.set_lifecycle_config(LifecycleConfig {
            daily_notes: DailyNotesConfig {
                format: Some(DailyNotes::Qanot),
                agents: [("quiet".to_owned(), DailyNotes::Off)].into(),
            },
            ..LifecycleConfig::default()
        })
    })
}

/// The daily notes of the memory at `query` (`""` or `?agent=…`), by path.
fn dailies(s: &Server, query: &str) -> Vec<(String, String)> {
    let (status, memory) = s.get(&format!("/v1/memory{query}"));
    assert_eq!(status, 200, "{memory}");
    memory["files"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(p, _)| p.starts_with("memory/20"))
        .map(|(p, f)| (p.clone(), f["content"].as_str().unwrap().to_owned()))
        .collect()
}

fn append(s: &Server, path: &str, messages: Value) {
    let (status, body) = s.post(path, &json!({ "messages": messages }));
    assert_eq!(status, 201, "{body}");
}

#[test]
fn rest_appends_write_qanots_daily_note_per_exchange() {
    let s = with_daily_notes();
    // A user message alone is no exchange yet.
    append(
        &s,
        "/v1/sessions/s1/messages",
        json!([{"role": "user", "content": "Where is the kayak trip?"}]),
    );
    assert!(dailies(&s, "").is_empty());
    // The reply, after a tool round, answers it: one note.
    append(
        &s,
        "/v1/sessions/s1/messages",
        json!([
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "memory_search", "arguments": "{\"query\":\"kayak\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "Lofoten"},
            {"role": "assistant", "content": "It is in Lofoten."}
        ]),
    );
    let notes = dailies(&s, "");
    assert_eq!(notes.len(), 1, "{notes:?}");
    let (path, note) = &notes[0];
    let date = path
        .strip_prefix("memory/")
        .unwrap()
        .strip_suffix(".md")
        .unwrap();
    assert!(
        note.starts_with(&format!("# Daily Notes -- {date}\n\n## [")),
        "{note}"
    );
    // No "..." after text that was not cut.
    assert!(
        note.contains("]\n**User:** Where is the kayak trip?\n**Agent:** It is in Lofoten.\n"),
        "{note}"
    );
    // A long exchange in one append: both sides cut, and only then "...".
    let long_question = format!("Please remember {}", "q".repeat(200));
    let long_answer = format!("Remembered {}", "a".repeat(400));
    append(
        &s,
        "/v1/sessions/s1/messages",
        json!([
            {"role": "user", "content": long_question},
            {"role": "assistant", "content": long_answer}
        ]),
    );
    let note = &dailies(&s, "")[0].1;
    let user_cut: String = long_question.chars().take(100).collect();
    let agent_cut: String = long_answer.chars().take(200).collect();
    assert!(
        note.contains(&format!(
            "**User:** {user_cut}...\n**Agent:** {agent_cut}...\n"
        )),
        "{note}"
    );
    assert_eq!(note.matches("## [").count(), 2, "{note}");
    // Every exchange of one append is noted.
    append(
        &s,
        "/v1/sessions/s1/messages",
        json!([
            {"role": "user", "content": "First?"}, {"role": "assistant", "content": "One."},
            {"role": "user", "content": "Second?"}, {"role": "assistant", "content": "Two."}
        ]),
    );
    let note = &dailies(&s, "")[0].1;
    assert_eq!(note.matches("## [").count(), 4, "{note}");
    assert!(
        note.contains("**User:** First?\n**Agent:** One.\n")
            && note.contains("**User:** Second?\n**Agent:** Two.\n"),
        "{note}"
    );
    // An agent whose notes are off gets none.
    append(
        &s,
        "/v1/sessions/s1/messages?agent=quiet",
        json!([{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi"}]),
    );
    assert!(dailies(&s, "?agent=quiet").is_empty());
}

#[test]
fn servers_write_no_daily_note_unless_configured() {
    let s = Server::start();
    append(
        &s,
        "/v1/sessions/s1/messages",
        json!([{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi"}]),
    );
    assert!(dailies(&s, "").is_empty());
}

#[test]
fn mcp_tape_append_writes_qanots_daily_note() {
    let s = with_daily_notes();
    runtime().block_on(async {
        let client = mcp(&s).await;
        ok(
            &client,
            "tape_append",
            json!({"session": "m1", "messages": [
                {"role": "user", "content": "I moved to Oslo."},
                {"role": "assistant", "content": "Noted: Oslo."}
            ]}),
        )
        .await;
        client.cancel().await.unwrap();
    });
    let notes = dailies(&s, "");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]
            .1
            .contains("**User:** I moved to Oslo.\n**Agent:** Noted: Oslo.\n"),
        "{notes:?}"
    );
}

/// Connects rmcp's client to the server's `/mcp`.
async fn mcp(s: &Server) -> crate::mcp::client::Connected {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(s.url("/mcp")),
    );
    let (client, _) = Client::new();
    client.serve(transport).await.unwrap()
}

/// The system text of the context REST builds for `body`.
fn rest_system(s: &Server, body: Value) -> String {
    let (status, built) = s.post("/v1/sessions/c1/context", &body);
    assert_eq!(status, 200, "{built}");
    built["messages"][0]["content"].as_str().unwrap().to_owned()
}

#[test]
fn the_context_carries_the_memory_skill_over_rest_and_mcp() {
    let s = Server::start();
    append(
        &s,
        "/v1/sessions/c1/messages",
        json!([{"role": "user", "content": "What do you know about me?"}]),
    );
    let skill = memtape::MEMORY_SKILL.trim();
    // On by default, after the caller's system prompt.
    let on = rest_system(&s, json!({"system": "Be brief.", "dry_run": true}));
    assert!(on.starts_with(&format!("Be brief.\n\n{skill}")), "{on}");
    assert!(on.contains("Rule 7: proactively save"), "{on}");
    let off = rest_system(
        &s,
        json!({"system": "Be brief.", "dry_run": true, "memory_skill": false}),
    );
    assert!(!off.contains("Rule 7"), "{off}");
    let (status, bad) = s.post(
        "/v1/sessions/c1/context",
        &json!({"memory_skill": "yes", "dry_run": true}),
    );
    assert_eq!(status, 422, "{bad}");
    assert!(bad.to_string().contains("memory_skill"), "{bad}");
    runtime().block_on(async {
        let client = mcp(&s).await;
        let built = crate::mcp::client::ok_json(
            &client,
            "tape_context",
            json!({"session": "c1", "budget": 8000, "record": false}),
        )
        .await;
        let system = built["messages"][0]["content"].as_str().unwrap();
        assert!(system.starts_with(skill), "{system}");
        let built = crate::mcp::client::ok_json(
            &client,
            "tape_context",
            json!({"session": "c1", "budget": 8000, "record": false, "memory_skill": false}),
        )
        .await;
        assert!(
            !built["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("Rule 7"),
            "{built}"
        );
        // MCP's memory_skill prompt carries the same text, after MCP's own part.
        let prompt = client
            .get_prompt(rmcp::model::GetPromptRequestParams::new("memory_skill"))
            .await
            .unwrap();
        let text = prompt.messages[0].content.as_text().unwrap().text.clone();
        assert!(text.ends_with(skill), "{text}");
        client.cancel().await.unwrap();
    });
    // A server whose memtape.toml turns it off.
    let quiet = Server::start_configured(|state| {
        state.set_lifecycle_config(LifecycleConfig {
            memory_skill: false,
            ..LifecycleConfig::default()
        })
    });
    append(
        &quiet,
        "/v1/sessions/c1/messages",
        json!([{"role": "user", "content": "Hello"}]),
    );
    assert!(!rest_system(&quiet, json!({"dry_run": true})).contains("Rule 7"));
}

/// Qanot's proactive compaction looks at the estimated next turn (seed 004): the prompt
/// and the reply it asks for (`reply_tokens`, default 1024), over REST and MCP.
#[test]
fn qanot_compacts_on_the_next_turn_over_rest_and_mcp() {
    let s = Server::start();
    let mut turns = Vec::new();
    for i in 0..6 {
        turns.push(json!({"role": "user", "content": format!("Question {i} about the Falcon project's ports?")}));
        turns.push(
            json!({"role": "assistant", "content": format!("Answer {i}: port {}.", 8000 + i)}),
        );
    }
    turns.push(json!({"role": "user", "content": "And the last one?"}));
    append(&s, "/v1/sessions/q1/messages", Value::Array(turns));
    let build = |extra: Value| {
        let mut body = json!({"policy": "qanot", "dry_run": true, "memory_skill": false});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, built) = s.post("/v1/sessions/q1/context", &body);
        assert_eq!(status, 200, "{built}");
        built
    };
    let tokens = build(json!({"reply_tokens": 0}))["tokens"]
        .as_u64()
        .unwrap() as usize;
    // The prompt alone is at half the budget.
    let budget = tokens * 2 + 2;
    let alone = build(json!({"budget": budget, "reply_tokens": 0}));
    assert_eq!(alone["compacted"], false, "{alone}");
    let small = build(json!({"budget": budget, "reply_tokens": budget / 20}));
    assert_eq!(small["compacted"], false, "{small}");
    let next = build(json!({"budget": budget, "reply_tokens": budget / 5}));
    assert_eq!(next["compacted"], true, "{next}");
    assert!(next.to_string().contains("[CONTEXT COMPACTION: "), "{next}");
    let (status, bad) = s.post(
        "/v1/sessions/q1/context",
        &json!({"policy": "qanot", "reply_tokens": -1}),
    );
    assert_eq!(status, 422, "{bad}");
    assert!(bad.to_string().contains("reply_tokens"), "{bad}");
    runtime().block_on(async {
        let client = mcp(&s).await;
        let ask = |reply: usize| {
            json!({"session": "q1", "budget": budget, "policy": "qanot", "record": false,
                "memory_skill": false, "reply_tokens": reply})
        };
        let built = crate::mcp::client::ok_json(&client, "tape_context", ask(0)).await;
        assert_eq!(built["compacted"], false, "{built}");
        let built = crate::mcp::client::ok_json(&client, "tape_context", ask(budget / 5)).await;
        assert_eq!(built["compacted"], true, "{built}");
        client.cancel().await.unwrap();
    });
}

/// A server keeping memory with a scripted model that answers `answers`, extraction on.
fn with_model(answers: Vec<memtape_scripted::Answer>) -> (memtape_scripted::Scripted, Server) {
    let model = memtape_scripted::Scripted::start(answers);
    let llm = memtape_llm::OpenAi::new(&model.base, "scripted")
        .unwrap()
        .timeout(std::time::Duration::from_secs(5))
        .retry(memtape_llm::RetryPolicy {
            max_retries: 0,
            ..memtape_llm::RetryPolicy::default()
        });
    let server = Server::start_with_model(memtape_server::ModelSetup {
        llm: std::sync::Arc::new(llm),
        lifecycle: LifecycleConfig::default(),
    });
    (model, server)
}

/// Four messages ending with the assistant's reply: a completed exchange.
fn exchange() -> Value {
    json!([
        {"role": "user", "content": "Plan the kayak trip to Lofoten in June."},
        {"role": "assistant", "content": "Booked for June."},
        {"role": "user", "content": "Add a dry bag to the packing list, please."},
        {"role": "assistant", "content": "Added."}
    ])
}

/// MateClaw's trigger source (`web` / `channel` / `cron`) on an append and on an
/// extraction, with the seed's skip rule: a scheduled task's conversation is not analysed.
#[test]
fn the_trigger_source_is_the_callers_over_rest() {
    let reply = json!({"should_update": true, "daily_entry": "## Kayak plans", "reason": "plan"});
    let (model, s) = with_model(vec![memtape_scripted::text(&reply.to_string())]);
    // A scheduled task's exchange: the post-conversation extraction skips it.
    append(&s, "/v1/sessions/k1/messages?source=cron", exchange());
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(model.requests(), 0, "a cron conversation is not analysed");
    let (status, run) = s.post("/v1/sessions/k1/extraction?source=cron", &json!({}));
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["skipped"], "a scheduled task's conversation");
    assert_eq!(model.requests(), 0);
    // A bad source is refused, naming it, and stores nothing.
    let (status, bad) = s.post(
        "/v1/sessions/k1/messages?source=email",
        &json!({"messages": exchange()}),
    );
    assert_eq!(status, 400, "{bad}");
    assert!(bad.to_string().contains("source"), "{bad}");
    let (status, bad) = s.post("/v1/sessions/k1/extraction?source=email", &json!({}));
    assert_eq!(status, 400, "{bad}");
    let (_, history) = s.get("/v1/sessions/k1/history");
    assert_eq!(
        history["messages"].as_array().unwrap().len(),
        4,
        "{history}"
    );
    // A channel's exchange is analysed.
    append(&s, "/v1/sessions/k2/messages?source=channel", exchange());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, memory) = s.get("/v1/memory");
        if memory.to_string().contains("Kayak plans") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no extraction: {memory}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(model.requests(), 1);
}

#[test]
fn the_trigger_source_is_the_callers_over_mcp() {
    let (model, s) = with_model(Vec::new());
    runtime().block_on(async {
        let client = mcp(&s).await;
        ok(
            &client,
            "tape_append",
            json!({"session": "k1", "source": "cron", "messages": exchange()}),
        )
        .await;
        let run = crate::mcp::client::ok_json(
            &client,
            "memory_extract",
            json!({"session": "k1", "source": "cron"}),
        )
        .await;
        assert_eq!(run["skipped"], "a scheduled task's conversation");
        let (text, error) = crate::mcp::client::call(
            &client,
            "tape_append",
            json!({"session": "k1", "source": "email", "messages": exchange()}),
        )
        .await;
        assert!(
            error && text.contains("`email`") && text.contains("cron"),
            "{text}"
        );
        client.cancel().await.unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(
        model.requests(),
        0,
        "nothing of a cron conversation went to the model"
    );
}

/// A server whose agent has consolidated one conversation into HISTORY.md (`/new`,
/// extractive without a model) and whose MEMORY.md says something else.
fn with_history() -> Server {
    let s = Server::start();
    append(
        &s,
        "/v1/sessions/h1/messages",
        json!([
            {"role": "user", "content": "What was the old question about the zeppelin hangar?"},
            {"role": "assistant", "content": "The zeppelin hangar is in Friedrichshafen."}
        ]),
    );
    let (status, new) = s.post("/v1/sessions/h1/new", &json!({}));
    assert_eq!(status, 200, "{new}");
    let (status, saved) = s.post(
        "/v1/memory/save",
        &json!({"content": "Ada asked about the zeppelin museum too."}),
    );
    assert_eq!(status, 201, "{saved}");
    let (_, memory) = s.get("/v1/memory");
    assert!(
        memory["files"]["HISTORY.md"]["content"]
            .as_str()
            .is_some_and(|h| h.contains("hangar")),
        "{memory}"
    );
    s
}

/// nanobot: "HISTORY.md is NOT in context — search it with grep". Qanot's memory_search
/// and Bub's memory.recall find it over REST, and `file` searches it alone.
#[test]
fn history_md_is_searchable_over_rest() {
    let s = with_history();
    let (status, lines) = s.get("/v1/memory/search?query=hangar");
    assert_eq!(status, 200, "{lines}");
    let files: Vec<&str> = lines
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["file"].as_str().unwrap())
        .collect();
    assert!(files.contains(&"HISTORY.md"), "{lines}");
    assert!(lines[0]["line"].as_u64().unwrap() >= 1, "{lines}");
    // Only HISTORY.md, as grep would: MEMORY.md's zeppelin line is left out.
    let (status, only) = s.get("/v1/memory/search?query=zeppelin&file=HISTORY.md");
    assert_eq!(status, 200, "{only}");
    let only = only.as_array().unwrap();
    assert!(!only.is_empty());
    assert!(only.iter().all(|l| l["file"] == "HISTORY.md"), "{only:?}");
    let (_, all) = s.get("/v1/memory/search?query=zeppelin");
    assert!(all.to_string().contains("MEMORY.md"), "{all}");
    // The tools route answers the same.
    let (status, tool) = s.post(
        "/v1/tools/memory_search",
        &json!({"input": {"query": "hangar", "file": "HISTORY.md"}}),
    );
    assert_eq!(status, 200, "{tool}");
    assert!(
        tool["text"].as_str().unwrap().contains("HISTORY.md"),
        "{tool}"
    );
    // Bub's recall: with a query it reaches HISTORY.md; `file` gives one file.
    let (status, recalled) = s.get("/v1/memory/recall?query=hangar");
    assert_eq!(status, 200, "{recalled}");
    assert!(
        recalled["text"].as_str().unwrap().contains("HISTORY.md:"),
        "{recalled}"
    );
    let (_, whole) = s.get("/v1/memory/recall?file=HISTORY.md");
    let whole = whole["text"].as_str().unwrap();
    assert!(
        whole.starts_with("## HISTORY.md\n[20") && !whole.contains("museum"),
        "{whole}"
    );
    // A file the memory does not have, and a bad limit, are named.
    let (status, bad) = s.get("/v1/memory/search?query=x&file=NOPE.md");
    assert_eq!(status, 400, "{bad}");
    assert!(bad.to_string().contains("NOPE.md"), "{bad}");
    let (status, bad) = s.get("/v1/memory/search?query=x&limit=0");
    assert_eq!(status, 400, "{bad}");
    assert!(bad.to_string().contains("limit"), "{bad}");
}

#[test]
fn history_md_is_searchable_over_mcp() {
    let s = with_history();
    runtime().block_on(async {
        let client = mcp(&s).await;
        let found = crate::mcp::client::ok_json(
            &client,
            "memory_search",
            json!({"query": "zeppelin", "file": "HISTORY.md"}),
        )
        .await;
        let found = found.as_array().unwrap();
        assert!(!found.is_empty());
        assert!(found.iter().all(|l| l["file"] == "HISTORY.md"), "{found:?}");
        let recalled = ok(&client, "memory_recall", json!({"query": "hangar"})).await;
        assert!(recalled.contains("HISTORY.md:"), "{recalled}");
        let (text, error) = crate::mcp::client::call(
            &client,
            "memory_search",
            json!({"query": "x", "file": "NOPE.md"}),
        )
        .await;
        assert!(error && text.contains("NOPE.md"), "{text}");
        client.cancel().await.unwrap();
    });
}

/// 64 clients at once, each appending an exchange to its own session and sending it again
/// with the same idempotency key (a retry): one daily note with one heading, every
/// exchange in it exactly once.
#[test]
fn sixty_four_clients_note_their_exchanges_once_each() {
    let s = with_daily_notes();
    std::thread::scope(|scope| {
        for i in 0..64 {
            let s = &s;
            scope.spawn(move || {
                let body = json!({"messages": [
                    {"role": "user", "content": format!("question {i:02}")},
                    {"role": "assistant", "content": format!("answer {i:02}")}
                ]})
                .to_string();
                let key = format!("exchange-{i}");
                for _ in 0..2 {
                    let (status, answer) = s.send_raw(
                        "POST",
                        &format!("/v1/sessions/s{i}/messages"),
                        &[
                            ("Content-Type", "application/json"),
                            ("Idempotency-Key", key.as_str()),
                        ],
                        body.as_bytes(),
                    );
                    assert_eq!(status, 201, "{answer}");
                }
            });
        }
    });
    // One file a day (two if the test ran across midnight), each with one heading.
    let notes = dailies(&s, "");
    assert!(matches!(notes.len(), 1 | 2), "{notes:?}");
    for (_, note) in &notes {
        assert_eq!(note.matches("# Daily Notes -- ").count(), 1, "{note}");
    }
    let note: String = notes.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(note.matches("\n## [").count(), 64, "{note}");
    for i in 0..64 {
        let exchange = format!("**User:** question {i:02}\n**Agent:** answer {i:02}\n");
        assert_eq!(note.matches(&exchange).count(), 1, "{i}: {note}");
    }
}
