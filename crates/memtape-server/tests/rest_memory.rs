//! The memory routes against a real server on 127.0.0.1: the layered view, save, daily,
//! recall, show, versions, diff, undo, forget, clear, prune and flags, compare-and-append
//! (409), and bad input answered with a clear 4xx that records nothing.
use crate::common::Server;
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

fn version(s: &Server) -> u64 {
    let (status, memory) = s.get("/v1/memory");
    assert_eq!(status, 200, "{memory}");
    memory["version"].as_u64().unwrap()
}

#[test]
fn save_daily_show_recall_and_the_layered_view() {
    let s = Server::start();
    let (status, saved) = s.post("/v1/memory/save", &json!({"content": "Ada likes tea."}));
    assert_eq!(status, 201, "{saved}");
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["source"], "memory.save");
    assert_eq!(saved["paths"], json!(["MEMORY.md"]));
    let (status, daily) = s.post(
        "/v1/memory/daily",
        &json!({"content": "Met Ada at the conference.", "date": "2026-03-10"}),
    );
    assert_eq!(status, 201, "{daily}");
    assert_eq!(daily["paths"], json!(["memory/2026-03-10.md"]));

    let (status, memory) = s.get("/v1/memory");
    assert_eq!(status, 200);
    assert_eq!(memory["version"], 2);
    assert_eq!(memory["files"]["MEMORY.md"]["content"], "Ada likes tea.");
    assert_eq!(
        memory["files"]["memory/2026-03-10.md"]["content"],
        "# 2026-03-10\n\nMet Ada at the conference.\n"
    );
    let (_, shown) = s.get("/v1/memory/show");
    assert!(shown["text"].as_str().unwrap().contains("Ada likes tea."));
    let (status, recalled) = s.get("/v1/memory/recall");
    assert_eq!(status, 200, "{recalled}");
    assert!(
        recalled["text"]
            .as_str()
            .unwrap()
            .contains("Ada likes tea.")
    );
    let (status, recalled) = s.get("/v1/memory/recall?query=tea&days=3650");
    assert_eq!(status, 200, "{recalled}");
    assert!(recalled["text"].as_str().unwrap().contains("tea"));

    // A user's memory: their own files, and the agent's shared files under them.
    let (status, _) = s.post(
        "/v1/memory/save?user=bob",
        &json!({"content": "Bob likes coffee."}),
    );
    assert_eq!(status, 201);
    let (status, agents) = s.call(
        "PUT",
        "/v1/workspace/file",
        Some(&json!({"path": "AGENTS.md", "content": "Be brief."})),
        None,
    );
    assert_eq!(status, 200, "{agents}");
    let (_, bob) = s.get("/v1/memory?user=bob");
    assert_eq!(bob["version"], 1, "the user's own version: {bob}");
    assert_eq!(bob["files"]["MEMORY.md"]["content"], "Bob likes coffee.");
    assert_eq!(bob["files"]["AGENTS.md"]["content"], "Be brief.");
    let (_, agent) = s.get("/v1/memory");
    assert_eq!(agent["files"]["MEMORY.md"]["content"], "Ada likes tea.");
    // Another agent's memory is its own.
    let (_, other) = s.get("/v1/memory?agent=other");
    assert_eq!(other, json!({"version": 0, "files": {}}));
}

