//! Search through the engine: the write hook, catching up after a crash, and reindexing,
//! on a real SQLite tape and index file.
use std::path::Path;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use memtape::{
    EmbedError, Embedder, Engine, EntryId, Format, Index, IndexConfig, Message, Mode, Scope,
    SearchFilter, SearchRequest, SqliteStore, Store,
};

fn engine(dir: &Path) -> Engine {
    let index = Index::open(&dir.join("index"), None, IndexConfig::plain()).unwrap();
    Engine::init(dir).unwrap().with_index(index).unwrap()
}

fn bm25(engine: &Engine, text: &str) -> Vec<u64> {
    let request = SearchRequest::new(text, SearchFilter::tenant("t")).mode(Mode::Bm25);
    engine
        .search(&request)
        .unwrap()
        .iter()
        .map(|h| h.entry.id.0)
        .collect()
}

fn chat() -> Scope {
    Scope::agent("t", "a").unwrap().with_session("s").unwrap()
}

#[test]
fn every_append_is_searchable_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    engine
        .append(
            &chat(),
            Message::user("I bought a kayak"),
            Default::default(),
        )
        .unwrap();
    // The hook ran inside append: the index already covers the entry.
    assert_eq!(engine.index().unwrap().covered(), EntryId(1));
    engine
        .event(
            &chat(),
            "memory.long_term",
            serde_json::json!({"content": "Owns a kayak"}),
        )
        .unwrap();
    let hits = engine
        .search(&SearchRequest::new("kayak", SearchFilter::tenant("t")).mode(Mode::Bm25))
        .unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].entry.scope, chat());
    let jsonl = "{\"role\":\"user\",\"content\":\"the canoe is red\",\"timestamp\":\"2024-01-01T00:00:00\"}\n";
    let base = Scope::agent("t", "a").unwrap();
    engine
        .import(Format::Nanobot, jsonl, &base, Some("imported"))
        .unwrap();
    assert_eq!(
        bm25(&engine, "canoe"),
        [3],
        "imports go through the hook too"
    );
}

#[test]
fn an_index_left_behind_by_a_crash_catches_up_when_attached() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = engine(dir.path());
        engine
            .append(
                &chat(),
                Message::user("first note about tulips"),
                Default::default(),
            )
            .unwrap();
    }
    {
        // The process that wrote these died before its write hook ran: the tape has them,
        // the index file does not.
        let store = SqliteStore::open(dir.path()).unwrap();
        let now = chrono::Utc::now();
        let entries = ["tulips again", "and more tulips"].map(|t| {
            memtape::NewEntry::new(chat(), memtape::Payload::Message(Message::user(t)), now)
        });
        store.append(entries.into()).unwrap();
        let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
        assert_eq!(index.covered(), EntryId(1), "the index lags the tape");
    }
    let engine = engine(dir.path());
    assert_eq!(
        engine.index().unwrap().covered(),
        EntryId(3),
        "caught up on attach"
    );
    let mut got = bm25(&engine, "tulips");
    got.sort();
    assert_eq!(got, [1, 2, 3]);
}

#[test]
fn reindex_rebuilds_the_same_index_from_the_tape() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = engine(dir.path());
    for text in ["alpha beta", "beta gamma", "gamma delta"] {
        engine
            .append(&chat(), Message::user(text), Default::default())
            .unwrap();
    }
    let before = bm25(&engine, "beta gamma");
    // The index is only a projection: throwing it away loses nothing.
    assert_eq!(engine.reindex().unwrap(), 3);
    assert_eq!(bm25(&engine, "beta gamma"), before);
    assert_eq!(engine.store().last_id().unwrap(), EntryId(3));
}

#[test]
fn searching_without_an_index_says_so() {
    let engine = Engine::in_memory();
    let err = engine
        .search(&SearchRequest::new("x", SearchFilter::tenant("t")))
        .unwrap_err();
    assert!(err.to_string().contains("no search index"), "{err}");
}

/// An embedder that fails while `broken` is set.
struct Flaky {
    broken: AtomicBool,
}

impl Embedder for Flaky {
    fn id(&self) -> &str {
        "test-flaky-2"
    }
    fn dim(&self) -> usize {
        2
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err("the model crashed".into());
        }
        Ok(texts.iter().map(|_| vec![1.0, 0.0]).collect())
    }
}

#[test]
fn a_failed_write_hook_is_recorded_where_an_operator_can_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let flaky = Arc::new(Flaky {
        broken: AtomicBool::new(false),
    });
    let index = Index::open(
        &dir.path().join("index"),
        Some(flaky.clone()),
        IndexConfig::plain(),
    )
    .unwrap();
    let engine = Engine::init(dir.path()).unwrap().with_index(index).unwrap();
    assert_eq!(engine.index_failure(), None);
    flaky.broken.store(true, Ordering::SeqCst);
    // The append itself succeeds: it is durable before the hook runs.
    let id = engine
        .append(&chat(), Message::user("a kayak"), Default::default())
        .unwrap()
        .id;
    let failure = engine.index_failure().expect("the hook's failure is kept");
    assert!(failure.contains("the model crashed"), "{failure}");
    flaky.broken.store(false, Ordering::SeqCst);
    assert_eq!(bm25(&engine, "kayak"), [id.0], "the next search catches up");
}

