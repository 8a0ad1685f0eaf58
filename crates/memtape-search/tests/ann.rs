//! The approximate nearest-neighbour graph of large shards, on real files: its results
//! against an exact scan (recall, and the same scores for the same entries), filters, the
//! graph file read again after a reopen, extended after appends, built again after it is
//! truncated or corrupted, and gone (with every byte of an erased vector) after an erasure.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use memtape_core::erasure::Selector;
use memtape_core::{EntryId, Message, NewEntry, Payload, Scope};
use memtape_search::{EmbedError, Embedder, Index, IndexConfig, Mode, SearchFilter, SearchRequest};
use memtape_store::{EraseMode, EraseRequest, EraseTarget, SqliteStore, Store};

/// More dimensions than a graph links (64): every graph here is on principal axes.
const DIM: usize = 96;
const CLUSTERS: u64 = 200;
const SESSIONS: usize = 40;
const SECRET: &str = "secret 4111-1111";

/// Texts "c<cluster> n<i>" become a point near their cluster's centre: clustered data, as
/// real embeddings are. The secret text becomes a vector of a pattern no other has.
struct Clusters;

fn gaussian_ish(rng: &mut fastrand::Rng) -> f32 {
    (0..4).map(|_| rng.f32()).sum::<f32>() - 2.0
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
    v.into_iter().map(|x| x / n).collect()
}

/// The secret's vector: a fixed pattern of distinct magnitudes.
fn secret_vector() -> Vec<f32> {
    unit((0..DIM).map(|i| ((i * 37) % 61) as f32 - 30.5).collect())
}

fn vector_of(text: &str) -> Vec<f32> {
    if text == SECRET {
        return secret_vector();
    }
    clustered(text, DIM)
}

fn clustered(text: &str, dim: usize) -> Vec<f32> {
    let mut parts = text.split(' ');
    let num = |p: Option<&str>| p.and_then(|w| w[1..].parse::<u64>().ok()).unwrap_or(0);
    let (cluster, n) = (num(parts.next()), num(parts.next()));
    let mut centre = fastrand::Rng::with_seed(cluster);
    let mut noise = fastrand::Rng::with_seed(1_000_000 + n);
    unit(
        (0..dim)
            .map(|_| gaussian_ish(&mut centre) + 0.6 * gaussian_ish(&mut noise))
            .collect(),
    )
}

impl Embedder for Clusters {
    fn id(&self) -> &str {
        "test-clusters-96"
    }
    fn dim(&self) -> usize {
        DIM
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| vector_of(t)).collect())
    }
}

fn session(n: usize) -> Scope {
    Scope::agent("acme", "bot")
        .unwrap()
        .with_user("ann")
        .unwrap()
        .with_session(format!("s{n}"))
        .unwrap()
}

fn at(i: usize) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::days(20_000) + Duration::seconds(i as i64)
}

/// Appends messages `from..to`, each in session `i % SESSIONS`.
fn append(store: &SqliteStore, from: usize, to: usize) {
    let mut rng = fastrand::Rng::with_seed(from as u64);
    for start in (from..to).step_by(1000) {
        let batch = (start..to.min(start + 1000))
            .map(|i| {
                let text = format!("c{} n{i}", rng.u64(0..CLUSTERS));
                NewEntry::new(
                    session(i % SESSIONS),
                    Payload::Message(Message::user(text)),
                    at(i),
                )
            })
            .collect();
        store.append(batch).unwrap();
    }
}

/// The tests below run twice: on a graph with its vectors in memory, and with `lists` on
/// inverted lists with the vectors (all but the newest few hundred) on disk.
fn config(lists: bool) -> IndexConfig {
    IndexConfig {
        ann_min: 1_000,
        ann_background: false,
        ann_lists: lists,
        vectors_on_disk: if lists { 500 } else { usize::MAX },
        // The rows after the graph are few here; a scan of them is exact.
        ..IndexConfig::plain()
    }
}

fn open(dir: &Path, lists: bool) -> Index {
    Index::open(&dir.join("index"), Some(Arc::new(Clusters)), config(lists)).unwrap()
}

