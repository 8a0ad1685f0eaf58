//! Qanot's WAL capture on the engine: a user message is scanned before it is answered, its
//! matches are appended with timestamps to the working state (SESSION-STATE.md), and the
//! durable ones (names, preferences, things to remember) are copied to long-term memory
//! unless MEMORY.md already holds them.

use memtape_core::memory::{Change, MAX_FILE_BYTES, MemoryView, Op, Recorded, paths};
use memtape_core::wal::{self, WalMatch};
use memtape_core::{Entry, EntryId, Role, Scope};
use memtape_store::Store;

use crate::{Engine, Error, Result, memory_scope};

/// A capture's change, computed on the memory it is recorded on.
type Compute<'a> = Box<dyn FnMut(&MemoryView) -> Result<Option<Change>> + 'a>;

/// What one WAL capture found and recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Captured {
    /// Every match in the message, in order.
    pub matches: Vec<WalMatch>,
    /// How many durable matches were new to MEMORY.md and copied there.
    pub saved_long_term: usize,
    /// The memory version the capture recorded; `None` when nothing matched.
    pub recorded: Option<Recorded>,
}

impl<S: Store> Engine<S> {
    /// Qanot's WAL protocol: scans the user `message` of `scope` (a session, or its
    /// memory scope) and records what it found in the memory of the session's agent (and
    /// user), as one change. Call it before the agent answers the message.
    pub fn capture(&self, scope: &Scope, message: &str) -> Result<Captured> {
        self.capture_caused(scope, message, None)
    }

    /// [`Engine::capture`] of a user message already on the tape: what it records names
    /// `entry` as its cause (`memtape memory blame` leads back to it). Any other entry
    /// captures nothing.
    pub fn capture_entry(&self, entry: &Entry) -> Result<Captured> {
        match entry.message() {
            Some(m) if m.role == Role::User => {
                self.capture_caused(&entry.scope, &m.content_text(), Some(entry.id))
            }
            _ => Ok(Captured {
                matches: Vec::new(),
                saved_long_term: 0,
                recorded: None,
            }),
        }
    }

    /// [`Engine::capture_entry`] of several entries at once (the messages of one request):
    /// each capture is a change of its own naming its message, and the captures of one
    /// memory are committed together. The results are in the order of `entries`.
    pub fn capture_entries(&self, entries: &[Entry]) -> Vec<Result<Captured>> {
        let found = entries.iter().map(scan_entry).collect();
        self.capture_scanned(entries, found)
    }

    /// [`Engine::capture_entries`] with the WAL's scan of each entry done already
    /// ([`scan_entry`]; `found[i]` is what it found in `entries[i]`), so the scanning
    /// can run on other threads than the recording (the server scans each request's
    /// messages on the request's own thread, and one thread records a batch's captures).
    /// `found` must have one item per entry; a missing one counts as nothing found.
    pub fn capture_scanned(
        &self,
        entries: &[Entry],
        mut found: Vec<Vec<WalMatch>>,
    ) -> Vec<Result<Captured>> {
        found.resize_with(entries.len(), Vec::new);
        let mut results: Vec<Option<Result<Captured>>> = (0..entries.len()).map(|_| None).collect();
        // Each entry's memory; one that has none is that entry's error, not the others'.
        let memories: Vec<Option<Scope>> = entries
            .iter()
            .zip(&found)
            .zip(&mut results)
            .map(|((e, m), result)| {
                if m.is_empty() {
                    return None;
                }
                memory_scope(&e.scope)
                    .map_err(|err| *result = Some(Err(err)))
                    .ok()
            })
            .collect();
        let mut scopes: Vec<&Scope> = Vec::new();
        for memory in memories.iter().flatten() {
            if !scopes.contains(&memory) {
                scopes.push(memory);
            }
        }
        let at = self.now();
        for memory in scopes {
            let mine: Vec<usize> = (0..entries.len())
                .filter(|i| memories[*i].as_ref() == Some(memory))
                .collect();
            let saved: Vec<std::cell::Cell<usize>> =
                mine.iter().map(|_| Default::default()).collect();
            let computes: Vec<Compute<'_>> = mine
                .iter()
                .zip(&saved)
                .map(|(i, saved)| {
                    let (matches, id) = (&found[*i], entries[*i].id);
                    Box::new(move |view: &MemoryView| {
                        let mut n = 0;
                        let change = capture_change(matches, at, view, &mut n).caused_by([id]);
                        saved.set(n);
                        Ok(Some(change))
                    }) as Compute<'_>
                })
                .collect();
            let recorded = self.change_memory_each(memory, computes);
            for ((i, saved), recorded) in mine.iter().zip(&saved).zip(recorded) {
                results[*i] = Some(recorded.map(|recorded| Captured {
                    matches: found[*i].clone(),
                    saved_long_term: saved.get(),
                    recorded,
                }));
            }
        }
        finish(results, found)
    }

