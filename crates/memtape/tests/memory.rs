//! Memory tiers through the engine on a real SQLite store: every save a new version,
//! layered agent and user memory, forget, undo, pruning, and two writers that never
//! overwrite each other.
use std::cell::Cell;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use memtape::memory::{Change, Op, paths};
use memtape::{AppendOptions, Engine, Message, NewEntry, Payload, Scope, Store};

fn noon(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 2, day, 12, 0, 0).unwrap()
}

fn engine_at(dir: &std::path::Path, day: u32) -> Engine {
    Engine::init(dir).unwrap().with_clock(move || noon(day))
}

fn agent() -> Scope {
    Scope::agent("acme", "bot").unwrap()
}

/// Bub: "every save is a new version"; MEMORY.md is a full replace (nanobot).
#[test]
fn seed_bub_every_save_is_a_new_version() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_at(dir.path(), 10);
    let a = agent();
    assert_eq!(
        e.save_long_term(&a, "User likes Python").unwrap().version,
        1
    );
    assert_eq!(e.save_long_term(&a, "User likes Rust").unwrap().version, 2);
    let (log, _) = e.memory_log(&a).unwrap();
    assert_eq!(
        log.view_at(1).content(paths::MEMORY),
        Some("User likes Python")
    );
    assert_eq!(
        e.memory(&a).unwrap().content(paths::MEMORY),
        Some("User likes Rust")
    );
    // Reopening the store gives the same memory: it is on the tape.
    drop(e);
    let again = Engine::open(dir.path()).unwrap();
    assert_eq!(again.memory_log(&a).unwrap().0.version(), 2);
}

/// Bub's memory.daily and MateClaw's daily notes: appended, created with a date heading.
#[test]
fn seed_bub_daily_notes_append_under_a_date_heading() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_at(dir.path(), 10);
    let a = agent();
    e.append_daily(&a, "- Implemented tape memory zone", None)
        .unwrap();
    e.append_daily(&a, "- Fixed model_runner tests\n\n", None)
        .unwrap();
    let date = NaiveDate::from_ymd_opt(2026, 2, 9).unwrap();
    e.append_daily(&a, "- Designed memory architecture", Some(date))
        .unwrap();
    let view = e.memory(&a).unwrap();
    assert_eq!(
        view.content("memory/2026-02-10.md"),
        Some("# 2026-02-10\n\n- Implemented tape memory zone\n- Fixed model_runner tests\n")
    );
    assert_eq!(
        view.content("memory/2026-02-09.md"),
        Some("# 2026-02-09\n\n- Designed memory architecture\n")
    );
}

/// nanobot: HISTORY.md is append-only, one `[YYYY-MM-DD HH:MM]` paragraph per entry.
#[test]
fn seed_nanobot_history_is_append_only_and_timestamped() {
    let e = Engine::in_memory().with_clock(|| noon(10));
    let a = agent();
    e.append_history(&a, "User asked about configuring Telegram bot.")
        .unwrap();
    e.append_history(&a, "Debugged a session corruption issue.")
        .unwrap();
    assert_eq!(
        e.memory(&a).unwrap().content(paths::HISTORY),
        Some(
            "[2026-02-10 12:00] User asked about configuring Telegram bot.\n\n\
             [2026-02-10 12:00] Debugged a session corruption issue.\n\n"
        )
    );
}

/// Agent memory is shared by the agent's users; a user's own file wins.
#[test]
fn a_users_memory_layers_over_the_agents() {
    let e = Engine::in_memory();
    let a = agent();
    let ann = a.clone().with_user("ann").unwrap();
    e.record_memory(
        &a,
        Change::one(
            Op::Write {
                path: paths::SOUL.into(),
                content: "Be kind.".into(),
            },
            "test",
        ),
    )
    .unwrap();
    e.save_long_term(&a, "agent-wide facts").unwrap();
    e.save_long_term(&ann, "Ann prefers tea").unwrap();
    let view = e.memory(&ann).unwrap();
    assert_eq!(view.content(paths::SOUL), Some("Be kind."));
    assert_eq!(view.content(paths::MEMORY), Some("Ann prefers tea"));
    assert_eq!(
        e.memory(&a).unwrap().content(paths::MEMORY),
        Some("agent-wide facts")
    );
    let session = ann.with_session("s1").unwrap();
    assert!(e.memory(&session).is_err(), "memory is not per session");
}

