//! Following the tape: catch-up in batches, binding to the tape, rebuilding.
//!
//! Every batch is one `BEGIN IMMEDIATE` transaction on the index file, so one process
//! writes at a time; inside it the covered mark is read again, and what another process
//! committed meanwhile is mirrored instead of written twice. The in-memory mirror changes
//! only after a commit. A rebuild (explicit, or because the index was built from another
//! tape) runs in one transaction: other processes search the old contents until it commits
//! and then reload, because the file's build id changed.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::mpsc::sync_channel;

use chrono::{DateTime, Utc};
use memtape_core::events::BuiltinEvent;
use memtape_core::{Entry, EntryId, Kind, Role, Scope};
use memtape_store::Store;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};

use super::inverted::Handed;
use super::{Added, AddedDoc, DocMeta, Docs, IndexConfig, Progress, Shard, file, lock};
use crate::text::cjk_bigrams;
use crate::vectors::quantize;
use crate::when;
use crate::{Embedder, Error, Result};

/// How many tape entries one catch-up batch reads, embeds and commits.
const BATCH: usize = 256;

/// A document about to be written.
#[derive(Debug)]
pub(super) struct NewDoc {
    pub(super) id: EntryId,
    scope: Scope,
    kind: Kind,
    role: Option<Role>,
    /// The message's name (its speaker), if it has one and is not a tool result (whose
    /// name is a function's).
    speaker: Option<String>,
    at: DateTime<Utc>,
    pub(super) text: String,
    /// Where the speaker's own words start in `text` (after the `name: ` that
    /// [`memtape_core::Payload::search_text`] puts first; 0 without a speaker). The vector
    /// holds what was said, not who said it: who is a field of its own (the speaker boost),
    /// and a name in every vector of a speaker pulls a query that names them towards all of
    /// that speaker's words alike.
    own: usize,
    /// The text of the conversational entry before this one in its scope ("" if none or
    /// if this is not a conversational entry).
    pub(super) context: String,
    /// The entry's erasure mark as read (a vector kept in the store is kept for this
    /// version of the entry only).
    erased_by: Option<EntryId>,
}

impl NewDoc {
    fn from_entry(entry: &Entry) -> Option<NewDoc> {
        // A tombstone has nothing to find (what it keeps is structure, not text).
        if entry.is_tombstone() {
            return None;
        }
        let speaker = entry
            .message()
            .filter(|m| m.role != Role::Tool)
            .and_then(|m| m.name.clone());
        let text = entry.payload.search_text()?;
        let own = speaker
            .as_deref()
            .and_then(|name| text.strip_prefix(name)?.strip_prefix(": "))
            .map_or(0, |words| text.len() - words.len());
        Some(NewDoc {
            id: entry.id,
            scope: entry.scope.clone(),
            kind: entry.kind(),
            role: entry.message().map(|m| m.role),
            speaker,
            at: entry.created_at,
            text,
            own,
            context: String::new(),
            erased_by: entry.erased.as_ref().map(|e| e.by),
        })
    }

    /// The text its vector is made of: the speaker's own words, after the context when
    /// `with_context`.
    fn vector_text(&self, with_context: bool) -> Cow<'_, str> {
        let own = &self.text[self.own..];
        if with_context && !self.context.is_empty() {
            Cow::Owned(format!("{}\n{own}", self.context))
        } else {
            Cow::Borrowed(own)
        }
    }
}

/// Where a batch's vectors come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vectors {
    /// The store's kept ones, the model for the rest ([`vectors_for`]).
    Make,
    /// The store's kept ones only: the batch gets vectors if the store has every one
    /// (reading them costs no model call), else none, and they are left behind.
    Kept,
    /// None: left behind.
    Behind,
}

/// A batch of vectors embedded for documents left without them.
#[derive(Debug)]
struct Embedded {
    /// The last tape entry the batch read.
    last: EntryId,
    /// Whether the batch stopped before the covered mark it was asked to reach.
    more: bool,
    vectors: Vec<(EntryId, crate::vectors::Quantized)>,
}

/// What a batch found when it took the write lock.
enum Outcome {
    /// Committed; this many documents were added by this process.
    Done(usize),
    /// The file was rebuilt or rebound by another process: start over.
    Restart,
}

impl Shard {
    /// Indexes every tape entry after [`Shard::covered`], in batches: a reader thread
    /// pages through the tape into a bounded queue while this thread embeds and commits,
    /// so memory stays bounded however far behind the index is. Returns how many
    /// documents were added.
    ///
    /// An index built from another tape (the tape file was replaced or reset) is rebuilt
    /// from this one, with a warning. Other processes may catch up on the same file at
    /// the same time: one writes at a time, the others wait and mirror its work.
    pub fn catch_up(&self, store: &dyn Store) -> Result<usize> {
        self.catch_up_with(store, &mut |_, _| {})
    }

    /// [`Shard::catch_up`], calling `progress(done, total)` after each batch with the
    /// number of tape entries read so far and to read in all.
    pub fn catch_up_with(&self, store: &dyn Store, progress: Progress<'_>) -> Result<usize> {
        self.catch_up_pages(store, usize::MAX, progress)
    }

    /// Catches up as [`Shard::catch_up`] does, a batch at a time, until `deadline`:
    /// `None` when the shard reached the tape's end, else how far it got and the end
    /// (`(covered, target)`). While another thread holds the writer (building the same
    /// shard) it waits for that thread's batches, not for its whole catch-up.
    pub(crate) fn catch_up_until(
        &self,
        store: &dyn Store,
        deadline: std::time::Instant,
    ) -> Result<Option<(EntryId, EntryId)>> {
        let target = store.last_id()?;
        loop {
            let covered = self.covered();
            if covered >= target {
                return Ok(None);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(Some((covered, target)));
            }
            if self.writer.try_lock().is_err() {
                std::thread::sleep(std::time::Duration::from_millis(2));
                continue;
            }
            self.catch_up_pages(store, 1, &mut |_, _| {})?;
            if self.covered() == covered {
                // No step forward (another process rebuilt the file meanwhile): the
                // caller answers from what is held, and the next step goes on.
                return Ok(Some((covered, target)));
            }
        }
    }

