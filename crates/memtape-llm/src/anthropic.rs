//! The Anthropic Messages API client (`POST {base}/v1/messages`): the system prompt is a
//! field of its own, tool calls and their results are content blocks, and `max_tokens` is
//! required.

use std::io::BufRead;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::http::{self, DEFAULT_TIMEOUT, Http};
use crate::retry::RetryPolicy;
use crate::types::{ChatRequest, ChatResponse, Message, Role, ToolCall, Usage};
use crate::{Llm, arguments, sse};

/// The API version sent with every request.
const VERSION: &str = "2023-06-01";

/// The reply budget when a request sets none (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 1024;

/// The name of Anthropic's memory tool (and of memtape's `/memories` tool).
pub const MEMORY_TOOL: &str = "memory";

/// The type Anthropic's trained memory tool is declared with.
pub const MEMORY_TOOL_TYPE: &str = "memory_20250818";

/// The beta the memory tool needs (`anthropic-beta`).
pub const MEMORY_TOOL_BETA: &str = "context-management-2025-06-27";

/// How a tool named `memory` is sent to the Anthropic API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryTool {
    /// As Anthropic's trained memory tool (`{"type": "memory_20250818", "name":
    /// "memory"}`, with the `context-management-2025-06-27` beta) when the model has it
    /// ([`has_memory_tool`]), else as a plain JSON-schema tool.
    #[default]
    Auto,
    /// Always as Anthropic's memory tool.
    Native,
    /// Always as a plain JSON-schema tool.
    Schema,
}

impl std::str::FromStr for MemoryTool {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<MemoryTool, String> {
        match s.trim() {
            "auto" => Ok(MemoryTool::Auto),
            "native" => Ok(MemoryTool::Native),
            "schema" => Ok(MemoryTool::Schema),
            other => Err(format!(
                "{other:?} is not a memory tool mode; use auto, native or schema"
            )),
        }
    }
}

/// Whether `model` has Anthropic's trained memory tool: the Claude 4 models and later
/// (Sonnet and Opus from 4, Haiku from 4.5), by name, with or without a date and a
/// provider's prefix (`anthropic.claude-sonnet-4-5-20250929-v1:0`).
pub fn has_memory_tool(model: &str) -> bool {
    let Some(at) = model.find("claude-") else {
        return false;
    };
    let mut parts = model[at + "claude-".len()..].split(['-', '@', '.', ':']);
    let family = parts.next().unwrap_or_default();
    let number = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok().filter(|n| *n < 100));
    let Some(major) = number(parts.next()) else {
        return false;
    };
    let minor = number(parts.next()).unwrap_or(0);
    match family {
        "sonnet" | "opus" => major >= 4,
        "haiku" => major > 4 || (major == 4 && minor >= 5),
        _ => false,
    }
}

/// A client of one model behind the Anthropic Messages API.
pub struct Anthropic {
    http: Http,
    url: String,
    model: String,
    api_key: Option<String>,
    memory_tool: MemoryTool,
}

impl std::fmt::Debug for Anthropic {
    /// Everything but the key, which must not reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Anthropic {
    /// A client of `model` at `base_url` (`https://api.anthropic.com`), with a 60 s timeout
    /// per attempt and the default [`RetryPolicy`]. Nothing is sent until the first call.
    pub fn new(base_url: &str, model: &str) -> Result<Self> {
        let (url, model) = http::endpoint(base_url, "/v1/messages", model)?;
        Ok(Anthropic {
            http: Http::new(DEFAULT_TIMEOUT, RetryPolicy::default()),
            url,
            model,
            api_key: None,
            memory_tool: MemoryTool::Auto,
        })
    }

    /// How a tool named `memory` is sent (default [`MemoryTool::Auto`]).
    pub fn memory_tool(mut self, mode: MemoryTool) -> Self {
        self.memory_tool = mode;
        self
    }

    /// Whether a tool named `memory` goes as Anthropic's memory tool.
    fn native_memory(&self) -> bool {
        match self.memory_tool {
            MemoryTool::Auto => has_memory_tool(&self.model),
            MemoryTool::Native => true,
            MemoryTool::Schema => false,
        }
    }

    /// Sends `key` as `x-api-key`.
    pub fn api_key(mut self, key: &str) -> Self {
        self.api_key = Some(key.to_owned());
        self
    }

