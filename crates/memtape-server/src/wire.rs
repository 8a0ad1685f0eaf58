//! The API's own wire types: what clients send and receive. They are converted to and from
//! the engine's types at the edge, so the engine can change without breaking clients, and
//! the OpenAPI document is derived from them.

use memtape::{Entry, Message, SessionInfo};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, Result};

/// Which agent (and user) a request is about; the tenant comes from the key.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScopeParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the memory or session is one user's.
    pub user: Option<String>,
}

impl ScopeParams {
    /// The agent and user of a route whose parameters carry them beside others.
    pub fn new(agent: Option<String>, user: Option<String>) -> Self {
        ScopeParams { agent, user }
    }

    /// The agent named, or `default`.
    pub fn agent(&self) -> &str {
        self.agent.as_deref().unwrap_or("default")
    }
}

/// A read of memory, possibly of the past: which agent (and user), and the moment.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user, when the memory is one user's.
    pub user: Option<String>,
    /// Read it as it was at this moment: an RFC 3339 time (`2026-03-01T10:00:00Z`) or an
    /// entry id (now when absent).
    #[param(min_length = 1)]
    pub as_of: Option<String>,
}

impl ReadParams {
    /// The agent named, or `default`.
    pub fn agent(&self) -> &str {
        self.agent.as_deref().unwrap_or("default")
    }
}

/// The moment `raw` names (an RFC 3339 time or an entry id), if any; a 400 naming the
/// parameter otherwise.
pub fn as_of(raw: Option<&str>) -> Result<Option<memtape::AsOf>> {
    raw.map(|s| {
        s.parse()
            .map_err(|e| ApiError::bad_request(format!("as_of: {e}")))
    })
    .transpose()
}

/// A tool call made by the assistant (OpenAI's shape).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolCallWire {
    /// The call's id.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    /// The function called.
    pub function: FunctionWire,
}

fn function() -> String {
    "function".to_owned()
}

/// The function of a tool call.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct FunctionWire {
    /// Its name.
    pub name: String,
    /// Its arguments, JSON-encoded.
    pub arguments: String,
}

/// A chat message, as sent in and as history returns it (OpenAI's chat shape).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    #[schema(value_type = names::RoleName)]
    pub role: String,
    /// The text, or OpenAI content parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ContentSchema>)]
    pub content: Option<Value>,
    /// A participant or tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tools the assistant calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallWire>,
    /// For a tool result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// The engine's message for this one; a shape the engine refuses is a 422.
    pub fn to_message(&self) -> Result<Message> {
        let value = serde_json::to_value(self).map_err(|e| ApiError::internal(e.to_string()))?;
        serde_json::from_value(value).map_err(|e| ApiError::unprocessable(format!("message: {e}")))
    }

    /// The wire form of an engine message.
    pub fn of(m: &Message) -> Self {
        let value = serde_json::to_value(m).unwrap_or(Value::Null);
        let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
        ChatMessage {
            role: text("role").unwrap_or_default(),
            content: value.get("content").cloned(),
            name: text("name"),
            tool_calls: value
                .get("tool_calls")
                .and_then(|c| serde_json::from_value(c.clone()).ok())
                .unwrap_or_default(),
            tool_call_id: text("tool_call_id"),
        }
    }
}

/// A message's content as the API documents it: its text, or OpenAI content parts.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum ContentSchema {
    /// The text.
    Text(String),
    /// Content parts (`{"type": "text", "text": ...}`, images, files).
    Parts(Vec<ContentPart>),
}

/// One content part: its `type` and the fields that type has (`text`, `image_url`, ...).
#[derive(Serialize, ToSchema)]
pub struct ContentPart {
    /// `text`, `image_url`, `input_audio`, `file`, ...
    #[serde(rename = "type")]
    pub kind: String,
}

/// One message to append: a chat message, and optionally the message it follows.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct NewMessage {
    /// The message.
    #[serde(flatten)]
    pub message: ChatMessage,
    /// The entry it follows (a regenerated answer names the message it answers again);
    /// by default the session's latest message.
    #[serde(default)]
    pub parent: Option<u64>,
}

/// The body of an append: one message, or several in order (one transaction).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AppendBody {
    /// Several messages.
    Many {
        /// The messages, in order.
        #[schema(min_items = 1)]
        messages: Vec<NewMessage>,
    },
    /// One message.
    One(NewMessage),
}

/// What an append wrote.
#[derive(Debug, Serialize, ToSchema)]
pub struct Appended {
    /// The new entries' ids, in order.
    pub ids: Vec<u64>,
    /// What the WAL captured from the user messages (category and text).
    pub captured: Vec<Captured>,
}