    fn catch_up_pages(
        &self,
        store: &dyn Store,
        max_pages: usize,
        progress: Progress<'_>,
    ) -> Result<usize> {
        let out = self.try_catch_up(store, max_pages, progress);
        if let Err(e) = &out {
            tracing::warn!("search index {}: catch-up failed: {e}", self.path.display());
            *lock(&self.failure) = Some(e.to_string());
        }
        out
    }

    fn try_catch_up(
        &self,
        store: &dyn Store,
        max_pages: usize,
        progress: Progress<'_>,
    ) -> Result<usize> {
        let tape = store.tape_id()?;
        // The last id is read after the caller (a search) started, so every append
        // acknowledged before it is at or below it: once the index covers it, there is
        // nothing to do. That is the fast path of most searches, and of the searches that
        // waited below while another thread caught up for them.
        let target = store.last_id()?;
        let current = || {
            let docs = self.read_docs();
            // Embedding as it goes, a catch-up is also due while vectors are behind.
            let vectors = self.vectors_behind() || docs.embedded >= docs.covered;
            !*lock(&self.rebuild) && *lock(&self.tape) == tape && target <= docs.covered && vectors
        };
        if current() && self.inverted_current() {
            return Ok(0);
        }
        let mut conn = lock(&self.writer);
        if current() && self.inverted_current() {
            return Ok(0);
        }
        let added = if current() {
            0
        } else {
            self.catch_up_locked(store, &mut conn, &tape, max_pages, progress)?
        };
        *lock(&self.tape) = tape;
        // The inverted index of a large shard follows the file, after it committed.
        self.sync_inverted(store, &conn, None);
        drop(conn);
        // After an erasure's new build this drops the graph and its file.
        self.keep_ann();
        Ok(added)
    }

    fn catch_up_locked(
        &self,
        store: &dyn Store,
        conn: &mut Connection,
        tape: &str,
        max_pages: usize,
        progress: Progress<'_>,
    ) -> Result<usize> {
        // Each round restarts after another process rebuilt or rebound the file.
        for _ in 0..4 {
            let meta = file::meta(conn)?;
            let explicit = *lock(&self.rebuild);
            let foreign = meta.tape != tape && !(meta.tape.is_empty() && meta.covered.0 == 0);
            if explicit || foreign {
                if !explicit {
                    tracing::warn!(
                        "search index {}: built from another tape ({} covered); rebuilding it from this one",
                        self.path.display(),
                        meta.covered.0
                    );
                }
                match self.rebuild_all(store, conn, tape, explicit, &mut *progress)? {
                    Outcome::Done(added) => {
                        *lock(&self.rebuild) = false;
                        return Ok(added);
                    }
                    Outcome::Restart => continue,
                }
            }
            self.sync(conn)?;
            let bound = !meta.tape.is_empty();
            match self.follow(store, conn, tape, bound, max_pages, &mut *progress)? {
                Outcome::Done(added) => {
                    // Embedding as it goes, a catch-up first embeds what was left behind
                    // (by this index earlier, or by another process).
                    if !self.vectors_behind() && self.embedder.is_some() {
                        while self.embed_batch(store, conn)? {}
                    }
                    return Ok(added);
                }
                Outcome::Restart => continue,
            }
        }
        Err(Error::TapeChanged)
    }

    /// Mirrors what other processes committed: everything after a rebuild, or the
    /// documents after this mirror's mark.
    fn sync(&self, conn: &mut Connection) -> Result<()> {
        let tx = conn.transaction()?;
        let meta = file::meta(&tx)?;
        let docs = self.read_docs();
        if meta.build != docs.build {
            drop(docs);
            let given = self.embedder_id().to_owned();
            if meta.embedder != given {
                return Err(Error::EmbedderChanged {
                    path: self.path.clone(),
                    built: meta.embedder,
                    given,
                });
            }
            let dim = self.embedder.as_ref().map_or(0, |e| e.dim());
            let fresh = file::load(
                &tx,
                dim,
                &self.path,
                super::spill_at(&self.config, &self.path),
                // Read again in place of the mirror held (another process's new build):
                // not counted against the index's budget until it is in.
                &|_| {},
            )?;
            *self.write_docs() = fresh;
            // A new build may be an erasure's: no query vector outlives it.
            self.forget_queries();
        } else if meta.covered > docs.covered || meta.embedded > docs.embedded {
            let mut added = file::load_after(&tx, &docs, &meta, &self.path)?;
            added.filled = file::load_vectors(&tx, &docs, meta.embedded, &self.path)?;
            drop(docs);
            self.write_docs().extend(added);
        }
        Ok(())
    }

