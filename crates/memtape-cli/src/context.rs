//! `memtape context` (the prompt an agent would send its LLM for a session, within a token
//! budget) and `memtape bench context` (the stable-prefix benchmark).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, ValueEnum};
use memtape::{
    Context, ContextConfig, ContextRequest, MateClaw, Message, Policy, Qanot, Role, TimePrecision,
};
use serde::Serialize;

use crate::ctx::{Ctx, ScopeArgs, existing_session, open};
use crate::output::{self, ChatMessage, escape};
use crate::progress::Progress;

/// A compaction policy.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyArg {
    /// MateClaw: summarize all but the most recent pairs.
    Mateclaw,
    /// Qanot: keep the first and last messages, summarize the middle.
    Qanot,
}

impl PolicyArg {
    fn policy(self) -> Policy {
        match self {
            PolicyArg::Mateclaw => Policy::MateClaw(MateClaw::default()),
            PolicyArg::Qanot => Policy::Qanot(Qanot::default()),
        }
    }
}

/// How precisely the current time is written into the system message.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrecisionArg {
    /// The date only.
    Day,
    /// The date and hour.
    Hour,
    /// The date, hour and minute.
    Minute,
}

impl From<PrecisionArg> for TimePrecision {
    fn from(p: PrecisionArg) -> TimePrecision {
        match p {
            PrecisionArg::Day => TimePrecision::Day,
            PrecisionArg::Hour => TimePrecision::Hour,
            PrecisionArg::Minute => TimePrecision::Minute,
        }
    }
}

/// `memtape context SESSION …`
#[derive(Args, Clone, Debug)]
pub struct ContextArgs {
    /// The session key.
    session: String,
    /// The token budget: the most tokens the prompt may have (MateClaw's max input tokens).
    #[arg(long, default_value_t = memtape::context::DEFAULT_MAX_INPUT_TOKENS,
          value_parser = budget)]
    budget: usize,
    /// The compaction policy.
    #[arg(long, value_enum, default_value = "mateclaw")]
    policy: PolicyArg,
    /// The agent's system prompt.
    #[arg(long, default_value = "", value_name = "TEXT")]
    system: String,
    /// The message being answered, when it is not on the tape (default: the user message
    /// that ends the session, which must then exist).
    #[arg(long, value_name = "TEXT")]
    message: Option<String>,
    /// Build for a retry after the model refused the prompt as too long
    /// (context_length_exceeded): keep only the last 4 messages, summarize nothing.
    #[arg(long)]
    emergency: bool,
    /// Do not record a new compaction (or Qanot's working buffer) on the tape.
    #[arg(long)]
    dry_run: bool,
    /// How precisely the current time is written into the system message.
    #[arg(long, value_enum, default_value = "hour")]
    time_precision: PrecisionArg,
    /// Print JSON: {"messages": [...], "tokens": N, ...}.
    #[arg(long)]
    json: bool,
    /// How attached files are printed: `refs` (Dify's references), or rebuilt into content
    /// parts (`parts` or `openai`: OpenAI's, `anthropic`: Anthropic's; implies --json), by
    /// `[attachments]` of memtape.toml.
    #[arg(long, value_enum, default_value = "refs")]
    attachments: crate::attach::AttachmentsArg,
    /// The prompt as it would have been built at this moment (an RFC 3339 time or an
    /// entry id): that memory, that history, the clock then; nothing is recorded.
    #[arg(long, value_name = "TIME|ID")]
    as_of: Option<memtape::AsOf>,
    /// Whether the memory skill (how and when to save and search memory: nanobot's
    /// always-loaded skill, Bub's rule 7) follows the system prompt (default:
    /// memtape.toml's `[lifecycle] memory_skill`, on).
    #[arg(long, value_name = "BOOL")]
    memory_skill: Option<bool>,
    /// The reply the model may write after this prompt, in tokens: Qanot's compaction
    /// looks at the next turn, this prompt and its reply.
    #[arg(long, default_value_t = memtape::context::DEFAULT_REPLY_TOKENS, value_name = "N")]
    reply_tokens: usize,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// A token budget: a whole number of at least 1.
fn budget(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "the token budget must be a whole number of at least 1, not {text}"
        )),
    }
}

/// Builds the context of a session and prints it. Records a new compaction on the
/// session's tape (so the next call reuses it) unless `--dry-run`.
pub fn context(ctx: &Ctx, args: &ContextArgs, out: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let config = crate::config::load(ctx)?;
    let request = ContextRequest {
        system_prompt: args.system.clone(),
        message: args.message.clone().map(Message::user),
        config: ContextConfig {
            time_precision: args.time_precision.into(),
            memory_skill: args.memory_skill.unwrap_or(config.lifecycle.memory_skill),
            reply_tokens: args.reply_tokens,
            ..ContextConfig::new(args.budget, args.policy.policy())
        },
        emergency: args.emergency,
        record: !args.dry_run && args.as_of.is_none(),
        as_of: args.as_of,
    };
    // With --message the prompt can open a session that has nothing on its tape yet;
    // without, a session that does not exist is a typo, not an empty prompt.
    let session = match &args.message {
        Some(_) => ctx.session_scope(&args.session)?,
        None => existing_session(&engine, ctx, &args.session)?,
    };
    // With a model configured, a compaction summary is the model's (MateClaw); a prompt
    // of the past is built without it.
    let llm = match &config.llm {
        Some(llm) if args.as_of.is_none() => Some(llm.connect()?),
        _ => None,
    };
    let built = engine
        .context_using(&session, &request, llm.as_deref())
        .with_context(|| format!("building the context of {session}"))?;
    if let Some(format) = args.attachments.format() {
        let files = crate::attach::files(ctx)?;
        let mut value = serde_json::to_value(ContextOut::of(&built))?;
        value["messages"] = built
            .messages
            .iter()
            .map(|m| {
                crate::attach::message_json(m, Some(format), Some(&files), &config.attachments)
            })
            .collect::<Result<Vec<_>>>()?
            .into();
        output::json(out, &value)?;
    } else if args.json {
        output::json(out, &ContextOut::of(&built))?;
    } else {
        print_human(&built, out)?;
    }
    Ok(())
}

