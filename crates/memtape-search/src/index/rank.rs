//! Answering a query: BM25 through FTS5, vectors in memory, fusion, and the ranking
//! boosts (neighbours, session strength, speakers, dates, "when" questions, updates).

use std::collections::HashMap;

use memtape_core::EntryId;
use memtape_store::Store;

use super::bm25::{self, Postings};
use super::{Docs, Shard, lock};
use crate::fusion::{self, List};
use crate::text::terms;
use crate::when::{self, Period};
use crate::{Embedder, Error, Hit, Mode, Result, SearchRequest};

/// BM25 scores taken on the mirror as it was: its build and rows then.
struct Scored {
    build: String,
    rows: usize,
    matches: Vec<(usize, f32)>,
}

impl Shard {
    /// Embeds `texts` with the index's embedder, checking the shape of the answer.
    pub(super) fn embed(&self, texts: &[&str]) -> Result<Option<Vec<Vec<f32>>>> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        checked_embed(&**embedder, texts).map(Some)
    }

    /// Runs a search. The index answers from what it covers; call [`Shard::catch_up`]
    /// first to include the latest appends, or search with [`Shard::search_caught_up`].
    pub fn search(&self, request: &SearchRequest) -> Result<Vec<Hit>> {
        self.search_after(request, || Ok(()))
    }

    /// Catches up with `store` ([`Shard::catch_up`]), then runs a search. A hybrid search
    /// embeds its query while the index catches up, so under a stream of appends the two
    /// costs overlap instead of adding up.
    pub fn search_caught_up(&self, store: &dyn Store, request: &SearchRequest) -> Result<Vec<Hit>> {
        self.search_after(request, || self.catch_up(store).map(|_| ()))
    }

    /// [`Shard::search_caught_up`] that answers from what the index holds when it cannot
    /// catch up (its file cannot be written: a full or read-only disk), saying why: the
    /// second value is `None` when the index covered the whole tape.
    pub fn search_fresh(
        &self,
        store: &dyn Store,
        request: &SearchRequest,
    ) -> Result<(Vec<Hit>, Option<String>)> {
        let behind = std::sync::Mutex::new(None);
        let hits = self.search_after(request, || {
            if let Err(e) = self.catch_up(store) {
                *lock(&behind) = Some(e.to_string());
            }
            Ok(())
        })?;
        Ok((hits, behind.into_inner().unwrap_or_else(|p| p.into_inner())))
    }

    /// Runs `before`, then a search; a hybrid search embeds its query meanwhile.
    fn search_after(
        &self,
        request: &SearchRequest,
        before: impl FnOnce() -> Result<()> + Send,
    ) -> Result<Vec<Hit>> {
        request.check()?;
        let wants_vector = request.mode != Mode::Bm25;
        if wants_vector && self.embedder.is_none() {
            return Err(Error::NoEmbedder(request.mode.as_str()));
        }
        if request.limit == 0 {
            before()?;
            return Ok(Vec::new());
        }
        let embed_query = || -> Result<Option<Vec<f32>>> {
            let text = self.vector_query(request);
            // Per tenant: whether a query is cached must not tell one tenant what another
            // asked.
            let key = (request.filter.tenant.clone(), text);
            let cache = || lock(&self.query_vectors);
            if let Some(v) = cache().get(&key) {
                return Ok(Some(v));
            }
            let vector = self.embed(&[key.1.as_str()])?.and_then(|mut v| v.pop());
            if let Some(v) = &vector {
                cache().put(key, v.clone());
            }
            Ok(vector)
        };
        // The postings are read before the mirror is read-locked, so a catch-up's commit
        // never waits behind them, and searches never queue behind that commit.
        let postings = || -> Result<Option<Postings>> {
            match self.inverted_postings(request) {
                Some(candidates) => Ok(Some(candidates)),
                None => self.with_reader(|conn| Postings::read(conn, &request.text)),
            }
        };
        match request.mode {
            Mode::Vector => {
                before()?;
                return self.rank(request, embed_query()?, None, None, None);
            }
            Mode::Bm25 => {
                before()?;
                return self.rank(request, None, postings()?.as_ref(), None, None);
            }
            Mode::Hybrid => {}
        }
        // Hybrid: `before` (a catch-up), then the BM25 matches, run on a thread of their
        // own while this one embeds the query and, once the catch-up is done, searches
        // the vectors; the two lists meet in `rank`. The embedding stays on the caller's
        // thread: ONNX Runtime keeps per-thread buffers, which a fresh thread would set up
        // anew.
        std::thread::scope(|scope| {
            let (caught_up, wait) = std::sync::mpsc::sync_channel::<()>(1);
            // The BM25 thread also scores its matches, off the vector search's path.
            let matches = scope.spawn(move || {
                before()?;
                let _ = caught_up.send(());
                let postings = postings()?;
                let scored = postings.as_ref().map(|p| {
                    let docs = self.read_docs();
                    Scored {
                        build: docs.build.clone(),
                        rows: docs.ids.len(),
                        matches: self.bm25_scores(&docs, p),
                    }
                });
                Ok((postings, scored))
            });
            type Matched = Result<(Option<Postings>, Option<Scored>)>;
            let joined = |matches: std::thread::ScopedJoinHandle<'_, Matched>| {
                matches
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            };
            let query = match embed_query() {
                Ok(query) => query,
                Err(e) => {
                    let _ = joined(matches);
                    return Err(e);
                }
            };
            // The sender is gone without a word only when `before` failed: its error,
            // from the join, is the answer.
            let early = match (&query, wait.recv()) {
                (Some(q), Ok(())) => Some(self.vector_list(request, q)),
                _ => None,
            };
            let (postings, scored) = joined(matches)?;
            let early = early.transpose()?;
            self.rank(request, query, postings.as_ref(), scored, early)
        })
    }

    /// The vector list of `request` for the query vector `q` over the mirror as it is now,
    /// with the build it was searched in.
    fn vector_list(&self, request: &SearchRequest, q: &[f32]) -> Result<(String, List)> {
        let docs = self.read_docs();
        let view = View::new(self, &docs, request);
        Ok((
            docs.build.clone(),
            self.vectors_of(&docs, &view, q, request)?,
        ))
    }

    /// The vector list of `request`: a search of the vectors per pass of `view` (one, or
    /// two with a named period), hits at or below the model's floor left out.
    fn vectors_of(
        &self,
        docs: &Docs,
        view: &View<'_>,
        q: &[f32],
        request: &SearchRequest,
    ) -> Result<List> {
        let depth = self.config.candidates.max(request.limit);
        let floor = self.min_similarity();
        let mut vector = List::new();
        for pass in view.passes() {
            let mut found = self.vector_search(docs, q, depth, request.exact, &pass)?;
            // Below the model's floor a document is unrelated, however it ranks.
            found.retain(|(_, score)| *score > floor);
            vector = fusion::union(vector, found);
        }
        Ok(vector)
    }

    /// The BM25 scores of `postings` over `docs`, best first.
    fn bm25_scores(&self, docs: &Docs, postings: &Postings) -> Vec<(usize, f32)> {
        postings.scores(
            docs,
            bm25::Params {
                k1: self.config.bm25_k1,
                b: self.config.bm25_b,
                context: self.config.context_weight,
            },
        )
    }

    /// The rest of [`Shard::search`], over the mirror, with the query's vector and BM25
    /// postings (if any) and their scores if taken already (used when the mirror has not
    /// changed since), and the vector list if it was searched already (with the build it
    /// was searched in: from another build, it is searched again).
    fn rank(
        &self,
        request: &SearchRequest,
        query_vector: Option<Vec<f32>>,
        postings: Option<&Postings>,
        scored: Option<Scored>,
        searched: Option<(String, List)>,
    ) -> Result<Vec<Hit>> {
        // Every mode looks at the same number of candidates, so the boosts below can lift a
        // document into a short list from below it.
        let depth = self.config.candidates.max(request.limit);
        let floor = self.min_similarity();
        let docs = self.read_docs();
        let matches = match scored {
            // Scored on the mirror as it is now (same build, no rows added since).
            Some(scored) if scored.build == docs.build && scored.rows == docs.ids.len() => {
                Some(scored.matches)
            }
            _ => postings.map(|p| self.bm25_scores(&docs, p)),
        };
        let view = View::new(self, &docs, request);
        let allowed = |row: usize| view.allowed(row);
        let in_period = |row: usize| view.in_period(row);
        let period = view.period;
        let mut bm25 = List::new();
        if let Some(matches) = &matches {
            for pass in view.passes() {
                bm25 = fusion::union(bm25, bm25_best(matches, depth, &pass));
            }
        }
        // Rows keep their numbers within a build, so a list searched on an earlier state
        // of it holds; it may only miss rows added since, which came after the search.
        let vector = match (searched, &query_vector) {
            (Some((build, list)), _) if build == docs.build => list,
            (_, Some(q)) => self.vectors_of(&docs, &view, q, request)?,
            (_, None) => List::new(),
        };
        let mut hits = match request.mode {
            Mode::Bm25 => fusion::only_bm25(&bm25),
            Mode::Vector => fusion::only_vector(&vector),
            Mode::Hybrid => fusion::fuse(&bm25, &vector, self.config.fusion, floor),
        };
        if self.config.neighbour_weight > 0.0 {
            hits = spread(
                &docs,
                hits,
                self.config.neighbour_weight,
                self.config.neighbour_length,
                &allowed,
            );
        }
        if self.config.scope_weight > 0.0 {
            hits = by_scope(&docs, hits, self.config.scope_weight);
        }
        if self.config.opener_weight > 0.0 {
            for (row, hit) in hits.iter_mut() {
                if docs.meta[*row].kind.is_conversational()
                    && docs.neighbours[*row][0].get().is_none()
                {
                    hit.score += self.config.opener_weight;
                }
            }
        }
        // The query's words, for the boosts that read them.
        let words = terms(&request.text);
        if self.config.speaker_weight > 0.0 {
            let named = named_speakers(&docs, &words);
            if !named.is_empty() {
                for (row, hit) in hits.iter_mut() {
                    if docs.meta[*row]
                        .speaker
                        .get()
                        .is_some_and(|s| named.contains(&s))
                    {
                        hit.score += self.config.speaker_weight;
                    }
                }
            }
        }
        if period.is_some() {
            for (row, hit) in hits.iter_mut() {
                if in_period(*row) {
                    hit.score += self.config.time_weight;
                }
            }
        }
        if self.config.when_weight > 0.0 && asks_when(&words) {
            for (row, hit) in hits.iter_mut() {
                if docs.events.contains_key(&(*row as u32)) {
                    hit.score += self.config.when_weight;
                }
            }
        }
        if self.config.update_weight > 0.0 {
            let close = f32::midpoint(1.0, floor);
            updates(
                &docs,
                &mut hits,
                self.config.update_weight,
                close,
                asks_about_the_past(&words),
            );
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

    /// The text of `request`'s query vector: the query without the words that name a
    /// speaker heard in the scopes it searches ("What did Caroline paint?" → "What did
    /// paint?"; a possessive "Caroline's" goes whole). Documents' vectors hold their
    /// speakers' own words without names, and the speaker boost stands for the name. A
    /// query that is nothing but names keeps them.
    fn vector_query(&self, request: &SearchRequest) -> String {
        let docs = self.read_docs();
        if docs.speaker_words.is_empty() {
            return request.text.clone();
        }
        // Each whitespace-separated token with its words; "Caroline's" has "caroline" and
        // "s", and names Caroline.
        let names = |words: &[String]| match words {
            [word] => docs.names_speaker(word, &request.filter),
            [word, s] if s == "s" => docs.names_speaker(word, &request.filter),
            _ => false,
        };
        let tokens: Vec<(&str, Vec<String>)> = request
            .text
            .split_whitespace()
            .map(|token| (token, terms(token)))
            .collect();
        let kept: Vec<&(&str, Vec<String>)> =
            tokens.iter().filter(|(_, words)| !names(words)).collect();
        if kept.len() == tokens.len() || kept.iter().all(|(_, words)| words.is_empty()) {
            return request.text.clone();
        }
        kept.iter()
            .map(|(token, _)| *token)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The cosine a vector match must exceed: the embedder's floor.
    pub fn min_similarity(&self) -> f32 {
        self.embedder.as_ref().map_or(0.0, |e| e.min_similarity())
    }
}

/// What a search admits over one state of the mirror: the scopes its filter admits, and
/// the period its query names, if any.
struct View<'a> {
    docs: &'a Docs,
    request: &'a SearchRequest,
    scopes: Vec<bool>,
    /// Whether the filter admits every row: all the scopes and nothing narrower (then a
    /// row is admitted without a look at its metadata, a read from anywhere in memory
    /// that took a third of a large shard's list scan).
    everything: bool,
    period: Option<Period>,
}

impl<'a> View<'a> {
    fn new(shard: &Shard, docs: &'a Docs, request: &'a SearchRequest) -> View<'a> {
        let scopes = docs.admitted_scopes(&request.filter);
        // A date with a year, else a relative one or one without a year, read at the time
        // of the newest message searched (the conversation's "now").
        let period = (shard.config.time_weight > 0.0)
            .then(|| {
                when::period(&request.text).or_else(|| {
                    // The newest message is looked for only when there is a date to read.
                    when::relative(&request.text, chrono::Utc::now(), true)?;
                    let now = newest(docs, &scopes, &request.filter)?;
                    when::relative(&request.text, now, true)
                })
            })
            .flatten();
        // Every part of the filter by name, so that a new one cannot be missed here.
        let crate::SearchFilter {
            tenant: _,
            agent: _,
            user: _,
            session: _,
            kinds,
            roles,
            since,
            until,
            as_of,
        } = &request.filter;
        let everything = scopes.iter().all(|s| *s)
            && kinds.is_empty()
            && roles.is_empty()
            && since.is_none()
            && until.is_none()
            && as_of.is_none();
        View {
            docs,
            request,
            scopes,
            everything,
            period,
        }
    }

    /// Whether the search's filter admits `row`.
    fn allowed(&self, row: usize) -> bool {
        if self.everything {
            return true;
        }
        let m = &self.docs.meta[row];
        self.scopes[m.scope as usize]
            && self
                .request
                .filter
                .admits(EntryId(self.docs.ids[row]), m.kind, m.role, m.at.get())
    }

    /// Whether `row` falls in the period the query names (its time, or an event it
    /// tells of).
    fn in_period(&self, row: usize) -> bool {
        self.period.is_some_and(|p: Period| {
            p.contains(self.docs.meta[row].at.get())
                || (self
                    .docs
                    .events
                    .get(&(row as u32))
                    .is_some_and(|event| event.overlaps(&p)))
        })
    }

    /// The rows each retriever searches, pass by pass: those the filter admits, and with a
    /// named period, its documents on their own as well.
    fn passes(&self) -> Vec<impl Fn(usize) -> bool + '_> {
        let only_period: &[bool] = if self.period.is_some() {
            &[false, true]
        } else {
            &[false]
        };
        only_period
            .iter()
            .map(move |&only| move |row| self.allowed(row) && (!only || self.in_period(row)))
            .collect()
    }
}

