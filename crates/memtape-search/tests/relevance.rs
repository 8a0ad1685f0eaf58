//! What counts as a match: CJK text found by its substrings, nothing returned for a query
//! that matches nothing, and scores that mean something on a small index.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use chrono::DateTime;
use memtape_core::{Message, NewEntry, Payload, Scope};
use memtape_search::{EmbedError, Embedder, Index, IndexConfig, Mode, SearchFilter, SearchRequest};
use memtape_store::{SqliteStore, Store};

/// A deterministic stand-in model: words hashed into 256 buckets; texts sharing no word
/// are orthogonal (cosine 0), as unrelated texts are far apart in a real model.
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
                for w in memtape_search::text::terms(t) {
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

fn chat() -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_session("s1")
        .unwrap()
}

fn store_with(dir: &std::path::Path, texts: &[&str]) -> SqliteStore {
    let store = SqliteStore::create(dir).unwrap();
    for text in texts {
        store
            .append(vec![NewEntry::new(
                chat(),
                Payload::Message(Message::user(*text)),
                DateTime::UNIX_EPOCH,
            )])
            .unwrap();
    }
    store
}

fn found(index: &Index, text: &str, mode: Mode) -> Vec<(u64, f32)> {
    index
        .search(&SearchRequest::new(text, SearchFilter::tenant("acme")).mode(mode))
        .unwrap()
        .iter()
        .map(|h| (h.id.0, h.score))
        .collect()
}

fn ids(index: &Index, text: &str, mode: Mode) -> Vec<u64> {
    found(index, text, mode).into_iter().map(|x| x.0).collect()
}

#[test]
fn cjk_text_is_found_by_its_substrings() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(
        dir.path(),
        &[
            "我喜欢喝茶",
            "今天天气很好",
            "東京に行きました",
            "I like tea",
            "저는 한국어를 공부합니다",
        ],
    );
    for config in [IndexConfig::plain(), IndexConfig::default()] {
        let index = Index::open(&dir.path().join("index"), None, config).unwrap();
        index.catch_up(&store).unwrap();
        assert_eq!(ids(&index, "我喜欢", Mode::Bm25)[0], 1);
        assert_eq!(ids(&index, "喝茶", Mode::Bm25)[0], 1);
        assert_eq!(ids(&index, "天气", Mode::Bm25)[0], 2);
        assert_eq!(ids(&index, "東京", Mode::Bm25)[0], 3);
        assert_eq!(ids(&index, "한국어", Mode::Bm25)[0], 5);
        assert_eq!(ids(&index, "tea", Mode::Bm25)[0], 4);
        if config == IndexConfig::plain() {
            // Exactly the entries that contain the run: pairs in another order do not match.
            assert_eq!(ids(&index, "我喜欢", Mode::Bm25), [1]);
            assert!(ids(&index, "欢喜", Mode::Bm25).is_empty());
        }
    }
}

const BILLING: &[&str] = &[
    "Why was I charged twice this month?",
    "The second charge is a pending authorization; it drops off in three days",
    "Can I get an invoice for March?",
    "Sure, the invoice is on its way to your email",
];

#[test]
fn a_query_that_matches_nothing_returns_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), BILLING);
    for config in [IndexConfig::plain(), IndexConfig::default()] {
        let index =
            Index::open(&dir.path().join("index"), Some(Arc::new(Buckets)), config).unwrap();
        index.catch_up(&store).unwrap();
        for mode in [Mode::Bm25, Mode::Vector, Mode::Hybrid] {
            assert_eq!(
                found(&index, "quantum chromodynamics", mode),
                [],
                "{mode:?} {config:?}"
            );
        }
        // A query that does match still finds its entry first.
        assert_eq!(ids(&index, "invoice for March", Mode::Hybrid)[0], 3);
    }
}

#[test]
fn every_hit_has_a_score_above_zero_even_on_a_tiny_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), BILLING);
    let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
    index.catch_up(&store).unwrap();
    // "invoice" is in half the documents: FTS5 gives it an IDF of almost nothing.
    let hits = found(&index, "invoice", Mode::Bm25);
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].1, 1.0, "the best BM25 hit scores 1");
    assert!(hits.iter().all(|h| h.1 > 0.1), "{hits:?}");
    let index = Index::open(
        &dir.path().join("vectors.db"),
        Some(Arc::new(Buckets)),
        IndexConfig::default(),
    )
    .unwrap();
    index.catch_up(&store).unwrap();
    let hits = found(&index, "charged invoice", Mode::Hybrid);
    assert!(!hits.is_empty());
    assert!(hits.iter().all(|h| h.1 > 0.0), "{hits:?}");
}
