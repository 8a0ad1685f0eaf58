//! The context builder through the engine on a real SQLite store: compactions recorded on
//! the tape and reused by later calls (and processes), the stable prefix between turns,
//! memory in the system message, Qanot's working buffer and recovery, and the requests
//! that must not write.
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, TimeZone, Utc};
use memtape::context::{common_prefix_tokens, extends};
use memtape::memory::{Change, Op, paths};
use memtape::summary::{ExtractiveSummarizer, Summarizer};
use memtape::{
    AppendOptions, Compaction, Context, ContextConfig, ContextRequest, Engine, EntryId, Error,
    Kind, MateClaw, Message, Policy, Qanot, Role, Scope, TapeQuery, TokenCounter,
};

/// A clock the test moves.
#[derive(Clone)]
struct Clock(Arc<AtomicI64>);

impl Clock {
    fn new() -> Self {
        let start = Utc.with_ymd_and_hms(2026, 2, 10, 9, 0, 0).unwrap();
        Clock(Arc::new(AtomicI64::new(start.timestamp())))
    }
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(self.0.load(Ordering::SeqCst), 0).unwrap()
    }
    fn advance_minutes(&self, minutes: i64) {
        self.0.fetch_add(minutes * 60, Ordering::SeqCst);
    }
}

fn engine(dir: &std::path::Path, clock: &Clock) -> Engine {
    let c = clock.clone();
    Engine::init(dir).unwrap().with_clock(move || c.now())
}

fn session() -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user("ada")
        .unwrap()
        .with_session("s1")
        .unwrap()
}

fn memory_scope() -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user("ada")
        .unwrap()
}

/// Appends `n` exchanges (a user message and an assistant reply), numbered from `from`.
fn chat(e: &Engine, from: usize, n: usize) {
    for i in from..from + n {
        e.append(
            &session(),
            Message::user(format!(
                "Question {i}: how should we configure service number {i} for the Falcon project?"
            )),
            AppendOptions::default(),
        )
        .unwrap();
        e.append(
            &session(),
            Message::assistant(format!(
                "Answer {i}: we decided to run service {i} on port {} with 2 replicas.",
                8000 + i
            )),
            AppendOptions::default(),
        )
        .unwrap();
    }
}

/// A request with no reply budget: Qanot's thresholds fall on the prompt alone (the
/// core's tests count the reply budget).
fn request(max: usize, policy: Policy) -> ContextRequest {
    ContextRequest {
        system_prompt: "You are the Falcon project's assistant.".into(),
        config: ContextConfig {
            reply_tokens: 0,
            ..ContextConfig::new(max, policy)
        },
        ..ContextRequest::default()
    }
}

/// The prompt's tokens with no compaction and nothing recorded.
fn full_tokens(e: &Engine, policy: Policy) -> usize {
    let mut r = request(10_000_000, policy);
    r.record = false;
    e.context(&session(), &r).unwrap().tokens
}

fn compaction_events(e: &Engine) -> Vec<Compaction> {
    let q = TapeQuery {
        kinds: vec![Kind::Event],
        ..TapeQuery::default()
    };
    e.query(&session(), &q)
        .unwrap()
        .iter()
        .filter_map(|entry| Compaction::from_entry(entry).map(Result::unwrap))
        .collect()
}

/// A summarizer that counts its calls and delegates to the extractive one.
#[derive(Default)]
struct Counting(Mutex<usize>);
impl Summarizer for Counting {
    fn summarize(
        &self,
        messages: &[Message],
        previous: Option<&str>,
    ) -> memtape_core::Result<String> {
        *self.0.lock().unwrap() += 1;
        ExtractiveSummarizer::default().summarize(messages, previous)
    }
}

fn texts(c: &Context) -> Vec<String> {
    c.messages
        .iter()
        .map(|m| m.content_text().into_owned())
        .collect()
}

