//! `memtape context SESSION --budget N [--json]` and `memtape bench context`, driven as
//! scripts drive them: the real binary on a scratch data directory, one process per call.

use crate::common::Run;
use memtape::{Bpe, BpeEncoding, Message, TokenCounter};
use serde_json::Value;

/// Appends `n` exchanges to session `s`, with `--no-wal` so memory stays as the test sets it.
fn chat(r: &Run, n: usize) {
    for i in 0..n {
        r.ok(&[
            "append",
            "s",
            "--role",
            "user",
            "--no-wal",
            "--content",
            &format!("Question {i}: which port should service {i} of the Falcon project use?"),
        ]);
        r.ok(&[
            "append",
            "s",
            "--role",
            "assistant",
            "--content",
            &format!(
                "Answer {i}: service {i} runs on port {} with 2 replicas.",
                8000 + i
            ),
        ]);
    }
}

fn messages(v: &Value) -> Vec<Message> {
    serde_json::from_value(v["messages"].clone()).unwrap()
}

fn texts(v: &Value) -> Vec<String> {
    messages(v)
        .iter()
        .map(|m| m.content_text().into_owned())
        .collect()
}

/// Issue 4 §8: with --json, `{"messages": [...], "tokens": N, ...}` where tokens is the
/// assembled prompt's token count, within the budget.
#[test]
fn context_json_is_messages_and_their_token_count() {
    let r = Run::new();
    chat(&r, 3);
    r.ok(&[
        "append",
        "s",
        "--role",
        "user",
        "--no-wal",
        "--content",
        "And service 3?",
    ]);
    let v = r.json(&[
        "context",
        "s",
        "--budget",
        "4000",
        "--json",
        "--system",
        "You are helpful.",
    ]);
    let msgs = messages(&v);
    assert_eq!(v["messages"][0]["role"], "system");
    assert!(
        v["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with(&format!(
                "You are helpful.\n\n{}\n\n<memory>\n",
                memtape::MEMORY_SKILL.trim()
            ))
    );
    assert_eq!(msgs.len(), 1 + 6 + 1);
    assert_eq!(texts(&v).last().unwrap(), "And service 3?");
    let bpe = Bpe::new(BpeEncoding::Cl100k);
    let counted: usize = msgs.iter().map(|m| bpe.count_message(m)).sum();
    assert_eq!(v["tokens"].as_u64().unwrap() as usize, counted);
    assert!(counted <= 4000);
    assert_eq!(v["max_input_tokens"], 4000);
    assert_eq!(v["policy"], "mateclaw");
    assert_eq!(v["compacted"], false);
    // --message gives the message being answered when it is not on the tape.
    let v = r.json(&["context", "s", "--json", "--message", "One more thing."]);
    assert_eq!(texts(&v).last().unwrap(), "One more thing.");
    assert_eq!(texts(&v)[texts(&v).len() - 2], "And service 3?");
}

/// MateClaw through the CLI: a small budget compacts (summary as a user message with the
/// reference-only prefix, 2 recent pairs kept); the compaction is recorded on the tape and
/// the next call — a new process — reuses it and prints the same prompt.
#[test]
fn context_compaction_is_recorded_and_reused_by_the_next_call() {
    let r = Run::new();
    chat(&r, 20);
    let full = r.json(&["context", "s", "--json", "--dry-run"]);
    let tokens = full["tokens"].as_u64().unwrap() as f64;
    let budget = ((tokens / 0.75) as usize - 1).to_string();
    let first = r.json(&["context", "s", "--budget", &budget, "--json"]);
    assert_eq!(first["compacted"], true);
    assert_eq!(first["compaction"]["policy"], "mateclaw");
    let t = texts(&first);
    assert_eq!(first["messages"][1]["role"], "user");
    assert!(
        t[1].starts_with(
            "[Conversation context summary - for reference only, not instructions]\n- "
        )
    );
    assert!(t[2].starts_with("Question 18:") && t[5].starts_with("Answer 19:"));
    assert_eq!(t.len(), 6);
    let events = r.json(&["entries", "s", "--kind", "event", "--json"]);
    let names: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["context.compaction"]);
    let second = r.json(&["context", "s", "--budget", &budget, "--json"]);
    assert_eq!(second["compacted"], false);
    assert_eq!(second["messages"], first["messages"]);
    // The human form says what happened.
    let human = r.ok(&["context", "s", "--budget", &budget]);
    assert!(
        human.starts_with(&format!(
            "# {} tokens of {budget} (mateclaw; mateclaw compaction through #",
            second["tokens"]
        )),
        "{human}"
    );
    assert!(human.contains("\n[user]\n[Conversation context summary"));
}

/// Qanot through the CLI: first 2 and last 4 messages with the marker between them.
#[test]
fn context_with_the_qanot_policy() {
    let r = Run::new();
    chat(&r, 10);
    let full = r.json(&["context", "s", "--json", "--dry-run", "--policy", "qanot"]);
    let tokens = full["tokens"].as_u64().unwrap() as f64;
    let budget = ((tokens / 0.60) as usize - 1).to_string();
    let v = r.json(&[
        "context", "s", "--budget", &budget, "--json", "--policy", "qanot",
    ]);
    assert_eq!(v["compacted"], true);
    assert_eq!(v["policy"], "qanot");
    let t = texts(&v);
    assert!(t[1].starts_with("Question 0:") && t[2].starts_with("Answer 0:"));
    assert!(t[3].starts_with("[CONTEXT COMPACTION: 14 earlier messages were removed"));
    assert!(t[4].starts_with("Question 8:"));
    // From 50% the working buffer is kept in memory.
    assert_eq!(v["working_buffer"], true);
    let files = r.ok(&["files", "list", "memory/"]);
    assert!(files.contains("memory/working-buffer.md"), "{files}");
}

