//! The server's shared state: the engine behind a bounded pool of blocking threads (the
//! engine is synchronous and never runs on the async runtime's threads), the API keys, the
//! limits, and who is calling.

use std::sync::{Arc, Weak};

use memtape::{
    Background, DynStore, Engine, Entry, LifecycleConfig, NewEntry, Payload, Scope, Store,
    StoreLock, WriteHook, events,
};
use memtape_llm::Llm;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, broadcast};
use utoipa::ToSchema;

use crate::appender::Appender;
use crate::error::{ApiError, Result};
use crate::indexer::Indexer;
use crate::keys::KeyStore;
use crate::metrics::{Metrics, ModelUse};

/// What a key may do. Each role includes the ones before it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read history, memory, search, export.
    Read,
    /// Also append, change memory, import, call tools.
    Write,
    /// Also whole-store operations.
    Admin,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        })
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            other => Err(format!("unknown role {other:?} (read, write or admin)")),
        }
    }
}

/// Who is calling: the tenant their key belongs to (the single tenant `default` when the
/// server runs without keys on loopback) and what they may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The tenant every request of this caller is confined to.
    pub tenant: String,
    /// What the caller may do.
    pub role: Role,
    /// The key's public id (`None` without keys: the local user on loopback, stdio MCP),
    /// as an erasure's receipt names who erased.
    pub key: Option<String>,
}

impl Caller {
    /// Who the caller is on a receipt: `key:<id>`, or `local` without a key.
    pub fn who(&self) -> String {
        self.key
            .as_ref()
            .map_or_else(|| "local".to_owned(), |id| format!("key:{id}"))
    }
}

impl Caller {
    /// Refuses with 403 unless the caller's role is at least `role`.
    pub fn require(&self, role: Role) -> Result<()> {
        if self.role >= role {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "this key is {}; this needs a {role} key",
                self.role
            )))
        }
    }

    /// The agent scope `agent` (and `user`) of the caller's tenant.
    pub fn scope(&self, agent: &str, user: Option<&str>) -> Result<Scope> {
        let scope = Scope::agent(&self.tenant, agent)?;
        Ok(match user {
            Some(u) => scope.with_user(u)?,
            None => scope,
        })
    }
}

/// The server's limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The largest request body accepted, in bytes (413 above it).
    pub body_bytes: usize,
    /// How many engine calls run at once on the blocking pool; the others wait.
    pub engine_calls: usize,
    /// How long a request may take once its headers are in, body included, before it is
    /// answered 408 (slow clients).
    pub request_timeout: std::time::Duration,
    /// How long a client may take to send a request's headers (and an idle keep-alive
    /// connection may wait for the next request) before the connection is closed: a
    /// slowloris client cannot hold connections open.
    pub header_timeout: std::time::Duration,
    /// The names and origins served besides the server's own ([`crate::guard`]).
    pub sites: crate::guard::Sites,
    /// How many MCP sessions one key may have open at once (429 past it).
    pub mcp_sessions_per_key: usize,
    /// The largest file `POST /v1/files` accepts, in bytes (413 above it).
    pub upload_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: 8 * 1024 * 1024,
            engine_calls: 32,
            request_timeout: std::time::Duration::from_secs(30),
            header_timeout: std::time::Duration::from_secs(10),
            sites: crate::guard::Sites::default(),
            mcp_sessions_per_key: 64,
            upload_bytes: 15 * 1024 * 1024,
        }
    }
}

