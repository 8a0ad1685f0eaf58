//! Approximate nearest-neighbour search for large shards: an HNSW graph (usearch) over the
//! mirror's 8-bit vectors, extended as the shard grows, saved beside the shard's file, and
//! dropped with its file when the shard's build changes (an erasure, a rebuild).
//!
//! The graph covers a prefix of the rows (its keys are row numbers, which a build never
//! renumbers); the rows after it are scanned as before ([`Vectors::search_from`]) and the
//! two lists merged. Every candidate the graph returns is rescored with the mirror's 8-bit
//! vector, so a hit's score is the exact scan's.
//!
//! The graph links the vectors *centred*: less the mean of the rows it started from, as
//! are the queries it is searched with. Sentence vectors share a large common part (the
//! mean-pooled WordLlama vectors of the bench's texts lie in a narrow cone), so their
//! cosines differ little and a graph walk from a query outside the cone loses its way;
//! centred, they spread over the sphere. On a million real vectors, at M 32 /
//! ef_construction 64 and 400 candidates, centring took the graph's recall@10 from 0.756
//! to 0.964 (docs/scaling.md, "Centred graph vectors"). The ranking is still the raw
//! cosine's: candidates are rescored. The graph is used only for shards of at
//! least [`IndexConfig::ann_min`] vectors, not for exact requests, and not when a search's
//! filter admits less than [`MIN_ADMITTED`] of the rows or fewer than half `ann_min` rows
//! (those rows are scanned).
//!
//! The file (`<hash>.ann` beside `<hash>.db`) is usearch's own serialisation followed by a
//! trailer: a stamp (the shard's build id, the embedder, the dimension and graph degree,
//! how many rows it covers and the entry id of the last), its length, a CRC-32 of
//! everything before, the body's length and a magic number. It is written to a temporary
//! file and renamed, and used only when the stamp matches the shard: a missing, stale,
//! truncated or corrupt file is deleted and the graph built again from the mirror.
//!
//! [`Vectors::search_from`]: crate::vectors::Vectors::search_from
//! [`IndexConfig::ann_min`]: super::IndexConfig::ann_min

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use usearch::{IndexOptions, MetricKind, ScalarKind};

use super::ivf::{self, Lists};
use super::{Docs, ONE_BIT_HITS, Shard, lock};
use crate::vectors::{Quantized, Vectors, quantize, top_k};

/// The graph's shape: its degree (HNSW's M) and how wide insertions and searches look
/// (ef_construction, ef_search).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    /// Neighbours kept per node and layer (M).
    pub(crate) connectivity: usize,
    /// Candidates an insertion looks at (ef_construction).
    pub(crate) expansion_add: usize,
    /// Candidates a search looks at, at least (ef_search; a search for more looks wider).
    pub(crate) expansion_search: usize,
}

/// The parameters used, measured in docs/scaling.md ("Centred graph vectors").
pub(crate) const PARAMS: Params = Params {
    connectivity: 16,
    expansion_add: 64,
    expansion_search: 64,
};

/// Rows of the graph per candidate a search asks it for, at least: the walk widens as the
/// graph grows (2,000 candidates up to 5M rows, 4,000 at 10M; the graph on 64 principal
/// axes at M 16 needs twice the candidates of the whole vectors' at M 32 for the same
/// recall, and costs less at that count: docs/scaling.md, "A smaller graph").
pub(crate) const ROWS_PER_CANDIDATE: usize = 2_500;

/// Rows inverted lists scan per candidate they return: a search for the default 2,000
/// candidates of a million rows scans a fifth of them (0.966 of the exact top 10 through
/// `bench scale`, against 0.924 for a tenth: docs/scaling.md, "Inverted lists").
pub(crate) const SCAN_PER_CANDIDATE: usize = 100;

/// The share of its rows a lists search scans at least, unless a candidate count was set
/// while serving: recall depends on the share (0.924 at 8% and 0.974 at 16% of ten
/// million rows), so a rule in candidates alone would lose recall as a shard grows.
pub(crate) const SCAN_SHARE: f64 = 0.15;

/// Candidates taken from the graph per hit asked for, at least, all rescored (a search
/// for more than `expansion_search` looks that much wider); see
/// [`IndexConfig::ann_candidates`](super::IndexConfig::ann_candidates).
const OVERSAMPLE: usize = 4;

/// The smallest share of the rows a search's filter must admit for the graph to be used
/// (estimated on [`SAMPLE`] rows spread over the shard), and it must admit at least half
/// of [`IndexConfig::ann_min`](super::IndexConfig::ann_min) rows. A graph search with a
/// filter walks the rejected nodes too: at 100,000 vectors one admitting half the rows
/// took 2.7 ms (1.5 unfiltered), a third 7.8 ms and a tenth 21 ms, against 3–5 ms for a
/// scan of the rows it admits (docs/scaling.md); a scan grows with the shard, a graph
/// search hardly, so the graph pays from fewer admitted rows in larger shards.
pub(crate) const MIN_ADMITTED: f64 = 0.1;

/// Rows looked at to estimate the share a filter admits.
const SAMPLE: usize = 256;

/// Rows copied from the mirror (under its read lock) and added per step of a build.
const CHUNK: usize = 4096;

/// In the background, the graph is extended once this many rows are after it (the exact
/// scan of fewer costs less than a millisecond).
const STEP_ROWS: usize = 2048;

/// During a long build, the graph is saved once it holds at least this many rows more
/// than its file (and twice as many).
const SAVE_EVERY: usize = 1 << 20;

/// Graph searches run at once on one graph; more wait for a turn. usearch gives each
/// operation one of a fixed number of thread contexts and refuses the operation (it does
/// not wait) when they are all taken, so the graph reserves this many plus
/// [`MAX_ADDERS`] for the builder's additions. A search takes a few milliseconds on one
/// core.
const SEARCHERS: usize = 8;

/// At most this many threads add to one graph at once (one per core).
const MAX_ADDERS: usize = 4;

/// Rows an adding thread takes at least: fewer are added by fewer threads.
const ADD_SHARE: usize = 256;

/// While the shard is being written (a batch within the last [`QUIET`]), the builder
/// works at most this share of its time: the write path comes first. Under appends that
/// keep the machine busy the graph then grows slowly and catches up once they pause;
/// searches meanwhile scan the rows after it.
const SHARE_WHILE_WRITING: f64 = 0.1;

/// How long after the shard's last written batch the builder counts it as written.
const QUIET: Duration = Duration::from_millis(100);

/// How long a yielding adder sleeps before it looks again.
const NAP: Duration = Duration::from_millis(5);

/// The threads that add a chunk of rows to a graph: one per core, at most [`MAX_ADDERS`].
fn adders() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(MAX_ADDERS)
}

/// The last bytes of a graph file.
const MAGIC: &[u8; 8] = b"MTANN\x00v1";

/// The trailer's fixed part: the stamp's length (u32), the CRC-32 (u32), the body's
/// length (u64), the magic.
const TRAILER: usize = 4 + 4 + 8 + MAGIC.len();

/// What a graph file covers: it is used only by a shard it matches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Stamp {
    /// The build id of the shard file it was made from.
    build: String,
    /// The embedder whose vectors it holds.
    embedder: String,
    dim: usize,
    connectivity: usize,
    /// The rows it covers (keys `0..rows`).
    rows: usize,
    /// The entry id of row `rows - 1`.
    last_id: u64,
    /// The centre the graph's vectors are linked less.
    center: Vec<f32>,
    /// The principal axes they are projected on ([`Frame::axes`]).
    axes: Vec<f32>,
    /// How many axes: part of what the stamp must match, so a graph made in another
    /// frame (an older file's) is built again.
    projected: usize,
    /// Whether the body is inverted lists ([`Lists`]) rather than a graph (files from
    /// before lists have no such key).
    #[serde(default)]
    lists: bool,
}

/// The frame a graph links its vectors in: less a centre, then (for vectors of more than
/// [`PROJECTED`] dimensions) projected on the first [`PROJECTED`] principal axes of the
/// rows the graph started from. The walk only has to land near the right rows, which
/// are then rescored with their own vectors: on a million WordLlama vectors, a graph of
/// M 16 over 64 principal axes found 0.972 of the exact top 10 at 1,000 candidates,
/// against 0.987 for M 32 over all 256 dimensions, with half the memory and 60% of the
/// build (docs/scaling.md, "A smaller graph"); the first 64 dimensions alone found 0.844.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Frame {
    /// The mean subtracted from every vector (`dim` long).
    pub(crate) center: Vec<f32>,
    /// The axes, each `dim` long, one after another, most variance first; empty for
    /// none (the centred vectors linked whole).
    pub(crate) axes: Vec<f32>,
}

impl Frame {
    /// The dimensions of the vectors the graph links.
    fn dims(&self, dim: usize) -> usize {
        if self.axes.is_empty() {
            dim
        } else {
            self.axes.len() / dim.max(1)
        }
    }

    /// `v` in this frame, quantized as the graph links it.
    fn linked(&self, v: &[f32]) -> Quantized {
        let centred: Vec<f32> = v.iter().zip(&self.center).map(|(x, c)| x - c).collect();
        if self.axes.is_empty() {
            return quantize(&centred);
        }
        let projected: Vec<f32> = self
            .axes
            .chunks_exact(centred.len())
            .map(|axis| axis.iter().zip(&centred).map(|(a, x)| a * x).sum())
            .collect();
        quantize(&projected)
    }
}

/// The dimensions a graph links its vectors in, at most: larger vectors are projected on
/// this many principal axes.
pub(crate) const PROJECTED: usize = 64;

/// Rows whose covariance gives a new graph's axes, at most, spread evenly over the shard.
const AXES_ROWS: usize = 20_000;

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An HNSW graph over the first [`Ann::rows`] rows of a shard's mirror.
///
/// One thread adds (the shard's builder, or a load before the graph is shared) while any
/// number search: usearch allows additions and searches at once, not its statistics
/// beside an addition (they read nodes being written), so the memory is measured by the
/// adding thread and kept.
pub(crate) struct Ann {
    /// The graph or the lists.
    structure: Structure,
    /// How many rows, from the first, are in the graph.
    rows: AtomicUsize,
    /// The bytes the graph held after its last addition.
    memory: AtomicUsize,
    /// Searches running now, at most [`SEARCHERS`], and their turns.
    searching: Mutex<usize>,
    turn: Condvar,
    /// The shard build it belongs to.
    build: String,
    dim: usize,
    /// The frame every vector the graph links, and every query, is put in.
    frame: Frame,
}

/// What an [`Ann`] is made of.
enum Structure {
    /// An HNSW graph. Written only to grow its capacity; added to and searched under the
    /// read lock (usearch allows both at once).
    Graph(RwLock<usearch::Index>),
    /// Inverted lists: written to add rows (briefly: their lists are found before),
    /// searched under the read lock.
    Lists(RwLock<Lists>),
}

