//! The memory tools through `Engine::call_tool` on a real SQLite tape: Anthropic's memory
//! tool with its exact texts (shared docs, MEMORY-TOOL.md), MateClaw's workspace tools
//! (seed 003), Bub's memory.* tools (seed 001) and Qanot's memory_search (seed 004).
use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};
use memtape::tools::{self, MAX_FILE_BYTES};
use memtape::{Engine, Index, IndexConfig, Scope};
use serde_json::{Value, json};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 4, 3, 10, 0, 0).unwrap()
}

fn engine(dir: &Path) -> Engine {
    Engine::init(dir).unwrap().with_clock(now)
}

fn agent() -> Scope {
    Scope::agent("t", "a").unwrap()
}

/// Calls a tool that must succeed; returns its text.
fn ok(engine: &Engine, name: &str, input: Value) -> String {
    let out = engine.call_tool(&agent(), name, &input).unwrap();
    assert!(!out.is_error, "{name} {input} failed: {}", out.text);
    out.text
}

/// Calls a tool that must refuse; checks nothing changed; returns its text.
fn refused(engine: &Engine, name: &str, input: Value) -> String {
    let before = engine.memory_log(&agent()).unwrap().0.version();
    let out = engine.call_tool(&agent(), name, &input).unwrap();
    assert!(
        out.is_error,
        "{name} {input} should fail, gave {}",
        out.text
    );
    assert_eq!(engine.memory_log(&agent()).unwrap().0.version(), before);
    out.text
}

fn memory(engine: &Engine, input: Value) -> String {
    ok(engine, "memory", input)
}

#[test]
fn anthropic_memory_tool_create_view_and_edit_texts_match_the_published_tool() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let text = memory(
        &e,
        json!({"command": "create", "path": "/memories/notes.md", "file_text": "alpha\nbeta\ngamma\n"}),
    );
    assert_eq!(text, "File created successfully at: /memories/notes.md");
    // It is a workspace file under memories/.
    assert_eq!(
        e.memory(&agent()).unwrap().content("memories/notes.md"),
        Some("alpha\nbeta\ngamma\n")
    );
    assert_eq!(
        memory(&e, json!({"command": "view", "path": "/memories/notes.md"})),
        "Here's the content of /memories/notes.md with line numbers:\n     1\talpha\n     2\tbeta\n     3\tgamma"
    );
    assert_eq!(
        memory(
            &e,
            json!({"command": "view", "path": "/memories/notes.md", "view_range": [2, -1]})
        ),
        "Here's the content of /memories/notes.md with line numbers:\n     2\tbeta\n     3\tgamma"
    );
    assert_eq!(
        memory(
            &e,
            json!({"command": "str_replace", "path": "/memories/notes.md", "old_str": "beta", "new_str": "BETA"})
        ),
        "The memory file has been edited.\n     1\talpha\n     2\tBETA\n     3\tgamma"
    );
    assert_eq!(
        memory(
            &e,
            json!({"command": "insert", "path": "/memories/notes.md", "insert_line": 0, "insert_text": "zero"})
        ),
        "The file /memories/notes.md has been edited."
    );
    assert_eq!(
        e.memory(&agent()).unwrap().content("memories/notes.md"),
        Some("zero\nalpha\nBETA\ngamma\n")
    );
    memory(
        &e,
        json!({"command": "insert", "path": "/memories/notes.md", "insert_line": 4, "insert_text": "last\n"}),
    );
    assert_eq!(
        e.memory(&agent()).unwrap().content("memories/notes.md"),
        Some("zero\nalpha\nBETA\ngamma\nlast\n")
    );
}

