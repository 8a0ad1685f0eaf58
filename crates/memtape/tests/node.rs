//! Dify's node memory (seed 002, NodeTokenBufferMemory) on a real SQLite store: turns per
//! node of a conversation, buffered until flushed, history along the current thread within
//! a token limit, clear, and node mode without a conversation refused as configuration;
//! reading under Dify's `MemoryConfig`, and the cleanup task for idle node memories.
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, TimeZone, Utc};
use memtape::{
    Engine, Error, Filter, HistoryLimits, MemoryConfig, Message, NODE_CLEAR, NodeMemory,
    NodeMessage, NodeTurn, Scope, Store, UUID_NIL,
};

fn app() -> Scope {
    Scope::agent("acme", "chatflow-app").unwrap()
}

fn turn(message_id: &str, parent: Option<&str>, user: &str, assistant: &str) -> NodeTurn {
    NodeTurn {
        message_id: message_id.into(),
        parent_message_id: parent.map(str::to_owned),
        user_content: user.into(),
        assistant_content: assistant.into(),
        ..NodeTurn::default()
    }
}

/// Adds one turn and flushes it, as Dify's LLM node does after each run.
fn run(memory: &mut NodeMemory<'_, memtape::SqliteStore>, t: NodeTurn) {
    memory.add_messages(t).unwrap();
    memory.flush().unwrap();
}

fn texts(messages: &[NodeMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m.entry.message().unwrap().content_text().into_owned())
        .collect()
}

/// Seed 002's thread example: A → A', B → B', then A'' regenerated (a new message with A's
/// parent, here none: it starts a new thread), then C → C'. The thread of the message after
/// C is [A, A'', C, C']: the regenerated answer replaces its siblings and B's turn is gone.
#[test]
fn dify_node_memory_follows_the_regenerated_thread() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let mut memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    run(&mut memory, turn("m1", None, "A", "A'"));
    run(&mut memory, turn("m2", Some("m1"), "B", "B'"));
    run(&mut memory, turn("m1-regen", None, "A", "A''"));
    run(&mut memory, turn("m3", Some("m1-regen"), "C", "C'"));

    let history = memory.get_history("m4", Some("m3"), 2000).unwrap();
    assert_eq!(texts(&history), ["A", "A''", "C", "C'"]);
    // Answering B again (a regeneration of m2's answer, parent m1) sees only A's turn.
    let history = memory.get_history("m2-regen", Some("m1"), 2000).unwrap();
    assert_eq!(texts(&history), ["A", "A'"]);
    // Each message comes with its Dify message ids, typed; the caller's meta stays empty.
    assert_eq!(history[0].message_id, "m1");
    assert_eq!(history[0].parent_message_id, None);
    assert!(history[0].entry.meta.is_empty());
}

/// Seed 002: "When mode=node is used in a non-Chatflow context (no conversation_id), it
/// should ... raise a configuration error."
#[test]
fn dify_node_mode_without_a_conversation_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let err = engine.node_memory(&app(), None, "llm-1").err().unwrap();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("configuration error:") && text.contains("needs a conversation"),
        "{text}"
    );
    let session = app().with_session("conv-1").unwrap();
    let err = engine.node_memory(&session, None, "llm-1").err().unwrap();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    // Nothing was written.
    assert_eq!(engine.store().last_id().unwrap().0, 0);
}

/// Seed 002: node memory is keyed by (app, conversation, node): each LLM node keeps its own
/// history, apart from the conversation's and from other nodes'.
#[test]
fn dify_each_node_keeps_its_own_history() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let mut summarize = engine
        .node_memory(&app(), Some("conv-1"), "summarize")
        .unwrap();
    let mut translate = engine
        .node_memory(&app(), Some("conv-1"), "translate")
        .unwrap();
    let mut other = engine
        .node_memory(&app(), Some("conv-2"), "summarize")
        .unwrap();
    run(&mut summarize, turn("m1", None, "long text", "short"));
    run(&mut translate, turn("m1", None, "hello", "hola"));
    run(&mut other, turn("x1", None, "other text", "other"));

    assert_eq!(
        texts(&summarize.get_history("m2", Some("m1"), 2000).unwrap()),
        ["long text", "short"]
    );
    assert_eq!(
        texts(&translate.get_history("m2", Some("m1"), 2000).unwrap()),
        ["hello", "hola"]
    );
    assert!(
        other
            .get_history("m2", Some("m1"), 2000)
            .unwrap()
            .is_empty()
    );
    // The conversation's own history holds none of the nodes' turns.
    let conversation = app().with_session("conv-1").unwrap();
    assert!(
        engine
            .history(&conversation, &HistoryLimits::default())
            .unwrap()
            .is_empty()
    );
    assert_eq!(summarize.scope().node(), Some("summarize"));
}

