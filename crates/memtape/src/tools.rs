//! The memory tools (Bub, Anthropic memory_20250818, MateClaw workspace, Qanot memory_search): one registry with JSON schemas.
//!
//! Every tool is a [`ToolSpec`] (name, description, JSON schema of its input) in
//! [`registry`], and runs through [`Engine::call_tool`], whichever surface calls it: Rust,
//! the CLI, or (later) the HTTP and MCP servers. A call the tool refuses — a missing file,
//! an ambiguous edit, a bad argument, a path outside the workspace or one the workspace
//! cannot hold, a file inside a file, a file over [`MAX_FILE_BYTES`] — comes back as a
//! [`ToolOutput`] flagged `is_error`, with the text the model is shown, and changes
//! nothing. Only a failure of the engine itself (the store) is an `Err`.
//!
//! ```
//! use memtape::{Engine, Scope, tools};
//! use serde_json::json;
//!
//! let engine = Engine::in_memory();
//! let agent = Scope::agent("default", "default")?;
//! let out = engine.call_tool(&agent, "memory", &json!({
//!     "command": "create", "path": "/memories/notes.md", "file_text": "likes tea\n"
//! }))?;
//! assert_eq!(out.text, "File created successfully at: /memories/notes.md");
//! assert!(tools::find("memory_save").is_some());
//! # Ok::<(), memtape::Error>(())
//! ```

mod anthropic;
mod bub;
mod mateclaw;
mod search;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use memtape_core::{AsOf, Scope, memory};
use memtape_store::Store;

use crate::{Engine, Error, Result, memory_scope};

pub use bub::{LONG_TERM_RECOMMENDED_BYTES, long_term_warning};
pub use search::SearchLine;

/// The largest memory file, in bytes (256 KiB): the one limit of every way into memory.
pub use memtape_core::memory::MAX_FILE_BYTES;

/// The most lines one `view` returns; longer files are read with `view_range`.
pub const MAX_VIEW_LINES: usize = 2000;

/// Which system a tool comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Bub's `memory.*` tools.
    Bub,
    /// Anthropic's trained memory tool (`memory_20250818`) on `/memories`.
    Anthropic,
    /// MateClaw's workspace memory tools.
    MateClaw,
    /// Qanot's `memory_search`.
    Qanot,
}

/// One tool: its name, what it does and the JSON schema of its input.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The tool's name as its seed spells it (`memory.save`, `memory`, …).
    pub name: &'static str,
    /// Where it comes from.
    pub family: Family,
    /// What it does, for the model.
    pub description: &'static str,
    /// The JSON schema of its input.
    pub input_schema: Value,
}

impl ToolSpec {
    /// The name in the form function-calling APIs accept (`[a-zA-Z0-9_-]`): dots become
    /// underscores, as Bub's `memory.save` is called `memory_save`.
    pub fn function_name(&self) -> String {
        self.name.replace('.', "_")
    }

    /// The tool as an OpenAI-compatible function definition.
    pub fn openai(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.function_name(),
                "description": self.description,
                "parameters": self.input_schema,
            }
        })
    }

    /// The tool as an Anthropic Messages API definition. The memory tool is declared by its
    /// type, which switches on the model's trained behaviour.
    pub fn anthropic(&self) -> Value {
        if self.family == Family::Anthropic {
            json!({"type": "memory_20250818", "name": "memory"})
        } else {
            json!({
                "name": self.function_name(),
                "description": self.description,
                "input_schema": self.input_schema,
            })
        }
    }
}

/// Every memory tool, in a stable order.
pub fn registry() -> Vec<ToolSpec> {
    let mut all = bub::specs();
    all.push(anthropic::spec());
    all.extend(mateclaw::specs());
    all.push(search::spec());
    all
}

/// The tool called `name`, by its seed name or its function name (`memory.save` or
/// `memory_save`).
pub fn find(name: &str) -> Option<ToolSpec> {
    registry()
        .into_iter()
        .find(|s| s.name == name || s.function_name() == name)
}

/// What a tool call gives back to the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolOutput {
    /// The result text (plain text, or JSON text for the tools whose seed answers in JSON).
    pub text: String,
    /// Whether the tool refused the call (the text says why; nothing changed).
    pub is_error: bool,
}