fn graph_file(index: &Index) -> PathBuf {
    index.shard_path("acme").with_extension("ann")
}

/// A query near cluster `i % CLUSTERS`, as a text the embedder reads.
fn query(i: u64) -> String {
    format!("c{} n{}", i % CLUSTERS, 9_000_000 + i)
}

fn vector_search(
    index: &Index,
    text: &str,
    filter: SearchFilter,
    exact: bool,
) -> Vec<(EntryId, f32)> {
    let request = SearchRequest {
        exact,
        ..SearchRequest::new(text, filter)
            .mode(Mode::Vector)
            .limit(10)
    };
    index
        .search(&request)
        .unwrap()
        .iter()
        .map(|h| (h.id, h.score))
        .collect()
}

/// The mean share of the exact top 10 the index's search returns, over `queries`
/// queries; every entry both return has the same score in both.
fn recall(index: &Index, queries: u64, filter: &SearchFilter) -> f64 {
    let mut found = 0.0;
    for i in 0..queries {
        let q = query(i);
        let exact = vector_search(index, &q, filter.clone(), true);
        let got = vector_search(index, &q, filter.clone(), false);
        assert_eq!(exact.len(), 10);
        for (id, score) in &got {
            if let Some((_, s)) = exact.iter().find(|(e, _)| e == id) {
                assert_eq!(score, s, "the same entry scores the same");
            }
        }
        let exact: HashSet<EntryId> = exact.iter().map(|(id, _)| *id).collect();
        found += got.iter().filter(|(id, _)| exact.contains(id)).count() as f64 / 10.0;
    }
    found / queries as f64
}

struct Fixture {
    dir: tempfile::TempDir,
    store: SqliteStore,
}

fn fixture(n: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
    append(&store, 0, n);
    Fixture { dir, store }
}

fn identity(path: &Path) -> (u64, std::time::SystemTime) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    (m.ino(), m.modified().unwrap())
}

fn the_graph_finds_what_an_exact_scan_finds_with_the_same_scores(lists: bool) {
    let f = fixture(20_000);
    let index = open(f.dir.path(), lists);
    index.catch_up(&f.store).unwrap();
    let tenant = SearchFilter::tenant("acme");
    let r = recall(&index, 60, &tenant);
    assert!(r >= 0.95, "recall@10 {r}");
    assert!(
        graph_file(&index).exists(),
        "the graph is saved beside the shard"
    );
    // A filter admitting a quarter of the shard still goes through the graph, and finds
    // only what it admits.
    let quarter = SearchFilter {
        since: Some(at(15_000)),
        ..SearchFilter::tenant("acme")
    };
    let r = recall(&index, 30, &quarter);
    assert!(r >= 0.9, "recall@10 with a filter {r}");
    // A selective filter (one session in 40) scans its rows: exactly the exact results.
    let one = SearchFilter {
        session: Some("s3".into()),
        ..SearchFilter::tenant("acme")
    };
    for i in 0..10 {
        let q = query(i);
        assert_eq!(
            vector_search(&index, &q, one.clone(), false),
            vector_search(&index, &q, one.clone(), true)
        );
    }
    // The rows the lists cover keep no one-bit codes, so even this filter's search goes
    // through the lists (scanned whole, with the filter); a graph leaves it to the scan.
    let before = index.shard_stats().graph_searches;
    vector_search(&index, &query(0), one, false);
    assert_eq!(
        index.shard_stats().graph_searches - before,
        u64::from(lists)
    );
}