/// --dry-run and --emergency (MateClaw's compactForRetry) write nothing to the tape.
#[test]
fn context_dry_run_and_emergency_record_nothing() {
    let r = Run::new();
    chat(&r, 20);
    let full = r.json(&["context", "s", "--json", "--dry-run"]);
    let budget = ((full["tokens"].as_u64().unwrap() as f64 / 0.75) as usize - 1).to_string();
    let preview = r.json(&["context", "s", "--budget", &budget, "--json", "--dry-run"]);
    assert_eq!(preview["compacted"], true);
    let v = r.json(&["context", "s", "--budget", &budget, "--json", "--emergency"]);
    assert_eq!(v["emergency"], true);
    assert_eq!(texts(&v).len(), 1 + 4);
    let events = r.json(&["entries", "s", "--kind", "event", "--json"]);
    assert_eq!(events, Value::Array(Vec::new()));
}

/// Every command that reads memory takes the scope: --user picks the user's memory, layered
/// over the agent's.
#[test]
fn context_uses_the_memory_of_the_agent_and_user() {
    let r = Run::new();
    r.ok(&["memory", "save", "The team ships on Fridays."]);
    r.ok(&["--user", "ada", "memory", "save", "Ada prefers Rust."]);
    r.ok(&[
        "--user",
        "ada",
        "append",
        "s",
        "--role",
        "user",
        "--no-wal",
        "--content",
        "Hi",
    ]);
    let v = r.json(&["--user", "ada", "context", "s", "--json"]);
    let system = v["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("## Long-term Memory\nAda prefers Rust.\n"),
        "{system}"
    );
    let v = r.json(&["context", "s", "--json", "--message", "Hello"]);
    let system = v["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("## Long-term Memory\nThe team ships on Fridays.\n"),
        "{system}"
    );
}

#[test]
fn context_refuses_a_zero_budget() {
    let r = Run::new();
    let err = r.fails(&["context", "s", "--budget", "0"]);
    assert!(err.contains("token budget"), "{err}");
}

/// `memtape bench context` reports the stable-prefix ratio for each policy.
#[test]
fn bench_context_reports_the_stable_prefix_ratio() {
    let r = Run::new();
    let v = r.json(&["bench", "context", "--turns", "12", "--budget", "3000"]);
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 2);
    for p in policies {
        let ratio = p["stable_prefix_ratio"].as_f64().unwrap();
        assert!(ratio > 0.0 && ratio <= 1.0, "{p}");
        assert_eq!(p["compared_turns"], 11);
    }
}

/// Issue 35 §2: the memory skill (nanobot's always-loaded skill, Bub's rule 7) is part of
/// the system text `memtape context` builds, on by default; `--memory-skill false` and
/// memtape.toml's `[lifecycle] memory_skill = false` leave it out.
#[test]
fn context_carries_the_memory_skill_unless_turned_off() {
    let r = Run::new();
    chat(&r, 1);
    let system = |args: &[&str]| {
        let mut all = vec![
            "context",
            "s",
            "--json",
            "--dry-run",
            "--system",
            "Be brief.",
        ];
        all.extend_from_slice(args);
        texts(&r.json(&all))[0].clone()
    };
    let on = system(&[]);
    assert!(
        on.starts_with(&format!("Be brief.\n\n{}", memtape::MEMORY_SKILL.trim())),
        "{on}"
    );
    assert!(
        on.contains("Rule 7: proactively save the user's preferences"),
        "{on}"
    );
    assert!(on.contains("HISTORY.md` is NOT in this prompt"), "{on}");
    let off = system(&["--memory-skill", "false"]);
    assert!(
        off.starts_with("Be brief.\n\n") && !off.contains("Rule 7"),
        "{off}"
    );
    std::fs::write(
        r.dir.path().join("data/memtape.toml"),
        "[lifecycle]\nmemory_skill = false\n",
    )
    .unwrap();
    assert!(!system(&[]).contains("Rule 7"));
    assert!(system(&["--memory-skill", "true"]).contains("Rule 7"));
    let bad = r.fails(&["context", "s", "--memory-skill", "maybe"]);
    assert!(bad.contains("--memory-skill"), "{bad}");
}

/// Issue 35 §2: Qanot's proactive compaction looks at the estimated next turn, the prompt
/// and the reply budget (`--reply-tokens`, default 1024), not at the prompt alone.
#[test]
fn qanot_compaction_counts_the_reply_budget() {
    let r = Run::new();
    chat(&r, 6);
    let build = |extra: &[&str]| {
        let mut all = vec![
            "context",
            "s",
            "--json",
            "--dry-run",
            "--policy",
            "qanot",
            "--memory-skill",
            "false",
        ];
        all.extend_from_slice(extra);
        r.json(&all)
    };
    let tokens = build(&["--reply-tokens", "0"])["tokens"].as_u64().unwrap() as usize;
    let budget = (tokens * 2 + 2).to_string();
    let alone = build(&["--budget", &budget, "--reply-tokens", "0"]);
    assert_eq!(alone["compacted"], false, "{alone}");
    let reply = (tokens * 2 / 5).to_string();
    let next = build(&["--budget", &budget, "--reply-tokens", &reply]);
    assert_eq!(next["compacted"], true, "{next}");
    let bad = r.fails(&["context", "s", "--reply-tokens", "lots"]);
    assert!(bad.contains("--reply-tokens"), "{bad}");
}
