//! Unit tests of the memory fold, versions, undo, diff and path rules.

use super::*;
use chrono::{DateTime, NaiveDate, Utc};

use crate::{Entry, EntryId, Meta, Scope};

fn at(minute: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + chrono::Duration::minutes(minute)
}

fn log(changes: &[Change]) -> MemoryLog {
    let scope = Scope::agent("t", "a").unwrap();
    let entries: Vec<Entry> = changes
        .iter()
        .enumerate()
        .map(|(i, c)| Entry {
            id: EntryId(10 + i as u64),
            scope: scope.clone(),
            payload: c.to_payload(),
            meta: Meta::new(),
            created_at: at(i as i64),
            parent: None,
            erased: None,
        })
        .collect();
    MemoryLog::from_entries(&entries).unwrap()
}

fn write(path: &str, content: &str) -> Change {
    Change::one(
        Op::Write {
            path: path.into(),
            content: content.into(),
        },
        "test",
    )
}

fn append(path: &str, text: &str, heading: Option<&str>) -> Change {
    Change::one(
        Op::Append {
            path: path.into(),
            text: text.into(),
            heading: heading.map(String::from),
        },
        "test",
    )
}

/// nanobot / MateClaw: MEMORY.md and PROFILE.md are replaced as a whole.
#[test]
fn seed_nanobot_long_term_memory_is_a_full_replace() {
    let l = log(&[
        write("MEMORY.md", "likes tea"),
        write("MEMORY.md", "likes coffee"),
    ]);
    assert_eq!(l.view().content("MEMORY.md"), Some("likes coffee"));
    assert_eq!(l.view_at(1).content("MEMORY.md"), Some("likes tea"));
    assert_eq!(l.view().files["MEMORY.md"].parts, [EntryId(11)]);
}

/// MateClaw: a daily note is appended to, and created with a `# YYYY-MM-DD` heading.
#[test]
fn seed_mateclaw_daily_notes_append_and_start_with_a_date_heading() {
    let date = NaiveDate::from_ymd_opt(2026, 4, 3).unwrap();
    let path = paths::daily(date);
    assert_eq!(path, "memory/2026-04-03.md");
    let heading = paths::daily_heading(date);
    let l = log(&[
        append(&path, "- first\n", Some(&heading)),
        append(&path, "- second\n", Some(&heading)),
    ]);
    assert_eq!(
        l.view().content(&path),
        Some("# 2026-04-03\n\n- first\n- second\n"),
        "one heading, even though both appends carried it"
    );
    assert_eq!(paths::daily_date(&path), Some(date));
    assert_eq!(l.view().dailies()[0].0, date);
}

#[test]
fn every_version_stays_readable_and_diffs_show_what_changed() {
    let l = log(&[
        write("MEMORY.md", "a\nb\n"),
        write("MEMORY.md", "a\nc\n"),
        write("memories/x.md", "x\n"),
    ]);
    assert_eq!(l.version(), 3);
    let d = diff(&l.view_at(1), &l.view_at(3));
    assert!(d.contains("--- a/MEMORY.md\n+++ b/MEMORY.md\n"), "{d}");
    assert!(d.contains("-b\n+c\n"), "{d}");
    assert!(d.contains("--- /dev/null\n+++ b/memories/x.md\n"), "{d}");
    assert_eq!(diff(&l.view(), &l.view()), "");
    assert_eq!(
        l.view_as_of(Some(&crate::AsOf::Time(at(1))))
            .content("MEMORY.md"),
        Some("a\nc\n")
    );
    assert_eq!(
        l.view_as_of(Some(&crate::AsOf::Time(at(-1)))).files.len(),
        0
    );
    assert_eq!(l.versions(Some("MEMORY.md")).len(), 2);
    assert_eq!(l.versions(Some("memories/x.md")).len(), 1);
}

