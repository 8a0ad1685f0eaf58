//! memtape: long-term memory for LLM agents. [`Engine`] is the facade the CLI and servers
//! use: it appends to the tape, selects history, walks threads, answers anchor queries and
//! moves the tape in and out of JSONL formats, over any [`Store`].
//!
//! ```
//! use memtape::{Engine, HistoryLimits, Message, Scope};
//!
//! let engine = Engine::in_memory();
//! let chat = Scope::agent("default", "default")?.with_session("demo")?;
//! engine.append(&chat, Message::user("My name is Ada."), Default::default())?;
//! engine.append(&chat, Message::assistant("Hello Ada!"), Default::default())?;
//! let history = engine.history(&chat, &HistoryLimits::default())?;
//! assert_eq!(history.len(), 2);
//! # Ok::<(), memtape::Error>(())
//! ```

mod attachments;
mod background;
mod bub;
mod capture;
mod consolidate;
pub mod context;
pub mod dify;
mod erase;
mod error;
mod hooks;
mod io;
mod lifecycle;
mod mateclaw;
mod node;
pub mod prompts;
mod retention;
mod rewrite;
mod search;
mod settings;
mod tiers;
pub mod tools;
mod usage;
mod workspace;
mod writer;

pub use attachments::{
    AttachmentsFormat, DEFAULT_TENANT, FILES_DIR, FileResolver, FilesDir, MAX_ATTACHMENT_BYTES,
    MAX_FILE_URL_BYTES, MAX_FILES_PER_MESSAGE, UPLOAD_TYPES, UploadInfo, check_reference,
    content_parts, llm_message, media_type, upload_type,
};
pub use background::{Background, OnConsolidated};
pub use bub::SessionStart;
pub use capture::{Captured, scan_entry, scan_new_entry};
pub use consolidate::{
    ConsolidateOptions, Consolidated, MEMORY_WINDOW, SAVE_MEMORY, save_memory_tool,
};
pub use dify::{MemoryConfig, MemoryMode, MemoryWindowConfig, RolePrefix, WindowConfig};
pub use erase::{Erase, EraseOptions};
pub use hooks::{MemoryWrite, WriteHook};
pub use io::ImportReport;
pub use lifecycle::{
    ConsolidationGuard, DEFAULT_RETENTION_DAYS, NewSession, PruneReport, SESSION_NEW,
};
pub use mateclaw::{MemoryRun, Source, Trigger, json_reply};
pub use node::{
    DEFAULT_MAX_TOKEN_LIMIT, DEFAULT_NODE_IDLE_DAYS, DIFY_NODE_META, IdleNode,
    MAX_MESSAGE_ID_BYTES, NODE_CLEAR, NODE_MESSAGE_ID, NODE_PARENT_MESSAGE_ID, NODE_STARTS_THREAD,
    NodeCleanup, NodeMemory, NodeMessage, NodeTurn, UUID_NIL, check_message_id,
};
pub use retention::{
    AgentRetention, DEFAULT_RETENTION_SCHEDULE, RetentionConfig, RetentionRun, TenantRetention,
    next_run,
};
pub use rewrite::{Applied, DroppedFact, Edit};
pub use search::SearchHit;
pub use settings::{
    AttachmentsConfig, DailyNotes, DailyNotesConfig, EmergenceConfig, ExtractionConfig,
    ImageDetail, LifecycleConfig, Schedule,
};
pub use tiers::{Blame, BlamedLine, check_memory_scope, memory_scope};
pub use usage::UsageLine;
pub use workspace::{Conflict, Prefer, SyncReport, workspace_dir};

use std::collections::HashMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use memtape_core::events::BuiltinEvent;
use memtape_core::{Order, walk_thread};
use serde_json::{Map, Value};

