//! The session lifecycle commands: `new` (nanobot's /new: archive the unconsolidated
//! messages to HISTORY.md with the extractive summarizer, then clear the session).

use std::io::Write;

use anyhow::{Context, Result, bail};
use memtape::Store;
use memtape::summary::ExtractiveSummarizer;

use crate::{Cli, open, session_scope};

/// `memtape new SESSION`: archives the session's unconsolidated messages and clears it.
/// When archiving fails the session is left as it was and the command fails.
pub fn new_session(cli: &Cli, session: &str, stdout: &mut impl Write) -> Result<()> {
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
    Ok(())
}
