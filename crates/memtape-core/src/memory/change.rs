//! The ops of a memory change and the `memory.change` event that carries them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::check_path;
use crate::events::MEMORY_CHANGE;
use crate::{Entry, EntryId, Error, Payload, Result};

/// The largest memory file, in bytes (256 KiB): the limit of every way into memory (the
/// tools, the engine's writes, imports, the workspace sync), checked on each op's text by
/// [`Change::validate`] and on the file a change makes by [`MemoryView::check`](super::MemoryView::check).
/// Bub recommends keeping long-term memory under 4 KB; this is the hard stop that keeps a
/// runaway write out of memory and of the prompt.
pub const MAX_FILE_BYTES: usize = 256 * 1024;

/// The refusal of a file of `bytes` bytes, naming the limit.
pub(super) fn too_large(path: &str, bytes: usize) -> Error {
    Error::InvalidMemory(format!(
        "{path} would be {bytes} bytes, over the limit of {MAX_FILE_BYTES} bytes (256 KiB) \
         for one memory file; keep memory files short (summarize, or split into several files)"
    ))
}

/// One operation on the memory workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Creates the file or replaces its whole content.
    Write {
        /// The file.
        path: String,
        /// Its new content.
        content: String,
    },
    /// Appends text to the file, creating it (starting with `heading`, if given) when it
    /// does not exist at that point of the fold, so two concurrent appends to a new daily
    /// note still give one heading.
    Append {
        /// The file.
        path: String,
        /// The text, with whatever separators the caller wants.
        text: String,
        /// What a newly created file starts with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heading: Option<String>,
    },
    /// Removes the file (its versions stay on the tape).
    Delete {
        /// The file.
        path: String,
    },
    /// Moves a file (or every file under a folder, when `from` ends without `.md` and
    /// names a folder) to a new path.
    Rename {
        /// The old path.
        from: String,
        /// The new path.
        to: String,
    },
    /// Sets a file's MateClaw flags.
    Flags {
        /// The file.
        path: String,
        /// Whether the file is injected into the system prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        enabled: Option<bool>,
        /// Its place among injected files (lower first).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sort_order: Option<i64>,
    },
    /// Removes earlier changes from the fold as if they had never been made (Bub's planned
    /// `memory.forget`); the entries themselves stay on the tape.
    Forget {
        /// The `memory.change` entries to leave out.
        changes: Vec<EntryId>,
    },
    /// Removes every file.
    Clear,
}

impl Op {
    /// The paths this op touches (empty for `forget` and `clear`).
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Op::Write { path, .. }
            | Op::Append { path, .. }
            | Op::Delete { path }
            | Op::Flags { path, .. } => vec![path],
            Op::Rename { from, to } => vec![from, to],
            Op::Forget { .. } | Op::Clear => Vec::new(),
        }
    }

    /// The paths this op gives content or a name to (a write's or an append's file, a
    /// rename's new path): the paths a new name can enter memory by.
    pub fn targets(&self) -> Vec<&str> {
        match self {
            Op::Write { path, .. } | Op::Append { path, .. } => vec![path],
            Op::Rename { to, .. } => vec![to],
            _ => Vec::new(),
        }
    }

    /// Every path of this op in Unicode's composed form ([`crate::names::nfc`]).
    fn compose(&mut self) {
        let compose = |path: &mut String| {
            if let std::borrow::Cow::Owned(c) = crate::names::nfc(path) {
                *path = c;
            }
        };
        match self {
            Op::Write { path, .. }
            | Op::Append { path, .. }
            | Op::Delete { path }
            | Op::Flags { path, .. } => compose(path),
            Op::Rename { from, to } => {
                compose(from);
                compose(to);
            }
            Op::Forget { .. } | Op::Clear => {}
        }
    }
}

