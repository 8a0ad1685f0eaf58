//! Dify's node memory on the command line (`memtape node add | history | clear | cleanup |
//! import | export`): a workflow node's own turns inside a conversation, read thread-aware
//! (optionally under Dify's memory config), cleared, the cleanup task that clears node
//! memories idle for more than a number of days, and Dify's stored form in and out (one
//! file, or a `node_memory/{app_id}/{conversation_id}/{node_id}.json` tree read with no
//! link followed and written nowhere but under the directory named).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use memtape::dify_node::{self, NodeFile};
use memtape::{
    DEFAULT_MAX_TOKEN_LIMIT, DEFAULT_NODE_IDLE_DAYS, DynStore, Engine, Entry, EntryId, MemoryMode,
    NodeMemory, NodeTurn, Scope, Store,
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
    /// Empty for a node that never ran.
    History(HistoryArgs),
    /// Empty a node's memory: a node/clear anchor; its turns stay on the tape (a node never
    /// written is left alone).
    Clear(NodeRef),
    /// Clear every node memory not written for more than --older-than-days days (Dify's
    /// cleanup task for old node memory); prints each one cleared.
    Cleanup(CleanupArgs),
    /// Import Dify's stored node memory: one file ({"version": 1, "messages": [...]}) into
    /// CONVERSATION NODE, or a directory holding node_memory/{app_id}/{conversation_id}/
    /// {node_id}.json (each app an agent). All or nothing; a node with entries is refused.
    Import(ImportArgs),
    /// Export node memory in Dify's stored form: one node's file to stdout, or with --dir
    /// every node of the agent (or --user) as DIR/node_memory/{app}/{conversation}/{node}.json
    /// (existing files are never overwritten).
    Export(ExportArgs),
}

/// `memtape node import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// A node memory file, or a directory holding node_memory/ (or node_memory itself).
    path: PathBuf,
    /// With a file: the conversation (session key).
    conversation: Option<String>,
    /// With a file: the workflow node's id.
    node: Option<String>,
}

/// `memtape node export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// One node's conversation (session key).
    #[arg(required_unless_present = "dir")]
    conversation: Option<String>,
    /// That node's id.
    #[arg(required_unless_present = "dir")]
    node: Option<String>,
    /// Write every node of the agent (or of --user) under this directory instead.
    #[arg(long, conflicts_with_all = ["conversation", "node"])]
    dir: Option<PathBuf>,
}

/// The largest node memory file read, in bytes.
pub const MAX_NODE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The directory name of Dify's node memory tree.
const NODE_MEMORY_DIR: &str = "node_memory";

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

/// The node memory of `r` in the base scope (a node never written has an empty memory).
fn node_of<'e>(
    engine: &'e Engine<DynStore>,
    ctx: &Ctx,
    r: &NodeRef,
) -> Result<NodeMemory<'e, DynStore>> {
    Ok(engine.node_memory(&ctx.base_scope()?, Some(&r.conversation), &r.node)?)
}

