//! The inverted index of a large shard: a tantivy index beside the shard file that picks a
//! BM25 query's candidates without scoring every match (block-max WAND), for the shard's
//! own BM25F ([`super::bm25`]) to rescore exactly.
//!
//! It is a projection of the tenant's tape like the shard file, kept in step after each
//! catch-up by [`Inverted::sync`]: the commit's payload records which shard state it
//! holds (the shard's origin, build and covered mark, [`Mark`]). A sync reads the
//! tenant's entries after its own mark from the store (FTS5 is contentless, so the text
//! comes from the tape) and replays the erasure receipts among them as the shard did;
//! one of another origin (the shard was rebuilt or recreated) starts again from nothing;
//! one ahead of the shard (the shard lost its last commits) drops what is ahead. Erased
//! documents are deleted by id, then the segments holding deletes are merged and the old
//! files collected, so the erased words leave the term dictionaries. Only one process
//! writes at a time: a sync that finds tantivy's writer lock held leaves the work to the
//! holder, and a search that finds the index behind its shard's mirror uses FTS5.
//!
//! The writer is kept open between syncs (tantivy indexes on a thread of its own and
//! merges on another), and what a sync adds is committed only once [`COMMIT_EVERY`]
//! documents wait, when a search is about to read the index, when something was deleted,
//! or when the shard is dropped: a catch-up waits neither for a commit nor for merges. A
//! process keeps tantivy's writer lock while its writer holds documents not committed
//! yet (and until the merges of a writer let go finish); another process's sync then
//! leaves the work to it, and that process's searches of the shard use FTS5 until the
//! holder's commit reaches its mirror.
//!
//! A catch-up that has just written a page's documents to the shard hands them over
//! ([`Handed`]): when they are exactly what lies between the index's state and the
//! shard's, the sync adds them without reading their entries again.
//!
//! Not done yet (issue 36): filtered searches and queries naming a period still score
//! every match through FTS5, so FTS5 is still written for a shard that has this index.

use std::collections::HashSet;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use memtape_core::EntryId;
use memtape_store::Store;
use serde::{Deserialize, Serialize};
use tantivy::collector::TopDocs;
use tantivy::index::SegmentId;
use tantivy::postings::Postings as _;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer,
    TextAnalyzer,
};
use tantivy::{
    DocSet, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError, Term,
};

use rusqlite::Connection;

use super::bm25::{Postings, read_cjk};
use super::catch_up::{erasure_affected, new_docs};
use super::{Docs, Shard, file, lock};
use crate::text::{cjk_query, query_words};
use crate::when;
use crate::{Error, Result, SearchFilter, SearchRequest};

/// The name the analyzer is registered under.
const ANALYZER: &str = "memtape";
/// Tokens longer than this many bytes are not indexed (FTS5 keeps them; they are never
/// what a query looks for, and tantivy refuses terms over 64 KiB).
const MAX_TOKEN: usize = 255;
/// How many tape entries a sync reads from the store at once.
const PAGE: usize = 1024;
/// Documents added are committed once this many wait (or when a search needs them, or an
/// erasure is among them, or the shard is dropped), so a long build keeps its progress
/// over a crash and the writer's memory stays bounded.
const COMMIT_EVERY: usize = 20_000;
/// The writer's memory budget (tantivy's minimum is 15 MB): it writes a segment when full.
const WRITER_MEMORY: usize = 32 << 20;

/// The shard state a commit holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Mark {
    /// The shard file's origin (a new one at each full rebuild or recreation).
    pub origin: String,
    /// The shard's build id (a new one at each erasure too).
    pub build: String,
    /// The shard's covered mark.
    pub covered: u64,
}

/// The index's fields.
#[derive(Clone, Copy, Debug)]
struct Fields {
    id: Field,
    text: Field,
    context: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let id = b.add_u64_field("id", INDEXED | FAST);
    let words = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let text = b.add_text_field("text", words.clone());
    let context = b.add_text_field("context", words);
    (b.build(), Fields { id, text, context })
}