    /// The longest one attempt may take, from connecting to the end of the reply.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.http = Http::new(timeout, self.http.policy());
        self
    }

    /// How failed calls are retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.http = Http::new(self.http.timeout(), policy);
        self
    }

    /// The headers of `request`: the version and key, and the memory tool's beta when
    /// the request declares it.
    fn headers(&self, request: &ChatRequest) -> Vec<(&'static str, String)> {
        let mut headers = vec![("anthropic-version", VERSION.to_owned())];
        if let Some(key) = &self.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        if self.native_memory() && request.tools.iter().any(|t| t.name == MEMORY_TOOL) {
            headers.push(("anthropic-beta", MEMORY_TOOL_BETA.to_owned()));
        }
        headers
    }

    /// The request body for `request`.
    fn body(&self, request: &ChatRequest) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages(&request.messages),
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    if t.name == MEMORY_TOOL && self.native_memory() {
                        // The model knows the tool's commands: its type says all of it.
                        json!({"type": MEMORY_TOOL_TYPE, "name": MEMORY_TOOL})
                    } else {
                        json!({"name": t.name, "description": t.description, "input_schema": t.parameters})
                    }
                })
                .collect();
        }
        if let Some(name) = &request.force_tool {
            body["tool_choice"] = json!({"type": "tool", "name": name});
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        body
    }
}

/// The conversation as the API takes it: user and assistant turns of content blocks; tool
/// results are blocks of a user turn, and consecutive turns of one role are merged.
fn messages(all: &[Message]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in all {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => {
                let mut blocks = vec![json!({"type": "text", "text": m.content})];
                blocks.extend(m.attachments.iter().map(attachment));
                ("user", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                blocks.extend(m.tool_calls.iter().map(|c| {
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
                }));
                ("assistant", blocks)
            }
        };
        match out.last_mut() {
            Some((last, previous)) if *last == role => previous.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A file as a content block: an image or a document, by URL or with its bytes (base64).
fn attachment(a: &crate::types::Attachment) -> Value {
    let source = match a.data() {
        Some((media, data)) => json!({"type": "base64", "media_type": media, "data": data}),
        None => json!({"type": "url", "url": a.url}),
    };
    match a.kind {
        crate::types::AttachmentKind::Image => json!({"type": "image", "source": source}),
        crate::types::AttachmentKind::Document => json!({"type": "document", "source": source}),
    }
}

/// Reads a successful reply.
fn reply(text: &str) -> Result<ChatResponse> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        Error::BadReply(format!(
            "not JSON ({e}): {}",
            text.chars().take(120).collect::<String>()
        ))
    })?;
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(crate::error::from_status(200, None, text));
    }
    let Some(blocks) = v.get("content").and_then(Value::as_array) else {
        return Err(Error::BadReply("no content".into()));
    };
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => content += block.get("text").and_then(Value::as_str).unwrap_or(""),
            Some("tool_use") => {
                let Some(name) = block.get("name").and_then(Value::as_str) else {
                    return Err(Error::BadReply(format!("tool_use block {i} has no name")));
                };
                tool_calls.push(ToolCall {
                    id: block
                        .get("id")
                        .and_then(Value::as_str)
                        .map_or_else(|| format!("toolu_{i}"), str::to_owned),
                    name: name.to_owned(),
                    arguments: arguments::parse(name, block.get("input").unwrap_or(&Value::Null))?,
                });
            }
            // Thinking and other blocks carry nothing the memory lifecycle uses.
            _ => {}
        }
    }
    let stop = v.get("stop_reason").and_then(Value::as_str);
    if stop == Some("model_context_window_exceeded") {
        return Err(Error::ContextLength {
            message: "the reply stopped at the model's context window".into(),
        });
    }
    let usage = v.get("usage").map(|u| Usage {
        prompt_tokens: u.get("input_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason: stop.map(str::to_owned),
        usage,
        attempts: 1,
    })
}

/// A tool call whose input is still arriving.
struct PartialUse {
    /// The content block it is.
    index: u64,
    id: String,
    name: String,
    /// The input as `content_block_start` gave it (`{}` for a tool without arguments).
    start: Value,
    /// The input's JSON pieces, joined.
    json: String,
}