/// MateClaw + the design: a compaction is a `context.compaction` event on the session's
/// tape; the next call — here from a new process (the store reopened) — reuses it without
/// summarizing again and builds the same prompt.
#[test]
fn mateclaw_compaction_is_recorded_on_the_tape_and_reused_by_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 12);
    let budget = (full_tokens(&e, Policy::default()) as f64 / 0.75) as usize - 1;
    let req = request(budget, Policy::default());
    let counting = Counting::default();
    let first = e.context_with(&session(), &req, &counting).unwrap();
    assert!(first.compacted);
    assert_eq!(*counting.0.lock().unwrap(), 1);
    let recorded = compaction_events(&e);
    assert_eq!(recorded.len(), 1);
    assert_eq!(first.compaction.as_ref(), Some(&recorded[0]));
    match &recorded[0] {
        Compaction::MateClaw {
            from,
            through,
            messages,
            summary,
        } => {
            assert_eq!(*from, EntryId(0));
            assert_eq!(*messages, 20, "all but the 2 most recent pairs");
            assert_eq!(*through, EntryId(20));
            assert!(summary.contains("Falcon"), "{summary}");
        }
        other => panic!("{other:?}"),
    }
    drop(e);

    clock.advance_minutes(45);
    let again = engine(dir.path(), &clock);
    let second = again.context_with(&session(), &req, &counting).unwrap();
    assert!(!second.compacted);
    assert_eq!(*counting.0.lock().unwrap(), 1, "no second summary");
    assert_eq!(second.messages, first.messages);
    assert_eq!(compaction_events(&again).len(), 1);
}

/// Stable prefix: between compactions each turn's prompt starts with the previous prompt
/// (all of it but its last message), so LLM prompt caches keep hitting.
#[test]
fn the_prompt_prefix_is_stable_between_turns() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 12);
    let budget = (full_tokens(&e, Policy::default()) as f64 / 0.75) as usize - 1;
    let req = request(budget, Policy::default());
    e.append(
        &session(),
        Message::user("What port does service 3 use?"),
        AppendOptions::default(),
    )
    .unwrap();
    let mut previous = e.context(&session(), &req).unwrap();
    assert!(previous.compacted);
    let bpe = memtape::Bpe::new(memtape::BpeEncoding::Cl100k);
    for turn in 0..3 {
        clock.advance_minutes(2);
        e.append(
            &session(),
            Message::assistant(format!("Port 800{turn}.")),
            AppendOptions::default(),
        )
        .unwrap();
        e.append(
            &session(),
            Message::user(format!("And then {turn}?")),
            AppendOptions::default(),
        )
        .unwrap();
        let next = e.context(&session(), &req).unwrap();
        assert!(!next.compacted);
        assert!(extends(&previous.messages, &next.messages), "turn {turn}");
        assert!(
            common_prefix_tokens(&previous.messages, &next.messages, &bpe)
                >= previous.stable_prefix_tokens
        );
        previous = next;
    }
}

/// MateClaw: a later compaction starts where the one in effect ended and folds its
/// summary in; the recorded spans follow each other.
#[test]
fn mateclaw_later_compactions_continue_from_the_one_in_effect() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 12);
    let budget = (full_tokens(&e, Policy::default()) as f64 / 0.75) as usize - 1;
    let req = request(budget, Policy::default());
    assert!(e.context(&session(), &req).unwrap().compacted);
    chat(&e, 12, 12);
    let ctx = e.context(&session(), &req).unwrap();
    assert!(ctx.compacted);
    let recorded = compaction_events(&e);
    assert_eq!(recorded.len(), 2);
    match (&recorded[0], &recorded[1]) {
        (
            Compaction::MateClaw { through: first, .. },
            Compaction::MateClaw {
                from,
                messages,
                summary,
                ..
            },
        ) => {
            assert_eq!(from, first);
            assert!(*messages > 20);
            // Facts of both spans: an answer carried from the first summary, and one of
            // the second span's.
            assert!(summary.contains("- Assistant: Answer 0:"), "{summary}");
            assert!(
                (10..20).any(|i| summary.contains(&format!("Answer {i}:"))),
                "{summary}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(ctx.tokens <= budget);
}

/// Dify's threads and the tape: a compaction made on one branch is not in effect after the
/// conversation is regenerated from a message before it.
#[test]
fn a_compaction_on_another_branch_is_not_in_effect() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 12);
    let budget = (full_tokens(&e, Policy::default()) as f64 / 0.75) as usize - 1;
    let req = request(budget, Policy::default());
    assert!(e.context(&session(), &req).unwrap().compacted);
    // Regenerate the answer to the second question (entry 3): the thread is now 1, 2, 3, new.
    e.append(
        &session(),
        Message::assistant("A different second answer."),
        AppendOptions {
            parent: Some(EntryId(3)),
            ..AppendOptions::default()
        },
    )
    .unwrap();
    let ctx = e.context(&session(), &req).unwrap();
    assert!(ctx.compaction.is_none());
    assert_eq!(ctx.history_messages, 4);
    assert_eq!(texts(&ctx).last().unwrap(), "A different second answer.");
}