    /// Appends `entries` and records the WAL's captures of them in the same transaction
    /// (`found[i]`: what the WAL found in `entries[i]`, [`scan_new_entry`]), so a batch
    /// of messages and their captures cost one commit, and no crash can keep a message
    /// without its capture. Each capture is a change of its own naming its message; the
    /// captures of one memory are computed in turn on the memory as the ones before leave
    /// it, the first appended only if nothing was written to that memory since it was read.
    /// If something was (another process, or this one's writer), the messages are
    /// appended alone and captured after ([`Engine::capture_scanned`]). A capture the
    /// memory refuses is that message's error, not the others'. Returns the entries as
    /// stored and, for each, what its capture did.
    pub fn append_capturing(
        &self,
        entries: Vec<memtape_core::NewEntry>,
        mut found: Vec<Vec<WalMatch>>,
    ) -> Result<(Vec<Entry>, Vec<Result<Captured>>)> {
        found.resize_with(entries.len(), Vec::new);
        let mut results: Vec<Option<Result<Captured>>> = (0..entries.len()).map(|_| None).collect();
        // Each capturing entry's memory, and each memory as read now.
        struct Memory {
            scope: Scope,
            base: EntryId,
            version: u64,
            view: MemoryView,
            changes: Vec<(usize, Change)>,
        }
        let mut memories: Vec<Memory> = Vec::new();
        let mut of: Vec<Option<usize>> = vec![None; entries.len()];
        for (i, entry) in entries.iter().enumerate() {
            if found[i].is_empty() {
                continue;
            }
            let scope = match memory_scope(&entry.scope) {
                Ok(scope) => scope,
                Err(e) => {
                    results[i] = Some(Err(e));
                    continue;
                }
            };
            if let Some(m) = memories.iter().position(|m| m.scope == scope) {
                of[i] = Some(m);
                continue;
            }
            let (log, base) = self.memory_log(&scope)?;
            of[i] = Some(memories.len());
            memories.push(Memory {
                scope,
                base,
                version: log.version(),
                view: log.view(),
                changes: Vec::new(),
            });
        }
        if memories.is_empty() {
            let stored = self.append_entries(entries)?;
            return Ok((stored, finish(results, found)));
        }
        let at = self.now();
        let mut saved = vec![0; entries.len()];
        let mut refused: Vec<(usize, Error)> = Vec::new();
        let mut then = |stored: &[Entry]| -> Vec<memtape_core::NewEntry> {
            let mut derived = Vec::new();
            for (i, entry) in stored.iter().enumerate() {
                let Some(m) = of.get(i).copied().flatten() else {
                    continue;
                };
                let m = &mut memories[m];
                let change =
                    capture_change(&found[i], at, &m.view, &mut saved[i]).caused_by([entry.id]);
                match m.view.admit(change) {
                    Ok(change) => {
                        let version = m.version + m.changes.len() as u64 + 1;
                        m.view.record(version, EntryId(0), at, &change);
                        let new =
                            memtape_core::NewEntry::new(m.scope.clone(), change.to_payload(), at);
                        derived.push(if m.changes.is_empty() {
                            new.if_last(m.base)
                        } else {
                            new
                        });
                        m.changes.push((i, change));
                    }
                    Err(e) => refused.push((i, e.into())),
                }
            }
            derived
        };
        let written = self.store.append_then(entries.clone(), &mut then);
        let (stored, derived) = match written {
            Ok(written) => written,
            Err(memtape_store::Error::Conflict { .. }) => {
                // A memory changed since it was read: the messages alone, then captured
                // through the writer, which computes them again.
                let stored = self.append_entries(entries)?;
                let captured = self.capture_scanned(&stored, found);
                return Ok((stored, captured));
            }
            Err(e) => return Err(e.into()),
        };
        self.after_write(&stored);
        self.after_write(&derived);
        let mut derived = derived.into_iter();
        for m in &memories {
            let mine: Vec<Entry> = derived.by_ref().take(m.changes.len()).collect();
            self.memory_logs.committed(&m.scope, m.version, &mine);
            for (k, ((i, change), entry)) in m.changes.iter().zip(&mine).enumerate() {
                results[*i] = Some(Ok(Captured {
                    matches: found[*i].clone(),
                    saved_long_term: saved[*i],
                    recorded: Some(Recorded {
                        version: m.version + k as u64 + 1,
                        id: entry.id,
                        at: entry.created_at,
                        change: change.clone(),
                        erased: None,
                    }),
                }));
            }
        }
        for (i, e) in refused {
            results[i] = Some(Err(e));
        }
        Ok((stored, finish(results, found)))
    }

