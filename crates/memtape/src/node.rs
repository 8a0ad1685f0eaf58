//! Dify's node memory: a conversation's history kept per workflow node, thread-aware.
//!
//! Dify's `NodeTokenBufferMemory` (seed 002) keeps, for one LLM node of a Chatflow app, its
//! own dialogue turns inside one conversation, keyed by `(app_id, conversation_id,
//! node_id)`: `add_messages` buffers a turn (the user's input and the node's answer, with
//! file references) under the Dify message it belongs to and that message's parent,
//! `flush` persists the buffer, `get_history` returns the thread of the current message
//! within a token limit, and `clear` empties the node's memory.
//!
//! In memtape the node is a scope (`tenant/app` → conversation session → node) and each turn
//! is three entries on the tape, written in one transaction: a `node.turn` event
//! ([`NodeTurnMark`]: the Dify message id, its parent message id, whether it starts a
//! thread), then the user message and the assistant message. Dify's ids are typed data of
//! that built-in event, checked on the way in like every other; the caller's meta bag stays
//! the caller's. The parent link of a turn's user entry points at the turn it follows, so
//! the thread is a walk back through parent links (Dify's `extract_thread_messages`).
//! `clear` writes a [`NODE_CLEAR`] anchor; the turns before it stay on the tape but leave
//! the node's memory. Turns written before the event existed carried their ids in the
//! entries' meta ([`NODE_MESSAGE_ID`], [`NODE_PARENT_MESSAGE_ID`], [`NODE_STARTS_THREAD`]);
//! they are still read.
//!
//! Dify's stored form (`{"version": 1, "messages": [...]}` per node,
//! [`memtape_core::formats::dify_node`]) comes in with [`Engine::import_node_memory`] and
//! goes out with [`Engine::export_node_memory`], losslessly: what the tape does not say
//! itself (each message's own ids, Dify's token count, the file's exact shape) is kept in
//! the message entry's meta under [`DIFY_NODE_META`].

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use memtape_core::dify::{MemoryConfig, MemoryMode};
use memtape_core::events::{BuiltinEvent, NodeTurnMark};
use memtape_core::formats::dify_node::{NodeFile, NodeFileMessage, Shape};
use memtape_core::{
    Entry, EntryId, FileRef, Filter, HistoryLimits, Kind, Message, NewEntry, Order, Payload, Scope,
    select_history,
};
use memtape_store::{ScopeInfo, Store};
use serde_json::Value;

use crate::{Engine, Error, ImportReport, Result};

/// Dify's default `max_token_limit` for history.
pub const DEFAULT_MAX_TOKEN_LIMIT: usize = 2000;

/// The anchor `NodeMemory::clear` writes: node memory starts again after it.
pub const NODE_CLEAR: &str = "node/clear";

/// Before typed turns: the meta key that held the Dify message id a turn belongs to (on
/// both of its entries). Read from old stores only.
pub const NODE_MESSAGE_ID: &str = "message_id";

/// Before typed turns: the meta key that held the Dify parent message id a turn was added
/// with (on its user entry; `null` when it had none). Read from old stores only.
pub const NODE_PARENT_MESSAGE_ID: &str = "parent_message_id";

/// Before typed turns: the meta key that marked a turn's user entry starting a thread.
/// Read from old stores only.
pub const NODE_STARTS_THREAD: &str = "starts_thread";

/// Dify's `UUID_NIL` parent: a message from before threads, which follows whatever came
/// last (a linear conversation).
pub const UUID_NIL: &str = "00000000-0000-0000-0000-000000000000";

/// The meta key of a message imported from Dify's stored form: `{"message_id",
/// "parent_message_id", "token_count"?, "shape"?}`, what the tape does not say itself.
pub const DIFY_NODE_META: &str = "dify_node";