/// Issue 4 §6: the system message holds the system prompt, the enabled agent files by sort
/// order (MateClaw), and the `<memory>` block of the session's agent and user (Bub).
#[test]
fn the_system_message_holds_agent_files_and_the_sessions_memory() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    let agent = Scope::agent("acme", "bot").unwrap();
    for (path, content) in [
        ("SOUL.md", "Curious and kind."),
        ("AGENTS.md", "Use memory.save for facts."),
    ] {
        e.record_memory(
            &agent,
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
    e.save_long_term(&memory_scope(), "Ada prefers Rust.")
        .unwrap();
    e.append_daily(&memory_scope(), "- Met the Falcon team", None)
        .unwrap();
    e.append(&session(), Message::user("Hello"), AppendOptions::default())
        .unwrap();
    let ctx = e
        .context(&session(), &request(50_000, Policy::default()))
        .unwrap();
    assert_eq!(ctx.messages[0].role, Role::System);
    let system = ctx.messages[0].content_text();
    assert!(system.starts_with(
        "You are the Falcon project's assistant.\n\n--- AGENTS.md ---\nUse memory.save for facts.\n\n--- SOUL.md ---\nCurious and kind.\n\n<memory>\n"
    ), "{system}");
    assert!(system.contains("## Long-term Memory\nAda prefers Rust.\n"));
    assert!(system.contains("## Today's Notes\n# 2026-02-10\n\n- Met the Falcon team\n"));
    assert!(
        system
            .ends_with("Current date and time: 2026-02-10, between 09:00 and 10:00 UTC (Tuesday)")
    );
    // Another user of the agent shares the agent files but not Ada's memory.
    let bob = Scope::agent("acme", "bot")
        .unwrap()
        .with_user("bob")
        .unwrap()
        .with_session("s")
        .unwrap();
    let theirs = e
        .context(&bob, &request(50_000, Policy::default()))
        .unwrap();
    let system = theirs.messages[0].content_text();
    assert!(system.contains("--- AGENTS.md ---"));
    assert!(!system.contains("Ada prefers Rust."));
}

/// nanobot: consolidated messages left history; they leave the prompt too.
#[test]
fn consolidated_messages_are_not_in_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 3);
    e.mark_consolidated(&session(), EntryId(4)).unwrap();
    let ctx = e
        .context(&session(), &request(50_000, Policy::default()))
        .unwrap();
    assert_eq!(ctx.history_messages, 2);
    assert!(texts(&ctx)[1].starts_with("Question 2:"));
}