impl std::fmt::Debug for Ann {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ann")
            .field("rows", &self.rows())
            .field("build", &self.build)
            .finish_non_exhaustive()
    }
}

/// Refuses a frame that is not a finite centre of `dim` values and at most `dim` finite
/// axes of `dim` values each.
fn check_frame(dim: usize, frame: &Frame) -> Result<(), String> {
    if frame.center.len() != dim || frame.center.iter().any(|x| !x.is_finite()) {
        return Err(format!(
            "a centre of {} values where {dim} finite ones were expected",
            frame.center.len()
        ));
    }
    if !frame.axes.len().is_multiple_of(dim.max(1))
        || frame.axes.len() / dim.max(1) > dim
        || frame.axes.iter().any(|x| !x.is_finite())
    {
        return Err(format!(
            "{} axis values for {dim}-long vectors",
            frame.axes.len()
        ));
    }
    Ok(())
}

fn options(dim: usize, params: Params) -> IndexOptions {
    IndexOptions {
        dimensions: dim,
        metric: MetricKind::Cos,
        quantization: ScalarKind::I8,
        connectivity: params.connectivity,
        expansion_add: params.expansion_add,
        expansion_search: params.expansion_search,
        multi: false,
    }
}

impl Ann {
    /// An empty graph of `dim`-long vectors for shard build `build`, linking them in
    /// `frame`.
    pub(crate) fn new(
        dim: usize,
        build: &str,
        params: Params,
        frame: Frame,
    ) -> Result<Ann, String> {
        check_frame(dim, &frame)?;
        let index =
            usearch::Index::new(&options(frame.dims(dim), params)).map_err(|e| e.to_string())?;
        Ok(Ann::holding(
            dim,
            build,
            frame,
            Structure::Graph(RwLock::new(index)),
        ))
    }

    /// Inverted lists over `dim`-long vectors for shard build `build`, their codes in
    /// `frame` (trained and empty for a new build, or read from a file).
    pub(crate) fn with_lists(
        dim: usize,
        build: &str,
        frame: Frame,
        lists: Lists,
    ) -> Result<Ann, String> {
        check_frame(dim, &frame)?;
        if lists.dims() != frame.dims(dim) {
            return Err(format!(
                "lists of {}-value codes for a frame of {}",
                lists.dims(),
                frame.dims(dim)
            ));
        }
        let (rows, memory) = (lists.rows(), lists.memory());
        let ann = Ann::holding(dim, build, frame, Structure::Lists(RwLock::new(lists)));
        ann.rows.store(rows, Ordering::Release);
        ann.memory.store(memory, Ordering::Release);
        Ok(ann)
    }

    /// An `Ann` of `structure` (its frame checked by the caller), counting no rows yet.
    fn holding(dim: usize, build: &str, frame: Frame, structure: Structure) -> Ann {
        Ann {
            frame,
            structure,
            rows: AtomicUsize::new(0),
            memory: AtomicUsize::new(0),
            searching: Mutex::new(0),
            turn: Condvar::new(),
            build: build.to_owned(),
            dim,
        }
    }

    /// Whether this is inverted lists rather than a graph.
    pub(crate) fn is_lists(&self) -> bool {
        matches!(self.structure, Structure::Lists(_))
    }

    /// The graph (tests look inside it); panics for lists.
    #[cfg(test)]
    fn graph(&self) -> RwLockReadGuard<'_, usearch::Index> {
        match &self.structure {
            Structure::Graph(index) => read(index),
            Structure::Lists(_) => panic!("not a graph"),
        }
    }

    /// Makes room for `capacity` rows and the threads that use the graph at once.
    fn reserve(index: &usearch::Index, capacity: usize) -> Result<(), String> {
        index
            .reserve_capacity_and_threads(capacity, SEARCHERS + MAX_ADDERS)
            .map_err(|e| e.to_string())
    }

    /// How many rows, from the first, the graph holds.
    pub(crate) fn rows(&self) -> usize {
        self.rows.load(Ordering::Acquire)
    }

    /// The dimensions of the vectors the graph links.
    fn dims(&self) -> usize {
        self.frame.dims(self.dim)
    }

    /// The graph's form of rows `from..to` of `vectors`: each row's vector (its 8-bit
    /// values times its scale) in the graph's frame, quantized, row after row.
    fn linked_rows(&self, vectors: &Vectors, from: usize, to: usize) -> io::Result<Vec<i8>> {
        let mut out = Vec::with_capacity((to - from) * self.dims());
        let mut v = vec![0f32; self.dim];
        vectors.each_row(from..to, |r, values| {
            let scale = vectors.scale(r);
            for (x, q) in v.iter_mut().zip(values) {
                *x = f32::from(*q) * scale;
            }
            out.extend_from_slice(self.frame.linked(&v).values());
        })?;
        Ok(out)
    }

    /// Adds rows `rows()..` with their centred 8-bit `values` (`dim` per row, in row order), on
    /// up to [`adders`] threads at once; the rows count once all are in. One caller at a
    /// time adds (see the type's documentation). After an error the graph may hold some
    /// of the rows: it is dropped (see [`Build::try_run`]).
    pub(crate) fn add(&self, values: &[i8], pace: &Pace<'_>) -> Result<(), String> {
        let graph = match &self.structure {
            Structure::Graph(graph) => graph,
            Structure::Lists(lists) => return self.add_to_lists(lists, values, pace),
        };
        let n = values.len() / self.dims().max(1);
        let first = self.rows();
        {
            let index = read(graph);
            let wanted = index.size() + n;
            if wanted > index.capacity() {
                drop(index);
                let index = graph
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let capacity = wanted.next_power_of_two().max(CHUNK);
                Ann::reserve(&index, capacity)?;
            }
        }
        let index = read(graph);
        let rows: Vec<&[i8]> = values.chunks_exact(self.dims()).collect();
        // Each adder takes every `adders`-th row; usearch links concurrent additions.
        let adders = adders().min(rows.len().div_ceil(ADD_SHARE)).max(1);
        let add_every = |t: usize| -> Result<(), String> {
            let mut turn = Turn::new();
            (t..rows.len()).step_by(adders).try_for_each(|i| {
                if !pace.wait(&mut turn) {
                    return Err(STOPPED.to_owned());
                }
                let started = Instant::now();
                let added = index
                    .add((first + i) as u64, rows[i])
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                turn.worked += started.elapsed();
                added
            })
        };
        let added = std::thread::scope(|s| {
            let others: Vec<_> = (1..adders)
                .map(|t| {
                    s.spawn(move || {
                        lower_priority();
                        add_every(t)
                    })
                })
                .collect();
            let mine = add_every(0);
            others
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("an adding thread panicked".to_owned()))
                })
                .chain([mine])
                .collect::<Result<(), String>>()
        });
        if added.is_ok() {
            self.rows.store(first + rows.len(), Ordering::Release);
        }
        // Walks every node: a read of each node's level, small beside the seconds a chunk
        // of 4,096 insertions takes.
        self.memory.store(index.memory_usage(), Ordering::Release);
        added
    }

    /// [`Ann::add`] for lists: each row's list is found outside the lock, a pace's turn
    /// at a time, then the rows go in at once.
    fn add_to_lists(
        &self,
        lists: &RwLock<Lists>,
        values: &[i8],
        pace: &Pace<'_>,
    ) -> Result<(), String> {
        let mut turn = Turn::new();
        let mut assigned = Vec::with_capacity(values.len() / self.dims().max(1));
        for part in values.chunks(ADD_SHARE * self.dims()) {
            if !pace.wait(&mut turn) {
                return Err(STOPPED.to_owned());
            }
            let started = Instant::now();
            assigned.extend(read(lists).assign(part));
            turn.worked += started.elapsed();
        }
        let mut lists = lists
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lists.add(values, &assigned);
        self.rows.store(lists.rows(), Ordering::Release);
        self.memory.store(lists.memory(), Ordering::Release);
        Ok(())
    }

    /// Up to `count` rows below `rows` that `allowed` admits, nearest `query` (a unit
    /// vector) first; an error when usearch refuses the search. Lists scan at least
    /// `scan` rows (a graph looks `count` wide).
    pub(crate) fn search(
        &self,
        query: &[f32],
        count: usize,
        scan: usize,
        rows: usize,
        allowed: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<usize>, String> {
        let q = self.frame.linked(query);
        let graph = match &self.structure {
            Structure::Graph(graph) => graph,
            Structure::Lists(lists) => {
                return Ok(read(lists).search(q.values(), scan, count, rows, allowed));
            }
        };
        let _turn = self.turn();
        let index = read(graph);
        let found = index.filtered_search(q.values(), count, |key| {
            let row = key as usize;
            row < rows && allowed(row)
        });
        found
            .map(|m| m.keys.iter().map(|k| *k as usize).collect())
            .map_err(|e| e.to_string())
    }

    /// Waits for one of the [`SEARCHERS`] turns to search; the turn ends when the guard
    /// is dropped.
    fn turn(&self) -> impl Drop + '_ {
        struct Turn<'a>(&'a Ann);
        impl Drop for Turn<'_> {
            fn drop(&mut self) {
                *lock(&self.0.searching) -= 1;
                self.0.turn.notify_one();
            }
        }
        let mut running = lock(&self.searching);
        while *running >= SEARCHERS {
            running = self
                .turn
                .wait(running)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *running += 1;
        Turn(self)
    }

    /// The bytes the graph held in memory (its vectors and links) after its last addition.
    pub(crate) fn memory(&self) -> usize {
        self.memory.load(Ordering::Acquire)
    }

    /// Writes the graph to `path` through a temporary file renamed over it, stamped with
    /// `embedder` and the entry id of its last row. The rename happens only while `keep`
    /// (checked with the slot locked) says the graph still belongs to the shard.
    fn save(
        &self,
        path: &Path,
        embedder: &str,
        last_id: u64,
        keep: impl FnOnce() -> bool,
    ) -> io::Result<()> {
        let temp = temp_path(path, "tmp");
        let out = (|| {
            let mut stamp = Stamp {
                build: self.build.clone(),
                embedder: embedder.to_owned(),
                dim: self.dim,
                connectivity: 0,
                rows: 0,
                last_id,
                center: self.frame.center.clone(),
                axes: self.frame.axes.clone(),
                projected: self.dims(),
                lists: self.is_lists(),
            };
            match &self.structure {
                Structure::Graph(graph) => {
                    let index = read(graph);
                    stamp.connectivity = index.connectivity();
                    stamp.rows = index.size();
                    index
                        .save(&temp.to_string_lossy())
                        .map_err(|e| io::Error::other(e.to_string()))?;
                }
                Structure::Lists(lists) => {
                    let mut out = io::BufWriter::new(File::create(&temp)?);
                    let lists = read(lists);
                    stamp.rows = lists.rows();
                    lists.write_to(&mut out)?;
                    drop(lists);
                    out.into_inner().map_err(io::IntoInnerError::into_error)?;
                }
            }
            append_trailer(&temp, &stamp)?;
            if keep() {
                fs::rename(&temp, path)?;
            }
            Ok(())
        })();
        // Gone after a rename; after a failure or a refusal, removed.
        let _ = fs::remove_file(&temp);
        out
    }

    /// Reads the graph (or, with `lists`, the inverted lists) at `path` if its stamp
    /// matches: `build` and `embedder`, `dim`, the kind and graph degree, and a last
    /// covered row whose entry id `id_of` gives. `Ok(None)` when there is no file; an
    /// error when it is stale or unreadable (the caller deletes it).
    fn load(
        path: &Path,
        build: &str,
        embedder: &str,
        dim: usize,
        lists: bool,
        id_of: impl Fn(usize) -> Option<u64>,
    ) -> Result<Option<Ann>, String> {
        if !path.exists() {
            return Ok(None);
        }
        // A private name for the file as it is now, so another process renaming a newer
        // one over it cannot change what is read between the check and the load.
        let snapshot = temp_path(path, "load");
        let linked = fs::hard_link(path, &snapshot).is_ok();
        let source = if linked { snapshot.as_path() } else { path };
        let out = (|| {
            let (stamp, body) = read_stamp(source).map_err(|e| e.to_string())?;
            let wanted = (
                build,
                embedder,
                dim,
                lists,
                if lists { 0 } else { PARAMS.connectivity },
                dim.min(PROJECTED),
            );
            let found = (
                stamp.build.as_str(),
                stamp.embedder.as_str(),
                stamp.dim,
                stamp.lists,
                stamp.connectivity,
                stamp.projected,
            );
            if found != wanted {
                return Err(format!("made for another shard build or graph ({found:?})"));
            }
            if stamp.rows == 0 || id_of(stamp.rows - 1) != Some(stamp.last_id) {
                return Err(format!(
                    "covers {} rows ending at entry {}, which the shard does not hold",
                    stamp.rows, stamp.last_id
                ));
            }
            let frame = Frame {
                center: stamp.center,
                axes: stamp.axes,
            };
            check_frame(dim, &frame)?;
            if frame.dims(dim) != stamp.projected {
                return Err(format!(
                    "{} axes for a graph of {} dimensions",
                    frame.axes.len() / dim.max(1),
                    stamp.projected
                ));
            }
            if lists {
                let file = File::open(source).map_err(|e| e.to_string())?;
                let lists = Lists::read_from(io::BufReader::new(file), body, frame.dims(dim))?;
                if lists.rows() != stamp.rows {
                    return Err(format!("holds {} rows, not {}", lists.rows(), stamp.rows));
                }
                return Ann::with_lists(dim, build, frame, lists).map(Some);
            }
            let ann = Ann::new(dim, build, PARAMS, frame)?;
            if let Structure::Graph(graph) = &ann.structure {
                let index = read(graph);
                index
                    .load(&source.to_string_lossy())
                    .map_err(|e| e.to_string())?;
                if index.dimensions() != ann.dims() {
                    return Err(format!(
                        "links {} dimensions, not {}",
                        index.dimensions(),
                        ann.dims()
                    ));
                }
                if index.size() != stamp.rows {
                    return Err(format!("holds {} rows, not {}", index.size(), stamp.rows));
                }
                // A load reserves for as many threads as the machine has cores.
                Ann::reserve(&index, index.capacity().max(stamp.rows))?;
                ann.memory.store(index.memory_usage(), Ordering::Release);
                index.change_expansion_add(PARAMS.expansion_add);
                index.change_expansion_search(PARAMS.expansion_search);
            }
            ann.rows.store(stamp.rows, Ordering::Release);
            Ok(Some(ann))
        })();
        if linked {
            let _ = fs::remove_file(&snapshot);
        }
        out
    }
}

