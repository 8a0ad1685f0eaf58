//! Import and export: memtape's lossless JSONL, nanobot session files and Bub tapes.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, ValueEnum};
use memtape::Format;

use crate::ctx::{Ctx, ScopeArgs, existing_session, open, open_read_only};

/// A JSONL format.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatArg {
    /// memtape's own entry-per-line format (lossless).
    Memtape,
    /// A nanobot session file.
    Nanobot,
    /// A Bub tape.
    Bub,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Memtape => Format::Memtape,
            FormatArg::Nanobot => Format::Nanobot,
            FormatArg::Bub => Format::Bub,
        }
    }
}

/// `memtape import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The file's format. A memtape file stays inside --tenant/--agent/--user: an entry of
    /// another scope is refused and nothing is imported.
    #[arg(long, value_enum, required_unless_present = "restore")]
    format: Option<FormatArg>,
    /// The file.
    file: PathBuf,
    /// The session to import into (default: the nanobot key, or the Bub file's name).
    #[arg(long, value_name = "KEY")]
    session: Option<String>,
    /// Administrator: restore a whole-store backup (`export --all`), every tenant as
    /// written.
    #[arg(long, conflicts_with_all = ["format", "session"])]
    restore: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The format to write.
    #[arg(long, value_enum, required_unless_present = "all")]
    format: Option<FormatArg>,
    /// The session key (memtape format without one: everything of the agent, or of
    /// --user).
    session: Option<String>,
    /// Administrator: the whole store, every tenant, in memtape's format (a backup that
    /// `import --restore` reads back).
    #[arg(long, conflicts_with_all = ["format", "session"])]
    all: bool,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape import`: all of the file or nothing; says what was imported and where.
pub fn import(ctx: &Ctx, a: &ImportArgs, out: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let file = &a.file;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let report = match a.format {
        None => engine.restore_store(&text),
        Some(format) => {
            let session = match (format, &a.session) {
                (FormatArg::Bub, None) => {
                    file.file_stem().map(|s| s.to_string_lossy().into_owned())
                }
                (_, s) => s.clone(),
            };
            engine.import(format.into(), &text, &ctx.base_scope()?, session.as_deref())
        }
    }
    .with_context(|| format!("importing {} (nothing was imported)", file.display()))?;
    if report.entries == 0 {
        writeln!(out, "nothing imported: {} holds no entries", file.display())?;
        return Ok(());
    }
    let mut places: Vec<String> = report
        .sessions
        .iter()
        .map(|s| {
            let mut place = format!("session {}", s.session().unwrap_or("-"));
            if let Some(user) = s.user() {
                place.push_str(&format!(" of user {user}"));
            }
            if s.tenant() != ctx.tenant || s.agent_name() != ctx.agent {
                place.push_str(&format!(
                    " (tenant {}, agent {})",
                    s.tenant(),
                    s.agent_name()
                ));
            }
            place
        })
        .collect();
    if places.is_empty() {
        places.push(format!("tenant {}, agent {}", ctx.tenant, ctx.agent));
    }
    writeln!(
        out,
        "imported {} entries from {} into {}",
        report.entries,
        file.display(),
        places.join(", ")
    )?;
    if report.memory_versions > 0 {
        writeln!(out, "recorded {} memory version(s)", report.memory_versions)?;
    }
    if report.placement == memtape::Placement::Renumbered {
        writeln!(
            out,
            "(ids were renumbered after the store's existing entries)"
        )?;
    }
    Ok(())
}

/// `memtape export`.
pub fn export(ctx: &Ctx, a: &ExportArgs, out: &mut impl Write) -> Result<()> {
    let engine = open_read_only(ctx)?;
    let Some(format) = a.format else {
        engine.export_store(out)?;
        return Ok(());
    };
    let scope = match &a.session {
        Some(s) => existing_session(&engine, ctx, s)?,
        None => ctx.base_scope()?,
    };
    engine.export(format.into(), &scope, out)?;
    Ok(())
}
