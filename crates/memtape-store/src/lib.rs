//! memtape-store: where the tape lives. The [`Store`] trait, the embedded SQLite store
//! ([`SqliteStore`], WAL mode, the default) and an in-memory store ([`MemoryStore`], for
//! tests). Both enforce the same write rules (see [`rules`]), so a scope's projection
//! ([`ScopeInfo`]) and parent links mean the same everywhere.
//!
//! ```
//! use memtape_core::{Message, NewEntry, Payload, Scope};
//! use memtape_store::{MemoryStore, Store};
//!
//! let store = MemoryStore::new();
//! let scope = Scope::agent("t", "a")?.with_session("s1")?;
//! let now = chrono::DateTime::UNIX_EPOCH;
//! let first = store.append(vec![NewEntry::new(scope.clone(), Payload::Message(Message::user("hi")), now)])?;
//! let second = store.append(vec![NewEntry::new(scope.clone(), Payload::Message(Message::assistant("hello")), now)])?;
//! assert_eq!(second[0].parent, Some(first[0].id)); // conversations chain themselves
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod checkpoint;
pub mod erase;
mod error;
mod locks;
mod memory;
pub mod requests;
pub mod row;
pub mod rules;
mod sqlite;
pub mod vectors;

use chrono::{DateTime, Utc};
use memtape_core::{Entry, EntryId, Filter, Kind, NewEntry, Order, Scope};

pub use erase::{EraseMode, EraseOutcome, EraseRequest, EraseTarget};
pub use error::Error;
pub use locks::{StoreLock, Wait, lock_serving, lock_unserved};
pub use memory::MemoryStore;
pub use requests::Claim;
pub use sqlite::{SCHEMA_VERSION, SqliteStore, plan_once, truncate_wal};
pub use vectors::NewVector;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a store knows about one scope: a projection of its entries, kept up to date in the
/// same transaction as every append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeInfo {
    /// The scope.
    pub scope: Scope,
    /// How many entries it has.
    pub entries: u64,
    /// How many of them are conversational (messages, tool calls and results, system).
    pub messages: u64,
    /// The latest conversational entry: the parent a new message gets by default.
    pub head: Option<EntryId>,
    /// The latest entry of any kind.
    pub last_id: Option<EntryId>,
    /// The consolidation pointer: entries up to and including this id are consolidated
    /// (0 when nothing is).
    pub last_consolidated: EntryId,
    /// When the first entry was written.
    pub first_at: Option<DateTime<Utc>>,
    /// When the latest entry was written.
    pub last_at: Option<DateTime<Utc>>,
}

/// How a [`Store::restore`] placed the entries it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every entry kept its id (they all came after the store's last one).
    KeptIds,
    /// The entries were numbered anew after the store's last id; parent links followed.
    Renumbered,
}

/// What a [`Store::restore`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Restored {
    /// How the entries were placed.
    pub placement: Placement,
    /// The entries as they are now on the tape, in order, with their final ids.
    pub entries: Vec<Entry>,
}

/// A tape store. Appends are atomic and durable when they return; entries are never
/// modified or deleted. Every read is confined to a scope or a tenant, so one tenant
/// never sees another's entries.
pub trait Store: Send + Sync {
    /// Appends `entries` in order, in one transaction, and returns them with their ids.
    /// A conversational entry without a parent is linked to its scope's head.
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>>;

