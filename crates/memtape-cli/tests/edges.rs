//! Input edges of the model-driven memory lifecycle, through the real binary and real SQLite
//! files: a memtape.toml too large or not UTF-8, a consolidation SIGKILLed while its model
//! thinks, and `memory.dropped` events arriving through `memtape import` (valid ones list
//! and restore; malformed ones are refused by line and field, and nothing is imported).

use crate::common;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::Run;
use crate::common::model::{chat, configure, save_memory, wait_for_call};
use memtape_scripted::{Answer, Scripted};
use serde_json::{Value, json};

/// The session's consolidation pointer (`last_consolidated` of `memtape sessions --json`).
fn pointer(r: &Run, session: &str) -> u64 {
    let sessions = r.json(&["sessions", "--json"]);
    let s = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == session)
        .unwrap_or_else(|| panic!("no session {session} in {sessions}"));
    s["last_consolidated"].as_u64().unwrap()
}

/// MEMORY.md as `memtape memory show --json` has it (`None`: there is no such file).
fn memory_md(r: &Run) -> Option<String> {
    let memory = r.json(&["memory", "show", "--json"]);
    memory["files"]["MEMORY.md"]["content"]
        .as_str()
        .map(str::to_owned)
}

/// How many messages `memtape history SESSION` still shows (those after the pointer).
fn history_len(r: &Run, session: &str) -> usize {
    r.json(&["history", session, "--json"])
        .as_array()
        .unwrap()
        .len()
}

/// Runs `memtape ARGS` like [`Run::cmd`], with `MEMTAPE_CONFIG` set to `config`.
fn with_config(r: &Run, config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(args)
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .env_remove("MEMTAPE_MODEL")
        .envs(common::no_model_settings())
        .env("MEMTAPE_CONFIG", config)
        .current_dir(r.dir.path())
        .output()
        .unwrap()
}

/// Every command that reads memtape.toml, on session `s1`.
const READS_CONFIG: &[&[&str]] = &[
    &["memory", "consolidate", "s1"],
    &["memory", "consolidate", "s1", "--all"],
    &["memory", "extract", "s1"],
    &["memory", "emerge"],
    &["new", "s1"],
    &["chat", "s1"],
];

/// What a store looks like from outside: its whole backup, the pointer, the history the
/// model would get, MEMORY.md and the model calls recorded.
fn snapshot(r: &Run) -> (String, u64, usize, Option<String>, Value) {
    (
        r.ok(&["export", "--all"]),
        pointer(r, "s1"),
        history_len(r, "s1"),
        memory_md(r),
        r.json(&["usage", "--json"]),
    )
}

/// A store with a session and a MEMORY.md, for the configuration tests.
fn store_with_memory() -> Run {
    let r = Run::new();
    r.ok(&["memory", "save", "# Memory\n- Ada lives in Oslo\n"]);
    chat(&r, "s1", 4);
    r
}

/// memtape.toml of `size` bytes: `head`, then comment lines up to the size.
fn padded_toml(head: &str, size: usize) -> Vec<u8> {
    let mut text = head.to_owned();
    while text.len() < size {
        let room = size - text.len();
        // A comment line is "#", padding and "\n"; a last single byte is a blank line.
        let line = match room {
            81.. => format!("#{}\n", "x".repeat(79)),
            2.. => format!("#{}\n", "x".repeat(room - 2)),
            _ => "\n".to_owned(),
        };
        text.push_str(&line);
    }
    assert_eq!(text.len(), size);
    text.into_bytes()
}