/// Qanot: from 50% of the budget the working buffer keeps every exchange in
/// memory/working-buffer.md — started once with its header, then appended to, never twice.
#[test]
fn qanot_working_buffer_is_kept_in_memory_from_50_percent() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 4);
    let qanot = Policy::Qanot(Qanot::default());
    let budget = (full_tokens(&e, qanot.clone()) as f64 / 0.55) as usize;
    let req = request(budget, qanot);
    let ctx = e.context(&session(), &req).unwrap();
    assert!(ctx.working_buffer);
    assert!(!ctx.compacted);
    let buffer = e.memory(&memory_scope()).unwrap();
    let text = buffer.content(paths::WORKING_BUFFER).unwrap().to_string();
    assert!(text.starts_with("# Working Buffer (Danger Zone Log)\n**Status:** ACTIVE\n**Started:** 2026-02-10T09:00:00+00:00\n"), "{text}");
    assert!(
        text.contains("## [2026-02-10 09:00:00] Human\nQuestion 3:"),
        "{text}"
    );
    assert!(
        text.contains("## [2026-02-10 09:00:00] Agent (summary)\nAnswer 3:"),
        "{text}"
    );
    assert!(
        !text.contains("Question 2:"),
        "only the exchange that crossed 50%"
    );
    // Building again copies nothing twice; a new exchange is appended.
    e.context(&session(), &req).unwrap();
    chat(&e, 4, 1);
    e.context(&session(), &req).unwrap();
    let text = e
        .memory(&memory_scope())
        .unwrap()
        .content(paths::WORKING_BUFFER)
        .unwrap()
        .to_string();
    assert_eq!(text.matches("Human\nQuestion 3:").count(), 1);
    assert_eq!(text.matches("Human\nQuestion 4:").count(), 1);
    // The buffer is memory, not prompt: the system message does not show it.
    let ctx = e.context(&session(), &req).unwrap();
    assert!(!ctx.messages[0].content_text().contains("Danger Zone"));
}

/// Qanot: past 60% the first 2 and last 4 messages stay with the marker between them, the
/// compaction is recorded, and recovery context from the memory (working buffer,
/// SESSION-STATE.md, today's notes) is appended to the current message.
#[test]
fn qanot_compaction_is_recorded_and_recovery_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    e.record_memory(
        &memory_scope(),
        Change::one(
            Op::Write {
                path: paths::SESSION_STATE.into(),
                content: "# SESSION-STATE.md -- Active Working Memory\n\n- **decision**: use PostgreSQL\n".into(),
            },
            "test",
        ),
    )
    .unwrap();
    chat(&e, 0, 10);
    e.append(
        &session(),
        Message::user("Next: service 10?"),
        AppendOptions::default(),
    )
    .unwrap();
    let qanot = Policy::Qanot(Qanot::default());
    let budget = (full_tokens(&e, qanot.clone()) as f64 / 0.60) as usize - 1;
    let ctx = e
        .context(&session(), &request(budget, qanot.clone()))
        .unwrap();
    assert!(ctx.compacted);
    let t = texts(&ctx);
    assert!(t[1].starts_with("Question 0:") && t[2].starts_with("Answer 0:"));
    assert!(
        t[3].starts_with("[CONTEXT COMPACTION: 14 earlier messages were removed"),
        "{}",
        t[3]
    );
    assert!(t[4].starts_with("Question 8:"));
    assert!(ctx.recovery);
    let last = t.last().unwrap();
    assert!(
        last.starts_with("Next: service 10?\n\n---\n\n[COMPACTION RECOVERY]\n"),
        "{last}"
    );
    assert!(last.contains("## Session State\n# SESSION-STATE.md -- Active Working Memory\n\n- **decision**: use PostgreSQL"));
    assert!(matches!(
        compaction_events(&e)[..],
        [Compaction::Qanot { removed: 14, .. }]
    ));
    // The next call keeps the same head and marker: the prefix is stable.
    e.append(
        &session(),
        Message::assistant("Port 8010."),
        AppendOptions::default(),
    )
    .unwrap();
    e.append(
        &session(),
        Message::user("Thanks. And 11?"),
        AppendOptions::default(),
    )
    .unwrap();
    let next = e.context(&session(), &request(budget, qanot)).unwrap();
    assert!(!next.compacted);
    assert!(extends(&ctx.messages, &next.messages));
}