/// Seed 002: "_truncate_by_tokens()" under max_token_limit, counted with a real BPE; the
/// oldest messages go first.
#[test]
fn dify_node_history_fits_the_token_limit() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let mut memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    run(
        &mut memory,
        turn("m1", None, "first question here", "first answer"),
    );
    run(
        &mut memory,
        turn("m2", Some("m1"), "second question", "second answer"),
    );
    run(
        &mut memory,
        turn("m3", Some("m2"), "third question", "third answer"),
    );

    let all = memory.get_history("m4", Some("m3"), 2000).unwrap();
    assert_eq!(all.len(), 6);
    let cost = |m: &NodeMessage| engine.tokens().count_message(m.entry.message().unwrap());
    let last_two_turns: usize = all[2..].iter().map(cost).sum();
    let fits = memory
        .get_history("m4", Some("m3"), last_two_turns)
        .unwrap();
    assert_eq!(
        texts(&fits),
        [
            "second question",
            "second answer",
            "third question",
            "third answer"
        ]
    );
    // One token short of the last two turns: the second question goes, and the history
    // then starts at a user message.
    let short = memory
        .get_history("m4", Some("m3"), last_two_turns - 1)
        .unwrap();
    assert_eq!(texts(&short), ["third question", "third answer"]);
    let total: usize = short.iter().map(cost).sum();
    assert!(total < last_two_turns);
    // Strict: if the latest turn does not fit, nothing is sent.
    let last_turn: usize = all[4..].iter().map(cost).sum();
    assert!(
        memory
            .get_history("m4", Some("m3"), last_turn - 1)
            .unwrap()
            .is_empty()
    );
}

/// Seed 002: add_messages buffers, flush persists (to the tape: a new engine reads it), and
/// get_history reads what is persisted. File references are kept with the messages.
#[test]
fn dify_node_turns_are_buffered_until_flush() {
    let dir = tempfile::tempdir().unwrap();
    let file = serde_json::from_str(
        r#"{"type": "image", "transfer_method": "local_file", "upload_file_id": "file-uuid-123", "belongs_to": "user"}"#,
    )
    .unwrap();
    {
        let engine = Engine::init(dir.path()).unwrap();
        let mut memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
        memory
            .add_messages(NodeTurn {
                user_files: vec![file],
                ..turn(
                    "msg-001",
                    None,
                    "Analyze this image",
                    "This is a landscape image...",
                )
            })
            .unwrap();
        assert_eq!(memory.pending().len(), 1);
        assert!(
            memory
                .get_history("msg-002", Some("msg-001"), 2000)
                .unwrap()
                .is_empty()
        );
        let written = memory.flush().unwrap();
        assert_eq!(written.len(), 2);
        assert!(memory.pending().is_empty());
        assert_eq!(written[1].parent, Some(written[0].id));
        assert!(
            memory.add_messages(turn("", None, "x", "y")).is_err(),
            "a turn needs a message id"
        );
    }
    let engine = Engine::open(dir.path()).unwrap();
    let memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    let history = memory
        .get_history("msg-002", Some("msg-001"), 2000)
        .unwrap();
    assert_eq!(
        texts(&history),
        ["Analyze this image", "This is a landscape image..."]
    );
    let user: &Message = history[0].entry.message().unwrap();
    assert_eq!(
        serde_json::to_value(&user.files).unwrap(),
        serde_json::json!([{"type": "image", "transfer_method": "local_file", "upload_file_id": "file-uuid-123", "belongs_to": "user"}])
    );
}