/// A memtape.toml over 1 MiB is refused before anything runs, by every command that reads
/// it, with an error naming the file and the limit; the store (backup, pointer, history,
/// MEMORY.md, recorded model calls) is exactly as before, and `/new` does not fall back to
/// archiving without the model (the session is not cleared). One byte less is read.
#[test]
fn a_config_over_one_mebibyte_is_refused_by_name_and_nothing_changes() {
    let r = store_with_memory();
    let server = Scripted::start(Vec::new());
    let head = format!(
        "[llm]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\ntimeout = 5\nmax_retries = 0\n",
        server.base
    );
    let path = r.dir.path().join("data/memtape.toml");
    std::fs::write(&path, padded_toml(&head, 1024 * 1024 + 1)).unwrap();
    let before = snapshot(&r);
    for args in READS_CONFIG {
        let err = r.fails(args);
        assert!(err.contains(&path.display().to_string()), "{args:?}: {err}");
        assert!(
            err.contains("is 1048577 bytes; a configuration file is at most 1048576"),
            "{args:?}: {err}"
        );
    }
    // The tape is append-only: whatever a command had written would still be there.
    assert_eq!(snapshot(&r), before);
    assert_eq!(server.requests(), 0, "the model was called");

    // The same file through MEMTAPE_CONFIG, elsewhere: that path is the one named.
    let elsewhere = r.dir.path().join("elsewhere.toml");
    std::fs::rename(&path, &elsewhere).unwrap();
    let out = with_config(&r, &elsewhere, &["memory", "consolidate", "s1", "--all"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(
        err.contains(&elsewhere.display().to_string()) && err.contains("at most 1048576"),
        "{err}"
    );
    assert_eq!(snapshot(&r), before);

    // Exactly 1 MiB is a configuration file: it is read, and the model is called.
    std::fs::write(&path, padded_toml(&head, 1024 * 1024)).unwrap();
    let err = r.fails(&["memory", "consolidate", "s1", "--all"]);
    assert!(!err.contains("at most 1048576"), "{err}");
    assert_eq!(server.requests(), 1, "{err}");
}

/// A memtape.toml that is not UTF-8 (Latin-1 text, UTF-16 as Windows editors save it) is
/// refused by every command that reads it, with an error naming the file and the cause; the
/// store is exactly as before and the model is never called.
#[test]
fn a_config_that_is_not_utf8_is_refused_by_name_and_nothing_changes() {
    let r = store_with_memory();
    let server = Scripted::start(vec![save_memory(
        "# Memory\n- Ada lives in Oslo\n- Plans a kayak trip\n",
    )]);
    let valid = format!(
        "[llm]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted\"\ntimeout = 5\nmax_retries = 0\n",
        server.base
    );
    let latin1: Vec<u8> = valid
        .replace("scripted", "caf\u{e9}")
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap())
        .collect();
    let mut utf16 = vec![0xff, 0xfe];
    utf16.extend(valid.encode_utf16().flat_map(u16::to_le_bytes));
    let path = r.dir.path().join("data/memtape.toml");
    let before = snapshot(&r);
    for bytes in [latin1, utf16] {
        assert!(std::str::from_utf8(&bytes).is_err());
        std::fs::write(&path, &bytes).unwrap();
        for args in READS_CONFIG {
            let err = r.fails(args);
            assert!(
                err.contains(&format!("{} is not UTF-8 text", path.display())),
                "{args:?}: {err}"
            );
        }
    }
    // The tape is append-only: whatever a command had written would still be there.
    assert_eq!(snapshot(&r), before);
    assert_eq!(server.requests(), 0, "the model was called");
    // The file made valid again is read: the model is called.
    std::fs::write(&path, valid).unwrap();
    let done = r.json(&["memory", "consolidate", "s1", "--all"]);
    assert_eq!(done["messages"], 4);
    assert_eq!(server.requests(), 1);
}

/// Runs `memtape ARGS` in the background of `r`, its output piped.
fn spawn(r: &Run, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(args)
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .env_remove("MEMTAPE_MODEL")
        .envs(common::no_model_settings())
        .current_dir(r.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to `limit` for `child`; a child still running then is killed and the test
/// fails with `why`.
fn finish_within(mut child: std::process::Child, limit: Duration, why: &str) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{why}: still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// A consolidation SIGKILLed while it waits for the model (the request is on the wire, the
/// model never answers) leaves the tape whole: SQLite's integrity check passes, every read
/// works, the backup is byte for byte the one taken before, the pointer and MEMORY.md are
/// unchanged, and the dead process's lock does not block the next run, which consolidates
/// and moves the pointer.
#[test]
fn a_consolidation_killed_while_the_model_thinks_leaves_the_tape_whole() {
    use std::os::unix::process::ExitStatusExt;

    let r = store_with_memory();
    chat(&r, "s1", 2);
    let server = Scripted::start(vec![
        Answer::Hang,
        save_memory("# Memory\n- Ada lives in Oslo\n- Plans a kayak trip\n"),
    ]);
    configure(&r, &server);
    let before = snapshot(&r);
    assert_eq!(before.1, 0);
    assert_eq!(before.2, 6);

    let mut child = spawn(&r, &["memory", "consolidate", "s1", "--all"]);
    wait_for_call(&server, &mut child);
    // The model holds the request: the process is inside the consolidation, lock held.
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.signal(), Some(9), "{:?}", out.status);
    assert!(out.stdout.is_empty());

    let data = r.dir.path().join("data");
    let store = memtape::SqliteStore::open_read_only(&data).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    drop(store);
    assert_eq!(
        snapshot(&r),
        before,
        "the killed consolidation changed the store"
    );
    assert!(
        r.ok(&["entries", "s1", "--kind", "event"]).is_empty(),
        "a pointer event was written"
    );

    // The lock file the dead process held is still there; its lock is not.
    assert_eq!(std::fs::read_dir(data.join("locks")).unwrap().count(), 1);
    let rerun = spawn(&r, &["memory", "consolidate", "s1", "--all"]);
    let out = finish_within(
        rerun,
        Duration::from_secs(8),
        "the rerun waits on a dead lock",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["messages"], 6);
    assert_eq!(done["memory_changed"], true);
    let through = done["through"].as_u64().unwrap();
    assert!(through > 0);
    assert_eq!(pointer(&r, "s1"), through);
    assert_eq!(history_len(&r, "s1"), 0);
    assert_eq!(
        memory_md(&r).unwrap(),
        "# Memory\n- Ada lives in Oslo\n- Plans a kayak trip\n"
    );
    assert_eq!(server.requests(), 2);
}

/// A store whose MEMORY.md lost a fact to a real consolidation (the model's rewrite left
/// it out), and that fact's `memory.dropped` line of `memtape export`.
fn store_with_a_dropped_fact() -> (Run, Value) {
    let r = Run::new();
    r.ok(&[
        "memory",
        "save",
        "# Memory\n## Health\n- Ada is allergic to penicillin\n- Ada lives in Oslo\n",
    ]);
    chat(&r, "s1", 4);
    let server = Scripted::start(vec![save_memory("# Memory\n- Ada lives in Oslo\n")]);
    configure(&r, &server);
    let done = r.json(&["memory", "consolidate", "s1", "--all"]);
    assert_eq!(done["dropped"], 1);
    let export = r.ok(&["export", "--format", "memtape"]);
    let dropped: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["payload"]["name"] == "memory.dropped")
        .collect();
    assert_eq!(dropped.len(), 1, "{export}");
    let line = dropped[0].clone();
    assert_eq!(
        line,
        dropped_line(line["id"].as_u64().unwrap(), &line["created_at"])
    );
    (r, line)
}

/// The `memory.dropped` line `memtape export` writes for the fact
/// [`store_with_a_dropped_fact`] loses (its shape is checked there), with `id` and `at`.
fn dropped_line(id: u64, at: &Value) -> Value {
    json!({"id": id, "scope": {"tenant": "default", "agent": "default"}, "kind": "event",
        "created_at": at, "payload": {"name": "memory.dropped", "data": {
            "path": "MEMORY.md", "text": "- Ada is allergic to penicillin",
            "section": "## Health", "version": 2, "by": "consolidation"}},
        "meta": {}})
}

/// A real `memory.dropped` event arriving through `memtape import`: with the rest of the
/// agent's export in a fresh store it is listed exactly as in the store it came from and
/// restores into MEMORY.md; alone, in a store with no MEMORY.md at all, it is listed as
/// dropped and its restore writes MEMORY.md.
#[test]
fn an_imported_dropped_fact_is_listed_and_restored() {
    let (origin, line) = store_with_a_dropped_fact();
    let listed = origin.ok(&["memory", "dropped", "--json"]);
    let id = line["id"].as_u64().unwrap().to_string();

    let whole = Run::new();
    let file = whole.path("agent.jsonl");
    std::fs::write(&file, origin.ok(&["export", "--format", "memtape"])).unwrap();
    let out = whole.ok(&["import", "--format", "memtape", &file]);
    assert!(out.starts_with("imported 9 entries"), "{out}");
    assert_eq!(whole.ok(&["memory", "dropped", "--json"]), listed);
    assert_eq!(memory_md(&whole), memory_md(&origin));
    assert!(
        whole
            .ok(&["memory", "restore", &id])
            .contains("restored into MEMORY.md"),
    );
    assert_eq!(
        memory_md(&whole).unwrap(),
        "# Memory\n- Ada lives in Oslo\n- Ada is allergic to penicillin\n"
    );
    let back: Value = serde_json::from_str(&whole.ok(&["memory", "dropped", "--json"])).unwrap();
    assert_eq!(back["present"], true);

    let alone = Run::new();
    let file = alone.path("dropped.jsonl");
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let out = alone.ok(&["import", "--format", "memtape", &file]);
    assert!(out.starts_with("imported 1 entries"), "{out}");
    assert_eq!(memory_md(&alone), None);
    let fact: Value = serde_json::from_str(&alone.ok(&["memory", "dropped", "--json"])).unwrap();
    assert_eq!(fact["id"], line["id"]);
    assert_eq!(fact["text"], "- Ada is allergic to penicillin");
    assert_eq!(fact["present"], false);
    assert!(
        alone
            .ok(&["memory", "restore", &id])
            .contains("restored into MEMORY.md")
    );
    assert_eq!(
        memory_md(&alone).unwrap(),
        "- Ada is allergic to penicillin\n"
    );
    assert!(
        alone
            .ok(&["memory", "restore", &id])
            .contains("already has")
    );
}

/// A malformed `memory.dropped` line (wrong types, missing or unknown fields, a NUL or a
/// line break in its text, a text over the 16 KiB limit, a path outside the memory, another
/// tenant's or agent's scope) is refused with an error naming the file, the line (or the
/// entry and its scope) and the cause, and the import is all or nothing as documented: the
/// valid message before it is not stored either, so the store is exactly as before.
#[test]
fn a_malformed_dropped_fact_is_refused_by_line_and_nothing_is_imported() {
    // The line a real consolidation exports (an_imported_dropped_fact_is_listed_and_restored
    // checks it is), spoiled one way at a time.
    let line = dropped_line(8, &json!("2026-03-10T14:31:00Z"));
    let message = json!({"id": 1, "scope": {"tenant": "default", "agent": "default", "session": "imported"},
        "kind": "message", "created_at": "2026-03-10T14:30:00Z",
        "payload": {"role": "user", "content": "a valid line before the bad one"}, "meta": {}});
    type Spoil = fn(&mut Value);
    let cases: &[(&str, Spoil, &[&str])] = &[
        (
            "text is a number",
            |v| v["payload"]["data"]["text"] = json!(42),
            &[
                "line 2",
                "memory.dropped",
                "invalid type: integer `42`, expected a string",
            ],
        ),
        (
            "version is a string",
            |v| v["payload"]["data"]["version"] = json!("two"),
            &[
                "line 2",
                "memory.dropped",
                "invalid type: string \"two\", expected u64",
            ],
        ),
        (
            "version is negative",
            |v| v["payload"]["data"]["version"] = json!(-1),
            &["line 2", "memory.dropped", "expected u64"],
        ),
        (
            "no by",
            |v| {
                v["payload"]["data"].as_object_mut().unwrap().remove("by");
            },
            &["line 2", "memory.dropped", "missing field `by`"],
        ),
        (
            "no path",
            |v| {
                v["payload"]["data"].as_object_mut().unwrap().remove("path");
            },
            &["line 2", "memory.dropped", "missing field `path`"],
        ),
        (
            "no data",
            |v| {
                v["payload"].as_object_mut().unwrap().remove("data");
            },
            &["line 2", "memory.dropped", "expected struct Dropped"],
        ),
        (
            "an unknown field",
            |v| v["payload"]["data"]["extra"] = json!(true),
            &["line 2", "memory.dropped", "unknown field `extra`"],
        ),
        (
            "NUL in the text",
            |v| v["payload"]["data"]["text"] = json!("- Ada is\u{0}allergic to penicillin"),
            &[
                "line 2",
                "memory.dropped",
                "the text is not one line of text",
            ],
        ),
        (
            "a line break in the section",
            |v| v["payload"]["data"]["section"] = json!("## Health\n- injected"),
            &[
                "line 2",
                "memory.dropped",
                "the section is not one line of text",
            ],
        ),
        (
            "a text over 16 KiB",
            |v| v["payload"]["data"]["text"] = json!(format!("- {}", "x".repeat(16 * 1024))),
            &[
                "line 2",
                "memory.dropped",
                "the text is 16386 bytes, more than 16384",
            ],
        ),
        (
            "a blank text",
            |v| v["payload"]["data"]["text"] = json!("   "),
            &["line 2", "memory.dropped", "the text is empty"],
        ),
        (
            "an empty by",
            |v| v["payload"]["data"]["by"] = json!(""),
            &["line 2", "memory.dropped", "(by)"],
        ),
        (
            "a path out of the memory",
            |v| v["payload"]["data"]["path"] = json!("../secret.md"),
            &["line 2", "invalid path \"../secret.md\""],
        ),
        (
            "an absolute path",
            |v| v["payload"]["data"]["path"] = json!("/etc/passwd"),
            &["line 2", "absolute paths are not allowed"],
        ),
        (
            "another tenant",
            |v| v["scope"]["tenant"] = json!("other"),
            &[
                "entry 8",
                "other/default",
                "outside the import's scope default/default",
            ],
        ),
        (
            "another agent",
            |v| v["scope"]["agent"] = json!("other"),
            &[
                "entry 8",
                "default/other",
                "outside the import's scope default/default",
            ],
        ),
    ];
    // The store they are imported into has a session and memory of its own.
    let r = Run::new();
    r.ok(&["memory", "save", "# Memory\n- Ada lives in Oslo\n"]);
    chat(&r, "s1", 1);
    let before = r.ok(&["export", "--all"]);
    let file = r.path("bad.jsonl");
    for (what, spoil, needles) in cases {
        let mut bad = line.clone();
        spoil(&mut bad);
        std::fs::write(&file, format!("{message}\n{bad}\n")).unwrap();
        let err = r.fails(&["import", "--format", "memtape", &file]);
        assert!(
            err.contains(&format!("importing {file} (nothing was imported)")),
            "{what}: {err}"
        );
        for needle in *needles {
            assert!(err.contains(needle), "{what}: {needle:?} is not in {err}");
        }
    }
    // The tape is append-only: whatever an import had stored would still be there (and
    // the next import into the session "imported" would have been refused as a mix).
    assert_eq!(r.ok(&["export", "--all"]), before);
    assert_eq!(r.ok(&["memory", "dropped", "--json"]), "");
    assert!(!r.ok(&["sessions"]).contains("imported"));
    // The valid line itself imports, into the same store: the cases failed on their fault.
    std::fs::write(&file, format!("{message}\n{line}\n")).unwrap();
    assert!(
        r.ok(&["import", "--format", "memtape", &file])
            .starts_with("imported 2 entries")
    );
    let listed: Value = serde_json::from_str(&r.ok(&["memory", "dropped", "--json"])).unwrap();
    assert_eq!(listed["text"], "- Ada is allergic to penicillin");
}
