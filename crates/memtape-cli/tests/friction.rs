//! Issue 10's first-user friction and CLI defects, each pinned by the real binary: one
//! error prefix, quiet broken pipes, escaped control characters, imports that say what
//! and where, validated tuning flags, missing sessions as errors, closed value sets in
//! help, help that fits 100 columns and lists only the options that apply, one JSON style.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::common::Run;
use serde_json::json;

/// `memtape ARGS --help` as text.
fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommand names a help text lists under "Commands:" (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect()
}

/// Every command path of the binary, depth first.
fn every_command(prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let args: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let text = help(&args);
    out.push(prefix.clone());
    for name in subcommands(&text) {
        let mut next = prefix.clone();
        next.push(name);
        every_command(next, out);
    }
}

#[test]
fn errors_are_prefixed_once() {
    let r = Run::new();
    // A refused memory tool: its model-facing text starts with "Error: ".
    let err = r.fails(&["files", "view", "/memories/nope.md"]);
    assert!(err.starts_with("memtape: error: "), "{err}");
    assert_eq!(err.to_lowercase().matches("error").count(), 1, "{err}");
    let err = r.fails(&["memory", "daily", ""]);
    assert_eq!(err.to_lowercase().matches("error").count(), 1, "{err}");
}

#[test]
fn broken_pipe_exits_quietly() {
    let r = Run::new();
    // One long message, so the output is far larger than a pipe's buffer.
    let file = r.path("long.jsonl");
    let line = json!({"role": "user", "content": "x".repeat(400_000)});
    std::fs::write(&file, format!("{line}\n")).unwrap();
    r.ok(&["import", "--format", "nanobot", &file, "--session", "long"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["history", "long", "--json"])
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Like `| head -c 10`: read a little, then close the pipe.
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(stderr, "", "a closed pipe is not an error to report");
    assert!(
        status.success() || status.code() == Some(141),
        "exit status {status}"
    );
}

#[test]
fn entries_escape_control_characters() {
    let r = Run::new();
    // A NUL cannot be passed as an argument, so the message arrives by import.
    let file = r.path("odd.jsonl");
    let line = json!({"role": "user", "content": "bell\u{7} nul\u{0} esc\u{1b}[31m red"});
    std::fs::write(&file, format!("{line}\n")).unwrap();
    r.ok(&["import", "--format", "nanobot", &file, "--session", "s"]);
    for args in [vec!["entries", "s"], vec!["history", "s"]] {
        let out = r.cmd(&args);
        assert!(out.status.success());
        let raw = out.stdout;
        assert!(
            !raw.iter().any(|&b| b < 0x20 && b != b'\n'),
            "{args:?} printed raw control bytes: {:?}",
            String::from_utf8_lossy(&raw)
        );
        let text = String::from_utf8(raw).unwrap();
        assert!(
            text.contains(r"bell\u{7} nul\u{0} esc\u{1b}[31m red"),
            "{text}"
        );
    }
    // JSON keeps the exact text.
    let json = r.json(&["history", "s", "--json"]);
    assert_eq!(json[0]["content"], "bell\u{7} nul\u{0} esc\u{1b}[31m red");
}

#[test]
fn import_says_what_was_imported_and_where() {
    let r = Run::new();
    let file = r.path("chat.jsonl");
    std::fs::write(
        &file,
        "{\"role\": \"user\", \"content\": \"hi\"}\n{\"role\": \"assistant\", \"content\": \"hello\"}\n",
    )
    .unwrap();
    let said = r.ok(&["import", "--format", "nanobot", &file, "--session", "c1"]);
    assert!(said.starts_with("imported 2 entries from "), "{said}");
    assert!(said.contains("chat.jsonl"), "{said}");
    assert!(said.contains("session c1"), "{said}");

    let empty = r.path("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let said = r.ok(&["import", "--format", "memtape", &empty]);
    assert!(
        said.starts_with("nothing imported: ") && said.contains("empty.jsonl"),
        "{said}"
    );
}

#[test]
fn tuning_flags_out_of_range_are_refused() {
    let r = Run::new();
    r.ok(&["append", "s", "--role", "user", "--content", "kept"]);
    for (flag, value) in [
        ("--bm25-weight", "5"),
        ("--bm25-weight", "NaN"),
        ("--bm25-weight", "-0.1"),
        ("--neighbour-weight", "inf"),
        ("--context-weight", "-1"),
        ("--scope-weight", "NaN"),
        ("--time-weight", "1e9"),
        ("--rrf-k", "0"),
        ("--candidates", "0"),
        ("--oversample", "0"),
    ] {
        let arg = format!("{flag}={value}");
        let err = r.fails(&["search", "kept", "--model", "none", &arg]);
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(err.contains(value), "{flag} {value}: {err}");
    }
    // In range: fine.
    let found = r.ok(&[
        "search",
        "kept",
        "--model",
        "none",
        "--bm25-weight",
        "1",
        "--time-weight",
        "3",
    ]);
    assert!(found.contains("kept"), "{found}");
}

#[test]
fn a_missing_session_is_an_error_naming_it() {
    let r = Run::new();
    r.ok(&["append", "real", "--role", "user", "--content", "hi"]);
    for args in [
        vec!["history", "reel"],
        vec!["entries", "reel"],
        vec!["context", "reel"],
        vec!["new", "reel"],
        vec!["export", "--format", "nanobot", "reel"],
    ] {
        let err = r.fails(&args);
        assert!(
            err.contains("no session reel") && err.contains("memtape sessions"),
            "{args:?}: {err}"
        );
    }
    // A session whose history is empty (all consolidated) is not an error.
    r.ok(&["consolidate", "real", "1"]);
    assert_eq!(r.ok(&["history", "real"]), "");
    assert_eq!(r.json(&["history", "real", "--json"]), json!([]));
}

#[test]
fn fixed_sets_are_listed_in_help_and_checked() {
    for (args, flag_values) in [
        (vec!["append"], "user, assistant, system, tool"),
        (vec!["bench", "locomo"], "bm25, vector, hybrid"),
        (vec!["search"], "bm25, vector, hybrid"),
        (vec!["search"], "message, tool_call, tool_result"),
        (vec!["search"], "minilm, wordllama, none"),
        (vec!["entries"], "message, tool_call, tool_result"),
        (vec!["import"], "memtape, nanobot, bub"),
        (vec!["export"], "memtape, nanobot, bub"),
        (vec!["context"], "mateclaw, qanot"),
        (vec!["context"], "day, hour, minute"),
        (vec!["sync"], "disk, tape"),
        (vec!["reindex"], "rrf, weighted"),
    ] {
        let text = help(&args);
        // clap lists a closed set either inline or, when the values are documented, one
        // per line.
        let inline = text.contains(&format!("[possible values: {flag_values}"));
        let listed = flag_values
            .split(", ")
            .all(|v| text.contains(&format!("- {v}:")) || text.contains(&format!("- {v}\n")));
        assert!(
            inline || listed,
            "{args:?} --help does not list {flag_values}:\n{text}"
        );
    }
    let r = Run::new();
    let err = r.cmd(&["search", "x", "--kind", "memo"]);
    assert_eq!(err.status.code(), Some(2), "clap rejects unknown kinds");
    let text = String::from_utf8(err.stderr).unwrap();
    assert!(text.contains("possible values"), "{text}");
}

#[test]
fn help_opens_with_what_memtape_is_and_fits_100_columns() {
    let top = help(&[]);
    assert!(
        top.starts_with("memtape: long-term memory for LLM agents"),
        "{top}"
    );
    let mut commands = Vec::new();
    every_command(Vec::new(), &mut commands);
    assert!(commands.len() > 30, "{commands:?}");
    for command in &commands {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        for line in help(&args).lines() {
            assert!(
                line.chars().count() <= 100,
                "{command:?} --help has a line of {} columns: {line}",
                line.chars().count()
            );
        }
    }
}

#[test]
fn help_lists_only_the_options_that_apply() {
    let fetch = help(&["models", "fetch"]);
    for absent in ["--tenant", "--agent", "--user", "--data-dir"] {
        assert!(!fetch.contains(absent), "models fetch lists {absent}");
    }
    assert!(fetch.contains("--model"), "{fetch}");
    let scan = help(&["wal", "scan"]);
    for absent in ["--tenant", "--model", "--data-dir"] {
        assert!(!scan.contains(absent), "wal scan lists {absent}");
    }
    let append = help(&["append"]);
    for present in ["--tenant", "--agent", "--user", "--data-dir"] {
        assert!(append.contains(present), "append lacks {present}");
    }
    assert!(!append.contains("--model "), "append lists --model");

    // Scope and data directory work before and after the subcommand, and from the
    // environment.
    let r = Run::new();
    r.ok(&[
        "--user",
        "bob",
        "append",
        "s",
        "--role",
        "user",
        "--content",
        "a",
    ]);
    r.ok(&[
        "append",
        "s",
        "--user",
        "bob",
        "--role",
        "user",
        "--content",
        "b",
    ]);
    let bob = r.json(&["history", "s", "--user", "bob", "--json"]);
    assert_eq!(bob.as_array().unwrap().len(), 2, "{bob}");
    let data = r.path("data");
    let other = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["--data-dir", &data, "sessions", "--user", "bob", "--json"])
        .env_remove("MEMTAPE_DATA_DIR")
        .output()
        .unwrap();
    assert!(other.status.success());
    let after = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["sessions", "--data-dir", &data, "--json"])
        .env_remove("MEMTAPE_DATA_DIR")
        .output()
        .unwrap();
    assert_eq!(other.stdout, after.stdout);
}

