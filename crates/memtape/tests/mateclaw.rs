//! MateClaw's extraction and emergence against a scripted model server on loopback, over
//! the real OpenAI-compatible protocol and a real SQLite file: the pre-checks and the
//! cooldown (no request sent when they say no), the try-lock, the JSON reply in every
//! wrapping models use, one memory version per run, and nothing written when the model
//! fails or answers badly.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use memtape::memory::paths;
use memtape::{
    EmergenceConfig, Engine, Error, ExtractionConfig, MemoryRun, Message, Scope, Store, Trigger,
    Wait, events::MEMORY_DROPPED,
};
use memtape_llm::{OpenAi, RetryPolicy};
use memtape_scripted::{Answer, Scripted, status, text};
use serde_json::json;

fn session() -> Scope {
    Scope::agent("t", "a").unwrap().with_session("s").unwrap()
}

fn memory() -> Scope {
    Scope::agent("t", "a").unwrap()
}

/// An engine on a real file whose clock the test moves.
fn open(dir: &std::path::Path) -> (Engine, Arc<Mutex<DateTime<Utc>>>) {
    let now = Arc::new(Mutex::new(
        DateTime::parse_from_rfc3339("2026-03-10T10:30:00Z")
            .unwrap()
            .with_timezone(&Utc),
    ));
    let clock = now.clone();
    let engine = Engine::init(dir)
        .unwrap()
        .with_clock(move || *clock.lock().unwrap());
    (engine, now)
}

fn client(server: &Scripted) -> OpenAi {
    OpenAi::new(&server.base, "scripted")
        .unwrap()
        .timeout(Duration::from_secs(5))
        .retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
}

fn talk(engine: &Engine, last_user: &str) {
    engine
        .append_messages(
            &session(),
            vec![
                Message::user("I just booked a kayak trip to Lofoten for June."),
                Message::assistant("That sounds wonderful! Anything to prepare?"),
                Message::user(last_user),
                Message::assistant("Noted."),
            ],
        )
        .unwrap();
}

const AUTO: Trigger<'static> = Trigger::Conversation { source: "web" };

fn answer(reply: serde_json::Value) -> Answer {
    text(&format!("```json\n{reply}\n```"))
}

fn file(engine: &Engine, path: &str) -> Option<String> {
    engine
        .memory(&memory())
        .unwrap()
        .content(path)
        .map(str::to_owned)
}

#[test]
fn an_extraction_writes_the_daily_note_memory_and_profile_as_one_version() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = open(dir.path());
    engine
        .save_long_term(&memory(), "# Memory\n- Lives in Oslo\n")
        .unwrap();
    talk(&engine, "Please remember that I prefer window seats.");
    let server = Scripted::start(vec![answer(json!({
        "should_update": true,
        "daily_entry": "## 10:30 Booked a kayak trip to Lofoten (June)",
        "memory_update": "# Memory\n- Lives in Oslo\n- Goes kayaking\n",
        "profile_update": "# Profile\n- Prefers window seats\n",
        "reason": "new preference and plan"
    }))]);
    let run = engine
        .extract(
            &session(),
            &client(&server),
            &ExtractionConfig::default(),
            AUTO,
        )
        .unwrap();
    assert_eq!(run.skipped, None);
    assert!(run.should_update);
    assert_eq!(run.reason, "new preference and plan");
    assert_eq!(
        run.changed,
        ["memory/2026-03-10.md", "MEMORY.md", "PROFILE.md"]
    );
    assert_eq!(run.dropped, 0);
    assert_eq!(
        file(&engine, "memory/2026-03-10.md").unwrap(),
        "# 2026-03-10\n\n## 10:30 Booked a kayak trip to Lofoten (June)\n"
    );
    assert_eq!(
        file(&engine, paths::MEMORY).unwrap(),
        "# Memory\n- Lives in Oslo\n- Goes kayaking\n"
    );
    assert_eq!(
        file(&engine, paths::PROFILE).unwrap(),
        "# Profile\n- Prefers window seats\n"
    );
    let (log, _) = engine.memory_log(&memory()).unwrap();
    assert_eq!(
        log.version(),
        2,
        "one save, then one version for the whole extraction"
    );
    // What the model saw: MateClaw's prompt with the transcript and the files.
    let body = server.body(0).unwrap();
    assert_eq!(body["max_tokens"], 1000);
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.starts_with("## Current date\n2026-03-10"),
        "{prompt}"
    );
    assert!(
        prompt.contains("User: I just booked a kayak trip"),
        "{prompt}"
    );
    assert!(prompt.contains("\n\nAssistant: Noted."), "{prompt}");
    assert!(prompt.contains("- Lives in Oslo"), "{prompt}");
    assert!(prompt.contains("(memory/2026-03-10.md)"), "{prompt}");
    // A second entry the same day follows a blank line.
    let server = Scripted::start(vec![answer(json!({
        "should_update": true, "daily_entry": "## 11:00 Bought a dry bag", "reason": "r"
    }))]);
    engine
        .extract(
            &session(),
            &client(&server),
            &ExtractionConfig::default(),
            Trigger::Manual,
        )
        .unwrap();
    assert_eq!(
        file(&engine, "memory/2026-03-10.md").unwrap(),
        "# 2026-03-10\n\n## 10:30 Booked a kayak trip to Lofoten (June)\n\n## 11:00 Bought a dry bag\n"
    );
}