/// Seed 002: clear empties the node's memory (and drops what was buffered); in memtape the
/// old turns stay on the tape behind a `node/clear` anchor.
#[test]
fn dify_clear_empties_the_node_memory_and_keeps_the_tape() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let mut memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    run(&mut memory, turn("m1", None, "A", "A'"));
    memory
        .add_messages(turn("m2", Some("m1"), "B", "B'"))
        .unwrap();
    let anchor = memory.clear().unwrap();
    assert_eq!(anchor.payload.name(), Some("node/clear"));
    assert!(memory.pending().is_empty(), "the buffer is cleared too");
    assert!(
        memory
            .get_history("m2", Some("m1"), 2000)
            .unwrap()
            .is_empty()
    );
    // A turn after the clear whose parent was before it starts a new thread.
    run(&mut memory, turn("m2", Some("m1"), "B", "B'"));
    assert_eq!(
        texts(&memory.get_history("m3", Some("m2"), 2000).unwrap()),
        ["B", "B'"]
    );
    let on_tape = engine
        .store()
        .scan(memory.scope(), &Filter::default())
        .unwrap();
    assert_eq!(
        on_tape.len(),
        7,
        "A's turn mark, A, A', the anchor, B's turn mark, B, B'"
    );
}

/// A store written before turns were typed events kept the turn's ids in the entries' meta:
/// it still reads, and new turns continue its threads.
#[test]
fn dify_node_turns_in_meta_from_an_older_store_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    let meta = |pairs: serde_json::Value| pairs.as_object().unwrap().clone();
    let at = chrono::DateTime::UNIX_EPOCH;
    let user = memtape::NewEntry {
        meta: meta(
            serde_json::json!({"message_id": "m1", "parent_message_id": null, "starts_thread": true}),
        ),
        ..memtape::NewEntry::new(
            memory.scope().clone(),
            memtape::Payload::Message(Message::user("A")),
            at,
        )
    };
    let assistant = memtape::NewEntry {
        meta: meta(serde_json::json!({"message_id": "m1"})),
        ..memtape::NewEntry::new(
            memory.scope().clone(),
            memtape::Payload::Message(Message::assistant("A'")),
            at,
        )
    };
    engine.append_entries(vec![user, assistant]).unwrap();
    let mut memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    run(&mut memory, turn("m2", Some("m1"), "B", "B'"));
    let history = memory.get_history("m3", Some("m2"), 2000).unwrap();
    assert_eq!(texts(&history), ["A", "A'", "B", "B'"]);
    assert_eq!(history[0].message_id, "m1");
    assert_eq!(history[3].message_id, "m2");
    assert_eq!(history[2].parent_message_id.as_deref(), Some("m1"));
}

/// Seed 002's use case "an LLM node in a loop accumulates context across iterations": turns
/// of the same message follow each other, and the next iteration sees them all.
#[test]
fn dify_a_node_in_a_loop_accumulates_turns_of_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let mut memory = engine
        .node_memory(&app(), Some("conv-1"), "loop-llm")
        .unwrap();
    run(&mut memory, turn("m1", None, "earlier", "done"));
    run(&mut memory, turn("m2", Some("m1"), "item 1", "ok 1"));
    run(&mut memory, turn("m2", Some("m1"), "item 2", "ok 2"));
    assert_eq!(
        texts(&memory.get_history("m2", Some("m1"), 2000).unwrap()),
        ["earlier", "done", "item 1", "ok 1", "item 2", "ok 2"]
    );
}

/// Dify's extract_thread_messages treats a UUID_NIL parent (a message from before threads)
/// as following whatever came last.
#[test]
fn dify_uuid_nil_parent_follows_the_latest_turn() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let mut memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    run(&mut memory, turn("old-1", Some(UUID_NIL), "one", "1"));
    run(&mut memory, turn("old-2", Some(UUID_NIL), "two", "2"));
    assert_eq!(
        texts(&memory.get_history("new", Some(UUID_NIL), 2000).unwrap()),
        ["one", "1", "two", "2"]
    );
    // A new thread without a parent has no history.
    assert!(memory.get_history("fresh", None, 2000).unwrap().is_empty());
}