pub use error::Error;
pub use memtape_core::context::{
    Compaction, Context, ContextConfig, ContextRequest, MEMORY_SKILL, MateClaw, Policy, Qanot,
    TimePrecision,
};
pub use memtape_core::retention::{Expiry, Retention};
pub use memtape_core::{
    Anchor, AnchorRange, AsOf, Bpe, BpeEncoding, Cached, Content, Entry, EntryId, ErasedHow,
    Erasure, Event, FileOwner, FileRef, FileSource, FileType, Filter, HistoryLimits, HistoryView,
    Kind, Message, Meta, NewEntry, Payload, Role, Scope, TapeQuery, TokenCounter, ToolCall,
    erasure, events,
    formats::{Format, dify_node, parse_time},
    memory, summary, wal,
};
pub use memtape_search::{
    EmbedError, Embedder, Error as SearchError, Fusion, Hit, Index, IndexConfig, MAX_QUERY_BYTES,
    Mode, PendingVectors, Ranked, SearchFilter, SearchRequest, ShardStats, ShardStatus,
};
pub use memtape_store::erase::entries_after_all;
pub use memtape_store::{
    Claim, EraseMode, EraseOutcome, EraseRequest, EraseTarget, MemoryStore, Placement, ScopeInfo,
    SqliteStore, Store, StoreLock, Wait, lock_serving, lock_unserved, requests,
};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A store chosen at run time: the embedded SQLite store, or PostgreSQL (memtape-postgres)
/// when the configuration names a database. The CLI and the servers hold an
/// `Engine<DynStore>`; [`Engine::boxed`] turns any engine into one.
pub type DynStore = Box<dyn Store>;

/// How many entries history and thread walks read from the store at a time.
const PAGE: usize = 256;

/// Options for one append.
#[derive(Clone, Debug, Default)]
pub struct AppendOptions {
    /// The message this one follows; by default the session's latest message.
    pub parent: Option<EntryId>,
    /// Caller metadata.
    pub meta: Meta,
}

/// The memtape engine over a store `S`.
pub struct Engine<S: Store = SqliteStore> {
    store: S,
    tokens: Box<dyn TokenCounter>,
    clock: Box<dyn Fn() -> DateTime<Utc> + Send + Sync>,
    index: Option<Index>,
    /// Whether each write brings the index up to date on the writer's thread (the
    /// default), or leaves it to [`Engine::catch_up_index_step`] and the next search.
    index_on_write: bool,
    hooks: Vec<Box<dyn WriteHook>>,
    /// The memory logs read lately, brought up to date incrementally.
    memory_logs: tiers::LogCache,
    /// The one writer of each memory scope this process writes to.
    memory_writers: writer::Writers,
}

/// How many counted texts the default token counter remembers per generation (about
/// 100 bytes each): enough for the recent history of many sessions.
pub const TOKEN_CACHE: usize = 50_000;

impl Engine<SqliteStore> {
    /// Creates (or opens) the store in `dir`.
    pub fn init(dir: &Path) -> Result<Self> {
        Ok(Self::with_store(SqliteStore::create(dir)?))
    }

    /// Opens the existing store in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        Ok(Self::with_store(SqliteStore::open(dir)?))
    }

    /// Opens the existing store in `dir` for reading only: nothing is written, so reads
    /// and exports work on a full or read-only disk; writes fail with a clear error.
    pub fn open_read_only(dir: &Path) -> Result<Self> {
        Ok(Self::with_store(SqliteStore::open_read_only(dir)?))
    }
}

impl<S: Store + 'static> Engine<S> {
    /// The same engine over its store boxed as a [`DynStore`]: its index, hooks, clock
    /// and caches come along.
    pub fn boxed(self) -> Engine<DynStore> {
        Engine {
            store: Box::new(self.store),
            tokens: self.tokens,
            clock: self.clock,
            index: self.index,
            index_on_write: self.index_on_write,
            hooks: self.hooks,
            memory_logs: self.memory_logs,
            memory_writers: self.memory_writers,
        }
    }
}

impl Engine<MemoryStore> {
    /// An engine over a fresh in-memory store.
    pub fn in_memory() -> Self {
        Self::with_store(MemoryStore::new())
    }
}