/// 64 threads searching one graph at once (more than usearch has thread contexts) each
/// get what one search alone gets, while the graph is extended beside them.
fn sixty_four_threads_search_one_graph_while_it_grows(lists: bool) {
    let f = fixture(12_000);
    let index = Arc::new(open(f.dir.path(), lists));
    index.catch_up(&f.store).unwrap();
    let tenant = SearchFilter::tenant("acme");
    let alone: Vec<_> = (0..64)
        .map(|i| vector_search(&index, &query(i), tenant.clone(), false))
        .collect();
    assert!(alone.iter().all(|hits| hits.len() == 10));
    let alone = Arc::new(alone);
    std::thread::scope(|s| {
        for t in 0..64u64 {
            let (index, alone, tenant) = (index.clone(), alone.clone(), tenant.clone());
            s.spawn(move || {
                for round in 0..5 {
                    let q = (t + round) % 64;
                    let got = vector_search(&index, &query(q), tenant.clone(), false);
                    // Rows appended meanwhile may enter the top 10: the earlier hits that
                    // stay keep their scores, and there are 10.
                    assert_eq!(got.len(), 10, "thread {t} round {round}");
                    let kept = got.iter().filter(|h| alone[q as usize].contains(h)).count();
                    assert!(
                        kept >= 5,
                        "thread {t} query {q}: {got:?} against {:?}",
                        alone[q as usize]
                    );
                }
            });
        }
        // The graph grows beside the searches.
        append(&f.store, 12_000, 14_000);
        index.catch_up(&f.store).unwrap();
    });
    let stats = index.shard_stats();
    assert!(stats.graph_searches >= 64 * 6, "{stats:?}");
    assert_eq!(
        stats.graph_refused, 0,
        "every search had its turn on the graph"
    );
}

fn a_saved_graph_is_read_again_after_a_reopen_and_extended_after_appends(lists: bool) {
    let f = fixture(12_000);
    let path = {
        let index = open(f.dir.path(), lists);
        index.catch_up(&f.store).unwrap();
        graph_file(&index)
    };
    let saved = identity(&path);
    // Reopened with nothing new: the graph is read from its file, which stays as it was
    // (a graph built again would be written again), and searches through it.
    let index = open(f.dir.path(), lists);
    index.catch_up(&f.store).unwrap();
    let tenant = SearchFilter::tenant("acme");
    assert!(recall(&index, 30, &tenant) >= 0.95);
    assert_eq!(identity(&path), saved, "the graph file is reused as it is");
    // Appends: the graph takes the new rows (and is saved again once it grew by an
    // eighth); every search sees them, through the graph or the scan of the rows after it.
    append(&f.store, 12_000, 14_000);
    index.catch_up(&f.store).unwrap();
    assert_ne!(identity(&path), saved, "the grown graph is saved");
    assert!(recall(&index, 30, &tenant) >= 0.95);
    let newest = SearchFilter {
        since: Some(at(12_000)),
        ..SearchFilter::tenant("acme")
    };
    for i in 0..5 {
        let q = query(i);
        let got = vector_search(&index, &q, newest.clone(), false);
        assert_eq!(got.len(), 10);
        assert_eq!(got, vector_search(&index, &q, newest.clone(), true));
    }
}

fn a_truncated_or_corrupt_graph_file_is_built_again(lists: bool) {
    let f = fixture(8_000);
    let path = {
        let index = open(f.dir.path(), lists);
        index.catch_up(&f.store).unwrap();
        graph_file(&index)
    };
    let tenant = SearchFilter::tenant("acme");
    let whole = std::fs::read(&path).unwrap();
    // Cut in half, then one byte flipped in the middle of the graph.
    let mut flipped = whole.clone();
    flipped[whole.len() / 3] ^= 0x5a;
    for broken in [whole[..whole.len() / 2].to_vec(), flipped] {
        std::fs::write(&path, &broken).unwrap();
        let index = open(f.dir.path(), lists);
        index.catch_up(&f.store).unwrap();
        assert!(recall(&index, 20, &tenant) >= 0.95);
        let now = std::fs::read(&path).unwrap();
        assert_ne!(now, broken, "the broken file is replaced");
        // Two builds link the rows differently (threads add at once), so the stamp says
        // that it covers every row.
        let stamp = br#""rows":8000,"#;
        assert!(
            now.windows(stamp.len()).any(|w| w == stamp),
            "by a whole graph of the same rows"
        );
        assert!(now.len().abs_diff(whole.len()) < whole.len() / 50);
    }
}

/// The bytes the graph stores for `v`: its 8-bit form (the mirror's, 127 for the largest
/// magnitude).
fn stored_bytes(v: &[f32]) -> Vec<u8> {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    v.iter()
        .map(|x| ((x / (max / 127.0)).round() as i8).to_le_bytes()[0])
        .collect()
}

