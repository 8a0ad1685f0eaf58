//! The session lifecycle commands: `new` (nanobot's /new: archive the unconsolidated
//! messages to HISTORY.md with the extractive summarizer, then clear the session; then,
//! as a new session starts, prune the memory's old daily notes) and `start` (Bub's session
//! start: the bootstrap anchor and the memory zone).

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args;
use memtape::memory_scope;
use memtape::summary::ExtractiveSummarizer;

use crate::config;
use crate::ctx::{Ctx, ScopeArgs, existing_session, open};

/// `memtape new`.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// The session key.
    session: String,
    /// Then remove the memory's daily notes older than this many days (Bub's retention;
    /// 0 keeps them all).
    #[arg(long, default_value_t = memtape::DEFAULT_RETENTION_DAYS)]
    retention_days: u32,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape start`.
#[derive(Args, Debug)]
pub struct StartArgs {
    /// The session key.
    session: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape start SESSION`: starts (or resumes) a Bub-style session and prints what it
/// wrote as JSON: `{"bootstrap": id or null, "zone": version or null}`.
pub fn start_session(ctx: &Ctx, a: &StartArgs, stdout: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let scope = ctx.session_scope(&a.session)?;
    let started = engine
        .start_session(&scope)
        .with_context(|| format!("starting {scope}"))?;
    let out = serde_json::json!({
        "session": scope.to_string(),
        "bootstrap": started.bootstrap.map(|id| id.0),
        "zone": started.zone,
    });
    writeln!(stdout, "{out}")?;
    Ok(())
}

/// `memtape new SESSION`: archives the session's unconsolidated messages and clears it.
/// When archiving fails the session is left as it was and the command fails.
pub fn new_session(ctx: &Ctx, a: &NewArgs, stdout: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let scope = existing_session(&engine, ctx, &a.session)?;
    // With a model configured, /new archives as nanobot does: through save_memory.
    let config = config::load(ctx)?;
    let new = match &config.llm {
        Some(llm) => engine.new_session_with_model(
            &scope,
            llm.connect()?.as_ref(),
            config.lifecycle.consolidation(true),
        ),
        None => engine.new_session(&scope, &ExtractiveSummarizer::default()),
    }
    .with_context(|| format!("archiving {scope} (the session was not cleared)"))?;
    match (&new.history, new.archived, &new.consolidated) {
        (_, 0, _) => writeln!(stdout, "nothing to archive; {scope} cleared")?,
        (_, n, Some(done)) => writeln!(
            stdout,
            "archived {n} messages to HISTORY.md{} with the model; {scope} cleared",
            if done.memory_changed {
                " and MEMORY.md"
            } else {
                ""
            }
        )?,
        (Some(h), n, None) => writeln!(
            stdout,
            "archived {n} messages to HISTORY.md (memory version {}); {scope} cleared",
            h.version
        )?,
        (None, n, None) => writeln!(
            stdout,
            "archived {n} messages (nothing worth a HISTORY.md entry); {scope} cleared"
        )?,
    }
    // Prune on start (Bub's retention): the new session begins without stale notes.
    let days = a.retention_days;
    if days > 0 {
        let pruned = engine.prune_daily(&memory_scope(&scope)?, days)?;
        if pruned > 0 {
            writeln!(
                stdout,
                "removed {pruned} daily note(s) older than {days} days"
            )?;
        }
    }
    Ok(())
}