/// The state every handler shares.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    // Declared first, so it is dropped first: its writer thread finishes the appends
    // queued and lets go of the engine before the store closes.
    appender: Appender,
    // Then the indexer, stopped between two batches.
    indexer: Indexer,
    engine: Arc<Engine<DynStore>>,
    permits: Arc<Semaphore>,
    keys: KeyStore,
    limits: Limits,
    loopback: bool,
    memory_changed: broadcast::Sender<Scope>,
    background: Option<Arc<Background<DynStore>>>,
    /// The model as configured, uncounted: each use is counted under its own kind
    /// ([`AppState::model`]).
    llm: Option<Arc<dyn Llm>>,
    /// What `/metrics` reports.
    metrics: Arc<Metrics>,
    /// The emergence scheduler's lock, once this server holds it: of all the servers on
    /// one store (several on one PostgreSQL database), only its holder runs the schedule,
    /// so a slot runs once. It passes to another server when this one stops or dies.
    scheduler: Arc<std::sync::Mutex<Option<StoreLock>>>,
    /// User messages stored whose WAL capture could not be recorded (a full disk), by
    /// tenant and entry id: retried from the tape ([`AppState::retry_captures`]).
    uncaptured: std::sync::Mutex<std::collections::BTreeSet<(String, memtape::EntryId)>>,
    /// The MCP sessions each key has open.
    mcp_sessions: Arc<crate::mcp::limit::Sessions>,
    /// The data directory, when the store has one: an erasure brings its markdown
    /// workspaces along ([`AppState::set_data_dir`]).
    data_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// The retention policies of memtape.toml and their schedule
    /// ([`AppState::set_retention_config`]).
    retention: std::sync::OnceLock<memtape::RetentionConfig>,
    /// The retention scheduler's lock, once this server holds it (as the emergence
    /// scheduler's): one server of a store runs the schedule.
    retention_scheduler: Arc<std::sync::Mutex<Option<StoreLock>>>,
    /// Whether MCP offers `tape_erase_session` ([`AppState::set_mcp_erase_own_session`]).
    mcp_erase: std::sync::atomic::AtomicBool,
    /// How attached files are rebuilt into content parts ([`AppState::set_attachments_config`]).
    attachments: std::sync::OnceLock<memtape::AttachmentsConfig>,
    /// memtape.toml's `[lifecycle]`, when set without a model
    /// ([`AppState::set_lifecycle_config`]).
    lifecycle: std::sync::OnceLock<LifecycleConfig>,
}

/// At most this many failed captures wait for a retry (the oldest give way, logged).
const UNCAPTURED_MAX: usize = 100_000;

/// The model a server keeps memory with, and how (`[llm]` and `[lifecycle]` of
/// memtape.toml).
#[derive(Clone)]
pub struct ModelSetup {
    /// The model.
    pub llm: Arc<dyn Llm>,
    /// When and how the lifecycle runs.
    pub lifecycle: LifecycleConfig,
}

/// The scheduler's lock: a name no tenant's locks use (tenant names cannot be empty).
const SCHEDULER_TENANT: &str = "";
const SCHEDULER_LOCK: &str = "emergence scheduler";
const RETENTION_LOCK: &str = "retention scheduler";

/// The scheduler lock `name`, held by this server from the first time it is free until the
/// server stops (of all the servers on one store, only its holder runs that schedule):
/// the guard while this server holds it, `None` while another does (or it could not be
/// asked, logged).
fn hold_scheduler<'a>(
    scheduler: &'a std::sync::Mutex<Option<StoreLock>>,
    engine: &Engine<DynStore>,
    name: &str,
) -> Option<std::sync::MutexGuard<'a, Option<StoreLock>>> {
    let mut held = scheduler
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if held.is_none() {
        match engine
            .store()
            .lock(SCHEDULER_TENANT, name, memtape::Wait::Try)
        {
            Ok(Some(lock)) => *held = Some(lock),
            // Another server on this store runs the schedule.
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, lock = name, "could not take a scheduler's lock");
                return None;
            }
        }
    }
    Some(held)
}

/// How many memory changes wait for a slow listener before it is told it missed some.
const CHANGES_QUEUED: usize = 256;

/// The write hook that announces every memory change written (by any route), with the
/// memory scope it changed.
struct OnMemoryChange(broadcast::Sender<Scope>);

impl WriteHook for OnMemoryChange {
    fn written(&self, _store: &dyn Store, entries: &[Entry]) {
        for entry in entries {
            if matches!(&entry.payload, Payload::Event(e) if e.name == events::MEMORY_CHANGE) {
                // No receiver is fine: no MCP session is listening.
                let _ = self.0.send(entry.scope.clone());
            }
        }
    }
}

/// The write hook that counts every entry written to the tape (`/metrics`).
struct CountWritten(::metrics::Counter);

impl WriteHook for CountWritten {
    fn written(&self, _store: &dyn Store, entries: &[Entry]) {
        self.0.increment(entries.len() as u64);
    }
}

/// A handle on the state that does not keep it (and so the engine) alive: for background
/// tasks that must end when the server does.
#[derive(Clone)]
pub struct WeakState(Weak<Inner>);

impl WeakState {
    /// The state, while the server still holds it.
    pub fn upgrade(&self) -> Option<AppState> {
        self.0.upgrade().map(|inner| AppState { inner })
    }
}

