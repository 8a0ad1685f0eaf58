//! The search index: a projection of the tape kept in its own SQLite file (FTS5 for BM25,
//! vectors as blobs) and mirrored in memory for vector search and filters.
//!
//! The index records the last tape id it covers. [`Index::catch_up`] reads the tape after
//! that id and indexes it in batches, committing the documents and the new mark in one
//! transaction; so after a crash the index is never ahead of the tape and never silently
//! behind it: the next catch-up continues where the last commit stopped. Deleting the file
//! loses nothing: [`Index::rebuild`] reads the whole tape again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use chrono::{DateTime, Utc};
use memtape_core::{Entry, EntryId, Kind, Role, Scope};
use memtape_store::Store;
use rusqlite::{Connection, OpenFlags, params};

use crate::fusion::{self, List};
use crate::text::fts_query;
use crate::vectors::{Quantized, Vectors, quantize};
use crate::when::{self, Period};
use crate::{Embedder, Error, Fusion, Hit, Mode, SearchFilter, SearchRequest};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// "mtai": marks a SQLite file as a memtape search index.
const APPLICATION_ID: i64 = 0x6d74_6169;
/// The index file format; a file of another version is rebuilt, never guessed at.
const FORMAT_VERSION: i64 = 2;
/// How many tape entries one catch-up batch reads, embeds and commits.
const BATCH: usize = 256;
/// The name recorded for an index without vectors.
const NO_EMBEDDER: &str = "none";

const SCHEMA: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE scopes (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL, agent TEXT NOT NULL, user TEXT, session TEXT, node TEXT
);
CREATE TABLE docs (
    id INTEGER PRIMARY KEY,
    scope INTEGER NOT NULL REFERENCES scopes (id),
    kind TEXT NOT NULL,
    role TEXT,
    at INTEGER NOT NULL,
    vec BLOB
);
CREATE VIRTUAL TABLE fts USING fts5 (
    text, context, content = '', tokenize = 'porter unicode61 remove_diacritics 2'
);
";

/// Settings of the index.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexConfig {
    /// How hybrid search fuses its two lists.
    pub fusion: Fusion,
    /// How many candidates each retriever contributes to a hybrid search (at least the
    /// requested limit).
    pub candidates: usize,
    /// Up to this many vectors, vector search is exact; above it, one-bit codes pick
    /// candidates that are rescored exactly.
    pub exact_limit: usize,
    /// How many candidates per requested hit (counting at most 20 hits) the one-bit scan
    /// keeps for rescoring. A hybrid search's longer candidate list reuses the same pool:
    /// its tail matters little to the fused ranking.
    pub oversample: usize,
    /// The BM25 weight of a message's context (the message before it in its scope)
    /// relative to its own text; 0 searches the message's own text only.
    pub context_weight: f32,
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
    /// [`when::period`]): how much a hit inside that period gains (0 = dates in queries are
    /// plain words). Documents from that period are also searched on their own, so they
    /// become candidates even when other documents match the words better.
    pub time_weight: f32,
}

impl Default for IndexConfig {
    /// The best settings measured on the LoCoMo dev file (docs/benchmarks.md): weighted
    /// fusion leaning on BM25, the previous message as context, neighbour spreading, a
    /// small boost for hits in strongly matching sessions, and time-aware ranking.
    fn default() -> Self {
        IndexConfig {
            fusion: Fusion::Weighted { bm25_weight: 0.7 },
            candidates: 100,
            exact_limit: 20_000,
            oversample: 100,
            context_weight: 0.2,
            embed_context: false,
            neighbour_weight: 0.3,
            scope_weight: 0.1,
            time_weight: 0.5,
        }
    }
}

impl IndexConfig {
    /// Each retriever on its own terms: a document matches only by its own text, with no
    /// context, neighbours or session boost, and hybrid search is plain reciprocal rank
    /// fusion. Results are exactly the entries that match.
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
            ..IndexConfig::default()
        }
    }
}

/// What the index keeps in memory about one document.
#[derive(Clone, Copy, Debug)]
struct DocMeta {
    scope: u32,
    kind: Kind,
    role: Option<Role>,
    at: DateTime<Utc>,
}