/// Reads one node memory file: a regular file (no link), at most
/// [`MAX_NODE_FILE_BYTES`], in the stored form.
fn read_node_file(path: &Path) -> Result<NodeFile> {
    let meta =
        std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.file_type().is_symlink() {
        bail!(
            "{} is a symbolic link: node memory files are read where they are, never \
             through a link (nothing was imported)",
            path.display()
        );
    }
    if !meta.is_file() {
        bail!("{} is not a file (nothing was imported)", path.display());
    }
    if meta.len() > MAX_NODE_FILE_BYTES {
        bail!(
            "{} is {} bytes, more than a node memory file may be ({MAX_NODE_FILE_BYTES}; \
             nothing was imported)",
            path.display(),
            meta.len()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    dify_node::parse(&text).with_context(|| format!("{} (nothing was imported)", path.display()))
}

/// The entries of directory `dir`, sorted by name, each a UTF-8 name and no link.
fn entries_of(dir: &Path) -> Result<Vec<(String, PathBuf, std::fs::Metadata)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            bail!(
                "{} has a name that is not UTF-8: Dify's ids are text (nothing was imported)",
                path.display()
            );
        };
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if meta.file_type().is_symlink() {
            bail!(
                "{} is a symbolic link: a node memory tree is read where it is, never \
                 through a link (nothing was imported)",
                path.display()
            );
        }
        out.push((name, path, meta));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// A node file of a tree, read and checked: `(app, conversation, node, file, path)`.
type TreeNode = (String, String, String, NodeFile, PathBuf);

/// Every node file of a `node_memory/{app}/{conversation}/{node}.json` tree under `root`.
fn read_tree(root: &Path) -> Result<Vec<TreeNode>> {
    let mut nodes = Vec::new();
    for (app, app_dir, meta) in entries_of(root)? {
        if !meta.is_dir() {
            bail!(
                "{}: {NODE_MEMORY_DIR}/ holds a directory per app, not files (nothing was \
                 imported)",
                app_dir.display()
            );
        }
        for (conversation, conv_dir, meta) in entries_of(&app_dir)? {
            if !meta.is_dir() {
                bail!(
                    "{}: an app directory holds a directory per conversation, not files \
                     (nothing was imported)",
                    conv_dir.display()
                );
            }
            for (name, path, _) in entries_of(&conv_dir)? {
                let Some(node) = name.strip_suffix(".json") else {
                    bail!(
                        "{}: a conversation directory holds {{node_id}}.json files only \
                         (nothing was imported)",
                        path.display()
                    );
                };
                let file = read_node_file(&path)?;
                nodes.push((
                    app.clone(),
                    conversation.clone(),
                    node.to_owned(),
                    file,
                    path,
                ));
            }
        }
    }
    Ok(nodes)
}

/// Checks the names of a node's scope before anything is written.
fn check_node_names(app: &Scope, conversation: &str, node: &str) -> Result<()> {
    app.clone().with_session(conversation)?.with_node(node)?;
    Ok(())
}

/// A scope name as one component of a path: refused when it could name another place.
fn path_part<'a>(what: &str, name: &'a str, scope: &Scope) -> Result<&'a str> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        bail!(
            "the {what} {name:?} of {scope} cannot be a file name under {NODE_MEMORY_DIR}/ \
             (nothing was exported); export that node alone: memtape node export \
             CONVERSATION NODE"
        );
    }
    Ok(name)
}

/// Fails when `path` or a directory between `base` and it is a symbolic link.
fn no_link_below(base: &Path, path: &Path) -> Result<()> {
    let mut at = base.to_path_buf();
    let rest = path.strip_prefix(base).unwrap_or(path);
    for part in rest.components() {
        at.push(part);
        if let Ok(meta) = std::fs::symlink_metadata(&at)
            && meta.file_type().is_symlink()
        {
            bail!(
                "{} is a symbolic link: node memory is written only under {} (nothing was \
                 exported)",
                at.display(),
                base.display()
            );
        }
    }
    Ok(())
}

