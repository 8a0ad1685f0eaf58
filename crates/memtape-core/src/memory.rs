//! Memory as tape events. Every change to an agent's (or an agent and user's) memory is one
//! `memory.change` event carrying a list of [`Op`]s on markdown files; the memory view is a
//! fold of those events in tape order. Nothing is overwritten: any earlier version can be
//! rebuilt ([`MemoryLog::view_at`]), compared ([`diff`]) and restored ([`MemoryLog::undo_to`]).
//!
//! Every tier of the seeds is a file of this one workspace (see [`paths`]): long-term facts
//! `MEMORY.md` and the user profile `PROFILE.md` (full replace), daily notes
//! `memory/YYYY-MM-DD.md` and the event history `HISTORY.md` (append), working state
//! `SESSION-STATE.md`, agent files `AGENTS.md` / `SOUL.md` (with an enabled flag and a sort
//! order, MateClaw), and free-form files under `memories/` (Anthropic's memory tool).
//!
//! A change's version is its position among the scope's changes (1, 2, 3, …): stable
//! forever, because the tape is never rewritten. Bub's memory zones (`memory/open` and
//! `memory/seal` anchors around a full snapshot) are read and written at the Bub tape
//! boundary ([`crate::formats::bub`]); inside memtape each version is one event, which makes
//! a change atomic by construction and keeps appends cheap.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::MEMORY_CHANGE;
use crate::{Entry, EntryId, Error, Payload, Result};

/// Well-known paths of the memory workspace, and the rules that go with them.
pub mod paths {
    use chrono::NaiveDate;

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

    /// The daily note of `date`: `memory/YYYY-MM-DD.md`.
    pub fn daily(date: NaiveDate) -> String {
        format!("{DAILY_DIR}{}.md", date.format("%Y-%m-%d"))
    }

    /// The heading a new daily note starts with: `# YYYY-MM-DD` and a blank line.
    pub fn daily_heading(date: NaiveDate) -> String {
        format!("# {}\n\n", date.format("%Y-%m-%d"))
    }

    /// The date of a daily note's path, if it is one.
    pub fn daily_date(path: &str) -> Option<NaiveDate> {
        let name = path.strip_prefix(DAILY_DIR)?.strip_suffix(".md")?;
        NaiveDate::parse_from_str(name, "%Y-%m-%d").ok()
    }

    /// The enabled flag and sort order a file starts with (MateClaw's seed data): AGENTS.md
    /// and SOUL.md go into the system prompt first; every other file is off until enabled.
    /// (MEMORY.md, PROFILE.md and the notes reach the prompt through the `<memory>` block.)
    pub fn default_flags(path: &str) -> (bool, i64) {
        match path {
            AGENTS => (true, 0),
            SOUL => (true, 1),
            PROFILE => (false, 2),
            MEMORY => (false, 3),
            _ => (false, 100),
        }
    }
}

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 512;

/// Checks a workspace path and returns it in its one accepted form: relative, `/`-separated,
/// no empty, `.` or `..` segments, no backslashes, control characters or percent-encoded
/// dots and slashes. Each rejection names the path and the rule.
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
            _ => {}
        }
    }
    Ok(path.to_string())
}

/// One operation on the memory workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Creates the file or replaces its whole content.
    Write {
        /// The file.
        path: String,
        /// Its new content.
        content: String,
    },
    /// Appends text to the file, creating it (starting with `heading`, if given) when it
    /// does not exist at that point of the fold, so two concurrent appends to a new daily
    /// note still give one heading.
    Append {
        /// The file.
        path: String,
        /// The text, with whatever separators the caller wants.
        text: String,
        /// What a newly created file starts with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heading: Option<String>,
    },
    /// Removes the file (its versions stay on the tape).
    Delete {
        /// The file.
        path: String,
    },
    /// Moves a file (or every file under a folder, when `from` ends without `.md` and
    /// names a folder) to a new path.
    Rename {
        /// The old path.
        from: String,
        /// The new path.
        to: String,
    },
    /// Sets a file's MateClaw flags.
    Flags {
        /// The file.
        path: String,
        /// Whether the file is injected into the system prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        enabled: Option<bool>,
        /// Its place among injected files (lower first).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sort_order: Option<i64>,
    },
    /// Removes earlier changes from the fold as if they had never been made (Bub's planned
    /// `memory.forget`); the entries themselves stay on the tape.
    Forget {
        /// The `memory.change` entries to leave out.
        changes: Vec<EntryId>,
    },
    /// Removes every file.
    Clear,
}

