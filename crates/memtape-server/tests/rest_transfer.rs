//! Export and import against a real server on 127.0.0.1: the three JSONL formats round
//! trip, an agent-wide export is byte for byte what the engine writes, imports are all or
//! nothing and stay in the caller's tenant, bad input is a clear 4xx, and a large export
//! streams (checked by the process's peak memory, in a process of its own).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read};

use common::Server;
use memtape::{Engine, Format, Message, Scope};
use memtape_server::{KeyStore, Limits, Role};
use serde_json::{Value, json};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// GETs `path` and returns the status and the whole body as text.
fn get_text(s: &Server, path: &str) -> (u16, String) {
    let response = agent().get(&s.url(path)).call().unwrap();
    let status = response.status().as_u16();
    let mut text = String::new();
    response
        .into_body()
        .into_reader()
        .read_to_string(&mut text)
        .unwrap();
    (status, text)
}

/// POSTs `body` to `path` as JSON lines; returns the status and the JSON answer.
fn post_lines(s: &Server, path: &str, body: &[u8], key: Option<&str>) -> (u16, Value) {
    let mut request = agent()
        .post(&s.url(path))
        .header("Content-Type", "application/x-ndjson");
    if let Some(k) = key {
        request = request.header("Authorization", &format!("Bearer {k}"));
    }
    let mut response = request.send(body).unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn append(s: &Server, path: &str, messages: Value) {
    let (status, body) = s.post(path, &json!({ "messages": messages }));
    assert_eq!(status, 201, "{body}");
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn chat(s: &Server) {
    append(
        s,
        "/v1/sessions/chat/messages",
        json!([
            {"role": "user", "content": "Hi, I am Ada."},
            {"role": "assistant", "content": "Hello Ada!"}
        ]),
    );
}

#[test]
fn each_format_round_trips_through_export_and_import() {
    let s = Server::start();
    chat(&s);
    let (status, text) = get_text(&s, "/v1/export?session=chat");
    assert_eq!(status, 200, "{text}");
    let exported = lines(&text);
    assert_eq!(exported.len(), 2);
    assert_eq!(exported[0]["payload"]["content"], "Hi, I am Ada.");

    let (status, report) = post_lines(
        &s,
        "/v1/import?format=memtape&session=copy",
        text.as_bytes(),
        None,
    );
    assert_eq!(status, 201, "{report}");
    assert_eq!(report["entries"], 2);
    assert_eq!(report["sessions"], json!([{"session": "copy"}]));
    let (_, history) = s.get("/v1/sessions/copy/history");
    assert_eq!(history["messages"][1]["content"], "Hello Ada!");

    for (format, session) in [("nanobot", "nb"), ("bub", "bub")] {
        let (status, text) = get_text(&s, &format!("/v1/export?format={format}&session=chat"));
        assert_eq!(status, 200, "{format}: {text}");
        assert!(text.contains("Hello Ada!"), "{format}: {text}");
        let (status, report) = post_lines(
            &s,
            &format!("/v1/import?format={format}&session={session}"),
            text.as_bytes(),
            None,
        );
        assert_eq!(status, 201, "{format}: {report}");
        let (_, history) = s.get(&format!("/v1/sessions/{session}/history"));
        let messages = history["messages"].as_array().unwrap();
        assert_eq!(
            messages.last().unwrap()["content"],
            "Hello Ada!",
            "{format}: {history}"
        );
    }
    let (_, nanobot) = get_text(&s, "/v1/export?format=nanobot&session=chat");
    assert_eq!(lines(&nanobot)[0]["_type"], "metadata");
}

#[test]
fn an_agent_wide_export_is_what_the_engine_writes_in_tape_order() {
    let s = Server::start();
    // Interleave writes to several scopes: sessions, a user's session, memory.
    for i in 0..40 {
        let session = ["a", "b", "c"][i % 3];
        append(
            &s,
            &format!("/v1/sessions/{session}/messages"),
            json!([{"role": "user", "content": format!("message {i}")}]),
        );
        if i % 7 == 0 {
            s.post(
                "/v1/memory/save",
                &json!({"content": format!("memory {i}")}),
            );
            append(
                &s,
                "/v1/sessions/mine/messages?user=bob",
                json!([{"role": "user", "content": format!("bob {i}")}]),
            );
        }
    }
    append(
        &s,
        "/v1/sessions/elsewhere/messages?agent=other",
        json!([{"role": "user", "content": "another agent"}]),
    );
    let (status, text) = get_text(&s, "/v1/export");
    assert_eq!(status, 200);
    let engine = Engine::open_read_only(s.dir.path()).unwrap();
    let mut expected = Vec::new();
    engine
        .export(
            Format::Memtape,
            &Scope::agent("default", "default").unwrap(),
            &mut expected,
        )
        .unwrap();
    assert_eq!(text, String::from_utf8(expected).unwrap());
    assert!(!text.contains("another agent"));
    let (_, bob) = get_text(&s, "/v1/export?user=bob");
    assert_eq!(lines(&bob).len(), 6, "only bob's entries: {bob}");
}

#[test]
fn imports_are_all_or_nothing_and_stay_in_the_callers_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyStore::open(dir.path());
    let (acme, _) = keys.create("acme", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let s = Server::start_in(dir, Limits::default());
    let (status, body) = s.call(
        "POST",
        "/v1/sessions/chat/messages",
        Some(&json!({"role": "user", "content": "hello"})),
        Some(&acme),
    );
    assert_eq!(status, 201, "{body}");
    let exported = {
        let response = agent()
            .get(&s.url("/v1/export?session=chat"))
            .header("Authorization", &format!("Bearer {acme}"))
            .call()
            .unwrap();
        let mut text = String::new();
        response
            .into_body()
            .into_reader()
            .read_to_string(&mut text)
            .unwrap();
        text
    };
    // A line of another tenant: refused, nothing imported.
    let foreign = exported.replace("\"acme\"", "\"globex\"");
    assert_ne!(foreign, exported);
    let (status, answer) = post_lines(
        &s,
        "/v1/import?session=stolen",
        foreign.as_bytes(),
        Some(&acme),
    );
    assert_eq!(status, 403, "{answer}");
    // A good line then a bad one: nothing imported.
    let broken = format!("{exported}{{\"id\": \"x\"}}\n");
    let (status, answer) = post_lines(
        &s,
        "/v1/import?session=half",
        broken.as_bytes(),
        Some(&acme),
    );
    assert_eq!(status, 400, "{answer}");
    // Into a session that has entries: refused.
    let (status, answer) = post_lines(
        &s,
        "/v1/import?session=chat",
        exported.as_bytes(),
        Some(&acme),
    );
    assert_eq!(status, 409, "{answer}");
    // A read key cannot import.
    let (status, _) = post_lines(
        &s,
        "/v1/import?session=r",
        exported.as_bytes(),
        Some(&reader),
    );
    assert_eq!(status, 403);
    let (_, sessions) = s.call("GET", "/v1/sessions", None, Some(&acme));
    assert_eq!(
        sessions["sessions"].as_array().unwrap().len(),
        1,
        "nothing was imported: {sessions}"
    );
    let (status, report) = post_lines(
        &s,
        "/v1/import?session=ok",
        exported.as_bytes(),
        Some(&acme),
    );
    assert_eq!(status, 201, "{report}");
}

#[test]
fn bad_transfer_requests_are_4xx() {
    let s = Server::start_with(Limits {
        body_bytes: 4096,
        ..Limits::default()
    });
    chat(&s);
    for (path, want) in [
        ("/v1/export?format=csv", 400),
        ("/v1/export?format=bub", 400),
        ("/v1/export?format=nanobot", 400),
        ("/v1/export?session=nope", 404),
        ("/v1/export?session=a%00b", 400),
        ("/v1/export?agent=", 400),
        ("/v1/sessions?user=a%00b", 400),
        ("/v1/sessions?user=", 400),
    ] {
        let (status, body) = s.get(path);
        assert_eq!(status, want, "{path}: {body}");
        assert!(body["error"]["message"].is_string(), "{path}: {body}");
    }
    for (path, body, want) in [
        ("/v1/import?format=csv", b"{}\n".to_vec(), 400),
        ("/v1/import?format=bub", b"{}\n".to_vec(), 400),
        ("/v1/import?format=nanobot", b"not json\n".to_vec(), 400),
        ("/v1/import?session=x", b"\xff\xfe\n".to_vec(), 400),
        ("/v1/import?session=x", vec![b' '; 5000], 413),
        ("/v1/import?session=x", Vec::new(), 400),
        ("/v1/import?session=x", b" \n\n".to_vec(), 400),
    ] {
        let (status, answer) = post_lines(&s, path, &body, None);
        assert_eq!(status, want, "{path}: {answer}");
    }
    let (_, sessions) = s.get("/v1/sessions");
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(s.get("/healthz").0, 200);
}

/// How many entries the large export carries, and the size of each message.
const LARGE: usize = 30_000;
const MESSAGE_BYTES: usize = 1000;

/// Reads a `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs [`large_export_in_this_process`] in a process of its own, so no other test's
/// allocations count against its peak memory.
#[test]
fn a_large_export_streams_complete_and_in_order() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "large_export_in_this_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{text}");
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran the test: {text}");
}

