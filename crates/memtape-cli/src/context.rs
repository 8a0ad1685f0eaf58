//! `memtape context` (the prompt an agent would send its LLM for a session, within a token
//! budget) and `memtape bench context` (the stable-prefix benchmark).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use memtape::{
    Context, ContextConfig, ContextRequest, MateClaw, Message, Policy, Qanot, Role, TimePrecision,
};
use serde_json::Value;

use crate::{Cli, output, session_scope, write_report};

/// `memtape context SESSION …`
#[derive(Args, Clone, Debug)]
pub struct ContextArgs {
    /// The session key.
    session: String,
    /// The token budget: the most tokens the prompt may have (MateClaw's max input tokens).
    #[arg(long, default_value_t = memtape::context::DEFAULT_MAX_INPUT_TOKENS)]
    budget: usize,
    /// The compaction policy.
    #[arg(long, default_value = "mateclaw", value_parser = ["mateclaw", "qanot"])]
    policy: String,
    /// The agent's system prompt.
    #[arg(long, default_value = "", value_name = "TEXT")]
    system: String,
    /// The message being answered, when it is not on the tape (default: the user message
    /// that ends the session).
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
    #[arg(long, default_value = "hour", value_parser = ["day", "hour", "minute"])]
    time_precision: String,
    /// Print JSON: {"messages": [...], "tokens": N, ...}.
    #[arg(long)]
    json: bool,
}

fn policy(name: &str) -> Policy {
    match name {
        "qanot" => Policy::Qanot(Qanot::default()),
        _ => Policy::MateClaw(MateClaw::default()),
    }
}

fn precision(name: &str) -> TimePrecision {
    match name {
        "day" => TimePrecision::Day,
        "minute" => TimePrecision::Minute,
        _ => TimePrecision::Hour,
    }
}

/// Builds the context of a session and prints it. Records a new compaction on the
/// session's tape (so the next call reuses it) unless `--dry-run`.
pub fn context(cli: &Cli, args: &ContextArgs, out: &mut impl Write) -> Result<()> {
    let engine = crate::open(cli)?;
    let request = ContextRequest {
        system_prompt: args.system.clone(),
        message: args.message.clone().map(Message::user),
        config: ContextConfig {
            time_precision: precision(&args.time_precision),
            ..ContextConfig::new(args.budget, policy(&args.policy))
        },
        emergency: args.emergency,
        record: !args.dry_run,
    };
    let session = session_scope(cli, &args.session)?;
    let built = engine
        .context(&session, &request)
        .with_context(|| format!("building the context of {session}"))?;
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&context_json(&built)?)?
        )?;
    } else {
        print_human(&built, out)?;
    }
    Ok(())
}

/// The context as JSON: every field of [`Context`], with the messages as OpenAI chat
/// messages (the same shape as `history --json`).
fn context_json(context: &Context) -> Result<Value> {
    let mut value = serde_json::to_value(context)?;
    value["messages"] = Value::Array(context.messages.iter().map(output::chat_message).collect());
    Ok(value)
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
            head.push_str(&format!(" {name}"));
        }
        if let Some(id) = &m.tool_call_id {
            head.push_str(&format!(" answers {id}"));
        }
        head.push(']');
        writeln!(out, "\n{head}")?;
        for call in &m.tool_calls {
            writeln!(
                out,
                "(calls {} {}({}))",
                call.id, call.function.name, call.function.arguments
            )?;
        }
        let text = m.content_text();
        if !text.is_empty() || m.role != Role::Assistant {
            writeln!(out, "{text}")?;
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
    #[arg(long, value_delimiter = ',', default_values = ["mateclaw", "qanot"], value_parser = ["mateclaw", "qanot"])]
    policies: Vec<String>,
    /// How precisely the current time is written into the system message.
    #[arg(long, default_value = "hour", value_parser = ["day", "hour", "minute"])]
    time_precision: String,
    /// Minutes between turns.
    #[arg(long, default_value_t = 2)]
    minutes_per_turn: i64,
    /// Also write the JSON report here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Runs the stable-prefix benchmark and prints its report (and a summary on stderr).
pub fn bench(args: &ContextBenchArgs, out: &mut impl Write) -> Result<()> {
    let config = memtape_bench::context::Config {
        turns: args.turns,
        budget: args.budget,
        policies: args.policies.iter().map(|p| policy(p)).collect(),
        time_precision: precision(&args.time_precision),
        minutes_per_turn: args.minutes_per_turn,
    };
    let report = memtape_bench::context::run(&config)?;
    write_report(
        &serde_json::to_string_pretty(&report)?,
        args.out.as_deref(),
        out,
    )?;
    eprintln!("{}", report.summary());
    Ok(())
}
