//! The file routes against a real server on 127.0.0.1: Anthropic's memory tool on
//! /memories (view, create, str_replace, insert, delete, rename) and MateClaw's workspace
//! tools (list, read, write, edit), and every kind of path traversal answered with a 400
//! that names the path rule and stores nothing.
use crate::common::Server;
use serde_json::{Value, json};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
}

fn answer(mut response: ureq::http::Response<ureq::Body>) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Sends `body` as it is (not necessarily JSON, not necessarily UTF-8) as JSON.
fn raw(s: &Server, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let agent = agent();
    let url = s.url(path);
    let request = match method {
        "PUT" => agent.put(&url),
        "PATCH" => agent.patch(&url),
        "POST" => agent.post(&url),
        other => panic!("method {other}"),
    };
    answer(
        request
            .header("Content-Type", "application/json")
            .send(body)
            .unwrap(),
    )
}

fn delete(s: &Server, path: &str) -> (u16, Value) {
    answer(agent().delete(&s.url(path)).call().unwrap())
}

/// `text` percent-encoded for a query string.
fn query(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn memory_version(s: &Server) -> u64 {
    s.get("/v1/memory").1["version"].as_u64().unwrap()
}

#[test]
fn the_anthropic_memory_commands() {
    let s = Server::start();
    let (status, created) = s.call(
        "PUT",
        "/v1/memories",
        Some(&json!({"path": "/memories/notes.md", "file_text": "alpha\nbeta\n"})),
        None,
    );
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["text"],
        "File created successfully at: /memories/notes.md"
    );
    let (status, viewed) = s.get("/v1/memories?path=/memories/notes.md");
    assert_eq!(status, 200, "{viewed}");
    let text = viewed["text"].as_str().unwrap();
    assert!(text.contains("alpha") && text.contains("beta"), "{text}");
    let (_, line2) = s.get("/v1/memories?path=/memories/notes.md&start=2&end=2");
    let text = line2["text"].as_str().unwrap();
    assert!(text.contains("beta") && !text.contains("alpha"), "{text}");
    let (status, root) = s.get("/v1/memories");
    assert_eq!(status, 200);
    assert!(
        root["text"].as_str().unwrap().contains("notes.md"),
        "{root}"
    );

    let (status, replaced) = s.call(
        "PATCH",
        "/v1/memories",
        Some(
            &json!({"command": "str_replace", "path": "/memories/notes.md",
                     "old_str": "beta", "new_str": "gamma"}),
        ),
        None,
    );
    assert_eq!(status, 200, "{replaced}");
    let (status, inserted) = s.call(
        "PATCH",
        "/v1/memories",
        Some(&json!({"command": "insert", "path": "/memories/notes.md",
                     "insert_line": 0, "insert_text": "first\n"})),
        None,
    );
    assert_eq!(status, 200, "{inserted}");
    let (_, memory) = s.get("/v1/memory");
    assert_eq!(
        memory["files"]["memories/notes.md"]["content"],
        "first\nalpha\ngamma\n"
    );

    s.call(
        "PUT",
        "/v1/memories",
        Some(&json!({"path": "/memories/other.md", "file_text": "x"})),
        None,
    );
    let (status, clash) = s.post(
        "/v1/memories/rename",
        &json!({"old_path": "/memories/notes.md", "new_path": "/memories/other.md"}),
    );
    assert_eq!(status, 409, "{clash}");
    let (status, renamed) = s.post(
        "/v1/memories/rename",
        &json!({"old_path": "/memories/notes.md", "new_path": "/memories/done/notes.md"}),
    );
    assert_eq!(status, 200, "{renamed}");
    let (status, gone) = s.get("/v1/memories?path=/memories/notes.md");
    assert_eq!(status, 404, "{gone}");
    let (status, deleted) = delete(&s, "/v1/memories?path=/memories/done/notes.md");
    assert_eq!(status, 200, "{deleted}");
    let (status, _) = delete(&s, "/v1/memories?path=/memories/done/notes.md");
    assert_eq!(status, 404);
    let (status, missing) = s.call(
        "PATCH",
        "/v1/memories",
        Some(
            &json!({"command": "str_replace", "path": "/memories/nope.md",
                     "old_str": "a", "new_str": "b"}),
        ),
        None,
    );
    assert_eq!(status, 404, "{missing}");
    let (status, ambiguous) = s.call(
        "PATCH",
        "/v1/memories",
        Some(
            &json!({"command": "str_replace", "path": "/memories/other.md",
                     "old_str": "not there", "new_str": "b"}),
        ),
        None,
    );
    assert_eq!(status, 400, "{ambiguous}");
}