    fn write_docs(&self) -> std::sync::RwLockWriteGuard<'_, Docs> {
        self.docs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Indexes the tape after the mirror's mark, batch by batch.
    fn follow(
        &self,
        store: &dyn Store,
        conn: &mut Connection,
        tape: &str,
        bound: bool,
        max_pages: usize,
        progress: Progress<'_>,
    ) -> Result<Outcome> {
        let start = self.covered();
        let last = store.last_id()?;
        if last <= start {
            if !bound {
                // Still bind an empty index to its tape, so a later replacement is noticed.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                if file::meta(&tx)?.tape.is_empty() {
                    file::set_meta(&tx, "tape", tape)?;
                }
                tx.commit()?;
            }
            return Ok(Outcome::Done(0));
        }
        let total = (last.0 - start.0) as usize;
        let mut added = 0;
        let mut restart = false;
        // Whether the pages ended because `max_pages` were read, not the tenant's entries.
        let mut stopped = false;
        let mut left = max_pages;
        pages(store, &self.tenant, start, |page| {
            match self.commit_batch(store, conn, tape, &page, None)? {
                Outcome::Done(n) => added += n,
                Outcome::Restart => {
                    restart = true;
                    return Ok(false);
                }
            }
            if let Some(end) = page.last() {
                let done = (end.id.0 - start.0) as usize;
                progress(done.min(total), total.max(done));
            }
            left -= 1;
            stopped = left == 0;
            Ok(!stopped)
        })?;
        if restart {
            return Ok(Outcome::Restart);
        }
        if stopped {
            return Ok(Outcome::Done(added));
        }
        // Every entry of the tenant up to `last` is read: the mark moves there, past other
        // tenants' entries, so the next catch-up starts from the tape's end.
        if let Outcome::Restart = self.advance(conn, tape, last)? {
            return Ok(Outcome::Restart);
        }
        Ok(Outcome::Done(added))
    }

    /// Moves the covered mark to `last` once every entry of the tenant up to it is in the
    /// file (the entries between are other tenants'), so the next catch-up starts there.
    fn advance(&self, conn: &mut Connection, tape: &str, last: EntryId) -> Result<Outcome> {
        if self.covered() >= last {
            return Ok(Outcome::Done(0));
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let meta = file::meta(&tx)?;
        if meta.build != self.read_docs().build || meta.tape != tape {
            return Ok(Outcome::Restart);
        }
        if meta.covered < last {
            // Vectors stay caught up only if they were (nothing new to embed either way).
            let embedded = if meta.embedded >= meta.covered {
                last
            } else {
                meta.embedded
            };
            file::set_meta(&tx, "covered", &last.0.to_string())?;
            file::set_meta(&tx, "embedded", &embedded.0.to_string())?;
            tx.commit()?;
            let mut docs = self.write_docs();
            let moved = docs.embedded >= docs.covered;
            docs.covered = docs.covered.max(last);
            if moved {
                docs.embedded = docs.covered;
            }
        }
        Ok(Outcome::Done(0))
    }

    /// Indexes this tenant's part of a page of the tape that the index prepared once for
    /// every shard it feeds ([`prepare_page`]): its documents and vectors are taken as
    /// they are, not read and made again. A shard that is not at the page's start (it
    /// fell behind, another process rebuilt it, its vectors are behind) catches up from
    /// the store instead. Returns how many documents were added.
    pub(crate) fn take_part(
        &self,
        store: &dyn Store,
        tape: &str,
        page: &PageSpan,
        part: PagePart,
    ) -> Result<usize> {
        let mut conn = lock(&self.writer);
        if *lock(&self.tape) == tape && !*lock(&self.rebuild) {
            self.sync(&mut conn)?;
            let (covered, embedded) = {
                let docs = self.read_docs();
                (docs.covered, docs.embedded)
            };
            if covered >= page.last {
                return Ok(0);
            }
            let vectors_current =
                embedded >= covered || self.vectors_behind() || self.embedder.is_none();
            if covered >= page.start && vectors_current {
                // The inverted index of a large shard takes these documents as they are
                // (unless an erasure among them rewrites others).
                let handed = (self.may_keep_inverted(part.docs.len())
                    && !part.entries.iter().any(is_erasure_receipt))
                .then(|| Handed {
                    after: covered.0,
                    through: page.last.0,
                    docs: part
                        .docs
                        .iter()
                        .filter(|d| d.id > covered)
                        .map(|d| (d.id, d.text.clone(), d.context.clone()))
                        .collect(),
                });
                let prepared = Batch {
                    docs: part.docs,
                    vectors: part.vectors,
                    last: part.entries.last().map(|e| e.id),
                };
                let outcome =
                    self.commit_batch(store, &mut conn, tape, &part.entries, Some(prepared))?;
                if let Outcome::Done(added) = outcome
                    && let Outcome::Done(_) = self.advance(&mut conn, tape, page.last)?
                {
                    // As after any catch-up: the inverted index follows the file.
                    self.sync_inverted(store, &conn, handed.as_ref());
                    drop(conn);
                    // As after any catch-up: the graph follows (an erasure's build drops it).
                    self.keep_ann();
                    return Ok(added);
                }
            }
        }
        drop(conn);
        self.catch_up(store)
    }

    /// Writes one batch in its own IMMEDIATE transaction, skipping what another process
    /// already covered, and mirrors the result after the commit.
    fn commit_batch(
        &self,
        store: &dyn Store,
        conn: &mut Connection,
        tape: &str,
        entries: &[Entry],
        prepared: Option<Batch>,
    ) -> Result<Outcome> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let meta = file::meta(&tx)?;
        let docs = self.read_docs();
        if meta.build != docs.build {
            return Ok(Outcome::Restart);
        }
        if meta.tape != tape {
            if !meta.tape.is_empty() {
                return Ok(Outcome::Restart);
            }
            file::set_meta(&tx, "tape", tape)?;
        }
        let mut pending = Added {
            covered: docs.covered,
            ..Added::default()
        };
        if meta.covered > docs.covered || meta.embedded > docs.embedded {
            // What another process committed meanwhile: documents, and vectors embedded
            // for documents this mirror holds without them.
            pending = file::load_after(&tx, &docs, &meta, &self.path)?;
            pending.filled = file::load_vectors(&tx, &docs, meta.embedded, &self.path)?;
        }
        let first = entries.partition_point(|e| e.id <= meta.covered);
        let fresh = &entries[first..];
        let mut count = 0;
        // Vectors go in with the text only while none are behind: the documents with
        // vectors stay a prefix of the file's documents.
        // While vectors are behind, the ones the store keeps still come in with the text
        // (a shard loaded cold on a server answers vector searches at once).
        let mode = match (meta.embedded >= meta.covered, self.vectors_behind()) {
            (true, false) => Vectors::Make,
            (true, true) => Vectors::Kept,
            (false, _) => Vectors::Behind,
        };
        let mut erased = false;
        if let Some(last) = fresh.last().map(|e| e.id) {
            // What another process covered meanwhile is left out of prepared documents too.
            let made = match prepared {
                Some(p) => p.after(meta.covered),
                None => Batch::read(store, fresh)?,
            };
            let batch = self.write_batch(store, &tx, &docs, &pending, made, mode)?;
            let with_vectors = batch.embedded >= last;
            count = batch.docs.len();
            pending.append(batch);
            erased = self.apply_erasures(store, &tx, &docs, &pending, fresh, last)?;
            file::set_meta(&tx, "covered", &last.0.to_string())?;
            // Written either way: a file without the key counts everything covered as
            // embedded.
            let embedded = if with_vectors { last } else { meta.embedded };
            file::set_meta(&tx, "embedded", &embedded.0.to_string())?;
        }
        drop(docs);
        tx.commit()?;
        // The graph's builder yields to the write path for a while.
        self.ann.written();
        if erased {
            // Documents went and came back under their own ids: the mirror is read again
            // from the file (as every other process does, seeing the new build id), and
            // no cached query vector outlives the erasure.
            let dim = self.embedder.as_ref().map_or(0, |e| e.dim());
            *self.write_docs() = file::load(
                conn,
                dim,
                &self.path,
                super::spill_at(&self.config, &self.path),
                &|_| {},
            )?;
            self.forget_queries();
            if !file::truncate_wal(conn)? {
                tracing::warn!(
                    "search index {}: a reader held the write-ahead log; erased documents leave it at the next checkpoint",
                    self.path.display()
                );
            }
        } else {
            self.write_docs().extend(pending);
        }
        Ok(Outcome::Done(count))
    }

    /// Applies the erasures whose receipts (`tape.erased`) are among `entries` to the
    /// file inside `tx`, before the covered mark passes them: every entry a receipt names
    /// that the store holds as erased loses its document (its FTS5 row, deleted with
    /// nothing left in the pages, and its row with the vector); so does the next message
    /// of its scope, whose context field held its text. Those that still have text (a
    /// redaction, the next message) are written again as a rebuild would write them,
    /// under their own ids, and the file gets a new build id so every process reloads.
    /// A receipt naming entries no erasure changed (a forged one) changes nothing.
    /// Returns whether anything was applied.
    fn apply_erasures(
        &self,
        store: &dyn Store,
        tx: &Transaction<'_>,
        base: &Docs,
        pending: &Added,
        entries: &[Entry],
        last: EntryId,
    ) -> Result<bool> {
        let Some(affected) = erasure_affected(store, entries)? else {
            return Ok(false);
        };
        let mut docs_stmt = tx.prepare_cached("DELETE FROM docs WHERE id = ?1")?;
        let mut fts_stmt = tx.prepare_cached("DELETE FROM fts WHERE rowid = ?1")?;
        for id in affected.keys() {
            docs_stmt.execute([id.0 as i64])?;
            fts_stmt.execute([id.0 as i64])?;
        }
        // What comes after this batch is indexed from the store as it is now.
        let again: Vec<Entry> = affected.into_values().filter(|e| e.id <= last).collect();
        let mode = if self.embedder.is_some() {
            Vectors::Make
        } else {
            Vectors::Behind
        };
        self.write_batch(store, tx, base, pending, Batch::read(store, &again)?, mode)?;
        // FTS5's secure-delete takes a deleted row's terms out of its doclists but can
        // leave their bytes in the leaf that held them; merging every segment into one
        // writes every leaf anew (and `secure_delete` zeroes the pages it frees). Its cost
        // grows with the index, measured in docs/benchmarks.md; erasures are rare.
        tx.execute("INSERT INTO fts (fts) VALUES ('optimize')", [])?;
        file::new_build(tx)?;
        Ok(true)
    }

    /// Reads the whole tape into the file in one transaction, replacing its contents, and
    /// swaps the mirror after the commit.
    fn rebuild_all(
        &self,
        store: &dyn Store,
        conn: &mut Connection,
        tape: &str,
        explicit: bool,
        progress: Progress<'_>,
    ) -> Result<Outcome> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let meta = file::meta(&tx)?;
        if !explicit && (meta.tape == tape || (meta.tape.is_empty() && meta.covered.0 == 0)) {
            // Another process rebuilt it meanwhile.
            return Ok(Outcome::Restart);
        }
        tx.execute_batch(
            "DELETE FROM docs; DELETE FROM scopes; INSERT INTO fts (fts) VALUES ('delete-all');",
        )?;
        file::set_meta(&tx, "embedder", self.embedder_id())?;
        file::set_meta(&tx, "tape", tape)?;
        let build = file::new_build(&tx)?;
        file::set_meta(&tx, "origin", &build)?;
        let dim = self.embedder.as_ref().map_or(0, |e| e.dim());
        let mut fresh = Docs::empty(dim, build, super::spill_at(&self.config, &self.path));
        let last = store.last_id()?;
        let total = last.0 as usize;
        // Text only while vectors are behind ([`Shard::set_vectors_behind`]).
        let embed = !self.vectors_behind();
        // Vectors stay a prefix of the documents: once a batch is left without them, so
        // are the batches after it.
        let mut prefix = true;
        pages(store, &self.tenant, EntryId(0), |page| {
            let mode = match (embed, prefix) {
                (true, _) => Vectors::Make,
                (false, true) => Vectors::Kept,
                (false, false) => Vectors::Behind,
            };
            let made = Batch::read(store, &page)?;
            let batch = self.write_batch(store, &tx, &fresh, &Added::default(), made, mode)?;
            prefix &= batch.embedded >= batch.covered;
            fresh.extend(batch);
            if let Some(end) = page.last() {
                let done = end.id.0 as usize;
                progress(done.min(total), total.max(done));
            }
            Ok(true)
        })?;
        // Every entry of the tenant up to the tape's end as it was at the start is read.
        fresh.covered = fresh.covered.max(last);
        if embed || prefix {
            fresh.embedded = fresh.covered;
        }
        file::set_meta(&tx, "covered", &fresh.covered.0.to_string())?;
        // Each batch set the mirror's mark: the end with vectors, none without.
        file::set_meta(&tx, "embedded", &fresh.embedded.0.to_string())?;
        tx.commit()?;
        let added = fresh.ids.len();
        *self.write_docs() = fresh;
        Ok(Outcome::Done(added))
    }

    /// Embeds and inserts one batch of entries into `tx`: scopes not yet known to `base`
    /// or `pending` get the next rows. Returns what was written, for the mirror.
    fn write_batch(
        &self,
        store: &dyn Store,
        tx: &Transaction<'_>,
        base: &Docs,
        pending: &Added,
        batch: Batch,
        mode: Vectors,
    ) -> Result<Added> {
        let Batch {
            docs,
            vectors: given,
            last,
        } = batch;
        let vectors = match (mode, &self.embedder, given) {
            (Vectors::Make | Vectors::Kept, Some(_), Some(given)) => Some(given),
            (Vectors::Make, _, _) => self.embed_docs(store, &docs)?,
            (Vectors::Kept, Some(embedder), _) => {
                kept_vectors(&**embedder, self.config, &self.path, store, &docs)
            }
            _ => None,
        };
        let covered = last.unwrap_or(base.covered);
        let with_vectors = mode == Vectors::Make || vectors.is_some();
        let mut out = Added {
            covered,
            embedded: if with_vectors { covered } else { EntryId(0) },
            ..Added::default()
        };
        let mut rows: HashMap<&Scope, u32> = pending
            .scopes
            .iter()
            .enumerate()
            .map(|(i, s)| (s, (base.scopes.len() + i) as u32))
            .collect();
        let mut scope_stmt =
            tx.prepare_cached("INSERT INTO scopes VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
        let mut doc_stmt =
            tx.prepare_cached("INSERT INTO docs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?;
        let mut fts_stmt = tx.prepare_cached(
            "INSERT INTO fts (rowid, text, context, cjk) VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut size_stmt = tx.prepare_cached("SELECT sz FROM fts_docsize WHERE id = ?1")?;
        for (i, doc) in docs.iter().enumerate() {
            let known = base
                .scope_rows
                .get(&doc.scope)
                .or_else(|| rows.get(&doc.scope));
            let scope_row = match known {
                Some(row) => *row,
                None => {
                    let row = (base.scopes.len() + pending.scopes.len() + out.scopes.len()) as u32;
                    let s = &doc.scope;
                    scope_stmt.execute(params![
                        row,
                        s.tenant(),
                        s.agent_name(),
                        s.user(),
                        s.session(),
                        s.node()
                    ])?;
                    rows.insert(s, row);
                    out.scopes.push(s.clone());
                    row
                }
            };
            let vector = vectors.as_ref().map(|v| v[i].clone());
            // The period the message's dates name, read at its own time ("last week" as
            // meant when it was said); dates without a year are left alone.
            let event =
                when::period(&doc.text).or_else(|| when::relative(&doc.text, doc.at, false));
            let id = doc.id.0 as i64;
            doc_stmt.execute(params![
                id,
                scope_row,
                doc.kind.as_str(),
                doc.role.map(Role::as_str),
                doc.at.timestamp_millis(),
                vector.as_ref().map(|v| v.to_bytes()),
                doc.speaker,
                event.map(|p| p.start.timestamp_millis()),
                event.map(|p| p.end.timestamp_millis())
            ])?;
            fts_stmt.execute(params![id, doc.text, doc.context, cjk_bigrams(&doc.text)])?;
            let tokens: Vec<u8> = size_stmt.query_row([id], |r| r.get(0))?;
            let meta = DocMeta {
                scope: scope_row,
                kind: doc.kind,
                role: doc.role,
                at: super::Nanos::new(doc.at),
                speaker: super::MaybeRow::NONE,
                tokens: super::bm25::field_tokens(&tokens),
            };
            out.docs.push(AddedDoc {
                id: doc.id,
                meta,
                vector,
                speaker: doc.speaker.clone(),
                event,
            });
        }
        Ok(out)
    }
}

/// Vectors embedded for a batch of documents, waiting to be stored
/// ([`Shard::embed_next`], [`Shard::store_embedded`]).
#[derive(Debug)]
pub struct PendingVectors {
    /// The tenant whose shard the batch is for.
    tenant: String,
    /// The embedded mark the batch starts after.
    from: EntryId,
    /// The build of the file the batch was read from.
    build: String,
    batch: Embedded,
}

impl PendingVectors {
    /// The tenant whose shard the batch is for.
    pub(crate) fn tenant(&self) -> &str {
        &self.tenant
    }
}

impl Shard {
    /// One batch of the pass that embeds what catch-ups left behind
    /// ([`Shard::set_vectors_behind`]): embeds the documents after the embedded mark and
    /// stores their vectors. The embedding runs without the write lock, so searches and
    /// catch-ups go on meanwhile; if another thread or process embedded the same documents
    /// first, this batch is dropped. Returns whether vectors are still behind.
    pub fn embed_step(&self, store: &dyn Store) -> Result<bool> {
        if self.embedder.is_none() {
            return Ok(false);
        }
        self.sync(&mut lock(&self.writer))?;
        match self.embed_next(store, BATCH)? {
            Some(pending) => self.store_embedded(pending),
            None => Ok(false),
        }
    }

    /// The first half of [`Shard::embed_step`], for a thread that embeds at a low
    /// priority: reads and embeds the next batch of documents without vectors, taking no
    /// lock but a moment's read of the in-memory marks, so a thread starved of CPU never
    /// holds up searches. The batch covers at most `entries` entries of the tape (at least
    /// one), so a thread that must give way soon can ask for a short one. `None` when no
    /// vectors are behind (as far as this process has seen) or there is no embedder.
    pub fn embed_next(&self, store: &dyn Store, entries: usize) -> Result<Option<PendingVectors>> {
        if self.embedder.is_none() {
            return Ok(None);
        }
        let (from, until, build) = {
            let docs = self.read_docs();
            (docs.embedded, docs.covered, docs.build.clone())
        };
        Ok(self
            .embed_after(store, from, until, entries.clamp(1, BATCH))?
            .map(|batch| PendingVectors {
                tenant: self.tenant.clone(),
                from,
                build,
                batch,
            }))
    }

    /// The second half of [`Shard::embed_step`]: stores a batch from
    /// [`Shard::embed_next`] under the write lock, after mirroring what other processes
    /// committed; a batch that another thread or process embedded first is dropped.
    /// Returns whether vectors are still behind.
    pub fn store_embedded(&self, pending: PendingVectors) -> Result<bool> {
        let mut conn = lock(&self.writer);
        self.sync(&mut conn)?;
        let more = self
            .store_vectors(&mut conn, pending.from, &pending.build, pending.batch)?
            .unwrap_or(true);
        drop(conn);
        self.keep_ann();
        Ok(more)
    }

    /// One batch of [`Shard::embed_step`] for a caller that holds the write lock (a
    /// catch-up filling the gap before it returns).
    fn embed_batch(&self, store: &dyn Store, conn: &mut Connection) -> Result<bool> {
        // Another process may have embedded meanwhile.
        self.sync(conn)?;
        let (from, until, build) = {
            let docs = self.read_docs();
            (docs.embedded, docs.covered, docs.build.clone())
        };
        let Some(batch) = self.embed_after(store, from, until, BATCH)? else {
            return Ok(false);
        };
        Ok(self
            .store_vectors(conn, from, &build, batch)?
            .unwrap_or(true))
    }

    /// Reads and embeds the documents of the next `limit` entries after `from` (up to
    /// `until`); `None` when there are none.
    fn embed_after(
        &self,
        store: &dyn Store,
        from: EntryId,
        until: EntryId,
        limit: usize,
    ) -> Result<Option<Embedded>> {
        if from >= until {
            return Ok(None);
        }
        let mut entries = store.entries_after_in(&self.tenant, from, limit)?;
        let full = entries.len() == limit;
        let beyond = entries.last().is_some_and(|e| e.id > until);
        entries.retain(|e| e.id <= until);
        // A page that is not full, or that passes `until`, holds every entry of the tenant
        // up to `until`: the mark moves there (other tenants' entries between have nothing
        // to embed here).
        let last = match entries.last() {
            Some(e) if full && !beyond => e.id,
            _ => until,
        };
        let docs = new_docs(store, &entries)?;
        let vectors = self.embed_docs(store, &docs)?.unwrap_or_default();
        Ok(Some(Embedded {
            last,
            more: last < until,
            vectors: docs.iter().map(|d| d.id).zip(vectors).collect(),
        }))
    }

    /// Stores `batch`, embedded after `from` in build `build`, in one transaction and
    /// mirrors it after the commit; `None` (and nothing stored) if the file moved on
    /// meanwhile: another build, or another writer embedded after `from`. Otherwise
    /// whether vectors are still behind.
    fn store_vectors(
        &self,
        conn: &mut Connection,
        from: EntryId,
        build: &str,
        batch: Embedded,
    ) -> Result<Option<bool>> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let meta = file::meta(&tx)?;
        if meta.build != build || meta.embedded != from || self.embedded() != from {
            return Ok(None);
        }
        let mut update = tx.prepare_cached("UPDATE docs SET vec = ?2 WHERE id = ?1")?;
        for (id, v) in &batch.vectors {
            update.execute(params![id.0 as i64, v.to_bytes()])?;
        }
        drop(update);
        file::set_meta(&tx, "embedded", &batch.last.0.to_string())?;
        tx.commit()?;
        self.write_docs().fill(batch.vectors, batch.last);
        Ok(Some(batch.more || batch.last < meta.covered))
    }

    /// The vectors of `docs`, quantized ([`vectors_for`]); `None` without an embedder.
    fn embed_docs(
        &self,
        store: &dyn Store,
        docs: &[NewDoc],
    ) -> Result<Option<Vec<crate::vectors::Quantized>>> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        vectors_for(&**embedder, self.config, &self.path, store, docs).map(Some)
    }
}

