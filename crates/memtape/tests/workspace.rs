//! The markdown workspace on a real SQLite tape and a real folder: the round trip (hand
//! edit → event → view → file), conflicts, deletions, and what is never imported.
use std::fs;
use std::path::Path;

use memtape::memory::{Change, Op};
use memtape::{Engine, Error, Prefer, Scope, SyncReport, workspace_dir};

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
    fs::write(
        ws.join("huge.md"),
        "h".repeat(memtape::memory::MAX_FILE_BYTES + 1),
    )
    .unwrap();
    // MEMORY.md turns into bytes that are not UTF-8: skipped, not read as a deletion.
    fs::write(ws.join("MEMORY.md"), [0xff, 0xfe, 0x00]).unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    let skipped: Vec<&str> = report.skipped.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(skipped, ["MEMORY.md", "bad%2e%2e.md", "huge.md"]);
    assert!(report.skipped[2].1.contains("larger than"));
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

fn write(engine: &Engine, path: &str, content: &str) {
    engine
        .record_memory(
            &agent(),
            Change::one(
                Op::Write {
                    path: path.into(),
                    content: content.into(),
                },
                "test",
            ),
        )
        .unwrap();
}

fn why<'r>(report: &'r SyncReport, path: &str) -> &'r str {
    report
        .skipped
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, w)| w.as_str())
        .unwrap_or_else(|| panic!("{path} was not skipped: {:?}", report.skipped))
}

/// Issue 10: a file sync cannot read (a socket), a file where the tape has a folder and a
/// folder holding a file the tape has made the whole sync fail; now each is skipped and
/// reported, and every other file is recorded or written.
#[test]
fn one_bad_path_does_not_block_the_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    write(&engine, "memories/a/b.md", "b\n");
    write(&engine, "memories/c.md", "c\n");
    engine.sync_workspace(&agent(), &ws, None).unwrap();

    // By hand: the folder memories/a becomes a file, a socket appears, and a good edit.
    fs::remove_dir_all(ws.join("memories/a")).unwrap();
    fs::write(ws.join("memories/a"), "a file now\n").unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(ws.join("memories/sock.md")).unwrap();
    fs::write(ws.join("memories/c.md"), "c edited\n").unwrap();
    // On the tape: a new file.
    write(&engine, "memories/d.md", "d\n");

    for prefer in [None, Some(Prefer::Disk), Some(Prefer::Tape)] {
        let report = engine.sync_workspace(&agent(), &ws, prefer).unwrap();
        let view = engine.memory(&agent()).unwrap();
        assert_eq!(view.content("memories/a/b.md"), Some("b\n"), "{report:?}");
        assert_eq!(view.content("memories/c.md"), Some("c edited\n"));
        assert!(view.content("memories/a").is_none());
        assert!(view.content("memories/sock.md").is_none());
        assert_eq!(fs::read_to_string(ws.join("memories/d.md")).unwrap(), "d\n");
        assert_eq!(
            fs::read_to_string(ws.join("memories/a")).unwrap(),
            "a file now\n"
        );
        assert!(why(&report, "memories/sock.md").contains("not a regular file"));
        assert!(why(&report, "memories/a").contains("memories/a/b.md"));
        assert!(why(&report, "memories/a/b.md").contains("memories/a is a file"));
    }
    assert_eq!(engine.memory_log(&agent()).unwrap().0.version(), 4);
}

/// Issue 10: a folder where MEMORY.md should be was read as a deletion (with `--prefer
/// disk` memory was then recorded as empty). A path on disk of the wrong type is reported.
#[test]
fn a_folder_where_a_file_should_be_is_never_read_as_a_deletion() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    engine.save_long_term(&agent(), "keep\n").unwrap();
    engine.sync_workspace(&agent(), &ws, None).unwrap();
    fs::remove_file(ws.join("MEMORY.md")).unwrap();
    fs::create_dir(ws.join("MEMORY.md")).unwrap();
    fs::write(ws.join("MEMORY.md/inside.md"), "x\n").unwrap();
    engine.save_long_term(&agent(), "newer\n").unwrap();
    for prefer in [None, Some(Prefer::Disk), Some(Prefer::Tape)] {
        let report = engine.sync_workspace(&agent(), &ws, prefer).unwrap();
        assert!(report.recorded.is_empty(), "{report:?}");
        assert!(why(&report, "MEMORY.md").contains("a folder"), "{report:?}");
        assert!(why(&report, "MEMORY.md/inside.md").contains("MEMORY.md is a file"));
        assert_eq!(
            engine.memory(&agent()).unwrap().content("MEMORY.md"),
            Some("newer\n")
        );
        assert_eq!(engine.memory_log(&agent()).unwrap().0.version(), 2);
    }
}

/// Issue 10: names up to the file system's limit (255 bytes a segment) are written and
/// read back; a sync's temporary file never makes a name too long.
#[test]
fn a_255_byte_name_is_written_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    let long = format!("memories/{}.md", "n".repeat(252));
    write(&engine, &long, "long\n");
    write(&engine, "MEMORY.md", "short\n");
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.written, ["MEMORY.md", long.as_str()], "{report:?}");
    assert_eq!(fs::read_to_string(ws.join(&long)).unwrap(), "long\n");
    fs::write(ws.join(&long), "edited\n").unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.recorded, [long.as_str()]);
    assert_eq!(
        engine.memory(&agent()).unwrap().content(&long),
        Some("edited\n")
    );
}

