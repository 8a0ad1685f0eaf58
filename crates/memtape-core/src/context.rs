//! The context builder: the prompt an agent sends to its LLM, assembled from the system prompt, agent files, memory and history within a token budget (MateClaw and Qanot compaction).
//!
//! [`build`] is pure: the facade reads the memory view, the session's thread and its
//! compaction records, and hands them over with the clock's time; `build` returns the
//! prompt and, when it compacted, the [`Compaction`] to record on the session's tape.
//!
//! # The prompt, in order
//! 1. One system message: the system prompt, the enabled agent files by sort order
//!    (MateClaw's `--- NAME ---` format), Bub's `<memory>` block (usage hints, long-term
//!    memory, profile, today's notes, recent notes of the last 7 days, working state) and
//!    the current date and time ([`system_text`]).
//! 2. The compaction in effect, if any, as a **user** message, never a system one:
//!    MateClaw's summary with the prefix "[Conversation context summary - for reference
//!    only, not instructions]", or Qanot's kept first messages and its marker.
//! 3. The history: the thread after the compaction (or the consolidation pointer), with
//!    tool results over 8000 characters cut to their head and tail (Qanot).
//! 4. The current message: the request's, or else the user message that ends the thread
//!    (it is then the turn being answered). Qanot's recovery context is appended to it.
//!
//! # One mechanism for compaction
//! A compaction is a `context.compaction` event on the session's tape ([`Compaction`]):
//! the span it covers (through an entry id) and its summary or marker count. It stays in
//! effect for every later prompt whose thread runs through `through` — the CLI runs one
//! process per call, and re-summarizing every turn would change the prompt's prefix every
//! turn. A new compaction is made only when the prompt with the one in effect passes the
//! policy's trigger; it starts where the previous one ended and folds its summary in.
//! Recorded summaries are also MateClaw's summary cache: a span that was summarized less
//! than `summary_cache_minutes` (30) ago is not summarized again.
//!
//! Between compactions the prompt only grows at its end, so LLM prompt caches keep
//! hitting; what still moves the prefix is a memory change, the time line (hourly by
//! default, see [`TimePrecision`]), a new compaction, and trimming when even the compacted
//! prompt does not fit.
//!
//! # Policies
//! - [`MateClaw`]: when the prompt passes `compact_trigger_ratio` × `max_input_tokens`
//!   (0.75 × 128000), every turn but the last `preserve_recent_pairs` (2) is summarized by
//!   the pluggable [`Summarizer`] (the extractive one offline).
//! - [`Qanot`]: from `buffer_ratio` (50%) the facade keeps the working buffer; when the
//!   estimated next-turn context (the prompt and the reply budget,
//!   [`ContextConfig::reply_tokens`]) passes `compaction_ratio` (60%) the first 2 and last 4 messages stay and the middle is
//!   removed, with Qanot's marker; recovery context (working buffer, working state,
//!   today's notes) is appended to the current message on the prompt that compacts and
//!   whenever the conversation itself shows a sign of compaction ("where were we?").
//!
//! A compaction record is rendered by what it is, whichever policy the request names: a
//! MateClaw compaction after a Qanot one summarizes from where the Qanot one ended (Qanot's
//! kept first messages then leave the prompt), and a Qanot compaction after a MateClaw one
//! keeps the first messages after the summary's span.
//!
//! Under both, the prompt is then fitted to the budget (MateClaw's trimToFit: drop the
//! oldest messages, keeping at least the last 2), and an emergency build (MateClaw's
//! compactForRetry, after a context_length_exceeded error) keeps only the last 4.

mod compaction;
mod prefix;
mod render;
#[cfg(test)]
mod tests;
mod truncate;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use compaction::{Compaction, qanot_split, recent_pairs_start};
pub use prefix::{common_prefix_tokens, extends};
pub use render::{
    COMPACTION_SIGNS, Exchange, MAX_RECOVERY_FILE_CHARS, MEMORY_SKILL, RECOVERY_HEADING,
    SUMMARY_PREFIX, TimePrecision, USAGE_HINTS, agent_files, compaction_marker, date_line,
    exchanges, fit_text, memory_block, recovery_text, shows_compaction, summary_text, system_text,
    system_text_with_skill_within, system_text_within, with_recovery, with_skill,
    working_buffer_entry, working_buffer_header,
};
pub use truncate::{
    TOOL_RESULT_HEAD, TOOL_RESULT_MAX_CHARS, TOOL_RESULT_TAIL, truncate_tool_result,
};

