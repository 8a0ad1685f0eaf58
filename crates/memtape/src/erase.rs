//! Erasure through the engine: what a caller may erase within its scope (a user, a
//! session, entries, a piece of text), the store's erasure and its receipt, then the
//! projections brought along: attached files, the search index (through the write hooks,
//! which apply the receipt), the memory logs this process keeps, and the markdown
//! workspaces; and the same for erasures a dead process left unfinished.

use std::path::Path;

use memtape_core::erasure::Selector;
use memtape_core::{AsOf, Entry, EntryId, Scope};
use memtape_store::{EraseMode, EraseOutcome, EraseRequest, EraseTarget, Store};

use crate::FilesDir;
use crate::workspace::{Prefer, workspace_dir};
use crate::{Engine, Error, Result};

/// What to erase, within the caller's scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Erase {
    /// Everything of this user in the tenant, in every agent: sessions, nodes, memory,
    /// and their workspace folders.
    User(String),
    /// One session of the caller's agent (and user, when the caller names one).
    Session(String),
    /// These entries, where they lie within the caller's scope; others are passed over
    /// like ids that do not exist.
    Entries(Vec<EntryId>),
    /// Every occurrence of this text in the caller's scope, replaced by `[erased]`.
    Text(String),
}

/// Who erases, why, and whether only to count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EraseOptions {
    /// Who erases: `cli`, or the API key's name.
    pub by: String,
    /// Why, as the caller says (kept on the receipt: it must not hold what is erased).
    pub reason: String,
    /// Count what would be erased and change nothing.
    pub dry_run: bool,
    /// Afterwards, rewrite the store's files so nothing freed is left in them
    /// ([`Store::compact`]: PostgreSQL's `VACUUM FULL`, which blocks the database while
    /// it runs; SQLite needs nothing).
    pub compact: bool,
}

impl<S: Store> Engine<S> {
    /// Erases `what` within `scope` (an agent, or an agent and a user): the store appends
    /// a `tape.erased` receipt and rewrites every selected entry (a tombstone, or its text
    /// redacted) in short steps ([`Store::erase_with`]), and the attached files go before
    /// its end; the search index applies the receipt before this returns (when this
    /// engine keeps one: an error from it comes after the erasure ended, and the next
    /// catch-up applies it); memory read afterwards is read anew.
    ///
    /// With `data_dir`, the default markdown workspaces of the memory scopes erased are
    /// brought along: an erasure by text first records hand edits not yet synced (so a
    /// secret typed into a file is erased too), then writes the tape's side over the files;
    /// a user erasure removes the user's workspace folders.
    pub fn erase(
        &self,
        scope: &Scope,
        what: Erase,
        options: EraseOptions,
        data_dir: Option<&Path>,
    ) -> Result<EraseOutcome> {
        if scope.session().is_some() {
            return Err(Error::Config(
                "erasure takes an agent's scope (and a user), not a session: name the session to erase".into(),
            ));
        }
        let tenant = scope.tenant().to_owned();
        let (target, mode, receipt_scope, selector) = match what {
            Erase::User(user) => {
                if scope.user().is_some_and(|u| u != user) {
                    return Err(Error::Config(format!(
                        "erasing user {user:?} from a scope of another user"
                    )));
                }
                (
                    EraseTarget::User {
                        tenant,
                        user: user.clone(),
                    },
                    EraseMode::Whole,
                    scope.agent_scope(),
                    Selector::User { user },
                )
            }
            Erase::Session(session) => {
                let within = scope.clone().with_session(session.clone())?;
                (
                    EraseTarget::Session(within.clone()),
                    EraseMode::Whole,
                    within,
                    Selector::Session { session },
                )
            }
            Erase::Entries(ids) => (
                EraseTarget::Entries {
                    within: scope.clone(),
                    ids,
                },
                EraseMode::Whole,
                scope.clone(),
                Selector::Entries,
            ),
            Erase::Text(text) => (
                EraseTarget::Within(scope.clone()),
                EraseMode::Text(text),
                scope.clone(),
                Selector::Text,
            ),
        };
        let request = EraseRequest {
            target,
            mode,
            receipt_scope,
            selector,
            by: options.by,
            reason: options.reason,
            at: self.now(),
            dry_run: options.dry_run,
        };
        let outcome = self.erase_request(request, data_dir)?;
        if options.compact && !options.dry_run {
            self.store.compact()?;
        }
        Ok(outcome)
    }

