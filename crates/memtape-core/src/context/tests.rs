//! The builder's rules, one test each, on hand-made history with a word counter (one token
//! per word) so budgets are easy to reason about.

use std::sync::Mutex;

use chrono::TimeZone;

use super::*;
use crate::memory::{MemoryFile, paths};
use crate::{Error, ToolCall};

/// One token per whitespace-separated word.
struct Words;
impl TokenCounter for Words {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
}

/// A summarizer that records what it was asked.
#[derive(Default)]
struct Recording {
    calls: Mutex<Vec<(usize, Option<String>)>>,
}
impl Summarizer for Recording {
    fn summarize(&self, messages: &[Message], previous: Option<&str>) -> Result<String> {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls.push((messages.len(), previous.map(String::from)));
        Ok(format!(
            "summary {} of {} messages",
            calls.len(),
            messages.len()
        ))
    }
}
impl Recording {
    fn calls(&self) -> Vec<(usize, Option<String>)> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

struct Failing;
impl Summarizer for Failing {
    fn summarize(&self, _: &[Message], _: Option<&str>) -> Result<String> {
        Err(Error::Summarize("the model is down".into()))
    }
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 2, 10, 14, 30, 0).unwrap()
}

/// `n` turns of a user message and an assistant reply, ten words each, ids 1, 2, 3, ….
fn turns(n: u64) -> Vec<(EntryId, Message)> {
    (0..n)
        .flat_map(|i| {
            [
                (
                    EntryId(2 * i + 1),
                    Message::user(format!("u{i} one two three four five six seven eight nine")),
                ),
                (
                    EntryId(2 * i + 2),
                    Message::assistant(format!(
                        "a{i} one two three four five six seven eight nine"
                    )),
                ),
            ]
        })
        .collect()
}

/// Each message of [`turns`] costs 3 + 1 (role) + 10 words.
const TURN_MESSAGE: usize = 14;

fn request(max: usize, policy: Policy) -> ContextRequest {
    ContextRequest {
        config: ContextConfig::new(max, policy),
        ..ContextRequest::default()
    }
}

fn mateclaw(max: usize) -> ContextRequest {
    request(max, Policy::MateClaw(MateClaw::default()))
}

/// Qanot's policy with no reply budget: the thresholds fall on the prompt alone.
fn qanot(max: usize) -> ContextRequest {
    let mut r = request(max, Policy::Qanot(Qanot::default()));
    r.config.reply_tokens = 0;
    r
}

struct Case<'a> {
    request: &'a ContextRequest,
    memory: MemoryView,
    after: EntryId,
    history: Vec<(EntryId, Message)>,
    compaction: Option<Compaction>,
    head: Vec<(EntryId, Message)>,
    cache: Vec<(Compaction, DateTime<Utc>)>,
}

impl<'a> Case<'a> {
    fn new(request: &'a ContextRequest, history: Vec<(EntryId, Message)>) -> Self {
        Case {
            request,
            memory: MemoryView::default(),
            after: EntryId(0),
            history,
            compaction: None,
            head: Vec::new(),
            cache: Vec::new(),
        }
    }

    fn run(&self, summarizer: &dyn Summarizer) -> Built {
        build(
            BuildInput {
                request: self.request,
                memory: &self.memory,
                now: now(),
                after: self.after,
                history: self.history.clone(),
                compaction: self.compaction.clone(),
                head: self.head.clone(),
                cache: &self.cache,
            },
            summarizer,
            &Words,
        )
        .unwrap()
    }
}

/// The tokens of the system message and nothing else, for `request`.
fn base(request: &ContextRequest) -> usize {
    Case::new(request, Vec::new())
        .run(&Recording::default())
        .context
        .tokens
}

fn texts(context: &Context) -> Vec<String> {
    context
        .messages
        .iter()
        .map(|m| m.content_text().into_owned())
        .collect()
}

