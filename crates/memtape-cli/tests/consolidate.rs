//! The model-driven lifecycle through the real binary: `memtape.toml`, `memtape memory
//! consolidate` against a scripted OpenAI-compatible server on loopback (JSON out, a
//! non-zero exit with nothing changed on failure), `/new` with the model, the dropped-fact
//! commands, and the consolidation lock holding between two processes.

use crate::common;
use std::time::{Duration, Instant};

use crate::common::Run;
use crate::common::model::{chat, configure, save_memory};
use memtape_scripted::{Answer, Scripted, text};
use serde_json::{Value, json};

#[test]
fn consolidate_without_a_model_says_how_to_configure_one() {
    let r = Run::new();
    chat(&r, "s1", 2);
    let err = r.fails(&["memory", "consolidate", "s1"]);
    assert!(err.contains("no model is configured"), "{err}");
    assert!(err.contains("memtape.toml"), "{err}");
    // A bad file is named with its key; nothing runs.
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        "[llm]\nmodle = \"x\"\n",
    )
    .unwrap();
    let err = r.fails(&["memory", "consolidate", "s1"]);
    assert!(err.contains("modle"), "{err}");
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        "[lifecycle]\nmemory_window = 1\n",
    )
    .unwrap();
    let err = r.fails(&["memory", "consolidate", "s1"]);
    assert!(err.contains("memory_window"), "{err}");
}

#[test]
fn consolidate_prints_what_it_did_and_changes_nothing_on_failure() {
    let r = Run::new();
    chat(&r, "s1", 6);
    let server = Scripted::start(vec![
        text("I will not call tools."),
        save_memory("# Memory\n- Plans a kayak trip\n"),
    ]);
    configure(&r, &server);
    let err = r.fails(&["memory", "consolidate", "s1", "--all"]);
    assert!(err.contains("did not call save_memory"), "{err}");
    assert_eq!(
        r.json(&["history", "s1", "--json"])
            .as_array()
            .unwrap()
            .len(),
        6
    );

    let done = r.json(&["memory", "consolidate", "s1", "--all"]);
    assert_eq!(done["memory_changed"], true);
    assert_eq!(done["messages"], 6);
    assert_eq!(
        done["history_entry"],
        "[2026-03-10 14:30] Planned a kayak trip."
    );
    assert!(done["through"].as_u64().unwrap() > 0);
    assert_eq!(r.json(&["history", "s1", "--json"]), json!([]));
    let memory = r.json(&["memory", "show", "--json"]);
    assert_eq!(
        memory["files"]["MEMORY.md"]["content"],
        "# Memory\n- Plans a kayak trip\n"
    );
    // Both calls are counted, the failed one with its error.
    let usage = r.json(&["usage", "--json"]);
    let text = usage.to_string();
    assert!(text.contains("consolidation"), "{text}");
    assert!(text.contains("scripted"), "{text}");
}

#[test]
fn a_dropped_fact_is_listed_and_restored_from_the_command_line() {
    let r = Run::new();
    r.ok(&[
        "memory",
        "save",
        "# Memory\n- Ada is allergic to penicillin\n- Ada lives in Oslo\n",
    ]);
    chat(&r, "s1", 4);
    let server = Scripted::start(vec![save_memory("# Memory\n- Ada lives in Oslo\n")]);
    configure(&r, &server);
    let done = r.json(&["memory", "consolidate", "s1", "--all"]);
    assert_eq!(done["dropped"], 1);
    let listed = r.ok(&["memory", "dropped", "--json"]);
    let line: Value = serde_json::from_str(listed.lines().next().unwrap()).unwrap();
    assert_eq!(line["text"], "- Ada is allergic to penicillin");
    assert_eq!(line["present"], false);
    let id = line["id"].as_u64().unwrap().to_string();
    let table = r.ok(&["memory", "dropped"]);
    assert!(
        table.contains("dropped") && table.contains("penicillin"),
        "{table}"
    );
    assert!(
        r.ok(&["memory", "restore", &id])
            .contains("restored into MEMORY.md")
    );
    let memory = r.json(&["memory", "show", "--json"]);
    assert!(
        memory["files"]["MEMORY.md"]["content"]
            .as_str()
            .unwrap()
            .contains("penicillin")
    );
    assert!(r.ok(&["memory", "restore", &id]).contains("already has"));
    // An id that is not a dropped fact is refused by name.
    let err = r.fails(&["memory", "restore", "1"]);
    assert!(err.contains("not a dropped fact"), "{err}");
}

/// `memtape new` with a model archives through save_memory; when the model fails, the
/// session is not cleared.
#[test]
fn new_with_a_model_archives_through_save_memory() {
    let r = Run::new();
    chat(&r, "s1", 4);
    let server = Scripted::start(vec![
        text("no tools today"),
        save_memory("# Memory\n- Plans a kayak trip\n"),
    ]);
    configure(&r, &server);
    let err = r.fails(&["new", "s1"]);
    assert!(err.contains("not cleared"), "{err}");
    assert_eq!(
        r.json(&["history", "s1", "--json"])
            .as_array()
            .unwrap()
            .len(),
        4
    );
    let out = r.ok(&["new", "s1"]);
    assert!(
        out.contains("archived 4 messages to HISTORY.md and MEMORY.md with the model"),
        "{out}"
    );
    assert_eq!(r.json(&["history", "s1", "--json"]), json!([]));
}