/// Bub phase 3: memory.forget removes specific entries; undo goes back to a version.
#[test]
fn seed_bub_forget_and_undo_are_new_versions() {
    let e = Engine::in_memory().with_clock(|| noon(10));
    let a = agent();
    e.append_daily(&a, "keep", None).unwrap();
    let secret = e.append_daily(&a, "my password is hunter2", None).unwrap();
    e.forget_memory(&a, &[secret.id]).unwrap();
    let note = e.memory(&a).unwrap();
    assert_eq!(
        note.content("memory/2026-02-10.md"),
        Some("# 2026-02-10\n\nkeep\n")
    );
    let err = e.forget_memory(&a, &[memtape::EntryId(999)]).unwrap_err();
    assert!(err.to_string().contains("999"), "{err}");

    e.save_long_term(&a, "v4").unwrap();
    e.save_long_term(&a, "v5").unwrap();
    let undo = e.undo_memory(&a, 4).unwrap().unwrap();
    assert_eq!(undo.version, 6);
    assert_eq!(e.memory(&a).unwrap().content(paths::MEMORY), Some("v4"));
    assert!(e.undo_memory(&a, 6).unwrap().is_none(), "already there");
    assert!(e.undo_memory(&a, 60).is_err());
}

/// Bub: daily retention (default 30 days), pruned explicitly.
#[test]
fn seed_bub_prune_drops_daily_notes_past_retention() {
    let e = Engine::in_memory().with_clock(|| noon(28));
    let a = agent();
    for day in [1, 5, 27] {
        let date = NaiveDate::from_ymd_opt(2026, 2, day).unwrap();
        e.append_daily(&a, "note", Some(date)).unwrap();
    }
    e.save_long_term(&a, "stays").unwrap();
    assert_eq!(e.prune_daily(&a, 30).unwrap(), 0);
    assert_eq!(e.prune_daily(&a, 7).unwrap(), 2);
    let view = e.memory(&a).unwrap();
    assert_eq!(
        view.files.keys().collect::<Vec<_>>(),
        ["MEMORY.md", "memory/2026-02-27.md"]
    );
}

/// Two writers on one store: the one that computed from a stale view is made to compute
/// again, so neither change is lost.
#[test]
fn a_change_computed_from_a_stale_read_is_recomputed_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let first = engine_at(dir.path(), 10);
    let second = engine_at(dir.path(), 10);
    let a = agent();
    first.save_long_term(&a, "- likes tea\n").unwrap();
    let calls = Cell::new(0);
    let recorded = first
        .change_memory(&a, |view| {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                // Another process writes after this writer has read.
                second
                    .save_long_term(&a, "- likes tea\n- lives in Oslo\n")
                    .unwrap();
            }
            let mut content = view.content(paths::MEMORY).unwrap_or("").to_string();
            content.push_str("- prefers dark mode\n");
            Ok(Some(Change::one(
                Op::Write {
                    path: paths::MEMORY.into(),
                    content,
                },
                "test",
            )))
        })
        .unwrap()
        .unwrap();
    assert_eq!(calls.get(), 2, "the conflict made it read again");
    assert_eq!(recorded.version, 3);
    assert_eq!(
        first.memory(&a).unwrap().content(paths::MEMORY),
        Some("- likes tea\n- lives in Oslo\n- prefers dark mode\n")
    );
}

#[test]
fn clear_removes_every_file_but_keeps_the_versions() {
    let e = Engine::in_memory();
    let a = agent();
    assert!(e.clear_memory(&a).unwrap().is_none(), "nothing to clear");
    e.save_long_term(&a, "x").unwrap();
    assert_eq!(e.clear_memory(&a).unwrap().unwrap().version, 2);
    assert!(e.memory(&a).unwrap().files.is_empty());
    let (log, _) = e.memory_log(&a).unwrap();
    assert_eq!(log.view_at(1).content(paths::MEMORY), Some("x"));
}

