//! The search index as a set of shards, one per tenant: each its own file, BM25
//! statistics and vectors, loaded when a search or a write of its tenant first needs it and
//! evicted least-recently-used under a memory budget, so what a process holds in memory
//! follows what it serves, not the size of the tape.
//!
//! The index follows the tape by id as one shard did before: a mark (`routed`, kept in the
//! directory's `shards.db`) says up to which tape id the shards this process touched have
//! seen every entry. A catch-up reads the tape after it and brings the shard of every
//! tenant it finds there up to date (each reads only its own tenant's entries,
//! [`Store::entries_after_in`]). Lazily ([`Index::set_lazy`], what a server does) only the
//! shards already loaded follow the tape; the others catch up when they are loaded, and an
//! erasure's receipt always reaches a shard that has a file, so erased text leaves every
//! file. Correctness never depends on which shards are loaded: every search catches its
//! shard up first.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use memtape_core::{Entry, EntryId};
use memtape_store::Store;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use sha2::{Digest, Sha256};

use super::catch_up::PageSpan;
use super::{NO_EMBEDDER, PendingVectors, Progress, QueryVectors, Shard, ShardSpec, lock};
use crate::{Embedder, Error, Hit, IndexConfig, Result, SearchRequest};

/// The default memory budget of the loaded shards.
pub const DEFAULT_MEMORY: u64 = 1 << 30;

/// The default most shards loaded at once (each holds a few file descriptors).
pub const DEFAULT_MAX_SHARDS: usize = 1024;

/// How many tape entries one routing step reads.
const ROUTE_BATCH: usize = 1024;

/// How long one catch-up step builds each shard a search left behind before the step
/// returns (so a background indexer can stop between steps).
const BUILD_STEP: std::time::Duration = std::time::Duration::from_millis(200);

/// What the shards have done since the index was opened, for operators (metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Shards in memory now.
    pub loaded: usize,
    /// Their estimated memory, in bytes.
    pub bytes: u64,
    /// Shards loaded (opened and read into memory) since the index was opened.
    pub loads: u64,
    /// Shards evicted to keep within the budget since then.
    pub evictions: u64,
    /// Vector searches an approximate graph answered since then.
    pub graph_searches: u64,
    /// Graph searches the graph refused since then, answered by a scan instead.
    pub graph_refused: u64,
}

/// Where one tenant's shard stands ([`Index::shard_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardStatus {
    /// The last tape id the shard has followed: every entry of its tenant up to it is in.
    pub covered: EntryId,
    /// The last tape id whose documents have their vectors.
    pub embedded: EntryId,
    /// How many documents it holds.
    pub documents: usize,
}

/// One tenant's place among the loaded shards: opened once however many threads ask at
/// once (the slot's lock is held while it opens).
#[derive(Default)]
struct Slot {
    shard: Mutex<Option<Arc<Shard>>>,
    used: AtomicU64,
}

#[derive(Default)]
struct Loaded {
    slots: HashMap<String, Arc<Slot>>,
    clock: u64,
}

/// The search index of a tape: a directory of shards, one per tenant. Cheap to share
/// between threads.
pub struct Index {
    dir: PathBuf,
    spec: ShardSpec,
    meta: Mutex<Connection>,
    loaded: Mutex<Loaded>,
    /// Tenants written by this process since the last routing step: lazily, their shards
    /// follow the tape too ([`Index::want`]).
    wanted: Mutex<HashSet<String>>,
    /// The tape id up to which every shard this index touched has followed the tape
    /// (`None` for a new index that has not caught up once).
    routed: Mutex<Option<EntryId>>,
    /// Set by [`Index::rebuild`]: the next catch-up rebuilds every tenant's shard.
    rebuild: Mutex<bool>,
    failure: Mutex<Option<String>>,
    memory: AtomicU64,
    max_shards: AtomicUsize,
    lazy: AtomicBool,
    vectors_behind: AtomicBool,
    loads: AtomicU64,
    evictions: AtomicU64,
    /// The shard whose vectors the next embedding step looks at first (round robin).
    next_embed: AtomicUsize,
    /// How long a search waits for its tenant's shard to catch up before answering from
    /// what the shard holds (`None`: as long as it takes), [`Index::set_cold_wait`].
    cold_wait: Mutex<Option<std::time::Duration>>,
    /// Tenants whose shards a search left behind the tape after its wait: the next
    /// catch-up steps build them on ([`Index::is_building`]).
    building: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("dir", &self.dir)
            .field("embedder", &self.embedder_id())
            .field("config", &self.spec.config)
            .finish_non_exhaustive()
    }
}

/// The meta file's name in the index's directory.
const META: &str = "shards.db";

fn open_meta(dir: &Path) -> Result<Connection> {
    let path = dir.join(META);
    let conn = Connection::open(&path)?;
    conn.busy_timeout(super::file::BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // The marks can be found again from the tape (a lost one means more catching up).
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        [],
    )?;
    Ok(conn)
}

fn get_meta(conn: &Connection, key: &str) -> Result<Option<String>> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()?)
}

fn set_meta(conn: &Connection, key: &str, value: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO meta VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )?;
    Ok(())
}

/// Removes an index file of the format before shards (`<dir>.db` beside the directory,
/// with its log and lock), when it is one: it is a projection, and the shards are built
/// from the tape.
fn remove_single_file_index(dir: &Path) {
    let old = dir.with_extension("db");
    let Ok(mut file) = std::fs::File::open(&old) else {
        return;
    };
    let mut header = [0u8; 72];
    if std::io::Read::read_exact(&mut file, &mut header).is_err()
        || header[68..72] != [0x6d, 0x74, 0x61, 0x69]
    {
        return;
    }
    tracing::info!(
        "search index: {} is the index of an earlier memtape (one file for every tenant); removing it, shards per tenant in {} are built from the tape",
        old.display(),
        dir.display()
    );
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let mut path = old.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(path));
    }
}

