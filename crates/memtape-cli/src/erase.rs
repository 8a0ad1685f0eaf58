//! `memtape erase`: forget for real. A user, a session, entries or a piece of text are
//! erased from the tape (each entry keeps its id, scope, kind, time and links and loses its
//! content), from the search index and from the markdown workspace, with a `tape.erased`
//! receipt that holds none of it. `memtape retention`: the policy in effect for an agent,
//! and a run that expires what it no longer keeps, through the same erasure.

use std::io::{Read as _, Write};

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use memtape::{EntryId, Erase, EraseOptions};
use serde::Serialize;

use crate::ctx::{Ctx, ModelArgs, ScopeArgs, open};
use crate::output;
use crate::retrieval::{Tuning, open_indexed};

/// `memtape erase`.
#[derive(Args, Debug)]
pub struct EraseArgs {
    #[command(subcommand)]
    what: EraseWhat,
    /// Count what would be erased, and change nothing.
    #[arg(long, global = true)]
    dry_run: bool,
    /// Why, kept on the receipt (never put the erased text here).
    #[arg(long, global = true, default_value = "")]
    reason: String,
    /// Afterwards, rewrite the store's files so nothing freed is left in them
    /// (PostgreSQL: VACUUM FULL, which blocks the database while it runs; SQLite needs
    /// nothing).
    #[arg(long, global = true)]
    compact: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub models: ModelArgs,
}

/// What `memtape erase` takes.
#[derive(Subcommand, Debug)]
enum EraseWhat {
    /// Everything of --user in the tenant, in every agent: sessions, memory, workspace.
    User,
    /// One session of the agent (of --user, when given).
    Session {
        /// The session key.
        session: String,
    },
    /// Entries by id, where they lie in the agent (or --user's part of it).
    Entries {
        /// The ids.
        #[arg(required = true)]
        ids: Vec<EntryId>,
    },
    /// Every occurrence of a piece of text in the agent (or --user's part of it), replaced
    /// by [erased]: messages, tool calls and results, memory, dropped facts, summaries.
    Text {
        /// The text; better given on stdin with --stdin, so it stays out of shell history.
        text: Option<String>,
        /// Read the text from stdin (one trailing newline removed).
        #[arg(long, conflicts_with = "text")]
        stdin: bool,
    },
}

/// What `memtape erase` prints.
#[derive(Serialize)]
struct Erased {
    /// The receipt's id (none in a dry run).
    receipt: Option<EntryId>,
    /// Entries that became tombstones (or would).
    entries: u64,
    /// Entries whose text was redacted (or would be).
    redacted: u64,
    /// The entries changed.
    ids: Vec<EntryId>,
    /// Whether the store's write-ahead log was truncated (false: a reader held it; the
    /// next checkpoint finishes).
    wiped: bool,
    /// Attached files removed from the files folder.
    files: u64,
    dry_run: bool,
}

/// `memtape erase`.
pub fn erase(ctx: &Ctx, a: &EraseArgs, out: &mut impl Write) -> Result<()> {
    let what = match &a.what {
        EraseWhat::User => match &ctx.user {
            Some(user) => Erase::User(user.clone()),
            None => bail!("memtape erase user needs --user: the user to erase"),
        },
        EraseWhat::Session { session } => Erase::Session(session.clone()),
        EraseWhat::Entries { ids } => Erase::Entries(ids.clone()),
        EraseWhat::Text { text, stdin } => Erase::Text(match (text, stdin) {
            (Some(text), false) => text.clone(),
            (None, true) => {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text)?;
                let text = text.strip_suffix('\n').unwrap_or(&text);
                text.strip_suffix('\r').unwrap_or(text).to_owned()
            }
            _ => bail!("memtape erase text needs the text, or --stdin to read it"),
        }),
    };
    let dir = ctx.data_dir()?;
    // The search index applies the receipt as it is written, with the model it was built
    // with (a different --model is refused before anything is erased). Without an index
    // file there is nothing to apply it to.
    let engine = if !a.dry_run && memtape::Index::exists_in(&dir) {
        open_indexed(ctx, &Tuning::default())?
    } else {
        open(ctx)?
    };
    let options = EraseOptions {
        by: "cli".into(),
        reason: a.reason.clone(),
        dry_run: a.dry_run,
        compact: a.compact,
    };
    let outcome = engine.erase(&ctx.base_scope()?, what, options, Some(&dir))?;
    output::json(
        out,
        &Erased {
            receipt: outcome.receipt.as_ref().map(|r| r.id),
            entries: outcome.entries,
            redacted: outcome.redacted,
            ids: outcome.ids,
            wiped: outcome.wiped,
            files: outcome.files_removed,
            dry_run: a.dry_run,
        },
    )
}

/// `memtape retention`.
#[derive(Args, Debug)]
pub struct RetentionArgs {
    #[command(subcommand)]
    what: RetentionWhat,
    #[command(flatten)]
    pub scope: ScopeArgs,
    #[command(flatten)]
    pub models: ModelArgs,
}

/// What `memtape retention` does.
#[derive(Subcommand, Debug)]
enum RetentionWhat {
    /// The policy in effect for --agent of --tenant: memtape.toml's, and one an admin set
    /// over REST, which wins field by field.
    Show,
    /// Expire, in --tenant (or every tenant), what each agent's policy no longer keeps:
    /// one erasure with one receipt per agent that had anything to expire.
    Run {
        /// Every tenant of the store, not only --tenant.
        #[arg(long)]
        all_tenants: bool,
        /// Count what would expire, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// One agent's part of a run, as printed.
#[derive(Serialize)]
struct RunLine {
    tenant: String,
    agent: String,
    policy: memtape::Retention,
    receipt: Option<EntryId>,
    entries: u64,
    wiped: bool,
    files: u64,
    dry_run: bool,
}

/// `memtape retention`.
pub fn retention(ctx: &Ctx, a: &RetentionArgs, out: &mut impl Write) -> Result<()> {
    let config = crate::config::load(ctx)?;
    match &a.what {
        RetentionWhat::Show => {
            let engine = open(ctx)?;
            output::json(
                out,
                &engine.retention(&ctx.base_scope()?, &config.retention)?,
            )
        }
        RetentionWhat::Run {
            all_tenants,
            dry_run,
        } => {
            let dir = ctx.data_dir()?;
            let engine = if !dry_run && memtape::Index::exists_in(&dir) {
                open_indexed(ctx, &Tuning::default())?
            } else {
                open(ctx)?
            };
            let tenant = (!all_tenants).then_some(ctx.tenant.as_str());
            let runs =
                engine.run_retention(tenant, &config.retention, "cli", *dry_run, Some(&dir))?;
            let lines: Vec<RunLine> = runs
                .into_iter()
                .map(|r| RunLine {
                    tenant: r.policy.scope.tenant().to_owned(),
                    agent: r.policy.scope.agent_name().to_owned(),
                    policy: r.policy.effective,
                    receipt: r.outcome.receipt.as_ref().map(|e| e.id),
                    entries: r.outcome.entries,
                    wiped: r.outcome.wiped,
                    files: r.outcome.files_removed,
                    dry_run: *dry_run,
                })
                .collect();
            output::json(out, &lines)
        }
    }
}
