//! The tape's entries: ids, kinds, typed payloads (messages, anchors, events) and their
//! JSON shape.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::erasure::{Erasure, TOMBSTONE};
use crate::events::BuiltinEvent;
use crate::{Error, Result, Scope};

/// The longest an event's or anchor's name may be, in bytes: names are keys that every
/// store indexes (a PostgreSQL index key holds at most about 2.7 kB).
pub const MAX_PAYLOAD_NAME_BYTES: usize = 256;

/// A free bag of caller metadata carried by every entry. memtape never reads it.
pub type Meta = Map<String, Value>;

/// The id of an entry: monotonic per store, never reused. Id 0 is never assigned; it
/// stands for "none" where an id is optional (a pointer that covers nothing).
///
/// Ids run from 1 to [`EntryId::MAX`] (2^53 − 1): every SQL database holds that in a signed
/// 64-bit column, and every JSON reader (JavaScript's included) reads it exactly. Reading
/// an id, from JSON or from text, refuses anything larger, so no input can store a wrapped
/// id or leave the store without a next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct EntryId(pub u64);

impl EntryId {
    /// The largest id a store assigns or accepts: 2^53 − 1.
    pub const MAX: EntryId = EntryId((1 << 53) - 1);

    /// `value` as an id, if it is in range (0 ..= [`EntryId::MAX`]).
    pub fn new(value: u64) -> Result<Self> {
        if value > Self::MAX.0 {
            return Err(Error::IdOutOfRange(value.to_string()));
        }
        Ok(EntryId(value))
    }

    /// Whether the id is in range.
    pub fn in_range(self) -> bool {
        self <= Self::MAX
    }
}

impl<'de> Deserialize<'de> for EntryId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = u64::deserialize(d)?;
        EntryId::new(value).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for EntryId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let value: u64 = s
            .trim()
            .parse()
            .map_err(|_| Error::IdOutOfRange(s.to_owned()))?;
        EntryId::new(value)
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What an entry is. Derived from the payload, never stored independently of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A user or assistant chat message without tool calls.
    Message,
    /// An assistant message that calls tools.
    ToolCall,
    /// A tool's answer to one call (role `tool`).
    ToolResult,
    /// A named boundary on the tape (Bub's handoff), with optional state.
    Anchor,
    /// A named domain event with data (memory updates, pointer moves, ...).
    Event,
    /// A system message.
    System,
}

impl Kind {
    /// Every kind, in a stable order.
    pub const ALL: [Kind; 6] = [
        Kind::Message,
        Kind::ToolCall,
        Kind::ToolResult,
        Kind::Anchor,
        Kind::Event,
        Kind::System,
    ];

    /// The kind's name as written on the tape.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Message => "message",
            Kind::ToolCall => "tool_call",
            Kind::ToolResult => "tool_result",
            Kind::Anchor => "anchor",
            Kind::Event => "event",
            Kind::System => "system",
        }
    }

    /// Whether entries of this kind are part of the conversation (messages in a thread).
    /// The one rule: every other use (history reads, thread walks, parent links, the
    /// scope's message count) asks this.
    pub fn is_conversational(self) -> bool {
        !matches!(self, Kind::Anchor | Kind::Event)
    }

    /// The conversational kinds, in [`Kind::ALL`] order.
    pub fn conversational() -> impl Iterator<Item = Kind> {
        Kind::ALL.into_iter().filter(|k| k.is_conversational())
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Kind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Error::UnknownKind(s.to_owned()))
    }
}

/// The author of a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The system prompt or a system notice.
    System,
    /// The human (or calling program).
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Role {
    /// The role's name as OpenAI chat messages spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "system" => Ok(Role::System),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            other => Err(Error::UnknownRole(other.to_owned())),
        }
    }
}

/// A message's content: plain text, or a list of typed parts (text, image_url, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Multi-part content in the OpenAI shape.
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text of the content: the string itself, or the text parts joined by newlines.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Content::Text(t) => std::borrow::Cow::Borrowed(t),
            Content::Parts(parts) => std::borrow::Cow::Owned(
                parts
                    .iter()
                    .filter_map(|p| p.text.as_deref())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }
    }
}

/// One part of multi-part content. `type` names it; `text` is present for text parts; every
/// other field (image_url, input_audio, ...) is kept as it came, so nothing is lost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    /// The part's type, e.g. `text` or `image_url`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a text part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Every other field of the part.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool call made by the assistant (OpenAI shape).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id; the tool result answers it with `tool_call_id`.
    pub id: String,
    /// Always `function` today.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function called.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

