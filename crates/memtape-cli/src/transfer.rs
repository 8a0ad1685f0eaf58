//! Import and export: memtape's lossless JSONL, nanobot session files and Bub tapes; and
//! `memtape migrate`, the whole tape copied between SQLite and PostgreSQL.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};
use memtape::{DynStore, Engine, Format, SqliteStore, Store};
use memtape_postgres::PostgresStore;

use crate::ctx::{Ctx, ScopeArgs, StoreArgs, existing_session, open_read_only};

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
    /// The file's format (default: told by its first lines, and said on stderr). A memtape
    /// file stays inside --tenant/--agent/--user: an entry of another scope is refused and
    /// nothing is imported.
    #[arg(long, value_enum)]
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

/// The format `--format` gives, else the one `text` (the file `file`) reads as, said on
/// stderr; `None` for a file with no lines.
fn format_of(ctx: &Ctx, a: &ImportArgs, text: &str) -> Result<Option<FormatArg>> {
    if let Some(format) = a.format {
        return Ok(Some(format));
    }
    let detected = Format::detect(text).map_err(|why| {
        anyhow::anyhow!(
            "cannot tell the format of {}: {why}; pass --format memtape, nanobot or bub \
             (nothing was imported)",
            a.file.display()
        )
    })?;
    let Some(format) = detected else {
        return Ok(None);
    };
    let (arg, what) = match format {
        Format::Memtape => (FormatArg::Memtape, "memtape entries"),
        Format::Nanobot => (FormatArg::Nanobot, "a nanobot session file"),
        Format::Bub => (FormatArg::Bub, "a Bub tape"),
    };
    if !ctx.quiet {
        eprintln!(
            "{} reads as {what}: importing it as --format {}",
            a.file.display(),
            format.name()
        );
    }
    Ok(Some(arg))
}

/// `memtape import`: all of the file or nothing; says what was imported and where. The
/// store is created when there is none, as `memtape serve` does.
pub fn import(ctx: &Ctx, a: &ImportArgs, out: &mut impl Write) -> Result<()> {
    let file = &a.file;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let format = if a.restore {
        None
    } else {
        match format_of(ctx, a, &text)? {
            Some(format) => Some(format),
            None => {
                writeln!(out, "nothing imported: {} holds no entries", file.display())?;
                return Ok(());
            }
        }
    };
    let engine = crate::ctx::init(ctx)?;
    let report = match format {
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

/// `memtape migrate`.
#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// Copy the data directory's SQLite store into the PostgreSQL database at URL. Stop the
    /// servers and other writers first: entries written during the copy make the final
    /// check fail.
    #[arg(
        long,
        value_name = "URL",
        required_unless_present = "from",
        conflicts_with = "from"
    )]
    to: Option<String>,
    /// Copy the PostgreSQL database at URL into the data directory's SQLite store.
    #[arg(long, value_name = "URL")]
    from: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// How many entries `memtape migrate` copies per transaction.
const MIGRATE_BATCH: usize = 5_000;

/// A writer that only hashes what it is given: an export's digest without holding it.
struct Digest(sha2::Sha256, u64);

impl Write for Digest {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use sha2::Digest as _;
        self.0.update(buf);
        self.1 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The SHA-256 (hex) and size of `store`'s whole-store export (`memtape export --all`).
fn export_digest(store: DynStore) -> Result<(String, u64)> {
    use sha2::Digest as _;
    let engine = Engine::with_store(store);
    let mut digest = Digest(sha2::Sha256::new(), 0);
    engine.export_store(&mut digest)?;
    let hex = digest
        .0
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, digest.1))
}

/// `memtape migrate --to URL | --from URL`: copies every entry, in id order and with its
/// id, from one store into the other, which must be empty (so every id is kept and an
/// export of either side is the same, byte for byte); then compares the two exports'
/// digests. The source is only read.
pub fn migrate(ctx: &Ctx, a: &MigrateArgs, out: &mut impl Write) -> Result<()> {
    let dir = ctx.data_dir()?;
    let check_url = |url: &str| -> Result<()> {
        if !memtape_postgres::is_postgres_url(url) {
            bail!(
                "{url:?} is not a PostgreSQL address: write postgres://user:password@host:port/database"
            );
        }
        Ok(())
    };
    let open_source = || -> Result<(DynStore, String)> {
        Ok(match (&a.to, &a.from) {
            (Some(_), _) => (
                Box::new(SqliteStore::open_read_only(&dir)?),
                dir.display().to_string(),
            ),
            (None, Some(url)) => {
                check_url(url)?;
                let store = PostgresStore::connect_read_only(url)?;
                let name = store.address().to_owned();
                (Box::new(store), name)
            }
            (None, None) => bail!("say where to copy: --to URL or --from URL"),
        })
    };
    let open_target = || -> Result<(DynStore, String)> {
        Ok(match (&a.to, &a.from) {
            (Some(url), _) => {
                check_url(url)?;
                let store = PostgresStore::connect(url)?;
                let name = store.address().to_owned();
                (Box::new(store), name)
            }
            _ => (
                Box::new(SqliteStore::create(&dir)?),
                dir.display().to_string(),
            ),
        })
    };
    let (source, from) = open_source()?;
    let (target, to) = open_target()?;
    let last = target.last_id()?;
    if last.0 > 0 {
        bail!(
            "{to} already holds entries (up to #{last}): migrate copies into an empty store only, \
             so that every id is kept and both sides export the same bytes (after an interrupted \
             migrate, start again into a new database or data directory); to add entries to a \
             store that has some, use `memtape export --all` and `memtape import --restore`"
        );
    }
    let started = std::time::Instant::now();
    let progress = crate::progress::Progress::spinner(ctx, &format!("copying {from} to {to}"));
    let total = source.last_id()?.0;
    let (mut after, mut copied) = (memtape::EntryId(0), 0u64);
    loop {
        // Past an erasure under way, once it ends: the copy holds the whole tape.
        let batch = memtape::entries_after_all(
            source.as_ref(),
            after,
            MIGRATE_BATCH,
            std::time::Duration::from_secs(60),
        )?;
        let Some(tail) = batch.last() else {
            break;
        };
        let from_id = after;
        after = tail.id;
        let n = batch.len() as u64;
        let restored = target
            .restore(batch)
            .with_context(|| format!("copying the entries after #{from_id} into {to}"))?;
        if restored.placement != memtape::Placement::KeptIds {
            bail!(
                "{to} could not keep the ids of the entries after #{from_id}; the copy is incomplete: start again into an empty store"
            );
        }
        copied += n;
        progress.update(after.0 as usize, total as usize);
    }
    progress.finish();
    let (a_digest, a_bytes) = export_digest(source)?;
    let (b_digest, _) = export_digest(target)?;
    if a_digest != b_digest {
        bail!(
            "the copy differs from its source (export sha256 {a_digest} in {from}, {b_digest} in {to})"
        );
    }
    writeln!(
        out,
        "copied {copied} entries from {from} to {to} in {:.1}s; both export the same {a_bytes} bytes (sha256 {a_digest})",
        started.elapsed().as_secs_f64()
    )?;
    if a.to.is_some() {
        writeln!(
            out,
            "run memtape with --database (or MEMTAPE_DATABASE_URL) to use it; the SQLite store is left as it was"
        )?;
    }
    Ok(())
}