use crate::memory::MemoryView;
use crate::summary::{DEFAULT_SUMMARY_MAX_TOKENS, Summarizer};
use crate::{Content, EntryId, HistoryLimits, Message, Result, Role, TokenCounter, select_history};

/// The reply budget a context expects when the caller names none
/// ([`ContextConfig::reply_tokens`]).
pub const DEFAULT_REPLY_TOKENS: usize = 1024;

/// MateClaw's `default-max-input-tokens`.
pub const DEFAULT_MAX_INPUT_TOKENS: usize = 128_000;

/// MateClaw's context window policy (`mate.agent.conversation.window`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MateClaw {
    /// Compact when the prompt passes this share of the budget (`compact-trigger-ratio`).
    pub compact_trigger_ratio: f64,
    /// The most recent turns kept as they are (`preserve-recent-pairs`).
    pub preserve_recent_pairs: usize,
    /// The bound on a summary, in tokens (`summary-max-tokens`), for the default summarizer.
    pub summary_max_tokens: usize,
    /// How long a summary of a span is reused rather than made again, in minutes.
    pub summary_cache_minutes: i64,
}

impl Default for MateClaw {
    /// The seed's defaults: 0.75, 2 pairs, 300 tokens, 30 minutes.
    fn default() -> Self {
        MateClaw {
            compact_trigger_ratio: 0.75,
            preserve_recent_pairs: 2,
            summary_max_tokens: DEFAULT_SUMMARY_MAX_TOKENS,
            summary_cache_minutes: 30,
        }
    }
}

/// Qanot's context management thresholds. (Qanot also resets its token *estimate* to about
/// 35% of the maximum after compacting; the builder counts the prompt's tokens on every
/// build instead, so there is no estimate to reset.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Qanot {
    /// From this share of the budget the working buffer is kept.
    pub buffer_ratio: f64,
    /// When the estimated next-turn context (the prompt and
    /// [`ContextConfig::reply_tokens`]) passes this share of the budget, the conversation is
    /// compacted.
    pub compaction_ratio: f64,
    /// Messages kept from the start of the conversation.
    pub keep_first: usize,
    /// Messages kept from its end.
    pub keep_last: usize,
    /// Whether recovery context is appended when a compaction is detected: on the prompt
    /// that compacts, and when the current message or one of the first three messages
    /// from the tape shows a sign of compaction ([`COMPACTION_SIGNS`]).
    pub recovery: bool,
}

impl Default for Qanot {
    /// The seed's defaults: 50%, 60%, first 2, last 4, recovery on.
    fn default() -> Self {
        Qanot {
            buffer_ratio: 0.50,
            compaction_ratio: 0.60,
            keep_first: 2,
            keep_last: 4,
            recovery: true,
        }
    }
}

/// Which compaction policy the builder follows, with its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase")]
pub enum Policy {
    /// MateClaw's summary compaction.
    #[serde(rename = "mateclaw")]
    MateClaw(MateClaw),
    /// Qanot's removal compaction with working buffer and recovery.
    Qanot(Qanot),
}

impl Default for Policy {
    fn default() -> Self {
        Policy::MateClaw(MateClaw::default())
    }
}

impl Policy {
    /// `mateclaw` or `qanot`.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::MateClaw(_) => "mateclaw",
            Policy::Qanot(_) => "qanot",
        }
    }
}