impl ToolCall {
    /// A function call with JSON-encoded arguments.
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// The function part of a tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// The arguments, JSON-encoded as a string (OpenAI's convention).
    #[serde(deserialize_with = "arguments_as_string")]
    pub arguments: String,
}

/// Some providers send arguments as a JSON object rather than a string (nanobot issue #1042);
/// both are accepted and kept as a string.
fn arguments_as_string<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        other => other.to_string(),
    })
}

/// What kind of file a message carries (Dify's file types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    /// An image.
    Image,
    /// An audio clip.
    Audio,
    /// A video.
    Video,
    /// A document.
    Document,
    /// Anything else.
    Custom,
}

/// Where a referenced file lives (Dify's transfer methods); exactly one id or url per method.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transfer_method", rename_all = "snake_case")]
pub enum FileSource {
    /// A file the user uploaded.
    LocalFile {
        /// The upload's id.
        upload_file_id: String,
    },
    /// A file at a URL.
    RemoteUrl {
        /// The URL.
        url: String,
    },
    /// A file a tool produced.
    ToolFile {
        /// The tool file's id.
        tool_file_id: String,
    },
}

/// Who a file belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOwner {
    /// The user attached it.
    User,
    /// The assistant produced it.
    Assistant,
}

/// A file attached to a message, by reference only (the bytes live elsewhere).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// The file's type.
    #[serde(rename = "type")]
    pub file_type: FileType,
    /// How to get the file.
    #[serde(flatten)]
    pub source: FileSource,
    /// Who the file belongs to.
    pub belongs_to: FileOwner,
}

/// A chat message, in the OpenAI shape plus reasoning content and file references.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content; `None` for an assistant message that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// Tools the assistant calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An optional participant or tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The model's reasoning, when the provider returns it separately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Files attached by reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileRef>,
}

impl Message {
    /// A plain text message.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: Some(Content::Text(content.into())),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning_content: None,
            files: Vec::new(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text(Role::Assistant, content)
    }

    /// An assistant message that only calls tools.
    pub fn assistant_tool_calls(calls: Vec<ToolCall>) -> Self {
        Message {
            content: None,
            tool_calls: calls,
            ..Self::text(Role::Assistant, "")
        }
    }

    /// A tool's result for the call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Self::text(Role::Tool, content)
        }
    }

    /// The message's text ("" when it has none).
    pub fn content_text(&self) -> std::borrow::Cow<'_, str> {
        self.content
            .as_ref()
            .map_or(std::borrow::Cow::Borrowed(""), Content::text)
    }

    /// Checks the structural rules: only tool messages answer a call (and they must),
    /// only assistant messages call tools, and call ids are non-empty.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidMessage(why));
        match (self.role, &self.tool_call_id) {
            (Role::Tool, None) => return bad("a tool message needs tool_call_id".into()),
            (Role::Tool, Some(id)) if id.is_empty() => {
                return bad("tool_call_id is empty".into());
            }
            (role, Some(_)) if role != Role::Tool => {
                return bad(format!(
                    "only tool messages carry tool_call_id, not {}",
                    role.as_str()
                ));
            }
            _ => {}
        }
        if !self.tool_calls.is_empty() && self.role != Role::Assistant {
            return bad(format!(
                "only assistant messages carry tool_calls, not {}",
                self.role.as_str()
            ));
        }
        if let Some(call) = self.tool_calls.iter().find(|c| c.id.is_empty()) {
            return bad(format!(
                "tool call {:?} has an empty id",
                call.function.name
            ));
        }
        Ok(())
    }
}

/// A named boundary on the tape, with optional state (Bub's handoff / anchor).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Anchor {
    /// The anchor's name, e.g. `session/start` or `memory/seal`.
    pub name: String,
    /// Optional state carried by the anchor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Map<String, Value>>,
}

/// A named domain event with data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The event's name, e.g. `memory.long_term` or `session.consolidated`.
    pub name: String,
    /// The event's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// What an entry carries. Its [`Kind`] is derived from it.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// A chat message (message, tool_call, tool_result or system kind).
    Message(Message),
    /// An anchor.
    Anchor(Anchor),
    /// An event.
    Event(Event),
}

