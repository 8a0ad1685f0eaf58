//! The `memtape` command: a thin front-end over the memtape engine. Flags are parsed by
//! clap, checked into typed values here, and every failure exits non-zero with a message
//! that names what is wrong.

mod context;
mod lifecycle;
mod memory;
mod output;
mod retrieval;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Parser, Subcommand};
use memtape::{
    AnchorRange, AppendOptions, Engine, EntryId, Format, HistoryLimits, Kind, Message, Role, Scope,
    SqliteStore, Store, TapeQuery, ToolCall,
};
use serde_json::{Map, Value};

/// memtape: long-term memory for LLM agents — an append-only tape of conversations and
/// memory, in one SQLite file.
#[derive(Parser)]
#[command(name = "memtape", version, about, max_term_width = 100)]
struct Cli {
    /// Where the store lives (default: the platform's data directory, e.g. ~/.local/share/memtape).
    #[arg(long, global = true, env = "MEMTAPE_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The tenant whose data to use.
    #[arg(long, global = true, default_value = "default")]
    tenant: String,
    /// The agent whose memory and sessions to use.
    #[arg(long, global = true, default_value = "default")]
    agent: String,
    /// Narrow to one user of the agent.
    #[arg(long, global = true)]
    user: Option<String>,
    #[command(flatten)]
    models: retrieval::ModelArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the store (safe to run again).
    Init,
    /// Append a message to a session; prints the new entry's id.
    Append {
        /// The session (conversation) key.
        session: String,
        /// Who wrote it.
        #[arg(long, value_parser = ["user", "assistant", "system", "tool"])]
        role: String,
        /// The text.
        #[arg(long, default_value = "")]
        content: String,
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
        /// Do not scan a user message into the working state (the WAL).
        #[arg(long)]
        no_wal: bool,
    },
    /// Show the history a model would get: the unconsolidated tail of the current thread.
    History {
        /// The session key.
        session: String,
        /// At most this many messages.
        #[arg(long, default_value_t = 500)]
        max_messages: usize,
        /// At most this many tokens (cl100k).
        #[arg(long)]
        max_tokens: Option<usize>,
        /// Print a JSON array of OpenAI chat messages.
        #[arg(long)]
        json: bool,
    },
    /// List the agent's sessions (of every user, or of --user).
    Sessions {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the thread that ends at an entry (regenerated answers replace their siblings).
    Thread {
        /// The entry at the end of the thread (of this agent, or of --user).
        entry_id: EntryId,
        /// Print JSON entries.
        #[arg(long)]
        json: bool,
    },
    /// Write an anchor (a named boundary) into a session; prints its id.
    Anchor {
        /// The session key.
        session: String,
        /// The anchor's name.
        name: String,
        /// State to carry, as a JSON object.
        #[arg(long, value_name = "JSON")]
        state: Option<String>,
    },
    /// List a session's tape entries.
    Entries {
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
        /// Only entries of these kinds (message, tool_call, tool_result, anchor, event, system).
        #[arg(long = "kind", value_name = "K")]
        kinds: Vec<String>,
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
    },
    /// Import a JSONL file: all of it, or nothing if any line is bad.
    Import {
        /// memtape, nanobot or bub.
        #[arg(long, required_unless_present = "restore")]
        format: Option<Format>,
        /// Administrator: restore a whole-store backup (`export --all`), every tenant as
        /// written; a plain memtape import stays inside --tenant/--agent/--user.
        #[arg(long, conflicts_with_all = ["format", "session"])]
        restore: bool,
        /// The file.
        file: PathBuf,
        /// The session to import into (default: the nanobot key, or the Bub file's name).
        #[arg(long, value_name = "KEY")]
        session: Option<String>,
    },
    /// Export to stdout: one session, or (memtape format) everything of the agent (or of
    /// --user).
    Export {
        /// memtape, nanobot or bub.
        #[arg(long, required_unless_present = "all")]
        format: Option<Format>,
        /// The session key.
        session: Option<String>,
        /// Administrator: the whole store, every tenant, in memtape's format (a backup
        /// that `import --restore` reads back).
        #[arg(long, conflicts_with_all = ["format", "session"])]
        all: bool,
    },
    /// Move a session's consolidation pointer: entries up to ID leave its history.
    Consolidate {
        /// The session key.
        session: String,
        /// The last consolidated entry (0 to consolidate nothing).
        through: EntryId,
    },
    /// Start a new conversation in a session (nanobot's /new): archive its unconsolidated
    /// messages to HISTORY.md (extractive summary), then clear it; nothing is cleared if
    /// archiving fails.
    New {
        /// The session key.
        session: String,
        /// Then remove the memory's daily notes older than this many days (Bub's
        /// retention; 0 keeps them all).
        #[arg(long, default_value_t = memtape::DEFAULT_RETENTION_DAYS)]
        retention_days: u32,
    },
    /// The prompt an agent would send its LLM for a session: system prompt, agent files,
    /// memory, the compaction in effect, history and the current message, within a token
    /// budget (MateClaw or Qanot compaction; a new compaction is recorded on the tape).
    Context(context::ContextArgs),
    /// Search everything on the tape: messages, tool results, memory (BM25 + embeddings).
    Search(retrieval::SearchArgs),
    /// Rebuild the search index from the tape (after changing --model, or any time).
    Reindex {
        #[command(flatten)]
        tuning: retrieval::Tuning,
    },
    /// Memory: long-term facts, daily notes, versions, diff and undo (--agent, --user).
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// Memory files by path: Anthropic's memory tool on /memories, MateClaw's workspace tools.
    #[command(subcommand)]
    Files(memory::FilesCommand),
    /// Sync the memory with its folder of markdown files (hand edits become versions).
    Sync(memory::SyncArgs),
    /// The WAL scanner: what a user message would add to the working state.
    #[command(subcommand)]
    Wal(memory::WalCommand),
    /// Embedding model files.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Benchmarks (not tests): numbers for docs/benchmarks.md.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Download the model (--model) into the model cache, verifying checksums.
    Fetch,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Prompt-prefix stability over a scripted conversation (what LLM prompt caches reuse).
    Context(context::ContextBenchArgs),
    /// Durable append throughput and get_history latency on a large session.
    Store {
        /// Messages in the large session.
        #[arg(long, default_value_t = 100_000)]
        messages: usize,
        /// Durable single-entry appends timed per run.
        #[arg(long, default_value_t = 2_000)]
        appends: usize,
        /// Runs (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Where to put the scratch store (default: a temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Retrieval quality and speed on a LoCoMo-format file (../shared/bench/PROTOCOL.md).
    Locomo {
        /// The LoCoMo-format JSON file.
        #[arg(long, value_name = "FILE")]
        data: PathBuf,
        /// Also write the JSON report here.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Retrieval mode.
        #[arg(long, default_value = "hybrid")]
        mode: memtape::Mode,
        /// The split's name in the report (default: the file's name without extension).
        #[arg(long)]
        split: Option<String>,
        #[command(flatten)]
        tuning: retrieval::Tuning,
    },
    /// Ingest rate, index size, memory and query latency on synthetic tapes.
    Scale {
        /// Tape sizes in entries.
        #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000, 1_000_000])]
        sizes: Vec<usize>,
        /// Also write the JSON report here.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Where vectors come from: the WordLlama model, or seeded random word vectors.
        #[arg(long, default_value = "wordllama", value_parser = ["wordllama", "synthetic"])]
        vectors: String,
        #[command(flatten)]
        tuning: retrieval::Tuning,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memtape: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn data_dir(cli: &Cli) -> Result<PathBuf> {
    match &cli.data_dir {
        Some(d) => Ok(d.clone()),
        None => Ok(dirs::data_dir()
            .context("no platform data directory here: pass --data-dir or set MEMTAPE_DATA_DIR")?
            .join("memtape")),
    }
}

fn base_scope(cli: &Cli) -> Result<Scope> {
    let scope = Scope::agent(cli.tenant.clone(), cli.agent.clone())?;
    Ok(match &cli.user {
        Some(u) => scope.with_user(u.clone())?,
        None => scope,
    })
}

fn session_scope(cli: &Cli, session: &str) -> Result<Scope> {
    Ok(base_scope(cli)?.with_session(session)?)
}

fn json_object(what: &str, text: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str(text).with_context(|| format!("{what} is not valid JSON"))? {
        Value::Object(m) => Ok(m),
        other => bail!("{what} must be a JSON object, not {other}"),
    }
}

fn parse_time(what: &str, text: &str) -> Result<DateTime<Utc>> {
    if let Some(t) = memtape::parse_time(text) {
        return Ok(t);
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).context("midnight")?.and_utc());
    }
    bail!("{what} {text:?} is not a time (use RFC 3339, e.g. 2026-03-10T14:30:00Z, or YYYY-MM-DD)")
}

fn open(cli: &Cli) -> Result<Engine<SqliteStore>> {
    Ok(Engine::open(&data_dir(cli)?)?)
}

/// Opens the store for a command that only reads: nothing is written, so it works on a
/// full or read-only disk (a backup can always be taken).
fn open_read_only(cli: &Cli) -> Result<Engine<SqliteStore>> {
    Ok(Engine::open_read_only(&data_dir(cli)?)?)
}

/// Prints a benchmark's JSON report, and writes it to `out` too when given.
fn write_report(json: &str, out: Option<&Path>, stdout: &mut impl Write) -> Result<()> {
    if let Some(out) = out {
        std::fs::write(out, format!("{json}\n"))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    writeln!(stdout, "{json}")?;
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    match &cli.command {
        Command::Init => {
            let dir = data_dir(&cli)?;
            Engine::init(&dir)?;
            writeln!(stdout, "memtape store ready at {}", dir.display())?;
        }
        Command::Append {
            session,
            role,
            content,
            tool_calls,
            tool_call_id,
            name,
            parent,
            meta,
            no_wal,
        } => {
            let engine = open(&cli)?;
            let role: Role = role.parse()?;
            let mut message = Message::text(role, content.clone());
            if let Some(calls) = tool_calls {
                let calls: Vec<ToolCall> = serde_json::from_str(calls).context(
                    "--tool-calls must be a JSON list of {id, type, function: {name, arguments}}",
                )?;
                if content.is_empty() {
                    message.content = None;
                }
                message.tool_calls = calls;
            }
            message.tool_call_id = tool_call_id.clone();
            message.name = name.clone();
            let options = AppendOptions {
                parent: *parent,
                meta: meta
                    .as_deref()
                    .map(|m| json_object("--meta", m))
                    .transpose()?
                    .unwrap_or_default(),
            };
            let session = session_scope(&cli, session)?;
            // Qanot's WAL: a user message is scanned before anyone answers it.
            if role == Role::User && !no_wal {
                engine.capture(&session, content)?;
            }
            let entry = engine.append(&session, message, options)?;
            writeln!(stdout, "{}", entry.id)?;
        }
        Command::History {
            session,
            max_messages,
            max_tokens,
            json,
        } => {
            let engine = open_read_only(&cli)?;
            let limits = HistoryLimits {
                max_messages: *max_messages,
                max_tokens: *max_tokens,
            };
            let history = engine.history(&session_scope(&cli, session)?, &limits)?;
            if *json {
                let messages: Vec<Value> = history
                    .iter()
                    .filter_map(|e| e.message())
                    .map(output::chat_message)
                    .collect();
                writeln!(stdout, "{}", serde_json::to_string_pretty(&messages)?)?;
            } else {
                for e in &history {
                    writeln!(stdout, "{}", output::entry_line(e))?;
                }
            }
        }
        Command::Sessions { json } => {
            let engine = open_read_only(&cli)?;
            let sessions: Vec<_> = engine
                .sessions(&cli.tenant)?
                .into_iter()
                .filter(|s| s.scope.agent_name() == cli.agent)
                .filter(|s| cli.user.is_none() || s.scope.user() == cli.user.as_deref())
                .collect();
            if *json {
                let list: Vec<Value> = sessions.iter().map(output::session_json).collect();
                writeln!(stdout, "{}", serde_json::to_string_pretty(&list)?)?;
            } else {
                for s in &sessions {
                    writeln!(stdout, "{}", output::session_line(s))?;
                }
            }
        }
        Command::Thread { entry_id, json } => {
            let engine = open_read_only(&cli)?;
            let thread = engine.thread(&base_scope(&cli)?, *entry_id)?;
            output::entries(&mut stdout, &thread, *json)?;
        }
        Command::Anchor {
            session,
            name,
            state,
        } => {
            let engine = open(&cli)?;
            let state = state
                .as_deref()
                .map(|s| json_object("--state", s))
                .transpose()?;
            let entry = engine.anchor(&session_scope(&cli, session)?, name, state)?;
            writeln!(stdout, "{}", entry.id)?;
        }
        Command::Entries {
            session,
            after_anchor,
            from_last_anchor,
            between,
            kinds,
            since,
            until,
            limit,
            json,
        } => {
            let engine = open_read_only(&cli)?;
            let range = match (after_anchor, from_last_anchor, between) {
                (Some(name), _, _) => AnchorRange::After(name.clone()),
                (_, true, _) => AnchorRange::FromLast,
                (_, _, Some(pair)) => AnchorRange::Between(pair[0].clone(), pair[1].clone()),
                _ => AnchorRange::All,
            };
            let query = TapeQuery {
                range,
                kinds: kinds
                    .iter()
                    .map(|k| k.parse::<Kind>())
                    .collect::<Result<_, _>>()?,
                since: since
                    .as_deref()
                    .map(|t| parse_time("--since", t))
                    .transpose()?,
                until: until
                    .as_deref()
                    .map(|t| parse_time("--until", t))
                    .transpose()?,
                limit: *limit,
            };
            let found = engine.query(&session_scope(&cli, session)?, &query)?;
            output::entries(&mut stdout, &found, *json)?;
        }
        Command::Import {
            format,
            file,
            session,
            ..
        } => {
            let engine = open(&cli)?;
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let report = match format {
                None => engine.restore_store(&text),
                Some(format) => {
                    let session = match (format, session) {
                        (Format::Bub, None) => {
                            file.file_stem().map(|s| s.to_string_lossy().into_owned())
                        }
                        (_, s) => s.clone(),
                    };
                    engine.import(*format, &text, &base_scope(&cli)?, session.as_deref())
                }
            }
            .with_context(|| format!("importing {} (nothing was imported)", file.display()))?;
            let names: Vec<String> = report.sessions.iter().map(ToString::to_string).collect();
            writeln!(
                stdout,
                "imported {} entries into {}",
                report.entries,
                names.join(", ")
            )?;
            if report.placement == memtape::Placement::Renumbered {
                writeln!(
                    stdout,
                    "(ids were renumbered after the store's existing entries)"
                )?;
            }
        }
        Command::Export {
            format, session, ..
        } => {
            let engine = open_read_only(&cli)?;
            let Some(format) = format else {
                engine.export_store(&mut stdout)?;
                return Ok(());
            };
            let scope = match session.as_deref() {
                Some(s) => {
                    let scope = session_scope(&cli, s)?;
                    if engine.store().scope_info(&scope)?.is_none() {
                        bail!("no session {scope}");
                    }
                    scope
                }
                None => base_scope(&cli)?,
            };
            engine.export(*format, &scope, &mut stdout)?;
        }
        Command::Consolidate { session, through } => {
            let engine = open(&cli)?;
            let entry = engine.mark_consolidated(&session_scope(&cli, session)?, *through)?;
            writeln!(stdout, "{}", entry.id)?;
        }
        Command::New {
            session,
            retention_days,
        } => lifecycle::new_session(&cli, session, *retention_days, &mut stdout)?,
        Command::Memory(command) => memory::memory(&cli, command, &mut stdout)?,
        Command::Files(command) => memory::files(&cli, command, &mut stdout)?,
        Command::Sync(args) => memory::sync(&cli, args, &mut stdout)?,
        Command::Wal(command) => memory::wal(command, &mut stdout)?,
        Command::Context(args) => context::context(&cli, args, &mut stdout)?,
        Command::Search(args) => retrieval::search(&cli, args, &mut stdout)?,
        Command::Reindex { tuning } => retrieval::reindex(&cli, tuning, &mut stdout)?,
        Command::Models(ModelsCommand::Fetch) => {
            let path = cli.models.fetch()?;
            writeln!(stdout, "{} ready: {}", cli.models.model, path.display())?;
        }
        Command::Bench(BenchCommand::Context(args)) => context::bench(args, &mut stdout)?,
        Command::Bench(BenchCommand::Store {
            messages,
            appends,
            runs,
            dir,
        }) => {
            let report = memtape_bench::store::run(&memtape_bench::store::Config {
                messages: *messages,
                appends: *appends,
                runs: *runs,
                dir: dir.clone(),
            })?;
            writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?;
        }
        Command::Bench(BenchCommand::Locomo {
            data,
            out,
            mode,
            split,
            tuning,
        }) => {
            let split = split.clone().unwrap_or_else(|| {
                data.file_stem()
                    .map_or("locomo".into(), |s| s.to_string_lossy().into_owned())
            });
            let embedder = match mode {
                memtape::Mode::Bm25 => None,
                _ => cli.models.embedder()?,
            };
            let config = memtape_bench::locomo::Config {
                mode: *mode,
                embedder,
                index: tuning.index_config(),
                split,
            };
            let report = memtape_bench::locomo::run(data, &config)?;
            write_report(
                &serde_json::to_string_pretty(&report)?,
                out.as_deref(),
                &mut stdout,
            )?;
            eprintln!("{}", report.summary());
        }
        Command::Bench(BenchCommand::Scale {
            sizes,
            out,
            vectors,
            tuning,
        }) => {
            let embedder = match vectors.as_str() {
                "synthetic" => None,
                _ => retrieval::ModelArgs {
                    model: "wordllama".into(),
                    ..cli.models.clone()
                }
                .embedder()?,
            };
            let config = memtape_bench::scale::Config {
                sizes: sizes.clone(),
                index: tuning.index_config(),
                embedder,
            };
            let report = memtape_bench::scale::run(&config, &mut |line| eprintln!("{line}"))?;
            write_report(
                &serde_json::to_string_pretty(&report)?,
                out.as_deref(),
                &mut stdout,
            )?;
        }
    }
    stdout.flush()?;
    Ok(())
}
