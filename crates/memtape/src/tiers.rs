//! The memory of an agent, or of an agent and one user: reading its view and versions, and
//! recording changes. A change is computed from what was read and appended only if nothing
//! was written to the scope in between (compare-and-append); the threads of one process
//! write through the scope's one writer (`writer.rs`), which computes their changes in turn
//! and commits them together, and a conflict with another process computes them again
//! from the new state, so two writers never overwrite each other's changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::NaiveDate;
use memtape_core::memory::{Change, MemoryLog, MemoryView, Op, Recorded, paths};
use memtape_core::{AsOf, EntryId, Filter, Kind, Scope, events};
use memtape_store::Store;

use crate::{Engine, Error, Result};

/// How many times a change is recomputed when other writers keep winning.
pub(crate) const ATTEMPTS: usize = 16;

/// Waits before attempt `attempt + 1` of a write another writer beat: 1 ms doubling to
/// 50 ms, with jitter, so writers that collided do not collide again in step.
pub(crate) fn back_off(attempt: usize) {
    let ceiling = (1u64 << attempt.min(6)).min(50) * 1000;
    let jitter = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()),
    ) % ceiling;
    std::thread::sleep(std::time::Duration::from_micros(ceiling / 2 + jitter / 2));
}

thread_local! {
    /// The entries that cause what this thread is doing now ([`caused_by`]); `None`
    /// outside of any.
    static CAUSES: std::cell::RefCell<Option<Vec<EntryId>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with every memory change it records naming `causes` as what caused it (the
/// tool call being run, the message being captured, the span being consolidated, and the
/// model calls made meanwhile: [`note_cause`]), so `memtape memory blame` can lead from a
/// line to its conversation. The engine is synchronous: everything `f` writes, it writes
/// on this thread.
pub(crate) fn caused_by<T>(causes: impl IntoIterator<Item = EntryId>, f: impl FnOnce() -> T) -> T {
    /// Puts the outer causes back, even if `f` panics.
    struct Restore(Option<Vec<EntryId>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CAUSES.with(|c| *c.borrow_mut() = outer);
        }
    }
    let mut now: Vec<EntryId> = CAUSES.with(|c| c.borrow().clone().unwrap_or_default());
    now.extend(causes);
    let _restore = Restore(CAUSES.with(|c| c.replace(Some(now))));
    f()
}

/// Adds `id` to the causes of what this thread is doing now, if it is doing something
/// with causes ([`caused_by`]).
pub(crate) fn note_cause(id: EntryId) {
    CAUSES.with(|c| {
        if let Some(causes) = c.borrow_mut().as_mut() {
            causes.push(id);
        }
    });
}

/// `change`, naming the causes of what this thread is doing now.
pub(crate) fn with_causes(change: Change) -> Change {
    let causes = CAUSES.with(|c| c.borrow().clone().unwrap_or_default());
    change.caused_by(causes)
}

/// Checks that `scope` can hold memory: an agent, or an agent and a user (not a session).
pub fn check_memory_scope(scope: &Scope) -> Result<()> {
    if scope.session().is_some() {
        return Err(Error::Invalid(memtape_core::Error::InvalidScope(format!(
            "{scope}: memory belongs to an agent or an agent and a user, not to a session"
        ))));
    }
    Ok(())
}

/// The memory of `scope`: a session's (or a node's) agent-and-user scope, or the agent's
/// when the session has no user; an agent or agent-and-user scope is its own.
pub fn memory_scope(scope: &Scope) -> Result<Scope> {
    Ok(Scope::from_parts(
        scope.tenant().to_owned(),
        scope.agent_name().to_owned(),
        scope.user().map(str::to_owned),
        None,
        None,
    )?)
}

/// The memory logs read lately, by scope, each with the last entry id it was read through
/// (at most [`LogCache::SCOPES`] scopes; past that it starts afresh). Reading a log then
/// costs the changes made since, not the whole history.
///
/// Each scope has a slot with its own lock, held while the log is brought up to date, so
/// threads that read one scope at once wait for one catch-up instead of each reading the
/// whole log again (under a burst of WAL captures and context builds, that was every
/// reader, each holding a copy of the history).
#[derive(Default)]
pub(crate) struct LogCache {
    slots: Mutex<HashMap<Scope, Arc<Mutex<LogSlot>>>>,
    /// The store's latest erasure when the logs were last checked against it.
    erasure: Mutex<EntryId>,
    /// How many times a log was read from its start (the test of the slots counts them).
    #[cfg(test)]
    whole_reads: std::sync::atomic::AtomicUsize,
}

/// One scope's log as last read, and the id it was read through (0: not read yet).
#[derive(Default)]
struct LogSlot {
    log: Arc<MemoryLog>,
    through: EntryId,
}

impl LogCache {
    /// How many scopes' logs are kept.
    const SCOPES: usize = 64;

    /// The slot of `scope`, made empty when there is none.
    fn slot(&self, scope: &Scope) -> Arc<Mutex<LogSlot>> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(scope) {
            return Arc::clone(slot);
        }
        if slots.len() >= Self::SCOPES {
            slots.clear();
        }
        Arc::clone(slots.entry(scope.clone()).or_default())
    }

    /// Forgets every log (an erasure changed entries they were read from).
    pub(crate) fn clear(&self) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Forgets every log when the store's latest erasure is not the one seen last: an
    /// erasure in this process or another changed entries the logs were read from, and
    /// a log only ever reads what came after it.
    fn check_erasures(&self, latest: EntryId) {
        let mut seen = self.erasure.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen != latest {
            self.clear();
            *seen = latest;
        }
    }

    /// This process has just committed `entries` (memory changes of `scope`) after the
    /// scope's `version`-th change, compare-and-append, so nothing of the scope came
    /// between: a log kept at exactly that version is moved on with them, and the next
    /// read need not read them back. A log kept at another version is left to catch up
    /// from the store.
    pub(crate) fn committed(&self, scope: &Scope, version: u64, entries: &[memtape_core::Entry]) {
        let Some(last) = entries.last() else {
            return;
        };
        let slot = self.slot(scope);
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.through == EntryId(0) || slot.log.version() != version || slot.through >= last.id {
            return;
        }
        if Arc::make_mut(&mut slot.log).extend(entries).is_ok() {
            slot.through = last.id;
        }
    }
}

