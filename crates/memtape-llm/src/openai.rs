//! The OpenAI-compatible chat completions client (`POST {base}/chat/completions`): OpenAI,
//! Ollama's `/v1`, vLLM, llama.cpp's server and LM Studio all speak it.

use std::io::BufRead;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{self, Error, Result};
use crate::http::{self, DEFAULT_TIMEOUT, Http};
use crate::retry::RetryPolicy;
use crate::types::{AttachmentKind, ChatRequest, ChatResponse, Message, ToolCall, Usage};
use crate::{Llm, arguments, sse};

/// A client of one model behind an OpenAI-compatible server.
pub struct OpenAi {
    http: Http,
    url: String,
    model: String,
    api_key: Option<String>,
}

impl std::fmt::Debug for OpenAi {
    /// Everything but the key, which must not reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAi")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl OpenAi {
    /// A client of `model` at `base_url` (for example `http://127.0.0.1:11434/v1` for
    /// Ollama, `https://api.openai.com/v1`), with a 60 s timeout per attempt and the
    /// default [`RetryPolicy`]. Nothing is sent until the first call.
    pub fn new(base_url: &str, model: &str) -> Result<Self> {
        let (url, model) = http::endpoint(base_url, "/chat/completions", model)?;
        Ok(OpenAi {
            http: Http::new(DEFAULT_TIMEOUT, RetryPolicy::default()),
            url,
            model,
            api_key: None,
        })
    }

    /// Sends `key` as `Authorization: Bearer KEY`.
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

    /// The headers every request carries.
    fn headers(&self) -> Vec<(&'static str, String)> {
        self.api_key
            .iter()
            .map(|key| ("authorization", format!("Bearer {key}")))
            .collect()
    }

    /// The request body for `request`.
    fn body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": request.messages.iter().map(message).collect::<Vec<_>>(),
            "stream": false,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
        }
        if let Some(name) = &request.force_tool {
            body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
        }
        if let Some(n) = request.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        body
    }
}

/// A message in the wire format; tool-call arguments go back as a JSON string.
fn message(m: &Message) -> Value {
    let mut out = json!({"role": m.role.as_str(), "content": m.content});
    if !m.attachments.is_empty() {
        // Content parts: the text, then each file (an image by URL or data; a document as
        // a file part when its bytes are here, else named by its URL in the text).
        let mut parts = vec![json!({"type": "text", "text": m.content})];
        for a in &m.attachments {
            parts.push(match (a.kind, a.data()) {
                (AttachmentKind::Image, _) => {
                    json!({"type": "image_url", "image_url": {"url": a.url}})
                }
                (AttachmentKind::Document, Some(_)) => json!({"type": "file", "file": {
                    "file_data": a.url,
                    "filename": a.name.clone().unwrap_or_else(|| "attachment".into()),
                }}),
                (AttachmentKind::Document, None) => {
                    json!({"type": "text", "text": format!("[attached file: {}]", a.url)})
                }
            });
        }
        out["content"] = Value::Array(parts);
    }
    if !m.tool_calls.is_empty() {
        out["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function", "function": {
                    "name": c.name,
                    "arguments": Value::Object(c.arguments.clone()).to_string(),
                }})
            })
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        out["tool_call_id"] = json!(id);
    }
    out
}

/// Reads a successful reply.
fn reply(text: &str) -> Result<ChatResponse> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        Error::BadReply(format!(
            "not JSON ({e}): {}",
            text.chars().take(120).collect::<String>()
        ))
    })?;
    // Some servers answer 200 with an error inside (LM Studio, old llama.cpp builds).
    if let Some(e) = v.get("error") {
        return Err(error::from_status(
            200,
            None,
            &json!({"error": e}).to_string(),
        ));
    }
    let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
        return Err(Error::BadReply("no choices".into()));
    };
    let msg = choice
        .get("message")
        .ok_or_else(|| Error::BadReply("a choice without a message".into()))?;
    let content = match msg.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(Error::BadReply(format!("content is {other}"))),
    };
    let mut tool_calls = Vec::new();
    for (i, call) in msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let function = call.get("function").unwrap_or(&Value::Null);
        let Some(name) = function.get("name").and_then(Value::as_str) else {
            return Err(Error::BadReply(format!("tool call {i} has no name")));
        };
        let raw = function.get("arguments").unwrap_or(&Value::Null);
        tool_calls.push(ToolCall {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call_{i}"), str::to_owned),
            name: name.to_owned(),
            arguments: arguments::parse(name, raw)?,
        });
    }
    let usage = v.get("usage").filter(|u| u.is_object()).map(usage);
    Ok(ChatResponse {
        content,
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage,
        attempts: 1,
    })
}

