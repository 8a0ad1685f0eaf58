//! memtape's LLM providers: the [`Llm`] trait the memory lifecycle talks to, and the
//! clients behind it.
//!
//! This is the first part of that layer (issue 12): the request and reply types, tool-call
//! arguments as providers really send them ([`arguments`]), errors classified so a caller
//! can act on them (a context that is too long is its own [`Error::ContextLength`]), a
//! retry policy that honours `Retry-After` ([`RetryPolicy`]), an OpenAI-compatible chat
//! completions client ([`OpenAi`]: OpenAI, Ollama, vLLM, llama.cpp's server, LM
//! Studio), an Anthropic Messages API client ([`Anthropic`]), and the configuration from
//! the environment ([`LlmConfig`]). Not yet here: streaming, configuration from a file,
//! and token usage recorded on the tape.

mod anthropic;
pub mod arguments;
mod config;
mod error;
mod http;
mod openai;
mod retry;
mod types;

pub use anthropic::Anthropic;
pub use config::{LlmConfig, Provider};
pub use error::{Error, Result};
pub use openai::OpenAi;
pub use retry::{RetryPolicy, retry_after};
pub use types::{ChatRequest, ChatResponse, Message, Role, ToolCall, ToolSpec, Usage};

/// A chat model that can call tools.
pub trait Llm: Send + Sync {
    /// The model's name, as recorded with what it produced.
    fn model(&self) -> &str;

    /// Sends `request` and returns the model's reply, after any retries the client's policy
    /// allows.
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse>;
}
