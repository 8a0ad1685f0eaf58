//! Erasure in a store: what a request selects, how each selected entry is rewritten (a
//! tombstone, or its text redacted), and the `tape.erased` receipt written in the same
//! transaction. One plan for every store, so an erasure means the same everywhere.

use chrono::{DateTime, Utc};
use memtape_core::erasure::{
    Erased, ErasedHow, Erasure, Selector, check_erase_text, id_ranges, redact_meta,
};
use memtape_core::events::{BuiltinEvent, TAPE_ERASED};
use memtape_core::retention::Expiry;
use memtape_core::{Entry, EntryId, Meta, NewEntry, Payload, Scope};

use crate::Result;

/// Which entries an erasure takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EraseTarget {
    /// Every entry of every scope that `scope` contains (a session and its nodes, an agent's
    /// user, …): [`Scope::contains`].
    Within(Scope),
    /// Every entry of one session and its nodes: exactly the session's tenant, agent,
    /// user (none for an agent's own session) and name. A session named alike under
    /// another user is another session.
    Session(Scope),
    /// Every entry of `user` in `tenant`, in every agent: their sessions, nodes and
    /// memory.
    User {
        /// The tenant.
        tenant: String,
        /// The user.
        user: String,
    },
    /// These entries, where `within` contains them; ids elsewhere (another tenant's,
    /// another user's, none at all) are passed over alike.
    Entries {
        /// The caller's scope.
        within: Scope,
        /// The ids.
        ids: Vec<EntryId>,
    },
    /// The conversational entries of every scope `within` contains that `expiry` lets go
    /// (a retention run), each judged against its own scope's consolidation pointer.
    Expired {
        /// The agent (or tenant's agent and user) the policy covers.
        within: Scope,
        /// The cutoffs.
        expiry: Expiry,
    },
}

impl EraseTarget {
    /// The tenant the target lies in.
    pub fn tenant(&self) -> &str {
        match self {
            EraseTarget::Within(s)
            | EraseTarget::Session(s)
            | EraseTarget::Entries { within: s, .. }
            | EraseTarget::Expired { within: s, .. } => s.tenant(),
            EraseTarget::User { tenant, .. } => tenant,
        }
    }

    /// Whether entries of `scope` can be selected.
    pub fn takes_scope(&self, scope: &Scope) -> bool {
        match self {
            EraseTarget::Within(s)
            | EraseTarget::Entries { within: s, .. }
            | EraseTarget::Expired { within: s, .. } => s.contains(scope),
            EraseTarget::Session(s) => {
                scope.tenant() == s.tenant()
                    && scope.agent_name() == s.agent_name()
                    && scope.user() == s.user()
                    && scope.session() == s.session()
            }
            EraseTarget::User { tenant, user } => {
                scope.tenant() == tenant && scope.user() == Some(user.as_str())
            }
        }
    }
}

/// What an erasure does to what it selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EraseMode {
    /// Each entry becomes a tombstone.
    Whole,
    /// Every occurrence of this text becomes `[erased]`; entries without it are left.
    Text(String),
}

/// One erasure, as a store runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EraseRequest {
    /// What to take.
    pub target: EraseTarget,
    /// What to do to it.
    pub mode: EraseMode,
    /// Where the receipt goes.
    pub receipt_scope: Scope,
    /// What the receipt says was selected.
    pub selector: Selector,
    /// Who erases (`cli`, a key's name).
    pub by: String,
    /// Why, as the caller says.
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
    /// Count what would be erased and change nothing.
    pub dry_run: bool,
}

impl EraseRequest {
    /// Checks the request: the text (for an erasure by text), the receipt's scope in the
    /// target's tenant, and the receipt's fields.
    pub fn validate(&self) -> Result<()> {
        if let EraseMode::Text(text) = &self.mode {
            check_erase_text(text)?;
            if matches!(self.target, EraseTarget::Expired { .. }) {
                return Err(memtape_core::Error::InvalidEntry(
                    "a retention run erases whole entries, not a piece of text".into(),
                )
                .into());
            }
        }
        if self.receipt_scope.tenant() != self.target.tenant() {
            return Err(memtape_core::Error::InvalidEntry(
                "an erasure's receipt belongs in the tenant it erases".into(),
            )
            .into());
        }
        self.receipt(0, 0, &[]).payload.validate()?;
        Ok(())
    }

