//! Lossless rewrites. When a model rewrites MEMORY.md or PROFILE.md in full (consolidation,
//! extraction, emergence), every fact of the old text that the new one no longer states is
//! written as a `memory.dropped` event in the same transaction as the rewrite: it stays on
//! the tape and in search, [`Engine::dropped_facts`] lists it, and
//! [`Engine::restore_dropped`] puts it back with one call. A model that "forgets" a fact, or
//! answers with an empty file, cannot make memtape lose it.

use chrono::{DateTime, Utc};
use memtape_core::events::{BuiltinEvent, Dropped, MEMORY_DROPPED};
use memtape_core::memory::facts::{self, Fact};
use memtape_core::memory::{Change, Op, Recorded};
use memtape_core::{EntryId, Filter, Kind, NewEntry, Order, Scope};
use memtape_store::Store;
use serde::Serialize;

use crate::tiers::check_memory_scope;
use crate::writer::Planned;
use crate::{Engine, Error, Result};

/// The `memory.dropped` entries for the facts of `old` that `new` (the rewrite recorded as
/// `version` by `by`) no longer states, in `scope`.
pub(crate) fn dropped_entries(
    scope: &Scope,
    path: &str,
    old: &str,
    new: &str,
    version: u64,
    by: &str,
    now: DateTime<Utc>,
) -> Vec<NewEntry> {
    facts::dropped(old, new)
        .into_iter()
        .map(|fact| {
            let event = BuiltinEvent::Dropped(Dropped {
                path: path.to_owned(),
                text: fact.text,
                section: fact.section,
                version,
                by: by.to_owned(),
            });
            NewEntry::new(scope.clone(), event.to_payload(), now)
        })
        .collect()
}

/// A fact a rewrite dropped, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DroppedFact {
    /// The `memory.dropped` entry (what [`Engine::restore_dropped`] takes).
    pub id: EntryId,
    /// When it was dropped.
    pub at: DateTime<Utc>,
    /// The fact, its file and what dropped it.
    #[serde(flatten)]
    pub fact: Dropped,
    /// Whether the file states it again now (restored, or written back by a later rewrite).
    pub present: bool,
}

/// One change a model's answer asks for, applied by [`Engine::apply_edits`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Replace `path` with `new`, the model's rewrite of `seen` (what it was shown).
    Rewrite {
        /// The file.
        path: String,
        /// Its text as the model saw it.
        seen: String,
        /// The model's new text (empty: nothing changes; a model never wipes a file).
        new: String,
    },
    /// Append `text` to `path` as it is, starting the file with `heading` when new
    /// (nanobot's HISTORY.md entry).
    Append {
        /// The file.
        path: String,
        /// The text.
        text: String,
        /// What a new file starts with.
        heading: Option<String>,
    },
    /// Append `entry` to the note `path` after a blank line, or after `heading` and a
    /// blank line when the note is new (MateClaw's daily entry).
    Note {
        /// The note.
        path: String,
        /// The entry.
        entry: String,
        /// The heading of a new note.
        heading: String,
    },
}

/// What [`Engine::apply_edits`] recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The new version (`None`: nothing changed).
    pub recorded: Option<Recorded>,
    /// The files that changed.
    pub changed: Vec<String>,
    /// How many facts the rewrites dropped (kept as `memory.dropped`).
    pub dropped: usize,
}

