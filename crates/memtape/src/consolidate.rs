//! nanobot's consolidation (seed 000): the messages of a session that have left the recent
//! window are given to the model with the current MEMORY.md, and the model answers with a
//! `save_memory(history_entry, memory_update)` tool call: a paragraph for HISTORY.md and
//! the whole new MEMORY.md.
//!
//! What memtape adds to nanobot, so that a model that fails or answers badly never loses or
//! corrupts memory:
//! - The span is fixed before the call (the last message in it), and the pointer moves to
//!   exactly there, so a message that arrives while the model thinks is never marked as
//!   consolidated without being read (nanobot measures the session after the call).
//! - The HISTORY.md entry, the new MEMORY.md and the pointer move are written in one
//!   transaction: either all three land or none does, and on any failure the pointer stays.
//! - A missing or empty `history_entry`, a missing `memory_update`, no tool call, another
//!   tool, or arguments that are not an object are errors (nanobot's later, strict form); an
//!   empty `memory_update` leaves MEMORY.md as it is (it never wipes it).
//! - The rewrite is lossless: each fact of MEMORY.md the model left out is kept as a
//!   `memory.dropped` event in the same transaction ([`crate::rewrite`]), and lines another
//!   writer added to MEMORY.md while the model worked are carried into the new text.
//! - The lock is held across processes ([`Engine::lock_consolidation`]), and every model
//!   call, failed or not, is recorded on the tape (`llm.call`).

use std::time::Instant;

use memtape_core::events::{BuiltinEvent, LlmCall};
use memtape_core::memory::{MAX_FILE_BYTES, paths};
use memtape_core::{Entry, EntryId, NewEntry, Scope};
use memtape_llm::{ChatRequest, ChatResponse, Llm, ToolSpec};
use memtape_store::Store;
use serde::Serialize;
use serde_json::{Value, json};

use crate::prompts::{CONSOLIDATION_SYSTEM, CONSOLIDATION_USER};
use crate::rewrite::Edit;
use crate::{Engine, Error, Result, memory_scope};

/// nanobot's `memory_window`: consolidation starts when a session has this many messages
/// after its pointer, and keeps the newest half of them.
pub const MEMORY_WINDOW: usize = 100;

/// The tool the model is asked to call.
pub const SAVE_MEMORY: &str = "save_memory";

/// How a consolidation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsolidateOptions {
    /// nanobot's `memory_window`; the newest `window / 2` messages are kept.
    pub window: usize,
    /// Consolidate every unconsolidated message (nanobot's `archive_all`, used by /new).
    pub archive_all: bool,
    /// The reply's token budget: room for the history entry and the whole new MEMORY.md.
    pub max_tokens: u32,
}

/// The default reply budget of a consolidation.
pub const CONSOLIDATION_MAX_TOKENS: u32 = 2048;

impl Default for ConsolidateOptions {
    fn default() -> Self {
        ConsolidateOptions {
            window: MEMORY_WINDOW,
            archive_all: false,
            max_tokens: CONSOLIDATION_MAX_TOKENS,
        }
    }
}

/// What a consolidation did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Consolidated {
    /// The pointer after it: the last consolidated entry (`None`: nothing to consolidate,
    /// the pointer did not move).
    pub through: Option<EntryId>,
    /// The paragraph appended to HISTORY.md.
    pub history_entry: Option<String>,
    /// Whether MEMORY.md changed.
    pub memory_changed: bool,
    /// How many entries of the conversation were consolidated.
    pub messages: usize,
    /// How many facts the rewrite of MEMORY.md left out (kept as `memory.dropped`).
    pub dropped: usize,
}

