//! The tape and session commands: `init`, `append`, `history`, `sessions`, `thread`,
//! `anchor`, `entries`, `consolidate`.

use std::io::Write;

use anyhow::{Context as _, Result, bail};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, ValueEnum};
use memtape::{
    AnchorRange, AppendOptions, Claim, EntryId, HistoryLimits, HistoryView, Kind, Message, Role,
    TapeQuery, ToolCall,
};
use serde_json::{Map, Value};

use crate::ctx::{Ctx, ScopeArgs, StoreArgs, existing_session, open, open_read_only};
use crate::output;

/// A chat role.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleArg {
    /// The person talking to the agent.
    User,
    /// The model.
    Assistant,
    /// Instructions to the model.
    System,
    /// A tool's answer to a call.
    Tool,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::User => Role::User,
            RoleArg::Assistant => Role::Assistant,
            RoleArg::System => Role::System,
            RoleArg::Tool => Role::Tool,
        }
    }
}

/// An entry kind.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindArg {
    /// A user or assistant message without tool calls.
    Message,
    /// An assistant message that calls tools.
    #[value(name = "tool_call")]
    ToolCall,
    /// A tool's answer.
    #[value(name = "tool_result")]
    ToolResult,
    /// A named boundary.
    Anchor,
    /// A named event (memory changes, pointer moves, ...).
    Event,
    /// A system message.
    System,
}

impl From<KindArg> for Kind {
    fn from(k: KindArg) -> Kind {
        match k {
            KindArg::Message => Kind::Message,
            KindArg::ToolCall => Kind::ToolCall,
            KindArg::ToolResult => Kind::ToolResult,
            KindArg::Anchor => Kind::Anchor,
            KindArg::Event => Kind::Event,
            KindArg::System => Kind::System,
        }
    }
}