/// The frame the graph file at `path` links its vectors in: its centre and principal
/// axes (read from its trailer's stamp: the JSON before the last 24 bytes, whose first
/// four give its length).
fn graph_frame(path: &Path) -> (Vec<f32>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let tail = &bytes[bytes.len() - 24..];
    let json_len = u32::from_le_bytes(tail[..4].try_into().unwrap()) as usize;
    let json = &bytes[bytes.len() - 24 - json_len..bytes.len() - 24];
    let stamp: serde_json::Value = serde_json::from_slice(json).unwrap();
    let floats = |key: &str| -> Vec<f32> {
        stamp[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    (floats("center"), floats("axes"))
}

/// The bytes the graph links for `v` in the frame `(center, axes)`: the mirror's 8-bit
/// vector, read back as the graph's builder reads it, less the centre, projected on the
/// axes, in 8 bits again.
fn linked_bytes(v: &[f32], (center, axes): &(Vec<f32>, Vec<f32>)) -> Vec<u8> {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let scale = max / 127.0;
    let centred: Vec<f32> = v
        .iter()
        .zip(center)
        .map(|(x, c)| f32::from((x / scale).round().clamp(-127.0, 127.0) as i8) * scale - c)
        .collect();
    assert_eq!(axes.len(), 64 * DIM, "the graph links 64 principal axes");
    let projected: Vec<f32> = axes
        .chunks_exact(DIM)
        .map(|axis| axis.iter().zip(&centred).map(|(a, x)| a * x).sum())
        .collect();
    stored_bytes(&projected)
}

/// The bytes the graph file (or with `lists`, the lists' file) at `path` holds for the
/// secret's vector.
fn secret_bytes(path: &Path, lists: bool) -> Vec<u8> {
    let linked = linked_bytes(&secret_vector(), &graph_frame(path));
    if lists {
        listed_bytes(&linked, path)
    } else {
        linked
    }
}

/// The bytes the inverted lists at `path` hold for the 8-bit code `linked`: its unit
/// vector in 4-bit steps, axis `i` in the low half of byte `i` and axis `32 + i` in the
/// high half, each as steps plus 8. The axes' steps are read from the file (after its
/// format word, dims, list count and rows, and the centroids).
fn listed_bytes(linked: &[u8], path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (dims, count) = (word(8), word(16));
    let steps: Vec<f32> = bytes[32 + count * dims * 4..32 + (count + 1) * dims * 4]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let code: Vec<i8> = linked.iter().map(|b| i8::from_le_bytes([*b])).collect();
    let sq: i32 = code.iter().map(|v| i32::from(*v) * i32::from(*v)).sum();
    let inv = 1.0 / (sq as f32).sqrt();
    let nibble = |axis: usize| {
        let n = (f32::from(code[axis]) * inv / steps[axis])
            .round()
            .clamp(-7.0, 7.0);
        (n as i8 + 8) as u8
    };
    let half = dims / 2;
    (0..half)
        .map(|i| nibble(i) | (nibble(half + i) << 4))
        .collect()
}

fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_holding(&path, needle));
        } else if std::fs::read(&path)
            .unwrap()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            out.push(path.display().to_string());
        }
    }
    out
}

/// The files this process has open that were unlinked (a shard's vectors on disk are kept
/// in such a private file) and whose directory is `dir`, read through `/proc`, that hold
/// `needle`.
fn private_files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let fd = entry.unwrap().path();
        let Ok(target) = std::fs::read_link(&fd) else {
            continue;
        };
        let target = target.display().to_string();
        if !target.starts_with(&dir.display().to_string()) || !target.ends_with(" (deleted)") {
            continue;
        }
        if std::fs::read(&fd)
            .unwrap_or_default()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            out.push(target);
        }
    }
    out
}

