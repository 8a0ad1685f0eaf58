//! Anthropic's memory tool (`memory_20250818`) on `/memories`: view, create, str_replace,
//! insert, delete and rename, with the result and error texts the models are trained on
//! (see docs/MEMORY-TOOL.md in the shared docs). `/memories/x.md` is the workspace file
//! `memories/x.md`.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::{Value, json};

use memtape_core::memory::{Change, MemoryView, Op, paths};
use memtape_core::{AsOf, Scope};
use memtape_store::Store;

use super::{Family, MAX_VIEW_LINES, ToolOutput, ToolSpec, check_path, check_size, input};
use crate::{Engine, Error, Result};

/// The tool's root as the model sees it.
const ROOT: &str = "/memories";

/// Lines shown around an edit in str_replace's snippet.
const SNIPPET_LINES: usize = 4;

pub(super) fn spec() -> ToolSpec {
    ToolSpec {
        name: "memory",
        family: Family::Anthropic,
        description: "Anthropic's memory tool (memory_20250818): view, create, str_replace, \
                      insert, delete and rename files under /memories, which persist across \
                      conversations.",
        input_schema: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "delete", "rename"]},
                "path": {"type": "string", "description": "A path under /memories."},
                "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2, "description": "view: [start, end] lines, 1-based; end -1 reads to the end."},
                "file_text": {"type": "string", "description": "create: the file's content."},
                "old_str": {"type": "string", "description": "str_replace: the exact text to replace (must occur once)."},
                "new_str": {"type": "string", "description": "str_replace: the replacement."},
                "insert_line": {"type": "integer", "minimum": 0, "description": "insert: the line after which to insert (0 = before the first line)."},
                "insert_text": {"type": "string", "description": "insert: the text to insert."},
                "old_path": {"type": "string", "description": "rename: the current path."},
                "new_path": {"type": "string", "description": "rename: the new path."}
            },
            "required": ["command"]
        }),
    }
}

#[derive(Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
enum Command {
    View {
        path: String,
        view_range: Option<[i64; 2]>,
    },
    Create {
        path: String,
        file_text: String,
    },
    StrReplace {
        path: String,
        old_str: String,
        #[serde(default)]
        new_str: String,
    },
    Insert {
        path: String,
        insert_line: i64,
        insert_text: String,
    },
    Delete {
        path: String,
    },
    Rename {
        old_path: String,
        new_path: String,
    },
}

/// A `/memories` path mapped to the workspace: `None` for the root itself.
fn workspace_path(path: &str) -> Result<Option<String>> {
    let outside = || {
        Error::Tool(format!(
            "Error: The path {path} is outside {ROOT}; memory paths start with {ROOT}/"
        ))
    };
    let rest = path.strip_prefix(ROOT).ok_or_else(outside)?;
    let rest = match rest {
        "" | "/" => return Ok(None),
        r => r.strip_prefix('/').ok_or_else(outside)?,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let relative = format!("{}{rest}", paths::MEMORIES_DIR);
    check_path(&relative).map_err(|e| match e {
        Error::Invalid(inner) => {
            Error::Tool(format!("Error: The path {path} is not allowed: {inner}"))
        }
        other => other,
    })?;
    Ok(Some(relative))
}

/// The model-facing path of a workspace path under `memories/`.
fn shown(relative: &str) -> String {
    format!("{ROOT}/{}", &relative[paths::MEMORIES_DIR.len()..])
}

fn not_found(path: &str) -> Error {
    Error::Tool(format!(
        "The path {path} does not exist. Please provide a valid path."
    ))
}

fn is_dir(view: &MemoryView, relative: &str) -> bool {
    let prefix = format!("{relative}/");
    view.files.keys().any(|p| p.starts_with(&prefix))
}

/// The file of `view` that `relative` would be inside, if any (a path is a file or a
/// folder, never both).
fn file_above<'v>(view: &'v MemoryView, relative: &str) -> Option<&'v str> {
    relative
        .match_indices('/')
        .map(|(i, _)| &relative[..i])
        .find_map(|folder| view.files.get_key_value(folder).map(|(p, _)| p.as_str()))
}