    /// Runs one erasure request (an erasure, a retention run) and brings the projections
    /// along, as [`Engine::erase`] describes.
    pub(crate) fn erase_request(
        &self,
        request: EraseRequest,
        data_dir: Option<&Path>,
    ) -> Result<EraseOutcome> {
        request.validate()?;
        // A retention run takes conversation only, which no workspace file shows.
        let expiry = matches!(request.target, EraseTarget::Expired { .. });
        let workspaces = match data_dir {
            Some(dir) if !expiry => self.workspaces_of(&request.target, dir)?,
            _ => Vec::new(),
        };
        let user = matches!(request.target, EraseTarget::User { .. });
        if !user && !request.dry_run {
            // Hand edits not yet on the tape are recorded first, so the erasure takes them
            // and the tape's side can then be written over the files.
            for (memory, dir) in &workspaces {
                self.sync_workspace(memory, dir, None)?;
            }
        }
        let mut files = FilesRemoval::new(data_dir);
        let mut outcome = self.store.erase_with(&request, &mut |o| files.remove(o))?;
        let finished = std::mem::take(&mut outcome.finished);
        let erased = self.erased_along(&outcome)?;
        outcome.finished = self.finished_along(finished, data_dir)?;
        files.check()?;
        if !erased {
            return Ok(outcome);
        }
        for (memory, dir) in &workspaces {
            if user {
                // The whole user is gone: so is the folder, sync state and all.
                remove_workspace(dir)?;
            } else {
                self.sync_workspace(memory, dir, Some(Prefer::Tape))?;
            }
        }
        Ok(outcome)
    }

    /// Finishes the erasures that processes which died left unfinished
    /// ([`Store::finish_erasures`]) and brings their projections along, as the erasure
    /// would have: attached files, the search index, the memory logs and, with
    /// `data_dir`, the workspaces (a user's folders removed; the others synced, which
    /// writes the tape's side over a file not edited since). Cheap when there are none
    /// (one read): a server runs it at start and every few seconds, a command that
    /// writes when it opens the store.
    pub fn finish_erasures(&self, data_dir: Option<&Path>) -> Result<Vec<EraseOutcome>> {
        let mut files = FilesRemoval::new(data_dir);
        let finished = self.store.finish_erasures_with(&mut |o| files.remove(o))?;
        let finished = self.finished_along(finished, data_dir)?;
        files.check()?;
        Ok(finished)
    }

    fn finished_along(
        &self,
        mut finished: Vec<EraseOutcome>,
        data_dir: Option<&Path>,
    ) -> Result<Vec<EraseOutcome>> {
        for outcome in &mut finished {
            self.erased_along(outcome)?;
            let (Some(dir), Some(receipt)) = (data_dir, &outcome.receipt) else {
                continue;
            };
            let Ok(Some(memtape_core::events::BuiltinEvent::Erased(erased))) =
                memtape_core::events::BuiltinEvent::from_payload(&receipt.payload)
            else {
                continue;
            };
            let tenant = receipt.scope.tenant().to_owned();
            let target = match erased.selector {
                Selector::User { user } => EraseTarget::User { tenant, user },
                Selector::Retention { .. } => continue,
                _ => EraseTarget::Within(receipt.scope.clone()),
            };
            let user = matches!(target, EraseTarget::User { .. });
            for (memory, dir) in self.workspaces_of(&target, dir)? {
                if user {
                    remove_workspace(&dir)?;
                } else {
                    self.sync_workspace(&memory, &dir, None)?;
                }
            }
        }
        Ok(finished)
    }

