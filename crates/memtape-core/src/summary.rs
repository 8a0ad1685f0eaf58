//! Summaries of conversation spans: the pluggable summarizer behind compaction and
//! archiving, and a rule-based (extractive) one so everything works offline.

use std::collections::HashSet;

use crate::{Bpe, BpeEncoding, Message, Result, Role, TokenCounter};

/// Turns a span of conversation into a short summary. Compaction (MateClaw, Qanot) and
/// nanobot's archive on /new call it; an LLM-backed summarizer plugs in here, and without
/// one the extractive summarizer keeps everything working offline.
pub trait Summarizer: Send + Sync {
    /// Summarizes `messages` (oldest first). `previous` is the summary the span follows,
    /// if any, to be folded into the new one. An error means no summary was made; callers
    /// then keep what they would have replaced.
    fn summarize(&self, messages: &[Message], previous: Option<&str>) -> Result<String>;
}

/// MateClaw's `summary-max-tokens` for a context summary.
pub const DEFAULT_SUMMARY_MAX_TOKENS: usize = 300;

/// The longest sentence kept whole, in words; longer ones are cut and end with `…`.
const MAX_SENTENCE_WORDS: usize = 60;

/// A deterministic, offline summarizer: it picks the most salient sentences of the span and
/// keeps them in conversation order, one `- Role: sentence` line each, within `max_tokens`.
///
/// Salience is rule-based: sentences with numbers, dates or names, decisions and
/// commitments ("let's", "we decided", "go with", "deadline", …) and statements about the
/// user ("my name is", "I prefer", …) score high; greetings, fillers and bare questions
/// score low. As in MateClaw's transcript, only user and assistant text is read: tool
/// results and system messages are skipped. The previous summary is folded in: the span's
/// best sentences get up to half the bound, then its lines compete with the remaining
/// sentences (with a small bonus, so established facts tend to stay); they keep their
/// place before the new ones. The same input always gives the same summary.
///
/// ```
/// use memtape_core::Message;
/// use memtape_core::summary::{ExtractiveSummarizer, Summarizer};
///
/// let span = [
///     Message::user("Hi there!"),
///     Message::user("My name is Ada and the deadline is 2026-03-01."),
///     Message::assistant("Great, we decided to use PostgreSQL 16."),
/// ];
/// let summary = ExtractiveSummarizer::default().summarize(&span, None)?;
/// assert!(summary.contains("- User: My name is Ada and the deadline is 2026-03-01."));
/// assert!(summary.contains("PostgreSQL 16"));
/// assert!(!summary.contains("Hi there"));
/// # Ok::<(), memtape_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ExtractiveSummarizer {
    max_tokens: usize,
    counter: Bpe,
}

impl Default for ExtractiveSummarizer {
    /// MateClaw's default bound: 300 tokens.
    fn default() -> Self {
        Self::new(DEFAULT_SUMMARY_MAX_TOKENS)
    }
}

impl ExtractiveSummarizer {
    /// A summarizer whose summaries stay within `max_tokens` (cl100k) tokens.
    pub fn new(max_tokens: usize) -> Self {
        ExtractiveSummarizer {
            max_tokens: max_tokens.max(1),
            counter: Bpe::new(BpeEncoding::Cl100k),
        }
    }

    /// The bound on a summary's length, in tokens.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }
}

/// One sentence that may go into the summary.
struct Candidate {
    /// The line as it will be written (without the leading `- `).
    line: String,
    /// Conversation order: carried lines first, then the span's sentences.
    order: usize,
    score: f64,
    /// Whether it comes from the previous summary.
    carried: bool,
}

