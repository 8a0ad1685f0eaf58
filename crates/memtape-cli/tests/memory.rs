//! The memory forms of the `memtape` binary (issue 4's CLI): `memory`, `files`, `sync`
//! (once and watching), `wal scan`, and the WAL on `append`, run as scripts run them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Run;
use serde_json::json;

#[test]
fn memory_forms_save_daily_recall_versions_diff_undo_forget_clear() {
    let r = Run::new();
    assert_eq!(
        r.ok(&["memory", "save", "User likes Python"]),
        "saved to long-term memory\n"
    );
    r.ok(&["memory", "daily", "- shipped v1", "--date", "2026-04-01"]);
    let shown = r.json(&["memory", "show", "--json"]);
    assert_eq!(shown["version"], json!(2));
    assert_eq!(
        shown["files"]["memory/2026-04-01.md"]["content"],
        json!("# 2026-04-01\n\n- shipped v1\n")
    );
    assert_eq!(
        r.ok(&["memory", "recall", "python", "--days", "3650"]),
        "MEMORY.md:1: User likes Python\n"
    );
    r.ok(&["memory", "save", "User likes Rust"]);
    let versions = r.ok(&["memory", "versions", "MEMORY.md"]);
    let lines: Vec<&str> = versions.lines().collect();
    assert_eq!(lines.len(), 2, "{versions}");
    assert!(lines[0].starts_with("v1\t#1\t") && lines[0].ends_with("memory.save\tMEMORY.md"));
    assert_eq!(
        r.ok(&["memory", "diff", "1", "3"]),
        "--- a/MEMORY.md\n+++ b/MEMORY.md\n@@ -1 +1 @@\n-User likes Python\n\\ No newline at end of file\n\
         +User likes Rust\n\\ No newline at end of file\n\
         --- /dev/null\n+++ b/memory/2026-04-01.md\n@@ -0,0 +1,3 @@\n+# 2026-04-01\n+\n+- shipped v1\n"
    );
    assert_eq!(
        r.ok(&["memory", "undo", "1"]),
        "memory is back to version 1, recorded as version 4\n"
    );
    let shown = r.json(&["memory", "show", "--json"]);
    assert_eq!(
        shown["files"]["MEMORY.md"]["content"],
        json!("User likes Python")
    );
    assert!(shown["files"].get("memory/2026-04-01.md").is_none());
    let err = r.fails(&["memory", "diff", "1", "9"]);
    assert!(err.contains("no version 9"), "{err}");
    // Forgetting the undo (entry 4) leaves the memory as version 3 had it.
    assert!(
        r.ok(&["memory", "forget", "4"])
            .starts_with("forgot 1 change(s)")
    );
    assert_eq!(
        r.json(&["memory", "show", "--json"])["files"]["MEMORY.md"]["content"],
        json!("User likes Rust")
    );
    let err = r.fails(&["memory", "forget", "77"]);
    assert!(err.contains("77"), "{err}");
    r.ok(&["memory", "daily", "- old", "--date", "2000-01-01"]);
    assert_eq!(
        r.ok(&["memory", "prune", "--days", "30"]),
        "removed 2 daily note(s) older than 30 days\n",
        "2000-01-01 and 2026-04-01 (back since its undo was forgotten)"
    );
    assert!(r.ok(&["memory", "clear"]).starts_with("memory cleared"));
    assert_eq!(r.ok(&["memory", "clear"]), "memory is already empty\n");
}

#[test]
fn memory_is_scoped_by_agent_and_user() {
    let r = Run::new();
    r.ok(&["--agent", "bot", "memory", "save", "shared fact"]);
    r.ok(&[
        "--agent",
        "bot",
        "--user",
        "ada",
        "memory",
        "save",
        "ada's fact",
    ]);
    let agent = r.json(&["--agent", "bot", "memory", "show", "--json"]);
    assert_eq!(agent["files"]["MEMORY.md"]["content"], json!("shared fact"));
    let ada = r.json(&[
        "--agent", "bot", "--user", "ada", "memory", "show", "--json",
    ]);
    assert_eq!(ada["files"]["MEMORY.md"]["content"], json!("ada's fact"));
    let other = r.json(&["memory", "show", "--json"]);
    assert_eq!(other["files"], json!({}));
}