impl<S: Store> Engine<S> {
    /// An engine over `store`, counting tokens with cl100k (remembering the counts of the
    /// last [`TOKEN_CACHE`] to `2 × TOKEN_CACHE` texts) and reading the system clock.
    pub fn with_store(store: S) -> Self {
        Engine {
            store,
            tokens: Box::new(Cached::new(Bpe::new(BpeEncoding::Cl100k), TOKEN_CACHE)),
            clock: Box::new(Utc::now),
            index: None,
            index_on_write: true,
            hooks: Vec::new(),
            memory_logs: tiers::LogCache::default(),
            memory_writers: writer::Writers::default(),
        }
    }

    /// Counts tokens with `counter` instead.
    pub fn with_tokens(mut self, counter: impl TokenCounter + 'static) -> Self {
        self.tokens = Box::new(counter);
        self
    }

    /// Reads time from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// The underlying store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The token counter history limits are measured with.
    pub fn tokens(&self) -> &dyn TokenCounter {
        self.tokens.as_ref()
    }

    /// The time by the engine's clock (the system clock unless [`Engine::with_clock`]).
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Appends a message to a session; it returns once the entry is durable.
    pub fn append(
        &self,
        session: &Scope,
        message: Message,
        options: AppendOptions,
    ) -> Result<Entry> {
        let entry = NewEntry {
            scope: session.clone(),
            payload: Payload::Message(message),
            meta: options.meta,
            created_at: self.now(),
            parent: options.parent,
            if_last: None,
        };
        self.append_one(entry)
    }

    /// Appends `payload` to `scope`, stamped now, with no metadata and the default parent.
    fn append_payload(&self, scope: &Scope, payload: Payload) -> Result<Entry> {
        self.append_one(NewEntry::new(scope.clone(), payload, self.now()))
    }

    fn append_one(&self, entry: NewEntry) -> Result<Entry> {
        let mut out = self.store_entries(vec![entry])?;
        out.pop()
            .ok_or_else(|| Error::Internal("the store returned no entry".into()))
    }

    /// Appends messages to a session in one transaction, each following the one before.
    pub fn append_messages(&self, session: &Scope, messages: Vec<Message>) -> Result<Vec<Entry>> {
        let now = self.now();
        let entries = messages
            .into_iter()
            .map(|m| NewEntry::new(session.clone(), Payload::Message(m), now))
            .collect();
        self.store_entries(entries)
    }

    /// Appends entries as they are, in one transaction.
    pub fn append_entries(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        self.store_entries(entries)
    }

    /// Every append goes through here: the tape first, then the write hooks that bring
    /// the projections (the search index) up to date ([`Engine::add_write_hook`]).
    fn store_entries(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        let stored = self.store.append(entries)?;
        self.after_write(&stored);
        Ok(stored)
    }

    /// Writes an anchor (Bub's handoff) named `name` with optional state.
    pub fn anchor(
        &self,
        scope: &Scope,
        name: &str,
        state: Option<Map<String, Value>>,
    ) -> Result<Entry> {
        self.append_payload(
            scope,
            Payload::Anchor(Anchor {
                name: name.to_owned(),
                state,
            }),
        )
    }

    /// Writes an event named `name` with `data`.
    pub fn event(&self, scope: &Scope, name: &str, data: Value) -> Result<Entry> {
        self.append_payload(
            scope,
            Payload::Event(Event {
                name: name.to_owned(),
                data,
            }),
        )
    }

    /// Moves the session's consolidation pointer: entries up to `through` leave history.
    /// The move is itself an entry on the tape.
    pub fn mark_consolidated(&self, session: &Scope, through: EntryId) -> Result<Entry> {
        self.append_payload(session, BuiltinEvent::consolidated(through).to_payload())
    }

    /// The history to send to a model, in the session's view ([`Engine::history_view`]):
    /// by default the unconsolidated messages of the session's current thread, under
    /// `limits`, following the nanobot and Dify rules ([`memtape_core::select_history`]),
    /// reading only the tail it needs; for a session from a Bub tape, Bub's
    /// ([`Engine::history_in`]).
    pub fn history(&self, session: &Scope, limits: &HistoryLimits) -> Result<Vec<Entry>> {
        self.history_as_of(session, limits, None)
    }