/// An analyzer close to FTS5's `porter unicode61 remove_diacritics 2`: words split at
/// what is not a letter or digit, lowercased, folded to ASCII, stemmed (Snowball English).
fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The distinct terms the analyzer makes of `text`, in order.
pub(super) fn terms(text: &str) -> Vec<String> {
    let mut a = analyzer();
    let mut stream = a.token_stream(text);
    let mut out: Vec<String> = Vec::new();
    while stream.advance() {
        let t = &stream.token().text;
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

/// The folder of the inverted index of the shard file at `shard`: `<hash>.tantivy`.
pub(super) fn dir_for(shard: &Path) -> PathBuf {
    shard.with_extension("tantivy")
}

/// Removes the inverted index at `dir` (it is a projection: the next sync rebuilds it).
pub(super) fn remove(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Remove {
            path: dir.to_owned(),
            source,
        }),
    }
}

fn err(e: TantivyError) -> Error {
    Error::Inverted(e.to_string())
}

/// One shard's tantivy index.
pub(super) struct Inverted {
    dir: PathBuf,
    index: tantivy::Index,
    reader: IndexReader,
    fields: Fields,
    /// The mark the reader was last reloaded at.
    seen: Mutex<Option<Mark>>,
    /// The writer, kept between syncs while it holds documents not committed yet, with
    /// what it holds.
    writer: Mutex<Option<Kept>>,
    /// A writer being let go: it lets its merges finish on a thread of its own, and
    /// holds tantivy's writer lock until then.
    releasing: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A writer kept open: tantivy indexes added documents on its own thread and merges
/// segments on another, so a catch-up neither waits for a commit nor for merges.
struct Kept {
    writer: IndexWriter<TantivyDocument>,
    /// The shard state the writer holds, committed or not.
    added: Mark,
    /// The shard state of its last commit.
    committed: Mark,
    /// Documents added since the last commit.
    pending: usize,
}

impl Drop for Inverted {
    /// Commits what the kept writer holds (an evicted shard keeps its work); merges
    /// running are dropped (later commits start them again). A writer being let go
    /// ([`Inverted::release`]) is waited for, so the lock is free for other processes
    /// once the index is gone.
    fn drop(&mut self) {
        let kept = self
            .writer
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(kept) = kept.as_mut()
            && let Err(e) = commit(kept)
        {
            tracing::warn!("inverted index {}: {e}", self.dir.display());
        }
        let releasing = self
            .releasing
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(handle) = releasing.take() {
            let _ = handle.join();
        }
    }
}

/// Commits what `kept` holds, its mark as the payload, if it is not committed yet.
fn commit(kept: &mut Kept) -> Result<bool> {
    if kept.added == kept.committed {
        return Ok(false);
    }
    let payload = serde_json::to_string(&kept.added).map_err(|e| Error::Inverted(e.to_string()))?;
    let mut prepared = kept.writer.prepare_commit().map_err(err)?;
    prepared.set_payload(&payload);
    prepared.commit().map_err(err)?;
    kept.pending = 0;
    kept.committed = kept.added.clone();
    Ok(true)
}

impl std::fmt::Debug for Inverted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inverted").field("dir", &self.dir).finish()
    }
}

/// What the inverted index found for a query: the candidates' term frequencies per query
/// term, and each term's document frequency over the whole shard.
#[derive(Debug)]
pub(super) struct Found {
    /// The shard state searched.
    pub mark: Mark,
    /// For each query term: each candidate holding it, by entry id, with the term's
    /// frequency in its text and in its context.
    pub terms: Vec<Vec<(u64, [u32; 2])>>,
    /// For each query term: how many live documents hold it in a field that counts (the
    /// text, and the context when its weight is positive).
    pub df: Vec<f64>,
}

/// Documents a catch-up has just written to the shard, handed to the inverted index so
/// that its sync adds them as they are instead of reading their entries from the store
/// again ([`Shard::sync_inverted`]).
#[derive(Debug, Default)]
pub(super) struct Handed {
    /// The shard's covered mark before them.
    pub after: u64,
    /// The covered mark they bring the shard to.
    pub through: u64,
    /// Each document's id, text and context, in id order: every document of the tenant's
    /// entries after `after` up to `through`.
    pub docs: Vec<(EntryId, String, String)>,
}

impl Inverted {
    /// Opens the index at `dir`, creating it if missing; one that cannot be opened (of
    /// another schema, or broken) is removed and created anew, empty.
    pub(super) fn open(dir: &Path) -> Result<Inverted> {
        match Self::try_open(dir) {
            Ok(found) => Ok(found),
            Err(e) => {
                tracing::warn!(
                    "inverted index {}: {e}; rebuilding it from the tape",
                    dir.display()
                );
                remove(dir)?;
                Self::try_open(dir)
            }
        }
    }