    /// What every erasure brings along once the store has ended it: the search index
    /// caught up (which applies the receipt), the write hooks told, and every memory log
    /// read anew. Returns whether the erasure wrote a receipt.
    fn erased_along(&self, outcome: &EraseOutcome) -> Result<bool> {
        let Some(receipt) = &outcome.receipt else {
            return Ok(false);
        };
        // The index applies the receipt now, whether or not it follows writes as they
        // are made (a server's indexer would get to it a moment later).
        if let Some(index) = &self.index {
            index.catch_up(&self.store)?;
        }
        self.after_write(std::slice::from_ref(receipt));
        self.memory_logs.clear();
        Ok(true)
    }

    /// `entries` of `scope` as a read at `as_of` shows them: now (`None`), tombstones are
    /// left out; as of a moment, those erased after it read `[erased]`
    /// ([`Entry::shown_as_erased`]) and those erased before it are left out (at that
    /// moment they were already gone).
    pub(crate) fn tombstones_as_of(
        &self,
        scope: &Scope,
        entries: Vec<Entry>,
        as_of: Option<&AsOf>,
    ) -> Result<Vec<Entry>> {
        let Some(moment) = as_of else {
            return Ok(entries.into_iter().filter(|e| !e.is_tombstone()).collect());
        };
        let mut later: std::collections::HashMap<EntryId, bool> = Default::default();
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let Some(erasure) = entry.erased.filter(|_| entry.is_tombstone()) else {
                out.push(entry);
                continue;
            };
            let after = match later.get(&erasure.by) {
                Some(after) => *after,
                None => {
                    // The receipt's own moment says when the erasure happened.
                    let receipt = self.store.get(scope.tenant(), erasure.by)?;
                    let after = receipt.is_none_or(|r| !moment.includes_entry(&r));
                    later.insert(erasure.by, after);
                    after
                }
            };
            if after {
                out.push(entry.shown_as_erased());
            }
        }
        Ok(out)
    }

    /// The memory scopes `target` takes that have a default workspace on disk, with it.
    fn workspaces_of(
        &self,
        target: &EraseTarget,
        data_dir: &Path,
    ) -> Result<Vec<(Scope, std::path::PathBuf)>> {
        let mut out = Vec::new();
        for info in self.store.scopes(target.tenant())? {
            let scope = info.scope;
            let is_memory = scope.session().is_none() && scope.node().is_none();
            if !is_memory || !target.takes_scope(&scope) {
                continue;
            }
            let dir = workspace_dir(data_dir, &scope);
            if dir.exists() {
                out.push((scope, dir));
            }
        }
        Ok(out)
    }
}

/// The attached files of the erasures a store runs, removed in each one's last moment
/// under way ([`Store::erase_with`]): a crash before its end has whoever finishes it
/// remove them again. A failure does not stop the erasure (its entries are rewritten by
/// then); the first is kept and reported once the store is done.
struct FilesRemoval {
    data_dir: Option<std::path::PathBuf>,
    failed: Option<Error>,
}

impl FilesRemoval {
    fn new(data_dir: Option<&Path>) -> Self {
        FilesRemoval {
            data_dir: data_dir.map(Path::to_path_buf),
            failed: None,
        }
    }

    fn remove(&mut self, outcome: &mut EraseOutcome) {
        // The files of the erasure's tenant (its receipt's; a dry run has none and
        // removes nothing).
        let (Some(dir), Some(receipt)) = (&self.data_dir, &outcome.receipt) else {
            return;
        };
        let files = FilesDir::of_tenant(dir, receipt.scope.tenant());
        let text = match &outcome.mode {
            EraseMode::Text(text) => Some(text.as_str()),
            EraseMode::Whole => None,
        };
        match files.erase(&outcome.attachments, text) {
            Ok(removed) => outcome.files_removed = removed,
            Err(e) => {
                self.failed.get_or_insert(e);
            }
        }
    }

    /// The first failure, if any.
    fn check(self) -> Result<()> {
        self.failed.map_or(Ok(()), Err)
    }
}

/// Removes a workspace folder and everything in it, without following a symlink out of
/// it (`remove_dir_all` removes a link, never what it points at).
fn remove_workspace(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Workspace {
            path: dir.to_owned(),
            source,
        }),
    }
}
