//! Summaries of conversation spans: the pluggable summarizer behind compaction and
//! archiving, and a rule-based (extractive) one so everything works offline.

use crate::{Message, Result};

/// Turns a span of conversation into a short summary. Compaction (MateClaw, Qanot) and
/// nanobot's archive on /new call it; an LLM-backed summarizer plugs in here, and without
/// one the extractive summarizer keeps everything working offline.
pub trait Summarizer: Send + Sync {
    /// Summarizes `messages` (oldest first). `previous` is the summary the span follows,
    /// if any, to be folded into the new one. An error means no summary was made; callers
    /// then keep what they would have replaced.
    fn summarize(&self, messages: &[Message], previous: Option<&str>) -> Result<String>;
}