/// The graph file of the shard file at `shard`: `<hash>.ann` beside `<hash>.db`.
pub(crate) fn ann_path(shard: &Path) -> PathBuf {
    shard.with_extension("ann")
}

/// A name beside `path` private to this process and call: `<path>.<pid>.<n>.<what>`.
fn temp_path(path: &Path, what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.{n}.{what}", std::process::id()));
    PathBuf::from(name)
}

/// Appends the stamp and the trailer to the graph body at `path`, and syncs it.
fn append_trailer(path: &Path, stamp: &Stamp) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().read(true).append(true).open(path)?;
    let body = file.metadata()?.len();
    let json = serde_json::to_vec(stamp).map_err(io::Error::other)?;
    let mut crc = crc_of(&mut file, body)?;
    crc.update(&json);
    let mut trailer = json;
    trailer.extend((trailer.len() as u32).to_le_bytes());
    trailer.extend(crc.finalize().to_le_bytes());
    trailer.extend(body.to_le_bytes());
    trailer.extend(MAGIC);
    file.write_all(&trailer)?;
    file.sync_all()
}

/// The CRC-32 of the first `len` bytes of `file`, as a hasher to continue.
fn crc_of(file: &mut File, len: u64) -> io::Result<crc32fast::Hasher> {
    file.seek(SeekFrom::Start(0))?;
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut reader = file.take(len);
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        crc.update(&buf[..n]);
    }
    Ok(crc)
}

/// The stamp of the graph file at `path` and the length of the body before it, after
/// checking its trailer and checksum.
fn read_stamp(path: &Path) -> io::Result<(Stamp, u64)> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    if len < TRAILER as u64 {
        return Err(bad("too short"));
    }
    file.seek(SeekFrom::End(-(TRAILER as i64)))?;
    let mut tail = [0u8; TRAILER];
    file.read_exact(&mut tail)?;
    if &tail[16..] != MAGIC {
        return Err(bad("no trailer (truncated?)"));
    }
    let word = |at: usize| u32::from_le_bytes([tail[at], tail[at + 1], tail[at + 2], tail[at + 3]]);
    let (json_len, crc) = (u64::from(word(0)), word(4));
    let mut body = [0u8; 8];
    body.copy_from_slice(&tail[8..16]);
    let body = u64::from_le_bytes(body);
    if body + json_len + TRAILER as u64 != len {
        return Err(bad("lengths do not add up (truncated?)"));
    }
    let mut hasher = crc_of(&mut file, body)?;
    let mut json = vec![0u8; json_len as usize];
    file.read_exact(&mut json)?;
    hasher.update(&json);
    if hasher.finalize() != crc {
        return Err(bad("checksum mismatch"));
    }
    let stamp = serde_json::from_slice(&json).map_err(|e| bad(&e.to_string()))?;
    Ok((stamp, body))
}

/// The stamp of the graph file at `path` without checking its body: which build it is for.
fn peek_build(path: &Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::End(-(TRAILER as i64))).ok()?;
    let mut tail = [0u8; TRAILER];
    file.read_exact(&mut tail).ok()?;
    let json_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if &tail[16..] != MAGIC || json_len + TRAILER as u64 > len {
        return None;
    }
    file.seek(SeekFrom::End(-((json_len + TRAILER as u64) as i64)))
        .ok()?;
    let mut json = vec![0u8; json_len as usize];
    file.read_exact(&mut json).ok()?;
    serde_json::from_slice::<Stamp>(&json).ok().map(|s| s.build)
}

/// Removes the temporary files that processes no longer running left beside `path`
/// (killed while writing a graph): they may hold vectors an erasure removed since.
fn remove_leftovers(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        let pid = rest.split('.').next().and_then(|p| p.parse::<u32>().ok());
        let running = pid.is_some_and(|pid| {
            pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
        });
        // Where processes cannot be looked up (no /proc), an hour-old file is left over.
        let old = !Path::new("/proc/self").exists()
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|d| d.as_secs() > 3600));
        if pid.is_some() && (!running || old) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// What [`Ann::add`] fails with when the shard was dropped while it added.
const STOPPED: &str = "stopped: the shard was dropped";

/// How the builder shares the machine with the shard's writes: see
/// [`SHARE_WHILE_WRITING`]. Written batches are marked with [`AnnSlot::written`].
pub(crate) struct Pace<'a> {
    slot: Option<&'a AnnSlot>,
}

/// One adding thread's work in the current second.
pub(crate) struct Turn {
    since: Instant,
    worked: Duration,
}

impl Turn {
    /// A second that starts now, with no work in it yet.
    fn new() -> Turn {
        Turn {
            since: Instant::now(),
            worked: Duration::ZERO,
        }
    }
}

impl Pace<'_> {
    /// No pacing: add at full speed.
    #[cfg(test)]
    pub(crate) const FULL: Pace<'static> = Pace { slot: None };

    /// Waits, while the shard is being written, until `turn` has worked no more than its
    /// share of the time; `false` when the shard was dropped meanwhile.
    fn wait(&self, turn: &mut Turn) -> bool {
        let Some(slot) = self.slot else {
            return true;
        };
        loop {
            if slot.stop.load(Ordering::SeqCst) {
                return false;
            }
            let elapsed = turn.since.elapsed();
            if elapsed >= Duration::from_secs(1) {
                *turn = Turn::new();
                return true;
            }
            if !slot.writing()
                || turn.worked.as_secs_f64() <= elapsed.as_secs_f64() * SHARE_WHILE_WRITING
            {
                return true;
            }
            std::thread::sleep(NAP);
        }
    }
}

/// The start of the clock [`AnnSlot::written`] counts on.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// What the graphs of an index's shards have answered since it was opened, and the
/// candidate count set while serving (shared by every shard; [`ShardStats`](super::ShardStats),
/// [`Index::set_ann_candidates`](super::Index::set_ann_candidates)).
#[derive(Debug, Default)]
pub(crate) struct GraphCounts {
    /// Vector searches a graph answered.
    pub(crate) searches: AtomicU64,
    /// Graph searches usearch refused, answered by a scan instead.
    pub(crate) refused: AtomicU64,
    /// The candidates a graph search asks for, when set in place of the default rule (0:
    /// the default, from [`IndexConfig::ann_candidates`](super::IndexConfig::ann_candidates)).
    pub(crate) candidates: AtomicUsize,
}

/// A shard's graph and the state of its making, shared with the thread that builds it.
#[derive(Debug, Default)]
pub(crate) struct AnnSlot {
    state: Mutex<SlotState>,
    /// The thread building the graph, if one was started.
    builder: Mutex<Option<JoinHandle<()>>>,
    /// Set when the shard is dropped: a build stops at its next step.
    stop: AtomicBool,
    /// Graphs started from nothing (not read from a file) since the shard was opened.
    fresh: AtomicUsize,
    /// When the shard last wrote a batch: microseconds after [`epoch`], plus one (0 for
    /// never).
    written_at: AtomicU64,
}

