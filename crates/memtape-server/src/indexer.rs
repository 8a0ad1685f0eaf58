//! The background indexer: the server acknowledges an append once it is durable on the
//! tape, and this thread brings the search index up to date behind it (embedding is the
//! slow part of a write). A search still catches up first, so it finds every append
//! acknowledged before it; the indexer only makes that catch-up short.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use memtape::{Engine, Entry, SqliteStore, WriteHook};

/// The write hook that wakes the indexer after every durable write. The channel holds one
/// wake-up: writes that come while one is pending share it.
struct Wake(SyncSender<()>);

impl WriteHook<SqliteStore> for Wake {
    fn written(&self, _store: &SqliteStore, _entries: &[Entry]) {
        match self.0.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }
}

/// The indexer thread and the way to stop it.
pub struct Indexer {
    stop: Arc<AtomicBool>,
    wake: SyncSender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Indexer {
    /// Takes the index off `engine`'s write path and starts the thread that follows the
    /// tape instead. Returns the engine, ready to share, and the indexer.
    pub fn start(mut engine: Engine<SqliteStore>) -> (Arc<Engine<SqliteStore>>, Indexer) {
        let (wake, woken) = sync_channel(1);
        engine.set_index_on_write(false);
        engine.add_write_hook(Wake(wake.clone()));
        let engine = Arc::new(engine);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (engine, stop) = (engine.clone(), stop.clone());
            std::thread::Builder::new()
                .name("memtape-indexer".into())
                .spawn(move || follow(&engine, &woken, &stop))
                .ok()
        };
        if thread.is_none() {
            // Without the thread every search still catches up on its own.
            tracing::warn!("could not start the indexer thread; searches will index");
        }
        (engine, Indexer { stop, wake, thread })
    }
}

impl Drop for Indexer {
    /// Stops the thread between two batches and waits for it: what is left is indexed by
    /// the next catch-up (a search, or the next start).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.wake.try_send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The niceness of the indexer thread: embedding a backlog may take a whole core for
/// minutes, and requests (a search embeds its query too) come first.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const NICE: i32 = 10;

fn follow(engine: &Engine<SqliteStore>, woken: &Receiver<()>, stop: &AtomicBool) {
    // On Linux a thread id names one thread, so this lowers this thread alone.
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE) {
        tracing::debug!("could not lower the indexer thread's priority: {e}");
    }
    while woken.recv().is_ok() {
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            match engine.catch_up_index_step() {
                Ok(true) => continue,
                Ok(false) => break,
                // Recorded by the index (Engine::index_failure) and retried by the next
                // search or write.
                Err(e) => {
                    tracing::warn!("background indexing failed: {e}");
                    break;
                }
            }
        }
    }
}