    /// [`Store::append`] of the events no ordinary append may write
    /// ([`rules::refuse_reserved`]): an administrator's retention policy. Only memtape's
    /// own admin paths call it, never with a caller's entries unchecked.
    fn append_reserved(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>>;

    /// [`Store::append`] of `entries`, then, in the same transaction, of the entries `then`
    /// makes from them as stored (the WAL's captures of messages, which name the messages'
    /// ids): all are committed, or none. Returns the entries as stored, then the derived
    /// ones. `then` runs while the store's writer is held: it must not use the store.
    fn append_then(
        &self,
        entries: Vec<NewEntry>,
        then: &mut dyn FnMut(&[Entry]) -> Vec<NewEntry>,
    ) -> Result<(Vec<Entry>, Vec<Entry>)>;

    /// Writes whole entries back (an import of memtape's own format) in one transaction:
    /// with their ids when they all come after the store's last id, else renumbered.
    fn restore(&self, entries: Vec<Entry>) -> Result<Restored>;

    /// Erases what `request` selects, with its `tape.erased` receipt ([`erase::erase`]):
    /// each entry keeps its id, scope, kind, time and parent, and loses its content (or
    /// the text asked). The only change a store makes to a written entry. It runs in
    /// short steps, so other writers wait at most one of them; once the receipt is
    /// written the erasure is certain, and one that a dead process left unfinished is
    /// finished by [`Store::finish_erasures`] or by the tenant's next erasure.
    fn erase(&self, request: &EraseRequest) -> Result<EraseOutcome> {
        self.erase_with(request, &mut |_| {})
    }

    /// [`Store::erase`], running `before_end` with the outcome (and with that of each
    /// unfinished erasure it finishes first) after the rewrites and before the end: the
    /// engine removes attached files there, so a crash before the end has them removed
    /// again by whoever finishes the erasure.
    fn erase_with(
        &self,
        request: &EraseRequest,
        before_end: erase::BeforeEnd<'_>,
    ) -> Result<EraseOutcome>;

    /// Finishes the erasures that processes which died left unfinished (their receipts
    /// written, not all their rewrites: [`erase::Pending`]), as [`erase::finish`]
    /// describes; what each did. A store that cannot write finishes nothing.
    fn finish_erasures(&self) -> Result<Vec<EraseOutcome>> {
        self.finish_erasures_with(&mut |_| {})
    }

    /// [`Store::finish_erasures`], running `before_end` for each as
    /// [`Store::erase_with`] does.
    fn finish_erasures_with(&self, before_end: erase::BeforeEnd<'_>) -> Result<Vec<EraseOutcome>>;

    /// Rewrites the store's files so that nothing an erasure freed is left in them. SQLite
    /// needs nothing (`secure_delete` zeroes freed pages, and an erasure truncates the
    /// write-ahead log): the default does nothing. PostgreSQL runs `VACUUM FULL` on the
    /// tape's tables, which rewrites them into new files under an exclusive lock: every
    /// read and write of the database waits meanwhile (a maintenance step, not a default).
    fn compact(&self) -> Result<()> {
        Ok(())
    }

    /// The receipt id of the latest erasure that changed an entry (0 when none did): a
    /// cache of what it read from the tape (memory logs) compares it to know whether an
    /// erasure, in this process or another, changed entries it holds.
    fn last_erasure(&self) -> Result<EntryId>;

    /// The entry with `id`, if it exists and belongs to `tenant`.
    fn get(&self, tenant: &str, id: EntryId) -> Result<Option<Entry>>;

    /// The entries of exactly `scope` that pass `filter`.
    fn scan(&self, scope: &Scope, filter: &Filter) -> Result<Vec<Entry>>;

    /// What the store knows about `scope`, if it has any entry.
    fn scope_info(&self, scope: &Scope) -> Result<Option<ScopeInfo>>;

    /// The entries with these ids that exist and belong to `tenant`, in the order asked.
    fn get_many(&self, tenant: &str, ids: &[EntryId]) -> Result<Vec<Entry>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.extend(self.get(tenant, *id)?);
        }
        Ok(out)
    }

    /// For each `(scope, before)`, the last conversational entry of exactly `scope` with an
    /// id below `before` (`None` when there is none), in the order asked: the message a
    /// projection shows beside the next one (the search index's context field). One read
    /// for many scopes, where the store can answer in one round trip.
    fn previous_messages(&self, wanted: &[(Scope, EntryId)]) -> Result<Vec<Option<Entry>>> {
        let filter = |before| Filter {
            before: Some(before),
            kinds: Kind::conversational().collect(),
            order: Order::Desc,
            limit: Some(1),
            ..Default::default()
        };
        wanted
            .iter()
            .map(|(scope, before)| Ok(self.scan(scope, &filter(*before))?.into_iter().next()))
            .collect()
    }

    /// Every scope of `tenant` that has entries.
    fn scopes(&self, tenant: &str) -> Result<Vec<ScopeInfo>>;

    /// Every tenant that has entries, sorted. For background work that runs for every
    /// tenant (scheduled emergence), not for serving callers.
    fn tenants(&self) -> Result<Vec<String>>;

    /// A random id made when the store was created: projections kept beside the tape (the
    /// search index) record it, so a replaced or reset tape is never mistaken for the one
    /// they were built from.
    fn tape_id(&self) -> Result<String>;

    /// The highest id a follower of the tape may read (0 when empty): the highest in the
    /// store, or, while an erasure is under way, the one before its receipt (see
    /// [`Store::entries_after`]).
    fn last_id(&self) -> Result<EntryId>;

