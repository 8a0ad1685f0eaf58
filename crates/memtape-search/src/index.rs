//! The search index: a projection of the tape kept in its own SQLite file (FTS5 for BM25,
//! vectors as blobs) and mirrored in memory for vector search and filters.
//!
//! The index records the tape it was built from and the last tape id it covers.
//! [`Shard::catch_up`] reads the tape after that id and indexes it in batches, committing
//! the documents and the new mark in one transaction; so after a crash the index is never
//! ahead of the tape and never silently behind it: the next catch-up continues where the
//! last commit stopped. Deleting the file loses nothing: the next catch-up reads the whole
//! tape again.
//!
//! The parts: [`file`] (the file, its identity and meta, reading it into memory),
//! [`catch_up`] (following the tape, across threads and processes), [`rank`] (queries,
//! fusion and the ranking boosts) and [`ann`] (the approximate nearest-neighbour graph of
//! large shards, kept beside the file).

mod ann;
mod bm25;
mod catch_up;
pub use catch_up::PendingVectors;
mod file;
mod huge;
mod inverted;
mod ivf;
mod rank;
mod shards;
pub use shards::{DEFAULT_MAX_SHARDS, DEFAULT_MEMORY, Index, ShardStats, ShardStatus};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use chrono::{DateTime, Utc};
use memtape_core::{EntryId, Kind, Role, Scope};
use rusqlite::{Connection, OpenFlags};

use crate::vectors::{Quantized, SpillAt, Vectors};
use crate::when;
use crate::{Embedder, Error, Fusion, SearchFilter};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The name recorded for an index without vectors.
const NO_EMBEDDER: &str = "none";

/// How many hits the one-bit scan keeps [`IndexConfig::oversample`] candidates each for,
/// whatever a request's limit: the vector list, and so every hit's fused and boosted score,
/// is then the same for every limit. (It once grew with the limit up to this, so that a
/// hit the scan missed for `limit=2` lost its vector share, and scored higher for
/// `limit=5`.)
const ONE_BIT_HITS: usize = 20;

/// Settings of the index.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexConfig {
    /// How hybrid search fuses its two lists.
    pub fusion: Fusion,
    /// How many candidates each retriever contributes to a search (at least the requested
    /// limit). A hit's score depends on the lists it is fused and boosted among, so it is
    /// the same for every limit up to this one; a longer limit looks deeper.
    pub candidates: usize,
    /// Up to this many vectors, vector search is exact; above it, one-bit codes pick
    /// candidates that are rescored exactly.
    pub exact_limit: usize,
    /// How many candidates per hit the one-bit scan keeps for rescoring, for 20 hits
    /// whatever the request's limit: which documents reach the vector list must not depend
    /// on the limit, or a hit's score would.
    pub oversample: usize,
    /// The BM25 weight of a message's context (the message before it in its scope)
    /// relative to its own text; 0 searches the message's own text only. BM25F: each field
    /// is normalised by its own length.
    pub context_weight: f32,
    /// From this many vectors on, a shard keeps an approximate nearest-neighbour graph
    /// (HNSW, 8-bit) beside its file, and vector searches whose filter admits enough of
    /// the shard take their candidates from it (rescored exactly), the rows after it
    /// being scanned; `usize::MAX` = never. Exact requests never use it.
    pub ann_min: usize,
    /// How many candidates a graph search returns for exact rescoring, at least (and at
    /// least four per hit of the search's depth, and one per 2,500 rows the graph covers,
    /// so that recall holds as a shard grows past a million); the graph's search looks
    /// that wide (HNSW's ef), so this trades latency for recall (measured in
    /// docs/scaling.md).
    pub ann_candidates: usize,
    /// Whether the graph is built and extended on a thread of its own (`true`), or by
    /// the catch-up itself before it returns (`false`: slower writes, for tests and
    /// benchmarks that need the graph complete).
    pub ann_background: bool,
    /// BM25's term-frequency saturation, k1 (more than 0).
    pub bm25_k1: f32,
    /// BM25's length normalisation, b (0 = none, 1 = full), for both fields.
    pub bm25_b: f32,
    /// Whether a message is embedded together with its context.
    pub embed_context: bool,
    /// How much of a hit's score flows to the messages just before and after it in its
    /// scope (0 = none): a turn next to a strong match is likely part of the same topic.
    pub neighbour_weight: f32,
    /// How much the strength of a hit's whole scope (the sum of its three best hits'
    /// scores) adds to each of its hits (0 = none): turns of a session that matches well
    /// as a whole rank above equally good turns of sessions that match only once.
    pub scope_weight: f32,
    /// When the query names a date ("on 7 July 2023", "in August 2023"; see
    /// [`crate::when::period`]): how much a hit inside that period gains (0 = dates in
    /// queries are plain words). Documents from that period are also searched on their
    /// own, so they become candidates even when other documents match the words better.
    pub time_weight: f32,
    /// When the query names a speaker (a message's name, such as "What did Caroline
    /// paint?"): how much that speaker's messages gain (0 = names are plain words).
    pub speaker_weight: f32,
    /// When the query asks when something happened ("When did …", "what year"): how much
    /// a hit whose text names a date, absolute or relative ("yesterday", "last week"),
    /// gains (0 = off).
    pub when_weight: f32,
    /// Knowledge updates: when two of the best hits say nearly the same thing (their
    /// vectors closer than halfway from the model's floor to 1) from the same speaker, how
    /// much the later one gains, or the earlier one when the query asks about the past
    /// ("before", "used to", "previously"; 0 = off).
    pub update_weight: f32,
    /// How much a message that opens its scope (a session's first message) gains (0 =
    /// off): a conversation's opening turn is where what is new gets said.
    pub opener_weight: f32,
    /// How much a message's length limits what it gains from a shorter neighbour (0 =
    /// not at all): a neighbour's share is scaled by (its length / the message's
    /// length)^this, at most 1. A long answer after a short turn that matches is mostly
    /// about other things; a short reply to it is about little else.
    pub neighbour_length: f32,
    /// From this many documents on, a shard keeps an inverted index (tantivy) beside its
    /// file, and a BM25 search whose filter admits the whole shard takes its candidates
    /// from it (block-max WAND, without scoring every match) and rescores them exactly
    /// with BM25F; smaller shards, and other searches, score every match through FTS5.
    /// 0 = every shard; `usize::MAX` = none.
    pub inverted_from: usize,
    /// How many candidates the inverted index hands BM25F to rescore (at least the
    /// request's depth): enough that the exact top documents are nearly always among
    /// them (measured in docs/benchmarks.md).
    pub inverted_candidates: usize,
    /// Whether a shard with a graph asks the kernel for transparent huge pages for the
    /// process's large anonymous memory (the graph's, the mirror's vectors): a graph walk
    /// reads at random from gigabytes, and 2 MiB pages spare it most TLB misses (vector
    /// search p50 10.6 → 7.7 ms at 1M rows, docs/scaling.md). Advice only: nothing
    /// happens where the kernel has none.
    pub huge_pages: bool,
    /// Whether a large shard's approximate index is inverted lists over 64-value 4-bit
    /// codes (about 40 bytes a row in memory; built by a k-means over a sample, then one
    /// nearest centroid per row; the default) rather than an HNSW graph (about 400 bytes
    /// a row, minutes to build): compared in docs/scaling.md, "Inverted lists" and
    /// "Fewer bytes a loaded row".
    pub ann_lists: bool,
    /// From this many vectors on, a shard keeps its 8-bit vectors (but for the newest few
    /// thousand) in a private file beside it instead of in memory, and reads back only the
    /// rows a search rescores: a 256-long vector's 256 bytes a row less in memory, for
    /// about 0.3 ms more per search at a million rows (docs/scaling.md, "Vectors on
    /// disk"); `usize::MAX` = never.
    pub vectors_on_disk: usize,
}

