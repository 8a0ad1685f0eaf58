//! The seeds' smaller edges through the real binary (issue 35, section 5): `sessions` shows
//! the time of the last message, `memory forget`/`undo`/`diff` take the versions `memory
//! versions` prints, a version names each file once, `files` output ends with a newline,
//! a read command on a new node of a PostgreSQL tape makes the node's data directory, and
//! Bub's `memory save --session` writes the session's memory zone (with the 4 KB warning).

use std::path::Path;

use crate::common::Run;
use chrono::{DateTime, Duration, Utc};
use memtape::memory::{Change, Op};
use memtape::{Engine, Message, Scope};
use memtape_postgres::testing::Scratch;

/// A session whose one message was written at `at` and whose consolidation pointer (an
/// event) was moved an hour later.
fn session_with_late_pointer(data: &Path, at: DateTime<Utc>) {
    let later = at + Duration::hours(1);
    let s = Scope::agent("default", "default")
        .unwrap()
        .with_session("s")
        .unwrap();
    let first = Engine::init(data).unwrap().with_clock(move || at);
    let ids = first
        .append_messages(&s, vec![Message::user("hi")])
        .unwrap();
    drop(first);
    let second = Engine::open(data).unwrap().with_clock(move || later);
    second.mark_consolidated(&s, ids[0].id).unwrap();
}

#[test]
fn sessions_show_the_time_of_the_last_message_not_of_the_pointer_event() {
    let r = Run::new_empty();
    let at: DateTime<Utc> = "2026-03-01T10:00:00Z".parse().unwrap();
    session_with_late_pointer(&r.dir.path().join("data"), at);
    let line = r.ok(&["sessions"]);
    assert!(line.contains("last 2026-03-01 10:00:00"), "{line}");
    let json = r.json(&["sessions", "--json"]);
    let s = &json[0];
    assert_eq!(s["last_consolidated"], 1, "{json}");
    let parse = |v: &serde_json::Value| v.as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
    assert_eq!(parse(&s["last_message_at"]), at, "{json}");
    // The entry time is still there, for what it is: the pointer event's.
    assert_eq!(parse(&s["last_at"]), at + Duration::hours(1), "{json}");
}

/// `memory versions` as (version, entry id, files) triples.
fn versions(r: &Run) -> Vec<(String, String, String)> {
    r.ok(&["memory", "versions"])
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_owned(), f[1].to_owned(), f[4].to_owned())
        })
        .collect()
}

#[test]
fn forget_undo_and_diff_take_the_versions_that_versions_prints() {
    let r = Run::new();
    r.ok(&["memory", "save", "fact a"]);
    // An entry between the versions, so version numbers and entry ids differ.
    r.ok(&["append", "s", "--role", "user", "--content", "hi"]);
    r.ok(&["memory", "save", "fact b"]);
    r.ok(&["memory", "save", "fact c"]);
    let v = versions(&r);
    assert_eq!(
        v.iter()
            .map(|x| (x.0.as_str(), x.1.as_str()))
            .collect::<Vec<_>>(),
        [("v1", "#1"), ("v2", "#3"), ("v3", "#4")]
    );
    // v2 (entry #3) is forgotten by its version...
    r.ok(&["memory", "forget", "v2"]);
    assert!(r.ok(&["memory", "diff", "v1", "v3"]).contains("+fact c"));
    // ...and v3 by its entry id as printed (#4).
    r.ok(&["memory", "forget", "#4"]);
    let memory = r.json(&["memory", "show", "--json"]);
    assert!(memory.to_string().contains("fact a"), "{memory}");
    // Undo takes the printed version too.
    r.ok(&["memory", "save", "fact d"]);
    let undone = r.ok(&["memory", "undo", "v1"]);
    assert!(undone.contains("back to version 1"), "{undone}");
    // What does not name a version is refused, naming the forms that do.
    let err = r.fails(&["memory", "forget", "v99"]);
    assert!(err.contains("there is no version v99"), "{err}");
    let err = r.fails(&["memory", "forget", "two"]);
    assert!(err.contains("neither a version (v3) nor"), "{err}");
    let err = r.fails(&["memory", "undo", "#4"]);
    assert!(err.contains("is an entry id; give the version"), "{err}");
    let err = r.fails(&["memory", "forget", "v18446744073709551616"]);
    assert!(err.contains("neither a version"), "{err}");
}

