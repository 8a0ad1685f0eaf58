//! The memory commands: `memory` (Bub's tools, versions, diff, undo, prune), `files` (the
//! Anthropic and MateClaw file tools), `sync` (the markdown workspace) and `wal scan`.
//! Each runs through the same tool registry the servers expose.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use memtape::memory::diff;
use memtape::{AsOf, DynStore, Engine, Prefer, Scope, SyncReport, workspace_dir};
use serde::Serialize;
use serde_json::{Value, json};

use crate::config;
use crate::ctx::{Ctx, ModelArgs, ScopeArgs, existing_session, open, open_read_only};
use crate::output::{self, escape};
use crate::retrieval;

/// `memtape memory`: the scope options, then the subcommand.
#[derive(Args, Debug)]
pub struct MemoryArgs {
    #[command(subcommand)]
    pub command: MemoryCommand,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// The session a change of memory is made in (`--session`).
#[derive(Args, Clone, Debug, Default)]
pub struct MadeIn {
    /// The session the change is made in, as an agent's tool call would be: a Bub session
    /// (`memtape start S`) gets the new memory zone on its tape.
    #[arg(long)]
    session: Option<String>,
}

impl MadeIn {
    /// The scope the tool call runs in: the session when one is named (it must exist),
    /// else the memory's own scope.
    fn scope(&self, engine: &Engine<DynStore>, ctx: &Ctx, memory: &Scope) -> Result<Scope> {
        match &self.session {
            Some(s) => existing_session(engine, ctx, s),
            None => Ok(memory.clone()),
        }
    }
}

/// `memtape files`: the scope options, then the subcommand.
#[derive(Args, Debug)]
pub struct FilesArgs {
    #[command(subcommand)]
    pub command: FilesCommand,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// Which side wins a sync conflict.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreferArg {
    /// Record the file on disk.
    Disk,
    /// Write the tape's version over the file.
    Tape,
}

/// `memtape memory …`: the scope's memory tiers.
#[derive(Subcommand, Clone, Debug)]
pub enum MemoryCommand {
    /// Show the memory: its version, its files and long-term memory.
    Show {
        /// Print every file as JSON.
        #[arg(long)]
        json: bool,
        /// The memory as it was at this moment: an RFC 3339 time or an entry id.
        #[arg(long, value_name = "TIME|ID")]
        as_of: Option<AsOf>,
    },
    /// Each line of a memory file with the version that wrote it and the conversation
    /// entries (tool call, captured message, consolidated span, model call) that caused it,
    /// like `git blame`.
    Blame {
        /// The file (MEMORY.md, SESSION-STATE.md, memories/notes.md, …).
        path: String,
        /// The file as it was at this moment: an RFC 3339 time or an entry id.
        #[arg(long, value_name = "TIME|ID")]
        as_of: Option<AsOf>,
        /// Print JSON lines (one per line of the file).
        #[arg(long)]
        json: bool,
    },
    /// Replace long-term memory (MEMORY.md). CONTENT `-` reads standard input.
    Save {
        /// The new long-term memory.
        #[arg(allow_hyphen_values = true)]
        content: String,
        #[command(flatten)]
        made_in: MadeIn,
    },
    /// Append to the daily notes (memory/YYYY-MM-DD.md). CONTENT `-` reads standard input.
    Daily {
        /// The note.
        #[arg(allow_hyphen_values = true)]
        content: String,
        /// The day (YYYY-MM-DD; default today).
        #[arg(long)]
        date: Option<String>,
        #[command(flatten)]
        made_in: MadeIn,
    },
    /// Recall long-term memory and recent daily notes, or the lines matching QUERY.
    Recall {
        /// What to look for.
        #[arg(allow_hyphen_values = true)]
        query: Option<String>,
        /// How many days of daily notes.
        #[arg(long, default_value_t = 7)]
        days: u32,
        /// Only this memory file (e.g. HISTORY.md), or the files of a folder ending in /:
        /// its lines matching the query, or without one its text.
        #[arg(long, value_name = "PATH")]
        file: Option<String>,
        #[command(flatten)]
        models: ModelArgs,
    },
    /// Search long-term memory, the last 30 days of notes, the working state, /memories
    /// and the event history (HISTORY.md).
    Search {
        /// What to look for.
        #[arg(allow_hyphen_values = true)]
        query: String,
        /// At most this many lines.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Only this memory file (e.g. HISTORY.md), or the files of a folder ending in /,
        /// as grep would.
        #[arg(long, value_name = "PATH")]
        file: Option<String>,
        #[command(flatten)]
        models: ModelArgs,
    },
    /// Forget memory changes (the ids `memory versions` lists), as if never made.
    Forget {
        /// The changes, as `memory versions` prints them: a version (`v3`) or the
        /// change's entry id (`#7`, or `7`).
        #[arg(required = true)]
        ids: Vec<ChangeRef>,
    },
    /// Clear every memory file (earlier versions stay and can be restored with undo).
    Clear {
        #[command(flatten)]
        made_in: MadeIn,
    },
    /// List the versions of the memory, or of one file.
    Versions {
        /// Only the versions that touched this file.
        path: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show what changed between two versions, as a unified diff.
    Diff {
        /// The older version (`3` or `v3`).
        from: Version,
        /// The newer version.
        to: Version,
    },
    /// Bring the memory back to how it was at a version (recorded as a new version).
    Undo {
        /// The version to return to (`3` or `v3`, as `memory versions` prints it).
        version: Version,
    },
    /// Remove daily notes older than the retention period.
    Prune {
        /// Keep this many days of daily notes.
        #[arg(long, default_value_t = 30)]
        days: u32,
    },
    /// Consolidate a session now with the configured model (nanobot): the messages before
    /// the newest half window go to HISTORY.md and MEMORY.md, and the pointer moves past
    /// them. Prints {through, history_entry, memory_changed, messages, dropped} as JSON;
    /// on any failure exits non-zero with nothing changed.
    Consolidate {
        /// The session key.
        session: String,
        /// Consolidate every unconsolidated message (what /new does before clearing).
        #[arg(long)]
        all: bool,
    },
    /// List the facts that model rewrites of MEMORY.md or PROFILE.md dropped (newest
    /// first), each with the id `memory restore` takes and whether the file has it again.
    Dropped {
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Run MateClaw's extraction on a session now with the configured model (the cooldown
    /// is skipped; the 4-message floor and the lock are not). Prints what it did as JSON.
    Extract {
        /// The session key.
        session: String,
        /// Run as MateClaw's post-conversation trigger of a conversation from this source
        /// (web, channel or cron): every pre-check, the cooldown and skip_cron apply.
        /// Without it the run is manual.
        #[arg(long, value_name = "web|channel|cron")]
        source: Option<memtape::Source>,
    },
    /// Run MateClaw's emergence now: the newest daily notes merged into MEMORY.md by the
    /// configured model (waits for an extraction or emergence of this memory running
    /// elsewhere). Prints what it did as JSON.
    Emerge {
        /// How many of the newest daily notes to read (default: [lifecycle.emergence] days, 7).
        #[arg(long)]
        days: Option<usize>,
    },
    /// List the prompt templates (name, the variables each takes, whether this agent
    /// overrides it with prompts/NAME.md), or print one as this agent has it.
    Prompts {
        /// A template's name.
        name: Option<String>,
    },
    /// Put a dropped fact back into its file (in its old section when the file has it).
    Restore {
        /// The dropped fact's id (from `memory dropped`).
        id: u64,
    },
}

/// `memtape files …`: memory files by path, with Anthropic's memory tool (view, create,
/// str_replace, insert, delete, rename; paths under /memories) and MateClaw's workspace
/// tools (list, read, write, edit; .md paths, /memories/… accepted).
#[derive(Subcommand, Clone, Debug)]
pub enum FilesCommand {
    /// Show a file with line numbers, or list a folder two levels deep.
    View {
        /// A path under /memories.
        path: String,
        /// Only these lines: START END (END -1 reads to the end).
        #[arg(long, num_args = 2, value_names = ["START", "END"], allow_negative_numbers = true)]
        range: Option<Vec<i64>>,
        /// The file as it was at this moment: an RFC 3339 time or an entry id.
        #[arg(long, value_name = "TIME|ID")]
        as_of: Option<AsOf>,
    },
    /// Create or replace a file. FILE_TEXT `-` reads standard input.
    Create {
        /// A path under /memories.
        path: String,
        /// The file's content.
        #[arg(allow_hyphen_values = true)]
        file_text: String,
    },
    /// Replace the one occurrence of OLD with NEW.
    #[command(name = "str_replace")]
    StrReplace {
        /// A path under /memories.
        path: String,
        /// The exact text to replace.
        #[arg(allow_hyphen_values = true)]
        old: String,
        /// What replaces it.
        #[arg(allow_hyphen_values = true)]
        new: String,
    },
    /// Insert TEXT after line LINE (0: before the first line).
    Insert {
        /// A path under /memories.
        path: String,
        /// The line after which to insert.
        line: i64,
        /// The text.
        #[arg(allow_hyphen_values = true)]
        text: String,
    },
    /// Delete a file or folder.
    Delete {
        /// A path under /memories.
        path: String,
    },
    /// Rename a file or folder.
    Rename {
        /// The current path.
        old: String,
        /// The new path.
        new: String,
    },
    /// List the workspace's files (JSON), optionally those starting with PREFIX.
    List {
        /// Only paths starting with this.
        prefix: Option<String>,
        /// The files as they were at this moment: an RFC 3339 time or an entry id.
        #[arg(long, value_name = "TIME|ID")]
        as_of: Option<AsOf>,
    },
    /// Read a file (JSON with its content, size, flag and update time).
    Read {
        /// A .md path (MEMORY.md, memory/2026-04-01.md, /memories/notes.md).
        path: String,
        /// The file as it was at this moment: an RFC 3339 time or an entry id.
        #[arg(long, value_name = "TIME|ID")]
        as_of: Option<AsOf>,
    },
    /// Write a whole file. CONTENT `-` reads standard input.
    Write {
        /// A .md path.
        path: String,
        /// The file's content.
        #[arg(allow_hyphen_values = true)]
        content: String,
    },
    /// Replace OLD with NEW: one occurrence, or all with --replace-all.
    Edit {
        /// A .md path.
        path: String,
        /// The exact text to replace.
        #[arg(allow_hyphen_values = true)]
        old: String,
        /// What replaces it.
        #[arg(allow_hyphen_values = true)]
        new: String,
        /// Replace every occurrence.
        #[arg(long)]
        replace_all: bool,
    },
}

/// `memtape sync`'s arguments.
#[derive(clap::Args, Clone, Debug)]
pub struct SyncArgs {
    /// The workspace folder (default: DATA_DIR/workspace/TENANT/AGENT/shared, or
    /// …/AGENT/users/USER with --user).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep syncing until stopped.
    #[arg(long)]
    watch: bool,
    /// Seconds between syncs in watch mode.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Settle conflicts: `disk` records the file, `tape` overwrites it.
    #[arg(long, value_enum)]
    prefer: Option<PreferArg>,
    /// Print each sync's report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape wal …`.
#[derive(Subcommand, Clone, Debug)]
pub enum WalCommand {
    /// Show what the WAL would capture from a message.
    Scan {
        /// The message.
        #[arg(allow_hyphen_values = true)]
        text: String,
        /// Print a JSON list of {category, text}.
        #[arg(long)]
        json: bool,
    },
    /// Record the WAL capture of stored user messages that have none yet (a capture that
    /// failed, e.g. on a full disk, and was still waiting when a server stopped: the
    /// server names them in its log). Never records one twice.
    Capture(WalCaptureArgs),
    /// Precision and recall per category on a labelled set: JSON lines of
    /// {"text", "labels": [categories]} (e.g. crates/memtape-core/tests/data/wal-labelled.jsonl).
    Eval {
        /// The labelled set.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `memtape wal capture`.
#[derive(Args, Clone, Debug)]
pub struct WalCaptureArgs {
    /// The ids of the user messages (entries of the tenant).
    #[arg(required = true)]
    pub ids: Vec<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape wal capture`: each entry's capture recorded if it has none (never twice).
pub fn wal_capture(ctx: &Ctx, args: &WalCaptureArgs, out: &mut impl Write) -> Result<()> {
    use memtape::Store;
    let engine = open(ctx)?;
    let mut rows = Vec::new();
    for &id in &args.ids {
        let id = memtape::EntryId::new(id)?;
        let outcome = if engine.store().get(&ctx.tenant, id)?.is_none() {
            "no such entry"
        } else {
            match engine.recapture(&ctx.tenant, id)? {
                Some(c) if c.recorded.is_some() => "recorded",
                Some(_) => "already captured",
                None => "nothing to capture",
            }
        };
        rows.push((id, outcome));
    }
    if args.json {
        let list: Vec<Value> = rows
            .iter()
            .map(|(id, outcome)| json!({"id": id.0, "outcome": outcome}))
            .collect();
        output::json(out, &list)?;
    } else {
        for (id, outcome) in rows {
            writeln!(out, "{id}: {outcome}")?;
        }
    }
    Ok(())
}

/// Reads CONTENT, or standard input when it is `-`.
pub(crate) fn text_arg(value: &str) -> Result<String> {
    if value != "-" {
        return Ok(value.to_owned());
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading standard input")?;
    Ok(text)
}

/// Runs a tool; its refusal is this command's error.
fn tool(
    engine: &Engine<DynStore>,
    scope: &Scope,
    name: &str,
    input: Value,
    out: &mut impl Write,
) -> Result<()> {
    tool_as_of(engine, scope, name, input, None, out)
}

/// [`tool`] on memory as it was at `as_of` (only the reading tools).
fn tool_as_of(
    engine: &Engine<DynStore>,
    scope: &Scope,
    name: &str,
    input: Value,
    as_of: Option<&AsOf>,
    out: &mut impl Write,
) -> Result<()> {
    let result = engine.call_tool_as_of(scope, name, &input, as_of)?;
    if result.is_error {
        // The text is written for a model ("Error: …"); main adds the one prefix.
        let text = result.text.strip_prefix("Error: ").unwrap_or(&result.text);
        bail!("{}", escape(text, false));
    }
    writeln!(out, "{}", escape(&result.text, false))?;
    Ok(())
}

/// The engine, with the search index attached when one was built, so memory search runs
/// through it; without one, memory search is a substring match.
fn engine_for_search(ctx: &Ctx) -> Result<Engine<DynStore>> {
    let dir = ctx.data_dir()?;
    if memtape::Index::exists_in(&dir) {
        retrieval::open_indexed(ctx, &retrieval::Tuning::default())
    } else {
        open(ctx)
    }
}

/// A memory file on the wire.
#[derive(Serialize)]
struct FileOut<'a> {
    content: &'a str,
    enabled: bool,
    sort_order: i64,
    version: u64,
    updated_at: String,
}

/// The memory on the wire.
#[derive(Serialize)]
struct MemoryOut<'a> {
    scope: String,
    version: u64,
    #[serde(serialize_with = "as_object")]
    files: Vec<(&'a str, FileOut<'a>)>,
}

/// Serializes path-file pairs as one JSON object, in their order.
fn as_object<S: serde::Serializer>(
    files: &[(&str, FileOut<'_>)],
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_map(files.iter().map(|(k, v)| (k, v)))
}

/// A memory version on the wire.
#[derive(Serialize)]
struct VersionOut<'a, T: Serialize> {
    version: u64,
    id: u64,
    at: String,
    source: &'a str,
    ops: &'a T,
    /// The erasure that took this version's content (it applies nothing since).
    #[serde(skip_serializing_if = "Option::is_none")]
    erased_by: Option<u64>,
}

/// A sync report on the wire.
#[derive(Serialize)]
struct SyncOut<'a> {
    recorded: &'a [String],
    version: Option<u64>,
    written: &'a [String],
    removed: &'a [String],
    conflicts: Vec<ConflictOut<'a>>,
    skipped: Vec<SkippedOut<'a>>,
}

/// A file changed on both sides, with both versions (`None`: deleted on that side).
#[derive(Serialize)]
struct ConflictOut<'a> {
    path: &'a str,
    disk: Option<&'a str>,
    tape: Option<&'a str>,
}

/// A file sync skipped, and why.
#[derive(Serialize)]
struct SkippedOut<'a> {
    path: &'a str,
    why: &'a str,
}

/// A WAL capture on the wire.
#[derive(Serialize)]
struct CaptureOut<'a> {
    category: &'a str,
    text: &'a str,
}

/// `memtape memory …`.
pub fn memory(ctx: &Ctx, command: &MemoryCommand, out: &mut impl Write) -> Result<()> {
    let scope = ctx.base_scope()?;
    match command {
        MemoryCommand::Recall {
            query,
            days,
            file,
            models,
        } => {
            let ctx = ctx.clone().models(models);
            let engine = match query {
                Some(_) => engine_for_search(&ctx)?,
                None => open(&ctx)?,
            };
            return tool(
                &engine,
                &scope,
                "memory.recall",
                json!({"query": query, "days": days, "file": file}),
                out,
            );
        }
        MemoryCommand::Search {
            query,
            limit,
            file,
            models,
        } => {
            let engine = engine_for_search(&ctx.clone().models(models))?;
            return tool(
                &engine,
                &scope,
                "memory_search",
                json!({"query": query, "limit": limit, "file": file}),
                out,
            );
        }
        _ => {}
    }
    // Reading memory writes nothing, so it works on a full or read-only disk.
    let engine = match command {
        MemoryCommand::Show { .. }
        | MemoryCommand::Blame { .. }
        | MemoryCommand::Versions { .. }
        | MemoryCommand::Diff { .. }
        | MemoryCommand::Dropped { .. }
        | MemoryCommand::Prompts { .. } => open_read_only(ctx)?,
        _ => open(ctx)?,
    };
    match command {
        MemoryCommand::Show { json, as_of } => {
            if *json {
                let view = engine.memory_as_of(&scope, as_of.as_ref())?;
                let files: Vec<(&str, FileOut<'_>)> = view
                    .files
                    .iter()
                    .map(|(path, f)| {
                        let file = FileOut {
                            content: &f.content,
                            enabled: f.enabled,
                            sort_order: f.sort_order,
                            version: f.updated,
                            updated_at: f.updated_at.to_rfc3339(),
                        };
                        (path.as_str(), file)
                    })
                    .collect();
                let (log, _) = engine.memory_log(&scope)?;
                let version = log.version_as_of(as_of.as_ref());
                output::json(
                    out,
                    &MemoryOut {
                        scope: scope.to_string(),
                        version,
                        files,
                    },
                )?;
            } else {
                tool_as_of(
                    &engine,
                    &scope,
                    "memory.show",
                    json!({}),
                    as_of.as_ref(),
                    out,
                )?;
            }
        }
        MemoryCommand::Blame { path, as_of, json } => {
            blame(&engine, &scope, path, as_of.as_ref(), *json, out)?;
        }
        MemoryCommand::Save { content, made_in } => tool(
            &engine,
            &made_in.scope(&engine, ctx, &scope)?,
            "memory.save",
            json!({"content": text_arg(content)?}),
            out,
        )?,
        MemoryCommand::Daily {
            content,
            date,
            made_in,
        } => tool(
            &engine,
            &made_in.scope(&engine, ctx, &scope)?,
            "memory.daily",
            json!({"content": text_arg(content)?, "date": date}),
            out,
        )?,
        MemoryCommand::Forget { ids } => {
            let (log, _) = engine.memory_log(&scope)?;
            let ids = ids
                .iter()
                .map(|r| match *r {
                    ChangeRef::Entry(id) => Ok(id),
                    ChangeRef::Version(v) => log
                        .versions(None)
                        .into_iter()
                        .find(|x| x.version == v)
                        .map(|x| x.id.0)
                        .with_context(|| {
                            format!(
                                "there is no version v{v}: the memory of {scope} has {} version(s)",
                                log.version()
                            )
                        }),
                })
                .collect::<Result<Vec<u64>>>()?;
            tool(&engine, &scope, "memory.forget", json!({"ids": ids}), out)?;
        }
        MemoryCommand::Clear { made_in } => tool(
            &engine,
            &made_in.scope(&engine, ctx, &scope)?,
            "memory.clear",
            json!({}),
            out,
        )?,
        MemoryCommand::Versions { path, json } => {
            let (log, _) = engine.memory_log(&scope)?;
            for r in log.versions(path.as_deref()) {
                let paths = r.change.paths();
                if *json {
                    // One version a line (JSON lines), compact however it is printed.
                    let at = r.at.to_rfc3339();
                    let line = VersionOut {
                        version: r.version,
                        id: r.id.0,
                        at,
                        source: &r.change.source,
                        ops: &r.change.ops,
                        erased_by: r.erased.map(|x| x.0),
                    };
                    writeln!(out, "{}", serde_json::to_string(&line)?)?;
                } else {
                    writeln!(
                        out,
                        "v{}\t#{}\t{}\t{}\t{}",
                        r.version,
                        r.id,
                        r.at.format("%Y-%m-%d %H:%M:%S"),
                        match r.erased {
                            Some(by) => format!("[erased by #{by}]"),
                            None => r.change.source.clone(),
                        },
                        paths.join(" ")
                    )?;
                }
            }
        }
        MemoryCommand::Diff {
            from: Version(from),
            to: Version(to),
        } => {
            let (log, _) = engine.memory_log(&scope)?;
            for v in [from, to] {
                if *v > log.version() {
                    bail!(
                        "there is no version {v}: the memory of {scope} has {} version(s)",
                        log.version()
                    );
                }
            }
            write!(out, "{}", diff(&log.view_at(*from), &log.view_at(*to)))?;
        }
        MemoryCommand::Undo {
            version: Version(version),
        } => match engine.undo_memory(&scope, *version)? {
            Some(r) => writeln!(
                out,
                "memory is back to version {version}, recorded as version {}",
                r.version
            )?,
            None => writeln!(out, "memory already matches version {version}")?,
        },
        MemoryCommand::Prune { days } => {
            let n = engine.prune_daily(&scope, *days)?;
            writeln!(out, "removed {n} daily note(s) older than {days} days")?;
        }
        MemoryCommand::Consolidate { session, all } => {
            let config = config::load(ctx)?;
            let llm = config.require_llm()?;
            let session = existing_session(&engine, ctx, session)?;
            let done =
                engine.consolidate(&session, llm.as_ref(), config.lifecycle.consolidation(*all))?;
            output::json(out, &done)?;
        }
        MemoryCommand::Extract { session, source } => {
            let config = config::load(ctx)?;
            let llm = config.require_llm()?;
            let session = existing_session(&engine, ctx, session)?;
            let trigger = source.map_or(memtape::Trigger::Manual, memtape::Source::trigger);
            let run = engine.extract(
                &session,
                llm.as_ref(),
                &config.lifecycle.extraction,
                trigger,
            )?;
            output::json(out, &run)?;
        }
        MemoryCommand::Emerge { days } => {
            let config = config::load(ctx)?;
            let llm = config.require_llm()?;
            let run = engine.emerge(
                &scope,
                llm.as_ref(),
                &config.lifecycle.emergence,
                *days,
                memtape::Wait::Block,
            )?;
            output::json(out, &run)?;
        }
        MemoryCommand::Prompts { name } => {
            let agent = engine.memory(&scope.agent_scope())?;
            match name {
                None => {
                    for t in memtape::prompts::TEMPLATES {
                        let own = agent
                            .content(&t.path())
                            .is_some_and(|c| !c.trim().is_empty());
                        let vars: Vec<String> = t.vars.iter().map(|v| format!("{{{v}}}")).collect();
                        writeln!(
                            out,
                            "{}\t{}\t{}",
                            t.name,
                            if vars.is_empty() {
                                "-".into()
                            } else {
                                vars.join(" ")
                            },
                            if own { t.path() } else { "default".into() }
                        )?;
                    }
                }
                Some(name) => {
                    let Some(t) = memtape::prompts::TEMPLATES.iter().find(|t| t.name == name)
                    else {
                        let names: Vec<&str> =
                            memtape::prompts::TEMPLATES.iter().map(|t| t.name).collect();
                        bail!(
                            "no template {name:?}; the templates are {}",
                            names.join(", ")
                        );
                    };
                    writeln!(
                        out,
                        "{}",
                        memtape::prompts::template_text(&agent, t).trim_end()
                    )?;
                }
            }
        }
        MemoryCommand::Dropped { json } => {
            for d in engine.dropped_facts(&scope)? {
                if *json {
                    writeln!(out, "{}", serde_json::to_string(&d)?)?;
                } else {
                    let state = if d.present { "back" } else { "dropped" };
                    writeln!(
                        out,
                        "#{}\t{}\t{}\tv{} by {}\t{}\t{}",
                        d.id,
                        d.at.format("%Y-%m-%d %H:%M:%S"),
                        state,
                        d.fact.version,
                        escape(&d.fact.by, false),
                        escape(&d.fact.path, false),
                        escape(&d.fact.text, false)
                    )?;
                }
            }
        }
        MemoryCommand::Restore { id } => {
            match engine.restore_dropped(&scope, memtape::EntryId(*id))? {
                Some(r) => writeln!(
                    out,
                    "restored into {}, recorded as version {}",
                    r.change.paths().join(" "),
                    r.version
                )?,
                None => writeln!(out, "the file already has that fact; nothing changed")?,
            }
        }
        MemoryCommand::Recall { .. } | MemoryCommand::Search { .. } => {}
    }
    Ok(())
}

/// A MateClaw path: `/memories/x.md` is the workspace file `memories/x.md`.
fn workspace_path(path: &str) -> String {
    match path.strip_prefix("/memories/") {
        Some(rest) => format!("memories/{rest}"),
        None => path.to_owned(),
    }
}

/// `memtape files …`.
pub fn files(ctx: &Ctx, command: &FilesCommand, out: &mut impl Write) -> Result<()> {
    let engine = match command {
        FilesCommand::View { .. } | FilesCommand::List { .. } | FilesCommand::Read { .. } => {
            open_read_only(ctx)?
        }
        _ => open(ctx)?,
    };
    let scope = ctx.base_scope()?;
    let as_of = match command {
        FilesCommand::View { as_of, .. }
        | FilesCommand::List { as_of, .. }
        | FilesCommand::Read { as_of, .. } => as_of.as_ref(),
        _ => None,
    };
    let (name, input) = match command {
        FilesCommand::View { path, range, .. } => {
            let mut input = json!({"command": "view", "path": path});
            if let Some(r) = range {
                input["view_range"] = json!(r);
            }
            ("memory", input)
        }
        FilesCommand::Create { path, file_text } => (
            "memory",
            json!({"command": "create", "path": path, "file_text": text_arg(file_text)?}),
        ),
        FilesCommand::StrReplace { path, old, new } => (
            "memory",
            json!({"command": "str_replace", "path": path, "old_str": old, "new_str": new}),
        ),
        FilesCommand::Insert { path, line, text } => (
            "memory",
            json!({"command": "insert", "path": path, "insert_line": line, "insert_text": text}),
        ),
        FilesCommand::Delete { path } => ("memory", json!({"command": "delete", "path": path})),
        FilesCommand::Rename { old, new } => (
            "memory",
            json!({"command": "rename", "old_path": old, "new_path": new}),
        ),
        FilesCommand::List { prefix, .. } => (
            "list_workspace_memory_files",
            json!({"filenamePrefix": prefix.as_deref().map(workspace_path)}),
        ),
        FilesCommand::Read { path, .. } => (
            "read_workspace_memory_file",
            json!({"filename": workspace_path(path)}),
        ),
        FilesCommand::Write { path, content } => (
            "write_workspace_memory_file",
            json!({"filename": workspace_path(path), "content": text_arg(content)?}),
        ),
        FilesCommand::Edit {
            path,
            old,
            new,
            replace_all,
        } => (
            "edit_workspace_memory_file",
            json!({"filename": workspace_path(path), "oldText": old, "newText": new,
                   "replaceAll": replace_all}),
        ),
    };
    tool_as_of(&engine, &scope, name, input, as_of, out)
}

/// One blamed line on the wire (`memory blame --json`).
#[derive(Serialize)]
struct BlameOut<'a> {
    line: usize,
    text: &'a str,
    version: u64,
    id: u64,
    at: String,
    source: &'a str,
    causes: Vec<CauseOut<'a>>,
}

/// An entry that caused a line's version.
#[derive(Serialize)]
struct CauseOut<'a> {
    id: u64,
    kind: String,
    session: Option<&'a str>,
    user: Option<&'a str>,
    at: String,
    /// The erasure (its receipt) that took this cause's content, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    erased_by: Option<u64>,
    text: String,
}

/// `memtape memory blame`.
fn blame(
    engine: &Engine<DynStore>,
    scope: &Scope,
    path: &str,
    as_of: Option<&AsOf>,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let path = workspace_path(path);
    let Some(blame) = engine.blame(scope, &path, as_of)? else {
        match as_of {
            Some(m) => bail!("{path} did not exist in the memory of {scope} as of {m}"),
            None => bail!("there is no {path} in the memory of {scope}"),
        }
    };
    for l in &blame.lines {
        let causes: Vec<&memtape::Entry> = l
            .origin
            .change
            .caused_by
            .iter()
            .filter_map(|id| blame.causes.get(id))
            .collect();
        if json {
            let line = BlameOut {
                line: l.line,
                text: &l.text,
                version: l.origin.version,
                id: l.origin.id.0,
                at: l.origin.at.to_rfc3339(),
                source: &l.origin.change.source,
                causes: causes
                    .iter()
                    .map(|e| CauseOut {
                        id: e.id.0,
                        kind: e.kind().to_string(),
                        session: e.scope.session(),
                        user: e.scope.user(),
                        at: e.created_at.to_rfc3339(),
                        erased_by: e.erased.map(|x| x.by.0),
                        text: e
                            .payload
                            .search_text()
                            .unwrap_or_default()
                            .chars()
                            .take(200)
                            .collect(),
                    })
                    .collect(),
            };
            writeln!(out, "{}", serde_json::to_string(&line)?)?;
        } else {
            let shown: Vec<String> = causes
                .iter()
                .map(|e| {
                    let at = match e.scope.session() {
                        Some(s) => format!("#{}@{}", e.id, escape(s, false)),
                        None => format!("#{}", e.id),
                    };
                    match e.erased {
                        Some(x) if x.is_whole() => format!("{at} [erased by #{}]", x.by),
                        Some(x) => format!("{at} [redacted by #{}]", x.by),
                        None => at,
                    }
                })
                .collect();
            writeln!(
                out,
                "v{}\t{}\t{}\t{}\t{:>4}| {}",
                l.origin.version,
                l.origin.at.format("%Y-%m-%d %H:%M"),
                escape(&l.origin.change.source, false),
                if shown.is_empty() {
                    "-".to_owned()
                } else {
                    shown.join(",")
                },
                l.line,
                escape(&l.text, false)
            )?;
        }
    }
    Ok(())
}

fn print_report(report: &SyncReport, json: bool, out: &mut impl Write) -> Result<()> {
    if json {
        // One report a line (JSON lines in watch mode), compact however it is printed.
        let wire = SyncOut {
            recorded: &report.recorded,
            version: report.version,
            written: &report.written,
            removed: &report.removed,
            conflicts: report
                .conflicts
                .iter()
                .map(|c| ConflictOut {
                    path: &c.path,
                    disk: c.disk.as_deref(),
                    tape: c.tape.as_deref(),
                })
                .collect(),
            skipped: report
                .skipped
                .iter()
                .map(|(path, why)| SkippedOut { path, why })
                .collect(),
        };
        writeln!(out, "{}", serde_json::to_string(&wire)?)?;
        return Ok(());
    }
    if !report.recorded.is_empty() {
        let version = report
            .version
            .map_or(String::new(), |v| format!(" as version {v}"));
        writeln!(out, "recorded {}{version}", report.recorded.join(", "))?;
    }
    for path in &report.written {
        writeln!(out, "wrote {path}")?;
    }
    for path in &report.removed {
        writeln!(out, "removed {path}")?;
    }
    for (path, why) in &report.skipped {
        writeln!(out, "skipped {path}: {why}")?;
    }
    for c in &report.conflicts {
        writeln!(
            out,
            "conflict: {} changed on disk and on the tape since the last sync; \
             keep one side with --prefer disk or --prefer tape",
            c.path
        )?;
    }
    Ok(())
}

/// `memtape sync`.
pub fn sync(ctx: &Ctx, args: &SyncArgs, out: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let scope = ctx.base_scope()?;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => workspace_dir(&ctx.data_dir()?, &scope),
    };
    let prefer = args.prefer.map(|p| match p {
        PreferArg::Disk => Prefer::Disk,
        PreferArg::Tape => Prefer::Tape,
    });
    if !args.watch {
        let report = engine.sync_workspace(&scope, &dir, prefer)?;
        print_report(&report, args.json, out)?;
        if report.is_quiet() && !args.json {
            writeln!(out, "{} is in sync", dir.display())?;
        }
        if !report.conflicts.is_empty() {
            out.flush()?;
            bail!(
                "{} file(s) changed on both sides; nothing was overwritten",
                report.conflicts.len()
            );
        }
        return Ok(());
    }
    if args.interval.is_nan() || args.interval <= 0.0 {
        bail!("--interval must be more than 0 seconds");
    }
    writeln!(out, "watching {} (stop with Ctrl-C)", dir.display())?;
    out.flush()?;
    loop {
        let report = engine.sync_workspace(&scope, &dir, prefer)?;
        if !report.is_quiet() || args.json {
            print_report(&report, args.json, out)?;
            out.flush()?;
        }
        std::thread::sleep(Duration::from_secs_f64(args.interval));
    }
}

/// `memtape wal …`.
pub fn wal(ctx: &Ctx, command: &WalCommand, out: &mut impl Write) -> Result<()> {
    match command {
        WalCommand::Scan { text, json } => {
            let matches = memtape::wal::scan(text);
            if *json {
                let list: Vec<CaptureOut<'_>> = matches
                    .iter()
                    .map(|m| CaptureOut {
                        category: m.category.as_str(),
                        text: &m.text,
                    })
                    .collect();
                output::json(out, &list)?;
            } else if matches.is_empty() {
                writeln!(out, "nothing to capture")?;
            } else {
                for m in matches {
                    writeln!(out, "{}: {}", m.category.as_str(), escape(&m.text, true))?;
                }
            }
        }
        WalCommand::Capture(a) => wal_capture(&ctx.clone().scope(&a.scope), a, out)?,
        WalCommand::Eval { file, json } => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let mut set = Vec::new();
            for (i, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let where_ = || format!("{}: line {}", file.display(), i + 1);
                let l: Value = serde_json::from_str(line).with_context(where_)?;
                let (Some(text), Some(names)) = (l["text"].as_str(), l["labels"].as_array()) else {
                    bail!("{}: expected {{\"text\": …, \"labels\": […]}}", where_());
                };
                let mut labels = Vec::new();
                for name in names {
                    let name = name.as_str().unwrap_or_default();
                    labels.push(
                        name.parse().map_err(|_| {
                            anyhow::anyhow!("{}: unknown category {name:?}", where_())
                        })?,
                    );
                }
                set.push((text.to_owned(), labels));
            }
            let rows = memtape::wal::metrics(&set);
            if *json {
                let rows: Vec<Value> = rows
                    .iter()
                    .map(|(c, p, r, n)| json!({"category": c.as_str(), "precision": p, "recall": r, "labelled": n}))
                    .collect();
                output::json(out, &json!({"messages": set.len(), "categories": rows}))?;
            } else {
                writeln!(
                    out,
                    "{} messages\ncategory        precision  recall  labelled",
                    set.len()
                )?;
                for (c, p, r, n) in rows {
                    writeln!(out, "{:<15} {p:>9.3} {r:>7.3} {n:>9}", c.as_str())?;
                }
            }
        }
    }
    Ok(())
}

/// A memory change named on the command line: a version as `memory versions` prints it
/// (`v3`) or the entry id of its change (`#7` or `7`).
#[derive(Clone, Copy, Debug)]
pub enum ChangeRef {
    /// A version number (`vN`).
    Version(u64),
    /// A `memory.change` entry id (`#N` or `N`).
    Entry(u64),
}

impl std::str::FromStr for ChangeRef {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let number = |digits: &str| {
            digits.parse::<u64>().map_err(|_| {
                format!("{s:?} is neither a version (v3) nor a change's entry id (#7 or 7)")
            })
        };
        match s.strip_prefix(['v', 'V']) {
            Some(v) => number(v).map(ChangeRef::Version),
            None => number(s.strip_prefix('#').unwrap_or(s)).map(ChangeRef::Entry),
        }
    }
}

/// A memory version on the command line: `3` or `v3` (as `memory versions` prints it).
#[derive(Clone, Copy, Debug)]
pub struct Version(pub u64);

impl std::str::FromStr for Version {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s.starts_with('#') {
            return Err(format!(
                "{s:?} is an entry id; give the version (the vN that `memory versions` prints)"
            ));
        }
        s.strip_prefix(['v', 'V'])
            .unwrap_or(s)
            .parse()
            .map(Version)
            .map_err(|_| format!("{s:?} is not a version (3 or v3)"))
    }
}