    /// Up to `limit` entries with ids above `after`, in id order, across all tenants.
    ///
    /// This is the one read that crosses tenants. It exists for projections (the search
    /// index), which follow the whole tape and record how far they have read; it is not
    /// for serving callers.
    ///
    /// It stops before the receipt of an erasure not yet ended ([`erase::Pending`]): a
    /// follower that reads a receipt applies it (the search index drops what it names),
    /// so it must find every entry the receipt names already rewritten. What is appended
    /// meanwhile is stored and acknowledged as always, and followed once the erasure ends
    /// (seconds, for 100,000 entries).
    fn entries_after(&self, after: EntryId, limit: usize) -> Result<Vec<Entry>>;

    /// Up to `limit` entries of `tenant` with ids above `after`, in id order: what
    /// [`Store::entries_after`] would return of that tenant, stopping where it stops, read
    /// without passing over other tenants' entries. For a projection of one tenant (its
    /// search index shard), which records how far it has read by the tape's ids.
    fn entries_after_in(&self, tenant: &str, after: EntryId, limit: usize) -> Result<Vec<Entry>>;

    /// The receipts of the erasures under way ([`erase::Pending`]), in id order: a
    /// follower of the tape waits at the first.
    fn erasures_under_way(&self) -> Result<Vec<EntryId>>;

    /// The vectors `embedder` made of the entries of `tenant` with these ids, where kept
    /// ([`Store::put_vectors`]), in id order; ids without one (or of another tenant) are
    /// left out.
    fn vectors(
        &self,
        tenant: &str,
        embedder: &str,
        ids: &[EntryId],
    ) -> Result<Vec<(EntryId, Vec<u8>)>>;

    /// [`Store::vectors`] for entries of several tenants at once: each wanted id with the
    /// tenant it must belong to (an id of another tenant is left out), in id order.
    fn vectors_of(
        &self,
        embedder: &str,
        wanted: &[(&str, EntryId)],
    ) -> Result<Vec<(EntryId, Vec<u8>)>> {
        let mut by_tenant: std::collections::BTreeMap<&str, Vec<EntryId>> = Default::default();
        for (tenant, id) in wanted {
            by_tenant.entry(tenant).or_default().push(*id);
        }
        let mut out = Vec::new();
        for (tenant, ids) in by_tenant {
            out.extend(self.vectors(tenant, embedder, &ids)?);
        }
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    }

    /// Keeps vectors beside the tape, each under its entry and `embedder` (the embedder's
    /// id, naming its model and what of an entry it embeds): whichever process embeds an
    /// entry first writes its vector, and every index that needs it later reads it instead
    /// of running the model ([`vectors`]). An entry that has a vector of `embedder` keeps
    /// it. A vector is kept only while its entry is as the embedder read it
    /// ([`NewVector::erased_by`]), and an erasure deletes the vectors of every entry it
    /// rewrites, so no vector outlives the text it was made of. Refuses (naming it) an
    /// embedder name or a vector outside [`vectors::check`]'s limits and an id not on the
    /// tape. Vectors can be made again from the tape, so their writes need not wait for
    /// the disk.
    fn put_vectors(&self, embedder: &str, vectors: &[NewVector]) -> Result<()>;

    /// Takes the lock `name` of `tenant`, which holds across every process that opens this
    /// store (and across threads of one process): with [`Wait::Try`], `None` when someone
    /// holds it. The lock is released when the returned guard is dropped, or when its
    /// process dies.
    fn lock(&self, tenant: &str, name: &str, wait: Wait) -> Result<Option<StoreLock>>;