/// Seed 002: `MemoryConfig.mode = node` reads NodeTokenBufferMemory, and the config's
/// window and role prefixes apply to it as to conversation memory (token_buffer_memory.py:
/// `min(message_limit, 500)` messages of a query and its answer; get_history_prompt_text:
/// `f"{role}: {m.content}"` joined with `"\n"`).
#[test]
fn dify_node_memory_reads_under_a_memory_config() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let mut memory = engine.node_memory(&app(), Some("conv-1"), "llm-1").unwrap();
    run(&mut memory, turn("m1", None, "A", "A'"));
    run(&mut memory, turn("m2", Some("m1"), "B", "B'"));
    run(&mut memory, turn("m3", Some("m2"), "C", "C'"));
    let config: MemoryConfig = serde_json::from_value(serde_json::json!({
        "mode": "node",
        "role_prefix": {"user": "Customer", "assistant": ""},
        "window": {"enabled": true, "size": 2}
    }))
    .unwrap();
    let history = memory
        .dify_history("m4", Some("m3"), &config, 2000)
        .unwrap();
    assert_eq!(texts(&history), ["B", "B'", "C", "C'"]);
    assert_eq!(history[0].message_id, "m2");
    let messages: Vec<&Message> = history.iter().map(|m| m.entry.message().unwrap()).collect();
    // An empty prefix falls back to Dify's default (prompt_transform.py: `if ai_prefix:`).
    assert_eq!(
        config.history_text(&messages),
        "Customer: B\nAssistant: B'\nCustomer: C\nAssistant: C'"
    );

    // A conversation-mode config reads the conversation, not the node: refused here.
    let err = memory
        .dify_history("m4", Some("m3"), &MemoryConfig::default(), 2000)
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(err.to_string().contains("mode conversation"), "{err}");
    // A bad window is named.
    let bad: MemoryConfig = serde_json::from_value(
        serde_json::json!({"mode": "node", "window": {"enabled": true, "size": 100000}}),
    )
    .unwrap();
    let err = memory
        .dify_history("m4", Some("m3"), &bad, 2000)
        .unwrap_err();
    assert!(err.to_string().contains("window.size 100000"), "{err}");
}

/// A clock the test moves: days after 2026-03-01 14:30 UTC.
fn clock() -> (
    Arc<AtomicI64>,
    impl Fn() -> DateTime<Utc> + Send + Sync + 'static,
) {
    let day = Arc::new(AtomicI64::new(0));
    let read = Arc::clone(&day);
    let start = Utc.with_ymd_and_hms(2026, 3, 1, 14, 30, 0).unwrap();
    (day, move || {
        start + chrono::Duration::days(read.load(Ordering::SeqCst))
    })
}

