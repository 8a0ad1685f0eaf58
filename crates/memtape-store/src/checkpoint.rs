//! Checkpoints of SQLite's write-ahead logs off the writing thread.
//!
//! By default SQLite checkpoints a log on the connection whose commit took it past 1,000
//! pages: the appending thread then copies the log into the database and syncs the file
//! before its call returns. In a long ingest that was 5% of that thread's time with one
//! tenant and 15% with a thousand (the tape's pages, read back at random, spill and are
//! written again). [`checkpoint_behind`] hands that work to one background thread
//! instead, which checkpoints each file it is asked to on a connection of its own, in
//! `PASSIVE` mode (it never waits for the writer or for readers; what it cannot copy
//! now is copied at the next request). The writer still checkpoints itself once its log
//! reaches [`INLINE_PAGES`]: a background thread that falls behind, or cannot open the
//! file, never lets the log grow without bound.
//!
//! A checkpoint moves committed pages from one file to another; nothing a commit made
//! durable depends on it, so a checkpoint left undone (the process ends, the file is
//! removed) loses nothing: the next one, in any process, does it.

use std::collections::{HashSet, VecDeque};
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};

use rusqlite::{Connection, OpenFlags};

/// A log this many pages long is checkpointed in the background (SQLite's own default
/// for checkpointing on the writer).
pub const BACKGROUND_PAGES: c_int = 1000;
/// A log this many pages long is checkpointed by the writer itself, as SQLite does by
/// default: the background thread is behind.
pub const INLINE_PAGES: c_int = 8 * BACKGROUND_PAGES;

/// The files waiting for a checkpoint, each once, in the order asked.
#[derive(Default)]
struct Queue {
    waiting: Mutex<(VecDeque<PathBuf>, HashSet<PathBuf>)>,
    ready: Condvar,
}

/// The queue, and the thread serving it started with it; `None` if no thread could be
/// started (every checkpoint then stays on the writer).
fn queue() -> Option<&'static Queue> {
    static QUEUE: OnceLock<Option<&'static Queue>> = OnceLock::new();
    *QUEUE.get_or_init(|| {
        let queue: &'static Queue = Box::leak(Box::default());
        std::thread::Builder::new()
            .name("memtape-checkpoint".into())
            .spawn(move || serve(queue))
            .ok()
            .map(|_| queue)
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn serve(queue: &'static Queue) {
    loop {
        let path = {
            let mut waiting = lock(&queue.waiting);
            loop {
                if let Some(path) = waiting.0.pop_front() {
                    break path;
                }
                waiting = queue
                    .ready
                    .wait(waiting)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        // A checkpoint that fails (the file went, a lock is held) is left to the next
        // request, or to the writer once its log is long enough.
        let _ = checkpoint(&path);
        // Asked again while it ran, it runs again at the next request.
        lock(&queue.waiting).1.remove(&path);
    }
}

/// A `PASSIVE` checkpoint of the database at `path`, on a connection of its own that
/// neither creates the file nor waits for a lock.
fn checkpoint(path: &Path) -> rusqlite::Result<()> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
}

/// Asks the background thread to checkpoint `path`; `false` when there is no thread.
fn ask(path: &Path) -> bool {
    let Some(queue) = queue() else {
        return false;
    };
    let mut waiting = lock(&queue.waiting);
    if waiting.1.insert(path.to_owned()) {
        waiting.0.push_back(path.to_owned());
        queue.ready.notify_one();
    }
    true
}

/// Makes `conn`, the writer of the WAL-mode database at `path`, leave its checkpoints to
/// the background thread (see the module's description). It replaces SQLite's automatic
/// checkpoints on `conn`, so `PRAGMA wal_autocheckpoint` must not be set on it after.
pub fn checkpoint_behind(conn: &mut Connection, path: &Path) -> rusqlite::Result<()> {
    let path = path.to_owned();
    conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: c_int| {
        if pages >= INLINE_PAGES || (pages >= BACKGROUND_PAGES && !ask(&path)) {
            // Busy (another connection checkpoints) is not a failure of the commit.
            let _ = wal.checkpoint();
        }
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A WAL-mode database at `path` with SQLite's own checkpoints off, its writer set up
    /// by `setup`, after `pages` pages of rows were committed in transactions of 100.
    fn write(path: &Path, pages: usize, setup: impl FnOnce(&mut Connection)) -> Connection {
        let mut conn = Connection::open(path).unwrap();
        conn.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .unwrap();
        conn.execute_batch("PRAGMA wal_autocheckpoint=0; CREATE TABLE t (b BLOB);")
            .unwrap();
        setup(&mut conn);
        for _ in 0..pages / 100 {
            let tx = conn.transaction().unwrap();
            for _ in 0..100 {
                tx.execute("INSERT INTO t VALUES (zeroblob(4000))", [])
                    .unwrap();
            }
            tx.commit().unwrap();
        }
        conn
    }

    fn size(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    /// Waits up to 10 s for the database file to hold at least `bytes`.
    fn grows_to(path: &Path, bytes: u64) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while size(path) < bytes {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }

    #[test]
    fn a_long_log_is_copied_into_the_file_by_the_background_thread() {
        let dir = tempfile::tempdir().unwrap();
        // Without anyone checkpointing, the rows stay in the log: the file is a page or two.
        let alone = dir.path().join("alone.db");
        let _held = write(&alone, 1500, |_| {});
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(size(&alone) < 64 << 10, "{}", size(&alone));
        // Left to the background thread past 1,000 pages: the file gets them, while the
        // writer (still open, never checkpointing itself below 8,000) does nothing.
        let behind = dir.path().join("behind.db");
        let _writer = write(&behind, 1500, |c| checkpoint_behind(c, &behind).unwrap());
        assert!(grows_to(&behind, 4 << 20), "{}", size(&behind));
    }

    #[test]
    fn a_writer_whose_log_is_not_taken_checkpoints_it_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        // The background thread is asked about another file (one that does not exist), so
        // nobody else checkpoints this one: past 8,000 pages the writer does.
        let elsewhere = dir.path().join("missing.db");
        let _writer = write(&path, 8200, |c| checkpoint_behind(c, &elsewhere).unwrap());
        assert!(size(&path) >= 30 << 20, "{}", size(&path));
    }
}
