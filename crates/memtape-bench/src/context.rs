//! The context benchmark: how stable the prompt's prefix stays from turn to turn (what an
//! LLM's prompt cache can reuse), over a scripted conversation through the real engine on
//! a scratch SQLite store — with memory writes on some turns, tool calls with large
//! results, and compactions happening.
//!
//! Each turn appends the user's message, builds the context (as an agent does before
//! calling its model), then appends the reply, and on some turns a tool call with its
//! result. Against the previous turn's prompt it measures:
//! - the stable-prefix ratio: the share of this prompt's tokens that are an exact prefix
//!   of the previous prompt ([`common_prefix_tokens`]), averaged over turns;
//! - how often the whole previous prompt, minus its last message (the previous turn's
//!   user message), is a prefix of this one ([`extends`]); when it is not, the turn is
//!   put down to a compaction, a memory write, the time line, or something else.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use memtape::context::{common_prefix_tokens, date_line, extends};
use memtape::memory::{Change, Op, paths};
use memtape::{
    AppendOptions, Bpe, BpeEncoding, ContextConfig, ContextRequest, Engine, Message, Policy, Scope,
    Store, TimePrecision, ToolCall,
};
use serde::Serialize;

use crate::Error;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Turns in the scripted conversation.
    pub turns: usize,
    /// The token budget of every prompt.
    pub budget: usize,
    /// The policies to run the conversation under (each in its own store).
    pub policies: Vec<Policy>,
    /// How precisely the time line is written.
    pub time_precision: TimePrecision,
    /// Minutes between turns.
    pub minutes_per_turn: i64,
}

impl Default for Config {
    /// 200 turns of 2 minutes within an 8000-token budget, both policies, hourly time.
    fn default() -> Self {
        Config {
            turns: 200,
            budget: 8_000,
            policies: vec![
                Policy::MateClaw(Default::default()),
                Policy::Qanot(Default::default()),
            ],
            time_precision: TimePrecision::Hour,
            minutes_per_turn: 2,
        }
    }
}

/// Why a turn's prompt did not extend the previous one.
#[derive(Debug, Default, Serialize)]
pub struct Breaks {
    /// This turn's build made a new compaction.
    pub compaction: usize,
    /// Memory shown in the system message changed since the previous turn.
    pub memory: usize,
    /// The time line changed (a new hour, at the default precision).
    pub time: usize,
    /// Anything else (trimming to fit the budget, …).
    pub other: usize,
}

/// The numbers for one policy.
#[derive(Debug, Serialize)]
pub struct PolicyReport {
    /// `mateclaw` or `qanot`.
    pub policy: String,
    /// Turns compared with the turn before (all but the first).
    pub compared_turns: usize,
    /// Mean over turns of (tokens of the common prefix with the previous prompt) / (tokens
    /// of this prompt).
    pub stable_prefix_ratio: f64,
    /// The same ratio over the turns that extend the previous prompt (no break).
    pub stable_prefix_ratio_unbroken: f64,
    /// Share of turns whose prompt starts with the whole previous prompt but its last
    /// message.
    pub extends_previous: f64,
    /// Why the other turns did not.
    pub breaks: Breaks,
    /// Compactions made.
    pub compactions: usize,
    /// Turns with a memory write (daily note, long-term memory, working state).
    pub memory_write_turns: usize,
    /// Tool results cut to head and tail, summed over prompts.
    pub truncated_tool_results: usize,
    /// Prompts with Qanot's recovery context.
    pub recoveries: usize,
    /// Prompts past Qanot's working buffer threshold.
    pub working_buffer_prompts: usize,
    /// Prompts over the budget.
    pub over_budget: usize,
    /// Mean prompt tokens.
    pub mean_tokens: f64,
    /// Largest prompt, tokens.
    pub max_tokens: usize,
    /// Entries on the tape at the end (messages, compactions, memory changes).
    pub tape_entries: u64,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Turns per conversation.
    pub turns: usize,
    /// The token budget.
    pub budget: usize,
    /// The time line's precision.
    pub time_precision: TimePrecision,
    /// Minutes between turns.
    pub minutes_per_turn: i64,
    /// One entry per policy.
    pub policies: Vec<PolicyReport>,
}