impl Op {
    /// The paths this op touches (empty for `forget` and `clear`).
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Op::Write { path, .. }
            | Op::Append { path, .. }
            | Op::Delete { path }
            | Op::Flags { path, .. } => vec![path],
            Op::Rename { from, to } => vec![from, to],
            Op::Forget { .. } | Op::Clear => Vec::new(),
        }
    }
}

/// One version of memory: the ops of one `memory.change` event, and what made them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The ops, applied in order.
    pub ops: Vec<Op>,
    /// What made the change (a tool name, `sync`, `wal`, `undo`, …).
    #[serde(default)]
    pub source: String,
}

impl Change {
    /// A change of one op.
    pub fn one(op: Op, source: impl Into<String>) -> Self {
        Change {
            ops: vec![op],
            source: source.into(),
        }
    }

    /// Checks every path and refuses an empty change.
    pub fn validate(&self) -> Result<()> {
        if self.ops.is_empty() {
            return Err(Error::InvalidMemory(
                "a memory change needs at least one op".into(),
            ));
        }
        for op in &self.ops {
            for path in op.paths() {
                check_path(path)?;
            }
        }
        Ok(())
    }

    /// The event that records this change.
    pub fn to_payload(&self) -> Payload {
        Payload::Event(crate::Event {
            name: MEMORY_CHANGE.to_string(),
            data: serde_json::to_value(self).unwrap_or(Value::Null),
        })
    }

    /// The change an entry records, if it is a `memory.change` event.
    pub fn from_entry(entry: &Entry) -> Option<Result<Change>> {
        match &entry.payload {
            Payload::Event(e) if e.name == MEMORY_CHANGE => {
                Some(serde_json::from_value(e.data.clone()).map_err(|err| {
                    Error::InvalidEntry(format!("entry {}: bad memory.change: {err}", entry.id))
                }))
            }
            _ => None,
        }
    }
}

/// A change as recorded on the tape.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// Its version: its position among the scope's changes, from 1.
    pub version: u64,
    /// The event's entry id.
    pub id: EntryId,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// What it did.
    pub change: Change,
}

/// One file of the memory view.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryFile {
    /// The text.
    pub content: String,
    /// Whether it is injected into the system prompt (MateClaw).
    pub enabled: bool,
    /// Its place among injected files.
    pub sort_order: i64,
    /// The version that created it (or last replaced it wholesale after a delete).
    pub created: u64,
    /// The version that last changed it.
    pub updated: u64,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// The changes whose text makes up the content now: the last write and every append
    /// after it. A search hit on any other change's text is no longer current.
    pub parts: Vec<EntryId>,
}

/// The memory as of one version: its files by path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryView {
    /// The version folded up to (0 = nothing yet).
    pub version: u64,
    /// The files, by path.
    pub files: BTreeMap<String, MemoryFile>,
}

impl MemoryView {
    /// A file's content.
    pub fn content(&self, path: &str) -> Option<&str> {
        self.files.get(path).map(|f| f.content.as_str())
    }

