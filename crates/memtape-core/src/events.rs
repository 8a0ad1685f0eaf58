//! The events memtape itself writes on the tape, as one typed enum with one encode and one
//! decode. Every way an entry comes in (append, import, restore) checks a built-in event
//! with [`BuiltinEvent::decode`], the same decoder that reads it, so a malformed one is
//! refused at the door instead of breaking a projection later. Events with other names are
//! the caller's and stay free-form.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::context::Compaction;
use crate::erasure::Erased;
use crate::memory::{Change, Op};
use crate::retention::Retention;
use crate::{EntryId, Error, Event, HistoryView, Payload, Result};

/// Moves a session's consolidation pointer: `data = {"through": <entry id>}`; entries with
/// ids up to and including `through` are consolidated and left out of history.
pub const SESSION_CONSOLIDATED: &str = "session.consolidated";

/// Carries a session's free metadata (for example from a nanobot session file):
/// `data = {"metadata": {...}}`. The latest one wins.
pub const SESSION_METADATA: &str = "session.metadata";

/// A session's settings: `data = {"history": "thread" | "bub"}` (see [`SessionSettings`]).
/// The latest one wins.
pub const SESSION_SETTINGS: &str = "session.settings";

/// A Bub tape `error` entry, kept as an event so it round-trips: `data` is the error payload,
/// free-form (whatever Bub wrote).
pub const TAPE_ERROR: &str = "tape.error";

/// One version of an agent's (or agent and user's) memory: `data = {"ops": [...],
/// "source": "..."}` (see [`crate::memory::Change`]).
pub const MEMORY_CHANGE: &str = "memory.change";

/// A compaction of a session's conversation (MateClaw's summary or Qanot's removal), on
/// the session's tape: `data` is a [`crate::context::Compaction`]. The latest one whose
/// `through` is on the current thread is in effect for every later prompt.
pub const CONTEXT_COMPACTION: &str = "context.compaction";

/// How far a session's exchanges have been copied to Qanot's working buffer:
/// `data = {"through": <entry id>}` (the last copied assistant reply).
pub const CONTEXT_WORKING_BUFFER: &str = "context.working_buffer";

/// One turn of Dify's node memory, written just before the turn's two messages (the user's
/// input and the node's answer) in the same transaction: `data = {"message_id",
/// "parent_message_id", "starts_thread"}` (see [`NodeTurnMark`]).
pub const NODE_TURN: &str = "node.turn";

/// One call to a language model that memtape made (a consolidation, an extraction, …), on
/// the agent's tape so cost is visible per agent: `data` is an [`LlmCall`].
pub const LLM_CALL: &str = "llm.call";

/// A fact that a model's rewrite of a memory file left out (lossless rewrites), on the
/// memory's own tape right after the change that dropped it: `data` is a [`Dropped`].
/// Its text stays searchable, and it can be put back (`memtape memory dropped`).
pub const MEMORY_DROPPED: &str = "memory.dropped";

/// An erasure's receipt, in the scope it erased (or the caller's, for a user): `data` is an
/// [`Erased`]. It holds no erased content.
pub const TAPE_ERASED: &str = "tape.erased";

/// A retention policy set for an agent (over REST, by an admin), in the agent's scope:
/// `data` is a [`crate::retention::Retention`]. The latest one is in effect, over
/// `memtape.toml`'s. Like a receipt, no ordinary append or import may write one: it decides
/// what is erased.
pub const RETENTION_POLICY: &str = "retention.policy";

/// The longest fact line a `memory.dropped` event holds (a line of a memory file).
pub const DROPPED_TEXT_MAX: usize = 16 * 1024;

/// A fact a rewrite dropped, the data of a `memory.dropped` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dropped {
    /// The file it was in (`MEMORY.md`, `PROFILE.md`).
    pub path: String,
    /// The line as it was.
    pub text: String,
    /// The heading it sat under, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// The memory version whose rewrite dropped it.
    pub version: u64,
    /// What rewrote the file (`consolidation`, `extraction`, `emergence`).
    pub by: String,
}