#[test]
fn an_undo_that_writes_a_file_and_sets_its_flags_names_it_once() {
    let r = Run::new();
    r.ok(&["files", "write", "notes.md", "one"]);
    r.ok(&["files", "write", "notes.md", "two"]);
    // Flags changed after v1 (as MateClaw's flags route does): undoing to v1 writes the
    // file and sets its flags, two ops on one file.
    let engine = Engine::open(&r.dir.path().join("data")).unwrap();
    let agent = Scope::agent("default", "default").unwrap();
    engine
        .change_memory(&agent, |_| {
            Ok(Some(Change::one(
                Op::Flags {
                    path: "notes.md".into(),
                    enabled: Some(true),
                    sort_order: Some(7),
                },
                "flags",
            )))
        })
        .unwrap();
    drop(engine);
    r.ok(&["memory", "undo", "v1"]);
    let v = versions(&r);
    let undo = v.last().unwrap();
    assert_eq!(undo.2, "notes.md", "{v:?}");
}

#[test]
fn files_output_ends_with_one_newline() {
    let r = Run::new();
    r.ok(&["files", "write", "notes.md", "no newline at the end"]);
    r.ok(&["files", "create", "/memories/todo.md", "no newline either"]);
    for args in [
        &["files", "list"][..],
        &["files", "list", "nothing"],
        &["files", "read", "notes.md"],
        &["files", "view", "/memories"],
        &["files", "view", "/memories/todo.md"],
    ] {
        let out = r.ok(args);
        assert!(
            out.ends_with('\n') && !out.ends_with("\n\n"),
            "{args:?}: {out:?}"
        );
    }
}

#[test]
fn a_read_command_on_a_new_node_of_a_postgres_tape_makes_its_data_directory() {
    let db = Scratch::new();
    let r = Run::new_empty();
    let first = ["--database", db.url()];
    let mut append = vec!["append", "s", "--role", "user", "--content", "hello there"];
    append.extend(first);
    r.ok(&append);
    // A second node: its data directory does not exist yet.
    let node = r.dir.path().join("node2");
    let node_dir = node.to_str().unwrap();
    let args = ["--database", db.url(), "--data-dir", node_dir];
    for command in [
        &["search", "hello"][..],
        &["sessions"],
        &["history", "s"],
        &["memory", "search", "hello"],
    ] {
        let all: Vec<&str> = command.iter().chain(&args).copied().collect();
        let out = r.ok(&all);
        assert!(!out.is_empty(), "{command:?} printed nothing");
    }
    assert!(node.join("index").is_dir(), "the node's index was built");
    // On SQLite the data directory is the store: a read command says how to make one.
    let err = r.fails(&["sessions", "--data-dir", r.path("nowhere").as_str()]);
    assert!(err.contains("run `memtape init`"), "{err}");
}

