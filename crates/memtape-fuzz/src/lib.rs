//! memtape's fuzz targets. Each `pub fn` takes raw bytes, feeds them to one parser or
//! decoder through the same code real input takes, and panics only when an invariant
//! breaks (a panic inside memtape, a round trip that changes a value, an engine error where
//! a clear refusal was due). cargo-fuzz runs them coverage-guided (`fuzz/`,
//! `scripts/fuzz`); `tests/corpus.rs` replays the saved seeds and corpus as ordinary tests,
//! so every input that once found a bug keeps guarding it.

use std::cell::RefCell;
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use memtape::{Engine, Error, Format, Index, IndexConfig, MemoryStore, Mode, Scope, SearchFilter};
use memtape::{SearchRequest, Store};
use memtape_core::events::{self, BuiltinEvent};
use memtape_core::formats;
use memtape_core::memory::{self, Change, MemoryLog, Op};
use memtape_core::{Entry, EntryId, Event, Payload};
use serde_json::Value;

/// A fuzz target: raw bytes in, a panic when an invariant breaks.
pub type Target = fn(&[u8]);

/// Every target, by name: what `fuzz/fuzz_targets/` and the corpus folders are called.
pub const TARGETS: [(&str, Target); 12] = [
    ("jsonl_memtape", jsonl_memtape),
    ("jsonl_nanobot", jsonl_nanobot),
    ("jsonl_bub", jsonl_bub),
    ("builtin_event", builtin_event),
    ("tool_args", tool_args),
    ("wal_scan", wal_scan),
    ("markdown_sync", markdown_sync),
    ("search_query", search_query),
    ("entry_id", entry_id),
    ("dify_memory_config", dify_memory_config),
    ("as_of", as_of),
    ("json_reply", json_reply),
];

fn now() -> DateTime<Utc> {
    DateTime::UNIX_EPOCH
}

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// An in-memory engine shared by the calls on one thread, replaced every 256 calls so the
/// tape a long run builds up does not slow it down.
fn with_engine<T>(f: impl FnOnce(&Engine<MemoryStore>, u64) -> T) -> T {
    thread_local! {
        static ENGINE: RefCell<(Engine<MemoryStore>, u64)> = RefCell::new((Engine::in_memory(), 0));
    }
    ENGINE.with(|cell| {
        let mut cell = cell.borrow_mut();
        cell.1 += 1;
        if cell.1 % 256 == 0 {
            cell.0 = Engine::in_memory();
        }
        let n = cell.1;
        f(&cell.0, n)
    })
}

fn base() -> Scope {
    Scope::agent("fuzz", "agent").unwrap_or_else(|e| panic!("a valid scope: {e}"))
}

/// An import either lands whole or is refused with a domain error; never an internal one.
fn check_import(result: Result<memtape::ImportReport, Error>) {
    match result {
        Ok(_) => {}
        Err(Error::Invalid(_) | Error::OutsideScope { .. } | Error::NeedSession(_)) => {}
        Err(Error::SessionNotEmpty(..)) => {}
        Err(Error::Store(e)) if !matches!(e, memtape_store::Error::Sqlite(_)) => {}
        Err(e) => panic!("an import failed with an engine error: {e}"),
    }
}

/// memtape's JSONL: every parsed entry writes back to a line that parses to the same entry,
/// and the import (confined to one scope) lands whole or is refused.
pub fn jsonl_memtape(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(entries) = formats::memtape::parse(text) {
        for entry in &entries {
            let line = formats::memtape::line(entry);
            let again: Entry = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{line} does not read back: {e}"));
            assert_eq!(&again, entry, "round trip changed the entry");
        }
    }
    with_engine(|engine, _| check_import(engine.import(Format::Memtape, text, &base(), None)));
}

/// nanobot session files: parse, then import under a fresh session.
pub fn jsonl_nanobot(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = formats::nanobot::parse(text, now());
    with_engine(|engine, n| {
        let session = format!("nanobot-{n}");
        check_import(engine.import(Format::Nanobot, text, &base(), Some(&session)));
    });
}

/// Bub tapes (with memory zones): read, then import under a fresh session.
pub fn jsonl_bub(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = formats::bub::read(text, now());
    with_engine(|engine, n| {
        let session = format!("bub-{n}");
        check_import(engine.import(Format::Bub, text, &base(), Some(&session)));
    });
}