#[test]
fn files_forms_run_the_anthropic_and_mateclaw_tools() {
    let r = Run::new();
    assert_eq!(
        r.ok(&["files", "create", "/memories/notes.md", "a\nb\n"]),
        "File created successfully at: /memories/notes.md\n"
    );
    assert_eq!(
        r.ok(&["files", "view", "/memories/notes.md", "--range", "2", "-1"]),
        "Here's the content of /memories/notes.md with line numbers:\n     2\tb\n"
    );
    r.ok(&["files", "str_replace", "/memories/notes.md", "b", "B"]);
    assert_eq!(
        r.ok(&["files", "insert", "/memories/notes.md", "0", "top"]),
        "The file /memories/notes.md has been edited.\n"
    );
    let err = r.fails(&["files", "insert", "/memories/notes.md", "10", "x"]);
    assert!(err.contains("Invalid `insert_line` parameter: 10"), "{err}");
    let read = r.json(&["files", "read", "/memories/notes.md"]);
    assert_eq!(read["content"], json!("top\na\nB\n"));
    let edit = r.json(&[
        "files",
        "edit",
        "/memories/notes.md",
        "a",
        "A",
        "--replace-all",
    ]);
    assert_eq!(edit["replacements"], json!(1));
    r.ok(&["files", "write", "MEMORY.md", "long-term"]);
    let list = r.json(&["files", "list"]);
    assert_eq!(list["count"], json!(2));
    let list = r.json(&["files", "list", "/memories/"]);
    assert_eq!(list["files"][0]["filename"], json!("memories/notes.md"));
    assert_eq!(
        r.ok(&["files", "rename", "/memories/notes.md", "/memories/n.md"]),
        "Successfully renamed /memories/notes.md to /memories/n.md\n"
    );
    assert_eq!(
        r.ok(&["files", "delete", "/memories/n.md"]),
        "Successfully deleted /memories/n.md\n"
    );
    let err = r.fails(&["files", "view", "/memories/n.md"]);
    assert!(
        err.contains("The path /memories/n.md does not exist. Please provide a valid path."),
        "{err}"
    );
    let err = r.fails(&["files", "write", "notes.txt", "x"]);
    assert!(err.contains("only .md files"), "{err}");
    let err = r.fails(&["files", "create", "/memories/../MEMORY.md", "x"]);
    assert!(err.contains("/memories/../MEMORY.md"), "{err}");
}

#[test]
fn wal_scan_json_lists_category_and_text() {
    let r = Run::new();
    assert_eq!(
        r.json(&["wal", "scan", "My name is Bobur", "--json"]),
        json!([{"category": "proper_noun", "text": "My name is Bobur"}])
    );
    assert_eq!(
        r.json(&["wal", "scan", "I'm not sure", "--json"]),
        json!([])
    );
    assert_eq!(
        r.ok(&["wal", "scan", "use your judgement"]),
        "nothing to capture\n"
    );
}

#[test]
fn appending_a_user_message_runs_the_wal_unless_told_not_to() {
    let r = Run::new();
    r.ok(&[
        "--user",
        "u",
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "I prefer dark mode",
    ]);
    let shown = r.json(&["--user", "u", "memory", "show", "--json"]);
    let state = shown["files"]["SESSION-STATE.md"]["content"]
        .as_str()
        .unwrap();
    assert!(
        state.contains("**preference**: I prefer dark mode"),
        "{state}"
    );
    assert_eq!(
        shown["files"]["MEMORY.md"]["content"],
        json!("- I prefer dark mode\n")
    );
    r.ok(&[
        "--user",
        "v",
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "I prefer tea",
        "--no-wal",
    ]);
    assert_eq!(
        r.json(&["--user", "v", "memory", "show", "--json"])["files"],
        json!({})
    );
}

#[test]
fn sync_round_trip_and_conflict_through_the_binary() {
    let r = Run::new();
    r.ok(&["memory", "save", "v1\n"]);
    assert_eq!(r.ok(&["sync"]), "wrote MEMORY.md\n");
    let file = r
        .dir
        .path()
        .join("data/workspace/default/default/shared/MEMORY.md");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "v1\n");
    std::fs::write(&file, "edited\n").unwrap();
    assert_eq!(r.ok(&["sync"]), "recorded MEMORY.md as version 2\n");
    assert_eq!(
        r.json(&["memory", "show", "--json"])["files"]["MEMORY.md"]["content"],
        json!("edited\n")
    );
    assert!(r.ok(&["sync"]).ends_with("is in sync\n"));

    std::fs::write(&file, "hand\n").unwrap();
    r.ok(&["memory", "save", "tape\n"]);
    let out = r.cmd(&["sync"]);
    assert!(!out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("conflict: MEMORY.md changed on disk and on the tape"),
        "{stdout}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("nothing was overwritten"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hand\n");
    assert_eq!(r.ok(&["sync", "--prefer", "tape"]), "wrote MEMORY.md\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "tape\n");
}

