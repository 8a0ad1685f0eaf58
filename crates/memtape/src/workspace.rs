//! The markdown workspace: the memory view written to plain files, and hand edits read back as tape events.
//!
//! A workspace is a folder holding one scope's memory files as plain markdown (MEMORY.md,
//! memory/2026-04-01.md, memories/…), for people to read and edit in any editor. The tape
//! stays the truth: [`Engine::sync_workspace`] compares both sides with the state of the
//! last sync (`.memtape/sync.json`: the sha256 of every file as last synced) and
//!
//! - records a file changed only on disk as a `memory.change` event (source `sync`), so a
//!   hand edit is never lost and becomes a version like any other;
//! - writes a file changed only on the tape to disk, atomically (a temporary file in the
//!   same folder, fsync, rename, fsync of the folder), so an editor never reads half a file;
//! - reports a file changed on both sides since the last sync as a conflict and touches
//!   neither side, unless the caller says which side wins.
//!
//! Hidden entries (a leading dot), editor backups (`name~`, `#name#`) and symlinks are not
//! part of the workspace. Memory flags (MateClaw's enabled and sort order) live on the tape
//! only.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use memtape_core::Scope;
use memtape_core::memory::{self, Change, Op};
use memtape_store::Store;

use crate::tools::MAX_FILE_BYTES;
use crate::{Engine, Error, Result, check_memory_scope};

/// Where the sync state lives inside the workspace.
const STATE: &str = ".memtape/sync.json";

/// Which side wins a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefer {
    /// The file on disk is recorded on the tape.
    Disk,
    /// The tape's version is written over the file.
    Tape,
}

/// A file changed on disk and on the tape since the last sync: neither side was touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The workspace path.
    pub path: String,
    /// What the file on disk holds (`None`: deleted on disk).
    pub disk: Option<String>,
    /// What the tape holds (`None`: deleted on the tape).
    pub tape: Option<String>,
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// Files whose hand edits (or deletions) were recorded on the tape.
    pub recorded: Vec<String>,
    /// The memory version that recorded them.
    pub version: Option<u64>,
    /// Files written from the tape.
    pub written: Vec<String>,
    /// Files removed because the tape removed them.
    pub removed: Vec<String>,
    /// Files changed on both sides, left as they are.
    pub conflicts: Vec<Conflict>,
    /// Files on disk that cannot be memory, and why (a bad name, not UTF-8, too large).
    pub skipped: Vec<(String, String)>,
}

impl SyncReport {
    /// Whether the sync changed nothing and found nothing to report.
    pub fn is_quiet(&self) -> bool {
        self.recorded.is_empty()
            && self.written.is_empty()
            && self.removed.is_empty()
            && self.conflicts.is_empty()
            && self.skipped.is_empty()
    }
}

/// The state of the last sync, kept in the workspace.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// The scope the workspace belongs to.
    scope: String,
    /// The sha256 of each file as last synced (equal on disk and on the tape then).
    files: BTreeMap<String, String>,
}

/// The default workspace folder of `scope` under a data directory:
/// `workspace/TENANT/AGENT/shared` for an agent, `workspace/TENANT/AGENT/users/USER` for one
/// of its users. Names are percent-encoded where they are not plain file names.
pub fn workspace_dir(data_dir: &Path, scope: &Scope) -> PathBuf {
    let mut dir = data_dir
        .join("workspace")
        .join(encode(scope.tenant()))
        .join(encode(scope.agent_name()));
    match scope.user() {
        Some(user) => dir.push(Path::new("users").join(encode(user))),
        None => dir.push("shared"),
    }
    dir
}

/// A scope name as one safe path segment.
fn encode(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.starts_with('.') {
        out.replace_range(..1, "%2E");
    }
    out
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Workspace {
        path: path.to_owned(),
        source,
    }
}

/// Writes `content` to `path` atomically: a temporary file beside it, fsync, rename, fsync
/// of the folder. A reader sees the old file or the new one, never part of one.
pub(crate) fn write_atomic(path: &Path, content: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.memtape-tmp"));
    let mut file = fs::File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(content).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io(path))?;
    // The rename is durable once the folder is; not every platform can open a folder.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The files of a workspace (path → content) and those skipped (path, why).
type Scanned = (BTreeMap<String, String>, Vec<(String, String)>);

