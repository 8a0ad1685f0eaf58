//! The index's shards, one per tenant (issue 36): each tenant's BM25 statistics are its
//! own, shards load on demand and are evicted under the memory budget with every search
//! still right, a lazy index (a server's) builds only what is asked for and reads kept
//! vectors instead of running the model, an erasure reaches a shard that is not loaded, a
//! tenant's name never escapes the index's folder, and 64 threads searching and writing
//! across tenants under a budget that forces evictions all get what they should.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Duration, Utc};
use memtape_core::erasure::Selector;
use memtape_core::{EntryId, Message, NewEntry, Payload, Scope};
use memtape_search::{EmbedError, Embedder, Index, IndexConfig, Mode, SearchFilter, SearchRequest};
use memtape_store::{EraseMode, EraseRequest, EraseTarget, SqliteStore, Store};

/// Words hashed into 64 buckets, counting the texts it embeds.
#[derive(Default)]
struct Counted(AtomicUsize);

impl Embedder for Counted {
    fn id(&self) -> &str {
        "test-buckets-64"
    }
    fn dim(&self) -> usize {
        64
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.0.fetch_add(texts.len(), Ordering::SeqCst);
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

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::seconds(1_700_000_000 + secs)
}

fn session(tenant: &str) -> Scope {
    Scope::agent(tenant, "bot")
        .unwrap()
        .with_session("s")
        .unwrap()
}

fn say(store: &dyn Store, tenant: &str, text: &str) -> EntryId {
    store
        .append(vec![NewEntry::new(
            session(tenant),
            Payload::Message(Message::user(text)),
            t(0),
        )])
        .unwrap()[0]
        .id
}

fn bm25(index: &Index, store: &dyn Store, tenant: &str, text: &str) -> Vec<(u64, f32)> {
    index
        .search_caught_up(
            store,
            &SearchRequest::new(text, SearchFilter::tenant(tenant))
                .mode(Mode::Bm25)
                .limit(20),
        )
        .unwrap()
        .iter()
        .map(|h| (h.id.0, h.score))
        .collect()
}

fn open(dir: &Path, model: &Arc<Counted>) -> Index {
    Index::open(
        &dir.join("index"),
        Some(model.clone() as Arc<dyn Embedder>),
        IndexConfig::plain(),
    )
    .unwrap()
}

/// BM25's statistics are each tenant's own: what another tenant writes does not move a
/// tenant's scores (ARCHITECTURE.md had noted the leak of a shared index).
#[test]
fn another_tenants_writes_do_not_move_a_tenants_scores() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let model = Arc::new(Counted::default());
    say(&store, "acme", "the kayak is red");
    say(&store, "acme", "a blue canoe on the lake");
    say(&store, "acme", "lunch at noon");
    let index = open(dir.path(), &model);
    index.catch_up(&store).unwrap();
    let before = bm25(&index, &store, "acme", "kayak lake");
    assert_eq!(before.len(), 2);
    for i in 0..200 {
        say(&store, "globex", &format!("kayak kayak lake number {i}"));
    }
    index.catch_up(&store).unwrap();
    assert_eq!(bm25(&index, &store, "acme", "kayak lake"), before);
    assert_eq!(bm25(&index, &store, "globex", "kayak").len(), 20);
    // Each tenant has its own file.
    assert_ne!(index.shard_path("acme"), index.shard_path("globex"));
    assert!(index.shard_path("acme").is_file() && index.shard_path("globex").is_file());
}

