//! Erasure reaches the search index: an erased entry's document goes (its FTS5 row, its
//! vector, the next message's context that held its text), a redacted one comes back with
//! what is left, another process's mirror reloads, a forged receipt does nothing, and the
//! index's files keep no byte of the erased text.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use memtape_core::erasure::{Erased, Selector};
use memtape_core::events::BuiltinEvent;
use memtape_core::{EntryId, Message, NewEntry, Payload, Scope};
use memtape_search::{EmbedError, Embedder, Index, IndexConfig, Mode, SearchFilter, SearchRequest};
use memtape_store::{EraseMode, EraseRequest, EraseTarget, SqliteStore, Store};

const SECRET: &str = "4111-1111-ZOË";

/// Words hashed into 64 buckets: texts sharing words are close.
struct Buckets;

impl Embedder for Buckets {
    fn id(&self) -> &str {
        "test-buckets-64"
    }
    fn dim(&self) -> usize {
        64
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 64];
                for w in memtape_search::text::terms(t) {
                    let h = w
                        .bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
                    v[(h % 64) as usize] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                v.iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

fn t(days: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::days(20_000 + days)
}

fn session(user: &str) -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user(user)
        .unwrap()
        .with_session("s1")
        .unwrap()
}

fn say(store: &SqliteStore, scope: &Scope, m: Message) -> EntryId {
    store
        .append(vec![NewEntry::new(
            scope.clone(),
            Payload::Message(m),
            t(0),
        )])
        .unwrap()[0]
        .id
}

fn open_with(path: &Path, config: IndexConfig) -> Index {
    Index::open(path, Some(Arc::new(Buckets)), config).unwrap()
}

fn found(index: &Index, text: &str, mode: Mode) -> Vec<u64> {
    let mut ids: Vec<u64> = index
        .search(&SearchRequest::new(text, SearchFilter::tenant("acme")).mode(mode))
        .unwrap()
        .iter()
        .map(|h| h.id.0)
        .collect();
    ids.sort();
    ids
}

fn erase(store: &SqliteStore, target: EraseTarget, mode: EraseMode, receipt: Scope) {
    store
        .erase(&EraseRequest {
            target,
            mode,
            receipt_scope: receipt,
            selector: Selector::Text,
            by: "cli".into(),
            reason: String::new(),
            at: t(1),
            dry_run: false,
        })
        .unwrap();
}

/// Every term of the inverted index in `dir`, read through tantivy; fails if a file in
/// `dir` belongs to no segment its last commit names (a merged-away segment's files must
/// be gone: they would still hold erased words).
fn inverted_terms(dir: &Path) -> std::collections::HashSet<String> {
    let index = tantivy::Index::open_in_dir(dir).unwrap();
    let metas = index.load_metas().unwrap();
    let live: Vec<String> = metas
        .segments
        .iter()
        .map(|s| s.id().uuid_string())
        .collect();
    for f in std::fs::read_dir(dir).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        let known = name.starts_with('.') || name == "meta.json";
        assert!(
            known || live.iter().any(|id| name.starts_with(id.as_str())),
            "{name} belongs to no live segment"
        );
    }
    let searcher = index.reader().unwrap().searcher();
    let mut out = std::collections::HashSet::new();
    for field in ["text", "context"] {
        let field = index.schema().get_field(field).unwrap();
        for segment in searcher.segment_readers() {
            let inverted = segment.inverted_index(field).unwrap();
            let mut stream = inverted.terms().stream().unwrap();
            while stream.advance() {
                out.insert(String::from_utf8_lossy(stream.key()).into_owned());
            }
        }
    }
    out
}

/// Which files under `dir` (and its folders: the index's shards) hold any of `needles`.
fn holding(dir: &Path, needles: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(holding(&path, needles));
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        for n in needles {
            if let Some(at) = bytes.windows(n.len()).position(|w| w == n.as_bytes()) {
                out.push(format!("{} holds {n:?} at byte {at}", path.display()));
            }
        }
    }
    out
}

#[test]
fn erased_entries_leave_the_index_and_redacted_ones_keep_the_rest() {
    erasure_reaches(IndexConfig::default());
}

/// The same in a shard above the inverted index's threshold: the erased words leave its
/// tantivy files too.
#[test]
fn erased_entries_leave_a_large_shards_inverted_index() {
    erasure_reaches(IndexConfig {
        inverted_from: 0,
        ..IndexConfig::default()
    });
}

