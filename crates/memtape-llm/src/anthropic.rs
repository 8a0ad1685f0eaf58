//! The Anthropic Messages API client (`POST {base}/v1/messages`): the system prompt is a
//! field of its own, tool calls and their results are content blocks, and `max_tokens` is
//! required.

use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::http::{self, DEFAULT_TIMEOUT, Http};
use crate::retry::RetryPolicy;
use crate::types::{ChatRequest, ChatResponse, Message, Role, ToolCall, Usage};
use crate::{Llm, arguments};

/// The API version sent with every request.
const VERSION: &str = "2023-06-01";

/// The reply budget when a request sets none (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 1024;

/// A client of one model behind the Anthropic Messages API.
#[derive(Debug)]
pub struct Anthropic {
    http: Http,
    url: String,
    model: String,
    api_key: Option<String>,
}

impl Anthropic {
    /// A client of `model` at `base_url` (`https://api.anthropic.com`), with a 60 s timeout
    /// per attempt and the default [`RetryPolicy`]. Nothing is sent until the first call.
    pub fn new(base_url: &str, model: &str) -> Result<Self> {
        let base = http::base(base_url)?;
        if model.trim().is_empty() {
            return Err(Error::Config("no model name given".into()));
        }
        Ok(Anthropic {
            http: Http::new(DEFAULT_TIMEOUT, RetryPolicy::default()),
            url: format!("{base}/v1/messages"),
            model: model.to_owned(),
            api_key: None,
        })
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
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
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
            Role::User => ("user", vec![json!({"type": "text", "text": m.content})]),
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

impl Llm for Anthropic {
    fn model(&self) -> &str {
        &self.model
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let body = self.body(request).to_string();
        let mut headers = vec![("anthropic-version", VERSION.to_owned())];
        if let Some(key) = &self.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        let (mut reply, attempts) = self.http.post(&self.url, &headers, &body, reply)?;
        reply.attempts = attempts;
        Ok(reply)
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
    }
}
