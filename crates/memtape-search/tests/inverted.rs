//! The inverted index of large shards (tantivy, issue 36): a shard above the threshold
//! ranks BM25 as a shard below it does (its candidates rescored by the same BM25F), the
//! index beside the shard is repaired when it is behind, ahead of or broken, two indexes
//! on one folder keep it in step one at a time, a writer kept counts against the memory
//! budget, and hostile text (NUL bytes, huge words, CJK) does not break it. Erasure is tested in `erase.rs`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};
use memtape_core::{Message, NewEntry, Payload, Scope};
use memtape_search::{Index, IndexConfig, Mode, SearchFilter, SearchRequest};
use memtape_store::{SqliteStore, Store};

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::seconds(1_700_000_000 + secs)
}

fn session(n: usize) -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user(format!("u{}", n % 3))
        .unwrap()
        .with_session(format!("s{n}"))
        .unwrap()
}

/// Words no stemmer changes (consonant-vowel syllables ending in a vowel other than e).
fn word(rank: usize) -> String {
    const C: &[u8] = b"bdgklmnprtvz";
    const V: &[u8] = b"aiou";
    let mut w = String::new();
    let mut n = rank + 13;
    while n > 0 {
        w.push(C[n % C.len()] as char);
        n /= C.len();
        w.push(V[n % V.len()] as char);
        n /= V.len();
    }
    w
}

/// A word of a Zipf-like vocabulary of 3,000.
fn zipf(rng: &mut fastrand::Rng) -> String {
    let u = rng.f64();
    word(((3000f64).powf(u) as usize).saturating_sub(1))
}

/// Appends `n` messages of 3 to 40 words, in 20-message sessions.
fn fill(store: &SqliteStore, rng: &mut fastrand::Rng, from: usize, n: usize) {
    let entries: Vec<NewEntry> = (from..from + n)
        .map(|i| {
            let len = rng.usize(3..40);
            let text: Vec<String> = (0..len).map(|_| zipf(rng)).collect();
            NewEntry::new(
                session(i / 20),
                Payload::Message(Message::user(text.join(" "))),
                t(i as i64),
            )
        })
        .collect();
    store.append(entries).unwrap();
}

fn config(inverted_from: usize) -> IndexConfig {
    IndexConfig {
        inverted_from,
        ..IndexConfig::default()
    }
}

fn bm25(index: &Index, store: &dyn Store, text: &str) -> Vec<(u64, f32)> {
    index
        .search_caught_up(
            store,
            &SearchRequest::new(text, SearchFilter::tenant("acme"))
                .mode(Mode::Bm25)
                .limit(10),
        )
        .unwrap()
        .iter()
        .map(|h| (h.id.0, h.score))
        .collect()
}

fn ids(hits: &[(u64, f32)]) -> Vec<u64> {
    hits.iter().map(|h| h.0).collect()
}

/// The inverted index's folder of the one shard under `dir`.
fn tantivy_dir(index: &Index) -> PathBuf {
    index.shard_path("acme").with_extension("tantivy")
}

/// The shard state the inverted index's last commit says it holds.
fn payload(dir: &Path) -> serde_json::Value {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    serde_json::from_str(meta["payload"].as_str().unwrap()).unwrap()
}