/// Issue 10: `/memories/.notes.md`, `#draft.md` and `backup.md~` were written by one sync
/// and recorded as deleted by the next. Names sync does not read are refused at creation;
/// every name it writes, it reads back.
#[test]
fn every_name_sync_writes_it_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    for bad in [
        "memories/.notes.md",
        "memories/#draft.md",
        "memories/backup.md~",
        ".memtape/sync.json",
        "memories/.git/config",
    ] {
        let err = engine
            .record_memory(
                &agent(),
                Change::one(
                    Op::Write {
                        path: bad.into(),
                        content: "x".into(),
                    },
                    "test",
                ),
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains(bad) && err.contains("not allowed"), "{err}");
    }
    for good in [
        "MEMORY.md",
        "memories/notes.md",
        "memories/a b/ünïcödé 名前.md",
        "memories/draft#1.md",
        "memories/x~y.md",
        "memory/2026-04-01.md",
        "memories/deep/er/than/two/levels.md",
    ] {
        write(&engine, good, &format!("{good}\n"));
    }
    let version = engine.memory_log(&agent()).unwrap().0.version();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.written.len(), 7, "{report:?}");
    assert!(report.skipped.is_empty(), "{report:?}");
    for _ in 0..2 {
        let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
        assert!(report.is_quiet(), "{report:?}");
    }
    assert_eq!(engine.memory_log(&agent()).unwrap().0.version(), version);

    // A sync state from before these rules names files this sync passes over: they are
    // neither read as deleted nor touched.
    let state = ws.join(".memtape/sync.json");
    let mut old: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&state).unwrap()).unwrap();
    for name in [
        "memories/.notes.md",
        "memories/#draft.md",
        "memories/backup.md~",
    ] {
        fs::write(ws.join(name), "old\n").unwrap();
        old["files"][name] = "0".repeat(64).into();
    }
    fs::write(&state, old.to_string()).unwrap();
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert!(report.is_quiet(), "{report:?}");
    assert_eq!(engine.memory_log(&agent()).unwrap().0.version(), version);
    assert_eq!(
        fs::read_to_string(ws.join("memories/.notes.md")).unwrap(),
        "old\n"
    );
}

/// Issue 10: sync followed a symlinked folder and wrote outside the workspace. A workspace
/// whose own folders are symlinks is refused, naming the path; a symlink inside it is never
/// written through, never read, and never read as a deletion.
#[test]
fn sync_never_follows_a_symlink() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret.md"), "secret\n").unwrap();
    write(&engine, "memories/x.md", "x\n");
    write(&engine, "memory/2026-04-01.md", "day\n");

    // memories/ (or memory/, or .memtape/, or the workspace itself) is a symlink: refused.
    for part in ["memories", "memory", ".memtape", ""] {
        let ws = tmp.path().join(format!("ws-{part}"));
        let link = if part.is_empty() {
            ws.clone()
        } else {
            fs::create_dir_all(&ws).unwrap();
            ws.join(part)
        };
        symlink(&outside, &link).unwrap();
        let err = engine.sync_workspace(&agent(), &ws, None).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&link.display().to_string()) && text.contains("symlink"),
            "{text}"
        );
    }
    // The folders of the default workspace under a data directory are checked too.
    let data = tmp.path().join("data");
    fs::create_dir_all(data.join("workspace")).unwrap();
    symlink(&outside, data.join("workspace/t")).unwrap();
    let text = engine
        .sync_workspace(&agent(), &workspace_dir(&data, &agent()), None)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains(&data.join("workspace/t").display().to_string()),
        "{text}"
    );

    // A symlinked folder or file inside the workspace is skipped, not written through.
    let ws = tmp.path().join("ws");
    fs::create_dir_all(ws.join("memories")).unwrap();
    symlink(&outside, ws.join("memories/sub")).unwrap();
    symlink(outside.join("secret.md"), ws.join("MEMORY.md")).unwrap();
    write(&engine, "memories/sub/y.md", "y\n");
    write(&engine, "MEMORY.md", "long-term\n");
    for _ in 0..2 {
        let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
        assert!(
            why(&report, "memories/sub").contains("symlink"),
            "{report:?}"
        );
        assert!(why(&report, "memories/sub/y.md").contains("symlink"));
        assert!(why(&report, "MEMORY.md").contains("symlink"));
        assert!(report.recorded.is_empty(), "{report:?}");
        assert_eq!(fs::read_to_string(ws.join("memories/x.md")).unwrap(), "x\n");
    }
    let mut left: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["secret.md"]);
    assert_eq!(
        fs::read_to_string(outside.join("secret.md")).unwrap(),
        "secret\n"
    );
    let view = engine.memory(&agent()).unwrap();
    assert_eq!(view.content("memories/sub/y.md"), Some("y\n"));
    assert_eq!(view.content("MEMORY.md"), Some("long-term\n"));
    assert!(view.content("memories/sub/secret.md").is_none());
}

/// The sync state grows with the workspace and is read whole, past the size limit of one
/// memory file.
#[test]
fn a_workspace_of_thousands_of_files_stays_in_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Engine::init(&tmp.path().join("store")).unwrap();
    let ws = tmp.path().join("ws");
    fs::create_dir_all(ws.join("memories/notes")).unwrap();
    for i in 0..2500 {
        let name = format!("memories/notes/{i:05}-a-rather-long-name-for-a-note-file.md");
        fs::write(ws.join(name), format!("note {i}\n")).unwrap();
    }
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert_eq!(report.recorded.len(), 2500);
    let state = fs::metadata(ws.join(".memtape/sync.json")).unwrap().len();
    assert!(state > memtape::memory::MAX_FILE_BYTES as u64, "{state}");
    let report = engine.sync_workspace(&agent(), &ws, None).unwrap();
    assert!(report.is_quiet(), "{:?}", report.skipped);
}