/// Seed 002, Future Considerations 1: "Add a Celery task to clean up old node memory
/// files". Dify's cleanup tasks go by a retention in days (`PLAN_SANDBOX_CLEAN_DAY_SETTING`,
/// default 30, a PositiveInt) counted back from now, and remove what is older than the
/// cutoff (`clean_messages`: `Message.created_at < plan_sandbox_clean_message_day`). Here:
/// a node memory last written before `now - days` is cleared with NODE_CLEAR and reported;
/// the tape keeps every turn.
#[test]
fn dify_cleanup_clears_node_memories_idle_past_the_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let (day, now) = clock();
    let engine = Engine::init(dir.path()).unwrap().with_clock(now);
    let node = |conversation: &str, node: &str| {
        engine
            .node_memory(&app(), Some(conversation), node)
            .unwrap()
    };
    // Day 0: four nodes run; one is cleared by hand; another app's node runs too.
    let mut idle = node("conv-1", "idle");
    run(&mut idle, turn("m1", None, "old question", "old answer"));
    let mut busy = node("conv-1", "busy");
    run(&mut busy, turn("m1", None, "q", "a"));
    let mut emptied = node("conv-2", "emptied");
    run(&mut emptied, turn("x1", None, "q", "a"));
    emptied.clear().unwrap();
    let other_app = Scope::agent("acme", "other-app").unwrap();
    let mut outside = engine.node_memory(&other_app, Some("c"), "n").unwrap();
    run(&mut outside, turn("o1", None, "q", "a"));
    // Day 15: the boundary node runs; day 40: the busy node runs again.
    day.store(15, Ordering::SeqCst);
    let mut boundary = node("conv-3", "boundary");
    run(&mut boundary, turn("b1", None, "q", "a"));
    day.store(40, Ordering::SeqCst);
    run(&mut busy, turn("m2", Some("m1"), "q2", "a2"));
    let conversation = app().with_session("conv-1").unwrap();
    engine
        .append(
            &conversation,
            Message::user("the conversation itself"),
            Default::default(),
        )
        .unwrap();

    // Day 45, 30 days: the cutoff is day 15. Strictly older goes; day 15 itself stays.
    day.store(45, Ordering::SeqCst);
    let before = engine.store().last_id().unwrap();
    let dry = engine.cleanup_node_memory(&app(), 30, true).unwrap();
    assert_eq!(
        engine.store().last_id().unwrap(),
        before,
        "a dry run writes nothing"
    );
    assert!(dry.dry_run);
    assert_eq!(dry.cleared.len(), 1);
    assert_eq!(dry.cleared[0].cleared_by, None);

    let report = engine.cleanup_node_memory(&app(), 30, false).unwrap();
    assert_eq!(
        report.cutoff,
        Utc.with_ymd_and_hms(2026, 3, 16, 14, 30, 0).unwrap()
    );
    assert_eq!(report.cleared.len(), 1, "{report:?}");
    let cleared = &report.cleared[0];
    assert_eq!(cleared.scope, idle.scope().clone());
    assert_eq!(
        cleared.last_active,
        Utc.with_ymd_and_hms(2026, 3, 1, 14, 30, 0).unwrap()
    );
    assert_eq!(
        (report.active, report.empty),
        (2, 1),
        "busy and boundary; emptied"
    );

    // The idle node's memory is empty; the others are untouched; the turns stay on the tape.
    assert!(idle.get_history("m2", Some("m1"), 2000).unwrap().is_empty());
    assert_eq!(
        texts(&busy.get_history("m3", Some("m2"), 2000).unwrap()).len(),
        4
    );
    assert_eq!(
        texts(&outside.get_history("o2", Some("o1"), 2000).unwrap()).len(),
        2
    );
    let on_tape = engine
        .store()
        .scan(idle.scope(), &Filter::default())
        .unwrap();
    assert_eq!(
        on_tape.len(),
        4,
        "the turn mark, its two messages, the clear anchor"
    );
    let anchor = on_tape.last().unwrap();
    assert_eq!(Some(anchor.id), cleared.cleared_by);
    assert_eq!(anchor.payload.name(), Some(NODE_CLEAR));
    assert_eq!(
        engine
            .history(&conversation, &HistoryLimits::default())
            .unwrap()
            .len(),
        1,
        "the conversation's own history is not node memory"
    );

    // Running it again finds nothing idle: cleared memories count as empty.
    let last = engine.store().last_id().unwrap();
    let again = engine.cleanup_node_memory(&app(), 30, false).unwrap();
    assert!(again.cleared.is_empty());
    assert_eq!((again.active, again.empty), (2, 2));
    assert_eq!(engine.store().last_id().unwrap(), last);

    // The node starts again when it runs next.
    run(
        &mut idle,
        turn("m3", Some("m1"), "new question", "new answer"),
    );
    assert_eq!(
        texts(&idle.get_history("m4", Some("m3"), 2000).unwrap()),
        ["new question", "new answer"]
    );
}

/// Dify's day settings are PositiveInt: 0 days is refused with the way to clear a node now;
/// a retention of millions of days saturates (nothing is that old) instead of panicking;
/// the cleanup can be narrowed to one conversation.
#[test]
fn dify_cleanup_days_are_positive_and_saturate() {
    let dir = tempfile::tempdir().unwrap();
    let (day, now) = clock();
    let engine = Engine::init(dir.path()).unwrap().with_clock(now);
    let mut a = engine.node_memory(&app(), Some("conv-1"), "n").unwrap();
    run(&mut a, turn("m1", None, "q", "a"));
    let mut b = engine.node_memory(&app(), Some("conv-2"), "n").unwrap();
    run(&mut b, turn("m1", None, "q", "a"));
    day.store(100, Ordering::SeqCst);

    let err = engine.cleanup_node_memory(&app(), 0, false).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(
        err.to_string().contains("more than 0 days") && err.to_string().contains("node clear"),
        "{err}"
    );
    let none = engine.cleanup_node_memory(&app(), u32::MAX, false).unwrap();
    assert!(none.cleared.is_empty());
    assert_eq!(none.active, 2);

    let conv2 = app().with_session("conv-2").unwrap();
    let report = engine.cleanup_node_memory(&conv2, 30, false).unwrap();
    assert_eq!(report.cleared.len(), 1);
    assert_eq!(report.cleared[0].scope, b.scope().clone());
    assert_eq!(
        texts(&a.get_history("m2", Some("m1"), 2000).unwrap()).len(),
        2
    );
}