    fn try_open(dir: &Path) -> Result<Inverted> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Inverted(e.to_string()))?;
        let (schema, fields) = schema();
        let directory = tantivy::directory::MmapDirectory::open(dir)
            .map_err(|e| Error::Inverted(e.to_string()))?;
        let index = tantivy::Index::open_or_create(directory, schema).map_err(err)?;
        index.tokenizers().register(ANALYZER, analyzer());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(err)?;
        Ok(Inverted {
            dir: dir.to_owned(),
            index,
            reader,
            fields,
            seen: Mutex::new(None),
            writer: Mutex::new(None),
            releasing: Mutex::new(None),
        })
    }

    /// The shard state of the last commit (the default mark when none says).
    pub(super) fn mark(&self) -> Result<Mark> {
        let metas = self.index.load_metas().map_err(err)?;
        Ok(parse_mark(metas.payload.as_deref()))
    }

    /// Brings the index to the shard state `target`, taking the catch-up's `handed`
    /// documents when they are exactly what it lacks and reading the tenant's entries
    /// from `store` otherwise. Returns `false` when another writer (thread or process)
    /// holds the index: it is left to that one. What is added waits in the kept writer,
    /// committed once [`COMMIT_EVERY`] documents wait, when a search needs it
    /// ([`Inverted::commit_added`]) or at once when something was deleted. See the
    /// module's description.
    pub(super) fn sync(
        &self,
        store: &dyn Store,
        tenant: &str,
        target: &Mark,
        handed: Option<&Handed>,
    ) -> Result<bool> {
        let mut slot = lock(&self.writer);
        let kept = match slot.as_mut() {
            Some(kept) => kept,
            None => {
                let Some(writer) = self.take_writer()? else {
                    return Ok(false);
                };
                let committed = self.mark()?;
                slot.insert(Kept {
                    writer,
                    added: committed.clone(),
                    committed,
                    pending: 0,
                })
            }
        };
        match self.sync_kept(kept, store, tenant, target, handed) {
            Ok(false) => {
                // Nothing waits to be committed: the lock goes back (another process may
                // have work for the index).
                if kept.added == kept.committed
                    && let Some(kept) = slot.take()
                {
                    self.release(kept);
                }
                Ok(true)
            }
            Ok(true) => {
                // Something was deleted: committed, then merged out of the files.
                let Some(kept) = slot.take() else {
                    return Ok(true);
                };
                self.purge(kept)?;
                self.reload()?;
                Ok(true)
            }
            Err(e) => {
                // What the writer holds uncommitted is unknown: it goes (rolled back),
                // and the next sync starts from the last commit.
                *slot = None;
                Err(e)
            }
        }
    }

    /// Adds to `kept` what brings it to `target`; returns whether something was deleted
    /// (then it is committed).
    fn sync_kept(
        &self,
        kept: &mut Kept,
        store: &dyn Store,
        tenant: &str,
        target: &Mark,
        handed: Option<&Handed>,
    ) -> Result<bool> {
        let mark = kept.added.clone();
        if mark == *target {
            return Ok(false);
        }
        // The catch-up's own documents, when they are exactly what lies between the
        // index's state and the shard's: added as they are, nothing read again.
        if let Some(handed) = handed.filter(|h| {
            mark.origin == target.origin
                && mark.build == target.build
                && mark.covered == h.after
                && target.covered == h.through
        }) {
            for (id, text, context) in &handed.docs {
                self.add(&kept.writer, *id, text, context)?;
                kept.pending += 1;
            }
            kept.added = target.clone();
            if kept.pending >= COMMIT_EVERY {
                commit(kept)?;
                self.reload()?;
            }
            return Ok(false);
        }
        let writer = &mut kept.writer;
        let mut from = EntryId(mark.covered);
        let mut deleted = false;
        if mark.origin != target.origin {
            writer.delete_all_documents().map_err(err)?;
            from = EntryId(0);
            deleted = true;
        } else if mark.covered > target.covered {
            let above = RangeQuery::new(
                Bound::Excluded(Term::from_field_u64(self.fields.id, target.covered)),
                Bound::Unbounded,
            );
            writer.delete_query(Box::new(above)).map_err(err)?;
            from = EntryId(target.covered);
            deleted = true;
        }
        let mut after = from;
        while after.0 < target.covered {
            let mut page = store.entries_after_in(tenant, after, PAGE)?;
            let Some(last) = page.last().map(|e| e.id) else {
                break;
            };
            after = last;
            page.retain(|e| e.id.0 <= target.covered);
            let Some(end) = page.last().map(|e| e.id) else {
                break;
            };
            for doc in new_docs(store, &page)? {
                self.add(&kept.writer, doc.id, &doc.text, &doc.context)?;
                kept.pending += 1;
            }
            // What the shard's catch-up did with the erasure receipts among them.
            if let Some(affected) = erasure_affected(store, &page)? {
                for id in affected.keys() {
                    kept.writer
                        .delete_term(Term::from_field_u64(self.fields.id, id.0));
                }
                let again: Vec<_> = affected.into_values().filter(|e| e.id <= end).collect();
                for doc in new_docs(store, &again)? {
                    self.add(&kept.writer, doc.id, &doc.text, &doc.context)?;
                }
                deleted = true;
            }
            kept.added = Mark {
                covered: end.0,
                ..target.clone()
            };
            if kept.pending >= COMMIT_EVERY {
                commit(kept)?;
                self.reload()?;
            }
        }
        kept.added = target.clone();
        if deleted {
            commit(kept)?;
        }
        Ok(deleted)
    }

    /// Commits what the kept writer holds, if anything, reloads the reader and lets the
    /// writer go: called before a search reads the index.
    pub(super) fn commit_added(&self) -> Result<()> {
        let mut slot = lock(&self.writer);
        let Some(mut kept) = slot.take() else {
            return Ok(());
        };
        drop(slot);
        let committed = commit(&mut kept);
        self.release(kept);
        if committed? {
            self.reload()?;
        }
        Ok(())
    }

    /// A writer, once this process's writer being let go has finished; `None` when
    /// another process holds tantivy's lock.
    fn take_writer(&self) -> Result<Option<IndexWriter<TantivyDocument>>> {
        if let Some(releasing) = lock(&self.releasing).take() {
            let _ = releasing.join();
        }
        let options = tantivy::indexer::IndexWriterOptions::builder()
            .num_worker_threads(1)
            .num_merge_threads(1)
            .memory_budget_per_thread(WRITER_MEMORY)
            .build();
        match self.index.writer_with_options(options) {
            Ok(w) => Ok(Some(w)),
            Err(TantivyError::LockFailure(..)) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// Lets `kept` go (rolling back what it did not commit) once its merges finished, on
    /// a thread of its own, so the caller does not wait for them.
    fn release(&self, kept: Kept) {
        let dir = self.dir.clone();
        let handle = std::thread::Builder::new()
            .name("memtape-inverted".into())
            .spawn(move || {
                if let Err(e) = kept.writer.wait_merging_threads() {
                    tracing::warn!("inverted index {}: {e}", dir.display());
                }
            });
        match handle {
            Ok(handle) => {
                let previous = lock(&self.releasing).replace(handle);
                if let Some(previous) = previous {
                    let _ = previous.join();
                }
            }
            Err(e) => tracing::warn!("inverted index {}: {e}", self.dir.display()),
        }
    }

    /// After a commit that deleted documents: lets the merges running finish, merges
    /// every segment that holds a delete (deleted documents stay in their segments'
    /// files until then), and removes the files replaced. The writer is let go: the next
    /// sync takes another.
    fn purge(&self, kept: Kept) -> Result<()> {
        kept.writer.wait_merging_threads().map_err(err)?;
        // Another process may take the lock meanwhile: its commits collect the files.
        let Some(mut writer) = self.take_writer()? else {
            return Ok(());
        };
        let with_deletes: Vec<SegmentId> = self
            .index
            .searchable_segment_metas()
            .map_err(err)?
            .into_iter()
            .filter(|m| m.has_deletes())
            .map(|m| m.id())
            .collect();
        if !with_deletes.is_empty() {
            writer.merge(&with_deletes).wait().map_err(err)?;
        }
        writer.garbage_collect_files().wait().map_err(err)?;
        writer.wait_merging_threads().map_err(err)?;
        Ok(())
    }

    fn add(
        &self,
        writer: &IndexWriter<TantivyDocument>,
        id: EntryId,
        text: &str,
        context: &str,
    ) -> Result<()> {
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.fields.id, id.0);
        doc.add_text(self.fields.text, text);
        doc.add_text(self.fields.context, context);
        writer.add_document(doc).map_err(err)?;
        Ok(())
    }

    /// Reloads the reader at the last commit, and returns that commit's mark.
    fn reload(&self) -> Result<Mark> {
        self.reader.reload().map_err(err)?;
        let mark = self.mark()?;
        *lock(&self.seen) = Some(mark.clone());
        Ok(mark)
    }

    /// The best `limit` candidates for `terms` (analyzed with [`terms`]) by tantivy's own
    /// BM25 over the text and the context (weighted `context`), found with block-max WAND,
    /// with what [`Found`] says of them. `None` when the commit searched could not be told
    /// apart from a newer one being made (the caller falls back to FTS5).
    pub(super) fn candidates(
        &self,
        terms: &[String],
        context: f32,
        limit: usize,
    ) -> Result<Option<Found>> {
        let metas = self.index.load_metas().map_err(err)?;
        let mark = parse_mark(metas.payload.as_deref());
        if lock(&self.seen).as_ref() != Some(&mark) {
            self.reader.reload().map_err(err)?;
            *lock(&self.seen) = Some(mark.clone());
        }
        let searcher = self.reader.searcher();
        // The reader must hold exactly the segments the mark was committed with.
        let committed: HashSet<SegmentId> = metas.segments.iter().map(|s| s.id()).collect();
        let held: HashSet<SegmentId> = searcher
            .segment_readers()
            .iter()
            .map(|s| s.segment_id())
            .collect();
        if committed != held {
            return Ok(None);
        }
        let f = self.fields;
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for t in terms {
            clauses.push((
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.text, t),
                    IndexRecordOption::WithFreqs,
                )),
            ));
            if context > 0.0 {
                let q = TermQuery::new(
                    Term::from_field_text(f.context, t),
                    IndexRecordOption::WithFreqs,
                );
                clauses.push((
                    Occur::Should,
                    Box::new(BoostQuery::new(Box::new(q), context)),
                ));
            }
        }
        let top = searcher
            .search(
                &BooleanQuery::new(clauses),
                &TopDocs::with_limit(limit.max(1)).order_by_score(),
            )
            .map_err(err)?;
        let mut by_segment: Vec<Vec<u32>> = vec![Vec::new(); searcher.segment_readers().len()];
        for (_, address) in &top {
            by_segment[address.segment_ord as usize].push(address.doc_id);
        }
        let mut found = Found {
            mark,
            terms: vec![Vec::new(); terms.len()],
            df: vec![0.0; terms.len()],
        };
        for (segment, mut docs) in searcher.segment_readers().iter().zip(by_segment) {
            docs.sort_unstable();
            let ids = segment.fast_fields().u64("id").map_err(err)?;
            let text = segment.inverted_index(f.text).map_err(err)?;
            let ctx = segment.inverted_index(f.context).map_err(err)?;
            let alive = segment.alive_bitset();
            for (i, t) in terms.iter().enumerate() {
                let term_text = Term::from_field_text(f.text, t);
                let term_ctx = Term::from_field_text(f.context, t);
                // The document frequency as BM25F counts it: documents holding the term
                // in a field that counts, each once.
                let mut seen = vec![0u64; (segment.max_doc() as usize).div_ceil(64)];
                let mut df = 0u64;
                let mut count = |block: &mut tantivy::postings::BlockSegmentPostings| loop {
                    let docs = block.docs();
                    if docs.is_empty() {
                        break;
                    }
                    for &d in docs {
                        let (word, bit) = (d as usize / 64, 1u64 << (d % 64));
                        if seen[word] & bit == 0 && alive.is_none_or(|a| a.is_alive(d)) {
                            seen[word] |= bit;
                            df += 1;
                        }
                    }
                    block.advance();
                };
                if let Some(mut block) = text
                    .read_block_postings(&term_text, IndexRecordOption::Basic)
                    .map_err(|e| Error::Inverted(e.to_string()))?
                {
                    count(&mut block);
                }
                if context > 0.0
                    && let Some(mut block) = ctx
                        .read_block_postings(&term_ctx, IndexRecordOption::Basic)
                        .map_err(|e| Error::Inverted(e.to_string()))?
                {
                    count(&mut block);
                }
                found.df[i] += df as f64;
                if docs.is_empty() {
                    continue;
                }
                // The candidates' frequencies, by seeking in both fields' postings.
                let mut tfs = vec![[0u32; 2]; docs.len()];
                for (field, index, term) in [(0, &text, &term_text), (1, &ctx, &term_ctx)] {
                    let Some(mut postings) = index
                        .read_postings(term, IndexRecordOption::WithFreqs)
                        .map_err(|e| Error::Inverted(e.to_string()))?
                    else {
                        continue;
                    };
                    for (j, &d) in docs.iter().enumerate() {
                        if postings.doc() < d {
                            postings.seek(d);
                        }
                        if postings.doc() == d {
                            tfs[j][field] = postings.term_freq();
                        }
                    }
                }
                for (&d, tf) in docs.iter().zip(tfs) {
                    if tf != [0, 0]
                        && let Some(id) = ids.first(d)
                    {
                        found.terms[i].push((id, tf));
                    }
                }
            }
        }
        Ok(Some(found))
    }
}

