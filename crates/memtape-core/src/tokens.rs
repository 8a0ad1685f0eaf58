//! Token counting with a real BPE (cl100k / o200k, via tiktoken-rs), behind a trait so
//! history and context code can be tested with any counter, and a cache in front of it
//! ([`Cached`]) so a message counted once is not counted again, and a long text that
//! changed in a few lines (a memory file a capture just grew) costs only those lines.

use crate::Message;

/// Counts tokens the way a model would see them.
pub trait TokenCounter: Send + Sync {
    /// Tokens in a piece of text.
    fn count(&self, text: &str) -> usize;

    /// Whether the count of a text is the sum of the counts of its pieces when it is cut
    /// only before lines that start with neither whitespace nor `/` (see
    /// [`line_pieces`]). True of cl100k and o200k, whose pre-tokenizer never joins such
    /// a line's first character to the line break before it; false unless a counter says
    /// so, since [`Cached`] relies on it to count a long text piece by piece.
    fn splits_at_lines(&self) -> bool {
        false
    }

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

    // cl100k's and o200k's pre-tokenizers split text into words, numbers, punctuation runs
    // and whitespace runs before any merge; a pre-token holds a line break only at its end
    // or inside a run of whitespace, except o200k's punctuation runs, which take a `/`
    // after the break ("...\n/"). So a line that starts with neither whitespace nor `/`
    // always starts a pre-token, and merges never cross it.
    fn splits_at_lines(&self) -> bool {
        true
    }
}

/// Texts at least this long are counted piece by piece by [`Cached`].
const PIECEWISE_FROM: usize = 4 * 1024;

/// One line in this many (chosen by a hash of the line) starts a new piece.
const PIECE_LINES: u64 = 8;

