//! Session lifecycle on a real SQLite store: nanobot's /new (seed 000: wait for a running
//! consolidation, archive the unconsolidated messages, then clear; never clear when
//! archiving fails) and daily-note retention (seed 001: retention_days, default 30;
//! pruning on start over every memory scope).
//!
//! The summarizers here are small stand-ins: one that lists the messages it got and one
//! that fails. The LLM-backed summarizer will be tested against a scripted
//! OpenAI-compatible server when it lands.
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use memtape::memory::paths;
use memtape::{
    DEFAULT_RETENTION_DAYS, Engine, EntryId, Error, Filter, HistoryLimits, Kind, Message, Scope,
    Store,
};
use memtape_core::summary::Summarizer;

fn at(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, day, 14, 30, 0).unwrap()
}

fn agent() -> Scope {
    Scope::agent("acme", "bot").unwrap()
}

fn session() -> Scope {
    agent().with_session("telegram:42").unwrap()
}

/// Joins the messages it is given, and remembers them.
#[derive(Default)]
struct Listing {
    seen: Mutex<Vec<String>>,
}

impl Summarizer for Listing {
    fn summarize(
        &self,
        messages: &[Message],
        _previous: Option<&str>,
    ) -> memtape_core::Result<String> {
        let texts: Vec<String> = messages
            .iter()
            .map(|m| m.content_text().into_owned())
            .collect();
        self.seen.lock().unwrap().extend(texts.iter().cloned());
        Ok(format!("Talked about: {}.", texts.join("; ")))
    }
}

/// Fails like an LLM call that timed out, or finds nothing worth keeping.
struct Failing {
    empty: bool,
}

impl Summarizer for Failing {
    fn summarize(&self, _: &[Message], _: Option<&str>) -> memtape_core::Result<String> {
        if self.empty {
            return Ok("  ".into());
        }
        Err(memtape_core::Error::Summarize("provider timed out".into()))
    }
}

fn texts(engine: &Engine, s: &Scope) -> Vec<String> {
    engine
        .history(s, &HistoryLimits::default())
        .unwrap()
        .iter()
        .map(|e| e.message().unwrap().content_text().into_owned())
        .collect()
}

/// Seed 000, `/new`: the unconsolidated messages (after last_consolidated) are archived to
/// HISTORY.md, then the session is cleared — the next history is empty — while every
/// message stays on the tape (nanobot's messages are never modified or deleted).
#[test]
fn nanobot_new_archives_unconsolidated_messages_then_clears() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap().with_clock(|| at(15));
    let s = session();
    let stored = engine
        .append_messages(
            &s,
            vec![
                Message::user("configure the telegram bot"),
                Message::assistant("set the token"),
                Message::user("use the SOCKS5 proxy"),
                Message::assistant("done: 127.0.0.1:1080"),
            ],
        )
        .unwrap();
    engine.mark_consolidated(&s, stored[1].id).unwrap();

    let summarizer = Listing::default();
    let new = engine.new_session(&s, &summarizer).unwrap();
    assert_eq!(new.archived, 2);
    assert_eq!(
        *summarizer.seen.lock().unwrap(),
        ["use the SOCKS5 proxy", "done: 127.0.0.1:1080"],
        "only the unconsolidated messages are archived"
    );
    let history = engine.memory(&agent()).unwrap();
    assert_eq!(
        history.content(paths::HISTORY),
        Some("[2026-03-15 14:30] Talked about: use the SOCKS5 proxy; done: 127.0.0.1:1080.\n\n")
    );
    assert_eq!(new.history.unwrap().version, 1);

    assert!(texts(&engine, &s).is_empty(), "the session is cleared");
    let boundary = new.boundary.unwrap();
    assert_eq!(boundary.payload.name(), Some("session/new"));
    let info = engine.store().scope_info(&s).unwrap().unwrap();
    assert_eq!(info.last_consolidated, stored[3].id);
    let on_tape = engine
        .store()
        .scan(
            &s,
            &Filter {
                kinds: vec![Kind::Message],
                ..Filter::default()
            },
        )
        .unwrap();
    assert_eq!(on_tape.len(), 4, "nothing is removed from the tape");

    // The new conversation's history starts after the boundary.
    engine
        .append(&s, Message::user("hello again"), Default::default())
        .unwrap();
    assert_eq!(texts(&engine, &s), ["hello again"]);
}