/// Under a budget smaller than the tenants, shards are evicted least recently used and
/// load again from their files: every search still finds what it should.
#[test]
fn shards_are_evicted_under_the_budget_and_load_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let model = Arc::new(Counted::default());
    let tenants: Vec<String> = (0..12).map(|i| format!("tenant{i}")).collect();
    for (i, tenant) in tenants.iter().enumerate() {
        for j in 0..40 {
            say(&store, tenant, &format!("note {j} of word{i} in {tenant}"));
        }
    }
    let index = open(dir.path(), &model);
    index.set_max_shards(3);
    index.catch_up(&store).unwrap();
    let stats = index.shard_stats();
    assert!(stats.loaded <= 3, "{stats:?}");
    assert!(stats.evictions >= 9, "{stats:?}");
    for round in 0..2 {
        for (i, tenant) in tenants.iter().enumerate() {
            let hits = bm25(&index, &store, tenant, &format!("word{i}"));
            assert_eq!(hits.len(), 20, "{tenant}, round {round}");
            // Nothing of another tenant.
            assert!(bm25(&index, &store, tenant, "word99").is_empty());
        }
    }
    assert!(index.shard_stats().loaded <= 3);
    // A memory budget evicts as the count does: one shard at most past a tiny budget.
    index.set_max_shards(1024);
    index.set_memory(1);
    for (i, tenant) in tenants.iter().enumerate() {
        assert_eq!(bm25(&index, &store, tenant, &format!("word{i}")).len(), 20);
        assert_eq!(index.shard_stats().loaded, 1, "the shard in use stays");
    }
    // The model embedded each document once: reloaded shards read their files (and the
    // store's kept vectors), never the model.
    let embedded_documents = 12 * 40;
    let queries = model.0.load(Ordering::SeqCst) - embedded_documents;
    assert_eq!(queries, 0, "BM25 searches embed nothing");
}

/// A lazy index (what a server runs) on a tape it has never seen builds nothing ahead:
/// its first search of a tenant loads that tenant's shard alone, from the tape and the
/// vectors the store keeps, without running the model for any document.
#[test]
fn a_lazy_index_builds_only_the_shard_asked_for_from_kept_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let first_model = Arc::new(Counted::default());
    for i in 0..30 {
        say(&store, "acme", &format!("acme note {i} about kayaks"));
        say(&store, "globex", &format!("globex note {i} about canoes"));
    }
    // The first server embedded everything.
    let first = open(dir.path(), &first_model);
    first.catch_up(&store).unwrap();
    assert_eq!(first_model.0.load(Ordering::SeqCst), 60);
    // A server joining, with its own folder.
    let joined_dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Counted::default());
    let joined = open(joined_dir.path(), &model);
    joined.set_lazy(true);
    joined.catch_up(&store).unwrap();
    assert_eq!(joined.shard_stats().loaded, 0, "nothing built ahead");
    assert_eq!(joined.covered(), store.last_id().unwrap());
    let hits = joined
        .search_caught_up(
            &store,
            &SearchRequest::new("kayaks", SearchFilter::tenant("acme")).limit(50),
        )
        .unwrap();
    assert_eq!(hits.len(), 30);
    assert!(hits.iter().all(|h| h.vector.is_some() || h.bm25.is_some()));
    assert_eq!(joined.shard_stats().loaded, 1, "only acme's shard");
    assert!(!joined.shard_path("globex").exists());
    assert_eq!(
        model.0.load(Ordering::SeqCst),
        1,
        "the model embedded the query, no document"
    );
    // Writes of this process bring their tenant in; others' are left to their first
    // search.
    let id = say(&store, "acme", "a fresh kayak note");
    joined.want("acme");
    joined.catch_up(&store).unwrap();
    assert_eq!(joined.shard_status("acme").unwrap().unwrap().covered, id);
    // A tenant with neither entries nor a file is answered empty, and gets no file.
    assert!(bm25(&joined, &store, "nobody", "kayak").is_empty());
    assert!(!joined.shard_path("nobody").exists());
}