/// A memory file's lines and where each came from ([`Engine::blame`]).
#[derive(Clone, Debug)]
pub struct Blame {
    /// The file.
    pub path: String,
    /// The memory it was found in: the scope's own, or the agent's shared memory.
    pub memory: Scope,
    /// That memory's version at the moment asked about.
    pub version: u64,
    /// The lines, in order.
    pub lines: Vec<BlamedLine>,
    /// The entries that caused the lines' changes, by id (only those the caller may read).
    pub causes: std::collections::BTreeMap<EntryId, memtape_core::Entry>,
}

/// One line of a blamed file.
#[derive(Clone, Debug)]
pub struct BlamedLine {
    /// Its number, from 1.
    pub line: usize,
    /// Its text.
    pub text: String,
    /// The change that wrote it.
    pub origin: Recorded,
}

impl<S: Store> Engine<S> {
    /// The memory changes of exactly `scope`, and the scope's latest entry id (the base a
    /// change computed from this log must name).
    ///
    /// The log read last time is kept ([`LogCache`]) and brought up to date by reading only
    /// the changes after it: the tape only grows, and ids are given in commit order, so a
    /// change that lands later (from this process or another) always comes after it.
    pub fn memory_log(&self, scope: &Scope) -> Result<(Arc<MemoryLog>, EntryId)> {
        check_memory_scope(scope)?;
        // The base is read first: a change that lands between the two reads makes the
        // later append conflict rather than be missed.
        let base = self
            .store
            .scope_info(scope)?
            .and_then(|i| i.last_id)
            .unwrap_or(EntryId(0));
        let last_erasure = self.store.last_erasure()?;
        let changes_after = |through: EntryId| -> Result<Vec<memtape_core::Entry>> {
            let named = |name: &str| Filter {
                kinds: vec![Kind::Event],
                name: Some(name.to_owned()),
                after: Some(through),
                ..Filter::default()
            };
            let mut entries = self.store.scan(scope, &named(events::MEMORY_CHANGE))?;
            // A change erased whole is a tombstone that still counts as its version. Only
            // an erasure makes one, and an erasure empties every cached log, so only a log
            // read from the start looks for them.
            if last_erasure > EntryId(0) && through == EntryId(0) {
                let erased = self
                    .store
                    .scan(scope, &named(memtape_core::erasure::TOMBSTONE))?;
                let before = entries.len();
                entries.extend(
                    erased
                        .into_iter()
                        .filter(|e| e.erased_event() == Some(events::MEMORY_CHANGE)),
                );
                if entries.len() > before {
                    entries.sort_by_key(|e| e.id);
                }
            }
            Ok(entries)
        };
        self.memory_logs.check_erasures(last_erasure);
        let slot = self.memory_logs.slot(scope);
        // A panic while the log was extended leaves it as it was: `extend` adds all of a
        // read or nothing.
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let entries = changes_after(slot.through)?;
        #[cfg(test)]
        if slot.through == EntryId(0) && !entries.is_empty() {
            self.memory_logs
                .whole_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(last) = entries.last() {
            // In place when no reader holds the log (a copy otherwise).
            Arc::make_mut(&mut slot.log).extend(&entries)?;
            slot.through = last.id;
        }
        Ok((Arc::clone(&slot.log), base))
    }

    /// The memory of `scope` now. For an agent-and-user scope, files the user's memory does
    /// not have come from the agent's (so AGENTS.md and SOUL.md written once for the agent
    /// reach every user); the user's own files win.
    pub fn memory(&self, scope: &Scope) -> Result<MemoryView> {
        self.memory_as_of(scope, None)
    }

    /// [`Engine::memory`] as it was at `as_of` (now when `None`): the user's files and
    /// the agent's shared ones, each as of that moment. A change forgotten later stays out
    /// ([`MemoryLog::view_as_of`]).
    pub fn memory_as_of(&self, scope: &Scope, as_of: Option<&AsOf>) -> Result<MemoryView> {
        let (log, _) = self.memory_log(scope)?;
        self.layered_as_of(scope, log.view_as_of(as_of), as_of)
    }

    /// `own`, the view of `scope`'s own memory, with the agent's shared files it does not
    /// override layered under it when `scope` is an agent-and-user scope.
    pub(crate) fn layered(&self, scope: &Scope, own: MemoryView) -> Result<MemoryView> {
        self.layered_as_of(scope, own, None)
    }

    fn layered_as_of(
        &self,
        scope: &Scope,
        mut own: MemoryView,
        as_of: Option<&AsOf>,
    ) -> Result<MemoryView> {
        if scope.user().is_some() {
            let (shared, _) = self.memory_log(&scope.agent_scope())?;
            for (path, file) in shared.view_as_of(as_of).files {
                own.files.entry(path).or_insert(file);
            }
        }
        Ok(own)
    }

    /// Blame for `path` in the memory of `scope` as of `as_of` (now when `None`): each
    /// line with the change that wrote it and the tape entries that caused that change
    /// (those the scope may read). A file the user's memory does not have is blamed in
    /// the agent's shared memory, as the layered view shows it. `None` when there is no
    /// such file then.
    pub fn blame(&self, scope: &Scope, path: &str, as_of: Option<&AsOf>) -> Result<Option<Blame>> {
        memtape_core::memory::check_path(path)?;
        let mut owners = vec![scope.clone()];
        if scope.user().is_some() {
            owners.push(scope.agent_scope());
        }
        for owner in owners {
            let (log, _) = self.memory_log(&owner)?;
            let version = log.version_as_of(as_of);
            let Some(lines) = log.blame(path, version) else {
                continue;
            };
            let ids: Vec<EntryId> = lines
                .iter()
                .flat_map(|l| l.origin.change.caused_by.iter().copied())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let causes = self
                .store
                .get_many(scope.tenant(), &ids)?
                .into_iter()
                .filter(|e| scope.contains(&e.scope))
                .map(|e| (e.id, e))
                .collect();
            let lines = lines
                .into_iter()
                .map(|l| BlamedLine {
                    line: l.line,
                    text: l.text,
                    origin: l.origin.clone(),
                })
                .collect();
            return Ok(Some(Blame {
                path: path.to_owned(),
                memory: owner,
                version,
                lines,
                causes,
            }));
        }
        Ok(None)
    }

    /// Records a change of `scope`'s memory computed by `compute` from the current view.
    /// `compute` returns `None` when there is nothing to change. Returns the recorded
    /// version.
    ///
    /// The changes of all threads to one scope go through its writer (`writer.rs`): each
    /// is computed on the memory as the changes before it leave it, and those waiting are
    /// committed together, so concurrent writers (a burst of WAL captures) never retry
    /// against each other; `compute` runs again only when another process wrote to the
    /// scope meanwhile. A change the view refuses ([`MemoryView::check`]: a bad path, a
    /// file over [`MAX_FILE_BYTES`](memtape_core::memory::MAX_FILE_BYTES), a file inside a
    /// file) is an [`Error::Invalid`] naming the rule, and nothing is recorded. An append
    /// that would take the working state or the event history past the limit is recorded
    /// as a write of their newest entries ([`MemoryView::fit`]), so WAL captures and /new
    /// keep working however long an agent runs.
    pub fn change_memory(
        &self,
        scope: &Scope,
        compute: impl FnMut(&MemoryView) -> Result<Option<Change>>,
    ) -> Result<Option<Recorded>> {
        check_memory_scope(scope)?;
        self.write_batched(scope, compute)
    }

    /// [`Engine::change_memory`] of several changes at once: each is computed on the memory
    /// the ones before it leave, and they are committed together. The results are in the
    /// order of `computes`.
    pub fn change_memory_each<F>(
        &self,
        scope: &Scope,
        computes: Vec<F>,
    ) -> Vec<Result<Option<Recorded>>>
    where
        F: FnMut(&MemoryView) -> Result<Option<Change>>,
    {
        if let Err(e) = check_memory_scope(scope) {
            let message = e.to_string();
            return computes
                .iter()
                .map(|_| {
                    Err(Error::Invalid(memtape_core::Error::InvalidScope(
                        message.clone(),
                    )))
                })
                .collect();
        }
        self.write_batched_each(scope, computes)
    }

    /// [`Engine::change_memory`] for a change computed from the whole log (an undo, a
    /// forget, a write only at a given version): it runs with the scope to itself, on the
    /// log exactly as committed.
    pub fn change_memory_on_log(
        &self,
        scope: &Scope,
        mut compute: impl FnMut(&MemoryLog, &MemoryView) -> Result<Option<Change>>,
    ) -> Result<Option<Recorded>> {
        check_memory_scope(scope)?;
        Ok(self
            .write_alone(scope, |log, view| {
                Ok(compute(log, view)?.map(|change| crate::writer::Planned {
                    change,
                    extra: Vec::new(),
                }))
            })?
            .map(|(recorded, _)| recorded))
    }

    /// Records `change` as it is (no recomputation needed: its ops do not depend on what
    /// is there, like appends and full replaces).
    pub fn record_memory(&self, scope: &Scope, change: Change) -> Result<Recorded> {
        self.change_memory(scope, |_| Ok(Some(change.clone())))?
            .ok_or_else(|| Error::Internal("a given change was not recorded".into()))
    }

    /// Bub's `memory.save` (and nanobot's / MateClaw's full replace of MEMORY.md).
    pub fn save_long_term(&self, scope: &Scope, content: &str) -> Result<Recorded> {
        self.record_memory(
            scope,
            Change::one(
                Op::Write {
                    path: paths::MEMORY.into(),
                    content: content.into(),
                },
                "memory.save",
            ),
        )
    }

    /// Bub's `memory.daily`: appends `content` to the daily note of `date` (today when
    /// `None`), which starts with `# YYYY-MM-DD` when new. The text gets a trailing newline.
    pub fn append_daily(
        &self,
        scope: &Scope,
        content: &str,
        date: Option<NaiveDate>,
    ) -> Result<Recorded> {
        let date = date.unwrap_or_else(|| self.now().date_naive());
        let mut text = content.trim_end().to_string();
        text.push('\n');
        self.record_memory(
            scope,
            Change::one(
                Op::Append {
                    path: paths::daily(date),
                    text,
                    heading: Some(paths::daily_heading(date)),
                },
                "memory.daily",
            ),
        )
    }

    /// Qanot's automatic daily note for one exchange (seed 004): when `reply` is an
    /// assistant message with text and no tool calls, and the message it answers (its
    /// parent, past the turn's tool calls and results) is a user's, `## [HH:MM:SS]`,
    /// `**User:** …` and `**Agent:** …` (the user's text cut to 100 characters, the
    /// reply's to 200, `...` only after a cut) are appended to the daily note of the reply's
    /// day in the session's memory, a new note starting with the seed's heading
    /// `# Daily Notes -- YYYY-MM-DD`. The note names both messages as its causes. `None`
    /// when `reply` answers no user message.
    pub fn note_exchange(&self, reply: &memtape_core::Entry) -> Result<Option<Recorded>> {
        /// How far back the user's message is looked for (a turn's tool rounds).
        const STEPS: usize = 64;
        let answers = reply.message().is_some_and(|m| {
            m.role == memtape_core::Role::Assistant
                && m.tool_calls.is_empty()
                && !m.content_text().trim().is_empty()
        });
        if !answers || reply.scope.session().is_none() {
            return Ok(None);
        }
        let mut parent = reply.parent;
        let mut user = None;
        for _ in 0..STEPS {
            let Some(id) = parent else { break };
            let Some(entry) = self.store.get(reply.scope.tenant(), id)? else {
                break;
            };
            let Some(m) = entry.message().filter(|_| entry.scope == reply.scope) else {
                break;
            };
            match m.role {
                memtape_core::Role::User => {
                    user = Some((entry.id, m.content_text().into_owned()));
                    break;
                }
                memtape_core::Role::Tool => parent = entry.parent,
                memtape_core::Role::Assistant if !m.tool_calls.is_empty() => parent = entry.parent,
                _ => break,
            }
        }
        let Some((user_id, user_text)) = user else {
            return Ok(None);
        };
        let reply_text = reply
            .message()
            .map(|m| m.content_text())
            .unwrap_or_default();
        let cut = |s: &str, n: usize| {
            let s = s.trim();
            if s.chars().count() > n {
                format!("{}...", s.chars().take(n).collect::<String>())
            } else {
                s.to_owned()
            }
        };
        let at = reply.created_at;
        let date = at.date_naive();
        let text = format!(
            "## [{}]\n**User:** {}\n**Agent:** {}\n",
            at.format("%H:%M:%S"),
            cut(&user_text, 100),
            cut(&reply_text, 200)
        );
        let memory = crate::memory_scope(&reply.scope)?;
        caused_by([user_id, reply.id], || {
            self.record_memory(
                &memory,
                Change::one(
                    Op::Append {
                        path: paths::daily(date),
                        text,
                        heading: Some(paths::qanot_daily_heading(date)),
                    },
                    "memory.daily",
                ),
            )
        })
        .map(Some)
    }

    /// nanobot's event history: appends `[YYYY-MM-DD HH:MM] entry` as its own paragraph to
    /// HISTORY.md.
    pub fn append_history(&self, scope: &Scope, entry: &str) -> Result<Recorded> {
        let stamp = self.now().format("%Y-%m-%d %H:%M");
        let text = format!("[{stamp}] {}\n\n", entry.trim());
        self.record_memory(
            scope,
            Change::one(
                Op::Append {
                    path: paths::HISTORY.into(),
                    text,
                    heading: None,
                },
                "history",
            ),
        )
    }

    /// Bub's `memory.clear`: every file of the scope's memory goes (its versions stay).
    pub fn clear_memory(&self, scope: &Scope) -> Result<Option<Recorded>> {
        self.change_memory(scope, |view| {
            Ok((!view.files.is_empty()).then(|| Change::one(Op::Clear, "memory.clear")))
        })
    }

    /// Bub's planned `memory.forget`: leaves the changes recorded by `ids` out of the
    /// memory, as if never made. Each id must be a memory change of this scope that is not
    /// itself a forget.
    pub fn forget_memory(&self, scope: &Scope, ids: &[EntryId]) -> Result<Recorded> {
        let ids = ids.to_vec();
        self.change_memory_on_log(scope, |log, _| {
            for id in &ids {
                let Some(r) = log.by_id(*id) else {
                    return Err(Error::Invalid(memtape_core::Error::InvalidMemory(format!(
                        "entry {id} is not a memory change of {scope}"
                    ))));
                };
                if r.change
                    .ops
                    .iter()
                    .any(|op| matches!(op, Op::Forget { .. }))
                {
                    return Err(Error::Invalid(memtape_core::Error::InvalidMemory(format!(
                        "entry {id} is itself a forget; undo to an earlier version instead"
                    ))));
                }
            }
            Ok(Some(Change::one(
                Op::Forget {
                    changes: ids.clone(),
                },
                "memory.forget",
            )))
        })?
        .ok_or_else(|| Error::Internal("forget recorded nothing".into()))
    }

    /// Brings the scope's memory back to how it was at `version`, as a new version.
    /// `None` when it already is.
    pub fn undo_memory(&self, scope: &Scope, version: u64) -> Result<Option<Recorded>> {
        self.change_memory_on_log(scope, |log, _| Ok(log.undo_to(version)?))
    }

    /// Removes the daily notes older than `retention_days` days before today (Bub's
    /// `prune`, retention 30 by default). Returns how many notes went.
    pub fn prune_daily(&self, scope: &Scope, retention_days: u32) -> Result<usize> {
        let today = self.now().date_naive();
        let cutoff = today
            .checked_sub_days(chrono::Days::new(u64::from(retention_days)))
            .unwrap_or(chrono::NaiveDate::MIN);
        let recorded = self.change_memory(scope, |view| {
            let ops: Vec<Op> = view
                .dailies()
                .into_iter()
                .filter(|(date, _, _)| *date < cutoff)
                .map(|(_, path, _)| Op::Delete { path: path.into() })
                .collect();
            Ok((!ops.is_empty()).then(|| Change {
                ops,
                source: format!("prune daily notes older than {retention_days} days"),
                caused_by: Vec::new(),
            }))
        })?;
        Ok(recorded.map_or(0, |r| r.change.ops.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Appends the line `- fact I` to the working state of `memory`.
    fn add_fact<S: Store>(engine: &Engine<S>, memory: &Scope, i: usize) {
        let change = Change {
            ops: vec![Op::Append {
                path: paths::SESSION_STATE.into(),
                text: format!("- fact {i}\n"),
                heading: None,
            }],
            source: "test".into(),
            caused_by: Vec::new(),
        };
        engine
            .change_memory(memory, |_| Ok(Some(change.clone())))
            .unwrap();
    }

    /// 64 threads reading one memory at once while it changes read its whole log once
    /// between them: the others wait for that read and then read only what changed since.
    #[test]
    fn readers_of_one_memory_at_once_read_its_whole_log_once() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::init(dir.path()).unwrap();
        let memory = Scope::agent("default", "default").unwrap();
        for i in 0..300 {
            add_fact(&engine, &memory, i);
        }
        // A second engine on the same directory: its cache is cold.
        let reader = Engine::open(dir.path()).unwrap();
        let barrier = std::sync::Barrier::new(65);
        std::thread::scope(|threads| {
            for _ in 0..64 {
                threads.spawn(|| {
                    barrier.wait();
                    for _ in 0..5 {
                        let view = reader.memory(&memory).unwrap();
                        assert!(
                            view.content(paths::SESSION_STATE)
                                .unwrap()
                                .contains("- fact 299\n")
                        );
                    }
                });
            }
            threads.spawn(|| {
                barrier.wait();
                for i in 300..340 {
                    add_fact(&engine, &memory, i);
                }
            });
        });
        assert_eq!(reader.memory_logs.whole_reads.load(Ordering::Relaxed), 1);
        let view = reader.memory(&memory).unwrap();
        assert!(
            view.content(paths::SESSION_STATE)
                .unwrap()
                .contains("- fact 339\n")
        );
        assert_eq!(reader.memory_log(&memory).unwrap().0.version(), 340);
    }
}
