//! Bub-style sessions through the real binary: a Bub tape's memory zones stay addressable
//! by anchor after import (issue 15's data loss), `memtape start` writes Bub's bootstrap
//! anchor and memory zone, and `history` gives Bub's view to such sessions.

use crate::common::Run;
use serde_json::Value;

const TAPE: &str = r#"{"id": 1, "kind": "anchor", "payload": {"name": "session/start", "state": {"owner": "human"}}, "meta": {}, "date": "2026-02-09T09:00:00+00:00"}
{"id": 2, "kind": "message", "payload": {"role": "user", "content": "remember: I like Python"}, "meta": {}, "date": "2026-02-09T09:01:00+00:00"}
{"id": 3, "kind": "tool_call", "payload": {"calls": [{"id": "c1", "type": "function", "function": {"name": "memory_save", "arguments": "{}"}}], "content": "saving"}, "meta": {}, "date": "2026-02-09T09:01:01+00:00"}
{"id": 4, "kind": "tool_result", "payload": {"results": [{"ok": true, "n": 1}]}, "meta": {}, "date": "2026-02-09T09:01:02+00:00"}
{"id": 5, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 1}}, "meta": {}, "date": "2026-02-09T09:01:03+00:00"}
{"id": 6, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "User likes Python"}}, "meta": {}, "date": "2026-02-09T09:01:03+00:00"}
{"id": 7, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 1}}, "meta": {}, "date": "2026-02-09T09:01:03+00:00"}
{"id": 8, "kind": "message", "payload": {"role": "assistant", "content": "Got it."}, "meta": {}, "date": "2026-02-09T09:01:04+00:00"}
"#;

#[test]
fn a_bub_tape_keeps_its_memory_zone_and_gets_bub_s_history() {
    let r = Run::new();
    let path = r.path("tape.jsonl");
    std::fs::write(&path, TAPE).unwrap();
    r.ok(&["import", &path, "--format", "bub", "--session", "b"]);
    // The zone is on the tape: Bub's anchor queries find it.
    let after = r.json(&["entries", "b", "--after-anchor", "memory/seal", "--json"]);
    assert_eq!(after.as_array().unwrap().len(), 1, "{after}");
    assert_eq!(after[0]["payload"]["content"], "Got it.");
    let last = r.json(&["entries", "b", "--from-last-anchor", "--json"]);
    assert_eq!(last, after);
    let zone = r.json(&[
        "entries",
        "b",
        "--between",
        "memory/open",
        "memory/seal",
        "--json",
    ]);
    assert_eq!(zone[0]["payload"]["data"]["content"], "User likes Python");
    let err = r.fails(&["entries", "b", "--between", "memory/seal", "memory/open"]);
    assert!(
        err.contains("no anchor memory/open after memory/seal"),
        "{err}"
    );
    // Memory is the zone's projection.
    let memory = r.ok(&["memory", "show"]);
    assert!(memory.contains("User likes Python"), "{memory}");
    // History: Bub's view, the tool call with its text, the JSON result as it came.
    let history = r.json(&["history", "b", "--json"]);
    let history = history.as_array().unwrap();
    assert_eq!(history.len(), 4, "{history:?}");
    assert_eq!(history[1]["content"], "saving");
    assert_eq!(history[2]["content"], r#"{"ok": true, "n": 1}"#);
    // Bub's view starts after the session's last anchor that is not a zone's; memtape's
    // thread view is still there on request.
    let thread = r.json(&["history", "b", "--view", "thread", "--json"]);
    assert_eq!(thread.as_array().unwrap().len(), 4);
    // Out again, every line is the tape's.
    let out = r.ok(&["export", "--format", "bub", "b"]);
    let lines = |t: &str| -> Vec<Value> {
        t.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    assert_eq!(lines(&out), lines(TAPE));
}

#[test]
fn start_writes_bub_s_bootstrap_anchor_and_memory_zone() {
    let r = Run::new();
    let started = r.json(&["start", "s"]);
    assert!(started["bootstrap"].is_u64(), "{started}");
    assert_eq!(
        started["zone"], 1,
        "an empty zone, as Bub's ensure() writes"
    );
    let anchors = r.json(&["entries", "s", "--kind", "anchor", "--json"]);
    let names: Vec<&str> = anchors
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["payload"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["session/start", "memory/open", "memory/seal"]);
    // Started again with the memory unchanged: nothing new.
    let again = r.json(&["start", "s"]);
    assert_eq!(
        (&again["bootstrap"], &again["zone"]),
        (&Value::Null, &Value::Null)
    );
    // Memory changed elsewhere (another session, the CLI): the next start writes a zone.
    r.ok(&["memory", "save", "User is Ada"]);
    let resumed = r.json(&["start", "s"]);
    assert_eq!(resumed["zone"], 2);
    let zone = r.json(&[
        "entries",
        "s",
        "--between",
        "memory/open",
        "memory/seal",
        "--json",
    ]);
    assert_eq!(zone[0]["payload"]["data"]["content"], "User is Ada");
    // The conversation goes on in Bub's view: after the bootstrap anchor, zones aside.
    r.ok(&["append", "s", "--role", "user", "--content", "hi"]);
    let history = r.json(&["history", "s", "--json"]);
    assert_eq!(history.as_array().unwrap().len(), 1, "{history}");
    // Bub's export of the session reads the current memory.
    let out = r.ok(&["export", "--format", "bub", "s"]);
    assert!(out.lines().last().unwrap().contains("\"hi\""), "{out}");
    assert!(out.contains("User is Ada"));
}
