//! Requests and replies in the terms of the memory lifecycle, independent of any provider's
//! wire format.

use serde_json::{Map, Value};

/// Who speaks a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call the model made.
    Tool,
}

impl Role {
    /// The name chat APIs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation sent to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text (empty for an assistant message that only calls tools).
    pub content: String,
    /// The tool calls of an assistant message.
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the call it answers.
    pub tool_call_id: Option<String>,
    /// Files the message carries (images, documents), after its text.
    pub attachments: Vec<Attachment>,
}

/// What kind of file an attachment is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachmentKind {
    /// An image: sent as an image part.
    Image,
    /// A document (a PDF, say): sent as a file (OpenAI) or document (Anthropic) part.
    Document,
}

/// A file attached to a message, as the provider is sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// Image or document.
    pub kind: AttachmentKind,
    /// Where it is: an `http(s)` URL, or a `data:MEDIA;base64,...` URL with the bytes.
    pub url: String,
    /// Its name, if known.
    pub name: Option<String>,
}

impl Attachment {
    /// The media type and base64 data of a `data:` URL.
    pub fn data(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("data:")?;
        let (media, data) = rest.split_once(";base64,")?;
        Some((media, data))
    }
}

impl Message {
    /// A message of `role` with `content`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            attachments: Vec::new(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::new(Role::User, content)
    }
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

/// A tool call the model made, with its arguments normalised to an object
/// ([`crate::arguments::parse`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call (answered by a tool message's `tool_call_id`).
    pub id: String,
    /// The tool called.
    pub name: String,
    /// Its arguments.
    pub arguments: Map<String, Value>,
}

/// What a request asks of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools offered.
    pub tools: Vec<ToolSpec>,
    /// A tool the model must call, if any (nanobot forces `save_memory`).
    pub force_tool: Option<String>,
    /// The most tokens the reply may have.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
}

impl ChatRequest {
    /// A request with `messages`, no tools and the provider's defaults.
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            tools: Vec::new(),
            force_tool: None,
            max_tokens: None,
            temperature: None,
        }
    }
}

/// Tokens a call used, as the provider counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: u64,
    /// Tokens of the reply.
    pub completion_tokens: u64,
}

/// The model's reply.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatResponse {
    /// Its text (may be empty when it only calls tools).
    pub content: String,
    /// Its tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped, as the provider said (`stop`, `length`, `tool_calls`, …).
    pub finish_reason: Option<String>,
    /// Tokens used, if the provider said.
    pub usage: Option<Usage>,
    /// How many attempts the call took (1 without retries).
    pub attempts: u32,
}