#[test]
fn versions_diff_undo_forget_clear_and_prune() {
    let s = Server::start();
    s.post("/v1/memory/save", &json!({"content": "one"}));
    s.post("/v1/memory/save", &json!({"content": "two"}));
    s.post(
        "/v1/memory/daily",
        &json!({"content": "an old note", "date": "2020-01-01"}),
    );
    let (status, versions) = s.get("/v1/memory/versions");
    assert_eq!(status, 200);
    let list = versions["versions"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(
        list[0]["ops"][0],
        json!({"op": "write", "path": "MEMORY.md", "content": "one"})
    );
    let (_, only) = s.get("/v1/memory/versions?path=MEMORY.md");
    assert_eq!(only["versions"].as_array().unwrap().len(), 2);

    let (status, diff) = s.get("/v1/memory/diff?from=1&to=2");
    assert_eq!(status, 200, "{diff}");
    let text = diff["diff"].as_str().unwrap();
    assert!(text.contains("-one") && text.contains("+two"), "{text}");

    let (status, undone) = s.post("/v1/memory/undo", &json!({"version": 1}));
    assert_eq!(status, 200, "{undone}");
    assert_eq!(undone["recorded"]["version"], 4);
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(memory["files"]["MEMORY.md"]["content"], "one");
    assert!(
        memory["files"]["memory/2020-01-01.md"].is_null(),
        "{memory}"
    );
    let (_, same) = s.post("/v1/memory/undo", &json!({"version": 1}));
    assert!(same["recorded"].is_null(), "nothing to change: {same}");

    // Forgetting the undo brings back what it replaced.
    let first_id = list[0]["id"].as_u64().unwrap();
    let undo_id = undone["recorded"]["id"].as_u64().unwrap();
    let (status, forgot) = s.post("/v1/memory/forget", &json!({"ids": [undo_id]}));
    assert_eq!(status, 201, "{forgot}");
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(memory["files"]["MEMORY.md"]["content"], "two");
    assert!(first_id < undo_id);

    let (status, pruned) = s.post("/v1/memory/prune", &json!({"days": 30}));
    assert_eq!(status, 200, "{pruned}");
    assert_eq!(pruned["removed"], 1);
    let (status, cleared) = s.post("/v1/memory/clear", &json!({}));
    assert_eq!(status, 200, "{cleared}");
    assert!(cleared["recorded"]["version"].is_u64());
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(memory["files"], json!({}));
    let (_, again) = s.post("/v1/memory/clear", &json!({}));
    assert!(again["recorded"].is_null());
}

#[test]
fn a_write_on_a_stale_version_is_a_conflict_and_records_nothing() {
    let s = Server::start();
    let (status, first) = s.post(
        "/v1/memory/save",
        &json!({"content": "v1", "if_version": 0}),
    );
    assert_eq!(status, 201, "{first}");
    // Another writer moves the memory on.
    s.post("/v1/memory/daily", &json!({"content": "a note"}));
    let (status, stale) = s.post(
        "/v1/memory/save",
        &json!({"content": "based on v1", "if_version": 1}),
    );
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["error"]["code"], "conflict");
    assert!(
        stale["error"]["message"]
            .as_str()
            .unwrap()
            .contains("version 2"),
        "{stale}"
    );
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(memory["version"], 2);
    assert_eq!(memory["files"]["MEMORY.md"]["content"], "v1");
    let (status, _) = s.call(
        "PUT",
        "/v1/memory/flags",
        Some(&json!({"path": "MEMORY.md", "sort_order": 5, "if_version": 1})),
        None,
    );
    assert_eq!(status, 409);
    let (status, fresh) = s.post(
        "/v1/memory/save",
        &json!({"content": "based on v2", "if_version": 2}),
    );
    assert_eq!(status, 201, "{fresh}");
    assert_eq!(version(&s), 3);
}

#[test]
fn flags_set_enabled_and_sort_order_of_existing_files() {
    let s = Server::start();
    s.call(
        "PUT",
        "/v1/workspace/file",
        Some(&json!({"path": "/memories/notes.md", "content": "notes"})),
        None,
    );
    let (status, set) = s.call(
        "PUT",
        "/v1/memory/flags",
        Some(&json!({"path": "/memories/notes.md", "enabled": true, "sort_order": 7})),
        None,
    );
    assert_eq!(status, 200, "{set}");
    let (_, memory) = s.get("/v1/memory");
    let file = &memory["files"]["memories/notes.md"];
    assert_eq!(
        (file["enabled"].clone(), file["sort_order"].clone()),
        (json!(true), json!(7))
    );
    let before = version(&s);
    for (body, want) in [
        (json!({"path": "missing.md", "enabled": true}), 404),
        (json!({"path": "../etc/passwd", "enabled": true}), 400),
        (json!({"path": "/etc/passwd", "enabled": true}), 400),
        (json!({"path": "a\u{0}b.md", "enabled": true}), 400),
        (json!({"path": "%2e%2e/x.md", "enabled": true}), 400),
        (json!({"path": "memories/notes.md"}), 400),
        (json!({"path": "memories/notes.md", "enabled": "yes"}), 422),
        (json!({"path": "memories/notes.md", "sort_order": 1.5}), 422),
    ] {
        let (status, answer) = s.call("PUT", "/v1/memory/flags", Some(&body), None);
        assert_eq!(status, want, "{body}: {answer}");
    }
    let (_, answer) = s.call(
        "PUT",
        "/v1/memory/flags",
        Some(&json!({"path": "../etc/passwd", "enabled": true})),
        None,
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`..` segments are not allowed"),
        "the path rule is named: {answer}"
    );
    assert_eq!(version(&s), before, "nothing recorded");
}