/// The `save_memory` tool, as nanobot declares it.
pub fn save_memory_tool() -> ToolSpec {
    ToolSpec {
        name: SAVE_MEMORY.into(),
        description: "Save the memory consolidation result to persistent storage.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "history_entry": {
                    "type": "string",
                    "description": "A paragraph (2-5 sentences) summarizing key events/decisions/topics. Start with [YYYY-MM-DD HH:MM]. Include detail useful for grep search."
                },
                "memory_update": {
                    "type": "string",
                    "description": "Full updated long-term memory as markdown. Include all existing facts plus new ones. Return unchanged if nothing new."
                }
            },
            "required": ["history_entry", "memory_update"]
        }),
    }
}

/// nanobot's line for one message: `[YYYY-MM-DDTHH:MM] ROLE: text` (with `[tools: a, b]`
/// after the role when the message called tools); `None` for a message without text.
fn format_line(entry: &Entry) -> Option<String> {
    let message = entry.message()?;
    let text = message.content_text();
    if text.trim().is_empty() {
        return None;
    }
    let tools: Vec<&str> = message
        .tool_calls
        .iter()
        .map(|c| c.function.name.as_str())
        .collect();
    let tools = if tools.is_empty() {
        String::new()
    } else {
        format!(" [tools: {}]", tools.join(", "))
    };
    Some(format!(
        "[{}] {}{tools}: {text}",
        entry.created_at.format("%Y-%m-%dT%H:%M"),
        message.role.as_str().to_uppercase()
    ))
}

/// Whether `text` starts with a `[YYYY-MM-DD HH:MM]` stamp (the tool asks the model for one).
fn has_stamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 18
        && b[0] == b'['
        && b[17] == b']'
        && chrono::NaiveDateTime::parse_from_str(&text[1..17], "%Y-%m-%d %H:%M").is_ok()
}

/// What `save_memory` was called with: the history paragraph, and the new MEMORY.md
/// (`None` when the model left it empty: nothing changes).
fn save_memory_arguments(reply: &ChatResponse) -> Result<(String, Option<String>)> {
    let Some(call) = reply.tool_calls.iter().find(|c| c.name == SAVE_MEMORY) else {
        if reply.tool_calls.is_empty() {
            let said: String = reply.content.chars().take(200).collect();
            return Err(Error::Model(format!(
                "the model did not call {SAVE_MEMORY}; it answered {said:?}"
            )));
        }
        let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::Model(format!(
            "the model called {} instead of {SAVE_MEMORY}",
            names.join(", ")
        )));
    };
    // nanobot: a value that is not a string is kept as its JSON text.
    let text = |name: &str| -> Result<Option<String>> {
        match call.arguments.get(name) {
            None | Some(Value::Null) => Err(Error::Model(format!(
                "{SAVE_MEMORY} was called without {name}"
            ))),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Ok(Some(other.to_string())),
        }
    };
    let history = text("history_entry")?.ok_or_else(|| {
        Error::Model(format!(
            "{SAVE_MEMORY} was called with an empty history_entry"
        ))
    })?;
    let memory = text("memory_update")?;
    for (name, value) in [
        ("history_entry", Some(&history)),
        ("memory_update", memory.as_ref()),
    ] {
        let Some(value) = value else { continue };
        if value.len() > MAX_FILE_BYTES {
            return Err(Error::Model(format!(
                "{SAVE_MEMORY}'s {name} is {} bytes, more than a memory file holds ({MAX_FILE_BYTES})",
                value.len()
            )));
        }
        if value.contains('\0') {
            return Err(Error::Model(format!(
                "{SAVE_MEMORY}'s {name} contains a NUL byte"
            )));
        }
    }
    Ok((history, memory))
}

/// Whether a provider refused the forced tool choice (some servers only take `auto`), in
/// the words nanobot looks for.
fn refused_tool_choice(e: &memtape_llm::Error) -> bool {
    let memtape_llm::Error::Status {
        status: 400 | 422,
        message,
        ..
    } = e
    else {
        return false;
    };
    let m = message.to_ascii_lowercase();
    [
        "tool_choice",
        "toolchoice",
        "does not support",
        "should be [\"none\", \"auto\"]",
    ]
    .iter()
    .any(|w| m.contains(w))
}

