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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub struct FunctionWire {
    /// Its name.
    pub name: String,
    /// Its arguments, JSON-encoded.
    pub arguments: String,
}

/// A file attached to a message by reference, in Dify's shape: `{"type": "image",
/// "transfer_method": "local_file", "upload_file_id": "...", "belongs_to": "user"}`;
/// `remote_url` carries `url` (http or https), `tool_file` carries `tool_file_id`. An
/// upload or tool file must be the caller's tenant's (`POST /v1/files` makes uploads).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRefWire {
    /// `image`, `document`, `audio`, `video` or `custom`.
    #[serde(rename = "type")]
    #[schema(value_type = names::FileTypeName)]
    pub file_type: String,
    /// `local_file` (an upload), `remote_url` or `tool_file`.
    #[schema(value_type = names::TransferMethodName)]
    pub transfer_method: String,
    /// The upload's id (`local_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_file_id: Option<String>,
    /// The URL (`remote_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The tool file's id (`tool_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_file_id: Option<String>,
    /// `user` (the default) or `assistant`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<names::OwnerName>)]
    pub belongs_to: Option<String>,
}

impl FileRefWire {
    /// The engine's reference; a 422 naming what is wrong otherwise (an unknown type or
    /// method, a missing or extra id or URL, an id that is not a plain name, a URL that is
    /// not http(s)).
    pub fn to_ref(&self) -> Result<memtape_core::FileRef> {
        use memtape_core::{FileOwner, FileSource, FileType};
        let bad = |why: String| ApiError::unprocessable(format!("files: {why}"));
        let file_type = match self.file_type.as_str() {
            "image" => FileType::Image,
            "document" => FileType::Document,
            "audio" => FileType::Audio,
            "video" => FileType::Video,
            "custom" => FileType::Custom,
            other => {
                return Err(bad(format!(
                    "type {other:?}: expected image, document, audio, video or custom"
                )));
            }
        };
        let (upload, url, tool) = (&self.upload_file_id, &self.url, &self.tool_file_id);
        let source = match (self.transfer_method.as_str(), upload, url, tool) {
            ("local_file", Some(id), None, None) => FileSource::LocalFile {
                upload_file_id: id.clone(),
            },
            ("remote_url", None, Some(url), None) => FileSource::RemoteUrl { url: url.clone() },
            ("tool_file", None, None, Some(id)) => FileSource::ToolFile {
                tool_file_id: id.clone(),
            },
            ("local_file" | "remote_url" | "tool_file", ..) => {
                return Err(bad(format!(
                    "transfer_method {} takes exactly one of upload_file_id (local_file), url \
                     (remote_url), tool_file_id (tool_file): the one it names",
                    self.transfer_method
                )));
            }
            (other, ..) => {
                return Err(bad(format!(
                    "transfer_method {other:?}: expected local_file, remote_url or tool_file"
                )));
            }
        };
        let belongs_to = match self.belongs_to.as_deref() {
            None | Some("user") => FileOwner::User,
            Some("assistant") => FileOwner::Assistant,
            Some(other) => {
                return Err(bad(format!(
                    "belongs_to {other:?}: expected user or assistant"
                )));
            }
        };
        let file = memtape_core::FileRef {
            file_type,
            source,
            belongs_to,
        };
        memtape::check_reference(&file).map_err(|e| bad(e.to_string()))?;
        Ok(file)
    }

    /// The wire form of a reference.
    pub fn of(f: &memtape_core::FileRef) -> Self {
        let value = serde_json::to_value(f).unwrap_or(Value::Null);
        serde_json::from_value(value).unwrap_or(FileRefWire {
            file_type: String::new(),
            transfer_method: String::new(),
            upload_file_id: None,
            url: None,
            tool_file_id: None,
            belongs_to: None,
        })
    }
}

/// A chat message, as sent in and as history returns it (OpenAI's chat shape, with the
/// model's separate reasoning and Dify's file references).
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
    /// The model's reasoning, when the provider returned it separately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Files attached by reference (Dify's shape); history gives them back as references,
    /// or rebuilt into the content with `attachments=parts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 32)]
    pub files: Vec<FileRefWire>,
}

impl ChatMessage {
    /// The engine's message for this one; a shape the engine refuses is a 422. Its file
    /// references are checked for their shape here; whether the files exist (in the
    /// caller's tenant) is the append's to check.
    pub fn to_message(&self) -> Result<Message> {
        let files = self
            .files
            .iter()
            .map(FileRefWire::to_ref)
            .collect::<Result<Vec<_>>>()?;
        let mut plain = self.clone();
        plain.files.clear();
        let value = serde_json::to_value(&plain).map_err(|e| ApiError::internal(e.to_string()))?;
        let mut message: Message = serde_json::from_value(value)
            .map_err(|e| ApiError::unprocessable(format!("message: {e}")))?;
        message.files = files;
        Ok(message)
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
            reasoning_content: text("reasoning_content"),
            files: m.files.iter().map(FileRefWire::of).collect(),
        }
    }
}