#[test]
fn bad_memory_input_is_a_clear_4xx_and_records_nothing() {
    let s = Server::start();
    s.post("/v1/memory/save", &json!({"content": "kept"}));
    let big = "x".repeat(256 * 1024 + 1);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("/v1/memory/save", b"{\"content\": ".to_vec(), 400),
        ("/v1/memory/save", b"{\"content\": 5}".to_vec(), 422),
        ("/v1/memory/save", b"{}".to_vec(), 422),
        (
            "/v1/memory/save",
            b"{\"content\": \"x\", \"if_version\": -1}".to_vec(),
            422,
        ),
        (
            "/v1/memory/save",
            json!({"content": big}).to_string().into_bytes(),
            400,
        ),
        (
            "/v1/memory/daily",
            b"{\"content\": \"x\", \"date\": \"yesterday\"}".to_vec(),
            400,
        ),
        (
            "/v1/memory/daily",
            b"{\"content\": \"x\", \"date\": \"2026-02-30\"}".to_vec(),
            400,
        ),
        ("/v1/memory/undo", b"{\"version\": 99}".to_vec(), 400),
        (
            "/v1/memory/undo",
            b"{\"version\": 18446744073709551616}".to_vec(),
            422,
        ),
        ("/v1/memory/forget", b"{\"ids\": []}".to_vec(), 400),
        (
            "/v1/memory/forget",
            b"{\"ids\": [9007199254740992]}".to_vec(),
            400,
        ),
        (
            "/v1/memory/forget",
            b"{\"ids\": [9007199254740991]}".to_vec(),
            400,
        ),
        ("/v1/memory/forget", b"{\"ids\": [0]}".to_vec(), 400),
        ("/v1/memory/forget", b"{\"ids\": [\"1\"]}".to_vec(), 422),
        ("/v1/memory/prune", b"{\"days\": -3}".to_vec(), 422),
    ];
    for (path, body, want) in cases {
        let (status, answer) = raw(&s, "POST", path, &body);
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        assert_eq!(status, want, "{path} {shown}: {answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    for (path, want) in [
        ("/v1/memory/diff?from=0&to=5", 404),
        ("/v1/memory/diff?from=-1&to=1", 400),
        ("/v1/memory/diff?from=1", 400),
        ("/v1/memory/versions?path=../x", 400),
        ("/v1/memory/versions?path=a%00b", 400),
        ("/v1/memory/recall?days=0", 400),
        ("/v1/memory?agent=a%00b", 400),
    ] {
        let (status, answer) = s.get(path);
        assert_eq!(status, want, "{path}: {answer}");
    }
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(memory["version"], 1, "nothing recorded: {memory}");
    assert_eq!(memory["files"]["MEMORY.md"]["content"], "kept");
    assert_eq!(s.get("/healthz").0, 200);
}

/// Seed 003: the core files are enabled by seed data, and where they are in every prompt
/// (MEMORY.md and PROFILE.md through the memory block) they say so and stay so.
#[test]
fn core_files_report_enabled_where_they_are_always_in_the_prompt() {
    let s = Server::start();
    for (file, content) in [
        ("MEMORY.md", "Ada likes tea."),
        ("PROFILE.md", "Ada, a chemist."),
        ("AGENTS.md", "Be brief."),
        ("SOUL.md", "Calm."),
        ("memory/2026-04-01.md", "# 2026-04-01\n\nnote"),
    ] {
        let (status, body) = s.post(
            "/v1/tools/write_workspace_memory_file",
            &json!({"input": {"filename": file, "content": content}}),
        );
        assert_eq!(status, 200, "{file}: {body}");
    }
    let (status, listed) = s.post(
        "/v1/tools/list_workspace_memory_files",
        &json!({"input": {}}),
    );
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(listed["text"].as_str().unwrap()).unwrap();
    let flags: Vec<(String, bool)> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["filename"].as_str().unwrap().to_owned(),
                f["enabled"].as_bool().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, bool)> = [
        ("AGENTS.md", true),
        ("SOUL.md", true),
        ("PROFILE.md", true),
        ("MEMORY.md", true),
        ("memory/2026-04-01.md", false),
    ]
    .iter()
    .map(|(f, e)| ((*f).to_owned(), *e))
    .collect();
    assert_eq!(flags, expected);
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(memory["files"]["MEMORY.md"]["enabled"], true, "{memory}");
    // The prompt has them, as the flag says.
    s.post(
        "/v1/sessions/chat/messages",
        &json!({"role": "user", "content": "hi"}),
    );
    let (status, built) = s.post("/v1/sessions/chat/context", &json!({"dry_run": true}));
    assert_eq!(status, 200, "{built}");
    let system = built["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("Ada likes tea.") && system.contains("Ada, a chemist."),
        "{system}"
    );
    // Disabling one of them would be a lie: refused, naming the file; nothing changes.
    let (status, refused) = s.call(
        "PUT",
        "/v1/memory/flags",
        Some(&json!({"path": "MEMORY.md", "enabled": false})),
        None,
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MEMORY.md is in every prompt"),
        "{refused}"
    );
    let (_, after) = s.get("/v1/memory");
    assert_eq!(after["version"], memory["version"]);
    // A daily note may be enabled.
    let (status, _) = s.call(
        "PUT",
        "/v1/memory/flags",
        Some(&json!({"path": "memory/2026-04-01.md", "enabled": true})),
        None,
    );
    assert_eq!(status, 200);
}