/// One WAL capture.
#[derive(Debug, Serialize, ToSchema)]
pub struct Captured {
    /// The category (`correction`, `proper_noun`, `preference`, `decision`,
    /// `specific_value`, `remember`).
    pub category: String,
    /// The text captured.
    pub text: String,
}

/// A tape entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryWire {
    /// Its id.
    pub id: u64,
    /// `message`, `tool_call`, `tool_result`, `system`, `anchor` or `event`.
    pub kind: String,
    /// The agent.
    pub agent: String,
    /// The user, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The session, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The message it follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    /// What it carries: a chat message, `{name, state}` for an anchor, `{name, data}` for
    /// an event.
    #[schema(value_type = Object)]
    pub payload: Value,
    /// Free metadata.
    #[schema(value_type = Object)]
    pub meta: Map<String, Value>,
    /// When it was written (RFC 3339).
    pub created_at: String,
    /// Set when an erasure changed the entry: which one and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erased: Option<ErasureMark>,
}

/// The mark an erasure left on an entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErasureMark {
    /// The erasure's receipt (a `tape.erased` entry).
    pub by: u64,
    /// `whole` (a tombstone: nothing of its content is left) or `text` (a piece of text
    /// was replaced by `[erased]`).
    pub how: String,
}

impl EntryWire {
    /// The wire form of an entry.
    pub fn of(e: &Entry) -> Self {
        EntryWire {
            id: e.id.0,
            kind: e.kind().to_string(),
            agent: e.scope.agent_name().to_owned(),
            user: e.scope.user().map(str::to_owned),
            session: e.scope.session().map(str::to_owned),
            parent: e.parent.map(|p| p.0),
            payload: e.payload.to_json(),
            meta: e.meta.clone(),
            created_at: e.created_at.to_rfc3339(),
            erased: e.erased.map(|x| ErasureMark {
                by: x.by.0,
                how: x.how.as_str().to_owned(),
            }),
        }
    }
}

/// A session and its projection.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionWire {
    /// The session key.
    pub session: String,
    /// The user, if the session is one user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// How many entries it has.
    pub entries: u64,
    /// How many of them are messages.
    pub messages: u64,
    /// The consolidation pointer (0: nothing consolidated).
    pub last_consolidated: u64,
    /// When its latest entry of any kind was written (an event such as a consolidation
    /// pointer counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// When its latest message (or tool call or result) was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_message_at: Option<String>,
}

impl SessionWire {
    /// The wire form of a session's projection.
    pub fn of(session: &SessionInfo) -> Self {
        let i = &session.info;
        SessionWire {
            session: i.scope.session().unwrap_or_default().to_owned(),
            user: i.scope.user().map(str::to_owned),
            entries: i.entries,
            messages: i.messages,
            last_consolidated: i.last_consolidated.0,
            updated_at: i.last_at.map(|t| t.to_rfc3339()),
            last_message_at: session.last_message_at.map(|t| t.to_rfc3339()),
        }
    }
}

/// Names the API accepts for a closed set of values, as the OpenAPI document spells them.
/// The handlers parse the strings themselves (and answer a 400 naming the choices); these
/// types only tell clients the choices up front.
pub mod names {
    use utoipa::ToSchema;

    /// A message's role.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum RoleName {
        /// The system prompt or a system notice.
        System,
        /// The human (or calling program).
        User,
        /// The model.
        Assistant,
        /// A tool's result.
        Tool,
    }

    /// An entry's kind.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum KindName {
        /// A chat message.
        Message,
        /// A tool call.
        ToolCall,
        /// A tool's result.
        ToolResult,
        /// An anchor.
        Anchor,
        /// An event.
        Event,
        /// A system entry.
        System,
    }

    /// Whose entries a search covers.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum ScopeName {
        /// The agent's entries (the default).
        Agent,
        /// One user's.
        User,
        /// The whole tenant's.
        Tenant,
    }

    /// How a search ranks.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum ModeName {
        /// BM25 and vectors fused.
        Hybrid,
        /// BM25 only.
        Bm25,
        /// Vectors only.
        Vector,
    }

    /// Which history view.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum ViewName {
        /// memtape's thread view.
        Thread,
        /// Bub's view: the tape after the last anchor.
        Bub,
    }

    /// An export or import format.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum FormatName {
        /// memtape's own JSONL.
        Memtape,
        /// Bub's tape JSONL.
        Bub,
        /// nanobot's session JSONL.
        Nanobot,
    }
}
