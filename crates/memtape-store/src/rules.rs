//! The write rules every store applies inside its write transaction: payload validation,
//! parent linking, the scope projection and the consolidation pointer. Stores supply
//! lookups; the decisions are made here, once.

use memtape_core::events::{self, BuiltinEvent, RETENTION_POLICY, TAPE_ERASED};
use memtape_core::{Entry, EntryId, Kind, NewEntry, Payload, Scope};

use crate::{Error, Placement, Result, ScopeInfo};

impl ScopeInfo {
    /// The projection of a scope with no entries yet.
    pub fn empty(scope: Scope) -> Self {
        ScopeInfo {
            scope,
            entries: 0,
            messages: 0,
            head: None,
            last_id: None,
            last_consolidated: EntryId(0),
            first_at: None,
            last_at: None,
        }
    }

    /// Folds one new entry of this scope into the projection.
    pub fn apply(&mut self, entry: &Entry) {
        self.entries += 1;
        if entry.kind().is_conversational() {
            self.messages += 1;
            self.head = Some(entry.id);
        }
        self.last_id = Some(entry.id);
        self.first_at.get_or_insert(entry.created_at);
        self.last_at = Some(entry.created_at);
        if let Some(through) = consolidated_through(&entry.payload) {
            self.last_consolidated = through;
        }
    }
}

