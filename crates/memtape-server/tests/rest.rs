//! The REST API against a real server on 127.0.0.1: appending, history, entries, search,
//! tools and the WAL, each the way a client uses it, and bad input answered with a clear
//! 4xx in the API's error form.
use crate::common::Server;
use serde_json::json;

#[test]
fn append_then_history_entries_and_search() {
    let s = Server::start();
    let (status, body) = s.post(
        "/v1/sessions/chat/messages",
        &json!({"role": "user", "content": "Hi, my name is Ada. I prefer dark mode."}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["ids"].as_array().unwrap().len(), 1);
    assert!(
        body["captured"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["category"] == "preference"),
        "the WAL ran: {body}"
    );
    let (status, body) = s.post(
        "/v1/sessions/chat/messages",
        &json!({"messages": [
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "memory_search", "arguments": "{}"}}]},
            {"role": "tool", "content": "nothing", "tool_call_id": "c1"},
            {"role": "assistant", "content": "Hello Ada!"}
        ]}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, history) = s.get("/v1/sessions/chat/history");
    assert_eq!(status, 200);
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{history}");
    assert_eq!(
        messages[3],
        json!({"role": "assistant", "content": "Hello Ada!"})
    );
    assert_eq!(messages[1]["tool_calls"][0]["id"], "c1");

    let (status, page) = s.get("/v1/sessions/chat/entries?limit=2");
    assert_eq!(status, 200);
    assert_eq!(page["entries"].as_array().unwrap().len(), 2);
    let next = page["next"].as_u64().unwrap();
    let (_, rest) = s.get(&format!("/v1/sessions/chat/entries?after={next}&limit=100"));
    assert!(rest["next"].is_null());
    assert!(!rest["entries"].as_array().unwrap().is_empty());

    let (status, hits) = s.get("/v1/search?q=dark%20mode&mode=bm25");
    assert_eq!(status, 200, "{hits}");
    assert!(!hits["hits"].as_array().unwrap().is_empty(), "{hits}");

    let (_, sessions) = s.get("/v1/sessions");
    assert_eq!(sessions["sessions"][0]["session"], "chat");
    assert_eq!(sessions["sessions"][0]["messages"], 4);
}

#[test]
fn tools_are_listed_and_called() {
    let s = Server::start();
    let (status, tools) = s.get("/v1/tools");
    assert_eq!(status, 200);
    assert!(tools["tools"].as_array().unwrap().len() >= 10);
    let (status, out) = s.post(
        "/v1/tools/memory.save",
        &json!({"input": {"content": "Ada likes tea"}}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["is_error"], false);
    let (_, shown) = s.post("/v1/tools/memory.show", &json!({"input": {}}));
    assert!(shown["text"].as_str().unwrap().contains("Ada likes tea"));
    let (status, out) = s.post("/v1/tools/memory.save", &json!({"input": {"wrong": 1}}));
    assert_eq!(status, 200);
    assert_eq!(
        out["is_error"], true,
        "a refusal is the tool's answer: {out}"
    );
    let (status, _) = s.post("/v1/tools/nope", &json!({"input": {}}));
    assert_eq!(status, 404);
    // An input that is not an object is the wrong shape, not the tool's refusal.
    for input in [json!([null, null]), json!("Ada"), json!(null)] {
        let (status, out) = s.post("/v1/tools/memory.save", &json!({ "input": input }));
        assert_eq!(status, 422, "{input}: {out}");
    }
}

#[test]
fn bad_input_is_a_clear_4xx() {
    let s = Server::start();
    // Valid JSON of the wrong shape.
    let (status, body) = s.post("/v1/sessions/chat/messages", &json!({"role": 5}));
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"].is_string());
    // Bad names and parameters.
    let (status, body) = s.post(
        "/v1/sessions/a%00b/messages",
        &json!({"role": "user", "content": "x"}),
    );
    assert_eq!(status, 400, "a NUL in a session key: {body}");
    let (status, body) = s.get("/v1/sessions/chat/entries?limit=abc");
    assert_eq!(status, 400, "{body}");
    let (status, body) = s.get("/v1/sessions/nope/history");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (status, _) = s.get("/v1/search?q=x&mode=psychic");
    assert_eq!(status, 400);
    let (status, body) = s.get("/v1/search?q=x&session=a%01b");
    assert_eq!(
        status, 400,
        "a control character in a session filter: {body}"
    );
    let (status, body) = s.post(
        "/v1/sessions/chat/messages",
        &json!({"role": "user", "content": "x", "parent": 9007199254740993u64}),
    );
    assert_eq!(status, 400, "{body}");
    let (status, _) = s.get("/v1/nothing/here");
    assert_eq!(status, 404);
    // The server is still up.
    assert_eq!(s.get("/healthz").0, 200);
}

/// The body limit is the configured one (8 MiB by default) for every JSON route: a 3 MiB
/// message is taken, a 9 MiB one refused with 413 and nothing stored.
#[test]
fn the_body_limit_is_the_configured_one() {
    let s = Server::start();
    let big = "x".repeat(3 * 1024 * 1024);
    let (status, body) = s.post(
        "/v1/sessions/big/messages",
        &json!({"role": "assistant", "content": big}),
    );
    assert_eq!(status, 201, "{body}");
    // Over the limit: the server answers 413 from the headers alone, without reading the
    // body (a client still writing it sees the connection close after the answer).
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(s.addr).unwrap();
    write!(
        tcp,
        "POST /v1/sessions/huge/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"role\": \"assistant\", \"content\": \"",
        9 * 1024 * 1024
    )
    .unwrap();
    let mut answer = [0u8; 64];
    let n = tcp.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(s.get("/v1/sessions/huge/history").0, 404, "nothing stored");
}

/// The authorization scheme is case-insensitive, as HTTP says; the key itself is exact.
#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let s = Server::start();
    let (key, _) = memtape_server::KeyStore::open(s.dir.path())
        .create("acme", memtape_server::Role::Read)
        .unwrap();
    let get = |auth: &str| {
        use std::io::{Read, Write};
        let mut tcp = std::net::TcpStream::connect(s.addr).unwrap();
        write!(
            tcp,
            "GET /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).unwrap();
        answer.lines().next().unwrap_or_default().to_owned()
    };
    assert!(get(&format!("bearer {key}")).starts_with("HTTP/1.1 200"));
    assert!(get(&format!("BEARER {key}")).starts_with("HTTP/1.1 200"));
    assert!(get(&format!("Basic {key}")).starts_with("HTTP/1.1 401"));
    assert!(get(&format!("Bearer {}", key.to_uppercase())).starts_with("HTTP/1.1 401"));
}
