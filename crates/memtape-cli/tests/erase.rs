//! `memtape erase` end to end: a secret stored through the CLI's ways in (a message, a
//! tool call's arguments, a tool result, memory, a hand edit of the workspace) is erased by
//! text and no file under the data directory holds a byte of it; a dry run changes
//! nothing; a user erasure takes their sessions, memory and workspace; bad requests are
//! refused before anything changes.

use std::path::Path;

use crate::common::Run;

pub(crate) const SECRET: &str = "4111-1111-ZOË";

/// Every file under `dir` (recursively) holding `needle` in UTF-8, UTF-16LE or with its
/// non-ASCII letter as a JSON `\u` escape, or the stem the search index keeps of it.
pub(crate) fn holding(dir: &Path, needle: &str) -> Vec<String> {
    let utf16: Vec<u8> = needle.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let escaped = needle.replace('Ë', "\\u00cb");
    let patterns: Vec<&[u8]> = vec![needle.as_bytes(), &utf16, escaped.as_bytes(), b"4111"];
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            for e in std::fs::read_dir(&path).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            for p in &patterns {
                // A match inside a longer number is not the secret's (memtape.toml holds
                // the scripted model's port, which can be 41117 or 54111).
                let digit =
                    |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_some_and(u8::is_ascii_digit);
                if bytes
                    .windows(p.len())
                    .enumerate()
                    .any(|(i, w)| w == *p && !(digit(i.checked_sub(1)) || digit(Some(i + p.len()))))
                {
                    found.push(format!(
                        "{} holds {:?}",
                        path.display(),
                        String::from_utf8_lossy(p)
                    ));
                }
            }
        }
    }
    found
}

fn ann(args: &[&str]) -> Vec<String> {
    let mut all = vec![
        "--user".to_owned(),
        "ann".to_owned(),
        "--model".to_owned(),
        "none".to_owned(),
    ];
    all.extend(args.iter().map(|s| s.to_string()));
    all
}

fn ok(r: &Run, args: &[String]) -> String {
    r.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn an_erased_text_leaves_no_byte_in_any_file_of_the_data_directory() {
    let r = Run::new();
    let data = r.dir.path().join("data");
    ok(
        &r,
        &ann(&[
            "append",
            "s1",
            "--role",
            "user",
            "--content",
            &format!("my card is {SECRET}"),
        ]),
    );
    let calls = format!(
        r#"[{{"id":"c1","type":"function","function":{{"name":"pay","arguments":"{{\"card\":\"{}\"}}"}}}}]"#,
        SECRET.replace('Ë', "\\\\u00cb")
    );
    ok(
        &r,
        &ann(&[
            "append",
            "s1",
            "--role",
            "assistant",
            "--tool-calls",
            &calls,
        ]),
    );
    ok(
        &r,
        &ann(&[
            "append",
            "s1",
            "--role",
            "tool",
            "--tool-call-id",
            "c1",
            "--content",
            &format!("charged {SECRET}"),
        ]),
    );
    ok(
        &r,
        &ann(&[
            "append",
            "s1",
            "--role",
            "assistant",
            "--content",
            "paid, thanks",
        ]),
    );
    ok(
        &r,
        &ann(&["memory", "save", &format!("Ann's card: {SECRET}\n")]),
    );
    ok(&r, &ann(&["sync"]));
    // A hand edit not yet synced also holds it.
    let ws = data.join("workspace/default/default/users/ann");
    let memory = ws.join("MEMORY.md");
    let edited = format!(
        "{}\nAnn also said {SECRET} twice\n",
        std::fs::read_to_string(&memory).unwrap()
    );
    std::fs::write(&memory, edited).unwrap();
    let hits = ok(&r, &ann(&["search", "4111", "--json"]));
    assert!(hits.contains("4111"), "{hits}");
    assert!(!holding(&data, SECRET).is_empty());

    // A dry run counts and changes nothing.
    let before = ok(&r, &ann(&["entries", "s1", "--json"]));
    let dry: serde_json::Value =
        serde_json::from_str(&ok(&r, &ann(&["erase", "--dry-run", "text", SECRET]))).unwrap();
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["receipt"], serde_json::Value::Null);
    assert!(dry["redacted"].as_u64().unwrap() >= 4, "{dry}");
    assert_eq!(ok(&r, &ann(&["entries", "s1", "--json"])), before);

    // Refused before anything changes: too short, and a model the index was not built with.
    assert!(
        r.fails(&["--user", "ann", "--model", "none", "erase", "text", "41"])
            .contains("shorter than 4")
    );
    let err = r.fails(&[
        "--user",
        "ann",
        "--model",
        "wordllama",
        "erase",
        "text",
        SECRET,
    ]);
    assert!(err.contains("none") || err.contains("wordllama"), "{err}");
    assert_eq!(ok(&r, &ann(&["entries", "s1", "--json"])), before);

    let done: serde_json::Value = serde_json::from_str(&ok(
        &r,
        &ann(&["erase", "text", SECRET, "--reason", "GDPR request 17"]),
    ))
    .unwrap();
    assert!(done["receipt"].as_u64().is_some(), "{done}");
    assert_eq!(done["wiped"], true);
    // Every file of the data directory: tape, write-ahead logs, index, workspace, locks.
    assert_eq!(holding(&data, SECRET), Vec::<String>::new());
    // What is left reads as before, with [erased] where the text was.
    let history = ok(&r, &ann(&["history", "s1", "--json"]));
    assert!(history.contains("my card is [erased]"), "{history}");
    assert!(history.contains("paid, thanks"), "{history}");
    let file = std::fs::read_to_string(&memory).unwrap();
    assert!(
        file.contains("Ann's card: [erased]") && file.contains("Ann also said [erased] twice"),
        "{file}"
    );
    let hits = ok(&r, &ann(&["search", "4111", "--json"]));
    assert_eq!(hits.trim(), "[]");
    assert!(ok(&r, &ann(&["search", "paid", "--json"])).contains("paid, thanks"));
}

