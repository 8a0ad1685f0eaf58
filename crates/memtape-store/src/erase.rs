//! Erasure in a store: what a request selects, how each selected entry is rewritten (a
//! tombstone, or its text redacted), the `tape.erased` receipt, and the short steps an
//! erasure runs in (the receipt first, then the rewrites, then the end), with the record
//! that lets whoever comes next finish one a dead process left. One plan for every store,
//! so an erasure means the same everywhere.

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
    /// What the erasure did to what it selected. An erasure by text holds its text here,
    /// as its request does: for the engine (which removes only the attached files that
    /// hold it), never to show or log.
    pub mode: EraseMode,
    /// Erasures of the same tenant that an earlier process began and did not end, which
    /// this one finished before it began ([`finish`]): the engine brings their
    /// projections along too.
    pub finished: Vec<EraseOutcome>,
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

/// The name of the store lock (per tenant) an erasure holds from its selection to its
/// last step: erasures of one tenant run one after another, so no two rewrite the same
/// entry at once and each receipt counts exactly what its erasure changed.
pub const ERASURE_LOCK: &str = "erasure";

/// How many entries one step of an erasure rewrites: each step is one short write
/// transaction, and appends (of anyone) go in between steps.
pub const STEP: usize = 500;

/// An erasure whose receipt is on the tape and whose rewrites are not all done: what
/// finishing it needs. Kept by the store (a row per erasure) from the transaction that
/// writes the receipt to the one that ends the erasure; followers of the tape
/// ([`crate::Store::entries_after`]) stop before its receipt meanwhile.
///
/// For an erasure by text it holds the text until the erasure ends, as the erasure's
/// own request does; the row is then deleted (SQLite zeroes it, `secure_delete`;
/// PostgreSQL's copy goes with the vacuum that follows).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    /// The receipt's id.
    pub receipt: EntryId,
    /// The tenant erased in.
    pub tenant: String,
    /// The text to redact; `None` when entries are erased whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The attached files the erasure takes, for the engine to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<memtape_core::FileRef>,
}

impl Pending {
    /// What the erasure does to what it selected.
    pub fn mode(&self) -> EraseMode {
        match &self.text {
            Some(text) => EraseMode::Text(text.clone()),
            None => EraseMode::Whole,
        }
    }

    /// The row as a store keeps it: JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| crate::Error::Corrupt {
            id: crate::row::sql_id(self.receipt),
            why: format!("an unfinished erasure could not be written: {e}"),
        })
    }

    /// Reads a row [`Pending::to_json`] wrote.
    pub fn from_json(receipt: i64, json: &str) -> Result<Self> {
        serde_json::from_str(json).map_err(|e| crate::Error::Corrupt {
            id: receipt,
            why: format!("an unfinished erasure's record is unreadable: {e}"),
        })
    }
}

/// The store's side of one step of an erasure, inside one write transaction.
pub trait EraseTransaction {
    /// The entries of `tenant` with ids above `after`, in id order (those appended since
    /// an erasure read its selection).
    fn entries_after(&mut self, tenant: &str, after: EntryId) -> Result<Vec<Entry>>;
    /// Lets rewrites through (SQLite: the guard its trigger checks).
    fn begin(&mut self) -> Result<()>;
    /// Writes `rewrite`, marked as erased by `by`.
    fn rewrite(&mut self, rewrite: &Rewrite, by: Erasure) -> Result<()>;
    /// Closes the gate [`EraseTransaction::begin`] opened.
    fn end(&mut self) -> Result<()>;
    /// Appends the receipt.
    fn append_receipt(&mut self, receipt: NewEntry) -> Result<Entry>;
    /// Records `pending` as begun.
    fn add_pending(&mut self, pending: &Pending) -> Result<()>;
    /// Records the erasure of `receipt` as ended.
    fn remove_pending(&mut self, receipt: EntryId) -> Result<()>;
    /// Scrubs the idempotency records of `tenant`: an answer's body may quote erased
    /// content and a fingerprint is a hash of a request that held it, so each record keeps
    /// its key and status and gets `{"erased": <receipt id>}` as its body and
    /// `erased:<receipt id>` as its fingerprint. A retry of such a request is then told
    /// its key was used for another request: it never stores twice.
    fn scrub_requests(&mut self, tenant: &str, receipt: EntryId) -> Result<()>;
}

/// A store that erases in steps ([`erase`]): short write transactions, reads between
/// them on its readers.
pub trait StepStore: crate::Store {
    /// Runs `f` in one write transaction, committed when `f` succeeds and rolled back
    /// otherwise.
    fn erase_step(&self, f: &mut dyn FnMut(&mut dyn EraseTransaction) -> Result<()>) -> Result<()>;
    /// The erasures begun and not ended, in receipt order.
    fn pending_erasures(&self) -> Result<Vec<Pending>>;
    /// Takes what ended erasures replaced out of the store's files (SQLite: the
    /// write-ahead log truncated; PostgreSQL: a vacuum of the tables they changed);
    /// whether it got through ([`EraseOutcome::wiped`]).
    fn wipe(&self) -> Result<bool>;
}