impl Default for IndexConfig {
    /// The best settings measured on both development files, LoCoMo dev and BEAM-100K
    /// (docs/benchmarks.md): adaptive fusion (BM25 at 0.6 before each list's weight is
    /// scaled by how decisive it is for the query), BM25F with the textbook k1, a length
    /// normalisation b of 0.9 and the previous message as a context field, neighbour spreading that a long message
    /// gains less from, a boost for hits in strongly matching sessions and for session
    /// openers, and time- and speaker-aware ranking.
    fn default() -> Self {
        IndexConfig {
            fusion: Fusion::Adaptive { bm25_weight: 0.6 },
            candidates: 100,
            exact_limit: 20_000,
            oversample: 100,
            ann_min: 100_000,
            ann_candidates: 2000,
            ann_background: true,
            context_weight: 0.2,
            bm25_k1: 1.2,
            bm25_b: 0.9,
            embed_context: false,
            neighbour_weight: 0.2,
            scope_weight: 0.2,
            time_weight: 0.5,
            speaker_weight: 0.8,
            when_weight: 0.1,
            update_weight: 0.0,
            opener_weight: 0.2,
            neighbour_length: 0.5,
            inverted_from: 100_000,
            inverted_candidates: 1000,
            huge_pages: true,
            ann_lists: true,
            vectors_on_disk: 100_000,
        }
    }
}

impl IndexConfig {
    /// Each retriever on its own terms: a document matches only by its own text, with no
    /// context, neighbours, session or opener boost, BM25 has the textbook k1 1.2 and b 0.75,
    /// and hybrid search is plain reciprocal rank fusion. Results are exactly the entries
    /// that match.
    pub fn plain() -> Self {
        IndexConfig {
            fusion: Fusion::Rrf {
                k: 60.0,
                bm25_weight: 0.5,
            },
            context_weight: 0.0,
            neighbour_weight: 0.0,
            scope_weight: 0.0,
            time_weight: 0.0,
            speaker_weight: 0.0,
            when_weight: 0.0,
            update_weight: 0.0,
            opener_weight: 0.0,
            neighbour_length: 0.0,
            bm25_k1: 1.2,
            bm25_b: 0.75,
            ..IndexConfig::default()
        }
    }

