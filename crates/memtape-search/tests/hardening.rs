//! Regression tests for the index defects of issue 10: a stale index after the tape is
//! replaced, state changed before a commit, concurrent processes on one index file, CJK
//! text, a relevance floor and progress reports. Everything runs on real SQLite files;
//! the concurrency test runs real OS processes (this test binary, re-run as children).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use memtape_core::{EntryId, Message, NewEntry, Payload, Scope};
use memtape_search::{EmbedError, Embedder, Index, IndexConfig, Mode, SearchFilter, SearchRequest};
use memtape_store::{SqliteStore, Store};

/// A deterministic stand-in model: words hashed into 32 buckets.
struct Buckets;

impl Embedder for Buckets {
    fn id(&self) -> &str {
        "test-buckets-32"
    }
    fn dim(&self) -> usize {
        32
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| bucket_vector(t)).collect())
    }
}

fn bucket_vector(text: &str) -> Vec<f32> {
    let mut v = [0.0f32; 32];
    for w in memtape_search::text::terms(text) {
        let h = w
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
        v[(h % 32) as usize] += 1.0;
    }
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
    v.iter().map(|x| x / n).collect()
}

fn t(days: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::days(20_000 + days)
}

fn session(user: &str, name: &str) -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user(user)
        .unwrap()
        .with_session(name)
        .unwrap()
}

fn say(store: &dyn Store, scope: &Scope, text: &str) -> EntryId {
    store
        .append(vec![NewEntry::new(
            scope.clone(),
            Payload::Message(Message::user(text)),
            t(0),
        )])
        .unwrap()[0]
        .id
}

fn bm25(index: &Index, text: &str, filter: SearchFilter) -> Vec<u64> {
    index
        .search(&SearchRequest::new(text, filter).mode(Mode::Bm25).limit(50))
        .unwrap()
        .iter()
        .map(|h| h.id.0)
        .collect()
}

fn remove_store(dir: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.join(format!("{}{suffix}", SqliteStore::FILE_NAME));
        if file.exists() {
            std::fs::remove_file(file).unwrap();
        }
    }
}

#[test]
fn a_replaced_tape_gets_a_fresh_index_not_the_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let index_path = dir.path().join("index");
    let ann = session("ann", "s1");
    {
        let store = SqliteStore::create(dir.path()).unwrap();
        say(&store, &ann, "hello world");
        say(&store, &ann, "the weather is grey");
        let index = Index::open(&index_path, None, IndexConfig::plain()).unwrap();
        index.catch_up(&store).unwrap();
        assert_eq!(bm25(&index, "hello", SearchFilter::tenant("acme")), [1]);
    }
    // The tape file is replaced by a fresh store with other content; the index stays.
    remove_store(dir.path());
    let store = SqliteStore::create(dir.path()).unwrap();
    say(&store, &ann, "my PIN is 4321");
    say(&store, &ann, "a kayak on the lake");
    say(&store, &ann, "an otter swims by");
    let index = Index::open(&index_path, None, IndexConfig::plain()).unwrap();
    index.catch_up(&store).unwrap();
    let all = SearchFilter::tenant("acme");
    assert_eq!(bm25(&index, "PIN", all.clone()), [1]);
    assert!(
        bm25(&index, "hello world", all.clone()).is_empty(),
        "an old document was mapped onto a new entry"
    );
    assert_eq!(
        bm25(&index, "otter", all.clone()),
        [3],
        "new entries are indexed"
    );
    assert_eq!(bm25(&index, "weather", all), Vec::<u64>::new());
}

#[test]
fn a_corrupt_index_file_is_rebuilt_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let ann = session("ann", "s1");
    say(&store, &ann, "a kayak on the lake");
    let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
    let shard = index.shard_path("acme");
    std::fs::create_dir_all(shard.parent().unwrap()).unwrap();
    std::fs::write(&shard, b"this is not a database, just garbage bytes").unwrap();
    index.catch_up(&store).unwrap();
    assert_eq!(bm25(&index, "kayak", SearchFilter::tenant("acme")), [1]);
}