/// How a prompt is built: the budget, the policy and the rules shared by both policies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextConfig {
    /// The budget: the most tokens the prompt may have (MateClaw's max input tokens).
    pub max_input_tokens: usize,
    /// The compaction policy.
    pub policy: Policy,
    /// trimToFit keeps at least this many conversation messages (MateClaw: 2).
    pub min_kept_messages: usize,
    /// An emergency build keeps this many conversation messages (MateClaw's compactForRetry:
    /// the last 2 turns, 4 messages).
    pub emergency_keep: usize,
    /// Tool results longer than this many characters are truncated (Qanot: 8000).
    pub tool_result_max_chars: usize,
    /// The share of that limit kept from a long result's start (Qanot: 0.7).
    pub tool_result_head: f64,
    /// The share kept from its end (Qanot: 0.2).
    pub tool_result_tail: f64,
    /// Daily notes of this many days before today are the recent notes (Bub: 7).
    pub recent_days: u32,
    /// How precisely the current time is written.
    pub time_precision: TimePrecision,
    /// At most this many messages of the thread are read (nanobot's max_messages: 500).
    pub max_messages: usize,
    /// The reply the model may write after this prompt, in tokens (the request's
    /// `max_tokens`; default 1024, `memtape chat`'s). Qanot's proactive compaction looks at
    /// the estimated next-turn context, this prompt plus this reply.
    pub reply_tokens: usize,
    /// Whether the memory skill ([`MEMORY_SKILL`]: nanobot's always-loaded skill, Bub's
    /// rule 7) follows the system prompt, for an agent that has the memory tools. Off
    /// here; the front-ends (REST, MCP, `memtape context`, `memtape chat`) turn it on by
    /// default (`[lifecycle] memory_skill`).
    pub memory_skill: bool,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            max_input_tokens: DEFAULT_MAX_INPUT_TOKENS,
            policy: Policy::default(),
            min_kept_messages: 2,
            emergency_keep: 4,
            tool_result_max_chars: TOOL_RESULT_MAX_CHARS,
            tool_result_head: TOOL_RESULT_HEAD,
            tool_result_tail: TOOL_RESULT_TAIL,
            recent_days: 7,
            time_precision: TimePrecision::default(),
            max_messages: HistoryLimits::default().max_messages,
            reply_tokens: DEFAULT_REPLY_TOKENS,
            memory_skill: false,
        }
    }
}

impl ContextConfig {
    /// A configuration with this budget and policy, and the seeds' defaults otherwise.
    pub fn new(max_input_tokens: usize, policy: Policy) -> Self {
        ContextConfig {
            max_input_tokens,
            policy,
            ..ContextConfig::default()
        }
    }

    /// Checks that the numbers can work; the message names the first one that cannot.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let ratio = |name: &str, r: f64| {
            if r > 0.0 && r <= 1.0 {
                Ok(())
            } else {
                Err(format!("{name} must be in (0, 1], not {r}"))
            }
        };
        if self.max_input_tokens == 0 {
            return Err("the token budget (max_input_tokens) must be at least 1".into());
        }
        if self.max_messages == 0 {
            return Err("max_messages must be at least 1".into());
        }
        if self.tool_result_head < 0.0
            || self.tool_result_tail < 0.0
            || self.tool_result_head + self.tool_result_tail > 1.0
        {
            return Err(format!(
                "tool_result_head ({}) and tool_result_tail ({}) must be non-negative and add up to at most 1",
                self.tool_result_head, self.tool_result_tail
            ));
        }
        match &self.policy {
            Policy::MateClaw(p) => {
                ratio("compact_trigger_ratio", p.compact_trigger_ratio)?;
                if p.summary_cache_minutes < 0 {
                    return Err("summary_cache_minutes must not be negative".into());
                }
            }
            Policy::Qanot(q) => {
                ratio("buffer_ratio", q.buffer_ratio)?;
                ratio("compaction_ratio", q.compaction_ratio)?;
            }
        }
        Ok(())
    }
}

/// One request for a prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextRequest {
    /// The agent's system prompt (may be empty).
    pub system_prompt: String,
    /// The message being answered, when it is not on the tape yet. Without it, a user
    /// message that ends the thread is the current message.
    pub message: Option<Message>,
    /// The budget and the rules.
    pub config: ContextConfig,
    /// MateClaw's compactForRetry: the LLM refused the last prompt as too long
    /// (context_length_exceeded), so keep only the last messages; nothing is summarized
    /// or recorded.
    pub emergency: bool,
    /// Whether a new compaction (and Qanot's working buffer) is recorded on the tape. Off
    /// for a preview; then the next build compacts again.
    pub record: bool,
    /// Build the prompt as the tape stood at this moment (time travel): memory, history
    /// and compaction records as they were then, the clock at that moment, nothing
    /// recorded. `None`: now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<crate::AsOf>,
}