impl ToolOutput {
    fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: false,
        }
    }

    fn json(value: &impl Serialize) -> Self {
        Self::ok(serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")))
    }
}

impl<S: Store> Engine<S> {
    /// Runs the tool `name` with `input` on the memory of `scope` (an agent, an agent and a
    /// user, or a session, whose agent-and-user memory is used). A refusal is an `Ok`
    /// output flagged `is_error`; an `Err` means the engine failed.
    pub fn call_tool(&self, scope: &Scope, name: &str, input: &Value) -> Result<ToolOutput> {
        self.call_tool_as_of(scope, name, input, None)
    }

    /// [`Engine::call_tool`] on memory as it was at `as_of` (now when `None`): the tools
    /// that read (`memory.show`, the memory tool's `view`, MateClaw's list and read) read
    /// the memory of that moment; any other tool is refused, since only reads travel in
    /// time. The model never sees this: it is how the CLI, REST and MCP read the past
    /// through the same code as the present.
    pub fn call_tool_as_of(
        &self,
        scope: &Scope,
        name: &str,
        input: &Value,
        as_of: Option<&AsOf>,
    ) -> Result<ToolOutput> {
        let Some(spec) = find(name) else {
            let names: Vec<&str> = registry().iter().map(|s| s.name).collect();
            return Ok(refused(format!(
                "Error: unknown tool {name:?} (the memory tools are {})",
                names.join(", ")
            )));
        };
        let session = scope;
        let scope = memory_scope(scope)?;
        // What the tool writes is caused by the conversation as it stands: the session's
        // latest message, which is the tool call itself when the agent appended it first.
        let head = match session.session() {
            Some(_) => self.session_state(session, None)?.0,
            None => None,
        };
        let result = crate::tiers::caused_by(head, || match spec.family {
            Family::Bub => bub::call(self, &scope, spec.name, input, as_of),
            Family::Anthropic => anthropic::call(self, &scope, input, as_of),
            Family::MateClaw => mateclaw::call(self, &scope, spec.name, input, as_of),
            Family::Qanot if as_of.is_some() => Err(no_travel(spec.name)),
            Family::Qanot => search::call(self, &scope, input),
        });
        match result {
            Ok(out) => {
                // A Bub session keeps its memory zone on its tape (seed 001, 3.3: every
                // save appends a new zone); nothing is written when memory did not change,
                // nor by a read of the past.
                if !out.is_error && as_of.is_none() {
                    self.memory_changed_in(session)?;
                }
                Ok(out)
            }
            Err(Error::Tool(text)) => Ok(refused(text)),
            Err(Error::Invalid(
                e @ (memtape_core::Error::InvalidPath { .. }
                | memtape_core::Error::InvalidMemory(_)),
            )) => Ok(refused(format!("Error: {e}"))),
            Err(e) => Err(e),
        }
    }
}

/// The refusal of a tool that writes, asked to run as of an earlier moment.
fn no_travel(tool: &str) -> Error {
    Error::Tool(format!(
        "Error: {tool} cannot run as of an earlier moment: only reads travel in time"
    ))
}

fn refused(text: String) -> ToolOutput {
    ToolOutput {
        text,
        is_error: true,
    }
}

/// Reads a tool's input as `T`; a shape error names the tool and what is wrong.
fn input<T: DeserializeOwned>(tool: &str, input: &Value) -> Result<T> {
    T::deserialize(input).map_err(|e| Error::Tool(format!("Error: invalid input for {tool}: {e}")))
}

/// Refuses content over [`MAX_FILE_BYTES`].
fn check_size(path: &str, content: &str) -> Result<()> {
    if content.len() > MAX_FILE_BYTES {
        return Err(Error::Tool(format!(
            "Error: {path} would be {} bytes, over the limit of {MAX_FILE_BYTES} bytes; \
             keep memory files short (summarize, or split into several files)",
            content.len()
        )));
    }
    Ok(())
}

/// Checks a workspace path with the memory rules.
fn check_path(path: &str) -> Result<String> {
    Ok(memory::check_path(path)?)
}