impl Report {
    /// One line per policy, for people.
    pub fn summary(&self) -> String {
        self.policies
            .iter()
            .map(|p| {
                format!(
                    "{}: stable-prefix ratio {:.3} (unbroken turns {:.3}), extends previous {:.3}; breaks: {} compaction, {} memory, {} time, {} other; {} compactions",
                    p.policy,
                    p.stable_prefix_ratio,
                    p.stable_prefix_ratio_unbroken,
                    p.extends_previous,
                    p.breaks.compaction,
                    p.breaks.memory,
                    p.breaks.time,
                    p.breaks.other,
                    p.compactions,
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs the benchmark: the same scripted conversation once per policy.
pub fn run(config: &Config) -> Result<Report, Error> {
    if config.turns < 2 {
        return Err(Error::Data("the benchmark needs at least 2 turns".into()));
    }
    let policies = config
        .policies
        .iter()
        .map(|policy| run_one(config, policy))
        .collect::<Result<_, _>>()?;
    Ok(Report {
        turns: config.turns,
        budget: config.budget,
        time_precision: config.time_precision,
        minutes_per_turn: config.minutes_per_turn,
        policies,
    })
}

/// What happens on turn `i` of the script.
struct Script {
    rng: fastrand::Rng,
}

const TOPICS: [&str; 8] = [
    "the billing service",
    "the Falcon deployment",
    "PostgreSQL backups",
    "the onboarding guide",
    "rate limits on the public API",
    "the Tashkent office network",
    "release 2.4 notes",
    "the on-call rota",
];

impl Script {
    fn topic(&mut self) -> &'static str {
        TOPICS[self.rng.usize(..TOPICS.len())]
    }

    fn user(&mut self, i: usize) -> String {
        let topic = self.topic();
        match i % 5 {
            0 => format!("Turn {i}: can you summarise where we are with {topic}?"),
            1 => format!(
                "Turn {i}: let's go with option {} for {topic}, and remember the deadline is day {}.",
                self.rng.u8(1..4),
                self.rng.u16(1..365)
            ),
            2 => format!("Turn {i}: what did we decide about {topic} last time?"),
            3 => format!(
                "Turn {i}: I prefer short answers. Check the logs for {topic} and tell me what failed."
            ),
            _ => format!("Turn {i}: thanks. Next, {topic} needs an owner; propose one."),
        }
    }

    fn reply(&mut self, i: usize) -> String {
        let topic = self.topic();
        format!(
            "Reply {i}: for {topic} I suggest we keep the current plan, move the review to week {}, and track it in ticket FAL-{}. Two risks remain: capacity and the migration window.",
            self.rng.u8(1..53),
            self.rng.u16(100..999)
        )
    }

    fn tool_result(&mut self, i: usize) -> String {
        // Every third tool result is a large log (over Qanot's 8000 characters).
        let lines = if i.is_multiple_of(3) { 300 } else { 8 };
        (0..lines)
            .map(|l: usize| {
                format!(
                    "2026-02-10T10:{:02}:{:02} svc-{} level={} msg=\"request {} took {}ms\"\n",
                    l % 60,
                    (l * 7) % 60,
                    self.rng.u8(1..9),
                    if l.is_multiple_of(17) {
                        "error"
                    } else {
                        "info"
                    },
                    self.rng.u32(1000..9999),
                    self.rng.u16(1..900)
                )
            })
            .collect()
    }
}

fn run_one(config: &Config, policy: &Policy) -> Result<PolicyReport, Error> {
    let scratch = tempfile::tempdir()?;
    let start = Utc
        .with_ymd_and_hms(2026, 2, 10, 9, 0, 0)
        .single()
        .ok_or_else(|| Error::Data("start time".into()))?;
    let clock = Arc::new(AtomicI64::new(start.timestamp()));
    let now = {
        let clock = Arc::clone(&clock);
        move || DateTime::from_timestamp(clock.load(Ordering::SeqCst), 0).unwrap_or_default()
    };
    let engine = Engine::init(scratch.path())?.with_clock(now.clone());
    let agent = Scope::agent("bench", "assistant").map_err(memtape::Error::from)?;
    let memory = agent
        .clone()
        .with_user("ada")
        .map_err(memtape::Error::from)?;
    let session = memory
        .clone()
        .with_session("s1")
        .map_err(memtape::Error::from)?;

    // Agent files and starting memory, as a deployed agent would have them.
    engine.record_memory(
        &agent,
        Change {
            ops: vec![
                Op::Write {
                    path: paths::AGENTS.into(),
                    content: "Use memory.save for durable facts and memory.daily for notes. Cite ticket numbers.".into(),
                },
                Op::Write {
                    path: paths::SOUL.into(),
                    content: "You are calm, precise and brief.".into(),
                },
            ],
            source: "bench".into(),
            caused_by: Vec::new(),
        },
    )?;
    engine.save_long_term(
        &memory,
        "Ada leads the Falcon project. She prefers short answers.",
    )?;

    let request = ContextRequest {
        system_prompt: "You are the Falcon project's assistant.".into(),
        config: ContextConfig {
            time_precision: config.time_precision,
            ..ContextConfig::new(config.budget, policy.clone())
        },
        ..ContextRequest::default()
    };
    let bpe = Bpe::new(BpeEncoding::Cl100k);
    let mut script = Script {
        rng: fastrand::Rng::with_seed(4),
    };
    let mut previous: Option<memtape::Context> = None;
    let mut memory_changed = false;
    let mut out = PolicyReport {
        policy: policy.name().to_string(),
        compared_turns: 0,
        stable_prefix_ratio: 0.0,
        stable_prefix_ratio_unbroken: 0.0,
        extends_previous: 0.0,
        breaks: Breaks::default(),
        compactions: 0,
        memory_write_turns: 0,
        truncated_tool_results: 0,
        recoveries: 0,
        working_buffer_prompts: 0,
        over_budget: 0,
        mean_tokens: 0.0,
        max_tokens: 0,
        tape_entries: 0,
    };
    let (mut ratio_sum, mut unbroken_sum, mut unbroken, mut extended, mut tokens_sum) =
        (0.0, 0.0, 0usize, 0usize, 0usize);

    for i in 0..config.turns {
        clock.fetch_add(config.minutes_per_turn * 60, Ordering::SeqCst);
        let today: NaiveDate = now().date_naive();
        // Memory writes on some turns: a daily note, the working state, long-term memory.
        let mut wrote = false;
        if i % 15 == 7 {
            engine.append_daily(
                &memory,
                &format!("- Turn {i}: reviewed {}", script.topic()),
                Some(today),
            )?;
            wrote = true;
        }
        if i % 25 == 12 {
            engine.record_memory(
                &memory,
                Change::one(
                    Op::Append {
                        path: paths::SESSION_STATE.into(),
                        text: format!(
                            "- [{}] **decision**: turn {i} settled {}\n",
                            now().to_rfc3339(),
                            script.topic()
                        ),
                        heading: Some(paths::SESSION_STATE_HEADING.into()),
                    },
                    "bench",
                ),
            )?;
            wrote = true;
        }
        if i % 60 == 40 {
            engine.save_long_term(
                &memory,
                &format!("Ada leads the Falcon project. She prefers short answers. As of turn {i}, the release is 2.{}.", i / 60),
            )?;
            wrote = true;
        }
        out.memory_write_turns += usize::from(wrote);
        memory_changed |= wrote;

        engine.append(
            &session,
            Message::user(script.user(i)),
            AppendOptions::default(),
        )?;
        let context = engine.context(&session, &request)?;

        out.compactions += usize::from(context.compacted);
        out.truncated_tool_results += context.truncated_tool_results;
        out.recoveries += usize::from(context.recovery);
        out.working_buffer_prompts += usize::from(context.working_buffer);
        out.over_budget += usize::from(context.over_budget);
        out.max_tokens = out.max_tokens.max(context.tokens);
        tokens_sum += context.tokens;
        if let Some(prev) = &previous {
            out.compared_turns += 1;
            let common = common_prefix_tokens(&prev.messages, &context.messages, &bpe);
            let ratio = common as f64 / context.tokens.max(1) as f64;
            ratio_sum += ratio;
            if extends(&prev.messages, &context.messages) {
                extended += 1;
                unbroken += 1;
                unbroken_sum += ratio;
            } else if context.compacted {
                out.breaks.compaction += 1;
            } else if memory_changed {
                out.breaks.memory += 1;
            } else if date_line(
                now() - chrono::Duration::minutes(config.minutes_per_turn),
                config.time_precision,
            ) != date_line(now(), config.time_precision)
            {
                out.breaks.time += 1;
            } else {
                out.breaks.other += 1;
            }
        }
        memory_changed = false;
        previous = Some(context);

        // The reply; on some turns a tool call and its result come first.
        if i % 4 == 3 {
            let id = format!("call_{i}");
            engine.append(
                &session,
                Message::assistant_tool_calls(vec![ToolCall::function(
                    &id,
                    "read_logs",
                    format!("{{\"turn\": {i}}}"),
                )]),
                AppendOptions::default(),
            )?;
            let mut result = Message::tool_result(&id, script.tool_result(i));
            result.name = Some("read_logs".into());
            engine.append(&session, result, AppendOptions::default())?;
        }
        engine.append(
            &session,
            Message::assistant(script.reply(i)),
            AppendOptions::default(),
        )?;
    }

    let compared = out.compared_turns.max(1) as f64;
    out.stable_prefix_ratio = ratio_sum / compared;
    out.stable_prefix_ratio_unbroken = unbroken_sum / unbroken.max(1) as f64;
    out.extends_previous = extended as f64 / compared;
    out.mean_tokens = tokens_sum as f64 / config.turns as f64;
    out.tape_entries = engine.store().last_id().map_err(memtape::Error::from)?.0;
    Ok(out)
}
