//! Session lifecycle: nanobot's /new (archive, then clear) and daily-note retention on start.
//!
//! nanobot's `/new` (seed 000) waits for any consolidation of the session to finish (it
//! takes the session's consolidation lock), archives the messages not yet consolidated
//! (a summary appended to HISTORY.md), and only then clears the session; if archiving
//! fails the session is not cleared and nothing is lost. memtape never rewrites the tape,
//! so "clear" is two entries written in one transaction: the consolidation pointer moved
//! through the last archived message (history starts after it) and a [`SESSION_NEW`]
//! anchor marking where the new conversation starts. The old messages stay on the tape.
//!
//! Daily notes are kept for `retention_days` (Bub's default, 30): [`Engine::prune_daily`]
//! prunes one memory scope, [`Engine::prune_all_daily`] every memory scope of a tenant, for
//! servers and the CLI to call when they start.

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, PoisonError};

use memtape_core::events::BuiltinEvent;
use memtape_core::memory::Recorded;
use memtape_core::summary::Summarizer;
use memtape_core::{Entry, EntryId, Message, NewEntry, Payload, Scope};
use memtape_store::Store;
use serde_json::Map;

use crate::{Engine, Error, Result, memory_scope};

/// How many days of daily notes are kept by default (Bub's `retention_days`).
pub const DEFAULT_RETENTION_DAYS: u32 = 30;

/// The anchor nanobot's /new leaves in a session: the conversation starts again after it.
/// Its state holds `archived` (how many messages were archived) and `through` (the last
/// archived entry, 0 when there was nothing to archive).
pub const SESSION_NEW: &str = "session/new";

/// The sessions whose consolidation is running, in this process (nanobot's
/// `_consolidation_locks`: one lock per session).
#[derive(Debug, Default)]
pub(crate) struct ConsolidationLocks {
    held: Mutex<HashSet<Scope>>,
    released: Condvar,
}

/// A session's consolidation lock, held until dropped. Consolidation (moving a session's
/// pointer after summarizing) and /new take it, so they never overlap on one session.
#[derive(Debug)]
pub struct ConsolidationGuard<'e> {
    locks: &'e ConsolidationLocks,
    session: Scope,
}

impl ConsolidationGuard<'_> {
    /// The session it locks.
    pub fn session(&self) -> &Scope {
        &self.session
    }
}

impl Drop for ConsolidationGuard<'_> {
    fn drop(&mut self) {
        // A panic while the set was held cannot leave it half-changed: take it anyway.
        let mut held = self
            .locks
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.remove(&self.session);
        self.locks.released.notify_all();
    }
}

/// What nanobot's /new did to a session.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSession {
    /// How many unconsolidated messages were archived.
    pub archived: usize,
    /// The HISTORY.md change holding their summary (`None` when there was nothing to
    /// archive, or the summary was empty).
    pub history: Option<Recorded>,
    /// The [`SESSION_NEW`] anchor (`None` when the session had no entries at all).
    pub boundary: Option<Entry>,
}

/// What pruning a tenant's daily notes removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Each memory scope that lost notes, with how many.
    pub pruned: Vec<(Scope, usize)>,
}

impl PruneReport {
    /// How many notes went in all.
    pub fn total(&self) -> usize {
        self.pruned.iter().map(|(_, n)| n).sum()
    }
}

impl<S: Store> Engine<S> {
    /// Takes `session`'s consolidation lock, waiting while another thread of this process
    /// holds it (nanobot's per-session `asyncio.Lock`). The lock is in-process: two
    /// processes writing one store are kept apart by the store's write rules only.
    pub fn lock_consolidation(&self, session: &Scope) -> ConsolidationGuard<'_> {
        let locks = &self.consolidation;
        let mut held = locks.held.lock().unwrap_or_else(PoisonError::into_inner);
        while held.contains(session) {
            held = locks
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(session.clone());
        ConsolidationGuard {
            locks,
            session: session.clone(),
        }
    }