impl Index {
    /// Opens the index in the directory `dir`, creating it if missing. `embedder` must be
    /// the one the index was built with (or `None` for a BM25-only index); otherwise this
    /// fails with [`Error::EmbedderChanged`] and the index must be rebuilt
    /// ([`Index::rebuild_from`], `memtape reindex`).
    pub fn open(
        dir: &Path,
        embedder: Option<Arc<dyn Embedder>>,
        config: IndexConfig,
    ) -> Result<Index> {
        Index::open_as(dir, embedder, config, false)
    }

    /// Opens the index in `dir` to be rebuilt: whatever model it was built with, the next
    /// [`Index::catch_up`] rebuilds every tenant's shard from the tape, each in one
    /// transaction, so other processes keep searching a shard's old contents until its new
    /// ones are committed.
    pub fn rebuild(
        dir: &Path,
        embedder: Option<Arc<dyn Embedder>>,
        config: IndexConfig,
    ) -> Result<Index> {
        Index::open_as(dir, embedder, config, true)
    }

    /// [`Index::rebuild`] followed by the catch-up that does the work, reporting progress.
    /// Returns the index and how many documents it holds.
    pub fn rebuild_from(
        dir: &Path,
        store: &dyn Store,
        embedder: Option<Arc<dyn Embedder>>,
        config: IndexConfig,
        progress: Progress<'_>,
    ) -> Result<(Index, usize)> {
        let index = Index::rebuild(dir, embedder, config)?;
        let added = index.catch_up_with(store, progress)?;
        Ok((index, added))
    }