impl Payload {
    /// The kind this payload makes its entry.
    pub fn kind(&self) -> Kind {
        match self {
            Payload::Message(m) => match m.role {
                Role::System => Kind::System,
                Role::Tool => Kind::ToolResult,
                Role::Assistant if !m.tool_calls.is_empty() => Kind::ToolCall,
                Role::User | Role::Assistant => Kind::Message,
            },
            Payload::Anchor(_) => Kind::Anchor,
            Payload::Event(_) => Kind::Event,
        }
    }

    /// The message, if this is one.
    pub fn as_message(&self) -> Option<&Message> {
        match self {
            Payload::Message(m) => Some(m),
            _ => None,
        }
    }

    /// The anchor or event name, if this is one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Payload::Message(_) => None,
            Payload::Anchor(a) => Some(&a.name),
            Payload::Event(e) => Some(&e.name),
        }
    }

    /// The text the search index holds for this payload, or `None` when there is nothing
    /// to find. One rule for every kind, so kinds and events added later are searchable
    /// without touching the index:
    /// - a message: its name (speaker or tool) and text; tool calls add each function's
    ///   name and arguments;
    /// - an anchor or event: every string in its state or data, in order (numbers and
    ///   booleans are bookkeeping, such as pointer moves, and are left out).
    pub fn search_text(&self) -> Option<String> {
        let mut out = String::new();
        let mut push = |s: &str| {
            let s = s.trim();
            if !s.is_empty() {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(s);
            }
        };
        match self {
            Payload::Message(m) => {
                let text = m.content_text();
                match &m.name {
                    Some(name) if !text.trim().is_empty() => push(&format!("{name}: {text}")),
                    _ => push(&text),
                }
                for call in &m.tool_calls {
                    push(&format!(
                        "{}({})",
                        call.function.name, call.function.arguments
                    ));
                }
            }
            Payload::Anchor(a) => {
                if let Some(state) = &a.state {
                    state.values().for_each(|v| strings(v, &mut push));
                }
            }
            Payload::Event(e) => strings(&e.data, &mut push),
        }
        (!out.is_empty()).then_some(out)
    }

    /// Checks the payload's rules: message structure, non-empty names without control
    /// characters and at most [`MAX_PAYLOAD_NAME_BYTES`] long (a name is a key every store
    /// indexes; PostgreSQL's text cannot even hold a NUL, nor its index a key over
    /// 2.7 kB), and for an event that memtape owns, its data's typed shape
    /// ([`BuiltinEvent::decode`]). Every way an entry comes in runs this.
    pub fn validate(&self) -> Result<()> {
        self.validate_structure()?;
        if let Some(name) = self.name() {
            if name.chars().any(char::is_control) {
                return Err(Error::InvalidEntry(format!(
                    "{} name {name:?} contains a control character",
                    self.kind()
                )));
            }
            if name == TOMBSTONE {
                return Err(Error::InvalidEntry(format!(
                    "{} name {TOMBSTONE:?} is what an erasure leaves; no entry may be written with it",
                    self.kind()
                )));
            }
            if name.len() > MAX_PAYLOAD_NAME_BYTES {
                return Err(Error::InvalidEntry(format!(
                    "{} name of {} bytes is longer than the {MAX_PAYLOAD_NAME_BYTES} bytes a name may have",
                    self.kind(),
                    name.len()
                )));
            }
        }
        BuiltinEvent::from_payload(self)?;
        Ok(())
    }

    /// The structural rules only (message structure, non-empty names): what reading a
    /// stored entry back checks.
    fn validate_structure(&self) -> Result<()> {
        match self {
            Payload::Message(m) => m.validate(),
            Payload::Anchor(Anchor { name, .. }) | Payload::Event(Event { name, .. })
                if name.trim().is_empty() =>
            {
                Err(Error::InvalidEntry(format!(
                    "{} name is empty",
                    self.kind()
                )))
            }
            _ => Ok(()),
        }
    }

    /// The payload as JSON (the message fields, or `{name, state}` / `{name, data}`).
    pub fn to_json(&self) -> Value {
        let value = match self {
            Payload::Message(m) => serde_json::to_value(m),
            Payload::Anchor(a) => serde_json::to_value(a),
            Payload::Event(e) => serde_json::to_value(e),
        };
        // Serializing these plain data types cannot fail: every map key is a string.
        value.unwrap_or(Value::Null)
    }

    /// Reads a payload written by [`Payload::to_json`], checking that it is of `kind` and
    /// its structure ([`Payload::validate`] checks built-in events' data as well).
    pub fn from_json(kind: Kind, value: Value) -> Result<Self> {
        let invalid = |e: serde_json::Error| Error::InvalidEntry(format!("{kind} payload: {e}"));
        let payload = match kind {
            Kind::Anchor => Payload::Anchor(serde_json::from_value(value).map_err(invalid)?),
            Kind::Event => Payload::Event(serde_json::from_value(value).map_err(invalid)?),
            _ => Payload::Message(serde_json::from_value(value).map_err(invalid)?),
        };
        if payload.kind() != kind {
            return Err(Error::InvalidEntry(format!(
                "kind {kind} does not match its payload, which is a {}",
                payload.kind()
            )));
        }
        payload.validate_structure()?;
        Ok(payload)
    }
}