/// Seeds a store with [`LARGE`] messages, exports it, and checks that every entry arrives
/// once and in order while the process's peak memory grows by far less than the export:
/// a server that built the export in memory would hold the text and the entries (more than
/// twice its size) at once.
#[test]
#[ignore = "run in its own process by a_large_export_streams_complete_and_in_order"]
fn large_export_in_this_process() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::init(dir.path()).unwrap();
        let session = Scope::agent("default", "default")
            .unwrap()
            .with_session("big")
            .unwrap();
        for batch in 0..LARGE / 1000 {
            let messages = (0..1000)
                .map(|i| {
                    let n = batch * 1000 + i;
                    Message::user(format!("{n:08} {}", "x".repeat(MESSAGE_BYTES)))
                })
                .collect();
            engine.append_messages(&session, messages).unwrap();
        }
    }
    let s = Server::start_in(dir, Limits::default());
    // Settle what is not the export's: a search waits for the background indexer to catch
    // up with the 30,000 entries (its allocations would otherwise land in the window), and
    // a first export warms the store's caches and the allocator's arenas.
    let search = agent()
        .get(&s.url("/v1/search?q=00000001&session=big"))
        .call()
        .unwrap();
    assert_eq!(search.status().as_u16(), 200);
    let warm = agent()
        .get(&s.url("/v1/export?session=big"))
        .call()
        .unwrap();
    std::io::copy(&mut warm.into_body().into_reader(), &mut std::io::sink()).unwrap();
    // Reset the peak to what the process holds now (Linux: clear_refs 5).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");

    let response = agent()
        .get(&s.url("/v1/export?session=big"))
        .call()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers().get("content-length").is_none(),
        "a streamed body has no length up front"
    );
    let reader = BufReader::new(response.into_body().into_reader());
    let (mut count, mut bytes, mut last_id) = (0usize, 0usize, 0u64);
    for line in reader.lines() {
        let line = line.unwrap();
        bytes += line.len() + 1;
        let entry: Value = serde_json::from_str(&line).unwrap();
        let id = entry["id"].as_u64().unwrap();
        assert!(id > last_id, "in tape order: {id} after {last_id}");
        let content = entry["payload"]["content"].as_str().unwrap();
        assert_eq!(
            content[..8].parse::<usize>().unwrap(),
            count,
            "every entry, once"
        );
        last_id = id;
        count += 1;
    }
    assert_eq!(count, LARGE, "complete");
    let peak = status_kib("VmHWM:");
    let grown = peak.saturating_sub(before) * 1024;
    println!(
        "exported {count} entries, {} MiB; peak memory grew by {:.1} MiB",
        bytes >> 20,
        grown as f64 / (1024.0 * 1024.0)
    );
    assert!(
        (grown as usize) < bytes / 4,
        "the export was held in memory: peak grew by {grown} bytes for a {bytes}-byte export"
    );
}

