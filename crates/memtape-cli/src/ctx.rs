//! The options a command runs with: the data directory (and the database, when the tape
//! lives in PostgreSQL), the scope (tenant, agent, user),
//! the embedding model and how talkative to be. Each subcommand takes only the groups it
//! uses (flattened [`StoreArgs`], [`ScopeArgs`], [`ModelArgs`]), so its `--help` lists only
//! what applies; the same options are still accepted before the subcommand, as older
//! scripts write them. The resolved values are one [`Ctx`]; [`open`] opens its store.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};
use memtape::{DynStore, Engine, Scope, SqliteStore, Store};
use memtape_postgres::PostgresStore;

/// `MEMTAPE_DATA_DIR`: the data directory when `--data-dir` is not given.
const DATA_DIR_ENV: &str = "MEMTAPE_DATA_DIR";
/// `MEMTAPE_DATABASE_URL`: the database holding the tape when `--database` is not given.
pub const DATABASE_ENV: &str = "MEMTAPE_DATABASE_URL";
/// `MEMTAPE_MODEL`: the embedding model when `--model` is not given.
const MODEL_ENV: &str = "MEMTAPE_MODEL";
/// `MEMTAPE_MODEL_DIR`: a local folder of model files.
const MODEL_DIR_ENV: &str = "MEMTAPE_MODEL_DIR";
/// `MEMTAPE_MODELS`: the model cache.
const MODELS_ENV: &str = "MEMTAPE_MODELS";

/// Where the options every command takes (`-q`, `-v`) are listed in a command's help:
/// after its own.
const LAST: usize = 1000;

/// Options of the `memtape` command itself. The scope, data directory and model options
/// are hidden here: each subcommand that uses them lists them.
#[derive(Args, Debug, Default)]
pub struct Globals {
    /// Show no progress and no summaries on stderr (results and errors still print).
    #[arg(long, short, global = true, display_order = LAST)]
    pub quiet: bool,
    /// Say more on stderr: how a command got its result (`memtape chat`'s tool calls and
    /// memory checks), and the output of the tools memtape runs (pip, the model hub client).
    #[arg(long, short, global = true, conflicts_with = "quiet", display_order = LAST)]
    pub verbose: bool,
    #[arg(long, hide = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[arg(long, hide = true, value_name = "URL")]
    database: Option<String>,
    #[arg(long, hide = true)]
    tenant: Option<String>,
    #[arg(long, hide = true)]
    agent: Option<String>,
    #[arg(long, hide = true)]
    user: Option<String>,
    #[arg(long, hide = true, value_enum)]
    model: Option<ModelName>,
    #[arg(long, hide = true, value_name = "DIR")]
    model_dir: Option<PathBuf>,
    #[arg(long, hide = true, value_name = "DIR")]
    models_cache: Option<PathBuf>,
}

/// Where the store lives.
#[derive(Args, Clone, Debug, Default)]
pub struct StoreArgs {
    /// Where the store lives [env: MEMTAPE_DATA_DIR] (default: the platform's data
    /// directory, e.g. ~/.local/share/memtape).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The PostgreSQL database holding the tape, `postgres://user:password@host:port/db`
    /// [env: MEMTAPE_DATABASE_URL] (default: the SQLite store in the data directory). The
    /// data directory then holds only this node's projections: the search index and the
    /// markdown workspace.
    #[arg(long, global = true, value_name = "URL")]
    database: Option<String>,
}

/// Whose data: the store and the scope in it.
#[derive(Args, Clone, Debug, Default)]
pub struct ScopeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The tenant whose data to use [default: default].
    #[arg(long, global = true)]
    tenant: Option<String>,
    /// The agent whose memory and sessions to use [default: default].
    #[arg(long, global = true)]
    agent: Option<String>,
    /// Narrow to one user of the agent.
    #[arg(long, global = true)]
    user: Option<String>,
}

/// The embedding models memtape knows, and none (BM25 only).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ModelName {
    /// all-MiniLM-L6-v2 on ONNX Runtime (int8).
    #[default]
    Minilm,
    /// WordLlama's static word vectors.
    Wordllama,
    /// No embeddings: search with BM25 only.
    None,
}

/// Which embedding model to use and where its files are.
#[derive(Args, Clone, Debug, Default)]
pub struct ModelArgs {
    /// The embedding model [env: MEMTAPE_MODEL] [default: minilm].
    #[arg(long, global = true, value_enum)]
    model: Option<ModelName>,
    /// A folder holding the model files, used before the model cache
    /// [env: MEMTAPE_MODEL_DIR].
    #[arg(long, global = true, value_name = "DIR")]
    model_dir: Option<PathBuf>,
    /// The model cache, shared by every data directory [env: MEMTAPE_MODELS] (default: the
    /// platform's data directory, e.g. ~/.local/share/memtape/models).
    #[arg(long, global = true, value_name = "DIR")]
    models_cache: Option<PathBuf>,
}