/// Calls `f` with every string inside `value`, depth first, in document order.
fn strings(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, f)),
        Value::Object(map) => map.values().for_each(|v| strings(v, f)),
        _ => {}
    }
}

/// An entry on the tape.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Its id, assigned by the store.
    pub id: EntryId,
    /// Where it belongs.
    pub scope: Scope,
    /// What it carries.
    pub payload: Payload,
    /// Caller metadata.
    pub meta: Meta,
    /// When it was appended (or, for imports, when the original was written).
    pub created_at: DateTime<Utc>,
    /// For conversational entries: the message this one follows in its thread.
    pub parent: Option<EntryId>,
    /// Set when an erasure changed the entry: which one, and whether it left a tombstone
    /// or redacted a piece of text.
    pub erased: Option<Erasure>,
}

impl Entry {
    /// The entry's kind.
    pub fn kind(&self) -> Kind {
        self.payload.kind()
    }

    /// Whether the entry is a tombstone: an erasure took all its content.
    pub fn is_tombstone(&self) -> bool {
        self.erased.is_some_and(|e| e.is_whole())
    }

    /// The message, if this entry is one.
    pub fn message(&self) -> Option<&Message> {
        self.payload.as_message()
    }
}

/// The JSON shape of an entry in memtape's own JSONL format.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    id: EntryId,
    scope: Scope,
    kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<EntryId>,
    created_at: DateTime<Utc>,
    payload: Value,
    #[serde(default)]
    meta: Meta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    erased: Option<Erasure>,
}

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        RawEntry {
            id: self.id,
            scope: self.scope.clone(),
            kind: self.kind(),
            parent: self.parent,
            created_at: self.created_at,
            payload: self.payload.to_json(),
            meta: self.meta.clone(),
            erased: self.erased,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = RawEntry::deserialize(d)?;
        if raw.id == EntryId(0) {
            return Err(serde::de::Error::custom(
                "entry id 0 is never assigned: ids start at 1",
            ));
        }
        let payload =
            Payload::from_json(raw.kind, raw.payload).map_err(serde::de::Error::custom)?;
        // A tombstone is read as the erasure left it; anything else as a new entry is.
        if !raw.erased.is_some_and(|e| e.is_whole()) {
            payload.validate().map_err(serde::de::Error::custom)?;
        }
        Ok(Entry {
            id: raw.id,
            scope: raw.scope,
            payload,
            meta: raw.meta,
            created_at: raw.created_at,
            parent: raw.parent,
            erased: raw.erased,
        })
    }
}

/// An entry to append: the store assigns the id. When `parent` is `None` and the entry is
/// conversational, the store links it to the latest conversational entry of its scope, so
/// a conversation is always a chain of parent links (Dify's parent_message_id).
#[derive(Clone, Debug, PartialEq)]
pub struct NewEntry {
    /// Where it belongs.
    pub scope: Scope,
    /// What it carries.
    pub payload: Payload,
    /// Caller metadata.
    pub meta: Meta,
    /// When it happened.
    pub created_at: DateTime<Utc>,
    /// An explicit parent (for a regenerated answer: the message it answers again).
    pub parent: Option<EntryId>,
    /// A precondition: append only if the scope's latest entry is this one
    /// (`EntryId(0)`: only if the scope is empty). Otherwise the whole append fails with a
    /// conflict, so a writer that computed its change from what it read never overwrites a
    /// change it did not see (compare-and-append).
    pub if_last: Option<EntryId>,
}

impl NewEntry {
    /// A new entry with empty metadata and no explicit parent.
    pub fn new(scope: Scope, payload: Payload, created_at: DateTime<Utc>) -> Self {
        NewEntry {
            scope,
            payload,
            meta: Meta::new(),
            created_at,
            parent: None,
            if_last: None,
        }
    }

