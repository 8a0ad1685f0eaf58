//! Dify's node memory over REST on a real server: a node's first run, turns and the thread
//! rules, clear, the cleanup task, hostile input and another tenant's node.

use crate::common::Server;
use memtape_server::{KeyStore, Limits, Role};
use serde_json::{Value, json};

const NODE: &str = "/v1/sessions/conv-1/nodes/llm-1";

/// The app of these tests (Dify's app is the agent).
const APP: &str = "agent=chatflow";

/// Adds a turn; returns the answer's status and body.
fn add(s: &Server, key: Option<&str>, id: &str, parent: Option<&str>, text: &str) -> (u16, Value) {
    s.call(
        "POST",
        &format!("{NODE}/turns?{APP}"),
        Some(&json!({
            "message_id": id,
            "parent_message_id": parent,
            "user_content": format!("question {text}"),
            "assistant_content": format!("answer {text}"),
        })),
        key,
    )
}

/// The contents of the node's history before it answers `id` (child of `parent`).
fn contents(s: &Server, key: Option<&str>, id: &str, parent: Option<&str>) -> Vec<String> {
    let mut path = format!("{NODE}/history?{APP}&message_id={id}");
    if let Some(p) = parent {
        path.push_str(&format!("&parent_message_id={p}"));
    }
    let (status, body) = s.call("GET", &path, None, key);
    assert_eq!(status, 200, "{path}: {body}");
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_node_runs_first_with_an_empty_history_then_follows_its_thread() {
    let s = Server::start();
    // The node's first run: an empty history, not an error.
    assert!(contents(&s, None, "m1", None).is_empty());
    let (status, body) = s.get(&format!(
        "{NODE}/history?{APP}&message_id=m1&parent_message_id=m0"
    ));
    assert_eq!((status, body), (200, json!({"messages": []})));

    let (status, body) = add(&s, None, "m1", None, "one");
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["ids"].as_array().unwrap().len(), 2, "{body}");
    assert_eq!(add(&s, None, "m2", Some("m1"), "two").0, 201);
    // m2 regenerated: a new message with the same parent, a new thread.
    assert_eq!(add(&s, None, "m3", Some("m1"), "three").0, 201);

    assert_eq!(
        contents(&s, None, "m4", Some("m3")),
        [
            "question one",
            "answer one",
            "question three",
            "answer three"
        ],
        "the thread of m3 leaves m2 out"
    );
    assert_eq!(
        contents(&s, None, "m5", Some("m2")),
        ["question one", "answer one", "question two", "answer two"]
    );
    let (_, body) = s.get(&format!(
        "{NODE}/history?{APP}&message_id=m4&parent_message_id=m3"
    ));
    let first = &body["messages"][0];
    assert_eq!(first["message_id"], "m1");
    assert_eq!(first["parent_message_id"], Value::Null);
    assert_eq!(first["role"], "user");
    assert!(first["id"].as_u64().unwrap() > 0, "{first}");
    // A token limit drops the oldest turn first: the smallest limit that leaves anything
    // leaves the latest turn, whole; one too small leaves nothing.
    let sizes: Vec<usize> = (1..200)
        .map(|t| {
            let (_, body) = s.get(&format!(
                "{NODE}/history?{APP}&message_id=m4&parent_message_id=m3&max_tokens={t}"
            ));
            body["messages"].as_array().unwrap().len()
        })
        .collect();
    assert_eq!(sizes[0], 0, "{sizes:?}");
    let first = sizes.iter().copied().find(|n| *n > 0);
    assert_eq!(first, Some(2), "{sizes:?}");
    assert_eq!(sizes.last(), Some(&4), "{sizes:?}");
    assert!(
        !sizes.contains(&1) && !sizes.contains(&3),
        "turns stay whole: {sizes:?}"
    );

    // Another node of the same conversation has its own memory.
    let (status, body) =
        s.get("/v1/sessions/conv-1/nodes/llm-2/history?agent=chatflow&message_id=m1");
    assert_eq!((status, body), (200, json!({"messages": []})));

    // Cleanup keeps what was just written; a dry run with a read key is allowed.
    let (status, report) = s.post(
        "/v1/nodes/cleanup?agent=chatflow",
        &json!({"older_than_days": 1, "dry_run": true}),
    );
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["active"], 1, "{report}");
    assert_eq!(report["cleared"], json!([]));
    let (status, report) = s.post(
        "/v1/nodes/cleanup?agent=chatflow",
        &json!({"older_than_days": 0}),
    );
    assert_eq!(status, 400, "{report}");
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at least 1"),
        "{report}"
    );

    // Clear: the history is empty again, and the turns stay on the tape.
    let (status, cleared) = s.post(&format!("{NODE}/clear?{APP}"), &json!({}));
    assert_eq!(status, 200, "{cleared}");
    assert!(cleared["anchor"].as_u64().is_some(), "{cleared}");
    assert!(contents(&s, None, "m4", Some("m3")).is_empty());
    let (status, report) = s.post(
        "/v1/nodes/cleanup?agent=chatflow",
        &json!({"older_than_days": 1}),
    );
    assert_eq!(status, 200);
    assert_eq!(report["empty"], 1, "{report}");
    // A node never written: nothing to clear, nothing written.
    let (status, cleared) = s.post(
        "/v1/sessions/conv-1/nodes/never/clear?agent=chatflow",
        &json!({}),
    );
    assert_eq!((status, cleared), (200, json!({})));
    let (_, agents) = s.get("/v1/agents");
    assert_eq!(agents["agents"][0]["entries"], 9 + 1, "{agents}");
}