/// Seed 000: "If archival fails, the session is not cleared — no data loss." A summarizer
/// error leaves the session, its pointer and HISTORY.md as they were.
#[test]
fn nanobot_new_never_clears_when_archiving_fails() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = session();
    engine
        .append_messages(&s, vec![Message::user("hi"), Message::assistant("hello")])
        .unwrap();
    let before = engine.store().last_id().unwrap();

    let err = engine
        .new_session(&s, &Failing { empty: false })
        .unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(memtape_core::Error::Summarize(_))),
        "{err:?}"
    );
    assert!(err.to_string().contains("provider timed out"), "{err}");

    assert_eq!(
        engine.store().last_id().unwrap(),
        before,
        "nothing was written"
    );
    assert_eq!(texts(&engine, &s), ["hi", "hello"]);
    assert!(
        engine
            .memory(&agent())
            .unwrap()
            .content(paths::HISTORY)
            .is_none()
    );
    // A retry that succeeds archives the same messages.
    let new = engine.new_session(&s, &Listing::default()).unwrap();
    assert_eq!(new.archived, 2);
    assert!(texts(&engine, &s).is_empty());
}

/// Seed 000: /new "waits for any in-flight consolidation to finish (acquires the
/// consolidation lock)", so it archives only what that consolidation left.
#[test]
fn nanobot_new_waits_for_a_running_consolidation() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = session();
    let stored = engine
        .append_messages(
            &s,
            vec![
                Message::user("one"),
                Message::assistant("two"),
                Message::user("three"),
                Message::assistant("four"),
            ],
        )
        .unwrap();
    let order = Mutex::new(Vec::new());
    let summarizer = Listing::default();
    let (engine, s, stored, order) = (&engine, &s, &stored, &order);
    std::thread::scope(|scope| {
        let (locked, wait_for_lock) = mpsc::channel();
        scope.spawn(move || {
            // A consolidation: holds the lock while it "calls the LLM", then moves the
            // pointer past the first two messages.
            let guard = engine.lock_consolidation(s).unwrap();
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            engine.mark_consolidated(s, stored[1].id).unwrap();
            order.lock().unwrap().push("consolidation");
            drop(guard);
        });
        wait_for_lock.recv().unwrap();
        assert!(
            engine.try_lock_consolidation(s).unwrap().is_none(),
            "the consolidation holds the lock"
        );
        let new = engine.new_session(s, &summarizer).unwrap();
        order.lock().unwrap().push("new");
        assert_eq!(new.archived, 2);
    });
    assert_eq!(*order.lock().unwrap(), ["consolidation", "new"]);
    assert_eq!(*summarizer.seen.lock().unwrap(), ["three", "four"]);
    // The lock is free again, and is per session.
    assert!(engine.try_lock_consolidation(s).unwrap().is_some());
    let _other = engine
        .lock_consolidation(&agent().with_session("other").unwrap())
        .unwrap();
    assert!(engine.try_lock_consolidation(s).unwrap().is_some());
}

/// The consolidation lock holds across every opening of one data directory (each process
/// opens its own): while one engine holds a session's lock, another engine on the same
/// directory cannot take it, until the first lets go. Another tenant's session of the same
/// name is a different lock.
#[test]
fn the_consolidation_lock_holds_across_openings_of_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let first = Engine::init(dir.path()).unwrap();
    let second = Engine::open(dir.path()).unwrap();
    let s = session();
    let held = first.lock_consolidation(&s).unwrap();
    assert!(second.try_lock_consolidation(&s).unwrap().is_none());
    let elsewhere = Scope::agent("other-tenant", "bot")
        .unwrap()
        .with_session("telegram:42")
        .unwrap();
    assert_eq!(elsewhere.session(), s.session());
    assert!(second.try_lock_consolidation(&elsewhere).unwrap().is_some());
    // A waiting taker gets it as soon as the holder lets go.
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| second.lock_consolidation(&s).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !waiter.is_finished(),
            "the second engine waits for the lock"
        );
        drop(held);
        let _got = waiter.join().unwrap();
        assert!(first.try_lock_consolidation(&s).unwrap().is_none());
    });
    assert!(first.try_lock_consolidation(&s).unwrap().is_some());
}