/// `memtape ARGS -h` (the short help) as text.
fn short_help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(args)
        .arg("-h")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} -h failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The retrieval tuning options of every command that takes them: listed in `--help` under
/// their own heading, after the everyday options; left out of `-h`; still taken.
#[test]
fn tuning_options_have_a_section_of_their_own() {
    const TUNING: [&str; 18] = [
        "--fusion",
        "--bm25-weight",
        "--rrf-k",
        "--candidates",
        "--context-weight",
        "--bm25-k1",
        "--bm25-b",
        "--embed-context",
        "--neighbour-weight",
        "--scope-weight",
        "--time-weight",
        "--speaker-weight",
        "--when-weight",
        "--update-weight",
        "--opener-weight",
        "--neighbour-length",
        "--exact-limit",
        "--oversample",
    ];
    for (command, everyday) in [
        (vec!["search"], ["--limit", "--data-dir"]),
        (vec!["serve"], ["--addr", "--model"]),
        (vec!["reindex"], ["--data-dir", "--model"]),
        (vec!["mcp"], ["--agent", "--model"]),
        (vec!["bench", "locomo"], ["--data", "--sweep"]),
    ] {
        let long = help(&command);
        let at = long
            .find("\nRetrieval tuning:\n")
            .unwrap_or_else(|| panic!("{command:?} --help has no tuning section:\n{long}"));
        let (before, section) = long.split_at(at);
        for option in TUNING {
            let listed = format!("{option} <");
            assert!(
                section.contains(&listed),
                "{command:?}: {option} not under the heading"
            );
            assert!(
                !before.contains(&listed),
                "{command:?}: {option} before the heading"
            );
        }
        let short = short_help(&command);
        for option in everyday {
            let listed = format!("{option} <");
            assert!(
                before.contains(&listed),
                "{command:?}: {option} not first:\n{long}"
            );
            assert!(
                !section.contains(&listed),
                "{command:?}: {option} among tuning"
            );
            assert!(
                short.contains(&listed),
                "{command:?} -h lacks {option}:\n{short}"
            );
        }
        for option in TUNING {
            assert!(
                !short.contains(option),
                "{command:?} -h lists {option}:\n{short}"
            );
        }
        assert!(short.contains("see more with '--help'"), "{short}");
    }
    let r = Run::new();
    r.ok(&["append", "s", "--role", "user", "--content", "kept"]);
    let found = r.ok(&[
        "search",
        "kept",
        "--model",
        "none",
        "--fusion",
        "rrf",
        "--bm25-b",
        "0.5",
        "--candidates",
        "20",
    ]);
    assert!(found.contains("kept"), "{found}");
}