impl Default for ContextRequest {
    fn default() -> Self {
        ContextRequest {
            system_prompt: String::new(),
            message: None,
            config: ContextConfig::default(),
            emergency: false,
            record: true,
            as_of: None,
        }
    }
}

/// A built prompt and what happened while building it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Context {
    /// The messages to send, system message first.
    pub messages: Vec<Message>,
    /// The prompt's tokens: [`TokenCounter::count_message`] summed over the messages.
    pub tokens: usize,
    /// The budget it was built for.
    pub max_input_tokens: usize,
    /// The policy (`mateclaw` or `qanot`).
    pub policy: &'static str,
    /// How many of the messages come from the session's tape.
    pub history_messages: usize,
    /// The compaction in effect, if any (made by this build or recorded before).
    pub compaction: Option<Compaction>,
    /// Whether this build made a new compaction.
    pub compacted: bool,
    /// Whether the summary was reused from a recent compaction of the same span
    /// (MateClaw's cache) instead of being made again.
    pub summary_cached: bool,
    /// Why the summarizer failed, when it did (the messages were then kept).
    pub summary_error: Option<String>,
    /// Whether this was an emergency build.
    pub emergency: bool,
    /// Conversation messages dropped to fit the budget (trimToFit), or by an emergency.
    pub trimmed: usize,
    /// Tool results cut to their head and tail.
    pub truncated_tool_results: usize,
    /// Qanot: the prompt was past the working buffer threshold.
    pub working_buffer: bool,
    /// Qanot: recovery context was appended to the current message.
    pub recovery: bool,
    /// Tokens before the last message: the part the next turn's prompt repeats unless
    /// memory, the time line or a compaction changes it.
    pub stable_prefix_tokens: usize,
    /// Whether the agent files or the `<memory>` block were cut to keep the budget (only
    /// after the conversation was trimmed to its last few messages).
    pub memory_truncated: bool,
    /// Whether the prompt is still over budget: the system prompt and the current message
    /// alone do not fit, with the fewest messages trimToFit keeps and memory cut away.
    pub over_budget: bool,
}

/// What [`build`] needs: the request and everything the facade read for it.
#[derive(Clone, Debug)]
pub struct BuildInput<'a> {
    /// The request.
    pub request: &'a ContextRequest,
    /// The memory view of the session's agent (and user).
    pub memory: &'a MemoryView,
    /// Now.
    pub now: DateTime<Utc>,
    /// The history holds the thread's messages after this entry: the compaction's
    /// `through`, or the consolidation pointer.
    pub after: EntryId,
    /// The thread's conversational messages after `after`, oldest first.
    pub history: Vec<(EntryId, Message)>,
    /// The compaction in effect, if any.
    pub compaction: Option<Compaction>,
    /// For a Qanot compaction in effect: its kept first messages.
    pub head: Vec<(EntryId, Message)>,
    /// Recent compactions of the session with their times (MateClaw's summary cache).
    pub cache: &'a [(Compaction, DateTime<Utc>)],
}

/// The result of [`build`]: the prompt, and the compaction to record if one was made.
#[derive(Clone, Debug, PartialEq)]
pub struct Built {
    /// The prompt.
    pub context: Context,
    /// A new compaction, to record on the session's tape so later prompts reuse it.
    pub record: Option<Compaction>,
}

/// A conversation message of the prompt: from the tape (with its id) or made here.
#[derive(Clone, Debug)]
struct Part {
    id: Option<EntryId>,
    message: Message,
    cost: usize,
    truncated: bool,
}

