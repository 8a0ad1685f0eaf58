//! `memtape chat` run non-interactively through the real binary against a scripted
//! OpenAI-compatible server on loopback: streamed replies, the memory tools run and kept
//! on the tape, the commands, Qanot's daily note, nanobot's /new through the model,
//! MateClaw's extraction on exit, and the emergency retry after context_length_exceeded.

use crate::common;
use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::Run;
use memtape_scripted::{
    Answer, Scripted, context_length_exceeded, stream_text, stream_tool_call, text, tool_call,
};
use serde_json::{Value, json};

fn configure(r: &Run, server: &Scripted) {
    let toml = format!(
        "[llm]\nbase_url = \"{}\"\nmodel = \"scripted\"\ntimeout = 5\nmax_retries = 0\n",
        server.base
    );
    std::fs::write(r.dir.path().join("data/memtape.toml"), toml).unwrap();
}

/// The text of each message of the session's history.
fn history_texts(r: &Run) -> Vec<String> {
    r.json(&["history", "s1", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Starts `memtape chat ARGS` on `r`'s data directory, its standard streams piped.
fn spawn_chat(r: &Run, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_memtape"))
        .arg("chat")
        .args(args)
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .envs(common::no_model_settings())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `memtape chat ARGS` with `input` on standard input; returns (stdout, stderr).
fn chat(r: &Run, args: &[&str], input: &str) -> (String, String) {
    let mut child = spawn_chat(r, args);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "chat failed: {stderr}");
    (stdout, stderr)
}

#[test]
fn a_conversation_uses_every_part_of_memory() {
    let r = Run::new();
    let server = Scripted::start(vec![
        // Turn 1: the model saves, then answers (streamed).
        stream_tool_call(
            "memory_save",
            r#"{"content": "- The user's name is Ada\n- Prefers window seats\n"}"#,
        ),
        stream_text("Saved, Ada!"),
        // Turn 2: a plain answer.
        stream_text("Your name is Ada."),
        // /new: nanobot's archive through save_memory.
        tool_call(
            "save_memory",
            json!({"history_entry": "[2026-03-10 14:30] Ada introduced herself.",
                   "memory_update": "- The user's name is Ada\n- Prefers window seats\n"}),
        ),
        // On exit: MateClaw's extraction.
        text(r#"{"should_update": false, "reason": "already known"}"#),
    ]);
    configure(&r, &server);
    let (stdout, stderr) = chat(
        &r,
        &["s1", "--timings", "--verbose"],
        "My name is Ada and I prefer window seats.\n/memory\nWhat is my name, please?\n/search window\n/undo\n/memory\n/new\n",
    );
    assert!(stdout.contains("Saved, Ada!"), "{stdout}");
    assert!(stdout.contains("Your name is Ada."), "{stdout}");
    assert!(
        stdout.contains("Prefers window seats"),
        "/memory shows it: {stdout}"
    );
    assert!(stdout.contains("memory is back to version"), "{stdout}");
    assert!(stdout.contains("New session started."), "{stdout}");
    assert!(stderr.contains("[tool] memory_save"), "{stderr}");
    assert!(
        stderr.contains("noted preference"),
        "the WAL saw it: {stderr}"
    );
    assert!(
        stderr.contains("[memory] the WAL saved 1 line of your message to MEMORY.md"),
        "{stderr}"
    );
    assert!(
        stderr.contains("extraction: nothing new (already known)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[timings] memory work per turn over 2 turns"),
        "{stderr}"
    );
    // The tools were offered, and the tool call and its result are on the tape.
    let first = server.body(0).unwrap();
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        offered.contains(&"memory_save") && offered.contains(&"memory_search"),
        "{offered:?}"
    );
    assert_eq!(first["stream"], true);
    let entries = r.json(&["entries", "s1", "--json"]);
    let kinds: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"tool_call") && kinds.contains(&"tool_result"),
        "{kinds:?}"
    );
    // The second call saw the tool's result.
    let second = server.body(1).unwrap().to_string();
    assert!(second.contains("tool"), "{second}");
    // Qanot's daily note, one entry per exchange.
    let memory = r.json(&["memory", "show", "--json"]);
    let daily = memory["files"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(p, _)| p.starts_with("memory/20"))
        .map(|(_, f)| f["content"].as_str().unwrap().to_owned())
        .unwrap();
    // The seed's heading, and no "..." after text that was not cut.
    assert!(daily.starts_with("# Daily Notes -- 20"), "{daily}");
    assert!(
        daily.contains("**User:** My name is Ada and I prefer window seats.\n"),
        "{daily}"
    );
    assert!(daily.contains("**Agent:** Saved, Ada!\n"), "{daily}");
    // Two exchanges wrote two entries; /undo took back the last change to memory, which
    // was the second one.
    assert_eq!(daily.matches("**User:**").count(), 1, "{daily}");
    assert!(!daily.contains("What is my name"), "{daily}");
    let log_versions = r.ok(&["memory", "versions"]);
    assert!(log_versions.contains("undo"), "{log_versions}");
    // /new archived and cleared.
    assert!(
        memory["files"]["HISTORY.md"]["content"]
            .as_str()
            .unwrap()
            .contains("Ada introduced herself")
    );
    assert_eq!(r.json(&["history", "s1", "--json"]), json!([]));
    let usage = r.json(&["usage", "--json"]).to_string();
    for purpose in ["consolidation", "extraction"] {
        assert!(usage.contains(purpose), "{usage}");
    }
}

/// A prompt the provider refuses as too long is rebuilt with MateClaw's emergency path
/// (only the last messages) and sent once more.
#[test]
fn context_length_exceeded_retries_once_with_the_last_messages() {
    let r = Run::new();
    for i in 0..6 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        r.ok(&[
            "append",
            "s1",
            "--role",
            role,
            "--content",
            &format!("earlier message {i}"),
            "--no-wal",
        ]);
    }
    let server = Scripted::start(vec![
        context_length_exceeded(),
        text("Short answer."),
        text(r#"{"should_update": false, "reason": "nothing"}"#),
    ]);
    configure(&r, &server);
    let (stdout, stderr) = chat(&r, &["s1", "--no-stream"], "And now?\n");
    assert!(stdout.contains("Short answer."), "{stdout}");
    assert!(stderr.contains("too long"), "{stderr}");
    let count = |n: usize| {
        server.body(n).unwrap()["messages"]
            .as_array()
            .unwrap()
            .len()
    };
    assert!(count(1) < count(0), "{} then {}", count(0), count(1));
    let last: Value = server.body(1).unwrap()["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "And now?");
}

/// A model that keeps failing: the turn is reported, the user's message stays on the tape,
/// and the chat goes on.
#[test]
fn a_failing_model_loses_nothing() {
    let r = Run::new();
    let server = Scripted::start(vec![
        Answer::Reply(500, Vec::new(), "{}".into()),
        stream_text("Back again."),
    ]);
    configure(&r, &server);
    let (stdout, stderr) = chat(&r, &["s1"], "first try\nsecond try\n");
    assert!(stderr.contains("error:"), "{stderr}");
    assert!(stdout.contains("Back again."), "{stdout}");
    assert_eq!(
        history_texts(&r),
        ["first try", "second try", "Back again."]
    );
}

/// A stream cut mid-way: what came is shown, the turn is reported as broken, no half
/// answer is stored as the assistant's, the user's message stays, and the next turn works.
#[test]
fn a_stream_cut_mid_way_stores_no_half_answer() {
    let r = Run::new();
    let server = Scripted::start(vec![
        Answer::Stream {
            events: vec![memtape_scripted::delta(json!({"content": "Half an ans"}))],
            cut: true,
        },
        stream_text("A whole answer."),
    ]);
    configure(&r, &server);
    let (stdout, stderr) = chat(&r, &["s1"], "tell me something\nagain please\n");
    assert!(stdout.contains("Half an ans"), "{stdout}");
    assert!(stderr.contains("broke"), "{stderr}");
    let history = r.json(&["history", "s1", "--json"]);
    let texts: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        texts,
        ["tell me something", "again please", "A whole answer."]
    );
}

/// A command's answer shows as soon as the command is read, not when the chat ends
/// (stdout was buffered and flushed only at exit: `/help` printed nothing until `/quit`).
#[test]
fn a_commands_answer_shows_before_the_next_line_is_read() {
    use std::io::{BufRead, BufReader};
    let r = Run::new();
    let server = Scripted::start(Vec::new());
    configure(&r, &server);
    let mut child = spawn_chat(&r, &["s1"]);
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    stdin.write_all(b"/help\n").unwrap();
    stdin.flush().unwrap();
    // Standard input stays open: the answer must come while the chat waits for more.
    let first = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("/help answered nothing while the chat was still running");
    assert!(first.starts_with("/new"), "{first}");
    stdin.write_all(b"/quit\n").unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// `memtape chat --help` names every variable that chooses the model.
#[test]
fn chat_help_lists_the_model_variables() {
    let out = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .args(["chat", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let vars: Vec<&str> = common::no_model_settings()
        .into_iter()
        .map(|(var, _)| var)
        .filter(|var| var.starts_with("MEMTAPE_LLM_"))
        .collect();
    assert_eq!(vars.len(), 6, "{vars:?}");
    for var in vars {
        assert!(help.contains(var), "{var} missing from:\n{help}");
    }
}

/// A model server that cannot be reached is named by its address, and the chat stops
/// with a failure rather than go on answering nothing; the message stays on the tape.
#[test]
fn an_unreachable_model_server_is_named_and_the_chat_fails() {
    let r = Run::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let toml = format!(
        "[llm]\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\ntimeout = 5\nmax_retries = 0\n"
    );
    std::fs::write(r.dir.path().join("data/memtape.toml"), toml).unwrap();
    let mut child = spawn_chat(&r, &["s1"]);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\nstill there?\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("http://127.0.0.1:{port}/v1")),
        "{stderr}"
    );
    assert_eq!(history_texts(&r), vec!["hello".to_owned()]);
}

/// Runs `memtape chat ARGS` on `r` with `input`, these variables set over the blanked
/// model settings; returns stderr.
fn chat_with_env(r: &Run, args: &[&str], vars: &[(&str, &str)], input: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtape"))
        .arg("chat")
        .args(args)
        .env("MEMTAPE_DATA_DIR", r.dir.path().join("data"))
        .envs(common::no_model_settings())
        .envs(vars.iter().copied())
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
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "chat failed: {stderr}");
    stderr
}

/// Without --verbose, stderr holds what the user must know (what was saved to memory) and
/// none of how memtape got there (what the WAL noted, the tool call, an extraction that
/// found nothing new or was skipped for too few messages, the banner in a pipe); --verbose
/// adds those; --quiet leaves nothing.
#[test]
fn internal_notes_show_only_with_verbose() {
    let turn = || {
        Scripted::start(vec![
            stream_tool_call(
                "memory_save",
                r#"{"content": "- The user's name is Ada\n"}"#,
            ),
            stream_text("Saved, Ada!"),
            text(r#"{"should_update": false, "reason": "already saved"}"#),
        ])
    };
    let said = "Remember that my name is Ada.\n";
    let internal = [
        "[tool] memory_save",
        "[memory] noted remember: ",
        "[memory] extraction: nothing new (already saved)",
        "memtape chat: ",
    ];
    let r = Run::new();
    let server = turn();
    configure(&r, &server);
    let (stdout, stderr) = chat(&r, &["s1"], said);
    assert!(stdout.contains("Saved, Ada!"), "{stdout}");
    assert!(
        stderr.contains("[memory] memory_save saved MEMORY.md"),
        "a saved memory is said: {stderr}"
    );
    for note in internal {
        assert!(!stderr.contains(note), "{note} shown: {stderr}");
    }

    let r = Run::new();
    let server = turn();
    configure(&r, &server);
    let (_, stderr) = chat(&r, &["s1", "--verbose"], said);
    assert!(
        stderr.contains("[memory] memory_save saved MEMORY.md"),
        "{stderr}"
    );
    for note in internal {
        assert!(stderr.contains(note), "{note} missing: {stderr}");
    }

    let r = Run::new();
    let server = turn();
    configure(&r, &server);
    let (stdout, stderr) = chat(&r, &["s1", "-q"], said);
    assert!(stdout.contains("Saved, Ada!"), "{stdout}");
    assert_eq!(stderr, "", "--quiet");

    // A chat too short for extraction: said only with --verbose.
    for (args, shown) in [(vec!["s1"], false), (vec!["s1", "-v"], true)] {
        let r = Run::new();
        let server = Scripted::start(vec![stream_text("Hello!")]);
        configure(&r, &server);
        let (_, stderr) = chat(&r, &args, "hello there\n");
        assert_eq!(
            stderr.contains("[memory] no extraction: 2 messages, fewer than 4"),
            shown,
            "{args:?}: {stderr}"
        );
    }
}

/// The banner says which model at which address, and where each came from: the
/// variables, memtape.toml (by its path), or the provider's default.
#[test]
fn the_banner_names_where_the_model_settings_came_from() {
    let r = Run::new();
    let server = Scripted::start(Vec::new());
    configure(&r, &server);
    let file = r.dir.path().join("data/memtape.toml");
    let stderr = chat_with_env(&r, &["s1", "--verbose"], &[], "/quit\n");
    assert!(
        stderr.contains(&format!(
            "with scripted at {} (model and address from {})",
            server.base,
            file.display()
        )),
        "{stderr}"
    );

    let stderr = chat_with_env(
        &r,
        &["s1", "--verbose"],
        &[("MEMTAPE_LLM_MODEL", "from-env")],
        "/quit\n",
    );
    assert!(
        stderr.contains(&format!(
            "with from-env at {} (model from MEMTAPE_LLM_MODEL, address from {})",
            server.base,
            file.display()
        )),
        "{stderr}"
    );

    std::fs::remove_file(&file).unwrap();
    let stderr = chat_with_env(
        &r,
        &["s1", "--verbose"],
        &[
            ("MEMTAPE_LLM_MODEL", "from-env"),
            ("MEMTAPE_LLM_BASE_URL", &server.base),
        ],
        "/quit\n",
    );
    assert!(
        stderr.contains("(model from MEMTAPE_LLM_MODEL, address from MEMTAPE_LLM_BASE_URL)"),
        "{stderr}"
    );
    // No address anywhere: the provider's own (nothing is sent before the first turn).
    let stderr = chat_with_env(
        &r,
        &["s1", "--verbose"],
        &[("MEMTAPE_LLM_MODEL", "from-env")],
        "/quit\n",
    );
    assert!(
        stderr.contains(
            "with from-env at https://api.openai.com/v1 (model from MEMTAPE_LLM_MODEL, the \
             provider's default address)"
        ),
        "{stderr}"
    );
}

/// An Anthropic Messages reply of `text`.
fn anthropic_text(text: &str) -> Answer {
    memtape_scripted::ok(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 3}
    }))
}

