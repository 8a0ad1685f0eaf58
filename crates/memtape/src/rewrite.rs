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

use crate::tiers::{ATTEMPTS, check_memory_scope};
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

/// What a rewrite of a memory file recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewritten {
    /// The new version (`None`: the text was already that).
    pub recorded: Option<Recorded>,
    /// How many facts it dropped (kept as `memory.dropped`).
    pub dropped: usize,
}

impl<S: Store> Engine<S> {
    /// Replaces `path` in `scope`'s memory with `new`, a model's rewrite of `seen`, losing
    /// nothing: lines another writer added since `seen` are carried over, and every fact
    /// the rewrite drops is recorded as `memory.dropped` in the same transaction. `by` names
    /// the rewriter (`extraction`, `emergence`), `source` the change. An empty `new` writes
    /// nothing (a model never wipes a file).
    pub fn rewrite_memory(
        &self,
        scope: &Scope,
        path: &str,
        seen: &str,
        new: &str,
        by: &str,
        source: &str,
    ) -> Result<Rewritten> {
        check_memory_scope(scope)?;
        if new.trim().is_empty() {
            return Ok(Rewritten {
                recorded: None,
                dropped: 0,
            });
        }
        for _ in 0..ATTEMPTS {
            let (log, base) = self.memory_log(scope)?;
            let own = log.view();
            let current = self
                .layered(scope, own.clone())?
                .content(path)
                .unwrap_or_default()
                .to_owned();
            let merged = facts::carry_over(seen, &current, new);
            if merged.trim() == current.trim() {
                return Ok(Rewritten {
                    recorded: None,
                    dropped: 0,
                });
            }
            let change = own.admit(Change::one(
                Op::Write {
                    path: path.to_owned(),
                    content: merged.clone(),
                },
                source,
            ))?;
            let version = log.version() + 1;
            let now = self.now();
            let dropped = dropped_entries(scope, path, &current, &merged, version, by, now);
            let count = dropped.len();
            let mut entries =
                vec![NewEntry::new(scope.clone(), change.to_payload(), now).if_last(base)];
            entries.extend(dropped);
            match self.append_entries(entries) {
                Ok(stored) => {
                    let first = &stored[0];
                    return Ok(Rewritten {
                        recorded: Some(Recorded {
                            version,
                            id: first.id,
                            at: first.created_at,
                            change,
                        }),
                        dropped: count,
                    });
                }
                Err(Error::Store(memtape_store::Error::Conflict { .. })) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Internal(format!(
            "{scope}: memory kept changing under this rewrite ({ATTEMPTS} attempts); try again"
        )))
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
        self.change_memory(scope, |_, own| {
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