/// Wipes the store's files ([`StepStore::wipe`]) when `outcome` ended an erasure (its
/// own, or earlier ones it finished), and says so on each.
fn wipe_after<S: StepStore + ?Sized>(store: &S, outcome: &mut EraseOutcome) -> Result<()> {
    if outcome.receipt.is_some() || !outcome.finished.is_empty() {
        let wiped = store.wipe()?;
        outcome.wiped = wiped;
        outcome.finished.iter_mut().for_each(|o| o.wiped = wiped);
    }
    Ok(())
}

/// What an erasure selected, read on the store's readers before anything is written.
struct Selection {
    rewrites: Vec<(EntryId, ErasedHow)>,
    attachments: Attachments,
    /// The last id the selection read up to: entries after it are read again in the
    /// step that writes the receipt.
    through: EntryId,
}

impl Selection {
    fn take(&mut self, entry: &Entry, mode: &EraseMode) {
        self.attachments.note(entry);
        if let Some(r) = rewrite(entry, mode) {
            self.rewrites.push((r.id, r.how));
        }
    }

    fn counts(&self) -> (u64, u64) {
        let whole = self
            .rewrites
            .iter()
            .filter(|(_, how)| *how == ErasedHow::Whole)
            .count() as u64;
        (whole, self.rewrites.len() as u64 - whole)
    }
}

/// Reads what `request` selects, through the store's ordinary reads (no writer held).
fn select<S: crate::Store + ?Sized>(store: &S, request: &EraseRequest) -> Result<Selection> {
    // Every id at or below this one is committed: the selection reads no further, and
    // the receipt's step reads what came after.
    let through = store.last_id()?;
    let mut sel = Selection {
        rewrites: Vec::new(),
        attachments: Attachments::default(),
        through,
    };
    if let EraseTarget::Entries { within, ids } = &request.target {
        // Read by id: naming two entries never reads the whole agent.
        let mut ids = ids.clone();
        ids.sort_unstable();
        ids.dedup();
        for chunk in ids.chunks(STEP) {
            for entry in store.get_many(within.tenant(), chunk)? {
                if within.contains(&entry.scope) {
                    sel.take(&entry, &request.mode);
                }
            }
        }
    } else {
        let expiry = match &request.target {
            EraseTarget::Expired { expiry, .. } => Some(expiry),
            _ => None,
        };
        for info in store.scopes(request.target.tenant())? {
            let scope = info.scope;
            if !request.target.takes_scope(&scope) {
                continue;
            }
            let entries = store.scan(&scope, &memtape_core::Filter::default())?;
            let pointer = match expiry {
                // The scope's consolidation pointer, as its own entries up to the
                // selection's end leave it.
                Some(_) => {
                    let mut info = crate::ScopeInfo::empty(scope.clone());
                    entries
                        .iter()
                        .filter(|e| e.id <= through)
                        .for_each(|e| info.apply(e));
                    info.last_consolidated
                }
                None => EntryId(0),
            };
            for entry in entries.iter().filter(|e| e.id <= through) {
                if expiry.is_none_or(|x| x.takes(entry, pointer)) {
                    sel.take(entry, &request.mode);
                }
            }
        }
    }
    sel.rewrites.sort_by_key(|(id, _)| *id);
    Ok(sel)
}

