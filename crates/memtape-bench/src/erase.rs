//! The erasure benchmark: one user's entries erased from a larger tape (by default
//! 100,000 of 1,000,000), timed in its parts (the store's transaction with the log's
//! truncation, the search index applying the receipt), while another thread appends to
//! another user's session, to show what the erasure holds up meanwhile.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use memtape::erasure::Selector;
use memtape::{
    EraseMode, EraseRequest, EraseTarget, Index, IndexConfig, Message, NewEntry, Payload, Scope,
    SqliteStore, Store,
};
use serde::Serialize;

use crate::{Error, peak_rss_mb, quantile};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Entries on the tape in all.
    pub entries: usize,
    /// How many of them belong to the user erased (spread through the tape).
    pub user_entries: usize,
    /// Whether a BM25 search index (no embedder) follows the tape and applies the erasure.
    pub index: bool,
    /// Whether another thread appends to another user's session while the store erases.
    pub appends: bool,
    /// Where to put the scratch store (a temporary directory when `None`).
    pub dir: Option<PathBuf>,
    /// A PostgreSQL cluster to run on instead of SQLite (its address, with a role that
    /// may create databases): a scratch database is made on it and dropped after.
    pub database: Option<String>,
}

/// The numbers.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Entries on the tape.
    pub entries: usize,
    /// Entries of the user erased.
    pub user_entries: usize,
    /// Seconds to write the tape (batches of 1,000).
    pub build_s: f64,
    /// Seconds for the index to cover it (0 without an index).
    pub index_build_s: f64,
    /// Seconds for a dry run (selection only).
    pub dry_run_s: f64,
    /// Seconds for the store's erasure: the transaction and the log's truncation.
    pub store_erase_s: f64,
    /// Whether the write-ahead log was truncated.
    pub wiped: bool,
    /// Seconds for the index to apply the receipt (0 without an index).
    pub index_apply_s: f64,
    /// Entries erased.
    pub erased: u64,
    /// Appends another thread began, to another user, while the store erased.
    pub appends_during: usize,
    /// Their latency, ms: median.
    pub append_ms_p50: f64,
    /// 99th percentile.
    pub append_ms_p99: f64,
    /// The longest.
    pub append_ms_max: f64,
    /// The database's size before and after, MB.
    pub db_mb_before: f64,
    /// After the erasure.
    pub db_mb_after: f64,
    /// Seconds for `Store::compact` after the erasure (PostgreSQL: `VACUUM FULL`; 0 on
    /// SQLite, which needs none).
    pub compact_s: f64,
    /// The database's size after compacting, MB.
    pub db_mb_compacted: f64,
    /// Which store ran: `sqlite` or `postgres`.
    pub store: &'static str,
    /// Peak resident memory of the process, MB.
    pub peak_rss_mb: f64,
}

fn text(i: usize) -> String {
    format!("message {i}: we talked about the kayak trip, the budget and project plans number {i}")
}

fn size_mb(path: &std::path::Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1e6)
}

