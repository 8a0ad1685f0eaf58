//! The markdown workspace on a real SQLite tape and a real folder: the round trip (hand
//! edit → event → view → file), conflicts, deletions, and what is never imported.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;

use memtape::{Engine, Error, Prefer, Scope, workspace_dir};

fn agent() -> Scope {
    Scope::agent("t", "a").unwrap()
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_hand_edit_becomes_a_version_and_tape_changes_reach_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = workspace_dir(tmp.path(), &agent());
    assert!(ws.ends_with("workspace/t/a/shared"));
    engine
        .save_long_term(&agent(), "# Memory\n- likes tea\n")
        .unwrap();

    // First sync: the view is written out.
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.written, ["MEMORY.md"]);
    assert_eq!(
        fs::read_to_string(ws.join("MEMORY.md")).unwrap(),
        "# Memory\n- likes tea\n"
    );
    assert_eq!(files(&ws), [".memtape/sync.json", "MEMORY.md"]);

    // A person edits the file and adds one: both become one recorded version.
    fs::write(ws.join("MEMORY.md"), "# Memory\n- likes coffee\n").unwrap();
    fs::create_dir_all(ws.join("memories")).unwrap();
    fs::write(ws.join("memories/trip.md"), "Kyoto in May\n").unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.recorded, ["MEMORY.md", "memories/trip.md"]);
    assert_eq!(report.version, Some(2));
    assert!(report.written.is_empty() && report.conflicts.is_empty());
    let (log, _) = engine.memory_log(&agent()).unwrap();
    assert_eq!(log.get(2).unwrap().change.source, "sync");
    let view = engine.memory(&agent()).unwrap();
    assert_eq!(
        view.content("MEMORY.md"),
        Some("# Memory\n- likes coffee\n")
    );
    assert_eq!(view.content("memories/trip.md"), Some("Kyoto in May\n"));
    // The earlier text is a version, not lost.
    assert_eq!(
        log.view_at(1).content("MEMORY.md"),
        Some("# Memory\n- likes tea\n")
    );

    // Nothing changed: a quiet sync.
    assert!(
        engine
            .sync_workspace(&agent(), &ws, None)
            .unwrap()
            .is_quiet()
    );

    // The tape moves on: the files follow, atomically (no temporary files left behind).
    engine
        .append_daily(
            &agent(),
            "- packed",
            Some(chrono::NaiveDate::from_ymd_opt(2026, 4, 1).unwrap()),
        )
        .unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.written, ["memory/2026-04-01.md"]);
    assert_eq!(
        fs::read_to_string(ws.join("memory/2026-04-01.md")).unwrap(),
        "# 2026-04-01\n\n- packed\n"
    );
    assert!(!files(&ws).iter().any(|f| f.contains("memtape-tmp")));

    // Deleting a file by hand records a delete; deleting on the tape removes the file.
    fs::remove_file(ws.join("memories/trip.md")).unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.recorded, ["memories/trip.md"]);
    assert!(
        engine
            .memory(&agent())
            .unwrap()
            .content("memories/trip.md")
            .is_none()
    );
    engine.prune_daily(&agent(), 0).unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.removed, ["memory/2026-04-01.md"]);
    assert!(
        !ws.join("memory").exists(),
        "the folder it emptied goes too"
    );
}

#[test]
fn a_file_changed_on_both_sides_is_reported_and_neither_side_is_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    engine.save_long_term(&agent(), "v1\n").unwrap();
    engine.sync_workspace(&agent(), &ws, None).unwrap();

    fs::write(ws.join("MEMORY.md"), "edited by hand\n").unwrap();
    engine
        .save_long_term(&agent(), "written by the agent\n")
        .unwrap();
    for _ in 0..2 {
        let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
        assert_eq!(report.conflicts.len(), 1, "reported again until settled");
        let c = &report.conflicts[0];
        assert_eq!(c.path, "MEMORY.md");
        assert_eq!(c.disk.as_deref(), Some("edited by hand\n"));
        assert_eq!(c.tape.as_deref(), Some("written by the agent\n"));
        assert!(report.recorded.is_empty() && report.written.is_empty());
        assert_eq!(
            fs::read_to_string(ws.join("MEMORY.md")).unwrap(),
            "edited by hand\n"
        );
        assert_eq!(
            engine.memory(&agent()).unwrap().content("MEMORY.md"),
            Some("written by the agent\n")
        );
    }
    // Settled by choosing the disk: the hand edit is recorded, the agent's text stays a version.
    let report = engine
        .sync_workspace(&agent(), &ws, Some(Prefer::Disk))
        .unwrap();
    assert_eq!(report.recorded, ["MEMORY.md"]);
    assert_eq!(
        engine.memory(&agent()).unwrap().content("MEMORY.md"),
        Some("edited by hand\n")
    );
    assert!(
        engine
            .sync_workspace(&agent(), &ws, None)
            .unwrap()
            .is_quiet()
    );

    // Or by choosing the tape: the file is overwritten with the tape's text.
    fs::write(ws.join("MEMORY.md"), "hand again\n").unwrap();
    engine.save_long_term(&agent(), "agent again\n").unwrap();
    let report = engine
        .sync_workspace(&agent(), &ws, Some(Prefer::Tape))
        .unwrap();
    assert_eq!(report.written, ["MEMORY.md"]);
    assert_eq!(
        fs::read_to_string(ws.join("MEMORY.md")).unwrap(),
        "agent again\n"
    );
}

#[test]
fn files_that_cannot_be_memory_are_skipped_and_never_delete_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    engine.save_long_term(&agent(), "keep me\n").unwrap();
    engine.sync_workspace(&agent(), &ws, None).unwrap();
    // An editor's backup and swap files, a binary file and a bad name.
    fs::write(ws.join("MEMORY.md~"), "backup").unwrap();
    fs::write(ws.join(".MEMORY.md.swp"), "swap").unwrap();
    fs::write(ws.join("bad%2e%2e.md"), "x").unwrap();
    // MEMORY.md turns into bytes that are not UTF-8: skipped, not read as a deletion.
    fs::write(ws.join("MEMORY.md"), [0xff, 0xfe, 0x00]).unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    let skipped: Vec<&str> = report.skipped.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(skipped, ["MEMORY.md", "bad%2e%2e.md"]);
    assert!(report.recorded.is_empty());
    assert_eq!(engine.memory_log(&agent()).unwrap().0.version(), 1);
    assert_eq!(
        engine.memory(&agent()).unwrap().content("MEMORY.md"),
        Some("keep me\n")
    );
}

#[test]
fn a_workspace_belongs_to_one_scope() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    engine.sync_workspace(&agent(), &ws, None).unwrap();
    let other = Scope::agent("t", "b").unwrap();
    let err = engine.sync_workspace(&other, &ws, None).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(err.to_string().contains("t/b"), "{err}");
    let session = agent().with_session("s").unwrap();
    assert!(engine.sync_workspace(&session, &ws, None).is_err());
}