impl Inverted {
    /// The memory its writers may hold: tantivy's budget for a writer kept (or in use by
    /// a sync now), and as much for one being let go while its merges run.
    fn writer_memory(&self) -> usize {
        let kept = match self.writer.try_lock() {
            Ok(kept) => kept.is_some(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().is_some(),
            Err(std::sync::TryLockError::WouldBlock) => true,
        };
        let releasing = match self.releasing.try_lock() {
            Ok(r) => r.as_ref().is_some_and(|h| !h.is_finished()),
            Err(_) => true,
        };
        (usize::from(kept) + usize::from(releasing)) * WRITER_MEMORY
    }
}

impl Shard {
    /// The memory the shard's inverted index's writers may hold ([`Inverted`]'s index
    /// itself is read through mapped files, outside the budget like the page cache). An
    /// index being opened now counts nothing.
    pub(super) fn inverted_memory(&self) -> usize {
        match self.inverted.try_lock() {
            Ok(slot) => slot.as_ref().map_or(0, |i| i.writer_memory()),
            Err(_) => 0,
        }
    }

    /// The shard's inverted index, opened when first needed: kept once the shard has
    /// [`crate::IndexConfig::inverted_from`] documents, and, once made, kept whatever its
    /// size (so erasures reach its files too). `None` when there is none, or it cannot be
    /// opened (logged; searches use FTS5).
    fn inverted(&self) -> Option<Arc<Inverted>> {
        let mut slot = lock(&self.inverted);
        if slot.is_none() {
            let dir = dir_for(&self.path);
            if self.len() < self.config.inverted_from && !dir.exists() {
                return None;
            }
            match Inverted::open(&dir) {
                Ok(found) => *slot = Some(Arc::new(found)),
                Err(e) => {
                    tracing::warn!("search index {}: {e}", self.path.display());
                    return None;
                }
            }
        }
        slot.clone()
    }