fn an_erased_vector_leaves_the_graph_file(lists: bool) {
    let f = fixture(6_000);
    let secret = f
        .store
        .append(vec![NewEntry::new(
            session(1),
            Payload::Message(Message::user(SECRET)),
            at(6_000),
        )])
        .unwrap()[0]
        .id;
    append(&f.store, 6_001, 7_000);
    let index = open(f.dir.path(), lists);
    index.catch_up(&f.store).unwrap();
    let needle = stored_bytes(&secret_vector());
    let path = graph_file(&index);
    let linked = secret_bytes(&path, lists);
    let index_dir = f.dir.path().join("index");
    assert!(
        files_holding(&index_dir, &linked).contains(&path.display().to_string()),
        "the graph holds the vector's bytes (so the scan below can see them)"
    );
    assert!(
        !files_holding(&index_dir, &needle).is_empty(),
        "the shard file holds the mirror's bytes"
    );
    assert_eq!(
        private_files_holding(&index_dir, &needle).len(),
        usize::from(lists),
        "with the lists, the vectors on disk hold the vector's bytes"
    );
    let tenant = SearchFilter::tenant("acme");
    let hits = vector_search(&index, SECRET, tenant.clone(), false);
    assert_eq!(hits[0].0, secret);
    f.store
        .erase(&EraseRequest {
            target: EraseTarget::Entries {
                within: session(1),
                ids: vec![secret],
            },
            mode: EraseMode::Whole,
            receipt_scope: session(1),
            selector: Selector::Text,
            by: "test".into(),
            reason: String::new(),
            at: at(7_000),
            dry_run: false,
        })
        .unwrap();
    index.catch_up(&f.store).unwrap();
    assert!(
        files_holding(&index_dir, &needle).is_empty()
            && files_holding(&index_dir, &linked).is_empty(),
        "no file of the index holds the erased vector"
    );
    assert!(
        private_files_holding(&index_dir, &needle).is_empty(),
        "no private file of the process holds it either"
    );
    assert!(path.exists(), "the graph is built again without it");
    let hits = vector_search(&index, SECRET, tenant.clone(), false);
    assert!(hits.iter().all(|(id, _)| *id != secret));
    assert!(recall(&index, 20, &tenant) >= 0.95);
}

fn two_processes_share_the_graph_file_and_an_erasure_reaches_both(lists: bool) {
    let f = fixture(5_000);
    let secret = f
        .store
        .append(vec![NewEntry::new(
            session(2),
            Payload::Message(Message::user(SECRET)),
            at(5_000),
        )])
        .unwrap()[0]
        .id;
    append(&f.store, 5_001, 6_000);
    // Two indexes on one folder, as a CLI beside a server.
    let a = open(f.dir.path(), lists);
    a.catch_up(&f.store).unwrap();
    let path = graph_file(&a);
    let linked = secret_bytes(&path, lists);
    assert!(
        files_holding(&f.dir.path().join("index"), &linked).contains(&path.display().to_string()),
        "the graph holds the vector's bytes (so the scan below can see them)"
    );
    let saved = identity(&path);
    let b = open(f.dir.path(), lists);
    b.catch_up(&f.store).unwrap();
    assert_eq!(identity(&path), saved, "the second reads the first's graph");
    let tenant = SearchFilter::tenant("acme");
    assert_eq!(
        vector_search(&b, SECRET, tenant.clone(), false)[0].0,
        secret
    );
    f.store
        .erase(&EraseRequest {
            target: EraseTarget::Entries {
                within: session(2),
                ids: vec![secret],
            },
            mode: EraseMode::Whole,
            receipt_scope: session(2),
            selector: Selector::Text,
            by: "test".into(),
            reason: String::new(),
            at: at(6_000),
            dry_run: false,
        })
        .unwrap();
    a.catch_up(&f.store).unwrap();
    b.catch_up(&f.store).unwrap();
    let needle = stored_bytes(&secret_vector());
    assert!(files_holding(&f.dir.path().join("index"), &needle).is_empty());
    assert!(files_holding(&f.dir.path().join("index"), &linked).is_empty());
    for index in [&a, &b] {
        let hits = vector_search(index, SECRET, tenant.clone(), false);
        assert!(hits.iter().all(|(id, _)| *id != secret));
        assert!(recall(index, 10, &tenant) >= 0.95);
    }
    // Whichever wrote last, the file is whole and for the new build: a third reads it.
    let saved = identity(&path);
    let c = open(f.dir.path(), lists);
    c.catch_up(&f.store).unwrap();
    assert_eq!(identity(&path), saved);
}