/// The shard's FTS5 merge settings (`automerge`, `crisismerge`); `None` for the default.
fn fts_merges(index: &Index) -> (Option<i64>, Option<i64>) {
    let conn = rusqlite::Connection::open_with_flags(
        index.shard_path("acme"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let get = |k: &str| {
        conn.query_row("SELECT v FROM fts_config WHERE k = ?1", [k], |r| r.get(0))
            .ok()
    };
    (get("automerge"), get("crisismerge"))
}

fn queries(rng: &mut fastrand::Rng, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let len = rng.usize(1..5);
            (0..len).map(|_| zipf(rng)).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

#[test]
fn a_shard_above_the_threshold_ranks_as_one_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    fill(&store, &mut rng, 0, 3000);
    let fts5 = Index::open(&dir.path().join("fts5"), None, config(usize::MAX)).unwrap();
    let inverted = Index::open(&dir.path().join("inverted"), None, config(1000)).unwrap();
    let mut same = 0;
    let questions = queries(&mut rng, 60);
    for q in &questions {
        let (a, b) = (bm25(&fts5, &store, q), bm25(&inverted, &store, q));
        assert!(!a.is_empty(), "{q}");
        // The same hits with the same scores (a hit's boosts depend on the other hits
        // of the BM25 list, so a candidate missed anywhere in it shows).
        if ids(&a) == ids(&b) && a.iter().zip(&b).all(|(x, y)| (x.1 - y.1).abs() < 1e-4) {
            same += 1;
        }
    }
    // The candidates (1,000 of 3,000 documents) nearly always hold the exact top 100, in
    // a corpus whose commonest words are in nearly every document.
    assert!(same >= 54, "{same} of {} rankings equal", questions.len());
    assert!(tantivy_dir(&inverted).join("meta.json").exists());
    assert!(!tantivy_dir(&fts5).exists());
    assert_eq!(payload(&tantivy_dir(&inverted))["covered"], 3000);
}

#[test]
fn the_inverted_index_is_made_when_the_shard_crosses_the_threshold_and_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let mut rng = fastrand::Rng::with_seed(8);
    fill(&store, &mut rng, 0, 500);
    let index = Index::open(&dir.path().join("index"), None, config(1000)).unwrap();
    let fts5 = Index::open(&dir.path().join("fts5"), None, config(usize::MAX)).unwrap();
    let q = format!("{} {}", word(3), word(40));
    assert_eq!(
        ids(&bm25(&index, &store, &q)),
        ids(&bm25(&fts5, &store, &q))
    );
    assert!(!tantivy_dir(&index).exists());
    assert_eq!(fts_merges(&index), (None, None), "FTS5's defaults below it");
    fill(&store, &mut rng, 500, 700);
    assert_eq!(
        ids(&bm25(&index, &store, &q)),
        ids(&bm25(&fts5, &store, &q))
    );
    assert_eq!(payload(&tantivy_dir(&index))["covered"], 1200);
    // FTS5 now answers only what the inverted index does not: it merges less often.
    assert_eq!(fts_merges(&index), (Some(16), Some(32)));
    // Appends after it are added to it.
    fill(&store, &mut rng, 1200, 30);
    assert_eq!(
        ids(&bm25(&index, &store, &q)),
        ids(&bm25(&fts5, &store, &q))
    );
    assert_eq!(payload(&tantivy_dir(&index))["covered"], 1230);
}

#[test]
fn an_inverted_index_behind_ahead_of_or_broken_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let mut rng = fastrand::Rng::with_seed(9);
    fill(&store, &mut rng, 0, 400);
    let fts5 = Index::open(&dir.path().join("fts5"), None, config(usize::MAX)).unwrap();
    let path = dir.path().join("index");
    let index = Index::open(&path, None, config(0)).unwrap();
    let q = format!("{} {} {}", word(2), word(9), word(30));
    bm25(&index, &store, &q);
    let folder = tantivy_dir(&index);
    let shard = index.shard_path("acme");
    let copy = |from: &Path, to: &Path| {
        let _ = std::fs::remove_dir_all(to);
        std::fs::create_dir_all(to).unwrap();
        for f in std::fs::read_dir(from).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    };
    // A copy of the inverted index and of the shard file as they were at 400 entries.
    let old = dir.path().join("old.tantivy");
    copy(&folder, &old);
    index.truncate_wal().unwrap();
    let old_shard = dir.path().join("old.db");
    std::fs::copy(&shard, &old_shard).unwrap();
    fill(&store, &mut rng, 400, 300);
    let expected = ids(&bm25(&fts5, &store, &q));
    assert_eq!(ids(&bm25(&index, &store, &q)), expected);
    assert_eq!(payload(&folder)["covered"], 700);
    drop(index);

    // Behind (a crash after the shard's commit, before the inverted index's): a new
    // process finds it behind, searches through FTS5, and brings it up to date.
    copy(&old, &folder);
    assert_eq!(payload(&folder)["covered"], 400);
    let index = Index::open(&path, None, config(0)).unwrap();
    assert_eq!(ids(&bm25(&index, &store, &q)), expected);
    assert_eq!(payload(&folder)["covered"], 700);
    drop(index);

    // Ahead (the shard lost its last commits): the shard catches up again and the
    // inverted index ends at its state.
    index_files_removed(&shard);
    std::fs::copy(&old_shard, &shard).unwrap();
    let index = Index::open(&path, None, config(0)).unwrap();
    assert_eq!(ids(&bm25(&index, &store, &q)), expected);
    assert_eq!(payload(&folder)["covered"], 700);
    drop(index);

    // Broken: its meta file is garbage. It is made again from the tape.
    std::fs::write(folder.join("meta.json"), b"\0garbage").unwrap();
    let index = Index::open(&path, None, config(0)).unwrap();
    assert_eq!(ids(&bm25(&index, &store, &q)), expected);
    assert_eq!(payload(&folder)["covered"], 700);
    drop(index);

    // Missing: made again too.
    std::fs::remove_dir_all(&folder).unwrap();
    let index = Index::open(&path, None, config(0)).unwrap();
    assert_eq!(ids(&bm25(&index, &store, &q)), expected);
    assert_eq!(payload(&folder)["covered"], 700);

    // A shard rebuilt from the tape gets a new origin: the inverted index starts over.
    drop(index);
    let index = Index::rebuild(&path, None, config(0)).unwrap();
    assert_eq!(ids(&bm25(&index, &store, &q)), expected);
    let after = payload(&folder);
    assert_eq!(after["covered"], 700);
}