impl AppState {
    /// The state over `engine`, authenticating with `keys`; `loopback` says whether the
    /// server only listens on loopback (without keys, it serves only then).
    pub fn new(
        engine: Engine<impl Store + 'static>,
        keys: KeyStore,
        limits: Limits,
        loopback: bool,
    ) -> Self {
        AppState::with_model(engine, keys, limits, loopback, None)
    }

    /// [`AppState::new`], keeping memory with `model` when one is given: sessions are
    /// consolidated in the background as they fill their window, and the model-driven
    /// routes work.
    pub fn with_model(
        engine: Engine<impl Store + 'static>,
        keys: KeyStore,
        limits: Limits,
        loopback: bool,
        model: Option<ModelSetup>,
    ) -> Self {
        let mut engine = engine.boxed();
        let metrics = Arc::new(Metrics::new());
        let (memory_changed, _) = broadcast::channel(CHANGES_QUEUED);
        engine.add_write_hook(OnMemoryChange(memory_changed.clone()));
        engine.add_write_hook(CountWritten(metrics.written()));
        let (engine, indexer) = Indexer::start(engine);
        let llm = model.as_ref().map(|m| Arc::clone(&m.llm));
        let background = model.map(|m| {
            let llm = metrics.count_model(m.llm, ModelUse::Consolidation);
            Arc::new(
                Background::new(engine.clone(), llm, m.lifecycle).on_done(|session, outcome| {
                    match outcome {
                        Ok(done) if done.through.is_some() => tracing::info!(
                            %session, messages = done.messages, dropped = done.dropped,
                            "consolidated"
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(%session, error = %e, "consolidation failed; the pointer did not move"),
                    }
                }),
            )
        });
        AppState {
            inner: Arc::new(Inner {
                appender: Appender::start(engine.clone(), metrics.appends()),
                indexer,
                engine,
                permits: Arc::new(Semaphore::new(limits.engine_calls.max(1))),
                keys,
                limits,
                loopback,
                memory_changed,
                background,
                llm,
                metrics,
                scheduler: Arc::default(),
                uncaptured: std::sync::Mutex::default(),
                mcp_sessions: Arc::default(),
                data_dir: std::sync::OnceLock::new(),
                attachments: std::sync::OnceLock::new(),
                retention: std::sync::OnceLock::new(),
                retention_scheduler: Arc::default(),
                mcp_erase: std::sync::atomic::AtomicBool::new(false),
                lifecycle: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Keeps the user message `id` of `tenant`, whose WAL capture failed, for a retry.
    pub fn defer_capture(&self, tenant: &str, id: memtape::EntryId) {
        let mut waiting = self
            .inner
            .uncaptured
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        waiting.insert((tenant.to_owned(), id));
        if waiting.len() > UNCAPTURED_MAX
            && let Some((tenant, id)) = waiting.pop_first()
        {
            tracing::error!(%tenant, entry = %id, "too many captures wait for a retry; this one is given up");
        }
    }

    /// The entries whose failed captures wait for a retry, by tenant, oldest first.
    pub fn captures_waiting_by_tenant(&self) -> Vec<(String, Vec<memtape::EntryId>)> {
        let waiting = self
            .inner
            .uncaptured
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut by: std::collections::BTreeMap<String, Vec<memtape::EntryId>> = Default::default();
        for (tenant, id) in waiting.iter() {
            by.entry(tenant.clone()).or_default().push(*id);
        }
        by.into_iter().collect()
    }

    /// How many failed captures wait for a retry.
    pub fn captures_waiting(&self) -> usize {
        self.inner
            .uncaptured
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Retries the captures that failed, oldest first, from the tape
    /// ([`memtape::Engine::recapture`]: never recorded twice). Those that fail again wait
    /// for the next retry. Returns how many were recorded now.
    pub async fn retry_captures(&self) -> usize {
        let waiting: Vec<(String, memtape::EntryId)> = std::mem::take(
            &mut *self
                .inner
                .uncaptured
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_iter()
        .collect();
        if waiting.is_empty() {
            return 0;
        }
        let state = self.clone();
        self.run(move |engine| {
            let mut done = 0;
            let mut failed = None;
            for (i, (tenant, id)) in waiting.iter().enumerate() {
                match engine.recapture(tenant, *id) {
                    Ok(_) => done += 1,
                    Err(e) => {
                        // The store still fails (the disk is still full): the rest wait.
                        failed = Some(e.to_string());
                        for (tenant, id) in &waiting[i..] {
                            state.defer_capture(tenant, *id);
                        }
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                tracing::warn!(
                    waiting = state.captures_waiting(),
                    error = %e,
                    "WAL captures still cannot be recorded; retrying later"
                );
            } else if done > 0 {
                tracing::info!(recorded = done, "WAL captures that had failed are recorded");
            }
            Ok(done)
        })
        .await
        .unwrap_or(0)
    }

    /// The requests in flight, which the background embedder gives way to.
    pub(crate) fn activity(&self) -> &Arc<crate::indexer::Activity> {
        self.inner.indexer.activity()
    }

    /// The memory scopes of the memory changes written from now on (by this process), as
    /// they are written.
    pub fn memory_changes(&self) -> broadcast::Receiver<Scope> {
        self.inner.memory_changed.subscribe()
    }

    /// The background consolidation, when the server has a model.
    pub fn background(&self) -> Option<&Arc<Background<DynStore>>> {
        self.inner.background.as_ref()
    }

    /// The lifecycle settings: the model's, else those set with
    /// [`AppState::set_lifecycle_config`], else the defaults.
    pub fn lifecycle(&self) -> LifecycleConfig {
        self.inner
            .background
            .as_ref()
            .map(|b| b.config().clone())
            .or_else(|| self.inner.lifecycle.get().cloned())
            .unwrap_or_default()
    }

    /// Sets memtape.toml's `[lifecycle]` (daily notes, the memory skill), once, before
    /// serving: what a server without a model follows (one with a model follows the
    /// model's setup).
    pub fn set_lifecycle_config(&self, config: LifecycleConfig) {
        let _ = self.inner.lifecycle.set(config);
    }

    /// After `stored` was appended: Qanot's automatic daily note for each assistant reply
    /// in it that answers a user message, when the agent's notes are on
    /// (`[lifecycle.daily_notes]`, off by default for servers). A note that cannot be
    /// written is logged: the messages are stored, and a client retrying would store them
    /// twice.
    pub async fn note_exchange(&self, stored: &[Entry]) {
        let Some(first) = stored.first() else {
            return;
        };
        let notes = self
            .lifecycle()
            .daily_notes
            .for_agent(first.scope.agent_name(), memtape::DailyNotes::Off);
        if notes != memtape::DailyNotes::Qanot {
            return;
        }
        let replies: Vec<Entry> = stored
            .iter()
            .filter(|e| {
                e.message()
                    .is_some_and(|m| m.role == memtape::Role::Assistant && m.tool_calls.is_empty())
            })
            .cloned()
            .collect();
        if replies.is_empty() {
            return;
        }
        let session = first.scope.clone();
        if let Err(e) = self
            .run(move |engine| {
                for reply in &replies {
                    engine.note_exchange(reply)?;
                }
                Ok(())
            })
            .await
        {
            tracing::warn!(%session, error = %e.message, "the daily note could not be written");
        }
    }

    /// The model, its calls counted as `kind` (`/metrics`), or 503 naming how to
    /// configure one.
    pub fn model(&self, kind: ModelUse) -> Result<Arc<dyn Llm>> {
        self.inner
            .llm
            .as_ref()
            .map(|llm| self.inner.metrics.count_model(Arc::clone(llm), kind))
            .ok_or_else(|| {
                ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "no_model",
                    "no model is configured on this server: set MEMTAPE_LLM_MODEL (or [llm] in \
                     memtape.toml) and restart it",
                )
            })
    }

    /// After messages were appended to `session`, off the reply's path (on the blocking
    /// pool): starts its consolidation in the background if it is due, and when the
    /// appends ended with the assistant's reply (a completed exchange, MateClaw's
    /// `ConversationCompletedEvent`), runs the post-conversation extraction, which its
    /// pre-checks and the agent's cooldown usually skip without a call; `source` is where
    /// the conversation came from (a scheduled task's is skipped under `skip_cron`).
    pub fn after_append(&self, session: &Scope, replied: bool, source: memtape::Source) {
        let Some(background) = self.inner.background.clone() else {
            return;
        };
        let engine = self.inner.engine.clone();
        let session = session.clone();
        let state = self.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = background.nudge(&session) {
                tracing::warn!(%session, error = %e, "could not check whether to consolidate");
            }
            let config = &background.config().extraction;
            if !replied || !config.enabled {
                return;
            }
            let trigger = source.trigger();
            let Ok(llm) = state.model(ModelUse::Extraction) else {
                return;
            };
            match engine.extract(&session, llm.as_ref(), config, trigger) {
                Ok(run) if run.skipped.is_none() => tracing::info!(
                    %session, changed = ?run.changed, dropped = run.dropped, reason = %run.reason,
                    "extracted"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(%session, error = %e, "extraction failed; nothing was written")
                }
            }
        });
    }

    /// Runs the emergences due between `after` and `until` (each agent's schedule), one at a
    /// time on the blocking pool; a memory busy elsewhere is skipped. Only the server that
    /// holds the scheduler's lock runs them (taken at the first tick it is free, kept while
    /// the server runs).
    pub async fn run_due_emergences(
        &self,
        after: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) {
        let Some(background) = self.inner.background.clone() else {
            return;
        };
        let engine = self.inner.engine.clone();
        let scheduler = self.inner.scheduler.clone();
        let Ok(llm) = self.model(ModelUse::Emergence) else {
            return;
        };
        let done = tokio::task::spawn_blocking(move || {
            let Some(_held) = hold_scheduler(&scheduler, &engine, SCHEDULER_LOCK) else {
                return;
            };
            let config = &background.config().emergence;
            let due = match engine.due_emergences(config, after, until) {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "could not list the emergences due");
                    return;
                }
            };
            for scope in due {
                match engine.emerge(&scope, llm.as_ref(), config, None, memtape::Wait::Try) {
                    Ok(run) => tracing::info!(
                        %scope, skipped = ?run.skipped, changed = ?run.changed,
                        dropped = run.dropped, "emergence"
                    ),
                    Err(e) => {
                        tracing::warn!(%scope, error = %e, "emergence failed; nothing was written")
                    }
                }
            }
        });
        let _ = done.await;
    }

    /// A handle that does not keep the state alive.
    pub fn downgrade(&self) -> WeakState {
        WeakState(Arc::downgrade(&self.inner))
    }

    /// The MCP sessions each key has open.
    pub(crate) fn mcp_sessions(&self) -> &Arc<crate::mcp::limit::Sessions> {
        &self.inner.mcp_sessions
    }

    /// The names and origins served besides the server's own.
    pub fn sites(&self) -> &crate::guard::Sites {
        &self.inner.limits.sites
    }

    /// What `/metrics` reports.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Reports the embedding calls `counts` counts on `/metrics`: `counts` is what
    /// [`crate::count_embedder`] returned for the embedder given to the index. Once,
    /// before serving.
    pub fn set_embed_counts(&self, counts: Arc<crate::EmbedCounts>) {
        self.inner.metrics.set_embed_counts(counts);
    }

    /// Whether the server listens only on loopback.
    pub fn loopback(&self) -> bool {
        self.inner.loopback
    }

    /// Appends `entries` through group commit ([`Appender`]): they share a transaction
    /// with the appends of other requests waiting at the same time, and come back once
    /// it is committed.
    pub async fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        Ok(self.inner.appender.append(entries, false).await?.0)
    }

    /// [`AppState::append`], and Qanot's WAL over the user messages among `entries`
    /// before it returns (for each entry, what it captured; a capture that could not be
    /// recorded is retried from the tape later).
    pub async fn append_captured(
        &self,
        entries: Vec<NewEntry>,
    ) -> Result<crate::appender::Written> {
        let (stored, captured) = self.inner.appender.append(entries, true).await?;
        for (entry, result) in stored.iter().zip(&captured) {
            if let Err(e) = result {
                tracing::warn!(entry = %entry.id, error = %e, "the WAL could not record what it found yet; it will retry");
                self.defer_capture(entry.scope.tenant(), entry.id);
            }
        }
        Ok((stored, captured))
    }

    /// The engine, for work that is not a request (shutdown).
    pub fn engine(&self) -> &Arc<Engine<DynStore>> {
        &self.inner.engine
    }

    /// Names the data directory the server serves, once: erasures then sync or remove the
    /// markdown workspaces in it, as `memtape erase` does.
    pub fn set_data_dir(&self, dir: std::path::PathBuf) {
        let _ = self.inner.data_dir.set(dir);
    }

    /// Sets the retention policies and schedule (memtape.toml's `[retention]`), once, before
    /// serving; without it no policy is configured and nothing expires unless an admin
    /// sets a policy over REST.
    pub fn set_retention_config(&self, config: memtape::RetentionConfig) {
        let _ = self.inner.retention.set(config);
    }

    /// Offers MCP clients `tape_erase_session`, erasure of one of their own sessions (their
    /// agent's and user's, with a key that may write to it). Off by default: an agent must
    /// not erase a user's history because a prompt told it to. memtape.toml's
    /// `[mcp] erase_own_session`.
    pub fn set_mcp_erase_own_session(&self, on: bool) {
        self.inner
            .mcp_erase
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether MCP offers `tape_erase_session`.
    pub fn mcp_erase_own_session(&self) -> bool {
        self.inner
            .mcp_erase
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The retention policies and schedule in effect.
    pub fn retention_config(&self) -> &memtape::RetentionConfig {
        self.inner.retention.get_or_init(Default::default)
    }

    /// Finishes the erasures that a process which died left unfinished, with their
    /// projections ([`memtape::Engine::finish_erasures`]), on the blocking pool. One read
    /// when there are none; run at start and every few seconds, so the tape's followers
    /// (every server's index), which wait at an unfinished erasure's receipt, never wait
    /// long for a process that will not come back.
    pub async fn finish_erasures(&self) {
        let engine = self.inner.engine.clone();
        let dir = self.data_dir().map(std::path::Path::to_path_buf);
        let done = tokio::task::spawn_blocking(move || engine.finish_erasures(dir.as_deref()));
        match done.await {
            Ok(Ok(finished)) => {
                for outcome in finished {
                    tracing::info!(
                        receipt = outcome.receipt.as_ref().map(|r| r.id.0),
                        entries = outcome.entries,
                        redacted = outcome.redacted,
                        "finished an erasure that a stopped process had begun"
                    );
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "finishing an unfinished erasure failed"),
            Err(e) => tracing::warn!(error = %e, "finishing an unfinished erasure panicked"),
        }
    }

    /// Runs retention over every tenant when its schedule fell between `after` and
    /// `until`, on the blocking pool, if this server holds (or can take) the retention
    /// scheduler's lock: one server of a store runs it.
    pub async fn run_due_retention(
        &self,
        after: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
    ) {
        let config = self.retention_config().clone();
        let due = match memtape::next_run(&config, after) {
            Ok(Some(at)) => at <= until,
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "the retention schedule is not valid");
                false
            }
        };
        if !due {
            return;
        }
        let engine = self.inner.engine.clone();
        let scheduler = self.inner.retention_scheduler.clone();
        let dir = self.data_dir().map(std::path::Path::to_path_buf);
        let done = tokio::task::spawn_blocking(move || {
            let Some(_held) = hold_scheduler(&scheduler, &engine, RETENTION_LOCK) else {
                return;
            };
            match engine.run_retention(None, &config, "schedule", false, dir.as_deref()) {
                Ok(runs) => {
                    for run in runs.iter().filter(|r| r.outcome.receipt.is_some()) {
                        tracing::info!(
                            scope = %run.policy.scope, entries = run.outcome.entries,
                            "retention expired entries"
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %e, "retention run failed"),
            }
        });
        let _ = done.await;
    }

    /// Sets how attached files are rebuilt into content parts (memtape.toml's
    /// `[attachments]`, Dify's `file_upload_config`), once, before serving.
    pub fn set_attachments_config(&self, config: memtape::AttachmentsConfig) {
        let _ = self.inner.attachments.set(config);
    }

    /// How attached files are rebuilt into content parts.
    pub fn attachments_config(&self) -> &memtape::AttachmentsConfig {
        self.inner.attachments.get_or_init(Default::default)
    }

    /// The attached files of `tenant` (uploads and tool files), in the data directory; a
    /// 503 when the server has no data directory to keep them in.
    pub fn files_of(&self, tenant: &str) -> Result<memtape::FilesDir> {
        let dir = self.data_dir().ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "this server has no data directory to keep attached files in",
            )
        })?;
        Ok(memtape::FilesDir::of_tenant(dir, tenant))
    }

    /// The data directory, if [`AppState::set_data_dir`] named one.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.inner.data_dir.get().map(std::path::PathBuf::as_path)
    }

    /// The API keys.
    pub fn keys(&self) -> &KeyStore {
        &self.inner.keys
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Runs `f` on the engine on the blocking pool, at most `engine_calls` at once.
    pub async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Engine<DynStore>) -> Result<T> + Send + 'static,
    {
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the server is shutting down"))?;
        let engine = self.inner.engine.clone();
        // Counted whatever the transport (an MCP call's work may outlast its request).
        let busy = self.activity().begin();
        tokio::task::spawn_blocking(move || {
            let (_permit, _busy) = (permit, busy);
            f(&engine)
        })
        .await
        .map_err(|e| ApiError::internal(format!("an engine call failed: {e}")))?
    }
}
