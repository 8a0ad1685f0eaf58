//! MateClaw's workspace memory tools: list, read, write and edit (exact find-and-replace,
//! optionally every occurrence), answering in the seed's JSON shapes. Only `.md` files,
//! relative paths, no `..`.

use serde::Deserialize;
use serde_json::{Value, json};

use memtape_core::memory::{Change, MemoryFile, Op, paths};
use memtape_core::{AsOf, Scope};
use memtape_store::Store;

use super::{Family, ToolOutput, ToolSpec, check_path, check_size, input};
use crate::{Engine, Error, Result};

const LIST: &str = "list_workspace_memory_files";
const READ: &str = "read_workspace_memory_file";
const WRITE: &str = "write_workspace_memory_file";
const EDIT: &str = "edit_workspace_memory_file";

pub(super) fn specs() -> Vec<ToolSpec> {
    let spec = |name, description, input_schema| ToolSpec {
        name,
        family: Family::MateClaw,
        description,
        input_schema,
    };
    let filename = json!({"type": "string", "description": "A relative .md path, e.g. MEMORY.md or memory/2026-04-01.md."});
    vec![
        spec(
            LIST,
            "List the agent's workspace memory files, optionally those whose name starts with a prefix, by sort order.",
            json!({
                "type": "object",
                "properties": {"filenamePrefix": {"type": "string", "description": "Only files whose path starts with this, e.g. memory/."}}
            }),
        ),
        spec(
            READ,
            "Read a workspace memory file: its content, size, enabled flag and update time.",
            json!({"type": "object", "properties": {"filename": filename}, "required": ["filename"]}),
        ),
        spec(
            WRITE,
            "Create or fully overwrite a workspace memory file (read it first: the write replaces everything).",
            json!({
                "type": "object",
                "properties": {"filename": filename, "content": {"type": "string"}},
                "required": ["filename", "content"]
            }),
        ),
        spec(
            EDIT,
            "Edit a workspace memory file by exact find-and-replace of oldText with newText; \
             oldText must occur once unless replaceAll is true.",
            json!({
                "type": "object",
                "properties": {
                    "filename": filename,
                    "oldText": {"type": "string"},
                    "newText": {"type": "string"},
                    "replaceAll": {"type": "boolean", "default": false}
                },
                "required": ["filename", "oldText", "newText"]
            }),
        ),
    ]
}

