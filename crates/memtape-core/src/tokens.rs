//! Token counting with a real BPE (cl100k / o200k, via tiktoken-rs), behind a trait so
//! history and context code can be tested with any counter, and a cache in front of it
//! ([`Cached`]) so a message counted once is not counted again.

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

/// A counter that remembers the counts of texts it has seen, keyed by a 64-bit hash of the
/// text and its length, so the same stored message counted again by the next context
/// build costs a hash instead of a BPE pass. The tape never changes a message, so the
/// counts never go stale. Memory is bounded: two generations of at most `capacity` texts
/// each; a text seen in the older one is carried into the newer.
pub struct Cached<C> {
    inner: C,
    capacity: usize,
    seen: std::sync::Mutex<[std::collections::HashMap<(u64, usize), usize>; 2]>,
}

impl<C> Cached<C> {
    /// Wraps `inner`, remembering up to about `2 × capacity` texts.
    pub fn new(inner: C, capacity: usize) -> Self {
        Cached {
            inner,
            capacity: capacity.max(1),
            seen: Default::default(),
        }
    }
}

impl<C> Cached<C> {
    /// The two generations. A panic elsewhere cannot leave them inconsistent: each insert
    /// is whole.
    fn seen(
        &self,
    ) -> std::sync::MutexGuard<'_, [std::collections::HashMap<(u64, usize), usize>; 2]> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<C> std::fmt::Debug for Cached<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl<C: TokenCounter> TokenCounter for Cached<C> {
    fn count(&self, text: &str) -> usize {
        // Every text goes through the cache, short ones too: a BPE call has a fixed cost
        // (its pre-tokenizing regex) far above a hash.
        if text.is_empty() {
            return 0;
        }
        let key = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            let hasher: BuildHasherDefault<std::collections::hash_map::DefaultHasher> =
                BuildHasherDefault::default();
            (hasher.hash_one(text), text.len())
        };
        {
            let mut seen = self.seen();
            if let Some(n) = seen[0].get(&key).copied() {
                return n;
            }
            if let Some(n) = seen[1].remove(&key) {
                seen[0].insert(key, n);
                return n;
            }
        }
        let n = self.inner.count(text);
        let mut seen = self.seen();
        if seen[0].len() >= self.capacity {
            seen.swap(0, 1);
            seen[0].clear();
        }
        seen[0].insert(key, n);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_counter_counts_like_the_counter_it_wraps() {
        let bpe = Bpe::new(BpeEncoding::Cl100k);
        // Capacity 2: the generations turn over while the texts repeat.
        let cached = Cached::new(bpe.clone(), 2);
        let texts: Vec<String> = (0..20)
            .map(|i| {
                format!(
                    "message number {i}, long enough to be remembered: {}",
                    "x".repeat(i)
                )
            })
            .collect();
        for _ in 0..3 {
            for t in &texts {
                assert_eq!(cached.count(t), bpe.count(t), "{t}");
            }
        }
        assert_eq!(cached.count("short"), bpe.count("short"));
        let seen = cached.seen.lock().unwrap();
        assert!(seen[0].len() <= 2 && seen[1].len() <= 2);
    }

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