/// The best `depth` of the BM25 `matches` (best first) that pass `allowed`, as `(row,
/// score)`.
fn bm25_best(matches: &[(usize, f32)], depth: usize, allowed: &impl Fn(usize) -> bool) -> List {
    matches
        .iter()
        .filter(|(row, _)| allowed(*row))
        .take(depth)
        .copied()
        .collect()
}

/// The time of the newest conversational document in the scopes a search admits (no
/// later than its `until`), if any.
fn newest(
    docs: &Docs,
    admitted: &[bool],
    filter: &crate::SearchFilter,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let newest = docs
        .scope_tail
        .iter()
        .filter(|(scope, _)| admitted[**scope as usize])
        .map(|(_, row)| docs.meta[*row as usize].at.get())
        .max()?;
    Some(filter.until.map_or(newest, |until| newest.min(until)))
}

/// Whether a query of these `words` asks when something happened ("When did …", "how
/// long ago", "what year", "which month", …).
fn asks_when(words: &[String]) -> bool {
    let pair = |a: &str, b: &str| words.windows(2).any(|w| w[0] == a && w[1] == b);
    words.first().is_some_and(|w| w == "when")
        || (pair("how", "long") && words.iter().any(|w| w == "ago"))
        || ["year", "month", "date", "day", "week"]
            .iter()
            .any(|unit| pair("what", unit) || pair("which", unit))
}

