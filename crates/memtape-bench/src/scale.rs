//! The scale benchmark: synthetic tapes of 10k, 100k, 1M (and 10M) entries, indexed as the
//! engine indexes every append, then BM25, vector and hybrid query latency at each size; on
//! the embedded SQLite store, or with a database address on PostgreSQL (a new database per
//! size, dropped after it). With `tenants` above 1 the entries are spread over that many
//! tenants with Zipf-skewed sizes (as real tenants are: a few large, a long tail), each
//! query searches one tenant (busy tenants more often), and a second index on the same
//! tape, with nothing loaded, stands for a server that has just joined: its first search of
//! each of a sample of tenants loads that tenant's shard cold, counting the texts the model
//! had to embed (none when the vectors kept in the store serve).
//!
//! Texts are sentences of 8–30 made-up words drawn from a Zipf distribution over a 20,000
//! word vocabulary (like natural text: a few very common words, a long tail). Queries are
//! 2–5 words of the vocabulary's middle ranks (100–10,000): content words, as a query is
//! after stop words are dropped. Vectors come from the embedder given (WordLlama from the
//! CLI: a real model, tens of thousands of texts per second, so a million entries fit in
//! the run), or, without one, from seeded random 384-d word vectors averaged per text.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use memtape::{
    DynStore, Embedder, Engine, Index, IndexConfig, Message, Mode, NewEntry, Payload, Scope,
    SearchFilter, SearchRequest,
};
use serde::Serialize;

use crate::{Error, peak_rss_mb, quantile, read_mb, rss_anon_mb, rss_mb};

const SYLLABLES: [&str; 16] = [
    "ka", "lo", "mi", "nu", "ru", "sa", "ti", "vo", "zo", "pa", "do", "fi", "gu", "ha", "ji", "bo",
];
const VOCABULARY: usize = 20_000;
const DIM: usize = 384;
const ENTRIES_PER_SESSION: usize = 100;
/// The queries whose top 10 is compared with an exact search's.
const RECALL_QUERIES: usize = 50;

/// What to run.
#[derive(Clone)]
pub struct Config {
    /// The tape sizes to measure, in entries.
    pub sizes: Vec<usize>,
    /// Index settings.
    pub index: IndexConfig,
    /// The embedding model; `None` for seeded random word vectors.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// A PostgreSQL cluster (an address whose role may create databases): the tape goes
    /// there instead of SQLite.
    pub database: Option<String>,
    /// How many tenants the entries are spread over (1: one tenant, `bench`).
    pub tenants: usize,
    /// The memory budget of the index's loaded shards (`None`: the library's default).
    pub index_memory: Option<u64>,
    /// Index as `memtape serve` does: each append is acknowledged once durable and the
    /// server's indexer threads ([`memtape_server::Indexer`]) follow the tape,
    /// text on one, embedding on another; the ingest ends once they have caught up. When
    /// `false`, each append returns once indexed (the library's default).
    pub server_ingest: bool,
    /// Searches timed per mode (the first [`RECALL_QUERIES`] also measure recall). More
    /// give a steadier p95, above all of the warm searches among many tenants.
    pub queries: usize,
}