/// Runs the benchmark once.
pub fn run(config: &Config) -> Result<Report, Error> {
    let scratch = match &config.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let (store, sizer): (Arc<dyn Store>, Sizer) = match &config.database {
        None => (
            Arc::new(
                SqliteStore::create(&scratch.path().join("tape")).map_err(memtape::Error::from)?,
            ),
            Sizer::File(scratch.path().join("tape").join(SqliteStore::FILE_NAME)),
        ),
        Some(admin) => {
            let name = format!("memtape_bench_erase_{:08x}", fastrand::u32(..));
            let url =
                memtape_postgres::create_database(admin, &name).map_err(memtape::Error::from)?;
            let pg = Arc::new(
                memtape_postgres::PostgresStore::connect(&url).map_err(memtape::Error::from)?,
            );
            (
                pg.clone(),
                Sizer::Postgres {
                    store: pg,
                    admin: admin.clone(),
                    name,
                },
            )
        }
    };
    let agent = Scope::agent("bench", "bench").map_err(memtape::Error::from)?;
    let session = |user: &str, n: usize| {
        agent
            .clone()
            .with_user(user)
            .and_then(|s| s.with_session(format!("s{n}")))
            .map_err(memtape::Error::from)
    };
    let every = (config.entries / config.user_entries.max(1)).max(1);
    let start = Instant::now();
    let now = chrono::Utc::now();
    let mut written = 0;
    while written < config.entries {
        let batch: Vec<NewEntry> = (written..(written + 1000).min(config.entries))
            .map(|i| {
                let scope = if i % every == 0 {
                    session("erased", i % 100)
                } else {
                    session(&format!("u{}", i % 900), i % 7)
                }?;
                Ok(NewEntry::new(
                    scope,
                    Payload::Message(Message::user(text(i))),
                    now,
                ))
            })
            .collect::<Result<_, Error>>()?;
        written += batch.len();
        store.append(batch).map_err(memtape::Error::from)?;
    }
    let build_s = start.elapsed().as_secs_f64();
    let index = if config.index {
        let index = Index::open(&scratch.path().join("index"), None, IndexConfig::default())
            .map_err(memtape::Error::from)?;
        Some(index)
    } else {
        None
    };
    let start = Instant::now();
    if let Some(index) = &index {
        index
            .catch_up(store.as_ref())
            .map_err(memtape::Error::from)?;
    }
    let index_build_s = start.elapsed().as_secs_f64();
    let db_mb_before = sizer.mb();
    let mut request = EraseRequest {
        target: EraseTarget::User {
            tenant: "bench".into(),
            user: "erased".into(),
        },
        mode: EraseMode::Whole,
        receipt_scope: agent.clone(),
        selector: Selector::User {
            user: "erased".into(),
        },
        by: "bench".into(),
        reason: String::new(),
        at: now,
        dry_run: true,
    };
    let start = Instant::now();
    store.erase(&request).map_err(memtape::Error::from)?;
    let dry_run_s = start.elapsed().as_secs_f64();

    // Another user's appends, one durable entry each, while the store erases.
    let stop = Arc::new(AtomicBool::new(false));
    let appender = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        let scope = session("other", 0)?;
        let appends = config.appends;
        std::thread::spawn(move || -> Result<Vec<(Instant, f64)>, memtape::Error> {
            let mut latencies = Vec::new();
            while appends && !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let entry = NewEntry::new(
                    scope.clone(),
                    Payload::Message(Message::user("still here")),
                    chrono::Utc::now(),
                );
                store.append(vec![entry])?;
                latencies.push((t, t.elapsed().as_secs_f64() * 1000.0));
            }
            Ok(latencies)
        })
    };
    request.dry_run = false;
    std::thread::sleep(std::time::Duration::from_millis(200));
    let start = Instant::now();
    let outcome = store.erase(&request).map_err(memtape::Error::from)?;
    let end = Instant::now();
    let store_erase_s = (end - start).as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    // The appends begun while the store erased.
    let mut latencies: Vec<f64> = appender
        .join()
        .map_err(|_| Error::Data("the appending thread panicked".into()))??
        .into_iter()
        .filter(|(at, _)| *at >= start && *at <= end)
        .map(|(_, ms)| ms)
        .collect();
    let start = Instant::now();
    if let Some(index) = &index {
        index
            .catch_up(store.as_ref())
            .map_err(memtape::Error::from)?;
    }
    let index_apply_s = start.elapsed().as_secs_f64();
    let db_mb_after = sizer.mb();
    let start = Instant::now();
    store.compact().map_err(memtape::Error::from)?;
    let compact_s = start.elapsed().as_secs_f64();
    let db_mb_compacted = sizer.mb();
    let kind = sizer.kind();
    drop(store);
    sizer.finish();
    Ok(Report {
        entries: config.entries,
        user_entries: outcome.ids.len(),
        build_s,
        index_build_s,
        dry_run_s,
        store_erase_s,
        wiped: outcome.wiped,
        index_apply_s,
        erased: outcome.entries,
        appends_during: latencies.len(),
        append_ms_p50: quantile(&mut latencies, 0.5),
        append_ms_p99: quantile(&mut latencies, 0.99),
        append_ms_max: latencies.iter().copied().fold(0.0, f64::max),
        db_mb_before,
        db_mb_after,
        compact_s,
        db_mb_compacted,
        store: kind,
        peak_rss_mb: peak_rss_mb(),
    })
}

/// How the store's size is read, and what is left to clean up.
enum Sizer {
    /// SQLite's database file.
    File(PathBuf),
    /// A scratch PostgreSQL database, dropped at the end.
    Postgres {
        store: Arc<memtape_postgres::PostgresStore>,
        admin: String,
        name: String,
    },
}

impl Sizer {
    fn mb(&self) -> f64 {
        match self {
            Sizer::File(path) => size_mb(path),
            Sizer::Postgres { store, .. } => store.database_bytes().map_or(0.0, |b| b as f64 / 1e6),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Sizer::File(_) => "sqlite",
            Sizer::Postgres { .. } => "postgres",
        }
    }

    fn finish(self) {
        if let Sizer::Postgres { store, admin, name } = self {
            drop(store);
            let _ = memtape_postgres::drop_database(&admin, &name);
        }
    }
}