    /// The same entry, appended only if its scope's latest entry is `last` (see
    /// [`NewEntry::if_last`]).
    pub fn if_last(mut self, last: EntryId) -> Self {
        self.if_last = Some(last);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_text_covers_every_kind_with_one_rule() {
        let text = |p: Payload| p.search_text();
        let mut named = Message::user("I adopted a dog");
        named.name = Some("Caroline".into());
        assert_eq!(
            text(Payload::Message(named)).as_deref(),
            Some("Caroline: I adopted a dog")
        );
        let call = Message::assistant_tool_calls(vec![ToolCall::function(
            "c",
            "weather",
            r#"{"city":"Oslo"}"#,
        )]);
        assert_eq!(
            text(Payload::Message(call)).as_deref(),
            Some(r#"weather({"city":"Oslo"})"#)
        );
        assert_eq!(
            text(Payload::Message(Message::tool_result("c", " 12C "))).as_deref(),
            Some("12C")
        );
        // Events: every string, in order; numbers are bookkeeping and have nothing to find.
        let event = Event {
            name: "memory.long_term".into(),
            data: serde_json::json!({"content": "Likes tea", "tags": ["drinks", 3], "n": 1}),
        };
        assert_eq!(
            text(Payload::Event(event)).as_deref(),
            Some("Likes tea\ndrinks")
        );
        let pointer = Event {
            name: "session.consolidated".into(),
            data: serde_json::json!({"through": 9}),
        };
        assert_eq!(text(Payload::Event(pointer)), None);
        assert_eq!(
            text(Payload::Anchor(Anchor {
                name: "session/start".into(),
                state: None
            })),
            None
        );
    }

    #[test]
    fn kind_is_derived_from_the_payload() {
        let m = |m: Message| Payload::Message(m).kind();
        assert_eq!(m(Message::user("hi")), Kind::Message);
        assert_eq!(m(Message::assistant("hi")), Kind::Message);
        assert_eq!(m(Message::text(Role::System, "s")), Kind::System);
        assert_eq!(m(Message::tool_result("c", "r")), Kind::ToolResult);
        let call = Message::assistant_tool_calls(vec![ToolCall::function("c", "f", "{}")]);
        assert_eq!(m(call), Kind::ToolCall);
    }

    #[test]
    fn structural_rules_name_the_problem() {
        let mut m = Message::text(Role::Tool, "r");
        assert!(
            m.validate()
                .unwrap_err()
                .to_string()
                .contains("tool_call_id")
        );
        m.role = Role::User;
        m.tool_call_id = Some("x".into());
        assert!(
            m.validate()
                .unwrap_err()
                .to_string()
                .contains("only tool messages")
        );
        let mut u = Message::user("u");
        u.tool_calls.push(ToolCall::function("c", "f", "{}"));
        assert!(
            u.validate()
                .unwrap_err()
                .to_string()
                .contains("only assistant")
        );
    }

    #[test]
    fn kind_and_payload_must_agree() {
        let v = Payload::Message(Message::tool_result("c", "r")).to_json();
        let err = Payload::from_json(Kind::Message, v).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
    }

    #[test]
    fn every_message_field_round_trips() {
        let json = r#"{"role":"assistant","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"http://x/y.png","detail":"low"}}],"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}],"name":"bot","reasoning_content":"thinking","files":[{"type":"image","transfer_method":"local_file","upload_file_id":"u1","belongs_to":"assistant"},{"type":"document","transfer_method":"remote_url","url":"http://x/d.pdf","belongs_to":"user"}]}"#;
        let m: Message = serde_json::from_str(json).unwrap();
        assert_eq!(
            m.files[0].source,
            FileSource::LocalFile {
                upload_file_id: "u1".into()
            }
        );
        assert_eq!(serde_json::to_string(&m).unwrap(), json);
    }

    #[test]
    fn object_arguments_are_kept_as_a_string() {
        let m: Message = serde_json::from_str(
            r#"{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":{"q":"x"}}}]}"#,
        )
        .unwrap();
        assert_eq!(m.tool_calls[0].function.arguments, r#"{"q":"x"}"#);
    }

    #[test]
    fn a_name_is_at_most_256_bytes() {
        let event = |name: String| {
            Payload::Event(Event {
                name,
                data: Value::Null,
            })
        };
        assert!(event("é".repeat(128)).validate().is_ok());
        let err = event("é".repeat(128) + "x").validate().unwrap_err();
        assert!(err.to_string().contains("257 bytes"), "{err}");
        let anchor = Payload::Anchor(Anchor {
            name: "a".repeat(3000),
            state: None,
        });
        assert!(anchor.validate().is_err());
    }
}
