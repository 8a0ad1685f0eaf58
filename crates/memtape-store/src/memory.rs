//! An in-memory store: the same rules as SQLite, no durability. For tests and embedding.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use memtape_core::{Entry, EntryId, Erasure, Filter, Kind, NewEntry, Order, Scope};

use crate::erase::{EraseTransaction, Pending, Rewrite, StepStore};
use crate::locks::MemoryLocks;
use crate::rules::{check_restored, plan_restore, prepare};
use crate::{
    Claim, EraseOutcome, EraseRequest, NewVector, Restored, Result, ScopeInfo, Store, StoreLock,
    Wait,
};

/// A store held in memory.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    tape: String,
    locks: MemoryLocks,
    /// Idempotency keys: (tenant, key) to (fingerprint, when claimed, the answer once
    /// there is one).
    requests: Mutex<Requests>,
}

type Requests = BTreeMap<(String, String), (String, i64, Option<(u16, Vec<u8>)>)>;

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            inner: Mutex::default(),
            tape: random_tape_id(),
            locks: MemoryLocks::default(),
            requests: Mutex::default(),
        }
    }
}

/// 32 hex digits from the standard library's per-instance random hash keys, so every
/// in-memory store has its own tape id without a random number crate.
fn random_tape_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<u64, Entry>,
    scopes: BTreeMap<Scope, ScopeInfo>,
    /// The receipt of the latest ended erasure that changed an entry.
    last_erasure: EntryId,
    /// Erasures begun and not ended, by receipt.
    pending: BTreeMap<u64, Pending>,
    /// Kept vectors, by entry id and embedder.
    vectors: BTreeMap<(u64, String), Vec<u8>>,
}

impl Inner {
    fn lookup(&self, id: EntryId) -> Option<(Scope, Kind)> {
        self.entries.get(&id.0).map(|e| (e.scope.clone(), e.kind()))
    }

    fn last_id(&self) -> EntryId {
        self.entries
            .last_key_value()
            .map_or(EntryId(0), |(_, e)| e.id)
    }

    /// The highest id a follower may read ([`Store::last_id`]).
    fn followed_id(&self) -> EntryId {
        match self.pending.first_key_value() {
            Some((receipt, _)) => EntryId(receipt - 1),
            None => self.last_id(),
        }
    }

    /// Runs `f` and undoes everything it did to the entries and scopes if it fails.
    fn atomically<T>(&mut self, f: impl FnOnce(&mut Inner) -> Result<T>) -> Result<T> {
        let (last, scopes) = (self.last_id().0, self.scopes.clone());
        let out = f(self);
        if out.is_err() {
            self.entries.split_off(&(last + 1));
            self.scopes = scopes;
        }
        out
    }

    fn push(&mut self, entry: Entry) {
        if let Some(erased) = entry.erased {
            self.last_erasure = self.last_erasure.max(erased.by);
        }
        self.scopes
            .entry(entry.scope.clone())
            .or_insert_with(|| ScopeInfo::empty(entry.scope.clone()))
            .apply(&entry);
        self.entries.insert(entry.id.0, entry);
    }
}

/// [`Store::append`] inside `inner` (its caller undoes it all on an error).
fn append_to(inner: &mut Inner, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
    let mut out = Vec::with_capacity(entries.len());
    for new in entries {
        let id = crate::rules::next_id(inner.last_id())?;
        let info = inner
            .scopes
            .get(&new.scope)
            .cloned()
            .unwrap_or_else(|| ScopeInfo::empty(new.scope.clone()));
        let entry = prepare(new, id, &info, &mut |id| Ok(inner.lookup(id)))?;
        inner.push(entry.clone());
        out.push(entry);
    }
    Ok(out)
}

/// One step of an erasure inside `inner`: what it writes waits here until the step has
/// succeeded (the receipt, appended at once, is undone by [`Inner::atomically`]), so a
/// failure leaves everything as it was.
struct Erasing<'a> {
    inner: &'a mut Inner,
    rewrites: Vec<(Rewrite, Erasure)>,
    added: Vec<Pending>,
    removed: Vec<EntryId>,
    /// The tenant whose idempotency records are scrubbed once the step succeeds, and
    /// the receipt's id.
    scrub: Option<(String, EntryId)>,
}

impl EraseTransaction for Erasing<'_> {
    fn entries_after(&mut self, tenant: &str, after: EntryId) -> Result<Vec<Entry>> {
        Ok(self
            .inner
            .entries
            .range(after.0.saturating_add(1)..)
            .map(|(_, e)| e)
            .filter(|e| e.scope.tenant() == tenant)
            .cloned()
            .collect())
    }

    fn begin(&mut self) -> Result<()> {
        Ok(())
    }

    fn rewrite(&mut self, rewrite: &Rewrite, by: Erasure) -> Result<()> {
        self.rewrites.push((rewrite.clone(), by));
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        Ok(())
    }

    fn append_receipt(&mut self, receipt: NewEntry) -> Result<Entry> {
        let mut stored = append_to(self.inner, vec![receipt])?;
        stored.pop().ok_or_else(|| crate::Error::Corrupt {
            id: 0,
            why: "an erasure's receipt was not written".into(),
        })
    }

    fn add_pending(&mut self, pending: &Pending) -> Result<()> {
        self.added.push(pending.clone());
        Ok(())
    }

    fn remove_pending(&mut self, receipt: EntryId) -> Result<()> {
        self.removed.push(receipt);
        Ok(())
    }

    fn scrub_requests(&mut self, tenant: &str, receipt: EntryId) -> Result<()> {
        self.scrub = Some((tenant.to_owned(), receipt));
        Ok(())
    }
}

