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

    let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
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

/// Issue 31, section 6: a store written before the look-alike rule (schema 2, made by
/// `memtape` of this first commits with `append " spaced"`, `append` to a session
/// named `café` decomposed and one with a zero-width space, `files create` of
/// `/memories/café.md` decomposed and composed, `/memories/Notes.md` and `notes.md`, and
/// `/memories/note<U+202E>txt.md`). It opens and reads; the two `café.md` read as one
/// file (the later write); the names today's rule refuses are refused as new names but the
/// files that have them can be renamed or deleted; a new file that differs from one only by
/// case is refused.
#[test]
fn a_store_from_before_the_look_alike_rule_keeps_working() {
    use memtape::memory::{Change, Op};
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2-names");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(from.join("memtape.db"), dir.path().join("memtape.db")).unwrap();
    let engine = Engine::open(dir.path()).unwrap();
    let agent = Scope::agent("default", "default").unwrap();
    // Every session is listed, with its name as written.
    let sessions: Vec<String> = engine
        .sessions("default")
        .unwrap()
        .iter()
        .filter_map(|s| s.info.scope.session().map(str::to_owned))
        .collect();
    assert_eq!(sessions.len(), 3, "{sessions:?}");
    assert!(sessions.contains(&" spaced".to_owned()));
    assert!(sessions.contains(&"zero\u{200B}width".to_owned()));
    // The two café.md are one file now: the composed name, the later text.
    let memory = engine.memory(&agent).unwrap();
    let names: Vec<&str> = memory.files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "MEMORY.md",
            "memories/Notes.md",
            "memories/caf\u{e9}.md",
            "memories/notes.md",
            "memories/note\u{202E}txt.md"
        ]
    );
    assert_eq!(
        memory.content("memories/caf\u{e9}.md"),
        Some("composed file")
    );
    // A write through the decomposed name lands in the same file.
    engine
        .record_memory(
            &agent,
            Change::one(
                Op::Write {
                    path: "memories/cafe\u{301}.md".into(),
                    content: "one file".into(),
                },
                "test",
            ),
        )
        .unwrap();
    let memory = engine.memory(&agent).unwrap();
    assert_eq!(memory.content("memories/caf\u{e9}.md"), Some("one file"));
    assert_eq!(memory.files.len(), 5);
    // The bidi name may not be written to, but may be renamed away.
    let write = |path: &str| {
        engine.record_memory(
            &agent,
            Change::one(
                Op::Write {
                    path: path.into(),
                    content: "x".into(),
                },
                "test",
            ),
        )
    };
    let refused = write("memories/note\u{202E}txt.md")
        .unwrap_err()
        .to_string();
    assert!(refused.contains("U+202E"), "{refused}");
    engine
        .record_memory(
            &agent,
            Change::one(
                Op::Rename {
                    from: "memories/note\u{202E}txt.md".into(),
                    to: "memories/note.md".into(),
                },
                "test",
            ),
        )
        .unwrap();
    // New names are held to the rule.
    let refused = write("memories/NOTES.md").unwrap_err().to_string();
    assert!(refused.contains("only by case"), "{refused}");
    assert!(write("memories/ trailing.md").is_err());
    assert!(write("memories/zero\u{200B}.md").is_err());
    assert!(
        Scope::agent("default", "default")
            .unwrap()
            .with_session(" spaced")
            .is_err()
    );
    // Its search index is rebuilt from the tape as any other.
    let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
    let engine = engine.with_index(index).unwrap();
    let hits = engine
        .search(&SearchRequest::new("decomposed", SearchFilter::tenant("default")).mode(Mode::Bm25))
        .unwrap();
    assert!(!hits.is_empty());
}