#[test]
fn sync_watch_records_an_edit_while_running() {
    let r = Run::new();
    r.ok(&["memory", "save", "before\n"]);
    let ws = r.dir.path().join("ws");
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["sync", "--watch", "--interval", "0.1", "--dir"])
        .arg(&ws)
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wait_for = |what: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !what() {
            assert!(start.elapsed() < Duration::from_secs(20), "timed out");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let file = ws.join("MEMORY.md");
    wait_for(&|| std::fs::read_to_string(&file).is_ok_and(|t| t == "before\n"));
    std::fs::write(&file, "after\n").unwrap();
    wait_for(&|| {
        r.json(&["memory", "show", "--json"])["files"]["MEMORY.md"]["content"] == json!("after\n")
    });
    // And the other way: a tape change reaches the file.
    r.ok(&["memory", "save", "from the tape\n"]);
    wait_for(&|| std::fs::read_to_string(&file).is_ok_and(|t| t == "from the tape\n"));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn wal_eval_reports_precision_and_recall_on_the_labelled_set() {
    let r = Run::new();
    let set = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../memtape-core/tests/data/wal-labelled.jsonl"
    );
    let report = r.json(&["wal", "eval", set, "--json"]);
    assert!(report["messages"].as_u64().unwrap() >= 200);
    let rows = report["categories"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for row in rows {
        assert!(row["precision"].as_f64().unwrap() >= 0.9, "{row}");
        assert!(row["recall"].as_f64().unwrap() >= 0.8, "{row}");
    }
    std::fs::write(
        r.path("bad.jsonl"),
        "{\"text\": \"x\", \"labels\": [\"mood\"]}\n",
    )
    .unwrap();
    let err = r.fails(&["wal", "eval", &r.path("bad.jsonl")]);
    assert!(err.contains("line 1: unknown category \"mood\""), "{err}");
}

/// Issue 13: `--as-of` (a time or an entry id) on memory show, files view/read/list,
/// history, context and search, and `memory blame` from a line to the message that caused
/// it; a bad moment is refused naming the flag.
#[test]
fn as_of_on_every_read_and_blame_leads_to_the_message() {
    let r = Run::new();
    let said = r.ok(&[
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "My name is Ada and I live in Oslo",
    ]);
    let message: u64 = said.trim().parse().unwrap();
    r.ok(&["memory", "save", "lives in Oslo"]);
    let first = r.json(&["memory", "show", "--json"]);
    let cut = first["version"].as_u64().unwrap();
    assert!(cut >= 1);
    // The id of the save: the latest memory change.
    let versions = r.ok(&["memory", "versions", "MEMORY.md", "--json"]);
    let saved: serde_json::Value = serde_json::from_str(versions.lines().last().unwrap()).unwrap();
    let saved_id = saved["id"].as_u64().unwrap().to_string();
    r.ok(&[
        "append",
        "s",
        "--role",
        "assistant",
        "--content",
        "Nice to meet you",
    ]);
    r.ok(&[
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "I moved to Bergen",
        "--no-wal",
    ]);
    r.ok(&["memory", "save", "lives in Bergen"]);

    let then = r.json(&["memory", "show", "--json", "--as-of", &saved_id]);
    assert_eq!(
        then["files"]["MEMORY.md"]["content"],
        json!("lives in Oslo")
    );
    assert!(
        r.ok(&["memory", "show", "--as-of", &saved_id])
            .contains("lives in Oslo")
    );
    assert!(
        r.ok(&["files", "view", "/memories", "--as-of", &saved_id])
            .contains("/memories")
    );
    let read = r.json(&["files", "read", "MEMORY.md", "--as-of", &saved_id]);
    assert_eq!(read["content"], json!("lives in Oslo"));
    let listed = r.json(&["files", "list", "--as-of", "1970-01-01T00:00:00Z"]);
    assert_eq!(listed["count"], json!(0));
    let history = r.ok(&["history", "s", "--as-of", &saved_id]);
    assert!(
        history.contains("Oslo") && !history.contains("Bergen"),
        "{history}"
    );
    let ctx = r.json(&["context", "s", "--json", "--as-of", &saved_id]);
    let system = ctx["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("lives in Oslo") && !system.contains("Bergen"),
        "{system}"
    );
    let hits = r.ok(&["search", "Bergen", "--model", "none", "--as-of", &saved_id]);
    assert!(!hits.contains("Bergen"), "{hits}");
    assert!(
        r.ok(&["search", "Bergen", "--model", "none"])
            .contains("Bergen")
    );

    // Blame: the WAL line names the message that caused it.
    let blame = r.ok(&["memory", "blame", "SESSION-STATE.md"]);
    let line = blame
        .lines()
        .find(|l| l.contains("Ada"))
        .unwrap_or_else(|| panic!("{blame}"));
    assert!(line.contains(&format!("#{message}@s")), "{line}");
    assert!(line.contains("\twal\t"), "{line}");
    let json_lines = r.ok(&["memory", "blame", "MEMORY.md", "--json"]);
    let first: serde_json::Value =
        serde_json::from_str(json_lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["text"], json!("lives in Bergen"));

    for (args, needle) in [
        (vec!["memory", "show", "--as-of", "yesterday"], "--as-of"),
        (
            vec!["history", "s", "--as-of", "99999999999999999999"],
            "--as-of",
        ),
        (
            vec![
                "memory",
                "blame",
                "MEMORY.md",
                "--as-of",
                "1970-01-01T00:00:00Z",
            ],
            "did not exist",
        ),
        (vec!["memory", "blame", "memories/none.md"], "there is no"),
        (vec!["memory", "blame", "../etc/passwd"], "invalid path"),
        (
            vec!["memory", "blame", "/memories/../MEMORY.md"],
            "invalid path",
        ),
    ] {
        let err = r.fails(&args);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Issue 31 §1: a capture a server could not record (its log names the messages) is
/// recorded later by `memtape wal capture`, once, and only for what the WAL finds in a
/// user message of the tenant named.
#[test]
fn wal_capture_records_a_stored_message_capture_once() {
    let r = Run::new();
    let user = r
        .ok(&[
            "append",
            "s",
            "--role",
            "user",
            "--no-wal",
            "--content",
            "my order 4411337 ships Friday",
        ])
        .trim()
        .to_owned();
    let reply = r
        .ok(&["append", "s", "--role", "assistant", "--content", "Noted."])
        .trim()
        .to_owned();
    let state = |r: &Run| r.ok(&["files", "read", "SESSION-STATE.md"]);
    let shown = r.ok(&["memory", "show"]);
    assert!(
        !shown.contains("SESSION-STATE.md"),
        "--no-wal captured nothing: {shown}"
    );

    let first = r.json(&["wal", "capture", &user, &reply, "999999", "--json"]);
    assert_eq!(
        first,
        serde_json::json!([
            {"id": user.parse::<u64>().unwrap(), "outcome": "recorded"},
            {"id": reply.parse::<u64>().unwrap(), "outcome": "nothing to capture"},
            {"id": 999999, "outcome": "no such entry"},
        ])
    );
    assert!(state(&r).contains("**specific_value**: my order 4411337 ships Friday"));
    // Again: nothing more.
    assert_eq!(
        r.ok(&["wal", "capture", &user]).trim(),
        format!("{user}: already captured")
    );
    assert_eq!(state(&r).matches("4411337").count(), 1);
    // Another tenant sees no such entry, and its memory is untouched.
    assert_eq!(
        r.ok(&["wal", "capture", "--tenant", "other", &user]).trim(),
        format!("{user}: no such entry")
    );
    // Ids at the integer edges: none is an entry, the largest is not even an id.
    assert_eq!(r.ok(&["wal", "capture", "0"]).trim(), "0: no such entry");
    let err = r.fails(&["wal", "capture", &u64::MAX.to_string()]);
    assert!(err.contains("id"), "{err}");
    assert!(r.fails(&["wal", "capture", "-1"]).contains("-1"));
}

/// Issue 35 §4: nanobot's "HISTORY.md is NOT in context — search it with grep":
/// `memory search` and `memory recall` find the event history, and `--file HISTORY.md`
/// searches it alone.
#[test]
fn memory_search_and_recall_find_history_md() {
    let r = Run::new();
    r.ok(&[
        "append",
        "h1",
        "--role",
        "user",
        "--no-wal",
        "--content",
        "What was the old question about the zeppelin hangar?",
    ]);
    r.ok(&[
        "append",
        "h1",
        "--role",
        "assistant",
        "--content",
        "The zeppelin hangar is in Friedrichshafen.",
    ]);
    r.ok(&["new", "h1"]);
    r.ok(&["memory", "save", "Ada asked about the zeppelin museum too."]);
    let found = r.json(&["memory", "search", "hangar"]);
    assert!(
        found
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["file"] == "HISTORY.md"),
        "{found}"
    );
    let only = r.json(&["memory", "search", "zeppelin", "--file", "HISTORY.md"]);
    let only = only.as_array().unwrap();
    assert!(!only.is_empty());
    assert!(only.iter().all(|l| l["file"] == "HISTORY.md"), "{only:?}");
    let all = r.json(&["memory", "search", "zeppelin"]);
    assert!(all.to_string().contains("MEMORY.md"), "{all}");
    let recalled = r.ok(&["memory", "recall", "hangar"]);
    assert!(recalled.contains("HISTORY.md:"), "{recalled}");
    let whole = r.ok(&["memory", "recall", "--file", "HISTORY.md"]);
    assert!(
        whole.starts_with("## HISTORY.md\n[20") && !whole.contains("museum"),
        "{whole}"
    );
    let err = r.fails(&["memory", "search", "x", "--file", "NOPE.md"]);
    assert!(err.contains("NOPE.md"), "{err}");
}
