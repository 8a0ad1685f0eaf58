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
//! Whatever sync writes, it reads back: memory refuses at creation the names a sync passes
//! over (hidden names with a leading dot, editor backups `#name#` and `name~`; see
//! [`memory::check_path`]), names longer than the file system allows, a file inside a file
//! and files over [`MAX_FILE_BYTES`]. Memory flags (MateClaw's enabled and sort order) live
//! on the tape only.
//!
//! # Symlinks and paths sync cannot use
//!
//! A workspace whose own folders are symlinks — the workspace folder, the folders above it
//! inside the data directory when it is the default one, `memory/`, `memories/`,
//! `.memtape/` — is refused with an error naming the path. Inside it no symlink is ever
//! followed: every folder on the way to a file is looked at (`lstat`) before it is read or
//! written, folders are created one at a time, and the temporary file of a write is created
//! only where nothing is. A path sync cannot read or write — a symlink, a folder where a
//! file should be, a file where a folder should be, a socket, an unreadable file, a name
//! that is not UTF-8 or breaks the path rules, too large, a hand edit memory refuses — is
//! skipped and reported in [`SyncReport::skipped`], left as it is on both sides, and the
//! rest is synced. Only a path that is not on disk at all is read as a deletion.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use memtape_core::Scope;
use memtape_core::memory::{self, Change, MAX_FILE_BYTES, Op, paths};
use memtape_store::Store;

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
pub(crate) fn encode(name: &str) -> String {
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

/// The SHA-256 of `text`, in lowercase hex.
pub(crate) fn sha256(text: &str) -> String {
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

/// Refuses a workspace whose own folders are symlinks: the workspace folder, the folders
/// above it inside the data directory when it is the default one ([`workspace_dir`]),
/// `memory/`, `memories/` and the sync state. Then creates the workspace folder.
fn check_workspace(root: &Path, scope: &Scope) -> Result<()> {
    let mut parts = Vec::new();
    let tail = workspace_dir(Path::new(""), scope);
    match tail
        .components()
        .try_fold(root, |p, _| p.parent())
        .filter(|_| root.ends_with(&tail))
    {
        Some(data_dir) => {
            let mut p = data_dir.to_owned();
            for c in tail.components() {
                p.push(c);
                parts.push(p.clone());
            }
        }
        None => parts.push(root.to_owned()),
    }
    for inside in [paths::DAILY_DIR, paths::MEMORIES_DIR, ".memtape/", STATE] {
        parts.push(root.join(inside.trim_end_matches('/')));
    }
    for part in &parts {
        if fs::symlink_metadata(part).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(Error::Config(format!(
                "{} is a symlink; a memory workspace must be made of real folders, and \
                 memtape never writes through symlinks (replace it with a folder, or sync \
                 into another folder with --dir)",
                part.display()
            )));
        }
    }
    fs::create_dir_all(root).map_err(io(root))
}

/// What is on disk at a workspace path, looked at without following any symlink.
enum OnDisk {
    /// A regular file, with its bytes.
    File(Vec<u8>),
    /// Nothing: neither the file nor, perhaps, its folders.
    Missing,
    /// Something that is not a file sync can read (a folder, a symlink, a socket, a file
    /// where a folder should be, a read error), and why.
    Other(String),
}

/// The folders of `rel` under `root`, one at a time: `Ok(None)` when one is missing,
/// `Err(why)` when one is not a real folder.
fn folders_of(root: &Path, rel: &str) -> std::result::Result<Option<PathBuf>, String> {
    let mut dir = root.to_owned();
    let mut shown = String::new();
    let folders: Vec<&str> = rel.split('/').collect();
    for name in &folders[..folders.len() - 1] {
        dir.push(name);
        shown.push_str(name);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!("{shown} is a symlink (not followed)"));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("{shown} is a file, not a folder")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{shown}: {e}")),
        }
        shown.push('/');
    }
    Ok(Some(dir))
}

/// How much of a memory file sync reads: one byte past [`MAX_FILE_BYTES`], enough to tell
/// it is too large without loading a huge file.
const READ_LIMIT: u64 = MAX_FILE_BYTES as u64 + 1;

