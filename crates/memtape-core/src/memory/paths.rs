//! Well-known paths of the memory workspace, and the rules every path must keep.

use chrono::NaiveDate;

use crate::{Error, Result};

/// Long-term facts (nanobot, Bub, MateClaw, Qanot): replaced as a whole.
pub const MEMORY: &str = "MEMORY.md";
/// The user profile (MateClaw): replaced as a whole.
pub const PROFILE: &str = "PROFILE.md";
/// The event history (nanobot): append-only, one timestamped paragraph per entry.
pub const HISTORY: &str = "HISTORY.md";
/// Working state (Qanot's WAL entries).
pub const SESSION_STATE: &str = "SESSION-STATE.md";
/// The agent's behaviour guide (MateClaw; enabled, sort order 0 by default).
pub const AGENTS: &str = "AGENTS.md";
/// The agent's identity and personality (MateClaw; enabled, sort order 1 by default).
pub const SOUL: &str = "SOUL.md";
/// Qanot's working buffer, kept while the context is past half full.
pub const WORKING_BUFFER: &str = "memory/working-buffer.md";
/// The folder of daily notes.
pub const DAILY_DIR: &str = "memory/";
/// The folder of Anthropic's memory tool (`/memories/…` in the tool).
pub const MEMORIES_DIR: &str = "memories/";
/// The heading SESSION-STATE.md starts with (Qanot).
pub const SESSION_STATE_HEADING: &str = "# SESSION-STATE.md -- Active Working Memory\n\n";

/// The logs that grow by appends for as long as an agent runs — the working state
/// (Qanot's WAL lines), the event history (nanobot) and Qanot's working buffer (its
/// exchanges) — with what separates their entries.
/// When an append would take one past the size limit, the file keeps its newest entries
/// ([`MemoryView::fit`](super::MemoryView::fit)); the older ones stay in earlier versions.
pub fn rolling(path: &str) -> Option<&'static str> {
    match path {
        SESSION_STATE => Some("\n"),
        HISTORY => Some("\n\n"),
        WORKING_BUFFER => Some("\n"),
        _ => None,
    }
}

/// The daily note of `date`: `memory/YYYY-MM-DD.md`.
pub fn daily(date: NaiveDate) -> String {
    format!("{DAILY_DIR}{}.md", date.format("%Y-%m-%d"))
}

/// The heading a new daily note starts with: `# YYYY-MM-DD` and a blank line.
pub fn daily_heading(date: NaiveDate) -> String {
    format!("# {}\n\n", date.format("%Y-%m-%d"))
}

/// The heading a new daily note of Qanot's automatic notes starts with (seed 004):
/// `# Daily Notes -- YYYY-MM-DD` and a blank line.
pub fn qanot_daily_heading(date: NaiveDate) -> String {
    format!("# Daily Notes -- {}\n\n", date.format("%Y-%m-%d"))
}

/// The date of a daily note's path, if it is one.
pub fn daily_date(path: &str) -> Option<NaiveDate> {
    let name = path.strip_prefix(DAILY_DIR)?.strip_suffix(".md")?;
    NaiveDate::parse_from_str(name, "%Y-%m-%d").ok()
}

/// The enabled flag and sort order a file starts with (MateClaw's seed data): the core
/// files AGENTS.md (0), SOUL.md (1), PROFILE.md (2) and MEMORY.md (3) are enabled, as is
/// SESSION-STATE.md; every other file is off until enabled. AGENTS.md and SOUL.md are
/// injected as agent files; the files [`always_in_prompt`] names reach the prompt through
/// the `<memory>` block, so their flag says what is true of them.
pub fn default_flags(path: &str) -> (bool, i64) {
    match path {
        AGENTS => (true, 0),
        SOUL => (true, 1),
        PROFILE => (true, 2),
        MEMORY => (true, 3),
        SESSION_STATE => (true, 100),
        _ => (false, 100),
    }
}

/// Whether the file is in every prompt whatever its flag (the `<memory>` block shows it):
/// MEMORY.md, PROFILE.md and SESSION-STATE.md. Such a file cannot be disabled.
pub fn always_in_prompt(path: &str) -> bool {
    matches!(path, MEMORY | PROFILE | SESSION_STATE)
}

/// Longest accepted path, in bytes (well under the 4096 bytes Linux allows for a whole
/// path, so a workspace folder has room in front of it).
pub const MAX_PATH_BYTES: usize = 512;

/// Longest accepted name of one file or folder, in bytes: what Linux file systems allow
/// (`NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Whether the markdown workspace's sync passes over a file or folder of this name without
/// reading it: hidden names (a leading `.`, like its own `.memtape/`) and editor backups
/// (`#name#`, `name~`). [`check_path`] refuses such names, so memory never holds a file
/// that a sync would write and then not read back.
pub fn sync_ignores(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('#') || name.ends_with('~')
}

/// Checks a workspace path and returns it in its one accepted form: relative, `/`-separated,
/// no empty, `.` or `..` segments, no backslashes, control characters or percent-encoded
/// dots and slashes; no name longer than [`MAX_NAME_BYTES`]; no hidden names or editor
/// backups ([`sync_ignores`]). Each rejection names the path and the rule.
pub fn check_path(path: &str) -> Result<String> {
    let bad = |why: &str| Error::InvalidPath {
        path: path.to_string(),
        why: why.to_string(),
    };
    if path.is_empty() {
        return Err(bad("the path is empty"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(bad("the path is longer than 512 bytes"));
    }
    if path.starts_with('/') || path.starts_with('~') || path.contains(':') {
        return Err(bad(
            "absolute paths are not allowed; give a path relative to the workspace",
        ));
    }
    if path.contains('\\') {
        return Err(bad("backslashes are not allowed; separate folders with /"));
    }
    if path.chars().any(char::is_control) {
        return Err(bad("control characters are not allowed"));
    }
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "%00"]
        .iter()
        .any(|e| lower.contains(e))
    {
        return Err(bad("percent-encoded dots, slashes or NULs are not allowed"));
    }
    for segment in path.split('/') {
        match segment {
            "" => {
                return Err(bad(
                    "empty path segments (// or a trailing /) are not allowed",
                ));
            }
            "." | ".." => return Err(bad("`.` and `..` segments are not allowed")),
            name if name.len() > MAX_NAME_BYTES => {
                return Err(bad(&format!(
                    "a file or folder name is at most {MAX_NAME_BYTES} bytes (the file \
                     system's limit); one here is {} bytes",
                    name.len()
                )));
            }
            name if name.starts_with('.') => {
                return Err(bad(
                    "hidden names (starting with .) are not allowed: the workspace sync \
                     does not read them",
                ));
            }
            name if sync_ignores(name) => {
                return Err(bad(
                    "editor backup names (starting with # or ending with ~) are not \
                     allowed: the workspace sync does not read them",
                ));
            }
            _ => {}
        }
    }
    Ok(path.to_string())
}