/// One version of memory: the ops of one `memory.change` event, and what made them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The ops, applied in order.
    pub ops: Vec<Op>,
    /// What made the change (a tool name, `sync`, `wal`, `undo`, …).
    #[serde(default)]
    pub source: String,
    /// The tape entries that caused it, when it came from a conversation: the tool call
    /// that made it, the user message the WAL captured, the model call and the first and
    /// last message of a consolidated span. Empty for a hand edit. At most
    /// [`MAX_CAUSES`]. What `memtape memory blame` follows from a line to its conversation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caused_by: Vec<EntryId>,
}

/// The most entries a change names as its causes.
pub const MAX_CAUSES: usize = 64;

impl Change {
    /// The paths the change touches, each once, in the order its ops first touch them (an
    /// undo that writes a file and sets its flags names it once).
    pub fn paths(&self) -> Vec<&str> {
        let mut paths: Vec<&str> = Vec::new();
        for path in self.ops.iter().flat_map(Op::paths) {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        paths
    }

    /// A change of one op.
    pub fn one(op: Op, source: impl Into<String>) -> Self {
        Change {
            ops: vec![op],
            source: source.into(),
            caused_by: Vec::new(),
        }
    }

    /// This change, caused by `entries` as well (zero ids left out, duplicates once, in
    /// order, the first [`MAX_CAUSES`] kept).
    pub fn caused_by(mut self, entries: impl IntoIterator<Item = EntryId>) -> Self {
        for id in entries {
            if self.caused_by.len() == MAX_CAUSES {
                break;
            }
            if id.0 != 0 && !self.caused_by.contains(&id) {
                self.caused_by.push(id);
            }
        }
        self
    }

    /// Checks every path ([`check_path`]) and the size of every op's text (at most
    /// [`MAX_FILE_BYTES`]), and refuses an empty change. The rule for every way a change
    /// comes in; what a change does to the files is checked by
    /// [`MemoryView::check`](super::MemoryView::check).
    pub fn validate(&self) -> Result<()> {
        if self.ops.is_empty() {
            return Err(Error::InvalidMemory(
                "a memory change needs at least one op".into(),
            ));
        }
        if self.caused_by.len() > MAX_CAUSES {
            return Err(Error::InvalidMemory(format!(
                "a memory change names {} causes; at most {MAX_CAUSES}",
                self.caused_by.len()
            )));
        }
        for op in &self.ops {
            for path in op.paths() {
                check_path(path)?;
            }
            // A name that looks like another may not be given content or a name; a file
            // that has one already (an older store's) can still be deleted or renamed.
            for path in op.targets() {
                for name in path.split('/') {
                    if let Some(why) = crate::names::look_alike(name) {
                        return Err(Error::InvalidPath {
                            path: path.to_owned(),
                            why: format!("the name {name:?} {why}"),
                        });
                    }
                }
            }
            let bytes = match op {
                Op::Write { content, .. } => content.len(),
                Op::Append { text, heading, .. } => {
                    text.len() + heading.as_ref().map_or(0, String::len)
                }
                _ => 0,
            };
            if bytes > MAX_FILE_BYTES {
                return Err(too_large(op.paths()[0], bytes));
            }
        }
        Ok(())
    }

    /// The event that records this change.
    pub fn to_payload(&self) -> Payload {
        Payload::Event(crate::Event {
            name: MEMORY_CHANGE.to_string(),
            data: serde_json::to_value(self).unwrap_or(Value::Null),
        })
    }

    /// The same change with every path in Unicode's composed form (NFC): `é.md` typed as
    /// one character or as `e` and an accent names one file.
    pub fn composed(mut self) -> Change {
        for op in &mut self.ops {
            op.compose();
        }
        self
    }

    /// The change an entry records, if it is a `memory.change` event, its paths composed
    /// ([`Change::composed`]: an older store's decomposed names read as the same files).
    pub fn from_entry(entry: &Entry) -> Option<Result<Change>> {
        match &entry.payload {
            Payload::Event(e) if e.name == MEMORY_CHANGE => Some(
                serde_json::from_value::<Change>(e.data.clone())
                    .map(Change::composed)
                    .map_err(|err| {
                        Error::InvalidEntry(format!("entry {}: bad memory.change: {err}", entry.id))
                    }),
            ),
            _ => None,
        }
    }
}