/// The index follows the tape a page at a time and makes each page into documents once
/// for every shard it feeds (contexts read once, vectors made once): shards fed so, in
/// pieces, across pages whose sessions run on from page to page, hold what shards rebuilt
/// from the tape tenant by tenant hold: the same scores for every search, context and
/// vectors included, and the model ran once per document.
#[test]
fn shards_fed_page_by_page_hold_what_a_rebuild_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let model = Arc::new(Counted::default());
    // The context field counts in BM25 and in the vectors.
    // Every shard keeps an inverted index too, which follows the pages as the file does.
    let config = IndexConfig {
        embed_context: true,
        inverted_from: 0,
        ..IndexConfig::default()
    };
    assert!(config.context_weight > 0.0);
    let index = Index::open(
        &dir.path().join("index"),
        Some(model.clone() as Arc<dyn Embedder>),
        config,
    )
    .unwrap();
    let tenants = ["acme", "globex", "initech"];
    let mut n = 0;
    for round in 0..3 {
        // More than one page (1,024 entries) per round, sessions interleaved.
        let mut batch = Vec::new();
        for _ in 0..1_100 {
            let tenant = tenants[n % 3];
            let scope = Scope::agent(tenant, "bot")
                .unwrap()
                .with_session(format!("s{}", n % 7))
                .unwrap();
            let text = format!("{tenant} round {round} word{} and word{}", n % 13, n % 17);
            batch.push(NewEntry::new(
                scope,
                Payload::Message(Message::user(text)),
                t(n as i64),
            ));
            n += 1;
        }
        store.append(batch).unwrap();
        index.catch_up(&store).unwrap();
    }
    assert_eq!(
        model.0.load(Ordering::SeqCst),
        n,
        "each document embedded once"
    );
    for tenant in tenants {
        // The inverted index holds the shard's mark once a search reads it (what the
        // catch-ups added waits in the writer until then).
        let request = SearchRequest::new("word3", SearchFilter::tenant(tenant)).mode(Mode::Bm25);
        index.search(&request).unwrap();
        let meta = std::fs::read(
            index
                .shard_path(tenant)
                .with_extension("tantivy")
                .join("meta.json"),
        )
        .unwrap();
        let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
        let mark: serde_json::Value =
            serde_json::from_str(meta["payload"].as_str().unwrap()).unwrap();
        let covered = index.shard_status(tenant).unwrap().unwrap().covered;
        assert_eq!(mark["covered"], covered.0, "{tenant}");
    }
    let rebuilt_dir = tempfile::tempdir().unwrap();
    let rebuilt = Index::rebuild(
        &rebuilt_dir.path().join("index"),
        Some(Arc::new(Counted::default()) as Arc<dyn Embedder>),
        config,
    )
    .unwrap();
    rebuilt.catch_up(&store).unwrap();
    for tenant in tenants {
        for query in ["word3 word5", "round 1 word12", "acme word16"] {
            for mode in [Mode::Bm25, Mode::Vector, Mode::Hybrid] {
                let request = SearchRequest::new(query, SearchFilter::tenant(tenant))
                    .mode(mode)
                    .limit(30);
                let ours = index.search(&request).unwrap();
                let theirs = rebuilt.search(&request).unwrap();
                assert_eq!(ours.len(), 30, "{tenant} {query} {mode:?}");
                let scores = |hits: &[memtape_search::Hit]| -> Vec<(u64, f32)> {
                    hits.iter().map(|h| (h.id.0, h.score)).collect()
                };
                assert_eq!(scores(&ours), scores(&theirs), "{tenant} {query} {mode:?}");
            }
        }
    }
}