/// The consolidation lock holds between processes: while one `memtape memory consolidate`
/// waits on a slow model, `memtape new` in another process waits for it, then finds
/// nothing left to archive (it did not archive the same messages twice).
#[test]
fn the_consolidation_lock_holds_between_processes() {
    let r = Run::new();
    chat(&r, "s1", 4);
    let server = Scripted::start(vec![Answer::Delayed(
        Duration::from_millis(1500),
        Box::new(save_memory("# Memory\n- Plans a kayak trip\n")),
    )]);
    configure(&r, &server);
    let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["memory", "consolidate", "s1", "--all"])
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .envs(common::no_model_settings())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while server.requests() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the first process never called"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let waited = Instant::now();
    let out = r.ok(&["new", "s1"]);
    let waited = waited.elapsed();
    assert!(first.wait().unwrap().success());
    assert!(
        waited >= Duration::from_millis(800),
        "/new ran beside the consolidation ({waited:?})"
    );
    assert!(out.contains("nothing to archive"), "{out}");
    assert_eq!(
        server.requests(),
        1,
        "the messages were sent to the model once"
    );
}

/// `memory extract` and `memory emerge` through the binary, and a prompt template
/// overridden by the agent's own `prompts/NAME.md`.
#[test]
fn extract_emerge_and_prompt_overrides() {
    let r = Run::new();
    chat(&r, "s1", 4);
    let reply = |v: Value| text(&v.to_string());
    let server = Scripted::start(vec![
        reply(
            json!({"should_update": true, "daily_entry": "## 10:00 Planned kayaking", "reason": "plan"}),
        ),
        reply(
            json!({"should_update": true, "memory_content": "# Memory\n- Kayaks\n", "reason": "recurs"}),
        ),
        reply(json!({"should_update": false, "reason": "override seen"})),
    ]);
    configure(&r, &server);
    let run = r.json(&["memory", "extract", "s1"]);
    assert_eq!(run["should_update"], true);
    assert_eq!(
        run["changed"][0].as_str().unwrap().len(),
        "memory/2026-01-01.md".len()
    );
    let run = r.json(&["memory", "emerge", "--days", "3"]);
    assert_eq!(run["changed"], json!(["MEMORY.md"]));
    let prompt = server.body(1).unwrap()["messages"][1]["content"].to_string();
    assert!(
        prompt.contains("Daily notes of the last 3 days"),
        "{prompt}"
    );

    let list = r.ok(&["memory", "prompts"]);
    assert_eq!(
        list.lines().count(),
        memtape::prompts::TEMPLATES.len(),
        "{list}"
    );
    assert!(
        list.contains("extraction-user\t{today} {profile}"),
        "{list}"
    );
    r.ok(&[
        "files",
        "write",
        "prompts/extraction-user.md",
        "Our own words. Transcript: {transcript}",
    ]);
    assert!(
        r.ok(&["memory", "prompts"])
            .contains("prompts/extraction-user.md")
    );
    assert_eq!(
        r.ok(&["memory", "prompts", "extraction-user"]),
        "Our own words. Transcript: {transcript}\n"
    );
    let err = r.fails(&["memory", "prompts", "nope"]);
    assert!(err.contains("extraction-user"), "{err}");
    r.json(&["memory", "extract", "s1"]);
    let sent = server.body(2).unwrap()["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        sent.starts_with("Our own words. Transcript: User: message 0"),
        "{sent}"
    );
}

/// Every memtape.toml of the README parses and validates as written: the model's (which
/// then stops at the key variable it names, not set here) and the retention policies'.
#[test]
fn the_readme_configuration_file_is_valid() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let mut blocks: Vec<String> = Vec::new();
    let mut lines = readme.lines();
    while lines.any(|l| l.starts_with("```toml")) {
        let block = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .map(|l| format!("{l}\n"))
            .collect();
        blocks.push(block);
    }
    let r = Run::new();
    chat(&r, "s1", 2);
    let config = r.dir.path().join("data/memtape.toml");
    let model = blocks
        .iter()
        .find(|b| b.contains("[lifecycle.emergence]"))
        .unwrap_or_else(|| panic!("{blocks:?}"));
    std::fs::write(&config, model).unwrap();
    let err = r.fails(&["memory", "consolidate", "s1"]);
    assert!(err.contains("OLLAMA_API_KEY"), "{err}");
    let retention = blocks
        .iter()
        .find(|b| b.contains("[retention]"))
        .unwrap_or_else(|| panic!("{blocks:?}"));
    std::fs::write(&config, retention).unwrap();
    let shown = r.json(&["retention", "show"]);
    assert_eq!(shown["effective"]["messages_days"], 90, "{shown}");
}

/// Issue 35 §2: MateClaw's trigger source on `memory extract --source`: as the
/// post-conversation trigger, a scheduled task's conversation (`cron`) is skipped while
/// `skip_cron` is on, before anything is sent; another source runs with every pre-check.
#[test]
fn extract_with_a_trigger_source_follows_the_seeds_skip_rules() {
    let r = Run::new();
    chat(&r, "s1", 4);
    let reply = json!({"should_update": false, "reason": "nothing new"});
    let server = Scripted::start(vec![text(&reply.to_string())]);
    configure(&r, &server);
    let run = r.json(&["memory", "extract", "s1", "--source", "cron"]);
    assert_eq!(run["skipped"], "a scheduled task's conversation", "{run}");
    assert_eq!(server.requests(), 0);
    let run = r.json(&["memory", "extract", "s1", "--source", "channel"]);
    assert!(run.get("skipped").is_none(), "{run}");
    assert_eq!(run["reason"], "nothing new");
    assert_eq!(server.requests(), 1);
    let err = r.fails(&["memory", "extract", "s1", "--source", "email"]);
    assert!(err.contains("web, channel or cron"), "{err}");
}