/// Whether `relative` names a file or a folder of `view`.
fn exists(view: &MemoryView, relative: &str) -> bool {
    view.files.contains_key(relative) || is_dir(view, relative)
}

/// A file's lines, without the empty piece after a final newline.
fn lines(content: &str) -> Vec<&str> {
    let mut v: Vec<&str> = content.split('\n').collect();
    if v.last() == Some(&"") {
        v.pop();
    }
    v
}

fn numbered(out: &mut String, lines: &[&str], first: usize) {
    for (i, line) in lines.iter().enumerate() {
        let _ = write!(out, "\n{:>6}\t{line}", first + i);
    }
}

/// A size the way `du -h` prints it.
fn human(bytes: usize) -> String {
    let units = ["K", "M", "G"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1}{}", units[unit])
    } else {
        format!("{value:.0}{}", units[unit])
    }
}

pub(super) fn call<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    args: &Value,
    as_of: Option<&AsOf>,
) -> Result<ToolOutput> {
    let command: Command = input("memory", args)?;
    if as_of.is_some() && !matches!(command, Command::View { .. }) {
        return Err(super::no_travel("memory (all but view)"));
    }
    match command {
        Command::View { path, view_range } => {
            let view = engine.memory_as_of(scope, as_of)?;
            view_path(&view, &path, view_range).map(ToolOutput::ok)
        }
        Command::Create { path, file_text } => {
            let Some(relative) = workspace_path(&path)? else {
                return Err(Error::Tool(format!(
                    "Error: {path} is a directory; create a file inside it"
                )));
            };
            check_size(&path, &file_text)?;
            engine.change_memory(scope, |own| {
                let view = engine.layered(scope, own.clone())?;
                if is_dir(&view, &relative) {
                    return Err(Error::Tool(format!(
                        "Error: {path} is a directory; create a file inside it"
                    )));
                }
                if let Some(file) = file_above(&view, &relative) {
                    return Err(Error::Tool(format!(
                        "Error: {} is a file; {path} cannot be created inside it",
                        shown(file)
                    )));
                }
                Ok(Some(Change::one(
                    Op::Write {
                        path: relative.clone(),
                        content: file_text.clone(),
                    },
                    "memory.create",
                )))
            })?;
            Ok(ToolOutput::ok(format!(
                "File created successfully at: {path}"
            )))
        }
        Command::StrReplace {
            path,
            old_str,
            new_str,
        } => {
            let relative = file_path(&path)?;
            let mut snippet = String::new();
            engine.change_memory(scope, |own| {
                let view = engine.layered(scope, own.clone())?;
                let content = existing_file(&view, &relative, &path)?;
                if old_str.is_empty() {
                    return Err(Error::Tool("Error: old_str is empty; give the exact text to replace".into()));
                }
                let starts: Vec<usize> = content.match_indices(&old_str).map(|(i, _)| i).collect();
                match starts.as_slice() {
                    [] => {
                        return Err(Error::Tool(format!(
                            "No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
                        )));
                    }
                    [_] => {}
                    many => {
                        let at: Vec<String> = many
                            .iter()
                            .map(|i| (content[..*i].matches('\n').count() + 1).to_string())
                            .collect();
                        return Err(Error::Tool(format!(
                            "No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines: {}. Please ensure it is unique",
                            at.join(", ")
                        )));
                    }
                }
                let new = content.replacen(&old_str, &new_str, 1);
                check_size(&path, &new)?;
                let first = content[..starts[0]].matches('\n').count();
                let last = first + new_str.matches('\n').count();
                let all = lines(&new);
                let from = first.saturating_sub(SNIPPET_LINES);
                let to = (last + SNIPPET_LINES + 1).min(all.len());
                snippet.clear();
                numbered(&mut snippet, &all[from..to.max(from)], from + 1);
                Ok(Some(Change::one(Op::Write { path: relative.clone(), content: new }, "memory.str_replace")))
            })?;
            Ok(ToolOutput::ok(format!(
                "The memory file has been edited.{snippet}"
            )))
        }
        Command::Insert {
            path,
            insert_line,
            insert_text,
        } => {
            let relative = file_path(&path)?;
            engine.change_memory(scope, |own| {
                let view = engine.layered(scope, own.clone())?;
                let content = existing_file(&view, &relative, &path)?;
                let mut all = lines(content);
                let count = all.len();
                let at = usize::try_from(insert_line).ok().filter(|n| *n <= count).ok_or_else(|| {
                    Error::Tool(format!(
                        "Error: Invalid `insert_line` parameter: {insert_line}. It should be within the range of lines of the file: [0, {count}]"
                    ))
                })?;
                let added = lines(&insert_text);
                all.splice(at..at, added);
                let mut new = all.join("\n");
                if content.ends_with('\n') || content.is_empty() {
                    new.push('\n');
                }
                check_size(&path, &new)?;
                Ok(Some(Change::one(Op::Write { path: relative.clone(), content: new }, "memory.insert")))
            })?;
            Ok(ToolOutput::ok(format!("The file {path} has been edited.")))
        }
        Command::Delete { path } => {
            let Some(relative) = workspace_path(&path)? else {
                return Err(Error::Tool(format!(
                    "Error: cannot delete {ROOT} itself; delete the files in it"
                )));
            };
            engine.change_memory(scope, |own| {
                let there = exists(own, &relative);
                if !there {
                    let view = engine.layered(scope, own.clone())?;
                    if exists(&view, &relative) {
                        return Err(shared_only(&path));
                    }
                    return Err(not_found(&path));
                }
                Ok(Some(Change::one(
                    Op::Delete {
                        path: relative.clone(),
                    },
                    "memory.delete",
                )))
            })?;
            Ok(ToolOutput::ok(format!("Successfully deleted {path}")))
        }
        Command::Rename { old_path, new_path } => {
            let from = workspace_path(&old_path)?
                .ok_or_else(|| Error::Tool(format!("Error: cannot rename {ROOT} itself")))?;
            let to = workspace_path(&new_path)?.ok_or_else(|| {
                Error::Tool(format!("Error: The destination {new_path} already exists"))
            })?;
            if to.starts_with(&format!("{from}/")) {
                return Err(Error::Tool(format!(
                    "Error: cannot move {old_path} into itself ({new_path})"
                )));
            }
            engine.change_memory(scope, |own| {
                let view = engine.layered(scope, own.clone())?;
                if !exists(own, &from) {
                    if exists(&view, &from) {
                        return Err(shared_only(&old_path));
                    }
                    return Err(not_found(&old_path));
                }
                if exists(&view, &to) {
                    return Err(Error::Tool(format!(
                        "Error: The destination {new_path} already exists"
                    )));
                }
                Ok(Some(Change::one(
                    Op::Rename {
                        from: from.clone(),
                        to: to.clone(),
                    },
                    "memory.rename",
                )))
            })?;
            Ok(ToolOutput::ok(format!(
                "Successfully renamed {old_path} to {new_path}"
            )))
        }
    }
}