/// Reads at most `limit` bytes of a file.
fn read_limited(file: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(file)?.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads (at most `limit` bytes of) the workspace file `rel`, following no symlink on the
/// way.
fn on_disk(root: &Path, rel: &str, limit: u64) -> OnDisk {
    let dir = match folders_of(root, rel) {
        Ok(Some(dir)) => dir,
        Ok(None) => return OnDisk::Missing,
        Err(why) => return OnDisk::Other(why),
    };
    let file = dir.join(rel.rsplit('/').next().unwrap_or(rel));
    match fs::symlink_metadata(&file) {
        Ok(m) if m.file_type().is_symlink() => OnDisk::Other("a symlink (not followed)".into()),
        Ok(m) if m.is_dir() => OnDisk::Other("a folder where a file should be".into()),
        Ok(m) if !m.is_file() => {
            OnDisk::Other("not a regular file (a socket, a pipe or a device)".into())
        }
        Ok(_) => match read_limited(&file, limit) {
            Ok(bytes) => OnDisk::File(bytes),
            Err(e) => OnDisk::Other(format!("unreadable: {e}")),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => OnDisk::Missing,
        Err(e) => OnDisk::Other(format!("unreadable: {e}")),
    }
}

/// Writes `content` to the workspace file `rel` atomically (a temporary file beside it,
/// fsync, rename, fsync of the folder: a reader sees the old file or the new one), creating
/// its folders one at a time and refusing to go through a symlink, a file where a folder
/// should be, or to replace anything but a regular file. `Err` says why nothing was written.
fn write_under(root: &Path, rel: &str, content: &[u8]) -> std::result::Result<(), String> {
    let mut dir = root.to_owned();
    let folders: Vec<&str> = rel.split('/').collect();
    let (name, folders) = folders.split_last().ok_or("an empty path")?;
    let mut shown = String::new();
    for folder in folders {
        dir.push(folder);
        shown.push_str(folder);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "{shown} is a symlink; memtape does not write through symlinks"
                ));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("{shown} is a file, not a folder")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir(&dir).map_err(|e| format!("creating {shown}/: {e}"))?;
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        }
        shown.push('/');
    }
    let path = dir.join(name);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err("a symlink; memtape does not write through symlinks".into());
        }
        Ok(m) if m.is_dir() => return Err("a folder where a file should be".into()),
        Ok(m) if !m.is_file() => {
            return Err("not a regular file (a socket, a pipe or a device)".into());
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.to_string()),
    }
    // A short hidden name (sync never reads it), created only if nothing is there: an
    // existing file or symlink of that name is removed first, never written through.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".memtape-{}-{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(content)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e.to_string());
    }
    // The rename is durable once the folder is; not every platform can open a folder.
    if let Ok(d) = fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The files of a workspace (path → content) and what was skipped (path → why).
type Scanned = (BTreeMap<String, String>, BTreeMap<String, String>);

/// Reads every file of the workspace, and notes what had to be skipped. Names the sync
/// ignores ([`memory::sync_ignores`]) are passed over silently; a folder it cannot enter
/// (a symlink, unreadable) is skipped as a whole.
fn scan(root: &Path) -> Result<Scanned> {
    let mut files = BTreeMap::new();
    let mut skipped = BTreeMap::new();
    let mut stack = vec![(root.to_owned(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if prefix.is_empty() => return Err(io(&dir)(e)),
            Err(e) => {
                skipped.insert(prefix.trim_end_matches('/').to_owned(), e.to_string());
                continue;
            }
        };
        for entry in entries {
            let entry = entry.map_err(io(&dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                let rel = format!("{prefix}{}", name.to_string_lossy());
                skipped.insert(rel, "the name is not UTF-8".into());
                continue;
            };
            if memory::sync_ignores(name) {
                continue;
            }
            let rel = format!("{prefix}{name}");
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(e) => {
                    skipped.insert(rel, e.to_string());
                    continue;
                }
            };
            if kind.is_symlink() {
                skipped.insert(rel, "a symlink (not followed)".into());
            } else if kind.is_dir() {
                stack.push((entry.path(), format!("{rel}/")));
            } else if !kind.is_file() {
                skipped.insert(
                    rel,
                    "not a regular file (a socket, a pipe or a device)".into(),
                );
            } else if let Err(e) = memory::check_path(&rel) {
                skipped.insert(rel, e.to_string());
            } else {
                match read_limited(&entry.path(), READ_LIMIT) {
                    Err(e) => {
                        skipped.insert(rel, format!("unreadable: {e}"));
                    }
                    Ok(bytes) if bytes.len() > MAX_FILE_BYTES => {
                        skipped.insert(rel, format!("larger than {MAX_FILE_BYTES} bytes"));
                    }
                    Ok(bytes) => match String::from_utf8(bytes) {
                        Ok(text) => {
                            files.insert(rel, text);
                        }
                        Err(_) => {
                            skipped.insert(rel, "not UTF-8 text".into());
                        }
                    },
                }
            }
        }
    }
    Ok((files, skipped))
}

/// Whether `path` is inside one of the folders `skipped` names (one the scan did not enter).
fn inside_skipped<'s>(skipped: &'s BTreeMap<String, String>, path: &str) -> Option<&'s str> {
    path.match_indices('/')
        .map(|(i, _)| &path[..i])
        .find_map(|folder| skipped.get_key_value(folder).map(|(p, _)| p.as_str()))
}