#[derive(Debug, Default)]
struct SlotState {
    /// The shard build the slot follows ("" before the first look).
    build: String,
    ann: Option<Arc<Ann>>,
    /// The rows the graph file holds, as this process last wrote or read it.
    saved: usize,
}

impl AnnSlot {
    /// The graph of shard build `build`, if there is one.
    fn current(&self, build: &str) -> Option<Arc<Ann>> {
        let state = lock(&self.state);
        state
            .ann
            .clone()
            .filter(|a| a.build == build && state.build == build)
    }

    /// How many graphs were started from nothing since the shard was opened.
    #[cfg(test)]
    pub(crate) fn fresh(&self) -> usize {
        self.fresh.load(Ordering::SeqCst)
    }

    /// How many rows the current graph holds.
    #[cfg(test)]
    pub(crate) fn rows(&self) -> usize {
        lock(&self.state).ann.as_ref().map_or(0, |a| a.rows())
    }

    /// Waits for the build running, if any.
    pub(crate) fn wait(&self) {
        if let Some(handle) = lock(&self.builder).take() {
            let _ = handle.join();
        }
    }

    /// Stops a running build at its next step.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Marks that the shard wrote a batch now: the builder yields for a while.
    pub(crate) fn written(&self) {
        let micros = u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX - 1);
        self.written_at.store(micros + 1, Ordering::Release);
    }

    /// Whether the shard wrote a batch within the last [`QUIET`].
    fn writing(&self) -> bool {
        match self.written_at.load(Ordering::Acquire) {
            0 => false,
            at => {
                let now = epoch().elapsed().as_micros();
                now.saturating_sub(u128::from(at - 1)) < QUIET.as_micros()
            }
        }
    }
}

/// One run of building: load or start the graph, add the rows after it, save it.
struct Build {
    slot: Arc<AnnSlot>,
    /// The shard's mirror, held only while a step reads it ([`Build::mirror`]).
    docs: Weak<RwLock<Docs>>,
    /// The shard's file, and the graph's.
    shard: PathBuf,
    path: PathBuf,
    embedder: String,
    dim: usize,
    build: String,
    /// Whether to ask for huge pages ([`IndexConfig::huge_pages`](super::IndexConfig::huge_pages)).
    huge_pages: bool,
    /// Whether to make inverted lists rather than a graph
    /// ([`IndexConfig::ann_lists`](super::IndexConfig::ann_lists)).
    lists: bool,
}

impl Build {
    /// The shard's mirror while the shard is loaded (`None` once it is evicted or
    /// dropped). A builder holds it only for a step: a builder of low priority on a busy
    /// machine can take long to reach its next step, and an evicted shard's memory must
    /// go at once, not when its builder notices.
    fn mirror(&self) -> Option<Arc<RwLock<Docs>>> {
        self.docs.upgrade()
    }

    fn run(self) {
        if let Err(e) = self.try_run() {
            tracing::warn!(
                "search index {}: approximate vector index: {e}; vector searches scan meanwhile",
                self.path.display()
            );
        }
    }

    /// The build id the shard file holds now (another process may have changed it).
    fn file_build(&self) -> Option<String> {
        let conn = rusqlite::Connection::open_with_flags(
            &self.shard,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .ok()?;
        conn.busy_timeout(super::file::BUSY_TIMEOUT).ok()?;
        super::file::meta(&conn).ok().map(|m| m.build)
    }

    /// Whether the slot still follows this build (a new one may be an erasure's).
    fn current(&self) -> bool {
        lock(&self.slot.state).build == self.build
    }

    /// The index saved for this build, read from its file (`None` when there is none).
    fn load_saved(&self) -> Result<Option<Ann>, String> {
        let id_of = |row: usize| {
            let mirror = self.mirror()?;
            let docs = read(&mirror);
            (docs.build == self.build && row < docs.vectors.len()).then(|| docs.ids[row])
        };
        let loaded = Ann::load(
            &self.path,
            &self.build,
            &self.embedder,
            self.dim,
            self.lists,
            id_of,
        );
        // Read from its file, every page of the graph is touched already.
        if self.huge_pages && matches!(loaded, Ok(Some(_))) {
            super::huge::advise(true);
        }
        loaded
    }

    /// Reads the index saved for this build into the slot, if its file holds one and the
    /// slot has none: what the builder does first, done by the thread that opens the
    /// shard, so that the shard's first searches use it. (A large shard's lists read in a
    /// fraction of a second, where its builder, at the lowest priority on a busy machine,
    /// could wait seconds for a core, its searches meanwhile scanning one-bit codes with a
    /// lower recall.) A file it cannot use is left to the builder, which reads it again,
    /// says why, and builds anew.
    fn read_saved(&self) {
        if lock(&self.slot.state).ann.is_some() || !self.path.exists() {
            return;
        }
        if let Ok(Some(ann)) = self.load_saved() {
            let ann = Arc::new(ann);
            {
                let mut state = lock(&self.slot.state);
                if state.build != self.build || state.ann.is_some() {
                    return;
                }
                state.saved = ann.rows();
                state.ann = Some(ann.clone());
            }
            self.drop_covered_codes(&ann);
        }
    }

    /// With inverted lists, drops the mirror's one-bit codes of the rows `ann` covers
    /// (their searches go through the lists): a third of what a loaded row holds.
    fn drop_covered_codes(&self, ann: &Ann) {
        if !ann.is_lists() {
            return;
        }
        if let Some(mirror) = self.mirror() {
            let mut docs = mirror
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if docs.build == self.build {
                docs.vectors.drop_codes_below(ann.rows());
            }
        }
    }

    fn try_run(&self) -> Result<(), String> {
        let existing = {
            let state = lock(&self.slot.state);
            if state.build != self.build {
                return Ok(());
            }
            state.ann.clone()
        };
        let ann = match existing {
            Some(ann) => ann,
            None => {
                let ann = match self.load_saved() {
                    Ok(Some(ann)) => ann,
                    // The shard went while its file was read (its rows could not be
                    // checked): the file stays for the shard's next load.
                    _ if self.mirror().is_none() => return Ok(()),
                    other => {
                        if let Err(e) = other {
                            tracing::info!(
                                "search index {}: approximate vector index not used ({e}); building it again",
                                self.path.display()
                            );
                            let _ = fs::remove_file(&self.path);
                        }
                        self.slot.fresh.fetch_add(1, Ordering::SeqCst);
                        let (center, sample, count) = {
                            let Some(mirror) = self.mirror() else {
                                return Ok(());
                            };
                            let docs = read(&mirror);
                            if docs.build != self.build {
                                return Ok(());
                            }
                            let count = ivf::lists_for(docs.vectors.len());
                            let center = mean(&docs.vectors).map_err(|e| e.to_string())?;
                            let sample =
                                sample(&docs.vectors, AXES_ROWS).map_err(|e| e.to_string())?;
                            (center, sample, count)
                        };
                        // Outside the mirror's lock: a few hundred milliseconds.
                        let axes = principal_axes(&sample, &center, PROJECTED);
                        drop(sample);
                        let frame = Frame { center, axes };
                        if self.lists {
                            let codes = self
                                .sample_codes(&frame, count)
                                .map_err(|e| format!("reading vectors back from disk: {e}"))?;
                            let Some(codes) = codes else {
                                return Ok(());
                            };
                            let trained = Lists::train(&codes, frame.dims(self.dim), count);
                            Ann::with_lists(self.dim, &self.build, frame, trained)?
                        } else {
                            Ann::new(self.dim, &self.build, PARAMS, frame)?
                        }
                    }
                };
                let ann = Arc::new(ann);
                let mut state = lock(&self.slot.state);
                if state.build != self.build {
                    return Ok(());
                }
                state.saved = ann.rows();
                state.ann = Some(ann.clone());
                ann
            }
        };
        loop {
            if self.slot.stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            let chunk: Vec<i8> = {
                let Some(mirror) = self.mirror() else {
                    return Ok(());
                };
                let docs = read(&mirror);
                if docs.build != self.build {
                    return Ok(());
                }
                let from = ann.rows();
                let to = docs.vectors.len().min(from + CHUNK);
                ann.linked_rows(&docs.vectors, from, to)
                    .map_err(|e| format!("reading vectors back from disk: {e}"))?
            };
            if chunk.is_empty() {
                break;
            }
            let pace = Pace {
                slot: Some(&self.slot),
            };
            let added = ann.add(&chunk, &pace);
            // The pages faulted in from here on (a new arena of usearch's, the mirror
            // grown) are huge; what one chunk touched before stays small.
            if self.huge_pages {
                super::huge::advise(false);
            }
            if let Err(e) = added {
                // Some of the chunk may be in: the graph goes, and the next step starts
                // another from the mirror (a dropped shard's goes with it; its file holds
                // what was saved).
                let mut state = lock(&self.slot.state);
                if state.ann.as_ref().is_some_and(|a| Arc::ptr_eq(a, &ann)) {
                    state.ann = None;
                }
                return if e == STOPPED { Ok(()) } else { Err(e) };
            }
            // A long build (a large shard's first) is saved as it doubles, so a process
            // stopped meanwhile keeps most of the work.
            let saved = lock(&self.slot.state).saved;
            self.save_past(&ann, (2 * saved).max(saved + SAVE_EVERY))?;
        }
        // Saved when it grew by an eighth since the file was written (or there is none),
        // so that saving costs a bounded share of building.
        let saved = lock(&self.slot.state).saved;
        self.save_past(&ann, saved + saved / 8)?;
        // Caught up: the rows it covers need no one-bit codes (the lists only).
        if lock(&self.slot.state)
            .ann
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(a, &ann))
        {
            self.drop_covered_codes(&ann);
        }
        Ok(())
    }

    /// The codes in `frame` of [`ivf::SAMPLE_PER_LIST`] rows per list of `lists`, spread
    /// evenly over the mirror (all of them when it has fewer), to train the lists on; made
    /// [`CHUNK`] rows at a time under the mirror's read lock, so that writes wait for no
    /// more than a chunk, and so that only the codes are held (64 bytes a row, not the
    /// vectors' 1 KiB). `None` when the shard's build changed meanwhile.
    fn sample_codes(&self, frame: &Frame, lists: usize) -> io::Result<Option<Vec<i8>>> {
        let Some(len) = self.mirror().map(|m| read(&m).vectors.len()) else {
            return Ok(None);
        };
        let n = (lists * ivf::SAMPLE_PER_LIST).min(len);
        let mut codes = Vec::with_capacity(n * frame.dims(self.dim));
        let mut v = vec![0f32; self.dim];
        for first in (0..n).step_by(CHUNK) {
            let Some(mirror) = self.mirror() else {
                return Ok(None);
            };
            let docs = read(&mirror);
            if docs.build != self.build {
                return Ok(None);
            }
            for i in first..(first + CHUNK).min(n) {
                docs.vectors.vector_into(i * len / n, &mut v)?;
                codes.extend_from_slice(frame.linked(&v).values());
            }
        }
        Ok(Some(codes))
    }