/// Writes a document row straight into the index file, as another process racing this
/// one would, so the next insert of that id fails inside the catch-up transaction.
fn plant_document(index_path: &Path, id: i64) {
    let conn = rusqlite::Connection::open(index_path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    conn.pragma_update(None, "foreign_keys", false).unwrap();
    conn.execute(
        "INSERT INTO docs (id, scope, kind, role, at, vec) VALUES (?1, 999, 'message', 'user', 0, NULL)",
        [id],
    )
    .unwrap();
}

fn unplant_document(index_path: &Path, id: i64) {
    let conn = rusqlite::Connection::open(index_path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    conn.execute("DELETE FROM docs WHERE id = ?1", [id])
        .unwrap();
}

#[test]
fn a_failed_catch_up_batch_files_no_document_under_another_scope() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let index_path = dir.path().join("index");
    let index = Index::open(&index_path, None, IndexConfig::plain()).unwrap();
    let ann = session("ann", "s1");
    let bob = session("bob", "s1");
    // The tenant's shard file, made by indexing a third user's entry first.
    say(&store, &session("cy", "s1"), "cy says hello");
    index.catch_up(&store).unwrap();
    let shard = index.shard_path("acme");
    // Entry 2 opens Ann's scope in the batch; entry 3 (Ann's too) then fails to insert.
    say(&store, &ann, "ann owns a kayak");
    say(&store, &ann, "ann paddles daily");
    plant_document(&shard, 3);
    assert!(
        index.catch_up(&store).is_err(),
        "the planted row makes the batch fail"
    );
    assert_eq!(index.covered(), EntryId(1));
    unplant_document(&shard, 3);
    // Bob's scope comes first in the next batch: it must not get Ann's scope row.
    say(&store, &bob, "bob owns a violin");
    let fresh = Index::open(&index_path, None, IndexConfig::plain()).unwrap();
    // Both the index that saw the failure and a fresh reader of its file agree.
    for index in [&index, &fresh] {
        index.catch_up(&store).unwrap();
        assert!(
            bm25(index, "kayak", SearchFilter::within(&bob)).is_empty(),
            "Ann's document was filed under Bob's scope"
        );
        assert_eq!(bm25(index, "kayak", SearchFilter::within(&ann)), [2]);
        assert_eq!(bm25(index, "violin", SearchFilter::within(&bob)), [4]);
        assert!(bm25(index, "violin", SearchFilter::within(&ann)).is_empty());
    }
}

/// An embedder that fails once on a text containing "poison".
struct FailsOnPoison {
    armed: std::sync::atomic::AtomicBool,
}

impl Embedder for FailsOnPoison {
    fn id(&self) -> &str {
        "test-buckets-32"
    }
    fn dim(&self) -> usize {
        32
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.iter().any(|t| t.contains("poison"))
            && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Err("injected embedding failure".into());
        }
        Buckets.embed(texts)
    }
}

#[test]
fn a_failed_catch_up_is_recorded_and_the_next_one_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let embedder = Arc::new(FailsOnPoison { armed: true.into() });
    let index = Index::open(
        &dir.path().join("index"),
        Some(embedder),
        IndexConfig::plain(),
    )
    .unwrap();
    let ann = session("ann", "s1");
    say(&store, &ann, "ann owns a kayak");
    say(&store, &ann, "poison ivy by the lake");
    assert!(index.last_failure().is_none());
    assert!(index.catch_up(&store).is_err());
    let failure = index.last_failure().unwrap();
    assert!(failure.contains("injected embedding failure"), "{failure}");
    assert_eq!(index.catch_up(&store).unwrap(), 2);
    assert_eq!(bm25(&index, "ivy", SearchFilter::tenant("acme")), [2]);
}

/// A hybrid search embeds its query on the caller's thread while FTS5 runs on another:
/// when the embedding fails, the search fails with the model's error (no hang, no partial
/// answer), and the next search is whole again.
#[test]
fn a_failed_query_embedding_fails_that_hybrid_search_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let embedder = Arc::new(FailsOnPoison {
        armed: false.into(),
    });
    let index = Index::open(
        &dir.path().join("index"),
        Some(embedder.clone()),
        IndexConfig::plain(),
    )
    .unwrap();
    let ann = session("ann", "s1");
    say(&store, &ann, "ann owns a kayak");
    say(&store, &ann, "the lake is calm");
    index.catch_up(&store).unwrap();
    embedder
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let hybrid = |text: &str| {
        index.search(
            &SearchRequest::new(text, SearchFilter::tenant("acme"))
                .mode(Mode::Hybrid)
                .limit(5),
        )
    };
    let err = hybrid("poison kayak").unwrap_err();
    assert!(
        err.to_string().contains("injected embedding failure"),
        "{err}"
    );
    let hits = hybrid("poison kayak").unwrap();
    assert_eq!(hits[0].id.0, 1);
    assert!(hits[0].bm25.is_some() && hits[0].vector.is_some());
}