#[test]
fn bad_node_input_is_refused_naming_what_is_wrong_and_nothing_is_written() {
    let s = Server::start_with(Limits {
        body_bytes: 64 * 1024,
        ..Limits::default()
    });
    assert_eq!(add(&s, None, "m1", None, "kept").0, 201);
    let long = "x".repeat(257);
    let turn = |extra: Value| {
        let mut body = json!({"message_id": "m2", "user_content": "q", "assistant_content": "a"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    for (body, status, needle) in [
        (turn(json!({"message_id": ""})), 400, "message_id is empty"),
        (turn(json!({"message_id": long})), 400, "at most 256"),
        (
            turn(json!({"message_id": "a\u{0}b"})),
            400,
            "control character",
        ),
        (
            turn(json!({"parent_message_id": "p\nq"})),
            400,
            "parent_message_id holds",
        ),
        (turn(json!({"message_id": 7})), 422, "message_id"),
        (turn(json!({"files": []})), 422, "unknown field `files`"),
        (json!({"message_id": "m2"}), 422, "user_content"),
        (
            turn(json!({"user_content": "y".repeat(70 * 1024)})),
            413,
            "",
        ),
    ] {
        let (got, answer) = s.post(&format!("{NODE}/turns?{APP}"), &body);
        assert_eq!(got, status, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{needle:?} in {answer}");
    }
    // `..` is a node's name, never a path: it names a node of its own.
    for (path, status) in [
        ("/v1/sessions/conv-1/nodes/../turns?agent=chatflow", 201),
        ("/v1/sessions/conv-1/nodes/%2E%2E/turns?agent=chatflow", 201),
        (
            "/v1/sessions/conv%00x/nodes/llm-1/turns?agent=chatflow",
            400,
        ),
        (
            "/v1/sessions/conv-1/nodes/llm-1/turns?agent=chat%0Aflow",
            400,
        ),
    ] {
        let body = turn(json!({}));
        let (got, answer) = s.post(path, &body);
        assert_eq!(got, status, "{path}: {answer}");
        if status == 400 {
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("control character"),
                "{path}: {answer}"
            );
        }
    }
    for (path, status) in [
        (format!("{NODE}/history?{APP}"), 400),
        (format!("{NODE}/history?{APP}&message_id="), 400),
        (
            format!("{NODE}/history?{APP}&message_id=m2&max_tokens=-1"),
            400,
        ),
        (
            format!("{NODE}/history?{APP}&message_id=m2&max_tokens=99999999999999999999999"),
            400,
        ),
    ] {
        let (got, answer) = s.get(&path);
        assert_eq!(got, status, "{path}: {answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    for body in [
        json!({"older_than_days": 4294967296_u64}),
        json!({"older_than_days": -1}),
        json!({"older_than_days": "30"}),
        json!({"days": 30}),
    ] {
        let (got, answer) = s.post("/v1/nodes/cleanup?agent=chatflow", &body);
        assert_eq!(got, 422, "{body}: {answer}");
    }
    // What was stored is still there, and only it.
    assert_eq!(
        contents(&s, None, "m2", Some("m1")),
        ["question kept", "answer kept"]
    );
}

#[test]
fn another_tenant_never_reaches_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyStore::open(dir.path());
    let (acme, _) = keys.create("acme", Role::Write).unwrap();
    let (reader, _) = keys.create("acme", Role::Read).unwrap();
    let (globex, _) = keys.create("globex", Role::Admin).unwrap();
    let s = Server::start_in(dir, Limits::default());
    let (status, body) = add(&s, Some(&acme), "m1", None, "acme's secret");
    assert_eq!(status, 201, "{body}");

    // The same path, another tenant: an empty node, nothing of acme's.
    assert!(contents(&s, Some(&globex), "m2", Some("m1")).is_empty());
    let (status, cleared) = s.call("POST", &format!("{NODE}/clear?{APP}"), None, Some(&globex));
    assert_eq!(
        (status, cleared),
        (200, json!({})),
        "nothing of globex's to clear"
    );
    let (status, report) = s.call(
        "POST",
        "/v1/nodes/cleanup?agent=chatflow",
        Some(&json!({"older_than_days": 1})),
        Some(&globex),
    );
    assert_eq!(status, 200);
    assert_eq!(
        (report["active"].clone(), report["empty"].clone()),
        (json!(0), json!(0))
    );
    // A read key reads, and does not write.
    assert_eq!(
        contents(&s, Some(&reader), "m2", Some("m1")),
        ["question acme's secret", "answer acme's secret"]
    );
    assert_eq!(add(&s, Some(&reader), "m2", Some("m1"), "no").0, 403);
    let (status, _) = s.call("POST", &format!("{NODE}/clear?{APP}"), None, Some(&reader));
    assert_eq!(status, 403);
    // acme's node is as acme left it.
    assert_eq!(
        contents(&s, Some(&acme), "m2", Some("m1")),
        ["question acme's secret", "answer acme's secret"]
    );
}

/// Seed 002's stored form, with a regenerated answer (m3 follows m1 again) and the shapes
/// Dify may write (a file with null ids, a time with an offset, no token count).
fn dify_file() -> Value {
    json!({"version": 1, "messages": [
        {"message_id": "m1", "parent_message_id": null, "role": "user",
         "content": "Analyze this image",
         "files": [{"type": "image", "transfer_method": "local_file",
                    "upload_file_id": "file-uuid-123", "belongs_to": "user"}],
         "token_count": 15, "created_at": "2026-01-07T10:00:00Z"},
        {"message_id": "m1", "parent_message_id": null, "role": "assistant",
         "content": "A landscape.", "files": [], "token_count": 50,
         "created_at": "2026-01-07T10:00:01Z"},
        {"message_id": "m2", "parent_message_id": "m1", "role": "user",
         "content": "And the sky?", "files": [], "token_count": 4,
         "created_at": "2026-01-07T10:01:00.250+00:00"},
        {"message_id": "m2", "parent_message_id": "m1", "role": "assistant",
         "content": "Blue.",
         "files": [{"type": "document", "transfer_method": "tool_file",
                    "tool_file_id": "tf-1", "upload_file_id": null, "url": null,
                    "belongs_to": "assistant"}],
         "created_at": "2026-01-07T10:01:02Z"},
        {"message_id": "m3", "parent_message_id": "m1", "role": "user",
         "content": "And the trees?", "files": [], "token_count": 4,
         "created_at": "2026-01-07T10:02:00Z"},
        {"message_id": "m3", "parent_message_id": "m1", "role": "assistant",
         "content": "Green.", "files": [], "token_count": 2,
         "created_at": "2026-01-07T10:02:01Z"}
    ]})
}

#[test]
fn dify_stored_node_memory_round_trips_and_reads_along_its_thread() {
    let s = Server::start();
    // A node never written exports an empty memory.
    let (status, empty) = s.get(&format!("{NODE}/export?{APP}"));
    assert_eq!(
        (status, empty),
        (200, json!({"version": 1, "messages": []}))
    );

    let (status, body) = s.post(&format!("{NODE}/import?{APP}"), &dify_file());
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["entries"], 9, "{body}");
    let (status, out) = s.get(&format!("{NODE}/export?{APP}"));
    assert_eq!(status, 200);
    assert_eq!(out, dify_file(), "import then export gives the same JSON");
    // The imported turns are the node's memory: the thread of m3 leaves m2 out.
    assert_eq!(
        contents(&s, None, "m4", Some("m3")),
        [
            "Analyze this image",
            "A landscape.",
            "And the trees?",
            "Green."
        ]
    );
    // A turn added afterwards exports with its ids, time and token count.
    assert_eq!(add(&s, None, "m4", Some("m3"), "four").0, 201);
    let (_, out) = s.get(&format!("{NODE}/export?{APP}"));
    let last = &out["messages"][7];
    assert_eq!(last["message_id"], "m4");
    assert_eq!(last["parent_message_id"], "m3");
    assert_eq!(last["content"], "answer four");
    assert!(last["token_count"].as_u64().unwrap() > 0, "{last}");
    assert!(
        last["created_at"].as_str().unwrap().ends_with('Z'),
        "{last}"
    );
    // Importing into a node that has entries is refused; nothing is lost.
    let (status, body) = s.post(&format!("{NODE}/import?{APP}"), &dify_file());
    assert_eq!(status, 409, "{body}");
    let (_, again) = s.get(&format!("{NODE}/export?{APP}"));
    assert_eq!(again, out);
    // After a clear the memory is empty; the export says so.
    s.post(&format!("{NODE}/clear?{APP}"), &json!({}));
    let (_, cleared) = s.get(&format!("{NODE}/export?{APP}"));
    assert_eq!(cleared, json!({"version": 1, "messages": []}));
}

#[test]
fn a_bad_dify_file_is_refused_whole() {
    let s = Server::start();
    let path = "/v1/sessions/conv-2/nodes/llm-1/import?agent=chatflow";
    let with = |i: usize, key: &str, value: Value| {
        let mut f = dify_file();
        f["messages"][i][key] = value;
        f
    };
    let mut extra = dify_file();
    extra["extra"] = json!(true);
    let mut unanswered = dify_file();
    unanswered["messages"].as_array_mut().unwrap().pop();
    for (body, needle) in [
        (json!({"version": 2, "messages": []}), "version 2"),
        (json!({"messages": []}), "no version"),
        (extra, "unknown field \"extra\""),
        (
            with(2, "role", json!("system")),
            "message 3: role \"system\"",
        ),
        (
            with(1, "role", json!("user")),
            "message 2: is a user message",
        ),
        (with(0, "message_id", json!("a\u{0}b")), "control character"),
        (with(0, "message_id", json!("x".repeat(300))), "at most 256"),
        (with(0, "token_count", json!(-1)), "token_count -1"),
        (with(0, "created_at", json!("soon")), "created_at \"soon\""),
        (
            with(
                0,
                "files",
                json!([{"type": "image", "transfer_method": "local_file"}]),
            ),
            "file 1",
        ),
        (
            with(3, "colour", json!("red")),
            "message 4: unknown field \"colour\"",
        ),
        (unanswered, "without the node's answer"),
        (json!([]), "JSON object"),
    ] {
        let (status, answer) = s.post(path, &body);
        assert_eq!(status, 400, "{needle}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{needle:?} in {message}");
    }
    let (_, out) = s.get("/v1/sessions/conv-2/nodes/llm-1/export?agent=chatflow");
    assert_eq!(out["messages"], json!([]), "nothing was written");
}

/// 64 clients add turns to one node at once, each sending its turn twice with one
/// idempotency key (a retry): every turn is stored once, and each thread reads back whole.
#[test]
fn sixty_four_clients_add_turns_to_one_node_and_a_retry_stores_once() {
    let s = Server::start();
    std::thread::scope(|scope| {
        for i in 0..64 {
            let s = &s;
            scope.spawn(move || {
                let body = json!({"message_id": format!("m{i}"), "user_content": format!("q{i}"),
                                  "assistant_content": format!("a{i}")})
                .to_string();
                let key = format!("turn-{i}");
                let mut ids = Vec::new();
                for _ in 0..2 {
                    let (status, added) = s.send_raw(
                        "POST",
                        &format!("{NODE}/turns?{APP}"),
                        &[
                            ("Content-Type", "application/json"),
                            ("Idempotency-Key", key.as_str()),
                        ],
                        body.as_bytes(),
                    );
                    assert_eq!(status, 201, "{added}");
                    ids.push(added["ids"].clone());
                }
                assert_eq!(ids[0], ids[1], "the retry answers the first turn");
            });
        }
    });
    for i in 0..64 {
        let id = format!("m{i}");
        assert_eq!(
            contents(&s, None, "next", Some(&id)),
            [format!("q{i}"), format!("a{i}")],
            "thread of {id}"
        );
    }
    let (status, report) = s.post(
        "/v1/nodes/cleanup?agent=chatflow",
        &json!({"older_than_days": 1, "dry_run": true}),
    );
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["active"], 1, "one node: {report}");
}
