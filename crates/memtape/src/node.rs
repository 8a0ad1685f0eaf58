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
//! is two entries on the tape: the user message and the assistant message after it. Dify's
//! message ids are the caller's strings; they live in the entries' meta
//! ([`NODE_MESSAGE_ID`], [`NODE_PARENT_MESSAGE_ID`]), and the parent link of a turn's user
//! entry points at the turn it follows, so the thread is a walk back through parent links
//! (Dify's `extract_thread_messages`). `clear` writes a [`NODE_CLEAR`] anchor; the turns
//! before it stay on the tape but leave the node's memory.

use memtape_core::{
    Entry, EntryId, FileRef, Filter, HistoryLimits, Kind, Message, NewEntry, Order, Payload, Scope,
    select_history,
};
use memtape_store::Store;
use serde_json::{Map, Value};

use crate::{Engine, Error, PAGE, Result};

/// Dify's default `max_token_limit` for history.
pub const DEFAULT_MAX_TOKEN_LIMIT: usize = 2000;

/// The anchor `NodeMemory::clear` writes: node memory starts again after it.
pub const NODE_CLEAR: &str = "node/clear";

/// The meta key holding the Dify message id a turn belongs to (on both of its entries).
pub const NODE_MESSAGE_ID: &str = "message_id";

/// The meta key holding the Dify parent message id a turn was added with (on its user
/// entry; `null` when it had none).
pub const NODE_PARENT_MESSAGE_ID: &str = "parent_message_id";

/// The meta key marking a turn's user entry that starts a thread in this node's memory: its
/// Dify parent is `None`, or a message this node has no turn for. The store links every
/// message to an earlier one, so the thread walk ends at this mark.
pub const NODE_STARTS_THREAD: &str = "starts_thread";

/// Dify's `UUID_NIL` parent: a message from before threads, which follows whatever came
/// last (a linear conversation).
pub const UUID_NIL: &str = "00000000-0000-0000-0000-000000000000";

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
    /// A turn needs a message id.
    pub fn add_messages(&mut self, turn: NodeTurn) -> Result<()> {
        if turn.message_id.is_empty() {
            return Err(Error::Invalid(memtape_core::Error::InvalidMessage(
                "a node memory turn needs a message_id".into(),
            )));
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
        let follows = match self.latest_turn(&turn.message_id, since)? {
            Some(id) => Some(id),
            None => match turn.parent_message_id.as_deref() {
                Some(UUID_NIL) => self.latest_any(since)?,
                Some(parent) => self.latest_turn(parent, since)?,
                None => None,
            },
        };
        let mut user_meta = Map::new();
        user_meta.insert(NODE_MESSAGE_ID.into(), turn.message_id.clone().into());
        user_meta.insert(
            NODE_PARENT_MESSAGE_ID.into(),
            turn.parent_message_id
                .clone()
                .map_or(Value::Null, Value::from),
        );
        if follows.is_none() {
            user_meta.insert(NODE_STARTS_THREAD.into(), true.into());
        }
        let mut assistant_meta = Map::new();
        assistant_meta.insert(NODE_MESSAGE_ID.into(), turn.message_id.clone().into());
        let now = self.engine.now();
        let mut user = Message::user(turn.user_content.clone());
        user.files.clone_from(&turn.user_files);
        let mut assistant = Message::assistant(turn.assistant_content.clone());
        assistant.files.clone_from(&turn.assistant_files);
        let entries = vec![
            NewEntry {
                parent: follows,
                meta: user_meta,
                ..NewEntry::new(self.scope.clone(), Payload::Message(user), now)
            },
            // Without a parent the store links it to the scope's head: the user entry
            // just written in the same transaction.
            NewEntry {
                meta: assistant_meta,
                ..NewEntry::new(self.scope.clone(), Payload::Message(assistant), now)
            },
        ];
        self.engine.append_entries(entries)
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
    ) -> Result<Vec<Entry>> {
        let since = self.cleared_at()?;
        let leaf = match self.latest_turn(current_message_id, since)? {
            Some(id) => Some(id),
            None => match parent_message_id {
                Some(UUID_NIL) => self.latest_any(since)?,
                Some(parent) => self.latest_turn(parent, since)?,
                None => None,
            },
        };
        let Some(leaf) = leaf else {
            return Ok(Vec::new());
        };
        let mut thread = self.engine.walk(&self.scope, leaf, since, usize::MAX)?;
        if let Some(start) = thread
            .iter()
            .rposition(|e| e.meta.get(NODE_STARTS_THREAD).and_then(Value::as_bool) == Some(true))
        {
            thread.drain(..start);
        }
        let messages: Vec<&Message> = thread.iter().filter_map(Entry::message).collect();
        let limits = HistoryLimits {
            max_messages: usize::MAX,
            max_tokens: Some(max_token_limit),
        };
        let keep = select_history(&messages, &limits, self.engine.tokens());
        let mut thread: Vec<Option<Entry>> = thread.into_iter().map(Some).collect();
        Ok(keep.into_iter().filter_map(|i| thread[i].take()).collect())
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

    /// The last entry of the node's latest turn of `message_id` after `since`: its
    /// assistant entry. Reads the node's messages newest first, a page at a time.
    fn latest_turn(&self, message_id: &str, since: EntryId) -> Result<Option<EntryId>> {
        let mut before: Option<EntryId> = None;
        loop {
            let filter = Filter {
                after: Some(since),
                before,
                kinds: vec![Kind::Message],
                order: Order::Desc,
                limit: Some(PAGE),
                ..Filter::default()
            };
            let page = self.engine.store.scan(&self.scope, &filter)?;
            if let Some(found) = page
                .iter()
                .find(|e| e.meta.get(NODE_MESSAGE_ID).and_then(Value::as_str) == Some(message_id))
            {
                return Ok(Some(found.id));
            }
            match page.last() {
                Some(last) if page.len() == PAGE => before = Some(last.id),
                _ => return Ok(None),
            }
        }
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
