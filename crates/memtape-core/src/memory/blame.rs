//! Blame: for each line of a memory file, the change that put it there, like `git blame`.
//!
//! The log is folded change by change; each time a file's text changes, its new lines are
//! matched against its old ones (a line diff) and lines that stayed keep their origin while
//! new ones take the change's. A renamed file keeps the origins of the file it came from.
//! Forgotten changes are left out, as in every view.

use std::collections::HashMap;

use similar::{DiffOp, capture_diff_slices};

use super::{MemoryLog, MemoryView, Op, Recorded};

/// One line of a file and the change that put it there.
#[derive(Clone, Debug, PartialEq)]
pub struct BlameLine<'a> {
    /// Its number, from 1.
    pub line: usize,
    /// Its text.
    pub text: String,
    /// The change that wrote it (its version, entry, time, source and causes).
    pub origin: &'a Recorded,
}

impl MemoryLog {
    /// The lines of `path` as of `version`, each with the change that wrote it; `None`
    /// when the file does not exist then. Lines are split as [`str::lines`] splits them.
    pub fn blame<'a>(&'a self, path: &str, version: u64) -> Option<Vec<BlameLine<'a>>> {
        let forgotten = self.forgotten();
        let mut view = MemoryView::default();
        // For each file, the index (into the log) of each line's change.
        let mut origins: HashMap<String, Vec<usize>> = HashMap::new();
        for (index, r) in self.changes().iter().enumerate() {
            if r.version > version {
                break;
            }
            if forgotten.contains(&r.id) {
                continue;
            }
            let before = view.files.clone();
            for op in &r.change.ops {
                view.apply(r.version, r.id, r.at, op);
            }
            let mut next = HashMap::with_capacity(view.files.len());
            for (p, file) in &view.files {
                let kept = origins.remove(p);
                let (old_text, old_origins) = match (before.get(p), kept) {
                    (Some(old), Some(o)) if old.content == file.content => {
                        next.insert(p.clone(), o);
                        continue;
                    }
                    (Some(old), Some(o)) => (old.content.as_str(), o),
                    _ => match renamed_from(&r.change.ops, p)
                        .and_then(|q| Some((before.get(&q)?, origins.get(&q)?.clone())))
                    {
                        Some((old, o)) => (old.content.as_str(), o),
                        None => ("", Vec::new()),
                    },
                };
                next.insert(
                    p.clone(),
                    carry(old_text, &old_origins, &file.content, index),
                );
            }
            origins = next;
        }
        let file = view.files.get(path)?;
        let lines = origins.remove(path).unwrap_or_default();
        Some(
            file.content
                .lines()
                .zip(lines)
                .enumerate()
                .map(|(i, (text, index))| BlameLine {
                    line: i + 1,
                    text: text.to_owned(),
                    origin: &self.changes()[index],
                })
                .collect(),
        )
    }
}

/// The path `path` was renamed from by one of `ops` (a file, or a file under a folder).
fn renamed_from(ops: &[Op], path: &str) -> Option<String> {
    ops.iter().rev().find_map(|op| match op {
        Op::Rename { from, to } if to == path => Some(from.clone()),
        Op::Rename { from, to } => path
            .strip_prefix(to.as_str())
            .filter(|rest| rest.starts_with('/'))
            .map(|rest| format!("{from}{rest}")),
        _ => None,
    })
}

/// The origins of `new`'s lines: those of `old`'s lines it kept, `index` for the rest.
fn carry(old: &str, old_origins: &[usize], new: &str, index: usize) -> Vec<usize> {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out = vec![index; new_lines.len()];
    for op in capture_diff_slices(similar::Algorithm::Myers, &old_lines, &new_lines) {
        if let DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = op
        {
            for k in 0..len {
                if let Some(&o) = old_origins.get(old_index + k) {
                    out[new_index + k] = o;
                }
            }
        }
    }
    out
}