/// `memtape --help` lists the options every command takes (-q, -v) and says where the
/// data lives and how the models are chosen, which each command takes as its own options;
/// -q and -v are taken after any command, but not together.
#[test]
fn top_level_help_says_where_the_data_lives_and_how_to_pick_the_model() {
    let top = help(&[]);
    for said in [
        "-q, --quiet",
        "-v, --verbose",
        "--data-dir DIR",
        "MEMTAPE_DATA_DIR",
        "--model MODEL",
        "MEMTAPE_MODEL",
        "minilm",
        "wordllama",
        "none (BM25 only)",
        "memtape models",
        "MEMTAPE_LLM_MODEL",
    ] {
        assert!(top.contains(said), "{said} missing from:\n{top}");
    }
    let r = Run::new();
    r.ok(&["sessions", "-v"]);
    r.ok(&["sessions", "--quiet"]);
    let both = r.cmd(&["sessions", "-q", "-v"]);
    assert_eq!(both.status.code(), Some(2));
    let err = String::from_utf8(both.stderr).unwrap();
    assert!(
        err.contains("--quiet") && err.contains("--verbose"),
        "{err}"
    );
}

#[test]
fn json_output_is_compact_when_piped() {
    let r = Run::new();
    r.ok(&["append", "s", "--role", "user", "--content", "hi"]);
    r.ok(&["memory", "save", "- likes tea"]);
    for args in [
        vec!["history", "s", "--json"],
        vec!["sessions", "--json"],
        vec!["entries", "s", "--json"],
        vec!["thread", "1", "--json"],
        vec!["memory", "show", "--json"],
        vec!["context", "s", "--json", "--dry-run"],
        vec!["search", "hi", "--model", "none", "--json"],
        vec!["bench", "context", "--turns", "3"],
    ] {
        let text = r.ok(&args);
        assert_eq!(
            text.lines().count(),
            1,
            "{args:?} is not one compact line:\n{text}"
        );
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
    }
}

#[test]
fn search_prints_scores_and_events_readably() {
    let r = Run::new();
    r.ok(&[
        "append",
        "s",
        "--role",
        "user",
        "--no-wal",
        "--content",
        "the teapot is blue",
    ]);
    r.ok(&["memory", "save", "The teapot lives in the kitchen."]);
    let out = r.ok(&["search", "teapot", "--model", "none"]);
    assert!(!out.contains("0.0000"), "{out}");
    assert!(!out.contains("{\""), "an event printed as raw JSON:\n{out}");
    assert!(
        out.contains("The teapot lives in the kitchen."),
        "the memory hit lost its text:\n{out}"
    );
    assert!(out.contains("user: the teapot is blue"), "{out}");
}

#[test]
fn quiet_silences_progress_and_summaries() {
    let r = Run::new();
    for args in [
        ["--quiet", "bench", "context", "--turns", "3"],
        ["bench", "context", "--turns", "3", "--quiet"],
    ] {
        let out = r.cmd(&args);
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
        assert!(!out.stdout.is_empty());
    }
}