impl<S: Store> Engine<S> {
    /// Syncs the memory of `scope` (an agent, or an agent and a user) with the markdown
    /// workspace in `dir`, creating it if needed. `prefer` settles conflicts; without it
    /// they are only reported.
    ///
    /// A workspace whose own folders are symlinks is refused (an error naming the path);
    /// a symlink inside it is never followed, read or written through. A file that cannot
    /// be read or written (a bad name, the wrong type, a symlink, not UTF-8, too large, a
    /// file inside a file) is skipped and reported, and the rest is synced; a path on disk
    /// of the wrong type is never read as a deletion.
    pub fn sync_workspace(
        &self,
        scope: &Scope,
        dir: &Path,
        prefer: Option<Prefer>,
    ) -> Result<SyncReport> {
        check_memory_scope(scope)?;
        check_workspace(dir, scope)?;
        let state_path = dir.join(STATE);
        // The state grows with the workspace: read whole.
        let state: State = match on_disk(dir, STATE, u64::MAX) {
            OnDisk::File(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Error::Config(format!(
                    "{}: the sync state is unreadable ({e}); move it away to sync from scratch",
                    state_path.display()
                ))
            })?,
            OnDisk::Missing => State::default(),
            OnDisk::Other(why) => {
                return Err(Error::Config(format!(
                    "{}: the sync state cannot be read: {why}",
                    state_path.display()
                )));
            }
        };
        let name = scope.to_string();
        if !state.scope.is_empty() && state.scope != name {
            return Err(Error::Config(format!(
                "{} is the workspace of {}, not of {name}",
                dir.display(),
                state.scope
            )));
        }
        let (disk, mut skipped) = scan(dir)?;
        let last = |p: &str| state.files.get(p).map(String::as_str);
        // Paths memory or the last sync knows that are not a readable file on disk: missing
        // (a deletion, or not written yet) or of the wrong type (reported, never a deletion).
        let before = self.memory_log(scope)?.0.view();
        for path in before.files.keys().chain(state.files.keys()) {
            if disk.contains_key(path)
                || skipped.contains_key(path)
                || memory::check_path(path).is_err()
            {
                continue;
            }
            let why = match on_disk(dir, path, READ_LIMIT) {
                OnDisk::Other(why) => why,
                _ => match inside_skipped(&skipped, path) {
                    Some(folder) => format!("inside {folder}, which was skipped"),
                    None => continue,
                },
            };
            skipped.insert(path.clone(), why);
        }
        // Hashed once: the change below may be computed more than once.
        let hashes: BTreeMap<&str, String> =
            disk.iter().map(|(p, c)| (p.as_str(), sha256(c))).collect();
        let disk_hash = |p: &str| hashes.get(p).cloned();

        // Record the hand edits, deciding conflicts against the tape as it is at the write
        // (compare-and-append: a change that lands meanwhile makes this run again).
        let mut recorded = Vec::new();
        let mut conflicts = Vec::new();
        let mut refused: BTreeMap<String, String> = BTreeMap::new();
        let outcome = self.change_memory(scope, |view| {
            recorded.clear();
            conflicts.clear();
            refused.clear();
            let mut ops = Vec::new();
            let paths: BTreeSet<&String> = disk.keys().chain(state.files.keys()).collect();
            for path in paths {
                if skipped.contains_key(path.as_str()) || memory::check_path(path).is_err() {
                    continue; // not readable as memory: left alone on both sides
                }
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
                ops.push(match disk.get(path) {
                    Some(content) => Op::Write {
                        path: path.clone(),
                        content: content.clone(),
                    },
                    None => Op::Delete { path: path.clone() },
                });
            }
            // An edit memory cannot take (a file inside a file) is reported; the rest go in.
            let mut change = Change {
                ops,
                source: "sync".into(),
                caused_by: Vec::new(),
            };
            if !change.ops.is_empty() && view.check(&change).is_err() {
                let mut trial = view.clone();
                let mut ops = Vec::new();
                for op in change.ops {
                    match trial.check(&Change::one(op.clone(), "sync")) {
                        Ok(next) => {
                            trial = next;
                            ops.push(op);
                        }
                        Err(e) => {
                            let path = op.paths()[0].to_owned();
                            refused.insert(path, e.to_string());
                        }
                    }
                }
                change.ops = ops;
            }
            recorded = change
                .ops
                .iter()
                .map(|op| op.paths()[0].to_owned())
                .collect();
            Ok((!change.ops.is_empty()).then_some(change))
        })?;
        skipped.append(&mut refused);