    /// [`Engine::capture_entry`] of the entry `id` of `tenant` once: nothing is recorded
    /// if its memory already holds a WAL capture caused by it. A capture that failed (a
    /// full disk) is retried this way from the tape, where the message is kept, and a
    /// retry never records it twice. `None` when there is no such entry.
    pub fn recapture(&self, tenant: &str, id: EntryId) -> Result<Option<Captured>> {
        let Some(entry) = self.store.get(tenant, id)? else {
            return Ok(None);
        };
        let text = match entry.message() {
            Some(m) if m.role == Role::User => m.content_text(),
            _ => return Ok(None),
        };
        let matches = wal::scan(&text);
        if matches.is_empty() {
            return Ok(None);
        }
        let memory = memory_scope(&entry.scope)?;
        let at = self.now();
        let mut saved = 0;
        let recorded = crate::tiers::caused_by(Some(id), || {
            self.change_memory_on_log(&memory, |log, view| {
                // Newest first: a capture comes soon after its message.
                let done = log
                    .changes()
                    .iter()
                    .rev()
                    .any(|r| r.change.source == "wal" && r.change.caused_by.contains(&id));
                if done {
                    return Ok(None);
                }
                Ok(Some(capture_change(&matches, at, view, &mut saved)))
            })
        })?;
        Ok(Some(Captured {
            matches,
            saved_long_term: saved,
            recorded,
        }))
    }

    fn capture_caused(
        &self,
        scope: &Scope,
        message: &str,
        cause: Option<EntryId>,
    ) -> Result<Captured> {
        crate::tiers::caused_by(cause, || self.capture_now(scope, message))
    }

    fn capture_now(&self, scope: &Scope, message: &str) -> Result<Captured> {
        let matches = wal::scan(message);
        if matches.is_empty() {
            return Ok(Captured {
                matches,
                saved_long_term: 0,
                recorded: None,
            });
        }
        let memory = memory_scope(scope)?;
        let at = self.now();
        let mut saved = 0;
        let recorded = self.change_memory(&memory, |view| {
            Ok(Some(capture_change(&matches, at, view, &mut saved)))
        })?;
        Ok(Captured {
            matches,
            saved_long_term: saved,
            recorded,
        })
    }
}

/// Each entry's capture result: the one computed, or what the WAL found recording nothing.
fn finish(
    results: Vec<Option<Result<Captured>>>,
    found: Vec<Vec<WalMatch>>,
) -> Vec<Result<Captured>> {
    results
        .into_iter()
        .zip(found)
        .map(|(result, matches)| {
            result.unwrap_or_else(|| {
                Ok(Captured {
                    matches,
                    saved_long_term: 0,
                    recorded: None,
                })
            })
        })
        .collect()
}

/// What the WAL finds in `entry`: the matches of a user message's text, nothing in any
/// other entry.
pub fn scan_entry(entry: &Entry) -> Vec<WalMatch> {
    scan_message(entry.message())
}

/// [`scan_entry`] of an entry not stored yet: what the WAL will find in it once stored.
pub fn scan_new_entry(entry: &memtape_core::NewEntry) -> Vec<WalMatch> {
    match &entry.payload {
        memtape_core::Payload::Message(m) => scan_message(Some(m)),
        _ => Vec::new(),
    }
}

fn scan_message(message: Option<&memtape_core::Message>) -> Vec<WalMatch> {
    match message {
        Some(m) if m.role == Role::User => wal::scan(&m.content_text()),
        _ => Vec::new(),
    }
}

/// The change that records `matches` (found at `at`) on `view`: timestamped lines in the
/// working state, and the durable ones MEMORY.md does not hold yet in MEMORY.md (how many,
/// in `saved`). Durable lines that would take MEMORY.md past the size limit stay in the
/// working state only (consolidation folds the working state into long-term memory), so a
/// full MEMORY.md never makes a capture fail.
fn capture_change(
    matches: &[WalMatch],
    at: chrono::DateTime<chrono::Utc>,
    view: &MemoryView,
    saved: &mut usize,
) -> Change {
    let state: String = matches
        .iter()
        .map(|m| wal::session_state_line(at, m))
        .collect();
    let mut ops = vec![Op::Append {
        path: paths::SESSION_STATE.into(),
        text: state,
        heading: Some(paths::SESSION_STATE_HEADING.into()),
    }];
    let memory = view.content(paths::MEMORY).unwrap_or("");
    // Duplicates are checked against MEMORY.md and the lines added before them.
    let mut added = String::new();
    for m in matches.iter().filter(|m| m.category.is_durable()) {
        if !wal::is_duplicate(memory, &m.text) && !wal::is_duplicate(&added, &m.text) {
            added.push_str(&wal::long_term_line(m));
        }
    }
    if memory.len() + added.len() + 1 > MAX_FILE_BYTES {
        added.clear();
    }
    *saved = added.lines().count();
    if !added.is_empty() {
        if !(memory.is_empty() || memory.ends_with('\n')) {
            added.insert(0, '\n');
        }
        ops.push(Op::Append {
            path: paths::MEMORY.into(),
            text: added,
            heading: None,
        });
    }
    Change {
        ops,
        source: "wal".into(),
        caused_by: Vec::new(),
    }
}
