//! The server commands: `serve` (the REST API, MCP over HTTP and the OpenAPI document from
//! one process) and `keys` (create, list and revoke the API keys that decide a request's
//! tenant).

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use memtape_server::{AppState, KeyStore, Limits, Role};

use crate::config;
use crate::ctx::{Ctx, ModelArgs, StoreArgs};
use crate::retrieval::{Tuning, open_indexed_text_first};

/// `memtape serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen. Another address than loopback needs API keys (`memtape keys
    /// create`).
    #[arg(long, default_value = "127.0.0.1:7077")]
    addr: SocketAddr,
    /// The largest request body accepted, in MiB.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    body_limit_mib: u32,
    /// The largest file `POST /v1/files` accepts, in MiB (413 above it).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=1024))]
    upload_limit_mib: u32,
    /// How many engine calls run at once; more requests wait.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    engine_calls: u32,
    /// How long a request may take (seconds), slow clients included.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3600))]
    request_timeout: u32,
    /// How long a client may take to send a request's headers, and an idle connection may
    /// wait for its next request (seconds).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    header_timeout: u32,
    /// After SIGINT/SIGTERM, how long requests in flight may take to finish (seconds).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=600))]
    grace: u32,
    /// Threads the background indexer embeds with. A search embeds its query on a
    /// session of its own, so one thread leaves the other cores to requests.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    embed_threads: u32,
    /// Another name requests may give in their `Host` header (a name the server is reached
    /// by through a proxy or DNS), besides loopback names and the listening address; may be
    /// repeated. Without it, a server listening on every address (0.0.0.0) answers any name.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_host: Vec<String>,
    /// How many MCP sessions one API key may have open at once (idle ones close after 5
    /// minutes).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    mcp_sessions_per_key: u32,
    /// An origin (`https://app.example`) whose web pages may write to this server; may be
    /// repeated, `*` for any. Pages of other sites may not (the memory browser is the
    /// server's own).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub models: ModelArgs,
    #[command(flatten)]
    tuning: Tuning,
}

/// The names and origins `a` lets the server answer besides its own.
fn sites(a: &ServeArgs) -> Result<memtape_server::Sites> {
    let mut hosts = Vec::new();
    for name in &a.allow_host {
        let Some(host) = memtape_server::guard::host_name(name) else {
            bail!("--allow-host {name:?} is not a host name (give a name like memory.example)");
        };
        hosts.push(host);
    }
    if !a.addr.ip().is_unspecified() {
        hosts.push(a.addr.ip().to_string());
    }
    for origin in &a.allow_origin {
        let ok = origin == "*"
            || origin.split_once("://").is_some_and(|(scheme, rest)| {
                ["http", "https"].contains(&scheme)
                    && memtape_server::guard::host_name(rest.trim_end_matches('/')).is_some()
            });
        if !ok {
            bail!(
                "--allow-origin {origin:?} is not an origin (give one like https://app.example \
                 or http://localhost:3000, or *)"
            );
        }
    }
    Ok(memtape_server::Sites {
        any_host: a.addr.ip().is_unspecified() && a.allow_host.is_empty(),
        hosts,
        origins: a.allow_origin.clone(),
    })
}

/// The environment variable a program that starts `memtape serve` puts a key of its own
/// in: kept only in memory, it grants the default tenant (admin), and with it every request
/// needs a key. Not a flag, so it never shows in the process list.
pub const PROCESS_KEY_VAR: &str = "MEMTAPE_SERVE_KEY";

/// What `memtape serve --help` says of the variables only the environment sets.
pub const ENVIRONMENT: &str = "Environment:\n  MEMTAPE_SERVE_KEY  a key of this process only (at least 32 letters, digits, `_`, `-`), \
     never stored: requests carrying it act as an admin of the default tenant, and with it every \
     request needs a key (how a program that starts its own server keeps it private)";