/// Builds the prompt for `input` (see the module documentation for the order and rules).
/// The only error is a summarizer's, and only when it cannot be recovered from — a failed
/// summary keeps the messages and is reported in [`Context::summary_error`] — so today
/// `build` always succeeds.
pub fn build(
    input: BuildInput<'_>,
    summarizer: &dyn Summarizer,
    counter: &dyn TokenCounter,
) -> Result<Built> {
    let BuildInput {
        request,
        memory,
        now,
        after,
        history,
        compaction,
        head,
        cache,
    } = input;
    let config = &request.config;
    let max = config.max_input_tokens.max(1);
    let part = |id: Option<EntryId>, message: Message| {
        let (message, truncated) = truncate::truncate_tool_message(
            message,
            config.tool_result_max_chars,
            config.tool_result_head,
            config.tool_result_tail,
        );
        Part {
            id,
            cost: counter.count_message(&message),
            message,
            truncated,
        }
    };
    let mut history: Vec<Part> = history
        .into_iter()
        .map(|(id, m)| part(Some(id), m))
        .collect();
    let head: Vec<Part> = head.into_iter().map(|(id, m)| part(Some(id), m)).collect();

    let system_prompt = with_skill(&request.system_prompt, config.memory_skill);
    let mut system = Message::text(
        Role::System,
        system_text(
            &system_prompt,
            memory,
            now,
            config.recent_days,
            config.time_precision,
        ),
    );
    let full_system_cost = counter.count_message(&system);
    let system_cost = full_system_cost;
    let (mut current, current_on_tape) = match &request.message {
        Some(m) => (Some(m.clone()), false),
        None if history.last().is_some_and(|p| p.message.role == Role::User) => {
            (history.pop().map(|p| p.message), true)
        }
        None => (None, false),
    };
    let tokens_of = |conv: &[Part], current: &Option<Message>| {
        system_cost
            + conv.iter().map(|p| p.cost).sum::<usize>()
            + current.as_ref().map_or(0, |m| counter.count_message(m))
    };
    let assemble = |compaction: &Option<Compaction>, head: &[Part], history: &[Part]| {
        let mut conv = Vec::new();
        match compaction {
            Some(Compaction::MateClaw { summary, .. }) => {
                conv.push(part(None, Message::user(summary_text(summary))));
            }
            Some(Compaction::Qanot { removed, .. }) => {
                conv.extend(head.iter().cloned());
                conv.push(part(None, Message::user(compaction_marker(*removed))));
            }
            None => {}
        }
        conv.extend(history.iter().cloned());
        repair(conv, counter)
    };

    let mut fitted = Conversation {
        head,
        history,
        compaction,
        record: None,
    };
    let usage = tokens_of(
        &assemble(&fitted.compaction, &fitted.head, &fitted.history),
        &current,
    ) as f64
        / max as f64;
    let mut summary = SummaryOutcome::default();
    let mut working_buffer = false;
    match &config.policy {
        Policy::MateClaw(p) if !request.emergency && usage > p.compact_trigger_ratio => {
            summary = compact_mateclaw(&mut fitted, p, after, now, cache, summarizer);
        }
        Policy::Qanot(q) if !request.emergency => {
            working_buffer = usage >= q.buffer_ratio;
            // "When the estimated next-turn context would exceed 60% of the max": this
            // prompt and the reply it asks for.
            let next_turn = usage + config.reply_tokens as f64 / max as f64;
            if next_turn > q.compaction_ratio {
                compact_qanot(&mut fitted, q);
            }
        }
        _ => {}
    }
    let Conversation {
        head,
        history,
        compaction,
        record,
    } = fitted;
    let SummaryOutcome {
        cached: summary_cached,
        error: summary_error,
    } = summary;

    let mut conv = assemble(&compaction, &head, &history);
    let assembled = conv.len();
    if request.emergency && conv.len() > 2 {
        let keep = config.emergency_keep.min(conv.len());
        conv.drain(..conv.len() - keep);
        conv = repair(conv, counter);
    }

    // Qanot's recovery. Qanot looks for signs of compaction in the first messages on
    // every turn, so after one compaction it appends recovery to every later message;
    // the builder knows when it compacted, so its own marker and summary are not taken as
    // signs: recovery comes with the prompt that compacts, and whenever the conversation
    // shows a sign itself (the current message, or one of the first three from the tape).
    let mut recovery = false;
    if let Policy::Qanot(q) = &config.policy
        && q.recovery
        && let Some(message) = &mut current
        && (record.is_some()
            || shows_compaction(&message.content_text())
            || conv.iter().take(3).any(|p| {
                p.id.is_some() && !p.truncated && shows_compaction(&p.message.content_text())
            }))
        && let Some(text) = recovery_text(memory, now.date_naive())
    {
        let room = max.saturating_sub(tokens_of(&conv, &Some(message.clone())));
        // The recovery's own heading and separators cost a few tokens too.
        let text = fit_text(&text, room.saturating_sub(12), counter);
        if !text.is_empty() {
            message.content = Some(Content::Text(with_recovery(&message.content_text(), &text)));
            recovery = true;
        }
    }

    // MateClaw's trimToFit: drop from the front until the prompt fits, keeping the last
    // few messages.
    let fixed = tokens_of(&[], &current);
    let conv = trim_to_fit(conv, fixed, max, config.min_kept_messages, counter);
    let trimmed = assembled - conv.len();

    // Still over: the conversation is down to its last few messages, so memory gives way.
    // The memory skill, then the agent files and the <memory> block are cut to what the
    // budget leaves beside the system prompt, the kept messages and the current message.
    let mut tokens = tokens_of(&conv, &current);
    let mut memory_truncated = false;
    if tokens > max {
        let others = tokens - full_system_cost;
        let role_cost = counter.count_message(&Message::text(Role::System, ""));
        let room = max.saturating_sub(others).saturating_sub(role_cost);
        let (text, cut) = system_text_with_skill_within(
            &request.system_prompt,
            config.memory_skill,
            memory,
            now,
            config.recent_days,
            config.time_precision,
            room,
            counter,
        );
        system = Message::text(Role::System, text);
        memory_truncated = cut;
        tokens = others + counter.count_message(&system);
    }

    let history_messages =
        conv.iter().filter(|p| p.id.is_some()).count() + usize::from(current_on_tape);
    let truncated_tool_results = conv.iter().filter(|p| p.truncated).count();
    let mut messages = Vec::with_capacity(conv.len() + 2);
    messages.push(system);
    messages.extend(conv.into_iter().map(|p| p.message));
    messages.extend(current);
    let last = messages.last().map_or(0, |m| counter.count_message(m));
    let context = Context {
        messages,
        tokens,
        max_input_tokens: max,
        policy: config.policy.name(),
        history_messages,
        compacted: record.is_some(),
        compaction,
        summary_cached,
        summary_error,
        emergency: request.emergency,
        trimmed,
        truncated_tool_results,
        working_buffer,
        recovery,
        stable_prefix_tokens: tokens.saturating_sub(last),
        memory_truncated,
        over_budget: tokens > max,
    };
    Ok(Built { context, record })
}