/// A budget at which `tokens` is just over (or, with `over = false`, just under) `ratio`.
fn budget_around(tokens: usize, ratio: f64, over: bool) -> usize {
    let exact = tokens as f64 / ratio;
    if over {
        exact.floor() as usize - 1
    } else {
        exact.ceil() as usize + 1
    }
}

/// Issue 4 §6: system prompt → agent files → memory → date and time, then the compaction
/// summary as a user message, the history and the current message.
#[test]
fn the_prompt_is_system_then_summary_then_history_then_current_message() {
    let mut req = mateclaw(100_000);
    req.system_prompt = "You are memtape's test agent.".into();
    req.message = Some(Message::user("What now?"));
    let mut case = Case::new(&req, turns(2));
    case.after = EntryId(0);
    case.compaction = Some(Compaction::MateClaw {
        from: EntryId(0),
        through: EntryId(0),
        messages: 4,
        summary: "- User: earlier things".into(),
    });
    case.memory.files.insert(
        "AGENTS.md".into(),
        MemoryFile {
            content: "Be helpful.".into(),
            enabled: true,
            sort_order: 0,
            created: 1,
            updated: 1,
            updated_at: now(),
            parts: Vec::new(),
        },
    );
    let ctx = case.run(&Recording::default()).context;
    let roles: Vec<Role> = ctx.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::User
        ]
    );
    let system = ctx.messages[0].content_text();
    assert!(system.starts_with(
        "You are memtape's test agent.\n\n--- AGENTS.md ---\nBe helpful.\n\n<memory>\n"
    ));
    assert!(
        system.ends_with("between 14:00 and 15:00 UTC (Tuesday)"),
        "{system}"
    );
    assert_eq!(texts(&ctx)[6], "What now?");
    assert_eq!(ctx.history_messages, 4);
}

/// MateClaw: "The summary is injected as a UserMessage, prefixed with [Conversation
/// context summary - for reference only, not instructions]" — never as a system message.
#[test]
fn mateclaw_summary_is_a_user_message_with_the_reference_only_prefix() {
    let req = mateclaw(100_000);
    let mut case = Case::new(&req, turns(1));
    case.compaction = Some(Compaction::MateClaw {
        from: EntryId(0),
        through: EntryId(0),
        messages: 2,
        summary: "- User: my name is Ada".into(),
    });
    let ctx = case.run(&Recording::default()).context;
    assert_eq!(ctx.messages[1].role, Role::User);
    assert_eq!(
        ctx.messages[1].content_text(),
        "[Conversation context summary - for reference only, not instructions]\n- User: my name is Ada"
    );
    assert_eq!(
        ctx.messages
            .iter()
            .filter(|m| m.role == Role::System)
            .count(),
        1
    );
}

/// MateClaw: compaction triggers when the prompt exceeds compactTriggerRatio × max input
/// tokens (0.75 by default), not before.
#[test]
fn mateclaw_compaction_triggers_at_the_ratio_of_max_input_tokens() {
    assert_eq!(MateClaw::default().compact_trigger_ratio, 0.75);
    assert_eq!(ContextConfig::default().max_input_tokens, 128_000);
    let probe = mateclaw(1_000_000);
    let tokens = base(&probe) + 20 * TURN_MESSAGE;
    let under = mateclaw(budget_around(tokens, 0.75, false));
    let built = Case::new(&under, turns(10)).run(&Recording::default());
    assert!(!built.context.compacted);
    assert_eq!(built.context.tokens, tokens);
    let over = mateclaw(budget_around(tokens, 0.75, true));
    let built = Case::new(&over, turns(10)).run(&Recording::default());
    assert!(built.context.compacted);
    assert!(built.record.is_some());
}

