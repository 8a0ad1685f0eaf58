//! Named locks shared by every process that opens one store: a consolidation of a session
//! or an emergence of an agent runs in one place at a time, whether the CLI, a server, or
//! both are at work on the data directory.
//!
//! The SQLite store keeps one lock file per name in `<data-dir>/locks/` and takes an
//! exclusive advisory lock on it (`flock`). Such a lock belongs to the open file, so it
//! keeps two threads of one process apart as well as two processes, and the kernel drops
//! it when its process dies: a crash never leaves a lock behind. The in-memory store,
//! which no other process can open, keeps its locks in memory.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// Whether taking a lock waits for its holder or gives up at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Wait until the lock is free.
    Block,
    /// Return `None` when someone holds it.
    Try,
}

/// A held lock, released when dropped.
#[must_use = "the lock is released as soon as this is dropped"]
pub struct StoreLock {
    name: String,
    /// The open lock file, or the in-memory entry: dropping it releases the lock.
    _held: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for StoreLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLock")
            .field("name", &self.name)
            .finish()
    }
}

impl StoreLock {
    /// A lock held by `held` (a store implementation's guard: an open lock file, a
    /// database connection holding an advisory lock), released when `held` is dropped.
    pub fn new(name: &str, held: impl std::any::Any + Send + Sync) -> Self {
        StoreLock {
            name: name.to_owned(),
            _held: Box::new(held),
        }
    }

    /// The name it was taken under.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The locks of one in-memory store.
#[derive(Debug, Default)]
pub(crate) struct MemoryLocks {
    inner: Arc<MemoryLockSet>,
}

#[derive(Debug, Default)]
struct MemoryLockSet {
    held: Mutex<HashSet<String>>,
    released: Condvar,
}

struct MemoryHeld {
    set: Arc<MemoryLockSet>,
    key: String,
}

impl Drop for MemoryHeld {
    fn drop(&mut self) {
        // A panic while the set was held cannot leave it half-changed: take it anyway.
        let mut held = self.set.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.remove(&self.key);
        self.set.released.notify_all();
    }
}

/// The key a lock is known by: a tenant's locks never meet another tenant's.
fn key(tenant: &str, name: &str) -> String {
    format!("{tenant}\u{0}{name}")
}

impl MemoryLocks {
    pub(crate) fn lock(&self, tenant: &str, name: &str, wait: Wait) -> Option<StoreLock> {
        let key = key(tenant, name);
        let set = &self.inner;
        let mut held = set.held.lock().unwrap_or_else(PoisonError::into_inner);
        while held.contains(&key) {
            if wait == Wait::Try {
                return None;
            }
            held = set
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(key.clone());
        Some(StoreLock {
            name: name.to_owned(),
            _held: Box::new(MemoryHeld {
                set: Arc::clone(set),
                key,
            }),
        })
    }
}

/// The folder of lock files beside a store's database file.
pub(crate) fn lock_dir(database: &Path) -> PathBuf {
    database.parent().unwrap_or(Path::new(".")).join("locks")
}

/// Takes the lock `name` of `tenant` through a file in `dir`. The file's name is a hash
/// of the two, so no name can reach outside the folder, however it is spelled.
pub(crate) fn file_lock(
    dir: &Path,
    tenant: &str,
    name: &str,
    wait: Wait,
) -> Result<Option<StoreLock>> {
    let digest = Sha256::digest(key(tenant, name).as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let (path, file) = lock_file(dir, &format!("{hex}.lock"))?;
    match wait {
        Wait::Block => file.lock().map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?,
        Wait::Try => match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(Error::Io { path, source });
            }
        },
    }
    Ok(Some(StoreLock {
        name: name.to_owned(),
        _held: Box::new(file),
    }))
}

/// The lock file `name` in `dir` (both made if missing), open for locking.
fn lock_file(dir: &Path, name: &str) -> Result<(PathBuf, File)> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let path = dir.join(name);
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
    Ok((path, file))
}

/// The lock file that says a server is serving a data directory.
fn serving_file(data_dir: &Path) -> Result<(PathBuf, File)> {
    lock_file(&data_dir.join("locks"), "serving.lock")
}

/// Marks `data_dir` as served for as long as the returned lock is held (a shared lock:
/// several servers may serve one directory). Work that would pull the directory's
/// projections from under a server (a reindex with another model) asks
/// [`lock_unserved`] first. Waits while such work holds the directory.
pub fn lock_serving(data_dir: &Path) -> Result<StoreLock> {
    let (path, file) = serving_file(data_dir)?;
    file.lock_shared()
        .map_err(|source| Error::Io { path, source })?;
    Ok(StoreLock {
        name: "serving".to_owned(),
        _held: Box::new(file),
    })
}

/// Takes `data_dir` for work no server may run beside: `None` when a server serves it
/// ([`lock_serving`]). Servers that start meanwhile wait until the lock is dropped.
pub fn lock_unserved(data_dir: &Path) -> Result<Option<StoreLock>> {
    let (path, file) = serving_file(data_dir)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(StoreLock {
            name: "serving".to_owned(),
            _held: Box::new(file),
        })),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(source)) => Err(Error::Io { path, source }),
    }
}