/// The key the store keeps an index's vectors under: the embedder's id, marked when each
/// message is embedded with its context (another text, so another vector).
fn vector_key(embedder: &dyn Embedder, config: IndexConfig) -> String {
    if config.embed_context {
        format!("{}+context", embedder.id())
    } else {
        embedder.id().to_owned()
    }
}

/// The vectors the store keeps for `docs` (each id read with its own tenant), and whether
/// the store could be read whole: a store that cannot be read (read only, an older schema)
/// or a stored vector of the wrong length is logged and counts as none.
fn stored_vectors(
    key: &str,
    dim: usize,
    label: &Path,
    store: &dyn Store,
    docs: &[NewDoc],
) -> (HashMap<EntryId, crate::vectors::Quantized>, bool) {
    let wanted: Vec<(&str, EntryId)> = docs.iter().map(|d| (d.scope.tenant(), d.id)).collect();
    let mut kept = HashMap::new();
    let mut whole = true;
    match store.vectors_of(key, &wanted) {
        Ok(found) => {
            for (id, bytes) in found {
                match crate::vectors::Quantized::from_bytes(&bytes, dim) {
                    Some(v) => {
                        kept.insert(id, v);
                    }
                    None => {
                        whole = false;
                        tracing::warn!(
                            "search index {}: the stored vector of entry {id} is not a {dim}-dimension vector of {key}; embedding it again",
                            label.display()
                        );
                    }
                }
            }
        }
        Err(e) => {
            whole = false;
            tracing::debug!(
                "search index {}: no stored vectors ({e}); embedding",
                label.display()
            );
        }
    }
    (kept, whole)
}

