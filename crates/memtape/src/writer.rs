//! One writer per memory scope: the changes that threads of this process make to one
//! agent's (or one agent-and-user's) memory are computed one after another, each on the
//! memory as the changes before it leave it, and the changes waiting are committed
//! together in one transaction (one fsync), the way the server's appender shares one
//! commit among concurrent appends. Nothing in the process races for the scope, so a burst
//! of WAL captures, tool edits and daily notes never retries against itself; only a write
//! from another process (a CLI beside a server, a second server on PostgreSQL) makes a
//! batch's compare-and-append fail, and then its changes are computed again.
//!
//! Writes that need the whole log exactly (undo, forget, a write at a given version, a
//! lossless rewrite with its dropped facts) run alone: they wait for the batch in flight,
//! hold the scope while they compute and commit, and let the batch go on after them.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};

use memtape_core::memory::{Change, MemoryLog, MemoryView, Op, Recorded};
use memtape_core::{Entry, EntryId, NewEntry, Scope};
use memtape_store::Store;

use crate::tiers::{ATTEMPTS, back_off, with_causes};
use crate::{Engine, Error, Result};

/// The writers of the memory scopes this process writes to, each alive while a thread
/// uses it.
#[derive(Default)]
pub(crate) struct Writers {
    scopes: Mutex<HashMap<Scope, Weak<Writer>>>,
}

impl Writers {
    /// Past this many scopes the writers no thread uses are let go.
    const SWEEP: usize = 1024;

    /// The writer of `scope`, made if no thread holds it.
    fn get(&self, scope: &Scope) -> Arc<Writer> {
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(writer) = scopes.get(scope).and_then(Weak::upgrade) {
            return writer;
        }
        if scopes.len() >= Self::SWEEP {
            scopes.retain(|_, w| w.strong_count() > 0);
        }
        let writer = Arc::new(Writer::default());
        scopes.insert(scope.clone(), Arc::downgrade(&writer));
        writer
    }
}

/// One scope's writer: its state and the threads waiting on it.
#[derive(Default)]
struct Writer {
    state: Mutex<State>,
    turn: Condvar,
}

impl Writer {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.turn
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct State {
    /// The memory the next change is computed on: the committed memory with every change
    /// waiting or being committed applied. `None` when no change is waiting (the next
    /// writer reads the store).
    ahead: Option<Ahead>,
    /// Changes computed and waiting to be committed, in order.
    waiting: Vec<Waiting>,
    /// Whether a thread is committing a batch now.
    committing: bool,
    /// Whether a write that runs alone holds the scope.
    alone: bool,
    /// How many writes wait to run alone (no new change joins a batch meanwhile, so
    /// they get their turn).
    alone_waiting: usize,
    next_ticket: u64,
    /// What became of each change committed or given up, by ticket.
    outcomes: HashMap<u64, Outcome>,
}

/// The state changes are computed on while a batch is under way.
struct Ahead {
    /// The scope's latest entry when the committed part was read: the batch's base.
    base: EntryId,
    /// The committed version.
    version: u64,
    /// The memory after the committed version and every change waiting.
    view: MemoryView,
}

struct Waiting {
    ticket: u64,
    change: Change,
}

/// What became of a change computed for the batch.
enum Submitted {
    /// It waits in the batch under this ticket.
    Ticket(u64),
    /// There was nothing to change.
    Nothing,
    /// It must be written alone.
    Alone,
}

enum Outcome {
    Recorded(Recorded),
    /// Computed on a state that did not last (another process wrote first): compute again.
    Again,
    /// The batch failed for a reason other than a conflict: write alone, to learn whose
    /// change it was.
    Alone,
    Failed(Error),
}

/// Marks the scope free when a write that ran alone ends, however it ends.
struct AloneTurn<'a>(&'a Writer);

impl Drop for AloneTurn<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.alone = false;
        state.ahead = None;
        drop(state);
        self.0.turn.notify_all();
    }
}