impl Dropped {
    /// Checks what the type cannot state: a valid memory path, a non-empty one-line fact
    /// of bounded size, a named rewriter.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| {
            Err(Error::InvalidEntry(format!(
                "event {MEMORY_DROPPED}: {what}"
            )))
        };
        crate::memory::check_path(&self.path)?;
        if self.text.trim().is_empty() {
            return bad("the text is empty".into());
        }
        if self.text.len() > DROPPED_TEXT_MAX {
            return bad(format!(
                "the text is {} bytes, more than {DROPPED_TEXT_MAX}",
                self.text.len()
            ));
        }
        for (name, text) in [
            ("text", Some(&self.text)),
            ("section", self.section.as_ref()),
            ("by", Some(&self.by)),
        ] {
            let Some(t) = text else { continue };
            if t.chars().any(|c| c.is_control() && c != '\t') {
                return bad(format!("the {name} is not one line of text"));
            }
            if t.len() > DROPPED_TEXT_MAX {
                return bad(format!("the {name} is more than {DROPPED_TEXT_MAX} bytes"));
            }
        }
        if self.by.trim().is_empty() {
            return bad("it does not say what rewrote the file (by)".into());
        }
        Ok(())
    }
}

/// The longest text an [`LlmCall`] field may hold (names and errors, not prompts).
const LLM_CALL_TEXT_MAX: usize = 2000;

/// What one model call cost and how it ended, the data of an `llm.call` event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmCall {
    /// The model's name.
    pub model: String,
    /// What the call was for (`consolidation`, `extraction`, `emergence`, `compaction`, …).
    pub purpose: String,
    /// The session it served, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Prompt tokens, as the provider counted them.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Reply tokens, as the provider counted them.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Attempts the call took (retries included).
    #[serde(default)]
    pub attempts: u32,
    /// How long it took, in milliseconds.
    #[serde(default)]
    pub ms: u64,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LlmCall {
    /// Checks the rules the type cannot state: a model and a purpose are named, no text
    /// is longer than a name or an error message needs, and none holds a control character
    /// (an error may hold line breaks and tabs).
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidEntry(format!("event {LLM_CALL}: {what}")));
        if self.model.trim().is_empty() {
            return bad("the model is empty".into());
        }
        if self.purpose.trim().is_empty() {
            return bad("the purpose is empty".into());
        }
        let texts = [
            ("model", Some(&self.model)),
            ("purpose", Some(&self.purpose)),
            ("session", self.session.as_ref()),
            ("error", self.error.as_ref()),
        ];
        for (name, text) in texts {
            let Some(t) = text else { continue };
            if t.len() > LLM_CALL_TEXT_MAX {
                return bad(format!(
                    "the {name} is {} bytes, more than {LLM_CALL_TEXT_MAX}",
                    t.len()
                ));
            }
            // Names are printed (`memtape usage`): no terminal control, as in scope names.
            // An error message may span lines.
            if t.chars()
                .any(|c| c.is_control() && !(name == "error" && (c == '\n' || c == '\t')))
            {
                return bad(format!("the {name} contains a control character"));
            }
        }
        Ok(())
    }
}

/// A position on the tape: the data of a pointer event (`{"through": <entry id>}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Through {
    /// The last entry covered (0: none).
    pub through: EntryId,
}

/// A session's metadata, as carried over from a nanobot session file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionMetadata {
    /// The session key the file named.
    #[serde(default)]
    pub key: Option<String>,
    /// The file's free metadata object.
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// When the file says the session was created.
    #[serde(default)]
    pub created_at: Option<DateTime<Utc>>,
    /// When the file says the session was last updated.
    #[serde(default)]
    pub updated_at: Option<DateTime<Utc>>,
}

/// A session's settings, the data of a `session.settings` event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSettings {
    /// The history the session's model is given (a Bub tape's sessions take Bub's).
    pub history: HistoryView,
}