/// Words hashed into 256 buckets: texts sharing no word are orthogonal.
struct Buckets;

impl Embedder for Buckets {
    fn id(&self) -> &str {
        "test-buckets-256"
    }
    fn dim(&self) -> usize {
        256
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 256];
                let words = t
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty());
                for w in words.map(str::to_lowercase) {
                    let h = w
                        .bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                    v[(h % 256) as usize] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                v.iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

#[test]
fn memory_search_returns_nothing_for_a_query_that_matches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(
        &dir.path().join("index"),
        Some(Arc::new(Buckets)),
        IndexConfig::default(),
    )
    .unwrap();
    let engine = Engine::init(dir.path()).unwrap().with_index(index).unwrap();
    let agent = Scope::agent("t", "a").unwrap();
    let content = "# Memory\nFavourite editor: Helix\nDeploy keys rotate every month\n";
    let saved = engine
        .call_tool(
            &agent,
            "memory.save",
            &serde_json::json!({ "content": content }),
        )
        .unwrap();
    assert!(!saved.is_error, "{}", saved.text);
    let search = |query: &str| {
        let out = engine
            .call_tool(
                &agent,
                "memory_search",
                &serde_json::json!({ "query": query }),
            )
            .unwrap();
        assert!(!out.is_error, "{}", out.text);
        serde_json::from_str::<serde_json::Value>(&out.text).unwrap()
    };
    assert_eq!(search("nothingmatches"), serde_json::json!([]));
    assert_eq!(search("gluon physics"), serde_json::json!([]));
    let found = search("which editor?");
    assert_eq!(found[0]["content"], "Favourite editor: Helix", "{found}");
}

#[test]
fn an_engine_that_indexes_behind_its_writes_attaches_an_index_with_text_only() {
    let dir = tempfile::tempdir().unwrap();
    let scope = chat();
    {
        let engine = Engine::init(dir.path()).unwrap();
        for i in 0..50 {
            let text = format!("message number {i} about kayaks");
            engine
                .append(&scope, Message::user(&text), Default::default())
                .unwrap();
        }
    }
    let index = Index::open(
        &dir.path().join("index"),
        Some(Arc::new(Buckets)),
        IndexConfig::default(),
    )
    .unwrap();
    let mut engine = Engine::init(dir.path()).unwrap();
    // What a server does: appends are acknowledged once durable and a background thread
    // embeds, so attaching the index must not embed the backlog first.
    engine.set_index_on_write(false);
    let engine = engine.with_index(index).unwrap();
    let index = engine.index().unwrap();
    assert_eq!(index.covered(), EntryId(50), "text is caught up");
    assert_eq!(index.embedded(), EntryId(0), "vectors are left behind");
    assert_eq!(bm25(&engine, "kayaks").len(), 10);
    while index.embed_step(engine.store()).unwrap() {}
    assert_eq!(index.embedded(), EntryId(50));
}

/// Issue 31, section 5: an index that cannot catch up (its disk is full) still answers
/// from what it holds, and says it is behind, instead of failing the search. The index
/// sits on a real tmpfs that is then filled (the test needs root, which this project's
/// machines and CI have; where mounting is not permitted it says so and stops).
#[test]
fn a_search_answers_from_what_is_indexed_when_the_index_cannot_catch_up() {
    use std::process::Command;
    let disk = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(disk.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("cannot mount a tmpfs here (not root?): this test needs one");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(disk.path());
    let tape = tempfile::tempdir().unwrap();
    let index = Index::open(&disk.path().join("index"), None, IndexConfig::plain()).unwrap();
    let mut engine = Engine::init(tape.path())
        .unwrap()
        .with_index(index)
        .unwrap();
    engine.set_index_on_write(false);
    let first = engine
        .append(
            &chat(),
            Message::user("the quokka lives on Rottnest"),
            Default::default(),
        )
        .unwrap();
    assert_eq!(
        bm25(&engine, "quokka"),
        [first.id.0],
        "caught up while it could"
    );
    // The disk fills up.
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(disk.path().join("filler")).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while filler.write_all(&chunk).is_ok() {}
        let _ = filler.sync_all();
    }
    engine
        .append(
            &chat(),
            Message::user("another quokka story"),
            Default::default(),
        )
        .unwrap();
    let request = SearchRequest::new("quokka", SearchFilter::tenant("t")).mode(Mode::Bm25);
    let (hits, behind) = engine.search_behind(&request).unwrap();
    let ids: Vec<u64> = hits.iter().map(|h| h.entry.id.0).collect();
    assert_eq!(ids, [first.id.0], "what the index holds");
    let why = behind.expect("it says the index is behind");
    assert!(why.contains("full"), "{why}");
}