    /// The receipt of this erasure, having erased `whole` entries and redacted `text` in
    /// `ids`.
    fn receipt(&self, whole: u64, text: u64, ids: &[EntryId]) -> NewEntry {
        let erased = Erased {
            by: self.by.clone(),
            selector: self.selector.clone(),
            entries: whole,
            redacted: text,
            ids: id_ranges(ids),
            reason: self.reason.clone(),
        };
        NewEntry::new(
            self.receipt_scope.clone(),
            BuiltinEvent::Erased(erased).to_payload(),
            self.at,
        )
    }
}

/// What an erasure did (or, in a dry run, would do).
#[derive(Clone, Debug, PartialEq)]
pub struct EraseOutcome {
    /// The receipt as stored (`None` in a dry run).
    pub receipt: Option<Entry>,
    /// How many entries became tombstones.
    pub entries: u64,
    /// How many had text redacted.
    pub redacted: u64,
    /// The entries changed, in id order.
    pub ids: Vec<EntryId>,
    /// Whether the old bytes are gone from the store's files too (SQLite: the write-ahead
    /// log was checkpointed and truncated; `false` while a reader held an old snapshot,
    /// and the next checkpoint finishes it). Always `true` in memory.
    pub wiped: bool,
    /// The attached files the erasure takes, by reference (uploads and tool files, each
    /// once): those of every entry erased whole and, for an erasure by text, those of
    /// every entry it read, whose bytes may hold the text. The store keeps references
    /// only; the engine removes the files ([`EraseOutcome::files_removed`]).
    pub attachments: Vec<memtape_core::FileRef>,
    /// How many attached files were removed from the files folder (set by the engine).
    pub files_removed: u64,
}

/// One entry's new content.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewrite {
    /// The entry.
    pub id: EntryId,
    /// Its new payload.
    pub payload: Payload,
    /// Its new meta.
    pub meta: Meta,
    /// How it was erased.
    pub how: ErasedHow,
}

/// What `mode` makes of `entry`, or `None` when it leaves it as it is: tombstones stay
/// tombstones, receipts are never erased (they are the proof), and an erasure by text
/// leaves entries without the text.
pub fn rewrite(entry: &Entry, mode: &EraseMode) -> Option<Rewrite> {
    if entry.is_tombstone() || entry.payload.name() == Some(TAPE_ERASED) {
        return None;
    }
    match mode {
        EraseMode::Whole => Some(Rewrite {
            id: entry.id,
            payload: entry.payload.tombstone(),
            meta: Meta::new(),
            how: ErasedHow::Whole,
        }),
        EraseMode::Text(text) => {
            let payload = entry.payload.redact(text);
            let meta = redact_meta(&entry.meta, text);
            if payload.is_none() && meta.is_none() {
                return None;
            }
            let payload = payload.unwrap_or_else(|| entry.payload.clone());
            // Redacting a name makes a tombstone: the entry is then erased whole.
            let how = if payload.name() == Some(memtape_core::erasure::TOMBSTONE) {
                ErasedHow::Whole
            } else {
                ErasedHow::Text
            };
            Some(Rewrite {
                id: entry.id,
                payload,
                meta: meta.unwrap_or_else(|| entry.meta.clone()),
                how,
            })
        }
    }
}

/// The store's side of an erasure: the entries of a scope, and rewriting one.
pub trait EraseTransaction {
    /// Every scope of `tenant` with entries.
    fn scopes(&mut self, tenant: &str) -> Result<Vec<Scope>>;
    /// Every entry of `scope`, in id order.
    fn entries(&mut self, scope: &Scope) -> Result<Vec<Entry>>;
    /// The entries with these ids (at most 500) that exist in `tenant`.
    fn entries_by_id(&mut self, tenant: &str, ids: &[EntryId]) -> Result<Vec<Entry>>;
    /// Lets rewrites through (SQLite: the guard its trigger checks).
    fn begin(&mut self) -> Result<()>;
    /// Writes `rewrite`, marked as erased by `by`.
    fn rewrite(&mut self, rewrite: &Rewrite, by: Erasure) -> Result<()>;
    /// Closes the gate [`EraseTransaction::begin`] opened.
    fn end(&mut self) -> Result<()>;
    /// Appends the receipt.
    fn append_receipt(&mut self, receipt: NewEntry) -> Result<Entry>;
    /// Scrubs the idempotency records of `tenant`: an answer's body may quote erased
    /// content and a fingerprint is a hash of a request that held it, so each record keeps
    /// its key and status and gets `{"erased": <receipt id>}` as its body and
    /// `erased:<receipt id>` as its fingerprint. A retry of such a request is then told
    /// its key was used for another request: it never stores twice.
    fn scrub_requests(&mut self, tenant: &str, receipt: EntryId) -> Result<()>;
    /// The last id given so far.
    fn last_id(&mut self) -> Result<EntryId>;
}