    /// Whether the shard keeps (or, with `adding` documents more, will keep) an inverted
    /// index that a catch-up brings up to date: what it hands over is worth making.
    pub(super) fn may_keep_inverted(&self, adding: usize) -> bool {
        let opened = lock(&self.inverted).is_some();
        opened || self.len() + adding >= self.config.inverted_from
    }

    /// Whether a catch-up has nothing to do for the inverted index: the shard keeps none,
    /// or this process brought it to the mirror's state.
    pub(super) fn inverted_current(&self) -> bool {
        let (build, covered, len) = {
            let docs = self.read_docs();
            (docs.build.clone(), docs.covered.0, docs.ids.len())
        };
        if lock(&self.inverted).is_none()
            && len < self.config.inverted_from
            && !dir_for(&self.path).exists()
        {
            return true;
        }
        lock(&self.inverted_mark)
            .as_ref()
            .is_some_and(|m| m.build == build && m.covered == covered)
    }

    /// Brings the inverted index (if the shard keeps one) to the state of the shard file
    /// `conn` is open on, after a catch-up, under the write lock, with the documents the
    /// catch-up wrote when it hands them over ([`Handed`]). A failure is logged and
    /// recorded ([`Shard::last_failure`]), never returned: searches use FTS5 meanwhile, and
    /// the next catch-up tries again.
    pub(super) fn sync_inverted(
        &self,
        store: &dyn Store,
        conn: &Connection,
        handed: Option<&Handed>,
    ) {
        let Some(inverted) = self.inverted() else {
            return;
        };
        if lock(&self.inverted_mark).is_none()
            && let Err(e) = file::merge_less(conn)
        {
            // Only slower: FTS5 merges as it did.
            tracing::warn!("search index {}: {e}", self.path.display());
        }
        let synced = (|| -> Result<Option<Mark>> {
            let meta = file::meta(conn)?;
            let target = Mark {
                origin: meta.origin,
                build: meta.build,
                covered: meta.covered.0,
            };
            Ok(inverted
                .sync(store, &self.tenant, &target, handed)?
                .then_some(target))
        })();
        match synced {
            Ok(Some(mark)) => *lock(&self.inverted_mark) = Some(mark),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(
                    "search index {}: the inverted index is behind: {e}",
                    self.path.display()
                );
                *lock(&self.failure) = Some(e.to_string());
            }
        }
    }

