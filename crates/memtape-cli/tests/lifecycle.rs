//! `memtape new SESSION` (nanobot's /new, seed 000) driven through the real binary: the
//! unconsolidated messages are archived to HISTORY.md with the extractive summarizer, then
//! the session is cleared — its history starts again — while the tape keeps every entry.

use crate::common::Run;
use serde_json::json;

/// Seed 000, `/new`: archive the unconsolidated messages, then clear the session.
#[test]
fn nanobot_new_archives_to_history_then_clears_the_session() {
    let r = Run::new();
    let say = |role: &str, content: &str| {
        r.ok(&[
            "append",
            "s1",
            "--role",
            role,
            "--content",
            content,
            "--no-wal",
        ])
    };
    say("user", "Hi there!");
    say("assistant", "Hello.");
    r.ok(&["consolidate", "s1", "2"]);
    say("user", "My name is Ada and the deadline is 2026-03-01.");
    say("assistant", "Great, we decided to use PostgreSQL 16.");

    assert_eq!(
        r.ok(&["new", "s1"]),
        "archived 2 messages to HISTORY.md (memory version 1); default/default session=s1 cleared\n"
    );
    assert_eq!(r.json(&["history", "s1", "--json"]), json!([]));

    let memory = r.json(&["memory", "show", "--json"]);
    let history = memory["files"]["HISTORY.md"]["content"].as_str().unwrap();
    assert!(history.starts_with('['), "{history}");
    assert!(
        history.contains("- User: My name is Ada and the deadline is 2026-03-01.")
            && history.contains("PostgreSQL 16"),
        "{history}"
    );
    assert!(
        !history.contains("Hi there"),
        "consolidated messages are not archived again: {history}"
    );

    // Nothing left the tape; the boundary is an anchor.
    let entries = r.ok(&["entries", "s1", "--kind", "message"]);
    assert_eq!(entries.lines().count(), 4, "{entries}");
    let anchors = r.json(&["entries", "s1", "--kind", "anchor", "--json"]);
    assert_eq!(anchors[0]["payload"]["name"], "session/new");
    assert_eq!(anchors[0]["payload"]["state"]["archived"], 2);

    // The new conversation's history starts after /new, and a second /new has nothing to
    // archive.
    let fresh = say("user", "a fresh start");
    assert_eq!(
        r.json(&["history", "s1", "--json"]),
        json!([{"role": "user", "content": "a fresh start"}])
    );
    r.ok(&["consolidate", "s1", fresh.trim()]);
    assert_eq!(
        r.ok(&["new", "s1"]),
        "nothing to archive; default/default session=s1 cleared\n"
    );
}

#[test]
fn new_names_a_session_that_does_not_exist() {
    let r = Run::new();
    let err = r.fails(&["new", "ghost"]);
    assert!(err.contains("no session") && err.contains("ghost"), "{err}");
}

/// Bub's retention (seed 001, 7.1: retention_days, default 30) applied as a new session
/// starts: `new` prunes the memory's old daily notes, `--retention-days 0` keeps them.
#[test]
fn bub_new_session_prunes_daily_notes_past_retention() {
    let r = Run::new();
    r.ok(&[
        "append",
        "s1",
        "--role",
        "user",
        "--content",
        "hello",
        "--no-wal",
    ]);
    r.ok(&["memory", "daily", "ancient", "--date", "2001-01-01"]);
    r.ok(&["memory", "daily", "fresh"]);
    let out = r.ok(&["new", "s1", "--retention-days", "0"]);
    assert!(!out.contains("removed"), "{out}");
    let out = r.ok(&["new", "s1"]);
    assert!(
        out.ends_with("removed 1 daily note(s) older than 30 days\n"),
        "{out}"
    );
    let files = r.json(&["memory", "show", "--json"])["files"].clone();
    assert!(files.get("memory/2001-01-01.md").is_none());
    assert_eq!(
        files
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("memory/"))
            .count(),
        1
    );
}