/// Runs `request` inside `tx`: selects, rewrites each entry, appends the receipt and
/// scrubs the tenant's idempotency records.
pub fn erase_in(tx: &mut dyn EraseTransaction, request: &EraseRequest) -> Result<EraseOutcome> {
    request.validate()?;
    let mut rewrites = Vec::new();
    let mut attachments = Attachments::default();
    if let EraseTarget::Entries { within, ids } = &request.target {
        // Read by id: naming two entries never reads the whole agent.
        let mut ids = ids.clone();
        ids.sort_unstable();
        ids.dedup();
        for chunk in ids.chunks(500) {
            for entry in tx.entries_by_id(within.tenant(), chunk)? {
                if within.contains(&entry.scope) {
                    attachments.note(&entry);
                    rewrites.extend(rewrite(&entry, &request.mode));
                }
            }
        }
    } else {
        let expiry = match &request.target {
            EraseTarget::Expired { expiry, .. } => Some(expiry),
            _ => None,
        };
        for scope in tx.scopes(request.target.tenant())? {
            if !request.target.takes_scope(&scope) {
                continue;
            }
            let entries = tx.entries(&scope)?;
            let pointer = match expiry {
                // The scope's consolidation pointer, as its own entries leave it (read in
                // this transaction: a consolidation cannot move it meanwhile).
                Some(_) => {
                    let mut info = crate::ScopeInfo::empty(scope.clone());
                    entries.iter().for_each(|e| info.apply(e));
                    info.last_consolidated
                }
                None => EntryId(0),
            };
            for entry in &entries {
                if expiry.is_none_or(|x| x.takes(entry, pointer)) {
                    attachments.note(entry);
                    rewrites.extend(rewrite(entry, &request.mode));
                }
            }
        }
    }
    rewrites.sort_by_key(|r| r.id);
    let whole = rewrites
        .iter()
        .filter(|r| r.how == ErasedHow::Whole)
        .count() as u64;
    let text = rewrites.len() as u64 - whole;
    let ids: Vec<EntryId> = rewrites.iter().map(|r| r.id).collect();
    // A retention run that finds nothing expired leaves no receipt: it runs every day.
    let nothing = ids.is_empty() && matches!(request.target, EraseTarget::Expired { .. });
    if request.dry_run || nothing {
        return Ok(EraseOutcome {
            receipt: None,
            entries: whole,
            redacted: text,
            ids,
            wiped: true,
            attachments: attachments.0,
            files_removed: 0,
        });
    }
    let receipt_id = crate::rules::next_id(tx.last_id()?)?;
    tx.begin()?;
    for r in &rewrites {
        tx.rewrite(
            r,
            Erasure {
                by: receipt_id,
                how: r.how,
            },
        )?;
    }
    tx.end()?;
    let receipt = tx.append_receipt(request.receipt(whole, text, &ids))?;
    tx.scrub_requests(request.target.tenant(), receipt.id)?;
    if receipt.id != receipt_id {
        return Err(crate::Error::Corrupt {
            id: crate::row::sql_id(receipt.id),
            why: format!(
                "an erasure's receipt took id {} instead of {receipt_id}",
                receipt.id
            ),
        });
    }
    Ok(EraseOutcome {
        receipt: Some(receipt),
        entries: whole,
        redacted: text,
        ids,
        wiped: true,
        attachments: attachments.0,
        files_removed: 0,
    })
}

/// The attached files an erasure takes, each once.
#[derive(Default)]
struct Attachments(
    Vec<memtape_core::FileRef>,
    std::collections::HashSet<String>,
);

impl Attachments {
    /// Notes the files of a selected entry: all of them, whether it is erased whole or
    /// searched for a text (the file may hold the text where the message does not). URLs
    /// are not ours to remove; a tombstone has no files.
    fn note(&mut self, entry: &Entry) {
        let Some(message) = entry.message() else {
            return;
        };
        for file in &message.files {
            let key = match &file.source {
                memtape_core::FileSource::LocalFile { upload_file_id } => {
                    format!("uploads/{upload_file_id}")
                }
                memtape_core::FileSource::ToolFile { tool_file_id } => {
                    format!("tool-files/{tool_file_id}")
                }
                memtape_core::FileSource::RemoteUrl { .. } => continue,
            };
            if self.1.insert(key) {
                self.0.push(file.clone());
            }
        }
    }
}
