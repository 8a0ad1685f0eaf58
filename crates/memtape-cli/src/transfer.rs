//! Import and export: memtape's lossless JSONL, nanobot session files and Bub tapes.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, ValueEnum};
use memtape::Format;

use crate::ctx::{Ctx, ScopeArgs, existing_session, open};

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
    /// The file's format.
    #[arg(long, value_enum)]
    format: FormatArg,
    /// The file.
    file: PathBuf,
    /// The session to import into (default: the nanobot key, or the Bub file's name).
    #[arg(long, value_name = "KEY")]
    session: Option<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The format to write.
    #[arg(long, value_enum)]
    format: FormatArg,
    /// The session key.
    session: Option<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `memtape import`: all of the file or nothing; says what was imported and where.
pub fn import(ctx: &Ctx, a: &ImportArgs, out: &mut impl Write) -> Result<()> {
    let engine = open(ctx)?;
    let file = &a.file;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let session = match (a.format, &a.session) {
        (FormatArg::Bub, None) => file.file_stem().map(|s| s.to_string_lossy().into_owned()),
        (_, s) => s.clone(),
    };
    let report = engine
        .import(
            a.format.into(),
            &text,
            &ctx.base_scope()?,
            session.as_deref(),
        )
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
    let engine = open(ctx)?;
    let scope = match &a.session {
        Some(s) => Some(existing_session(&engine, ctx, s)?),
        None => None,
    };
    engine.export(a.format.into(), &ctx.tenant, scope.as_ref(), out)?;
    Ok(())
}
