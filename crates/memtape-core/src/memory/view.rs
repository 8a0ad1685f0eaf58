//! The memory view: the files a fold of changes leaves, and diffs between two views.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use chrono::{DateTime, NaiveDate, Utc};

use super::change::too_large;
use super::{Change, MAX_FILE_BYTES, Op, check_path, paths};
use crate::{EntryId, Error, Result};

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

    /// The one admission of every memory write: `change` [fitted](Self::fit) (a rolling
    /// log keeps its newest entries), then [checked](Self::check) (paths, the size limit,
    /// no file inside a file). Returns the change to record.
    pub fn admit(&self, change: Change) -> Result<Change> {
        let change = self.fit(change.composed());
        self.verify(&change)?;
        Ok(change)
    }

    /// Refuses a file `path` would create when it differs from an existing file only by
    /// case: on a case-insensitive disk (macOS, Windows) the two would be one file after a
    /// sync.
    fn check_case(&self, path: &str, created: &[&str]) -> Result<()> {
        let lower = path.to_lowercase();
        let other = self
            .files
            .keys()
            .map(String::as_str)
            .chain(created.iter().copied())
            .find(|p| *p != path && p.to_lowercase() == lower);
        match other {
            Some(other) => Err(Error::InvalidPath {
                path: path.to_owned(),
                why: format!(
                    "it differs from {other} only by case, and a case-insensitive disk would \
                     make them one file"
                ),
            }),
            None => Ok(()),
        }
    }

    /// The view after `change`, recorded as `version` by entry `id` at `at` (a fold of
    /// one more change). A `forget` is not applied: it needs the whole log
    /// ([`MemoryLog`](super::MemoryLog) folds it).
    pub fn record(&mut self, version: u64, id: EntryId, at: DateTime<Utc>, change: &Change) {
        self.version = version;
        for op in &change.ops {
            self.apply(version, id, at, op);
        }
    }

    /// [`check`](Self::check) without building the view after the change: for a change
    /// whose ops each write, append to or flag a different file (a WAL capture, a tool's
    /// edit, a daily note), only the files it touches are looked at, so admitting it costs
    /// what it changes, not the size of the whole memory. Other changes are checked in
    /// full.
    fn verify(&self, change: &Change) -> Result<()> {
        let touched: Option<Vec<&str>> = change
            .ops
            .iter()
            .map(|op| match op {
                Op::Write { path, .. } | Op::Append { path, .. } | Op::Flags { path, .. } => {
                    Some(path.as_str())
                }
                _ => None,
            })
            .collect();
        if touched.is_none_or(|t| t.iter().collect::<BTreeSet<_>>().len() != t.len()) {
            return self.check(change).map(|_| ());
        }
        change.validate()?;
        let mut created = Vec::new();
        for op in &change.ops {
            let (path, len) = match op {
                Op::Write { path, content } => {
                    if self.content(path) == Some(content.as_str()) {
                        continue;
                    }
                    (path, content.len())
                }
                Op::Append {
                    path,
                    text,
                    heading,
                } => match self.content(path) {
                    Some(_) if text.is_empty() => continue,
                    Some(c) => (path, c.len() + text.len()),
                    None => (path, heading.as_deref().map_or(0, str::len) + text.len()),
                },
                _ => continue,
            };
            if !self.files.contains_key(path) {
                check_path(path)?;
                self.check_case(path, &created)?;
                created.push(path.as_str());
            }
            if len > MAX_FILE_BYTES {
                return Err(too_large(path, len));
            }
        }
        // A new file may come to be inside a file, or have files inside it (a file
        // already holding others is left to the changes that fix it, as in `check`).
        let inside_before = |outer: &str| {
            let prefix = format!("{outer}/");
            self.files
                .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                .next()
                .map(|(p, _)| p.as_str())
                .filter(|p| p.starts_with(&prefix))
        };
        for path in &created {
            // An ancestor that is a file (one already holding files was a problem before).
            let outer = path
                .match_indices('/')
                .map(|(at, _)| &path[..at])
                .find(|a| {
                    created.contains(a)
                        || (self.files.contains_key(*a) && inside_before(a).is_none())
                });
            let prefix = format!("{path}/");
            let nested = match outer {
                Some(outer) => Some((outer, *path)),
                None => inside_before(path)
                    .or_else(|| created.iter().copied().find(|p| p.starts_with(&prefix)))
                    .map(|inner| (*path, inner)),
            };
            if let Some((outer, inner)) = nested {
                return Err(Error::InvalidMemory(format!(
                    "{outer} is a file, so {inner} cannot be inside it (a path is either a file \
                     or a folder)"
                )));
            }
        }
        Ok(())
    }

    /// Checks that `change` may be recorded on this view, and returns the files as they
    /// would be after it (the versions, times and parts of the files it touches are
    /// placeholders, not those the recorded change gives them). Beyond
    /// [`Change::validate`]: every file it creates or changes is at most
    /// [`MAX_FILE_BYTES`] and has a valid path (a renamed folder's files too), and no file
    /// comes to be inside another file (a path is a file or a folder, never both, on disk
    /// as in memory). Problems the view already had are left to the changes that fix them.
    ///
    /// A `forget` is not simulated here: it only brings back text that was accepted once.
    pub fn check(&self, change: &Change) -> Result<MemoryView> {
        change.validate()?;
        let mut after = self.clone();
        for op in &change.ops {
            after.apply(self.version + 1, EntryId(0), DateTime::UNIX_EPOCH, op);
        }
        for (path, file) in &after.files {
            let before = self.files.get(path);
            if before.is_some_and(|b| b.content == file.content) {
                continue;
            }
            if before.is_none() {
                check_path(path)?;
                self.check_case(path, &[])?;
            }
            if file.content.len() > MAX_FILE_BYTES {
                return Err(too_large(path, file.content.len()));
            }
        }
        let nested_before: BTreeSet<&str> = self.nested().map(|(outer, _)| outer).collect();
        if let Some((outer, inner)) = after
            .nested()
            .find(|(outer, _)| !nested_before.contains(outer))
        {
            return Err(Error::InvalidMemory(format!(
                "{outer} is a file, so {inner} cannot be inside it (a path is either a file \
                 or a folder)"
            )));
        }
        Ok(after)
    }

    /// `change` with every append that would take a rolling log ([`paths::rolling`]: the
    /// working state, the event history) past [`MAX_FILE_BYTES`] turned into a write of
    /// the log's newest text: its heading, then whole entries from the newest back, as
    /// many as fit in half the limit. The older entries stay in earlier versions of the
    /// file. Keeping half (not all that fits) means a full log is rewritten once per half a
    /// limit of appends, not on every append: the tape grows by at most twice what was
    /// appended. Other changes, and an append whose own text is over the limit, come back
    /// as they are (and [`check`](Self::check) refuses what is too large).
    pub fn fit(&self, mut change: Change) -> Change {
        let rolling_append =
            |op: &Op| matches!(op, Op::Append { path, .. } if paths::rolling(path).is_some());
        if !change.ops.iter().any(rolling_append) {
            return change;
        }
        // Ops that each write or append to a different file see the files as they are;
        // others (a rename, a delete, two ops on one file) see the ops before them.
        let mut paths_seen = BTreeSet::new();
        let simple = change.ops.iter().all(|op| match op {
            Op::Write { path, .. } | Op::Append { path, .. } => paths_seen.insert(path.as_str()),
            _ => false,
        });
        let mut view = (!simple).then(|| self.clone());
        for op in &mut change.ops {
            if let Op::Append {
                path,
                text,
                heading,
            } = op
                && let Some(separator) = paths::rolling(path)
            {
                let heading = heading.as_deref().unwrap_or("");
                let current = view.as_ref().unwrap_or(self).content(path);
                let len = current.map_or(heading.len(), str::len) + text.len();
                // An op too large by itself is left for `check` to refuse.
                if len > MAX_FILE_BYTES && heading.len() + text.len() <= MAX_FILE_BYTES {
                    let whole = match current {
                        Some(c) => format!("{c}{text}"),
                        None => format!("{heading}{text}"),
                    };
                    *op = Op::Write {
                        path: path.clone(),
                        content: newest(&whole, heading, separator, MAX_FILE_BYTES / 2),
                    };
                }
            }
            if let Some(view) = view.as_mut() {
                view.apply(self.version + 1, EntryId(0), DateTime::UNIX_EPOCH, op);
            }
        }
        change
    }

    /// The files that other files are inside of, each with the first such file.
    fn nested(&self) -> impl Iterator<Item = (&str, &str)> {
        self.files.keys().filter_map(|outer| {
            let prefix = format!("{outer}/");
            self.files
                .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                .next()
                .filter(|(inner, _)| inner.starts_with(&prefix))
                .map(|(inner, _)| (outer.as_str(), inner.as_str()))
        })
    }

    pub(crate) fn apply(&mut self, version: u64, id: EntryId, at: DateTime<Utc>, op: &Op) {
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

/// The newest part of a log's `content` that fits in `limit` bytes: its `heading`, if it
/// starts with it, then the text from the first entry start (after a `separator`) that
/// leaves it short enough.
fn newest(content: &str, heading: &str, separator: &str, limit: usize) -> String {
    let head = if content.starts_with(heading) {
        heading
    } else {
        ""
    };
    let body = &content[head.len()..];
    let budget = limit.saturating_sub(head.len());
    if body.len() <= budget {
        return content.to_owned();
    }
    let mut cut = body.len() - budget;
    while !body.is_char_boundary(cut) {
        cut += 1;
    }
    if !body[..cut].ends_with(separator)
        && let Some(at) = body[cut..].find(separator)
    {
        cut += at + separator.len();
    }
    format!("{head}{}", &body[cut..])
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
