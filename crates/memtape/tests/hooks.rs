//! Write hooks (Qanot's `add_write_hook`) on a real SQLite store: a hook sees every durable
//! write with its entries, Qanot's memory callback is told the text of every memory write
//! and its file (WAL captures, daily notes, saves, imports), and a hook that panics fails
//! no write and stops no other hook.
use std::sync::{Arc, Mutex};

use memtape::{Engine, Entry, Format, MemoryWrite, Message, Scope, Store, WriteHook};

type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

fn chat() -> Scope {
    Scope::agent("default", "default")
        .unwrap()
        .with_session("s")
        .unwrap()
}

struct Count(Arc<Mutex<Vec<u64>>>);

impl WriteHook for Count {
    fn written(&self, _store: &dyn Store, entries: &[Entry]) {
        self.0
            .lock()
            .unwrap()
            .extend(entries.iter().map(|e| e.id.0));
    }
}

struct Panics;

impl WriteHook for Panics {
    fn written(&self, _store: &dyn Store, _entries: &[Entry]) {
        panic!("a broken hook");
    }
}

#[test]
fn qanot_memory_write_hooks_see_every_memory_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::init(dir.path()).unwrap();
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    engine.on_memory_write(move |w: &MemoryWrite<'_>| {
        sink.lock()
            .unwrap()
            .push((w.path.to_owned(), w.content.to_owned(), w.source.to_owned()));
    });
    let agent = Scope::agent("default", "default").unwrap();
    // A message that is not memory: nothing.
    engine
        .append(&chat(), Message::user("hello"), Default::default())
        .unwrap();
    assert!(seen.lock().unwrap().is_empty());
    // The WAL: SESSION-STATE.md and, for a durable category, MEMORY.md.
    let captured = engine.capture(&chat(), "My name is Bobur").unwrap();
    assert!(captured.recorded.is_some());
    engine
        .append_daily(&agent, "- talked about hooks", None)
        .unwrap();
    engine.save_long_term(&agent, "Bobur likes tea").unwrap();
    let seen_now = seen.lock().unwrap().clone();
    let paths: Vec<&str> = seen_now.iter().map(|(p, _, _)| p.as_str()).collect();
    assert!(paths.contains(&"SESSION-STATE.md"), "{seen_now:?}");
    assert!(
        paths.iter().any(|p| p.starts_with("memory/")),
        "{seen_now:?}"
    );
    let save = seen_now.last().unwrap();
    assert_eq!(
        (save.0.as_str(), save.1.as_str(), save.2.as_str()),
        ("MEMORY.md", "Bobur likes tea", "memory.save")
    );
    assert!(
        seen_now
            .iter()
            .any(|(p, c, _)| p == "SESSION-STATE.md" && c.contains("Bobur")),
        "the WAL's line is reported with its text: {seen_now:?}"
    );
    // An import's memory (a Bub tape's zone) is a memory write too.
    let tape = r#"{"id": 1, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 1}}}
{"id": 2, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "from Bub"}}}
{"id": 3, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 1}}}
"#;
    engine.import(Format::Bub, tape, &agent, Some("b")).unwrap();
    assert_eq!(
        seen.lock().unwrap().last().unwrap().1,
        "from Bub",
        "imports run the hooks with the entries as stored"
    );
}

#[test]
fn a_hook_sees_each_write_and_a_panicking_one_fails_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::init(dir.path()).unwrap();
    let ids: Arc<Mutex<Vec<u64>>> = Arc::default();
    engine.add_write_hook(Panics);
    engine.add_write_hook(Count(ids.clone()));
    let first = engine
        .append(&chat(), Message::user("one"), Default::default())
        .unwrap();
    let more = engine
        .append_messages(
            &chat(),
            vec![Message::assistant("two"), Message::user("three")],
        )
        .unwrap();
    let mut want = vec![first.id.0];
    want.extend(more.iter().map(|e| e.id.0));
    assert_eq!(
        *ids.lock().unwrap(),
        want,
        "every write, in order, after a panicking hook"
    );
    assert_eq!(
        engine.history(&chat(), &Default::default()).unwrap().len(),
        3,
        "the writes stand"
    );
}