impl StepStore for MemoryStore {
    fn erase_step(&self, f: &mut dyn FnMut(&mut dyn EraseTransaction) -> Result<()>) -> Result<()> {
        let scrub = self.data().atomically(|inner| {
            let mut tx = Erasing {
                inner,
                rewrites: Vec::new(),
                added: Vec::new(),
                removed: Vec::new(),
                scrub: None,
            };
            f(&mut tx)?;
            let Erasing {
                inner,
                rewrites,
                added,
                removed,
                scrub,
            } = tx;
            for (rewrite, by) in rewrites {
                if let Some(entry) = inner.entries.get_mut(&rewrite.id.0) {
                    entry.payload = rewrite.payload;
                    entry.meta = rewrite.meta;
                    entry.erased = Some(by);
                }
                inner.vectors.retain(|(id, _), _| *id != rewrite.id.0);
            }
            for pending in added {
                inner.pending.insert(pending.receipt.0, pending);
            }
            for receipt in removed {
                inner.pending.remove(&receipt.0);
                // An ended erasure is one a cache of what it read must notice.
                inner.last_erasure = inner.last_erasure.max(receipt);
            }
            Ok(scrub)
        })?;
        if let Some((tenant, receipt)) = scrub {
            let mut requests = self
                .requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for ((t, _), (fingerprint, _, answer)) in requests.iter_mut() {
                if *t == tenant {
                    *fingerprint = format!("erased:{receipt}");
                    if let Some((_, body)) = answer {
                        *body = format!("{{\"erased\":{receipt}}}").into_bytes();
                    }
                }
            }
        }
        Ok(())
    }

    fn pending_erasures(&self) -> Result<Vec<Pending>> {
        Ok(self.data().pending.values().cloned().collect())
    }