/// The in-memory mirror of the index file.
#[derive(Debug)]
struct Docs {
    /// Entry ids by row, ascending (documents are added in tape order).
    ids: Vec<u64>,
    meta: Vec<DocMeta>,
    scopes: Vec<Scope>,
    scope_rows: HashMap<Scope, u32>,
    vectors: Vectors,
    covered: EntryId,
    /// For each row: the conversational rows just before and after it in its scope.
    neighbours: Vec<[Option<u32>; 2]>,
    /// The latest conversational row of each scope row.
    scope_tail: HashMap<u32, u32>,
}

impl Docs {
    /// Mirrors one committed document.
    fn push(&mut self, id: EntryId, meta: DocMeta, vector: Option<&Quantized>) {
        let row = self.ids.len() as u32;
        self.ids.push(id.0);
        let mut links = [None, None];
        if meta.kind.is_conversational()
            && let Some(prev) = self.scope_tail.insert(meta.scope, row)
        {
            links[0] = Some(prev);
            self.neighbours[prev as usize][1] = Some(row);
        }
        self.neighbours.push(links);
        self.meta.push(meta);
        if let Some(v) = vector {
            self.vectors.push(v);
        }
    }

    fn row_of(&self, id: u64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// Which scopes `filter` admits, by scope row.
    fn admitted_scopes(&self, filter: &SearchFilter) -> Vec<bool> {
        self.scopes.iter().map(|s| filter.admits_scope(s)).collect()
    }
}

/// A document about to be written.
struct NewDoc {
    id: EntryId,
    scope: Scope,
    kind: Kind,
    role: Option<Role>,
    at: DateTime<Utc>,
    text: String,
    /// The text of the conversational entry before this one in its scope ("" if none or
    /// if this is not a conversational entry).
    context: String,
}

impl NewDoc {
    fn from_entry(entry: &Entry) -> Option<NewDoc> {
        Some(NewDoc {
            id: entry.id,
            scope: entry.scope.clone(),
            kind: entry.kind(),
            role: entry.message().map(|m| m.role),
            at: entry.created_at,
            text: entry.payload.search_text()?,
            context: String::new(),
        })
    }
}

/// The search index. Cheap to share between threads: searches run concurrently, catch-ups
/// one at a time.
pub struct Index {
    path: PathBuf,
    embedder: Option<Arc<dyn Embedder>>,
    config: IndexConfig,
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    docs: RwLock<Docs>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("path", &self.path)
            .field("embedder", &self.embedder_id())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

impl Index {
    /// Opens the index at `path`, creating it if missing. `embedder` must be the one the
    /// index was built with (or `None` for a BM25-only index); otherwise this fails with
    /// [`Error::EmbedderChanged`] and the index must be rebuilt.
    pub fn open(
        path: &Path,
        embedder: Option<Arc<dyn Embedder>>,
        config: IndexConfig,
    ) -> Result<Index> {
        let mut writer = Connection::open(path)?;
        let unreadable = |why: String| Error::Unreadable {
            path: path.to_owned(),
            why,
        };
        // Identify the file before changing anything about it.
        let app: i64 = writer.pragma_query_value(None, "application_id", |r| r.get(0))?;
        let version: i64 = writer.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let tables: i64 =
            writer.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if tables > 0 && app != APPLICATION_ID {
            return Err(unreadable(format!("application id {app:#x}")));
        }
        if tables > 0 && version != FORMAT_VERSION {
            return Err(unreadable(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            )));
        }
        writer.pragma_update(None, "journal_mode", "WAL")?;
        writer.pragma_update(None, "synchronous", "NORMAL")?;
        let given = embedder
            .as_ref()
            .map_or(NO_EMBEDDER.to_owned(), |e| e.id().to_owned());
        if tables == 0 {
            // Schema, identity and first marks in one transaction: a crash leaves either
            // an empty file or a complete index.
            let tx = writer.transaction()?;
            tx.execute_batch(&format!(
                "{SCHEMA} PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {FORMAT_VERSION};"
            ))?;
            tx.execute(
                "INSERT INTO meta VALUES ('embedder', ?1), ('covered', '0')",
                [&given],
            )?;
            tx.commit()?;
        }
        let built: String =
            writer.query_row("SELECT value FROM meta WHERE key = 'embedder'", [], |r| {
                r.get(0)
            })?;
        if built != given {
            return Err(Error::EmbedderChanged {
                path: path.to_owned(),
                built,
                given,
            });
        }
        let reader = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let dim = embedder.as_ref().map_or(0, |e| e.dim());
        let docs = load(&writer, dim, path)?;
        Ok(Index {
            path: path.to_owned(),
            embedder,
            config,
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            docs: RwLock::new(docs),
        })
    }