/// The model settings, resolved.
#[derive(Clone, Debug, Default)]
pub struct Models {
    /// The model, or [`ModelName::None`].
    pub model: ModelName,
    /// A local folder of model files.
    pub model_dir: Option<PathBuf>,
    /// The model cache, when given.
    pub models_cache: Option<PathBuf>,
    /// How many threads a batch of texts is embedded with (default 2; `memtape serve`
    /// sets its own).
    pub embed_threads: Option<usize>,
}

/// Everything a command runs with, resolved: a subcommand's own options, else the same
/// options before the subcommand, else the environment, else the defaults.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// No progress and no summaries on stderr.
    pub quiet: bool,
    /// Say more on stderr: internal notes, pip's and the hub client's own output.
    pub verbose: bool,
    data_dir: Option<PathBuf>,
    /// The PostgreSQL database holding the tape, when not the data directory's SQLite.
    database: Option<String>,
    /// The tenant.
    pub tenant: String,
    /// The agent.
    pub agent: String,
    /// The user, when narrowed to one.
    pub user: Option<String>,
    /// The embedding model settings.
    pub models: Models,
}

/// An environment variable's value, unless it is unset or empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Ctx {
    /// The options given before the subcommand, over the environment and the defaults.
    pub fn new(g: &Globals) -> Result<Ctx> {
        let model = match (g.model, env(MODEL_ENV)) {
            (Some(m), _) => m,
            (None, Some(name)) => ModelName::from_str(&name, true).map_err(|_| {
                anyhow::anyhow!("{MODEL_ENV}={name:?} is not a model (minilm, wordllama or none)")
            })?,
            (None, None) => ModelName::default(),
        };
        Ok(Ctx {
            quiet: g.quiet,
            verbose: g.verbose,
            data_dir: g
                .data_dir
                .clone()
                .or_else(|| env(DATA_DIR_ENV).map(PathBuf::from)),
            database: g.database.clone().or_else(|| env(DATABASE_ENV)),
            tenant: g.tenant.clone().unwrap_or_else(|| "default".into()),
            agent: g.agent.clone().unwrap_or_else(|| "default".into()),
            user: g.user.clone(),
            models: Models {
                model,
                model_dir: g
                    .model_dir
                    .clone()
                    .or_else(|| env(MODEL_DIR_ENV).map(PathBuf::from)),
                models_cache: g
                    .models_cache
                    .clone()
                    .or_else(|| env(MODELS_ENV).map(PathBuf::from)),
                embed_threads: None,
            },
        })
    }

    /// With a subcommand's `--data-dir` and `--database`.
    pub fn store(mut self, a: &StoreArgs) -> Ctx {
        if let Some(d) = &a.data_dir {
            self.data_dir = Some(d.clone());
        }
        if let Some(d) = &a.database {
            self.database = Some(d.clone());
        }
        self
    }

    /// Whether the tape is in a PostgreSQL database (the data directory then holds only
    /// this node's projections, and may be created by any command).
    pub fn uses_database(&self) -> bool {
        self.database.is_some()
    }

    /// Where the tape is, for messages: the database's address (without its password), or
    /// the data directory.
    pub fn tape_place(&self) -> Result<String> {
        Ok(match &self.database {
            Some(url) => memtape_postgres::shown(url),
            None => self.data_dir()?.display().to_string(),
        })
    }

    /// With a subcommand's data directory and scope options.
    pub fn scope(mut self, a: &ScopeArgs) -> Ctx {
        self = self.store(&a.store);
        if let Some(t) = &a.tenant {
            self.tenant = t.clone();
        }
        if let Some(t) = &a.agent {
            self.agent = t.clone();
        }
        if let Some(u) = &a.user {
            self.user = Some(u.clone());
        }
        self
    }

    /// With a subcommand's model options.
    pub fn models(mut self, a: &ModelArgs) -> Ctx {
        if let Some(m) = a.model {
            self.models.model = m;
        }
        if let Some(d) = &a.model_dir {
            self.models.model_dir = Some(d.clone());
        }
        if let Some(d) = &a.models_cache {
            self.models.models_cache = Some(d.clone());
        }
        self
    }

    /// The data directory.
    pub fn data_dir(&self) -> Result<PathBuf> {
        match &self.data_dir {
            Some(d) => Ok(d.clone()),
            None => Ok(dirs::data_dir()
                .context(
                    "no platform data directory here: pass --data-dir or set MEMTAPE_DATA_DIR",
                )?
                .join("memtape")),
        }
    }

    /// The agent scope, or the agent's user when `--user` is given.
    pub fn base_scope(&self) -> Result<Scope> {
        let scope = Scope::agent(self.tenant.clone(), self.agent.clone())?;
        Ok(match &self.user {
            Some(u) => scope.with_user(u.clone())?,
            None => scope,
        })
    }

    /// A session of the base scope.
    pub fn session_scope(&self, session: &str) -> Result<Scope> {
        Ok(self.base_scope()?.with_session(session)?)
    }

    /// Whether progress may be drawn: not `--quiet` (indicatif itself draws only on a
    /// terminal).
    pub fn progress(&self) -> bool {
        !self.quiet
    }
}