#[test]
fn a_user_erasure_takes_their_sessions_memory_and_workspace_and_nobody_elses() {
    let r = Run::new();
    let data = r.dir.path().join("data");
    ok(
        &r,
        &ann(&[
            "append",
            "s1",
            "--role",
            "user",
            "--content",
            "I live at 12 Quokka Lane",
        ]),
    );
    ok(&r, &ann(&["memory", "save", "Ann lives on Quokka Lane\n"]));
    ok(&r, &ann(&["sync"]));
    let before = r.path("before.jsonl");
    std::fs::write(&before, ok(&r, &ann(&["export", "--format", "memtape"]))).unwrap();
    r.ok(&[
        "--user",
        "bob",
        "--model",
        "none",
        "append",
        "s1",
        "--role",
        "user",
        "--content",
        "Bob likes Quokka Lane too",
    ]);
    assert!(
        r.fails(&["--model", "none", "erase", "user"])
            .contains("--user")
    );
    let out: serde_json::Value = serde_json::from_str(&ok(
        &r,
        &ann(&["erase", "user", "--reason", "account closed"]),
    ))
    .unwrap();
    assert_eq!(out["entries"], 2, "{out}");
    assert!(!data.join("workspace/default/default/users/ann").exists());
    assert_eq!(ok(&r, &ann(&["history", "s1", "--json"])).trim(), "[]");
    let memory = ok(&r, &ann(&["memory", "show"]));
    assert!(memory.contains("0 file(s)"), "{memory}");
    // Bob keeps his.
    let bob = r.ok(&[
        "--user", "bob", "--model", "none", "search", "quokka", "--json",
    ]);
    assert!(bob.contains("Bob likes"), "{bob}");
    assert!(!bob.contains("12 Quokka"), "{bob}");
    // The entries are still there, as tombstones with their ids and kinds.
    let entries = ok(&r, &ann(&["entries", "s1", "--json"]));
    assert!(entries.contains("\"erased\""), "{entries}");
    assert!(!entries.contains("12 Quokka"), "{entries}");
    // An export made before the erasure cannot bring it back, not even into a new session.
    for extra in [&[][..], &["--session", "s9"][..]] {
        let mut args = vec![
            "--user",
            "ann",
            "import",
            "--format",
            "memtape",
            before.as_str(),
        ];
        args.extend_from_slice(extra);
        let err = r.fails(&args);
        assert!(err.contains("was erased from this store"), "{err}");
    }
    let left = holding(&data, "12 Quokka");
    assert_eq!(left, Vec::<String>::new());
    // An export made after it carries the tombstones, and restores as tombstones.
    let after = r.path("after.jsonl");
    std::fs::write(&after, ok(&r, &ann(&["export", "--format", "memtape"]))).unwrap();
    let fresh = Run::new();
    fresh.ok(&[
        "--user",
        "ann",
        "import",
        "--format",
        "memtape",
        after.as_str(),
    ]);
    let restored = fresh.ok(&["--user", "ann", "entries", "s1", "--json"]);
    assert!(
        restored.contains("\"erased\"") && !restored.contains("Quokka"),
        "{restored}"
    );
}