/// Reads a streamed reply, passing its text to `on_text` as it comes.
fn read_stream(
    reader: &mut dyn BufRead,
    delivered: &mut bool,
    on_text: &mut dyn FnMut(&str),
) -> Result<ChatResponse> {
    let mut text = String::new();
    let mut uses: Vec<PartialUse> = Vec::new();
    let mut stop: Option<String> = None;
    let mut usage = Usage::default();
    let read = sse::read(reader, |data| {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| Error::BadReply(format!("a stream event that is not JSON ({e})")))?;
        let tokens =
            |u: Option<&Value>, key: &str| u.and_then(|u| u.get(key)).and_then(Value::as_u64);
        match v.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                let u = v.get("message").and_then(|m| m.get("usage"));
                usage.prompt_tokens = tokens(u, "input_tokens").unwrap_or(0);
                usage.completion_tokens = tokens(u, "output_tokens").unwrap_or(0);
            }
            Some("content_block_start") => {
                let block = v.get("content_block").unwrap_or(&Value::Null);
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    uses.push(PartialUse {
                        index: v.get("index").and_then(Value::as_u64).unwrap_or(0),
                        id: block
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        name: block
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        start: block.get("input").cloned().unwrap_or(Value::Null),
                        json: String::new(),
                    });
                }
            }
            Some("content_block_delta") => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        if !piece.is_empty() {
                            on_text(piece);
                            *delivered = true;
                            text.push_str(piece);
                        }
                    }
                    Some("input_json_delta") => {
                        let index = v.get("index").and_then(Value::as_u64);
                        let Some(u) = uses.iter_mut().find(|u| Some(u.index) == index) else {
                            return Err(Error::BadReply(
                                "tool input for a block that was never started".into(),
                            ));
                        };
                        u.json.push_str(
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                        );
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let Some(s) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    stop = Some(s.to_owned());
                }
                // A running total: the last one counts.
                if let Some(n) = tokens(v.get("usage"), "output_tokens") {
                    usage.completion_tokens = n;
                }
            }
            Some("message_stop") => return Ok(true),
            Some("error") => {
                let kind = v
                    .get("error")
                    .and_then(|e| e.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                // Classified as the status the same error has outside a stream.
                let status = match kind {
                    "overloaded_error" => 529,
                    "api_error" => 500,
                    "rate_limit_error" => 429,
                    _ => 400,
                };
                return Err(crate::error::from_status(status, None, data));
            }
            _ => {}
        }
        Ok(false)
    });
    let cut = |detail: String, text: String| {
        if *delivered {
            Error::Interrupted {
                received: text,
                detail,
            }
        } else {
            Error::Connection(detail)
        }
    };
    match read {
        Ok(true) => {}
        Ok(false) => return Err(cut("the stream ended before the reply did".into(), text)),
        Err(e) if *delivered => return Err(cut(e.to_string(), text)),
        Err(e) => return Err(e),
    }
    if stop.as_deref() == Some("model_context_window_exceeded") {
        return Err(Error::ContextLength {
            message: "the reply stopped at the model's context window".into(),
        });
    }
    let mut tool_calls = Vec::new();
    for (i, u) in uses.into_iter().enumerate() {
        if u.name.is_empty() {
            return Err(Error::BadReply(format!(
                "streamed tool call {i} has no name"
            )));
        }
        let input = if u.json.trim().is_empty() {
            u.start
        } else {
            Value::String(u.json)
        };
        tool_calls.push(ToolCall {
            arguments: arguments::parse(&u.name, &input)?,
            id: if u.id.is_empty() {
                format!("toolu_{i}")
            } else {
                u.id
            },
            name: u.name,
        });
    }
    Ok(ChatResponse {
        content: text,
        tool_calls,
        finish_reason: stop,
        usage: Some(usage),
        attempts: 1,
    })
}

impl Llm for Anthropic {
    fn model(&self) -> &str {
        &self.model
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let body = self.body(request).to_string();
        self.http
            .post(&self.url, &self.headers(request), &body, reply)
    }

    fn chat_stream(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse> {
        let mut body = self.body(request);
        body["stream"] = json!(true);
        let body = body.to_string();
        self.http.stream(
            &self.url,
            &self.headers(request),
            &body,
            on_text,
            read_stream,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A reply body from a broken or hostile server never panics the client.
        #[test]
        fn any_reply_body_is_read_or_refused(text in ".{0,300}") {
            let _ = reply(&text);
        }

        /// Nor does any stream of events.
        #[test]
        fn any_stream_is_read_or_refused(lines in proptest::collection::vec(".{0,80}", 0..8)) {
            let text: String = lines.iter().map(|l| format!("data: {l}\n\n")).collect();
            let mut delivered = false;
            let _ = read_stream(&mut text.as_bytes(), &mut delivered, &mut |_| {});
        }
    }
}