#[test]
fn anthropic_memory_tool_errors_are_the_published_texts_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    memory(
        &e,
        json!({"command": "create", "path": "/memories/a.md", "file_text": "x\ny\nx\n"}),
    );
    memory(
        &e,
        json!({"command": "create", "path": "/memories/b.md", "file_text": "b\n"}),
    );
    assert_eq!(
        refused(
            &e,
            "memory",
            json!({"command": "view", "path": "/memories/missing.md"})
        ),
        "The path /memories/missing.md does not exist. Please provide a valid path."
    );
    assert_eq!(
        refused(
            &e,
            "memory",
            json!({"command": "str_replace", "path": "/memories/a.md", "old_str": "zzz", "new_str": "w"})
        ),
        "No replacement was performed, old_str `zzz` did not appear verbatim in /memories/a.md."
    );
    assert_eq!(
        refused(
            &e,
            "memory",
            json!({"command": "str_replace", "path": "/memories/a.md", "old_str": "x", "new_str": "w"})
        ),
        "No replacement was performed. Multiple occurrences of old_str `x` in lines: 1, 3. Please ensure it is unique"
    );
    assert_eq!(
        refused(
            &e,
            "memory",
            json!({"command": "insert", "path": "/memories/a.md", "insert_line": 9, "insert_text": "w"})
        ),
        "Error: Invalid `insert_line` parameter: 9. It should be within the range of lines of the file: [0, 3]"
    );
    assert_eq!(
        refused(
            &e,
            "memory",
            json!({"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/b.md"})
        ),
        "Error: The destination /memories/b.md already exists"
    );
    // Paths outside /memories, traversal and encoded traversal name the path.
    for bad in [
        "/etc/passwd",
        "/memories/../MEMORY.md",
        "/memories/%2e%2e/MEMORY.md",
        "/memoriesX/a.md",
        "memories/a.md",
    ] {
        let text = refused(
            &e,
            "memory",
            json!({"command": "create", "path": bad, "file_text": "x"}),
        );
        assert!(text.contains(bad), "{text}");
    }
    // A file over the size limit is refused.
    let big = "x".repeat(MAX_FILE_BYTES + 1);
    let text = refused(
        &e,
        "memory",
        json!({"command": "create", "path": "/memories/big.md", "file_text": big}),
    );
    assert!(text.contains("over the limit"), "{text}");
    // A bad input names the problem.
    let text = refused(&e, "memory", json!({"command": "view"}));
    assert!(text.contains("missing field `path`"), "{text}");
}

#[test]
fn anthropic_memory_tool_lists_two_levels_and_deletes_and_renames_folders() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    for (path, text) in [
        ("/memories/a.md", "a".repeat(100)),
        ("/memories/p/b.md", "b".repeat(2048)),
        ("/memories/p/q/deep.md", "d".repeat(10)),
        ("/memories/node_modules/x.md", "n".into()),
    ] {
        memory(
            &e,
            json!({"command": "create", "path": path, "file_text": text}),
        );
    }
    assert_eq!(
        memory(&e, json!({"command": "view", "path": "/memories"})),
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:\n\
         2.1K\t/memories\n100B\t/memories/a.md\n2.0K\t/memories/p\n2.0K\t/memories/p/b.md\n10B\t/memories/p/q"
    );
    assert_eq!(
        memory(
            &e,
            json!({"command": "rename", "old_path": "/memories/p", "new_path": "/memories/r"})
        ),
        "Successfully renamed /memories/p to /memories/r"
    );
    let view = e.memory(&agent()).unwrap();
    assert!(view.files.contains_key("memories/r/q/deep.md"));
    assert!(!view.files.contains_key("memories/p/b.md"));
    assert_eq!(
        memory(&e, json!({"command": "delete", "path": "/memories/r"})),
        "Successfully deleted /memories/r"
    );
    let view = e.memory(&agent()).unwrap();
    assert!(!view.files.keys().any(|p| p.starts_with("memories/r")));
    assert!(view.files.contains_key("memories/a.md"));
    refused(
        &e,
        "memory",
        json!({"command": "delete", "path": "/memories"}),
    );
}

#[test]
fn a_user_cannot_delete_the_agents_shared_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    memory(
        &e,
        json!({"command": "create", "path": "/memories/team.md", "file_text": "shared\n"}),
    );
    let user = agent().with_user("u1").unwrap();
    let out = e
        .call_tool(
            &user,
            "memory",
            &json!({"command": "view", "path": "/memories/team.md"}),
        )
        .unwrap();
    assert!(out.text.ends_with("1\tshared"), "{}", out.text);
    let out = e
        .call_tool(
            &user,
            "memory",
            &json!({"command": "delete", "path": "/memories/team.md"}),
        )
        .unwrap();
    assert!(
        out.is_error && out.text.contains("shared memory"),
        "{}",
        out.text
    );
    // Editing it gives the user their own copy; the agent's stays.
    let out = e
        .call_tool(
            &user,
            "memory",
            &json!({"command": "str_replace", "path": "/memories/team.md", "old_str": "shared", "new_str": "mine"}),
        )
        .unwrap();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(
        e.memory(&user).unwrap().content("memories/team.md"),
        Some("mine\n")
    );
    assert_eq!(
        e.memory(&agent()).unwrap().content("memories/team.md"),
        Some("shared\n")
    );
}