/// `memtape retention`: memtape.toml's policies (the default, a tenant's over it), `show`,
/// a dry run, "only consolidated", one receipt per run, and bad policies refused naming
/// where they are.
#[test]
fn retention_runs_the_policies_of_memtape_toml() {
    let r = Run::new();
    let file = r.path("telegram_42.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"_type": "metadata", "key": "telegram:42", "created_at": "2026-03-10T14:30:00", "updated_at": "2026-03-10T14:31:00", "metadata": {}, "last_consolidated": 1}"#,
            "\n",
            r#"{"role": "user", "content": "old words about herons", "timestamp": "2026-03-10T14:30:00"}"#,
            "\n",
            r#"{"role": "user", "content": "newer words about otters", "timestamp": "2026-03-10T14:31:00"}"#,
            "\n"
        ),
    )
    .unwrap();
    r.ok(&["import", "--format", "nanobot", &file]);
    let config = r.dir.path().join("data/memtape.toml");
    // No policy: nothing expires.
    assert_eq!(r.json(&["retention", "run"]), serde_json::json!([]));

    std::fs::write(
        &config,
        "[retention]\nmessages_days = 30\nonly_consolidated = true\n",
    )
    .unwrap();
    let shown = r.json(&["retention", "show"]);
    assert_eq!(shown["effective"]["messages_days"], 30, "{shown}");
    assert_eq!(shown["effective"]["only_consolidated"], true, "{shown}");
    let dry = r.json(&["retention", "run", "--dry-run", "--model", "none"]);
    assert_eq!(dry[0]["entries"], 1, "only the consolidated message: {dry}");
    assert_eq!(dry[0]["receipt"], serde_json::Value::Null, "{dry}");
    let done = r.json(&["retention", "run", "--model", "none"]);
    assert_eq!(done[0]["entries"], 1, "{done}");
    assert!(done[0]["receipt"].as_u64().is_some(), "{done}");
    let history = r.ok(&["history", "telegram:42"]);
    assert!(
        !history.contains("herons") && history.contains("otters"),
        "{history}"
    );

    // The tenant's policy over the default: consolidated or not, it goes.
    std::fs::write(
        &config,
        "[retention]\nmessages_days = 30\nonly_consolidated = true\n\
         [retention.tenants.default]\nonly_consolidated = false\n",
    )
    .unwrap();
    let done = r.json(&["retention", "run", "--all-tenants", "--model", "none"]);
    assert_eq!(done[0]["entries"], 1, "{done}");
    assert_eq!(
        holding(&r.dir.path().join("data"), "otters"),
        Vec::<String>::new()
    );

    for (text, names) in [
        ("[retention]\nmessages_days = 0\n", "messages_days"),
        (
            "[retention.tenants.acme.agents.bot]\ntool_results_days = 99999\n",
            "retention.tenants.acme.agents.bot",
        ),
        ("[retention]\nschedule = \"daily\"\n", "schedule"),
        ("[retention]\nmessage_days = 3\n", "message_days"),
    ] {
        std::fs::write(&config, text).unwrap();
        let err = r.fails(&["retention", "run"]);
        assert!(err.contains(names), "{text} → {err}");
    }
}