/// Issue 10: `memory daily` from stdin took 26.9 MB while `files create` capped at
/// 256 KiB. One limit for every way into memory, for each op and for the file it makes.
#[test]
fn one_size_limit_for_every_way_into_memory() {
    use memtape::memory::MAX_FILE_BYTES;
    let dir = tempfile::tempdir().unwrap();
    let e = engine_at(dir.path(), 10);
    let a = agent();
    let big = "x".repeat(MAX_FILE_BYTES + 1);
    let limit = MAX_FILE_BYTES.to_string();
    let refused = |result: Result<memtape::memory::Recorded, memtape::Error>| match result {
        Ok(r) => panic!("version {} was recorded over the limit", r.version),
        Err(err) => {
            let text = err.to_string();
            assert!(text.contains(&limit), "{text}");
        }
    };
    refused(e.append_daily(&a, &big, None));
    refused(e.save_long_term(&a, &big));
    refused(e.append_history(&a, &big));
    // Each op is under the limit, the file it would make is not.
    let half = "y".repeat(MAX_FILE_BYTES / 2 + 1);
    e.append_daily(&a, &half, None).unwrap();
    refused(e.append_daily(&a, &half, None));
    // Checked on the change itself, so imports and every other way in refuse it too.
    let change = Change::one(
        Op::Append {
            path: "memories/x.md".into(),
            text: big.clone(),
            heading: None,
        },
        "import",
    );
    let text = change.validate().unwrap_err().to_string();
    assert!(text.contains(&limit), "{text}");
    let out = e
        .call_tool(&a, "memory.daily", &serde_json::json!({"content": big}))
        .unwrap();
    assert!(out.is_error && out.text.contains(&limit), "{}", out.text);
    assert_eq!(e.memory_log(&a).unwrap().0.version(), 1);
}

/// The size limit never stops the logs that grow for as long as an agent runs: the working
/// state (WAL captures) and the event history (/new) keep their newest entries, and the
/// older ones stay in earlier versions.
#[test]
fn the_working_state_and_the_history_keep_their_newest_entries_under_the_limit() {
    use memtape::memory::MAX_FILE_BYTES;
    let dir = tempfile::tempdir().unwrap();
    let e = engine_at(dir.path(), 10);
    let a = agent();
    let entry = |i: usize| format!("entry {i} {}", "h".repeat(MAX_FILE_BYTES / 5));
    for i in 0..12 {
        e.append_history(&a, &entry(i)).unwrap();
    }
    let history = e
        .memory(&a)
        .unwrap()
        .content(paths::HISTORY)
        .unwrap()
        .to_owned();
    assert!(history.len() <= MAX_FILE_BYTES, "{}", history.len());
    assert!(
        history.starts_with("[2026-02-10 12:00] entry "),
        "whole entries only"
    );
    assert!(history.ends_with(&format!("{}\n\n", entry(11))));
    // Past the limit the log keeps what fits in half of it (two of these entries), so it
    // is rewritten once per half a limit of appends: 1, 2, 3, 4, then 2 on the fifth, …,
    // 3 after twelve.
    assert!(history.len() <= MAX_FILE_BYTES / 2 + entry(0).len() * 2);
    assert_eq!(history.matches("[2026-02-10").count(), 3);
    let (log, _) = e.memory_log(&a).unwrap();
    let rewrites = log
        .changes()
        .iter()
        .filter(|r| matches!(r.change.ops[0], Op::Write { .. }))
        .count();
    assert_eq!(
        rewrites, 3,
        "a rewrite every third append once full, not every one"
    );
    let (log, _) = e.memory_log(&a).unwrap();
    assert!(
        log.view_at(2)
            .content(paths::HISTORY)
            .unwrap()
            .contains("entry 0 ")
    );

    let line = format!("- [2026-02-10 12:00] {}\n", "s".repeat(10_000));
    for _ in 0..30 {
        e.record_memory(
            &a,
            Change::one(
                Op::Append {
                    path: paths::SESSION_STATE.into(),
                    text: line.clone(),
                    heading: Some(paths::SESSION_STATE_HEADING.into()),
                },
                "wal",
            ),
        )
        .unwrap();
    }
    let state = e.memory(&a).unwrap();
    let state = state.content(paths::SESSION_STATE).unwrap();
    assert!(state.len() <= MAX_FILE_BYTES);
    assert!(state.starts_with(&format!("{}{line}", paths::SESSION_STATE_HEADING)));
    // Daily notes are not logs of this kind: past the limit they are refused.
    let big = "d".repeat(MAX_FILE_BYTES / 2 + 1);
    e.append_daily(&a, &big, None).unwrap();
    assert!(e.append_daily(&a, &big, None).is_err());
}