impl Summarizer for ExtractiveSummarizer {
    fn summarize(&self, messages: &[Message], previous: Option<&str>) -> Result<String> {
        let mut seen = HashSet::new();
        let mut candidates = Vec::new();
        let mut push =
            |line: String, score: f64, carried: bool, candidates: &mut Vec<Candidate>| {
                let key: String = line
                    .chars()
                    .filter(|c| c.is_alphanumeric())
                    .flat_map(char::to_lowercase)
                    .collect();
                if !key.is_empty() && seen.insert(key) {
                    let order = candidates.len();
                    candidates.push(Candidate {
                        line,
                        order,
                        score,
                        carried,
                    });
                }
            };
        for line in previous.unwrap_or("").lines() {
            let line = line.trim().trim_start_matches("- ").trim();
            if !line.is_empty() {
                // A carried line is judged on its sentence, not on its `Role:` label.
                let body = line.split_once(": ").map_or(line, |(_, b)| b);
                push(line.to_string(), score(body) + 0.5, true, &mut candidates);
            }
        }
        for message in messages {
            let label = match message.role {
                Role::User => "User",
                Role::Assistant => "Assistant",
                Role::System | Role::Tool => continue,
            };
            for sentence in sentences(&message.content_text()) {
                let line = format!("{label}: {}", cap_words(&sentence));
                push(line, score(&sentence), false, &mut candidates);
            }
        }

        // The best sentences that fit, then back into conversation order. When there is
        // a previous summary, the span's own sentences first get up to half the bound, so
        // new facts always make it in; the rest goes to the best of everything left.
        let mut ranked: Vec<&Candidate> = candidates.iter().collect();
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.order.cmp(&b.order)));
        let any_carried = candidates.iter().any(|c| c.carried);
        let mut chosen: Vec<(usize, String)> = Vec::new();
        let mut taken = vec![false; candidates.len()];
        let mut used = 0;
        let passes = [
            (
                true,
                if any_carried {
                    self.max_tokens / 2
                } else {
                    self.max_tokens
                },
            ),
            (false, self.max_tokens),
        ];
        for (new_only, bound) in passes {
            for c in &ranked {
                if c.score <= -1.0 {
                    // Greetings, fillers and fragments: never worth a line.
                    break;
                }
                if taken[c.order] || (new_only && c.carried) {
                    continue;
                }
                let line = format!("- {}", c.line);
                let cost = self.counter.count(&line) + 1;
                if used + cost <= bound {
                    used += cost;
                    taken[c.order] = true;
                    chosen.push((c.order, line));
                }
            }
        }
        if chosen.is_empty()
            && let Some(best) = ranked.first().filter(|c| c.score > -1.0)
        {
            // Even the best sentence is too long: keep as much of it as fits.
            chosen.push((best.order, self.cut_to_fit(&format!("- {}", best.line))));
        }
        chosen.sort_by_key(|(order, _)| *order);
        Ok(chosen
            .into_iter()
            .map(|(_, line)| line)
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

impl ExtractiveSummarizer {
    /// The longest word-prefix of `line` that, with `…`, fits the bound.
    fn cut_to_fit(&self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut n = words.len();
        while n > 1 {
            let cut = format!("{}…", words[..n].join(" "));
            if self.counter.count(&cut) < self.max_tokens {
                return cut;
            }
            n = n * 3 / 4;
        }
        words.first().map_or_else(String::new, |w| format!("{w}…"))
    }
}

/// Splits text into sentences: at `.`, `!` or `?` followed by whitespace, and at line
/// breaks. Markdown bullets and headings are stripped; empty pieces are dropped.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line
            .trim()
            .trim_start_matches(['#', '-', '*', '>'])
            .trim_start();
        let mut start = 0;
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        for (k, &(i, c)) in chars.iter().enumerate() {
            let ends = matches!(c, '.' | '!' | '?')
                && chars.get(k + 1).is_none_or(|(_, n)| n.is_whitespace());
            if ends {
                let end = i + c.len_utf8();
                out.push(line[start..end].trim().to_string());
                start = end;
            }
        }
        out.push(line[start..].trim().to_string());
    }
    out.retain(|s| s.chars().any(char::is_alphanumeric));
    out
}

/// The sentence cut to [`MAX_SENTENCE_WORDS`] words.
fn cap_words(sentence: &str) -> String {
    let words: Vec<&str> = sentence.split_whitespace().collect();
    if words.len() <= MAX_SENTENCE_WORDS {
        words.join(" ")
    } else {
        format!("{}…", words[..MAX_SENTENCE_WORDS].join(" "))
    }
}

/// Cues of decisions, commitments and durable facts.
const DECISION_CUES: [&str; 24] = [
    "decide",
    "decision",
    "agreed",
    "agree to",
    "let's",
    "let us",
    "we will",
    "we'll",
    "i will",
    "i'll",
    "go with",
    "going with",
    "chose",
    "choose",
    "plan",
    "must",
    "need to",
    "deadline",
    "remember",
    "important",
    "always",
    "never",
    "todo",
    "next step",
];

/// Cues of facts about the user (Qanot's WAL categories, in brief).
const USER_CUES: [&str; 9] = [
    "my name",
    "call me",
    "i am ",
    "i'm ",
    "i like",
    "i prefer",
    "i don't like",
    "i work",
    "i live",
];

/// Whole sentences that carry nothing.
const FILLERS: [&str; 14] = [
    "hi",
    "hello",
    "hey",
    "thanks",
    "thank you",
    "ok",
    "okay",
    "sure",
    "great",
    "cool",
    "nice",
    "got it",
    "sounds good",
    "yes",
];