    /// Deletes the index at `path` and opens a fresh, empty one; [`Index::catch_up`] then
    /// reads the whole tape into it.
    pub fn rebuild(
        path: &Path,
        embedder: Option<Arc<dyn Embedder>>,
        config: IndexConfig,
    ) -> Result<Index> {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            let file = PathBuf::from(file);
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Remove { path: file, source }),
            }
        }
        Index::open(path, embedder, config)
    }

    /// The index file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The embedder, if the index has vectors.
    pub fn embedder(&self) -> Option<Arc<dyn Embedder>> {
        self.embedder.clone()
    }

    /// The embedder's id, or "none".
    pub fn embedder_id(&self) -> &str {
        self.embedder.as_ref().map_or(NO_EMBEDDER, |e| e.id())
    }

    /// The settings.
    pub fn config(&self) -> IndexConfig {
        self.config
    }

    /// The last tape id the index covers: every entry up to it is indexed (or has nothing
    /// to index), none after it is.
    pub fn covered(&self) -> EntryId {
        self.read_docs().covered
    }

    /// How many documents the index holds.
    pub fn len(&self) -> usize {
        self.read_docs().ids.len()
    }

    /// Whether the index holds no document.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read_docs(&self) -> std::sync::RwLockReadGuard<'_, Docs> {
        self.docs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Indexes every tape entry after [`Index::covered`], in batches: a reader thread
    /// pages through the tape into a bounded queue while this thread embeds and commits,
    /// so memory stays bounded however far behind the index is. Returns how many
    /// documents were added.
    pub fn catch_up(&self, store: &dyn Store) -> Result<usize> {
        let mut writer = lock(&self.writer);
        let start = self.covered();
        if store.last_id()? <= start {
            return Ok(0);
        }
        let (tx, rx) = sync_channel::<Result<Vec<Entry>>>(2);
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut after = start;
                loop {
                    let page = store.entries_after(after, BATCH).map_err(Error::from);
                    let stop = match &page {
                        Ok(p) => p.is_empty(),
                        Err(_) => true,
                    };
                    if let Ok(p) = &page
                        && let Some(last) = p.last()
                    {
                        after = last.id;
                    }
                    if stop || tx.send(page).is_err() {
                        break;
                    }
                }
            });
            let mut added = 0;
            for page in rx {
                added += self.apply(store, &mut writer, &page?)?;
            }
            Ok(added)
        })
    }

    /// Fills in each conversational document's context: the text of the conversational
    /// entry before it in its scope, from this batch or, for a batch's first message of a
    /// scope, from the tape. So an index rebuilt from scratch and one caught up in pieces
    /// hold the same documents.
    fn add_context(&self, store: &dyn Store, entries: &[Entry], docs: &mut [NewDoc]) -> Result<()> {
        let mut last: HashMap<Scope, String> = HashMap::new();
        let mut doc_iter = docs.iter_mut().peekable();
        for entry in entries.iter().filter(|e| e.kind().is_conversational()) {
            // Documents come in entry order; an entry without text has none.
            let mut own = None;
            while let Some(doc) = doc_iter.next_if(|d| d.id <= entry.id) {
                if doc.id == entry.id {
                    own = Some(doc);
                }
            }
            let text = match own {
                Some(doc) => {
                    doc.context = match last.get(&entry.scope) {
                        Some(prev) => prev.clone(),
                        None => previous_text(store, entry)?,
                    };
                    doc.text.clone()
                }
                None => String::new(),
            };
            last.insert(entry.scope.clone(), text);
        }
        Ok(())
    }

    /// Embeds and commits one batch of entries, then mirrors it in memory.
    fn apply(&self, store: &dyn Store, conn: &mut Connection, entries: &[Entry]) -> Result<usize> {
        let Some(last) = entries.last().map(|e| e.id) else {
            return Ok(0);
        };
        let mut docs: Vec<NewDoc> = entries.iter().filter_map(NewDoc::from_entry).collect();
        self.add_context(store, entries, &mut docs)?;
        let inputs: Vec<Cow<'_, str>> = docs
            .iter()
            .map(
                |d| match (self.config.embed_context, d.context.is_empty()) {
                    (true, false) => Cow::Owned(format!("{}\n{}", d.context, d.text)),
                    _ => Cow::Borrowed(d.text.as_str()),
                },
            )
            .collect();
        let vectors = self
            .embed(&inputs.iter().map(|t| t.as_ref()).collect::<Vec<_>>())?
            .map(|vs| vs.iter().map(|v| quantize(v)).collect::<Vec<_>>());
        let mut state = self
            .docs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tx = conn.transaction()?;
        let mut new_scopes = Vec::new();
        {
            let mut scope_stmt =
                tx.prepare_cached("INSERT INTO scopes VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
            let mut doc_stmt =
                tx.prepare_cached("INSERT INTO docs VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
            let mut fts_stmt =
                tx.prepare_cached("INSERT INTO fts (rowid, text, context) VALUES (?1, ?2, ?3)")?;
            for (i, doc) in docs.iter().enumerate() {
                let scope_row = match state.scope_rows.get(&doc.scope) {
                    Some(row) => *row,
                    None => {
                        let row = (state.scopes.len() + new_scopes.len()) as u32;
                        let s = &doc.scope;
                        scope_stmt.execute(params![
                            row,
                            s.tenant(),
                            s.agent_name(),
                            s.user(),
                            s.session(),
                            s.node()
                        ])?;
                        state.scope_rows.insert(s.clone(), row);
                        new_scopes.push(s.clone());
                        row
                    }
                };
                let blob = vectors.as_ref().map(|v| v[i].to_bytes());
                let id = doc.id.0 as i64;
                doc_stmt.execute(params![
                    id,
                    scope_row,
                    doc.kind.as_str(),
                    doc.role.map(Role::as_str),
                    millis(doc.at),
                    blob
                ])?;
                fts_stmt.execute(params![id, doc.text, doc.context])?;
            }
            tx.execute(
                "UPDATE meta SET value = ?1 WHERE key = 'covered'",
                [last.0.to_string()],
            )?;
        }
        if let Err(e) = tx.commit() {
            new_scopes.iter().for_each(|s| {
                state.scope_rows.remove(s);
            });
            return Err(e.into());
        }
        state.scopes.extend(new_scopes);
        for (i, doc) in docs.iter().enumerate() {
            let scope = state.scope_rows[&doc.scope];
            let meta = DocMeta {
                scope,
                kind: doc.kind,
                role: doc.role,
                at: doc.at,
            };
            state.push(doc.id, meta, vectors.as_ref().map(|v| &v[i]));
        }
        state.covered = last;
        Ok(docs.len())
    }

    /// Embeds `texts` with the index's embedder, checking the shape of the answer.
    fn embed(&self, texts: &[&str]) -> Result<Option<Vec<Vec<f32>>>> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        if texts.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let out = embedder.embed(texts).map_err(Error::Embed)?;
        let dim = embedder.dim();
        if out.len() != texts.len() || out.iter().any(|v| v.len() != dim) {
            return Err(Error::BadEmbedding {
                embedder: embedder.id().to_owned(),
                want: texts.len(),
                got: out.len(),
                len: out.iter().map(Vec::len).find(|l| *l != dim).unwrap_or(dim),
                dim,
            });
        }
        Ok(Some(out))
    }

    /// Runs a search. The index answers from what it covers; call [`Index::catch_up`]
    /// first to include the latest appends.
    pub fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>> {
        if request.limit == 0 {
            return Ok(Vec::new());
        }
        let query_vector = match request.mode {
            Mode::Bm25 => None,
            Mode::Vector | Mode::Hybrid => {
                if self.embedder.is_none() {
                    return Err(Error::NoEmbedder(request.mode.as_str()));
                }
                self.embed(&[request.text.as_str()])?
                    .and_then(|mut v| v.pop())
            }
        };
        let depth = match request.mode {
            Mode::Hybrid => self.config.candidates.max(request.limit),
            _ => request.limit,
        };
        let docs = self.read_docs();
        let scopes = docs.admitted_scopes(&request.filter);
        let allowed = |row: usize| {
            let m = &docs.meta[row];
            scopes[m.scope as usize] && request.filter.admits(m.kind, m.role, m.at)
        };
        let period = (self.config.time_weight > 0.0)
            .then(|| when::period(&request.text))
            .flatten();
        let in_period = |row: usize| period.is_some_and(|p: Period| p.contains(docs.meta[row].at));
        // With a named period, its documents are searched on their own as well.
        let passes: &[&dyn Fn(usize) -> bool] = if period.is_some() {
            &[&allowed, &|row| allowed(row) && in_period(row)]
        } else {
            &[&allowed]
        };
        let mut bm25 = List::new();
        let mut vector = List::new();
        for pass in passes {
            if request.mode != Mode::Vector {
                bm25 = fusion::union(bm25, self.bm25(&docs, &request.text, depth, pass)?);
            }
            if let Some(q) = &query_vector {
                let found = docs.vectors.search(
                    q,
                    depth,
                    if request.exact {
                        usize::MAX
                    } else {
                        self.config.exact_limit
                    },
                    self.config.oversample * request.limit.min(20),
                    pass,
                );
                vector = fusion::union(vector, found);
            }
        }
        let mut hits = match request.mode {
            Mode::Bm25 => fusion::only_bm25(&bm25),
            Mode::Vector => fusion::only_vector(&vector),
            Mode::Hybrid => fusion::fuse(&bm25, &vector, self.config.fusion),
        };
        if self.config.neighbour_weight > 0.0 {
            hits = spread(&docs, hits, self.config.neighbour_weight, &allowed);
        }
        if self.config.scope_weight > 0.0 {
            hits = by_scope(&docs, hits, self.config.scope_weight);
        }
        if period.is_some() {
            for (row, hit) in hits.iter_mut() {
                if in_period(*row) {
                    hit.score += self.config.time_weight;
                }
            }
        }
        // The boosts above change scores only; the order is settled once, here.
        fusion::rank(&mut hits);

        hits.truncate(request.limit);
        Ok(hits
            .into_iter()
            .map(|(row, hit)| Hit {
                id: EntryId(docs.ids[row]),
                ..hit
            })
            .collect())
    }

    /// The best `depth` BM25 matches that pass `allowed`, as `(row, score)` with higher
    /// scores better.
    fn bm25(
        &self,
        docs: &Docs,
        text: &str,
        depth: usize,
        allowed: &impl Fn(usize) -> bool,
    ) -> Result<List> {
        let Some(query) = fts_query(text) else {
            return Ok(List::new());
        };
        let weight = self.config.context_weight;
        let (query, sql) = if weight > 0.0 {
            (
                query,
                format!(
                    "SELECT rowid, bm25(fts, 1.0, {weight}) AS s FROM fts WHERE fts MATCH ?1 ORDER BY s"
                ),
            )
        } else {
            (
                format!("text : ({query})"),
                "SELECT rowid, bm25(fts) AS s FROM fts WHERE fts MATCH ?1 ORDER BY s".to_owned(),
            )
        };
        let conn = lock(&self.reader);
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query([query])?;
        let mut out = List::new();
        while out.len() < depth {
            let Some(r) = rows.next()? else { break };
            let id: i64 = r.get(0)?;
            let score: f64 = r.get(1)?;
            // A document committed after this reader's snapshot of memory is skipped.
            if let Some(row) = docs.row_of(id as u64)
                && allowed(row)
            {
                out.push((row, -score as f32));
            }
        }
        Ok(out)
    }
}