/// The numbers for one size.
#[derive(Debug, Serialize)]
pub struct SizeReport {
    /// Entries on the tape.
    pub entries: usize,
    /// Where the tape was: `sqlite` or `postgres`.
    pub store: String,
    /// Entries per second appended and indexed (tape commit, FTS5, vectors).
    pub ingest_entries_per_s: f64,
    /// Rows in the approximate-neighbour graphs of the shards searched (large ones only).
    pub graph_rows: usize,
    /// Seconds the graphs took to finish building after the ingest (they build in the
    /// background while it runs).
    pub graph_s: f64,
    /// The index file on disk, MB.
    pub index_mb: f64,
    /// The tape on disk, MB (PostgreSQL: the database's size).
    pub tape_mb: f64,
    /// Resident memory after building and querying this size, MB.
    pub rss_mb: f64,
    /// The part of `rss_mb` that is not mapped files, MB.
    pub rss_anon_mb: f64,
    /// What the index estimates its loaded shards hold (what `--index-memory` bounds),
    /// MB, when `rss_mb` is taken.
    pub shards_mb: f64,
    /// BM25 query latency, ms (p50, p95).
    pub bm25_ms: [f64; 2],
    /// Vector query latency, ms (p50, p95), query embedding included.
    pub vector_ms: [f64; 2],
    /// Hybrid query latency, ms (p50, p95).
    pub hybrid_ms: [f64; 2],
    /// MB read from storage during the timed BM25, vector and hybrid passes (what the
    /// page cache missed: the tape's entries, the index's files).
    pub search_read_mb: [f64; 3],
    /// Hybrid query latency on a loaded shard, ms (p50, p95). With more than one tenant,
    /// from the warm pass: every query timed once right after its tenant's shard was
    /// loaded by a search of other words; with one, the timed hybrid searches. Only
    /// searches during which no shard was loaded count.
    pub warm_hybrid_ms: [f64; 2],
    /// How many searches `warm_hybrid_ms` is of.
    pub warm_hybrid_searches: usize,
    /// BM25 query latency of one user's entries within the tenant, on a loaded shard, ms
    /// (p50, p95): a filter a large shard's inverted index leaves to FTS5.
    pub filtered_bm25_ms: [f64; 2],
    /// The warm pass by the size of the tenant searched (with more than one tenant):
    /// where the warm searches' time goes.
    pub hybrid_by_size: Vec<SizeBand>,
    /// How many of the exact top 10 the vector search returned (mean over queries); 1.0
    /// when the search is exact.
    pub vector_recall_10: f64,
    /// Where graphs answered: vector latency and recall@10 with other candidate counts
    /// (a half, twice and four times the default rule's in the largest shard).
    pub ann_sweep: Vec<AnnPoint>,
    /// Where graphs answered and the index was opened without huge pages
    /// (`--huge-pages false`): the timed searches again, in the same process, after it
    /// asked for them.
    pub huge_pages: Option<HugePages>,
    /// How many tenants the entries are spread over.
    pub tenants: usize,
    /// The largest tenant's entries.
    pub largest_tenant: usize,
    /// Shards loaded and evicted while the queries were timed (after a warm-up pass).
    pub timed_shard_loads: u64,
    /// Shards evicted then.
    pub timed_shard_evictions: u64,
    /// A server that has just joined (a second index on the same tape, nothing loaded):
    /// its first hybrid search of each sampled tenant.
    pub cold: ColdReport,
}

/// The timed searches again after the index asked for huge pages.
#[derive(Debug, Serialize)]
pub struct HugePages {
    /// Seconds the kernel took to make the memory into huge pages.
    pub collapse_s: f64,
    /// Vector query latency, ms (p50, p95), before and after.
    pub vector_ms: [[f64; 2]; 2],
    /// Hybrid query latency, ms (p50, p95), before and after.
    pub hybrid_ms: [[f64; 2]; 2],
}

/// The warm pass's hybrid searches of tenants of one range of sizes.
#[derive(Debug, Serialize)]
pub struct SizeBand {
    /// The tenants' entries, from (inclusive) and to (exclusive).
    pub entries: [usize; 2],
    /// How many searches were of such a tenant.
    pub searches: usize,
    /// How many found the shard loaded.
    pub warm: usize,
    /// The warm ones' latency, ms (p50, p95; 0 for none).
    pub warm_ms: [f64; 2],
}

/// The bands [`SizeBand`] reports: below the exact scan's limit, below the approximate
/// index's threshold, and above it.
const SIZE_BANDS: [[usize; 2]; 3] = [[0, 20_000], [20_000, 100_000], [100_000, usize::MAX]];