/// Runs `request` on `store` in steps, so the store's writer is never held for long:
///
/// 1. Under the tenant's [`ERASURE_LOCK`], any erasure of the tenant left unfinished (its
///    process died) is finished first ([`EraseOutcome::finished`]).
/// 2. The selection is read on the store's readers: appends go on meanwhile.
/// 3. One transaction reads what was appended to the target since, appends the receipt
///    (its counts and ids final) and records the erasure as [`Pending`]. From here the
///    erasure is certain: if the process dies, whoever opens the store next finishes it
///    ([`finish`]).
/// 4. The entries are rewritten [`STEP`] at a time, each step its own transaction.
/// 5. `before_end` runs with the outcome: what lies outside the store (the attached
///    files) goes here, while the erasure is still under way, so a crash before the end
///    has whoever finishes the erasure do it again.
/// 6. One transaction scrubs the tenant's idempotency records and ends the erasure.
///
/// A dry run stops after 2 and takes no lock.
pub fn erase<S: StepStore + ?Sized>(
    store: &S,
    request: &EraseRequest,
    before_end: BeforeEnd<'_>,
) -> Result<EraseOutcome> {
    request.validate()?;
    let tenant = request.target.tenant().to_owned();
    let _lock = if request.dry_run {
        None
    } else {
        store.lock(&tenant, ERASURE_LOCK, crate::Wait::Block)?
    };
    let finished = if request.dry_run {
        Vec::new()
    } else {
        finish_locked(store, Some(&tenant), before_end)?
    };
    let mut sel = select(store, request)?;
    let (whole, text) = sel.counts();
    let nothing = sel.rewrites.is_empty() && matches!(request.target, EraseTarget::Expired { .. });
    if request.dry_run || nothing {
        // A retention run that finds nothing expired leaves no receipt: it runs every day.
        let mut outcome = EraseOutcome {
            receipt: None,
            entries: whole,
            redacted: text,
            ids: sel.rewrites.iter().map(|(id, _)| *id).collect(),
            wiped: true,
            attachments: sel.attachments.0,
            files_removed: 0,
            mode: request.mode.clone(),
            finished,
        };
        wipe_after(store, &mut outcome)?;
        return Ok(outcome);
    }
    let mut receipt = None;
    let text_of = match &request.mode {
        EraseMode::Text(t) => Some(t.clone()),
        EraseMode::Whole => None,
    };
    store.erase_step(&mut |tx| {
        // What the target gained since the selection was read. A retention run leaves
        // it: what was appended after it began is not what its policy expired.
        let mut fresh = Selection {
            rewrites: sel.rewrites.clone(),
            attachments: Attachments::default(),
            through: sel.through,
        };
        if !matches!(
            request.target,
            EraseTarget::Entries { .. } | EraseTarget::Expired { .. }
        ) {
            for entry in tx.entries_after(&tenant, sel.through)? {
                if request.target.takes_scope(&entry.scope) {
                    fresh.take(&entry, &request.mode);
                }
            }
        }
        let (whole, text) = fresh.counts();
        let ids: Vec<EntryId> = fresh.rewrites.iter().map(|(id, _)| *id).collect();
        let stored = tx.append_receipt(request.receipt(whole, text, &ids))?;
        let mut files = sel.attachments.clone();
        files.extend(fresh.attachments.0.iter());
        tx.add_pending(&Pending {
            receipt: stored.id,
            tenant: tenant.clone(),
            text: text_of.clone(),
            files: files.0.clone(),
        })?;
        receipt = Some((stored, fresh.rewrites, files));
        Ok(())
    })?;
    let Some((receipt, rewrites, files)) = receipt else {
        return Err(crate::Error::Corrupt {
            id: 0,
            why: "an erasure's receipt was not written".into(),
        });
    };
    sel.rewrites = rewrites;
    let (whole, text) = sel.counts();
    let ids: Vec<EntryId> = sel.rewrites.iter().map(|(id, _)| *id).collect();
    let pending = Pending {
        receipt: receipt.id,
        tenant,
        text: text_of,
        files: files.0,
    };
    rewrite_steps(store, &pending, &ids)?;
    let mut outcome = EraseOutcome {
        receipt: Some(receipt),
        entries: whole,
        redacted: text,
        ids,
        wiped: true,
        attachments: pending.files.clone(),
        files_removed: 0,
        mode: request.mode.clone(),
        finished,
    };
    before_end(&mut outcome);
    end(store, &pending)?;
    wipe_after(store, &mut outcome)?;
    Ok(outcome)
}

/// What a caller does with an erasure's outcome after its rewrites and before its end
/// ([`erase`], step 5): it cannot fail the erasure (an error is the caller's to keep
/// and report after the end; the store's own steps are done by then).
pub type BeforeEnd<'a> = &'a mut dyn FnMut(&mut EraseOutcome);

/// Finishes every erasure left unfinished (its process died between its receipt and its
/// end) that no live process is finishing: each under its tenant's [`ERASURE_LOCK`],
/// taken without waiting (a held lock is a live erasure, which finishes its own).
/// Returns what each did, as its erasure would have.
pub fn finish<S: StepStore + ?Sized>(
    store: &S,
    before_end: BeforeEnd<'_>,
) -> Result<Vec<EraseOutcome>> {
    let mut out = Vec::new();
    for pending in store.pending_erasures()? {
        let Some(_lock) = store.lock(&pending.tenant, ERASURE_LOCK, crate::Wait::Try)? else {
            continue;
        };
        out.extend(finish_locked(store, Some(&pending.tenant), before_end)?);
    }
    if !out.is_empty() {
        let wiped = store.wipe()?;
        out.iter_mut().for_each(|o| o.wiped = wiped);
    }
    Ok(out)
}