/// Reads every file of the workspace, and notes what had to be skipped.
fn scan(root: &Path) -> Result<Scanned> {
    let mut files = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut stack = vec![(root.to_owned(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.starts_with('#') || name.ends_with('~') {
                continue;
            }
            let rel = format!("{prefix}{name}");
            let kind = entry.file_type().map_err(io(&entry.path()))?;
            if kind.is_symlink() {
                skipped.push((rel, "a symlink (not followed)".into()));
            } else if kind.is_dir() {
                stack.push((entry.path(), format!("{rel}/")));
            } else if let Err(e) = memory::check_path(&rel) {
                skipped.push((rel, e.to_string()));
            } else {
                let bytes = fs::read(entry.path()).map_err(io(&entry.path()))?;
                if bytes.len() > MAX_FILE_BYTES {
                    skipped.push((rel, format!("larger than {MAX_FILE_BYTES} bytes")));
                } else {
                    match String::from_utf8(bytes) {
                        Ok(text) => {
                            files.insert(rel, text);
                        }
                        Err(_) => skipped.push((rel, "not UTF-8 text".into())),
                    }
                }
            }
        }
    }
    Ok((files, skipped))
}

impl<S: Store> Engine<S> {
    /// Syncs the memory of `scope` (an agent, or an agent and a user) with the markdown
    /// workspace in `dir`, creating it if needed. `prefer` settles conflicts; without it
    /// they are only reported.
    pub fn sync_workspace(
        &self,
        scope: &Scope,
        dir: &Path,
        prefer: Option<Prefer>,
    ) -> Result<SyncReport> {
        check_memory_scope(scope)?;
        let state_path = dir.join(STATE);
        let state: State = match fs::read_to_string(&state_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                Error::Config(format!(
                    "{}: the sync state is unreadable ({e}); move it away to sync from scratch",
                    state_path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(io(&state_path)(e)),
        };
        let name = scope.to_string();
        if !state.scope.is_empty() && state.scope != name {
            return Err(Error::Config(format!(
                "{} is the workspace of {}, not of {name}",
                dir.display(),
                state.scope
            )));
        }
        let (disk, skipped) = scan(dir)?;
        let last = |p: &str| state.files.get(p).map(String::as_str);
        // A file that cannot be read as memory is left alone on both sides.
        let unreadable: BTreeSet<String> = skipped.iter().map(|(p, _)| p.clone()).collect();
        // Hashed once: the change below may be computed more than once.
        let hashes: BTreeMap<&str, String> =
            disk.iter().map(|(p, c)| (p.as_str(), sha256(c))).collect();
        let disk_hash = |p: &str| hashes.get(p).cloned();

        // Record the hand edits, deciding conflicts against the tape as it is at the write
        // (compare-and-append: a change that lands meanwhile makes this run again).
        let mut recorded = Vec::new();
        let mut conflicts = Vec::new();
        let outcome = self.change_memory(scope, |_, view| {
            recorded.clear();
            conflicts.clear();
            let mut ops = Vec::new();
            let paths: BTreeSet<&String> = disk.keys().chain(state.files.keys()).collect();
            for path in paths.into_iter().filter(|p| !unreadable.contains(*p)) {
                let on_disk = disk_hash(path);
                if on_disk.as_deref() == last(path) {
                    continue; // not edited by hand
                }
                let tape = view.content(path);
                let on_tape = tape.map(sha256);
                if on_tape == on_disk {
                    continue; // both sides already agree
                }
                if on_tape.as_deref() != last(path) && prefer != Some(Prefer::Disk) {
                    if prefer != Some(Prefer::Tape) {
                        conflicts.push(Conflict {
                            path: path.clone(),
                            disk: disk.get(path).cloned(),
                            tape: tape.map(str::to_owned),
                        });
                    }
                    continue;
                }
                recorded.push(path.clone());
                ops.push(match disk.get(path) {
                    Some(content) => Op::Write {
                        path: path.clone(),
                        content: content.clone(),
                    },
                    None => Op::Delete { path: path.clone() },
                });
            }
            Ok((!ops.is_empty()).then(|| Change {
                ops,
                source: "sync".into(),
            }))
        })?;

        // Bring the disk up to the tape, skipping conflicts and files still being edited.
        let view = self.memory_log(scope)?.0.view();
        let conflicted: BTreeSet<&str> = conflicts.iter().map(|c| c.path.as_str()).collect();
        let mut files = BTreeMap::new();
        let mut report = SyncReport {
            version: outcome.map(|r| r.version),
            skipped,
            ..SyncReport::default()
        };
        let paths: BTreeSet<&String> = view
            .files
            .keys()
            .chain(disk.keys())
            .chain(state.files.keys())
            .collect();
        for path in paths {
            if conflicted.contains(path.as_str()) || unreadable.contains(path) {
                if let Some(h) = last(path) {
                    files.insert(path.clone(), h.to_owned());
                }
                continue;
            }
            let file = dir.join(path);
            let now_on_disk = match fs::read(&file) {
                Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io(&file)(e)),
            };
            if now_on_disk.as_deref().map(sha256) != disk_hash(path) {
                // Edited again while this sync ran: the next sync takes it from here.
                if let Some(h) = last(path) {
                    files.insert(path.clone(), h.to_owned());
                }
                continue;
            }
            match view.content(path) {
                Some(content) => {
                    if now_on_disk.as_deref() != Some(content) {
                        write_atomic(&file, content.as_bytes())?;
                        report.written.push(path.clone());
                    }
                    files.insert(path.clone(), sha256(content));
                }
                None => {
                    if now_on_disk.is_some() {
                        fs::remove_file(&file).map_err(io(&file))?;
                        remove_empty_parents(dir, &file);
                        report.removed.push(path.clone());
                    }
                }
            }
        }
        let state = State { scope: name, files };
        let text = serde_json::to_string_pretty(&state)
            .map_err(|e| Error::Internal(format!("sync state: {e}")))?;
        write_atomic(&state_path, text.as_bytes())?;
        report.recorded = recorded;
        report.conflicts = conflicts;
        Ok(report)
    }
}

/// Removes the folders between `file` and `root` that the removal left empty.
fn remove_empty_parents(root: &Path, file: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == root || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}