/// A streamed reply being put together.
#[derive(Default)]
struct Partial {
    content: String,
    calls: Vec<PartialCall>,
    finish: Option<String>,
    usage: Option<Usage>,
}

/// A tool call whose pieces are still arriving.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The usage object of a reply or a stream's last chunk.
fn usage(u: &Value) -> Usage {
    Usage {
        prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    }
}

impl Partial {
    /// Takes in one chunk of the stream.
    fn chunk(
        &mut self,
        v: &Value,
        delivered: &mut bool,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<()> {
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage(u));
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return Ok(());
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            on_text(text);
            *delivered = true;
            self.content.push_str(text);
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = call.get("id").and_then(Value::as_str);
            // By index when the server gives one (OpenAI), else by id, else the last call.
            let at = match call.get("index").and_then(Value::as_u64) {
                Some(i) => usize::try_from(i).unwrap_or(usize::MAX),
                None => id
                    .and_then(|id| self.calls.iter().position(|c| c.id == id))
                    .unwrap_or(if id.is_some() || self.calls.is_empty() {
                        self.calls.len()
                    } else {
                        self.calls.len() - 1
                    }),
            };
            if at > self.calls.len() {
                return Err(Error::BadReply(format!(
                    "tool call {at} streamed before call {}",
                    self.calls.len()
                )));
            }
            if at == self.calls.len() {
                self.calls.push(PartialCall::default());
            }
            let partial = &mut self.calls[at];
            if let Some(id) = id {
                partial.id = id.to_owned();
            }
            let function = call.get("function").unwrap_or(&Value::Null);
            if let Some(name) = function.get("name").and_then(Value::as_str) {
                partial.name.push_str(name);
            }
            match function.get("arguments") {
                Some(Value::String(piece)) => partial.arguments.push_str(piece),
                // An object in one piece (some servers).
                Some(Value::Object(o)) => partial.arguments = Value::Object(o.clone()).to_string(),
                _ => {}
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_owned());
        }
        Ok(())
    }

    /// The whole reply.
    fn finish(self) -> Result<ChatResponse> {
        let mut tool_calls = Vec::new();
        for (i, c) in self.calls.into_iter().enumerate() {
            if c.name.is_empty() {
                return Err(Error::BadReply(format!(
                    "streamed tool call {i} has no name"
                )));
            }
            let arguments = arguments::parse(&c.name, &Value::String(c.arguments))?;
            tool_calls.push(ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                arguments,
            });
        }
        Ok(ChatResponse {
            content: self.content,
            tool_calls,
            finish_reason: self.finish,
            usage: self.usage,
            attempts: 1,
        })
    }
}

/// Reads a streamed reply, passing its text to `on_text` as it comes.
fn read_stream(
    reader: &mut dyn BufRead,
    delivered: &mut bool,
    on_text: &mut dyn FnMut(&str),
) -> Result<ChatResponse> {
    let mut partial = Partial::default();
    let read = sse::read(reader, |data| {
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| Error::BadReply(format!("a stream event that is not JSON ({e})")))?;
        if let Some(e) = v.get("error") {
            return Err(error::from_status(
                200,
                None,
                &json!({"error": e}).to_string(),
            ));
        }
        partial.chunk(&v, delivered, on_text)?;
        Ok(false)
    });
    let complete = match read {
        Ok(complete) => complete || partial.finish.is_some(),
        Err(e) if *delivered => {
            return Err(Error::Interrupted {
                received: partial.content,
                detail: e.to_string(),
            });
        }
        Err(e) => return Err(e),
    };
    if !complete {
        let detail = "the stream ended before the reply did".to_owned();
        return Err(if *delivered {
            Error::Interrupted {
                received: partial.content,
                detail,
            }
        } else {
            Error::Connection(detail)
        });
    }
    partial.finish()
}

impl Llm for OpenAi {
    fn model(&self) -> &str {
        &self.model
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let body = self.body(request).to_string();
        self.http.post(&self.url, &self.headers(), &body, reply)
    }

    fn chat_stream(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse> {
        let mut body = self.body(request);
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let body = body.to_string();
        self.http
            .stream(&self.url, &self.headers(), &body, on_text, read_stream)
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

        /// Nor does a well-formed reply with arbitrary content and arguments.
        #[test]
        fn any_tool_call_arguments_are_read_or_refused(args in ".{0,120}", content in ".{0,40}") {
            let body = json!({"choices": [{"message": {"content": content, "tool_calls": [
                {"id": "c", "function": {"name": "t", "arguments": args}}]}}]});
            match reply(&body.to_string()) {
                Ok(r) => proptest::prop_assert_eq!(r.content, content),
                Err(Error::BadArguments { .. }) => {}
                Err(other) => proptest::prop_assert!(false, "{other:?}"),
            }
        }
    }
}