    /// The daily notes, newest first, as (date, path, file).
    pub fn dailies(&self) -> Vec<(NaiveDate, &str, &MemoryFile)> {
        let mut out: Vec<_> = self
            .files
            .iter()
            .filter_map(|(p, f)| paths::daily_date(p).map(|d| (d, p.as_str(), f)))
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.0));
        out
    }

    /// Whether the change `id` still contributes text to `path`.
    pub fn is_current(&self, path: &str, id: EntryId) -> bool {
        self.files.get(path).is_some_and(|f| f.parts.contains(&id))
    }

    fn apply(&mut self, version: u64, id: EntryId, at: DateTime<Utc>, op: &Op) {
        let touch = |f: &mut MemoryFile| {
            f.updated = version;
            f.updated_at = at;
        };
        let fresh = |path: &str, content: String| {
            let (enabled, sort_order) = paths::default_flags(path);
            MemoryFile {
                content,
                enabled,
                sort_order,
                created: version,
                updated: version,
                updated_at: at,
                parts: vec![id],
            }
        };
        match op {
            Op::Write { path, content } => match self.files.get_mut(path) {
                Some(f) => {
                    f.content.clone_from(content);
                    f.parts = vec![id];
                    touch(f);
                }
                None => {
                    self.files
                        .insert(path.clone(), fresh(path, content.clone()));
                }
            },
            Op::Append {
                path,
                text,
                heading,
            } => match self.files.get_mut(path) {
                Some(f) => {
                    f.content.push_str(text);
                    f.parts.push(id);
                    touch(f);
                }
                None => {
                    let content = format!("{}{text}", heading.as_deref().unwrap_or(""));
                    self.files.insert(path.clone(), fresh(path, content));
                }
            },
            Op::Delete { path } => {
                let prefix = format!("{path}/");
                self.files
                    .retain(|p, _| p != path && !p.starts_with(&prefix));
            }
            Op::Rename { from, to } => {
                let prefix = format!("{from}/");
                let moved: Vec<String> = self
                    .files
                    .keys()
                    .filter(|p| *p == from || p.starts_with(&prefix))
                    .cloned()
                    .collect();
                for old in moved {
                    if let Some(mut f) = self.files.remove(&old) {
                        touch(&mut f);
                        let new = format!("{to}{}", &old[from.len()..]);
                        self.files.insert(new, f);
                    }
                }
            }
            Op::Flags {
                path,
                enabled,
                sort_order,
            } => {
                if let Some(f) = self.files.get_mut(path) {
                    if let Some(e) = enabled {
                        f.enabled = *e;
                    }
                    if let Some(s) = sort_order {
                        f.sort_order = *s;
                    }
                    touch(f);
                }
            }
            Op::Forget { .. } => {}
            Op::Clear => self.files.clear(),
        }
    }
}

/// A scope's memory changes in tape order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryLog {
    changes: Vec<Recorded>,
}