/// How many idle days [`Engine::cleanup_node_memory`] keeps by default: Dify's cleanup
/// tasks take their retention in days, 30 by default (`PLAN_SANDBOX_CLEAN_DAY_SETTING`,
/// `PLAN_SANDBOX_CLEAN_MESSAGE_DAY_SETTING`).
pub const DEFAULT_NODE_IDLE_DAYS: u32 = 30;

/// A node memory that [`Engine::cleanup_node_memory`] cleared (or, in a dry run, would
/// clear).
#[derive(Clone, Debug, PartialEq)]
pub struct IdleNode {
    /// The node's scope (tenant, app, user, conversation, node).
    pub scope: Scope,
    /// When the node's memory was last written.
    pub last_active: DateTime<Utc>,
    /// The [`NODE_CLEAR`] anchor written; `None` in a dry run.
    pub cleared_by: Option<EntryId>,
}

/// What [`Engine::cleanup_node_memory`] found and did.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeCleanup {
    /// Node memories last written before this time were idle.
    pub cutoff: DateTime<Utc>,
    /// Whether this was a dry run (nothing written).
    pub dry_run: bool,
    /// The idle node memories, cleared unless this was a dry run.
    pub cleared: Vec<IdleNode>,
    /// Node memories with turns written at or after the cutoff: kept.
    pub active: usize,
    /// Node memories already empty (cleared before, by hand or by an earlier cleanup).
    pub empty: usize,
}

/// One dialogue turn of a node (the arguments of Dify's `add_messages`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeTurn {
    /// The Dify message this turn belongs to.
    pub message_id: String,
    /// The Dify message it follows: `None` for the first message of a thread, [`UUID_NIL`]
    /// for a message from before threads (it follows the node's latest turn).
    pub parent_message_id: Option<String>,
    /// The user's input to the node.
    pub user_content: String,
    /// Files the user attached (references only).
    pub user_files: Vec<FileRef>,
    /// The node's answer.
    pub assistant_content: String,
    /// Files the node produced (references only).
    pub assistant_files: Vec<FileRef>,
}

/// A message of a node's history, with the Dify message it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeMessage {
    /// The entry on the tape.
    pub entry: Entry,
    /// The Dify message its turn belongs to.
    pub message_id: String,
    /// The Dify message that turn was added after.
    pub parent_message_id: Option<String>,
}

/// One turn as read from the tape: its mark and its two messages' ids.
#[derive(Clone, Debug)]
struct Turn {
    mark: NodeTurnMark,
    user: EntryId,
    assistant: Option<EntryId>,
}

/// The memory of one workflow node in one conversation (Dify's `NodeTokenBufferMemory`).
/// Turns added with [`NodeMemory::add_messages`] are buffered until [`NodeMemory::flush`];
/// [`NodeMemory::get_history`] reads what is on the tape.
pub struct NodeMemory<'e, S: Store> {
    engine: &'e Engine<S>,
    scope: Scope,
    pending: Vec<NodeTurn>,
}