/// What a write that runs alone commits: a change and entries after it in the same
/// transaction.
pub(crate) struct Planned {
    pub(crate) change: Change,
    pub(crate) extra: Vec<NewEntry>,
}

impl<S: Store> Engine<S> {
    /// Records a change of `scope`'s memory computed by `compute` from the memory as the
    /// changes before it leave it (see the module's documentation). `compute` returns
    /// `None` when there is nothing to change; it is called again only if another process
    /// wrote to the scope meanwhile.
    pub(crate) fn write_batched(
        &self,
        scope: &Scope,
        mut compute: impl FnMut(&MemoryView) -> Result<Option<Change>>,
    ) -> Result<Option<Recorded>> {
        let writer = self.memory_writers.get(scope);
        for attempt in 0..ATTEMPTS {
            let (state, submitted) = self.submit(scope, &writer, writer.lock(), &mut compute);
            let ticket = match submitted? {
                Submitted::Ticket(ticket) => ticket,
                Submitted::Nothing => return Ok(None),
                Submitted::Alone => {
                    drop(state);
                    return self.write_view_alone(scope, compute);
                }
            };
            match self.await_outcome(scope, &writer, state, ticket).0 {
                Outcome::Recorded(r) => return Ok(Some(r)),
                Outcome::Again => back_off(attempt),
                Outcome::Alone => return self.write_view_alone(scope, compute),
                Outcome::Failed(e) => return Err(e),
            }
        }
        Err(contended(scope))
    }

    /// [`Engine::write_batched`] of several changes of one thread at once: all of them are
    /// computed in turn, then committed together (one transaction for a request's many
    /// messages). The results are in the order of `computes`.
    pub(crate) fn write_batched_each<F>(
        &self,
        scope: &Scope,
        mut computes: Vec<F>,
    ) -> Vec<Result<Option<Recorded>>>
    where
        F: FnMut(&MemoryView) -> Result<Option<Change>>,
    {
        let writer = self.memory_writers.get(scope);
        // The lock is held from the first submission to the last, so no write that runs
        // alone starts in between (it would wait for these changes, and they for it).
        let mut state = writer.lock();
        while state.alone || state.alone_waiting > 0 {
            state = writer.wait(state);
        }
        let submitted: Vec<Result<Submitted>> = computes
            .iter_mut()
            .map(|compute| self.submit_now(scope, &mut state, compute))
            .collect();
        let mut outcomes = Vec::with_capacity(computes.len());
        for submitted in submitted {
            outcomes.push(match submitted {
                Ok(Submitted::Ticket(ticket)) => {
                    let (outcome, guard) = self.await_outcome(scope, &writer, state, ticket);
                    state = guard;
                    Some(outcome)
                }
                Ok(Submitted::Nothing) => None,
                Ok(Submitted::Alone) => Some(Outcome::Alone),
                Err(e) => Some(Outcome::Failed(e)),
            });
        }
        drop(state);
        // Once none of this thread's changes waits any more: those computed on a state that
        // did not last, or to be written alone, on their own, as any single write.
        computes
            .iter_mut()
            .zip(outcomes)
            .map(|(compute, outcome)| match outcome {
                None => Ok(None),
                Some(Outcome::Recorded(r)) => Ok(Some(r)),
                Some(Outcome::Failed(e)) => Err(e),
                Some(Outcome::Again | Outcome::Alone) => self.write_batched(scope, &mut *compute),
            })
            .collect()
    }