/// Adds `weight` × the strength of each hit's scope (the sum of the scope's three best hit
/// scores) to the hit's score.
fn by_scope(docs: &Docs, mut hits: Vec<(usize, Hit)>, weight: f32) -> Vec<(usize, Hit)> {
    let mut best: HashMap<u32, Vec<f32>> = HashMap::new();
    for (row, hit) in &hits {
        best.entry(docs.meta[*row].scope)
            .or_default()
            .push(hit.score);
    }
    let strength: HashMap<u32, f32> = best
        .into_iter()
        .map(|(scope, mut scores)| {
            scores.sort_by(|a, b| b.total_cmp(a));
            (scope, scores.iter().take(3).sum())
        })
        .collect();
    for (row, hit) in hits.iter_mut() {
        hit.score += weight * strength[&docs.meta[*row].scope];
    }
    hits
}

/// The text of the conversational entry before `entry` in its scope, read from the tape
/// ("" when there is none).
fn previous_text(store: &dyn Store, entry: &Entry) -> Result<String> {
    let filter = memtape_core::Filter {
        before: Some(entry.id),
        kinds: Kind::ALL
            .into_iter()
            .filter(|k| k.is_conversational())
            .collect(),
        order: memtape_core::Order::Desc,
        limit: Some(1),
        ..Default::default()
    };
    let prev = store.scan(&entry.scope, &filter)?;
    Ok(prev
        .first()
        .and_then(|p| p.payload.search_text())
        .unwrap_or_default())
}