/// The child side of the concurrency test: appends, catches up and searches in a loop,
/// reindexing now and then; exits non-zero on the first failed search.
fn child(dir: &Path, who: &str, rounds: usize, reindex: bool) {
    let store = SqliteStore::create(dir).unwrap();
    let path = dir.join("index");
    let scope = session(who, "s1");
    let mut failures = Vec::new();
    for round in 0..rounds {
        let word = format!("{who}word{round}");
        say(&store, &scope, &format!("note {word} here"));
        let index = if reindex && round % 3 == 2 {
            Index::rebuild(&path, Some(Arc::new(Buckets)), IndexConfig::plain())
        } else {
            Index::open(&path, Some(Arc::new(Buckets)), IndexConfig::plain())
        };
        let result = index.and_then(|index| {
            index.catch_up(&store)?;
            let hits = index.search(
                &SearchRequest::new(&word, SearchFilter::within(&scope)).mode(Mode::Bm25),
            )?;
            Ok(hits.iter().map(|h| h.id.0).collect::<Vec<_>>())
        });
        match result {
            Ok(hits) if hits.len() == 1 => {}
            Ok(hits) => failures.push(format!("round {round}: {word} found {hits:?}")),
            Err(e) => failures.push(format!("round {round}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{who}: {failures:#?}");
}

#[test]
fn concurrent_processes_catching_up_and_reindexing_never_fail_a_search() {
    if let Ok(dir) = std::env::var("MEMTAPE_TEST_CHILD_DIR") {
        let who = std::env::var("MEMTAPE_TEST_CHILD_WHO").unwrap();
        let reindex = std::env::var("MEMTAPE_TEST_CHILD_REINDEX").is_ok();
        child(Path::new(&dir), &who, 12, reindex);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    SqliteStore::create(dir.path()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["p0", "p1", "p2", "p3", "p4"]
        .iter()
        .enumerate()
        .map(|(i, who)| {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "--exact",
                "concurrent_processes_catching_up_and_reindexing_never_fail_a_search",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MEMTAPE_TEST_CHILD_DIR", dir.path())
            .env("MEMTAPE_TEST_CHILD_WHO", who)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
            if i == 0 {
                cmd.env("MEMTAPE_TEST_CHILD_REINDEX", "1");
            }
            (who, cmd.spawn().unwrap())
        })
        .collect();
    let mut failed = Vec::new();
    for (who, child) in children {
        let out = child.wait_with_output().unwrap();
        if !out.status.success() {
            failed.push(format!(
                "{who}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // Every note of every process is found afterwards, once.
    let store = SqliteStore::open(dir.path()).unwrap();
    let index = Index::open(
        &dir.path().join("index"),
        Some(Arc::new(Buckets)),
        IndexConfig::plain(),
    )
    .unwrap();
    index.catch_up(&store).unwrap();
    assert_eq!(bm25(&index, "note", SearchFilter::tenant("acme")).len(), 50);
    // The search loaded the tenant's shard: it holds every document.
    assert_eq!(index.len(), 60);
}

#[test]
fn catch_up_and_rebuild_report_progress_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let s = session("ann", "long");
    let batch: Vec<NewEntry> = (0..1000)
        .map(|i| {
            NewEntry::new(
                s.clone(),
                Payload::Message(Message::user(format!("note {i}"))),
                t(0),
            )
        })
        .collect();
    store.append(batch).unwrap();
    let path = dir.path().join("index");
    let index = Index::open(&path, None, IndexConfig::plain()).unwrap();
    let mut seen = Vec::new();
    assert_eq!(
        index
            .catch_up_with(&store, &mut |done, total| seen.push((done, total)))
            .unwrap(),
        1000
    );
    assert!(seen.len() > 1, "one report per batch: {seen:?}");
    assert!(
        seen.windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[1].0 <= w[1].1)
    );
    assert_eq!(seen.last(), Some(&(1000, 1000)));

    let mut seen = Vec::new();
    let (rebuilt, added) = Index::rebuild_from(
        &path,
        &store,
        None,
        IndexConfig::plain(),
        &mut |done, total| seen.push((done, total)),
    )
    .unwrap();
    assert_eq!((added, rebuilt.len()), (1000, 1000));
    assert_eq!(seen.last(), Some(&(1000, 1000)));
}

#[test]
fn an_index_from_before_the_tape_binding_is_rebuilt_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    let ann = session("ann", "s1");
    say(&store, &ann, "a kayak on the lake");
    let dir_path = dir.path().join("index");
    let first = Index::open(&dir_path, None, IndexConfig::plain()).unwrap();
    first.catch_up(&store).unwrap();
    let path = first.shard_path("acme");
    drop(first);
    // Mark the file as format 2, the format before the binding (and the CJK column).
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 2).unwrap();
    drop(conn);
    say(&store, &ann, "an otter swims by");
    let index = Index::open(&dir_path, None, IndexConfig::plain()).unwrap();
    index.catch_up(&store).unwrap();
    assert_eq!(bm25(&index, "kayak", SearchFilter::tenant("acme")), [1]);
    assert_eq!(bm25(&index, "otter", SearchFilter::tenant("acme")), [2]);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(
        version, 8,
        "rebuilt in the current format (8: one tenant's shard)"
    );
}
