//! The background indexer: the server acknowledges an append once it is durable on the
//! tape, and this thread brings the search index up to date behind it (embedding is the
//! slow part of a write). A search still catches up first, so it finds every append
//! acknowledged before it; the indexer only makes that catch-up short.
//!
//! Appends by other processes (a second server on the same PostgreSQL database, the CLI
//! beside a server on one data directory) are followed too: a watcher thread waits for the
//! store's sign of a commit (PostgreSQL's LISTEN/NOTIFY) or for [`FOLLOW_POLL`], whichever
//! comes first, and wakes the indexer when the tape has grown past the index.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use memtape::{DynStore, Engine, Entry, PendingVectors, Store, WriteHook};

/// What wakes the indexer thread.
enum Wake {
    /// A durable write (or shutdown): index the text behind it.
    Written,
    /// Vectors from the embedder thread, to store; it waits for the answer (whether
    /// vectors are still behind) before it embeds the next batch.
    Embedded(PendingVectors, SyncSender<bool>),
}

/// The write hook that wakes the indexer after every durable write. The channel holds one
/// wake-up: writes that come while one is pending share it.
struct OnWrite(SyncSender<Wake>);

impl WriteHook for OnWrite {
    fn written(&self, _store: &dyn Store, _entries: &[Entry]) {
        match self.0.try_send(Wake::Written) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// How long the watcher waits for a sign of a commit before it looks at the tape anyway:
/// the floor under the notifications (and all there is for SQLite). It also bounds how
/// long a stopping server waits for the watcher.
pub const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// The indexer's threads and the way to stop them.
pub struct Indexer {
    stop: Arc<AtomicBool>,
    wake: SyncSender<Wake>,
    wake_embedder: SyncSender<()>,
    threads: Vec<JoinHandle<()>>,
}

impl Indexer {
    /// Takes the index off `engine`'s write path and starts the threads that follow the
    /// tape instead: one indexes text and stores vectors, at the priority of requests,
    /// since searches wait for the locks it takes; with a model, another embeds, at a low
    /// priority and holding no lock. Returns the engine, ready to share, and the indexer.
    pub fn start(mut engine: Engine<DynStore>) -> (Arc<Engine<DynStore>>, Indexer) {
        let (wake, woken) = sync_channel(1);
        let (wake_embedder, embedder_woken) = sync_channel(1);
        engine.set_index_on_write(false);
        engine.add_write_hook(OnWrite(wake.clone()));
        let embeds = engine.index().is_some_and(|i| i.embedder().is_some());
        let engine = Arc::new(engine);
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let spawned = {
            let (engine, stop, embedder) = (engine.clone(), stop.clone(), wake_embedder.clone());
            std::thread::Builder::new()
                .name("memtape-indexer".into())
                .spawn(move || follow(&engine, &woken, &embedder, &stop))
        };
        match spawned {
            Ok(t) => threads.push(t),
            // Without the thread every search still catches up on its own.
            Err(e) => {
                tracing::warn!("could not start the indexer thread ({e}); searches will index")
            }
        }
        if embeds && !threads.is_empty() {
            let (engine, stop, indexer) = (engine.clone(), stop.clone(), wake.clone());
            match std::thread::Builder::new()
                .name("memtape-embedder".into())
                .spawn(move || embed(&engine, &embedder_woken, &indexer, &stop))
            {
                Ok(t) => threads.push(t),
                Err(e) => tracing::warn!(
                    "could not start the embedding thread ({e}); new entries are found by BM25 only"
                ),
            }
        }
        if !threads.is_empty() {
            let (engine, stop, indexer) = (engine.clone(), stop.clone(), wake.clone());
            match std::thread::Builder::new()
                .name("memtape-tape-watcher".into())
                .spawn(move || watch(&engine, &indexer, &stop))
            {
                Ok(t) => threads.push(t),
                Err(e) => tracing::warn!(
                    "could not start the tape watcher ({e}); other processes' appends are indexed by the next search"
                ),
            }
        }
        let indexer = Indexer {
            stop,
            wake,
            wake_embedder,
            threads,
        };
        // Vectors left behind by the last run are embedded from the start.
        let _ = indexer.wake_embedder.try_send(());
        (engine, indexer)
    }
}

impl Drop for Indexer {
    /// Stops the threads between two batches and waits for them: what is left is indexed
    /// by the next catch-up (a search, or the next start).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.wake.try_send(Wake::Written);
        let _ = self.wake_embedder.try_send(());
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The indexer thread: indexes text behind the writes, stores the embedder's vectors.
fn follow(
    engine: &Engine<DynStore>,
    woken: &Receiver<Wake>,
    embedder: &SyncSender<()>,
    stop: &AtomicBool,
) {
    let Some(index) = engine.index() else {
        return;
    };
    while let Ok(wake) = woken.recv() {
        if let Wake::Embedded(pending, reply) = wake {
            let behind = index.store_embedded(pending).unwrap_or_else(|e| {
                tracing::warn!("storing vectors failed: {e}");
                false
            });
            let _ = reply.send(behind);
        }
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            // Recorded by the index (Engine::index_failure) and retried by the next search
            // or write.
            match engine.catch_up_index_step() {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!("background indexing failed: {e}");
                    break;
                }
            }
        }
        // New text is new documents to embed.
        let _ = embedder.try_send(());
    }
}

/// The watcher thread: wakes the indexer whenever the tape has grown past the index, or
/// the index's vectors are behind its text, however that came about (this server's
/// appends wake the indexer directly as well).
fn watch(engine: &Engine<DynStore>, indexer: &SyncSender<Wake>, stop: &AtomicBool) {
    let Some(index) = engine.index() else {
        return;
    };
    let mut failing = false;
    while !stop.load(Ordering::SeqCst) {
        let looked = engine
            .store()
            .wait_for_writes(FOLLOW_POLL)
            .and_then(|()| engine.store().last_id());
        match looked {
            Ok(last) => {
                if failing {
                    tracing::info!("following the tape again");
                    failing = false;
                }
                // Vectors behind count too: a search may have indexed another process's
                // append as text itself, and only a wake gets the embedder to it.
                let embeds = index.embedder().is_some();
                if last > index.covered() || (embeds && index.embedded() < index.covered()) {
                    let _ = indexer.try_send(Wake::Written);
                }
            }
            Err(e) => {
                // Said once per outage, not every poll; retried after a pause.
                if !failing {
                    tracing::warn!("cannot follow the tape: {e}; retrying");
                    failing = true;
                }
                std::thread::sleep(FOLLOW_POLL);
            }
        }
    }
}

/// The embedding thread: embeds the documents whose vectors are behind, a batch at a
/// time, and hands each batch to the indexer thread to store.
fn embed(
    engine: &Engine<DynStore>,
    woken: &Receiver<()>,
    indexer: &SyncSender<Wake>,
    stop: &AtomicBool,
) {
    // Embedding a backlog may take a whole core for minutes, and requests (a search embeds
    // its query too) come first. A low nice value is not enough: a woken request thread
    // still waits for the embedder's time slice, at every step of a search, so searches
    // took seconds under load. Linux's idle policy runs this thread only on an otherwise
    // idle core and gives way at once (measured in docs/benchmarks.md, "fourth
    // measurement"); elsewhere the lowest priority the platform has.
    #[cfg(target_os = "linux")]
    let lowered = thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        thread_priority::ThreadPriority::Min,
        thread_priority::ThreadSchedulePolicy::Normal(
            thread_priority::NormalThreadSchedulePolicy::Idle,
        ),
    );
    #[cfg(not(target_os = "linux"))]
    let lowered =
        thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min);
    if let Err(e) = lowered {
        tracing::debug!("could not lower the embedding thread's priority: {e:?}");
    }
    let Some(index) = engine.index() else {
        return;
    };
    while woken.recv().is_ok() {
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let pending = match index.embed_next(engine.store()) {
                Ok(Some(pending)) => pending,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("background embedding failed: {e}");
                    break;
                }
            };
            let (reply, answer) = sync_channel(1);
            if indexer.send(Wake::Embedded(pending, reply)).is_err() {
                return;
            }
            match answer.recv() {
                Ok(true) => continue,
                Ok(false) | Err(_) => break,
            }
        }
    }
}
