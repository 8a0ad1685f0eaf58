//! Bub's memory tools: `memory.save`, `memory.daily`, `memory.recall`, `memory.show`,
//! `memory.clear`, and `memory.forget` (the seed's phase 3).

use std::fmt::Write as _;

use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::{Value, json};

use memtape_core::memory::paths;
use memtape_core::{AsOf, EntryId, Scope};
use memtape_store::Store;

use super::{Family, ToolOutput, ToolSpec, check_size, input, search};
use crate::{Engine, Error, Result};

/// Bub's recall window when none is given (days).
const RECALL_DAYS: u32 = 7;

/// Bub's recommended ceiling for long-term memory (seed 001, 7.1: "recommended < 4KB").
pub const LONG_TERM_RECOMMENDED_BYTES: usize = 4096;

/// The warning a save of `content` as long-term memory earns when it is over Bub's
/// recommended 4 KB (it is saved all the same: the ceiling is advice, not a limit).
pub fn long_term_warning(content: &str) -> Option<String> {
    (content.len() > LONG_TERM_RECOMMENDED_BYTES).then(|| {
        format!(
            "Warning: long-term memory is {} bytes, over the recommended {} (4 KB); \
             summarise it and save it again with memory.save.",
            content.len(),
            LONG_TERM_RECOMMENDED_BYTES
        )
    })
}