/// The compaction in effect, on the wire.
#[derive(Serialize)]
struct CompactionOut {
    policy: &'static str,
    through: u64,
}

/// The context on the wire: every field of [`Context`], with the messages as OpenAI chat
/// messages (the same shape as `history --json`).
#[derive(Serialize)]
struct ContextOut<'a> {
    messages: Vec<ChatMessage<'a>>,
    tokens: usize,
    max_input_tokens: usize,
    policy: &'static str,
    history_messages: usize,
    compaction: Option<CompactionOut>,
    compacted: bool,
    summary_cached: bool,
    summary_error: Option<&'a str>,
    emergency: bool,
    trimmed: usize,
    truncated_tool_results: usize,
    working_buffer: bool,
    recovery: bool,
    stable_prefix_tokens: usize,
    over_budget: bool,
}

impl<'a> ContextOut<'a> {
    fn of(c: &'a Context) -> Self {
        ContextOut {
            messages: c.messages.iter().map(ChatMessage::of).collect(),
            tokens: c.tokens,
            max_input_tokens: c.max_input_tokens,
            policy: c.policy,
            history_messages: c.history_messages,
            compaction: c.compaction.as_ref().map(|k| CompactionOut {
                policy: k.policy(),
                through: k.through().0,
            }),
            compacted: c.compacted,
            summary_cached: c.summary_cached,
            summary_error: c.summary_error.as_deref(),
            emergency: c.emergency,
            trimmed: c.trimmed,
            truncated_tool_results: c.truncated_tool_results,
            working_buffer: c.working_buffer,
            recovery: c.recovery,
            stable_prefix_tokens: c.stable_prefix_tokens,
            over_budget: c.over_budget,
        }
    }
}

fn print_human(context: &Context, out: &mut impl Write) -> Result<()> {
    let mut notes = vec![context.policy.to_string()];
    if let Some(c) = &context.compaction {
        notes.push(format!(
            "{} compaction through #{}{}",
            c.policy(),
            c.through(),
            if context.compacted { " (new)" } else { "" }
        ));
    }
    for (flag, note) in [
        (context.emergency, "emergency"),
        (context.recovery, "recovery"),
        (context.working_buffer, "working buffer"),
        (context.over_budget, "OVER BUDGET"),
    ] {
        if flag {
            notes.push(note.to_string());
        }
    }
    if context.trimmed > 0 {
        notes.push(format!("{} trimmed", context.trimmed));
    }
    writeln!(
        out,
        "# {} tokens of {} ({})",
        context.tokens,
        context.max_input_tokens,
        notes.join("; ")
    )?;
    for m in &context.messages {
        let mut head = format!("[{}", m.role.as_str());
        if let Some(name) = &m.name {
            head.push_str(&format!(" {}", escape(name, true)));
        }
        if let Some(id) = &m.tool_call_id {
            head.push_str(&format!(" answers {}", escape(id, true)));
        }
        head.push(']');
        writeln!(out, "\n{head}")?;
        for call in &m.tool_calls {
            writeln!(
                out,
                "(calls {} {}({}))",
                escape(&call.id, true),
                escape(&call.function.name, true),
                escape(&call.function.arguments, false)
            )?;
        }
        let text = m.content_text();
        if !text.is_empty() || m.role != Role::Assistant {
            writeln!(out, "{}", escape(&text, false))?;
        }
    }
    Ok(())
}

/// `memtape bench context`
#[derive(Args, Clone, Debug)]
pub struct ContextBenchArgs {
    /// Turns in the scripted conversation.
    #[arg(long, default_value_t = 200)]
    turns: usize,
    /// The token budget of every prompt.
    #[arg(long, default_value_t = 8_000)]
    budget: usize,
    /// The policies to run (each on its own scratch store).
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["mateclaw", "qanot"])]
    policies: Vec<PolicyArg>,
    /// How precisely the current time is written into the system message.
    #[arg(long, value_enum, default_value = "hour")]
    time_precision: PrecisionArg,
    /// Minutes between turns.
    #[arg(long, default_value_t = 2)]
    minutes_per_turn: i64,
    /// Also write the JSON report here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Runs the stable-prefix benchmark and prints its report (and a summary on stderr).
pub fn bench(ctx: &Ctx, args: &ContextBenchArgs, out: &mut impl Write) -> Result<()> {
    let config = memtape_bench::context::Config {
        turns: args.turns,
        budget: args.budget,
        policies: args.policies.iter().map(|p| p.policy()).collect(),
        time_precision: args.time_precision.into(),
        minutes_per_turn: args.minutes_per_turn,
    };
    let progress = Progress::spinner(ctx, "running the stable-prefix benchmark");
    let report = memtape_bench::context::run(&config)?;
    progress.finish();
    crate::bench::write_report(&report, args.out.as_deref(), out)?;
    if !ctx.quiet {
        eprintln!("{}", report.summary());
    }
    Ok(())
}