/// Removes a shard file's log and shared-memory files (as a crash that lost them would).
fn index_files_removed(shard: &Path) {
    for suffix in ["-wal", "-shm"] {
        let mut p = shard.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// Catch-ups add to a writer kept open and commit nothing until a search reads the index;
/// the search commits and lets tantivy's lock go, so another index on the folder (another
/// process) syncs next; an index dropped with documents waiting commits them.
#[test]
fn catch_ups_add_without_committing_until_a_search_and_the_lock_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let mut rng = fastrand::Rng::with_seed(11);
    let path = dir.path().join("index");
    let fts5 = Index::open(&dir.path().join("fts5"), None, config(usize::MAX)).unwrap();
    let a = Index::open(&path, None, config(0)).unwrap();
    let inverted = tantivy_dir(&a);
    let q = format!("{} {}", word(2), word(7));
    fill(&store, &mut rng, 0, 100);
    assert_eq!(ids(&bm25(&a, &store, &q)), ids(&bm25(&fts5, &store, &q)));
    assert_eq!(payload(&tantivy_dir(&a))["covered"], 100);
    for round in 1..=5 {
        fill(&store, &mut rng, round * 100, 100);
        a.catch_up(&store).unwrap();
    }
    assert_eq!(
        payload(&tantivy_dir(&a))["covered"],
        100,
        "five catch-ups, no commit"
    );
    // The writer kept counts against the memory budget (tantivy's 32 MB for it), beside a
    // mirror of 600 documents that holds far less.
    const WRITER: u64 = 32 << 20;
    let kept = a.shard_stats().bytes;
    assert!((WRITER..WRITER + (4 << 20)).contains(&kept), "{kept}");
    let expected = ids(&bm25(&fts5, &store, &q));
    assert_eq!(ids(&bm25(&a, &store, &q)), expected);
    assert_eq!(
        payload(&tantivy_dir(&a))["covered"],
        600,
        "the search committed"
    );
    // The lock goes back after the commit, once the writer's merges finish (on a thread
    // of its own): another index on the folder then syncs. Until then its searches use
    // FTS5 and find the same.
    let b = Index::open(&path, None, config(0)).unwrap();
    fill(&store, &mut rng, 600, 100);
    let started = std::time::Instant::now();
    loop {
        assert_eq!(ids(&bm25(&b, &store, &q)), ids(&bm25(&fts5, &store, &q)));
        if payload(&tantivy_dir(&b))["covered"] == 700 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the writer's lock never went back"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // a's writer, let go, has finished its merges (b has the lock): a counts none now.
    let after = a.shard_stats().bytes;
    assert!(after < 4 << 20, "{after}");
    // Dropped with documents waiting: they are committed.
    drop(b);
    fill(&store, &mut rng, 700, 100);
    a.catch_up(&store).unwrap();
    drop(a);
    assert_eq!(payload(&inverted)["covered"], 800);
}

/// A catch-up hands the documents it wrote to the inverted index instead of the index
/// reading their entries again: each one's own words and its context (the message
/// before it) are found through it, as read ones are.
#[test]
fn documents_handed_over_by_a_catch_up_are_found_by_their_text_and_context() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let mut rng = fastrand::Rng::with_seed(12);
    let index = Index::open(&dir.path().join("index"), None, config(0)).unwrap();
    fill(&store, &mut rng, 0, 100);
    index.catch_up(&store).unwrap();
    // Then one message at a time, each with a word of its own, each caught up on its
    // own (the index is in step, so each catch-up hands its document over).
    let scope = session(900);
    let unique = |i: usize| format!("handedword{i}");
    for i in 0..30 {
        let text = format!("{} {}", unique(i), zipf(&mut rng));
        store
            .append(vec![NewEntry::new(
                scope.clone(),
                Payload::Message(Message::user(text)),
                t(1000 + i as i64),
            )])
            .unwrap();
        index.catch_up(&store).unwrap();
    }
    assert_eq!(
        payload(&tantivy_dir(&index))["covered"],
        100,
        "not committed yet"
    );
    let fts5 = Index::open(&dir.path().join("fts5"), None, config(usize::MAX)).unwrap();
    for i in 0..30 {
        let (hits, expected) = (
            bm25(&index, &store, &unique(i)),
            bm25(&fts5, &store, &unique(i)),
        );
        // Its own message first; the next one, whose context it is, second (the session's
        // other neighbours may follow, boosted by these two).
        let own = 101 + i as u64;
        let top: Vec<u64> = ids(&hits).into_iter().take(2).collect();
        if i < 29 {
            assert_eq!(top, [own, own + 1], "{}", unique(i));
        } else {
            assert_eq!(top[0], own, "{}", unique(i));
        }
        // Hit for hit and score for score what FTS5 finds.
        assert_eq!(ids(&hits), ids(&expected), "{}", unique(i));
        assert!(
            hits.iter()
                .zip(&expected)
                .all(|(a, b)| (a.1 - b.1).abs() < 1e-4),
            "{}: {hits:?} against {expected:?}",
            unique(i)
        );
    }
    assert_eq!(payload(&tantivy_dir(&index))["covered"], 130);
}

#[test]
fn two_indexes_on_one_folder_keep_the_inverted_index_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    let mut rng = fastrand::Rng::with_seed(10);
    let path = dir.path().join("index");
    let fts5 = Index::open(&dir.path().join("fts5"), None, config(usize::MAX)).unwrap();
    let a = Index::open(&path, None, config(0)).unwrap();
    let b = Index::open(&path, None, config(0)).unwrap();
    let q = format!("{} {}", word(1), word(12));
    for round in 0..6 {
        fill(&store, &mut rng, round * 50, 50);
        let expected = ids(&bm25(&fts5, &store, &q));
        let (first, second) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        assert_eq!(ids(&bm25(first, &store, &q)), expected, "round {round}");
        assert_eq!(ids(&bm25(second, &store, &q)), expected, "round {round}");
    }
    assert_eq!(payload(&tantivy_dir(&a))["covered"], 300);
    // Both at once, from two threads.
    fill(&store, &mut rng, 300, 200);
    let expected = ids(&bm25(&fts5, &store, &q));
    std::thread::scope(|s| {
        let ta = s.spawn(|| ids(&bm25(&a, &store, &q)));
        let tb = s.spawn(|| ids(&bm25(&b, &store, &q)));
        assert_eq!(ta.join().unwrap(), expected);
        assert_eq!(tb.join().unwrap(), expected);
    });
    assert_eq!(a.last_failure(), None);
    assert_eq!(b.last_failure(), None);
}

