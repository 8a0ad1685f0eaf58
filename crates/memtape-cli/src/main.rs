//! The `memtape` command: a thin front-end over the memtape engine. This file holds the
//! command line (global options and subcommands) and the dispatch; each area's commands
//! live in their own module. Flags are parsed by clap into typed values, and every failure
//! exits non-zero with one message that names what is wrong.

mod attach;
mod bench;
mod bench_follow;
mod bench_serve;
mod chat;
mod config;
mod context;
mod ctx;
mod dify;
mod erase;
mod lifecycle;
mod mcp;
mod memory;
mod node;
mod output;
mod progress;
mod retrieval;
mod serve;
mod tape;
mod transfer;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::ctx::{Ctx, Globals};

/// The process's allocator: mimalloc returns the memory a thread frees to the system soon
/// after (glibc's malloc kept hundreds of MB of it in per-thread arenas as a server loaded
/// and evicted index shards; docs/scaling.md, "Resident memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `memtape --help` opens with.
const ABOUT: &str = "memtape: long-term memory for LLM agents. Conversations, tool calls, \
memory files and their versions are entries on an append-only tape in one SQLite file (or a \
PostgreSQL database, for several servers); history, search, the memory view and the prompt are \
read from it.";

/// What `memtape --help` ends with: where the data lives and how the models are chosen,
/// which each command that uses them takes as its own options.
const WHERE: &str = "\
Where memtape keeps things (`memtape COMMAND --help` lists the options a command takes):
  --data-dir DIR   The store, its search index and memtape.toml [env: MEMTAPE_DATA_DIR]
                   (default: the platform's data directory, e.g. ~/.local/share/memtape)
  --model MODEL    The embedding model for search: minilm (the default; `memtape models
                   fetch` downloads it), wordllama (small, fast), or none (BM25 only)
                   [env: MEMTAPE_MODEL]
  The language model that keeps memory (consolidation, extraction, `memtape chat`):
  [llm] in memtape.toml, or MEMTAPE_LLM_MODEL, MEMTAPE_LLM_BASE_URL, … (`memtape chat
  --help`). Without one, nothing is ever sent anywhere.";

#[derive(Parser)]
#[command(
    name = "memtape",
    version,
    about = ABOUT,
    after_help = WHERE,
    max_term_width = 100
)]
struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the store (safe to run again).
    Init(tape::InitArgs),
    /// Append a message to a session; prints the new entry's id.
    Append(tape::AppendArgs),
    /// Show the history a model would get: the unconsolidated tail of the current thread.
    History(tape::HistoryArgs),
    /// Keep a file (an image, a PDF, text) as an upload of the tenant; prints its id, which
    /// `append --file TYPE:upload:ID` attaches to a message.
    Upload(attach::UploadArgs),
    /// List the agent's sessions (of every user, or of --user).
    Sessions(tape::SessionsArgs),
    /// The agent's language-model calls (consolidation, extraction, …) and the tokens
    /// they cost, by model and purpose.
    Usage(tape::UsageArgs),
    /// Talk to the configured model in a terminal, with memtape keeping its memory: the
    /// WAL, the context builder, the memory tools, daily notes, consolidation, extraction.
    #[command(after_help = chat::ENVIRONMENT)]
    Chat(chat::ChatArgs),
    /// Show the thread that ends at an entry (regenerated answers replace their siblings).
    Thread(tape::ThreadArgs),
    /// Write an anchor (a named boundary) into a session; prints its id.
    Anchor(tape::AnchorArgs),
    /// List a session's tape entries.
    Entries(tape::EntriesArgs),
    /// Move a session's consolidation pointer: entries up to ID leave its history.
    Consolidate(tape::ConsolidateArgs),
    /// Import a JSONL file: all of it, or nothing if any line is bad.
    Import(transfer::ImportArgs),
    /// Export to stdout: one session, or (memtape format) the whole store.
    Export(transfer::ExportArgs),
    /// Copy the whole tape between the data directory's SQLite store and PostgreSQL,
    /// every id and byte kept (into an empty store only), and verify the copy.
    Migrate(transfer::MigrateArgs),
    /// Erase for real: a user, a session, entries or a piece of text, from the tape, the
    /// search index and the workspace, with a receipt that holds none of it.
    Erase(erase::EraseArgs),
    /// Retention: the policy in effect for an agent (`show`), and a run that expires the
    /// raw conversation it no longer keeps (`run`), as erasures with receipts.
    Retention(erase::RetentionArgs),
    /// Start a new conversation in a session (nanobot's /new).
    ///
    /// Archives the session's unconsolidated messages to HISTORY.md (an extractive
    /// summary), then clears it; nothing is cleared if archiving fails.
    New(lifecycle::NewArgs),
    /// Start (or resume) a session the way Bub does.
    ///
    /// Writes the `session/start` anchor if the session has no anchor, and a memory zone
    /// (memory/open, the memory, memory/seal) when the tape's latest zone is not the
    /// current memory; the session takes Bub's history view.
    Start(lifecycle::StartArgs),
    /// The prompt an agent would send its LLM for a session, within a token budget.
    ///
    /// System prompt, agent files, memory, the compaction in effect, history and the
    /// current message (MateClaw or Qanot compaction; a new compaction is recorded on the
    /// tape).
    Context(context::ContextArgs),
    /// Search everything on the tape: messages, tool results, memory (BM25 + embeddings).
    Search(retrieval::SearchArgs),
    /// Rebuild the search index from the tape (after changing --model, or any time).
    Reindex(retrieval::ReindexArgs),
    /// Memory: long-term facts, daily notes, versions, diff and undo.
    Memory(memory::MemoryArgs),
    /// Memory files by path: Anthropic's memory tool on /memories, MateClaw's workspace tools.
    Files(memory::FilesArgs),
    /// Sync the memory with its folder of markdown files (hand edits become versions).
    Sync(memory::SyncArgs),
    /// Dify's node memory: a workflow node's own turns in a conversation, and the cleanup
    /// of idle node memories.
    Node(node::NodeArgs),
    /// The WAL scanner: what a user message would add to the working state.
    #[command(subcommand)]
    Wal(memory::WalCommand),
    /// Embedding model files.
    #[command(subcommand)]
    Models(retrieval::ModelsCommand),
    /// Serve the REST API, MCP over HTTP and the OpenAPI document (loopback by default).
    #[command(after_help = serve::ENVIRONMENT)]
    Serve(serve::ServeArgs),
    /// API keys: each decides the tenant of the requests that carry it.
    #[command(subcommand)]
    Keys(serve::KeysCommand),
    /// Serve MCP on stdin and stdout: memory tools, files and skill for an MCP host.
    Mcp(mcp::McpArgs),
    /// Benchmarks (not tests): numbers for docs/benchmarks.md.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_t`, which the sys crate