#[test]
fn the_pre_checks_and_the_cooldown_send_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, now) = open(dir.path());
    let server = Scripted::start(vec![
        answer(json!({"should_update": false, "reason": "nothing new"})),
        answer(json!({"should_update": false, "reason": "still nothing"})),
        answer(json!({"should_update": false, "reason": "manual"})),
    ]);
    let llm = client(&server);
    let config = ExtractionConfig::default();
    let skipped = |run: MemoryRun, why: &str| {
        let s = run
            .skipped
            .unwrap_or_else(|| panic!("ran, expected: {why}"));
        assert!(s.contains(why), "{s}");
    };
    engine
        .append_messages(
            &session(),
            vec![
                Message::user("hello there, friend"),
                Message::assistant("hi"),
            ],
        )
        .unwrap();
    skipped(
        engine.extract(&session(), &llm, &config, AUTO).unwrap(),
        "fewer than 4",
    );
    skipped(
        engine
            .extract(&session(), &llm, &config, Trigger::Manual)
            .unwrap(),
        "fewer than 4",
    );
    talk(&engine, "ok");
    skipped(
        engine.extract(&session(), &llm, &config, AUTO).unwrap(),
        "shorter than 10",
    );
    talk(&engine, "a long enough message");
    let off = ExtractionConfig {
        enabled: false,
        ..config.clone()
    };
    skipped(
        engine.extract(&session(), &llm, &off, AUTO).unwrap(),
        "disabled",
    );
    let cron = Trigger::Conversation { source: "cron" };
    skipped(
        engine.extract(&session(), &llm, &config, cron).unwrap(),
        "scheduled task",
    );
    assert_eq!(server.requests(), 0);

    let run = engine.extract(&session(), &llm, &config, AUTO).unwrap();
    assert_eq!(run.reason, "nothing new");
    // Within 5 minutes the agent is not analysed again, from any session of it.
    *now.lock().unwrap() += TimeDelta::minutes(4);
    skipped(
        engine.extract(&session(), &llm, &config, AUTO).unwrap(),
        "less than 5 minutes",
    );
    // A manual run skips the cooldown.
    assert_eq!(
        engine
            .extract(&session(), &llm, &config, Trigger::Manual)
            .unwrap()
            .reason,
        "still nothing"
    );
    *now.lock().unwrap() += TimeDelta::minutes(6);
    assert_eq!(
        engine
            .extract(&session(), &llm, &config, AUTO)
            .unwrap()
            .reason,
        "manual"
    );
    assert_eq!(server.requests(), 3);
}

#[test]
fn one_extraction_at_a_time_per_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = open(dir.path());
    talk(&engine, "a long enough message");
    let server = Scripted::start(vec![Answer::Delayed(
        Duration::from_millis(400),
        Box::new(answer(json!({"should_update": false, "reason": "slow"}))),
    )]);
    let llm = client(&server);
    let config = ExtractionConfig::default();
    std::thread::scope(|scope| {
        let first = scope.spawn(|| engine.extract(&session(), &llm, &config, Trigger::Manual));
        while server.requests() == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Another opening of the store (another process) finds the memory busy.
        let other = Engine::open(dir.path()).unwrap();
        let busy = other
            .extract(&session(), &llm, &config, Trigger::Manual)
            .unwrap();
        assert!(busy.skipped.unwrap().contains("elsewhere"));
        let busy = other
            .emerge(
                &memory(),
                &llm,
                &EmergenceConfig::default(),
                None,
                Wait::Try,
            )
            .unwrap();
        assert!(busy.skipped.unwrap().contains("elsewhere"));
        assert_eq!(first.join().unwrap().unwrap().reason, "slow");
    });
}

#[test]
fn a_failed_or_unusable_answer_writes_nothing() {
    for (what, script) in [
        (
            "prose",
            vec![text("I think you should remember the kayak.")],
        ),
        (
            "truncated JSON",
            vec![text("{\"should_update\": true, \"memory_update\": \"# M")],
        ),
        ("500", vec![status(500, "boom")]),
        (
            "NUL",
            vec![answer(
                json!({"should_update": true, "memory_update": "a\u{0}b"}),
            )],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (engine, _) = open(dir.path());
        engine
            .save_long_term(&memory(), "# Memory\n- Lives in Oslo\n")
            .unwrap();
        talk(&engine, "a long enough message");
        let before = engine.memory(&memory()).unwrap();
        let server = Scripted::start(script);
        let err = engine
            .extract(
                &session(),
                &client(&server),
                &ExtractionConfig::default(),
                Trigger::Manual,
            )
            .expect_err(what);
        assert!(
            matches!(err, Error::Model(_) | Error::Llm(_)),
            "{what}: {err:?}"
        );
        assert_eq!(engine.memory(&memory()).unwrap(), before, "{what}");
    }
}

#[test]
fn a_rewrite_that_drops_a_fact_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = open(dir.path());
    engine
        .save_long_term(
            &memory(),
            "# Memory\n- Lives in Oslo\n- Allergic to penicillin\n",
        )
        .unwrap();
    talk(&engine, "a long enough message");
    let server = Scripted::start(vec![answer(json!({
        "should_update": true, "memory_update": "# Memory\n- Lives in Oslo\n- Kayaks\n", "reason": "r"
    }))]);
    let run = engine
        .extract(
            &session(),
            &client(&server),
            &ExtractionConfig::default(),
            Trigger::Manual,
        )
        .unwrap();
    assert_eq!(run.dropped, 1);
    let dropped = engine.dropped_facts(&memory()).unwrap();
    assert_eq!(dropped[0].fact.text, "- Allergic to penicillin");
    assert_eq!(dropped[0].fact.by, "extraction");
    assert!(
        engine
            .store()
            .get("t", dropped[0].id)
            .unwrap()
            .unwrap()
            .payload
            .name()
            == Some(MEMORY_DROPPED)
    );
}