    /// Computes a change with `compute` on the memory as the changes waiting leave it and
    /// puts it in the batch (reading the committed memory first when nothing waits).
    fn submit<'w>(
        &self,
        scope: &Scope,
        writer: &'w Writer,
        mut state: MutexGuard<'w, State>,
        compute: &mut impl FnMut(&MemoryView) -> Result<Option<Change>>,
    ) -> (MutexGuard<'w, State>, Result<Submitted>) {
        while state.alone || state.alone_waiting > 0 {
            state = writer.wait(state);
        }
        let submitted = self.submit_now(scope, &mut state, compute);
        (state, submitted)
    }

    /// [`Engine::submit`] once the batch is open to it.
    fn submit_now(
        &self,
        scope: &Scope,
        state: &mut State,
        compute: &mut impl FnMut(&MemoryView) -> Result<Option<Change>>,
    ) -> Result<Submitted> {
        if state.ahead.is_none() {
            let (log, base) = self.memory_log(scope)?;
            state.ahead = Some(Ahead {
                base,
                version: log.version(),
                view: log.view(),
            });
        }
        let idle = |state: &mut State| {
            if state.waiting.is_empty() && !state.committing {
                state.ahead = None;
            }
        };
        let ahead = state.ahead.as_mut().expect("read above");
        let computed = compute(&ahead.view).and_then(|c| {
            c.map(|c| ahead.view.admit(with_causes(c)).map_err(Error::from))
                .transpose()
        });
        let change = match computed {
            Ok(Some(change)) => change,
            Ok(None) => {
                idle(state);
                return Ok(Submitted::Nothing);
            }
            Err(e) => {
                idle(state);
                return Err(e);
            }
        };
        if change.ops.iter().any(|op| matches!(op, Op::Forget { .. })) {
            // A forget changes what earlier changes show: the view cannot be moved on
            // without the log.
            idle(state);
            return Ok(Submitted::Alone);
        }
        let version = ahead.view.version + 1;
        ahead.view.record(version, EntryId(0), self.now(), &change);
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push(Waiting { ticket, change });
        Ok(Submitted::Ticket(ticket))
    }

    /// [`Engine::write_alone`] of a change computed from the view only.
    fn write_view_alone(
        &self,
        scope: &Scope,
        mut compute: impl FnMut(&MemoryView) -> Result<Option<Change>>,
    ) -> Result<Option<Recorded>> {
        Ok(self
            .write_alone(scope, |_, view| {
                Ok(compute(view)?.map(|change| Planned {
                    change,
                    extra: Vec::new(),
                }))
            })?
            .map(|(r, _)| r))
    }

    /// Waits until the change `ticket` is committed or given up, committing the changes
    /// waiting whenever no other thread is.
    fn await_outcome<'w>(
        &self,
        scope: &Scope,
        writer: &'w Writer,
        mut state: MutexGuard<'w, State>,
        ticket: u64,
    ) -> (Outcome, MutexGuard<'w, State>) {
        loop {
            if let Some(outcome) = state.outcomes.remove(&ticket) {
                return (outcome, state);
            }
            if state.committing || state.waiting.is_empty() {
                state = writer.wait(state);
                continue;
            }
            state.committing = true;
            let batch = std::mem::take(&mut state.waiting);
            let (base, version) = state
                .ahead
                .as_ref()
                .map_or((EntryId(0), 0), |a| (a.base, a.version));
            drop(state);
            let result = self.commit_batch(scope, base, version, &batch);
            state = writer.lock();
            state.committing = false;
            match result {
                Ok(recorded) => {
                    let last = recorded.last().map(|r| r.id);
                    for (w, r) in batch.iter().zip(recorded) {
                        state.outcomes.insert(w.ticket, Outcome::Recorded(r));
                    }
                    self.move_ahead(scope, &mut state, last);
                }
                Err(e) => {
                    let conflict = matches!(e, Error::Store(memtape_store::Error::Conflict { .. }));
                    if batch.len() == 1 && !conflict {
                        state.outcomes.insert(batch[0].ticket, Outcome::Failed(e));
                    } else {
                        for w in &batch {
                            let again = if conflict {
                                Outcome::Again
                            } else {
                                Outcome::Alone
                            };
                            state.outcomes.insert(w.ticket, again);
                        }
                    }
                    // What waits was computed on top of the batch: computed again too.
                    for w in std::mem::take(&mut state.waiting) {
                        state.outcomes.insert(w.ticket, Outcome::Again);
                    }
                    state.ahead = None;
                }
            }
            writer.turn.notify_all();
        }
    }

    /// Appends `batch` after `base` (the scope's latest entry), in one transaction, as the
    /// versions after `version`.
    fn commit_batch(
        &self,
        scope: &Scope,
        base: EntryId,
        version: u64,
        batch: &[Waiting],
    ) -> Result<Vec<Recorded>> {
        let now = self.now();
        let entries: Vec<NewEntry> = batch
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let entry = NewEntry::new(scope.clone(), w.change.to_payload(), now);
                if i == 0 { entry.if_last(base) } else { entry }
            })
            .collect();
        let stored = self.store_entries(entries)?;
        self.memory_logs.committed(scope, version, &stored);
        Ok(stored
            .into_iter()
            .zip(batch)
            .enumerate()
            .map(|(i, (e, w))| Recorded {
                version: version + i as u64 + 1,
                id: e.id,
                at: e.created_at,
                change: w.change.clone(),
                erased: None,
            })
            .collect())
    }

    /// After a batch ending with entry `last` was committed: the state the changes still
    /// waiting were computed on is the committed memory now, unless another process wrote
    /// after the batch (then they are computed again).
    fn move_ahead(&self, scope: &Scope, state: &mut State, last: Option<EntryId>) {
        if state.waiting.is_empty() {
            state.ahead = None;
            return;
        }
        let read = self.memory_log(scope);
        match read {
            Ok((log, base)) if Some(base) == last => {
                let mut view = log.view();
                let now = self.now();
                for (i, w) in state.waiting.iter().enumerate() {
                    view.record(log.version() + i as u64 + 1, EntryId(0), now, &w.change);
                }
                state.ahead = Some(Ahead {
                    base,
                    version: log.version(),
                    view,
                });
            }
            _ => {
                for w in std::mem::take(&mut state.waiting) {
                    state.outcomes.insert(w.ticket, Outcome::Again);
                }
                state.ahead = None;
            }
        }
    }

    /// Records a change of `scope`'s memory computed by `compute` from the whole log, with
    /// the scope to itself: the batch under way is committed first, and nothing joins
    /// until this write is done. Its `extra` entries are written in the same transaction,
    /// after the change. Returns the change recorded and the extra entries as stored.
    pub(crate) fn write_alone(
        &self,
        scope: &Scope,
        mut compute: impl FnMut(&MemoryLog, &MemoryView) -> Result<Option<Planned>>,
    ) -> Result<Option<(Recorded, Vec<Entry>)>> {
        let writer = self.memory_writers.get(scope);
        for attempt in 0..ATTEMPTS {
            let mut state = writer.lock();
            state.alone_waiting += 1;
            while state.alone || state.committing || !state.waiting.is_empty() {
                state = writer.wait(state);
            }
            state.alone_waiting -= 1;
            state.alone = true;
            drop(state);
            let turn = AloneTurn(&writer);
            // Taken before `compute`, so entries it dates itself come no earlier.
            let now = self.now();
            let (log, base) = self.memory_log(scope)?;
            let view = log.view();
            let Some(planned) = compute(&log, &view)? else {
                return Ok(None);
            };
            let change = view.admit(with_causes(planned.change))?;
            let mut entries =
                vec![NewEntry::new(scope.clone(), change.to_payload(), now).if_last(base)];
            entries.extend(planned.extra);
            match self.store_entries(entries) {
                Ok(mut stored) => {
                    let first = stored.remove(0);
                    return Ok(Some((
                        Recorded {
                            version: log.version() + 1,
                            id: first.id,
                            at: first.created_at,
                            change,
                            erased: None,
                        },
                        stored,
                    )));
                }
                Err(Error::Store(memtape_store::Error::Conflict { .. })) => {
                    drop(turn);
                    back_off(attempt);
                }
                Err(e) => return Err(e),
            }
        }
        Err(contended(scope))
    }
}

fn contended(scope: &Scope) -> Error {
    Error::Contended(format!(
        "{scope}: memory kept changing under this write ({ATTEMPTS} attempts); try again"
    ))
}