/// The vectors the store keeps for every one of `docs`, or `None` when it lacks any (or
/// cannot be read): no model call.
fn kept_vectors(
    embedder: &dyn Embedder,
    config: IndexConfig,
    label: &Path,
    store: &dyn Store,
    docs: &[NewDoc],
) -> Option<Vec<crate::vectors::Quantized>> {
    let key = vector_key(embedder, config);
    let (mut kept, whole) = stored_vectors(&key, embedder.dim(), label, store, docs);
    if !whole {
        return None;
    }
    docs.iter().map(|d| kept.remove(&d.id)).collect()
}

/// The vectors of `docs` (their speakers' own words, each with its context when `config`
/// says so), quantized. Vectors kept in the store ([`Store::vectors`]) are read, not made
/// again; the model embeds the rest in one call, and their vectors are handed to the store
/// for the next index that needs them. The store is a cache here: when it cannot be read
/// or written (a read-only store, an older schema) the model embeds everything, as it did
/// before there was one. `label` names the index in log lines.
fn vectors_for(
    embedder: &dyn Embedder,
    config: IndexConfig,
    label: &Path,
    store: &dyn Store,
    docs: &[NewDoc],
) -> Result<Vec<crate::vectors::Quantized>> {
    let key = vector_key(embedder, config);
    let (mut kept, _) = stored_vectors(&key, embedder.dim(), label, store, docs);
    let missing: Vec<&NewDoc> = docs.iter().filter(|d| !kept.contains_key(&d.id)).collect();
    let inputs: Vec<Cow<'_, str>> = missing
        .iter()
        .map(|d| d.vector_text(config.embed_context))
        .collect();
    let made = super::rank::checked_embed(
        embedder,
        &inputs.iter().map(|t| t.as_ref()).collect::<Vec<_>>(),
    )?;
    // `checked_embed` made one vector per text.
    let made: Vec<crate::vectors::Quantized> = made.iter().map(|v| quantize(v)).collect();
    let new: Vec<memtape_store::NewVector> = missing
        .iter()
        .zip(&made)
        .map(|(d, q)| memtape_store::NewVector {
            id: d.id,
            erased_by: d.erased_by,
            bytes: q.to_bytes(),
        })
        .collect();
    if let Err(e) = store.put_vectors(&key, &new) {
        tracing::debug!(
            "search index {}: vectors not kept in the store ({e})",
            label.display()
        );
    }
    let mut made = made.into_iter();
    Ok(docs
        .iter()
        .filter_map(|d| kept.remove(&d.id).or_else(|| made.next()))
        .collect())
}