/// Vector search with one candidate count for the graph.
#[derive(Debug, Serialize)]
pub struct AnnPoint {
    /// The candidates a graph search asked for.
    pub candidates: usize,
    /// Vector query latency, ms (p50, p95).
    pub vector_ms: [f64; 2],
    /// Recall@10 against the exact search, as [`SizeReport::vector_recall_10`].
    pub vector_recall_10: f64,
}

/// The first searches of a server that has just joined.
#[derive(Debug, Serialize)]
pub struct ColdReport {
    /// How many tenants were searched cold.
    pub tenants: usize,
    /// First hybrid search latency, shard load included, ms (p50, p95, max).
    pub first_search_ms: [f64; 3],
    /// The largest sampled tenant's entries and its first search, ms.
    pub largest: (usize, f64),
    /// Texts the model embedded for documents during those searches (0 when every vector
    /// came from the store).
    pub documents_embedded: usize,
    /// Texts the model embedded for the queries themselves (one per search).
    pub queries_embedded: usize,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// One entry per size.
    pub sizes: Vec<SizeReport>,
    /// Peak resident memory of the whole run, MB.
    pub peak_rss_mb: f64,
    /// How vectors were made.
    pub vectors: String,
    /// Threads available.
    pub threads: usize,
}

/// A static embedding model over the synthetic vocabulary: seeded random word vectors,
/// averaged and normalised.
struct WordVectors {
    words: HashMap<String, usize>,
    table: Vec<f32>,
}

impl WordVectors {
    fn new(vocabulary: &[String]) -> Self {
        let mut rng = fastrand::Rng::with_seed(42);
        let table = (0..vocabulary.len() * DIM)
            .map(|_| rng.f32() - 0.5)
            .collect();
        let words = vocabulary
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i))
            .collect();
        WordVectors { words, table }
    }
}

impl Embedder for WordVectors {
    fn id(&self) -> &str {
        "bench-word-vectors-384"
    }
    fn dim(&self) -> usize {
        DIM
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memtape::EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; DIM];
                for w in t.split_whitespace().filter_map(|w| self.words.get(w)) {
                    let row = &self.table[w * DIM..(w + 1) * DIM];
                    v.iter_mut().zip(row).for_each(|(a, b)| *a += b);
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                v.iter_mut().for_each(|x| *x /= n);
                v
            })
            .collect())
    }
}

/// Counts the texts an embedder embeds (the cold searches check that only queries are).
struct Counting {
    inner: Arc<dyn Embedder>,
    texts: std::sync::atomic::AtomicUsize,
}

impl Embedder for Counting {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memtape::EmbedError> {
        self.texts
            .fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
        self.inner.embed(texts)
    }
    fn min_similarity(&self) -> f32 {
        self.inner.min_similarity()
    }
}

/// The made-up word of rank `i`: frequent words are short.
fn word(i: usize) -> String {
    let len = match i {
        0..256 => 2,
        256..4096 => 3,
        _ => 4,
    };
    (0..len).map(|k| SYLLABLES[(i >> (4 * k)) & 15]).collect()
}

/// Samples ranks from a Zipf distribution (exponent 1).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|r| {
                acc += 1.0 / r as f64;
                acc
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= acc);
        Zipf { cdf }
    }
    fn sample(&self, rng: &mut fastrand::Rng) -> usize {
        let x = rng.f64();
        self.cdf.partition_point(|c| *c < x).min(self.cdf.len() - 1)
    }
}

fn dir_mb(path: &Path, prefix: &str) -> f64 {
    std::fs::read_dir(path)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len() as f64)
                .sum::<f64>()
        })
        .unwrap_or(0.0)
        / 1e6
}