    /// Saves the graph if it holds more than `rows` rows and still belongs to the shard.
    fn save_past(&self, ann: &Ann, rows: usize) -> Result<(), String> {
        let now = ann.rows();
        if now == 0 || now <= rows {
            return Ok(());
        }
        let last_id = {
            let Some(mirror) = self.mirror() else {
                return Ok(());
            };
            let docs = read(&mirror);
            if docs.build != self.build {
                return Ok(());
            }
            docs.ids[now - 1]
        };
        ann.save(&self.path, &self.embedder, last_id, || {
            // The shard file's own build too: another process may have erased since. (Read
            // before taking the slot, which searches take.)
            let file_current = self.file_build().as_deref() == Some(self.build.as_str());
            let mut state = lock(&self.slot.state);
            let keep = file_current && state.build == self.build;
            if keep {
                state.saved = now;
            }
            keep
        })
        .map_err(|e| format!("saving it: {e}"))?;
        if !self.current() {
            // An erasure came between the check and the rename: this file is stale.
            let _ = fs::remove_file(&self.path);
        }
        Ok(())
    }
}

impl Shard {
    /// Keeps the shard's graph in step with its mirror (called after every catch-up that
    /// changed something, and when the shard opens): a new build (an erasure's, a
    /// rebuild's) drops the graph and deletes its file; a shard of at least
    /// [`IndexConfig::ann_min`](super::IndexConfig::ann_min) vectors gets its graph read
    /// from the file or built, then extended with the rows after it, in the background
    /// (or here, without [`IndexConfig::ann_background`](super::IndexConfig::ann_background)).
    /// Builds the graph up to the shard's last vector and waits for it, for a benchmark
    /// that times searches on a built graph (searches themselves never wait: they scan
    /// the rows the graph has not reached). Returns how many rows the graph holds (0
    /// for a shard too small for one, or without a model).
    pub(crate) fn settle_ann(&self) -> usize {
        let mut last = usize::MAX;
        loop {
            self.keep_ann();
            self.ann.wait();
            let len = self.read_docs().vectors.len();
            let rows = lock(&self.ann.state).ann.as_ref().map_or(0, |a| a.rows());
            // Done, too small for a graph, or no step forward (a failed build is logged).
            if rows >= len || len < self.config.ann_min || rows == last {
                return rows;
            }
            // Below a background step the last rows stay scanned until more arrive.
            if self.config.ann_background && len - rows < STEP_ROWS {
                return rows;
            }
            last = rows;
        }
    }

    pub(crate) fn keep_ann(&self) {
        let Some(embedder) = &self.embedder else {
            return;
        };
        let (build, len) = {
            let docs = self.read_docs();
            (docs.build.clone(), docs.vectors.len())
        };
        let path = ann_path(&self.path);
        {
            let mut state = lock(&self.ann.state);
            if state.build != build {
                // The graph may hold vectors this build no longer has (an erasure's): it
                // goes, and so does a file made for another build.
                state.build.clone_from(&build);
                state.ann = None;
                state.saved = 0;
                let saved = path.exists();
                if saved && peek_build(&path).is_none_or(|b| b != build) {
                    let _ = fs::remove_file(&path);
                }
                // Only a shard large enough for a graph ever had one being written.
                if saved || len >= self.config.ann_min {
                    remove_leftovers(&path);
                }
            }
            if len < self.config.ann_min || build.is_empty() {
                return;
            }
            // The builder may have gone past `len` since it was read.
            let behind = len.saturating_sub(state.ann.as_ref().map_or(0, |a| a.rows()));
            let step = if self.config.ann_background {
                STEP_ROWS
            } else {
                1
            };
            if state.ann.is_some() && behind < step {
                return;
            }
        }
        let mut builder = lock(&self.ann.builder);
        if builder.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        if let Some(done) = builder.take() {
            let _ = done.join();
        }
        let job = Build {
            slot: self.ann.clone(),
            docs: Arc::downgrade(&self.docs),
            shard: self.path.clone(),
            path,
            embedder: embedder.id().to_owned(),
            dim: embedder.dim(),
            build,
            huge_pages: self.config.huge_pages,
            lists: self.config.ann_lists,
        };
        if self.config.ann_background {
            job.read_saved();
            // A saved index that covers the shard leaves the builder nothing to do, and a
            // builder waiting for a core would keep it alive past the shard's eviction.
            let covered = lock(&self.ann.state).ann.as_ref().map_or(0, |a| a.rows());
            if covered > 0 && len.saturating_sub(covered) < STEP_ROWS {
                return;
            }
            match std::thread::Builder::new()
                .name("memtape-ann".into())
                .spawn(move || {
                    lower_priority();
                    job.run();
                }) {
                Ok(handle) => *builder = Some(handle),
                Err(e) => tracing::warn!("cannot start building an approximate index: {e}"),
            }
        } else {
            // Under the builder's lock, so one thread at a time adds to the graph.
            job.run();
        }
    }

    /// The bytes the shard's graph holds in memory.
    pub(crate) fn ann_memory(&self) -> usize {
        lock(&self.ann.state).ann.as_ref().map_or(0, |a| a.memory())
    }

    /// The candidates a graph search of `rows` rows asks for, for `k` results: the count
    /// set while serving, else the configuration's and one per [`ROWS_PER_CANDIDATE`] rows,
    /// whichever is more; never fewer than `k` times the oversampling.
    fn ann_count(&self, k: usize, rows: usize) -> usize {
        let wanted = match self.graphs.candidates.load(Ordering::Relaxed) {
            0 => self.config.ann_candidates_for(rows),
            set => set,
        };
        wanted.max(k * OVERSAMPLE)
    }

    /// The rows a lists search of `rows` rows for `count` candidates scans:
    /// [`SCAN_PER_CANDIDATE`] per candidate, and at least [`SCAN_SHARE`] of the rows unless
    /// a count was set while serving (which then decides alone, as `bench scale`'s sweep
    /// needs).
    fn ann_scan(&self, count: usize, rows: usize) -> usize {
        let per_candidate = count.saturating_mul(SCAN_PER_CANDIDATE);
        match self.graphs.candidates.load(Ordering::Relaxed) {
            0 => per_candidate.max((rows as f64 * SCAN_SHARE) as usize),
            _ => per_candidate,
        }
    }

    /// The `k` rows of `docs` nearest `query` among those `allowed` admits, best first, with
    /// their 8-bit cosines: through the graph where it applies (see the module's
    /// documentation), else as [`Vectors::search`](crate::vectors::Vectors::search) does.
    pub(super) fn vector_search(
        &self,
        docs: &Docs,
        query: &[f32],
        k: usize,
        exact: bool,
        allowed: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<(usize, f32)>, crate::Error> {
        let limit = if exact {
            usize::MAX
        } else {
            self.config.exact_limit
        };
        let candidates = self.config.oversample * ONE_BIT_HITS;
        let q = quantize(query);
        let len = docs.vectors.len();
        let ann = (!exact && len >= self.config.ann_min)
            .then(|| self.ann.current(&docs.build))
            .flatten();
        let rows = ann.as_ref().map_or(0, |a| a.rows().min(len));
        let wide = |rows: usize| {
            let share = admitted(rows, allowed);
            share >= MIN_ADMITTED && share * rows as f64 >= self.config.ann_min as f64 / 2.0
        };
        let rest = |first: usize| {
            docs.vectors
                .search_from(first, &q, k, limit, candidates, allowed)
                .map_err(crate::Error::VectorsOnDisk)
        };
        let Some(ann) = ann.filter(|_| rows > 0) else {
            return rest(0);
        };
        // A filter that admits few rows scans them here, unless the lists cover rows that
        // no longer have one-bit codes: then the lists are scanned whole, with the filter.
        let whole = !wide(rows);
        if whole && !(ann.is_lists() && docs.vectors.coded_from() > 0) {
            return rest(0);
        }
        let count = self.ann_count(k, rows);
        let scan = if whole {
            usize::MAX
        } else {
            self.ann_scan(count, rows)
        };
        let found = match ann.search(query, count, scan, rows, allowed) {
            Ok(found) => found,
            Err(e) => {
                self.graphs.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("approximate vector search failed ({e}); scanning instead");
                return rest(0);
            }
        };
        self.graphs.searches.fetch_add(1, Ordering::Relaxed);
        // Rescored in row order: rows read back from disk are then read front to back.
        let mut found = found;
        found.sort_unstable();
        let mut scored = Vec::with_capacity(found.len());
        for r in found {
            let score = docs
                .vectors
                .score(r, &q)
                .map_err(crate::Error::VectorsOnDisk)?;
            scored.push((r, score));
        }
        let tail = rest(rows)?;
        Ok(top_k(k, scored.into_iter().chain(tail)))
    }
}

/// Gives the calling thread (a graph's builder) the lowest priority short of idle: on
/// Linux the batch policy at nice 19, so appends and searches come first on a busy
/// machine, yet the builder is never starved while it holds the mirror's read lock for a
/// chunk's copy (an idle-policy thread could be, and hold up a catch-up waiting to write).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    let lowered = thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        thread_priority::ThreadPriority::Min,
        thread_priority::ThreadSchedulePolicy::Normal(
            thread_priority::NormalThreadSchedulePolicy::Batch,
        ),
    );
    #[cfg(not(target_os = "linux"))]
    let lowered =
        thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min);
    if let Err(e) = lowered {
        tracing::debug!("could not lower the graph builder's priority: {e:?}");
    }
}

/// Rows a new graph's centre is the mean of, at most, spread evenly over the shard (the
/// mean of the first 10,000 of a million documents had cosine 0.99997 with the whole
/// one's), so that taking it under the mirror's read lock stays short.
const MEAN_ROWS: usize = 100_000;

/// The mean of the vectors `vectors` holds, over at most [`MEAN_ROWS`] rows spread evenly
/// (zeros for none): a new graph's centre.
fn mean(vectors: &Vectors) -> io::Result<Vec<f32>> {
    let mut sum = vec![0f64; vectors.dim()];
    let mut v = vec![0f32; vectors.dim()];
    let n = vectors.len().min(MEAN_ROWS);
    for i in 0..n {
        vectors.vector_into(i * vectors.len() / n, &mut v)?;
        for (s, x) in sum.iter_mut().zip(&v) {
            *s += f64::from(*x);
        }
    }
    Ok(sum
        .into_iter()
        .map(|s| (s / n.max(1) as f64) as f32)
        .collect())
}