    /// The candidates a graph search of a shard of `rows` rows asks for by default (before
    /// the oversampling floor of four per hit): [`IndexConfig::ann_candidates`], or one
    /// per 2,500 rows, whichever is more.
    pub fn ann_candidates_for(&self, rows: usize) -> usize {
        self.ann_candidates.max(rows / ann::ROWS_PER_CANDIDATE)
    }
}

/// What the index keeps in memory about one document: 28 bytes (every loaded row has
/// one, so a large shard's resident memory is mostly rows like it).
#[derive(Clone, Copy, Debug)]
struct DocMeta {
    scope: u32,
    kind: Kind,
    role: Option<Role>,
    at: Nanos,
    /// The message's speaker, by its row in `Docs::speaker_rows`.
    speaker: MaybeRow,
    /// How many tokens its text and its context have (BM25F's field lengths).
    tokens: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<DocMeta>() == 28);
const _: () = assert!(std::mem::size_of::<[MaybeRow; 2]>() == 8);

/// A row number or none, in 4 bytes (`Option<u32>` takes 8): no shard holds
/// `u32::MAX` rows, since rows are numbered in a `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MaybeRow(u32);

impl MaybeRow {
    const NONE: MaybeRow = MaybeRow(u32::MAX);

    fn get(self) -> Option<u32> {
        (self != Self::NONE).then_some(self.0)
    }
}

impl From<Option<u32>> for MaybeRow {
    fn from(row: Option<u32>) -> Self {
        row.map_or(Self::NONE, MaybeRow)
    }
}

/// A time to the nanosecond (as the store keeps it) in two 4-byte halves, so [`DocMeta`]
/// keeps 4-byte alignment: 8 bytes where `DateTime<Utc>` takes 12. The store refuses
/// times outside the years 1677 to 2262, which are the ones nanoseconds in an `i64` hold;
/// any other time clamps to that range's ends.
#[derive(Clone, Copy, Debug)]
struct Nanos([u32; 2]);

impl Nanos {
    fn new(at: DateTime<Utc>) -> Self {
        let ns = at.timestamp_nanos_opt().unwrap_or(if at.timestamp() < 0 {
            i64::MIN
        } else {
            i64::MAX
        });
        let b = ns.to_le_bytes();
        Nanos([
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        ])
    }

    fn get(self) -> DateTime<Utc> {
        let [low, high] = self.0.map(u32::to_le_bytes);
        DateTime::from_timestamp_nanos(i64::from_le_bytes([
            low[0], low[1], low[2], low[3], high[0], high[1], high[2], high[3],
        ]))
    }
}

/// One document committed to the file, to be mirrored.
#[derive(Debug)]
struct AddedDoc {
    id: EntryId,
    meta: DocMeta,
    vector: Option<Quantized>,
    /// Its speaker's name (the mirror keeps a row number in `meta`).
    speaker: Option<String>,
    /// The period the dates in its text name.
    event: Option<when::Period>,
}

/// Scopes and documents committed to the file, to be mirrored in memory in one step.
#[derive(Debug, Default)]
struct Added {
    /// New scopes, numbered after the mirror's last one.
    scopes: Vec<Scope>,
    /// New documents in id order.
    docs: Vec<AddedDoc>,
    /// The covered mark after them.
    covered: EntryId,
    /// The embedded mark after them.
    embedded: EntryId,
    /// Vectors committed for documents the mirror holds without one, in id order
    /// (mirrored before `docs`).
    filled: Vec<(EntryId, Quantized)>,
}

impl Added {
    /// Appends `later`, which was committed after these.
    fn append(&mut self, later: Added) {
        self.scopes.extend(later.scopes);
        self.docs.extend(later.docs);
        self.covered = self.covered.max(later.covered);
        self.embedded = self.embedded.max(later.embedded);
        self.filled.extend(later.filled);
    }
}

/// The in-memory mirror of the index file.
#[derive(Debug)]
struct Docs {
    /// The build of the file this mirrors.
    build: String,
    /// Entry ids by row, ascending (documents are added in tape order).
    ids: Vec<u64>,
    meta: Vec<DocMeta>,
    scopes: Vec<Scope>,
    scope_rows: HashMap<Scope, u32>,
    /// The tenant of every scope while they all have the same one (`None` before the
    /// first), and whether two differ: a filter that names only a tenant then admits all
    /// the scopes or none, without a look at each (a tenant's shard holds many sessions).
    sole_tenant: Option<String>,
    mixed_tenants: bool,
    /// The rows of the speakers (names of messages that are not tool results) seen, and
    /// the rows of the speakers whose name holds each word.
    speaker_rows: HashMap<String, u32>,
    speaker_words: HashMap<String, Vec<u32>>,
    /// The scopes (by row) each speaker (by row) was heard in.
    speaker_scopes: Vec<HashSet<u32>>,
    /// The period the dates in a document's text name, by row (few documents have one).
    events: HashMap<u32, when::Period>,
    /// The vectors of the first rows: every document up to `embedded` has one, those
    /// after it (indexed with vectors to follow, [`Shard::set_vectors_behind`]) not yet.
    /// So a vector's row is its document's row, and vector search sees a prefix.
    vectors: Vectors,
    covered: EntryId,
    /// The last tape id whose document (if any) has its vector; at most `covered`.
    embedded: EntryId,
    /// For each row: the conversational rows just before and after it in its scope.
    neighbours: Vec<[MaybeRow; 2]>,
    /// The latest conversational row of each scope row.
    scope_tail: HashMap<u32, u32>,
    /// The tokens of every document's text and context, summed (for BM25F's average
    /// field lengths).
    field_tokens: [u64; 2],
}