    /// Takes `session`'s consolidation lock if it is free (nanobot's `_consolidating` check:
    /// a consolidation already running is not started twice).
    pub fn try_lock_consolidation(&self, session: &Scope) -> Option<ConsolidationGuard<'_>> {
        let locks = &self.consolidation;
        let mut held = locks.held.lock().unwrap_or_else(PoisonError::into_inner);
        if !held.insert(session.clone()) {
            return None;
        }
        Some(ConsolidationGuard {
            locks,
            session: session.clone(),
        })
    }

    /// nanobot's `/new`: waits for any running consolidation of `session`, archives its
    /// unconsolidated messages (the current thread after the consolidation pointer), then
    /// clears it.
    ///
    /// Archiving summarizes the messages with `summarizer` and appends the summary to the
    /// HISTORY.md of the session's memory (its agent and user, or its agent). If the
    /// summarizer fails or the append fails, the error is returned and the session is not
    /// cleared. An empty summary means nothing in the span was worth keeping (the
    /// extractive summarizer skips greetings and tool output): nothing is appended and the
    /// session is cleared, as nanobot does with an empty `history_entry`. A summarizer that
    /// could not make a summary (an LLM reply without one) must say so with an error. Clearing moves the consolidation pointer
    /// through the last archived message and writes a [`SESSION_NEW`] anchor, in one
    /// transaction, so the next history is empty while every entry stays on the tape.
    /// A message appended while /new runs comes after the archived ones and stays in the
    /// history.
    pub fn new_session(&self, session: &Scope, summarizer: &dyn Summarizer) -> Result<NewSession> {
        if session.session().is_none() || session.node().is_some() {
            return Err(Error::Invalid(memtape_core::Error::InvalidScope(format!(
                "{session}: /new starts a new conversation in a session (node memory is \
                 cleared with NodeMemory::clear)"
            ))));
        }
        let _lock = self.lock_consolidation(session);
        let Some(info) = self.store.scope_info(session)? else {
            return Ok(NewSession {
                archived: 0,
                history: None,
                boundary: None,
            });
        };
        let pending = match info.head {
            Some(head) => self.walk(session, head, info.last_consolidated, usize::MAX)?,
            None => Vec::new(),
        };
        let messages: Vec<Message> = pending.iter().filter_map(Entry::message).cloned().collect();
        let mut history = None;
        let mut through = EntryId(0);
        if let Some(last) = pending.last() {
            let summary = summarizer.summarize(&messages, None)?;
            if !summary.trim().is_empty() {
                history = Some(self.append_history(&memory_scope(session)?, &summary)?);
            }
            through = last.id;
        }
        let now = self.now();
        let mut state = Map::new();
        state.insert("archived".into(), messages.len().into());
        state.insert("through".into(), through.0.into());
        let mut clear = Vec::new();
        if through > info.last_consolidated {
            clear.push(NewEntry::new(
                session.clone(),
                BuiltinEvent::consolidated(through).to_payload(),
                now,
            ));
        }
        clear.push(NewEntry::new(
            session.clone(),
            Payload::Anchor(memtape_core::Anchor {
                name: SESSION_NEW.into(),
                state: Some(state),
            }),
            now,
        ));
        let boundary = self.append_entries(clear)?.pop();
        Ok(NewSession {
            archived: messages.len(),
            history,
            boundary,
        })
    }

    /// Prunes the daily notes older than `retention_days` from every memory scope of
    /// `tenant` (each agent, and each agent and user, that has memory): what a server or
    /// the CLI runs when it starts (Bub's planned "auto-prune on session start").
    pub fn prune_all_daily(&self, tenant: &str, retention_days: u32) -> Result<PruneReport> {
        let mut report = PruneReport::default();
        for info in self.store.scopes(tenant)? {
            if info.scope.session().is_some() {
                continue;
            }
            let pruned = self.prune_daily(&info.scope, retention_days)?;
            if pruned > 0 {
                report.pruned.push((info.scope, pruned));
            }
        }
        Ok(report)
    }
}