/// Built-in event payloads: the first byte picks the event name (the six built-in ones or
/// a free one), the rest is its data as JSON. What decodes re-encodes to the same value,
/// and the payload check agrees with the decoder.
pub fn builtin_event(data: &[u8]) {
    const NAMES: [&str; 7] = [
        events::SESSION_CONSOLIDATED,
        events::SESSION_METADATA,
        events::MEMORY_CHANGE,
        events::CONTEXT_COMPACTION,
        events::CONTEXT_WORKING_BUFFER,
        "caller.free_form",
        events::NODE_TURN,
    ];
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let event = Event {
        name: NAMES[usize::from(pick) % NAMES.len()].to_owned(),
        data: value,
    };
    let decoded = BuiltinEvent::decode(&event);
    let payload = Payload::Event(event.clone());
    assert_eq!(decoded.is_ok(), payload.validate().is_ok());
    if let Ok(Some(builtin)) = decoded {
        let again = BuiltinEvent::decode(&builtin.to_event())
            .unwrap_or_else(|e| panic!("{event:?} decoded, but its encoding does not: {e}"));
        assert_eq!(again.as_ref(), Some(&builtin));
    }
}

/// Tool-call arguments for every memory tool: the first byte picks the tool, the rest is
/// its input as JSON. A bad input is a refusal the model can read (`is_error`), never an
/// engine error and never a panic.
pub fn tool_args(data: &[u8]) {
    let tools = memtape::tools::registry();
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(input) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let tool = &tools[usize::from(pick) % tools.len()];
    with_engine(|engine, _| {
        if let Err(e) = engine.call_tool(&base(), tool.name, &input) {
            panic!("{} failed on {input}: {e}", tool.name);
        }
    });
}

/// Qanot's WAL scanner: every match renders its lines, and a fact once written to
/// MEMORY.md is recognised there (so the WAL never writes the same fact twice).
pub fn wal_scan(data: &[u8]) {
    let Some(text) = text(data) else { return };
    for m in memtape_core::wal::scan(text) {
        let line = memtape_core::wal::long_term_line(&m);
        let _ = memtape_core::wal::session_state_line(now(), &m);
        assert!(
            memtape_core::wal::is_duplicate(&line, &m.text),
            "{:?} written as {line:?} is not found again",
            m.text
        );
    }
}

/// What markdown sync reads from disk: a relative path (the first line) and the file's
/// bytes (the rest). A path the rules accept becomes a write that folds into the view with
/// exactly that content; a refused one never reaches the fold.
pub fn markdown_sync(data: &[u8]) {
    let (name, content) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (Some(name), Some(content)) = (text(name), text(content)) else {
        return;
    };
    let Ok(path) = memory::check_path(name) else {
        return;
    };
    let change = Change::one(
        Op::Write {
            path: path.clone(),
            content: content.to_owned(),
        },
        "sync",
    );
    if change.validate().is_err() {
        return;
    }
    let entry = Entry {
        id: EntryId(1),
        scope: base(),
        payload: change.to_payload(),
        meta: Default::default(),
        created_at: now(),
        parent: None,
    };
    entry
        .payload
        .validate()
        .unwrap_or_else(|e| panic!("a valid change is refused as a payload: {e}"));
    let log = MemoryLog::from_entries([&entry]).unwrap_or_else(|e| panic!("fold: {e}"));
    assert_eq!(log.view().content(&path), Some(content));
}

/// A tiny deterministic model for the hybrid search below: letter counts, normalised.
struct Letters;

impl memtape::Embedder for Letters {
    fn id(&self) -> &str {
        "fuzz-letters-26"
    }
    fn dim(&self) -> usize {
        26
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memtape::EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 26];
                for c in t.chars().filter(char::is_ascii_alphabetic) {
                    v[usize::from(c.to_ascii_lowercase() as u8 - b'a')] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                if n == 0.0 {
                    v[0] = 1.0;
                } else {
                    v.iter_mut().for_each(|x| *x /= n);
                }
                v
            })
            .collect())
    }
}

/// Search queries: the query analysis and date detection, then a real BM25 search and a
/// hybrid one (whose query vector leaves out the words naming a speaker) over a small
/// index. Whatever the text (FTS5 syntax included), both answer.
pub fn search_query(data: &[u8]) {
    let Some(query) = text(data) else { return };
    let _ = memtape_search::text::fts_query(query);
    let _ = memtape_search::text::terms(query);
    let _ = memtape_search::when::period(query);
    // Relative dates read at the edges of time and at an ordinary moment: no date
    // arithmetic may overflow.
    for at in [
        chrono::DateTime::<chrono::Utc>::MIN_UTC,
        chrono::DateTime::<chrono::Utc>::MAX_UTC,
        chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
    ] {
        let _ = memtape_search::when::relative(query, at, true);
    }
    static SEARCH: OnceLock<std::sync::Mutex<(Engine<MemoryStore>, tempfile::TempDir)>> =
        OnceLock::new();
    let search = SEARCH.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary folder: {e}"));
        let index = Index::open(
            &dir.path().join("index.db"),
            Some(std::sync::Arc::new(Letters)),
            IndexConfig::default(),
        )
        .unwrap_or_else(|e| panic!("an index: {e}"));
        let engine = Engine::in_memory();
        let session = base().with_session("s").unwrap_or_else(|e| panic!("{e}"));
        for text in [
            "I adopted a dog named Rex in May 2023",
            "我喜欢喝茶 and green tea",
            "The refund for ticket 42 came through",
        ] {
            engine
                .append(&session, memtape::Message::user(text), Default::default())
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let mut named = memtape::Message::user("Rex chased the ball");
        named.name = Some("Caroline O'Brien".to_owned());
        engine
            .append(&session, named, Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let engine = engine.with_index(index).unwrap_or_else(|e| panic!("{e}"));
        std::sync::Mutex::new((engine, dir))
    });
    let search = search
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for mode in [Mode::Bm25, Mode::Hybrid] {
        let request = SearchRequest::new(query, SearchFilter::tenant("fuzz")).mode(mode);
        if let Err(e) = search.0.search(&request) {
            panic!("{} search {query:?} failed: {e}", mode.as_str());
        }
    }
}