/// Where a shard whose file is `path` keeps its vectors on disk, per `config` (`None`:
/// never).
fn spill_at(config: &IndexConfig, path: &Path) -> Option<SpillAt> {
    (config.vectors_on_disk != usize::MAX).then(|| SpillAt {
        dir: path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        from: config.vectors_on_disk,
    })
}

impl Docs {
    fn empty(dim: usize, build: String, spill: Option<SpillAt>) -> Docs {
        Docs {
            build,
            ids: Vec::new(),
            meta: Vec::new(),
            scopes: Vec::new(),
            scope_rows: HashMap::new(),
            sole_tenant: None,
            mixed_tenants: false,
            speaker_rows: HashMap::new(),
            speaker_words: HashMap::new(),
            speaker_scopes: Vec::new(),
            events: HashMap::new(),
            vectors: Vectors::spilling(dim, spill),
            covered: EntryId(0),
            embedded: EntryId(0),
            neighbours: Vec::new(),
            scope_tail: HashMap::new(),
            field_tokens: [0, 0],
        }
    }

    /// Makes room for `rows` more documents at once, so that a load of a known number
    /// grows no collection by doubling (each doubling copies, and leaves the allocator the
    /// freed smaller blocks).
    fn reserve_exact(&mut self, rows: usize, scopes: usize) {
        self.scopes.reserve_exact(scopes);
        self.ids.reserve_exact(rows);
        self.meta.reserve_exact(rows);
        self.neighbours.reserve_exact(rows);
        self.vectors.reserve_exact(rows);
    }

    /// About how many bytes the mirror holds: each document's id, metadata, neighbours
    /// and vector, the scopes and speakers, and a share for the maps that find them. As
    /// allocated, not as used: a mirror that grows holds up to twice its rows, and one
    /// reserved for a load ([`Docs::reserve_exact`]) counts its rows before they come.
    fn memory(&self) -> usize {
        let rows = self.ids.capacity() * std::mem::size_of::<u64>()
            + self.meta.capacity() * std::mem::size_of::<DocMeta>()
            + self.neighbours.capacity() * std::mem::size_of::<[MaybeRow; 2]>();
        let scopes = self.scopes.capacity() * 160;
        let speakers = self.speaker_rows.len() * 96;
        let events = self.events.len() * 48;
        rows + self.vectors.memory() + scopes + speakers + events
    }

    /// Mirrors what was committed: only ever called after the commit.
    fn extend(&mut self, added: Added) {
        // Vectors of rows already mirrored first, so new rows can bring their own.
        self.fill(added.filled, EntryId(0));
        for scope in added.scopes {
            match &self.sole_tenant {
                None if !self.mixed_tenants => self.sole_tenant = Some(scope.tenant().to_owned()),
                Some(t) if t != scope.tenant() => {
                    self.sole_tenant = None;
                    self.mixed_tenants = true;
                }
                _ => {}
            }
            self.scope_rows
                .insert(scope.clone(), self.scopes.len() as u32);
            self.scopes.push(scope);
        }
        for mut doc in added.docs {
            doc.meta.speaker = doc.speaker.map(|name| self.speaker_row(name)).into();
            if let Some(speaker) = doc.meta.speaker.get() {
                self.speaker_scopes[speaker as usize].insert(doc.meta.scope);
            }
            if let Some(event) = doc.event {
                self.events.insert(self.ids.len() as u32, event);
            }
            self.push(doc.id, doc.meta, doc.vector.as_ref());
        }
        self.covered = self.covered.max(added.covered);
        self.embedded = self.embedded.max(added.embedded);
    }

    /// Gives back the memory allocated beyond what the rows use: a load grows the mirror
    /// a chunk at a time, by doubling.
    fn shrink_to_fit(&mut self) {
        self.ids.shrink_to_fit();
        self.meta.shrink_to_fit();
        self.neighbours.shrink_to_fit();
        self.scopes.shrink_to_fit();
        self.vectors.shrink_to_fit();
    }

    /// Mirrors vectors committed for documents already mirrored without them: `vectors`
    /// in id order, each for the first row still without one.
    fn fill(&mut self, vectors: Vec<(EntryId, Quantized)>, embedded: EntryId) {
        for (id, v) in vectors {
            if self.ids.get(self.vectors.len()) == Some(&id.0) {
                self.vectors.push(&v);
            }
        }
        self.embedded = self.embedded.max(embedded);
    }