/// [`Clusters`] in WordLlama's 256 dimensions.
struct Clusters256;

impl Embedder for Clusters256 {
    fn id(&self) -> &str {
        "test-clusters-256"
    }
    fn dim(&self) -> usize {
        256
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| clustered(t, 256)).collect())
    }
}

/// What building the graph in the background costs the write path: entries/s appended in
/// batches of 1,000, each followed by the index's catch-up (as the write hook does), with
/// no graph and with one from 50,000 vectors on.
/// `ANN_INGEST=300000 cargo test --release -p memtape-search --test ann -- --ignored
/// --nocapture`.
#[test]
#[ignore = "a benchmark"]
fn ingest_while_the_graph_is_built() {
    let n: usize = std::env::var("ANN_INGEST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    for ann_min in [usize::MAX, 50_000] {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
        let config = IndexConfig {
            ann_min,
            ..IndexConfig::default()
        };
        let index = Index::open(
            &dir.path().join("index"),
            Some(Arc::new(Clusters256)),
            config,
        )
        .unwrap();
        let started = std::time::Instant::now();
        for from in (0..n).step_by(1000) {
            append(&store, from, from + 1000);
            index.catch_up(&store).unwrap();
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "ingest_while_the_graph_is_built n={n} ann_min={ann_min}: {:.0} entries/s",
            n as f64 / secs
        );
    }
}

/// A graph built in the background (a server's) can be waited for: `settle_graphs` brings
/// every loaded shard's graph to its last vector and returns the rows they hold, so a
/// benchmark times searches on a built graph; a shard too small for one holds none.
fn settle_graphs_waits_for_the_background_build(lists: bool) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::create(dir.path()).unwrap();
    append(&store, 0, 5_000);
    let open_background = || {
        Index::open(
            &dir.path().join("index"),
            Some(Arc::new(Clusters)),
            IndexConfig {
                ann_background: true,
                ..config(lists)
            },
        )
        .unwrap()
    };
    let index = open_background();
    index.catch_up(&store).unwrap();
    assert_eq!(index.settle_graphs(), 5_000);
    assert!(graph_file(&index).exists(), "saved once built");
    // Below a background step (2,048 rows) new rows wait, scanned, for more to come.
    append(&store, 5_000, 5_100);
    index.catch_up(&store).unwrap();
    assert_eq!(index.settle_graphs(), 5_000);
    // Opened again, the shard reads its saved graph as it opens, not on its builder's
    // thread: its first search is the graph's, with no build waited for.
    drop(index);
    let again = open_background();
    again.catch_up(&store).unwrap();
    let before = again.shard_stats().graph_searches;
    let got = vector_search(&again, &query(3), SearchFilter::tenant("acme"), false);
    assert_eq!(got.len(), 10);
    assert_eq!(again.shard_stats().graph_searches, before + 1);
    // Too small for a graph: none.
    let small_dir = tempfile::tempdir().unwrap();
    let small_store = SqliteStore::create(small_dir.path()).unwrap();
    append(&small_store, 0, 500);
    let small = open(small_dir.path(), lists);
    small.catch_up(&small_store).unwrap();
    assert_eq!(small.settle_graphs(), 0);
}

/// Each test above on a graph, and on inverted lists.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod graph {
            $(#[test]
            fn $name() {
                super::$name(false)
            })*
        }
        mod lists {
            $(#[test]
            fn $name() {
                super::$name(true)
            })*
        }
    };
}

on_both!(
    the_graph_finds_what_an_exact_scan_finds_with_the_same_scores,
    sixty_four_threads_search_one_graph_while_it_grows,
    a_saved_graph_is_read_again_after_a_reopen_and_extended_after_appends,
    a_truncated_or_corrupt_graph_file_is_built_again,
    an_erased_vector_leaves_the_graph_file,
    two_processes_share_the_graph_file_and_an_erasure_reaches_both,
    settle_graphs_waits_for_the_background_build,
);