/// `memtape serve`: opens (or creates) the store, loads the model and the index, then
/// serves until SIGINT or SIGTERM; requests in flight get `--grace` seconds to finish, then
/// the store is closed and the command exits 0.
pub fn serve(ctx: &Ctx, a: &ServeArgs, out: &mut impl Write) -> Result<()> {
    let dir = ctx.data_dir()?;
    let mut keys = KeyStore::open(&dir);
    if let Some(key) = std::env::var_os(PROCESS_KEY_VAR) {
        let key = key
            .into_string()
            .map_err(|_| anyhow::anyhow!("{PROCESS_KEY_VAR} is not UTF-8"))?;
        keys = keys
            .with_process_key(&key, memtape_server::DEFAULT_TENANT)
            .context(PROCESS_KEY_VAR)?;
    }
    let loopback = a.addr.ip().is_loopback();
    if !loopback && !keys.enabled()? {
        bail!(
            "refusing to listen on {} without API keys: anyone who can reach it could read and \
             change every memory. Create a key first with `memtape keys create --tenant T` \
             (then send it as `Authorization: Bearer KEY`), or listen on 127.0.0.1",
            a.addr
        );
    }
    drop(crate::ctx::init(ctx)?);
    // Held while serving: `memtape reindex` with another model refuses to pull the index
    // from under this server.
    let _serving = memtape::lock_serving(&dir)?;
    // The model is loaded before the runtime starts any thread (ONNX Runtime's settings
    // are made through the environment, which must not change under other threads).
    let mut ctx = ctx.clone();
    ctx.models.embed_threads = Some(a.embed_threads as usize);
    // The embedder's calls are counted for `/metrics`.
    let mut embed_counts = None;
    let engine = open_indexed_text_first(&ctx, &a.tuning, &mut |embedder| {
        let (counted, counts) = memtape_server::count_embedder(embedder);
        embed_counts = Some(counts);
        counted
    })?;
    let index = engine.index().map(|index| {
        let mut line = format!(
            "a shard per tenant, loaded when first searched or written, within {} MiB",
            index.memory_budget() >> 20
        );
        if index.vectors_are_behind() {
            line += &format!(
                "; vectors after entry {} are being embedded in the background (BM25 finds them now)",
                index.embedded().0
            );
        }
        line
    });
    let limits = Limits {
        body_bytes: a.body_limit_mib as usize * 1024 * 1024,
        engine_calls: a.engine_calls as usize,
        request_timeout: Duration::from_secs(a.request_timeout.into()),
        header_timeout: Duration::from_secs(a.header_timeout.into()),
        sites: sites(a)?,
        mcp_sessions_per_key: a.mcp_sessions_per_key as usize,
        upload_bytes: a.upload_limit_mib as usize * 1024 * 1024,
    };
    let config = config::load(&ctx)?;
    let (model, model_line) = config.server_model()?;
    let state = AppState::with_model(engine, keys, limits, loopback, model);
    state.set_data_dir(dir.clone());
    if let Some(counts) = embed_counts {
        state.set_embed_counts(counts);
    }
    state.set_retention_config(config.retention);
    state.set_mcp_erase_own_session(config.mcp.erase_own_session);
    state.set_attachments_config(config.attachments.clone());
    state.set_lifecycle_config(config.lifecycle.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(a.addr))
        .with_context(|| format!("listening on {}", a.addr))?;
    let addr = listener.local_addr()?;
    writeln!(
        out,
        "memtape serving {} on http://{addr}\n  browser   http://{addr}/  (the memory browser)\n  REST      http://{addr}/v1  (OpenAPI: http://{addr}/openapi.json)\n  MCP       http://{addr}/mcp  (or `memtape mcp` over stdio)",
        ctx.tape_place()?
    )?;
    if let Some(index) = index {
        writeln!(out, "  index     {index}")?;
    }
    writeln!(out, "  model     {model_line}")?;
    writeln!(out, "  stop with Ctrl-C")?;
    out.flush()?;
    runtime.block_on(memtape_server::serve(
        listener,
        state,
        shutdown_signal(),
        Duration::from_secs(a.grace.into()),
    ))?;
    // The state (and with it the engine and the store) is dropped with the runtime's
    // tasks: the store closes cleanly, checkpointing its write-ahead log. Engine work still
    // running after the grace (a model call that has not answered) is given a moment more,
    // then left behind: the exit is bounded. What it had not committed is not on the tape
    // (every write is one transaction), and its request was never answered.
    runtime.shutdown_timeout(SHUTDOWN_WAIT);
    writeln!(out, "memtape stopped")?;
    Ok(())
}

/// How long engine work still running after the grace may take before the process exits
/// without it.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}

/// `memtape keys`.
#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Create a key for a tenant; prints it once (only its hash is kept).
    Create(CreateArgs),
    /// List the keys (ids, tenants, roles; never the keys themselves).
    List(ListArgs),
    /// Revoke a key by its id (or the key itself); it stops working at once.
    Revoke(RevokeArgs),
}

impl KeysCommand {
    /// The data directory option the subcommand was given.
    pub fn store(&self) -> &StoreArgs {
        match self {
            KeysCommand::Create(a) => &a.store,
            KeysCommand::List(a) => &a.store,
            KeysCommand::Revoke(a) => &a.store,
        }
    }
}

/// `memtape keys create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The tenant the key gives access to.
    #[arg(long)]
    tenant: String,
    /// What it may do: read, write or admin.
    #[arg(long, default_value = "write", value_parser = parse_role)]
    role: Role,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `memtape keys list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `memtape keys revoke`.
#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// The key's id (as `keys list` shows it) or the key.
    id: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

fn parse_role(s: &str) -> Result<Role, String> {
    s.parse()
}

/// Runs a `keys` subcommand.
pub fn keys(ctx: &Ctx, command: &KeysCommand, out: &mut impl Write) -> Result<()> {
    let dir = ctx.data_dir()?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let store = KeyStore::open(&dir);
    match command {
        KeysCommand::Create(a) => {
            let (key, record) = store.create(&a.tenant, a.role)?;
            writeln!(out, "{key}")?;
            eprintln!(
                "key {} for tenant {} ({}); shown once: store it now",
                record.id, record.tenant, record.role
            );
        }
        KeysCommand::List(a) => {
            let keys = store.list()?;
            if a.json {
                let list: Vec<_> = keys
                    .iter()
                    .map(|k| {
                        serde_json::json!({
                            "id": k.id,
                            "tenant": k.tenant,
                            "role": k.role,
                            "created_at": k.created_at.to_rfc3339(),
                            "revoked_at": k.revoked_at.map(|t| t.to_rfc3339()),
                        })
                    })
                    .collect();
                writeln!(out, "{}", serde_json::Value::Array(list))?;
            } else {
                for k in &keys {
                    let state = k
                        .revoked_at
                        .map_or_else(|| "active".to_owned(), |t| format!("revoked {t}"));
                    writeln!(out, "{}  {}  {}  {state}", k.id, k.tenant, k.role)?;
                }
            }
        }
        KeysCommand::Revoke(a) => {
            let record = store.revoke(&a.id)?;
            writeln!(out, "revoked {} (tenant {})", record.id, record.tenant)?;
        }
    }
    Ok(())
}