impl<S: Store> Engine<S> {
    /// The memory of node `node` of app `app` (a tenant/agent scope, optionally with a user)
    /// in `conversation`. Node memory lives inside a conversation (Dify: "Chatflow only"),
    /// so asking for it without one is a configuration error ([`Error::Config`]).
    pub fn node_memory(
        &self,
        app: &Scope,
        conversation: Option<&str>,
        node: &str,
    ) -> Result<NodeMemory<'_, S>> {
        let Some(conversation) = conversation else {
            return Err(Error::Config(format!(
                "node memory for node {node:?} of {app} needs a conversation: node mode is \
                 only available where there is one (a Chatflow); use conversation memory or \
                 no memory instead"
            )));
        };
        if app.session().is_some() {
            return Err(Error::Config(format!(
                "node memory takes the app's scope, not a session ({app}); name the \
                 conversation separately"
            )));
        }
        let scope = app.clone().with_session(conversation)?.with_node(node)?;
        Ok(NodeMemory {
            engine: self,
            scope,
            pending: Vec::new(),
        })
    }

    /// Dify's node-memory cleanup task (seed 002, Future Considerations: "a task to clean
    /// up old node memory files"): clears every node memory within `within` that has not
    /// been written for more than `older_than_days` days, and reports them.
    ///
    /// The rule, as Dify's own cleanup tasks apply theirs (`clean_unused_datasets_task`,
    /// `clean_messages`: a retention in whole days, at least 1, counted back from now; what
    /// is older than the cutoff goes): a node memory is idle when its latest entry was
    /// written strictly before `now - older_than_days`. Writes are what count, as the last
    /// flush dates Dify's `node_memory/{app}/{conversation}/{node}.json`. A node memory that
    /// is already empty (its latest message comes before its latest [`NODE_CLEAR`]) is left
    /// alone and counted as empty, so running the task again writes nothing.
    ///
    /// The tape is never rewritten: clearing is [`NodeMemory::clear`]'s [`NODE_CLEAR`]
    /// anchor, with state `{"idle_days", "last_active"}`, written only if the node's latest
    /// entry is still the one read (compare-and-append; a node written to meanwhile is
    /// counted active). The turns stay on the tape, in search and in the conversation;
    /// only the node's memory starts again. `within` is any scope: an app, a user, a
    /// conversation or one node. With `dry_run` nothing is written.
    pub fn cleanup_node_memory(
        &self,
        within: &Scope,
        older_than_days: u32,
        dry_run: bool,
    ) -> Result<NodeCleanup> {
        if older_than_days == 0 {
            return Err(Error::Config(
                "node memory cleanup of memories idle for more than 0 days: the days must be \
                 at least 1 (Dify's retention settings are positive day counts); to empty a \
                 node's memory now, clear it (NodeMemory::clear, `memtape node clear`)"
                    .into(),
            ));
        }
        let now = self.now();
        let cutoff = chrono::Duration::try_days(i64::from(older_than_days))
            .and_then(|d| now.checked_sub_signed(d))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut report = NodeCleanup {
            cutoff,
            dry_run,
            cleared: Vec::new(),
            active: 0,
            empty: 0,
        };
        let mut nodes: Vec<ScopeInfo> = self
            .store
            .scopes(within.tenant())?
            .into_iter()
            .filter(|i| i.scope.node().is_some() && within.contains(&i.scope))
            .collect();
        nodes.sort_by_cached_key(|i| i.scope.to_string());
        for info in nodes {
            let memory = NodeMemory {
                engine: self,
                scope: info.scope.clone(),
                pending: Vec::new(),
            };
            let cleared = memory.cleared_at()?;
            let (Some(last_id), Some(last_active)) = (info.last_id, info.last_at) else {
                continue;
            };
            if info.head.is_none_or(|head| head <= cleared) {
                report.empty += 1;
                continue;
            }
            if last_active >= cutoff {
                report.active += 1;
                continue;
            }
            let cleared_by = if dry_run {
                None
            } else {
                let mut state = serde_json::Map::new();
                state.insert("idle_days".into(), older_than_days.into());
                state.insert("last_active".into(), last_active.to_rfc3339().into());
                let anchor = Payload::Anchor(memtape_core::Anchor {
                    name: NODE_CLEAR.into(),
                    state: Some(state),
                });
                let entry = NewEntry::new(info.scope.clone(), anchor, now).if_last(last_id);
                match self.append_entries(vec![entry]) {
                    Ok(written) => written.first().map(|e| e.id),
                    Err(Error::Store(memtape_store::Error::Conflict { .. })) => {
                        report.active += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            report.cleared.push(IdleNode {
                scope: info.scope,
                last_active,
                cleared_by,
            });
        }
        Ok(report)
    }
}

impl<S: Store> Engine<S> {
    /// Imports node memories in Dify's stored form: each `(app, conversation, node, file)`
    /// (the app a tenant/agent scope, optionally with a user) becomes that node's
    /// memory, turn by turn as [`NodeMemory::flush`] writes them (a `node.turn` event, the
    /// user message, the node's answer, linked along the thread), at the times the file
    /// gives. All in one transaction: a node that already has entries is refused
    /// ([`Error::SessionNotEmpty`]) and nothing is written.
    pub fn import_node_memory(
        &self,
        nodes: Vec<(Scope, String, String, NodeFile)>,
    ) -> Result<ImportReport> {
        let now = self.now();
        let mut entries: Vec<Entry> = Vec::new();
        let mut seen: Vec<Scope> = Vec::new();
        for (app, conversation, node, file) in nodes {
            let scope = self.node_memory(&app, Some(&conversation), &node)?.scope;
            if seen.contains(&scope) {
                return Err(Error::Invalid(memtape_core::Error::InvalidImport(format!(
                    "node {node} of conversation {conversation} comes twice"
                ))));
            }
            seen.push(scope.clone());
            // (Dify message id, its turn's answer) of the turns so far, oldest first.
            let mut turns: Vec<(String, EntryId)> = Vec::new();
            for pair in file.messages.chunks(2) {
                let [user, answer] = pair else {
                    return Err(Error::Invalid(memtape_core::Error::InvalidImport(format!(
                        "node {node} of conversation {conversation}: a user message \
                         without the node's answer"
                    ))));
                };
                let latest = |id: &str| turns.iter().rev().find(|(m, _)| m == id).map(|(_, a)| *a);
                let follows =
                    latest(&user.message_id).or_else(|| match user.parent_message_id.as_deref() {
                        Some(UUID_NIL) => turns.last().map(|(_, a)| *a),
                        Some(parent) => latest(parent),
                        None => None,
                    });
                let mark = BuiltinEvent::NodeTurn(NodeTurnMark {
                    message_id: user.message_id.clone(),
                    parent_message_id: user.parent_message_id.clone(),
                    starts_thread: follows.is_none(),
                });
                let at = user.created_at.unwrap_or(now);
                let mut push = |payload: Payload, meta: memtape_core::Meta, parent, at| {
                    let id = EntryId(entries.len() as u64 + 1);
                    entries.push(Entry {
                        id,
                        scope: scope.clone(),
                        parent,
                        payload,
                        meta,
                        created_at: at,
                        erased: None,
                    });
                    id
                };
                push(mark.to_payload(), memtape_core::Meta::new(), None, at);
                let user_id = push(
                    Payload::Message(file_message(user)),
                    file_meta(user),
                    follows,
                    at,
                );
                let answer_id = push(
                    Payload::Message(file_message(answer)),
                    file_meta(answer),
                    Some(user_id),
                    answer.created_at.unwrap_or(at),
                );
                turns.push((user.message_id.clone(), answer_id));
            }
        }
        for e in &entries {
            e.payload.validate()?;
        }
        self.restore_entries(entries)
    }

    /// The memory of node `node` of `app` in `conversation` in Dify's stored form: its
    /// turns since it was last cleared, oldest first (every thread; Dify's file holds
    /// them all). A node never written has no messages. A message written through
    /// memtape gets its turn's ids, its entry's time and its token count (the engine's
    /// counter); one imported from the form gets back what the file had.
    pub fn export_node_memory(
        &self,
        app: &Scope,
        conversation: &str,
        node: &str,
    ) -> Result<NodeFile> {
        let memory = self.node_memory(app, Some(conversation), node)?;
        let since = memory.cleared_at()?;
        let turns = memory.turns(since)?;
        let filter = Filter {
            after: Some(since),
            kinds: vec![Kind::Message],
            ..Filter::default()
        };
        let by_id: HashMap<EntryId, Entry> = self
            .store
            .scan(&memory.scope, &filter)?
            .into_iter()
            .map(|e| (e.id, e))
            .collect();
        let mut messages = Vec::new();
        for turn in &turns {
            // A turn of an old store without its answer is not a turn Dify could read.
            let Some(answer) = turn.assistant else {
                continue;
            };
            for id in [turn.user, answer] {
                if let Some(entry) = by_id.get(&id) {
                    messages.push(self.file_message_of(entry, &turn.mark));
                }
            }
        }
        Ok(NodeFile { messages })
    }

    /// A message of the stored form from its entry.
    fn file_message_of(&self, entry: &Entry, mark: &NodeTurnMark) -> NodeFileMessage {
        let message = entry.message();
        let text = message
            .map(|m| m.content_text().into_owned())
            .unwrap_or_default();
        let kept = entry.meta.get(DIFY_NODE_META).and_then(Value::as_object);
        let kept_str = |key: &str| kept.and_then(|k| k.get(key)).and_then(Value::as_str);
        NodeFileMessage {
            message_id: kept_str("message_id")
                .map_or_else(|| mark.message_id.clone(), str::to_owned),
            parent_message_id: match kept {
                Some(k) => k
                    .get("parent_message_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                None => mark.parent_message_id.clone(),
            },
            role: message.map_or(memtape_core::Role::User, |m| m.role),
            files: message.map(|m| m.files.clone()).unwrap_or_default(),
            token_count: match kept {
                Some(k) => k.get("token_count").and_then(Value::as_u64),
                None => Some(self.tokens().count(&text) as u64),
            },
            content: text,
            created_at: Some(entry.created_at),
            shape: kept
                .and_then(|k| k.get("shape"))
                .and_then(Shape::from_value)
                .unwrap_or_default(),
        }
    }

    /// The node memories within `within` (any scope: an app, a user, a conversation),
    /// sorted by scope.
    pub fn node_scopes(&self, within: &Scope) -> Result<Vec<Scope>> {
        let mut nodes: Vec<Scope> = self
            .store
            .scopes(within.tenant())?
            .into_iter()
            .map(|i| i.scope)
            .filter(|s| s.node().is_some() && within.contains(s))
            .collect();
        nodes.sort_by_cached_key(ToString::to_string);
        Ok(nodes)
    }
}

/// The tape's message for a message of the stored form.
fn file_message(m: &NodeFileMessage) -> Message {
    let mut message = Message::text(m.role, m.content.clone());
    message.files.clone_from(&m.files);
    message
}

/// What the tape keeps of a message of the stored form besides the message itself.
fn file_meta(m: &NodeFileMessage) -> memtape_core::Meta {
    let mut kept = serde_json::Map::new();
    kept.insert("message_id".into(), m.message_id.clone().into());
    kept.insert(
        "parent_message_id".into(),
        m.parent_message_id.clone().map_or(Value::Null, Value::from),
    );
    if let Some(n) = m.token_count {
        kept.insert("token_count".into(), n.into());
    }
    // A message the file gave no time gets one on the tape (the import's, or its turn's):
    // the shape says to leave it out again.
    let mut shape = m.shape.clone();
    if m.created_at.is_none() && !shape.absent.iter().any(|k| k == "created_at") {
        shape.absent.push("created_at".into());
    }
    if !shape.is_empty() {
        kept.insert("shape".into(), shape.to_value());
    }
    let mut meta = memtape_core::Meta::new();
    meta.insert(DIFY_NODE_META.into(), Value::Object(kept));
    meta
}

impl<S: Store> NodeMemory<'_, S> {
    /// The node's scope (tenant, app, user, conversation, node).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The turns added but not yet flushed.
    pub fn pending(&self) -> &[NodeTurn] {
        &self.pending
    }

    /// Adds a dialogue turn, kept until [`NodeMemory::flush`] (call it after the node ran).
    /// A turn needs a message id; it and the parent's are checked by [`check_message_id`].
    pub fn add_messages(&mut self, turn: NodeTurn) -> Result<()> {
        check_message_id("message_id", &turn.message_id)?;
        if let Some(parent) = &turn.parent_message_id {
            check_message_id("parent_message_id", parent)?;
        }
        self.pending.push(turn);
        Ok(())
    }

    /// Writes the buffered turns to the tape, in the order they were added, each turn (its
    /// user and assistant entries) in one transaction. A turn follows the node's latest
    /// turn of the same message when there is one (the node ran again for that message, as
    /// in a loop), else the latest turn of its parent message; without either it starts a
    /// thread. Returns the entries written. On an error the turns not yet written stay
    /// buffered.
    pub fn flush(&mut self) -> Result<Vec<Entry>> {
        let mut written = Vec::new();
        while let Some(turn) = self.pending.first() {
            let entries = self.write_turn(turn)?;
            written.extend(entries);
            self.pending.remove(0);
        }
        Ok(written)
    }

    fn write_turn(&self, turn: &NodeTurn) -> Result<Vec<Entry>> {
        let since = self.cleared_at()?;
        let turns = self.turns(since)?;
        let follows = match latest_turn(&turns, &turn.message_id) {
            Some(id) => Some(id),
            None => match turn.parent_message_id.as_deref() {
                Some(UUID_NIL) => self.latest_any(since)?,
                Some(parent) => latest_turn(&turns, parent),
                None => None,
            },
        };
        let mark = BuiltinEvent::NodeTurn(NodeTurnMark {
            message_id: turn.message_id.clone(),
            parent_message_id: turn.parent_message_id.clone(),
            starts_thread: follows.is_none(),
        });
        let now = self.engine.now();
        let mut user = Message::user(turn.user_content.clone());
        user.files.clone_from(&turn.user_files);
        let mut assistant = Message::assistant(turn.assistant_content.clone());
        assistant.files.clone_from(&turn.assistant_files);
        let entries = vec![
            NewEntry::new(self.scope.clone(), mark.to_payload(), now),
            NewEntry {
                parent: follows,
                ..NewEntry::new(self.scope.clone(), Payload::Message(user), now)
            },
            // Without a parent the store links it to the scope's head: the user entry
            // just written in the same transaction.
            NewEntry::new(self.scope.clone(), Payload::Message(assistant), now),
        ];
        let mut written = self.engine.append_entries(entries)?;
        written.remove(0);
        Ok(written)
    }

    /// The history for the node before it answers `current_message_id`, whose Dify parent
    /// is `parent_message_id`: the thread of turns that message continues, oldest first,
    /// within `max_token_limit` tokens counted with the engine's counter.
    ///
    /// The thread ends at the node's latest turn of `current_message_id` when it has one
    /// (the node already ran for this message, as in a loop, and those turns are context),
    /// else at its latest turn of the parent (for [`UUID_NIL`], its latest turn of any
    /// message); with neither the history is empty. From there it follows parent links back
    /// to the turn that started the thread (Dify's `extract_thread_messages`), so turns a
    /// regeneration replaced are left out. Node memory only holds the node's own turns, so
    /// the caller names the current message's parent (Dify reads it from its message table).
    ///
    /// The token limit drops the oldest messages until the rest fits, and the history then
    /// starts at a user message; it is strict, as everywhere in memtape
    /// ([`memtape_core::select_history`]): if the latest turn alone does not fit, the history
    /// is empty. Turns added but not flushed are not read.
    pub fn get_history(
        &self,
        current_message_id: &str,
        parent_message_id: Option<&str>,
        max_token_limit: usize,
    ) -> Result<Vec<NodeMessage>> {
        let limits = HistoryLimits {
            max_messages: usize::MAX,
            max_tokens: Some(max_token_limit),
        };
        let counter = self.engine.tokens();
        self.history_with(current_message_id, parent_message_id, |messages| {
            select_history(messages, &limits, counter)
        })
    }

    /// The history for the node under Dify's `MemoryConfig` (mode `node`): the thread of
    /// [`NodeMemory::get_history`], limited to the last `window.size` turns (at most 500,
    /// Dify's cap) and to `max_token_limit` tokens ([`MemoryConfig::select`]). Render it for
    /// a completion model with [`MemoryConfig::history_text`].
    ///
    /// The config is checked first ([`MemoryConfig::validate`]); a config of mode
    /// `conversation` is a configuration error: it reads the conversation's memory
    /// ([`Engine::dify_history`]), not the node's.
    pub fn dify_history(
        &self,
        current_message_id: &str,
        parent_message_id: Option<&str>,
        config: &MemoryConfig,
        max_token_limit: usize,
    ) -> Result<Vec<NodeMessage>> {
        config.validate()?;
        if config.mode != MemoryMode::Node {
            return Err(Error::Config(format!(
                "this memory config has mode conversation: it reads the conversation's memory \
                 (Engine::dify_history, `memtape history`), not node {}'s; set mode node",
                self.scope.node().unwrap_or_default()
            )));
        }
        let counter = self.engine.tokens();
        self.history_with(current_message_id, parent_message_id, |messages| {
            config.select(messages, max_token_limit, counter)
        })
    }

    /// The thread [`NodeMemory::get_history`] describes, narrowed by `select` (which gets
    /// its messages and returns the indices to keep, in order).
    fn history_with(
        &self,
        current_message_id: &str,
        parent_message_id: Option<&str>,
        select: impl FnOnce(&[&Message]) -> Vec<usize>,
    ) -> Result<Vec<NodeMessage>> {
        check_message_id("message_id", current_message_id)?;
        if let Some(parent) = parent_message_id {
            check_message_id("parent_message_id", parent)?;
        }
        let since = self.cleared_at()?;
        let turns = self.turns(since)?;
        let leaf = match latest_turn(&turns, current_message_id) {
            Some(id) => Some(id),
            None => match parent_message_id {
                Some(UUID_NIL) => self.latest_any(since)?,
                Some(parent) => latest_turn(&turns, parent),
                None => None,
            },
        };
        let Some(leaf) = leaf else {
            return Ok(Vec::new());
        };
        let mut owner: HashMap<EntryId, &Turn> = HashMap::new();
        for t in &turns {
            owner.insert(t.user, t);
            owner.extend(t.assistant.map(|a| (a, t)));
        }
        let mut thread = self.engine.walk(&self.scope, leaf, since, usize::MAX)?;
        if let Some(start) = thread.iter().rposition(|e| {
            owner
                .get(&e.id)
                .is_some_and(|t| t.mark.starts_thread && t.user == e.id)
        }) {
            thread.drain(..start);
        }
        let messages: Vec<&Message> = thread.iter().filter_map(Entry::message).collect();
        let keep = select(&messages);
        let mut thread: Vec<Option<Entry>> = thread.into_iter().map(Some).collect();
        Ok(keep
            .into_iter()
            .filter_map(|i| thread[i].take())
            .map(|entry| {
                let mark = owner.get(&entry.id).map(|t| &t.mark);
                NodeMessage {
                    message_id: mark.map(|m| m.message_id.clone()).unwrap_or_default(),
                    parent_message_id: mark.and_then(|m| m.parent_message_id.clone()),
                    entry,
                }
            })
            .collect())
    }

    /// Empties the node's memory: drops the buffered turns and writes a [`NODE_CLEAR`]
    /// anchor, after which the node has no turns (the earlier ones stay on the tape).
    pub fn clear(&mut self) -> Result<Entry> {
        self.pending.clear();
        self.engine.anchor(&self.scope, NODE_CLEAR, None)
    }

    /// The id of the latest [`NODE_CLEAR`] anchor (0 when never cleared).
    fn cleared_at(&self) -> Result<EntryId> {
        let filter = Filter {
            kinds: vec![Kind::Anchor],
            name: Some(NODE_CLEAR.into()),
            order: Order::Desc,
            limit: Some(1),
            ..Filter::default()
        };
        let found = self.engine.store.scan(&self.scope, &filter)?;
        Ok(found.first().map_or(EntryId(0), |e| e.id))
    }

    /// The node's turns after `since`, oldest first: each `node.turn` event with the two
    /// messages after it, and turns of old stores from their messages' meta.
    fn turns(&self, since: EntryId) -> Result<Vec<Turn>> {
        let filter = Filter {
            after: Some(since),
            ..Filter::default()
        };
        let mut turns: Vec<Turn> = Vec::new();
        // A mark waiting for its messages: (mark, user once seen).
        let mut open: Option<(NodeTurnMark, Option<EntryId>)> = None;
        for e in self.engine.store.scan(&self.scope, &filter)? {
            if let Ok(Some(BuiltinEvent::NodeTurn(mark))) = BuiltinEvent::from_payload(&e.payload) {
                open = Some((mark, None));
                continue;
            }
            if e.kind() != Kind::Message {
                continue;
            }
            match open.take() {
                Some((mark, None)) => open = Some((mark, Some(e.id))),
                Some((mark, Some(user))) => turns.push(Turn {
                    mark,
                    user,
                    assistant: Some(e.id),
                }),
                None => {
                    if let Some(turn) = legacy_turn(&e) {
                        turns.push(turn);
                    } else if let Some(last) = turns.last_mut().filter(|t| {
                        t.assistant.is_none()
                            && legacy_id(&e).is_some_and(|id| id == t.mark.message_id)
                    }) {
                        last.assistant = Some(e.id);
                    }
                }
            }
        }
        Ok(turns)
    }

    /// The node's latest message after `since`.
    fn latest_any(&self, since: EntryId) -> Result<Option<EntryId>> {
        let head = self
            .engine
            .store
            .scope_info(&self.scope)?
            .and_then(|i| i.head);
        Ok(head.filter(|h| *h > since))
    }
}

/// The longest Dify message id node memory takes, in bytes (Dify's are UUIDs, 36 bytes).
pub const MAX_MESSAGE_ID_BYTES: usize = 256;

/// Checks a Dify message id (`what` names the field in the error): 1 to
/// [`MAX_MESSAGE_ID_BYTES`] bytes, no control character.
pub fn check_message_id(what: &str, id: &str) -> Result<()> {
    let problem = if id.is_empty() {
        Some("is empty".to_owned())
    } else if id.len() > MAX_MESSAGE_ID_BYTES {
        Some(format!(
            "is {} bytes long (at most {MAX_MESSAGE_ID_BYTES})",
            id.len()
        ))
    } else if id.chars().any(char::is_control) {
        Some("holds a control character".to_owned())
    } else {
        None
    };
    match problem {
        Some(p) => Err(Error::Invalid(memtape_core::Error::InvalidMessage(
            format!("node memory: the {what} {p}"),
        ))),
        None => Ok(()),
    }
}

/// The last entry of the latest turn of `message_id`: its assistant message.
fn latest_turn(turns: &[Turn], message_id: &str) -> Option<EntryId> {
    turns
        .iter()
        .rev()
        .find(|t| t.mark.message_id == message_id)
        .map(|t| t.assistant.unwrap_or(t.user))
}

/// The Dify message id an old store kept in an entry's meta.
fn legacy_id(e: &Entry) -> Option<String> {
    e.meta
        .get(NODE_MESSAGE_ID)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A turn of an old store, started by its user message, whose meta held the turn's ids.
fn legacy_turn(e: &Entry) -> Option<Turn> {
    if e.message()?.role != memtape_core::Role::User {
        return None;
    }
    Some(Turn {
        mark: NodeTurnMark {
            message_id: legacy_id(e)?,
            parent_message_id: e
                .meta
                .get(NODE_PARENT_MESSAGE_ID)
                .and_then(Value::as_str)
                .map(str::to_owned),
            starts_thread: e.meta.get(NODE_STARTS_THREAD).and_then(Value::as_bool) == Some(true),
        },
        user: e.id,
        assistant: None,
    })
}