/// How many of the best hits knowledge updates look at.
const UPDATE_DEPTH: usize = 20;

/// Whether a query of these `words` asks about how things were ("before", "used to",
/// "previously", "at first", "originally", "formerly", "old"): then the earlier of two
/// statements wins.
fn asks_about_the_past(words: &[String]) -> bool {
    let has = |w: &str| words.iter().any(|t| t == w);
    [
        "before",
        "previously",
        "originally",
        "formerly",
        "initially",
        "earlier",
        "old",
        "former",
    ]
    .iter()
    .any(|w| has(w))
        || (has("used") && has("to"))
        || (has("at") && has("first"))
}

/// Knowledge updates among the best [`UPDATE_DEPTH`] hits: of two hits by the same speaker
/// of the same user (or, without names, the same role in the same scope) whose vectors are
/// at least `close`, the latest (the earliest when `past`) gains `weight`, once.
fn updates(docs: &Docs, hits: &mut [(usize, Hit)], weight: f32, close: f32, past: bool) {
    fusion::rank(hits);
    let top = hits.len().min(UPDATE_DEPTH);
    // One speaker of one user of one agent: a name alone may recur elsewhere.
    let same_source = |a: usize, b: usize| {
        let (ma, mb) = (&docs.meta[a], &docs.meta[b]);
        let (sa, sb) = (
            &docs.scopes[ma.scope as usize],
            &docs.scopes[mb.scope as usize],
        );
        let same_user = sa.agent_name() == sb.agent_name() && sa.user() == sb.user();
        match (ma.speaker.get(), mb.speaker.get()) {
            (Some(x), Some(y)) => x == y && same_user,
            (None, None) => ma.role == mb.role && ma.scope == mb.scope,
            _ => false,
        }
    };
    // Whether each hit has an earlier and a later restatement among the others.
    let (mut earlier, mut later) = (vec![false; top], vec![false; top]);
    for i in 0..top {
        for j in 0..top {
            let (a, b) = (hits[i].0, hits[j].0);
            // `a` said first (tape order), `b` later, about the same thing.
            if a < b && same_source(a, b) && docs.vectors.between(a, b).is_some_and(|c| c >= close)
            {
                later[i] = true;
                earlier[j] = true;
            }
        }
    }
    for (k, hit) in hits.iter_mut().take(top).enumerate() {
        let gains = if past {
            later[k] && !earlier[k]
        } else {
            earlier[k] && !later[k]
        };
        if gains {
            hit.1.score += weight;
        }
    }
}