    /// [`Engine::history`] as the tape stood at `as_of` (now when `None`): the history a
    /// model would have been sent then, in the view the session had then.
    pub fn history_as_of(
        &self,
        session: &Scope,
        limits: &HistoryLimits,
        as_of: Option<&AsOf>,
    ) -> Result<Vec<Entry>> {
        let view = self.history_view_as_of(session, as_of)?;
        self.history_in_as_of(session, limits, view, as_of)
    }

    /// The session's head (its latest conversational entry) and consolidation pointer:
    /// now from its projection, or as of `as_of` from the tape (the latest entries then).
    pub(crate) fn session_state(
        &self,
        session: &Scope,
        as_of: Option<&AsOf>,
    ) -> Result<(Option<EntryId>, EntryId)> {
        let Some(as_of) = as_of else {
            let info = self.store.scope_info(session)?;
            let head = info.as_ref().and_then(|i| i.head);
            return Ok((head, info.map_or(EntryId(0), |i| i.last_consolidated)));
        };
        let latest = |filter: Filter| -> Result<Option<Entry>> {
            let filter = as_of.narrow(Filter {
                order: Order::Desc,
                limit: Some(1),
                ..filter
            });
            Ok(self.store.scan(session, &filter)?.into_iter().next())
        };
        let head = latest(Filter {
            kinds: Kind::conversational().collect(),
            ..Filter::default()
        })?
        .map(|e| e.id);
        let mark = latest(Filter {
            kinds: vec![Kind::Event],
            name: Some(events::SESSION_CONSOLIDATED.to_owned()),
            ..Filter::default()
        })?;
        let pointer = match mark
            .map(|e| BuiltinEvent::from_payload(&e.payload))
            .transpose()?
        {
            Some(Some(BuiltinEvent::Consolidated(t))) => t.through,
            _ => EntryId(0),
        };
        Ok((head, pointer))
    }

    /// Walks the thread ending at `leaf` in `scope` back to a root, to the first entry at or
    /// before `stop_at`, or to `max` entries, reading the store a page at a time.
    fn walk(
        &self,
        scope: &Scope,
        leaf: EntryId,
        stop_at: EntryId,
        max: usize,
    ) -> Result<Vec<Entry>> {
        let page = PAGE.min(max.saturating_add(1));
        self.walk_until(scope, leaf, stop_at, page, |e| e.id <= stop_at, max)
    }

    /// Walks the thread ending at `leaf` in `scope` back towards a root, reading the store
    /// `page` entries at a time (none at or before `stop_at`), until `stop` says an entry is
    /// not part of it or `max` entries were taken. Root first.
    pub(crate) fn walk_until(
        &self,
        scope: &Scope,
        leaf: EntryId,
        stop_at: EntryId,
        page: usize,
        stop: impl Fn(&Entry) -> bool,
        max: usize,
    ) -> Result<Vec<Entry>> {
        let mut read: HashMap<EntryId, Entry> = HashMap::new();
        let mut fetch = |id: EntryId| -> Result<Option<Entry>> {
            if let Some(e) = read.remove(&id) {
                return Ok(Some(e));
            }
            let filter = Filter {
                after: Some(stop_at),
                before: Some(EntryId(id.0.saturating_add(1))),
                kinds: Kind::conversational().collect(),
                order: Order::Desc,
                limit: Some(page),
                ..Filter::default()
            };
            read = self
                .store
                .scan(scope, &filter)?
                .into_iter()
                .map(|e| (e.id, e))
                .collect();
            Ok(read.remove(&id))
        };
        let Some(leaf) = fetch(leaf)? else {
            return Ok(Vec::new());
        };
        walk_thread(leaf, &mut fetch, stop, max)
    }