/// `text` cut into pieces before some of the lines that start with neither whitespace nor
/// `/`: a line starts a piece when a hash of the line is a multiple of [`PIECE_LINES`].
/// The choice depends on the line alone, never on where it is, so a text that gained or
/// lost lines somewhere (a working state that grows at the end and rolls off at the top)
/// is cut as before everywhere else, and its unchanged pieces are found in the cache.
/// The pieces joined are `text`.
pub fn line_pieces(text: &str) -> Vec<&str> {
    use std::hash::BuildHasher;
    let hasher =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while let Some(nl) = text[at..].find('\n') {
        let line = at + nl + 1;
        at = line;
        let Some(first) = text[line..].chars().next() else {
            break;
        };
        if first.is_whitespace() || first == '/' {
            continue;
        }
        let end = text[line..].find('\n').map_or(text.len(), |n| line + n);
        if hasher.hash_one(&text[line..end]) % PIECE_LINES == 0 {
            pieces.push(&text[start..line]);
            start = line;
        }
    }
    pieces.push(&text[start..]);
    pieces
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

impl<C: TokenCounter> Cached<C> {
    /// The cache's key of a text: a 64-bit hash and the length.
    fn key(text: &str) -> (u64, usize) {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hasher: BuildHasherDefault<std::collections::hash_map::DefaultHasher> =
            BuildHasherDefault::default();
        (hasher.hash_one(text), text.len())
    }

    /// The counts of `texts`, from the cache where it has them (one lock for all), from
    /// the counter wrapped for the others, which are then remembered.
    fn count_all(&self, texts: &[&str]) -> usize {
        let keys: Vec<_> = texts.iter().map(|t| Self::key(t)).collect();
        let mut total = 0;
        let mut missing = Vec::new();
        {
            let mut seen = self.seen();
            for (i, key) in keys.iter().enumerate() {
                if let Some(n) = seen[0].get(key).copied() {
                    total += n;
                } else if let Some(n) = seen[1].remove(key) {
                    seen[0].insert(*key, n);
                    total += n;
                } else {
                    missing.push(i);
                }
            }
        }
        if missing.is_empty() {
            return total;
        }
        let counted: Vec<_> = missing
            .iter()
            .map(|&i| (keys[i], self.inner.count(texts[i])))
            .collect();
        let mut seen = self.seen();
        for (key, n) in counted {
            total += n;
            if seen[0].len() >= self.capacity {
                seen.swap(0, 1);
                seen[0].clear();
            }
            seen[0].insert(key, n);
        }
        total
    }
}

impl<C: TokenCounter> TokenCounter for Cached<C> {
    fn count(&self, text: &str) -> usize {
        // Every text goes through the cache, short ones too: a BPE call has a fixed cost
        // (its pre-tokenizing regex) far above a hash.
        if text.is_empty() {
            return 0;
        }
        // A long text (a system message carrying the memory files) changes by a few lines
        // from one build to the next: counted piece by piece, only the changed pieces
        // reach the counter.
        if text.len() >= PIECEWISE_FROM && self.inner.splits_at_lines() {
            return self.count_all(&line_pieces(text));
        }
        self.count_all(&[text])
    }

    fn splits_at_lines(&self) -> bool {
        self.inner.splits_at_lines()
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

    /// Texts of many lines whose starts try every way a pre-token could cross a line
    /// break: whitespace, `/`, punctuation, digits, contractions, other scripts, CRLF.
    fn tricky_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let fragment = prop::sample::select(vec![
            "\n",
            "\n\n",
            "\r\n",
            " ",
            "  ",
            "\t",
            "/",
            "//",
            ".",
            "...",
            "!\n",
            "?/",
            "'s",
            "'S",
            "'ll",
            "123",
            "4567",
            "word",
            "Word",
            "WORD",
            "é",
            "e\u{301}",
            "日本",
            "Привет",
            "- [2025-01-15T10:30:00+00:00] **preference**: I prefer dark mode",
            "**",
            "#",
            "```",
            "\u{200b}",
            "\u{a0}",
            "🙂",
            "<|endoftext|>",
            "-",
            "_",
            "x/y",
            "\\",
        ]);
        prop::collection::vec(fragment, 0..1_500).prop_map(|parts| parts.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Counting a long text piece by piece gives exactly the count of the whole, in
        /// both vocabularies, and the pieces joined are the text.
        #[test]
        fn counting_piece_by_piece_is_exact(text in tricky_text()) {
            proptest::prop_assert_eq!(line_pieces(&text).concat(), text.clone());
            for encoding in [BpeEncoding::Cl100k, BpeEncoding::O200k] {
                let bpe = Bpe::new(encoding);
                let cached = Cached::new(bpe.clone(), 1_000);
                let whole = bpe.count(&text);
                let pieces: usize = line_pieces(&text).iter().map(|p| bpe.count(p)).sum();
                proptest::prop_assert_eq!(pieces, whole, "{:?}", encoding);
                proptest::prop_assert_eq!(cached.count(&text), whole, "{:?}", encoding);
                // Again, now from the cache.
                proptest::prop_assert_eq!(cached.count(&text), whole, "{:?}", encoding);
            }
        }
    }

    /// A working state that grows at the end and rolls off at the top keeps its other
    /// pieces: counting it again after one change counts only a few new pieces.
    #[test]
    fn a_long_text_changed_in_one_line_is_counted_again_only_around_it() {
        struct Counting(Bpe, std::sync::atomic::AtomicUsize);
        impl TokenCounter for Counting {
            fn count(&self, text: &str) -> usize {
                self.1
                    .fetch_add(text.len(), std::sync::atomic::Ordering::Relaxed);
                self.0.count(text)
            }
            fn splits_at_lines(&self) -> bool {
                true
            }
        }
        let line = |i: usize| {
            format!(
                "- [2025-01-15T10:{:02}:{:02}+00:00] **specific_value**: my order {i} ships Friday\n",
                i / 60 % 60,
                i % 60
            )
        };
        let state: String = (0..3_000).map(line).collect();
        let counter = Cached::new(
            Counting(Bpe::new(BpeEncoding::Cl100k), Default::default()),
            10_000,
        );
        let bpe = Bpe::new(BpeEncoding::Cl100k);
        assert_eq!(counter.count(&state), bpe.count(&state));
        let first = counter
            .inner
            .1
            .swap(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(first, state.len());
        // One capture later: a line rolled off the top and one was added at the end.
        let next = format!("{}{}", &state[line(0).len()..], line(3_000));
        assert_eq!(counter.count(&next), bpe.count(&next));
        let again = counter
            .inner
            .1
            .swap(0, std::sync::atomic::Ordering::Relaxed);
        assert!(
            again * 20 < next.len(),
            "{again} of {} bytes counted again",
            next.len()
        );
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
