//! The `memtape` binary driven as users and scripts drive it: real processes, a real data
//! directory, exact outputs for the forms scripts depend on, and clear failures.

use std::path::Path;
use std::process::Command;

use crate::common::Run;
use serde_json::{Value, json};

#[test]
fn append_prints_ids_and_history_json_is_openai_chat_messages() {
    let r = Run::new();
    assert_eq!(
        r.ok(&["append", "s1", "--role", "user", "--content", "hi"]),
        "1\n"
    );
    let calls = r#"[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"x\"}"}}]"#;
    assert_eq!(
        r.ok(&["append", "s1", "--role", "assistant", "--tool-calls", calls]),
        "2\n"
    );
    r.ok(&[
        "append",
        "s1",
        "--role",
        "tool",
        "--tool-call-id",
        "c1",
        "--name",
        "lookup",
        "--content",
        "found",
    ]);
    r.ok(&["append", "s1", "--role", "assistant", "--content", "done"]);
    let history = r.json(&["history", "s1", "--json"]);
    assert_eq!(
        history,
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}}]},
            {"role": "tool", "content": "found", "tool_call_id": "c1", "name": "lookup"},
            {"role": "assistant", "content": "done"}
        ])
    );
    let limited = r.json(&["history", "s1", "--json", "--max-messages", "1"]);
    // nanobot aligns to a user turn only when the window holds one; this one does not.
    assert_eq!(limited, json!([{"role": "assistant", "content": "done"}]));
    let human = r.ok(&["history", "s1"]);
    assert!(human.starts_with("#1 message user: hi\n"), "{human}");
}

#[test]
fn regenerating_with_parent_and_reading_the_thread() {
    let r = Run::new();
    r.ok(&["append", "s", "--role", "user", "--content", "A"]);
    r.ok(&["append", "s", "--role", "assistant", "--content", "A1"]);
    r.ok(&[
        "append",
        "s",
        "--role",
        "assistant",
        "--content",
        "A2",
        "--parent",
        "1",
    ]);
    let leaf = r.ok(&["append", "s", "--role", "user", "--content", "C"]);
    let thread = r.json(&["thread", leaf.trim(), "--json"]);
    let texts: Vec<&str> = thread
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["A", "A2", "C"]);
    let history = r.json(&["history", "s", "--json"]);
    assert_eq!(history.as_array().unwrap().len(), 3);
}