    /// The thread that ends at `leaf`, root first (Dify's extract_thread_messages). `leaf`
    /// must lie within `scope` ([`Scope::contains`]); an entry of another agent or user is
    /// reported as missing, like one that does not exist.
    pub fn thread(&self, scope: &Scope, leaf: EntryId) -> Result<Vec<Entry>> {
        let entry = self
            .store
            .get(scope.tenant(), leaf)?
            .filter(|e| scope.contains(&e.scope))
            .ok_or(Error::NoEntry(leaf))?;
        if !entry.kind().is_conversational() {
            return Err(Error::NotAMessage(leaf, entry.kind()));
        }
        self.walk(&entry.scope, leaf, EntryId(0), usize::MAX)
    }

    /// Entries of `scope` selected by `query` (anchor slices, kinds, time), in tape order.
    pub fn query(&self, scope: &Scope, query: &TapeQuery) -> Result<Vec<Entry>> {
        let last_anchor = |name: Option<&str>| -> Result<EntryId> {
            let filter = Filter {
                kinds: vec![Kind::Anchor],
                name: name.map(str::to_owned),
                order: Order::Desc,
                limit: Some(1),
                ..Filter::default()
            };
            let found = self.store.scan(scope, &filter)?;
            found.first().map(|e| e.id).ok_or_else(|| {
                Error::NoAnchor(
                    name.map_or_else(|| "(any)".to_owned(), str::to_owned),
                    scope.to_string(),
                )
            })
        };
        let (after, before) = match &query.range {
            AnchorRange::All => (None, None),
            AnchorRange::FromLast => (Some(last_anchor(None)?), None),
            AnchorRange::After(name) => (Some(last_anchor(Some(name))?), None),
            AnchorRange::Between(start_name, end_name) => {
                let start = last_anchor(Some(start_name))?;
                let filter = Filter {
                    after: Some(start),
                    kinds: vec![Kind::Anchor],
                    name: Some(end_name.clone()),
                    limit: Some(1),
                    ..Filter::default()
                };
                // Bub raises not_found when no end anchor follows the start.
                let end = self.store.scan(scope, &filter)?.first().map(|e| e.id);
                let end = end.ok_or_else(|| {
                    Error::NoAnchor(
                        format!("{end_name} after {start_name} (entry {start})"),
                        scope.to_string(),
                    )
                })?;
                (Some(start), Some(end))
            }
        };
        let tighter = |a: Option<EntryId>,
                       b: Option<EntryId>,
                       pick: fn(EntryId, EntryId) -> EntryId| match (a, b) {
            (Some(a), Some(b)) => Some(pick(a, b)),
            (a, b) => a.or(b),
        };
        let filter = Filter {
            after: tighter(after, query.after, std::cmp::max),
            before: tighter(before, query.before, std::cmp::min),
            kinds: query.kinds.clone(),
            since: query.since,
            until: query.until,
            limit: query.limit,
            order: if query.last { Order::Desc } else { Order::Asc },
            ..Filter::default()
        };
        let mut found = self.store.scan(scope, &filter)?;
        if query.last {
            found.reverse();
        }
        Ok(found)
    }

    /// The sessions of `tenant` (scopes that hold a conversation), with their projections
    /// and when each last had a message (its head's time: a consolidation pointer or
    /// another event written later does not count as activity).
    pub fn sessions(&self, tenant: &str) -> Result<Vec<SessionInfo>> {
        let infos: Vec<ScopeInfo> = self
            .store
            .scopes(tenant)?
            .into_iter()
            .filter(|i| i.scope.session().is_some())
            .collect();
        let heads: Vec<EntryId> = infos.iter().filter_map(|i| i.head).collect();
        let times: HashMap<EntryId, DateTime<Utc>> = self
            .store
            .get_many(tenant, &heads)?
            .into_iter()
            .map(|e| (e.id, e.created_at))
            .collect();
        Ok(infos
            .into_iter()
            .map(|info| SessionInfo {
                last_message_at: info.head.and_then(|h| times.get(&h).copied()),
                info,
            })
            .collect())
    }
}

/// A session's projection and the time of its latest message.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    /// The session's projection (counts, head, consolidation pointer, first and last entry).
    pub info: ScopeInfo,
    /// When its latest message (or tool call or result) was written; `None` before any.
    pub last_message_at: Option<DateTime<Utc>>,
}