// `agentId` is accepted (MateClaw's callers send it) and ignored: the scope names the agent.
// Any other field is refused, never ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct List {
    filename_prefix: Option<String>,
    #[serde(default, rename = "agentId")]
    _agent_id: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Read {
    filename: String,
    #[serde(default, rename = "agentId")]
    _agent_id: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Write {
    filename: String,
    content: String,
    #[serde(default, rename = "agentId")]
    _agent_id: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Edit {
    #[serde(default, rename = "agentId")]
    _agent_id: Option<Value>,
    filename: String,
    old_text: String,
    new_text: String,
    #[serde(default)]
    replace_all: bool,
}

/// MateClaw's filename rules: relative, no traversal, `.md` only.
fn check_filename(filename: &str) -> Result<String> {
    if filename.starts_with('/') || filename.starts_with('\\') {
        return Err(Error::Tool(format!(
            "Error: absolute paths are not allowed: {filename} (use a relative path like MEMORY.md)"
        )));
    }
    if filename.split(['/', '\\']).any(|s| s == "..") {
        return Err(Error::Tool(format!(
            "Error: directory traversal (..) is not allowed: {filename}"
        )));
    }
    if !filename.ends_with(".md") {
        return Err(Error::Tool(format!(
            "Error: only .md files are supported: {filename}"
        )));
    }
    check_path(filename)
}

fn file_json(agent: &str, filename: &str, file: &MemoryFile, content: bool) -> Value {
    let mut v = json!({
        "agentId": agent,
        "filename": filename,
        "enabled": file.enabled,
        "fileSize": file.content.len(),
    });
    if content {
        v["content"] = json!(file.content);
    }
    v["updateTime"] = json!(file.updated_at.to_rfc3339());
    v
}

pub(super) fn call<S: Store>(
    engine: &Engine<S>,
    scope: &Scope,
    name: &str,
    args: &Value,
    as_of: Option<&AsOf>,
) -> Result<ToolOutput> {
    if as_of.is_some() && name != LIST && name != READ {
        return Err(super::no_travel(name));
    }
    let agent = scope.agent_name();
    match name {
        LIST => {
            let List {
                filename_prefix, ..
            } = input(name, args)?;
            let prefix = filename_prefix.unwrap_or_default();
            if prefix.starts_with('/') || prefix.split('/').any(|s| s == "..") {
                return Err(Error::Tool(format!(
                    "Error: the prefix must be a relative path without ..: {prefix}"
                )));
            }
            let view = engine.memory_as_of(scope, as_of)?;
            let mut files: Vec<(&String, &MemoryFile)> = view
                .files
                .iter()
                .filter(|(p, _)| p.starts_with(&prefix) && p.ends_with(".md"))
                .collect();
            files.sort_by(|a, b| (a.1.sort_order, a.0).cmp(&(b.1.sort_order, b.0)));
            let list: Vec<Value> = files
                .into_iter()
                .map(|(p, f)| {
                    let mut v = file_json(agent, p, f, false);
                    if let Some(o) = v.as_object_mut() {
                        o.remove("agentId");
                    }
                    v
                })
                .collect();
            Ok(ToolOutput::json(
                &json!({"agentId": agent, "count": list.len(), "files": list}),
            ))
        }
        READ => {
            let Read { filename, .. } = input(name, args)?;
            let path = check_filename(&filename)?;
            let view = engine.memory_as_of(scope, as_of)?;
            let file = view.files.get(&path).ok_or_else(|| {
                Error::Tool(format!(
                    "Error: workspace memory file not found: {filename}"
                ))
            })?;
            Ok(ToolOutput::json(&file_json(agent, &path, file, true)))
        }
        WRITE => {
            let Write {
                filename, content, ..
            } = input(name, args)?;
            let path = check_filename(&filename)?;
            check_size(&path, &content)?;
            let (mut existed, mut enabled) = (false, false);
            engine.change_memory(scope, |own| {
                existed = engine
                    .layered(scope, own.clone())?
                    .files
                    .contains_key(&path);
                // A write keeps the file's flags; a new file of the scope gets the defaults.
                enabled = own
                    .files
                    .get(&path)
                    .map_or(paths::default_flags(&path).0, |f| f.enabled);
                Ok(Some(Change::one(
                    Op::Write {
                        path: path.clone(),
                        content: content.clone(),
                    },
                    WRITE,
                )))
            })?;
            Ok(ToolOutput::json(&json!({
                "agentId": agent,
                "filename": path,
                "created": !existed,
                "overwritten": existed,
                "enabled": enabled,
                "bytesWritten": content.len(),
                "message": if existed { "Workspace memory file overwritten" } else { "Workspace memory file created" },
            })))
        }
        EDIT => {
            let Edit {
                filename,
                old_text,
                new_text,
                replace_all,
                ..
            } = input(name, args)?;
            let path = check_filename(&filename)?;
            if old_text.is_empty() {
                return Err(Error::Tool(
                    "Error: oldText is empty; give the exact text to replace".into(),
                ));
            }
            let (mut replacements, mut size_after) = (0, 0);
            engine.change_memory(scope, |own| {
                let view = engine.layered(scope, own.clone())?;
                let content = view.content(&path).ok_or_else(|| {
                    Error::Tool(format!("Error: workspace memory file not found: {filename}"))
                })?;
                let found = content.matches(&old_text).count();
                if found == 0 {
                    return Err(Error::Tool(format!(
                        "Error: oldText not found in {filename}: it must match the file's text exactly"
                    )));
                }
                if found > 1 && !replace_all {
                    return Err(Error::Tool(format!(
                        "Error: oldText occurs {found} times in {filename}; include more context to make it unique, or set replaceAll"
                    )));
                }
                let new = if replace_all {
                    content.replace(&old_text, &new_text)
                } else {
                    content.replacen(&old_text, &new_text, 1)
                };
                check_size(&path, &new)?;
                (replacements, size_after) = (found, new.len());
                Ok(Some(Change::one(
                    Op::Write {
                        path: path.clone(),
                        content: new,
                    },
                    EDIT,
                )))
            })?;
            Ok(ToolOutput::json(&json!({
                "agentId": agent,
                "filename": path,
                "replacements": replacements,
                "replaceAll": replace_all,
                "fileSizeAfter": size_after,
                "message": "Workspace memory file edited successfully",
            })))
        }
        other => Err(Error::Internal(format!("{other} is not a MateClaw tool"))),
    }
}