/// A search of a cold shard (a tenant this index has not built yet) waits at most the
/// cold wait: past it, it answers from what the shard holds so far and says how far the
/// shard has read; catch-up steps build the shard on, and once built a search sees
/// everything and says nothing.
#[test]
fn a_cold_shards_search_waits_at_most_the_cold_wait_and_the_shard_is_built_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let model = Arc::new(Counted::default());
    let batch: Vec<NewEntry> = (0..3_000)
        .map(|i| {
            NewEntry::new(
                session("acme"),
                Payload::Message(Message::user(format!("note {i} about kayaks"))),
                t(i),
            )
        })
        .collect();
    store.append(batch).unwrap();
    let index = open(dir.path(), &model);
    index.set_lazy(true);
    index.set_vectors_behind(true);
    index.catch_up(&store).unwrap();
    index.set_cold_wait(Some(std::time::Duration::ZERO));
    let request = SearchRequest::new("kayaks", SearchFilter::tenant("acme"))
        .mode(Mode::Bm25)
        .limit(100);
    let (hits, behind) = index.search_fresh(&store, &request).unwrap();
    let behind = behind.expect("a cold shard says it is being built");
    assert!(behind.contains("being built"), "{behind}");
    assert!(hits.len() < 100, "only what the shard held: {}", hits.len());
    assert!(index.is_building());
    // The background steps build it on; each step returns.
    let mut steps = 0;
    while index.is_building() {
        index.catch_up_step(&store).unwrap();
        steps += 1;
        assert!(steps < 1_000, "the build ends");
    }
    let (hits, behind) = index.search_fresh(&store, &request).unwrap();
    assert_eq!(behind, None);
    assert_eq!(hits.len(), 100);
    assert_eq!(
        index.shard_status("acme").unwrap().unwrap().documents,
        3_000
    );
    // Without a bound (a CLI's index), a search waits for the whole catch-up.
    index.set_cold_wait(None);
    store
        .append(vec![NewEntry::new(
            session("acme"),
            Payload::Message(Message::user("a last kayak")),
            t(4_000),
        )])
        .unwrap();
    let (hits, behind) = index
        .search_fresh(
            &store,
            &SearchRequest::new("last", SearchFilter::tenant("acme")).mode(Mode::Bm25),
        )
        .unwrap();
    assert_eq!((hits.len(), behind), (1, None));
}

/// An erasure's receipt reaches a tenant's shard file even when the shard is not loaded
/// (a lazy index): no byte of the erased text is left in any file.
#[test]
fn an_erasure_reaches_a_shard_that_is_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let model = Arc::new(Counted::default());
    say(&store, "acme", "my secret is xylophone quartz");
    say(&store, "acme", "an ordinary note");
    let index = open(dir.path(), &model);
    index.set_lazy(true);
    index.catch_up(&store).unwrap();
    // Built by a search, then evicted by a budget of one shard.
    assert_eq!(bm25(&index, &store, "acme", "xylophone").len(), 1);
    index.set_max_shards(1);
    say(&store, "globex", "other words");
    assert_eq!(bm25(&index, &store, "globex", "words").len(), 1);
    assert_eq!(index.shard_stats().loaded, 1);
    store
        .erase(&EraseRequest {
            target: EraseTarget::Within(Scope::agent("acme", "bot").unwrap()),
            mode: EraseMode::Text("xylophone quartz".into()),
            receipt_scope: Scope::agent("acme", "bot").unwrap(),
            selector: Selector::Text,
            by: "cli".into(),
            reason: String::new(),
            at: t(1),
            dry_run: false,
        })
        .unwrap();
    index.catch_up(&store).unwrap();
    index.truncate_wal().unwrap();
    let mut found = Vec::new();
    scan(
        &dir.path().join("index"),
        &["xylophon", "quartz"],
        &mut found,
    );
    assert_eq!(found, Vec::<String>::new());
    assert!(bm25(&index, &store, "acme", "ordinary").len() == 1);
}

fn scan(dir: &Path, needles: &[&str], found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            scan(&path, needles, found);
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        for n in needles {
            if bytes.windows(n.len()).any(|w| w == n.as_bytes()) {
                found.push(format!("{} holds {n}", path.display()));
            }
        }
    }
}

/// Any tenant name makes a fixed-length file name inside the index's folder.
#[test]
fn a_tenants_name_never_leaves_the_index_folder() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Counted::default());
    let index = open(dir.path(), &model);
    let root = dir.path().join("index");
    let long = "x".repeat(4000);
    let mut names = std::collections::HashSet::new();
    for tenant in ["../../etc", "/abs", "a\0b", "Acme", "acme", "é", &long, "."] {
        let path = index.shard_path(tenant);
        assert!(path.starts_with(&root), "{tenant:?}: {}", path.display());
        let relative = path.strip_prefix(&root).unwrap();
        assert_eq!(relative.components().count(), 2, "{tenant:?}");
        assert_eq!(
            relative.to_string_lossy().len(),
            2 + 1 + 32 + 3,
            "{tenant:?}"
        );
        assert!(names.insert(path), "{tenant:?} shares a file");
    }
}

