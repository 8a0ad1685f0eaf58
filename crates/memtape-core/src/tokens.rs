//! Token counting with a real BPE (cl100k / o200k, via tiktoken-rs), behind a trait so
//! history and context code can be tested with any counter.

use crate::Message;

/// Counts tokens the way a model would see them.
pub trait TokenCounter: Send + Sync {
    /// Tokens in a piece of text.
    fn count(&self, text: &str) -> usize;

    /// Tokens a chat message costs in a prompt: the OpenAI chat format's per-message
    /// overhead (3, plus 1 for a name) and the tokens of its role, content, name, tool
    /// calls and tool_call_id. File references and reasoning are not sent, so not counted.
    fn count_message(&self, message: &Message) -> usize {
        let mut n = 3 + self.count(message.role.as_str()) + self.count(&message.content_text());
        if let Some(name) = &message.name {
            n += 1 + self.count(name);
        }
        for call in &message.tool_calls {
            n += 3
                + self.count(&call.id)
                + self.count(&call.function.name)
                + self.count(&call.function.arguments);
        }
        if let Some(id) = &message.tool_call_id {
            n += self.count(id);
        }
        n
    }
}

/// Which BPE vocabulary to count with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BpeEncoding {
    /// cl100k_base (GPT-4, GPT-3.5).
    #[default]
    Cl100k,
    /// o200k_base (GPT-4o and later).
    O200k,
}

/// A real byte-pair-encoding token counter. Building one parses the vocabulary once per
/// process (tiktoken-rs keeps a shared instance); clones are cheap.
#[derive(Clone)]
pub struct Bpe {
    bpe: &'static tiktoken_rs::CoreBPE,
}

impl std::fmt::Debug for Bpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bpe")
    }
}

impl Bpe {
    /// A counter for `encoding`.
    pub fn new(encoding: BpeEncoding) -> Self {
        let bpe = match encoding {
            BpeEncoding::Cl100k => tiktoken_rs::cl100k_base_singleton(),
            BpeEncoding::O200k => tiktoken_rs::o200k_base_singleton(),
        };
        Bpe { bpe }
    }
}

impl TokenCounter for Bpe {
    fn count(&self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        self.bpe.encode_ordinary(text).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cl100k_counts_like_tiktoken() {
        let bpe = Bpe::new(BpeEncoding::Cl100k);
        // tiktoken: enc.encode("hello world") == [15339, 1917]
        assert_eq!(bpe.count("hello world"), 2);
        assert_eq!(bpe.count(""), 0);
        // Special-token text is counted as ordinary text, never as a control token.
        assert!(bpe.count("<|endoftext|>") > 1);
        let m = Message::user("hello world");
        assert_eq!(bpe.count_message(&m), 3 + 1 + 2);
    }

    #[test]
    fn o200k_is_available() {
        let bpe = Bpe::new(BpeEncoding::O200k);
        assert_eq!(bpe.count("hello world"), 2);
    }
}
