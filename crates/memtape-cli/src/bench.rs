//! `memtape bench …`: the benchmarks behind docs/benchmarks.md (store, LoCoMo retrieval and
//! question answering, scale, context stability). Reports are JSON on stdout (and in
//! `--out`), summaries on stderr, progress on a terminal.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use memtape::Mode;
use serde::Serialize;

use crate::context::ContextBenchArgs;
use crate::ctx::{Ctx, ModelArgs, ModelName};
use crate::output;
use crate::progress::Progress;
use crate::retrieval::{ModeArg, Tuning, embedder};

/// Where the scale benchmark's vectors come from.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorsArg {
    /// The WordLlama model (256 dimensions).
    Wordllama,
    /// all-MiniLM-L6-v2 (384 dimensions; about a hundred times slower to embed with).
    Minilm,
    /// Seeded random word vectors (no model files needed).
    Synthetic,
}

impl VectorsArg {
    /// The model that makes the vectors (`None` for the synthetic ones).
    fn model(self) -> Option<ModelName> {
        match self {
            VectorsArg::Wordllama => Some(ModelName::Wordllama),
            VectorsArg::Minilm => Some(ModelName::Minilm),
            VectorsArg::Synthetic => None,
        }
    }
}

/// `memtape bench …`.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Prompt-prefix stability over a scripted conversation (what LLM prompt caches reuse).
    Context(ContextBenchArgs),
    /// Durable append throughput and get_history latency on a large session.
    Store(StoreBenchArgs),
    /// Erasing one user from a larger tape: time in its parts, and what it holds up.
    Erase(EraseBenchArgs),
    /// Retrieval quality and speed on a LoCoMo-format file (../shared/bench/PROTOCOL.md).
    Locomo(LocomoBenchArgs),
    /// Question answering on a LoCoMo-format file: the configured model answers from the
    /// top K turns memtape retrieves and judges its answers (mem0's J metric).
    LocomoQa(LocomoQaArgs),
    /// Ingest rate, index size, memory and query latency on synthetic tapes.
    Scale(ScaleArgs),
    /// Load on `memtape serve` over loopback: saturation and a fixed offered rate.
    Serve(crate::bench_serve::ServeBenchArgs),
    /// Two servers on one PostgreSQL database: how long after server A acknowledges an
    /// append server B finds it, by BM25 and by vector search (p50/p99).
    Follow(crate::bench_follow::FollowBenchArgs),
}

/// `memtape bench erase`.
#[derive(Args)]
pub struct EraseBenchArgs {
    /// Entries on the tape in all.
    #[arg(long, default_value_t = 1_000_000)]
    entries: usize,
    /// How many of them belong to the user erased.
    #[arg(long, default_value_t = 100_000)]
    user_entries: usize,
    /// Without a search index (the store's part alone).
    #[arg(long)]
    no_index: bool,
    /// Without another user appending meanwhile (the erasure's own time, uncontended).
    #[arg(long)]
    no_appends: bool,
    /// Where to put the scratch store (default: a temporary directory).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Run on this PostgreSQL cluster instead of SQLite (a role that may create
    /// databases): a scratch database is made there and dropped after.
    #[arg(long)]
    database: Option<String>,
}