    fn open_as(
        dir: &Path,
        embedder: Option<Arc<dyn Embedder>>,
        config: IndexConfig,
        rebuild: bool,
    ) -> Result<Index> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Dir {
            path: dir.to_owned(),
            source,
        })?;
        remove_single_file_index(dir);
        let meta = open_meta(dir)?;
        let given = embedder
            .as_ref()
            .map_or(NO_EMBEDDER.to_owned(), |e| e.id().to_owned());
        match get_meta(&meta, "embedder")? {
            Some(built) if built != given && !rebuild => {
                return Err(Error::EmbedderChanged {
                    path: dir.to_owned(),
                    built,
                    given,
                });
            }
            Some(_) => {}
            // A new index; a rebuilt one records its model once the rebuild is done.
            None => set_meta(&meta, "embedder", &given)?,
        }
        // A rebuild follows the tape from its start.
        let routed = get_meta(&meta, "routed")?
            .and_then(|v| v.parse().ok())
            .map(EntryId)
            .filter(|_| !rebuild);
        Ok(Index {
            dir: dir.to_owned(),
            spec: ShardSpec {
                embedder,
                config,
                queries: Arc::new(Mutex::new(QueryVectors::default())),
                graphs: Arc::default(),
            },
            meta: Mutex::new(meta),
            loaded: Mutex::new(Loaded::default()),
            wanted: Mutex::new(HashSet::new()),
            routed: Mutex::new(routed),
            rebuild: Mutex::new(rebuild),
            failure: Mutex::new(None),
            memory: AtomicU64::new(DEFAULT_MEMORY),
            max_shards: AtomicUsize::new(DEFAULT_MAX_SHARDS),
            lazy: AtomicBool::new(false),
            vectors_behind: AtomicBool::new(false),
            loads: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            next_embed: AtomicUsize::new(0),
            cold_wait: Mutex::new(None),
            building: Mutex::new(HashSet::new()),
        })
    }

    /// Where a data directory keeps its search index: the folder `index`.
    pub fn dir_in(data_dir: &Path) -> PathBuf {
        data_dir.join("index")
    }

    /// Whether a data directory has a search index: its folder, or the one file of the
    /// format before shards (which opening the index there replaces).
    pub fn exists_in(data_dir: &Path) -> bool {
        Index::dir_in(data_dir).is_dir() || data_dir.join("index.db").is_file()
    }

    /// The index's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The embedder, if the index has vectors.
    pub fn embedder(&self) -> Option<Arc<dyn Embedder>> {
        self.spec.embedder.clone()
    }

    /// The embedder's id, or "none".
    pub fn embedder_id(&self) -> &str {
        self.spec.embedder.as_ref().map_or(NO_EMBEDDER, |e| e.id())
    }

    /// The settings.
    pub fn config(&self) -> IndexConfig {
        self.spec.config
    }

    /// How much memory the loaded shards may take (estimated; default 1 GiB): past it, the
    /// least recently used are evicted (their files stay, and load again when needed). The
    /// shard in use is never evicted, so one tenant larger than the budget still loads.
    pub fn set_memory(&self, bytes: u64) {
        self.memory.store(bytes, Ordering::SeqCst);
    }

    /// The memory budget of the loaded shards ([`Index::set_memory`]).
    pub fn memory_budget(&self) -> u64 {
        self.memory.load(Ordering::SeqCst)
    }

    /// Sets how many candidates a graph search asks for, in every shard from the next
    /// search on, in place of the default rule ([`IndexConfig::ann_candidates`](crate::IndexConfig::ann_candidates),
    /// or one per 2,500 rows of a larger shard): more buys recall with latency. 0 goes back
    /// to the default rule.
    pub fn set_ann_candidates(&self, candidates: usize) {
        self.spec
            .graphs
            .candidates
            .store(candidates, Ordering::Relaxed);
    }

    /// Asks the kernel now for transparent huge pages for the process's large memory (the
    /// loaded graphs and mirrors), making what is there into huge pages at once: what
    /// [`IndexConfig::huge_pages`](crate::IndexConfig::huge_pages) does after a graph is
    /// read from its file, for an index opened without it (seconds for gigabytes). Returns
    /// how many mappings were asked for (0 where the system has no huge pages).
    pub fn use_huge_pages(&self) -> usize {
        super::huge::advise(true)
    }

    /// How many shards may be loaded at once (default 1,024; each holds a few open files).
    pub fn set_max_shards(&self, shards: usize) {
        self.max_shards.store(shards.max(1), Ordering::SeqCst);
    }

    /// Whether only the loaded shards follow the tape (`true`, what a server does: a shard
    /// catches up when a search or write first needs it, so a server builds only the
    /// shards of the tenants it serves) or every tenant's does (`false`, the default: a
    /// catch-up leaves every shard up to date). Lazily, a new index starts following at
    /// the tape's end.
    pub fn set_lazy(&self, lazy: bool) {
        self.lazy.store(lazy, Ordering::SeqCst);
    }

    /// Bounds how long a search ([`Index::search_fresh`]) waits for its tenant's shard to
    /// catch up with the tape: a cold shard (a tenant this process has not served yet, on
    /// a server that just joined) may need millions of entries read. Past `wait` the
    /// search answers from what the shard holds so far, saying so, and the following
    /// catch-up steps ([`Index::catch_up_step`]) build the shard on. `None` (the default)
    /// waits for the whole catch-up.
    pub fn set_cold_wait(&self, wait: Option<std::time::Duration>) {
        *lock(&self.cold_wait) = wait;
    }

    /// Whether a shard a search left behind the tape ([`Index::set_cold_wait`]) is still
    /// being built: catch-up steps are due even when the tape has not grown.
    pub fn is_building(&self) -> bool {
        !lock(&self.building).is_empty()
    }

    /// Marks `tenant` as written by this process: a lazy index ([`Index::set_lazy`]) brings
    /// its shard up to date at the next catch-up (loading it if needed), as it does the
    /// loaded ones. Without laziness every tenant's shard follows anyway.
    pub fn want(&self, tenant: &str) {
        if self.lazy.load(Ordering::SeqCst) {
            let mut wanted = lock(&self.wanted);
            if !wanted.contains(tenant) {
                wanted.insert(tenant.to_owned());
            }
        }
    }

    /// The last tape id the index covers: every entry up to it is in the shards this
    /// index keeps up to date (every tenant's, unless lazy).
    pub fn covered(&self) -> EntryId {
        lock(&self.routed).unwrap_or(EntryId(0))
    }

    /// The last tape id whose documents have their vectors in every loaded shard: at most
    /// [`Index::covered`], less while a shard's vectors are behind
    /// ([`Index::set_vectors_behind`]).
    pub fn embedded(&self) -> EntryId {
        let covered = self.covered();
        self.loaded_shards()
            .iter()
            .filter(|s| s.embedded() < s.covered())
            .map(|s| s.embedded())
            .min()
            .map_or(covered, |e| e.min(covered))
    }

    /// Whether a loaded shard has documents still waiting for their vectors.
    pub fn vectors_are_behind(&self) -> bool {
        self.spec.embedder.is_some()
            && self
                .loaded_shards()
                .iter()
                .any(|s| s.embedded() < s.covered())
    }

    /// Whether catch-ups index text only and leave vectors to [`Index::embed_step`]
    /// (`true`), or embed as they go (`false`, the default); see the shard's own
    /// documentation in ARCHITECTURE.md ("Retrieval").
    pub fn set_vectors_behind(&self, behind: bool) {
        self.vectors_behind.store(behind, Ordering::SeqCst);
        for shard in self.loaded_shards() {
            shard.set_vectors_behind(behind);
        }
    }

    /// Copies each loaded shard's write-ahead log into its file and truncates the log:
    /// `false` when a reader in another process held one back.
    pub fn truncate_wal(&self) -> Result<bool> {
        let mut all = true;
        for shard in self.loaded_shards() {
            all &= shard.truncate_wal()?;
        }
        Ok(all)
    }

    /// How many documents the loaded shards hold.
    pub fn len(&self) -> usize {
        self.loaded_shards().iter().map(|s| s.len()).sum()
    }

    /// Whether the loaded shards hold no document.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The error of the last catch-up that failed since this index was opened (including
    /// those run by an engine's write hook, which never fail the append itself), if any.
    pub fn last_failure(&self) -> Option<String> {
        lock(&self.failure)
            .clone()
            .or_else(|| self.loaded_shards().iter().find_map(|s| s.last_failure()))
    }

    /// Where the shard of `tenant` stands, as its file says (loaded if it is not, without
    /// catching up with the tape); `None` when the tenant has no shard.
    pub fn shard_status(&self, tenant: &str) -> Result<Option<ShardStatus>> {
        let Some(shard) = self.shard_for(None, tenant)? else {
            return Ok(None);
        };
        Ok(Some(ShardStatus {
            covered: shard.covered(),
            embedded: shard.embedded(),
            documents: shard.len(),
        }))
    }

    /// The shards in memory and what they have done since the index was opened.
    pub fn shard_stats(&self) -> ShardStats {
        let shards = self.loaded_shards();
        ShardStats {
            loaded: shards.len(),
            bytes: shards.iter().map(|s| s.memory()).sum(),
            loads: self.loads.load(Ordering::SeqCst),
            evictions: self.evictions.load(Ordering::SeqCst),
            graph_searches: self.spec.graphs.searches.load(Ordering::SeqCst),
            graph_refused: self.spec.graphs.refused.load(Ordering::SeqCst),
        }
    }

    /// The shard file of `tenant` (whether or not it exists yet): named by a hash of the tenant (any tenant name is a
    /// safe, fixed-length file name, and names that differ only in case stay apart on
    /// filesystems that ignore case), under one of 256 folders; the file records its
    /// tenant, and a file of another tenant is refused.
    pub fn shard_path(&self, tenant: &str) -> PathBuf {
        let hash = Sha256::digest(tenant.as_bytes());
        let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(&hex[..2]).join(format!("{hex}.db"))
    }

    fn loaded_shards(&self) -> Vec<Arc<Shard>> {
        let slots: Vec<Arc<Slot>> = lock(&self.loaded).slots.values().cloned().collect();
        slots
            .iter()
            .filter_map(|slot| slot.shard.try_lock().ok().and_then(|s| s.clone()))
            .collect()
    }

    /// The loaded shard of `tenant`, if it is.
    fn loaded(&self, tenant: &str) -> Option<Arc<Shard>> {
        let slot = lock(&self.loaded).slots.get(tenant).cloned()?;
        lock(&slot.shard).clone()
    }

    /// The shard of `tenant`, loaded if it is not (`rebuild`: opened to be rebuilt, in
    /// place of a loaded one).
    fn shard(&self, tenant: &str, rebuild: bool) -> Result<Arc<Shard>> {
        let slot = {
            let mut loaded = lock(&self.loaded);
            loaded.clock += 1;
            let clock = loaded.clock;
            let slot = loaded.slots.entry(tenant.to_owned()).or_default().clone();
            slot.used.store(clock, Ordering::SeqCst);
            slot
        };
        let mut held = lock(&slot.shard);
        if !rebuild && let Some(shard) = &*held {
            return Ok(shard.clone());
        }
        let path = self.shard_path(tenant);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Dir {
                path: parent.to_owned(),
                source,
            })?;
        }
        // The shard's documents and graph come into memory as it opens, before it can be
        // counted among the loaded: it says how large it will be first, and room is made.
        let room = |bytes: u64| self.evict(tenant, bytes);
        let shard = Arc::new(Shard::open(&path, tenant, &self.spec, rebuild, &room)?);
        shard.set_vectors_behind(self.vectors_behind.load(Ordering::SeqCst));
        *held = Some(shard.clone());
        drop(held);
        self.loads.fetch_add(1, Ordering::SeqCst);
        self.evict(tenant, 0);
        Ok(shard)
    }

    /// Evicts the least recently used shards (never `keep`, nor one being opened) while
    /// the loaded ones and `incoming` bytes more are over the memory budget, or the loaded
    /// ones over the count. An evicted shard's memory goes when the last search using it
    /// ends.
    fn evict(&self, keep: &str, incoming: u64) {
        let memory = self.memory.load(Ordering::SeqCst);
        let max = self.max_shards.load(Ordering::SeqCst);
        let mut loaded = lock(&self.loaded);
        let mut sizes: Vec<(u64, String, u64)> = loaded
            .slots
            .iter()
            .filter_map(|(tenant, slot)| {
                let shard = slot.shard.try_lock().ok()?.clone()?;
                Some((
                    slot.used.load(Ordering::SeqCst),
                    tenant.clone(),
                    shard.memory(),
                ))
            })
            .collect();
        let mut total: u64 = sizes.iter().map(|s| s.2).sum();
        let mut count = sizes.len();
        sizes.sort();
        let mut evicted = Vec::new();
        for (_, tenant, bytes) in sizes {
            if total.saturating_add(incoming) <= memory && count <= max {
                break;
            }
            if tenant == keep {
                continue;
            }
            evicted.extend(loaded.slots.remove(&tenant));
            total -= bytes;
            count -= 1;
            self.evictions.fetch_add(1, Ordering::SeqCst);
        }
        // A shard dropped here commits what its inverted index's writer holds: not while
        // every other shard's lookup waits for the lock.
        drop(loaded);
        drop(evicted);
    }

    /// Whether `tenant` has a shard file (loaded or not).
    fn has_file(&self, tenant: &str) -> bool {
        self.shard_path(tenant).exists()
    }

    /// The shard a search of `request`'s tenant runs on: loaded (and, with `store`, first
    /// created if the tenant has entries), or `None` when the tenant has neither a file
    /// nor entries (a search of it finds nothing, and creates no file).
    fn shard_for(&self, store: Option<&dyn Store>, tenant: &str) -> Result<Option<Arc<Shard>>> {
        if let Some(shard) = self.loaded(tenant) {
            return Ok(Some(shard));
        }
        if !self.has_file(tenant) {
            let has_entries = match store {
                Some(store) => !store.entries_after_in(tenant, EntryId(0), 1)?.is_empty(),
                None => false,
            };
            if !has_entries {
                return Ok(None);
            }
        }
        self.shard(tenant, false).map(Some)
    }

    /// What a search of a tenant with nothing indexed answers: nothing, after the checks
    /// every search makes.
    fn search_nothing(&self, request: &SearchRequest) -> Result<Vec<Hit>> {
        request.check()?;
        if request.mode != crate::Mode::Bm25 && self.spec.embedder.is_none() {
            return Err(Error::NoEmbedder(request.mode.as_str()));
        }
        Ok(Vec::new())
    }

    /// Runs a search on what the index holds (its tenant's shard as it is on disk, without
    /// catching up with the tape). Use [`Index::search_caught_up`] to see every append.
    pub fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>> {
        match self.shard_for(None, &request.filter.tenant)? {
            Some(shard) => shard.search(request),
            None => self.search_nothing(request),
        }
    }

    /// Catches the tenant's shard up with `store` (loading it if needed), then runs a
    /// search. A hybrid search embeds its query while the shard catches up.
    pub fn search_caught_up(&self, store: &dyn Store, request: &SearchRequest) -> Result<Vec<Hit>> {
        match self.shard_for(Some(store), &request.filter.tenant)? {
            Some(shard) => shard.search_caught_up(store, request),
            None => self.search_nothing(request),
        }
    }

    /// [`Index::search_caught_up`] that answers from what the shard holds when it cannot
    /// catch up (its file cannot be written: a full or read-only disk), saying why: the
    /// second value is `None` when the shard covered the whole tape.
    pub fn search_fresh(
        &self,
        store: &dyn Store,
        request: &SearchRequest,
    ) -> Result<(Vec<Hit>, Option<String>)> {
        let wait = *lock(&self.cold_wait);
        match self.shard_for(Some(store), &request.filter.tenant) {
            Ok(Some(shard)) if wait.is_some() => {
                let deadline = std::time::Instant::now() + wait.unwrap_or_default();
                let tenant = &request.filter.tenant;
                match shard.catch_up_until(store, deadline) {
                    Ok(None) => {
                        lock(&self.building).remove(tenant);
                        shard.search_fresh(store, request)
                    }
                    Ok(Some((covered, target))) => {
                        lock(&self.building).insert(tenant.clone());
                        let behind = format!(
                            "this tenant's index is being built: it has read the tape up to entry {} of {}, and searches see the rest as it goes on",
                            covered.0, target.0
                        );
                        Ok((shard.search(request)?, Some(behind)))
                    }
                    Err(e) => Ok((shard.search(request)?, Some(e.to_string()))),
                }
            }
            Ok(Some(shard)) => shard.search_fresh(store, request),
            Ok(None) => Ok((self.search_nothing(request)?, None)),
            // A shard that cannot be opened or made (a full or read-only disk) holds
            // nothing to answer from: the answer is empty, and says why.
            Err(e) => Ok((self.search_nothing(request)?, Some(e.to_string()))),
        }
    }

    /// Brings the approximate-neighbour graph of every loaded shard large enough for one
    /// up to its last vector and waits for it (graphs are built in the background, and
    /// searches scan what they have not reached): for a benchmark timing searches on
    /// built graphs. Returns the rows the graphs hold in all.
    pub fn settle_graphs(&self) -> usize {
        self.loaded_shards().iter().map(|s| s.settle_ann()).sum()
    }

    /// The cosine floor of the model's vector matches (0 without a model).
    pub fn min_similarity(&self) -> f32 {
        self.spec
            .embedder
            .as_ref()
            .map_or(0.0, |e| e.min_similarity())
    }

    /// Brings the index up to date with the tape: every tenant's shard (lazily, every
    /// loaded shard, and every shard an erasure reached). Returns how many documents were
    /// added.
    pub fn catch_up(&self, store: &dyn Store) -> Result<usize> {
        self.catch_up_with(store, &mut |_, _| {})
    }

    /// [`Index::catch_up`], calling `progress(done, total)` with the tape entries read so
    /// far and to read in all.
    pub fn catch_up_with(&self, store: &dyn Store, progress: Progress<'_>) -> Result<usize> {
        self.recorded(self.route(store, usize::MAX, &[], progress))
    }

    /// [`Index::catch_up`] after this process appended `written`: when they are the
    /// tape's next entries after what the index followed, they are taken as they are
    /// instead of read back from the store.
    pub fn catch_up_written(&self, store: &dyn Store, written: &[Entry]) -> Result<usize> {
        self.recorded(self.route(store, usize::MAX, written, &mut |_, _| {}))
    }

    /// One step of a catch-up, for a background indexer that must be able to stop between
    /// steps: follows at most one batch of the tape ([`Index::covered`] then tells how far
    /// it got). Returns how many documents were added.
    pub fn catch_up_step(&self, store: &dyn Store) -> Result<usize> {
        let added = self.recorded(self.route(store, 1, &[], &mut |_, _| {}))?;
        Ok(added + self.recorded(self.build_step(store))?)
    }

    /// A step of building the shards searches left behind ([`Index::set_cold_wait`]): a
    /// few batches of each, until it reaches the tape's end.
    fn build_step(&self, store: &dyn Store) -> Result<usize> {
        let building: Vec<String> = lock(&self.building).iter().cloned().collect();
        let mut added = 0;
        for tenant in building {
            let Some(shard) = self.loaded(&tenant) else {
                // Evicted meanwhile: its next search starts over from its file.
                lock(&self.building).remove(&tenant);
                continue;
            };
            let before = shard.len();
            let deadline = std::time::Instant::now() + BUILD_STEP;
            if shard.catch_up_until(store, deadline)?.is_none() {
                lock(&self.building).remove(&tenant);
            }
            added += shard.len().saturating_sub(before);
        }
        Ok(added)
    }

    fn recorded<T>(&self, out: Result<T>) -> Result<T> {
        if let Err(e) = &out {
            tracing::warn!("search index {}: catch-up failed: {e}", self.dir.display());
            *lock(&self.failure) = Some(e.to_string());
        }
        out
    }

    fn set_routed(&self, to: EntryId) -> Result<()> {
        let mut routed = lock(&self.routed);
        if routed.is_some_and(|r| r >= to) {
            return Ok(());
        }
        let meta = lock(&self.meta);
        let tx = rusqlite::Transaction::new_unchecked(&meta, TransactionBehavior::Immediate)?;
        let stored = get_meta(&tx, "routed")?.and_then(|v| v.parse::<u64>().ok());
        if stored.is_none_or(|s| s < to.0) {
            set_meta(&tx, "routed", &to.0.to_string())?;
        }
        tx.commit()?;
        *routed = Some(to);
        Ok(())
    }

    /// Checks the tape the index was built from: the shards of another tape (the store was
    /// replaced or reset) are thrown away, never read as this one's. Returns the tape's id.
    fn bind_tape(&self, store: &dyn Store) -> Result<String> {
        let tape = store.tape_id()?;
        let meta = lock(&self.meta);
        match get_meta(&meta, "tape")? {
            Some(bound) if bound == tape => return Ok(tape),
            Some(bound) => {
                tracing::warn!(
                    "search index {}: built from another tape ({bound}); its shards are rebuilt from this one",
                    self.dir.display()
                );
                lock(&self.loaded).slots.clear();
                *lock(&self.routed) = None;
                meta.execute("DELETE FROM meta WHERE key = 'routed'", [])?;
                for entry in std::fs::read_dir(&self.dir)
                    .map_err(|source| Error::Dir {
                        path: self.dir.clone(),
                        source,
                    })?
                    .flatten()
                {
                    let path = entry.path();
                    if path.is_dir() && entry.file_name().len() == 2 {
                        std::fs::remove_dir_all(&path)
                            .map_err(|source| Error::Remove { path, source })?;
                    }
                }
            }
            None => {}
        }
        set_meta(&meta, "tape", &tape)?;
        Ok(tape)
    }

    /// Follows the tape after the routed mark, at most `max_pages` batches.
    fn route(
        &self,
        store: &dyn Store,
        max_pages: usize,
        written: &[Entry],
        progress: Progress<'_>,
    ) -> Result<usize> {
        let target = store.last_id()?;
        let routed = *lock(&self.routed);
        if routed.is_some_and(|r| r >= target) && !*lock(&self.rebuild) {
            // Embedding as it goes, a shard whose vectors are behind (left so by another
            // process) fills them in.
            let mut added = 0;
            if !self.vectors_behind.load(Ordering::SeqCst) && self.spec.embedder.is_some() {
                for shard in self.loaded_shards() {
                    if shard.embedded() < shard.covered() {
                        added += shard.catch_up(store)?;
                    }
                }
            }
            return Ok(added);
        }
        let tape = self.bind_tape(store)?;
        if std::mem::take(&mut *lock(&self.rebuild)) {
            return self.rebuild_all(store, target, progress);
        }
        let lazy = self.lazy.load(Ordering::SeqCst);
        let Some(mut after) = *lock(&self.routed) else {
            if lazy {
                // Nothing of the past is built ahead: shards catch up when loaded.
                self.set_routed(target)?;
                return Ok(0);
            }
            let added = self.each_tenant(store, target, false, progress)?;
            self.set_routed(target)?;
            return Ok(added);
        };
        let mut added = 0;
        let total = target.0.saturating_sub(after.0) as usize;
        let start = after;
        let wanted = lock(&self.wanted).clone();
        // Whether the last page read reached the tape's end (it was not full).
        let mut ended = false;
        // The entries this process just appended, if they follow the routed mark with no
        // id missing (no other entry can lie among them): the first page.
        let mut given = contiguous_after(written, after, ROUTE_BATCH);
        for _ in 0..max_pages {
            let page = match given.take() {
                Some(given) => {
                    ended = given.last().is_some_and(|e| e.id >= target);
                    given.to_vec()
                }
                None => {
                    let page = store.entries_after(after, ROUTE_BATCH)?;
                    ended = page.len() < ROUTE_BATCH;
                    page
                }
            };
            let Some(last) = page.last().map(|e| e.id) else {
                break;
            };
            // The tenants whose erasure receipts are on this page.
            let erasing: HashSet<&str> = page
                .iter()
                .filter(|e| super::catch_up::is_erasure_receipt(e))
                .map(|e| e.scope.tenant())
                .collect();
            let mut tenants: Vec<&str> = Vec::new();
            let mut seen = HashSet::new();
            for entry in &page {
                let tenant = entry.scope.tenant();
                if !seen.insert(tenant) {
                    continue;
                }
                let follows = !lazy
                    || wanted.contains(tenant)
                    || self.loaded(tenant).is_some()
                    || (erasing.contains(tenant) && self.has_file(tenant));
                if follows {
                    tenants.push(tenant);
                }
            }
            // The page is made into documents once, its vectors embedded in one call (or
            // read from the store) and kept there: each shard below takes its part as it
            // is, and a shard not loaded now finds the vectors in the store when it is
            // (lazily, the vectors of every tenant are made as the tape grows; the shards
            // only when needed).
            let embedder = self
                .spec
                .embedder
                .as_deref()
                .filter(|_| !self.vectors_behind.load(Ordering::SeqCst));
            let followed: HashSet<&str> = tenants.iter().copied().collect();
            let mut parts = super::catch_up::prepare_page(
                embedder,
                self.spec.config,
                &self.dir,
                store,
                &page,
                |tenant| followed.contains(tenant),
            )?;
            let span = PageSpan { start: after, last };
            for tenant in tenants {
                let part = parts.remove(tenant).unwrap_or_default();
                added += self
                    .shard(tenant, false)?
                    .take_part(store, &tape, &span, part)?;
            }
            after = last;
            self.set_routed(after)?;
            let done = (after.0 - start.0) as usize;
            progress(done.min(total), total.max(done));
        }
        if after >= target || ended {
            self.set_routed(target.max(after))?;
            // Their shards are loaded now, and follow as loaded ones do.
            lock(&self.wanted).retain(|t| !wanted.contains(t));
        }
        Ok(added)
    }

    /// Brings the shard of every tenant on the tape up to date (`rebuild`: rebuilds it),
    /// one after another, reporting progress in tape entries: each tenant's share of the
    /// tape's `target` entries, scaled by how far its own catch-up got.
    fn each_tenant(
        &self,
        store: &dyn Store,
        target: EntryId,
        rebuild: bool,
        progress: Progress<'_>,
    ) -> Result<usize> {
        let tenants = store.tenants()?;
        let n = tenants.len().max(1) as u64;
        let total = target.0;
        let mut added = 0;
        for (i, tenant) in tenants.iter().enumerate() {
            let before = i as u64 * total / n;
            let share = |done: usize, of: usize| -> usize {
                let part = (done as u64).min(of as u64) * total / (of as u64).max(1) / n;
                (before + part) as usize
            };
            let shard = self.shard(tenant, rebuild)?;
            added += shard.catch_up_with(store, &mut |done, of| {
                progress(share(done, of), total as usize)
            })?;
        }
        progress(total as usize, total as usize);
        Ok(added)
    }

    /// Rebuilds the shard of every tenant on the tape, one after another.
    fn rebuild_all(
        &self,
        store: &dyn Store,
        target: EntryId,
        progress: Progress<'_>,
    ) -> Result<usize> {
        let added = self.each_tenant(store, target, true, progress)?;
        {
            let meta = lock(&self.meta);
            set_meta(&meta, "embedder", self.embedder_id())?;
            meta.execute("DELETE FROM meta WHERE key = 'routed'", [])?;
        }
        *lock(&self.routed) = None;
        self.set_routed(target)?;
        Ok(added)
    }

    /// One batch of the pass that embeds what catch-ups left behind
    /// ([`Index::set_vectors_behind`]), in the next loaded shard whose vectors are behind.
    /// Returns whether vectors are still behind.
    pub fn embed_step(&self, store: &dyn Store) -> Result<bool> {
        let Some(shard) = self.behind_shard() else {
            return Ok(false);
        };
        shard.embed_step(store)?;
        Ok(self.vectors_are_behind())
    }

    /// The first half of [`Index::embed_step`], for a thread that embeds at a low priority
    /// (see the shard's `embed_next`): `None` when no loaded shard's vectors are behind.
    pub fn embed_next(&self, store: &dyn Store, entries: usize) -> Result<Option<PendingVectors>> {
        for _ in 0..2 {
            let Some(shard) = self.behind_shard() else {
                return Ok(None);
            };
            if let Some(pending) = shard.embed_next(store, entries)? {
                return Ok(Some(pending));
            }
        }
        Ok(None)
    }

    /// The second half of [`Index::embed_step`]: stores a batch from
    /// [`Index::embed_next`] in its shard (dropped if that shard was evicted meanwhile:
    /// its vectors are in the store, and it reads them when it loads again). Returns
    /// whether vectors are still behind.
    pub fn store_embedded(&self, pending: PendingVectors) -> Result<bool> {
        if let Some(shard) = self.loaded(pending.tenant()) {
            shard.store_embedded(pending)?;
        }
        Ok(self.vectors_are_behind())
    }

    /// A loaded shard whose vectors are behind, taken in turn.
    fn behind_shard(&self) -> Option<Arc<Shard>> {
        self.spec.embedder.as_ref()?;
        let behind: Vec<Arc<Shard>> = self
            .loaded_shards()
            .into_iter()
            .filter(|s| s.embedded() < s.covered())
            .collect();
        if behind.is_empty() {
            return None;
        }
        let turn = self.next_embed.fetch_add(1, Ordering::SeqCst);
        behind.get(turn % behind.len()).cloned()
    }
}

