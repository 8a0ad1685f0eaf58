//! Dify's node memory on the command line (`memtape node add | history | clear | cleanup`):
//! a workflow node's own turns inside a conversation, read thread-aware (optionally under
//! Dify's memory config), cleared, and the cleanup task that clears node memories idle for
//! more than a number of days.

use std::io::Write;

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use memtape::{
    DEFAULT_MAX_TOKEN_LIMIT, DEFAULT_NODE_IDLE_DAYS, DynStore, Engine, Entry, EntryId, MemoryMode,
    NodeMemory, NodeTurn, Store,
};
use serde::Serialize;

use crate::ctx::{Ctx, ScopeArgs, open, open_read_only};
use crate::dify::DifyArgs;
use crate::output;

/// `memtape node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    #[command(subcommand)]
    pub command: NodeCommand,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// The node memory commands.
#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// Add a turn to a node's memory (Dify's add_messages then flush): the query the node
    /// got and its answer, under the Dify message they belong to; prints the two entry ids.
    Add(AddArgs),
    /// The node's history before it answers --message-id: the thread that message
    /// continues, within --max-tokens (Dify flags: read under a memory config, mode node).
    History(HistoryArgs),
    /// Empty a node's memory: a node/clear anchor; its turns stay on the tape.
    Clear(NodeRef),
    /// Clear every node memory not written for more than --older-than-days days (Dify's
    /// cleanup task for old node memory); prints each one cleared.
    Cleanup(CleanupArgs),
}

/// A node of a conversation.
#[derive(Args, Debug)]
pub struct NodeRef {
    /// The conversation (session key).
    conversation: String,
    /// The workflow node's id.
    node: String,
}

/// `memtape node add`.
#[derive(Args, Debug)]
#[command(
    override_usage = "memtape node add [OPTIONS] --message-id <ID> --query <TEXT> \\\n           \
                            --answer <TEXT> <CONVERSATION> <NODE>"
)]
pub struct AddArgs {
    #[command(flatten)]
    node: NodeRef,
    /// The Dify message this turn belongs to.
    #[arg(long)]
    message_id: String,
    /// The Dify message it follows (none: it starts a thread).
    #[arg(long)]
    parent: Option<String>,
    /// The node's input.
    #[arg(long)]
    query: String,
    /// The node's answer.
    #[arg(long)]
    answer: String,
    #[arg(long = "file", value_name = "FILE", help = crate::attach::FILE_HELP)]
    files: Vec<String>,
    /// A file the node's answer produced (repeatable; the same forms as --file).
    #[arg(long = "answer-file", value_name = "FILE")]
    answer_files: Vec<String>,
}

/// `memtape node history`.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(flatten)]
    node: NodeRef,
    /// The Dify message the node is about to answer.
    #[arg(long)]
    message_id: String,
    /// That message's parent (none: it starts a thread).
    #[arg(long)]
    parent: Option<String>,
    /// At most this many tokens (cl100k).
    #[arg(long, default_value_t = DEFAULT_MAX_TOKEN_LIMIT)]
    max_tokens: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dify: DifyArgs,
}

/// `memtape node cleanup`.
#[derive(Args, Debug)]
pub struct CleanupArgs {
    /// Clear node memories last written more than this many days ago (at least 1).
    #[arg(long, default_value_t = DEFAULT_NODE_IDLE_DAYS)]
    older_than_days: u32,
    /// Only the nodes of this conversation.
    #[arg(long)]
    conversation: Option<String>,
    /// Report what would be cleared; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One cleared node memory on the wire.
#[derive(Serialize)]
struct IdleOut<'a> {
    scope: output::ScopeOut<'a>,
    last_active: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cleared_by: Option<EntryId>,
}

/// The cleanup report on the wire.
#[derive(Serialize)]
struct CleanupOut<'a> {
    cutoff: DateTime<Utc>,
    dry_run: bool,
    cleared: Vec<IdleOut<'a>>,
    active: usize,
    empty: usize,
}

