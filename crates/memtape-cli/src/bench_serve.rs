//! `memtape bench serve`: starts `memtape serve` on a scratch data directory (or targets a
//! running server with `--url`), loads it over loopback (saturation at each `--clients`
//! level, then a fixed offered rate), and reports per operation throughput, p50/p95/p99 and
//! errors, the server's peak memory, and whether every acknowledged append is on the tape
//! (and, with `--wal`, whether what the WAL captured from each is in SESSION-STATE.md).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use memtape::{EntryId, Store};
use memtape_bench::serve::{RunReport, Target, fixed_rate, saturation};
use serde::Serialize;

use crate::bench::write_report;
use crate::ctx::{Ctx, ModelArgs};

/// `memtape bench serve`.
#[derive(Args)]
pub struct ServeBenchArgs {
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 60)]
    seconds: u32,
    /// Saturation runs: this many concurrent clients each (comma-separated; `0` for none,
    /// to run the fixed rate alone on a fresh store).
    #[arg(long, value_delimiter = ',', default_values_t = [16, 64])]
    clients: Vec<usize>,
    /// Saturation mix: appends, searches, context builds (weights).
    #[arg(long, value_parser = parse_mix, default_value = "8,1,1")]
    mix: [usize; 3],
    /// Fixed-rate run: appends per second.
    #[arg(long, default_value_t = 1000.0)]
    rate_append: f64,
    /// Fixed-rate run: searches per second.
    #[arg(long, default_value_t = 100.0)]
    rate_search: f64,
    /// Fixed-rate run: context builds per second.
    #[arg(long, default_value_t = 50.0)]
    rate_context: f64,
    /// Sessions the load spreads over.
    #[arg(long, default_value_t = 64)]
    sessions: usize,
    /// Appends are user messages the WAL captures (each names a number of its own), and the
    /// run ends by checking that every capture reached SESSION-STATE.md.
    #[arg(long)]
    wal: bool,
    /// With --wal: every other append is an assistant's reply (the realistic mix of a
    /// conversation: user messages captured, replies not).
    #[arg(long, requires = "wal")]
    replies: bool,
    /// Load a running server at this URL instead of starting one (then no durability check
    /// and no memory figure).
    #[arg(long)]
    url: Option<String>,
    /// The API key for `--url`.
    #[arg(long)]
    key: Option<String>,
    /// Also write the JSON report here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    #[command(flatten)]
    models: ModelArgs,
}

#[derive(Serialize)]
struct Report {
    runs: Vec<RunReport>,
    /// The server's peak resident memory, MB. It counts the pages of the search index
    /// that each reader connection maps, once per connection, so it overstates.
    server_peak_rss_mb: Option<f64>,
    /// The server's anonymous resident memory (heap, stacks) at the end of the runs, MB:
    /// what it holds beside the page cache.
    server_anon_rss_mb: Option<f64>,
    /// Appends acknowledged over all runs.
    acknowledged: usize,
    /// Of those, how many are not on the tape after the server stopped (must be 0).
    lost: Option<usize>,
    /// With `--wal`: of the acknowledged user messages, how many have no capture in
    /// SESSION-STATE.md naming them (must be 0).
    captures_lost: Option<usize>,
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx, a: &ServeBenchArgs, out: &mut impl Write) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let mut child: Option<Child> = None;
    let url = match &a.url {
        Some(u) => u.clone(),
        None => {
            let mut cmd = Command::new(std::env::current_exe()?);
            let model = ctx.clone().models(&a.models).models.model;
            cmd.arg("--model")
                .arg(
                    clap::ValueEnum::to_possible_value(&model)
                        .map_or("none".into(), |v| v.get_name().to_owned()),
                )
                .args(["serve", "--addr", "127.0.0.1:0", "--engine-calls", "64"])
                .env("MEMTAPE_DATA_DIR", scratch.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            let mut c = cmd.spawn().context("starting memtape serve")?;
            let mut line = String::new();
            BufReader::new(c.stdout.as_mut().context("no stdout")?).read_line(&mut line)?;
            let url = line
                .split_whitespace()
                .find(|w| w.starts_with("http://"))
                .context("memtape serve printed no address")?
                .to_owned();
            child = Some(c);
            url
        }
    };
    let target = Target {
        url,
        key: a.key.clone(),
        sessions: a.sessions,
        wal: a.wal,
        replies: a.replies,
    };
    let seconds = f64::from(a.seconds);
    let mix = a.mix;
    let mut runs = Vec::new();
    for &clients in a.clients.iter().filter(|c| **c > 0) {
        let run = saturation(&target, clients, seconds, mix);
        eprintln!("{}", summary(&run));
        runs.push(run);
    }
    let rates = [a.rate_append, a.rate_search, a.rate_context];
    if rates.iter().any(|r| *r > 0.0) {
        let run = fixed_rate(&target, rates, seconds);
        eprintln!("{}", summary(&run));
        runs.push(run);
    }
    let acknowledged: Vec<u64> = runs.iter().flat_map(|r| r.acknowledged.clone()).collect();
    let mut report = Report {
        runs,
        server_peak_rss_mb: None,
        server_anon_rss_mb: None,
        acknowledged: acknowledged.len(),
        lost: None,
        captures_lost: None,
    };
    if let Some(mut c) = child {
        report.server_peak_rss_mb = status_mb(c.id(), "VmHWM:");
        report.server_anon_rss_mb = status_mb(c.id(), "RssAnon:");
        let pid = c.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()?;
        let status = c.wait()?;
        if !status.success() {
            bail!("memtape serve exited with {status}");
        }
        let store = memtape::SqliteStore::open_read_only(scratch.path())?;
        let mut lost = 0;
        for chunk in acknowledged.chunks(500) {
            let ids: Vec<EntryId> = chunk.iter().map(|i| EntryId(*i)).collect();
            lost += ids.len() - store.get_many("default", &ids)?.len();
        }
        report.lost = Some(lost);
        if a.wal {
            let missing = captures_lost(scratch.path(), &acknowledged)?;
            eprintln!(
                "{missing} of the acknowledged user messages have no capture in SESSION-STATE.md"
            );
            report.captures_lost = Some(missing);
        }
        eprintln!(
            "server peak RSS {:.0} MB (anonymous at the end {:.0} MB); {} appends acknowledged, {lost} missing from the tape",
            report.server_peak_rss_mb.unwrap_or(0.0),
            report.server_anon_rss_mb.unwrap_or(0.0),
            report.acknowledged
        );
    }
    write_report(&report, a.out.as_deref(), out)
}