/// A path that must name a file (not the root).
fn file_path(path: &str) -> Result<String> {
    workspace_path(path)?.ok_or_else(|| {
        Error::Tool(format!(
            "Error: The path {path} is a directory; this command works on files"
        ))
    })
}

fn existing_file<'v>(view: &'v MemoryView, relative: &str, path: &str) -> Result<&'v str> {
    match view.content(relative) {
        Some(c) => Ok(c),
        None if is_dir(view, relative) => Err(Error::Tool(format!(
            "Error: The path {path} is a directory; this command works on files"
        ))),
        None => Err(not_found(path)),
    }
}

fn shared_only(path: &str) -> Error {
    Error::Tool(format!(
        "Error: {path} belongs to the agent's shared memory, not this user's; change it in the agent's scope"
    ))
}

fn view_path(view: &MemoryView, path: &str, range: Option<[i64; 2]>) -> Result<String> {
    let relative = workspace_path(path)?;
    let dir = match &relative {
        None => Some(paths::MEMORIES_DIR.trim_end_matches('/').to_owned()),
        Some(r) if !view.files.contains_key(r) && is_dir(view, r) => Some(r.clone()),
        Some(_) => None,
    };
    if let Some(dir) = dir {
        if range.is_some() {
            return Err(Error::Tool(format!(
                "Error: The `view_range` parameter is not allowed when {path} is a directory."
            )));
        }
        return Ok(list_dir(view, &dir, path));
    }
    let relative = relative.unwrap_or_default();
    let content = view.content(&relative).ok_or_else(|| not_found(path))?;
    let all = lines(content);
    let n = all.len();
    let (start, end) = match range {
        None => (1, n),
        Some([start, end]) => {
            let bad = |why: String| {
                Error::Tool(format!(
                    "Error: Invalid `view_range` parameter: [{start}, {end}]. {why}"
                ))
            };
            if start < 1 || usize::try_from(start).is_ok_and(|s| s > n.max(1)) {
                return Err(bad(format!(
                    "Its first element `{start}` should be within the range of lines of the file: [1, {n}]"
                )));
            }
            let start = usize::try_from(start).unwrap_or(1);
            let end = if end == -1 {
                n
            } else {
                let e = usize::try_from(end).map_err(|_| {
                    bad(format!(
                        "Its second element `{end}` should be -1 or a line number"
                    ))
                })?;
                if e < start {
                    return Err(bad(format!(
                        "Its second element `{end}` should be larger or equal than its first `{start}`"
                    )));
                }
                if e > n {
                    return Err(bad(format!(
                        "Its second element `{end}` should be smaller than the number of lines in the file: `{n}`"
                    )));
                }
                e
            };
            (start, end)
        }
    };
    if end + 1 - start.min(end + 1) > MAX_VIEW_LINES {
        return Err(Error::Tool(format!(
            "Error: {path} has {n} lines, more than {MAX_VIEW_LINES} at once; view part of it with view_range"
        )));
    }
    let mut out = format!("Here's the content of {path} with line numbers:");
    if start <= end {
        numbered(&mut out, &all[start - 1..end], start);
    }
    Ok(out)
}

/// The listing of a directory, two levels deep, hidden items and node_modules skipped.
fn list_dir(view: &MemoryView, dir: &str, shown_path: &str) -> String {
    let prefix = format!("{dir}/");
    let hidden = |rel: &str| {
        rel.split('/')
            .any(|s| s.starts_with('.') || s == "node_modules")
    };
    let mut entries: std::collections::BTreeMap<String, usize> = Default::default();
    let mut total = 0;
    for (path, file) in &view.files {
        let Some(rel) = path.strip_prefix(&prefix) else {
            continue;
        };
        if hidden(rel) {
            continue;
        }
        let size = file.content.len();
        total += size;
        let parts: Vec<&str> = rel.split('/').collect();
        for depth in 1..=parts.len().min(2) {
            *entries.entry(parts[..depth].join("/")).or_default() += size;
        }
    }
    let mut out = format!(
        "Here're the files and directories up to 2 levels deep in {shown_path}, excluding hidden items and node_modules:\n{}\t{}",
        human(total),
        shown_path.trim_end_matches('/')
    );
    for (rel, size) in entries {
        let _ = write!(
            out,
            "\n{}\t{}",
            human(size),
            shown(&format!("{prefix}{rel}"))
        );
    }
    out
}