/// nanobot appends a history entry only when the consolidation gave one: a span with
/// nothing worth keeping (an empty summary) is cleared without a HISTORY.md entry.
#[test]
fn nanobot_new_with_an_empty_summary_clears_without_a_history_entry() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = session();
    engine
        .append_messages(&s, vec![Message::user("hi"), Message::assistant("hello")])
        .unwrap();
    let new = engine.new_session(&s, &Failing { empty: true }).unwrap();
    assert_eq!((new.archived, new.history), (2, None));
    assert!(texts(&engine, &s).is_empty());
    assert!(engine.memory_log(&agent()).unwrap().0.changes().is_empty());
}

/// /new on a session with nothing unconsolidated archives nothing (the summarizer is not
/// called) and still marks where the new conversation starts; a session that does not
/// exist is left alone.
#[test]
fn nanobot_new_with_nothing_to_archive_only_marks_the_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = session();
    let ghost = engine.new_session(&s, &Failing { empty: false }).unwrap();
    assert_eq!((ghost.archived, ghost.boundary), (0, None));
    assert_eq!(engine.store().last_id().unwrap(), EntryId(0));

    let stored = engine
        .append_messages(&s, vec![Message::user("hi"), Message::assistant("hello")])
        .unwrap();
    engine.mark_consolidated(&s, stored[1].id).unwrap();
    let new = engine.new_session(&s, &Failing { empty: false }).unwrap();
    assert_eq!(new.archived, 0);
    assert!(new.history.is_none());
    assert_eq!(new.boundary.unwrap().payload.name(), Some("session/new"));
    let err = engine
        .new_session(&agent(), &Listing::default())
        .unwrap_err();
    assert!(err.to_string().contains("session"), "{err}");
}

/// Seed 001: daily notes are kept for retention_days (default 30); pruning on start goes
/// over every memory scope of the tenant (agents and agent-and-user scopes), removes the
/// notes older than the retention and keeps the rest (and every other file).
#[test]
fn bub_prune_removes_notes_older_than_retention_and_keeps_the_rest() {
    assert_eq!(DEFAULT_RETENTION_DAYS, 30);
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path())
        .unwrap()
        .with_clock(|| Utc.with_ymd_and_hms(2026, 3, 31, 9, 0, 0).unwrap());
    let day = |m: u32, d: u32| NaiveDate::from_ymd_opt(2026, m, d);
    let a = agent();
    let user = a.clone().with_user("ada").unwrap();
    engine.save_long_term(&a, "User likes Python").unwrap();
    engine.append_daily(&a, "- ancient", day(1, 5)).unwrap();
    engine
        .append_daily(&a, "- just too old", day(2, 28))
        .unwrap();
    engine
        .append_daily(&a, "- exactly 30 days", day(3, 1))
        .unwrap();
    engine.append_daily(&a, "- today", None).unwrap();
    engine
        .append_daily(&user, "- old, the user's", day(2, 1))
        .unwrap();
    engine
        .append_daily(&user, "- recent, the user's", day(3, 20))
        .unwrap();
    // A session and another tenant are not memory scopes of this tenant.
    engine
        .append(&session(), Message::user("hi"), Default::default())
        .unwrap();
    let elsewhere = Scope::agent("other", "bot").unwrap();
    engine
        .append_daily(&elsewhere, "- old elsewhere", day(1, 5))
        .unwrap();

    let report = engine
        .prune_all_daily("acme", DEFAULT_RETENTION_DAYS)
        .unwrap();
    assert_eq!(report.total(), 3);
    assert_eq!(report.pruned, [(a.clone(), 2), (user.clone(), 1)]);

    let view = engine.memory(&a).unwrap();
    let notes: Vec<String> = view.dailies().iter().map(|d| d.1.to_owned()).collect();
    assert_eq!(notes, ["memory/2026-03-31.md", "memory/2026-03-01.md"]);
    assert_eq!(view.content(paths::MEMORY), Some("User likes Python"));
    let (user_log, _) = engine.memory_log(&user).unwrap();
    assert_eq!(user_log.view().dailies().len(), 1);
    assert_eq!(engine.memory(&elsewhere).unwrap().dailies().len(), 1);
    // The pruned notes are still versions on the tape.
    let (log, _) = engine.memory_log(&a).unwrap();
    assert!(
        log.view_at(5)
            .content("memory/2026-01-05.md")
            .is_some_and(|c| c.contains("ancient"))
    );
    // Pruning again on the next start removes nothing.
    assert_eq!(
        engine
            .prune_all_daily("acme", DEFAULT_RETENTION_DAYS)
            .unwrap()
            .total(),
        0
    );
}