    /// Mirrors one committed document.
    fn push(&mut self, id: EntryId, meta: DocMeta, vector: Option<&Quantized>) {
        let row = self.ids.len() as u32;
        self.ids.push(id.0);
        let mut links = [MaybeRow::NONE; 2];
        if meta.kind.is_conversational()
            && let Some(prev) = self.scope_tail.insert(meta.scope, row)
        {
            links[0] = MaybeRow(prev);
            self.neighbours[prev as usize][1] = MaybeRow(row);
        }
        self.neighbours.push(links);
        for (total, n) in self.field_tokens.iter_mut().zip(meta.tokens) {
            *total += u64::from(n);
        }
        self.meta.push(meta);
        // Only while every row before has its vector: vectors stay a prefix of the rows.
        if let Some(v) = vector
            && self.vectors.len() == row as usize
        {
            self.vectors.push(v);
        }
    }

    /// The row of speaker `name`, added if new.
    fn speaker_row(&mut self, name: String) -> u32 {
        if let Some(row) = self.speaker_rows.get(&name) {
            return *row;
        }
        let row = self.speaker_rows.len() as u32;
        for word in crate::text::terms(&name) {
            if !crate::text::is_stop_word(&word) {
                self.speaker_words.entry(word).or_default().push(row);
            }
        }
        self.speaker_rows.insert(name, row);
        self.speaker_scopes.push(HashSet::new());
        row
    }

    /// Whether `word` (a lowercase term) is a word of the name of a speaker heard in a
    /// scope `filter` admits. Speakers heard only elsewhere do not count: what one user's
    /// conversations hold must not change another's searches.
    fn names_speaker(&self, word: &str, filter: &SearchFilter) -> bool {
        self.speaker_words.get(word).is_some_and(|speakers| {
            speakers.iter().any(|speaker| {
                self.speaker_scopes[*speaker as usize]
                    .iter()
                    .any(|scope| filter.admits_scope(&self.scopes[*scope as usize]))
            })
        })
    }

    /// The rows of `ids` (sorted, distinct), `None` for an id the mirror does not hold.
    fn rows_of(&self, ids: &[u64]) -> Vec<Option<usize>> {
        let mut from = 0;
        ids.iter()
            .map(|&id| match find_sorted(&self.ids, from, id) {
                Ok(row) => {
                    from = row + 1;
                    Some(row)
                }
                Err(at) => {
                    from = at;
                    None
                }
            })
            .collect()
    }

    /// Which scopes `filter` admits, by scope row.
    fn admitted_scopes(&self, filter: &SearchFilter) -> Vec<bool> {
        match self.admits_by_tenant(filter) {
            Some(all) => vec![all; self.scopes.len()],
            None => self.scopes.iter().map(|s| filter.admits_scope(s)).collect(),
        }
    }

    /// Whether `filter` admits every scope (`Some(true)`) or none (`Some(false)`), when
    /// its tenant alone decides that: it names no agent, user or session, and every
    /// scope has one tenant. `None` when each scope must be looked at.
    fn admits_by_tenant(&self, filter: &SearchFilter) -> Option<bool> {
        if self.mixed_tenants
            || filter.agent.is_some()
            || filter.user.is_some()
            || filter.session.is_some()
        {
            return None;
        }
        Some(
            self.sole_tenant
                .as_deref()
                .is_none_or(|t| t == filter.tenant),
        )
    }
}

/// Progress of a catch-up: `(done, total)` tape entries read so far of those to read.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// One tenant's part of the search index: its own file, BM25 statistics and vectors,
/// following only that tenant's entries ([`Store::entries_after_in`]). Cheap to share
/// between threads: searches run concurrently, catch-ups one at a time (and one at a time
/// across processes sharing the file).
pub(crate) struct Shard {
    path: PathBuf,
    /// The tenant whose entries it holds.
    tenant: String,
    embedder: Option<Arc<dyn Embedder>>,
    config: IndexConfig,
    writer: Mutex<Connection>,
    /// Read-only connections for BM25 queries, one per search running at once (opened as
    /// needed, kept for reuse), so searches do not wait for each other.
    readers: Mutex<Vec<Connection>>,
    /// Shared with the thread building the shard's graph.
    docs: Arc<RwLock<Docs>>,
    /// The approximate nearest-neighbour graph of a large shard ([`ann`]).
    ann: Arc<ann::AnnSlot>,
    /// Set by [`Shard::rebuild`]: the next catch-up rebuilds the file from the whole tape.
    rebuild: Mutex<bool>,
    /// The last failed catch-up, for operators (see [`Shard::last_failure`]).
    failure: Mutex<Option<String>>,
    /// Whether catch-ups leave embedding to [`Shard::embed_step`]
    /// ([`Shard::set_vectors_behind`]).
    vectors_behind: std::sync::atomic::AtomicBool,
    /// The tape the last successful catch-up found the file bound to ("" before one):
    /// while the store is still that tape and has nothing after [`Shard::covered`], a
    /// catch-up has nothing to do and returns without taking the write lock.
    tape: Mutex<String>,
    /// The vectors of recent queries, by tenant and text: a query's vector depends on its
    /// text only (each text runs alone through the model), so a repeated query skips the
    /// model. Shared by every shard of an index.
    query_vectors: Arc<Mutex<QueryVectors>>,
    /// What the graphs of the index's shards have answered, shared by every shard.
    graphs: Arc<ann::GraphCounts>,
    /// The shard's inverted index, once it has [`IndexConfig::inverted_from`] documents
    /// (opened when first needed).
    inverted: Mutex<Option<Arc<inverted::Inverted>>>,
    /// The shard state this process last brought the inverted index to (or found it at).
    inverted_mark: Mutex<Option<inverted::Mark>>,
}