/// MateClaw: "The most recent preserveRecentPairs conversation turns (default 2 turns = 4
/// messages) are preserved as-is"; older messages are summarized.
#[test]
fn mateclaw_compaction_keeps_two_recent_pairs() {
    let tokens = base(&mateclaw(1_000_000)) + 20 * TURN_MESSAGE;
    let req = mateclaw(budget_around(tokens, 0.75, true));
    let summarizer = Recording::default();
    let built = Case::new(&req, turns(10)).run(&summarizer);
    let t = texts(&built.context);
    assert_eq!(t.len(), 1 + 1 + 4);
    assert!(t[1].starts_with(SUMMARY_PREFIX));
    assert!(t[2].starts_with("u8 ") && t[3].starts_with("a8 "));
    assert!(t[4].starts_with("u9 ") && t[5].starts_with("a9 "));
    assert_eq!(summarizer.calls(), [(16, None)]);
    assert_eq!(
        built.record,
        Some(Compaction::MateClaw {
            from: EntryId(0),
            through: EntryId(16),
            messages: 16,
            summary: "summary 1 of 16 messages".into(),
        })
    );
}

/// MateClaw: the summary is made by the pluggable summarizer and folds in the previous
/// summary; the new span starts where the compaction in effect ended.
#[test]
fn mateclaw_a_new_compaction_folds_in_the_previous_summary() {
    let roomy = mateclaw(1_000_000);
    let mut case = Case::new(&roomy, turns(10).split_off(4));
    case.after = EntryId(4);
    case.compaction = Some(Compaction::MateClaw {
        from: EntryId(0),
        through: EntryId(4),
        messages: 4,
        summary: "- User: the old summary".into(),
    });
    let tokens = case.run(&Recording::default()).context.tokens;
    let req = mateclaw(budget_around(tokens, 0.75, true));
    case.request = &req;
    let summarizer = Recording::default();
    let built = case.run(&summarizer);
    assert_eq!(
        summarizer.calls(),
        [(12, Some("- User: the old summary".to_string()))]
    );
    match built.record {
        Some(Compaction::MateClaw {
            from,
            through,
            messages,
            ..
        }) => {
            assert_eq!((from, through, messages), (EntryId(4), EntryId(16), 16));
        }
        other => panic!("{other:?}"),
    }
}

/// MateClaw: "Summary results are cached for 30 minutes to avoid redundant LLM calls" —
/// a span summarized less than 30 minutes ago is not summarized again; after that it is.
#[test]
fn mateclaw_summary_cached_30_minutes() {
    let tokens = base(&mateclaw(1_000_000)) + 20 * TURN_MESSAGE;
    let req = mateclaw(budget_around(tokens, 0.75, true));
    let earlier = Compaction::MateClaw {
        from: EntryId(0),
        through: EntryId(16),
        messages: 16,
        summary: "cached summary".into(),
    };
    let mut case = Case::new(&req, turns(10));
    case.cache = vec![(earlier.clone(), now() - chrono::Duration::minutes(29))];
    let summarizer = Recording::default();
    let built = case.run(&summarizer);
    assert!(summarizer.calls().is_empty());
    assert!(built.context.summary_cached);
    assert_eq!(built.record, Some(earlier.clone()));

    case.cache = vec![(earlier, now() - chrono::Duration::minutes(31))];
    let built = case.run(&summarizer);
    assert_eq!(summarizer.calls().len(), 1);
    assert!(!built.context.summary_cached);
}

/// The summarizer's contract: a failed summary keeps what it would have replaced (and the
/// budget is then met by trimToFit).
#[test]
fn a_failed_summary_keeps_the_messages() {
    let tokens = base(&mateclaw(1_000_000)) + 20 * TURN_MESSAGE;
    let req = mateclaw(budget_around(tokens, 0.75, true));
    let built = Case::new(&req, turns(10)).run(&Failing);
    assert!(built.record.is_none());
    assert_eq!(
        built.context.summary_error.as_deref(),
        Some("summarizer failed: the model is down")
    );
    assert_eq!(built.context.history_messages, 20);
}