/// Where a page of the tape starts and ends: the routed mark before it, and its last
/// entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageSpan {
    /// The mark the page starts after.
    pub start: EntryId,
    /// Its last entry's id.
    pub last: EntryId,
}

/// One tenant's part of a prepared page ([`prepare_page`]).
#[derive(Debug, Default)]
pub(crate) struct PagePart {
    entries: Vec<Entry>,
    docs: Vec<NewDoc>,
    /// One per document, when the page's vectors were made.
    vectors: Option<Vec<crate::vectors::Quantized>>,
}

/// A batch about to be written: the documents its entries make and, when they were made
/// before (a prepared page, [`prepare_page`]), their vectors.
struct Batch {
    docs: Vec<NewDoc>,
    /// One per document, when made before.
    vectors: Option<Vec<crate::vectors::Quantized>>,
    /// The batch's last entry (`None` for none).
    last: Option<EntryId>,
}

impl Batch {
    /// The documents `entries` make, each with its context; no vectors yet.
    fn read(store: &dyn Store, entries: &[Entry]) -> Result<Batch> {
        Ok(Batch {
            docs: new_docs(store, entries)?,
            vectors: None,
            last: entries.last().map(|e| e.id),
        })
    }

    /// Those after `covered` (what another process wrote meanwhile is left out).
    fn after(mut self, covered: EntryId) -> Batch {
        let first = self.docs.partition_point(|d| d.id <= covered);
        self.docs.drain(..first);
        if let Some(v) = &mut self.vectors {
            v.drain(..first);
        }
        self
    }
}