#[test]
fn undo_restores_an_earlier_version_with_ordinary_ops() {
    let changes = vec![
        write("MEMORY.md", "v1"),
        write("MEMORY.md", "v2"),
        write("memories/new.md", "n"),
    ];
    let l = log(&changes);
    let undo = l.undo_to(1).unwrap().unwrap();
    let mut all = changes.clone();
    all.push(undo);
    let after = log(&all);
    assert_eq!(after.view().content("MEMORY.md"), Some("v1"));
    assert!(after.view().content("memories/new.md").is_none());
    assert_eq!(after.version(), 4, "undo is a new version, not a rewrite");
    assert!(after.undo_to(4).unwrap().is_none(), "nothing to undo");
    assert!(l.undo_to(9).is_err());
}

/// Bub phase 3: `memory.forget` leaves specific entries out as if never made.
#[test]
fn seed_bub_forget_leaves_specific_changes_out() {
    let day = "memory/2026-02-10.md";
    let l = log(&[
        append(day, "keep\n", None),
        append(day, "secret\n", None),
        append(day, "also keep\n", None),
        Change::one(
            Op::Forget {
                changes: vec![EntryId(11)],
            },
            "test",
        ),
    ]);
    assert_eq!(l.view().content(day), Some("keep\nalso keep\n"));
    assert!(!l.view().is_current(day, EntryId(11)));
    assert!(l.view().is_current(day, EntryId(12)));
    assert_eq!(l.version(), 4);
}

#[test]
fn rename_delete_flags_and_clear() {
    let l = log(&[
        write("memories/a/one.md", "1"),
        write("memories/a/two.md", "2"),
        Change::one(
            Op::Rename {
                from: "memories/a".into(),
                to: "memories/b".into(),
            },
            "t",
        ),
        write("SOUL.md", "kind"),
        Change::one(
            Op::Flags {
                path: "SOUL.md".into(),
                enabled: Some(false),
                sort_order: None,
            },
            "t",
        ),
    ]);
    let v = l.view();
    assert_eq!(
        v.files.keys().collect::<Vec<_>>(),
        ["SOUL.md", "memories/b/one.md", "memories/b/two.md"]
    );
    assert!(!v.files["SOUL.md"].enabled);
    assert_eq!(v.files["SOUL.md"].sort_order, 1);
    let cleared = log(&[
        write("MEMORY.md", "x"),
        Change::one(
            Op::Delete {
                path: "MEMORY.md".into(),
            },
            "t",
        ),
    ]);
    assert!(cleared.view().files.is_empty());
    let all = log(&[write("A.md", "x"), Change::one(Op::Clear, "t")]);
    assert!(all.view().files.is_empty());
}

/// MateClaw seed data: the core files AGENTS.md (0), SOUL.md (1), PROFILE.md (2) and
/// MEMORY.md (3) are enabled; new files are not.
#[test]
fn seed_mateclaw_default_flags() {
    assert_eq!(paths::default_flags("AGENTS.md"), (true, 0));
    assert_eq!(paths::default_flags("SOUL.md"), (true, 1));
    assert_eq!(paths::default_flags("PROFILE.md"), (true, 2));
    assert_eq!(paths::default_flags("MEMORY.md"), (true, 3));
    assert!(!paths::default_flags("memory/2026-04-01.md").0);
    assert!(!paths::default_flags("notes.md").0);
}

/// MateClaw and Anthropic path rules: relative only, no `..`, no absolute paths, no
/// encoded traversal; each rejection names the path.
#[test]
fn seed_mateclaw_paths_must_be_relative_without_traversal() {
    assert_eq!(
        check_path("memories/notes.md").unwrap(),
        "memories/notes.md"
    );
    for bad in [
        "",
        "/etc/passwd",
        "\\windows",
        "../secret.md",
        "a/../b.md",
        "a//b.md",
        "a/./b.md",
        "memories/%2e%2e/x.md",
        "C:/x.md",
        "~/x.md",
        "a\u{0}.md",
        "dir/",
    ] {
        let err = check_path(bad).unwrap_err().to_string();
        assert!(err.contains(&format!("{bad:?}")), "{err}");
    }
    assert!(check_path(&"a".repeat(600)).is_err());
}

#[test]
fn a_change_round_trips_through_its_event() {
    let c = Change {
        ops: vec![
            Op::Append {
                path: "HISTORY.md".into(),
                text: "[2026-03-10 14:30] x\n\n".into(),
                heading: None,
            },
            Op::Clear,
        ],
        source: "memory.save".into(),
        caused_by: vec![EntryId(3), EntryId(1)],
    };
    let l = log(std::slice::from_ref(&c));
    assert_eq!(l.changes()[0].change, c);
    assert!(
        Change {
            ops: vec![],
            source: String::new(),
            caused_by: Vec::new(),
        }
        .validate()
        .is_err()
    );
    assert!(write("../x", "y").validate().is_err());
}

