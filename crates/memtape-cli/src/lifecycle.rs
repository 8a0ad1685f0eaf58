//! The session lifecycle commands: `new` (nanobot's /new: archive the unconsolidated
//! messages to HISTORY.md with the extractive summarizer, then clear the session; then,
//! as a new session starts, prune the memory's old daily notes).

use std::io::Write;

use anyhow::{Context, Result, bail};
use memtape::summary::ExtractiveSummarizer;
use memtape::{Store, memory_scope};

use crate::{Cli, open, session_scope};

/// `memtape new SESSION`: archives the session's unconsolidated messages and clears it.
/// When archiving fails the session is left as it was and the command fails.
pub fn new_session(
    cli: &Cli,
    session: &str,
    retention_days: u32,
    stdout: &mut impl Write,
) -> Result<()> {
    let engine = open(cli)?;
    let scope = session_scope(cli, session)?;
    if engine.store().scope_info(&scope)?.is_none() {
        bail!("no session {scope}");
    }
    let new = engine
        .new_session(&scope, &ExtractiveSummarizer::default())
        .with_context(|| format!("archiving {scope} (the session was not cleared)"))?;
    match (&new.history, new.archived) {
        (_, 0) => writeln!(stdout, "nothing to archive; {scope} cleared")?,
        (Some(h), n) => writeln!(
            stdout,
            "archived {n} messages to HISTORY.md (memory version {}); {scope} cleared",
            h.version
        )?,
        (None, n) => writeln!(
            stdout,
            "archived {n} messages (nothing worth a HISTORY.md entry); {scope} cleared"
        )?,
    }
    // Prune on start (Bub's retention): the new session begins without stale notes.
    if retention_days > 0 {
        let pruned = engine.prune_daily(&memory_scope(&scope)?, retention_days)?;
        if pruned > 0 {
            writeln!(
                stdout,
                "removed {pruned} daily note(s) older than {retention_days} days"
            )?;
        }
    }
    Ok(())
}