/// The speakers (by row) a query of these `words` names: those with a word of their name
/// among them (case-insensitive; "Caroline's" names Caroline).
fn named_speakers(docs: &Docs, words: &[String]) -> Vec<u32> {
    let mut out: Vec<u32> = words
        .iter()
        .filter_map(|t| docs.speaker_words.get(t))
        .flatten()
        .copied()
        .collect();
    out.sort_unstable();
    out.dedup();
    out
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

/// Lets each hit pass `weight` of its score to the conversational entries just before
/// and after it (which become candidates if they pass the filter). What flows to a message
/// longer than the hit is scaled by (hit's length / message's length)^`by_length`: a long
/// answer gains little from the short turn before it that matched.
fn spread(
    docs: &Docs,
    hits: Vec<(usize, Hit)>,
    weight: f32,
    by_length: f32,
    allowed: &impl Fn(usize) -> bool,
) -> Vec<(usize, Hit)> {
    let length = |row: usize| docs.meta[row].tokens[0].max(1) as f32;
    // x^0 is 1, so `by_length` 0 passes every score whole.
    let share = |from: usize, to: usize| (length(from) / length(to)).min(1.0).powf(by_length);
    let base: HashMap<usize, f32> = hits.iter().map(|(r, h)| (*r, h.score)).collect();
    let near = |row: usize| {
        docs.neighbours[row]
            .into_iter()
            .filter_map(super::MaybeRow::get)
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
        let from_neighbours: f32 = near(*row)
            .filter_map(|n| base.get(&n).map(|s| s * share(n, *row)))
            .sum();
        hit.score = base.get(row).copied().unwrap_or(0.0) + weight * from_neighbours;
    }
    all.into_iter().collect()
}

/// `embedder`'s vectors of `texts`, checked: one per text, each of the model's dimension.
pub(super) fn checked_embed(embedder: &dyn Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
    if texts.is_empty() {
        return Ok(Vec::new());
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
    Ok(out)
}