/// Makes a page of the tape into documents once, for every shard it feeds: their
/// contexts are read in one go (only theirs, unless vectors are made with contexts), and
/// (with `embedder`) their vectors are read from the store or made in one model call,
/// then handed to the store, where a shard not loaded now finds them when it is. Returns
/// the parts of the tenants `follows` accepts, by tenant. Entries erased whole make
/// nothing.
pub(crate) fn prepare_page(
    embedder: Option<&dyn Embedder>,
    config: IndexConfig,
    label: &Path,
    store: &dyn Store,
    entries: &[Entry],
    follows: impl Fn(&str) -> bool,
) -> Result<HashMap<String, PagePart>> {
    let mut docs: Vec<NewDoc> = entries.iter().filter_map(NewDoc::from_entry).collect();
    // A followed tenant's documents need their contexts (a field of its shard); the
    // others' are made for their vectors only, which need them only when embedded with
    // them (a lazy index's page of a thousand tenants looks back once for each scope).
    let with_context = embedder.is_some() && config.embed_context;
    add_context(store, entries, &mut docs, |t| with_context || follows(t))?;
    let mut vectors = match embedder {
        Some(embedder) => Some(vectors_for(embedder, config, label, store, &docs)?.into_iter()),
        None => None,
    };
    let mut parts: HashMap<String, PagePart> = HashMap::new();
    for entry in entries.iter().filter(|e| follows(e.scope.tenant())) {
        parts
            .entry(entry.scope.tenant().to_owned())
            .or_default()
            .entries
            .push(entry.clone());
    }
    for doc in docs {
        // `vectors_for` made one vector per document, in order.
        let vector = vectors.as_mut().and_then(|v| v.next());
        let Some(part) = parts.get_mut(doc.scope.tenant()) else {
            continue;
        };
        if let Some(v) = vector {
            part.vectors.get_or_insert_with(Vec::new).push(v);
        }
        part.docs.push(doc);
    }
    Ok(parts)
}

