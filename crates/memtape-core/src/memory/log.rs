//! A scope's memory changes in tape order: versions, views at any version or time, undo.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use crate::AsOf;

use super::{Change, MemoryView, Op};
use crate::{Entry, EntryId, Error, Result};

/// A change as recorded on the tape.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// Its version: its position among the scope's changes, from 1.
    pub version: u64,
    /// The event's entry id.
    pub id: EntryId,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// What it did (nothing, once erased).
    pub change: Change,
    /// The erasure (its receipt) that took this change's content: it keeps its version,
    /// so later versions keep their numbers, and applies nothing.
    pub erased: Option<EntryId>,
}

/// A scope's memory changes in tape order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryLog {
    changes: Vec<Recorded>,
    /// The view after the last change, kept up to date as changes are added (a fold from
    /// the start only when a new change forgets earlier ones).
    latest: MemoryView,
}

impl MemoryLog {
    /// The log of the `memory.change` events among `entries` (one scope's, in tape order);
    /// other entries are skipped. A malformed change is an error naming its entry.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Result<Self> {
        let mut log = MemoryLog::default();
        log.extend(entries)?;
        Ok(log)
    }

    /// Adds the `memory.change` events among `entries` (the scope's next ones, in tape
    /// order, all after the last change already here) as the next versions. A malformed
    /// change is an error naming its entry, and nothing is added.
    pub fn extend<'a>(&mut self, entries: impl IntoIterator<Item = &'a Entry>) -> Result<()> {
        let mut added = Vec::new();
        for entry in entries {
            let version = (self.changes.len() + added.len()) as u64 + 1;
            if let Some(change) = Change::from_entry(entry) {
                added.push(Recorded {
                    version,
                    id: entry.id,
                    at: entry.created_at,
                    change: change?,
                    erased: None,
                });
            } else if entry.erased_event() == Some(crate::events::MEMORY_CHANGE) {
                added.push(Recorded {
                    version,
                    id: entry.id,
                    at: entry.created_at,
                    change: Change {
                        ops: Vec::new(),
                        source: crate::erasure::ERASED_TEXT.to_owned(),
                        caused_by: Vec::new(),
                    },
                    erased: entry.erased.map(|x| x.by),
                });
            }
        }
        if let (Some(last), Some(first)) = (self.changes.last(), added.first())
            && first.id <= last.id
        {
            return Err(Error::InvalidEntry(format!(
                "memory change {} comes after {} on the tape",
                first.id, last.id
            )));
        }
        let forgets = added
            .iter()
            .flat_map(|r| &r.change.ops)
            .any(|op| matches!(op, Op::Forget { .. }));
        if !forgets {
            for r in &added {
                self.latest.version = r.version;
                for op in &r.change.ops {
                    self.latest.apply(r.version, r.id, r.at, op);
                }
            }
        }
        self.changes.extend(added);
        if forgets {
            self.latest = self.view_at(self.version());
        }
        Ok(())
    }

    /// Every change, oldest first.
    pub fn changes(&self) -> &[Recorded] {
        &self.changes
    }

    /// The latest version (0 when memory was never changed).
    pub fn version(&self) -> u64 {
        self.changes.len() as u64
    }

    /// The change with this version.
    pub fn get(&self, version: u64) -> Option<&Recorded> {
        version
            .checked_sub(1)
            .and_then(|i| self.changes.get(i as usize))
    }

    /// The change recorded by entry `id`.
    pub fn by_id(&self, id: EntryId) -> Option<&Recorded> {
        self.changes.iter().find(|r| r.id == id)
    }

    /// The entries that a later `forget` left out.
    pub fn forgotten(&self) -> HashSet<EntryId> {
        self.changes
            .iter()
            .flat_map(|r| &r.change.ops)
            .filter_map(|op| match op {
                Op::Forget { changes } => Some(changes.iter().copied()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The memory now.
    pub fn view(&self) -> MemoryView {
        self.latest.clone()
    }

    /// The memory as it was right after `version` (forgotten changes left out, as if
    /// never made).
    pub fn view_at(&self, version: u64) -> MemoryView {
        let forgotten = self.forgotten();
        let mut view = MemoryView::default();
        for r in self.changes.iter().take_while(|r| r.version <= version) {
            view.version = r.version;
            if forgotten.contains(&r.id) {
                continue;
            }
            for op in &r.change.ops {
                view.apply(r.version, r.id, r.at, op);
            }
        }
        view
    }

    /// The version memory was at, as of `moment` (now when `None`): that of the latest
    /// change the moment includes (0 when there was none yet).
    pub fn version_as_of(&self, moment: Option<&AsOf>) -> u64 {
        let Some(moment) = moment else {
            return self.version();
        };
        self.changes
            .iter()
            .rev()
            .find(|r| moment.includes(r.id, r.at))
            .map_or(0, |r| r.version)
    }

    /// The memory as it was at `moment` (now when `None`). A change forgotten later stays
    /// out: forgetting takes a change back as if it had never been made, at every moment.
    pub fn view_as_of(&self, moment: Option<&AsOf>) -> MemoryView {
        match moment {
            None => self.view(),
            Some(_) => self.view_at(self.version_as_of(moment)),
        }
    }

    /// The changes that touched `path` (every change when `None`), oldest first.
    pub fn versions(&self, path: Option<&str>) -> Vec<&Recorded> {
        self.changes
            .iter()
            .filter(|r| {
                path.is_none_or(|p| {
                    r.change.ops.iter().any(|op| {
                        matches!(op, Op::Clear)
                            || op.paths().iter().any(|q| {
                                p.strip_prefix(q)
                                    .is_some_and(|r| r.is_empty() || r.starts_with('/'))
                            })
                    })
                })
            })
            .collect()
    }

    /// The change that brings memory back to how it was at `version`: rewrites of the files
    /// that differ, deletes of the files made since. `None` when nothing differs. Fails for
    /// a version that does not exist.
    pub fn undo_to(&self, version: u64) -> Result<Option<Change>> {
        if version > self.version() {
            return Err(Error::InvalidMemory(format!(
                "there is no version {version}; the latest is {}",
                self.version()
            )));
        }
        let then = self.view_at(version);
        let now = self.view();
        let mut ops = Vec::new();
        for path in now.files.keys() {
            if !then.files.contains_key(path) {
                ops.push(Op::Delete { path: path.clone() });
            }
        }
        for (path, old) in &then.files {
            let current = now.files.get(path);
            if current.is_none_or(|f| f.content != old.content) {
                ops.push(Op::Write {
                    path: path.clone(),
                    content: old.content.clone(),
                });
            }
            if current.is_none_or(|f| f.enabled != old.enabled || f.sort_order != old.sort_order) {
                ops.push(Op::Flags {
                    path: path.clone(),
                    enabled: Some(old.enabled),
                    sort_order: Some(old.sort_order),
                });
            }
        }
        Ok((!ops.is_empty()).then(|| Change {
            ops,
            source: format!("undo to version {version}"),
            caused_by: Vec::new(),
        }))
    }
}