#[test]
fn hostile_text_does_not_break_the_inverted_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    // Longer than any word the inverted index keeps, within a query's length limit.
    let huge = "q".repeat(5_000);
    let texts = [
        "nul\0byte inside zorbo".to_owned(),
        format!("{huge} zorbo tail"),
        "東京 タワー に 行きました zorbo".to_owned(),
        "\u{feff}\u{200b}zorbo\u{0301} ÆØÅ ﬁ".to_owned(),
        String::new(),
    ];
    store
        .append(
            texts
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    NewEntry::new(
                        session(0),
                        Payload::Message(Message::user(text.clone())),
                        t(i as i64),
                    )
                })
                .collect(),
        )
        .unwrap();
    let fts5 = Index::open(&dir.path().join("fts5"), None, config(usize::MAX)).unwrap();
    let index = Index::open(&dir.path().join("index"), None, config(0)).unwrap();
    for q in ["zorbo", "tail", "東京", "nul byte", "\0", &huge] {
        let (a, b) = (bm25(&fts5, &store, q), bm25(&index, &store, q));
        let (mut a, mut b) = (ids(&a), ids(&b));
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "{q:.40}");
    }
    assert_eq!(ids(&bm25(&index, &store, "zorbo")).len(), 4);
    assert_eq!(index.last_failure(), None);
    assert_eq!(payload(&tantivy_dir(&index))["covered"], 5);
}
