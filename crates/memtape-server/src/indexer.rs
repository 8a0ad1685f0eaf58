//! The background indexer: the server acknowledges an append once it is durable on the
//! tape, and this thread brings the search index up to date behind it (embedding is the
//! slow part of a write). A search still catches up first, so it finds every append
//! acknowledged before it; the indexer only makes that catch-up short.
//!
//! The embedder gives way to requests: before each batch it waits for a quiet moment
//! ([`Activity`]), and under load that does not let up it embeds a short batch now and then,
//! so a burst of appends costs searches no CPU and its vectors are caught up once the burst
//! is over (BM25 finds the newest appends meanwhile).
//!
//! Appends by other processes (a second server on the same PostgreSQL database, the CLI
//! beside a server on one data directory) are followed too: a watcher thread waits for the
//! store's sign of a commit (PostgreSQL's LISTEN/NOTIFY) or for [`FOLLOW_POLL`], whichever
//! comes first, and wakes the indexer when the tape has grown past the index.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// How long the server must have had no request in flight before the embedder takes a
/// full batch.
const QUIET: Duration = Duration::from_millis(20);

/// How long the embedder waits for a quiet moment before it takes a short batch anyway.
const PATIENCE: Duration = Duration::from_secs(1);

/// Entries per batch in a quiet moment (a MiniLM batch of them takes a few hundred ms of
/// both cores here), and per batch taken under load (a few tens of ms): under load that
/// does not let up, the embedder takes about 40 ms of CPU a second (MiniLM).
const QUIET_BATCH: usize = 256;
const BUSY_BATCH: usize = 16;

/// How often a waiting embedder looks at the requests again.
const LOOK_AGAIN: Duration = Duration::from_millis(5);

/// The requests the server is serving: how many are in flight and when the last one ended.
/// Each request holds a [`Busy`] while it runs.
#[derive(Debug)]
pub struct Activity {
    since: Instant,
    in_flight: AtomicUsize,
    /// Nanoseconds from `since` to the end of the last request.
    last_end: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            since: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
        }
    }
}

impl Activity {
    /// Counts a request in flight until the returned guard drops.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// How long no request has been in flight (since the start, when none has ended yet);
    /// `None` while one is.
    pub fn quiet_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last_end = Duration::from_nanos(self.last_end.load(Ordering::SeqCst));
        Some(self.since.elapsed().saturating_sub(last_end))
    }
}

/// A request in flight; see [`Activity::begin`].
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let now = u64::try_from(self.0.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.0.last_end.fetch_max(now, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many entries the embedder's next batch may cover: waits until the server has been
/// quiet for [`QUIET`] (a full batch) or for at most [`PATIENCE`] (a short one). `None`
/// when asked to stop meanwhile.
fn next_batch(activity: &Activity, stop: &AtomicBool) -> Option<usize> {
    let waiting = Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        if activity.quiet_for().is_some_and(|q| q >= QUIET) {
            return Some(QUIET_BATCH);
        }
        if waiting.elapsed() >= PATIENCE {
            return Some(BUSY_BATCH);
        }
        std::thread::sleep(LOOK_AGAIN);
    }
}

/// How long the indexer waits after a write before it indexes, gathering the writes of
/// that moment into one transaction.
const GATHER: Duration = Duration::from_millis(3);

/// The indexer's threads and the way to stop them.
pub struct Indexer {
    stop: Arc<AtomicBool>,
    wake: SyncSender<Wake>,
    wake_embedder: SyncSender<()>,
    activity: Arc<Activity>,
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
        let activity = Arc::new(Activity::default());
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
            let activity = activity.clone();
            match std::thread::Builder::new()
                .name("memtape-embedder".into())
                .spawn(move || embed(&engine, &embedder_woken, &indexer, &activity, &stop))
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
            activity,
            threads,
        };
        // Vectors left behind by the last run are embedded from the start.
        let _ = indexer.wake_embedder.try_send(());
        (engine, indexer)
    }
}

impl Indexer {
    /// The requests the embedder gives way to: every request counts itself here.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
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
        match wake {
            Wake::Embedded(pending, reply) => {
                let behind = index.store_embedded(pending).unwrap_or_else(|e| {
                    tracing::warn!("storing vectors failed: {e}");
                    false
                });
                let _ = reply.send(behind);
            }
            // The appends of the next moments join this one's transaction: FTS5 writes a
            // new segment per transaction, so indexing each append alone costs several
            // times the pages (a search meanwhile catches up itself).
            Wake::Written => std::thread::sleep(GATHER),
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
                // So do shards a search left half built (a cold tenant, bounded wait).
                if last > index.covered() || index.vectors_are_behind() || index.is_building() {
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
/// time when requests let it ([`next_batch`]), and hands each batch to the indexer thread
/// to store.
fn embed(
    engine: &Engine<DynStore>,
    woken: &Receiver<()>,
    indexer: &SyncSender<Wake>,
    activity: &Activity,
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
            let Some(entries) = next_batch(activity, stop) else {
                return;
            };
            let pending = match index.embed_next(engine.store(), entries) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedder_takes_a_full_batch_once_requests_have_been_quiet() {
        let activity = Arc::new(Activity::default());
        let stop = AtomicBool::new(false);
        drop(activity.begin());
        let asked = Instant::now();
        assert_eq!(next_batch(&activity, &stop), Some(QUIET_BATCH));
        let waited = asked.elapsed();
        assert!(waited >= QUIET - LOOK_AGAIN, "waited only {waited:?}");
        assert!(waited < PATIENCE, "waited {waited:?}");
    }

    #[test]
    fn under_load_that_never_lets_up_the_embedder_takes_a_short_batch_after_its_patience() {
        let activity = Arc::new(Activity::default());
        let stop = AtomicBool::new(false);
        let request = activity.begin();
        assert_eq!(activity.quiet_for(), None);
        let asked = Instant::now();
        assert_eq!(next_batch(&activity, &stop), Some(BUSY_BATCH));
        assert!(asked.elapsed() >= PATIENCE);
        // Two requests overlapping: in flight until both end.
        let other = activity.begin();
        drop(request);
        assert_eq!(activity.quiet_for(), None);
        drop(other);
        assert!(activity.quiet_for().is_some_and(|q| q < PATIENCE));
    }

    #[test]
    fn a_stopping_server_does_not_wait_for_quiet() {
        let activity = Arc::new(Activity::default());
        let _request = activity.begin();
        let stop = AtomicBool::new(true);
        let asked = Instant::now();
        assert_eq!(next_batch(&activity, &stop), None);
        assert!(asked.elapsed() < PATIENCE);
    }
}
