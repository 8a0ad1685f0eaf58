//! The store benchmark: durable append throughput of a single writer (one entry per
//! transaction, and batches of 100), and get_history latency on a large session.

use std::path::PathBuf;
use std::time::Instant;

use memtape::{AppendOptions, Engine, HistoryLimits, Message, Scope};
use serde::Serialize;

use crate::{Error, median, peak_rss_mb, quantile};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Messages in the large session history is read from.
    pub messages: usize,
    /// Durable single-entry appends per run.
    pub appends: usize,
    /// Runs; medians are reported.
    pub runs: usize,
    /// Where to put scratch stores (a temporary directory when `None`).
    pub dir: Option<PathBuf>,
}

/// The numbers.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Durable appends per second, one entry per transaction (median of runs).
    pub append_entries_per_s: f64,
    /// Durable appends per second in batches of 100 entries (median of runs).
    pub append_batched_entries_per_s: f64,
    /// Messages in the large session.
    pub session_messages: usize,
    /// Seconds to build the large session (batched appends).
    pub build_s: f64,
    /// get_history (500 messages) latency, ms, p50 over all calls.
    pub history_ms_p50: f64,
    /// get_history (500 messages) latency, ms, p95.
    pub history_ms_p95: f64,
    /// get_history with a 4000-token limit, ms, p50.
    pub history_tokens_ms_p50: f64,
    /// get_history with a 4000-token limit, ms, p95.
    pub history_tokens_ms_p95: f64,
    /// Database size on disk, MB.
    pub db_mb: f64,
    /// Peak resident memory of the process, MB.
    pub peak_rss_mb: f64,
    /// Runs per measurement.
    pub runs: usize,
}

fn text(i: usize) -> String {
    format!(
        "message {i}: the quick brown fox jumps over the lazy dog while we talk about project plans number {i}"
    )
}

/// Runs the benchmark.
pub fn run(config: &Config) -> Result<Report, Error> {
    let scratch = match &config.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let chat = |name: &str| {
        Scope::agent("bench", "bench")
            .and_then(|s| s.with_session(name))
            .map_err(memtape::Error::from)
    };
    let runs = config.runs.max(1);

    let mut single = Vec::new();
    let mut batched = Vec::new();
    for run in 0..runs {
        let engine = Engine::init(&scratch.path().join(format!("append-{run}")))?;
        let s = chat("append")?;
        let start = Instant::now();
        for i in 0..config.appends {
            engine.append(&s, Message::user(text(i)), AppendOptions::default())?;
        }
        single.push(config.appends as f64 / start.elapsed().as_secs_f64());

        let s = chat("batched")?;
        let start = Instant::now();
        let total = config.appends * 10;
        for chunk in (0..total).collect::<Vec<_>>().chunks(100) {
            engine.append_messages(&s, chunk.iter().map(|&i| Message::user(text(i))).collect())?;
        }
        batched.push(total as f64 / start.elapsed().as_secs_f64());
    }

    let engine = Engine::init(&scratch.path().join("large"))?;
    let s = chat("large")?;
    let start = Instant::now();
    for chunk in (0..config.messages).collect::<Vec<_>>().chunks(1000) {
        let batch = chunk
            .iter()
            .map(|&i| {
                if i % 2 == 0 {
                    Message::user(text(i))
                } else {
                    Message::assistant(text(i))
                }
            })
            .collect();
        engine.append_messages(&s, batch)?;
    }
    let build_s = start.elapsed().as_secs_f64();

    let time = |limits: HistoryLimits| -> Result<Vec<f64>, Error> {
        let mut ms = Vec::new();
        for _ in 0..runs * 20 {
            let start = Instant::now();
            std::hint::black_box(engine.history(&s, &limits)?);
            ms.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(ms)
    };
    let mut plain = time(HistoryLimits::default())?;
    let mut tokens = time(HistoryLimits {
        max_messages: 500,
        max_tokens: Some(4000),
    })?;
    let db = engine.store().path();
    let db_mb = [db.to_path_buf(), db.with_extension("db-wal")]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len() as f64)
        .sum::<f64>()
        / 1e6;

    Ok(Report {
        append_entries_per_s: median(&mut single),
        append_batched_entries_per_s: median(&mut batched),
        session_messages: config.messages,
        build_s,
        history_ms_p50: quantile(&mut plain, 0.5),
        history_ms_p95: quantile(&mut plain, 0.95),
        history_tokens_ms_p50: quantile(&mut tokens, 0.5),
        history_tokens_ms_p95: quantile(&mut tokens, 0.95),
        db_mb,
        peak_rss_mb: peak_rss_mb(),
        runs,
    })
}