fn erasure_reaches(config: IndexConfig) {
    let open = |path: &Path| open_with(path, config);
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let index_path = dir.path().join("index");
    let (ann, bob) = (session("ann"), session("bob"));
    let card = say(
        &store,
        &ann,
        Message::user(format!("my card is {SECRET} xylophone")),
    );
    let reply = say(&store, &ann, Message::assistant("noted quokka"));
    let bobs = say(
        &store,
        &bob,
        Message::user(format!("bob pays with {SECRET} marimba")),
    );
    let later = say(&store, &ann, Message::user("violin lessons on tuesday"));
    let index = open(&index_path);
    // Another process's index on the same file, with its own mirror.
    let other = open(&index_path);
    index.catch_up(&store).unwrap();
    other.catch_up(&store).unwrap();
    let before = found(&index, "4111 xylophone", Mode::Bm25);
    assert!(
        before.contains(&card.0) && before.contains(&bobs.0),
        "{before:?}"
    );
    assert!(found(&other, "quokka", Mode::Vector).contains(&reply.0));
    // The later message holds the reply's words in its context field.
    assert!(found(&index, "quokka", Mode::Bm25).contains(&later.0));
    // The index holds the words (stemmed: "xylophon").
    assert!(!holding(dir.path(), &["xylophon"]).is_empty());
    if config.inverted_from == 0 {
        // So does the inverted index beside the shard.
        let inverted = index.shard_path("acme").with_extension("tantivy");
        // (Its term dictionary is an FST, which does not keep a word's bytes together: its
        // terms are read through tantivy.)
        let terms = inverted_terms(&inverted);
        assert!(terms.contains("xylophon") && terms.contains("quokka"));
    }

    // A forged receipt naming bob's message (which no erasure touched) changes nothing.
    let forged = Erased {
        by: "cli".into(),
        selector: Selector::Entries,
        entries: 1,
        redacted: 0,
        ids: vec![(bobs, bobs)],
        reason: String::new(),
    };
    let err = store
        .append(vec![NewEntry::new(
            bob.clone(),
            BuiltinEvent::Erased(forged.clone()).to_payload(),
            t(1),
        )])
        .unwrap_err();
    assert!(err.to_string().contains("erasure only"), "{err}");
    // A restore (an import of memtape's own format) can carry one: the index checks the
    // store and finds nothing erased.
    let next = EntryId(store.last_id().unwrap().0 + 1);
    store
        .restore(vec![memtape_core::Entry {
            id: next,
            scope: bob.clone(),
            payload: BuiltinEvent::Erased(forged).to_payload(),
            meta: Default::default(),
            created_at: t(1),
            parent: None,
            erased: None,
        }])
        .unwrap();
    index.catch_up(&store).unwrap();
    assert!(found(&index, "marimba", Mode::Bm25).contains(&bobs.0));

    // Ann's two messages erased whole: they go, and so does the later message's context
    // (it followed the reply, whose text it held); the later message stays.
    erase(
        &store,
        EraseTarget::Entries {
            within: ann.clone(),
            ids: vec![card, reply],
        },
        EraseMode::Whole,
        ann.clone(),
    );
    index.catch_up(&store).unwrap();
    let after = found(&index, "4111 xylophone", Mode::Bm25);
    assert!(after.contains(&bobs.0), "{after:?}");
    assert!(
        !after.contains(&card.0) && !after.contains(&reply.0),
        "{after:?}"
    );
    assert_eq!(found(&index, "quokka", Mode::Bm25), Vec::<u64>::new());
    for mode in [Mode::Vector, Mode::Hybrid] {
        let got = found(&index, "my card xylophone noted quokka", mode);
        assert!(!got.contains(&card.0) && !got.contains(&reply.0), "{got:?}");
    }
    // The other process sees the new build and reloads: ann's vectors are gone there too.
    other.catch_up(&store).unwrap();
    let got = found(&other, "noted quokka", Mode::Vector);
    assert!(!got.contains(&reply.0) && !got.contains(&card.0), "{got:?}");
    assert!(found(&index, "violin", Mode::Bm25).contains(&later.0));

    // Bob's card number redacted: the rest of his message is still found.
    erase(
        &store,
        EraseTarget::Within(bob.clone()),
        EraseMode::Text(SECRET.into()),
        bob.clone(),
    );
    index.catch_up(&store).unwrap();
    assert_eq!(found(&index, "4111", Mode::Bm25), Vec::<u64>::new());
    assert!(found(&index, "marimba", Mode::Bm25).contains(&bobs.0));

    // No byte of what was erased is left in the index's files (once the logs are
    // truncated, which a concurrent checkpoint can delay but not prevent).
    assert!(
        index.truncate_wal().unwrap(),
        "the shards' logs were truncated"
    );
    let files = holding(
        dir.path(),
        &["4111", "xylophon", "quokka", "zoe", "ZO\u{cb}"],
    );
    assert_eq!(files, Vec::<String>::new());
    if config.inverted_from == 0 {
        // Nor in the inverted index's terms, and no file of a segment merged away is left.
        let inverted = index.shard_path("acme").with_extension("tantivy");
        let terms = inverted_terms(&inverted);
        for gone in ["4111", "xylophon", "quokka", "zoe", "card"] {
            assert!(!terms.contains(gone), "{gone} is still a term");
        }
        assert!(terms.contains("marimba") && terms.contains("violin"));
    }
    // A fresh index over the same tape finds the same.
    drop((index, other));
    std::fs::remove_dir_all(&index_path).unwrap();
    let rebuilt = open(&index_path);
    rebuilt.catch_up(&store).unwrap();
    assert!(found(&rebuilt, "marimba", Mode::Bm25).contains(&bobs.0));
    assert_eq!(
        found(&rebuilt, "4111 quokka xylophone", Mode::Bm25),
        Vec::<u64>::new()
    );
}