/// How salient a sentence is (higher is better).
fn score(sentence: &str) -> f64 {
    let lower = sentence.to_lowercase();
    let bare: String = lower
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '\'')
        .collect();
    let bare = bare.trim();
    if FILLERS.contains(&bare) || bare.split_whitespace().all(|w| FILLERS.contains(&w)) {
        return -2.0;
    }
    let words: Vec<&str> = sentence.split_whitespace().collect();
    let mut s = 0.0;
    if sentence.chars().any(|c| c.is_ascii_digit()) {
        s += 2.0;
    }
    // Capitalised words after the first: names, places, products.
    let names = words
        .iter()
        .skip(1)
        .filter(|w| {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric());
            w.len() > 1
                && w.chars().next().is_some_and(char::is_uppercase)
                && !matches!(w, "I" | "I'm" | "I'll" | "I've" | "I'd")
        })
        .count();
    s += names.min(3) as f64;
    if DECISION_CUES.iter().any(|c| lower.contains(c)) {
        s += 2.0;
    }
    if USER_CUES.iter().any(|c| lower.contains(c)) {
        s += 1.5;
    }
    if sentence.trim_end().ends_with('?') {
        s -= 0.5;
    }
    match words.len() {
        0..=3 => s -= 1.5,
        4..=40 => s += 0.5,
        _ => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span() -> Vec<Message> {
        vec![
            Message::user("Hello!"),
            Message::user("My name is Sardor and I work at Acme in Tashkent."),
            Message::assistant("Nice to meet you, Sardor. How can I help?"),
            Message::user("We need to ship the billing service by 2026-06-15."),
            Message::assistant("Then let's go with PostgreSQL 16 and a nightly backup."),
            Message::tool_result("c1", "SECRET TOOL OUTPUT 12345 Acme Corp"),
            Message::assistant("Okay."),
        ]
    }

    /// The summary keeps names, numbers and decisions, and drops greetings and fillers.
    #[test]
    fn extractive_summary_keeps_names_numbers_and_decisions() {
        let s = ExtractiveSummarizer::default()
            .summarize(&span(), None)
            .unwrap();
        assert!(
            s.contains("- User: My name is Sardor and I work at Acme in Tashkent."),
            "{s}"
        );
        assert!(s.contains("2026-06-15"), "{s}");
        assert!(s.contains("PostgreSQL 16"), "{s}");
        assert!(!s.contains("Hello"), "{s}");
        assert!(!s.contains("Okay"), "{s}");
    }

    /// MateClaw's transcript: only user and assistant messages are read; tool results and
    /// system messages are skipped.
    #[test]
    fn mateclaw_summary_skips_tool_and_system_messages() {
        let mut messages = span();
        messages.push(Message::text(
            Role::System,
            "System rule 42 must be obeyed.",
        ));
        let s = ExtractiveSummarizer::default()
            .summarize(&messages, None)
            .unwrap();
        assert!(!s.contains("SECRET TOOL OUTPUT"), "{s}");
        assert!(!s.contains("System rule"), "{s}");
    }

    /// MateClaw's summary-max-tokens: a summary never exceeds its bound.
    #[test]
    fn mateclaw_summary_stays_within_summary_max_tokens() {
        let long: Vec<Message> = (0..200)
            .map(|i| Message::user(format!("Fact {i}: the server rack {i} is in room B{i}.")))
            .collect();
        let bpe = Bpe::new(BpeEncoding::Cl100k);
        for max in [5, 40, 300] {
            let s = ExtractiveSummarizer::new(max)
                .summarize(&long, None)
                .unwrap();
            assert!(!s.is_empty());
            assert!(bpe.count(&s) <= max, "{max}: {} tokens: {s}", bpe.count(&s));
        }
    }

    /// The previous summary is folded in: its facts stay, before the new ones.
    #[test]
    fn extractive_summary_folds_in_the_previous_summary() {
        let first = ExtractiveSummarizer::default()
            .summarize(&span(), None)
            .unwrap();
        let next = vec![Message::user(
            "Also remember that the staging database is at 10.0.0.5.",
        )];
        let s = ExtractiveSummarizer::default()
            .summarize(&next, Some(&first))
            .unwrap();
        let sardor = s.find("Sardor").unwrap();
        let staging = s.find("10.0.0.5").unwrap();
        assert!(sardor < staging, "{s}");
        // Folding again changes nothing that was already there.
        let again = ExtractiveSummarizer::default()
            .summarize(&[], Some(&s))
            .unwrap();
        assert_eq!(again, s);
    }

    /// A full previous summary does not crowd out the new span: its best sentences get
    /// half the bound.
    #[test]
    fn extractive_summary_makes_room_for_new_facts() {
        let old: Vec<Message> = (0..40)
            .map(|i| Message::user(format!("We decided that server {i} runs in room B{i}.")))
            .collect();
        let summarizer = ExtractiveSummarizer::new(120);
        let first = summarizer.summarize(&old, None).unwrap();
        let new = [Message::user("Let's move the deadline to 2026-09-01.")];
        let s = summarizer.summarize(&new, Some(&first)).unwrap();
        assert!(
            s.ends_with("- User: Let's move the deadline to 2026-09-01."),
            "{s}"
        );
        assert!(s.starts_with("- User: We decided that server 0"), "{s}");
    }

    #[test]
    fn extractive_summary_is_deterministic_and_empty_for_nothing() {
        let a = ExtractiveSummarizer::default()
            .summarize(&span(), None)
            .unwrap();
        let b = ExtractiveSummarizer::default()
            .summarize(&span(), None)
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(
            ExtractiveSummarizer::default()
                .summarize(&[], None)
                .unwrap(),
            ""
        );
    }

    #[test]
    fn sentences_split_at_punctuation_and_lines() {
        assert_eq!(
            sentences("# Plan\n- First step. Second step! v1.2 is out?\n\n"),
            ["Plan", "First step.", "Second step!", "v1.2 is out?"]
        );
    }
}