    /// A BM25 search's postings through the inverted index: the candidates of
    /// [`Inverted::candidates`] with their exact statistics, for [`Postings::scores`]
    /// to rescore. `None` when this search must score every match through FTS5 instead:
    /// the shard keeps no inverted index, it is not at the mirror's state, the filter
    /// leaves some of the shard out or the query names a period (both are searched
    /// within a subset the candidates may miss), or the query has no word to look up.
    pub(super) fn inverted_postings(&self, request: &SearchRequest) -> Option<Postings> {
        let inverted = self.inverted()?;
        let (build, covered) = {
            let docs = self.read_docs();
            if !whole_shard(&docs, &request.filter) {
                return None;
            }
            (docs.build.clone(), docs.covered.0)
        };
        if self.config.time_weight > 0.0
            && (when::period(&request.text).is_some()
                || when::relative(&request.text, chrono::Utc::now(), true).is_some())
        {
            return None;
        }
        let words = query_words(&request.text);
        // A word too long to be indexed here is found by FTS5.
        if words.is_empty() || words.iter().any(|w| w.len() > MAX_TOKEN) {
            return None;
        }
        let terms = terms(&words.join(" "));
        let depth = self.config.candidates.max(request.limit);
        // What the last catch-ups added is searched once committed.
        if let Err(e) = inverted.commit_added() {
            tracing::warn!("search index {}: {e}", self.path.display());
            return None;
        }
        let found = match inverted.candidates(
            &terms,
            self.config.context_weight,
            self.config.inverted_candidates.max(depth),
        ) {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!("search index {}: {e}", self.path.display());
                return None;
            }
        };
        if found.mark.build != build || found.mark.covered != covered {
            return None;
        }
        let cjk = if cjk_query(&request.text).is_some() {
            match self.with_reader(|conn| read_cjk(conn, &request.text)) {
                Ok(cjk) => cjk,
                Err(e) => {
                    tracing::warn!("search index {}: {e}", self.path.display());
                    return None;
                }
            }
        } else {
            Vec::new()
        };
        Some(Postings::of_candidates(found.terms, found.df, cjk))
    }
}

/// Whether `filter` admits every document of the shard `docs` mirrors.
fn whole_shard(docs: &Docs, filter: &SearchFilter) -> bool {
    filter.kinds.is_empty()
        && filter.roles.is_empty()
        && filter.since.is_none()
        && filter.until.is_none()
        && filter.as_of.is_none()
        && docs
            .admits_by_tenant(filter)
            .unwrap_or_else(|| docs.scopes.iter().all(|s| filter.admits_scope(s)))
}

fn parse_mark(payload: Option<&str>) -> Mark {
    payload
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_analyzer_folds_and_stems_as_fts5_does() {
        assert_eq!(
            terms("Running runs São Paulo running"),
            ["run", "sao", "paulo"]
        );
        // A NUL byte splits words; a huge word is left out; CJK runs are words.
        let huge = "x".repeat(100_000);
        assert_eq!(
            terms(&format!("cat\0dog {huge} 東京")),
            ["cat", "dog", "東京"]
        );
    }
}