/// MateClaw's trimToFit: "If tokens still exceed the budget after LLM summarization,
/// trimToFit() progressively removes messages from front to back, preserving at least the
/// last 2 messages."
#[test]
fn mateclaw_trim_to_fit_keeps_at_least_the_last_two_messages() {
    let b = base(&mateclaw(1_000_000));
    // The summary alone overflows: trimming drops it and older messages, oldest first.
    let req = mateclaw(b + 4 * TURN_MESSAGE);
    let mut case = Case::new(&req, turns(3));
    case.compaction = Some(Compaction::MateClaw {
        from: EntryId(0),
        through: EntryId(0),
        messages: 2,
        summary: "word ".repeat(50),
    });
    let ctx = case.run(&Recording::default()).context;
    assert!(ctx.tokens <= req.config.max_input_tokens);
    let t = texts(&ctx);
    assert!(t[1].starts_with("u1 "), "{t:?}");
    assert_eq!(t.len(), 1 + 4);
    // When nothing fits, the last 2 messages stay anyway and the prompt is over budget.
    let tight = mateclaw(b);
    let ctx = Case::new(&tight, turns(5))
        .run(&Recording::default())
        .context;
    assert_eq!(ctx.messages.len(), 1 + 2);
    assert!(ctx.over_budget);
}

/// MateClaw's compactForRetry: on a context_length_exceeded retry, no summary is made and
/// only the most recent 2 turns (4 messages) are kept; nothing is recorded.
#[test]
fn mateclaw_emergency_compaction_keeps_the_last_four_messages() {
    let mut req = mateclaw(1_000_000);
    req.emergency = true;
    let mut case = Case::new(&req, turns(6));
    case.compaction = Some(Compaction::MateClaw {
        from: EntryId(0),
        through: EntryId(0),
        messages: 2,
        summary: "old".into(),
    });
    let summarizer = Recording::default();
    let built = case.run(&summarizer);
    let t = texts(&built.context);
    assert_eq!(t.len(), 1 + 4);
    assert!(t[1].starts_with("u4 ") && t[4].starts_with("a5 "));
    assert!(built.record.is_none());
    assert!(summarizer.calls().is_empty());
    assert!(built.context.emergency);
    assert_eq!(built.context.trimmed, 13 - 4);
}

/// Qanot: "When the estimated next-turn context would exceed 60% of the max: the first 2
/// messages are kept, the last 4 messages are kept, everything in between is removed, a
/// summary marker is inserted".
#[test]
fn qanot_compaction_at_60_percent_keeps_first_two_and_last_four_with_a_marker() {
    let tokens = base(&qanot(1_000_000)) + 20 * TURN_MESSAGE;
    let under = qanot(budget_around(tokens, 0.60, false));
    assert!(
        !Case::new(&under, turns(10))
            .run(&Recording::default())
            .context
            .compacted
    );
    let req = qanot(budget_around(tokens, 0.60, true));
    let built = Case::new(&req, turns(10)).run(&Recording::default());
    let t = texts(&built.context);
    assert_eq!(t.len(), 1 + 2 + 1 + 4);
    assert!(t[1].starts_with("u0 ") && t[2].starts_with("a0 "));
    assert_eq!(t[3], compaction_marker(14));
    assert_eq!(built.context.messages[3].role, Role::User);
    assert!(t[4].starts_with("u8 ") && t[7].starts_with("a9 "));
    assert_eq!(
        built.record,
        Some(Compaction::Qanot {
            head: vec![EntryId(1), EntryId(2)],
            through: EntryId(16),
            removed: 14,
        })
    );
}

/// Qanot: "the estimated next-turn context": the prompt and the reply budget together.
/// A prompt at 50% compacts when the reply it asks for takes the next turn past 60%,
/// not when the reply fits under it.
#[test]
fn qanot_compaction_counts_the_reply_budget_of_the_next_turn() {
    let tokens = base(&qanot(1_000_000)) + 20 * TURN_MESSAGE;
    let max = budget_around(tokens, 0.50, true);
    let mut small = qanot(max);
    small.config.reply_tokens = max / 20;
    let built = Case::new(&small, turns(10)).run(&Recording::default());
    assert!(!built.context.compacted, "50% + 5% stays under 60%");
    let mut large = qanot(max);
    large.config.reply_tokens = max / 5;
    let built = Case::new(&large, turns(10)).run(&Recording::default());
    assert!(built.context.compacted, "50% + 20% passes 60%");
    assert_eq!(texts(&built.context)[3], compaction_marker(14));
    // The default reply budget is counted too.
    assert_eq!(ContextConfig::default().reply_tokens, DEFAULT_REPLY_TOKENS);
}