/// `memtape bench store`.
#[derive(Args)]
pub struct StoreBenchArgs {
    /// Messages in the large session.
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// Durable single-entry appends timed per run.
    #[arg(long, default_value_t = 2_000)]
    appends: usize,
    /// Runs (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Where to put the scratch store (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// What `memtape bench locomo` and `locomo-qa` share: the file, the report, the retrieval.
#[derive(Args)]
pub struct LocomoArgs {
    /// The LoCoMo-format JSON file.
    #[arg(long, value_name = "FILE")]
    data: PathBuf,
    /// Also write the JSON report here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Retrieval mode.
    #[arg(long, value_enum, default_value = "hybrid")]
    mode: ModeArg,
    /// The split's name in the report (default: the file's name without extension).
    #[arg(long)]
    split: Option<String>,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    models: ModelArgs,
}

/// `memtape bench locomo`.
#[derive(Args)]
pub struct LocomoBenchArgs {
    #[command(flatten)]
    locomo: LocomoArgs,
    /// Also write each question's ranking here (one JSON line each: the ranked turns with
    /// their scores, the evidence and the category), to study rankings offline.
    #[arg(long, value_name = "FILE")]
    rankings: Option<PathBuf>,
    /// Also rank every question under other settings, each conversation ingested once:
    /// `NAME=V1,V2,…` with NAME a ranking flag (bm25-weight, context-weight, bm25-b,
    /// neighbour-weight, …); repeated, every combination. One summary line each; the
    /// report becomes a list, the other flags' settings first. For tuning, not latency:
    /// the variants' searches skip reading the entries back.
    #[arg(long, value_name = "NAME=V1,V2")]
    sweep: Vec<String>,
}

/// `memtape bench locomo-qa`.
#[derive(Args)]
pub struct LocomoQaArgs {
    #[command(flatten)]
    locomo: LocomoArgs,
    /// How many retrieved turns the model answers from.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=50))]
    top_k: u16,
    /// Ask only the first N questions (in file order).
    #[arg(long, value_name = "N")]
    limit_questions: Option<usize>,
    /// The most tokens an answer or a verdict may have.
    #[arg(long, default_value_t = 256)]
    max_tokens: u32,
    /// Also write every question (retrieved turns, answer, verdict) here, one JSON line each.
    #[arg(long, value_name = "FILE")]
    answers: Option<PathBuf>,
}

/// How `bench scale` indexes its appends.
#[derive(Clone, Copy, clap::ValueEnum)]
enum IngestArg {
    /// Before each append returns.
    Write,
    /// Behind the appends, on the server's indexer threads.
    Server,
}

/// `memtape bench scale`.
#[derive(Args)]
pub struct ScaleArgs {
    /// Tape sizes in entries.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000, 1_000_000])]
    sizes: Vec<usize>,
    /// Also write the JSON report here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Where vectors come from.
    #[arg(long, value_enum, default_value = "wordllama")]
    vectors: VectorsArg,
    /// Put the tape in PostgreSQL: a cluster address whose role may create databases (a
    /// new database per size, dropped after it). Default: the embedded SQLite store.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
    /// Spread the entries over this many tenants, their sizes skewed (Zipf), each query
    /// searching one tenant.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    tenants: u32,
    /// Searches timed in each mode (BM25, vector, hybrid) and, with more than one tenant,
    /// once more each on a loaded shard (the warm pass); the first 50 also measure the
    /// vector search's recall. More give a steadier p95.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(50..=100_000))]
    queries: u32,
    /// How the entries are indexed as they are appended: `write` brings the index up to
    /// date before each append returns (the library's default); `server` as `memtape
    /// serve` does, an append acknowledged once durable and the index following on the
    /// server's indexer and embedder threads (the ingest then ends when it has caught up).
    #[arg(long, value_enum, default_value = "write")]
    ingest: IngestArg,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    models: ModelArgs,
}

/// Prints a benchmark's JSON report, and writes it (indented) to `out` too when given.
pub fn write_report(
    report: &impl Serialize,
    out: Option<&Path>,
    stdout: &mut impl Write,
) -> Result<()> {
    if let Some(path) = out {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, format!("{text}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    output::json(stdout, report)
}

/// What the LoCoMo summary's columns mean, printed under it.
const LOCOMO_LEGEND: &str = "\
R@k: the share of a question's evidence turns found in the top k hits (mean over questions)
NDCG@10: how near the top the evidence ranks in the top 10 (1 = first, 0 = not there)
sessR@5: the share of a question's evidence sessions among the first 5 sessions hit";

/// `memtape bench …`.
pub fn bench(ctx: &Ctx, command: &BenchCommand, out: &mut impl Write) -> Result<()> {
    match command {
        BenchCommand::Context(args) => crate::context::bench(ctx, args, out),
        BenchCommand::Erase(a) => {
            if a.user_entries == 0 || a.user_entries > a.entries {
                anyhow::bail!("--user-entries must be between 1 and --entries");
            }
            let progress = Progress::spinner(
                ctx,
                &format!(
                    "writing {} entries, then erasing a user's {}",
                    a.entries, a.user_entries
                ),
            );
            let report = memtape_bench::erase::run(&memtape_bench::erase::Config {
                entries: a.entries,
                user_entries: a.user_entries,
                index: !a.no_index,
                appends: !a.no_appends,
                dir: a.dir.clone(),
                database: a.database.clone(),
            })?;
            progress.finish();
            output::json(out, &report)
        }
        BenchCommand::Store(a) => {
            let progress = Progress::spinner(
                ctx,
                &format!(
                    "appending {} messages, then timing appends and history",
                    a.messages
                ),
            );
            let report = memtape_bench::store::run(&memtape_bench::store::Config {
                messages: a.messages,
                appends: a.appends,
                runs: a.runs,
                dir: a.dir.clone(),
            })?;
            progress.finish();
            output::json(out, &report)
        }
        BenchCommand::Locomo(LocomoBenchArgs {
            locomo: a,
            rankings,
            sweep,
        }) => {
            let ctx = ctx.clone().models(&a.models);
            let config = locomo_config(&ctx, a)?;
            let variants = a
                .tuning
                .sweep(sweep)
                .map_err(|e| anyhow::anyhow!("--sweep: {e}"))?;
            let progress = Progress::spinner(
                &ctx,
                &format!("LoCoMo: indexing and querying {}", a.data.display()),
            );
            if sweep.is_empty() {
                let report = memtape_bench::locomo::run(&a.data, &config, rankings.as_deref())?;
                progress.finish();
                write_report(&report, a.out.as_deref(), out)?;
                if !ctx.quiet {
                    eprintln!("{}\n{LOCOMO_LEGEND}", report.summary());
                }
                return Ok(());
            }
            let configs: Vec<_> = variants.iter().map(|(_, c)| *c).collect();
            let reports =
                memtape_bench::locomo::sweep(&a.data, &config, &configs, rankings.as_deref())?;
            progress.finish();
            write_report(&reports, a.out.as_deref(), out)?;
            // The base settings first, then each variant with what it changed.
            let labels = std::iter::once("(flags)").chain(variants.iter().map(|(l, _)| l.as_str()));
            for (label, report) in labels.zip(&reports).filter(|_| !ctx.quiet) {
                let o = &report.metrics.overall;
                eprintln!(
                    "{label}: R@5 {:.3} R@10 {:.3} NDCG@10 {:.3} sessR@5 {:.3}",
                    o.recall_5, o.recall_10, o.ndcg_10, o.session_recall_5
                );
            }
            Ok(())
        }
        BenchCommand::LocomoQa(a) => locomo_qa(ctx, a, out),
        BenchCommand::Serve(a) => crate::bench_serve::run(ctx, a, out),
        BenchCommand::Follow(a) => crate::bench_follow::run(ctx, a, out),
        BenchCommand::Scale(a) => {
            let mut ctx = ctx.clone().models(&a.models);
            let embedder = match a.vectors.model() {
                None => None,
                Some(model) => {
                    ctx.models.model = model;
                    embedder(&ctx)?
                }
            };
            let config = memtape_bench::scale::Config {
                sizes: a.sizes.clone(),
                index: a.tuning.index_config(),
                embedder,
                database: a.database.clone(),
                tenants: a.tenants as usize,
                index_memory: a.tuning.index_memory,
                server_ingest: matches!(a.ingest, IngestArg::Server),
                queries: a.queries as usize,
            };
            let progress = Progress::spinner(&ctx, "scale: building the first tape");
            // A run logged to a file (a 10M point takes an hour) still says how far it got.
            let logged = !progress.shown() && ctx.progress();
            let report = memtape_bench::scale::run(&config, &mut |line| {
                if logged {
                    eprintln!("{line}");
                }
                progress.println(line);
                progress.message(line);
            })?;
            progress.finish();
            write_report(&report, a.out.as_deref(), out)
        }
    }
}

/// The retrieval settings `memtape bench locomo` and `locomo-qa` run with.
fn locomo_config(ctx: &Ctx, a: &LocomoArgs) -> Result<memtape_bench::locomo::Config> {
    let split = a.split.clone().unwrap_or_else(|| {
        a.data
            .file_stem()
            .map_or("locomo".into(), |s| s.to_string_lossy().into_owned())
    });
    let mode = Mode::from(a.mode);
    let embedder = match mode {
        Mode::Bm25 => None,
        _ => embedder(ctx)?,
    };
    Ok(memtape_bench::locomo::Config {
        mode,
        embedder,
        index: a.tuning.index_config(),
        split,
    })
}

/// What the LoCoMo QA summary's columns mean, printed under it.
const LOCOMO_QA_LEGEND: &str = "\
J: the share of questions the judge found CORRECT (failed and unparseable count as wrong), by category
recall@k: the share of a question's evidence turns among the k the model answered from
tokens: prompt+completion, as the provider counted them";

/// `memtape bench locomo-qa`: refuses to start without a configured model.
fn locomo_qa(ctx: &Ctx, a: &LocomoQaArgs, out: &mut impl Write) -> Result<()> {
    let ctx = ctx.clone().models(&a.locomo.models);
    let config_file = crate::config::load(&ctx)?;
    let llm = config_file.require_llm()?;
    let config = memtape_bench::locomo_qa::Config {
        retrieval: locomo_config(&ctx, &a.locomo)?,
        top_k: a.top_k.into(),
        limit_questions: a.limit_questions,
        max_tokens: Some(a.max_tokens),
    };
    let progress = Progress::spinner(
        &ctx,
        &format!(
            "LoCoMo QA: {} with {}",
            a.locomo.data.display(),
            llm.model()
        ),
    );
    let report =
        memtape_bench::locomo_qa::run(&a.locomo.data, &config, llm.as_ref(), &mut |line| {
            progress.message(line);
        });
    progress.finish();
    let report = match report {
        Ok(r) => r,
        Err(e @ memtape_bench::Error::Llm(_)) => {
            return Err(anyhow::Error::new(e).context(format!(
                "LoCoMo QA could not use the model {}: check MEMTAPE_LLM_BASE_URL, \
                 MEMTAPE_LLM_MODEL and MEMTAPE_LLM_API_KEY (or [llm] in {})",
                llm.model(),
                config_file.path.display()
            )));
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(path) = &a.answers {
        let mut text = String::new();
        for q in &report.questions {
            text.push_str(&serde_json::to_string(q)?);
            text.push('\n');
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    write_report(&report, a.locomo.out.as_deref(), out)?;
    if !ctx.quiet {
        eprintln!("{}\n{LOCOMO_QA_LEGEND}", report.summary());
    }
    Ok(())
}