#[test]
fn emergence_merges_the_newest_notes_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = open(dir.path());
    engine
        .save_long_term(&memory(), "# Memory\n- Lives in Oslo\n- Old habit: tea\n")
        .unwrap();
    let server = Scripted::start(vec![answer(json!({
        "should_update": true,
        "memory_content": "# Memory\n- Lives in Oslo\n- Kayaks every weekend\n",
        "reason": "kayaking recurs"
    }))]);
    let llm = client(&server);
    // No notes: nothing to send.
    let run = engine
        .emerge(
            &memory(),
            &llm,
            &EmergenceConfig::default(),
            None,
            Wait::Block,
        )
        .unwrap();
    assert!(run.skipped.unwrap().contains("no daily notes"));
    assert_eq!(server.requests(), 0);
    for day in 1..=9 {
        let date = NaiveDate::from_ymd_opt(2026, 3, day).unwrap();
        engine
            .append_daily(&memory(), &format!("kayaked on day {day}"), Some(date))
            .unwrap();
    }
    let notes_before: Vec<String> = engine
        .memory(&memory())
        .unwrap()
        .dailies()
        .iter()
        .map(|(_, _, f)| f.content.clone())
        .collect();
    let run = engine
        .emerge(
            &memory(),
            &llm,
            &EmergenceConfig::default(),
            None,
            Wait::Block,
        )
        .unwrap();
    assert_eq!(run.changed, ["MEMORY.md"]);
    assert_eq!(run.dropped, 1, "the old habit was dropped and kept");
    assert_eq!(
        file(&engine, paths::MEMORY).unwrap(),
        "# Memory\n- Lives in Oslo\n- Kayaks every weekend\n"
    );
    let prompt = server.body(0).unwrap()["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.contains("## Daily notes of the last 7 days"),
        "{prompt}"
    );
    let newest = prompt.find("### memory/2026-03-09.md").unwrap();
    let oldest_read = prompt.find("### memory/2026-03-03.md").unwrap();
    assert!(newest < oldest_read, "newest first");
    assert!(!prompt.contains("2026-03-02.md"), "only the 7 newest notes");
    let notes_after: Vec<String> = engine
        .memory(&memory())
        .unwrap()
        .dailies()
        .iter()
        .map(|(_, _, f)| f.content.clone())
        .collect();
    assert_eq!(notes_before, notes_after, "daily notes are never changed");
    assert_eq!(
        engine.dropped_facts(&memory()).unwrap()[0].fact.by,
        "emergence"
    );
}

/// The scheduler's question: whose emergence fires in a window of time. Each agent's own
/// schedule wins over the default; `off` leaves it out; sessions are not memories.
#[test]
fn due_emergences_follow_each_agents_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _) = open(dir.path());
    let note = |tenant: &str, agent: &str| {
        let scope = Scope::agent(tenant, agent).unwrap();
        engine.append_daily(&scope, "a note", None).unwrap();
        scope
    };
    let a = note("t", "a");
    let b = note("t", "b");
    let c = note("u", "c");
    talk(&engine, "a long enough message");
    let mut config = EmergenceConfig::default();
    config.agents.insert("b".into(), "30 3 * * *".into());
    config.agents.insert("c".into(), "off".into());
    let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
    let due = engine
        .due_emergences(
            &config,
            at("2026-03-10T01:59:30Z"),
            at("2026-03-10T02:00:30Z"),
        )
        .unwrap();
    assert_eq!(due, [a], "a fires at 02:00; b at 03:30; c is off");
    let due = engine
        .due_emergences(
            &config,
            at("2026-03-10T03:00:00Z"),
            at("2026-03-10T03:31:00Z"),
        )
        .unwrap();
    assert_eq!(due, [b]);
    let due = engine
        .due_emergences(
            &config,
            at("2026-03-10T02:00:30Z"),
            at("2026-03-10T02:01:00Z"),
        )
        .unwrap();
    assert!(due.is_empty(), "02:00 already passed");
    assert!(c.session().is_none());
}