/// Qanot: a later compaction keeps the same first messages and the marker counts every
/// removed message.
#[test]
fn qanot_a_second_compaction_keeps_the_head_and_counts_all_removed_messages() {
    let all = turns(12);
    let tokens = base(&qanot(1_000_000)) + 16 * TURN_MESSAGE;
    let req = qanot(budget_around(tokens, 0.60, true));
    let mut case = Case::new(&req, all[8..].to_vec());
    case.after = EntryId(8);
    case.head = all[..2].to_vec();
    case.compaction = Some(Compaction::Qanot {
        head: vec![EntryId(1), EntryId(2)],
        through: EntryId(8),
        removed: 6,
    });
    let built = case.run(&Recording::default());
    assert_eq!(
        built.record,
        Some(Compaction::Qanot {
            head: vec![EntryId(1), EntryId(2)],
            through: EntryId(20),
            removed: 6 + 12,
        })
    );
    let t = texts(&built.context);
    assert!(t[1].starts_with("u0 "));
    assert_eq!(t[3], compaction_marker(18));
    assert!(t[4].starts_with("u10 "));
}

/// Qanot: "When context usage reaches 50%, the Working Buffer activates".
#[test]
fn qanot_working_buffer_from_50_percent() {
    let tokens = base(&qanot(1_000_000)) + 4 * TURN_MESSAGE;
    let below = qanot(budget_around(tokens, 0.50, false));
    assert!(
        !Case::new(&below, turns(2))
            .run(&Recording::default())
            .context
            .working_buffer
    );
    let at = qanot(budget_around(tokens, 0.50, true));
    let ctx = Case::new(&at, turns(2)).run(&Recording::default()).context;
    assert!(ctx.working_buffer);
    assert!(!ctx.compacted, "50% is below the 60% compaction threshold");
}

fn view_with(files: &[(&str, &str)]) -> MemoryView {
    let mut v = MemoryView::default();
    for (path, content) in files {
        v.files.insert(
            path.to_string(),
            MemoryFile {
                content: content.to_string(),
                enabled: false,
                sort_order: 100,
                created: 1,
                updated: 1,
                updated_at: now(),
                parts: Vec::new(),
            },
        );
    }
    v
}

/// Qanot: "If the agent detects signs of compaction (truncation markers, 'where were we?'
/// messages), it automatically injects recovery context … appended to the user's message."
/// The builder's own marker is not a sign (it knows when it compacted): recovery comes with
/// the prompt that compacts, a "where were we?", or a sign in the first tape messages.
#[test]
fn qanot_recovery_is_appended_to_the_current_message_when_compaction_is_detected() {
    let memory = view_with(&[
        ("memory/working-buffer.md", "buffered"),
        ("SESSION-STATE.md", "state"),
    ]);
    let recovered = "Next question.\n\n---\n\n[COMPACTION RECOVERY]\n## Working Buffer Recovery\nbuffered\n\n---\n\n## Session State\nstate";
    let mut req = qanot(1_000_000);
    req.message = Some(Message::user("Next question."));
    // No sign of compaction: nothing is appended.
    let mut case = Case::new(&req, turns(2));
    case.memory = memory.clone();
    let ctx = case.run(&Recording::default()).context;
    assert!(!ctx.recovery);
    assert_eq!(texts(&ctx).last().unwrap(), "Next question.");
    // The prompt that compacts.
    let tokens = base(&req) + 20 * TURN_MESSAGE;
    let mut compacting = qanot(budget_around(tokens, 0.60, true));
    compacting.message = req.message.clone();
    let mut case = Case::new(&compacting, turns(10));
    case.memory = memory.clone();
    let ctx = case.run(&Recording::default()).context;
    assert!(ctx.compacted && ctx.recovery);
    assert_eq!(texts(&ctx).last().unwrap(), recovered);
    // Later prompts with the same compaction in effect: its marker is not a sign.
    let mut case = Case::new(&req, turns(2)[2..].to_vec());
    case.memory = memory.clone();
    case.compaction = Some(Compaction::Qanot {
        head: vec![EntryId(1), EntryId(2)],
        through: EntryId(2),
        removed: 3,
    });
    case.head = turns(1);
    assert!(!case.run(&Recording::default()).context.recovery);
    // A sign in one of the first messages of the tape (an imported summary).
    let mut case = Case::new(&req, turns(2));
    case.memory = memory.clone();
    case.history[0].1 = Message::user("<summary>we discussed the release</summary>");
    assert!(case.run(&Recording::default()).context.recovery);
    // "Where were we?" from the user.
    let mut asked = qanot(1_000_000);
    asked.message = Some(Message::user("Sorry, where were we?"));
    let mut case = Case::new(&asked, turns(2));
    case.memory = memory;
    assert!(case.run(&Recording::default()).context.recovery);
}