/// The target of a `session.consolidated` event, if `payload` is one (and well formed:
/// every payload is validated before it is stored).
fn consolidated_through(payload: &Payload) -> Option<EntryId> {
    // Only a pointer event is decoded (this runs for every entry written).
    match payload {
        Payload::Event(e) if e.name == events::SESSION_CONSOLIDATED => {
            match BuiltinEvent::decode(e) {
                Ok(Some(BuiltinEvent::Consolidated(t))) => Some(t.through),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The id a store gives the entry after `last`, or an error when ids have run out
/// ([`EntryId::MAX`]); restores keep headroom, so only 2^52 appends can get here.
pub fn next_id(last: EntryId) -> Result<EntryId> {
    match last.0.checked_add(1).map(EntryId) {
        Some(next) if next.in_range() => Ok(next),
        _ => Err(Error::IdsExhausted(last)),
    }
}

/// A restore keeps a file's ids only up to this one (2^52), so at least 2^52 ids are
/// left for appends after any import; a file with larger ids is renumbered.
pub const KEEP_IDS_UP_TO: EntryId = EntryId(1 << 52);

/// Where an existing entry belongs and what it is, for checking references to it.
pub type Lookup<'a> = dyn FnMut(EntryId) -> Result<Option<(Scope, Kind)>> + 'a;

/// Turns `new` into the entry stored under `id`, given its scope's projection so far:
/// validates the payload, links a conversational entry to the scope's head when no parent
/// is given, checks an explicit parent (an earlier conversational entry of the same scope)
/// and checks a consolidation pointer move (0, or an entry of the same scope).
pub fn prepare(
    new: NewEntry,
    id: EntryId,
    info: &ScopeInfo,
    lookup: &mut Lookup<'_>,
) -> Result<Entry> {
    new.payload.validate()?;
    check_placement(&new.payload, &new.scope)?;
    if let Some(expected) = new.if_last {
        let actual = info.last_id.unwrap_or(EntryId(0));
        if actual != expected {
            return Err(Error::Conflict {
                scope: new.scope.to_string(),
                expected,
                actual,
            });
        }
    }
    let conversational = new.payload.kind().is_conversational();
    let parent = match (new.parent, conversational) {
        (None, true) => info.head,
        (None, false) => None,
        (Some(p), false) => {
            return Err(Error::BadParent {
                parent: p,
                why: format!(
                    "is given to a {}, but only messages have parents",
                    new.payload.kind()
                ),
            });
        }
        (Some(p), true) => {
            check_parent(p, id, &new.scope, lookup)?;
            Some(p)
        }
    };
    if let Some(through) = consolidated_through(&new.payload) {
        check_pointer(through.0, &new.scope, info, lookup)?;
    }
    Ok(Entry {
        id,
        scope: new.scope,
        payload: new.payload,
        meta: new.meta,
        created_at: new.created_at,
        parent,
        erased: None,
    })
}

/// A memory change or a dropped fact belongs to a memory scope (an agent, or an agent and a
/// user): memory is read only there, so one on a session would be kept and never seen.
fn check_placement(payload: &Payload, scope: &Scope) -> Result<()> {
    if let Payload::Event(e) = payload
        && (e.name == events::MEMORY_CHANGE || e.name == events::MEMORY_DROPPED)
        && scope.session().is_some()
    {
        return Err(memtape_core::Error::InvalidEntry(format!(
            "event {} belongs to a memory scope (an agent, or an agent and a user), not to the session {scope}",
            e.name
        ))
        .into());
    }
    Ok(())
}

fn check_parent(
    parent: EntryId,
    id: EntryId,
    scope: &Scope,
    lookup: &mut Lookup<'_>,
) -> Result<()> {
    let refuse = |why: String| Err(Error::BadParent { parent, why });
    // Another scope's entry reads exactly like a missing one: naming its scope (or even
    // answering differently) would let a caller walk ids to list other tenants' names.
    let found = lookup(parent)?.filter(|(s, _)| s == scope);
    if found.is_some() && parent >= id {
        return refuse(format!("is not before entry {id}"));
    }
    match found {
        None => refuse("does not exist in this session".into()),
        Some((_, kind)) if !kind.is_conversational() => {
            refuse(format!("is a {kind}, not a message"))
        }
        Some(_) => Ok(()),
    }
}

fn check_pointer(
    through: u64,
    scope: &Scope,
    info: &ScopeInfo,
    lookup: &mut Lookup<'_>,
) -> Result<()> {
    if through == 0 {
        return Ok(());
    }
    let refuse = |why: &str| {
        Err(Error::BadPointer {
            scope: scope.to_string(),
            through,
            why: why.to_owned(),
        })
    };
    // One answer for an id past the scope's last entry, another scope's entry and an id
    // that exists nowhere: which of them it is must not be told.
    let in_scope = info.last_id.is_some_and(|last| through <= last.0)
        && matches!(lookup(EntryId(through))?, Some((s, _)) if &s == scope);
    if in_scope {
        Ok(())
    } else {
        refuse("no entry of this scope has that id")
    }
}

/// Plans a restore: keeps the entries' ids when they all come after `last_id` and none is
/// above [`KEEP_IDS_UP_TO`], else numbers them anew from `last_id + 1`, remapping parents
/// and every id a built-in event refers to (pointer targets, compaction spans, forgotten
/// changes). A reference to an entry outside the set is refused when renumbering (there is
/// nothing to map it to). Ids must increase through the set; none may be out of range.
pub fn plan_restore(mut entries: Vec<Entry>, last_id: EntryId) -> Result<(Vec<Entry>, Placement)> {
    for pair in entries.windows(2) {
        if pair[1].id <= pair[0].id {
            return Err(Error::Invalid(memtape_core::Error::InvalidImport(format!(
                "entry ids must increase: {} follows {}",
                pair[1].id, pair[0].id
            ))));
        }
    }
    if let Some(bad) = entries
        .iter()
        .flat_map(|e| [Some(e.id), e.parent])
        .flatten()
        .find(|id| !id.in_range() || id.0 == 0)
    {
        return Err(Error::Invalid(memtape_core::Error::IdOutOfRange(
            bad.0.to_string(),
        )));
    }
    let room = (last_id.0 as u128) + (entries.len() as u128) <= EntryId::MAX.0 as u128;
    if !room {
        return Err(Error::IdsExhausted(last_id));
    }
    let keep = entries.first().is_none_or(|e| e.id > last_id)
        && entries.last().is_none_or(|e| e.id <= KEEP_IDS_UP_TO);
    if keep {
        return Ok((entries, Placement::KeptIds));
    }
    // Not yet: an erasure's receipt names its entries by id ranges, which renumbering could
    // stretch over entries it never named, so erased entries and receipts keep their ids
    // or are not restored.
    if let Some(e) = entries
        .iter()
        .find(|e| e.erased.is_some() || e.payload.name() == Some(TAPE_ERASED))
    {
        return Err(Error::Invalid(memtape_core::Error::InvalidImport(format!(
            "entry {} is erased or records an erasure, and such entries are only restored with their own ids (into a store whose last id is below the file's first)",
            e.id
        ))));
    }
    let map: std::collections::HashMap<EntryId, EntryId> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id, EntryId(last_id.0 + 1 + i as u64)))
        .collect();
    let remap = |old: EntryId, what: &str, id: EntryId| {
        map.get(&old).copied().ok_or_else(|| {
            Error::Invalid(memtape_core::Error::InvalidImport(format!(
                "entry {id} refers to {what} {old}, which is not in the file, so it cannot be renumbered"
            )))
        })
    };
    for e in &mut entries {
        let old_id = e.id;
        e.id = map[&old_id];
        if let Some(p) = e.parent {
            e.parent = Some(remap(p, "parent", old_id)?);
        }
        if let Some(mut event) = BuiltinEvent::from_payload(&e.payload)? {
            for id in event.entry_refs_mut() {
                if id.0 > 0 {
                    *id = remap(*id, "entry", old_id)?;
                }
            }
            if let Some(causes) = event.provenance_mut() {
                *causes = causes
                    .iter()
                    .filter_map(|id| map.get(id).copied())
                    .collect();
            }
            e.payload = event.to_payload();
        }
    }
    Ok((entries, Placement::Renumbered))
}

/// Checks one restored entry against what is already stored: a valid payload, a parent that
/// is an earlier message of its scope, a pointer target in its scope. The entry itself is
/// stored unchanged.
pub fn check_restored(entry: &Entry, info: &ScopeInfo, lookup: &mut Lookup<'_>) -> Result<()> {
    match entry.erased {
        // A tombstone is checked as the erasure left it: its structure only.
        Some(erased) if erased.is_whole() => {}
        _ => entry.payload.validate()?,
    }
    if let Some(erased) = entry.erased
        && erased.by <= entry.id
    {
        return Err(Error::Invalid(memtape_core::Error::InvalidImport(format!(
            "entry {} is marked erased by {}, which is not a later entry",
            entry.id, erased.by
        ))));
    }
    check_placement(&entry.payload, &entry.scope)?;
    if let Some(p) = entry.parent {
        if !entry.kind().is_conversational() {
            return Err(Error::BadParent {
                parent: p,
                why: format!(
                    "is given to a {}, but only messages have parents",
                    entry.kind()
                ),
            });
        }
        check_parent(p, entry.id, &entry.scope, lookup)?;
    }
    if let Some(through) = consolidated_through(&entry.payload) {
        check_pointer(through.0, &entry.scope, info, lookup)?;
    }
    Ok(())
}

/// One write transaction of a SQL store, as the shared append and restore loops see it:
/// where ids stand, each scope's row id and projection so far, lookups of stored entries,
/// and the insertion of a checked entry (which folds it into its scope's projection).
pub trait Transaction {
    /// The last id given so far (in this transaction or before it).
    fn last_id(&mut self) -> Result<EntryId>;
    /// The row id and projection of `scope`, creating its row when it has none.
    fn scope(&mut self, scope: &Scope) -> Result<(i64, ScopeInfo)>;
    /// Readies [`Transaction::scope`] for every one of `scopes` at once, before the
    /// entries are written: a store across a network loads (and creates) them in a round
    /// trip or two instead of one or two per scope. Nothing by default.
    fn load_scopes(&mut self, scopes: &[&Scope]) -> Result<()> {
        let _ = scopes;
        Ok(())
    }
    /// Where an entry (stored, or written earlier in this transaction) belongs.
    fn lookup(&mut self, id: EntryId) -> Result<Option<(Scope, Kind)>>;
    /// Writes `entry`, already checked, into the scope with row id `scope_id`.
    fn insert(&mut self, scope_id: i64, entry: &Entry) -> Result<()>;
}

/// [`crate::Store::append`] inside `tx`: each new entry gets the next id and is prepared
/// ([`prepare`]) against its scope as the entries before it left it.
pub fn append_in(tx: &mut dyn Transaction, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
    entries.iter().try_for_each(refuse_reserved)?;
    append_checked_in(tx, entries)
}

/// Refuses, as an ordinary append, the events that decide or record what is erased: an
/// erasure's receipt (`tape.erased`, written only by the erasure, in its transaction:
/// [`crate::erase`]) and a retention policy (`retention.policy`, written only through
/// [`crate::Store::append_reserved`] by an admin's request).
pub fn refuse_reserved(entry: &NewEntry) -> Result<()> {
    if entry.payload.kind() != Kind::Event {
        return Ok(());
    }
    match entry.payload.name() {
        Some(TAPE_ERASED) => Err(Error::Invalid(memtape_core::Error::InvalidEntry(format!(
            "event {TAPE_ERASED} is written by an erasure only"
        )))),
        Some(RETENTION_POLICY) => Err(Error::Invalid(memtape_core::Error::InvalidEntry(format!(
            "event {RETENTION_POLICY} is written by an administrator's retention setting only"
        )))),
        _ => Ok(()),
    }
}

/// [`append_in`] without refusing reserved events: an erasure's receipt, an admin's
/// retention policy.
pub fn append_checked_in(tx: &mut dyn Transaction, entries: Vec<NewEntry>) -> Result<Vec<Entry>> {
    tx.load_scopes(&distinct(entries.iter().map(|e| &e.scope)))?;
    let mut last = tx.last_id()?;
    let mut out = Vec::with_capacity(entries.len());
    for new in entries {
        let id = next_id(last)?;
        last = id;
        let (scope_id, info) = tx.scope(&new.scope)?;
        let entry = prepare(new, id, &info, &mut |id| tx.lookup(id))?;
        tx.insert(scope_id, &entry)?;
        out.push(entry);
    }
    Ok(out)
}

/// The scopes of a batch, each once, in the order first met.
fn distinct<'a>(scopes: impl Iterator<Item = &'a Scope>) -> Vec<&'a Scope> {
    let mut seen = std::collections::HashSet::new();
    scopes.filter(|s| seen.insert(*s)).collect()
}

/// [`crate::Store::restore`] inside `tx`: planned by [`plan_restore`], each entry checked
/// ([`check_restored`]) and written as planned.
pub fn restore_in(tx: &mut dyn Transaction, entries: Vec<Entry>) -> Result<crate::Restored> {
    let (entries, placement) = plan_restore(entries, tx.last_id()?)?;
    tx.load_scopes(&distinct(entries.iter().map(|e| &e.scope)))?;
    for entry in &entries {
        let (scope_id, info) = tx.scope(&entry.scope)?;
        check_restored(entry, &info, &mut |id| tx.lookup(id))?;
        tx.insert(scope_id, entry)?;
    }
    Ok(crate::Restored { placement, entries })
}