/// How many of the `acknowledged` user messages (in the store in `dir`) have no WAL
/// capture: no memory change of their agent, caused by them, whose SESSION-STATE.md text
/// holds the number the message names.
fn captures_lost(dir: &std::path::Path, acknowledged: &[u64]) -> Result<usize> {
    use memtape::memory::{Op, paths};
    let engine = memtape::Engine::open_read_only(dir)?;
    let (log, _) = engine.memory_log(&memtape::Scope::agent("default", "default")?)?;
    // What each cause put in SESSION-STATE.md.
    let mut state: std::collections::HashMap<EntryId, String> = Default::default();
    for r in log.changes() {
        for op in &r.change.ops {
            let text = match op {
                Op::Append { path, text, .. } if path == paths::SESSION_STATE => text,
                Op::Write { path, content } if path == paths::SESSION_STATE => content,
                _ => continue,
            };
            for id in &r.change.caused_by {
                state.entry(*id).or_default().push_str(text);
            }
        }
    }
    let mut missing = 0;
    for chunk in acknowledged.chunks(500) {
        let ids: Vec<EntryId> = chunk.iter().map(|i| EntryId(*i)).collect();
        let entries = engine.store().get_many("default", &ids)?;
        missing += ids.len() - entries.len();
        for entry in entries {
            // The assistant's replies (`--replies`) have nothing to capture.
            if entry
                .message()
                .is_none_or(|m| m.role != memtape::Role::User)
            {
                continue;
            }
            let text = entry
                .message()
                .map(|m| m.content_text())
                .unwrap_or_default();
            // "my order N ships …": the capture's line names "order N ".
            let number = text.split_whitespace().nth(2).unwrap_or("?");
            let wanted = format!("order {number} ");
            if !state.get(&entry.id).is_some_and(|s| s.contains(&wanted)) {
                missing += 1;
            }
        }
    }
    Ok(missing)
}

/// `--mix A,S,C`: three weights, not all zero.
fn parse_mix(s: &str) -> Result<[usize; 3], String> {
    let parts: Vec<&str> = s.split(',').collect();
    let weights: Vec<usize> = parts
        .iter()
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--mix takes three whole numbers like 8,1,1: {e}"))?;
    match weights[..] {
        [a, s, c] if a + s + c > 0 => Ok([a, s, c]),
        [_, _, _] => Err("--mix needs at least one weight above 0".into()),
        _ => Err(format!(
            "--mix takes three weights (appends,searches,context builds), got {}",
            weights.len()
        )),
    }
}

fn summary(r: &RunReport) -> String {
    let op = |name: &str, o: &memtape_bench::serve::OpReport| {
        format!(
            "{name} {:.0}/s p50 {:.1} p95 {:.1} p99 {:.1} ms ({} errors)",
            o.per_second, o.p50_ms, o.p95_ms, o.p99_ms, o.errors
        )
    };
    format!(
        "{} ({:.0} s): {}; {}; {}",
        r.name,
        r.seconds,
        op("append", &r.append),
        op("search", &r.search),
        op("context", &r.context)
    )
}

/// A memory figure of a process's status in MB (Linux): `VmHWM:` the peak resident
/// memory, `RssAnon:` the anonymous part of the resident memory now.
fn status_mb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}