/// The proof: one secret stored through every way in the CLI has — a user message (and
/// the WAL's capture of it), a tool call's arguments, a tool result, `memory save`, a
/// consolidation by a model (MEMORY.md, HISTORY.md and the fact its rewrite dropped), an
/// extraction by a model (a daily note), a compaction summary, the memory tool, an
/// attachment, a workspace edit picked up by sync, and an import — then erased by text;
/// afterwards no file under the data directory holds a byte of it, in any encoding.
#[test]
fn a_secret_through_every_way_in_leaves_no_byte_after_its_erasure() {
    use crate::common::model::configure;
    use memtape_scripted::{Scripted, text, tool_call};

    let r = Run::new();
    let data = r.dir.path().join("data");
    let say = |session: &str, role: &str, content: &str, wal: bool| {
        let mut args = vec!["append", session, "--role", role, "--content", content];
        if !wal {
            args.push("--no-wal");
        }
        ok(&r, &ann(&args));
    };
    // A conversation long enough to compact and to extract from.
    for i in 0..8 {
        // The first question holds it too: the compaction summary below takes it.
        let card = if i == 0 {
            format!(" paid by {SECRET}")
        } else {
            String::new()
        };
        say(
            "s1",
            "user",
            &format!("question {i} about the kayak trip{card}"),
            false,
        );
        say(
            "s1",
            "assistant",
            &format!("answer {i}: the trip is planned for spring"),
            false,
        );
    }
    // The WAL captures a "remember" into the working state.
    say(
        "s1",
        "user",
        &format!("remember that my card is {SECRET}"),
        true,
    );
    let calls = format!(
        r#"[{{"id":"c1","type":"function","function":{{"name":"pay","arguments":"{{\"card\":\"{}\"}}"}}}}]"#,
        SECRET.replace('Ë', "\\\\u00cb")
    );
    ok(
        &r,
        &ann(&[
            "append",
            "s1",
            "--role",
            "assistant",
            "--tool-calls",
            &calls,
        ]),
    );
    ok(
        &r,
        &ann(&[
            "append",
            "s1",
            "--role",
            "tool",
            "--tool-call-id",
            "c1",
            "--content",
            &format!("charged {SECRET}"),
        ]),
    );
    say("s1", "assistant", "paid, thanks", false);
    ok(
        &r,
        &ann(&[
            "memory",
            "save",
            &format!("- Ann's card: {SECRET}\n- likes kayaks\n"),
        ]),
    );
    // The memory tool.
    ok(
        &r,
        &ann(&[
            "files",
            "create",
            "/memories/card.md",
            &format!("card {SECRET}"),
        ]),
    );
    // An attachment, by an import of memtape's own format.
    let uploads = data.join("files/uploads");
    std::fs::create_dir_all(&uploads).unwrap();
    std::fs::write(
        uploads.join("card.txt"),
        format!("statement for {SECRET}\n"),
    )
    .unwrap();
    let attached = serde_json::json!({
        "id": 1, "kind": "message", "created_at": "2026-03-01T10:00:00Z", "meta": {},
        "scope": {"tenant": "default", "agent": "default", "user": "ann", "session": "s3"},
        "payload": {"role": "user", "content": "see the statement attached", "files": [
            {"type": "document", "transfer_method": "local_file", "upload_file_id": "card.txt",
             "belongs_to": "user"}
        ]}
    });
    let file = r.path("attached.jsonl");
    std::fs::write(&file, format!("{attached}\n")).unwrap();
    ok(&r, &ann(&["import", "--format", "memtape", &file]));
    // An import of a nanobot session.
    let nanobot = r.path("nanobot.jsonl");
    std::fs::write(
        &nanobot,
        format!(
            "{}\n{}\n",
            r#"{"_type": "metadata", "key": "s2", "created_at": "2026-03-10T14:30:00", "metadata": {}, "last_consolidated": 0}"#,
            serde_json::json!({"role": "user", "content": format!("old chat: {SECRET}"), "timestamp": "2026-03-10T14:30:00"})
        ),
    )
    .unwrap();
    ok(&r, &ann(&["import", "--format", "nanobot", &nanobot]));
    // A compaction summary (extractive: no model), recorded on the tape.
    let full: serde_json::Value =
        serde_json::from_str(&ok(&r, &ann(&["context", "s1", "--json", "--dry-run"]))).unwrap();
    let budget = ((full["tokens"].as_u64().unwrap() as f64 / 0.75) as usize - 1).to_string();
    let compacted: serde_json::Value = serde_json::from_str(&ok(
        &r,
        &ann(&["context", "s1", "--budget", &budget, "--json"]),
    ))
    .unwrap();
    assert_eq!(compacted["compacted"], true, "{compacted}");
    let summary = ok(&r, &ann(&["entries", "s1", "--kind", "event", "--json"]));
    assert!(
        summary.contains("context.compaction") && summary.contains(SECRET),
        "the summary holds it: {summary}"
    );

    // A model consolidates (its rewrite drops the old card line) and extracts.
    let server = Scripted::start(vec![
        tool_call(
            "save_memory",
            serde_json::json!({
                "history_entry": format!("[2026-03-10 14:30] Planned a kayak trip; card {SECRET}."),
                "memory_update": format!("- likes kayaks\n- card on file ending {SECRET}\n"),
            }),
        ),
        text(
            &serde_json::json!({"should_update": true,
                "daily_entry": format!("## 10:00 Ann paid with {SECRET}"), "reason": "payment"})
            .to_string(),
        ),
    ]);
    configure(&r, &server);
    let done: serde_json::Value =
        serde_json::from_str(&ok(&r, &ann(&["memory", "consolidate", "s1", "--all"]))).unwrap();
    assert!(done["dropped"].as_u64().unwrap() >= 1, "{done}");
    let dropped = ok(&r, &ann(&["memory", "dropped"]));
    assert!(dropped.contains("Ann's card"), "{dropped}");
    ok(&r, &ann(&["memory", "extract", "s1"]));
    assert_eq!(server.requests(), 2);
    ok(&r, &ann(&["sync"]));
    // A hand edit of the workspace, picked up by the erasure's own sync.
    let memory = data.join("workspace/default/default/users/ann/MEMORY.md");
    let edited = format!(
        "{}\nAnn repeated {SECRET}\n",
        std::fs::read_to_string(&memory).unwrap()
    );
    std::fs::write(&memory, edited).unwrap();
    let hits = ok(&r, &ann(&["search", "4111", "--json"]));
    assert!(hits.contains("4111"), "{hits}");
    // Every way in holds it now: the tape, the workspace's files, the upload (the index
    // finds it above; its terms are stored prefix-compressed).
    let before = holding(&data, SECRET);
    for place in [
        "memtape.db",
        "HISTORY.md",
        "MEMORY.md",
        "SESSION-STATE.md",
        "/memory/20",
        "card.md",
        "card.txt",
    ] {
        assert!(
            before.iter().any(|f| f.contains(place)),
            "{place}: {before:?}"
        );
    }

    let erased: serde_json::Value =
        serde_json::from_str(&ok(&r, &ann(&["erase", "text", SECRET]))).unwrap();
    assert_eq!(erased["files"], 1, "{erased}");
    assert!(erased["redacted"].as_u64().unwrap() >= 10, "{erased}");
    assert_eq!(holding(&data, SECRET), Vec::<String>::new());
    // What was around the secret stays.
    let history_md =
        std::fs::read_to_string(data.join("workspace/default/default/users/ann/HISTORY.md"))
            .unwrap();
    assert!(history_md.contains("Planned a kayak trip"), "{history_md}");
    let memory_md = std::fs::read_to_string(&memory).unwrap();
    assert!(memory_md.contains("likes kayaks"), "{memory_md}");
}

