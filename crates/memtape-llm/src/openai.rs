//! The OpenAI-compatible chat completions client (`POST {base}/chat/completions`): OpenAI,
//! Ollama's `/v1`, vLLM, llama.cpp's server and LM Studio all speak it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{self, Error, Result};
use crate::http::{self, DEFAULT_TIMEOUT, Http};
use crate::retry::RetryPolicy;
use crate::types::{ChatRequest, ChatResponse, Message, ToolCall, Usage};
use crate::{Llm, arguments};

/// A client of one model behind an OpenAI-compatible server.
#[derive(Debug)]
pub struct OpenAi {
    http: Http,
    url: String,
    model: String,
    api_key: Option<String>,
}

impl OpenAi {
    /// A client of `model` at `base_url` (for example `http://127.0.0.1:11434/v1` for
    /// Ollama, `https://api.openai.com/v1`), with a 60 s timeout per attempt and the
    /// default [`RetryPolicy`]. Nothing is sent until the first call.
    pub fn new(base_url: &str, model: &str) -> Result<Self> {
        let base = http::base(base_url)?;
        if model.trim().is_empty() {
            return Err(Error::Config("no model name given".into()));
        }
        Ok(OpenAi {
            http: Http::new(DEFAULT_TIMEOUT, RetryPolicy::default()),
            url: format!("{base}/chat/completions"),
            model: model.to_owned(),
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
    let usage = v.get("usage").map(|u| Usage {
        prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
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

impl Llm for OpenAi {
    fn model(&self) -> &str {
        &self.model
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let body = self.body(request).to_string();
        let mut headers = Vec::new();
        if let Some(key) = &self.api_key {
            headers.push(("authorization", format!("Bearer {key}")));
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