/// Entry ids as text and as JSON: anything in range parses to itself, anything else is
/// refused, and no id out of range ever reaches a store.
pub fn entry_id(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(id) = text.parse::<EntryId>() {
        assert!(id.in_range());
        assert_eq!(id.0.to_string().parse::<EntryId>().ok(), Some(id));
    }
    if let Ok(id) = serde_json::from_str::<EntryId>(text) {
        assert!(id.in_range());
    }
    with_engine(|engine, _| {
        if let Ok(n) = text.trim().parse::<u64>() {
            let _ = engine.store().get("fuzz", EntryId(n));
            let _ = engine.thread(&base(), EntryId(n));
        }
    });
}

/// Moments of the tape (`--as-of`, `as_of=`): text and JSON either parse to a time or an
/// in-range id that prints back to itself, or are refused with a reason; every read as of
/// a parsed moment (memory, history, blame, the prompt) answers without panicking and
/// writes nothing.
pub fn as_of(data: &[u8]) {
    use memtape::{AsOf, ContextRequest, HistoryLimits};
    let Some(text) = text(data) else { return };
    let parsed = text.parse::<AsOf>();
    if let Ok(moment) = &parsed {
        if let AsOf::Entry(id) = moment {
            assert!(id.in_range());
        }
        let again: AsOf = moment
            .to_string()
            .parse()
            .unwrap_or_else(|e| panic!("{moment} does not parse back: {e}"));
        assert_eq!(&again, moment);
    }
    if let Ok(AsOf::Entry(id)) = serde_json::from_str::<AsOf>(text) {
        assert!(id.in_range());
    }
    let Ok(moment) = parsed else { return };
    with_engine(|engine, _| {
        let session = base()
            .with_session("s")
            .unwrap_or_else(|e| panic!("a valid scope: {e}"));
        let _ = engine.append(
            &session,
            memtape::Message::user("remember that I like tea"),
            Default::default(),
        );
        let before = engine
            .store()
            .scope_info(&session)
            .ok()
            .flatten()
            .map(|i| i.entries);
        let _ = engine.memory_as_of(&base(), Some(&moment));
        let _ = engine.history_as_of(&session, &HistoryLimits::default(), Some(&moment));
        let _ = engine.blame(&base(), "MEMORY.md", Some(&moment));
        let request = ContextRequest {
            as_of: Some(moment),
            ..ContextRequest::default()
        };
        let _ = engine.context(&session, &request);
        let after = engine
            .store()
            .scope_info(&session)
            .ok()
            .flatten()
            .map(|i| i.entries);
        assert_eq!(before, after, "a read as of {moment} wrote to the tape");
    });
}

/// A model's text reply read as JSON (MateClaw's extraction and emergence): any text gives
/// an object or nothing, and an object found is one a model could have written (it
/// prints and reads back to itself).
pub fn json_reply(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Some(map) = memtape::json_reply(text) {
        let printed = serde_json::to_string(&map).unwrap_or_else(|e| panic!("{e}"));
        let back: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
        assert_eq!(back, map);
    }
}

/// Dify's memory config and its templates: the bytes before the first NUL are a node's
/// `memory` block (JSON), the rest the query. A config either is refused with a reason or
/// validates to a window of 1 to 500 turns; rendering never panics, and the query's own
/// text cannot add a template variable the template did not have.
pub fn dify_memory_config(data: &[u8]) {
    use memtape_core::dify::MemoryConfig;
    let (config, query) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let (Ok(config), Some(query)) = (serde_json::from_slice::<MemoryConfig>(config), text(query))
    else {
        return;
    };
    if config.validate().is_err() {
        return;
    }
    let limit = config.message_limit();
    assert!((1..=500).contains(&limit), "window {limit}");
    let rendered = config.render_query(query, &Default::default());
    let marks = |t: &str| t.matches("{{").count();
    if let Some(template) = &config.query_prompt_template {
        assert!(
            marks(&rendered) <= marks(template),
            "the query added a variable: {rendered:?}"
        );
    }
    let messages = [
        memtape::Message::user(query),
        memtape::Message::assistant(query),
    ];
    let refs: Vec<&memtape::Message> = messages.iter().collect();
    let _ = config.history_text(&refs);
}