/// Lets each hit pass `weight` of its score to the conversational entries just before
/// and after it (which become candidates if they pass the filter).
fn spread(
    docs: &Docs,
    hits: Vec<(usize, Hit)>,
    weight: f32,
    allowed: &impl Fn(usize) -> bool,
) -> Vec<(usize, Hit)> {
    let base: HashMap<usize, f32> = hits.iter().map(|(r, h)| (*r, h.score)).collect();
    let near = |row: usize| {
        docs.neighbours[row]
            .into_iter()
            .flatten()
            .map(|n| n as usize)
    };
    let mut all: HashMap<usize, Hit> = hits.into_iter().collect();
    for &row in base.keys() {
        for n in near(row).filter(|n| allowed(*n)) {
            all.entry(n).or_insert(Hit {
                id: EntryId(0),
                score: 0.0,
                bm25: None,
                vector: None,
            });
        }
    }
    for (row, hit) in all.iter_mut() {
        let from_neighbours: f32 = near(*row).filter_map(|n| base.get(&n)).sum();
        hit.score = base.get(row).copied().unwrap_or(0.0) + weight * from_neighbours;
    }
    all.into_iter().collect()
}

/// Reads the index file into memory.
fn load(conn: &Connection, dim: usize, path: &Path) -> Result<Docs> {
    let bad = |why: String| Error::Unreadable {
        path: path.to_owned(),
        why,
    };
    let covered: String =
        conn.query_row("SELECT value FROM meta WHERE key = 'covered'", [], |r| {
            r.get(0)
        })?;
    let covered = EntryId(covered.parse().unwrap_or(0));
    let mut scopes = Vec::new();
    let mut stmt =
        conn.prepare("SELECT id, tenant, agent, user, session, node FROM scopes ORDER BY id")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let scope = Scope::from_parts(r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?);
        scopes.push(scope.map_err(|e| bad(e.to_string()))?);
    }
    let scope_rows = scopes
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as u32))
        .collect();
    let mut docs = Docs {
        ids: Vec::new(),
        meta: Vec::new(),
        scopes,
        scope_rows,
        vectors: Vectors::new(dim),
        covered,
        neighbours: Vec::new(),
        scope_tail: HashMap::new(),
    };
    let mut stmt = conn.prepare("SELECT id, scope, kind, role, at, vec FROM docs ORDER BY id")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let kind: String = r.get(2)?;
        let role: Option<String> = r.get(3)?;
        let at: i64 = r.get(4)?;
        let meta = DocMeta {
            scope: r.get(1)?,
            kind: kind
                .parse()
                .map_err(|e: memtape_core::Error| bad(e.to_string()))?,
            role: role
                .map(|r| r.parse())
                .transpose()
                .map_err(|e: memtape_core::Error| bad(e.to_string()))?,
            at: DateTime::from_timestamp_millis(at).unwrap_or_default(),
        };
        let vector = match (dim, r.get::<_, Option<Vec<u8>>>(5)?) {
            (0, _) => None,
            (_, Some(b)) => match Quantized::from_bytes(&b, dim) {
                Some(q) => Some(q),
                None => return Err(bad(format!("document {id} has no vector of length {dim}"))),
            },
            _ => return Err(bad(format!("document {id} has no vector of length {dim}"))),
        };
        docs.push(EntryId(id as u64), meta, vector.as_ref());
    }
    Ok(docs)
}
