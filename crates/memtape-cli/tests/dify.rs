//! Dify's memory through the real binary: `memtape history` under a `MemoryConfig` (the
//! window, the role prefixes of a completion model, the query template, bad configs named),
//! and `memtape node add | history | clear | cleanup` (seed 002's node memory and its
//! cleanup task for old node memories) on a real store.

use crate::common::Run;
use serde_json::json;

/// A conversation of two answered turns and the query being answered.
fn conversation(r: &Run) {
    for (role, content) in [
        ("user", "Hi, I'm Ada."),
        ("assistant", "Hello Ada!"),
        ("user", "What's 2+2?"),
        ("assistant", "4."),
        ("user", "And 3+3?"),
    ] {
        r.ok(&[
            "append",
            "chat",
            "--role",
            role,
            "--content",
            content,
            "--no-wal",
        ]);
    }
}

/// token_buffer_memory.py get_history_prompt_text: `f"{role}: {m.content}"` lines joined
/// by `"\n"`, the node's role_prefix as the roles; `message_limit` turns; the newly created
/// message (the query being answered) is not history; advanced_prompt_transform.py renders
/// the query into query_prompt_template at `#sys.query#`.
#[test]
fn dify_history_renders_completion_text_and_the_query() {
    let r = Run::new();
    conversation(&r);
    let out = r.ok(&[
        "history",
        "chat",
        "--role-prefix",
        "User",
        "Bot",
        "--window",
        "1",
        "--query",
        "And 3+3?",
        "--query-template",
        "{{#start.style#}} answer: {{#sys.query#}}",
        "--var",
        "#start.style#=Briefly",
    ]);
    assert_eq!(
        out,
        "User: What's 2+2?\nBot: 4.\n\nBriefly answer: And 3+3?\n"
    );

    // Dify's defaults when no prefix is set; the JSON carries messages, text and query.
    let v = r.json(&[
        "history",
        "chat",
        "--completion",
        "--query",
        "And 3+3?",
        "--json",
    ]);
    assert_eq!(
        v,
        json!({
            "messages": [
                {"role": "user", "content": "Hi, I'm Ada."},
                {"role": "assistant", "content": "Hello Ada!"},
                {"role": "user", "content": "What's 2+2?"},
                {"role": "assistant", "content": "4."}
            ],
            "text": "Human: Hi, I'm Ada.\nAssistant: Hello Ada!\nHuman: What's 2+2?\nAssistant: 4.",
            "query": "And 3+3?"
        })
    );
    // The same config as a Dify node's memory block.
    let v = r.json(&[
        "history",
        "chat",
        "--memory-config",
        r#"{"window": {"enabled": true, "size": 1}, "query_prompt_template": "Q: {{#sys.query#}}"}"#,
        "--query",
        "And 3+3?",
        "--json",
    ]);
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);
    assert_eq!(v["query"], "Q: And 3+3?");
    assert!(v.get("text").is_none(), "a chat model gets messages: {v}");
    // Without Dify flags, history is memtape's, the current query included.
    assert_eq!(
        r.json(&["history", "chat", "--json"])
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

/// Each bad config is refused naming what is wrong, and nothing is printed: a template
/// without `{{#sys.query#}}` (Dify's sysQueryInUser), a window of 0 or over Dify's 500, a
/// prefix with a line break, a mode that reads other memory, --max-messages with Dify.
#[test]
fn dify_bad_memory_config_is_named() {
    let r = Run::new();
    conversation(&r);
    let cases: [(&[&str], &str); 7] = [
        (
            &["--query-template", "Q: {{query}}"],
            "does not contain {{#sys.query#}}",
        ),
        (&["--window", "0"], "window.size 0"),
        (&["--window", "501"], "window.size 501 is over 500"),
        (&["--role-prefix", "Hu\nman", "AI"], "role_prefix.user"),
        (&["--memory-config", r#"{"mode": "node"}"#], "mode node"),
        (&["--memory-config", "{window"], "--memory-config"),
        (
            &["--window", "2", "--max-messages", "4"],
            "--max-messages does not apply",
        ),
    ];
    for (flags, expected) in cases {
        let mut args = vec!["history", "chat"];
        args.extend_from_slice(flags);
        let err = r.fails(&args);
        assert!(err.contains(expected), "{flags:?}: {err}");
    }
    let err = r.fails(&["history", "chat", "--query", "q", "--var", "novalue"]);
    assert!(err.contains("NAME=VALUE"), "{err}");
}

/// Seed 002: NodeTokenBufferMemory through the CLI — add_messages + flush per run, history
/// along the thread under a memory config (mode node), clear.
#[test]
fn dify_node_memory_through_the_cli() {
    let r = Run::new();
    r.ok(&[
        "node",
        "add",
        "conv-1",
        "llm-1",
        "--message-id",
        "m1",
        "--query",
        "A",
        "--answer",
        "A'",
    ]);
    r.ok(&[
        "node",
        "add",
        "conv-1",
        "llm-1",
        "--message-id",
        "m2",
        "--parent",
        "m1",
        "--query",
        "B",
        "--answer",
        "B'",
    ]);
    let v = r.json(&[
        "node",
        "history",
        "conv-1",
        "llm-1",
        "--message-id",
        "m3",
        "--parent",
        "m2",
        "--json",
    ]);
    assert_eq!(v.as_array().unwrap().len(), 4);
    let out = r.ok(&[
        "node",
        "history",
        "conv-1",
        "llm-1",
        "--message-id",
        "m3",
        "--parent",
        "m2",
        "--window",
        "1",
        "--role-prefix",
        "",
        "Node",
    ]);
    assert_eq!(out, "Human: B\nNode: B'\n");
    // A node's first run: an empty history, not an error; nothing to clear.
    let v = r.json(&[
        "node",
        "history",
        "conv-1",
        "other",
        "--message-id",
        "m3",
        "--json",
    ]);
    assert_eq!(v, json!([]));
    let out = r.ok(&["node", "history", "conv-1", "other", "--message-id", "m3"]);
    assert_eq!(out, "");
    let out = r.ok(&["node", "clear", "conv-1", "other"]);
    assert!(
        out.contains("has no memory yet") && out.contains("nothing to clear"),
        "{out}"
    );
    let err = r.fails(&[
        "node",
        "add",
        "conv-1",
        "llm-1",
        "--message-id",
        "a\tb",
        "--query",
        "q",
        "--answer",
        "a",
    ]);
    assert!(
        err.contains("message_id holds a control character"),
        "{err}"
    );
    let out = r.ok(&["node", "clear", "conv-1", "llm-1"]);
    assert!(
        out.starts_with("cleared default/default session=conv-1 node=llm-1"),
        "{out}"
    );
    let v = r.json(&[
        "node",
        "history",
        "conv-1",
        "llm-1",
        "--message-id",
        "m3",
        "--parent",
        "m2",
        "--json",
    ]);
    assert_eq!(v, json!([]));
}

/// Seed 002, Future Considerations 1: "a Celery task to clean up old node memory files",
/// with Dify's day-based retention (PositiveInt days, older than the cutoff goes). A node
/// memory last written in 2020 is cleared; one written now is kept; the tape keeps both.
#[test]
fn dify_node_cleanup_clears_old_node_memory() {
    let r = Run::new();
    let scope =
        json!({"tenant": "default", "agent": "default", "session": "old-conv", "node": "llm-1"});
    let at = "2020-01-01T00:00:00Z";
    let lines = [
        json!({"id": 1, "scope": scope, "kind": "event", "created_at": at,
               "payload": {"name": "node.turn", "data": {"message_id": "m1", "parent_message_id": null, "starts_thread": true}}, "meta": {}}),
        json!({"id": 2, "scope": scope, "kind": "message", "created_at": at,
               "payload": {"role": "user", "content": "old question"}, "meta": {}}),
        json!({"id": 3, "scope": scope, "kind": "message", "parent": 2, "created_at": at,
               "payload": {"role": "assistant", "content": "old answer"}, "meta": {}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(r.dir.path().join("old.jsonl"), text).unwrap();
    r.ok(&["import", "--format", "memtape", "old.jsonl"]);
    r.ok(&[
        "node",
        "add",
        "new-conv",
        "llm-1",
        "--message-id",
        "n1",
        "--query",
        "q",
        "--answer",
        "a",
    ]);

    let dry = r.ok(&["node", "cleanup", "--dry-run"]);
    assert!(
        dry.starts_with("would clear default/default session=old-conv node=llm-1 (last written 2020-01-01T00:00:00+00:00)\n"),
        "{dry}"
    );
    let v = r.json(&["node", "cleanup", "--older-than-days", "30", "--json"]);
    assert_eq!(v["cleared"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["cleared"][0]["scope"]["session"], "old-conv");
    assert_eq!(
        (v["active"].as_u64(), v["empty"].as_u64()),
        (Some(1), Some(0))
    );
    // Cleared: the node's memory is empty, the other node's is not; the turns stay on the tape.
    let history = |conv: &str| {
        r.json(&[
            "node",
            "history",
            conv,
            "llm-1",
            "--message-id",
            "x",
            "--parent",
            "m1",
            "--json",
        ])
    };
    assert_eq!(history("old-conv"), json!([]));
    let fresh = r.json(&[
        "node",
        "history",
        "new-conv",
        "llm-1",
        "--message-id",
        "n2",
        "--parent",
        "n1",
        "--json",
    ]);
    assert_eq!(fresh.as_array().unwrap().len(), 2);
    let export = r.ok(&["export", "--format", "memtape"]);
    assert!(
        export.contains("old question") && export.contains("node/clear"),
        "{export}"
    );
    // Again: nothing idle is left; 0 days is refused.
    let again = r.ok(&["node", "cleanup"]);
    assert!(again.starts_with("0 node memories cleared"), "{again}");
    assert!(again.ends_with("1 active, 1 already empty\n"), "{again}");
    let err = r.fails(&["node", "cleanup", "--older-than-days", "0"]);
    assert!(err.contains("at least 1"), "{err}");
}

/// A node memory file in Dify's stored form (seed 002): two turns, files, the shapes Dify
/// may write.
fn stored(tag: &str) -> serde_json::Value {
    json!({"version": 1, "messages": [
        {"message_id": "m1", "parent_message_id": null, "role": "user",
         "content": format!("Analyze this image ({tag})"),
         "files": [{"type": "image", "transfer_method": "local_file",
                    "upload_file_id": "file-uuid-123", "belongs_to": "user"}],
         "token_count": 15, "created_at": "2026-01-07T10:00:00Z"},
        {"message_id": "m1", "parent_message_id": null, "role": "assistant",
         "content": "A landscape.", "files": [], "token_count": 50,
         "created_at": "2026-01-07T10:00:01Z"},
        {"message_id": "m2", "parent_message_id": "m1", "role": "user",
         "content": "And the sky?", "files": [], "created_at": "2026-01-07T10:01:00+00:00"},
        {"message_id": "m2", "parent_message_id": "m1", "role": "assistant",
         "content": "Blue.", "files": [], "token_count": 2,
         "created_at": "2026-01-07T10:01:02Z"}
    ]})
}

/// Writes `value` as JSON at `path` (directories made).
fn write_json(path: &std::path::Path, value: &serde_json::Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, value.to_string()).unwrap();
}

/// Seed 002's storage: `node_memory/{app_id}/{conversation_id}/{node_id}.json` in and out
/// through the CLI, one file or a whole tree, the same JSON back.
#[test]
fn dify_stored_node_memory_round_trips_through_the_cli() {
    let r = Run::new();
    let one = r.dir.path().join("one.json");
    write_json(&one, &stored("one"));
    let out = r.ok(&["node", "import", one.to_str().unwrap(), "conv-1", "llm-1"]);
    assert_eq!(out, "imported 1 node memories (2 turns, 6 entries)\n");
    assert_eq!(
        r.json(&["node", "export", "conv-1", "llm-1"]),
        stored("one")
    );
    // The imported turns are the node's memory.
    let v = r.json(&[
        "node",
        "history",
        "conv-1",
        "llm-1",
        "--message-id",
        "m3",
        "--parent",
        "m2",
        "--json",
    ]);
    assert_eq!(v.as_array().unwrap().len(), 4, "{v}");
    // Again into the same node: refused, the node as it was.
    let err = r.fails(&["node", "import", one.to_str().unwrap(), "conv-1", "llm-1"]);
    assert!(err.contains("already has"), "{err}");
    assert_eq!(
        r.json(&["node", "export", "conv-1", "llm-1"]),
        stored("one")
    );

    // A tree of two apps.
    let tree = r.dir.path().join("dify");
    let files = [
        ("app-a", "conv-1", "llm-1"),
        ("app-a", "conv-2", "llm-1"),
        ("app-b", "conv-1", "agent-7"),
    ];
    for (app, conv, node) in files {
        let path = tree.join(format!("node_memory/{app}/{conv}/{node}.json"));
        write_json(&path, &stored(&format!("{app} {conv} {node}")));
    }
    let out = r.ok(&["node", "import", tree.to_str().unwrap()]);
    assert_eq!(out, "imported 3 node memories (6 turns, 18 entries)\n");
    let back = r.dir.path().join("back");
    for agent in ["app-a", "app-b"] {
        r.ok(&[
            "node",
            "export",
            "--agent",
            agent,
            "--dir",
            back.to_str().unwrap(),
        ]);
    }
    for (app, conv, node) in files {
        let path = back.join(format!("node_memory/{app}/{conv}/{node}.json"));
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            stored(&format!("{app} {conv} {node}")),
            "{}",
            path.display()
        );
    }
    // An export never overwrites.
    let err = r.fails(&[
        "node",
        "export",
        "--agent",
        "app-a",
        "--dir",
        back.to_str().unwrap(),
    ]);
    assert!(
        err.contains("exists") && err.contains("never overwrites"),
        "{err}"
    );
    // A user's node goes in a tree of that user's, and back to that user.
    r.ok(&[
        "node",
        "add",
        "--agent",
        "app-a",
        "--user",
        "ada",
        "conv-1",
        "llm-1",
        "--message-id",
        "m1",
        "--query",
        "Ada's question",
        "--answer",
        "Ada's answer",
    ]);
    let only_agent = r.dir.path().join("agent-only");
    let out = r.cmd(&[
        "node",
        "export",
        "--agent",
        "app-a",
        "--dir",
        only_agent.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("1 node memories of users were not exported"),
        "{err}"
    );
    let ada = r.dir.path().join("ada");
    r.ok(&[
        "node",
        "export",
        "--agent",
        "app-a",
        "--user",
        "ada",
        "--dir",
        ada.to_str().unwrap(),
    ]);
    let fresh = Run::new();
    fresh.ok(&["node", "import", "--user", "ada", ada.to_str().unwrap()]);
    let v = fresh.json(&[
        "node",
        "history",
        "--agent",
        "app-a",
        "--user",
        "ada",
        "conv-1",
        "llm-1",
        "--message-id",
        "m2",
        "--parent",
        "m1",
        "--json",
    ]);
    assert_eq!(v[0]["content"], "Ada's question", "{v}");
    // A node never written exports an empty memory.
    let v = r.json(&["node", "export", "conv-9", "never"]);
    assert_eq!(v, json!({"version": 1, "messages": []}));
}

/// Hostile trees and files: each refused naming what is wrong, nothing imported, nothing
/// written outside the directory named, nothing stored lost.
#[test]
fn hostile_node_memory_trees_are_refused_and_nothing_is_written() {
    use std::os::unix::ffi::OsStrExt;
    let r = Run::new();
    let kept = r.dir.path().join("kept.json");
    write_json(&kept, &stored("kept"));
    r.ok(&["node", "import", kept.to_str().unwrap(), "conv-1", "llm-1"]);
    let outside = r.dir.path().join("outside.json");
    write_json(&outside, &stored("outside"));

    let case = |name: &str, build: &dyn Fn(&std::path::Path), needle: &str| {
        let tree = r.dir.path().join(name);
        let good = tree.join("node_memory/app/conv-2/llm.json");
        write_json(&good, &stored("good"));
        build(&tree.join("node_memory"));
        let err = r.fails(&["node", "import", tree.to_str().unwrap()]);
        assert!(err.contains(needle), "{name}: {needle:?} in {err}");
        assert!(err.contains("nothing was imported"), "{name}: {err}");
        let v = r.json(&["node", "export", "--agent", "app", "conv-2", "llm"]);
        assert_eq!(v["messages"], json!([]), "{name}: nothing imported");
    };
    case(
        "link-file",
        &|root| std::os::unix::fs::symlink(&outside, root.join("app/conv-2/evil.json")).unwrap(),
        "symbolic link",
    );
    case(
        "link-dir",
        &|root| {
            std::os::unix::fs::symlink(
                r.dir.path().join("link-file/node_memory/app"),
                root.join("other"),
            )
            .unwrap()
        },
        "symbolic link",
    );
    case(
        "not-utf8",
        &|root| {
            let name = std::ffi::OsStr::from_bytes(b"\xff\xfe.json");
            std::fs::write(root.join("app/conv-2").join(name), stored("x").to_string()).unwrap();
        },
        "not UTF-8",
    );
    case(
        "huge",
        &|root| {
            let f = std::fs::File::create(root.join("app/conv-2/huge.json")).unwrap();
            f.set_len(64 * 1024 * 1024 + 1).unwrap();
        },
        "more than a node memory file may be",
    );
    case(
        "version",
        &|root| {
            write_json(
                &root.join("app/conv-3/llm.json"),
                &json!({"version": 2, "messages": []}),
            )
        },
        "version 2: memtape reads version 1",
    );
    case(
        "stray",
        &|root| std::fs::write(root.join("app/conv-2/notes.txt"), "hi").unwrap(),
        "{node_id}.json files only",
    );
    case(
        "control",
        &|root| write_json(&root.join("app/conv\u{7}x/llm.json"), &stored("x")),
        "control character",
    );
    let err = r.fails(&["node", "import", kept.to_str().unwrap(), "conv\tx", "llm-1"]);
    assert!(err.contains("control character"), "{err}");
    let err = r.fails(&["node", "import", r.dir.path().to_str().unwrap()]);
    assert!(err.contains("no node_memory/ directory"), "{err}");

    // A node named `..` is a name on the tape, never a path: the tree export refuses it
    // and writes nothing; the node alone exports.
    r.ok(&[
        "node",
        "add",
        "conv-1",
        "..",
        "--message-id",
        "m1",
        "--query",
        "q",
        "--answer",
        "a",
    ]);
    let out = r.dir.path().join("out");
    let err = r.fails(&["node", "export", "--dir", out.to_str().unwrap()]);
    assert!(
        err.contains("the node \"..\"") && err.contains("nothing was exported"),
        "{err}"
    );
    assert!(!out.join("node_memory").exists(), "nothing was written");
    let v = r.json(&["node", "export", "conv-1", ".."]);
    assert_eq!(v["messages"].as_array().unwrap().len(), 2, "{v}");
    // An export never follows a link out of the directory named.
    let elsewhere = r.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let linked = r.dir.path().join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::os::unix::fs::symlink(&elsewhere, linked.join("node_memory")).unwrap();
    r.ok(&[
        "node",
        "add",
        "--agent",
        "app2",
        "conv-1",
        "llm",
        "--message-id",
        "m1",
        "--query",
        "q",
        "--answer",
        "a",
    ]);
    let err = r.fails(&[
        "node",
        "export",
        "--agent",
        "app2",
        "--dir",
        linked.to_str().unwrap(),
    ]);
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written through it"
    );
    // What was stored is still there.
    assert_eq!(
        r.json(&["node", "export", "conv-1", "llm-1"]),
        stored("kept")
    );
}
