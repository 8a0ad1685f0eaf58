//! Import and export of the tape in JSONL formats. Every import is one store transaction:
//! a file with a bad line, or one that would mix into an existing session, imports nothing.
//!
//! Bub tapes carry memory as versioned zones (seed 001). An import keeps every line of the
//! tape in the session, zones included, where they are; memory is their projection: each
//! zone Bub's reader would take as current is recorded as one `memory.change` of the
//! agent's (or agent and user's) memory right after its seal. A Bub export writes the
//! session's entries as they are, with a zone added wherever memtape's memory had moved
//! away from what Bub would read there ([`bub::render_with_zones`]).

use std::io::Write;

use memtape_core::events::{BuiltinEvent, MEMORY_CHANGE, SessionMetadata, SessionSettings};
use memtape_core::formats::bub::{self, Zone};
use memtape_core::formats::{self, Format, Imported};
use memtape_core::{Entry, EntryId, Filter, HistoryView, Payload, Scope};
use serde_json::Map;

use crate::{Engine, Error, Placement, Result, Store, check_memory_scope, memory_scope};

/// What an import did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportReport {
    /// How many entries were written.
    pub entries: usize,
    /// The sessions written to.
    pub sessions: Vec<Scope>,
    /// How many memory versions were recorded (from a Bub tape's memory zones).
    pub memory_versions: usize,
    /// Whether the entries kept their ids.
    pub placement: Placement,
}

impl<S: Store> Engine<S> {
    /// Imports `text` in `format` into `base` (tenant, agent, and user if it names one).
    /// Foreign formats land under the session `session`, or the one the file names
    /// (nanobot's key). memtape's own format keeps each entry's scope, except that
    /// `session` replaces the session, and every scope must lie within `base`
    /// ([`Scope::contains`]): an entry of another tenant, agent or user is refused
    /// ([`Error::OutsideScope`]) and nothing is imported. A whole-store restore across
    /// tenants is [`Engine::restore_store`].
    pub fn import(
        &self,
        format: Format,
        text: &str,
        base: &Scope,
        session: Option<&str>,
    ) -> Result<ImportReport> {
        let now = self.now();
        let entries = match format {
            Format::Memtape => {
                let mut entries = formats::memtape::parse(text)?;
                self.refuse_erased(&entries)?;
                // A policy decides what is erased: an admin sets it, a file cannot.
                if let Some(e) = entries.iter().find(|e| {
                    e.kind() == memtape_core::Kind::Event
                        && e.payload.name() == Some(memtape_core::events::RETENTION_POLICY)
                }) {
                    return Err(Error::Invalid(memtape_core::Error::InvalidImport(format!(
                        "entry {} is a retention policy (retention.policy), which an \
                         administrator sets (PUT /v1/retention, memtape.toml); an import \
                         cannot",
                        e.id
                    ))));
                }
                if let Some(e) = entries.iter().find(|e| !base.contains(&e.scope)) {
                    return Err(Error::OutsideScope {
                        entry: e.id,
                        scope: e.scope.to_string(),
                        allowed: base.to_string(),
                    });
                }
                if let Some(s) = session {
                    for e in &mut entries {
                        if e.scope.session().is_some() {
                            e.scope = Scope::from_parts(
                                e.scope.tenant().to_owned(),
                                e.scope.agent_name().to_owned(),
                                e.scope.user().map(str::to_owned),
                                Some(s.to_owned()),
                                e.scope.node().map(str::to_owned),
                            )?;
                        }
                    }
                }
                entries
            }
            Format::Nanobot => {
                let file = formats::nanobot::parse(text, now)?;
                let key = session
                    .map(str::to_owned)
                    .or(file.key.clone())
                    .ok_or_else(|| {
                        Error::NeedSession(
                            "the nanobot file names no session key: pass --session".into(),
                        )
                    })?;
                let scope = base.clone().with_session(key)?;
                let mut items = Vec::new();
                if file.key.is_some() || !file.metadata.is_empty() {
                    let metadata = BuiltinEvent::Metadata(SessionMetadata {
                        key: file.key.clone(),
                        metadata: file.metadata.clone(),
                        created_at: file.created_at,
                        updated_at: file.updated_at,
                    });
                    items.push(event_item(metadata, file.created_at.unwrap_or(now)));
                }
                let first_message = items.len();
                items.extend(file.messages);
                let mut chain = Chain::default();
                for item in items {
                    chain.push(&scope, item);
                }
                if file.last_consolidated > 0 {
                    let last = &chain.entries[first_message + file.last_consolidated - 1];
                    let item = event_item(BuiltinEvent::consolidated(last.id), last.created_at);
                    chain.push(&scope, item);
                }
                chain.entries
            }
            Format::Bub => {
                let name = session.ok_or_else(|| {
                    Error::NeedSession("a Bub tape names no session: pass --session".into())
                })?;
                check_memory_scope(base)?;
                let tape = bub::read(text, now)?;
                bub_entries(&base.clone().with_session(name)?, base, tape, now)
            }
        };
        self.restore_entries(entries)
    }