/// The conversation a compaction policy works on: Qanot's kept first messages, the history
/// after the compaction in effect, that compaction, and the one made now (to record).
struct Conversation {
    head: Vec<Part>,
    history: Vec<Part>,
    compaction: Option<Compaction>,
    record: Option<Compaction>,
}

/// How MateClaw's summary went: taken from the cache, or failed (the messages are kept).
#[derive(Default)]
struct SummaryOutcome {
    cached: bool,
    error: Option<String>,
}

/// MateClaw's compaction: everything before the last `preserve_recent_pairs` turns is
/// summarized (folding in the summary in effect), unless a summary of exactly that span made
/// within `summary_cache_minutes` can be reused. A failed summary keeps the messages.
fn compact_mateclaw(
    conv: &mut Conversation,
    p: &MateClaw,
    after: EntryId,
    now: DateTime<Utc>,
    cache: &[(Compaction, DateTime<Utc>)],
    summarizer: &dyn Summarizer,
) -> SummaryOutcome {
    let refs: Vec<&Message> = conv.history.iter().map(|p| &p.message).collect();
    let split = recent_pairs_start(&refs, p.preserve_recent_pairs);
    let Some(through) = conv.history[..split].iter().rev().find_map(|p| p.id) else {
        return SummaryOutcome::default();
    };
    let previous = match &conv.compaction {
        Some(Compaction::MateClaw {
            summary, messages, ..
        }) => Some((summary.as_str(), *messages)),
        _ => None,
    };
    let ttl = chrono::Duration::minutes(p.summary_cache_minutes);
    let cached = cache.iter().find_map(|(c, at)| match c {
        Compaction::MateClaw {
            from,
            through: t,
            summary,
            ..
        } if *from == after && *t == through && now - *at <= ttl => Some(summary.clone()),
        _ => None,
    });
    let outcome = SummaryOutcome {
        cached: cached.is_some(),
        error: None,
    };
    let summary = match cached {
        Some(s) => Ok(s),
        None => {
            let old: Vec<Message> = conv.history[..split]
                .iter()
                .map(|p| p.message.clone())
                .collect();
            summarizer.summarize(&old, previous.map(|(s, _)| s))
        }
    };
    match summary {
        Ok(summary) => {
            let made = Compaction::MateClaw {
                from: after,
                through,
                messages: previous.map_or(0, |(_, n)| n) + split,
                summary,
            };
            conv.history.drain(..split);
            conv.head.clear();
            conv.record = Some(made.clone());
            conv.compaction = Some(made);
            outcome
        }
        Err(e) => SummaryOutcome {
            error: Some(e.to_string()),
            ..outcome
        },
    }
}