/// The memory log an engine keeps between reads is brought up to date from the tape: a
/// change written by another engine on the same store (another process) is seen at once,
/// and many writers on threads leave the same view a fresh engine folds from scratch.
#[test]
fn the_kept_memory_log_follows_changes_from_other_engines_and_threads() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent();
    let first = std::sync::Arc::new(engine_at(dir.path(), 10));
    first.save_long_term(&a, "one").unwrap();
    assert_eq!(
        first.memory(&a).unwrap().content(paths::MEMORY),
        Some("one")
    );
    let second = Engine::open(dir.path()).unwrap();
    second.save_long_term(&a, "two").unwrap();
    assert_eq!(
        first.memory(&a).unwrap().content(paths::MEMORY),
        Some("two")
    );
    assert_eq!(first.memory_log(&a).unwrap().0.version(), 2);

    std::thread::scope(|s| {
        for t in 0..4 {
            let e = std::sync::Arc::clone(&first);
            let a = a.clone();
            s.spawn(move || {
                for i in 0..25 {
                    e.append_history(&a, &format!("thread {t} entry {i}"))
                        .unwrap();
                    let _ = e.memory(&a).unwrap();
                }
            });
        }
        for i in 0..25 {
            second
                .append_daily(&a, &format!("- note {i}"), None)
                .unwrap();
        }
    });
    let fresh = Engine::open(dir.path()).unwrap();
    let (log, _) = fresh.memory_log(&a).unwrap();
    assert_eq!(log.version(), 2 + 100 + 25);
    assert_eq!(first.memory(&a).unwrap(), log.view_at(log.version()));
    assert_eq!(second.memory(&a).unwrap(), log.view_at(log.version()));
    let history = log.view().content(paths::HISTORY).unwrap().to_owned();
    assert_eq!(history.matches("entry").count(), 100);
}

