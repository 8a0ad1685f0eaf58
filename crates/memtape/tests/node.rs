//! Dify's node memory (seed 002, NodeTokenBufferMemory) on a real SQLite store: turns per
//! node of a conversation, buffered until flushed, history along the current thread within
//! a token limit, clear, and node mode without a conversation refused as configuration.
#![allow(clippy::unwrap_used)]

use memtape::{
    Engine, Error, Filter, HistoryLimits, Message, NodeMemory, NodeMessage, NodeTurn, Scope, Store,
    UUID_NIL,
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
