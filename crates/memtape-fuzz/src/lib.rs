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
pub const TARGETS: [(&str, Target); 17] = [
    ("jsonl_memtape", jsonl_memtape),
    ("jsonl_nanobot", jsonl_nanobot),
    ("jsonl_bub", jsonl_bub),
    ("dify_node_memory", dify_node_memory),
    ("builtin_event", builtin_event),
    ("tool_args", tool_args),
    ("wal_scan", wal_scan),
    ("markdown_sync", markdown_sync),
    ("search_query", search_query),
    ("entry_id", entry_id),
    ("dify_memory_config", dify_memory_config),
    ("as_of", as_of),
    ("json_reply", json_reply),
    ("facts", facts),
    ("lifecycle_config", lifecycle_config),
    ("cron", cron),
    ("names", names),
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
/// a file that parses is told as memtape by format detection, and the import (confined to
/// one scope) lands whole or is refused.
pub fn jsonl_memtape(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let detected = Format::detect(text);
    if let Ok(entries) = formats::memtape::parse(text) {
        for entry in &entries {
            let line = formats::memtape::line(entry);
            let again: Entry = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{line} does not read back: {e}"));
            assert_eq!(&again, entry, "round trip changed the entry");
        }
        // `memtape import` without --format reads what memtape's parser reads as memtape.
        let want = if entries.is_empty() {
            None
        } else {
            Some(Format::Memtape)
        };
        assert_eq!(detected, Ok(want), "a memtape file told as another format");
    }
    with_engine(|engine, _| check_import(engine.import(Format::Memtape, text, &base(), None)));
}

/// nanobot session files: parse, then import under a fresh session.
pub fn jsonl_nanobot(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = Format::detect(text);
    let _ = formats::nanobot::parse(text, now());
    with_engine(|engine, n| {
        let session = format!("nanobot-{n}");
        check_import(engine.import(Format::Nanobot, text, &base(), Some(&session)));
    });
}

/// Bub tapes (with memory zones): read, then import under a fresh session.
pub fn jsonl_bub(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = Format::detect(text);
    let _ = formats::bub::read(text, now());
    with_engine(|engine, n| {
        let session = format!("bub-{n}");
        check_import(engine.import(Format::Bub, text, &base(), Some(&session)));
    });
}

/// Dify's stored node memory (`{"version": 1, "messages": [...]}`): what parses renders
/// back to the same JSON, reads again to the same file, and imported into a fresh node
/// exports the same JSON again (or the import is refused with a domain error).
pub fn dify_node_memory(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(file) = formats::dify_node::parse(text) else {
        return;
    };
    let source: Value = serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(text))
        .unwrap_or_else(|e| panic!("parsed, yet not JSON: {e}"));
    let rendered = formats::dify_node::render(&file);
    assert_eq!(rendered, source, "rendering changed the file");
    let again = formats::dify_node::parse(&rendered.to_string())
        .unwrap_or_else(|e| panic!("{rendered} does not read back: {e}"));
    assert_eq!(again, file, "reading the rendering changed the file");
    with_engine(|engine, n| {
        let conversation = format!("dify-{n}");
        let result =
            engine.import_node_memory(vec![(base(), conversation.clone(), "node".into(), file)]);
        let imported = result.is_ok();
        check_import(result);
        if imported {
            let out = engine
                .export_node_memory(&base(), &conversation, "node")
                .unwrap_or_else(|e| panic!("an imported node does not export: {e}"));
            assert_eq!(
                formats::dify_node::render(&out),
                source,
                "import then export changed the file"
            );
        }
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
        erased: None,
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
    let _ = memtape_search::text::query_words(query);
    let _ = memtape_search::text::cjk_query(query);
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
            &dir.path().join("index"),
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

/// Splits `data` at its first NUL: the bytes before it and those after (empty without one).
fn split_nul(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    }
}

/// The fact diff of lossless rewrites, the way `memtape::rewrite` runs it: the input is the
/// text a model was shown (`seen`), its rewrite and, after a second NUL, the file as it is
/// now (another writer may have added to it; `seen` without one), NUL-separated and read
/// lossily as UTF-8. Every fact reported dropped is a fact of the old text, once, that the
/// new one does not state, and every fact not reported is stated; every dropped fact can
/// be recorded as a `memory.dropped` event; the merged rewrite keeps the rewrite as its
/// start and every line added meanwhile, so none of those is reported dropped; restoring one
/// states it, keeps every fact the file had, lands in its section when the file has it, and
/// a second restore changes nothing.
pub fn facts(data: &[u8]) {
    use memtape_core::memory::facts::{self, Fact};
    let (seen, rest) = split_nul(data);
    let (rewrite, current) = split_nul(rest);
    let seen = String::from_utf8_lossy(seen);
    let rewrite = String::from_utf8_lossy(rewrite);
    let current = if data.iter().filter(|b| **b == 0).count() >= 2 {
        String::from_utf8_lossy(current)
    } else {
        seen.clone()
    };

    check_dropped(&seen, &rewrite);
    // What the model did not see is carried over, never reported dropped.
    let merged = facts::carry_over(&seen, &current, &rewrite);
    assert!(
        merged.starts_with(&*rewrite),
        "carry_over changed the rewrite: {merged:?}"
    );
    for fact in facts::facts(&current) {
        if !facts::states(&seen, &fact.text) {
            assert!(
                facts::states(&merged, &fact.text),
                "{:?}, added since the model read the file, is lost: {merged:?}",
                fact.text
            );
        }
    }
    // (On small files: for each line `seen` lacks, carry_over reads the whole rewrite again.)
    if current.len() <= 4096 {
        assert_eq!(
            facts::carry_over(&seen, &current, &current),
            *current,
            "carrying a file over itself changed it"
        );
    }
    // Restoring is checked on the first few (each check reads the whole file again).
    for fact in check_dropped(&current, &merged).iter().take(8) {
        check_restore(&merged, fact);
    }
    // A fact put back under a heading the file has (the first line that looks like one).
    if let (Some(fact), Some(heading)) = (
        facts::facts(&seen).into_iter().next(),
        merged.lines().find(|l| l.trim_start().starts_with('#')),
    ) {
        check_restore(
            &merged,
            &Fact {
                section: Some(heading.trim().to_owned()),
                ..fact
            },
        );
    }
}

/// A line with every control character but a tab made a space: how a fact with one is
/// recorded.
fn without_controls(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
        .collect()
}

/// `facts::dropped(old, new)` against its contract; returns what it reported. A fact is
/// reported as written, or (with a control character, or past 16 KiB) as a
/// `memory.dropped` event can hold it; either way the event validates.
fn check_dropped(old: &str, new: &str) -> Vec<memtape_core::memory::facts::Fact> {
    use memtape_core::memory::facts::{self, normal};
    let all = facts::facts(old);
    let gone = facts::dropped(old, new);
    // Each fact of `old` with its normal form, and that of its recordable form.
    let forms: Vec<(String, String, String)> = all
        .iter()
        .map(|f| {
            let clean = without_controls(&f.text);
            (normal(&f.text), normal(&clean), clean)
        })
        .collect();
    // Whether the reported fact `r` (with the normal form `n`) stands for the fact `i` of
    // `old`: it is the same fact, or its recordable form.
    let reports = |r: &facts::Fact, n: &str, i: usize| {
        let (own, cleaned, clean) = &forms[i];
        own == n
            || cleaned == n
            || (clean.len() > events::DROPPED_TEXT_MAX && clean.contains(r.text.trim()))
    };
    let mut seen = std::collections::HashSet::new();
    for fact in &gone {
        let n = normal(&fact.text);
        assert!(
            (0..all.len()).any(|i| reports(fact, &n, i) && !facts::states(new, &all[i].text)),
            "{fact:?} is not a fact of the old text that the new one leaves out"
        );
        if all.contains(fact) {
            assert!(
                !facts::states(new, &fact.text),
                "{:?} is reported dropped, yet the new text states it",
                fact.text
            );
        }
        assert!(seen.insert(n), "{:?} is reported dropped twice", fact.text);
        // What `memtape::rewrite` records for it.
        let event = events::BuiltinEvent::Dropped(events::Dropped {
            path: "MEMORY.md".to_owned(),
            text: fact.text.clone(),
            section: fact.section.clone(),
            version: 2,
            by: "fuzz".to_owned(),
        });
        if let Err(e) = event.to_payload().validate() {
            panic!("the dropped fact {fact:?} cannot be recorded: {e}");
        }
    }
    for (i, fact) in all.iter().enumerate() {
        let (own, cleaned, clean) = &forms[i];
        let reported = seen.contains(own)
            || seen.contains(cleaned)
            || (clean.len() > events::DROPPED_TEXT_MAX
                && gone.iter().any(|f| reports(f, &normal(&f.text), i)));
        assert!(
            reported || facts::states(new, &fact.text),
            "{:?} is neither stated by the new text nor reported dropped",
            fact.text
        );
    }
    assert!(
        facts::dropped(old, old).is_empty(),
        "a text drops facts from itself"
    );
    gone
}

/// `facts::restore(content, fact)` against its contract.
fn check_restore(content: &str, fact: &memtape_core::memory::facts::Fact) {
    use memtape_core::memory::facts;
    let restored = facts::restore(content, fact);
    assert!(
        facts::states(&restored, &fact.text),
        "restoring {fact:?} does not state it: {restored:?}"
    );
    assert_eq!(
        facts::restore(&restored, fact),
        restored,
        "restoring {fact:?} twice changes the file"
    );
    assert!(
        facts::dropped(content, &restored).is_empty(),
        "restoring {fact:?} lost a fact: {restored:?}"
    );
    if facts::states(content, &fact.text) {
        assert_eq!(
            restored, content,
            "restoring a stated fact changed the file"
        );
        return;
    }
    if let Some(section) = &fact.section
        && let Some(heading) = content.lines().position(|l| l.trim() == section)
    {
        let line = fact.text.trim_end();
        assert!(
            restored.lines().skip(heading + 1).any(|l| l == line),
            "{fact:?} is not put back under its heading: {restored:?}"
        );
    }
}

/// `memtape.toml` as the CLI reads it: its `[llm]` and `[lifecycle]` tables.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    llm: memtape_llm::LlmSettings,
    #[serde(default)]
    lifecycle: memtape::LifecycleConfig,
}

/// Moments at the edges of what chrono represents and of what cron searches, and ordinary
/// ones (one on the last nanosecond of a leap day; the sixth, an ordinary one, is what
/// [`check_schedule`] asks first).
fn moments() -> [DateTime<Utc>; 7] {
    let at = |s: &str| {
        DateTime::parse_from_rfc3339(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .with_timezone(&Utc)
    };
    [
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
        DateTime::UNIX_EPOCH,
        at("0001-01-01T00:00:00Z"),
        at("2024-02-29T23:59:59.999999999Z"),
        at("2026-03-10T01:59:00Z"),
        at("4999-12-31T23:59:00Z"),
    ]
}

/// An emergence schedule against its contract: from every moment, the next run it gives
/// is strictly later, and (on UTC) the first one: asked again from just before it, or
/// from the moment itself, the answer is the same. A 5-field expression fires on whole
/// minutes.
fn check_schedule(schedule: &memtape::Schedule, local: bool) {
    use chrono::Timelike;
    let moments = moments();
    // One that never fires ("0 0 30 2 *") is searched for up to the year 5000 each time
    // (a tenth of a second): asked from an ordinary moment and the last one, it is done.
    if schedule.next_after(moments[5]).is_none() {
        assert_eq!(schedule.next_after(DateTime::<Utc>::MAX_UTC), None);
        return;
    }
    for at in moments {
        let Some(next) = schedule.next_after(at) else {
            continue;
        };
        assert!(next > at, "the run after {at} is at {next}");
        if local {
            continue;
        }
        assert_eq!(
            (next.second(), next.nanosecond()),
            (0, 0),
            "the run after {at} is not on a whole minute: {next}"
        );
        let just_before = (next - chrono::TimeDelta::seconds(1)).max(at);
        assert_eq!(
            schedule.next_after(just_before),
            Some(next),
            "after {at} the next run is {next}, but after {just_before} another"
        );
    }
}

/// `memtape.toml`: the bytes before the first NUL are the file, the lines after it the
/// environment (`NAME=value`). Any text is read into the CLI's tables or refused as TOML;
/// `[lifecycle]` validates or is refused with a configuration error, and when it
/// validates, every value is in its documented range and every schedule it names parses
/// and runs forward; `[llm]` with the environment over it gives no model, a configuration
/// error, or a model whose values come from the right source (the environment wins key by
/// key) and lie in range, and whose debug output never shows its key.
pub fn lifecycle_config(data: &[u8]) {
    let (file, env) = split_nul(data);
    // The CLI refuses a file that is not UTF-8 before TOML sees it.
    let Some(file) = text(file) else { return };
    let env = String::from_utf8_lossy(env);
    let env: Vec<(&str, &str)> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let Ok(parsed) = toml::from_str::<ConfigFile>(file) else {
        return;
    };
    check_lifecycle(&parsed.lifecycle);
    check_llm(&parsed.llm, &env);
}

/// `[lifecycle]`: validation refuses with a configuration error, or everything is in range.
fn check_lifecycle(config: &memtape::LifecycleConfig) {
    if let Err(e) = config.validate() {
        assert!(
            matches!(e, Error::Config(_)),
            "[lifecycle] refused with an error that is not a configuration one: {e}"
        );
        return;
    }
    assert!((2..=10_000).contains(&config.memory_window));
    assert!((1..=100_000).contains(&config.consolidation_max_tokens));
    let x = &config.extraction;
    assert!((1..=10_000).contains(&x.min_messages));
    assert!(x.min_user_chars <= 100_000);
    assert!((1..=1000).contains(&x.transcript_messages));
    assert!((1..=100_000).contains(&x.message_chars));
    assert!((1..=100_000).contains(&x.max_tokens));
    assert!(x.cooldown_minutes <= 10_080);
    let e = &config.emergence;
    assert!((1..=366).contains(&e.days));
    assert_eq!(config.consolidation(false).window, config.memory_window);
    for agent in std::iter::once("").chain(e.agents.keys().map(String::as_str)) {
        match e.schedule(agent) {
            Ok(Some(schedule)) => {
                assert!(e.enabled, "a schedule while emergence is off");
                check_schedule(&schedule, e.timezone.eq_ignore_ascii_case("local"));
            }
            Ok(None) => {}
            Err(err) => panic!("[lifecycle] validated, but agent {agent:?}'s schedule: {err}"),
        }
    }
    let json = serde_json::to_value(config).unwrap_or_else(|e| panic!("{e}"));
    let back: memtape::LifecycleConfig = serde_json::from_value(json)
        .unwrap_or_else(|e| panic!("{config:?} does not read back: {e}"));
    assert_eq!(&back, config);
}

/// `[llm]` with the environment `env` over it.
fn check_llm(file: &memtape_llm::LlmSettings, env: &[(&str, &str)]) {
    use memtape_llm::{LlmConfig, Provider};
    // The last assignment of a name wins, as in a shell.
    let get = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    let blank = |v: &Option<String>| v.as_deref().is_none_or(|v| v.trim().is_empty());
    // The value in effect for a variable: the environment's, else the file's.
    let chosen = |name: &str, file: &Option<String>| {
        let v = get(name);
        if blank(&v) {
            (!blank(file)).then(|| file.clone()).flatten()
        } else {
            v
        }
    };
    let provider = chosen("MEMTAPE_LLM_PROVIDER", &file.provider);
    let base_url = chosen("MEMTAPE_LLM_BASE_URL", &file.base_url);
    let model = chosen("MEMTAPE_LLM_MODEL", &file.model);
    let config = match LlmConfig::from_sources(get, file, "memtape.toml") {
        Ok(Some(config)) => config,
        Ok(None) => {
            assert!(
                provider.is_none() && base_url.is_none() && model.is_none(),
                "no model, though one is configured"
            );
            return;
        }
        Err(e) => {
            assert!(
                matches!(e, memtape_llm::Error::Config(_)),
                "[llm] refused with an error that is not a configuration one: {e}"
            );
            return;
        }
    };
    let anthropic = provider.as_deref().map(str::trim) == Some("anthropic");
    assert_eq!(config.provider == Provider::Anthropic, anthropic);
    assert_eq!(Some(config.model.as_str()), model.as_deref().map(str::trim));
    assert!(!config.model.is_empty());
    if let Some(url) = &base_url {
        assert_eq!(&config.base_url, url);
    }
    assert!(
        config.base_url.starts_with("http://") || config.base_url.starts_with("https://"),
        "base URL {:?}",
        config.base_url
    );
    assert!(
        (1..=3600).contains(&config.timeout.as_secs()) && config.timeout.subsec_nanos() == 0,
        "timeout {:?}",
        config.timeout
    );
    assert!(config.retry.max_retries <= 10);
    if let Some(key) = &config.api_key {
        assert!(!key.trim().is_empty(), "an empty key");
    } else {
        assert!(file.api_key_env.is_none(), "api_key_env is set, yet no key");
    }
    let other = LlmConfig {
        api_key: config.api_key.as_ref().map(|k| format!("{k}-other")),
        ..config.clone()
    };
    assert_eq!(
        format!("{config:?}"),
        format!("{other:?}"),
        "the key shows in the debug output"
    );
}

/// The emergence schedule's cron expressions (`[lifecycle.emergence] cron` and per-agent
/// ones): anything but five fields is refused; an accepted one, on UTC or local time, gives
/// from every moment (chrono's first and last included) a next run strictly later, on UTC
/// the first whole minute that fires; and the config reads it the same way (`off` aside).
pub fn cron(data: &[u8]) {
    let Some(expression) = text(data) else { return };
    let fields = expression.split_whitespace().count();
    for local in [false, true] {
        let parsed = memtape::Schedule::parse(expression, local);
        if fields != 5 {
            assert!(parsed.is_err(), "{fields} fields accepted: {expression:?}");
        }
        match &parsed {
            Ok(schedule) => check_schedule(schedule, local),
            Err(e) => assert!(matches!(e, Error::Config(_)), "{e}"),
        }
        let config = memtape::EmergenceConfig {
            cron: expression.to_owned(),
            timezone: if local { "local" } else { "UTC" }.to_owned(),
            ..Default::default()
        };
        match config.schedule("any-agent") {
            Ok(None) => assert!(expression.trim().eq_ignore_ascii_case("off")),
            Ok(Some(_)) => assert!(parsed.is_ok()),
            Err(_) => assert!(parsed.is_err()),
        }
    }
}

/// Names that look alike (`memtape_core::names`, issue 31): a scope name or memory path
/// that is accepted comes out composed (NFC) and free of invisible characters and outer
/// spaces; composing twice changes nothing; a stored scope reads back any name a new one
/// accepts; an idempotency key is accepted exactly when it is 1 to 255 printable ASCII
/// characters.
pub fn names(data: &[u8]) {
    let Some(name) = text(data) else {
        return;
    };
    let composed = memtape_core::names::nfc(name).into_owned();
    assert_eq!(
        memtape_core::names::nfc(&composed),
        composed.as_str(),
        "NFC is stable"
    );
    if let Ok(scope) = base().with_session(name) {
        let session = scope.session().unwrap_or_default();
        assert_eq!(session, composed, "a new name is taken composed");
        assert_eq!(
            memtape_core::names::look_alike(session),
            None,
            "{session:?}"
        );
        let stored = Scope::from_stored(
            "fuzz".into(),
            "agent".into(),
            None,
            Some(session.to_owned()),
            None,
        );
        assert_eq!(stored.ok(), Some(scope), "a stored name reads back");
    }
    let change = Change::one(
        Op::Write {
            path: format!("memories/{name}"),
            content: "x".into(),
        },
        "fuzz",
    );
    if let Ok(admitted) = memory::MemoryView::default().admit(change) {
        for op in &admitted.ops {
            for path in op.paths() {
                assert_eq!(memtape_core::names::nfc(path), path, "composed: {path:?}");
                for segment in path.split('/') {
                    assert_eq!(memtape_core::names::look_alike(segment), None, "{path:?}");
                }
            }
        }
        assert_eq!(admitted.clone().composed(), admitted, "composing twice");
    }
    let key_ok =
        !name.is_empty() && name.len() <= 255 && name.bytes().all(|b| b.is_ascii_graphic());
    assert_eq!(
        memtape_store::requests::check_key(name).is_ok(),
        key_ok,
        "key {name:?}"
    );
}