/// Who a node memory turn belongs to, in Dify's terms: the data of a `node.turn` event.
/// The turn's messages are the two messages of the node's scope that follow the event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTurnMark {
    /// The Dify message the turn belongs to.
    pub message_id: String,
    /// The Dify message it was added after (`None`: none).
    #[serde(default)]
    pub parent_message_id: Option<String>,
    /// Whether the turn starts a thread in the node's memory (its parent is none, or a
    /// message the node has no turn for): the thread walk ends at its user message.
    #[serde(default)]
    pub starts_thread: bool,
}

/// An event memtape writes and reads itself. Its data has one typed shape, checked on the
/// way in and decoded by the same rule on the way out.
#[derive(Clone, Debug, PartialEq)]
pub enum BuiltinEvent {
    /// `session.consolidated`: the consolidation pointer moved.
    Consolidated(Through),
    /// `session.metadata`: a session's free metadata.
    Metadata(SessionMetadata),
    /// `session.settings`: a session's settings.
    Settings(SessionSettings),
    /// `memory.change`: one version of memory.
    MemoryChange(Change),
    /// `context.compaction`: a compaction of the conversation.
    Compaction(Compaction),
    /// `context.working_buffer`: how far Qanot's working buffer was copied.
    WorkingBuffer(Through),
    /// `node.turn`: one turn of Dify's node memory.
    NodeTurn(NodeTurnMark),
    /// `llm.call`: one model call and its cost.
    LlmCall(LlmCall),
    /// `memory.dropped`: a fact a rewrite left out.
    Dropped(Dropped),
    /// `tape.erased`: an erasure's receipt.
    Erased(Erased),
    /// `retention.policy`: an agent's retention policy.
    RetentionPolicy(Retention),
}

impl BuiltinEvent {
    /// The pointer event `session.consolidated {through}`.
    pub fn consolidated(through: EntryId) -> Self {
        BuiltinEvent::Consolidated(Through { through })
    }

    /// The pointer event `context.working_buffer {through}`.
    pub fn working_buffer(through: EntryId) -> Self {
        BuiltinEvent::WorkingBuffer(Through { through })
    }