#[test]
fn anchors_slice_entries_and_sessions_are_listed() {
    let r = Run::new();
    r.ok(&["append", "s", "--role", "user", "--content", "before"]);
    assert_eq!(
        r.ok(&["anchor", "s", "phase/2", "--state", r#"{"owner":"ada"}"#]),
        "2\n"
    );
    r.ok(&["append", "s", "--role", "user", "--content", "after"]);
    r.ok(&[
        "--user",
        "bob",
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "bob's",
    ]);
    let after = r.json(&["entries", "s", "--after-anchor", "phase/2", "--json"]);
    assert_eq!(after.as_array().unwrap().len(), 1);
    assert_eq!(after[0]["payload"]["content"], "after");
    let anchors = r.json(&["entries", "s", "--kind", "anchor", "--json"]);
    assert_eq!(
        anchors[0]["payload"],
        json!({"name": "phase/2", "state": {"owner": "ada"}})
    );
    let sessions = r.json(&["sessions", "--json"]);
    assert_eq!(sessions.as_array().unwrap().len(), 2, "{sessions}");
    assert_eq!(sessions[0]["messages"], 2);
    assert_eq!(sessions[1]["scope"]["user"], "bob");
    let bobs = r.json(&["--user", "bob", "sessions", "--json"]);
    assert_eq!(bobs.as_array().unwrap().len(), 1);
    assert_eq!(
        r.json(&["--agent", "other", "sessions", "--json"]),
        json!([])
    );
    let err = r.fails(&["entries", "s", "--after-anchor", "nope"]);
    assert!(err.contains("no anchor nope"), "{err}");
}

#[test]
fn nanobot_import_export_and_consolidation() {
    let r = Run::new();
    let file = r.path("telegram_42.jsonl");
    std::fs::write(
        &file,
        concat!(
            r#"{"_type": "metadata", "key": "telegram:42", "created_at": "2026-03-10T14:30:00", "updated_at": "2026-03-10T14:31:00", "metadata": {}, "last_consolidated": 1}"#,
            "\n",
            r#"{"role": "user", "content": "old", "timestamp": "2026-03-10T14:30:00"}"#,
            "\n",
            r#"{"role": "user", "content": "new", "timestamp": "2026-03-10T14:31:00"}"#,
            "\n"
        ),
    )
    .unwrap();
    let said = r.ok(&["import", "--format", "nanobot", &file]);
    // The metadata event, two messages and the pointer move.
    assert!(said.starts_with("imported 4 entries"), "{said}");
    assert_eq!(
        r.json(&["history", "telegram:42", "--json"]),
        json!([{"role": "user", "content": "new"}])
    );
    let exported = r.ok(&["export", "--format", "nanobot", "telegram:42"]);
    let head: Value = serde_json::from_str(exported.lines().next().unwrap()).unwrap();
    assert_eq!(head["last_consolidated"], 1);
    assert_eq!(exported.lines().count(), 3);

    // Moving the pointer is itself an entry; history follows it.
    r.ok(&["consolidate", "telegram:42", "3"]);
    assert_eq!(r.json(&["history", "telegram:42", "--json"]), json!([]));
    let err = r.fails(&["consolidate", "telegram:42", "999"]);
    assert!(err.contains("no entry of this scope"), "{err}");
}

#[test]
fn a_bad_import_line_is_named_and_nothing_is_imported() {
    let r = Run::new();
    let file = r.path("bad.jsonl");
    std::fs::write(
        &file,
        "{\"role\": \"user\", \"content\": \"fine\"}\n\n{\"role\": \"user\", \"content\": \n",
    )
    .unwrap();
    let err = r.fails(&["import", "--format", "nanobot", &file, "--session", "x"]);
    assert!(
        err.contains("line 3: not valid JSON") && err.contains("nothing was imported"),
        "{err}"
    );
    assert_eq!(r.json(&["sessions", "--json"]), json!([]));
}

#[test]
fn memtape_export_import_is_lossless_through_the_cli() {
    let r = Run::new();
    r.ok(&[
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "hello",
        "--meta",
        r#"{"channel":"cli"}"#,
    ]);
    r.ok(&["anchor", "s", "x"]);
    r.ok(&[
        "--agent",
        "other",
        "append",
        "t",
        "--role",
        "system",
        "--content",
        "be kind",
    ]);
    let dump = r.ok(&["export", "--format", "memtape"]);
    let file = r.path("dump.jsonl");
    std::fs::write(&file, &dump).unwrap();
    let r2 = Run::new();
    r2.ok(&["import", "--format", "memtape", &file]);
    assert_eq!(r2.ok(&["export", "--format", "memtape"]), dump);
}

#[test]
fn errors_name_what_is_wrong_and_exit_non_zero() {
    let fresh = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args([
            "--data-dir",
            &fresh.path().join("nowhere").to_string_lossy(),
            "history",
            "s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("run `memtape init`"));
    assert!(
        !fresh.path().join("nowhere").exists(),
        "a failed read created the store"
    );

    let r = Run::new();
    for (args, says) in [
        (
            vec!["append", "s", "--role", "tool", "--content", "x"],
            "needs tool_call_id",
        ),
        (
            vec![
                "append",
                "s",
                "--role",
                "user",
                "--content",
                "x",
                "--parent",
                "7",
            ],
            "does not exist",
        ),
        (
            vec![
                "append",
                "s",
                "--role",
                "user",
                "--content",
                "x",
                "--meta",
                "[1]",
            ],
            "--meta must be a JSON object",
        ),
        (
            vec!["append", "s", "--role", "assistant", "--tool-calls", "{"],
            "--tool-calls must be",
        ),
        (
            vec!["anchor", "s", "a", "--state", "nope"],
            "--state is not valid JSON",
        ),
        (
            vec!["entries", "s", "--kind", "weird"],
            "invalid value 'weird' for '--kind <KIND>'",
        ),
        (
            vec!["entries", "s", "--since", "last week"],
            "--since \"last week\" is not a time",
        ),
        (vec!["thread", "42"], "no entry 42"),
        (vec!["export", "--format", "nanobot"], "name it"),
        (vec!["export", "--format", "bub", "ghost"], "no session"),
        (
            vec!["import", "--format", "nanobot", "/nonexistent.jsonl"],
            "reading /nonexistent.jsonl",
        ),
    ] {
        let err = r.fails(&args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Nothing was written by any of them.
    assert_eq!(r.json(&["sessions", "--json"]), json!([]));
    let bad_role = r.cmd(&["append", "s", "--role", "robot", "--content", "x"]);
    assert_eq!(
        bad_role.status.code(),
        Some(2),
        "clap rejects unknown roles"
    );
}

#[test]
fn init_is_idempotent_and_keeps_data() {
    let r = Run::new();
    r.ok(&["append", "s", "--role", "user", "--content", "kept"]);
    r.ok(&["init"]);
    assert_eq!(
        r.json(&["history", "s", "--json"]),
        json!([{"role": "user", "content": "kept"}])
    );
    assert!(Path::new(&r.path("data/memtape.db")).exists());
}

#[test]
fn usage_sums_the_agents_model_calls() {
    let r = Run::new();
    assert!(
        r.ok(&["usage"])
            .contains("no model calls recorded for agent default")
    );
    {
        // The calls a consolidation would record, written through the library.
        let engine = memtape::Engine::init(&r.dir.path().join("data")).unwrap();
        let scope = memtape::Scope::agent("default", "default")
            .unwrap()
            .with_session("chat")
            .unwrap();
        for (tokens, error) in [(1000, None), (400, Some("timeout"))] {
            let call = memtape::events::LlmCall {
                model: "smollm2".into(),
                purpose: "consolidation".into(),
                prompt_tokens: tokens,
                completion_tokens: 50,
                attempts: 1,
                error: error.map(str::to_owned),
                ..Default::default()
            };
            engine.record_llm_call(&scope, call).unwrap();
        }
    }
    let usage = r.json(&["usage", "--json"]);
    assert_eq!(
        usage,
        json!([{"model": "smollm2", "purpose": "consolidation", "calls": 2, "failed": 1,
                "prompt_tokens": 1400, "completion_tokens": 100}])
    );
    let text = r.ok(&["usage"]);
    assert!(text.contains("2 calls (1 failed)"), "{text}");
    assert_eq!(r.json(&["usage", "--json", "--agent", "other"]), json!([]));
    assert_eq!(
        r.json(&["usage", "--json", "--since", "2200-01-01"]),
        json!([])
    );
    let err = r.fails(&["usage", "--since", "someday"]);
    assert!(err.contains("--since"), "{err}");
}

/// Issue 31, section 4: `append --idempotency-key` appends once; run again (a script that
/// retries), it prints the first id and stores nothing, and the key with another message
/// is refused.
#[test]
fn an_append_retried_with_its_idempotency_key_stores_once() {
    let run = Run::new();
    let args = [
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "my order 88123 ships",
        "--idempotency-key",
        "k-1",
    ];
    let first = run.ok(&args);
    assert_eq!(run.ok(&args), first, "the first id again");
    let err = run.fails(&[
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "another",
        "--idempotency-key",
        "k-1",
    ]);
    assert!(err.contains("another append"), "{err}");
    let err = run.fails(&[
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "x",
        "--idempotency-key",
        "two words",
    ]);
    assert!(err.contains("idempotency key"), "{err}");
    let history = run.json(&["history", "s", "--json"]);
    assert_eq!(history.as_array().map(Vec::len), Some(1), "{history}");
    // The WAL captured it once: one memory version.
    let memory = run.ok(&["memory", "show"]);
    assert!(memory.contains("version 1,"), "{memory}");
}

/// `memtape import` without --format tells the format by the file's lines and says which
/// on stderr, into a data directory that has no store yet (it is created, as `serve` does).
#[test]
fn import_tells_the_format_and_creates_the_store() {
    let source = Run::new();
    source.ok(&["append", "s", "--role", "user", "--content", "hello"]);
    source.ok(&[
        "append",
        "s",
        "--role",
        "assistant",
        "--content",
        "hi there",
    ]);
    for (format, name, export, session) in [
        (
            "memtape",
            "all.jsonl",
            vec!["export", "--format", "memtape"],
            "s",
        ),
        (
            "nanobot",
            "s.jsonl",
            vec!["export", "--format", "nanobot", "s"],
            "s",
        ),
        (
            "bub",
            "tape.jsonl",
            vec!["export", "--format", "bub", "s"],
            "tape",
        ),
    ] {
        let target = Run::new_empty();
        let file = target.path(name);
        std::fs::write(&file, source.ok(&export)).unwrap();
        let out = target.cmd(&["import", &file]);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{format}: {stderr}");
        assert!(
            stderr.contains(&format!("{name} reads as"))
                && stderr.contains(&format!("importing it as --format {format}")),
            "{format}: {stderr}"
        );
        let said = String::from_utf8(out.stdout).unwrap();
        assert!(said.starts_with("imported "), "{format}: {said}");
        let history = target.json(&["history", session, "--json"]);
        assert_eq!(
            history,
            json!([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]),
            "{format}"
        );
    }
    // --format given: the store is created too.
    let target = Run::new_empty();
    let file = target.path("s.jsonl");
    std::fs::write(&file, source.ok(&["export", "--format", "nanobot", "s"])).unwrap();
    let out = target.cmd(&["import", "--format", "nanobot", &file]);
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "nothing to tell when --format is given"
    );
    assert_eq!(
        target
            .json(&["history", "s", "--json"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// What format detection cannot read: an empty file imports nothing; a file of another
/// kind, of two formats at once, a cut line or bytes that are not text is refused with
/// the reason and the --format values, and nothing is imported.
#[test]
fn import_without_a_format_refuses_what_it_cannot_tell() {
    let r = Run::new();
    for (name, text) in [("empty.jsonl", ""), ("blank.jsonl", "\u{feff}\n  \n")] {
        let file = r.path(name);
        std::fs::write(&file, text).unwrap();
        let said = r.ok(&["import", &file]);
        assert!(said.starts_with("nothing imported: "), "{name}: {said}");
    }
    let nanobot = r#"{"role": "user", "content": "hi"}"#;
    let bub =
        r#"{"id": 1, "kind": "message", "payload": {"role": "user", "content": "hi"}, "meta": {}}"#;
    for (name, text, why) in [
        (
            "locomo.json",
            "[\n  {\"sample_id\": \"conv-1\", \"conversation\": {}}\n]\n".to_owned(),
            "line 1 is not a JSON object",
        ),
        (
            "notes.md",
            "# Notes\n\n- Ada likes tea\n".to_owned(),
            "line 1 is not a JSON object",
        ),
        (
            "rows.jsonl",
            "{\"text\": \"hello\", \"speaker\": \"Ada\"}\n".to_owned(),
            "line 1 is neither a memtape entry",
        ),
        (
            "mixed.jsonl",
            format!("{nanobot}\n{nanobot}\n{bub}\n"),
            "line 1 reads as nanobot but line 3 as bub",
        ),
        (
            "cut.jsonl",
            format!("{nanobot}\n{}\n", &nanobot[..nanobot.len() / 2]),
            "line 2 is not a JSON object",
        ),
    ] {
        let file = r.path(name);
        std::fs::write(&file, text).unwrap();
        let err = r.fails(&["import", &file]);
        assert!(
            err.contains(&format!("cannot tell the format of {file}: {why}"))
                && err.contains("pass --format memtape, nanobot or bub")
                && err.contains("nothing was imported"),
            "{name}: {err}"
        );
    }
    let file = r.path("binary.jsonl");
    std::fs::write(&file, [0xff, 0xfe, 0x00, 0x81]).unwrap();
    let err = r.fails(&["import", &file]);
    assert!(err.contains(&format!("reading {file}")), "{err}");
    assert_eq!(r.json(&["sessions", "--json"]), json!([]));
    assert_eq!(r.ok(&["export", "--format", "memtape"]), "");
}