/// Issue 10: names sync cannot write or read back are refused by the one path rule.
#[test]
fn names_over_the_file_system_limit_hidden_names_and_backups_are_refused() {
    let name = |n: usize| format!("memories/{}.md", "n".repeat(n - 3));
    assert!(check_path(&name(MAX_NAME_BYTES)).is_ok());
    let err = check_path(&name(MAX_NAME_BYTES + 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("255 bytes"), "{err}");
    for (bad, rule) in [
        ("memories/.notes.md", "hidden"),
        (".memtape/sync.json", "hidden"),
        ("memories/#draft.md", "editor backup"),
        ("memories/backup.md~", "editor backup"),
        ("memories/#x#/a.md", "editor backup"),
    ] {
        let err = check_path(bad).unwrap_err().to_string();
        assert!(err.contains(rule) && err.contains(bad), "{err}");
    }
    for good in ["memories/draft#1.md", "memories/x~y.md", "a b/ünï 名.md"] {
        assert!(check_path(good).is_ok(), "{good}");
    }
}

/// Issue 10: one size limit, on each op and on the file a change makes; a path is a file
/// or a folder, never both.
#[test]
fn a_change_is_checked_against_the_view_it_is_recorded_on() {
    let l = log(&[write("memories/x", "x"), write("memories/p/q.md", "q")]);
    let view = l.view();
    let nested = |c: Change| view.check(&c).unwrap_err().to_string();
    let err = nested(write("memories/x/y.md", "y"));
    assert!(err.contains("memories/x is a file"), "{err}");
    let err = nested(write("memories/p", "p"));
    assert!(
        err.contains("memories/p is a file, so memories/p/q.md"),
        "{err}"
    );
    let err = nested(Change::one(
        Op::Rename {
            from: "memories/x".into(),
            to: "memories/p/q.md/x".into(),
        },
        "t",
    ));
    assert!(err.contains("memories/p/q.md is a file"), "{err}");
    // A renamed folder's files keep the path rules.
    let err = nested(Change::one(
        Op::Rename {
            from: "memories/p".into(),
            to: format!("memories/{}/{}", "d".repeat(250), "e".repeat(250)),
        },
        "t",
    ));
    assert!(err.contains("/q.md") && err.contains("512 bytes"), "{err}");

    let half = "h".repeat(MAX_FILE_BYTES / 2 + 1);
    let grown = log(&[append("HISTORY.md", &half, None)]);
    let err = grown
        .view()
        .check(&append("HISTORY.md", &half, None))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&MAX_FILE_BYTES.to_string()), "{err}");
    let err = write("MEMORY.md", &"m".repeat(MAX_FILE_BYTES + 1))
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("MEMORY.md") && err.contains("262144"), "{err}");

    // A problem the view already has does not block other changes.
    let mut old = MemoryView::default();
    for p in ["memories/a", "memories/a/b.md"] {
        let op = Op::Write {
            path: p.into(),
            content: "x".into(),
        };
        old.apply(1, EntryId(1), at(0), &op);
    }
    let after = old.check(&write("memories/c.md", "c")).unwrap();
    assert_eq!(after.content("memories/c.md"), Some("c"));
    assert!(old.check(&write("memories/a/d.md", "d")).is_ok());
}

