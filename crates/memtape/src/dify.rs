//! Dify's `MemoryConfig` on the engine: conversation memory (Dify's `TokenBufferMemory`)
//! read the way an LLM node configured with it reads it.
//!
//! [`Engine::dify_history`] walks the session's current thread back from its head, after
//! the consolidation pointer, only as far as the configured window can reach, and selects
//! with [`MemoryConfig::select`] (the query being answered left out, the last
//! `window.size` turns up to Dify's cap of 500, the token limit). Node memory takes the same
//! config through [`crate::NodeMemory::dify_history`]. The text a completion model gets is
//! [`MemoryConfig::history_text`] of the result, and the current query is
//! [`MemoryConfig::render_query`]; both are pure, in `memtape_core::dify`, whose items this
//! module re-exports.

use std::cell::Cell;

pub use memtape_core::dify::*;
use memtape_core::{Entry, EntryId, Message, Role, Scope};
use memtape_store::Store;

use crate::{Engine, Error, PAGE, Result};

impl<S: Store> Engine<S> {
    /// The conversation memory an LLM node with `config` reads from `session` (Dify's
    /// `TokenBufferMemory.get_history_prompt_messages` under the node's `MemoryConfig`),
    /// within `max_token_limit` tokens of the engine's counter, oldest first.
    ///
    /// The config is checked first ([`MemoryConfig::validate`]); a config of node mode is a
    /// configuration error here: node memory is read with
    /// [`Engine::node_memory`] and [`crate::NodeMemory::dify_history`].
    pub fn dify_history(
        &self,
        session: &Scope,
        config: &MemoryConfig,
        max_token_limit: usize,
    ) -> Result<Vec<Entry>> {
        config.validate()?;
        if config.mode == MemoryMode::Node {
            return Err(Error::Config(format!(
                "this memory config has mode node: node memory belongs to one node of a \
                 conversation; read it with Engine::node_memory and NodeMemory::dify_history \
                 (`memtape node history`), or use mode conversation for {session}"
            )));
        }
        let Some(info) = self.store.scope_info(session)? else {
            return Ok(Vec::new());
        };
        let Some(head) = info.head else {
            return Ok(Vec::new());
        };
        // The window counts turns; a turn starts at a user message. Reading one user
        // message more than the window (the query being answered may be the last one) is
        // all the selection can use.
        let users = config.message_limit().saturating_add(1);
        let thread = self.walk_turns(session, head, info.last_consolidated, users)?;
        let messages: Vec<&Message> = thread.iter().filter_map(Entry::message).collect();
        let keep = config.select(&messages, max_token_limit, self.tokens());
        let mut thread: Vec<Option<Entry>> = thread.into_iter().map(Some).collect();
        Ok(keep.into_iter().filter_map(|i| thread[i].take()).collect())
    }

    /// Walks the thread ending at `leaf` back to a root, to the first entry at or before
    /// `stop_at`, or to the entry before the `users`-th user message from the end (that
    /// one included), reading the store a page at a time.
    fn walk_turns(
        &self,
        scope: &Scope,
        leaf: EntryId,
        stop_at: EntryId,
        users: usize,
    ) -> Result<Vec<Entry>> {
        let seen = Cell::new(0usize);
        let stop = |e: &Entry| {
            if e.id <= stop_at || seen.get() >= users {
                return true;
            }
            if e.message().is_some_and(|m| m.role == Role::User) {
                seen.set(seen.get() + 1);
            }
            false
        };
        self.walk_until(scope, leaf, stop_at, PAGE, stop, usize::MAX)
    }
}