/// How a command opens its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opening {
    /// Creates the store when there is none (a new data directory, or a database without
    /// memtape's tables).
    Create,
    /// The store must exist.
    Open,
    /// Reads only: nothing is written.
    ReadOnly,
}

fn store(ctx: &Ctx, how: Opening) -> Result<DynStore> {
    if let Some(url) = &ctx.database {
        if !memtape_postgres::is_postgres_url(url) {
            bail!(
                "--database {:?} is not a PostgreSQL address: write postgres://user:password@host:port/database \
                 (leave it out to keep the tape in the data directory's SQLite file)",
                memtape_postgres::shown(url)
            );
        }
        // A database without memtape's tables gets them on the first open that may write
        // (a server, an append): there is no file whose absence would mean a typo.
        let store = match how {
            Opening::ReadOnly => PostgresStore::connect_read_only(url)?,
            Opening::Create | Opening::Open => PostgresStore::connect(url)?,
        };
        return Ok(Box::new(store));
    }
    let dir = ctx.data_dir()?;
    Ok(match how {
        Opening::Create => Box::new(SqliteStore::create(&dir)?),
        Opening::Open => Box::new(SqliteStore::open(&dir)?),
        Opening::ReadOnly => Box::new(SqliteStore::open_read_only(&dir)?),
    })
}

/// Creates the store of `ctx` when there is none, and opens it: the data directory is made
/// (with a database, it holds the node's projections: the search index and the markdown
/// workspace).
pub fn init(ctx: &Ctx) -> Result<Engine<DynStore>> {
    let dir = ctx.data_dir()?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let store = store(ctx, Opening::Create).with_context(|| {
        format!(
            "opening the store at {}",
            ctx.tape_place().unwrap_or_default()
        )
    })?;
    finish_erasures(Engine::with_store(store), &dir)
}

/// Opens the store of `ctx`.
pub fn open(ctx: &Ctx) -> Result<Engine<DynStore>> {
    let engine = Engine::with_store(store(ctx, Opening::Open)?);
    finish_erasures(engine, &ctx.data_dir()?)
}

/// Finishes the erasures a stopped process left unfinished before a command that writes
/// goes on ([`Engine::finish_erasures`]; one read when there are none).
fn finish_erasures(engine: Engine<DynStore>, dir: &std::path::Path) -> Result<Engine<DynStore>> {
    for outcome in engine
        .finish_erasures(Some(dir))
        .context("finishing an erasure that a stopped process had begun")?
    {
        tracing::info!(
            receipt = outcome.receipt.as_ref().map(|r| r.id.0),
            entries = outcome.entries,
            "finished an erasure that a stopped process had begun"
        );
    }
    Ok(engine)
}

/// Opens the store for a command that only reads: nothing is written, so it works on a
/// full or read-only disk (a backup can always be taken).
pub fn open_read_only(ctx: &Ctx) -> Result<Engine<DynStore>> {
    Ok(Engine::with_store(store(ctx, Opening::ReadOnly)?))
}

/// The scope of an existing session: a session with no entries at all is an error that
/// names it, so a typo does not read as an empty session.
pub fn existing_session(engine: &Engine<DynStore>, ctx: &Ctx, session: &str) -> Result<Scope> {
    let scope = ctx.session_scope(session)?;
    if engine.store().scope_info(&scope)?.is_none() {
        let user = ctx
            .user
            .as_deref()
            .map_or(String::new(), |u| format!(", user {u}"));
        bail!(
            "no session {session} (tenant {}, agent {}{user}); `memtape sessions` lists them",
            ctx.tenant,
            ctx.agent
        );
    }
    Ok(scope)
}