#[test]
fn an_import_up_to_the_configured_limit_is_accepted() {
    // 3 MiB: over axum's default extractor limit (2 MiB), under the server's (8 MiB).
    let s = Server::start();
    let mut body = String::from("{\"_type\": \"metadata\", \"key\": \"big\"}\n");
    for i in 0..3000 {
        let line = json!({"role": "user", "content": format!("{i} {}", "y".repeat(1024)),
                          "timestamp": "2026-01-01T00:00:00"});
        body.push_str(&line.to_string());
        body.push('\n');
    }
    assert!(body.len() > 3 << 20);
    let (status, report) = post_lines(&s, "/v1/import?format=nanobot", body.as_bytes(), None);
    assert_eq!(status, 201, "{report}");
    assert_eq!(report["sessions"], json!([{"session": "big"}]));
    assert!(report["entries"].as_u64().unwrap() >= 3000, "{report}");
}

/// A file made before an erasure cannot bring back what it took: the import is refused
/// with 409 (the store's state refuses it, not the server failing), nothing is imported,
/// and a retry gets the same answer.
#[test]
fn an_import_of_what_an_erasure_took_is_a_conflict_not_a_server_error() {
    let s = Server::start();
    chat(&s);
    let (_, before) = get_text(&s, "/v1/export?session=chat");
    let (status, erased) = s.post(
        "/v1/erase",
        &json!({"what": "session", "session": "chat", "reason": "test"}),
    );
    assert_eq!(status, 200, "{erased}");
    for _ in 0..2 {
        let (status, body) = post_lines(
            &s,
            "/v1/import?format=memtape&session=again",
            before.as_bytes(),
            None,
        );
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "conflict");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("was erased from this store"),
            "{body}"
        );
    }
    assert_eq!(
        s.get("/v1/sessions/again/history").0,
        404,
        "nothing imported"
    );
}