/// `memtape node export --dir`: every node memory of `base`'s agent and user (none: the
/// agent's own) under `dir`, and how many nodes of other users were left out (Dify's key
/// has no user, so a tree holds one user's nodes; `--user` exports another's, and an
/// import with the same `--user` puts them back).
fn export_tree(
    engine: &Engine<DynStore>,
    base: &Scope,
    dir: &Path,
) -> Result<(Vec<PathBuf>, usize)> {
    let root = dir.join(NODE_MEMORY_DIR);
    let mut planned: Vec<(PathBuf, Scope)> = Vec::new();
    let (mine, others): (Vec<Scope>, Vec<Scope>) = engine
        .node_scopes(base)?
        .into_iter()
        .partition(|s| s.user() == base.user());
    for scope in mine {
        let app = path_part("app", scope.agent_name(), &scope)?;
        let conversation = path_part("conversation", scope.session().unwrap_or_default(), &scope)?;
        let node = path_part("node", scope.node().unwrap_or_default(), &scope)?;
        let path = root
            .join(app)
            .join(conversation)
            .join(format!("{node}.json"));
        if let Some((_, other)) = planned.iter().find(|(p, _)| *p == path) {
            bail!(
                "{other} and {scope} would both be {} (Dify's key has no user): export one \
                 user at a time with --user (nothing was exported)",
                path.display()
            );
        }
        no_link_below(dir, &path)?;
        if std::fs::symlink_metadata(&path).is_ok() {
            bail!(
                "{} exists: node memory export never overwrites a file (nothing was \
                 exported)",
                path.display()
            );
        }
        planned.push((path, scope));
    }
    let mut written = Vec::new();
    for (path, scope) in planned {
        let mut app = scope.agent_scope();
        if let Some(user) = scope.user() {
            app = app.with_user(user)?;
        }
        let file = engine.export_node_memory(
            &app,
            scope.session().unwrap_or_default(),
            scope.node().unwrap_or_default(),
        )?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        no_link_below(dir, &path)?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        let text = serde_json::to_string(&dify_node::render(&file))?;
        writeln!(out, "{text}").with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok((written, others.len()))
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
            // A node's first run: an empty history, not an error.
            let memory = node_of(&engine, ctx, &a.node)?;
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
            let mut memory = node_of(&engine, ctx, r)?;
            if engine.store().scope_info(memory.scope())?.is_none() {
                writeln!(
                    out,
                    "node {} of conversation {} has no memory yet (tenant {}, agent {}): \
                     nothing to clear",
                    r.node, r.conversation, ctx.tenant, ctx.agent
                )?;
                return Ok(());
            }
            let anchor = memory.clear()?;
            writeln!(
                out,
                "cleared {} (anchor {}; its turns stay on the tape)",
                memory.scope(),
                anchor.id
            )?;
        }
        NodeCommand::Import(a) => {
            let base = ctx.base_scope()?;
            let nodes = if std::fs::symlink_metadata(&a.path)
                .with_context(|| format!("reading {}", a.path.display()))?
                .is_dir()
            {
                if a.conversation.is_some() || a.node.is_some() {
                    bail!(
                        "{} is a directory: its tree names each node's conversation and \
                         node; pass CONVERSATION NODE only with a file",
                        a.path.display()
                    );
                }
                let root = if a.path.file_name().and_then(|n| n.to_str()) == Some(NODE_MEMORY_DIR) {
                    a.path.clone()
                } else {
                    a.path.join(NODE_MEMORY_DIR)
                };
                if !std::fs::symlink_metadata(&root).is_ok_and(|m| m.is_dir()) {
                    bail!(
                        "{} holds no {NODE_MEMORY_DIR}/ directory (Dify's \
                         node_memory/{{app_id}}/{{conversation_id}}/{{node_id}}.json)",
                        a.path.display()
                    );
                }
                let mut nodes = Vec::new();
                for (app, conversation, node, file, path) in read_tree(&root)? {
                    let named = || format!("{} (nothing was imported)", path.display());
                    let mut scope = Scope::agent(ctx.tenant.clone(), app).with_context(named)?;
                    if let Some(user) = base.user() {
                        scope = scope.with_user(user)?;
                    }
                    check_node_names(&scope, &conversation, &node).with_context(named)?;
                    nodes.push((scope, conversation, node, file));
                }
                nodes
            } else {
                let (Some(conversation), Some(node)) = (&a.conversation, &a.node) else {
                    bail!(
                        "importing the file {} needs the node it is: memtape node import FILE \
                         CONVERSATION NODE",
                        a.path.display()
                    );
                };
                let file = read_node_file(&a.path)?;
                vec![(base, conversation.clone(), node.clone(), file)]
            };
            let count = nodes.len();
            let turns: usize = nodes.iter().map(|n| n.3.messages.len() / 2).sum();
            let engine = open(ctx)?;
            let report = engine.import_node_memory(nodes)?;
            writeln!(
                out,
                "imported {count} node memories ({turns} turns, {} entries)",
                report.entries
            )?;
        }
        NodeCommand::Export(a) => {
            let engine = open_read_only(ctx)?;
            let base = ctx.base_scope()?;
            if let Some(dir) = &a.dir {
                let (written, others) = export_tree(&engine, &base, dir)?;
                for path in &written {
                    writeln!(out, "{}", path.display())?;
                }
                if !ctx.quiet {
                    eprintln!("exported {} node memories", written.len());
                }
                if others > 0 {
                    eprintln!(
                        "{others} node memories of users were not exported (Dify's key has no \
                         user): export each user's with --user USER, and import it back with \
                         the same --user"
                    );
                }
            } else {
                let (Some(conversation), Some(node)) = (&a.conversation, &a.node) else {
                    bail!("name the node: memtape node export CONVERSATION NODE, or --dir DIR");
                };
                let file = engine.export_node_memory(&base, conversation, node)?;
                output::json(out, &dify_node::render(&file))?;
            }
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