/// Up to `n` rows of `vectors` spread evenly over them, as floats, one after another.
fn sample(vectors: &Vectors, n: usize) -> io::Result<Vec<f32>> {
    let rows = vectors.len().min(n);
    let mut out = vec![0f32; rows * vectors.dim()];
    for (i, v) in out.chunks_exact_mut(vectors.dim().max(1)).enumerate() {
        vectors.vector_into(i * vectors.len() / rows, v)?;
    }
    Ok(out)
}

/// The first `k` principal axes of the `sample` rows less `center` (their covariance's
/// eigenvectors of the largest eigenvalues), each `center.len()` long, one after another;
/// none when the vectors have no more than `k` dimensions (they are linked whole).
fn principal_axes(sample: &[f32], center: &[f32], k: usize) -> Vec<f32> {
    let dim = center.len();
    if dim <= k || sample.is_empty() {
        return Vec::new();
    }
    let mut covariance = nalgebra::DMatrix::<f64>::zeros(dim, dim);
    let mut x = nalgebra::DVector::<f64>::zeros(dim);
    let rows = sample.len() / dim;
    for row in sample.chunks_exact(dim) {
        for (xi, (v, c)) in x.iter_mut().zip(row.iter().zip(center)) {
            *xi = f64::from(v - c);
        }
        covariance.syger(1.0, &x, &x, 1.0);
    }
    // `syger` fills the lower triangle, which is all the decomposition reads.
    let eigen = nalgebra::SymmetricEigen::new(covariance / rows as f64);
    let mut order: Vec<usize> = (0..dim).collect();
    order.sort_by(|&a, &b| eigen.eigenvalues[b].total_cmp(&eigen.eigenvalues[a]));
    order
        .into_iter()
        .take(k)
        .flat_map(|j| {
            eigen
                .eigenvectors
                .column(j)
                .iter()
                .map(|&a| a as f32)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The share of rows `0..rows` that `allowed` admits, estimated on [`SAMPLE`] rows spread
/// evenly over them.
fn admitted(rows: usize, allowed: &dyn Fn(usize) -> bool) -> f64 {
    let n = SAMPLE.min(rows);
    let hits = (0..n).filter(|i| allowed(i * rows / n)).count();
    hits as f64 / n as f64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::time::Instant;

    use chrono::{DateTime, Duration, Utc};
    use memtape_core::{Message, NewEntry, Payload, Scope};
    use memtape_store::{SqliteStore, Store};

    use super::*;
    use crate::index::{IndexConfig, ShardSpec};
    use crate::vectors::{Vectors, dot};
    use crate::{EmbedError, Embedder};

    #[test]
    fn the_builder_yields_to_writes_and_stops_when_the_shard_goes() {
        let slot = Arc::new(AnnSlot::default());
        let pace = Pace { slot: Some(&slot) };
        // Not written: an adder goes on whatever it did.
        let mut turn = Turn {
            since: Instant::now(),
            worked: std::time::Duration::from_millis(900),
        };
        assert!(pace.wait(&mut turn));
        assert_eq!(
            turn.worked,
            std::time::Duration::from_millis(900),
            "no new window"
        );
        // Written all along: an adder that worked 50 ms waits until that is a tenth of
        // the time.
        slot.written();
        let writer = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                for _ in 0..40 {
                    slot.written();
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            })
        };
        let started = Instant::now();
        let mut turn = Turn {
            since: started,
            worked: std::time::Duration::from_millis(50),
        };
        assert!(pace.wait(&mut turn));
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(490),
            "waited {waited:?}"
        );
        // A dropped shard's adder stops instead of waiting.
        slot.stop();
        let mut turn = Turn {
            since: Instant::now(),
            worked: std::time::Duration::from_millis(900),
        };
        assert!(!pace.wait(&mut turn));
        writer.join().unwrap();
    }

    /// Adds every row of `vectors` to the empty graph `ann`, then gives the share of each
    /// query's exact top 10 (by the 8-bit scan) found among `candidates` from the graph,
    /// rescored, over `queries`.
    fn graph_recall(ann: &Ann, vectors: &Vectors, queries: &[Vec<f32>], candidates: usize) -> f64 {
        let n = vectors.len();
        ann.add(&ann.linked_rows(vectors, 0, n).unwrap(), &Pace::FULL)
            .unwrap();
        let mut found = 0;
        for q in queries {
            let exact = vectors
                .search_from(0, &quantize(q), 10, usize::MAX, 0, |_| true)
                .unwrap();
            let got = ann.search(q, candidates, 0, n, &|_| true).unwrap();
            let got = top_k(
                10,
                got.into_iter()
                    .map(|r| (r, vectors.score(r, &quantize(q)).unwrap())),
            );
            found += got
                .iter()
                .filter(|(r, _)| exact.iter().any(|(e, _)| e == r))
                .count();
        }
        found as f64 / (10 * queries.len()) as f64
    }

    /// Vectors in a narrow cone (a large common part, as mean-pooled sentence vectors
    /// have) searched with queries from outside it: a graph linking them raw loses its
    /// way, one linking them centred finds the exact top 10.
    #[test]
    fn a_graph_of_centred_vectors_finds_the_neighbours_of_queries_outside_the_cone() {
        let (dim, n, queries) = (64, 20_000, 50);
        let mut rng = fastrand::Rng::with_seed(11);
        let common: Vec<f32> = (0..dim).map(|_| gaussian_ish(&mut rng)).collect();
        let unit = |v: Vec<f32>| {
            let norm = dot(&v, &v).sqrt();
            v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
        };
        let mut vectors = Vectors::new(dim);
        for _ in 0..n {
            let v = common
                .iter()
                .map(|c| 4.0 * c + gaussian_ish(&mut rng))
                .collect();
            vectors.push(&quantize(&unit(v)));
        }
        let qs: Vec<Vec<f32>> = (0..queries)
            .map(|_| unit((0..dim).map(|_| gaussian_ish(&mut rng)).collect()))
            .collect();
        let recall = |center: Vec<f32>| {
            let frame = Frame {
                center,
                axes: Vec::new(),
            };
            let ann = Ann::new(dim, "b", PARAMS, frame).unwrap();
            // M 16 needs a wider walk than 200 on these nearly uniform vectors.
            graph_recall(&ann, &vectors, &qs, 400)
        };
        let centred = recall(mean(&vectors).unwrap());
        let raw = recall(vec![0.0; dim]);
        println!("recall@10 from 400 candidates: centred {centred:.3}, raw {raw:.3}");
        assert!(centred >= 0.95, "centred {centred}");
        assert!(raw < centred - 0.1, "raw {raw}, centred {centred}");
    }

    fn gaussian_ish(rng: &mut fastrand::Rng) -> f32 {
        (0..4).map(|_| rng.f32()).sum::<f32>() - 2.0
    }

    /// A point near one of `clusters` centres (the same for a seed): clustered data, as
    /// real embeddings are.
    fn clustered(dim: usize, clusters: u64, noise: f32, seed: u64) -> Vec<f32> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut centre = fastrand::Rng::with_seed(rng.u64(0..clusters));
        let v: Vec<f32> = (0..dim)
            .map(|_| gaussian_ish(&mut centre) + noise * gaussian_ish(&mut rng))
            .collect();
        let n = dot(&v, &v).sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    struct Seeds;

    impl Embedder for Seeds {
        fn id(&self) -> &str {
            "test-seeds-32"
        }
        fn dim(&self) -> usize {
            32
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(texts
                .iter()
                .map(|t| clustered(32, 50, 0.5, t.trim_start_matches('v').parse().unwrap_or(0)))
                .collect())
        }
    }

    fn append(store: &SqliteStore, from: u64, to: u64) {
        append_at(store, from, to, 20_000);
    }

    fn append_at(store: &SqliteStore, from: u64, to: u64, day: i64) {
        let scope = Scope::agent("acme", "bot").unwrap();
        let at = DateTime::<Utc>::UNIX_EPOCH + Duration::days(day);
        let batch = (from..to)
            .map(|i| {
                NewEntry::new(
                    scope.clone(),
                    Payload::Message(Message::user(format!("v{i}"))),
                    at,
                )
            })
            .collect();
        store.append(batch).unwrap();
    }

    fn shard(path: &Path) -> Shard {
        shard_of(path, false)
    }

    /// A shard whose approximate index is a graph, or with `lists` inverted lists.
    fn shard_of(path: &Path, lists: bool) -> Shard {
        shard_with_room(path, lists, &|_| {})
    }

    /// [`shard_of`], telling `room` what it will hold as it opens.
    fn shard_with_room(path: &Path, lists: bool, room: &dyn Fn(u64)) -> Shard {
        let spec = ShardSpec {
            embedder: Some(Arc::new(Seeds)),
            config: IndexConfig {
                ann_min: 1_000,
                ann_background: false,
                ann_lists: lists,
                ..IndexConfig::plain()
            },
            queries: Arc::default(),
            graphs: Arc::default(),
        };
        Shard::open(path, "acme", &spec, false, room).unwrap()
    }

    #[test]
    fn a_graph_search_asks_for_the_set_count_else_the_floor_or_one_per_2500_rows() {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(&dir.path().join("shard.db"));
        let floor = shard.config.ann_candidates;
        // The default rule: the configured floor, one per 2,500 rows above it, and never
        // fewer than the oversampled request.
        assert_eq!(shard.ann_count(10, 1_000_000), floor.max(400));
        assert_eq!(shard.ann_count(10, 10_000_000), 4_000.max(floor));
        assert_eq!(shard.ann_count(1_000, 1_000), 4_000);
        // A count set while serving replaces the rule in every shard sharing the counts,
        // above the oversampled request still; 0 goes back to the rule.
        shard.graphs.candidates.store(500, Ordering::Relaxed);
        assert_eq!(shard.ann_count(10, 10_000_000), 500);
        assert_eq!(shard.ann_count(200, 10_000_000), 800);
        shard.graphs.candidates.store(0, Ordering::Relaxed);
        assert_eq!(shard.ann_count(10, 10_000_000), 4_000.max(floor));
        // Lists scan 100 rows per candidate and at least 15% of the rows, unless a count
        // was set: then the count alone decides.
        assert_eq!(shard.ann_scan(2_000, 1_000_000), 200_000);
        assert_eq!(shard.ann_scan(4_000, 10_000_000), 1_500_000);
        shard.graphs.candidates.store(4_000, Ordering::Relaxed);
        assert_eq!(shard.ann_scan(4_000, 10_000_000), 400_000);
    }

    /// A lists builder for `shard` (whose file is `path`), as `keep_ann` makes one.
    fn lists_builder(shard: &Shard, path: &Path) -> Build {
        Build {
            slot: shard.ann.clone(),
            docs: Arc::downgrade(&shard.docs),
            shard: path.to_owned(),
            path: ann_path(path),
            embedder: shard.embedder_id().to_owned(),
            dim: Seeds.dim(),
            build: shard.read_docs().build.clone(),
            huge_pages: false,
            lists: true,
        }
    }

    /// A builder waiting for its turn (a low-priority thread on a busy machine) must not
    /// keep an evicted shard's mirror in memory: the mirror goes with the shard.
    #[test]
    fn a_builder_does_not_keep_its_shards_mirror() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
        let path = dir.path().join("shard.db");
        append(&store, 0, 900);
        let shard = shard_of(&path, true);
        shard.catch_up(&store).unwrap();
        let job = lists_builder(&shard, &path);
        let mirror = job.docs.clone();
        assert!(mirror.upgrade().is_some());
        drop(shard);
        assert!(
            mirror.upgrade().is_none(),
            "the mirror is gone before its builder runs"
        );
        let slot = job.slot.clone();
        job.run();
        assert!(lock(&slot.state).ann.is_none(), "and it builds nothing");
        assert!(!ann_path(&path).exists());
        // A saved file is kept when its shard goes before the builder reads it (the rows
        // it covers cannot be checked then, which is not the file's fault).
        append(&store, 900, 3_000);
        let shard = shard_of(&path, true);
        shard.catch_up(&store).unwrap();
        assert!(ann_path(&path).exists());
        let saved = std::fs::read(ann_path(&path)).unwrap();
        let shard = {
            // Opened again: nothing read yet (the build below is this one's).
            drop(shard);
            shard_of(&path, true)
        };
        lock(&shard.ann.state).ann = None;
        let job = lists_builder(&shard, &path);
        drop(shard);
        job.run();
        assert_eq!(std::fs::read(ann_path(&path)).unwrap(), saved);
    }

    #[test]
    fn a_shard_reads_its_saved_graph_and_extends_it_instead_of_building_it_again() {
        for lists in [false, true] {
            reads_its_saved_index_and_extends_it(lists);
        }
    }

    fn reads_its_saved_index_and_extends_it(lists: bool) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
        let path = dir.path().join("shard.db");
        append(&store, 0, 900);
        let first = shard_of(&path, lists);
        first.catch_up(&store).unwrap();
        assert_eq!(first.ann.rows(), 0, "below ann_min: no graph");
        assert!(!ann_path(&path).exists());
        append(&store, 900, 3_000);
        first.catch_up(&store).unwrap();
        assert_eq!((first.ann.fresh(), first.ann.rows()), (1, 3_000));
        drop(first);
        // Reopened: read from its file, not built again; then extended by the new rows.
        // Before its documents and then its graph come in, it says how much they will
        // take (so an index can make room first).
        let told = std::cell::RefCell::new(Vec::new());
        let second = shard_with_room(&path, lists, &|bytes| told.borrow_mut().push(bytes));
        assert_eq!((second.ann.fresh(), second.ann.rows()), (0, 3_000));
        let told = told.into_inner();
        let saved = std::fs::metadata(ann_path(&path)).unwrap().len();
        let (mirror, graph) = (
            second.read_docs().memory() as u64,
            second.ann_memory() as u64,
        );
        assert_eq!(told.len(), 2, "{told:?}");
        // The documents as reserved (lists drop the one-bit codes their rows no longer
        // need once read), then the index as saved: about what lists hold in memory; a
        // graph holds more (its working memory for each thread, counted once it is in).
        assert!(
            told[0] >= mirror && told[0] <= mirror + 3_000 * 8,
            "{told:?} {mirror}"
        );
        assert_eq!(told[1], told[0] + saved);
        assert!(saved / 2 <= graph, "{saved} {graph}");
        assert!(!lists || graph <= saved * 2, "{saved} {graph}");
        append(&store, 3_000, 4_000);
        second.catch_up(&store).unwrap();
        assert_eq!((second.ann.fresh(), second.ann.rows()), (0, 4_000));
        assert!(second.memory() > second.ann_memory() as u64);
        assert!(second.ann_memory() > 4_000 * 32, "the graph is counted");
        // A background build ends with the same graph.
        drop(second);
        let spec = ShardSpec {
            embedder: Some(Arc::new(Seeds)),
            config: IndexConfig {
                ann_min: 1_000,
                ann_lists: lists,
                ..IndexConfig::plain()
            },
            queries: Arc::default(),
            graphs: Arc::default(),
        };
        let third = Shard::open(&path, "acme", &spec, false, &|_| {}).unwrap();
        third.ann.wait();
        assert_eq!((third.ann.fresh(), third.ann.rows()), (0, 4_000));
        let kind = lock(&third.ann.state).ann.as_ref().map(|a| a.is_lists());
        assert_eq!(kind, Some(lists), "the kind configured");
    }

    #[test]
    fn the_graph_answers_wide_searches_and_leaves_exact_and_selective_ones_to_the_scan() {
        for lists in [false, true] {
            answers_wide_searches_only(lists);
        }
    }

    fn answers_wide_searches_only(lists: bool) {
        use crate::{Mode, SearchFilter, SearchRequest};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::create(&dir.path().join("tape")).unwrap();
        append(&store, 0, 3_000);
        let shard = shard_of(&dir.path().join("shard.db"), lists);
        shard.catch_up(&store).unwrap();
        let wide = SearchRequest::new("v7", SearchFilter::tenant("acme")).mode(Mode::Vector);
        let graph = shard.search(&wide).unwrap();
        assert_eq!(shard.graphs.searches.load(Ordering::SeqCst), 1);
        let exact = shard
            .search(&SearchRequest {
                exact: true,
                ..wide.clone()
            })
            .unwrap();
        assert_eq!(
            shard.graphs.searches.load(Ordering::SeqCst),
            1,
            "an exact search scans"
        );
        assert_eq!(graph[0].id, exact[0].id);
        assert_eq!(graph[0].score, exact[0].score);
        // A filter admitting the last twentieth of the rows scans them; with lists, whose
        // rows keep no one-bit codes, the lists are scanned whole with the filter.
        let recent = SearchFilter {
            since: Some(DateTime::<Utc>::UNIX_EPOCH + Duration::days(20_001)),
            ..SearchFilter::tenant("acme")
        };
        append_at(&store, 3_000, 3_150, 20_001);
        shard.catch_up(&store).unwrap();
        let few = shard
            .search(&SearchRequest::new("v7", recent).mode(Mode::Vector))
            .unwrap();
        assert_eq!(
            shard.graphs.searches.load(Ordering::SeqCst),
            1 + u64::from(lists),
            "a selective filter scans (the lists, with lists)"
        );
        assert!(few.len() == 10 && few.iter().all(|h| h.id.0 > 3_000));
        // One admitting most rows goes through the graph, and keeps to what it admits.
        let older = SearchFilter {
            until: Some(DateTime::<Utc>::UNIX_EPOCH + Duration::days(20_001)),
            ..SearchFilter::tenant("acme")
        };
        let most = shard
            .search(&SearchRequest::new("v7", older).mode(Mode::Vector))
            .unwrap();
        assert_eq!(
            shard.graphs.searches.load(Ordering::SeqCst),
            2 + u64::from(lists),
            "a wide filter uses the graph"
        );
        assert!(!most.is_empty() && most.iter().all(|h| h.id.0 <= 3_000));
    }

    /// Vectors of 256 dimensions whose spread lies mostly in 24 directions: the graph
    /// links them on 64 principal axes, which are orthonormal, hold those directions, and
    /// let the walk find the exact top 10.
    #[test]
    fn a_graph_on_the_principal_axes_finds_the_neighbours_of_larger_vectors() {
        let (dim, n, queries, rank) = (256, 20_000, 50, 24);
        let mut rng = fastrand::Rng::with_seed(5);
        let common: Vec<f32> = (0..dim).map(|_| gaussian_ish(&mut rng)).collect();
        let basis: Vec<Vec<f32>> = (0..rank)
            .map(|_| (0..dim).map(|_| gaussian_ish(&mut rng)).collect())
            .collect();
        let draw = |rng: &mut fastrand::Rng, common_share: f32| -> Vec<f32> {
            let mut v: Vec<f32> = common.iter().map(|c| common_share * c).collect();
            for b in &basis {
                let w = gaussian_ish(rng);
                v.iter_mut().zip(b).for_each(|(x, y)| *x += w * y);
            }
            v.iter_mut().for_each(|x| *x += 0.3 * gaussian_ish(rng));
            let norm = dot(&v, &v).sqrt();
            v.into_iter().map(|x| x / norm).collect()
        };
        let mut vectors = Vectors::new(dim);
        for _ in 0..n {
            vectors.push(&quantize(&draw(&mut rng, 4.0)));
        }
        let qs: Vec<Vec<f32>> = (0..queries).map(|_| draw(&mut rng, 0.0)).collect();
        let center = mean(&vectors).unwrap();
        let axes = principal_axes(&sample(&vectors, AXES_ROWS).unwrap(), &center, PROJECTED);
        assert_eq!(axes.len(), PROJECTED * dim);
        for i in 0..PROJECTED {
            for j in 0..PROJECTED {
                let d = dot(&axes[i * dim..(i + 1) * dim], &axes[j * dim..(j + 1) * dim]);
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((d - want).abs() < 1e-3, "axes {i}, {j}: {d}");
            }
        }
        // The first axes hold the spread: a basis direction, less its common part, lies
        // almost wholly in their span.
        let b: Vec<f32> = basis[0].clone();
        let in_span: f32 = axes
            .chunks_exact(dim)
            .take(rank)
            .map(|a| dot(a, &b).powi(2))
            .sum::<f32>()
            / dot(&b, &b);
        assert!(
            in_span > 0.9,
            "{in_span} of a spread direction in the first axes"
        );
        let ann = Ann::new(dim, "b", PARAMS, Frame { center, axes }).unwrap();
        assert_eq!(ann.dims(), PROJECTED);
        let recall = graph_recall(&ann, &vectors, &qs, 200);
        println!("recall@10 from 200 candidates on {PROJECTED} axes: {recall:.3}");
        assert!(recall >= 0.95, "recall {recall}");
    }

    #[test]
    fn a_graph_file_is_used_only_by_the_shard_build_and_rows_it_was_made_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.ann");
        let dim = 16;
        let frame = Frame {
            center: vec![0.01; dim],
            axes: Vec::new(),
        };
        let ann = Ann::new(dim, "build-1", PARAMS, frame).unwrap();
        let rows: Vec<i8> = (0..dim * 100).map(|i| ((i * 7) % 255) as i8).collect();
        ann.add(&rows, &Pace::FULL).unwrap();
        assert!(
            Ann::load(&path, "build-1", "e", dim, false, |r| Some(r as u64))
                .unwrap()
                .is_none()
        );
        ann.save(&path, "e", 99, || true).unwrap();
        let loaded = Ann::load(&path, "build-1", "e", dim, false, |r| Some(r as u64))
            .unwrap()
            .unwrap();
        assert_eq!(loaded.rows(), 100);
        assert!(Ann::load(&path, "build-2", "e", dim, false, |r| Some(r as u64)).is_err());
        assert!(Ann::load(&path, "build-1", "other", dim, false, |r| Some(r as u64)).is_err());
        assert!(Ann::load(&path, "build-1", "e", dim, false, |r| Some(r as u64 + 1)).is_err());
        assert!(Ann::load(&path, "build-1", "e", dim, false, |_| None).is_err());
        // A stamp whose checksum holds but whose centre is not one of `dim` values is
        // refused (the caller deletes the file and builds again).
        let crafted = dir.path().join("c.ann");
        ann.graph().save(&crafted.to_string_lossy()).unwrap();
        let stamp = Stamp {
            build: "build-1".into(),
            embedder: "e".into(),
            dim,
            connectivity: PARAMS.connectivity,
            rows: 100,
            last_id: 99,
            center: vec![0.5; dim + 1],
            axes: Vec::new(),
            projected: dim,
            lists: false,
        };
        append_trailer(&crafted, &stamp).unwrap();
        let refused = Ann::load(&crafted, "build-1", "e", dim, false, |r| Some(r as u64));
        assert!(refused.unwrap_err().contains("centre"));
        std::fs::remove_file(&crafted).unwrap();
        // So is one whose axes would put the queries in fewer dimensions than the graph
        // links (8 axes over a graph of all 16).
        ann.graph().save(&crafted.to_string_lossy()).unwrap();
        let stamp = Stamp {
            center: vec![0.5; dim],
            axes: vec![0.25; 8 * dim],
            ..stamp
        };
        append_trailer(&crafted, &stamp).unwrap();
        let refused = Ann::load(&crafted, "build-1", "e", dim, false, |r| Some(r as u64));
        assert!(refused.unwrap_err().contains("axes"));
        std::fs::remove_file(&crafted).unwrap();
        // A save refused (the shard's build changed meanwhile) leaves no file behind.
        let other = dir.path().join("h.ann");
        ann.save(&other, "e", 99, || false).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(peek_build(&path).as_deref(), Some("build-1"));
    }

    #[test]
    fn a_lists_file_is_read_back_whole_and_only_as_lists() {
        let dir = tempfile::tempdir().unwrap();
        let (path, graph_path) = (dir.path().join("l.ann"), dir.path().join("g.ann"));
        let dim = 16;
        let frame = Frame {
            center: vec![0.01; dim],
            axes: Vec::new(),
        };
        let rows: Vec<i8> = (0..dim * 300).map(|i| ((i * 7) % 255) as i8).collect();
        let ann =
            Ann::with_lists(dim, "build-1", frame.clone(), Lists::train(&rows, dim, 8)).unwrap();
        ann.add(&rows, &Pace::FULL).unwrap();
        assert_eq!(ann.rows(), 300);
        ann.save(&path, "e", 299, || true).unwrap();
        let id = |r: usize| Some(r as u64);
        let loaded = Ann::load(&path, "build-1", "e", dim, true, id)
            .unwrap()
            .unwrap();
        assert!(loaded.is_lists());
        assert_eq!(loaded.rows(), 300);
        let query: Vec<f32> = (0..dim).map(|i| (i as f32).sin()).collect();
        assert_eq!(
            loaded.search(&query, 20, 100, 300, &|_| true).unwrap(),
            ann.search(&query, 20, 100, 300, &|_| true).unwrap(),
            "the same lists answer the same"
        );
        // Not as a graph; and a graph's file not as lists.
        assert!(Ann::load(&path, "build-1", "e", dim, false, id).is_err());
        let graph = Ann::new(dim, "build-1", PARAMS, frame).unwrap();
        graph.add(&rows, &Pace::FULL).unwrap();
        graph.save(&graph_path, "e", 299, || true).unwrap();
        assert!(Ann::load(&graph_path, "build-1", "e", dim, true, id).is_err());
        // A body cut short under an intact-looking trailer is refused, not trusted.
        let whole = std::fs::read(&path).unwrap();
        let (stamp, body) = read_stamp(&path).unwrap();
        let crafted = dir.path().join("c.ann");
        std::fs::write(&crafted, &whole[..body as usize / 2]).unwrap();
        append_trailer(&crafted, &stamp).unwrap();
        assert!(Ann::load(&crafted, "build-1", "e", dim, true, id).is_err());
    }

    /// Reads a number from the environment, or `default`.
    fn env(name: &str, default: usize) -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// Measures the graph at scale on clustered synthetic vectors (WordLlama's 256
    /// dimensions by default): build time per vector, memory, query latency and recall@10
    /// against an exact 8-bit scan, for the parameters in [`PARAMS`] or those given.
    /// `ANN_N=1000000 cargo test --release -p memtape-search ann_at_scale -- --ignored
    /// --nocapture` (also `ANN_DIM`, `ANN_M`, `ANN_EFC`, `ANN_EFS`, `ANN_OVERSAMPLE`,
    /// `ANN_QUERIES`, `ANN_NOISE`, `ANN_CLUSTERS`, `ANN_B1=1` for a one-bit graph, `ANN_FILTER=n` for a filter admitting one row in n, `ANN_CENTER=0` for a graph of the raw vectors).
    #[test]
    #[ignore = "a benchmark: minutes at a million vectors"]
    fn ann_at_scale() {
        let n = env("ANN_N", 200_000);
        let dim = env("ANN_DIM", 256);
        let params = Params {
            connectivity: env("ANN_M", PARAMS.connectivity),
            expansion_add: env("ANN_EFC", PARAMS.expansion_add),
            expansion_search: env("ANN_EFS", PARAMS.expansion_search),
        };
        let oversample = env("ANN_OVERSAMPLE", OVERSAMPLE);
        let queries = env("ANN_QUERIES", 200);
        let clusters = env("ANN_CLUSTERS", 2_000) as u64;
        let noise = env("ANN_NOISE", 100) as f32 / 100.0;
        let b1 = env("ANN_B1", 0) == 1;
        // A filter admitting one row in this many (1 = all).
        let every = env("ANN_FILTER", 1);
        let admits = |r: usize| r.is_multiple_of(every);
        let mut vectors = Vectors::new(dim);
        for i in 0..n {
            vectors.push(&quantize(&clustered(dim, clusters, noise, i as u64)));
        }
        // The i8 graph goes through `Ann`, centred as the index's (`ANN_CENTER=0` links
        // the raw vectors).
        let center = if env("ANN_CENTER", 1) == 1 {
            mean(&vectors).unwrap()
        } else {
            vec![0.0; dim]
        };
        // Projected on the principal axes as the index's (`ANN_PROJECT=0` links the whole
        // vectors).
        let axes = if env("ANN_PROJECT", 1) == 1 {
            principal_axes(&sample(&vectors, AXES_ROWS).unwrap(), &center, PROJECTED)
        } else {
            Vec::new()
        };
        let ann = Ann::new(dim, "bench", params, Frame { center, axes }).unwrap();
        let started = Instant::now();
        let opts = IndexOptions {
            metric: if b1 {
                MetricKind::Hamming
            } else {
                MetricKind::Cos
            },
            quantization: if b1 { ScalarKind::B1 } else { ScalarKind::I8 },
            ..options(dim, params)
        };
        let index = usearch::Index::new(&opts).unwrap();
        if b1 {
            index.reserve(n).unwrap();
        }
        let bits = |row: &[i8]| -> Vec<u8> {
            row.chunks(8)
                .map(|c| {
                    c.iter()
                        .enumerate()
                        .fold(0u8, |b, (i, x)| b | (u8::from(*x > 0) << i))
                })
                .collect()
        };
        if b1 {
            for r in 0..n {
                index
                    .add(
                        r as u64,
                        usearch::b1x8::from_u8s(&bits(&vectors.row(r).unwrap())),
                    )
                    .unwrap();
            }
        } else {
            for from in (0..n).step_by(CHUNK) {
                let to = n.min(from + CHUNK);
                ann.add(&ann.linked_rows(&vectors, from, to).unwrap(), &Pace::FULL)
                    .unwrap();
            }
        }
        let build = started.elapsed().as_secs_f64();
        let k = 100;
        let (mut ms, mut exact_ms, mut recall) = (Vec::new(), Vec::new(), 0.0);
        for i in 0..queries {
            let query = clustered(dim, clusters, noise, 10_000_000_000 + i as u64);
            let q = quantize(&query);
            let started = Instant::now();
            let exact = vectors
                .search_from(0, &q, k, usize::MAX, 0, admits)
                .unwrap();
            exact_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            let started = Instant::now();
            let found: Vec<usize> = if b1 {
                index
                    .search(usearch::b1x8::from_u8s(&bits(q.values())), k * oversample)
                    .unwrap()
                    .keys
                    .iter()
                    .map(|r| *r as usize)
                    .collect()
            } else {
                ann.search(&query, k * oversample, 0, n, &admits).unwrap()
            };
            let got = top_k(
                k,
                found.iter().map(|r| (*r, vectors.score(*r, &q).unwrap())),
            );
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
            let top: Vec<usize> = exact.iter().take(10).map(|(r, _)| *r).collect();
            recall += got.iter().take(10).filter(|(r, _)| top.contains(r)).count() as f64 / 10.0;
        }
        let quantile = |v: &mut Vec<f64>, q: f64| {
            v.sort_by(f64::total_cmp);
            v[((v.len() - 1) as f64 * q) as usize]
        };
        println!(
            "ann_at_scale n={n} dim={dim} {} M={} efC={} efS={} oversample={oversample} clusters={clusters} noise={noise} filter=1/{every} simd={}: \
             build {:.1} s ({:.1} µs/vector), graph {:.0} MiB (vectors {:.0} MiB), \
             query p50/p95 {:.2}/{:.2} ms (exact scan {:.1}/{:.1} ms), recall@10 {:.3}",
            if b1 { "b1" } else { "i8" },
            params.connectivity,
            params.expansion_add,
            params.expansion_search,
            index.hardware_acceleration(),
            build,
            build * 1e6 / n as f64,
            if b1 {
                index.memory_usage()
            } else {
                ann.memory()
            } as f64
                / 1048576.0,
            vectors.memory() as f64 / 1048576.0,
            quantile(&mut ms, 0.5),
            quantile(&mut ms, 0.95),
            quantile(&mut exact_ms, 0.5),
            quantile(&mut exact_ms, 0.95),
            recall / queries as f64
        );
    }
}