    /// Nothing is kept on disk.
    fn wipe(&self) -> Result<bool> {
        Ok(true)
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn data(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the data consistent (every change is
        // undone on error), so a poisoned lock is still safe to use.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Store for MemoryStore {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        entries.iter().try_for_each(crate::rules::refuse_reserved)?;
        self.data().atomically(|inner| append_to(inner, entries))
    }

    fn append_reserved(&self, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
        self.data().atomically(|inner| append_to(inner, entries))
    }

    fn append_then(
        &self,
        entries: Vec<NewEntry>,
        then: &mut dyn FnMut(&[Entry]) -> Vec<NewEntry>,
    ) -> Result<(Vec<Entry>, Vec<Entry>)> {
        entries.iter().try_for_each(crate::rules::refuse_reserved)?;
        self.data().atomically(|inner| {
            let stored = append_to(inner, entries)?;
            let derived = then(&stored);
            derived.iter().try_for_each(crate::rules::refuse_reserved)?;
            let derived = append_to(inner, derived)?;
            Ok((stored, derived))
        })
    }

    fn restore(&self, entries: Vec<Entry>) -> Result<Restored> {
        self.data().atomically(|inner| {
            let (entries, placement) = plan_restore(entries, inner.last_id())?;
            for entry in &entries {
                let info = inner
                    .scopes
                    .get(&entry.scope)
                    .cloned()
                    .unwrap_or_else(|| ScopeInfo::empty(entry.scope.clone()));
                check_restored(entry, &info, &mut |id| Ok(inner.lookup(id)))?;
                inner.push(entry.clone());
            }
            Ok(Restored { placement, entries })
        })
    }

    fn erase_with(
        &self,
        request: &EraseRequest,
        before_end: crate::erase::BeforeEnd<'_>,
    ) -> Result<EraseOutcome> {
        crate::erase::erase(self, request, before_end)
    }

    fn finish_erasures_with(
        &self,
        before_end: crate::erase::BeforeEnd<'_>,
    ) -> Result<Vec<EraseOutcome>> {
        crate::erase::finish(self, before_end)
    }

    fn last_erasure(&self) -> Result<EntryId> {
        Ok(self.data().last_erasure)
    }

    fn get(&self, tenant: &str, id: EntryId) -> Result<Option<Entry>> {
        Ok(self
            .data()
            .entries
            .get(&id.0)
            .filter(|e| e.scope.tenant() == tenant)
            .cloned())
    }

    fn scan(&self, scope: &Scope, filter: &Filter) -> Result<Vec<Entry>> {
        let inner = self.data();
        let matching = |e: &&Entry| &e.scope == scope && filter.matches(e);
        let limit = filter.limit.unwrap_or(usize::MAX);
        Ok(match filter.order {
            Order::Asc => inner
                .entries
                .values()
                .filter(matching)
                .take(limit)
                .cloned()
                .collect(),
            Order::Desc => inner
                .entries
                .values()
                .rev()
                .filter(matching)
                .take(limit)
                .cloned()
                .collect(),
        })
    }

    fn scope_info(&self, scope: &Scope) -> Result<Option<ScopeInfo>> {
        Ok(self.data().scopes.get(scope).cloned())
    }

    fn scopes(&self, tenant: &str) -> Result<Vec<ScopeInfo>> {
        Ok(self
            .data()
            .scopes
            .values()
            .filter(|i| i.scope.tenant() == tenant)
            .cloned()
            .collect())
    }

    fn tenants(&self) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .data()
            .scopes
            .values()
            .map(|i| i.scope.tenant().to_owned())
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn entries_after(&self, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        let inner = self.data();
        let until = inner.followed_id().0;
        if after.0 >= until {
            return Ok(Vec::new());
        }
        let range = inner.entries.range(after.0.saturating_add(1)..=until);
        Ok(range.take(limit).map(|(_, e)| e.clone()).collect())
    }

    fn entries_after_in(&self, tenant: &str, after: EntryId, limit: usize) -> Result<Vec<Entry>> {
        let inner = self.data();
        let until = inner.followed_id().0;
        if after.0 >= until {
            return Ok(Vec::new());
        }
        let range = inner.entries.range(after.0.saturating_add(1)..=until);
        Ok(range
            .map(|(_, e)| e)
            .filter(|e| e.scope.tenant() == tenant)
            .take(limit)
            .cloned()
            .collect())
    }

    fn tape_id(&self) -> Result<String> {
        Ok(self.tape.clone())
    }

    fn last_id(&self) -> Result<EntryId> {
        Ok(self.data().followed_id())
    }

    fn erasures_under_way(&self) -> Result<Vec<EntryId>> {
        Ok(<Self as crate::erase::StepStore>::pending_erasures(self)?
            .into_iter()
            .map(|p| p.receipt)
            .collect())
    }

    fn vectors(
        &self,
        tenant: &str,
        embedder: &str,
        ids: &[EntryId],
    ) -> Result<Vec<(EntryId, Vec<u8>)>> {
        let inner = self.data();
        let mut out: Vec<(EntryId, Vec<u8>)> = ids
            .iter()
            .filter(|id| {
                inner
                    .entries
                    .get(&id.0)
                    .is_some_and(|e| e.scope.tenant() == tenant)
            })
            .filter_map(|id| {
                let v = inner.vectors.get(&(id.0, embedder.to_owned()))?;
                Some((*id, v.clone()))
            })
            .collect();
        out.sort_by_key(|(id, _)| *id);
        out.dedup_by_key(|(id, _)| *id);
        Ok(out)
    }

    fn put_vectors(&self, embedder: &str, vectors: &[NewVector]) -> Result<()> {
        crate::vectors::check(embedder, vectors)?;
        let mut inner = self.data();
        if let Some(v) = vectors
            .iter()
            .find(|v| !inner.entries.contains_key(&v.id.0))
        {
            return Err(crate::Error::BadVector(format!(
                "entry {} is not on the tape",
                v.id
            )));
        }
        for v in vectors {
            let mark = inner.entries.get(&v.id.0).and_then(|e| e.erased.as_ref());
            if mark.map(|e| e.by) != v.erased_by {
                continue;
            }
            inner
                .vectors
                .entry((v.id.0, embedder.to_owned()))
                .or_insert_with(|| v.bytes.clone());
        }
        Ok(())
    }

    fn lock(&self, tenant: &str, name: &str, wait: Wait) -> Result<Option<StoreLock>> {
        Ok(self.locks.lock(tenant, name, wait))
    }

    fn claim_request(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Claim> {
        crate::requests::check_key(key)?;
        let mut requests = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let oldest = crate::requests::expired_before(now);
        requests.retain(|_, (_, at, _)| *at >= oldest);
        let slot = requests.entry((tenant.to_owned(), key.to_owned()));
        Ok(match slot {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert((fingerprint.to_owned(), now.timestamp(), None));
                Claim::Claimed
            }
            std::collections::btree_map::Entry::Occupied(o) => match &o.get().2 {
                Some((status, body)) => Claim::Answered {
                    fingerprint: o.get().0.clone(),
                    status: *status,
                    body: body.clone(),
                },
                None => Claim::Running {
                    fingerprint: o.get().0.clone(),
                },
            },
        })
    }

    fn finish_request(&self, tenant: &str, key: &str, status: u16, body: &[u8]) -> Result<()> {
        let mut requests = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = requests.get_mut(&(tenant.to_owned(), key.to_owned())) {
            found.2 = Some((status, body.to_vec()));
        }
        Ok(())
    }

    fn release_request(&self, tenant: &str, key: &str) -> Result<()> {
        let mut requests = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = (tenant.to_owned(), key.to_owned());
        if requests.get(&id).is_some_and(|r| r.2.is_none()) {
            requests.remove(&id);
        }
        Ok(())
    }
}