fn as_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn mateclaw_workspace_tools_answer_in_the_seeds_json_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let w = as_json(&ok(
        &e,
        "write_workspace_memory_file",
        json!({"agentId": 1, "filename": "memory/2026-04-01.md", "content": "# 2026-04-01\n\nnote\n"}),
    ));
    assert_eq!(
        w,
        json!({"agentId": "a", "filename": "memory/2026-04-01.md", "created": true, "overwritten": false,
               "enabled": false, "bytesWritten": 19, "message": "Workspace memory file created"})
    );
    // Core files are enabled (injected) per the seed's defaults; new files are not.
    ok(
        &e,
        "write_workspace_memory_file",
        json!({"filename": "SOUL.md", "content": "calm\n"}),
    );
    ok(
        &e,
        "write_workspace_memory_file",
        json!({"filename": "AGENTS.md", "content": "be useful\n"}),
    );
    let w = as_json(&ok(
        &e,
        "write_workspace_memory_file",
        json!({"filename": "SOUL.md", "content": "calm and kind\n"}),
    ));
    assert_eq!(w["created"], json!(false));
    assert_eq!(w["overwritten"], json!(true));
    assert_eq!(w["enabled"], json!(true));
    assert_eq!(w["message"], json!("Workspace memory file overwritten"));

    let r = as_json(&ok(
        &e,
        "read_workspace_memory_file",
        json!({"filename": "SOUL.md"}),
    ));
    assert_eq!(r["content"], json!("calm and kind\n"));
    assert_eq!(r["fileSize"], json!(14));
    assert_eq!(r["enabled"], json!(true));
    assert_eq!(r["updateTime"], json!(now().to_rfc3339()));

    // List is sorted by sort order: AGENTS.md (0) before SOUL.md (1), then the rest.
    let l = as_json(&ok(&e, "list_workspace_memory_files", json!({})));
    let names: Vec<&str> = l["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["AGENTS.md", "SOUL.md", "memory/2026-04-01.md"]);
    assert_eq!(l["count"], json!(3));
    let l = as_json(&ok(
        &e,
        "list_workspace_memory_files",
        json!({"filenamePrefix": "memory/"}),
    ));
    assert_eq!(l["count"], json!(1));
    assert_eq!(
        l["files"][0],
        json!({"filename": "memory/2026-04-01.md", "enabled": false, "fileSize": 19, "updateTime": now().to_rfc3339()})
    );
}

#[test]
fn mateclaw_edit_replaces_once_or_all_and_refuses_ambiguity() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    ok(
        &e,
        "write_workspace_memory_file",
        json!({"filename": "MEMORY.md", "content": "tea; tea; coffee\n"}),
    );
    let text = refused(
        &e,
        "edit_workspace_memory_file",
        json!({"filename": "MEMORY.md", "oldText": "tea", "newText": "milk"}),
    );
    assert!(text.contains("occurs 2 times"), "{text}");
    let out = as_json(&ok(
        &e,
        "edit_workspace_memory_file",
        json!({"filename": "MEMORY.md", "oldText": "coffee", "newText": "cocoa"}),
    ));
    assert_eq!(
        out,
        json!({"agentId": "a", "filename": "MEMORY.md", "replacements": 1, "replaceAll": false,
               "fileSizeAfter": 16, "message": "Workspace memory file edited successfully"})
    );
    let out = as_json(&ok(
        &e,
        "edit_workspace_memory_file",
        json!({"filename": "MEMORY.md", "oldText": "tea", "newText": "milk", "replaceAll": true}),
    ));
    assert_eq!(out["replacements"], json!(2));
    assert_eq!(
        e.memory(&agent()).unwrap().content("MEMORY.md"),
        Some("milk; milk; cocoa\n")
    );
    refused(
        &e,
        "edit_workspace_memory_file",
        json!({"filename": "MEMORY.md", "oldText": "absent", "newText": "x"}),
    );
    refused(
        &e,
        "edit_workspace_memory_file",
        json!({"filename": "NOPE.md", "oldText": "a", "newText": "x"}),
    );
}

/// Seed 003's security restrictions: .md only, no absolute paths, no traversal.
#[test]
fn mateclaw_path_rules_reject_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    for (filename, why) in [
        ("notes.txt", "only .md files"),
        ("/etc/x.md", "absolute paths"),
        ("\\x.md", "absolute paths"),
        ("memory/../../x.md", "traversal"),
        ("memory/%2e%2e/x.md", "invalid path"),
    ] {
        let text = refused(
            &e,
            "write_workspace_memory_file",
            json!({"filename": filename, "content": "x"}),
        );
        assert!(text.contains(why) && text.contains(filename), "{text}");
    }
}