/// Issue 35 §2: with the Anthropic provider, `memtape chat --tools all` offers the memory
/// tool as `memory_20250818` (with its beta) to a model that has it, and as a JSON-schema
/// tool when memtape.toml's `memory_tool = "schema"` says so; the system text carries the
/// memory skill.
#[test]
fn chat_offers_anthropics_memory_tool_natively_to_claude() {
    let r = Run::new();
    let server = Scripted::start(vec![anthropic_text("Hello!"), anthropic_text("Hi again.")]);
    let toml = |extra: &str| {
        format!(
            "[llm]\nprovider = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"claude-sonnet-4-5\"\n\
             timeout = 5\nmax_retries = 0\n{extra}",
            server.base.trim_end_matches("/v1")
        )
    };
    std::fs::write(r.dir.path().join("data/memtape.toml"), toml("")).unwrap();
    let (stdout, _) = chat(
        &r,
        &["s1", "--tools", "all", "--no-stream"],
        "hello there\n",
    );
    assert!(stdout.contains("Hello!"), "{stdout}");
    let (beta, body) = {
        let seen = server.seen.lock().unwrap();
        let beta = seen[0]
            .headers
            .iter()
            .find(|(k, _)| k == "anthropic-beta")
            .map(|(_, v)| v.clone());
        (beta, seen[0].body.clone())
    };
    assert_eq!(beta.as_deref(), Some("context-management-2025-06-27"));
    let tools = body["tools"].as_array().unwrap();
    assert!(
        tools.contains(&json!({"type": "memory_20250818", "name": "memory"})),
        "{tools:?}"
    );
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "memory_search" && t["input_schema"].is_object()),
        "{tools:?}"
    );
    assert!(
        body["system"].as_str().unwrap().contains("Rule 7"),
        "{body}"
    );
    // Forced to the JSON-schema form.
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        toml("memory_tool = \"schema\"\n"),
    )
    .unwrap();
    chat(
        &r,
        &["s2", "--tools", "all", "--no-stream"],
        "hello again\n",
    );
    let seen = server.seen.lock().unwrap();
    assert!(seen[1].headers.iter().all(|(k, _)| k != "anthropic-beta"));
    let memory = seen[1].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "memory")
        .cloned()
        .unwrap();
    assert!(
        memory.get("type").is_none() && memory["input_schema"].is_object(),
        "{memory}"
    );
}

/// Issue 35 §2: MateClaw's trigger source is the caller's: `memtape chat --source cron`
/// (a chat a scheduled task runs from a pipe) gets no extraction on exit while
/// `skip_cron` is on; nothing of it goes to the model beyond the conversation.
#[test]
fn a_cron_chat_is_not_analysed_on_exit() {
    let r = Run::new();
    let server = Scripted::start(vec![stream_text("Done."), stream_text("Done again.")]);
    configure(&r, &server);
    let said =
        "Run the nightly report on the Falcon project, please.\nAnd mail it to the team lead.\n";
    let (_, stderr) = chat(&r, &["s1", "--source", "cron", "--verbose"], said);
    assert!(
        stderr.contains("[memory] no extraction: a scheduled task's conversation"),
        "{stderr}"
    );
    assert_eq!(server.requests(), 2, "the two turns only");
    let err = r.fails(&["chat", "s1", "--source", "mail"]);
    assert!(err.contains("web, channel or cron"), "{err}");
}