#[test]
fn the_mateclaw_workspace_tools() {
    let s = Server::start();
    let (status, written) = s.call(
        "PUT",
        "/v1/workspace/file",
        Some(&json!({"path": "MEMORY.md", "content": "likes tea, likes tea"})),
        None,
    );
    assert_eq!(status, 200, "{written}");
    assert_eq!(written["created"], true);
    assert_eq!(written["filename"], "MEMORY.md");
    s.call(
        "PUT",
        "/v1/workspace/file",
        Some(&json!({"path": "/memories/a.md", "content": "a"})),
        None,
    );
    let (status, listed) = s.get("/v1/workspace/files");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["count"], 2);
    let (_, some) = s.get("/v1/workspace/files?prefix=/memories/");
    assert_eq!(some["count"], 1, "{some}");
    assert_eq!(some["files"][0]["filename"], "memories/a.md");

    let (status, once) = s.call(
        "PATCH",
        "/v1/workspace/file",
        Some(&json!({"path": "MEMORY.md", "old_text": "tea", "new_text": "coffee"})),
        None,
    );
    assert_eq!(status, 400, "two occurrences without replace_all: {once}");
    let (status, all) = s.call(
        "PATCH",
        "/v1/workspace/file",
        Some(
            &json!({"path": "MEMORY.md", "old_text": "tea", "new_text": "coffee",
                     "replace_all": true}),
        ),
        None,
    );
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["replacements"], 2);
    let (status, read) = s.get("/v1/workspace/file?path=MEMORY.md");
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["content"], "likes coffee, likes coffee");
    let (status, _) = s.get("/v1/workspace/file?path=missing.md");
    assert_eq!(status, 404);
    let (status, txt) = s.call(
        "PUT",
        "/v1/workspace/file",
        Some(&json!({"path": "notes.txt", "content": "x"})),
        None,
    );
    assert_eq!(status, 400, "{txt}");
}

#[test]
fn path_traversal_is_a_400_naming_the_rule_and_stores_nothing() {
    let s = Server::start();
    let anthropic = [
        "/memories/../secret.md",
        "/memories/a/../../b.md",
        "/etc/passwd",
        "/memories/a\u{0}b.md",
        "/memories/%2e%2e/x.md",
        "/memories/..%2fx.md",
        "/memories/.hidden.md",
        "/memories/notes.md~",
        "/memories/a\\..\\b.md",
        "memories/x.md",
        "~/x.md",
        "/memories//x.md",
    ];
    for path in anthropic {
        let (status, answer) = s.call(
            "PUT",
            "/v1/memories",
            Some(&json!({"path": path, "file_text": "x"})),
            None,
        );
        assert_eq!(status, 400, "{path:?}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("not allowed") || message.contains("outside /memories"),
            "{path:?}: the rule is named: {message}"
        );
        let (status, _) = s.get(&format!("/v1/memories?path={}", query(path)));
        assert_eq!(status, 400, "view {path:?}");
        let (status, _) = delete(&s, &format!("/v1/memories?path={}", query(path)));
        assert_eq!(status, 400, "delete {path:?}");
    }
    let (status, answer) = s.post(
        "/v1/memories/rename",
        &json!({"old_path": "/memories/a.md", "new_path": "/memories/../../a.md"}),
    );
    assert_eq!(status, 400, "{answer}");
    let workspace = [
        "../MEMORY.md",
        "/MEMORY.md",
        "memory/../../x.md",
        "a\u{0}b.md",
        "%2e%2e/x.md",
        "C:\\x.md",
        ".hidden.md",
        "/memories/../x.md",
    ];
    for path in workspace {
        let (status, answer) = s.call(
            "PUT",
            "/v1/workspace/file",
            Some(&json!({"path": path, "content": "x"})),
            None,
        );
        assert_eq!(status, 400, "{path:?}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not allowed"),
            "{path:?}: {answer}"
        );
        let (status, _) = s.get(&format!("/v1/workspace/file?path={}", query(path)));
        assert_eq!(status, 400, "read {path:?}");
    }
    let (status, _) = s.get("/v1/workspace/files?prefix=../");
    assert_eq!(status, 400);
    assert_eq!(memory_version(&s), 0, "nothing was stored");
    assert_eq!(s.get("/healthz").0, 200);
}

#[test]
fn malformed_and_mistyped_file_requests_are_4xx() {
    let s = Server::start();
    let cases: Vec<(&str, &str, &[u8], u16)> = vec![
        ("PUT", "/v1/memories", b"{\"path\": ", 400),
        ("PUT", "/v1/memories", b"{\"path\": \"/memories/a.md\", \"file_text\": 5}", 422),
        ("PUT", "/v1/memories", b"{\"path\": \"/memories/a.md\"}", 422),
        // Invalid UTF-8 inside a JSON string.
        ("PUT", "/v1/memories", b"{\"path\": \"/memories/\xff.md\", \"file_text\": \"x\"}", 400),
        ("PATCH", "/v1/memories", b"{\"command\": \"explode\", \"path\": \"/memories/a.md\"}", 422),
        (
            "PATCH",
            "/v1/memories",
            b"{\"command\": \"insert\", \"path\": \"/memories/a.md\", \"insert_line\": \"x\", \"insert_text\": \"t\"}",
            422,
        ),
        ("POST", "/v1/memories/rename", b"{\"old_path\": \"/memories/a.md\"}", 422),
        ("PUT", "/v1/workspace/file", b"[]", 422),
        ("PATCH", "/v1/workspace/file", b"{\"path\": \"MEMORY.md\", \"old_text\": 1, \"new_text\": \"\"}", 422),
    ];
    for (method, path, body, want) in cases {
        let (status, answer) = raw(&s, method, path, body);
        assert_eq!(
            status,
            want,
            "{method} {path} {}: {answer}",
            String::from_utf8_lossy(body)
        );
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    let (status, _) = s.get("/v1/memories?path=/memories/a.md&start=1");
    assert_eq!(status, 400, "start without end");
    let (status, _) = s.get("/v1/memories?path=/memories/a.md&start=x&end=2");
    assert_eq!(status, 400);
    let (status, _) = delete(&s, "/v1/memories");
    assert_eq!(status, 400, "delete needs a path");
    assert_eq!(memory_version(&s), 0);
}