/// How many query vectors [`Shard`] keeps.
const QUERY_VECTORS: usize = 1024;

/// A cached query: its tenant and its text.
type QueryKey = (String, String);

/// The vectors of the last [`QUERY_VECTORS`] distinct queries, oldest dropped first.
#[derive(Debug, Default)]
pub(crate) struct QueryVectors {
    vectors: HashMap<QueryKey, Vec<f32>>,
    order: std::collections::VecDeque<QueryKey>,
}

impl QueryVectors {
    fn get(&self, key: &QueryKey) -> Option<Vec<f32>> {
        self.vectors.get(key).cloned()
    }

    fn put(&mut self, key: QueryKey, vector: Vec<f32>) {
        if self.vectors.insert(key.clone(), vector).is_none() {
            self.order.push_back(key);
            if self.order.len() > QUERY_VECTORS
                && let Some(oldest) = self.order.pop_front()
            {
                self.vectors.remove(&oldest);
            }
        }
    }
}

impl Drop for Shard {
    /// A graph being built for the shard stops at its next step.
    fn drop(&mut self) {
        self.ann.stop();
    }
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("path", &self.path)
            .field("embedder", &self.embedder_id())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn open_reader(path: &Path) -> Result<Connection> {
    let reader = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    reader.busy_timeout(file::BUSY_TIMEOUT)?;
    memtape_store::plan_once(&reader)?;
    reader.pragma_update(None, "cache_size", file::CACHE_KIB)?;
    bm25::prepare_reader(&reader)?;
    Ok(reader)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a shard is opened with: the same for every shard of one [`Index`].
#[derive(Clone)]
pub(crate) struct ShardSpec {
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    pub(crate) config: IndexConfig,
    /// The vectors of recent queries, shared by every shard.
    pub(crate) queries: Arc<Mutex<QueryVectors>>,
    /// What the shards' graphs have answered.
    pub(crate) graphs: Arc<ann::GraphCounts>,
}

impl Shard {
    /// Opens the shard of `tenant` at `path`, creating it if missing (or, with `rebuild`,
    /// to be rebuilt: whatever model it was built with, the next [`Shard::catch_up`] reads
    /// the tenant's whole tape into it in one transaction, so other processes keep
    /// searching the old contents until the new ones are committed). Without `rebuild`,
    /// the spec's embedder must be the one the shard was built with, or this fails with
    /// [`Error::EmbedderChanged`]. A file that is not a database or is an index of
    /// another format is replaced by an empty one (with a warning); the next catch-up
    /// fills it. A file kept for another tenant is refused ([`Error::OtherTenant`]).
    ///
    /// `room` is told, before the documents and the saved graph come into memory, how many
    /// bytes the shard will then hold (so that an index can evict others first and keep
    /// its memory budget while a large shard loads).
    pub(crate) fn open(
        path: &Path,
        tenant: &str,
        spec: &ShardSpec,
        rebuild: bool,
        room: &dyn Fn(u64),
    ) -> Result<Shard> {
        let embedder = spec.embedder.clone();
        let given = embedder
            .as_ref()
            .map_or(NO_EMBEDDER.to_owned(), |e| e.id().to_owned());
        let writer = file::open(path, &given)?;
        file::bind_tenant(&writer, path, tenant)?;
        let dim = embedder.as_ref().map_or(0, |e| e.dim());
        let docs = if rebuild {
            // The mirror starts empty; the file keeps its old contents for other readers
            // until the rebuild commits.
            Docs::empty(dim, String::new(), spill_at(&spec.config, path))
        } else {
            let built = file::meta(&writer)?.embedder;
            if built != given {
                return Err(Error::EmbedderChanged {
                    path: path.to_owned(),
                    built,
                    given,
                });
            }
            file::load(&writer, dim, path, spill_at(&spec.config, path), room)?
        };
        if !rebuild
            && dim > 0
            && let Ok(saved) = std::fs::metadata(ann::ann_path(path))
        {
            // The graph as saved is about what it holds once read (`keep_ann` below).
            room(docs.memory() as u64 + saved.len());
        }
        let reader = open_reader(path)?;
        let shard = Shard {
            path: path.to_owned(),
            tenant: tenant.to_owned(),
            embedder,
            config: spec.config,
            writer: Mutex::new(writer),
            readers: Mutex::new(vec![reader]),
            docs: Arc::new(RwLock::new(docs)),
            ann: Arc::default(),
            rebuild: Mutex::new(rebuild),
            failure: Mutex::new(None),
            vectors_behind: std::sync::atomic::AtomicBool::new(false),
            tape: Mutex::new(String::new()),
            query_vectors: spec.queries.clone(),
            graphs: spec.graphs.clone(),
            inverted: Mutex::new(None),
            inverted_mark: Mutex::new(None),
        };
        // A graph saved for this build is read now, before the shard's first search, not
        // built again.
        shard.keep_ann();
        Ok(shard)
    }

    /// The embedder's id, or "none".
    pub fn embedder_id(&self) -> &str {
        self.embedder.as_ref().map_or(NO_EMBEDDER, |e| e.id())
    }

    /// The last tape id the index covers: every entry up to it is indexed (or has nothing
    /// to index), none after it is.
    pub fn covered(&self) -> EntryId {
        self.read_docs().covered
    }

    /// The last tape id whose document has its vector: [`Shard::covered`] unless vectors
    /// are behind ([`Shard::set_vectors_behind`]).
    pub fn embedded(&self) -> EntryId {
        self.read_docs().embedded
    }

    /// Whether catch-ups index text only and leave vectors to [`Shard::embed_step`]
    /// (`true`), or embed as they go (`false`, the default). With vectors behind, a
    /// catch-up costs no embedding, so a search that catches up first stays fast under a
    /// stream of writes: every document is found by BM25 at once and by vector search
    /// once a background pass has embedded it. A catch-up in the default mode (another
    /// process, or this one after switching back) first embeds what was left behind.
    pub fn set_vectors_behind(&self, behind: bool) {
        self.vectors_behind
            .store(behind, std::sync::atomic::Ordering::SeqCst);
    }

    /// Copies the index file's write-ahead log into it and truncates the log (a catch-up
    /// that applies an erasure does this itself): `false` when a reader in another
    /// process held an older snapshot for two seconds.
    pub fn truncate_wal(&self) -> Result<bool> {
        file::truncate_wal(&lock(&self.writer))
    }

    /// Drops every cached query vector (a query may have held erased text).
    fn forget_queries(&self) {
        *lock(&self.query_vectors) = QueryVectors::default();
    }

    fn vectors_behind(&self) -> bool {
        self.embedder.is_some()
            && self
                .vectors_behind
                .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// About how many bytes this shard holds in memory (what the index's memory budget
    /// counts): its mirror (each document's id, metadata, neighbours and vector, the scopes
    /// and speakers, and a share for the maps that find them), its approximate graph (a
    /// large shard's, [`ann`]), its inverted index's writers (tantivy's budget for each)
    /// and its connections' page caches.
    pub(crate) fn memory(&self) -> u64 {
        let mirror = self.read_docs().memory();
        let mirror = mirror + self.ann_memory() + self.inverted_memory();
        // And its connections' page caches (a shard's file is read through them, not mapped
        // into memory: the kernel's file cache holds the rest, outside the process).
        let connections =
            (1 + lock(&self.readers).len()) as u64 * file::CACHE_KIB.unsigned_abs() * 1024;
        mirror as u64 + connections
    }

    /// How many documents the index holds.
    pub fn len(&self) -> usize {
        self.read_docs().ids.len()
    }

    /// The error of the last catch-up that failed since this index was opened (including
    /// those run by an engine's write hook, which never fail the append itself), if any.
    pub fn last_failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    /// Runs `f` on a read-only connection from the pool.
    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = lock(&self.readers).pop();
        let conn = match conn {
            Some(c) => c,
            None => open_reader(&self.path)?,
        };
        let out = f(&conn);
        lock(&self.readers).push(conn);
        out
    }

    fn read_docs(&self) -> RwLockReadGuard<'_, Docs> {
        self.docs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where `id` is in `ids[from..]` (sorted, distinct), as `binary_search` answers: a guess
/// from the ids at both ends (a shard's ids are spread over the tape about evenly), then
/// steps doubling away from it until `id` is bracketed, then a binary search of the
/// bracket. A binary search of a million ids misses the cache about ten times; a good
/// guess lands within a few lines of the row (`perf`: 78% of BM25 scoring's time was a
/// binary search's loads).
fn find_sorted(ids: &[u64], from: usize, id: u64) -> Result<usize, usize> {
    let from = from.min(ids.len());
    let rest = &ids[from..];
    let (Some(&first), Some(&last)) = (rest.first(), rest.last()) else {
        return Err(from);
    };
    if id <= first {
        return if id == first { Ok(from) } else { Err(from) };
    }
    if id > last {
        return Err(from + rest.len());
    }
    // first < id <= last, so the span is positive.
    let span = (last - first) as u128;
    let guess = ((id - first) as u128 * (rest.len() - 1) as u128 / span) as usize;
    // Bracket [lo, hi) with rest[lo] < id <= rest[hi - 1] … found by doubling steps.
    let (mut lo, mut hi);
    if rest[guess] < id {
        let mut step = 1;
        lo = guess;
        hi = guess + 1;
        while hi < rest.len() && rest[hi] < id {
            lo = hi;
            hi = (hi + step).min(rest.len());
            step *= 2;
        }
        hi = (hi + 1).min(rest.len());
    } else {
        let mut step = 1;
        hi = guess + 1;
        lo = guess;
        while lo > 0 && rest[lo] >= id {
            hi = lo + 1;
            lo = lo.saturating_sub(step);
            step *= 2;
        }
    }
    match rest[lo..hi].binary_search(&id) {
        Ok(i) => Ok(from + lo + i),
        Err(i) => Err(from + lo + i),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn find_sorted_answers_as_binary_search_does_on_any_spread() {
        let mut rng = fastrand::Rng::with_seed(11);
        for shape in 0..4 {
            // Even, random, clustered (runs far apart) and extreme (u64's ends) ids.
            let mut ids: Vec<u64> = match shape {
                0 => (0..5000).map(|i| 3 * i + 1).collect(),
                1 => (0..5000).map(|_| rng.u64(0..1_000_000)).collect(),
                2 => (0..5000)
                    .map(|i| (i / 100) * 1_000_000_000 + rng.u64(0..1000))
                    .collect(),
                _ => (0..50)
                    .map(|i| if i % 2 == 0 { i } else { u64::MAX - i })
                    .collect(),
            };
            ids.sort_unstable();
            ids.dedup();
            let mut probes: Vec<u64> = ids.iter().step_by(3).copied().collect();
            probes.extend((0..2000).map(|_| rng.u64(..)));
            probes.extend([0, 1, u64::MAX, u64::MAX - 1]);
            for from in [0, 1, ids.len() / 2, ids.len() - 1, ids.len(), ids.len() + 5] {
                for &id in &probes {
                    let rest = &ids[from.min(ids.len())..];
                    let want = match rest.binary_search(&id) {
                        Ok(i) => Ok(from.min(ids.len()) + i),
                        Err(i) => Err(from.min(ids.len()) + i),
                    };
                    assert_eq!(
                        find_sorted(&ids, from, id),
                        want,
                        "shape {shape} from {from} id {id}"
                    );
                }
            }
        }
    }

    fn docs_with(scopes: &[Scope]) -> Docs {
        let mut docs = Docs::empty(0, "b".into(), None);
        docs.extend(Added {
            scopes: scopes.to_vec(),
            ..Added::default()
        });
        docs
    }

    /// A row's time and links keep what they were given in their smaller forms: a time
    /// to the nanosecond at both ends of the store's range and around the epoch, and a
    /// row or none.
    #[test]
    fn compact_times_and_rows_give_back_what_they_hold() {
        let times = [
            DateTime::from_timestamp_nanos(i64::MIN),
            DateTime::from_timestamp_nanos(-1),
            DateTime::from_timestamp_nanos(0),
            DateTime::from_timestamp_nanos(1_764_000_000_123_456_789),
            DateTime::from_timestamp_nanos(i64::MAX),
        ];
        for t in times {
            assert_eq!(Nanos::new(t).get(), t);
        }
        // Times the store cannot hold clamp to the ends of its range.
        assert_eq!(Nanos::new(DateTime::<Utc>::MAX_UTC).get(), times[4]);
        assert_eq!(Nanos::new(DateTime::<Utc>::MIN_UTC).get(), times[0]);
        for row in [Some(0), Some(7), Some(u32::MAX - 1), None] {
            assert_eq!(MaybeRow::from(row).get(), row);
        }
    }

    /// The tenant-only shortcut gives what a look at each scope gives, for one tenant's
    /// scopes and for mixed ones.
    #[test]
    fn admitted_scopes_by_tenant_agree_with_a_look_at_each() {
        let scope = |t: &str, u: &str, s: &str| {
            Scope::agent(t, "bot")
                .unwrap()
                .with_user(u)
                .and_then(|x| x.with_session(s))
                .unwrap()
        };
        let one = [scope("acme", "u1", "s1"), scope("acme", "u2", "s2")];
        let mixed = [scope("acme", "u1", "s1"), scope("other", "u1", "s1")];
        let filters = [
            SearchFilter::tenant("acme"),
            SearchFilter::tenant("other"),
            SearchFilter {
                user: Some("u1".into()),
                ..SearchFilter::tenant("acme")
            },
        ];
        for scopes in [&one[..], &mixed[..], &[]] {
            let docs = docs_with(scopes);
            for filter in &filters {
                let each: Vec<bool> = scopes.iter().map(|s| filter.admits_scope(s)).collect();
                assert_eq!(docs.admitted_scopes(filter), each, "{scopes:?} {filter:?}");
            }
        }
        assert_eq!(docs_with(&one).admits_by_tenant(&filters[0]), Some(true));
        assert_eq!(docs_with(&one).admits_by_tenant(&filters[1]), Some(false));
        assert_eq!(docs_with(&one).admits_by_tenant(&filters[2]), None);
        assert_eq!(docs_with(&mixed).admits_by_tenant(&filters[0]), None);
    }
}