    /// Claims the idempotency key `key` of `tenant` for a request with `fingerprint`, at
    /// `now` ([`requests`]): durably, before the request runs, so two requests with one
    /// key never both run. Keys older than [`requests::KEEP_REQUESTS`] are forgotten.
    fn claim_request(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim>;

    /// Records the answer of the request that claimed `key`.
    fn finish_request(&self, tenant: &str, key: &str, status: u16, body: &[u8]) -> Result<()>;

    /// Lets go of `key` (its request did nothing, and may be sent again).
    fn release_request(&self, tenant: &str, key: &str) -> Result<()>;

    /// Waits up to `timeout` for a sign that the tape grew (a commit by this process or
    /// another one), returning early when one comes: PostgreSQL's notifications. Stores
    /// with no such sign (SQLite, memory) just wait the whole `timeout`; a follower of the
    /// tape compares [`Store::last_id`] with what it has read after every wait, so a sign
    /// only makes it sooner. Meant for one follower thread per store.
    fn wait_for_writes(&self, timeout: std::time::Duration) -> Result<()> {
        std::thread::sleep(timeout);
        Ok(())
    }
}

/// A boxed store is a store: an engine can hold whichever store its configuration chose
/// (`Box<dyn Store>`: SQLite by default, PostgreSQL for a `postgres://` address).
impl<S: Store + ?Sized> Store for Box<S> {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        (**self).append(entries)
    }
    fn append_reserved(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        (**self).append_reserved(entries)
    }
    fn append_then(
        &self,
        entries: Vec<NewEntry>,
        then: &mut dyn FnMut(&[Entry]) -> Vec<NewEntry>,
    ) -> Result<(Vec<Entry>, Vec<Entry>)> {
        (**self).append_then(entries, then)
    }
    fn restore(&self, entries: Vec<Entry>) -> Result<Restored> {
        (**self).restore(entries)
    }
    fn erase_with(
        &self,
        request: &EraseRequest,
        before_end: erase::BeforeEnd<'_>,
    ) -> Result<EraseOutcome> {
        (**self).erase_with(request, before_end)
    }
    fn finish_erasures_with(&self, before_end: erase::BeforeEnd<'_>) -> Result<Vec<EraseOutcome>> {
        (**self).finish_erasures_with(before_end)
    }
    fn last_erasure(&self) -> Result<EntryId> {
        (**self).last_erasure()
    }
    fn compact(&self) -> Result<()> {
        (**self).compact()
    }
    fn get(&self, tenant: &str, id: EntryId) -> Result<Option<Entry>> {
        (**self).get(tenant, id)
    }
    fn scan(&self, scope: &Scope, filter: &Filter) -> Result<Vec<Entry>> {
        (**self).scan(scope, filter)
    }
    fn scope_info(&self, scope: &Scope) -> Result<Option<ScopeInfo>> {
        (**self).scope_info(scope)
    }
    fn get_many(&self, tenant: &str, ids: &[EntryId]) -> Result<Vec<Entry>> {
        (**self).get_many(tenant, ids)
    }
    fn previous_messages(&self, wanted: &[(Scope, EntryId)]) -> Result<Vec<Option<Entry>>> {
        (**self).previous_messages(wanted)
    }
    fn scopes(&self, tenant: &str) -> Result<Vec<ScopeInfo>> {
        (**self).scopes(tenant)
    }
    fn tenants(&self) -> Result<Vec<String>> {
        (**self).tenants()
    }
    fn tape_id(&self) -> Result<String> {
        (**self).tape_id()
    }
    fn last_id(&self) -> Result<EntryId> {
        (**self).last_id()
    }
    fn entries_after(&self, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        (**self).entries_after(after, limit)
    }
    fn entries_after_in(&self, tenant: &str, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        (**self).entries_after_in(tenant, after, limit)
    }
    fn erasures_under_way(&self) -> Result<Vec<EntryId>> {
        (**self).erasures_under_way()
    }
    fn vectors(
        &self,
        tenant: &str,
        embedder: &str,
        ids: &[EntryId],
    ) -> Result<Vec<(EntryId, Vec<u8>)>> {
        (**self).vectors(tenant, embedder, ids)
    }
    fn vectors_of(
        &self,
        embedder: &str,
        wanted: &[(&str, EntryId)],
    ) -> Result<Vec<(EntryId, Vec<u8>)>> {
        (**self).vectors_of(embedder, wanted)
    }
    fn put_vectors(&self, embedder: &str, vectors: &[NewVector]) -> Result<()> {
        (**self).put_vectors(embedder, vectors)
    }
    fn lock(&self, tenant: &str, name: &str, wait: Wait) -> Result<Option<StoreLock>> {
        (**self).lock(tenant, name, wait)
    }
    fn wait_for_writes(&self, timeout: std::time::Duration) -> Result<()> {
        (**self).wait_for_writes(timeout)
    }
    fn claim_request(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim> {
        (**self).claim_request(tenant, key, fingerprint, now)
    }
    fn finish_request(&self, tenant: &str, key: &str, status: u16, body: &[u8]) -> Result<()> {
        (**self).finish_request(tenant, key, status, body)
    }
    fn release_request(&self, tenant: &str, key: &str) -> Result<()> {
        (**self).release_request(tenant, key)
    }
}