/// `memtape erase` beside a running `memtape serve` on the same data directory: the
/// server's reads stop showing the text, its index (the same file) stops finding it, and
/// once the server has stopped no file holds a byte of it, whether or not the erasure
/// could truncate the write-ahead log while the server held it open.
#[test]
fn the_cli_erases_beside_a_running_server() {
    use crate::common::serving::Serving;

    let r = Run::new();
    let server = Serving::start(&r, &[]);
    for text in [
        format!("my card is {SECRET}"),
        "and I like otters".to_owned(),
    ] {
        let (status, body) = server.call(
            "POST",
            "/v1/sessions/s1/messages?user=ann",
            Some(serde_json::json!({"role": "user", "content": text})),
            None,
        );
        assert_eq!(status, 201, "{body}");
    }
    let search = |q: &str| {
        let (status, body) = server.call(
            "GET",
            &format!("/v1/search?q={q}&mode=bm25&user=ann"),
            None,
            None,
        );
        assert_eq!(status, 200, "{body}");
        body["hits"].as_array().unwrap().len()
    };
    // The server's indexer has caught up.
    let started = std::time::Instant::now();
    while search("4111") == 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let done: serde_json::Value =
        serde_json::from_str(&ok(&r, &ann(&["erase", "text", SECRET]))).unwrap();
    assert_eq!(done["redacted"].as_u64(), Some(2), "{done}");
    assert_eq!(search("4111"), 0, "the index, shared, applied the receipt");
    assert!(search("otters") > 0);
    let (_, history) = server.call("GET", "/v1/sessions/s1/history?user=ann", None, None);
    assert!(!history.to_string().contains("4111"), "{history}");
    assert!(history.to_string().contains("[erased]"), "{history}");
    let (code, _) = server.terminate();
    assert_eq!(code, Some(0));
    let data = r.dir.path().join("data");
    assert_eq!(holding(&data, SECRET), Vec::<String>::new());
}