/// MateClaw's compactForRetry and a preview (`record: false`) write nothing to the tape.
#[test]
fn emergency_and_preview_builds_record_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 12);
    let budget = (full_tokens(&e, Policy::default()) as f64 / 0.75) as usize - 1;
    let mut preview = request(budget, Policy::default());
    preview.record = false;
    assert!(e.context(&session(), &preview).unwrap().compacted);
    assert!(compaction_events(&e).is_empty());
    let mut emergency = request(budget, Policy::default());
    emergency.emergency = true;
    let ctx = e.context(&session(), &emergency).unwrap();
    assert!(ctx.emergency && !ctx.compacted);
    assert_eq!(ctx.messages.len(), 1 + 4);
    assert!(compaction_events(&e).is_empty());
    let entries = e.query(&session(), &TapeQuery::default()).unwrap();
    assert!(entries.iter().all(|x| x.kind() != Kind::Event));
}

#[test]
fn a_context_needs_a_session_and_a_workable_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    let err = e
        .context(&memory_scope(), &ContextRequest::default())
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    let mut bad = ContextRequest::default();
    bad.config.policy = Policy::MateClaw(MateClaw {
        compact_trigger_ratio: 2.0,
        ..MateClaw::default()
    });
    let err = e.context(&session(), &bad).unwrap_err();
    assert!(err.to_string().contains("compact_trigger_ratio"), "{err}");
    // An empty session still gets a system message (and the given message).
    let hello = ContextRequest {
        message: Some(Message::user("hi")),
        ..ContextRequest::default()
    };
    let ctx = e.context(&session(), &hello).unwrap();
    assert_eq!(ctx.messages.len(), 2);
    let bpe = memtape::Bpe::new(memtape::BpeEncoding::Cl100k);
    assert_eq!(
        ctx.tokens,
        ctx.messages
            .iter()
            .map(|m| bpe.count_message(m))
            .sum::<usize>()
    );
}

/// MateClaw's compaction summary from a model: the older messages go to it (labelled, cut
/// at 2000 characters) with the summary bound as max_tokens; the summary is recorded and
/// reused like any other; a model that fails leaves the messages in place and records
/// nothing.
#[test]
fn a_model_writes_the_compaction_summary_and_a_failure_keeps_the_messages() {
    use memtape_scripted::{Scripted, status, text};
    let client = |server: &Scripted| {
        memtape_llm::OpenAi::new(&server.base, "scripted")
            .unwrap()
            .retry(memtape_llm::RetryPolicy {
                max_retries: 0,
                ..Default::default()
            })
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let e = engine(dir.path(), &clock);
    chat(&e, 0, 12);
    let budget = (full_tokens(&e, Policy::default()) as f64 / 0.75) as usize - 1;
    let req = request(budget, Policy::default());

    let failing = Scripted::start(vec![status(500, "down")]);
    let kept = e
        .context_with_model(&session(), &req, &client(&failing))
        .unwrap();
    assert!(!kept.compacted);
    assert!(compaction_events(&e).is_empty(), "nothing recorded");
    assert!(kept.history_messages >= 24, "{}", kept.history_messages);

    let server = Scripted::start(vec![text("Falcon: services 0-9 run on ports 8000-8009.")]);
    let built = e
        .context_with_model(&session(), &req, &client(&server))
        .unwrap();
    assert!(built.compacted);
    let body = server.body(0).unwrap();
    assert_eq!(body["max_tokens"], 300);
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.starts_with("The following conversation history needs summarising:"));
    assert!(prompt.contains("User: Question 0:"), "{prompt}");
    assert!(prompt.contains("Assistant: Answer 9:"), "{prompt}");
    assert!(
        !prompt.contains("Question 11"),
        "the recent pairs stay as they are"
    );
    let summary_message = built
        .messages
        .iter()
        .find(|m| m.content_text().contains("ports 8000-8009"))
        .expect("the summary is in the prompt");
    assert_eq!(summary_message.role, Role::User, "as MateClaw injects it");
    // Reused by the next call: no second request.
    let again = e
        .context_with_model(&session(), &req, &client(&server))
        .unwrap();
    assert_eq!(again.messages, built.messages);
    assert_eq!(server.requests(), 1);
}