impl<S: Store> Engine<S> {
    /// Calls `llm` with `request`, hands the reply to `use_reply`, and records the call on
    /// the tape (`llm.call` on the agent's tape, with `purpose` and the session) whether it
    /// succeeded or not: a failed call, or a reply `use_reply` refuses, is recorded with
    /// its error.
    pub fn call_llm<T>(
        &self,
        llm: &dyn Llm,
        scope: &Scope,
        purpose: &str,
        request: &ChatRequest,
        use_reply: impl FnOnce(&ChatResponse) -> Result<T>,
    ) -> Result<T> {
        let started = Instant::now();
        let reply = llm.chat(request);
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut call = LlmCall {
            model: llm.model().to_owned(),
            purpose: purpose.to_owned(),
            session: scope.session().map(str::to_owned),
            ms,
            ..LlmCall::default()
        };
        if let Ok(reply) = &reply {
            call.attempts = reply.attempts;
            if let Some(usage) = reply.usage {
                call.prompt_tokens = usage.prompt_tokens;
                call.completion_tokens = usage.completion_tokens;
            }
        }
        let result = match reply {
            Ok(reply) => use_reply(&reply),
            Err(e) => Err(Error::Llm(e)),
        };
        if let Err(e) = &result {
            // The event holds a bounded, printable error.
            let text: String = e
                .to_string()
                .chars()
                .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
                .take(500)
                .collect();
            call.error = Some(text);
        }
        if call.model.trim().is_empty() || call.model.chars().any(char::is_control) {
            call.model = "(unnamed)".into();
        }
        self.record_llm_call(scope, call)?;
        result
    }

    /// nanobot's consolidation of `session` now: takes the session's consolidation lock
    /// (waiting for one in flight, here or in another process), then consolidates the
    /// messages of its current thread after the pointer, but the newest `window / 2`
    /// (all of them with `archive_all`). Returns what it did; on any failure the pointer,
    /// HISTORY.md and MEMORY.md are as they were, and the error says why.
    pub fn consolidate(
        &self,
        session: &Scope,
        llm: &dyn Llm,
        options: ConsolidateOptions,
    ) -> Result<Consolidated> {
        check_session(session)?;
        let _lock = self.lock_consolidation(session)?;
        self.consolidate_locked(session, llm, options, &|_, _| Vec::new())
    }