/// How history and context give attached files back: `None` for references (`refs`, the
/// default), else the provider whose content parts they are rebuilt into; a 400 naming the
/// choices otherwise.
pub fn attachments_format(raw: Option<&str>) -> Result<Option<memtape::AttachmentsFormat>> {
    match raw {
        None | Some("refs") => Ok(None),
        Some("parts" | "openai") => Ok(Some(memtape::AttachmentsFormat::OpenAi)),
        Some("anthropic") => Ok(Some(memtape::AttachmentsFormat::Anthropic)),
        Some(other) => Err(ApiError::bad_request(format!(
            "attachments {other:?}: expected refs, parts (OpenAI's), openai or anthropic"
        ))),
    }
}

impl ChatMessage {
    /// The wire form of `m`, its files as references (`rebuild` none) or rebuilt into
    /// content parts of that provider from `files` (then `files` is empty: the parts are
    /// what a provider is sent).
    pub fn rebuilt(
        m: &Message,
        rebuild: Option<memtape::AttachmentsFormat>,
        files: Option<&memtape::FilesDir>,
        config: &memtape::AttachmentsConfig,
    ) -> Result<Self> {
        let mut out = ChatMessage::of(m);
        let (Some(format), Some(files)) = (rebuild, files) else {
            return Ok(out);
        };
        if m.files.is_empty() && format == memtape::AttachmentsFormat::OpenAi {
            return Ok(out);
        }
        if !m.files.is_empty() || matches!(m.content, Some(memtape::Content::Parts(_))) {
            out.content = Some(memtape::content_parts(m, files, format, config)?);
        }
        out.files.clear();
        Ok(out)
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

/// One message to append: a chat message's fields, and optionally the message it
/// follows. A field of neither is refused (422), never ignored.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMessage {
    /// `system`, `user`, `assistant` or `tool`.
    #[schema(value_type = names::RoleName)]
    pub role: String,
    /// The text, or OpenAI content parts.
    #[serde(default)]
    #[schema(value_type = Option<ContentSchema>)]
    pub content: Option<Value>,
    /// A participant or tool name.
    #[serde(default)]
    pub name: Option<String>,
    /// The tools the assistant calls.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallWire>,
    /// For a tool result: the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The model's reasoning, when the provider returned it separately.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// Files attached by reference (Dify's shape): uploads (`POST /v1/files`) and tool
    /// files of the caller's tenant, or http(s) URLs; at most 32.
    #[serde(default)]
    #[schema(max_items = 32)]
    pub files: Vec<FileRefWire>,
    /// The entry it follows (a regenerated answer names the message it answers again);
    /// by default the session's latest message.
    #[serde(default)]
    #[schema(maximum = 9007199254740991_u64)]
    pub parent: Option<u64>,
}

impl NewMessage {
    /// The chat message it carries.
    pub fn message(&self) -> ChatMessage {
        ChatMessage {
            role: self.role.clone(),
            content: self.content.clone(),
            name: self.name.clone(),
            tool_calls: self.tool_calls.clone(),
            tool_call_id: self.tool_call_id.clone(),
            reasoning_content: self.reasoning_content.clone(),
            files: self.files.clone(),
        }
    }
}

/// Several messages to append, in order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ManyMessages {
    /// The messages, in order.
    #[schema(min_items = 1)]
    pub messages: Vec<NewMessage>,
}

/// The body of an append: one message, or several in order (`{"messages": [...]}`, one
/// transaction).
#[derive(Debug, ToSchema)]
#[serde(untagged)]
pub enum AppendBody {
    /// Several messages.
    Many(ManyMessages),
    /// One message.
    One(Box<NewMessage>),
}

impl<'de> Deserialize<'de> for AppendBody {
    /// An object with `messages` is several; any other is one message. Either way an
    /// error names the field at fault, not "no variant matched".
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let many = value.get("messages").is_some();
        if many {
            serde_json::from_value(value)
                .map(AppendBody::Many)
                .map_err(serde::de::Error::custom)
        } else {
            serde_json::from_value(value)
                .map(|m| AppendBody::One(Box::new(m)))
                .map_err(serde::de::Error::custom)
        }
    }
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

    /// Dify's file types.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum FileTypeName {
        /// An image.
        Image,
        /// A document.
        Document,
        /// An audio clip.
        Audio,
        /// A video.
        Video,
        /// Anything else.
        Custom,
    }

    /// Dify's transfer methods.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum TransferMethodName {
        /// An upload (`upload_file_id`).
        LocalFile,
        /// A URL (`url`).
        RemoteUrl,
        /// A tool's file (`tool_file_id`).
        ToolFile,
    }

    /// Who a file belongs to.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum OwnerName {
        /// The user.
        User,
        /// The assistant.
        Assistant,
    }

    /// How history gives attached files back.
    #[derive(ToSchema)]
    #[schema(rename_all = "snake_case")]
    #[allow(dead_code)]
    pub enum AttachmentsName {
        /// Dify's references, in `files` (the default).
        Refs,
        /// Rebuilt into OpenAI content parts.
        Parts,
        /// Rebuilt into OpenAI content parts.
        Openai,
        /// Rebuilt into Anthropic content blocks.
        Anthropic,
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
