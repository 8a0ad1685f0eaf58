//! On-disk compatibility: a store and an index written by an earlier format version (the
//! files under `tests/fixtures/`, committed as that version wrote them) still open, read
//! and search with this build. Add a folder for each new format version; never edit one.
use std::path::Path;

use memtape::{
    Engine, EntryId, HistoryLimits, Index, IndexConfig, Mode, Scope, SearchFilter, SearchRequest,
    Store,
};

/// Copies a fixture folder into a fresh temporary directory, so the test never changes the
/// committed files (opening a store may migrate it).
fn copy_fixture(version: &str) -> tempfile::TempDir {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(version);
    let dir = tempfile::tempdir().unwrap();
    for file in ["memtape.db", "index.db"] {
        std::fs::copy(from.join(file), dir.path().join(file)).unwrap();
    }
    dir
}

/// Version 1 (schema 1, index format 2): made by `memtape` of issue 4 with
/// `init; append s1 ×2; anchor s1 topic/billing; append s1; consolidate s1 3;
/// memory daily; files create /memories/ada.md; --user u1 append s2; --model none search`.
#[test]
fn a_version_1_store_and_index_still_open_read_and_search() {
    opens_reads_and_searches("v1");
}

/// Version 2 (schema 2 with the tape id, index format 3 bound to it): made by `memtape` of
/// issue 10 with the same commands as version 1.
#[test]
fn a_version_2_store_and_index_still_open_read_and_search() {
    opens_reads_and_searches("v2");
}

fn opens_reads_and_searches(version: &str) {
    let dir = copy_fixture(version);
    let engine = Engine::open(dir.path()).unwrap();
    let s1 = Scope::agent("default", "default")
        .unwrap()
        .with_session("s1")
        .unwrap();
    let info = engine.store().scope_info(&s1).unwrap().unwrap();
    assert_eq!(info.last_consolidated, EntryId(3));
    let history = engine.history(&s1, &HistoryLimits::default()).unwrap();
    let texts: Vec<String> = history
        .iter()
        .filter_map(|e| e.message().map(|m| m.content_text().into_owned()))
        .collect();
    assert_eq!(texts, ["Why was I charged twice?"]);
    let memory = engine
        .memory(&Scope::agent("default", "default").unwrap())
        .unwrap();
    assert_eq!(
        memory.content("memories/ada.md"),
        Some("Prefers dark mode.")
    );
    let u1 = Scope::agent("default", "default")
        .unwrap()
        .with_user("u1")
        .unwrap()
        .with_session("s2")
        .unwrap();
    assert_eq!(engine.store().scope_info(&u1).unwrap().unwrap().messages, 1);

    let index = Index::open(&dir.path().join("index.db"), None, IndexConfig::plain()).unwrap();
    let engine = engine.with_index(index).unwrap();
    let request = SearchRequest::new("charged twice", SearchFilter::tenant("default"))
        .mode(Mode::Bm25)
        .limit(1);
    let hits = engine.search(&request).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].entry.id, EntryId(5));
    // A later append is found too: the old index keeps following the tape.
    engine
        .append(
            &s1,
            memtape::Message::user("a kayak on the lake"),
            Default::default(),
        )
        .unwrap();
    let request = SearchRequest::new("kayak", SearchFilter::tenant("default")).mode(Mode::Bm25);
    assert_eq!(engine.search(&request).unwrap().len(), 1);
}