/// Qanot: recovery context never pushes the prompt over its budget; it is cut to fit.
#[test]
fn qanot_recovery_is_cut_to_the_budget() {
    let big = "fact ".repeat(5_000);
    let mut req = qanot(0);
    req.message = Some(Message::user("where were we?"));
    let b = base(&req);
    req.config.max_input_tokens = b + 400;
    let mut case = Case::new(&req, Vec::new());
    // The working buffer is not in the system message, only in recovery.
    case.memory = view_with(&[("memory/working-buffer.md", &big)]);
    let ctx = case.run(&Recording::default()).context;
    assert!(ctx.recovery);
    assert!(ctx.tokens <= req.config.max_input_tokens, "{}", ctx.tokens);
    assert!(texts(&ctx).last().unwrap().ends_with("\n[truncated]"));
}

/// Qanot: tool results over 8000 characters are cut in the prompt (and only in the prompt).
#[test]
fn qanot_tool_results_over_8000_chars_are_truncated_in_the_prompt() {
    let req = mateclaw(1_000_000);
    let history = vec![
        (EntryId(1), Message::user("read the log")),
        (
            EntryId(2),
            Message::assistant_tool_calls(vec![ToolCall::function("c1", "read", "{}")]),
        ),
        (EntryId(3), Message::tool_result("c1", "L".repeat(10_000))),
        (EntryId(4), Message::assistant("done")),
    ];
    let ctx = Case::new(&req, history).run(&Recording::default()).context;
    let tool = &ctx.messages[3];
    assert_eq!(tool.role, Role::Tool);
    assert!(tool.content_text().contains("[truncated 2800 chars]"));
    assert_eq!(ctx.truncated_tool_results, 1);
}

/// Without a request message, the user message that ends the thread is the current one:
/// it is not counted among the pairs to keep and recovery goes to it.
#[test]
fn the_user_message_ending_the_thread_is_the_current_message() {
    let mut history = turns(3);
    history.push((EntryId(7), Message::user("u3 the question")));
    let ctx = Case::new(&mateclaw(1_000_000), history)
        .run(&Recording::default())
        .context;
    assert_eq!(texts(&ctx).last().unwrap(), "u3 the question");
    assert_eq!(ctx.history_messages, 7);
    assert_eq!(
        ctx.stable_prefix_tokens,
        ctx.tokens - Words.count_message(&Message::user("u3 the question"))
    );
}

/// `tokens` is the assembled prompt's token count.
#[test]
fn tokens_are_the_sum_of_the_messages() {
    let mut req = mateclaw(1_000_000);
    req.message = Some(Message::user("hello there"));
    let ctx = Case::new(&req, turns(3)).run(&Recording::default()).context;
    let sum: usize = ctx.messages.iter().map(|m| Words.count_message(m)).sum();
    assert_eq!(ctx.tokens, sum);
}