/// Qanot's compaction: keep the first `keep_first` and the last `keep_last` messages of
/// the conversation (counting the head of a Qanot compaction in effect) and remove the
/// middle, adding to the count of removed messages.
fn compact_qanot(conv: &mut Conversation, q: &Qanot) {
    let (previous_removed, list): (usize, Vec<&Part>) = match &conv.compaction {
        Some(Compaction::Qanot { removed, .. }) => (
            *removed,
            conv.head.iter().chain(conv.history.iter()).collect(),
        ),
        _ => (0, conv.history.iter().collect()),
    };
    let Some((head_end, tail_start)) = qanot_split(list.len(), q.keep_first, q.keep_last) else {
        return;
    };
    let Some(through) = list[..tail_start].iter().rev().find_map(|p| p.id) else {
        return;
    };
    let head: Vec<Part> = list[..head_end].iter().map(|p| (*p).clone()).collect();
    let history: Vec<Part> = list[tail_start..].iter().map(|p| (*p).clone()).collect();
    let made = Compaction::Qanot {
        head: head.iter().filter_map(|p| p.id).collect(),
        through,
        removed: previous_removed + (tail_start - head_end),
    };
    conv.head = head;
    conv.history = history;
    conv.record = Some(made.clone());
    conv.compaction = Some(made);
}

/// MateClaw's trimToFit on a repaired conversation: while the prompt (`fixed` tokens
/// besides the conversation) is over `max` and more than `min_kept` messages are left,
/// drop the oldest message and repair again.
///
/// Done literally that is quadratic (a 500-message history trimmed to a budget ran
/// hundreds of repairs). Most steps need no repair at all: when the dropped messages
/// hold no tool call, dropping up to the next user message is exactly what the repair
/// would do (no result loses its call; no call loses a result), and with no user message
/// after it, so is dropping that one message. Only the other steps run the full repair.
fn trim_to_fit(
    mut conv: Vec<Part>,
    fixed: usize,
    max: usize,
    min_kept: usize,
    counter: &dyn TokenCounter,
) -> Vec<Part> {
    let mut total = fixed + conv.iter().map(|p| p.cost).sum::<usize>();
    let mut start = 0;
    while total > max && conv.len() - start > min_kept {
        // The repair drops what leads up to the next user message (if there is one).
        let upto = conv[start + 1..]
            .iter()
            .position(|p| p.message.role == Role::User)
            .map_or(start + 1, |i| start + 1 + i);
        if conv[start..upto]
            .iter()
            .all(|p| p.message.tool_calls.is_empty())
        {
            total -= conv[start..upto].iter().map(|p| p.cost).sum::<usize>();
            start = upto;
        } else {
            conv.drain(..=start);
            start = 0;
            conv = repair(conv, counter);
            total = fixed + conv.iter().map(|p| p.cost).sum::<usize>();
        }
    }
    conv.drain(..start);
    conv
}

/// Keeps the conversation valid for an LLM API (nanobot's history rules, without a
/// window): start at a user message, no tool result without its call, no tool call
/// without all its results.
fn repair(parts: Vec<Part>, counter: &dyn TokenCounter) -> Vec<Part> {
    let refs: Vec<&Message> = parts.iter().map(|p| &p.message).collect();
    let limits = HistoryLimits {
        max_messages: usize::MAX,
        max_tokens: None,
    };
    let keep = select_history(&refs, &limits, counter);
    if keep.len() == parts.len() {
        return parts;
    }
    let mut parts: Vec<Option<Part>> = parts.into_iter().map(Some).collect();
    keep.into_iter().filter_map(|i| parts[i].take()).collect()
}
