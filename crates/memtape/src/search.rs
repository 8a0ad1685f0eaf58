//! Search on the engine: the index as a projection of the tape, brought up to date by its
//! write hook (`hooks.rs`) after every append (or by a background indexer, see
//! [`Engine::set_index_on_write`]) and before every search. A failed catch-up
//! never fails an append that is already durable: the index keeps its mark, logs the
//! failure (a `tracing` warning) and keeps it for [`Engine::index_failure`], and the
//! catch-up at the start of the next search retries and reports the error.

use std::collections::HashMap;

use memtape_core::{Entry, EntryId};
use memtape_search::{Index, Progress, Ranked, SearchRequest};
use memtape_store::Store;

use crate::{Engine, Error, Result};

/// One search result with its entry.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchHit {
    /// The entry found.
    pub entry: Entry,
    /// Its fused score (higher is better; comparable within one search only).
    pub score: f32,
    /// Its place in the BM25 list, if it was there.
    pub bm25: Option<Ranked>,
    /// Its place in the vector list, if it was there.
    pub vector: Option<Ranked>,
}

impl<S: Store> Engine<S> {
    /// Attaches a search index and brings it up to date with the tape at once, so an index
    /// left behind by a crash catches up before it answers anything.
    pub fn with_index(mut self, index: Index) -> Result<Self> {
        index.set_vectors_behind(!self.index_on_write);
        index.catch_up(&self.store)?;
        self.index = Some(index);
        Ok(self)
    }

    /// The search index, if one is attached.
    pub fn index(&self) -> Option<&Index> {
        self.index.as_ref()
    }

    /// Whether every write brings the index up to date before it returns (`true`, the
    /// default) or leaves that to a background indexer calling
    /// [`Engine::catch_up_index_step`] and embedding with [`Index::embed_step`] (`false`,
    /// what a server does, so an append is acknowledged once it is durable instead of once
    /// it is embedded). Either way a
    /// search first catches up, so BM25 finds every append acknowledged before it; with
    /// `false` that catch-up indexes text only ([`Index::set_vectors_behind`]) and vector
    /// search finds an append once the indexer has embedded it.
    pub fn set_index_on_write(&mut self, on: bool) {
        self.index_on_write = on;
        if let Some(index) = &self.index {
            index.set_vectors_behind(!on);
        }
    }

    /// One step of bringing the index's text up to date with the tape, for a background
    /// indexer that must be able to stop between steps: indexes the text of at most one
    /// batch of entries. Returns whether the text is still behind the tape (`false`
    /// without an index). Vectors left behind are the embedding pass's
    /// ([`Index::embed_step`], or [`Index::embed_next`] and [`Index::store_embedded`] on
    /// two threads).
    pub fn catch_up_index_step(&self) -> Result<bool> {
        let Some(index) = &self.index else {
            return Ok(false);
        };
        index.catch_up_step(&self.store)?;
        // A shard a search left half built (a cold tenant) is built on by these steps.
        Ok(index.covered() < self.store.last_id()? || index.is_building())
    }

    /// The last failed catch-up of the attached index (the write hook's included), for a
    /// status report; `None` when there is no index or nothing has failed.
    pub fn index_failure(&self) -> Option<String> {
        self.index.as_ref().and_then(Index::last_failure)
    }

    /// Searches the tape: BM25, vectors or both, under the request's filters. The index
    /// first catches up with the tape, so every acknowledged append is searchable; when it
    /// cannot (a full disk), the search answers from what the index holds
    /// ([`Engine::search_behind`] says so).
    pub fn search(&self, request: &SearchRequest) -> Result<Vec<SearchHit>> {
        Ok(self.search_behind(request)?.0)
    }

    /// [`Engine::search`], and why the index could not catch up with the tape first (its
    /// hits then miss the latest entries), `None` when it did.
    pub fn search_behind(
        &self,
        request: &SearchRequest,
    ) -> Result<(Vec<SearchHit>, Option<String>)> {
        let index = self.index.as_ref().ok_or(Error::NoIndex)?;
        let (hits, behind) = index.search_fresh(&self.store, request)?;
        let ids: Vec<EntryId> = hits.iter().map(|h| h.id).collect();
        let mut entries: HashMap<EntryId, Entry> = self
            .store
            .get_many(&request.filter.tenant, &ids)?
            .into_iter()
            .map(|e| (e.id, e))
            .collect();
        let hits = hits
            .into_iter()
            .map(|hit| {
                let entry = entries.remove(&hit.id).ok_or(Error::NoEntry(hit.id))?;
                Ok(SearchHit {
                    entry,
                    score: hit.score,
                    bm25: hit.bm25,
                    vector: hit.vector,
                })
            })
            .collect::<Result<_>>()?;
        Ok((hits, behind))
    }

    /// Throws the index away and builds it again from the whole tape, with the same model
    /// and settings. Returns how many documents it now holds.
    pub fn reindex(&mut self) -> Result<usize> {
        self.reindex_with(&mut |_, _| {})
    }

    /// [`Engine::reindex`], calling `progress(done, total)` with the tape entries read so
    /// far and in all, after each batch. Other processes keep searching the old index until
    /// the new one is committed.
    pub fn reindex_with(&mut self, progress: Progress<'_>) -> Result<usize> {
        let old = self.index.as_ref().ok_or(Error::NoIndex)?;
        let (path, embedder, config) = (old.path().to_owned(), old.embedder(), old.config());
        let (index, added) = Index::rebuild_from(&path, &self.store, embedder, config, progress)?;
        self.index = Some(index);
        Ok(added)
    }
}