/// The first `max` of `entries` if their ids run on from `after` with none missing (they
/// are then the tape's next entries: no other can lie among them); `None` otherwise, or
/// when there are none.
fn contiguous_after(entries: &[Entry], after: EntryId, max: usize) -> Option<&[Entry]> {
    let head = &entries[..entries.len().min(max)];
    let dense = head
        .iter()
        .enumerate()
        .all(|(i, e)| e.id.0.checked_sub(after.0) == Some(i as u64 + 1));
    (dense && !head.is_empty()).then_some(head)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::Utc;
    use memtape_core::{Message, NewEntry, Payload, Scope};
    use memtape_store::SqliteStore;

    use super::*;

    fn fill(store: &SqliteStore, tenant: &str, n: usize) {
        let scope = Scope::agent(tenant, "bot")
            .unwrap()
            .with_session("s")
            .unwrap();
        let entries = (0..n)
            .map(|i| {
                NewEntry::new(
                    scope.clone(),
                    Payload::Message(Message::user(format!("note {i} of {tenant}"))),
                    Utc::now(),
                )
            })
            .collect();
        store.append(entries).unwrap();
    }

    fn search(index: &Index, store: &SqliteStore, tenant: &str) {
        let request =
            SearchRequest::new("note", crate::SearchFilter::tenant(tenant)).mode(crate::Mode::Bm25);
        assert!(!index.search_caught_up(store, &request).unwrap().is_empty());
    }

    fn is_loaded(index: &Index, tenant: &str) -> bool {
        index.loaded(tenant).is_some()
    }

    fn note_hits(index: &Index, store: &SqliteStore, text: &str) -> Vec<u64> {
        let request =
            SearchRequest::new(text, crate::SearchFilter::tenant("a")).mode(crate::Mode::Bm25);
        let mut ids: Vec<u64> = index
            .search_caught_up(store, &request)
            .unwrap()
            .iter()
            .map(|h| h.id.0)
            .collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn only_entries_right_after_the_mark_with_no_id_missing_are_taken_as_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(dir.path()).unwrap();
        fill(&store, "a", 10);
        let all = store.entries_after(EntryId(0), 10).unwrap();
        let ids = |page: Option<&[Entry]>| page.map(|p| p.iter().map(|e| e.id.0).collect());
        let got: Option<Vec<u64>> = ids(contiguous_after(&all, EntryId(0), 1024));
        assert_eq!(got, Some((1..=10).collect()));
        // At most `max`, from the first.
        let got: Option<Vec<u64>> = ids(contiguous_after(&all, EntryId(0), 4));
        assert_eq!(got, Some(vec![1, 2, 3, 4]));
        // Not right after the mark (behind it, or past it), one missing, none: not taken.
        assert!(contiguous_after(&all[2..], EntryId(0), 1024).is_none());
        assert!(contiguous_after(&all, EntryId(1), 1024).is_none());
        let gap: Vec<Entry> = all.iter().filter(|e| e.id.0 != 5).cloned().collect();
        assert!(contiguous_after(&gap, EntryId(0), 1024).is_none());
        assert!(contiguous_after(&gap, EntryId(0), 4).is_some());
        assert!(contiguous_after(&[], EntryId(0), 1024).is_none());
        assert!(contiguous_after(&all, EntryId(u64::MAX), 1024).is_none());
    }

    /// Entries handed to the catch-up are taken only when they are the tape's next ones;
    /// any others (another process's appends between, a part of a write) are read from
    /// the store, so the index ends with every entry either way.
    #[test]
    fn a_catch_up_given_the_entries_written_indexes_the_tape_whatever_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(dir.path()).unwrap();
        fill(&store, "a", 10);
        let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
        index.catch_up(&store).unwrap();
        assert_eq!(index.covered(), EntryId(10));
        // Handed only the last three of five new entries: the first two are read.
        fill(&store, "a", 5);
        let tail = store.entries_after(EntryId(12), 10).unwrap();
        index.catch_up_written(&store, &tail).unwrap();
        assert_eq!(index.covered(), EntryId(15));
        // Handed exactly the next ones, then more than a page of them.
        fill(&store, "a", 3);
        let next = store.entries_after(EntryId(15), 10).unwrap();
        index.catch_up_written(&store, &next).unwrap();
        assert_eq!(index.covered(), EntryId(18));
        fill(&store, "a", ROUTE_BATCH + 7);
        let many = store.entries_after(EntryId(18), ROUTE_BATCH + 7).unwrap();
        index.catch_up_written(&store, &many).unwrap();
        let last = 18 + ROUTE_BATCH as u64 + 7;
        assert_eq!(index.covered(), EntryId(last));
        // Every note is found, once, as an index that read them all finds them.
        let fresh = Index::open(&dir.path().join("fresh"), None, IndexConfig::plain()).unwrap();
        for text in ["note", "note 11 of a", "note 2 of a", "note 1030 of a"] {
            let (got, want) = (
                note_hits(&index, &store, text),
                note_hits(&fresh, &store, text),
            );
            assert!(!want.is_empty(), "{text}");
            assert_eq!(got, want, "{text}");
        }
        assert_eq!(index.len(), last as usize);
    }

    /// A loading shard says how large it will be before its documents come in
    /// ([`Shard::open`]'s `room`), and the index evicts for it then, least recently used
    /// first: the budget holds while it loads, the first time as every other.
    #[test]
    fn a_loading_shard_gets_its_room_before_its_documents_come_in() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(dir.path()).unwrap();
        for tenant in ["a", "b", "c"] {
            fill(&store, tenant, 2_000);
        }
        let index = Index::open(&dir.path().join("index"), None, IndexConfig::plain()).unwrap();
        index.set_lazy(true);
        search(&index, &store, "a");
        let size = index.shard_stats().bytes;
        // Room for two shards and a half: each is a large share of the budget.
        index.set_memory(size * 5 / 2);
        search(&index, &store, "b");
        assert!(is_loaded(&index, "a") && is_loaded(&index, "b"));
        // What c's load says it will hold, as the index is told it.
        index.evict("c", size);
        assert!(!is_loaded(&index, "a") && is_loaded(&index, "b"));
        // Nothing more goes while what is loaded and what comes fit.
        index.evict("c", size);
        assert!(is_loaded(&index, "b"));
        assert_eq!(index.shard_stats().evictions, 1);
        // Loading c, then a again, does that itself: each time the least recently used
        // goes, and two stay loaded.
        search(&index, &store, "c");
        assert!(is_loaded(&index, "b") && is_loaded(&index, "c"));
        search(&index, &store, "a");
        assert!(!is_loaded(&index, "b") && is_loaded(&index, "c") && is_loaded(&index, "a"));
        let stats = index.shard_stats();
        assert_eq!((stats.loaded, stats.evictions), (2, 2));
        assert!(stats.bytes <= index.memory_budget());
    }
}