#[test]
fn blame_gives_each_line_the_change_that_wrote_it_through_edits_appends_and_renames() {
    let rename = Change::one(
        Op::Rename {
            from: "memories/a.md".into(),
            to: "memories/b.md".into(),
        },
        "rename",
    );
    let l = log(&[
        write("memories/a.md", "# Facts\nlikes tea\n").caused_by([EntryId(1)]),
        append("memories/a.md", "lives in Oslo\n", None).caused_by([EntryId(2)]),
        write("MEMORY.md", "other\n"),
        write("memories/a.md", "# Facts\nlikes coffee\nlives in Oslo\n"),
        rename,
        append("memories/b.md", "born 1990\n", None),
    ]);
    let versions = |path: &str, v: u64| -> Vec<(String, u64)> {
        l.blame(path, v)
            .unwrap()
            .iter()
            .map(|b| (b.text.clone(), b.origin.version))
            .collect()
    };
    let s = |t: &str, v: u64| (t.to_owned(), v);
    assert_eq!(
        versions("memories/a.md", 2),
        [s("# Facts", 1), s("likes tea", 1), s("lives in Oslo", 2)]
    );
    assert_eq!(
        versions("memories/a.md", 4),
        [s("# Facts", 1), s("likes coffee", 4), s("lives in Oslo", 2)]
    );
    assert_eq!(
        versions("memories/b.md", 6),
        [
            s("# Facts", 1),
            s("likes coffee", 4),
            s("lives in Oslo", 2),
            s("born 1990", 6)
        ]
    );
    let lines = l.blame("memories/b.md", 6).unwrap();
    assert_eq!(lines[2].line, 3);
    assert_eq!(lines[2].origin.change.caused_by, [EntryId(2)]);
    assert!(l.blame("memories/a.md", 6).is_none(), "renamed away");
    assert!(l.blame("memories/b.md", 4).is_none(), "not there yet");

    // A forgotten change is left out of blame as of every view: its line is gone, and
    // the lines it replaced are back with their own origins.
    let mut changes = vec![write("MEMORY.md", "a\nb\n"), write("MEMORY.md", "a\nX\n")];
    changes.push(Change::one(
        Op::Forget {
            changes: vec![EntryId(11)],
        },
        "forget",
    ));
    let l = log(&changes);
    let lines = l.blame("MEMORY.md", 3).unwrap();
    let got: Vec<_> = lines
        .iter()
        .map(|b| (b.text.as_str(), b.origin.version))
        .collect();
    assert_eq!(got, [("a", 1), ("b", 1)]);
}

#[test]
fn version_as_of_a_time_or_an_entry() {
    let l = log(&[
        write("MEMORY.md", "a"),
        write("MEMORY.md", "b"),
        write("MEMORY.md", "c"),
    ]);
    assert_eq!(l.version_as_of(Some(&crate::AsOf::Entry(EntryId(11)))), 2);
    assert_eq!(l.version_as_of(Some(&crate::AsOf::Entry(EntryId(9)))), 0);
    assert_eq!(l.version_as_of(Some(&crate::AsOf::Entry(EntryId::MAX))), 3);
    assert_eq!(
        l.view_as_of(Some(&crate::AsOf::Time(at(0))))
            .content("MEMORY.md"),
        Some("a")
    );
}

#[test]
fn a_log_extended_change_by_change_has_the_view_of_a_full_fold() {
    let changes = vec![
        write("MEMORY.md", "a\n"),
        append("memory/2026-03-01.md", "x\n", Some("# 2026-03-01\n\n")),
        append("memory/2026-03-01.md", "y\n", Some("# 2026-03-01\n\n")),
        Change::one(
            Op::Forget {
                changes: vec![EntryId(11)],
            },
            "forget",
        ),
        write("MEMORY.md", "b\n"),
        Change::one(
            Op::Rename {
                from: "MEMORY.md".into(),
                to: "memories/old.md".into(),
            },
            "rename",
        ),
        Change::one(Op::Clear, "clear"),
        write("PROFILE.md", "p\n"),
    ];
    let full = log(&changes);
    let scope = Scope::agent("t", "a").unwrap();
    let mut grown = MemoryLog::default();
    for (i, c) in changes.iter().enumerate() {
        let entry = Entry {
            id: EntryId(10 + i as u64),
            scope: scope.clone(),
            payload: c.to_payload(),
            meta: Meta::new(),
            created_at: at(i as i64),
            parent: None,
            erased: None,
        };
        grown.extend(std::iter::once(&entry)).unwrap();
        assert_eq!(
            grown.view(),
            grown.view_at(grown.version()),
            "after change {i}"
        );
        // Going back is refused: the tape only grows.
        assert!(grown.clone().extend(std::iter::once(&entry)).is_err());
    }
    assert_eq!(grown, full);
}