#[test]
fn bub_memory_tools_save_daily_recall_show_clear_and_forget() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    // Seed 001, 5.2: memory_save's result.
    assert_eq!(
        ok(&e, "memory_save", json!({"content": "User likes Python"})),
        "saved to long-term memory"
    );
    ok(
        &e,
        "memory.daily",
        json!({"content": "- Implemented tape memory zone"}),
    );
    ok(
        &e,
        "memory.daily",
        json!({"content": "- Went hiking", "date": "2026-03-30"}),
    );
    ok(
        &e,
        "memory.daily",
        json!({"content": "- Old note", "date": "2026-03-01"}),
    );
    let view = e.memory(&agent()).unwrap();
    assert_eq!(
        view.content("memory/2026-04-03.md"),
        Some("# 2026-04-03\n\n- Implemented tape memory zone\n")
    );
    // recall without a query: long-term memory and the last 7 days, newest first.
    let recall = ok(&e, "memory.recall", json!({}));
    assert!(recall.starts_with("## Long-term Memory\nUser likes Python"));
    let today = recall.find("memory/2026-04-03.md").unwrap();
    let earlier = recall.find("memory/2026-03-30.md").unwrap();
    assert!(today < earlier);
    assert!(!recall.contains("Old note"));
    assert!(ok(&e, "memory.recall", json!({"days": 40})).contains("Old note"));
    // With a query: the matching lines.
    assert_eq!(
        ok(&e, "memory.recall", json!({"query": "hiking"})),
        "memory/2026-03-30.md:3: - Went hiking"
    );
    let bad = refused(&e, "memory.daily", json!({"content": "x", "date": "03/30"}));
    assert!(bad.contains("\"03/30\""), "{bad}");
    let show = ok(&e, "memory.show", json!({}));
    assert!(show.contains("version 4, 4 file(s)"), "{show}");

    // forget: the named change leaves the view, the rest stays.
    let (log, _) = e.memory_log(&agent()).unwrap();
    let hiking = log.get(3).unwrap().id.0;
    let text = ok(&e, "memory.forget", json!({"ids": [hiking]}));
    assert!(text.starts_with("forgot 1 change(s)"), "{text}");
    let view = e.memory(&agent()).unwrap();
    assert!(view.content("memory/2026-03-30.md").is_none());
    assert!(view.content("MEMORY.md").is_some());
    let text = refused(&e, "memory.forget", json!({"ids": [999]}));
    assert!(text.contains("999"), "{text}");

    assert!(ok(&e, "memory.clear", json!({})).starts_with("memory cleared"));
    assert!(e.memory(&agent()).unwrap().files.is_empty());
    assert_eq!(ok(&e, "memory.clear", json!({})), "memory is already empty");
}

/// Seed 004: memory_search covers MEMORY.md, the last 30 days of daily notes and
/// SESSION-STATE.md, case-insensitively, as [{file, line, content}].
#[test]
fn qanot_memory_search_substring_covers_three_tiers_and_30_days() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    ok(
        &e,
        "memory.save",
        json!({"content": "# Memory\nUses FastAPI for the backend\n"}),
    );
    ok(
        &e,
        "memory.daily",
        json!({"content": "Discussed fastapi authentication", "date": "2026-03-20"}),
    );
    ok(
        &e,
        "memory.daily",
        json!({"content": "FastAPI was chosen long ago", "date": "2026-02-01"}),
    );
    ok(
        &e,
        "write_workspace_memory_file",
        json!({"filename": "SESSION-STATE.md", "content": "# SESSION-STATE.md -- Active Working Memory\n\n- **decision**: use FastAPI\n"}),
    );
    ok(
        &e,
        "write_workspace_memory_file",
        json!({"filename": "PROFILE.md", "content": "Loves FastAPI\n"}),
    );
    let found = as_json(&ok(&e, "memory_search", json!({"query": "FASTAPI"})));
    assert_eq!(
        found,
        json!([
            {"file": "MEMORY.md", "line": 2, "content": "Uses FastAPI for the backend"},
            {"file": "SESSION-STATE.md", "line": 3, "content": "- **decision**: use FastAPI"},
            {"file": "memory/2026-03-20.md", "line": 3, "content": "Discussed fastapi authentication"},
        ])
    );
    assert_eq!(
        as_json(&ok(
            &e,
            "memory_search",
            json!({"query": "nothing like this"})
        )),
        json!([])
    );
}

