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

use memtape_core::events::BuiltinEvent;
use memtape_core::memory::Recorded;
use memtape_core::summary::Summarizer;
use memtape_core::{Entry, EntryId, Message, NewEntry, Payload, Scope};
use memtape_store::{Store, StoreLock, Wait};
use serde_json::Map;

use crate::{Engine, Error, Result, memory_scope};

/// How many days of daily notes are kept by default (Bub's `retention_days`).
pub const DEFAULT_RETENTION_DAYS: u32 = 30;

/// The anchor nanobot's /new leaves in a session: the conversation starts again after it.
/// Its state holds `archived` (how many messages were archived) and `through` (the last
/// archived entry, 0 when there was nothing to archive).
pub const SESSION_NEW: &str = "session/new";

/// A session's consolidation lock, held until dropped. Consolidation (moving a session's
/// pointer after summarizing) and /new take it, so they never overlap on one session, in
/// this process or any other that shares the store ([`Store::lock`]).
#[derive(Debug)]
pub struct ConsolidationGuard {
    session: Scope,
    _lock: StoreLock,
}

impl ConsolidationGuard {
    /// The session it locks.
    pub fn session(&self) -> &Scope {
        &self.session
    }
}

/// The name of a session's consolidation lock.
fn consolidation_lock(session: &Scope) -> String {
    format!("consolidation {session}")
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
    /// What the model's consolidation did, when a model archived the messages
    /// ([`Engine::new_session_with_model`]).
    pub consolidated: Option<crate::Consolidated>,
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
    /// Takes `session`'s consolidation lock, waiting while another thread or process
    /// holds it (nanobot's per-session `asyncio.Lock`, made to hold across processes).
    pub fn lock_consolidation(&self, session: &Scope) -> Result<ConsolidationGuard> {
        let lock = self
            .store
            .lock(session.tenant(), &consolidation_lock(session), Wait::Block)?
            .ok_or_else(|| Error::Internal("a blocking lock returned nothing".into()))?;
        Ok(ConsolidationGuard {
            session: session.clone(),
            _lock: lock,
        })
    }

    /// Takes `session`'s consolidation lock if it is free (nanobot's `_consolidating` check:
    /// a consolidation already running, here or in another process, is not started twice).
    pub fn try_lock_consolidation(&self, session: &Scope) -> Result<Option<ConsolidationGuard>> {
        let lock = self
            .store
            .lock(session.tenant(), &consolidation_lock(session), Wait::Try)?;
        Ok(lock.map(|lock| ConsolidationGuard {
            session: session.clone(),
            _lock: lock,
        }))
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
        let _lock = self.lock_consolidation(session)?;
        let Some(info) = self.store.scope_info(session)? else {
            return Ok(NewSession {
                archived: 0,
                history: None,
                boundary: None,
                consolidated: None,
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
            consolidated: None,
        })
    }

    /// nanobot's `/new` with a model: waits for any running consolidation of `session`,
    /// consolidates every unconsolidated message with `llm` by `options` (with
    /// `archive_all` whatever they say: a HISTORY.md
    /// entry and the new MEMORY.md through `save_memory`), and clears the session in the
    /// same transaction. If the model fails or answers badly, the error is returned and
    /// nothing changed: the session is not cleared (nanobot: "Memory archival failed,
    /// session not cleared").
    pub fn new_session_with_model(
        &self,
        session: &Scope,
        llm: &dyn memtape_llm::Llm,
        options: crate::ConsolidateOptions,
    ) -> Result<NewSession> {
        crate::consolidate::check_session(session)?;
        let _lock = self.lock_consolidation(session)?;
        if self.store.scope_info(session)?.is_none() {
            return Ok(NewSession {
                archived: 0,
                history: None,
                boundary: None,
                consolidated: None,
            });
        }
        let now = self.now();
        let anchor = |archived: usize, through: EntryId| {
            let mut state = Map::new();
            state.insert("archived".into(), archived.into());
            state.insert("through".into(), through.0.into());
            vec![NewEntry::new(
                session.clone(),
                Payload::Anchor(memtape_core::Anchor {
                    name: SESSION_NEW.into(),
                    state: Some(state),
                }),
                now,
            )]
        };
        let options = crate::ConsolidateOptions {
            archive_all: true,
            ..options
        };
        let done = self.consolidate_locked(session, llm, options, &anchor)?;
        let last_anchor = memtape_core::Filter {
            kinds: vec![memtape_core::Kind::Anchor],
            name: Some(SESSION_NEW.into()),
            order: memtape_core::Order::Desc,
            limit: Some(1),
            ..Default::default()
        };
        let boundary = self.store.scan(session, &last_anchor)?;
        Ok(NewSession {
            archived: done.messages,
            history: None,
            boundary: boundary.into_iter().next(),
            consolidated: Some(done),
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
