//! memtape's LLM providers: the [`Llm`] trait the memory lifecycle talks to, and the
//! clients behind it.
//!
//! This is the first part of that layer (issue 12): the request and reply types, tool-call
//! arguments as providers really send them ([`arguments`]), errors classified so a caller
//! can act on them (a context that is too long is its own [`Error::ContextLength`]), a
//! retry policy that honours `Retry-After` ([`RetryPolicy`]), an OpenAI-compatible chat
//! completions client ([`OpenAi`]: OpenAI, Ollama, vLLM, llama.cpp's server, LM
//! Studio), an Anthropic Messages API client ([`Anthropic`]), both also streaming
//! ([`Llm::chat_stream`]), and the configuration from a file and the environment
//! ([`LlmConfig`]). The replies carry token usage ([`Usage`]); the engine records it on the
//! tape.

mod anthropic;
pub mod arguments;
mod config;
mod error;
mod http;
mod openai;
mod retry;
mod sse;
mod types;

pub use anthropic::{Anthropic, MemoryTool, has_memory_tool};
pub use config::{LlmConfig, LlmSettings, Provider};
pub use error::{Error, Result};
pub use openai::OpenAi;
pub use retry::{RetryPolicy, retry_after};
pub use types::{
    Attachment, AttachmentKind, ChatRequest, ChatResponse, Message, Role, ToolCall, ToolSpec, Usage,
};

/// A chat model that can call tools.
pub trait Llm: Send + Sync {
    /// The model's name, as recorded with what it produced.
    fn model(&self) -> &str;

    /// Sends `request` and returns the model's reply, after any retries the client's policy
    /// allows.
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse>;

    /// [`Llm::chat`], streamed: the reply's text goes to `on_text` piece by piece as it
    /// arrives, and the whole reply is returned at the end. A failure before any text
    /// arrived is retried as in `chat`; after, it is [`Error::Interrupted`] with what came.
    /// Without streaming support, the text arrives in one piece.
    fn chat_stream(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<ChatResponse> {
        let reply = self.chat(request)?;
        if !reply.content.is_empty() {
            on_text(&reply.content);
        }
        Ok(reply)
    }
}