        // Bring the disk up to the tape, skipping conflicts, what cannot be synced and
        // files still being edited.
        let view = self.memory_log(scope)?.0.view();
        let conflicted: BTreeSet<&str> = conflicts.iter().map(|c| c.path.as_str()).collect();
        let mut files = BTreeMap::new();
        let mut report = SyncReport {
            version: outcome.map(|r| r.version),
            ..SyncReport::default()
        };
        let paths: BTreeSet<String> = view
            .files
            .keys()
            .chain(disk.keys())
            .chain(state.files.keys())
            .cloned()
            .collect();
        for path in &paths {
            let keep = |files: &mut BTreeMap<String, String>| {
                if let Some(h) = last(path) {
                    files.insert(path.clone(), h.to_owned());
                }
            };
            if conflicted.contains(path.as_str()) || skipped.contains_key(path) {
                keep(&mut files);
                continue;
            }
            if let Some(folder) = inside_skipped(&skipped, path) {
                let why = format!("inside {folder}, which was skipped");
                skipped.insert(path.clone(), why);
                keep(&mut files);
                continue;
            }
            if let Err(e) = memory::check_path(path) {
                // Memory holds it from before the path rules: reported, never written. A
                // name only the last sync knew is forgotten; its file stays as it is.
                if view.files.contains_key(path) {
                    skipped.insert(path.clone(), format!("cannot be written: {e}"));
                }
                continue;
            }
            let now_on_disk = match on_disk(dir, path, READ_LIMIT) {
                OnDisk::File(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                OnDisk::Missing => None,
                OnDisk::Other(why) => {
                    skipped.insert(path.clone(), why);
                    keep(&mut files);
                    continue;
                }
            };
            if now_on_disk.as_deref().map(sha256) != disk_hash(path) {
                // Edited again while this sync ran: the next sync takes it from here.
                keep(&mut files);
                continue;
            }
            match view.content(path) {
                Some(content) if content.len() > MAX_FILE_BYTES => {
                    let why = format!(
                        "larger than {MAX_FILE_BYTES} bytes: kept on the tape, not written"
                    );
                    skipped.insert(path.clone(), why);
                    keep(&mut files);
                }
                Some(content) => {
                    if now_on_disk.as_deref() != Some(content) {
                        if let Err(why) = write_under(dir, path, content.as_bytes()) {
                            skipped.insert(path.clone(), format!("cannot be written: {why}"));
                            keep(&mut files);
                            continue;
                        }
                        report.written.push(path.clone());
                    }
                    files.insert(path.clone(), sha256(content));
                }
                // Only a file the last sync wrote or read is removed.
                None if now_on_disk.is_some() && last(path).is_some() => {
                    let file = dir.join(path);
                    if let Err(e) = fs::remove_file(&file) {
                        skipped.insert(path.clone(), format!("cannot be removed: {e}"));
                        keep(&mut files);
                        continue;
                    }
                    remove_empty_parents(dir, &file);
                    report.removed.push(path.clone());
                }
                None => {}
            }
        }
        let state = State { scope: name, files };
        let text = serde_json::to_string_pretty(&state)
            .map_err(|e| Error::Internal(format!("sync state: {e}")))?;
        write_under(dir, STATE, text.as_bytes()).map_err(|why| {
            Error::Config(format!(
                "{}: the sync state cannot be written: {why}",
                state_path.display()
            ))
        })?;
        report.recorded = recorded;
        report.conflicts = conflicts;
        report.skipped = skipped.into_iter().collect();
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