/// The size of the files under `path`, folders included, in MB.
fn tree_mb(path: &Path) -> f64 {
    fn bytes(path: &Path) -> u64 {
        std::fs::read_dir(path)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => bytes(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    bytes(path) as f64 / 1e6
}

/// The engine's index (the benchmark always attaches one).
fn engine_index(engine: &Engine<DynStore>) -> Result<&Index, Error> {
    engine.index().ok_or(Error::Engine(memtape::Error::NoIndex))
}

/// A server that has just joined: a second store handle and a second index on the same
/// tape, in a directory of its own, with nothing loaded (lazy, as `memtape serve` is). Its
/// first hybrid search of each of up to 20 tenants (the queries' first, and the largest)
/// loads that tenant's shard from the tape and the vectors kept in the store.
fn cold_searches(
    config: &Config,
    model: &Arc<dyn Embedder>,
    tape_dir: &Path,
    database: Option<&str>,
    queries: &[(String, SearchFilter)],
    sizes_of: &[usize],
    tenant_name: &dyn Fn(usize) -> String,
) -> Result<ColdReport, Error> {
    let counting = Arc::new(Counting {
        inner: model.clone(),
        texts: std::sync::atomic::AtomicUsize::new(0),
    });
    let dir = tempfile::tempdir()?;
    let index = Index::open(
        &dir.path().join("index"),
        Some(counting.clone() as Arc<dyn Embedder>),
        config.index,
    )
    .map_err(memtape::Error::from)?;
    index.set_lazy(true);
    if let Some(bytes) = config.index_memory {
        index.set_memory(bytes);
    }
    let store: DynStore = match database {
        Some(url) => {
            Box::new(memtape_postgres::PostgresStore::connect(url).map_err(memtape::Error::from)?)
        }
        None => Box::new(memtape::SqliteStore::open(tape_dir).map_err(memtape::Error::from)?),
    };
    let engine = Engine::with_store(store).with_index(index)?;
    // The largest tenant, then the tenants the queries ask about, each once.
    let largest = (0..sizes_of.len())
        .max_by_key(|k| sizes_of[*k])
        .unwrap_or(0);
    let mut picked: Vec<(String, SearchFilter)> = Vec::new();
    let first = queries.first().map(|(q, _)| q.clone()).unwrap_or_default();
    picked.push((first, SearchFilter::tenant(tenant_name(largest))));
    for (q, filter) in queries {
        if picked.len() >= 20 {
            break;
        }
        if picked.iter().all(|(_, f)| f.tenant != filter.tenant) {
            picked.push((q.clone(), filter.clone()));
        }
    }
    let before = counting.texts.load(std::sync::atomic::Ordering::SeqCst);
    let mut ms = Vec::new();
    for (q, filter) in &picked {
        let request = SearchRequest::new(q.clone(), filter.clone())
            .mode(Mode::Hybrid)
            .limit(10);
        let started = Instant::now();
        std::hint::black_box(engine.search(&request)?);
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let texts = counting.texts.load(std::sync::atomic::Ordering::SeqCst) - before;
    let largest_ms = ms.first().copied().unwrap_or(0.0);
    let max = ms.iter().copied().fold(0.0, f64::max);
    Ok(ColdReport {
        tenants: picked.len(),
        first_search_ms: [
            quantile(&mut ms.clone(), 0.5),
            quantile(&mut ms.clone(), 0.95),
            max,
        ],
        largest: (sizes_of[largest], largest_ms),
        documents_embedded: texts.saturating_sub(picked.len()),
        queries_embedded: texts.min(picked.len()),
    })
}

/// Runs the benchmark; `progress` hears what is happening.
pub fn run(config: &Config, progress: &mut dyn FnMut(&str)) -> Result<Report, Error> {
    let vocabulary: Vec<String> = (0..VOCABULARY).map(word).collect();
    let model: Arc<dyn Embedder> = match &config.embedder {
        Some(e) => e.clone(),
        None => Arc::new(WordVectors::new(&vocabulary)),
    };
    let zipf = Zipf::new(VOCABULARY);
    let mut sizes = Vec::new();
    for &n in &config.sizes {
        let scratch = tempfile::tempdir()?;
        let embedder: Arc<dyn Embedder> = model.clone();
        let index = Index::open(&scratch.path().join("index"), Some(embedder), config.index)
            .map_err(memtape::Error::from)?;
        let database = match &config.database {
            Some(admin) => {
                let name = format!("memtape_scale_{n}_{:08x}", fastrand::u32(..));
                let url = memtape_postgres::create_database(admin, &name)
                    .map_err(memtape::Error::from)?;
                Some((admin.clone(), name, url))
            }
            None => None,
        };
        let store: DynStore = match &database {
            Some((_, _, url)) => Box::new(
                memtape_postgres::PostgresStore::connect(url).map_err(memtape::Error::from)?,
            ),
            None => Box::new(
                memtape::SqliteStore::create(scratch.path()).map_err(memtape::Error::from)?,
            ),
        };
        let engine = Engine::with_store(store).with_index(index)?;
        if let Some(bytes) = config.index_memory {
            engine_index(&engine)?.set_memory(bytes);
        }
        let (engine, indexer) = if config.server_ingest {
            let (engine, indexer) = memtape_server::Indexer::start(engine);
            (engine, Some(indexer))
        } else {
            (Arc::new(engine), None)
        };
        if config.tenants > 1 {
            // As a server's: every entry's vector is made as it is appended (and kept in
            // the store), a tenant's shard when a search first needs it.
            engine_index(&engine)?.set_lazy(true);
        }
        let mut rng = fastrand::Rng::with_seed(n as u64);
        let started = Instant::now();
        let tenants = config.tenants.max(1);
        let tenant_zipf = Zipf::new(tenants);
        let tenant_name = |k: usize| {
            if tenants == 1 {
                "bench".to_owned()
            } else {
                format!("t{k}")
            }
        };
        let bases: Vec<Scope> = (0..tenants)
            .map(|k| Scope::agent(tenant_name(k), "agent"))
            .collect::<Result<_, _>>()
            .map_err(memtape::Error::from)?;
        let mut sizes_of = vec![0usize; tenants];
        let now = chrono::Utc::now();
        let mut done = 0;
        while done < n {
            let batch: Vec<NewEntry> = (done..(done + 1000).min(n))
                .map(|_| {
                    let len = rng.usize(8..=30);
                    let text: Vec<&str> = (0..len)
                        .map(|_| vocabulary[zipf.sample(&mut rng)].as_str())
                        .collect();
                    let k = if tenants == 1 {
                        0
                    } else {
                        tenant_zipf.sample(&mut rng)
                    };
                    let nth = sizes_of[k];
                    sizes_of[k] += 1;
                    let session = bases[k]
                        .clone()
                        .with_user(format!("user{}", nth % 10))
                        .and_then(|s| s.with_session(format!("s{}", nth / ENTRIES_PER_SESSION)));
                    session.map(|s| {
                        NewEntry::new(s, Payload::Message(Message::user(text.join(" "))), now)
                    })
                })
                .collect::<Result<_, _>>()
                .map_err(memtape::Error::from)?;
            done += batch.len();
            engine.append_entries(batch)?;
            if done % 100_000 == 0 {
                progress(&format!(
                    "{n}: {done} entries ({:.0}/s)",
                    done as f64 / started.elapsed().as_secs_f64()
                ));
            }
        }
        if indexer.is_some() {
            // The appends are durable; the ingest ends when the indexer has every entry's
            // text and vector in the index.
            let index = engine_index(&engine)?;
            let last = engine.store().last_id().map_err(memtape::Error::from)?;
            while index.covered() < last || index.embedded() < last {
                // A failing indexer would never catch up: its error ends the run.
                if let Some(failure) = engine.index_failure() {
                    return Err(Error::Engine(memtape::Error::Internal(format!(
                        "the indexer failed: {failure}"
                    ))));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let ingest = n as f64 / started.elapsed().as_secs_f64();
        // Each query searches one tenant that has entries, busy tenants more often.
        let queries: Vec<(String, SearchFilter, usize)> = (0..config.queries)
            .map(|_| {
                let len = rng.usize(2..=5);
                let text = (0..len)
                    .map(|_| vocabulary[rng.usize(100..10_000)].as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                // (One tenant draws nothing: its queries are the same as before tenants.)
                let k = loop {
                    if tenants == 1 {
                        break 0;
                    }
                    let k = tenant_zipf.sample(&mut rng);
                    if sizes_of[k] > 0 {
                        break k;
                    }
                };
                (text, SearchFilter::tenant(tenant_name(k)), k)
            })
            .collect();
        let query_tenants: Vec<usize> = queries.iter().map(|(_, _, k)| *k).collect();
        let query_sizes: Vec<usize> = query_tenants.iter().map(|&k| sizes_of[k]).collect();
        let queries: Vec<(String, SearchFilter)> = queries
            .into_iter()
            .map(|(text, filter, _)| (text, filter))
            .collect();
        // Each search's time, and whether its shard was loaded already (no load during it).
        let search =
            |text: &str, filter: &SearchFilter, mode: Mode| -> Result<(f64, bool), Error> {
                let index = engine_index(&engine)?;
                let request = SearchRequest::new(text, filter.clone())
                    .mode(mode)
                    .limit(10);
                let loads = index.shard_stats().loads;
                let started = Instant::now();
                std::hint::black_box(engine.search(&request)?);
                let took = started.elapsed().as_secs_f64() * 1000.0;
                Ok((took, index.shard_stats().loads == loads))
            };
        let run_all = |mode: Mode| -> Result<Vec<(f64, bool)>, Error> {
            queries
                .iter()
                .map(|(q, filter)| search(q, filter, mode))
                .collect()
        };
        // A warm-up pass loads the shards the queries need (and repeats no query's vector:
        // each mode's queries below are embedded again only where the cache has them).
        run_all(Mode::Bm25)?;
        // The graphs of large shards are built in the background as the tape grows; the
        // searches below are timed on built ones, and the build is reported on its own.
        let settled = Instant::now();
        let graph_rows = engine_index(&engine)?.settle_graphs();
        let graph_s = settled.elapsed().as_secs_f64();
        progress(&format!(
            "{n}: ingest {ingest:.0}/s; graphs {graph_rows} rows, done {graph_s:.0} s after it; timing searches"
        ));
        let before = engine_index(&engine)?.shard_stats();
        let p50_p95 = |mut ms: Vec<f64>| [quantile(&mut ms.clone(), 0.5), quantile(&mut ms, 0.95)];
        let time = |mode: Mode| -> Result<[f64; 2], Error> {
            Ok(p50_p95(
                run_all(mode)?.into_iter().map(|(ms, _)| ms).collect(),
            ))
        };
        let read_before = read_mb();
        let bm25_ms = time(Mode::Bm25)?;
        let read_bm25 = read_mb();
        let vector_ms = time(Mode::Vector)?;
        let read_vector = read_mb();
        let hybrid = run_all(Mode::Hybrid)?;
        let search_read_mb = [
            read_bm25 - read_before,
            read_vector - read_bm25,
            read_mb() - read_vector,
        ];
        let hybrid_ms = p50_p95(hybrid.iter().map(|(ms, _)| *ms).collect());
        let after = engine_index(&engine)?.shard_stats();
        // With many tenants, the passes above cycle through more shards than the budget
        // holds, so few of their searches find their shard loaded. The warm pass times
        // every query once on a loaded shard: tenant by tenant, an untimed hybrid search
        // of another query's words loads the tenant's shard, then its queries are timed
        // (a search that loaded anything is still counted as not warm). Each query is
        // also timed as a BM25 search of one user's entries of its tenant: a filter a
        // large shard's inverted index cannot answer, so FTS5 scores every match.
        let (warm_pass, filtered) = {
            let mut order: Vec<usize> = (0..queries.len()).collect();
            order.sort_by_key(|&i| query_tenants[i]);
            let mut timed = vec![(0.0, false); queries.len()];
            let mut filtered = Vec::with_capacity(queries.len());
            let mut loaded = None;
            for i in order {
                let (q, filter) = &queries[i];
                // One tenant's timed hybrid pass was on its loaded shard already.
                if tenants > 1 {
                    if loaded != Some(query_tenants[i]) {
                        search(&queries[(i + 1) % queries.len()].0, filter, Mode::Hybrid)?;
                        loaded = Some(query_tenants[i]);
                    }
                    timed[i] = search(q, filter, Mode::Hybrid)?;
                }
                let one_user = SearchFilter {
                    user: Some(format!("user{}", i % 10)),
                    ..filter.clone()
                };
                filtered.push(search(q, &one_user, Mode::Bm25)?.0);
            }
            (if tenants > 1 { timed } else { hybrid }, p50_p95(filtered))
        };
        let warm: Vec<f64> = warm_pass
            .iter()
            .filter(|(_, w)| *w)
            .map(|(ms, _)| *ms)
            .collect();
        let warm_hybrid_searches = warm.len();
        let warm_hybrid_ms = p50_p95(warm);
        let hybrid_by_size = if tenants > 1 {
            SIZE_BANDS
                .iter()
                .map(|&[from, to]| {
                    let of: Vec<(f64, bool)> = warm_pass
                        .iter()
                        .zip(&query_sizes)
                        .filter(|(_, size)| (from..to).contains(*size))
                        .map(|(h, _)| *h)
                        .collect();
                    let warm: Vec<f64> = of.iter().filter(|(_, w)| *w).map(|(ms, _)| *ms).collect();
                    SizeBand {
                        entries: [from, to],
                        searches: of.len(),
                        warm: warm.len(),
                        warm_ms: if warm.is_empty() {
                            [0.0; 2]
                        } else {
                            p50_p95(warm)
                        },
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        // The quality price of the approximate search (the graph, or the one-bit scan):
        // overlap with an exact search's top 10, over the first 50 queries. The exact lists
        // do not change with the settings swept below, so they are searched once.
        let mut exact_top = Vec::new();
        for (q, filter) in queries.iter().take(RECALL_QUERIES) {
            let request = SearchRequest::new(q.clone(), filter.clone())
                .mode(Mode::Vector)
                .limit(10);
            let exact = engine.search(&SearchRequest {
                exact: true,
                ..request
            })?;
            exact_top.push(exact.into_iter().map(|h| h.entry.id).collect::<Vec<_>>());
        }
        let recall = || -> Result<f64, Error> {
            let mut overlap = 0.0;
            for ((q, filter), exact) in queries.iter().zip(&exact_top) {
                let request = SearchRequest::new(q.clone(), filter.clone())
                    .mode(Mode::Vector)
                    .limit(10);
                let got = engine.search(&request)?;
                let hits = got.iter().filter(|h| exact.contains(&h.entry.id)).count();
                overlap += hits as f64 / exact.len().max(1) as f64;
            }
            Ok(overlap / exact_top.len().max(1) as f64)
        };
        let vector_recall_10 = recall()?;
        // Where graphs answer, the trade of candidates for recall: a half, twice and four
        // times the candidates the default rule asks for in the largest shard.
        let mut ann_sweep = Vec::new();
        if graph_rows > 0 {
            let largest = sizes_of.iter().copied().max().unwrap_or(0);
            let default = config.index.ann_candidates_for(largest);
            for candidates in [default / 2, default * 2, default * 4] {
                engine_index(&engine)?.set_ann_candidates(candidates);
                let vector_ms = time(Mode::Vector)?;
                let vector_recall_10 = recall()?;
                progress(&format!(
                    "{n}: graph search from {candidates} candidates: vector ms p50/p95 {vector_ms:.2?}; recall@10 {vector_recall_10:.3}"
                ));
                ann_sweep.push(AnnPoint {
                    candidates,
                    vector_ms,
                    vector_recall_10,
                });
            }
            engine_index(&engine)?.set_ann_candidates(0);
        }
        let huge_pages = if graph_rows > 0 && !config.index.huge_pages {
            let before = [time(Mode::Vector)?, time(Mode::Hybrid)?];
            let started = Instant::now();
            engine_index(&engine)?.use_huge_pages();
            let collapse_s = started.elapsed().as_secs_f64();
            let after = [time(Mode::Vector)?, time(Mode::Hybrid)?];
            progress(&format!(
                "{n}: huge pages ({collapse_s:.1} s): vector ms p50/p95 {:.2?} -> {:.2?}; hybrid {:.2?} -> {:.2?}",
                before[0], after[0], before[1], after[1]
            ));
            Some(HugePages {
                collapse_s,
                vector_ms: [before[0], after[0]],
                hybrid_ms: [before[1], after[1]],
            })
        } else {
            None
        };
        let rss = rss_mb();
        let rss_anon = rss_anon_mb();
        let shards_mb = engine_index(&engine)?.shard_stats().bytes as f64 / 1e6;
        // Said before the cold searches, which build a whole shard again (minutes at 10M).
        progress(&format!(
            "{n}: warm: graph {graph_rows} rows {graph_s:.0} s after ingest; ms p50/p95 bm25 {bm25_ms:.2?} vector {vector_ms:.2?} hybrid {hybrid_ms:.2?} (warm {warm_hybrid_ms:.2?}); one user's bm25 {filtered:.2?}; read from storage MB {search_read_mb:.1?}; recall@10 {vector_recall_10:.3}; rss {rss:.0} MB (anon {rss_anon:.0}; shards' estimate {shards_mb:.0})"
        ));
        let cold = cold_searches(
            config,
            &model,
            scratch.path(),
            database.as_ref().map(|(_, _, url)| url.as_str()),
            &queries,
            &sizes_of,
            &tenant_name,
        )?;
        let tape_mb = match &database {
            Some((_, _, url)) => {
                memtape_postgres::PostgresStore::connect_read_only(url)
                    .and_then(|s| s.database_bytes())
                    .map_err(memtape::Error::from)? as f64
                    / 1e6
            }
            None => dir_mb(scratch.path(), "memtape.db"),
        };
        let report = SizeReport {
            entries: n,
            store: if database.is_some() {
                "postgres"
            } else {
                "sqlite"
            }
            .into(),
            ingest_entries_per_s: ingest,
            graph_rows,
            graph_s,
            index_mb: tree_mb(&scratch.path().join("index")),
            tape_mb,
            rss_mb: rss,
            rss_anon_mb: rss_anon,
            shards_mb,
            bm25_ms,
            vector_ms,
            hybrid_ms,
            search_read_mb,
            warm_hybrid_ms,
            warm_hybrid_searches,
            filtered_bm25_ms: filtered,
            hybrid_by_size,
            vector_recall_10,
            ann_sweep,
            huge_pages,
            tenants,
            largest_tenant: sizes_of.iter().copied().max().unwrap_or(0),
            timed_shard_loads: after.loads - before.loads,
            timed_shard_evictions: after.evictions - before.evictions,
            cold,
        };
        progress(&format!("{report:?}"));
        sizes.push(report);
        drop(indexer);
        drop(engine);
        if let Some((admin, name, _)) = database {
            memtape_postgres::drop_database(&admin, &name).map_err(memtape::Error::from)?;
        }
    }
    Ok(Report {
        sizes,
        peak_rss_mb: peak_rss_mb(),
        vectors: match &config.embedder {
            Some(e) => format!("embedder {}", e.id()),
            None => "precomputed: seeded random 384-d word vectors, averaged per text".into(),
        },
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}