/// The stable prefix: with a compaction in effect and nothing else changed, the next
/// turn's prompt starts with the whole previous prompt but its last message.
#[test]
fn the_next_turn_extends_the_previous_prompt() {
    let req = mateclaw(1_000_000);
    let all = turns(6);
    let compaction = Some(Compaction::MateClaw {
        from: EntryId(0),
        through: EntryId(4),
        messages: 4,
        summary: "s".into(),
    });
    let mut first = Case::new(&req, all[4..9].to_vec());
    first.after = EntryId(4);
    first.compaction = compaction.clone();
    let mut second = Case::new(&req, all[4..].to_vec());
    second.after = EntryId(4);
    second.compaction = compaction;
    let a = first.run(&Recording::default()).context;
    let mut next_history = all[4..].to_vec();
    next_history.push((EntryId(13), Message::user("u6 next")));
    second.history = next_history;
    let b = second.run(&Recording::default()).context;
    assert!(extends(&a.messages, &b.messages));
    // Here even the previous current message is repeated as it was.
    assert_eq!(
        common_prefix_tokens(&a.messages, &b.messages, &Words),
        a.tokens
    );
    assert!(a.stable_prefix_tokens < a.tokens);
}

#[test]
fn configurations_that_cannot_work_are_refused() {
    assert!(ContextConfig::default().validate().is_ok());
    let mut c = ContextConfig::new(0, Policy::default());
    assert!(c.validate().unwrap_err().contains("budget"));
    c.max_input_tokens = 10;
    c.policy = Policy::MateClaw(MateClaw {
        compact_trigger_ratio: 1.5,
        ..MateClaw::default()
    });
    assert!(c.validate().unwrap_err().contains("compact_trigger_ratio"));
    c.policy = Policy::Qanot(Qanot {
        compaction_ratio: 0.0,
        ..Qanot::default()
    });
    assert!(c.validate().unwrap_err().contains("compaction_ratio"));
    let parsed: ContextConfig =
        serde_json::from_str(r#"{"max_input_tokens": 500, "policy": {"name": "qanot"}}"#).unwrap();
    assert_eq!(parsed.policy, Policy::Qanot(Qanot::default()));
}

/// Size limits: a huge memory made `context --budget 4000` return 19 million tokens, only
/// flagged `over_budget`. After trimToFit the agent files and the `<memory>` block give
/// way: the prompt keeps its budget, the system prompt, date line and current message stay
/// whole, and the cut block still closes its tag.
#[test]
fn a_huge_memory_is_truncated_to_keep_the_budget() {
    let mut req = mateclaw(4000);
    req.system_prompt = "You are a careful assistant.".into();
    req.message = Some(Message::user("what do you remember about me?"));
    let mut case = Case::new(&req, turns(3));
    case.memory = view_with(&[
        (paths::MEMORY, &"the user likes tea ".repeat(50_000)),
        (paths::PROFILE, "Name: Ada"),
    ]);
    let ctx = case.run(&Recording::default()).context;
    assert!(ctx.tokens <= 4000, "{} tokens", ctx.tokens);
    assert!(ctx.memory_truncated && !ctx.over_budget);
    let system = ctx.messages[0].content_text();
    assert!(system.starts_with("You are a careful assistant."));
    assert!(system.contains("the user likes tea") && system.contains("[truncated]"));
    assert!(system.contains("</memory>") && system.contains("Current date and time"));
    let last = ctx.messages.last().unwrap();
    assert_eq!(last.content_text(), "what do you remember about me?");
    // A memory that fits is never cut.
    case.memory = view_with(&[(paths::MEMORY, "the user likes tea")]);
    let ctx = case.run(&Recording::default()).context;
    assert!(!ctx.memory_truncated);
    assert!(!ctx.messages[0].content_text().contains("[truncated]"));
}

/// The memory skill (nanobot's always-loaded skill, Bub's rule 7) follows the system
/// prompt when it is on, and gives way first when the budget is small: the prompt keeps its
/// budget, the skill is cut (then left out) before the memory is.
#[test]
fn the_memory_skill_follows_the_prompt_and_gives_way_first() {
    let mut req = mateclaw(8000);
    req.system_prompt = "You are a careful assistant.".into();
    req.config.memory_skill = true;
    let mut case = Case::new(&req, turns(1));
    case.memory = view_with(&[(paths::MEMORY, "the user likes tea")]);
    let ctx = case.run(&Recording::default()).context;
    let system = ctx.messages[0].content_text().into_owned();
    assert!(
        system.starts_with(&format!(
            "You are a careful assistant.\n\n{}\n\n<memory>",
            MEMORY_SKILL.trim()
        )),
        "{system}"
    );
    assert!(!ctx.memory_truncated);
    // Off: not there.
    let mut off = req.clone();
    off.config.memory_skill = false;
    let plain = Case::new(&off, turns(1)).run(&Recording::default()).context;
    assert!(!plain.messages[0].content_text().contains("Rule 7"));
    // A budget the skill does not fit in: it is cut, the memory stays whole.
    let skill_cost = Words.count(MEMORY_SKILL);
    let small = plain.tokens + skill_cost / 2;
    let mut tight = req.clone();
    tight.config.max_input_tokens = small;
    let mut case = Case::new(&tight, turns(1));
    case.memory = view_with(&[(paths::MEMORY, "the user likes tea")]);
    let ctx = case.run(&Recording::default()).context;
    assert!(ctx.tokens <= small, "{} tokens of {small}", ctx.tokens);
    assert!(ctx.memory_truncated && !ctx.over_budget);
    let system = ctx.messages[0].content_text();
    assert!(
        system.contains("## Memory skill") && system.contains("[truncated]"),
        "{system}"
    );
    assert!(
        system.contains("the user likes tea") && system.contains("</memory>"),
        "{system}"
    );
}

/// MateClaw's trimToFit taken literally: drop the oldest message, repair, repeat.
fn trim_literally(
    mut conv: Vec<Part>,
    fixed: usize,
    max: usize,
    min_kept: usize,
    counter: &dyn TokenCounter,
) -> Vec<Part> {
    let total = |conv: &[Part]| fixed + conv.iter().map(|p| p.cost).sum::<usize>();
    while total(&conv) > max && conv.len() > min_kept {
        conv.remove(0);
        conv = repair(conv, counter);
    }
    conv
}

/// A message of a random conversation: user, assistant (text or calling tools among a few
/// ids), or a tool result for one of those ids; repeated ids and orphans included.
fn arbitrary_message() -> impl proptest::strategy::Strategy<Value = Message> {
    use proptest::prelude::*;
    prop_oneof![
        3 => Just(Message::user("u")),
        2 => Just(Message::assistant("a")),
        2 => proptest::collection::vec(0..4u8, 1..3).prop_map(|ids| {
            Message::assistant_tool_calls(
                ids.into_iter()
                    .map(|i| ToolCall::function(format!("c{i}"), "f", "{}"))
                    .collect(),
            )
        }),
        2 => (0..4u8).prop_map(|i| Message::tool_result(format!("c{i}"), "r")),
    ]
}

proptest::proptest! {
    /// The linear trim drops exactly the messages the literal one does.
    #[test]
    fn trim_to_fit_matches_dropping_one_message_at_a_time(
        messages in proptest::collection::vec((arbitrary_message(), 1..20usize), 0..40),
        fixed in 0..50usize,
        max in 0..400usize,
        min_kept in 0..4usize,
    ) {
        let parts: Vec<Part> = messages
            .into_iter()
            .enumerate()
            .map(|(i, (message, cost))| Part {
                id: Some(EntryId(i as u64 + 1)),
                message,
                cost,
                truncated: false,
            })
            .collect();
        let conv = repair(parts, &Words);
        let ids = |conv: &[Part]| conv.iter().map(|p| p.id).collect::<Vec<_>>();
        let want = trim_literally(conv.clone(), fixed, max, min_kept, &Words);
        let got = trim_to_fit(conv, fixed, max, min_kept, &Words);
        proptest::prop_assert_eq!(ids(&got), ids(&want));
    }
}