    /// The event's name on the tape.
    pub fn name(&self) -> &'static str {
        match self {
            BuiltinEvent::Consolidated(_) => SESSION_CONSOLIDATED,
            BuiltinEvent::Metadata(_) => SESSION_METADATA,
            BuiltinEvent::Settings(_) => SESSION_SETTINGS,
            BuiltinEvent::MemoryChange(_) => MEMORY_CHANGE,
            BuiltinEvent::Compaction(_) => CONTEXT_COMPACTION,
            BuiltinEvent::WorkingBuffer(_) => CONTEXT_WORKING_BUFFER,
            BuiltinEvent::NodeTurn(_) => NODE_TURN,
            BuiltinEvent::LlmCall(_) => LLM_CALL,
            BuiltinEvent::Dropped(_) => MEMORY_DROPPED,
            BuiltinEvent::Erased(_) => TAPE_ERASED,
            BuiltinEvent::RetentionPolicy(_) => RETENTION_POLICY,
        }
    }

    /// Whether memtape owns events called `name` (and so checks their data).
    pub fn is_builtin(name: &str) -> bool {
        [
            SESSION_CONSOLIDATED,
            SESSION_METADATA,
            SESSION_SETTINGS,
            MEMORY_CHANGE,
            CONTEXT_COMPACTION,
            CONTEXT_WORKING_BUFFER,
            NODE_TURN,
            LLM_CALL,
            MEMORY_DROPPED,
            TAPE_ERASED,
            RETENTION_POLICY,
        ]
        .contains(&name)
    }

    /// Decodes `event`: `Ok(None)` when memtape does not own its name (the data is the
    /// caller's, free-form), an error naming the event and the problem when it owns the
    /// name but the data does not have its shape (or, for a memory change, breaks a path
    /// or size rule).
    pub fn decode(event: &Event) -> Result<Option<Self>> {
        fn typed<'a, T: Deserialize<'a>>(name: &str, data: &'a Value) -> Result<T> {
            // The plain decoder first; only a failure is decoded again to name the field.
            T::deserialize(data).map_err(|plain| {
                let at = match serde_path_to_error::deserialize::<_, T>(data) {
                    Err(e) if e.path().to_string() != "." => format!(" at {}", e.path()),
                    _ => String::new(),
                };
                Error::InvalidEntry(format!("event {name}: bad data{at}: {plain}"))
            })
        }
        let data = &event.data;
        let decoded = match event.name.as_str() {
            SESSION_CONSOLIDATED => BuiltinEvent::Consolidated(typed(&event.name, data)?),
            SESSION_METADATA => BuiltinEvent::Metadata(typed(&event.name, data)?),
            SESSION_SETTINGS => BuiltinEvent::Settings(typed(&event.name, data)?),
            MEMORY_CHANGE => {
                let change: Change = typed(&event.name, data)?;
                change.validate()?;
                BuiltinEvent::MemoryChange(change)
            }
            CONTEXT_COMPACTION => BuiltinEvent::Compaction(typed(&event.name, data)?),
            CONTEXT_WORKING_BUFFER => BuiltinEvent::WorkingBuffer(typed(&event.name, data)?),
            NODE_TURN => {
                let mark: NodeTurnMark = typed(&event.name, data)?;
                if mark.message_id.is_empty() {
                    return Err(Error::InvalidEntry(
                        "event node.turn: the message_id is empty".into(),
                    ));
                }
                BuiltinEvent::NodeTurn(mark)
            }
            LLM_CALL => {
                let call: LlmCall = typed(&event.name, data)?;
                call.validate()?;
                BuiltinEvent::LlmCall(call)
            }
            MEMORY_DROPPED => {
                let dropped: Dropped = typed(&event.name, data)?;
                dropped.validate()?;
                BuiltinEvent::Dropped(dropped)
            }
            TAPE_ERASED => {
                let erased: Erased = typed(&event.name, data)?;
                erased.validate()?;
                BuiltinEvent::Erased(erased)
            }
            RETENTION_POLICY => {
                let policy: Retention = typed(&event.name, data)?;
                policy.validate()?;
                BuiltinEvent::RetentionPolicy(policy)
            }
            _ => return Ok(None),
        };
        Ok(Some(decoded))
    }

    /// Decodes the event a payload carries, if it is a built-in one.
    pub fn from_payload(payload: &Payload) -> Result<Option<Self>> {
        match payload {
            Payload::Event(e) => Self::decode(e),
            _ => Ok(None),
        }
    }

    /// The event as it is written on the tape.
    pub fn to_event(&self) -> Event {
        let data = match self {
            BuiltinEvent::Consolidated(t) | BuiltinEvent::WorkingBuffer(t) => {
                serde_json::to_value(t)
            }
            BuiltinEvent::Metadata(m) => serde_json::to_value(m),
            BuiltinEvent::Settings(s) => serde_json::to_value(s),
            BuiltinEvent::MemoryChange(c) => serde_json::to_value(c),
            BuiltinEvent::Compaction(c) => serde_json::to_value(c),
            BuiltinEvent::NodeTurn(m) => serde_json::to_value(m),
            BuiltinEvent::LlmCall(c) => serde_json::to_value(c),
            BuiltinEvent::Dropped(d) => serde_json::to_value(d),
            BuiltinEvent::Erased(e) => serde_json::to_value(e),
            BuiltinEvent::RetentionPolicy(p) => serde_json::to_value(p),
        };
        Event {
            name: self.name().to_owned(),
            // Plain data with string keys: serializing cannot fail.
            data: data.unwrap_or(Value::Null),
        }
    }

    /// The event as a payload.
    pub fn to_payload(&self) -> Payload {
        Payload::Event(self.to_event())
    }

    /// The entries this event names as its provenance (a memory change's causes): on a
    /// renumbering restore they follow their entries when the file has them and are left
    /// out when it does not, since they are history, not structure.
    pub fn provenance_mut(&mut self) -> Option<&mut Vec<EntryId>> {
        match self {
            BuiltinEvent::MemoryChange(c) => Some(&mut c.caused_by),
            _ => None,
        }
    }

    /// Every entry id this event refers to, for renumbering on restore: pointer targets, a
    /// compaction's span and kept messages, the changes a memory change forgets. Zero ids
    /// ("nothing") are included; callers leave them as they are.
    pub fn entry_refs_mut(&mut self) -> Vec<&mut EntryId> {
        match self {
            BuiltinEvent::Consolidated(t) | BuiltinEvent::WorkingBuffer(t) => {
                vec![&mut t.through]
            }
            BuiltinEvent::Metadata(_)
            | BuiltinEvent::Settings(_)
            | BuiltinEvent::NodeTurn(_)
            | BuiltinEvent::LlmCall(_)
            | BuiltinEvent::Dropped(_) => Vec::new(),
            // Not yet: a receipt's ranges are not renumbered (a renumbered range could take
            // in entries it never named), so a restore that renumbers refuses receipts.
            BuiltinEvent::Erased(_) | BuiltinEvent::RetentionPolicy(_) => Vec::new(),
            BuiltinEvent::MemoryChange(c) => c
                .ops
                .iter_mut()
                .flat_map(|op| match op {
                    Op::Forget { changes } => changes.iter_mut().collect(),
                    _ => Vec::new(),
                })
                .collect(),
            BuiltinEvent::Compaction(Compaction::MateClaw { from, through, .. }) => {
                vec![from, through]
            }
            BuiltinEvent::Compaction(Compaction::Qanot { head, through, .. }) => {
                head.iter_mut().chain(std::iter::once(through)).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(name: &str, data: Value) -> Event {
        Event {
            name: name.into(),
            data,
        }
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        let dropped = event(
            MEMORY_DROPPED,
            json!({"path": "MEMORY.md", "text": 42, "version": 1, "by": "x"}),
        );
        let err = BuiltinEvent::decode(&dropped).unwrap_err().to_string();
        assert!(err.contains("at text: invalid type: integer `42`"), "{err}");
        let change = event(
            MEMORY_CHANGE,
            json!({"ops": [{"op": "write", "path": "MEMORY.md", "content": 7}]}),
        );
        let err = BuiltinEvent::decode(&change).unwrap_err().to_string();
        assert!(err.contains("at ops[0]"), "{err}");
    }

    #[test]
    fn a_malformed_builtin_event_is_refused_with_its_name() {
        for (name, data) in [
            (MEMORY_CHANGE, json!({"ops": "write everything"})),
            (MEMORY_CHANGE, json!({"ops": []})),
            (
                MEMORY_CHANGE,
                json!({"ops": [{"op": "write", "path": "../../etc/passwd", "content": "x"}]}),
            ),
            (
                MEMORY_CHANGE,
                json!({"ops": [{"op": "write", "path": "/abs.md", "content": "x"}]}),
            ),
            (SESSION_CONSOLIDATED, json!({"through": "7"})),
            (SESSION_CONSOLIDATED, json!({"through": -1})),
            (SESSION_CONSOLIDATED, json!({})),
            (CONTEXT_WORKING_BUFFER, json!("7")),
            (CONTEXT_COMPACTION, json!({"policy": "mateclaw"})),
            (SESSION_METADATA, json!({"metadata": "not an object"})),
            (NODE_TURN, json!({"message_id": ""})),
            (NODE_TURN, json!({"message_id": 7})),
            (SESSION_SETTINGS, json!({"history": "sideways"})),
            (SESSION_SETTINGS, json!({})),
            (LLM_CALL, json!({"model": "", "purpose": "consolidation"})),
            (LLM_CALL, json!({"model": "m", "purpose": " "})),
            (
                LLM_CALL,
                json!({"model": "m", "purpose": "p", "prompt_tokens": -1}),
            ),
            (LLM_CALL, json!({"model": "m", "purpose": "p", "cost": 3})),
            (
                LLM_CALL,
                json!({"model": "m", "purpose": "p", "error": "x".repeat(2001)}),
            ),
            (LLM_CALL, json!({"model": "m\u{0}x", "purpose": "p"})),
            (LLM_CALL, json!({"model": "m", "purpose": "p\u{1b}[2J"})),
            (
                LLM_CALL,
                json!({"model": "m", "purpose": "p", "session": "a\nb"}),
            ),
            (
                MEMORY_DROPPED,
                json!({"path": "../x.md", "text": "t", "version": 1, "by": "b"}),
            ),
            (
                MEMORY_DROPPED,
                json!({"path": "MEMORY.md", "text": " ", "version": 1, "by": "b"}),
            ),
            (
                MEMORY_DROPPED,
                json!({"path": "MEMORY.md", "text": "a\nb", "version": 1, "by": "b"}),
            ),
            (
                MEMORY_DROPPED,
                json!({"path": "MEMORY.md", "text": "t", "version": -1, "by": "b"}),
            ),
            (
                MEMORY_DROPPED,
                json!({"path": "MEMORY.md", "text": "t", "version": 1, "by": ""}),
            ),
            (
                MEMORY_DROPPED,
                json!({"path": "MEMORY.md", "text": "x".repeat(16 * 1024 + 1), "version": 1, "by": "b"}),
            ),
        ] {
            let err = BuiltinEvent::decode(&event(name, data.clone())).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(name) || text.contains("path") || text.contains("op"),
                "{name} {data}: {text}"
            );
        }
    }

    #[test]
    fn other_event_names_stay_free_form() {
        let free = event("memory.long_term", json!("anything at all"));
        assert_eq!(BuiltinEvent::decode(&free).unwrap(), None);
        let bub_error = event(TAPE_ERROR, json!({"kind": 3}));
        assert_eq!(BuiltinEvent::decode(&bub_error).unwrap(), None);
    }

    #[test]
    fn every_builtin_event_round_trips_through_one_encoding() {
        let all = [
            BuiltinEvent::consolidated(EntryId(9)),
            BuiltinEvent::working_buffer(EntryId(4)),
            BuiltinEvent::Metadata(SessionMetadata {
                key: Some("cli:1".into()),
                ..SessionMetadata::default()
            }),
            BuiltinEvent::MemoryChange(Change::one(
                Op::Write {
                    path: "MEMORY.md".into(),
                    content: "x".into(),
                },
                "test",
            )),
            BuiltinEvent::Compaction(Compaction::Qanot {
                head: vec![EntryId(1)],
                through: EntryId(5),
                removed: 3,
            }),
            BuiltinEvent::Settings(SessionSettings {
                history: HistoryView::Bub,
            }),
            BuiltinEvent::LlmCall(LlmCall {
                model: "smollm2".into(),
                purpose: "consolidation".into(),
                session: Some("chat-1".into()),
                prompt_tokens: 1200,
                completion_tokens: 80,
                attempts: 2,
                ms: 1700,
                error: None,
            }),
            BuiltinEvent::NodeTurn(NodeTurnMark {
                message_id: "m1".into(),
                parent_message_id: None,
                starts_thread: true,
            }),
            BuiltinEvent::Dropped(Dropped {
                path: "MEMORY.md".into(),
                text: "- Works at Acme".into(),
                section: Some("## Work".into()),
                version: 3,
                by: "consolidation".into(),
            }),
        ];
        for event in all {
            assert!(BuiltinEvent::is_builtin(event.name()));
            let decoded = BuiltinEvent::decode(&event.to_event()).unwrap();
            assert_eq!(decoded, Some(event));
        }
        assert_eq!(
            BuiltinEvent::consolidated(EntryId(9)).to_event().data,
            json!({"through": 9})
        );
    }
}