/// With an index, memory_search runs through it: words need not be adjacent, and a file's
/// old versions do not come back.
#[test]
fn qanot_memory_search_through_the_index_maps_hits_to_live_lines() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
    let e = engine(dir.path()).with_index(index).unwrap();
    ok(
        &e,
        "memory.save",
        json!({"content": "The deploy key rotates monthly\n"}),
    );
    ok(
        &e,
        "memory.save",
        json!({"content": "# Memory\nFavourite editor: Helix\nDeploy keys rotate every month\n"}),
    );
    ok(
        &e,
        "memory.daily",
        json!({"content": "Rotated the deploy key today", "date": "2026-04-01"}),
    );
    let found = as_json(&ok(
        &e,
        "memory_search",
        json!({"query": "when does the key rotate?"}),
    ));
    let files: Vec<(&str, u64)> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["file"].as_str().unwrap(), f["line"].as_u64().unwrap()))
        .collect();
    // The overwritten first version is not returned; both live files are, at their lines.
    assert!(files.contains(&("MEMORY.md", 3)), "{found}");
    assert!(files.contains(&("memory/2026-04-01.md", 3)), "{found}");
    assert!(
        !found.to_string().contains("rotates monthly"),
        "stale version returned: {found}"
    );
}

#[test]
fn the_registry_has_one_schema_per_tool_and_unknown_tools_are_refused() {
    let all = tools::registry();
    let mut names: Vec<String> = all.iter().map(|s| s.function_name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all.len());
    assert_eq!(all.len(), 12);
    for spec in &all {
        assert_eq!(spec.input_schema["type"], json!("object"), "{}", spec.name);
        assert!(
            spec.function_name()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{}",
            spec.name
        );
        // Every required field is one the tool refuses to run without.
        if let Some(required) = spec.input_schema["required"].as_array() {
            let dir = tempfile::tempdir().unwrap();
            let e = engine(dir.path());
            for field in required {
                let field = field.as_str().unwrap();
                if field == "command" {
                    continue;
                }
                let input = if spec.name == "memory" {
                    json!({"command": "create"})
                } else {
                    json!({})
                };
                let out = e.call_tool(&agent(), spec.name, &input).unwrap();
                assert!(out.is_error, "{} ran without {field}", spec.name);
                assert!(out.text.contains("missing field"), "{}", out.text);
            }
        }
    }
    assert_eq!(
        tools::find("memory").unwrap().anthropic(),
        json!({"type": "memory_20250818", "name": "memory"})
    );
    let dir = tempfile::tempdir().unwrap();
    let out = engine(dir.path())
        .call_tool(&agent(), "memory.delete_everything", &json!({}))
        .unwrap();
    assert!(out.is_error && out.text.contains("unknown tool"));
}

/// Issue 10: names a sync cannot write or read back (hidden, editor backups, over the file
/// system's 255 bytes a name, a NUL) and a file that would be a folder of another file (or
/// the other way round) are refused when the tool is called, naming the rule.
#[test]
fn names_sync_cannot_manage_are_refused_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let long = format!("/memories/{}.md", "n".repeat(297));
    for (path, rule) in [
        ("/memories/.notes.md", "hidden"),
        ("/memories/sub/.git/config", "hidden"),
        ("/memories/#draft.md", "editor"),
        ("/memories/backup.md~", "editor"),
        (long.as_str(), "255 bytes"),
        ("/memories/a\u{0}b.md", "control characters"),
    ] {
        let text = refused(
            &e,
            "memory",
            json!({"command": "create", "path": path, "file_text": "x"}),
        );
        assert!(text.contains(rule), "{path}: {text}");
    }
    let text = refused(
        &e,
        "write_workspace_memory_file",
        json!({"filename": ".notes.md", "content": "x"}),
    );
    assert!(
        text.contains("hidden") && text.contains(".notes.md"),
        "{text}"
    );

    // A file inside a file, and a file where a folder is.
    memory(
        &e,
        json!({"command": "create", "path": "/memories/x", "file_text": "x"}),
    );
    let text = refused(
        &e,
        "memory",
        json!({"command": "create", "path": "/memories/x/y.md", "file_text": "y"}),
    );
    assert_eq!(
        text,
        "Error: /memories/x is a file; /memories/x/y.md cannot be created inside it"
    );
    memory(
        &e,
        json!({"command": "create", "path": "/memories/p/q.md", "file_text": "q"}),
    );
    let text = refused(
        &e,
        "write_workspace_memory_file",
        json!({"filename": "memories/x/z.md", "content": "z"}),
    );
    assert!(text.contains("is a file"), "{text}");
    let text = refused(
        &e,
        "memory",
        json!({"command": "rename", "old_path": "/memories/x", "new_path": "/memories/p/q.md/x"}),
    );
    assert!(text.contains("is a file"), "{text}");
    refused(
        &e,
        "memory",
        json!({"command": "create", "path": "/memories/p", "file_text": "p"}),
    );
}