/// 64 threads at once, each writing and searching its own word in one of 8 tenants, on
/// an index allowed 2 shards: shards load, are evicted and load again under them, and
/// every search finds its writer's entries and nothing of another tenant.
#[test]
fn sixty_four_threads_write_and_search_across_tenants_under_evictions() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::create(dir.path()).unwrap());
    let model = Arc::new(Counted::default());
    let index = Arc::new(open(dir.path(), &model));
    index.set_max_shards(2);
    sixty_four_writers(&index, &store, false);
    assert!(
        index.shard_stats().loaded <= 2 + 64,
        "{:?}",
        index.shard_stats()
    );
}

/// The same 64 threads on an index whose memory budget holds no shard: every load makes
/// its room before its documents come in, evicting every other shard not in use, and
/// every search still finds its writer's entries and nothing of another tenant.
#[test]
fn sixty_four_threads_write_and_search_when_every_load_must_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::create(dir.path()).unwrap());
    let model = Arc::new(Counted::default());
    let index = Arc::new(open(dir.path(), &model));
    index.set_memory(1);
    sixty_four_writers(&index, &store, false);
    let stats = index.shard_stats();
    assert!(stats.evictions > 0, "{stats:?}");
}

/// The same 64 threads with every shard keeping an inverted index and an approximate
/// graph (thresholds at their least) and evictions reloading them: every BM25 search finds
/// exactly its thread's words, and every vector search answers with its own tenant's
/// entries only.
#[test]
fn sixty_four_threads_across_inverted_indexes_and_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::create(dir.path()).unwrap());
    let model = Arc::new(Counted::default());
    let index = Arc::new(
        Index::open(
            &dir.path().join("index"),
            Some(model.clone() as Arc<dyn Embedder>),
            IndexConfig {
                inverted_from: 0,
                ann_min: 1,
                ..IndexConfig::plain()
            },
        )
        .unwrap(),
    );
    index.set_max_shards(4);
    sixty_four_writers(&index, &store, true);
    let stats = index.shard_stats();
    assert!(stats.graph_searches > 0, "{stats:?}");
    assert_eq!(stats.graph_refused, 0, "{stats:?}");
    for t in 0..8 {
        let tenant = format!("t{t}");
        assert_eq!(bm25(&index, &*store, &tenant, "round").len(), 20);
        let inverted = index.shard_path(&tenant).with_extension("tantivy");
        assert!(
            inverted.join("meta.json").exists(),
            "{tenant} has its inverted index"
        );
    }
}

/// 64 threads over 8 tenants of a lazy `index`, each writing its own word three times and
/// searching it after each write: BM25 finds exactly its writes and no other tenant finds
/// them; with `vectors`, a vector search answers with the writer's tenant's entries only.
/// Evictions must have happened.
fn sixty_four_writers(index: &Arc<Index>, store: &Arc<SqliteStore>, vectors: bool) {
    index.set_lazy(true);
    index.catch_up(&**store).unwrap();
    let threads: Vec<_> = (0..64)
        .map(|i| {
            let (store, index) = (store.clone(), index.clone());
            std::thread::spawn(move || {
                let tenant = format!("t{}", i % 8);
                let word = format!("zq{i}word");
                for round in 0..3 {
                    say(&*store, &tenant, &format!("{word} round {round}"));
                    let hits = bm25(&index, &*store, &tenant, &word);
                    assert_eq!(hits.len(), round + 1, "thread {i} round {round}");
                    for other in 0..8 {
                        if other != i % 8 {
                            assert!(bm25(&index, &*store, &format!("t{other}"), &word).is_empty());
                        }
                    }
                    if !vectors {
                        continue;
                    }
                    let found = index
                        .search_caught_up(
                            &*store,
                            &SearchRequest::new(word.as_str(), SearchFilter::tenant(&tenant))
                                .mode(Mode::Vector)
                                .limit(20),
                        )
                        .unwrap();
                    assert!(!found.is_empty(), "thread {i} round {round}");
                    for hit in found {
                        assert!(store.get(&tenant, hit.id).unwrap().is_some(), "{tenant}");
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(index.shard_stats().evictions > 0);
}
