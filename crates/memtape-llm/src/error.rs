//! The crate's error type, classified so a caller can act on it: retry, trim the prompt,
//! fix the configuration, or record a bad reply.

use std::time::Duration;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong talking to a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The prompt (with the room asked for the reply) does not fit the model's context.
    /// Never retried as is: the caller trims and tries again (MateClaw's emergency path).
    #[error("the prompt does not fit the model's context: {message}")]
    ContextLength {
        /// The provider's words.
        message: String,
    },

    /// The provider refused or failed the request with an HTTP status.
    #[error("the model server answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The provider's error message (or the start of the body).
        message: String,
        /// Whether trying again later may succeed (429 unless the quota is spent, 408, 5xx).
        retryable: bool,
        /// How long the server asked to wait, if it said.
        retry_after: Option<Duration>,
    },

    /// No answer within the timeout.
    #[error("the model server did not answer within {0:?}")]
    Timeout(Duration),

    /// Nothing answered at the server's address: refused, no such host, no route.
    #[error("could not reach the model server at {url}: {detail}")]
    Unreachable {
        /// The address called.
        url: String,
        /// What the system said.
        detail: String,
    },

    /// The connection to the server broke.
    #[error("could not reach the model server: {0}")]
    Connection(String),

    /// A streamed reply broke after part of it reached the caller; not retried, since the
    /// caller has already used that part.
    #[error("the reply stream broke after {} characters of text: {detail}", received.chars().count())]
    Interrupted {
        /// The text received before it broke.
        received: String,
        /// What broke it.
        detail: String,
    },

    /// An answer that is not what the protocol promises (not JSON, no choices, …).
    #[error("the model server's reply is malformed: {0}")]
    BadReply(String),

    /// A tool call whose arguments are not an object in any form providers use.
    #[error("the arguments of the {tool} tool call are unusable: {detail}")]
    BadArguments {
        /// The tool called.
        tool: String,
        /// What is wrong with them.
        detail: String,
    },

    /// A setting that cannot work (an invalid URL, say).
    #[error("LLM configuration: {0}")]
    Config(String),
}

impl Error {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Status { retryable, .. } => *retryable,
            Error::Timeout(_) | Error::Connection(_) | Error::Unreachable { .. } => true,
            _ => false,
        }
    }
}

/// Whether an error `message` (or `code`/`type`) says the context is too long, in any of the
/// forms OpenAI, Anthropic, vLLM, llama.cpp's server and LM Studio use.
pub(crate) fn is_context_length(code: &str, kind: &str, message: &str) -> bool {
    if code == "context_length_exceeded" || kind == "exceed_context_size_error" {
        return true;
    }
    let m = message.to_lowercase();
    [
        "maximum context length",
        "context length",
        "context window",
        "context size",
        "prompt is too long",
        "exceed context limit",
        "exceeds the available context",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Classifies an error reply: `status`, its `retry_after` and its body.
pub(crate) fn from_status(status: u16, retry_after: Option<Duration>, body: &str) -> Error {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    // `{"error": {"message", "type", "code"}}` (OpenAI, vLLM, llama.cpp, Anthropic), or
    // `{"error": "text"}` (Ollama), or `{"message": ...}`.
    let error = parsed.as_ref().map(|v| v.get("error").unwrap_or(v));
    let text = |key: &str| {
        error
            .and_then(|e| e.get(key))
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let mut message = text("message");
    if message.is_empty() {
        message = match error {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => body.chars().take(300).collect(),
        };
    }
    let (code, kind) = (text("code"), text("type"));
    if is_context_length(&code, &kind, &message) {
        return Error::ContextLength { message };
    }
    // A spent quota or spending cap does not come back by waiting.
    let spent = code == "insufficient_quota"
        || kind == "insufficient_quota"
        || body.contains("enforced_spend_limit_reached");
    let retryable = !spent && matches!(status, 408 | 409 | 429 | 500..=599);
    Error::Status {
        status,
        message,
        retryable,
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_length_errors_are_recognised_in_every_provider_form() {
        let bodies = [
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 202609 tokens > 200000 maximum"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000"}}"#,
            r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#,
            r#"{"object":"error","message":"This model's maximum context length is 2048 tokens. However, your request has 3000 input tokens.","type":"BadRequestError","code":400}"#,
        ];
        for body in bodies {
            assert!(
                matches!(from_status(400, None, body), Error::ContextLength { .. }),
                "{body}"
            );
        }
    }

    #[test]
    fn retryable_statuses_and_spent_quotas() {
        let retry = |status, body: &str| from_status(status, None, body).is_retryable();
        assert!(retry(
            429,
            r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#
        ));
        assert!(retry(503, "Service Unavailable"));
        assert!(retry(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        ));
        assert!(!retry(
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#
        ));
        assert!(!retry(401, r#"{"error":{"message":"bad key"}}"#));
        assert!(!retry(400, r#"{"error":"model is required"}"#));
        match from_status(400, None, r#"{"error":"model is required"}"#) {
            Error::Status { message, .. } => assert_eq!(message, "model is required"),
            other => panic!("{other:?}"),
        }
    }
}