impl<S: Store> Engine<S> {
    /// Applies `edits` to `scope`'s memory as one version, losing nothing: a rewrite keeps
    /// the lines another writer added since the model read the file, and every fact it
    /// drops is recorded as `memory.dropped` (by `by`) in the same transaction. `extra`
    /// entries (a pointer move) are written in that transaction too, even when no file
    /// changes. On a conflict with another writer everything is computed again from the
    /// new state; the model is not asked again.
    pub fn apply_edits(
        &self,
        scope: &Scope,
        edits: &[Edit],
        by: &str,
        source: &str,
        extra: &[NewEntry],
    ) -> Result<Applied> {
        check_memory_scope(scope)?;
        let mut changed = Vec::new();
        let mut count = 0;
        let mut nothing = false;
        let written = self.write_alone(scope, |log, own| {
            let layered = self.layered(scope, own.clone())?;
            let version = log.version() + 1;
            let now = self.now();
            let mut ops = Vec::new();
            let mut dropped = Vec::new();
            changed.clear();
            for edit in edits {
                match edit {
                    Edit::Rewrite { path, seen, new } => {
                        if new.trim().is_empty() {
                            continue;
                        }
                        let current = layered.content(path).unwrap_or_default();
                        let merged = facts::carry_over(seen, current, new);
                        if merged.trim() == current.trim() {
                            continue;
                        }
                        dropped.extend(dropped_entries(
                            scope, path, current, &merged, version, by, now,
                        ));
                        ops.push(Op::Write {
                            path: path.clone(),
                            content: merged,
                        });
                        changed.push(path.clone());
                    }
                    Edit::Append {
                        path,
                        text,
                        heading,
                    } => {
                        ops.push(Op::Append {
                            path: path.clone(),
                            text: text.clone(),
                            heading: heading.clone(),
                        });
                        changed.push(path.clone());
                    }
                    Edit::Note {
                        path,
                        entry,
                        heading,
                    } => {
                        let current = own.content(path).unwrap_or_default();
                        let sep = if current.trim().is_empty() || current.ends_with("\n\n") {
                            ""
                        } else if current.ends_with('\n') {
                            "\n"
                        } else {
                            "\n\n"
                        };
                        ops.push(Op::Append {
                            path: path.clone(),
                            text: format!("{sep}{}\n", entry.trim_end()),
                            heading: Some(format!("{}\n\n", heading.trim_end())),
                        });
                        changed.push(path.clone());
                    }
                }
            }
            nothing = ops.is_empty();
            if nothing {
                return Ok(None);
            }
            count = dropped.len();
            // One transaction, one moment: an entry the caller made before this one (the
            // consolidation pointer) is not dated before the change it commits with, so a
            // moment between the two never sees the pointer moved without the memory.
            dropped.extend(extra.iter().cloned().map(|mut e| {
                e.created_at = e.created_at.max(now);
                e
            }));
            Ok(Some(Planned {
                change: Change {
                    ops,
                    source: source.to_owned(),
                    caused_by: Vec::new(),
                },
                extra: dropped,
            }))
        })?;
        match written {
            Some((recorded, _)) => Ok(Applied {
                recorded: Some(recorded),
                changed,
                dropped: count,
            }),
            None => {
                if nothing && !extra.is_empty() {
                    self.append_entries(extra.to_vec())?;
                }
                Ok(Applied {
                    recorded: None,
                    changed,
                    dropped: 0,
                })
            }
        }
    }

    /// Replaces `path` in `scope`'s memory with `new`, a model's rewrite of `seen`, losing
    /// nothing ([`Engine::apply_edits`] with one rewrite).
    pub fn rewrite_memory(
        &self,
        scope: &Scope,
        path: &str,
        seen: &str,
        new: &str,
        by: &str,
        source: &str,
    ) -> Result<Applied> {
        let edit = Edit::Rewrite {
            path: path.to_owned(),
            seen: seen.to_owned(),
            new: new.to_owned(),
        };
        self.apply_edits(scope, &[edit], by, source, &[])
    }

    /// The facts rewrites dropped from `scope`'s memory, newest first, each with whether
    /// its file states it again now.
    pub fn dropped_facts(&self, scope: &Scope) -> Result<Vec<DroppedFact>> {
        check_memory_scope(scope)?;
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(MEMORY_DROPPED.to_owned()),
            order: Order::Desc,
            ..Filter::default()
        };
        let view = self.memory(scope)?;
        let mut out = Vec::new();
        for entry in self.store.scan(scope, &filter)? {
            let Some(BuiltinEvent::Dropped(fact)) = BuiltinEvent::from_payload(&entry.payload)?
            else {
                continue;
            };
            let present = view
                .content(&fact.path)
                .is_some_and(|c| facts::states(c, &fact.text));
            out.push(DroppedFact {
                id: entry.id,
                at: entry.created_at,
                fact,
                present,
            });
        }
        Ok(out)
    }

    /// Puts the dropped fact `id` (a `memory.dropped` entry of exactly `scope`) back into
    /// its file, at the end of its old section when the file still has it. `None` when the
    /// file states it already.
    pub fn restore_dropped(&self, scope: &Scope, id: EntryId) -> Result<Option<Recorded>> {
        check_memory_scope(scope)?;
        let entry = self
            .store
            .get(scope.tenant(), id)?
            .filter(|e| e.scope == *scope)
            .ok_or(Error::NoEntry(id))?;
        let Some(BuiltinEvent::Dropped(dropped)) = BuiltinEvent::from_payload(&entry.payload)?
        else {
            return Err(Error::Invalid(memtape_core::Error::InvalidMemory(format!(
                "entry {id} is not a dropped fact (a {MEMORY_DROPPED} event) of {scope}"
            ))));
        };
        let fact = Fact {
            text: dropped.text.clone(),
            section: dropped.section.clone(),
        };
        self.change_memory(scope, |own| {
            let layered = self.layered(scope, own.clone())?;
            let current = layered.content(&dropped.path).unwrap_or_default();
            let restored = facts::restore(current, &fact);
            Ok((restored != current).then(|| {
                Change::one(
                    Op::Write {
                        path: dropped.path.clone(),
                        content: restored,
                    },
                    format!("restore dropped fact (entry {id})"),
                )
            }))
        })
    }
}