/// [`finish`] for `tenant` (or every tenant), its lock held by the caller.
fn finish_locked<S: StepStore + ?Sized>(
    store: &S,
    tenant: Option<&str>,
    before_end: BeforeEnd<'_>,
) -> Result<Vec<EraseOutcome>> {
    let mut out = Vec::new();
    // Read again under the lock: the erasure may have ended meanwhile.
    for pending in store.pending_erasures()? {
        if tenant.is_some_and(|t| t != pending.tenant) {
            continue;
        }
        let receipt = store
            .get(&pending.tenant, pending.receipt)?
            .ok_or_else(|| crate::Error::Corrupt {
                id: crate::row::sql_id(pending.receipt),
                why: "an unfinished erasure's receipt is not on the tape".into(),
            })?;
        let Ok(Some(BuiltinEvent::Erased(erased))) = BuiltinEvent::from_payload(&receipt.payload)
        else {
            return Err(crate::Error::Corrupt {
                id: crate::row::sql_id(pending.receipt),
                why: "an unfinished erasure's receipt is not a tape.erased event".into(),
            });
        };
        let ids: Vec<EntryId> = erased.each_id().collect();
        rewrite_steps(store, &pending, &ids)?;
        let mut outcome = EraseOutcome {
            receipt: Some(receipt),
            entries: erased.entries,
            redacted: erased.redacted,
            ids,
            wiped: true,
            mode: pending.mode(),
            attachments: pending.files.clone(),
            files_removed: 0,
            finished: Vec::new(),
        };
        before_end(&mut outcome);
        end(store, &pending)?;
        out.push(outcome);
    }
    Ok(out)
}

/// Step 4 of [`erase`]: rewrites `ids` (those not yet rewritten by this erasure) a step
/// at a time. Each step reads its entries on a reader, so the writer is held only for
/// the rewrites themselves, and whoever waited for it gets it between steps.
fn rewrite_steps<S: StepStore + ?Sized>(
    store: &S,
    pending: &Pending,
    ids: &[EntryId],
) -> Result<()> {
    let mode = pending.mode();
    for chunk in ids.chunks(STEP) {
        let rewrites: Vec<Rewrite> = store
            .get_many(&pending.tenant, chunk)?
            .iter()
            .filter(|e| e.erased.is_none_or(|x| x.by != pending.receipt))
            .filter_map(|e| rewrite(e, &mode))
            .collect();
        if rewrites.is_empty() {
            continue;
        }
        store.erase_step(&mut |tx| {
            tx.begin()?;
            for r in &rewrites {
                tx.rewrite(
                    r,
                    Erasure {
                        by: pending.receipt,
                        how: r.how,
                    },
                )?;
            }
            tx.end()
        })?;
    }
    Ok(())
}

/// Step 6 of [`erase`]: scrubs the tenant's idempotency records and ends the erasure.
fn end<S: StepStore + ?Sized>(store: &S, pending: &Pending) -> Result<()> {
    store.erase_step(&mut |tx| {
        tx.scrub_requests(&pending.tenant, pending.receipt)?;
        tx.remove_pending(pending.receipt)
    })
}

/// [`crate::Store::entries_after`] for a reader of the whole tape (an export, a
/// migration), which must not stop at an erasure under way as the index may: when the
/// page comes back empty while an erasure is under way, it finishes those a dead process
/// left ([`crate::Store::finish_erasures`]) and waits for the others, up to `wait` without
/// progress, then names the erasure that did not end.
pub fn entries_after_all<S: crate::Store + ?Sized>(
    store: &S,
    after: EntryId,
    limit: usize,
    wait: std::time::Duration,
) -> Result<Vec<Entry>> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let page = store.entries_after(after, limit)?;
        let under_way = if page.is_empty() {
            store.erasures_under_way()?
        } else {
            Vec::new()
        };
        let Some(first) = under_way.first() else {
            return Ok(page);
        };
        store.finish_erasures()?;
        if std::time::Instant::now() >= deadline {
            return Err(crate::Error::ErasureUnderWay {
                receipt: *first,
                secs: wait.as_secs(),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The attached files an erasure takes, each once.
#[derive(Clone, Default)]
struct Attachments(
    Vec<memtape_core::FileRef>,
    std::collections::HashSet<String>,
);

impl Attachments {
    /// Notes the files of a selected entry: all of them, whether it is erased whole or
    /// searched for a text (the file may hold the text where the message does not). URLs
    /// are not ours to remove; a tombstone has no files.
    fn note(&mut self, entry: &Entry) {
        if let Some(message) = entry.message() {
            self.extend(message.files.iter());
        }
    }

    /// Adds `files`, each once. URLs are not ours to remove.
    fn extend<'a>(&mut self, files: impl Iterator<Item = &'a memtape_core::FileRef>) {
        for file in files {
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
