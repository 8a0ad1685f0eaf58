//! Dify's `MemoryConfig` (seed 002) on conversation memory, over a real SQLite store: the
//! window counts turns of the current thread up to Dify's cap of 500, the query being
//! answered is not history, the role prefixes render the text a completion model gets,
//! and a bad config is refused before anything is read.
use memtape::{
    Bpe, BpeEncoding, Engine, Entry, Error, MemoryConfig, MemoryMode, Message, Scope, WindowConfig,
};

fn chat() -> Scope {
    Scope::agent("acme", "chat-app")
        .unwrap()
        .with_session("conv-1")
        .unwrap()
}

fn texts(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.message().unwrap().content_text().into_owned())
        .collect()
}

fn window(size: u64) -> MemoryConfig {
    MemoryConfig {
        window: Some(WindowConfig {
            enabled: true,
            size: Some(size),
        }),
        ..MemoryConfig::default()
    }
}

/// token_buffer_memory.py: `stmt.limit(message_limit)` over Dify's messages (a query and
/// its answer each), then `extract_thread_messages`, then "for newly created message, its
/// answer is temporarily empty, we don't need to add it to memory". Here: the last
/// `window.size` turns of the current thread, without the query being answered.
#[test]
fn dify_window_reads_the_last_turns_of_the_current_thread() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = chat();
    engine
        .append_messages(
            &s,
            vec![
                Message::user("q1"),
                Message::assistant("a1"),
                Message::user("q2"),
                Message::assistant("a2"),
                Message::user("q3"),
            ],
        )
        .unwrap();
    // a3 is regenerated: the thread runs through the newer answer.
    let a3 = engine
        .append(&s, Message::assistant("a3 (old)"), Default::default())
        .unwrap();
    engine
        .append(
            &s,
            Message::assistant("a3"),
            memtape::AppendOptions {
                parent: Some(memtape::EntryId(a3.id.0 - 1)),
                ..Default::default()
            },
        )
        .unwrap();
    engine
        .append(&s, Message::user("the current query"), Default::default())
        .unwrap();

    let read = |config: &MemoryConfig| texts(&engine.dify_history(&s, config, 2000).unwrap());
    assert_eq!(read(&window(2)), ["q2", "a2", "q3", "a3"]);
    assert_eq!(read(&window(1)), ["q3", "a3"]);
    assert_eq!(
        read(&MemoryConfig::default()),
        ["q1", "a1", "q2", "a2", "q3", "a3"]
    );
    // prompt_transform.py: the window applies only `if memory_config.window.enabled`.
    let disabled = MemoryConfig {
        window: Some(WindowConfig {
            enabled: false,
            size: Some(1),
        }),
        ..MemoryConfig::default()
    };
    assert_eq!(read(&disabled).len(), 6);
    // memtape's consolidation pointer still bounds history: consolidated turns are gone.
    let a1 = engine.history(&s, &Default::default()).unwrap()[1].id;
    engine.mark_consolidated(&s, a1).unwrap();
    assert_eq!(read(&window(5)), ["q2", "a2", "q3", "a3"]);
}

/// token_buffer_memory.py: `message_limit = min(message_limit, 500)` when given, else 500.
#[test]
fn dify_memory_reads_at_most_500_turns() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = chat();
    let messages = (0..600)
        .flat_map(|i| {
            [
                Message::user(format!("q{i}")),
                Message::assistant(format!("a{i}")),
            ]
        })
        .collect();
    engine.append_messages(&s, messages).unwrap();
    let all = engine
        .dify_history(&s, &MemoryConfig::default(), usize::MAX)
        .unwrap();
    assert_eq!(all.len(), 1000);
    assert_eq!(texts(&all[..1]), ["q100"]);
    let capped = engine.dify_history(&s, &window(500), usize::MAX).unwrap();
    assert_eq!(capped, all);
}

/// token_buffer_memory.py, get_history_prompt_text: `f"{role}: {m.content}"` per message,
/// `"\n".join(...)`, with the node's `role_prefix` (advanced_prompt_transform.py:
/// `human_prefix=role_prefix.user, ai_prefix=role_prefix.assistant`); the history is first
/// pruned to `max_token_limit` ("prune the chat message if it exceeds the max token
/// limit", the oldest popped).
#[test]
fn dify_role_prefix_renders_history_for_a_completion_model() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path())
        .unwrap()
        .with_tokens(Bpe::new(BpeEncoding::Cl100k));
    let s = chat();
    engine
        .append_messages(
            &s,
            vec![
                Message::user("hello world"),
                Message::assistant("hello world"),
                Message::user("hello again"),
                Message::assistant("hello again"),
            ],
        )
        .unwrap();
    let config: MemoryConfig = serde_json::from_value(serde_json::json!({
        "role_prefix": {"user": "User", "assistant": "Bot"},
        "window": {"enabled": false, "size": 50}
    }))
    .unwrap();
    let history = engine.dify_history(&s, &config, 2000).unwrap();
    let messages: Vec<&Message> = history.iter().filter_map(Entry::message).collect();
    assert_eq!(
        config.history_text(&messages),
        "User: hello world\nBot: hello world\nUser: hello again\nBot: hello again"
    );
    // Each message costs 6 cl100k tokens (3 + role + 2): 12 keep the last turn.
    let history = engine.dify_history(&s, &config, 12).unwrap();
    let messages: Vec<&Message> = history.iter().filter_map(Entry::message).collect();
    assert_eq!(
        config.history_text(&messages),
        "User: hello again\nBot: hello again"
    );
}

/// A config Dify's editor refuses (`sysQueryInUser`), a window Dify would ignore or cap, a
/// prefix that breaks the line format: refused naming the field, before anything is read;
/// node mode names node memory instead.
#[test]
fn dify_bad_memory_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::init(dir.path()).unwrap();
    let s = chat();
    engine
        .append_messages(&s, vec![Message::user("q"), Message::assistant("a")])
        .unwrap();
    let err = engine.dify_history(&s, &window(0), 2000).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("window.size 0"), "{err}");
    let template = MemoryConfig {
        query_prompt_template: Some("Question: {{query}}".into()),
        ..MemoryConfig::default()
    };
    let err = engine.dify_history(&s, &template, 2000).unwrap_err();
    assert!(err.to_string().contains("{{#sys.query#}}"), "{err}");
    let node = MemoryConfig {
        mode: MemoryMode::Node,
        ..MemoryConfig::default()
    };
    let err = engine.dify_history(&s, &node, 2000).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(err.to_string().contains("mode node"), "{err}");
}
