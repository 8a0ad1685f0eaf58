//! Qanot's `memory_search` across the memory tiers (long-term memory, the daily notes of
//! the last 30 days, the working state, and /memories), and the line search Bub's
//! `memory.recall` shares with it.
//!
//! With a search index attached, the query runs through it (BM25 + vectors): memory
//! changes are tape events, so the index already holds every version. A hit counts only
//! while its text is still in the current file; it is then mapped to the lines of that
//! file it wrote, and the lines sharing the most words with the query are returned.
//! Without an index, the search is the seed's case-insensitive substring match.

use std::collections::HashSet;

use chrono::Datelike;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use memtape_core::memory::{Change, MemoryView, Op, paths};
use memtape_core::{Kind, Scope};
use memtape_search::{Mode, SearchFilter, SearchRequest, text};
use memtape_store::Store;

use super::{Family, ToolOutput, ToolSpec, input};
use crate::{Engine, Error, Result};

/// How many days of daily notes memory_search covers (the seed's "last 30").
pub const SEARCH_DAYS: u64 = 30;

/// Lines returned per file a hit maps to.
const LINES_PER_HIT: usize = 3;

/// One matching line of a memory file, as Qanot's memory_search returns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SearchLine {
    /// The workspace path (MEMORY.md, memory/2025-01-15.md, …).
    pub file: String,
    /// The 1-based line number.
    pub line: usize,
    /// The line's text.
    pub content: String,
}

pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: "memory_search",
        family: Family::Qanot,
        description: "Search memory: long-term memory (MEMORY.md), the daily notes of the last \
                      30 days, the working state (SESSION-STATE.md), /memories and the event \
                      history (HISTORY.md, which is not in the prompt). `file` searches one \
                      file only, as grep would (e.g. HISTORY.md). Returns matching lines as \
                      [{file, line, content}].",
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "file": {"type": "string", "description": "Search only this memory file (e.g. HISTORY.md, memory/2026-03-10.md), or the files of a folder ending in / (memories/)."}
            },
            "required": ["query"]
        }),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Search {
    query: String,
    limit: Option<usize>,
    file: Option<String>,
}

/// The memory files a search named with `file` covers: that file, or the files of a
/// folder (`memories/`). A leading `/` is allowed (`/memories/…`, as Anthropic's tool
/// names them). An error names a file or folder the memory does not hold.
pub(super) fn only_file<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    file: &str,
) -> Result<impl Fn(&str) -> bool + use<S>> {
    let file = file.trim().trim_start_matches('/').to_owned();
    let named = file.clone();
    if file.is_empty() {
        return Err(Error::Tool(
            "Error: file is empty; name a memory file such as HISTORY.md".into(),
        ));
    }
    let mut views = vec![engine.memory_log(scope)?.0.view()];
    if scope.user().is_some() {
        views.push(engine.memory_log(&scope.agent_scope())?.0.view());
    }
    let folder = file.ends_with('/');
    let covers = move |path: &str| {
        if folder {
            path.starts_with(file.as_str())
        } else {
            path == file
        }
    };
    if !views
        .iter()
        .any(|v| v.files.keys().any(|p| covers(p.as_str())))
    {
        return Err(Error::Tool(format!(
            "Error: the memory has no {} {named:?} (memory_show lists its files)",
            if folder { "folder" } else { "file" }
        )));
    }
    Ok(covers)
}

pub(super) fn call<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    args: &Value,
) -> Result<ToolOutput> {
    let Search { query, limit, file } = input("memory_search", args)?;
    if query.trim().is_empty() {
        return Err(Error::Tool("Error: the query is empty".into()));
    }
    let limit = limit.unwrap_or(10).clamp(1, 50);
    if let Some(file) = file {
        let only = only_file(engine, scope, &file)?;
        let lines = search_lines(engine, scope, &query, limit, &only)?;
        return Ok(ToolOutput::json(&lines));
    }
    let since = engine.now().date_naive() - chrono::Days::new(SEARCH_DAYS);
    let admit = |path: &str| {
        path == paths::MEMORY
            || path == paths::SESSION_STATE
            || path == paths::HISTORY
            || path.starts_with(paths::MEMORIES_DIR)
            || paths::daily_date(path).is_some_and(|d| d >= since)
    };
    let lines = search_lines(engine, scope, &query, limit, &admit)?;
    Ok(ToolOutput::json(&lines))
}

/// The lines of the files `admit` accepts that match `query` best, at most `limit`.
pub(super) fn search_lines<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    query: &str,
    limit: usize,
    admit: &dyn Fn(&str) -> bool,
) -> Result<Vec<SearchLine>> {
    if query.len() > memtape_search::MAX_QUERY_BYTES {
        return Err(Error::Tool(format!(
            "Error: the query is {} bytes; at most {} are accepted (search for the words that \
             matter)",
            query.len(),
            memtape_search::MAX_QUERY_BYTES
        )));
    }
    let own = engine.memory_log(scope)?.0.view();
    let shared = match scope.user() {
        Some(_) => Some(engine.memory_log(&scope.agent_scope())?.0.view()),
        None => None,
    };
    let mut out = if engine.index().is_some() {
        indexed(engine, scope, query, limit, admit, &own, shared.as_ref())?
    } else {
        Vec::new()
    };
    if out.is_empty() {
        out = substring(query, limit, admit, &own, shared.as_ref());
    }
    Ok(out)
}