impl MemoryLog {
    /// The log of the `memory.change` events among `entries` (one scope's, in tape order);
    /// other entries are skipped. A malformed change is an error naming its entry.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Result<Self> {
        let mut changes = Vec::new();
        for entry in entries {
            if let Some(change) = Change::from_entry(entry) {
                changes.push(Recorded {
                    version: changes.len() as u64 + 1,
                    id: entry.id,
                    at: entry.created_at,
                    change: change?,
                });
            }
        }
        Ok(MemoryLog { changes })
    }

    /// Every change, oldest first.
    pub fn changes(&self) -> &[Recorded] {
        &self.changes
    }

    /// The latest version (0 when memory was never changed).
    pub fn version(&self) -> u64 {
        self.changes.len() as u64
    }

    /// The change with this version.
    pub fn get(&self, version: u64) -> Option<&Recorded> {
        version
            .checked_sub(1)
            .and_then(|i| self.changes.get(i as usize))
    }

    /// The change recorded by entry `id`.
    pub fn by_id(&self, id: EntryId) -> Option<&Recorded> {
        self.changes.iter().find(|r| r.id == id)
    }

    /// The entries that a later `forget` left out.
    pub fn forgotten(&self) -> HashSet<EntryId> {
        self.changes
            .iter()
            .flat_map(|r| &r.change.ops)
            .filter_map(|op| match op {
                Op::Forget { changes } => Some(changes.iter().copied()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The memory now.
    pub fn view(&self) -> MemoryView {
        self.view_at(self.version())
    }

    /// The memory as it was right after `version` (forgotten changes left out, as if
    /// never made).
    pub fn view_at(&self, version: u64) -> MemoryView {
        let forgotten = self.forgotten();
        let mut view = MemoryView::default();
        for r in self.changes.iter().take_while(|r| r.version <= version) {
            view.version = r.version;
            if forgotten.contains(&r.id) {
                continue;
            }
            for op in &r.change.ops {
                view.apply(r.version, r.id, r.at, op);
            }
        }
        view
    }

    /// The memory as it was at time `at` (every change made at or before it).
    pub fn view_as_of(&self, at: DateTime<Utc>) -> MemoryView {
        let version = self
            .changes
            .iter()
            .take_while(|r| r.at <= at)
            .last()
            .map_or(0, |r| r.version);
        self.view_at(version)
    }

    /// The changes that touched `path` (every change when `None`), oldest first.
    pub fn versions(&self, path: Option<&str>) -> Vec<&Recorded> {
        self.changes
            .iter()
            .filter(|r| {
                path.is_none_or(|p| {
                    r.change.ops.iter().any(|op| {
                        matches!(op, Op::Clear)
                            || op.paths().iter().any(|q| {
                                p.strip_prefix(q)
                                    .is_some_and(|r| r.is_empty() || r.starts_with('/'))
                            })
                    })
                })
            })
            .collect()
    }

    /// The change that brings memory back to how it was at `version`: rewrites of the files
    /// that differ, deletes of the files made since. `None` when nothing differs. Fails for
    /// a version that does not exist.
    pub fn undo_to(&self, version: u64) -> Result<Option<Change>> {
        if version > self.version() {
            return Err(Error::InvalidMemory(format!(
                "there is no version {version}; the latest is {}",
                self.version()
            )));
        }
        let then = self.view_at(version);
        let now = self.view();
        let mut ops = Vec::new();
        for path in now.files.keys() {
            if !then.files.contains_key(path) {
                ops.push(Op::Delete { path: path.clone() });
            }
        }
        for (path, old) in &then.files {
            let current = now.files.get(path);
            if current.is_none_or(|f| f.content != old.content) {
                ops.push(Op::Write {
                    path: path.clone(),
                    content: old.content.clone(),
                });
            }
            if current.is_none_or(|f| f.enabled != old.enabled || f.sort_order != old.sort_order) {
                ops.push(Op::Flags {
                    path: path.clone(),
                    enabled: Some(old.enabled),
                    sort_order: Some(old.sort_order),
                });
            }
        }
        Ok((!ops.is_empty()).then(|| Change {
            ops,
            source: format!("undo to version {version}"),
        }))
    }
}

/// A unified diff from view `a` to view `b`, file by file (`a/PATH` → `b/PATH`); empty when
/// they hold the same files with the same text.
pub fn diff(a: &MemoryView, b: &MemoryView) -> String {
    let mut out = String::new();
    let paths: std::collections::BTreeSet<&String> = a.files.keys().chain(b.files.keys()).collect();
    for path in paths {
        let old = a.content(path);
        let new = b.content(path);
        if old == new {
            continue;
        }
        let old_name = if old.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".to_string()
        };
        let new_name = if new.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".to_string()
        };
        let text = similar::TextDiff::from_lines(old.unwrap_or(""), new.unwrap_or(""));
        out.push_str(
            &text
                .unified_diff()
                .context_radius(3)
                .header(&old_name, &new_name)
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Meta, Scope};

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + chrono::Duration::minutes(minute)
    }

    fn log(changes: &[Change]) -> MemoryLog {
        let scope = Scope::agent("t", "a").unwrap();
        let entries: Vec<Entry> = changes
            .iter()
            .enumerate()
            .map(|(i, c)| Entry {
                id: EntryId(10 + i as u64),
                scope: scope.clone(),
                payload: c.to_payload(),
                meta: Meta::new(),
                created_at: at(i as i64),
                parent: None,
            })
            .collect();
        MemoryLog::from_entries(&entries).unwrap()
    }

    fn write(path: &str, content: &str) -> Change {
        Change::one(
            Op::Write {
                path: path.into(),
                content: content.into(),
            },
            "test",
        )
    }

    fn append(path: &str, text: &str, heading: Option<&str>) -> Change {
        Change::one(
            Op::Append {
                path: path.into(),
                text: text.into(),
                heading: heading.map(String::from),
            },
            "test",
        )
    }

    /// nanobot / MateClaw: MEMORY.md and PROFILE.md are replaced as a whole.
    #[test]
    fn seed_nanobot_long_term_memory_is_a_full_replace() {
        let l = log(&[
            write("MEMORY.md", "likes tea"),
            write("MEMORY.md", "likes coffee"),
        ]);
        assert_eq!(l.view().content("MEMORY.md"), Some("likes coffee"));
        assert_eq!(l.view_at(1).content("MEMORY.md"), Some("likes tea"));
        assert_eq!(l.view().files["MEMORY.md"].parts, [EntryId(11)]);
    }

    /// MateClaw: a daily note is appended to, and created with a `# YYYY-MM-DD` heading.
    #[test]
    fn seed_mateclaw_daily_notes_append_and_start_with_a_date_heading() {
        let date = NaiveDate::from_ymd_opt(2026, 4, 3).unwrap();
        let path = paths::daily(date);
        assert_eq!(path, "memory/2026-04-03.md");
        let heading = paths::daily_heading(date);
        let l = log(&[
            append(&path, "- first\n", Some(&heading)),
            append(&path, "- second\n", Some(&heading)),
        ]);
        assert_eq!(
            l.view().content(&path),
            Some("# 2026-04-03\n\n- first\n- second\n"),
            "one heading, even though both appends carried it"
        );
        assert_eq!(paths::daily_date(&path), Some(date));
        assert_eq!(l.view().dailies()[0].0, date);
    }

    #[test]
    fn every_version_stays_readable_and_diffs_show_what_changed() {
        let l = log(&[
            write("MEMORY.md", "a\nb\n"),
            write("MEMORY.md", "a\nc\n"),
            write("memories/x.md", "x\n"),
        ]);
        assert_eq!(l.version(), 3);
        let d = diff(&l.view_at(1), &l.view_at(3));
        assert!(d.contains("--- a/MEMORY.md\n+++ b/MEMORY.md\n"), "{d}");
        assert!(d.contains("-b\n+c\n"), "{d}");
        assert!(d.contains("--- /dev/null\n+++ b/memories/x.md\n"), "{d}");
        assert_eq!(diff(&l.view(), &l.view()), "");
        assert_eq!(l.view_as_of(at(1)).content("MEMORY.md"), Some("a\nc\n"));
        assert_eq!(l.view_as_of(at(-1)).files.len(), 0);
        assert_eq!(l.versions(Some("MEMORY.md")).len(), 2);
        assert_eq!(l.versions(Some("memories/x.md")).len(), 1);
    }

    #[test]
    fn undo_restores_an_earlier_version_with_ordinary_ops() {
        let changes = vec![
            write("MEMORY.md", "v1"),
            write("MEMORY.md", "v2"),
            write("memories/new.md", "n"),
        ];
        let l = log(&changes);
        let undo = l.undo_to(1).unwrap().unwrap();
        let mut all = changes.clone();
        all.push(undo);
        let after = log(&all);
        assert_eq!(after.view().content("MEMORY.md"), Some("v1"));
        assert!(after.view().content("memories/new.md").is_none());
        assert_eq!(after.version(), 4, "undo is a new version, not a rewrite");
        assert!(after.undo_to(4).unwrap().is_none(), "nothing to undo");
        assert!(l.undo_to(9).is_err());
    }

    /// Bub phase 3: `memory.forget` leaves specific entries out as if never made.
    #[test]
    fn seed_bub_forget_leaves_specific_changes_out() {
        let day = "memory/2026-02-10.md";
        let l = log(&[
            append(day, "keep\n", None),
            append(day, "secret\n", None),
            append(day, "also keep\n", None),
            Change::one(
                Op::Forget {
                    changes: vec![EntryId(11)],
                },
                "test",
            ),
        ]);
        assert_eq!(l.view().content(day), Some("keep\nalso keep\n"));
        assert!(!l.view().is_current(day, EntryId(11)));
        assert!(l.view().is_current(day, EntryId(12)));
        assert_eq!(l.version(), 4);
    }

    #[test]
    fn rename_delete_flags_and_clear() {
        let l = log(&[
            write("memories/a/one.md", "1"),
            write("memories/a/two.md", "2"),
            Change::one(
                Op::Rename {
                    from: "memories/a".into(),
                    to: "memories/b".into(),
                },
                "t",
            ),
            write("SOUL.md", "kind"),
            Change::one(
                Op::Flags {
                    path: "SOUL.md".into(),
                    enabled: Some(false),
                    sort_order: None,
                },
                "t",
            ),
        ]);
        let v = l.view();
        assert_eq!(
            v.files.keys().collect::<Vec<_>>(),
            ["SOUL.md", "memories/b/one.md", "memories/b/two.md"]
        );
        assert!(!v.files["SOUL.md"].enabled);
        assert_eq!(v.files["SOUL.md"].sort_order, 1);
        let cleared = log(&[
            write("MEMORY.md", "x"),
            Change::one(
                Op::Delete {
                    path: "MEMORY.md".into(),
                },
                "t",
            ),
        ]);
        assert!(cleared.view().files.is_empty());
        let all = log(&[write("A.md", "x"), Change::one(Op::Clear, "t")]);
        assert!(all.view().files.is_empty());
    }

    /// MateClaw seed data: AGENTS.md (0) and SOUL.md (1) are enabled; new files are not.
    #[test]
    fn seed_mateclaw_default_flags() {
        assert_eq!(paths::default_flags("AGENTS.md"), (true, 0));
        assert_eq!(paths::default_flags("SOUL.md"), (true, 1));
        assert!(!paths::default_flags("memory/2026-04-01.md").0);
        assert!(!paths::default_flags("notes.md").0);
    }

    /// MateClaw and Anthropic path rules: relative only, no `..`, no absolute paths, no
    /// encoded traversal; each rejection names the path.
    #[test]
    fn seed_mateclaw_paths_must_be_relative_without_traversal() {
        assert_eq!(
            check_path("memories/notes.md").unwrap(),
            "memories/notes.md"
        );
        for bad in [
            "",
            "/etc/passwd",
            "\\windows",
            "../secret.md",
            "a/../b.md",
            "a//b.md",
            "a/./b.md",
            "memories/%2e%2e/x.md",
            "C:/x.md",
            "~/x.md",
            "a\u{0}.md",
            "dir/",
        ] {
            let err = check_path(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
        assert!(check_path(&"a".repeat(600)).is_err());
    }

    #[test]
    fn a_change_round_trips_through_its_event() {
        let c = Change {
            ops: vec![
                Op::Append {
                    path: "HISTORY.md".into(),
                    text: "[2026-03-10 14:30] x\n\n".into(),
                    heading: None,
                },
                Op::Clear,
            ],
            source: "memory.save".into(),
        };
        let l = log(std::slice::from_ref(&c));
        assert_eq!(l.changes()[0].change, c);
        assert!(
            Change {
                ops: vec![],
                source: String::new()
            }
            .validate()
            .is_err()
        );
        assert!(write("../x", "y").validate().is_err());
    }
}