    /// Restores a whole store's export (memtape's format, every tenant, as
    /// [`Engine::export_store`] writes it): each entry keeps its scope. An administrator's
    /// form, never one to expose to a tenant. All or nothing, like every import.
    pub fn restore_store(&self, text: &str) -> Result<ImportReport> {
        let entries = formats::memtape::parse(text)?;
        self.refuse_erased(&entries)?;
        self.restore_entries(entries)
    }

    /// Refuses a file holding an entry an erasure took from this store: the same id, scope,
    /// kind and time (to the nanosecond) as an erased entry is that entry, from an export
    /// made before the erasure. The erased copy in the file ([`Entry::erased`] set) is
    /// the export of a tombstone, and passes.
    fn refuse_erased(&self, entries: &[Entry]) -> Result<()> {
        let mut by_tenant: std::collections::BTreeMap<&str, Vec<&Entry>> = Default::default();
        for e in entries.iter().filter(|e| e.erased.is_none()) {
            by_tenant.entry(e.scope.tenant()).or_default().push(e);
        }
        for (tenant, incoming) in by_tenant {
            for chunk in incoming.chunks(500) {
                let ids: Vec<EntryId> = chunk.iter().map(|e| e.id).collect();
                for stored in self.store.get_many(tenant, &ids)? {
                    let Some(erasure) = stored.erased else {
                        continue;
                    };
                    let same = chunk.iter().any(|e| {
                        e.id == stored.id
                            && e.scope == stored.scope
                            && e.created_at == stored.created_at
                            && e.kind() == stored.kind()
                    });
                    if same {
                        return Err(Error::Erased {
                            entry: stored.id,
                            by: erasure.by,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes `entries` in one transaction, refusing to mix into a session that has entries.
    pub(crate) fn restore_entries(&self, entries: Vec<Entry>) -> Result<ImportReport> {
        // Memory scopes are shared by sessions: only sessions must be new.
        let mut sessions: Vec<Scope> = Vec::new();
        for e in &entries {
            if e.scope.session().is_some() && !sessions.contains(&e.scope) {
                sessions.push(e.scope.clone());
            }
        }
        // Other events live on memory scopes too (model calls on the agent's tape).
        let memory_versions = entries
            .iter()
            .filter(|e| matches!(&e.payload, Payload::Event(ev) if ev.name == MEMORY_CHANGE))
            .count();
        for scope in &sessions {
            if let Some(info) = self.store.scope_info(scope)? {
                return Err(Error::SessionNotEmpty(scope.to_string(), info.entries));
            }
        }
        let restored = self.store.restore(entries)?;
        self.after_write(&restored.entries);
        Ok(ImportReport {
            entries: restored.entries.len(),
            sessions,
            memory_versions,
            placement: restored.placement,
        })
    }

    /// Writes `scope` to `out` in `format`: one session when `scope` names one; for
    /// memtape's own format, every scope within `scope` otherwise (the agent's memory,
    /// users and sessions, or one user's, [`Scope::contains`]). Nothing outside `scope` is
    /// ever written; a whole-store backup is [`Engine::export_store`].
    pub fn export(&self, format: Format, scope: &Scope, out: &mut dyn Write) -> Result<()> {
        if scope.session().is_none() {
            if format != Format::Memtape {
                return Err(Error::NeedSession(
                    format!("a {format:?} export holds one session: name it").to_lowercase(),
                ));
            }
            let mut all: Vec<Entry> = Vec::new();
            for info in self.store.scopes(scope.tenant())? {
                if scope.contains(&info.scope) {
                    all.extend(self.store.scan(&info.scope, &Filter::default())?);
                }
            }
            all.sort_by_key(|e| e.id);
            for e in &all {
                writeln!(out, "{}", formats::memtape::line(e))?;
            }
            return Ok(());
        }
        let entries = self.store.scan(scope, &Filter::default())?;
        let mut text = String::new();
        match format {
            Format::Memtape => {
                for e in &entries {
                    text.push_str(&formats::memtape::line(e));
                    text.push('\n');
                }
            }
            Format::Bub => {
                let memory = memory_scope(scope)?;
                let (log, _) = self.memory_log(&memory)?;
                // Each zone is a whole snapshot; forgotten changes are left out of every
                // one, so an export never carries what was forgotten.
                let zones: Vec<(EntryId, Zone)> = log
                    .changes()
                    .iter()
                    .map(|r| (r.id, bub::zone(r.version, &log.view_at(r.version), r.at)))
                    .collect();
                bub::render_with_zones(&entries, &zones, &mut text);
            }
            Format::Nanobot => {
                // A nanobot session is linear: it carries the current thread, so answers
                // replaced by a regeneration stay behind (memtape's own format keeps them).
                let info = self.store.scope_info(scope)?;
                let pointer = info.as_ref().map_or(EntryId(0), |i| i.last_consolidated);
                let thread = match info.and_then(|i| i.head) {
                    Some(head) => self.walk(scope, head, EntryId(0), usize::MAX)?,
                    None => Vec::new(),
                };
                let consolidated = thread
                    .iter()
                    .filter(|e| e.message().is_some() && e.id <= pointer)
                    .count();
                let metadata = entries
                    .iter()
                    .rev()
                    .find_map(|e| match BuiltinEvent::from_payload(&e.payload) {
                        Ok(Some(BuiltinEvent::Metadata(m))) => Some(m.metadata),
                        _ => None,
                    })
                    .unwrap_or_default();
                let key = scope.session().unwrap_or_default();
                formats::nanobot::render(key, &metadata, consolidated, &thread, &mut text);
            }
        }
        out.write_all(text.as_bytes())?;
        Ok(())
    }

    /// Writes the whole store, every tenant, in memtape's format and tape order: the
    /// administrator's backup, which [`Engine::restore_store`] reads back. Never one to
    /// expose to a tenant.
    pub fn export_store(&self, out: &mut dyn Write) -> Result<()> {
        let mut after = EntryId(0);
        loop {
            // Past an erasure under way, once it ends: a backup holds the whole tape.
            let batch = memtape_store::erase::entries_after_all(
                &self.store,
                after,
                1024,
                std::time::Duration::from_secs(60),
            )?;
            let Some(last) = batch.last() else {
                return Ok(());
            };
            after = last.id;
            for e in &batch {
                writeln!(out, "{}", formats::memtape::line(e))?;
            }
        }
    }
}

fn event_item(event: BuiltinEvent, at: chrono::DateTime<chrono::Utc>) -> Imported {
    Imported {
        payload: event.to_payload(),
        meta: Map::new(),
        created_at: at,
    }
}

/// The entries of a Bub tape: a `session.settings` event giving the session Bub's history
/// view, then every item in `session`, chained like [`Chain`], and after the seal of each
/// zone Bub reads as current a `memory.change` in `memory`, computed from the zone before
/// it and stamped with the seal's time.
fn bub_entries(
    session: &Scope,
    memory: &Scope,
    tape: bub::Tape,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Entry> {
    let bub::Tape {
        entries: items,
        zones,
    } = tape;
    let mut chain = Chain::default();
    let first = items.first().map_or(now, |i| i.created_at);
    let settings = BuiltinEvent::Settings(SessionSettings {
        history: HistoryView::Bub,
    });
    chain.push(session, event_item(settings, first));
    let mut zones = zones.into_iter().peekable();
    let mut previous: Option<Zone> = None;
    for (i, item) in items.into_iter().enumerate() {
        chain.push(session, item);
        let Some((_, zone)) = zones.next_if(|(seal, _)| *seal == i) else {
            continue;
        };
        if let Some(change) = bub::zone_change(previous.as_ref(), &zone) {
            let mut meta = Map::new();
            meta.insert("bub_version".into(), zone.version.into());
            let item = Imported {
                payload: change.to_payload(),
                meta,
                created_at: zone.at,
            };
            chain.push(memory, item);
        }
        previous = Some(zone);
    }
    chain.entries
}

/// Imported items with provisional ids 1, 2, ... in order, each conversational one linked
/// to the one before, so the store can restore them as a unit (renumbering them after its
/// last id).
#[derive(Default)]
struct Chain {
    entries: Vec<Entry>,
    head: Option<EntryId>,
}

impl Chain {
    fn push(&mut self, scope: &Scope, item: Imported) {
        let id = EntryId(self.entries.len() as u64 + 1);
        let conversational = item.payload.kind().is_conversational();
        self.entries.push(Entry {
            id,
            scope: scope.clone(),
            parent: if conversational { self.head } else { None },
            payload: item.payload,
            meta: item.meta,
            created_at: item.created_at,
            erased: None,
        });
        if conversational {
            self.head = Some(id);
        }
    }
}