/// The seed's search: every line containing the query, case-insensitively, in the order
/// long-term memory, working state, daily notes (newest first), then the other files.
fn substring(
    query: &str,
    limit: usize,
    admit: &dyn Fn(&str) -> bool,
    own: &MemoryView,
    shared: Option<&MemoryView>,
) -> Vec<SearchLine> {
    let needle = query.trim().to_lowercase();
    let mut files: Vec<(&str, &str)> = own
        .files
        .iter()
        .map(|(p, f)| (p.as_str(), f.content.as_str()))
        .collect();
    if let Some(shared) = shared {
        for (p, f) in &shared.files {
            if !own.files.contains_key(p) {
                files.push((p, &f.content));
            }
        }
    }
    // Long-term memory, working state, daily notes newest first, then the rest by path.
    let rank = |p: &str| match p {
        paths::MEMORY => (0, 0),
        paths::SESSION_STATE => (1, 0),
        p => paths::daily_date(p).map_or((3, 0), |d| (2, -i64::from(d.num_days_from_ce()))),
    };
    files.retain(|(p, _)| admit(p));
    files.sort_by(|a, b| rank(a.0).cmp(&rank(b.0)).then(a.0.cmp(b.0)));
    let mut out = Vec::new();
    for (path, content) in files {
        for (i, line) in content.lines().enumerate() {
            if line.to_lowercase().contains(&needle) {
                out.push(SearchLine {
                    file: path.to_owned(),
                    line: i + 1,
                    content: line.to_owned(),
                });
                if out.len() == limit {
                    return out;
                }
            }
        }
    }
    out
}

/// The search through the index: hits are memory changes, mapped to the current files
/// that still hold what they wrote.
fn indexed<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    query: &str,
    limit: usize,
    admit: &dyn Fn(&str) -> bool,
    own: &MemoryView,
    shared: Option<&MemoryView>,
) -> Result<Vec<SearchLine>> {
    let mut filter = SearchFilter::tenant(scope.tenant());
    filter.agent = Some(scope.agent_name().to_owned());
    filter.kinds = vec![Kind::Event];
    let mode = match engine.index().and_then(|i| i.embedder()) {
        Some(_) => Mode::Hybrid,
        None => Mode::Bm25,
    };
    let request = SearchRequest::new(query, filter)
        .limit((limit * 5).max(50))
        .mode(mode);
    let hits = engine.search(&request)?;
    let wanted = query_terms(query);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for hit in hits {
        let entry = &hit.entry;
        if entry.scope.session().is_some() {
            continue;
        }
        // The user's own changes, or the agent's where the user does not override the file.
        let (view, from_shared) = match (entry.scope.user(), shared) {
            (None, Some(shared)) => (shared, true),
            (None, None) => (own, false),
            (Some(u), _) if Some(u) == scope.user() => (own, false),
            _ => continue,
        };
        let Some(Ok(change)) = Change::from_entry(entry) else {
            continue;
        };
        for (path, file) in &view.files {
            if !file.parts.contains(&entry.id) || !admit(path) {
                continue;
            }
            if from_shared && own.files.contains_key(path) {
                continue;
            }
            let all: Vec<&str> = file.content.lines().collect();
            let (from, to) = region(&change, &file.content).unwrap_or((0, all.len()));
            for i in best_lines(&all, from, to, &wanted) {
                if seen.insert((path.clone(), i)) {
                    out.push(SearchLine {
                        file: path.clone(),
                        line: i + 1,
                        content: all[i].to_owned(),
                    });
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The lines (`from..to`, 0-based) of `content` that `change` wrote, if its text is still
/// there.
fn region(change: &Change, content: &str) -> Option<(usize, usize)> {
    change.ops.iter().find_map(|op| {
        let text = match op {
            Op::Write { content, .. } => content,
            Op::Append { text, .. } => text,
            _ => return None,
        };
        let at = content
            .find(text.trim_end())
            .filter(|_| !text.trim().is_empty())?;
        let from = content[..at].matches('\n').count();
        Some((from, from + text.trim_end().lines().count().max(1)))
    })
}

/// The query's content words (all its words when it has only stop words).
fn query_terms(query: &str) -> Vec<String> {
    let all = text::terms(query);
    let content: Vec<String> = all
        .iter()
        .filter(|t| !text::is_stop_word(t))
        .cloned()
        .collect();
    if content.is_empty() { all } else { content }
}

/// Whether two words match: equal, or sharing a stem-like prefix of five letters.
fn same_word(a: &str, b: &str) -> bool {
    a == b || (a.len() >= 5 && b.len() >= 5 && a.as_bytes()[..5] == b.as_bytes()[..5])
}

/// The best lines in `from..to`: those sharing the most query words, in file order among
/// equals; when none shares a word (a vector hit), the first lines with text.
fn best_lines(all: &[&str], from: usize, to: usize, wanted: &[String]) -> Vec<usize> {
    let to = to.min(all.len());
    let mut scored: Vec<(usize, usize)> = (from..to)
        .map(|i| {
            let words = text::terms(all[i]);
            let score = wanted
                .iter()
                .filter(|w| words.iter().any(|x| same_word(w, x)))
                .count();
            (score, i)
        })
        .filter(|(s, _)| *s > 0)
        .collect();
    if scored.is_empty() {
        return (from..to)
            .filter(|i| {
                let l = all[*i].trim();
                !l.is_empty() && !l.starts_with('#')
            })
            .take(1)
            .collect();
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored
        .into_iter()
        .take(LINES_PER_HIT)
        .map(|(_, i)| i)
        .collect()
}
