//! The memory of an agent, or of an agent and one user: reading its view and versions, and
//! recording changes. A change is computed from what was read and appended only if nothing
//! was written to the scope in between (compare-and-append); on a conflict it is computed
//! again from the new state, so two writers never overwrite each other's changes.

use chrono::NaiveDate;
use memtape_core::memory::{Change, MemoryLog, MemoryView, Op, Recorded, paths};
use memtape_core::{EntryId, Filter, Kind, NewEntry, Scope, events};
use memtape_store::Store;

use crate::{Engine, Error, Result};

/// How many times a change is recomputed when other writers keep winning.
pub(crate) const ATTEMPTS: usize = 8;

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

impl<S: Store> Engine<S> {
    /// The memory changes of exactly `scope`, and the scope's latest entry id (the base a
    /// change computed from this log must name).
    pub fn memory_log(&self, scope: &Scope) -> Result<(MemoryLog, EntryId)> {
        check_memory_scope(scope)?;
        // The base is read first: a change that lands between the two reads makes the
        // later append conflict rather than be missed.
        let base = self
            .store
            .scope_info(scope)?
            .and_then(|i| i.last_id)
            .unwrap_or(EntryId(0));
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(events::MEMORY_CHANGE.to_string()),
            ..Filter::default()
        };
        let entries = self.store.scan(scope, &filter)?;
        Ok((MemoryLog::from_entries(&entries)?, base))
    }

    /// The memory of `scope` now. For an agent-and-user scope, files the user's memory does
    /// not have come from the agent's (so AGENTS.md and SOUL.md written once for the agent
    /// reach every user); the user's own files win.
    pub fn memory(&self, scope: &Scope) -> Result<MemoryView> {
        let (log, _) = self.memory_log(scope)?;
        self.layered(scope, log.view())
    }

    /// `own`, the view of `scope`'s own memory, with the agent's shared files it does not
    /// override layered under it when `scope` is an agent-and-user scope.
    pub(crate) fn layered(&self, scope: &Scope, mut own: MemoryView) -> Result<MemoryView> {
        if scope.user().is_some() {
            let (shared, _) = self.memory_log(&scope.agent_scope())?;
            for (path, file) in shared.view().files {
                own.files.entry(path).or_insert(file);
            }
        }
        Ok(own)
    }

    /// Records a change of `scope`'s memory computed by `compute` from the current log and
    /// view. `compute` returns `None` when there is nothing to change; it is called again
    /// if another writer changed the scope first. Returns the recorded version. A change
    /// the view refuses ([`MemoryView::check`]: a bad path, a file over
    /// [`MAX_FILE_BYTES`](memtape_core::memory::MAX_FILE_BYTES), a file inside a file) is
    /// an [`Error::Invalid`] naming the rule, and nothing is recorded. An append that would
    /// take the working state or the event history past the limit is recorded as a write
    /// of their newest entries ([`MemoryView::fit`]), so WAL captures and /new keep working
    /// however long an agent runs.
    pub fn change_memory(
        &self,
        scope: &Scope,
        mut compute: impl FnMut(&MemoryLog, &MemoryView) -> Result<Option<Change>>,
    ) -> Result<Option<Recorded>> {
        for _ in 0..ATTEMPTS {
            let (log, base) = self.memory_log(scope)?;
            let view = log.view();
            let Some(change) = compute(&log, &view)? else {
                return Ok(None);
            };
            let change = view.admit(change)?;
            let entry = NewEntry::new(scope.clone(), change.to_payload(), self.now()).if_last(base);
            match self.store_entries(vec![entry]) {
                Ok(stored) => {
                    return Ok(stored.into_iter().next().map(|e| Recorded {
                        version: log.version() + 1,
                        id: e.id,
                        at: e.created_at,
                        change,
                    }));
                }
                Err(Error::Store(memtape_store::Error::Conflict { .. })) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Internal(format!(
            "{scope}: memory kept changing under this write ({ATTEMPTS} attempts); try again"
        )))
    }

    /// Records `change` as it is (no recomputation needed: its ops do not depend on what
    /// is there, like appends and full replaces).
    pub fn record_memory(&self, scope: &Scope, change: Change) -> Result<Recorded> {
        self.change_memory(scope, |_, _| Ok(Some(change.clone())))?
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
        self.change_memory(scope, |_, view| {
            Ok((!view.files.is_empty()).then(|| Change::one(Op::Clear, "memory.clear")))
        })
    }

    /// Bub's planned `memory.forget`: leaves the changes recorded by `ids` out of the
    /// memory, as if never made. Each id must be a memory change of this scope that is not
    /// itself a forget.
    pub fn forget_memory(&self, scope: &Scope, ids: &[EntryId]) -> Result<Recorded> {
        let ids = ids.to_vec();
        self.change_memory(scope, |log, _| {
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
        self.change_memory(scope, |log, _| Ok(log.undo_to(version)?))
    }

    /// Removes the daily notes older than `retention_days` days before today (Bub's
    /// `prune`, retention 30 by default). Returns how many notes went.
    pub fn prune_daily(&self, scope: &Scope, retention_days: u32) -> Result<usize> {
        let today = self.now().date_naive();
        let cutoff = today
            .checked_sub_days(chrono::Days::new(u64::from(retention_days)))
            .unwrap_or(chrono::NaiveDate::MIN);
        let recorded = self.change_memory(scope, |_, view| {
            let ops: Vec<Op> = view
                .dailies()
                .into_iter()
                .filter(|(date, _, _)| *date < cutoff)
                .map(|(_, path, _)| Op::Delete { path: path.into() })
                .collect();
            Ok((!ops.is_empty()).then(|| Change {
                ops,
                source: format!("prune daily notes older than {retention_days} days"),
            }))
        })?;
        Ok(recorded.map_or(0, |r| r.change.ops.len()))
    }
}