pub(super) fn specs() -> Vec<ToolSpec> {
    let spec = |name, description, input_schema| ToolSpec {
        name,
        family: Family::Bub,
        description,
        input_schema,
    };
    vec![
        spec(
            "memory.save",
            "Replace long-term memory (MEMORY.md) with new content. Keep it short \
             (under 4 KB): rewrite it as a summary rather than letting it grow.",
            json!({
                "type": "object",
                "properties": {"content": {"type": "string", "description": "The full new long-term memory."}},
                "required": ["content"],
                "additionalProperties": false
            }),
        ),
        spec(
            "memory.daily",
            "Append a note to the daily notes (memory/YYYY-MM-DD.md) of today or of a given date.",
            json!({
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The note to append."},
                    "date": {"type": "string", "description": "The day, YYYY-MM-DD (default: today)."}
                },
                "required": ["content"],
                "additionalProperties": false
            }),
        ),
        spec(
            "memory.recall",
            "Recall memories: long-term memory and the daily notes of the last `days` days, \
             or, with a query, the lines of those and of the event history (HISTORY.md, \
             not in the prompt) that match it best. `file` recalls one file only (e.g. \
             HISTORY.md), as grep would.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for (optional)."},
                    "days": {"type": "integer", "minimum": 1, "default": RECALL_DAYS, "description": "How many days of daily notes to include."},
                    "file": {"type": "string", "description": "Only this memory file (e.g. HISTORY.md), or the files of a folder ending in /: its matching lines, or without a query its text."}
                },
                "additionalProperties": false
            }),
        ),
        spec(
            "memory.show",
            "Show a summary of memory: its version and every file with its size.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
        spec(
            "memory.clear",
            "Clear all memory. Earlier versions stay on the tape and can be restored.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
        spec(
            "memory.forget",
            "Forget specific memory changes (by the entry ids `memory versions` lists), as if \
             they had never been made.",
            json!({
                "type": "object",
                "properties": {"ids": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1}},
                "required": ["ids"],
                "additionalProperties": false
            }),
        ),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Save {
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Daily {
    content: String,
    date: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Recall {
    query: Option<String>,
    days: Option<u32>,
    file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Forget {
    ids: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Nothing {}

pub(super) fn call<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    name: &str,
    args: &Value,
    as_of: Option<&AsOf>,
) -> Result<ToolOutput> {
    if as_of.is_some() && name != "memory.show" {
        return Err(super::no_travel(name));
    }
    match name {
        "memory.save" => {
            let Save { content } = input(name, args)?;
            check_size(paths::MEMORY, &content)?;
            engine.save_long_term(scope, &content)?;
            Ok(ToolOutput::ok(match long_term_warning(&content) {
                Some(warning) => format!("saved to long-term memory\n{warning}"),
                None => "saved to long-term memory".to_owned(),
            }))
        }
        "memory.daily" => {
            let Daily { content, date } = input(name, args)?;
            let date = date
                .map(|d| {
                    NaiveDate::parse_from_str(&d, "%Y-%m-%d").map_err(|_| {
                        Error::Tool(format!("Error: date {d:?} is not a day (use YYYY-MM-DD)"))
                    })
                })
                .transpose()?;
            if content.trim().is_empty() {
                return Err(Error::Tool("Error: the note is empty".into()));
            }
            let recorded = engine.append_daily(scope, &content, date)?;
            let path = recorded.change.ops[0].paths()[0].to_owned();
            Ok(ToolOutput::ok(format!("appended to daily notes ({path})")))
        }
        "memory.recall" => {
            let Recall { query, days, file } = input(name, args)?;
            let days = days.unwrap_or(RECALL_DAYS);
            if days == 0 {
                return Err(Error::Tool("Error: days must be at least 1".into()));
            }
            match file {
                Some(file) => recall_file(engine, scope, query.as_deref(), &file),
                None => recall(engine, scope, query.as_deref(), days),
            }
        }
        "memory.show" => {
            let Nothing {} = input(name, args)?;
            show(engine, scope, as_of)
        }
        "memory.clear" => {
            let Nothing {} = input(name, args)?;
            Ok(ToolOutput::ok(match engine.clear_memory(scope)? {
                Some(r) => format!(
                    "memory cleared (version {}; earlier versions are kept)",
                    r.version
                ),
                None => "memory is already empty".to_owned(),
            }))
        }
        "memory.forget" => {
            let Forget { ids } = input(name, args)?;
            if ids.is_empty() {
                return Err(Error::Tool(
                    "Error: name at least one change to forget".into(),
                ));
            }
            let ids: Vec<EntryId> = ids.into_iter().map(EntryId).collect();
            let recorded = match engine.forget_memory(scope, &ids) {
                Err(Error::Invalid(e)) => return Err(Error::Tool(format!("Error: {e}"))),
                other => other?,
            };
            Ok(ToolOutput::ok(format!(
                "forgot {} change(s) (version {})",
                ids.len(),
                recorded.version
            )))
        }
        other => Err(Error::Internal(format!("{other} is not a Bub tool"))),
    }
}

/// Without a query: long-term memory and the daily notes of the last `days` days, newest
/// first. With one: the best-matching lines of those files.
fn recall<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    query: Option<&str>,
    days: u32,
) -> Result<ToolOutput> {
    let today = engine.now().date_naive();
    // A window longer than the calendar reaches back to its start.
    let since = today
        .checked_sub_days(chrono::Days::new(u64::from(days.saturating_sub(1))))
        .unwrap_or(chrono::NaiveDate::MIN);
    let in_window = |path: &str| {
        path == paths::MEMORY || paths::daily_date(path).is_some_and(|d| d >= since && d <= today)
    };
    // nanobot: HISTORY.md is not in the prompt, but it is searched.
    let searched = |path: &str| in_window(path) || path == paths::HISTORY;
    if let Some(query) = query.filter(|q| !q.trim().is_empty()) {
        let lines = search::search_lines(engine, scope, query, 10, &searched)?;
        if lines.is_empty() {
            return Ok(ToolOutput::ok(format!("no memories match {query:?}")));
        }
        let mut out = String::new();
        for l in lines {
            let _ = writeln!(out, "{}:{}: {}", l.file, l.line, l.content);
        }
        return Ok(ToolOutput::ok(out.trim_end().to_owned()));
    }
    let view = engine.memory(scope)?;
    let mut out = String::new();
    if let Some(long) = view.content(paths::MEMORY).filter(|c| !c.trim().is_empty()) {
        let _ = write!(out, "## Long-term Memory\n{}\n", long.trim_end());
    }
    for (_, path, file) in view.dailies().into_iter().filter(|(_, p, _)| in_window(p)) {
        let _ = write!(out, "\n## {path}\n{}\n", file.content.trim_end());
    }
    if out.is_empty() {
        out = format!(
            "no memories (long-term memory is empty and there are no daily notes in the last {days} days)"
        );
    }
    Ok(ToolOutput::ok(out.trim().to_owned()))
}

/// `memory.recall` of one file (or folder) only: the lines matching `query`, or without a
/// query the file's text.
fn recall_file<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    query: Option<&str>,
    file: &str,
) -> Result<ToolOutput> {
    let only = search::only_file(engine, scope, file)?;
    if let Some(query) = query.filter(|q| !q.trim().is_empty()) {
        let lines = search::search_lines(engine, scope, query, 10, &only)?;
        if lines.is_empty() {
            return Ok(ToolOutput::ok(format!(
                "no memories in {file} match {query:?}"
            )));
        }
        let mut out = String::new();
        for l in lines {
            let _ = writeln!(out, "{}:{}: {}", l.file, l.line, l.content);
        }
        return Ok(ToolOutput::ok(out.trim_end().to_owned()));
    }
    let view = engine.memory(scope)?;
    let mut out = String::new();
    for (path, f) in view.files.iter().filter(|(p, _)| only(p)) {
        let _ = write!(out, "\n## {path}\n{}\n", f.content.trim_end());
    }
    Ok(ToolOutput::ok(out.trim().to_owned()))
}

fn show<S: Store>(engine: &Engine<S>, scope: &Scope, as_of: Option<&AsOf>) -> Result<ToolOutput> {
    let (log, _) = engine.memory_log(scope)?;
    let view = engine.memory_as_of(scope, as_of)?;
    let version = log.version_as_of(as_of);
    let mut out = format!(
        "memory of {scope}: version {version}, {} file(s)\n",
        view.files.len()
    );
    for (path, file) in &view.files {
        let _ = writeln!(
            out,
            "- {path} ({} bytes, updated {}{})",
            file.content.len(),
            file.updated_at.format("%Y-%m-%d %H:%M"),
            if file.enabled {
                ", in the system prompt"
            } else {
                ""
            }
        );
    }
    if let Some(long) = view.content(paths::MEMORY).filter(|c| !c.trim().is_empty()) {
        let _ = write!(out, "\n## Long-term Memory\n{}\n", long.trim_end());
    }
    Ok(ToolOutput::ok(out.trim_end().to_owned()))
}