    /// [`Engine::consolidate`] with the lock already held; `extra`, given how many entries
    /// were consolidated and through which (0 when none), makes entries written in the same
    /// transaction as the pointer (the /new anchor).
    pub(crate) fn consolidate_locked(
        &self,
        session: &Scope,
        llm: &dyn Llm,
        options: ConsolidateOptions,
        extra: &dyn Fn(usize, EntryId) -> Vec<NewEntry>,
    ) -> Result<Consolidated> {
        let Some(info) = self.store.scope_info(session)? else {
            return Ok(Consolidated::default());
        };
        let pending = match info.head {
            Some(head) => self.walk(session, head, info.last_consolidated, usize::MAX)?,
            None => Vec::new(),
        };
        let keep = if options.archive_all {
            0
        } else {
            options.window / 2
        };
        if pending.len() <= keep {
            let extra = extra(0, EntryId(0));
            if !extra.is_empty() {
                self.append_entries(extra)?;
            }
            return Ok(Consolidated::default());
        }
        let old = &pending[..pending.len() - keep];
        let through = old[old.len() - 1].id;
        let lines: Vec<String> = old.iter().filter_map(format_line).collect();
        let memory = memory_scope(session)?;
        let mut done = Consolidated {
            through: Some(through),
            messages: old.len(),
            ..Consolidated::default()
        };
        if lines.is_empty() {
            // Nothing with text (tool calls only): nothing to remember, the pointer moves.
            let mut entries = vec![NewEntry::new(
                session.clone(),
                BuiltinEvent::consolidated(through).to_payload(),
                self.now(),
            )];
            entries.extend(extra(old.len(), through));
            self.append_entries(entries)?;
            return Ok(done);
        }
        // Every memory change this makes names the span and the model calls as its causes.
        crate::tiers::caused_by([old[0].id, through], || {
            let seen = self
                .memory(&memory)?
                .content(paths::MEMORY)
                .unwrap_or_default()
                .to_owned();
            let shown = if seen.trim().is_empty() {
                "(empty)"
            } else {
                seen.as_str()
            };
            let conversation = lines.join("\n");
            let system = self.prompt(session, &CONSOLIDATION_SYSTEM, &[])?;
            let user = self.prompt(
                session,
                &CONSOLIDATION_USER,
                &[("memory", shown), ("conversation", &conversation)],
            )?;
            let mut request = ChatRequest::new(vec![
                memtape_llm::Message::system(system),
                memtape_llm::Message::user(user),
            ]);
            request.tools = vec![save_memory_tool()];
            request.force_tool = Some(SAVE_MEMORY.into());
            request.max_tokens = Some(options.max_tokens);
            let (history, update) = match self.call_llm(
                llm,
                session,
                "consolidation",
                &request,
                save_memory_arguments,
            ) {
                Err(Error::Llm(e)) if refused_tool_choice(&e) => {
                    request.force_tool = None;
                    self.call_llm(
                        llm,
                        session,
                        "consolidation",
                        &request,
                        save_memory_arguments,
                    )?
                }
                other => other?,
            };
            let history = if has_stamp(history.trim_start()) {
                history.trim().to_owned()
            } else {
                format!(
                    "[{}] {}",
                    old[0].created_at.format("%Y-%m-%d %H:%M"),
                    history.trim()
                )
            };
            done.history_entry = Some(history.clone());
            let source = format!("consolidation of {session} through entry {through}");
            let mut edits = vec![Edit::Append {
                path: paths::HISTORY.into(),
                text: format!("{history}\n\n"),
                heading: None,
            }];
            if let Some(update) = update {
                edits.push(Edit::Rewrite {
                    path: paths::MEMORY.into(),
                    seen,
                    new: update,
                });
            }
            let mut entries = vec![NewEntry::new(
                session.clone(),
                BuiltinEvent::consolidated(through).to_payload(),
                self.now(),
            )];
            entries.extend(extra(old.len(), through));
            let applied = self.apply_edits(&memory, &edits, "consolidation", &source, &entries)?;
            done.memory_changed = applied.changed.iter().any(|p| p == paths::MEMORY);
            done.dropped = applied.dropped;
            Ok(done)
        })
    }

    /// How many conversational entries `session` has after its consolidation pointer, up
    /// to `at_most` (a cheap check of whether a consolidation is due).
    pub fn unconsolidated(&self, session: &Scope, at_most: usize) -> Result<usize> {
        let Some(info) = self.store.scope_info(session)? else {
            return Ok(0);
        };
        let filter = memtape_core::Filter {
            after: Some(info.last_consolidated),
            kinds: memtape_core::Kind::conversational().collect(),
            limit: Some(at_most),
            ..memtape_core::Filter::default()
        };
        Ok(self.store.scan(session, &filter)?.len())
    }
}

/// Refuses a scope that is not a conversation.
pub(crate) fn check_session(session: &Scope) -> Result<()> {
    if session.session().is_none() || session.node().is_some() {
        return Err(Error::Invalid(memtape_core::Error::InvalidScope(format!(
            "{session}: only a session's conversation is consolidated"
        ))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_recognised_only_when_whole() {
        assert!(has_stamp("[2026-03-10 14:30] User asked"));
        assert!(!has_stamp("[2026-03-10] User asked about it"));
        assert!(!has_stamp("User asked [2026-03-10 14:30]"));
        assert!(!has_stamp("[2026-13-10 14:30] bad month"));
    }
}
