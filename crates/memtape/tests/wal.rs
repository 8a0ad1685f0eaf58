//! Qanot's WAL capture through the engine (seed 004): matches go to SESSION-STATE.md with
//! timestamps, durable ones to MEMORY.md once, on a real SQLite tape.
use chrono::{TimeZone, Utc};
use memtape::{Engine, Scope};

#[test]
fn qanot_wal_appends_to_session_state_and_copies_durable_facts_once() {
    let dir = tempfile::tempdir().unwrap();
    let at = Utc.with_ymd_and_hms(2025, 1, 15, 10, 30, 0).unwrap();
    let engine = Engine::init(dir.path()).unwrap().with_clock(move || at);
    let user = Scope::agent("t", "a").unwrap().with_user("u").unwrap();
    let session = user.clone().with_session("s").unwrap();

    let got = engine
        .capture(&session, "My name is Sardor. Let's go with PostgreSQL.")
        .unwrap();
    let cats: Vec<&str> = got.matches.iter().map(|m| m.category.as_str()).collect();
    assert_eq!(cats, ["proper_noun", "decision"]);
    assert_eq!(got.saved_long_term, 1);

    // The memory is the user's (the session's agent-and-user scope), not the session's.
    let view = engine.memory(&user).unwrap();
    assert_eq!(
        view.content("SESSION-STATE.md").unwrap(),
        "# SESSION-STATE.md -- Active Working Memory\n\n\
         - [2025-01-15T10:30:00+00:00] **proper_noun**: My name is Sardor.\n\
         - [2025-01-15T10:30:00+00:00] **decision**: Let's go with PostgreSQL.\n"
    );
    assert_eq!(view.content("MEMORY.md").unwrap(), "- My name is Sardor\n");

    // The same fact again: the working state logs it, long-term memory does not repeat it.
    let again = engine.capture(&session, "my name is Sardor").unwrap();
    assert_eq!(again.saved_long_term, 0);
    let view = engine.memory(&user).unwrap();
    assert_eq!(view.content("MEMORY.md").unwrap(), "- My name is Sardor\n");
    assert_eq!(view.content("SESSION-STATE.md").unwrap().lines().count(), 5);

    // A preference is durable too; it is added below what is there.
    engine.capture(&session, "I prefer dark mode").unwrap();
    assert_eq!(
        engine.memory(&user).unwrap().content("MEMORY.md").unwrap(),
        "- My name is Sardor\n- I prefer dark mode\n"
    );
}

#[test]
fn qanot_wal_records_nothing_for_hard_negatives() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let session = Scope::agent("t", "a").unwrap().with_session("s").unwrap();
    for text in ["I'm not sure", "use your judgement", "ok thanks"] {
        let got = engine.capture(&session, text).unwrap();
        assert!(got.matches.is_empty() && got.recorded.is_none(), "{text}");
    }
    let agent = Scope::agent("t", "a").unwrap();
    assert_eq!(engine.memory_log(&agent).unwrap().0.version(), 0);
}