/// Whether `entry` is an erasure receipt (`tape.erased`).
pub(super) fn is_erasure_receipt(entry: &Entry) -> bool {
    matches!(
        BuiltinEvent::from_payload(&entry.payload),
        Ok(Some(BuiltinEvent::Erased(_)))
    )
}

/// The entries the erasure receipts (`tape.erased`) among `entries` change in the index:
/// every entry a receipt names that the store holds as erased, and the next message of
/// its scope, whose context field held its text; read from the store as they are now.
/// `None` when `entries` hold no receipt. A receipt naming entries no erasure changed (a
/// forged one) affects nothing.
pub(super) fn erasure_affected(
    store: &dyn Store,
    entries: &[Entry],
) -> Result<Option<std::collections::BTreeMap<EntryId, Entry>>> {
    let mut affected: std::collections::BTreeMap<EntryId, Entry> = Default::default();
    // The first conversational entry erased in each scope: the messages after it are
    // read once per scope, to find each erased message's successor.
    let mut first_in: HashMap<Scope, EntryId> = HashMap::new();
    let mut any = false;
    for receipt in entries {
        let Ok(Some(BuiltinEvent::Erased(erased))) = BuiltinEvent::from_payload(&receipt.payload)
        else {
            continue;
        };
        any = true;
        let ids: Vec<EntryId> = erased.each_id().filter(|id| *id < receipt.id).collect();
        for chunk in ids.chunks(500) {
            for entry in store.get_many(receipt.scope.tenant(), chunk)? {
                if entry.erased.is_none() {
                    continue;
                }
                if entry.kind().is_conversational() {
                    let first = first_in.entry(entry.scope.clone()).or_insert(entry.id);
                    *first = (*first).min(entry.id);
                }
                affected.insert(entry.id, entry);
            }
        }
    }
    if !any {
        return Ok(None);
    }
    for (scope, first) in first_in {
        let after = memtape_core::Filter {
            after: Some(first),
            kinds: Kind::conversational().collect(),
            ..Default::default()
        };
        // The message after an erased one held its text as context.
        let mut previous_erased = true;
        for entry in store.scan(&scope, &after)? {
            let erased = affected.get(&entry.id).is_some_and(|e| e.erased.is_some());
            if previous_erased && !erased {
                affected.insert(entry.id, entry);
            }
            previous_erased = erased;
        }
    }
    Ok(Some(affected))
}

/// The documents `entries` make, each with its context.
pub(super) fn new_docs(store: &dyn Store, entries: &[Entry]) -> Result<Vec<NewDoc>> {
    let mut docs: Vec<NewDoc> = entries.iter().filter_map(NewDoc::from_entry).collect();
    add_context(store, entries, &mut docs, |_| true)?;
    Ok(docs)
}

/// Pages through `tenant`'s entries after `start` on a reader thread, feeding `f` one page at a time
/// through a bounded queue (two pages), until the tape ends or `f` returns `false`.
fn pages(
    store: &dyn Store,
    tenant: &str,
    start: EntryId,
    mut f: impl FnMut(Vec<Entry>) -> Result<bool>,
) -> Result<()> {
    let (tx, rx) = sync_channel::<Result<Vec<Entry>>>(2);
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut after = start;
            loop {
                let page = store
                    .entries_after_in(tenant, after, BATCH)
                    .map_err(Error::from);
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
        for page in rx {
            if !f(page?)? {
                break;
            }
        }
        Ok(())
    })
}

/// Fills in each conversational document's context: the text of the conversational
/// entry before it in its scope, from this batch or, for a batch's first message of a
/// scope, from the tape (one read for all those scopes, [`Store::previous_messages`]).
/// So an index rebuilt from scratch and one caught up in pieces hold the same documents.
/// Only the documents of the tenants `wanted` accepts get theirs; the others' stay empty.
fn add_context(
    store: &dyn Store,
    entries: &[Entry],
    docs: &mut [NewDoc],
    wanted: impl Fn(&str) -> bool,
) -> Result<()> {
    let conversational = || {
        entries
            .iter()
            .filter(|e| e.kind().is_conversational() && wanted(e.scope.tenant()))
    };
    // The first message of each scope in the batch that is a document looks back on the
    // tape (one without text leaves its successor no context either way).
    let has_doc: HashSet<EntryId> = docs.iter().map(|d| d.id).collect();
    let mut seen: HashSet<&Scope> = HashSet::new();
    let firsts: Vec<(Scope, EntryId)> = conversational()
        .filter(|e| seen.insert(&e.scope))
        .filter(|e| has_doc.contains(&e.id))
        .map(|e| (e.scope.clone(), e.id))
        .collect();
    let before = store.previous_messages(&firsts)?;
    let mut last: HashMap<Scope, String> = firsts
        .into_iter()
        .zip(before)
        .map(|((scope, _), prev)| {
            let text = prev.and_then(|p| p.payload.search_text());
            (scope, text.unwrap_or_default())
        })
        .collect();
    let mut doc_iter = docs.iter_mut().peekable();
    for entry in conversational() {
        // Documents come in entry order; an entry without text has none.
        let mut own = None;
        while let Some(doc) = doc_iter.next_if(|d| d.id <= entry.id) {
            if doc.id == entry.id {
                own = Some(doc);
            }
        }
        let text = match own {
            Some(doc) => {
                doc.context = last.get(&entry.scope).cloned().unwrap_or_default();
                doc.text.clone()
            }
            None => String::new(),
        };
        last.insert(entry.scope.clone(), text);
    }
    Ok(())
}