/// does not name).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Has mimalloc give the memory a thread frees back to the system 1 ms after, not 10:
/// with its default, the memory freed as index shards were loaded and evicted stayed with
/// the process (at 500k entries, 50 tenants and a 32 MiB budget, 279 MB anonymous memory
/// against 167; docs/scaling.md, "Warm shards, resident memory with a full budget"). At
/// once (0) kept as little but cost 4% of the ingest. `MIMALLOC_PURGE_DELAY` in the
/// environment still decides, when set.
fn purge_sooner() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: called first in `main`, before this process starts a thread; the option is
    // a plain integer that mimalloc reads each time it schedules a purge.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1);
    }
}

fn main() -> ExitCode {
    purge_sooner();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`memtape … | head`) is not an error to report;
        // exit as a program killed by SIGPIPE would.
        Err(e) if output::is_broken_pipe(&e) => ExitCode::from(141),
        Err(e) => {
            eprintln!("memtape: error: {}", shown(&e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes as one line, each cause said once: memtape's errors already put
/// their cause's words in their own text, so a cause whose text the line already holds is
/// left out (anyhow's `{:#}` would repeat it).
fn shown(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run(cli: Cli) -> Result<()> {
    let ctx = Ctx::new(&cli.globals)?;
    // The library's warnings (an index rebuilt for another tape, a failed catch-up) go to
    // stderr; --quiet keeps only errors.
    let level = if cli.globals.quiet {
        tracing::Level::ERROR
    } else {
        tracing::Level::WARN
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .without_time()
        .with_target(false)
        .init();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let out = &mut stdout;
    match &cli.command {
        Command::Init(a) => tape::init(&ctx.store(&a.store), out)?,
        Command::Append(a) => tape::append(&ctx.scope(&a.scope), a, out)?,
        Command::History(a) => tape::history(&ctx.scope(&a.scope), a, out)?,
        Command::Upload(a) => attach::upload(&ctx.scope(&a.scope), a, out)?,
        Command::Sessions(a) => tape::sessions(&ctx.scope(&a.scope), a, out)?,
        Command::Thread(a) => tape::thread(&ctx.scope(&a.scope), a, out)?,
        Command::Usage(a) => tape::usage(&ctx.scope(&a.scope), a, out)?,
        Command::Chat(a) => chat::chat(&ctx.scope(&a.scope).models(&a.models), a, out)?,
        Command::Anchor(a) => tape::anchor(&ctx.scope(&a.scope), a, out)?,
        Command::Entries(a) => tape::entries(&ctx.scope(&a.scope), a, out)?,
        Command::Consolidate(a) => tape::consolidate(&ctx.scope(&a.scope), a, out)?,
        Command::Import(a) => transfer::import(&ctx.scope(&a.scope), a, out)?,
        Command::Export(a) => transfer::export(&ctx.scope(&a.scope), a, out)?,
        Command::Migrate(a) => transfer::migrate(&ctx.store(&a.store), a, out)?,
        Command::Erase(a) => erase::erase(&ctx.scope(&a.scope).models(&a.models), a, out)?,
        Command::Retention(a) => erase::retention(&ctx.scope(&a.scope).models(&a.models), a, out)?,
        Command::New(a) => lifecycle::new_session(&ctx.scope(&a.scope), a, out)?,
        Command::Start(a) => lifecycle::start_session(&ctx.scope(&a.scope), a, out)?,
        Command::Context(a) => context::context(&ctx.scope(&a.scope), a, out)?,
        Command::Search(a) => retrieval::search(&ctx.scope(&a.scope).models(&a.models), a, out)?,
        Command::Mcp(a) => mcp::mcp(&ctx.scope(&a.scope).models(&a.models), a)?,
        Command::Reindex(a) => retrieval::reindex(&ctx.store(&a.store).models(&a.models), a, out)?,
        Command::Memory(a) => memory::memory(&ctx.scope(&a.scope), &a.command, out)?,
        Command::Files(a) => memory::files(&ctx.scope(&a.scope), &a.command, out)?,
        Command::Sync(a) => memory::sync(&ctx.scope(&a.scope), a, out)?,
        Command::Node(a) => node::node(&ctx.scope(&a.scope), &a.command, out)?,
        Command::Wal(command) => memory::wal(&ctx, command, out)?,
        Command::Models(command) => retrieval::models(&ctx, command, out)?,
        Command::Serve(a) => serve::serve(&ctx.store(&a.store).models(&a.models), a, out)?,
        Command::Keys(command) => serve::keys(&ctx.store(command.store()), command, out)?,
        Command::Bench(command) => bench::bench(&ctx, command, out)?,
    }
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_says_each_cause_once() {
        let io = std::io::Error::other("disk is full");
        // A library error that puts its cause's words in its own text, and keeps the cause.
        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot write the store: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Wrapped(io)).context("memtape append");
        assert_eq!(
            shown(&e),
            "memtape append: cannot write the store: disk is full"
        );
        let plain = anyhow::anyhow!("first").context("second");
        assert_eq!(shown(&plain), "second: first");
    }
}