#[test]
fn memory_save_in_a_bub_session_writes_its_zone_and_warns_over_4_kb() {
    let r = Run::new();
    r.ok(&["start", "b"]);
    let seals = |r: &Run| {
        r.json(&["entries", "b", "--kind", "anchor", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["payload"]["name"] == "memory/seal")
            .count()
    };
    let before = seals(&r);
    r.ok(&["memory", "save", "Ada likes tea"]);
    assert_eq!(seals(&r), before, "no session named: the tape is untouched");
    let said = r.ok(&["memory", "save", "Ada likes green tea", "--session", "b"]);
    assert_eq!(said, "saved to long-term memory\n");
    assert_eq!(seals(&r), before + 1);
    r.ok(&["memory", "daily", "tea talk", "--session", "b"]);
    r.ok(&["memory", "clear", "--session", "b"]);
    assert_eq!(seals(&r), before + 3);
    let err = r.fails(&["memory", "save", "x", "--session", "nope"]);
    assert!(err.contains("no session nope"), "{err}");
    let long = "Ada likes green tea. ".repeat(250);
    let said = r.ok(&["memory", "save", &long, "--session", "b"]);
    assert!(
        said.contains("Warning: long-term memory is 5250 bytes, over the recommended 4096"),
        "{said}"
    );
    assert_eq!(seals(&r), before + 4);
}

/// nanobot issue #1042: a provider that sends tool-call arguments as a JSON object. nanobot
/// keeps the message as it came, so its session file has the object; memtape imports it
/// (history gives the model OpenAI's string) and exports the object back.
#[test]
fn nanobot_tool_arguments_given_as_an_object_come_back_as_an_object() {
    let r = Run::new();
    let lines = [
        r#"{"_type": "metadata", "key": "cli:1", "created_at": "2026-03-10T14:30:00.000000", "updated_at": "2026-03-10T14:30:02.000000", "metadata": {}, "last_archived": 0, "last_consolidated": 0}"#,
        r#"{"role": "user", "content": "weather?", "timestamp": "2026-03-10T14:30:00.000000"}"#,
        r#"{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Lisbon", "days": 2}}}, {"id": "c2", "type": "function", "function": {"name": "clock", "arguments": "{}"}}], "timestamp": "2026-03-10T14:30:01.000000"}"#,
        r#"{"role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "weather", "timestamp": "2026-03-10T14:30:02.000000"}"#,
        r#"{"role": "tool", "content": "14:30", "tool_call_id": "c2", "name": "clock", "timestamp": "2026-03-10T14:30:02.000000"}"#,
    ];
    let file = r.path("cli_1.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    r.ok(&["import", "--format", "nanobot", &file]);
    let history = r.json(&["history", "cli:1", "--json"]);
    assert_eq!(
        history[1]["tool_calls"][0]["function"]["arguments"], r#"{"city":"Lisbon","days":2}"#,
        "a model is sent OpenAI's string: {history}"
    );
    let exported = r.ok(&["export", "--format", "nanobot", "cli:1"]);
    let parse = |l: &str| serde_json::from_str::<serde_json::Value>(l).unwrap();
    let got: Vec<_> = exported.lines().map(parse).collect();
    let want: Vec<_> = lines.iter().map(|l| parse(l)).collect();
    assert_eq!(got, want, "the file comes out as it went in");
    // memtape's own field cannot be smuggled in by a file.
    let forged = r.path("forged.jsonl");
    std::fs::write(
        &forged,
        "{\"role\": \"user\", \"content\": \"x\", \"memtape:value_arguments\": [0]}\n",
    )
    .unwrap();
    let err = r.fails(&["import", "--format", "nanobot", &forged, "--session", "f"]);
    assert!(err.contains("memtape's own field"), "{err}");
}

/// A careless `memtape append` (no text, or `--content -` on an empty standard input) is
/// refused saying what to give, and nothing is stored; `-` reads standard input, as it does
/// for `memory save`.
#[test]
fn an_append_with_nothing_to_append_is_refused() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let r = Run::new();
    let err = r.fails(&["append", "s", "--role", "user"]);
    assert!(
        err.contains("nothing to append: give the text with --content"),
        "{err}"
    );
    let piped = |input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memtape"))
            .args(["append", "s", "--role", "user", "--content", "-"])
            .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let empty = piped("");
    assert!(!empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stderr).contains("standard input was empty"));
    assert_eq!(r.json(&["sessions", "--json"]), serde_json::json!([]));
    assert!(piped("from standard input").status.success());
    // An empty text given on purpose is taken.
    r.ok(&["append", "s", "--role", "user", "--content", ""]);
    let history = r.json(&["history", "s", "--json"]);
    assert_eq!(history[0]["content"], "from standard input", "{history}");
}