/// The node memory of `r` in the base scope, which must have entries.
fn existing_node<'e>(
    engine: &'e Engine<DynStore>,
    ctx: &Ctx,
    r: &NodeRef,
) -> Result<NodeMemory<'e, DynStore>> {
    let memory = engine.node_memory(&ctx.base_scope()?, Some(&r.conversation), &r.node)?;
    if engine.store().scope_info(memory.scope())?.is_none() {
        bail!(
            "no memory of node {} in conversation {} (tenant {}, agent {}); `memtape node add` \
             writes one",
            r.node,
            r.conversation,
            ctx.tenant,
            ctx.agent
        );
    }
    Ok(memory)
}

/// `memtape node ...`.
pub fn node(ctx: &Ctx, command: &NodeCommand, out: &mut impl Write) -> Result<()> {
    match command {
        NodeCommand::Add(a) => {
            let engine = open(ctx)?;
            let mut memory =
                engine.node_memory(&ctx.base_scope()?, Some(&a.node.conversation), &a.node.node)?;
            memory.add_messages(NodeTurn {
                message_id: a.message_id.clone(),
                parent_message_id: a.parent.clone(),
                user_content: a.query.clone(),
                user_files: crate::attach::references(ctx, &a.files, memtape::FileOwner::User)?,
                assistant_content: a.answer.clone(),
                assistant_files: crate::attach::references(
                    ctx,
                    &a.answer_files,
                    memtape::FileOwner::Assistant,
                )?,
            })?;
            let ids: Vec<String> = memory.flush()?.iter().map(|e| e.id.to_string()).collect();
            writeln!(out, "{}", ids.join(" "))?;
        }
        NodeCommand::History(a) => {
            let engine = open_read_only(ctx)?;
            let memory = existing_node(&engine, ctx, &a.node)?;
            let parent = a.parent.as_deref();
            if a.dify.is_set() {
                let config = a.dify.config(MemoryMode::Node)?;
                let history = memory.dify_history(&a.message_id, parent, &config, a.max_tokens)?;
                let refs: Vec<&Entry> = history.iter().map(|m| &m.entry).collect();
                a.dify.print(&config, &refs, a.json, out)?;
            } else {
                let history = memory.get_history(&a.message_id, parent, a.max_tokens)?;
                output::history(out, history.iter().map(|m| &m.entry), a.json)?;
            }
        }
        NodeCommand::Clear(r) => {
            let engine = open(ctx)?;
            let mut memory = existing_node(&engine, ctx, r)?;
            let anchor = memory.clear()?;
            writeln!(
                out,
                "cleared {} (anchor {}; its turns stay on the tape)",
                memory.scope(),
                anchor.id
            )?;
        }
        NodeCommand::Cleanup(a) => {
            let engine = if a.dry_run {
                open_read_only(ctx)?
            } else {
                open(ctx)?
            };
            let mut within = ctx.base_scope()?;
            if let Some(c) = &a.conversation {
                within = within.with_session(c.clone())?;
            }
            let report = engine.cleanup_node_memory(&within, a.older_than_days, a.dry_run)?;
            if a.json {
                let wire = CleanupOut {
                    cutoff: report.cutoff,
                    dry_run: report.dry_run,
                    cleared: report
                        .cleared
                        .iter()
                        .map(|n| IdleOut {
                            scope: output::ScopeOut::of(&n.scope),
                            last_active: n.last_active,
                            cleared_by: n.cleared_by,
                        })
                        .collect(),
                    active: report.active,
                    empty: report.empty,
                };
                return output::json(out, &wire);
            }
            let verb = if report.dry_run {
                "would clear"
            } else {
                "cleared"
            };
            for n in &report.cleared {
                writeln!(
                    out,
                    "{verb} {} (last written {})",
                    n.scope,
                    n.last_active.to_rfc3339()
                )?;
            }
            writeln!(
                out,
                "{} node memories {verb} (not written since {}); {} active, {} already empty",
                report.cleared.len(),
                report.cutoff.to_rfc3339(),
                report.active,
                report.empty
            )?;
        }
    }
    Ok(())
}