/// `memtape init`.
#[derive(Args, Debug)]
pub struct InitArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `memtape append`.
#[derive(Args, Debug)]
pub struct AppendArgs {
    /// The session (conversation) key.
    session: String,
    /// Who wrote it.
    #[arg(long, value_enum)]
    role: RoleArg,
    /// The text; `-` reads standard input. Needed unless the message carries tool calls
    /// or files (`--content ""` appends an empty text on purpose).
    #[arg(long, allow_hyphen_values = true)]
    content: Option<String>,
    /// Tool calls, as a JSON list of OpenAI tool calls (assistant only).
    #[arg(long, value_name = "JSON")]
    tool_calls: Option<String>,
    /// The call a tool message answers.
    #[arg(long, value_name = "ID")]
    tool_call_id: Option<String>,
    /// A participant or tool name.
    #[arg(long)]
    name: Option<String>,
    /// The message this one follows (to regenerate an answer); default: the latest.
    #[arg(long, value_name = "ID")]
    parent: Option<EntryId>,
    /// Metadata to keep with the entry, as a JSON object.
    #[arg(long, value_name = "JSON")]
    meta: Option<String>,
    #[arg(long = "file", value_name = "FILE", help = crate::attach::FILE_HELP)]
    files: Vec<String>,
    /// Do not scan a user message into the working state (the WAL).
    #[arg(long)]
    no_wal: bool,
    /// Append once: run again with the same key (within 24 hours), it prints the first
    /// entry id and stores nothing (a UUID, say).
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape history`.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// The session key.
    session: String,
    /// At most this many messages.
    #[arg(long, default_value_t = 500)]
    max_messages: usize,
    /// At most this many tokens (cl100k).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Which history: `thread` (memtape's: the current thread under nanobot's rules) or
    /// `bub` (Bub's: the conversation after the last anchor). Default: the session's own
    /// (`bub` for sessions imported from Bub tapes or started with `memtape start`).
    #[arg(long, value_enum)]
    view: Option<ViewArg>,
    /// Print a JSON array of OpenAI chat messages.
    #[arg(long)]
    json: bool,
    /// The history as it was at this moment: an RFC 3339 time or an entry id.
    #[arg(long, value_name = "TIME|ID")]
    as_of: Option<memtape::AsOf>,
    /// How attached files are printed: `refs` (Dify's references: `files` in JSON, a
    /// `[file ...]` note in text), or rebuilt into content parts (`parts` or `openai`:
    /// OpenAI's, `anthropic`: Anthropic's; uploads as base64 data; implies --json), by
    /// `[attachments]` of memtape.toml (which file types, the image detail).
    #[arg(long, value_enum, default_value = "refs")]
    attachments: crate::attach::AttachmentsArg,
    #[command(flatten)]
    dify: crate::dify::DifyArgs,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// A history view.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewArg {
    /// memtape's: the unconsolidated tail of the current thread (nanobot's rules).
    Thread,
    /// Bub's: message, tool_call and tool_result entries after the last anchor.
    Bub,
}

impl From<ViewArg> for HistoryView {
    fn from(v: ViewArg) -> Self {
        match v {
            ViewArg::Thread => HistoryView::Thread,
            ViewArg::Bub => HistoryView::Bub,
        }
    }
}

/// `memtape sessions`.
#[derive(Args, Debug)]
pub struct SessionsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape usage`.
#[derive(Args, Debug)]
pub struct UsageArgs {
    /// Only calls made at or after this time (RFC 3339 or YYYY-MM-DD).
    #[arg(long)]
    since: Option<String>,
    /// Only calls made before this time.
    #[arg(long)]
    until: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape thread`.
#[derive(Args, Debug)]
pub struct ThreadArgs {
    /// The entry at the end of the thread (of this agent, or of --user).
    entry_id: EntryId,
    /// Print JSON entries.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape anchor`.
#[derive(Args, Debug)]
pub struct AnchorArgs {
    /// The session key.
    session: String,
    /// The anchor's name.
    name: String,
    /// State to carry, as a JSON object.
    #[arg(long, value_name = "JSON")]
    state: Option<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape entries`.
#[derive(Args, Debug)]
pub struct EntriesArgs {
    /// The session key.
    session: String,
    /// Only entries after the last anchor with this name.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["from_last_anchor", "between"])]
    after_anchor: Option<String>,
    /// Only entries after the last anchor.
    #[arg(long, conflicts_with = "between")]
    from_last_anchor: bool,
    /// Only entries between two named anchors.
    #[arg(long, num_args = 2, value_names = ["START", "END"])]
    between: Option<Vec<String>>,
    /// Only entries of these kinds (repeatable).
    #[arg(long = "kind", value_name = "KIND", value_enum)]
    kinds: Vec<KindArg>,
    /// Only entries from this time on (RFC 3339 or YYYY-MM-DD).
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Only entries before this time.
    #[arg(long, value_name = "T")]
    until: Option<String>,
    /// At most this many entries.
    #[arg(long)]
    limit: Option<usize>,
    /// Print JSON entries.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape consolidate`.
#[derive(Args, Debug)]
pub struct ConsolidateArgs {
    /// The session key.
    session: String,
    /// The last consolidated entry (0 to consolidate nothing).
    through: EntryId,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// Parses a JSON object flag.
pub fn json_object(what: &str, text: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str(text).with_context(|| format!("{what} is not valid JSON"))? {
        Value::Object(m) => Ok(m),
        other => bail!("{what} must be a JSON object, not {other}"),
    }
}

/// Parses a time flag: RFC 3339 or a day.
pub fn parse_time(what: &str, text: &str) -> Result<DateTime<Utc>> {
    if let Some(t) = memtape::parse_time(text) {
        return Ok(t);
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).context("midnight")?.and_utc());
    }
    bail!("{what} {text:?} is not a time (use RFC 3339, e.g. 2026-03-10T14:30:00Z, or YYYY-MM-DD)")
}

/// `memtape init`.
pub fn init(ctx: &Ctx, out: &mut impl Write) -> Result<()> {
    crate::ctx::init(ctx)?;
    writeln!(out, "memtape store ready at {}", ctx.tape_place()?)?;
    Ok(())
}

/// `memtape append`.
pub fn append(ctx: &Ctx, a: &AppendArgs, out: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let role = Role::from(a.role);
    let content = match a.content.as_deref() {
        Some("-") => {
            let text = crate::memory::text_arg("-")?;
            if text.is_empty() {
                bail!("--content -: standard input was empty; nothing was appended");
            }
            Some(text)
        }
        other => other.map(str::to_owned),
    };
    if content.is_none() && a.tool_calls.is_none() && a.files.is_empty() {
        bail!(
            "nothing to append: give the text with --content TEXT (`--content -` reads \
             standard input), or --tool-calls or --file"
        );
    }
    let mut message = Message::text(role, content.clone().unwrap_or_default());
    if let Some(calls) = &a.tool_calls {
        let calls: Vec<ToolCall> = serde_json::from_str(calls).context(
            "--tool-calls must be a JSON list of {id, type, function: {name, arguments}}",
        )?;
        if content.as_deref().is_none_or(str::is_empty) {
            message.content = None;
        }
        message.tool_calls = calls;
    }
    message.tool_call_id = a.tool_call_id.clone();
    message.name = a.name.clone();
    let owner = if role == Role::Assistant {
        memtape::FileOwner::Assistant
    } else {
        memtape::FileOwner::User
    };
    message.files = crate::attach::references(ctx, &a.files, owner)?;
    let options = AppendOptions {
        parent: a.parent,
        meta: a
            .meta
            .as_deref()
            .map(|m| json_object("--meta", m))
            .transpose()?
            .unwrap_or_default(),
    };
    let session = ctx.session_scope(&a.session)?;
    if let Some(key) = &a.idempotency_key {
        // What this append asks, so the key sent with another append is told apart.
        let print = serde_json::to_string(&(
            "append",
            session.to_string(),
            &message,
            &options.parent,
            &options.meta,
            a.no_wal,
        ))?;
        let store = engine.store();
        match store.claim_request(session.tenant(), key, &print, engine.now())? {
            Claim::Claimed => {}
            Claim::Answered {
                fingerprint, body, ..
            } if fingerprint == print => {
                out.write_all(&body)?;
                return Ok(());
            }
            Claim::Running { fingerprint } if fingerprint == print => bail!(
                "an append with --idempotency-key {key} is still running (or stopped before it \
                 finished): check the session's history before sending it with a new key"
            ),
            Claim::Running { .. } | Claim::Answered { .. } => bail!(
                "--idempotency-key {key} was used for another append in the last 24 hours: use \
                 a new key for a new message"
            ),
        }
        let entry = match engine.append(&session, message, options) {
            Ok(entry) => entry,
            Err(e) => {
                store.release_request(session.tenant(), key)?;
                return Err(e.into());
            }
        };
        store.finish_request(
            session.tenant(),
            key,
            200,
            format!("{}\n", entry.id).as_bytes(),
        )?;
        return capture_and_print(&engine, &entry, role == Role::User && !a.no_wal, out);
    }
    let entry = engine.append(&session, message, options)?;
    capture_and_print(&engine, &entry, role == Role::User && !a.no_wal, out)
}

/// Qanot's WAL over `entry` when `scan` (a user message is scanned before anyone answers
/// it, and what it captures names the message as its cause), then prints its id.
fn capture_and_print(
    engine: &memtape::Engine<memtape::DynStore>,
    entry: &memtape::Entry,
    scan: bool,
    out: &mut impl Write,
) -> Result<()> {
    if scan {
        engine.capture_entry(entry).with_context(|| {
            format!(
                "the message is stored as entry {}, but the WAL could not record what it found",
                entry.id
            )
        })?;
    }
    writeln!(out, "{}", entry.id)?;
    Ok(())
}

/// `memtape history`.
pub fn history(ctx: &Ctx, a: &HistoryArgs, out: &mut impl Write) -> Result<()> {
    let engine = open_read_only(ctx)?;
    let scope = existing_session(&engine, ctx, &a.session)?;
    if a.dify.is_set() {
        if a.as_of.is_some() {
            bail!(
                "--as-of reads memtape's or Bub's history; Dify's memory flags read the thread now"
            );
        }
        if a.view.is_some() {
            bail!(
                "--view chooses memtape's or Bub's history; Dify's memory flags read the thread: use one or the other"
            );
        }
        if a.attachments.format().is_some() {
            bail!(
                "--attachments rebuilds the messages of memtape's or Bub's history; Dify's memory flags print Dify's own: use one or the other"
            );
        }
        let (max, tokens) = (a.max_messages, a.max_tokens);
        return crate::dify::history(&engine, &scope, &a.dify, max, tokens, a.json, out);
    }
    let limits = HistoryLimits {
        max_messages: a.max_messages,
        max_tokens: a.max_tokens,
    };
    let as_of = a.as_of.as_ref();
    let view = match a.view {
        Some(v) => v.into(),
        None => engine.history_view_as_of(&scope, as_of)?,
    };
    let history = engine.history_in_as_of(&scope, &limits, view, as_of)?;
    if let Some(format) = a.attachments.format() {
        let files = crate::attach::files(ctx)?;
        let config = crate::config::load(ctx)?.attachments;
        let messages = history
            .iter()
            .filter_map(|e| e.message())
            .map(|m| crate::attach::message_json(m, Some(format), Some(&files), &config))
            .collect::<Result<Vec<_>>>()?;
        return output::json(out, &messages);
    }
    output::history(out, &history, a.json)?;
    Ok(())
}

/// `memtape sessions`.
pub fn sessions(ctx: &Ctx, a: &SessionsArgs, out: &mut impl Write) -> Result<()> {
    let engine = open_read_only(ctx)?;
    let sessions: Vec<_> = engine
        .sessions(&ctx.tenant)?
        .into_iter()
        .filter(|s| s.info.scope.agent_name() == ctx.agent)
        .filter(|s| ctx.user.is_none() || s.info.scope.user() == ctx.user.as_deref())
        .collect();
    if a.json {
        let list: Vec<output::SessionOut<'_>> =
            sessions.iter().map(output::SessionOut::of).collect();
        output::json(out, &list)?;
    } else {
        for s in &sessions {
            writeln!(out, "{}", output::session_line(s))?;
        }
    }
    Ok(())
}

/// `memtape usage`: the agent's model calls, summed by model and purpose.
pub fn usage(ctx: &Ctx, a: &UsageArgs, out: &mut impl Write) -> Result<()> {
    let engine = open_read_only(ctx)?;
    let time =
        |what: &str, t: &Option<String>| t.as_deref().map(|t| parse_time(what, t)).transpose();
    let lines = engine.llm_usage(
        &ctx.base_scope()?,
        time("--since", &a.since)?,
        time("--until", &a.until)?,
    )?;
    if a.json {
        let list: Vec<Value> = lines
            .iter()
            .map(|l| {
                serde_json::json!({
                    "model": l.model, "purpose": l.purpose, "calls": l.calls, "failed": l.failed,
                    "prompt_tokens": l.prompt_tokens, "completion_tokens": l.completion_tokens,
                })
            })
            .collect();
        return output::json(out, &list);
    }
    if lines.is_empty() {
        writeln!(out, "no model calls recorded for agent {}", ctx.agent)?;
    }
    for l in &lines {
        writeln!(
            out,
            "{}  {}  {} calls ({} failed)  {} prompt + {} reply tokens",
            l.model, l.purpose, l.calls, l.failed, l.prompt_tokens, l.completion_tokens
        )?;
    }
    Ok(())
}

/// `memtape thread`.
pub fn thread(ctx: &Ctx, a: &ThreadArgs, out: &mut impl Write) -> Result<()> {
    let engine = open_read_only(ctx)?;
    let thread = engine.thread(&ctx.base_scope()?, a.entry_id)?;
    output::entries(out, &thread, a.json)
}

/// `memtape anchor`.
pub fn anchor(ctx: &Ctx, a: &AnchorArgs, out: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let state = a
        .state
        .as_deref()
        .map(|s| json_object("--state", s))
        .transpose()?;
    let entry = engine.anchor(&ctx.session_scope(&a.session)?, &a.name, state)?;
    writeln!(out, "{}", entry.id)?;
    Ok(())
}

/// `memtape entries`.
pub fn entries(ctx: &Ctx, a: &EntriesArgs, out: &mut impl Write) -> Result<()> {
    let engine = open_read_only(ctx)?;
    let range = match (&a.after_anchor, a.from_last_anchor, &a.between) {
        (Some(name), _, _) => AnchorRange::After(name.clone()),
        (_, true, _) => AnchorRange::FromLast,
        (_, _, Some(pair)) => AnchorRange::Between(pair[0].clone(), pair[1].clone()),
        _ => AnchorRange::All,
    };
    let query = TapeQuery {
        range,
        kinds: a.kinds.iter().map(|k| Kind::from(*k)).collect(),
        since: a
            .since
            .as_deref()
            .map(|t| parse_time("--since", t))
            .transpose()?,
        until: a
            .until
            .as_deref()
            .map(|t| parse_time("--until", t))
            .transpose()?,
        limit: a.limit,
        ..TapeQuery::default()
    };
    let scope = existing_session(&engine, ctx, &a.session)?;
    let found = engine.query(&scope, &query)?;
    output::entries(out, &found, a.json)
}

/// `memtape consolidate`.
pub fn consolidate(ctx: &Ctx, a: &ConsolidateArgs, out: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let entry = engine.mark_consolidated(&ctx.session_scope(&a.session)?, a.through)?;
    writeln!(out, "{}", entry.id)?;
    Ok(())
}