/// Issue 31, section 1: 64 threads capture a user message each into one agent's memory at
/// once. Every capture reaches SESSION-STATE.md (none is dropped because the others were
/// busy: on today's compare-and-append with 16 retries, most failed as contended), each
/// version is one capture with its own cause, and the changes are committed together
/// (fewer transactions than captures).
#[test]
fn wal_captures_of_64_threads_at_once_all_reach_session_state() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let engine = &engine;
    let sessions: Vec<Scope> = (0..64)
        .map(|i| agent().with_session(format!("s{i}")).unwrap())
        .collect();
    let start = std::sync::Barrier::new(64);
    let ids: Vec<memtape::EntryId> = std::thread::scope(|s| {
        let threads: Vec<_> = sessions
            .iter()
            .enumerate()
            .map(|(i, session)| {
                let start = &start;
                s.spawn(move || {
                    let text = format!("my order {} ships Friday", 1000 + i);
                    let entry = engine
                        .append(session, Message::user(&text), AppendOptions::default())
                        .unwrap();
                    start.wait();
                    let captured = engine.capture_entry(&entry).unwrap();
                    assert!(captured.recorded.is_some());
                    if i % 4 == 0 {
                        // A capture retried from the tape records nothing twice.
                        let again = engine.recapture("acme", entry.id).unwrap().unwrap();
                        assert_eq!(again.recorded, None);
                    }
                    entry.id
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let a = agent();
    let state = engine.memory(&a).unwrap();
    let state = state.content(paths::SESSION_STATE).unwrap();
    for i in 0..64 {
        let line = format!("my order {} ships Friday", 1000 + i);
        assert_eq!(state.matches(&line).count(), 1, "{line} once in:\n{state}");
    }
    let (log, _) = engine.memory_log(&a).unwrap();
    assert_eq!(log.version(), 64, "one version per capture");
    for id in &ids {
        let caused: Vec<_> = log
            .changes()
            .iter()
            .filter(|r| r.change.caused_by.contains(id))
            .collect();
        assert_eq!(caused.len(), 1, "entry {id} caused one change");
    }
    // Changes committed together share their time (one transaction, one moment).
    let moments: std::collections::BTreeSet<_> = log.changes().iter().map(|r| r.at).collect();
    assert!(
        moments.len() < 64,
        "64 captures in {} transactions",
        moments.len()
    );
}

/// Issue 31, section 1: two engines on one store (two processes: a CLI beside a server)
/// capture at once, 16 threads each; the writers of the two conflict through the store's
/// compare-and-append and compute again, and no capture is lost or recorded twice.
#[test]
fn wal_captures_from_two_processes_at_once_are_all_kept_once() {
    let dir = tempfile::tempdir().unwrap();
    let engines = [
        Engine::init(dir.path()).unwrap(),
        Engine::init(dir.path()).unwrap(),
    ];
    std::thread::scope(|s| {
        for (e, engine) in engines.iter().enumerate() {
            for t in 0..16 {
                s.spawn(move || {
                    let session = agent().with_session(format!("p{e}-{t}")).unwrap();
                    for k in 0..4 {
                        let text = format!("call me at 555-{e}{t:02}{k}");
                        let entry = engine
                            .append(&session, Message::user(&text), AppendOptions::default())
                            .unwrap();
                        engine.capture_entry(&entry).unwrap();
                    }
                });
            }
        }
    });
    let state = engines[0].memory(&agent()).unwrap();
    let state = state.content(paths::SESSION_STATE).unwrap();
    for e in 0..2 {
        for t in 0..16 {
            for k in 0..4 {
                let number = format!("555-{e}{t:02}{k}");
                assert_eq!(state.matches(&number).count(), 1, "{number} once");
            }
        }
    }
    assert_eq!(engines[1].memory_log(&agent()).unwrap().0.version(), 128);
}

/// Issue 31, section 1: messages appended with their captures in one transaction
/// (`append_capturing`, the server's path), from two processes at once and beside another
/// thread's memory writes: every message is stored once and captured once, the captures
/// that met a memory changed since it was read are made again after their messages, and
/// the other writes are all kept.
#[test]
fn messages_and_their_captures_in_one_transaction_race_other_writers_and_keep_everything() {
    let dir = tempfile::tempdir().unwrap();
    let engines = [
        Engine::init(dir.path()).unwrap(),
        Engine::init(dir.path()).unwrap(),
    ];
    std::thread::scope(|s| {
        for (e, engine) in engines.iter().enumerate() {
            for t in 0..8 {
                s.spawn(move || {
                    let session = agent().with_session(format!("p{e}-{t}")).unwrap();
                    for k in 0..4 {
                        let messages: Vec<NewEntry> = (0..2)
                            .map(|m| {
                                let text = format!("call me at 555-{e}{t}{k}{m}");
                                NewEntry::new(
                                    session.clone(),
                                    Payload::Message(Message::user(&text)),
                                    engine.now(),
                                )
                            })
                            .collect();
                        let found = messages.iter().map(memtape::scan_new_entry).collect();
                        let (stored, captured) = engine.append_capturing(messages, found).unwrap();
                        assert_eq!(stored.len(), 2);
                        for c in captured {
                            assert!(c.unwrap().recorded.is_some());
                        }
                    }
                });
            }
            s.spawn(move || {
                for k in 0..8 {
                    engine
                        .append_daily(&agent(), &format!("note {e}-{k}"), None)
                        .unwrap();
                }
            });
        }
    });
    let view = engines[0].memory(&agent()).unwrap();
    let state = view.content(paths::SESSION_STATE).unwrap();
    for e in 0..2 {
        for t in 0..8 {
            for k in 0..4 {
                for m in 0..2 {
                    let number = format!("555-{e}{t}{k}{m}");
                    assert_eq!(state.matches(&number).count(), 1, "{number} once");
                }
            }
        }
    }
    let notes: String = view
        .files
        .iter()
        .filter(|(path, _)| paths::daily_date(path).is_some())
        .map(|(_, f)| f.content.clone())
        .collect();
    for e in 0..2 {
        for k in 0..8 {
            assert!(notes.contains(&format!("note {e}-{k}")), "note {e}-{k}");
        }
    }
    for e in 0..2 {
        for t in 0..8 {
            let session = agent().with_session(format!("p{e}-{t}")).unwrap();
            let stored = engines[1]
                .store()
                .scan(&session, &memtape::Filter::default())
                .unwrap();
            assert_eq!(stored.len(), 8, "p{e}-{t}: each message stored once");
        }
    }
}

/// Issue 31, section 1: a write that needs the whole log (a forget) during a burst of
/// captures waits for the batch in flight, runs on the log as committed, and the captures
/// after it land on top of it.
#[test]
fn a_forget_during_a_burst_of_captures_sees_the_committed_log() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let a = agent();
    engine.save_long_term(&a, "- first\n").unwrap();
    let second = engine.save_long_term(&a, "- second\n").unwrap();
    std::thread::scope(|s| {
        for t in 0..32 {
            let engine = &engine;
            s.spawn(move || {
                let session = agent().with_session(format!("u{t}")).unwrap();
                let text = format!("my pin is {t}000");
                let entry = engine
                    .append(&session, Message::user(&text), AppendOptions::default())
                    .unwrap();
                engine.capture_entry(&entry).unwrap();
            });
        }
        let engine = &engine;
        s.spawn(move || {
            let forgot = engine.forget_memory(&agent(), &[second.id]).unwrap();
            assert!(forgot.version > 2);
        });
    });
    let view = engine.memory(&a).unwrap();
    assert_eq!(view.content(paths::MEMORY), Some("- first\n"));
    let state = view.content(paths::SESSION_STATE).unwrap();
    for t in 0..32 {
        assert!(state.contains(&format!("my pin is {t}000")));
    }
    assert_eq!(engine.memory_log(&a).unwrap().0.version(), 2 + 32 + 1);
}

/// Issue 31, section 1: threads that capture many messages at once (a request's batch)
/// beside a thread whose writes run alone (undo, forget) all finish: a write that runs
/// alone never waits for changes whose thread waits for it.
#[test]
fn batched_captures_and_writes_that_run_alone_never_wait_on_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let a = agent();
    let first = engine.save_long_term(&a, "- first\n").unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (engine, done) = (&engine, &done);
        let captures: Vec<_> = (0..8)
            .map(|t| {
                s.spawn(move || {
                    let session = agent().with_session(format!("b{t}")).unwrap();
                    for round in 0..10 {
                        let entries: Vec<_> = (0..5)
                            .map(|k| {
                                let text =
                                    format!("my ticket is {}", 10_000 + t * 1000 + round * 10 + k);
                                engine
                                    .append(
                                        &session,
                                        Message::user(&text),
                                        AppendOptions::default(),
                                    )
                                    .unwrap()
                            })
                            .collect();
                        for result in engine.capture_entries(&entries) {
                            assert!(result.unwrap().recorded.is_some());
                        }
                    }
                })
            })
            .collect();
        s.spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                engine.undo_memory(&agent(), first.version).unwrap();
            }
        });
        for c in captures {
            c.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let (log, _) = engine.memory_log(&a).unwrap();
    let captured = log
        .changes()
        .iter()
        .filter(|r| r.change.source == "wal")
        .count();
    assert_eq!(captured, 8 * 10 * 5, "every capture, each once");
}
