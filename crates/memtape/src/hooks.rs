//! Write hooks (Qanot's `add_write_hook`): code the engine runs after every durable write
//! (append, import, restore) with the entries it wrote. The search index is one of them;
//! callers add their own with [`Engine::add_write_hook`], and [`Engine::on_memory_write`]
//! takes Qanot's kind of callback, told the text of every memory write and where it went.

use std::panic::{AssertUnwindSafe, catch_unwind};

use memtape_core::events::BuiltinEvent;
use memtape_core::memory::Op;
use memtape_search::Index;
use memtape_store::Store;

use crate::{Engine, Entry, EntryId, Scope};

/// Code run after every durable write, with the entries written, in tape order. It runs
/// on the writer's thread once the write is committed, so it cannot undo or fail the
/// write: a hook that fails keeps its own record (the index does, for
/// [`Engine::index_failure`]), and one that panics is passed over (the panic is printed
/// by the panic hook) while the hooks after it still run.
pub trait WriteHook: Send + Sync {
    /// Called with the store and the entries one write made durable.
    fn written(&self, store: &dyn Store, entries: &[Entry]);
}

/// The search index follows the tape: each write brings it up to date
/// ([`Index::catch_up_written`] takes the entries written as they are when they are the
/// tape's next ones after its mark, and reads everything after its mark otherwise, so
/// nothing is missed when a catch-up failed before).
impl WriteHook for Index {
    fn written(&self, store: &dyn Store, entries: &[Entry]) {
        // Deliberately not propagated: the index records and logs a failure, and the next
        // search retries and reports it.
        let _ = self.catch_up_written(store, entries);
    }
}

/// One memory write, as Qanot's hooks see it: the text written (a whole file's content,
/// or the text appended to it) and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryWrite<'a> {
    /// The memory scope written (an agent, or an agent and a user).
    pub scope: &'a Scope,
    /// The `memory.change` entry that records it.
    pub id: EntryId,
    /// The file (`MEMORY.md`, `SESSION-STATE.md`, `memory/2026-02-10.md`, ...).
    pub path: &'a str,
    /// The text written: the file's new content, or the text appended.
    pub content: &'a str,
    /// Who wrote it (the change's source: `wal`, `memory.save`, `sync`, ...).
    pub source: &'a str,
}

/// A [`WriteHook`] calling `f` for every write or append in each `memory.change` written.
struct MemoryHook<F>(F);

impl<F: Fn(&MemoryWrite<'_>) + Send + Sync> WriteHook for MemoryHook<F> {
    fn written(&self, _store: &dyn Store, entries: &[Entry]) {
        for entry in entries {
            let Ok(Some(BuiltinEvent::MemoryChange(change))) =
                BuiltinEvent::from_payload(&entry.payload)
            else {
                continue;
            };
            for op in &change.ops {
                let (path, content) = match op {
                    Op::Write { path, content } => (path, content),
                    Op::Append { path, text, .. } => (path, text),
                    _ => continue,
                };
                (self.0)(&MemoryWrite {
                    scope: &entry.scope,
                    id: entry.id,
                    path,
                    content,
                    source: &change.source,
                });
            }
        }
    }
}

impl<S: Store> Engine<S> {
    /// Adds `hook`, run after every durable write from now on, after the search index and
    /// the hooks added before it.
    pub fn add_write_hook(&mut self, hook: impl WriteHook + 'static) {
        self.hooks.push(Box::new(hook));
    }

    /// Qanot's `add_write_hook(on_memory_write)`: `f` is told of every memory write (WAL
    /// captures, daily notes, saves, tool edits, sync, imports) once it is durable, with
    /// the text written and the file it went to. Deletes, renames, flags and forgets carry
    /// no text and are not reported.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use memtape::{Engine, Scope};
    ///
    /// let mut engine = Engine::in_memory();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = seen.clone();
    /// engine.on_memory_write(move |w| sink.lock().unwrap().push(w.path.to_owned()));
    /// engine.save_long_term(&Scope::agent("default", "default")?, "Ada likes tea")?;
    /// assert_eq!(*seen.lock().unwrap(), ["MEMORY.md"]);
    /// # Ok::<(), memtape::Error>(())
    /// ```
    pub fn on_memory_write(&mut self, f: impl Fn(&MemoryWrite<'_>) + Send + Sync + 'static) {
        self.add_write_hook(MemoryHook(f));
    }

    /// Runs the write hooks: the search index first (unless it is left to a background
    /// indexer, [`Engine::set_index_on_write`]), then the others in the order added.
    pub(crate) fn after_write(&self, written: &[Entry]) {
        // A background indexer that follows only the loaded shards still brings this
        // process's own writes into their tenants' shards: a tenant written here is served
        // here.
        if let Some(index) = self.index.as_ref().filter(|_| !self.index_on_write) {
            for entry in written {
                index.want(entry.scope.tenant());
            }
        }
        let index = self
            .index
            .iter()
            .filter(|_| self.index_on_write)
            .map(|i| i as &dyn WriteHook);
        for hook in index.chain(self.hooks.iter().map(|h| h.as_ref())) {
            let _ = catch_unwind(AssertUnwindSafe(|| hook.written(&self.store, written)));
        }
    }
}
