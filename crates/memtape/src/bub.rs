//! Bub's sessions on the engine (seed 001): Bub's history view (the conversation after the
//! last anchor, as Bub's context selection takes it), the `session/start` bootstrap anchor,
//! and the memory zone kept on a session's tape as a projection of memtape's memory.

use memtape_core::events::{BuiltinEvent, SessionSettings};
use memtape_core::formats::bub::{self, SESSION_START, ZoneReader};
use memtape_core::{AsOf, Content, HistoryView, Order, select_history};
use serde_json::{Map, Value};

use crate::tiers::{ATTEMPTS, back_off};
use crate::{
    Engine, Entry, EntryId, Error, Filter, HistoryLimits, Kind, NewEntry, PAGE, Result, Scope,
    Store, memory_scope,
};

/// What [`Engine::start_session`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStart {
    /// The `session/start` anchor, when the session had no anchor yet.
    pub bootstrap: Option<EntryId>,
    /// The version of the memory zone written, when the session's tape did not already
    /// end its zones with the current memory.
    pub zone: Option<u64>,
}

impl<S: Store> Engine<S> {
    /// The history view `session` takes: its latest `session.settings` (a Bub tape's
    /// sessions are imported with Bub's), else memtape's thread.
    pub fn history_view(&self, session: &Scope) -> Result<HistoryView> {
        self.history_view_as_of(session, None)
    }

    /// The session's history view as it was at `as_of` (now when `None`).
    pub fn history_view_as_of(&self, session: &Scope, as_of: Option<&AsOf>) -> Result<HistoryView> {
        let filter = Filter {
            kinds: vec![Kind::Event],
            name: Some(memtape_core::events::SESSION_SETTINGS.to_owned()),
            order: Order::Desc,
            limit: Some(1),
            ..Filter::default()
        };
        let latest = self.store.scan(session, &AsOf::narrow_opt(as_of, filter))?;
        Ok(
            match latest
                .first()
                .map(|e| BuiltinEvent::from_payload(&e.payload))
            {
                Some(Ok(Some(BuiltinEvent::Settings(s)))) => s.history,
                _ => HistoryView::default(),
            },
        )
    }

    /// Gives `session` the history view `view` from now on (a `session.settings` event).
    pub fn set_history_view(&self, session: &Scope, view: HistoryView) -> Result<Entry> {
        let settings = BuiltinEvent::Settings(SessionSettings { history: view });
        self.append_payload(session, settings.to_payload())
    }

    /// The history to send to a model in the view `view`, under `limits`.
    ///
    /// [`HistoryView::Thread`] is [`Engine::history`]'s rule. [`HistoryView::Bub`] is Bub's
    /// context (seed 001, 2.3; bub 0.5.1's `TapeContext` and `_select_messages`): the
    /// `message`, `tool_call` and `tool_result` entries after the session's last anchor,
    /// in tape order, leaving out entries whose meta says `"context": false`. Two choices
    /// differ from Bub 0.5.1 and follow the seed: the anchors of memory zones do not count
    /// as the last anchor ("memory events are intentionally excluded from the conversation
    /// history", 2.3, and zones are "invisible to existing context selection logic", 7.4),
    /// so saving memory does not cut the conversation; and a tape with no anchor at all
    /// gives the whole tape (Bub raises not_found; its sessions always start with one).
    /// Entries up to the consolidation pointer stay out, as in every view. `limits` keep
    /// the last `max_messages` and then drop the oldest until `max_tokens` fits. A tool
    /// call without text comes with `""` as its content, as Bub sends it.
    pub fn history_in(
        &self,
        session: &Scope,
        limits: &HistoryLimits,
        view: HistoryView,
    ) -> Result<Vec<Entry>> {
        self.history_in_as_of(session, limits, view, None)
    }

    /// [`Engine::history_in`] as the tape stood at `as_of` (now when `None`): the
    /// session's head, consolidation pointer and anchors as they were then.
    pub fn history_in_as_of(
        &self,
        session: &Scope,
        limits: &HistoryLimits,
        view: HistoryView,
        as_of: Option<&AsOf>,
    ) -> Result<Vec<Entry>> {
        match view {
            HistoryView::Thread => self.thread_history(session, limits, as_of),
            HistoryView::Bub => self.bub_history(session, limits, as_of),
        }
    }

    /// memtape's history: the unconsolidated tail of the current thread under nanobot's and
    /// Dify's rules.
    pub(crate) fn thread_history(
        &self,
        session: &Scope,
        limits: &HistoryLimits,
        as_of: Option<&AsOf>,
    ) -> Result<Vec<Entry>> {
        let (Some(head), pointer) = self.session_state(session, as_of)? else {
            return Ok(Vec::new());
        };
        let thread = self.walk(session, head, pointer, limits.max_messages)?;
        // An erased message keeps its place in the thread (its children still follow it)
        // but nothing of it goes to a model; a view of a moment before its erasure shows
        // `[erased]` where it was.
        let thread = self.tombstones_as_of(session, thread, as_of)?;
        let messages: Vec<&memtape_core::Message> =
            thread.iter().filter_map(Entry::message).collect();
        let keep = select_history(&messages, limits, self.tokens());
        let mut thread: Vec<Option<Entry>> = thread.into_iter().map(Some).collect();
        Ok(keep.into_iter().filter_map(|i| thread[i].take()).collect())
    }

    fn bub_history(
        &self,
        session: &Scope,
        limits: &HistoryLimits,
        as_of: Option<&AsOf>,
    ) -> Result<Vec<Entry>> {
        let (_, pointer) = self.session_state(session, as_of)?;
        let start = self.last_conversation_anchor(session, as_of)?.max(pointer);
        // Bub's `system` entries (the prompt a run was given) are not context; a system
        // message Bub stored as a `message` line is.
        let bub_message = |e: &Entry| {
            e.meta.get(bub::BUB_META).and_then(|b| b.get("kind")) == Some(&Value::from("message"))
        };
        let wanted = |e: &Entry| {
            (e.kind() != Kind::System || bub_message(e))
                && e.meta.get("context") != Some(&Value::Bool(false))
        };
        // Newest first, a page at a time, until the last `max_messages` are found: only
        // the tail is read.
        let mut entries: Vec<Entry> = Vec::new();
        let mut before = None;
        while entries.len() < limits.max_messages {
            let filter = Filter {
                after: Some(start),
                before,
                kinds: vec![
                    Kind::Message,
                    Kind::ToolCall,
                    Kind::ToolResult,
                    Kind::System,
                ],
                order: Order::Desc,
                limit: Some(PAGE),
                ..Filter::default()
            };
            let page = self.store.scan(session, &AsOf::narrow_opt(as_of, filter))?;
            let full = page.len() == PAGE;
            before = page.last().map(|e| e.id);
            let page = self.tombstones_as_of(session, page, as_of)?;
            entries.extend(page.into_iter().filter(wanted));
            if !full {
                break;
            }
        }
        entries.truncate(limits.max_messages);
        entries.reverse();
        if let Some(max) = limits.max_tokens {
            let mut total: usize = entries
                .iter()
                .filter_map(Entry::message)
                .map(|m| self.tokens().count_message(m))
                .sum();
            let mut drop = 0;
            while total > max && drop < entries.len() {
                if let Some(m) = entries[drop].message() {
                    total -= self.tokens().count_message(m);
                }
                drop += 1;
            }
            entries.drain(..drop);
        }
        for e in &mut entries {
            if let memtape_core::Payload::Message(m) = &mut e.payload
                && !m.tool_calls.is_empty()
                && m.content.is_none()
            {
                m.content = Some(Content::Text(String::new()));
            }
        }
        Ok(entries)
    }

    /// The id of the session's last anchor that is not a memory zone's (0: none).
    fn last_conversation_anchor(&self, session: &Scope, as_of: Option<&AsOf>) -> Result<EntryId> {
        let mut before = None;
        loop {
            let filter = Filter {
                before,
                kinds: vec![Kind::Anchor],
                order: Order::Desc,
                limit: Some(PAGE),
                ..Filter::default()
            };
            let page = self.store.scan(session, &AsOf::narrow_opt(as_of, filter))?;
            if let Some(found) = page
                .iter()
                .find(|e| bub::zone_version(&e.payload).is_none())
            {
                return Ok(found.id);
            }
            match page.last() {
                Some(last) if page.len() == PAGE => before = Some(last.id),
                _ => return Ok(EntryId(0)),
            }
        }
    }

    /// Starts (or resumes) a Bub-style session, as Bub's runtime does (seed 001, 2.4): the
    /// `session/start` anchor (`{"owner": "human"}`) when the session has no anchor yet
    /// (`ensure_bootstrap_anchor`), then the memory zone (`memory.ensure()`). memtape's
    /// memory is shared by the agent's sessions, so the zone holds the memory as it is now
    /// rather than Bub's empty first version, and a new zone is written whenever the tape's
    /// latest one no longer matches it. The session takes Bub's history view.
    pub fn start_session(&self, session: &Scope) -> Result<SessionStart> {
        memory_scope(session)?;
        let mut started = SessionStart::default();
        let anchors = Filter {
            kinds: vec![Kind::Anchor],
            limit: Some(1),
            ..Filter::default()
        };
        if self.store.scan(session, &anchors)?.is_empty() {
            let mut state = Map::new();
            state.insert("owner".into(), "human".into());
            started.bootstrap = Some(self.anchor(session, SESSION_START, Some(state))?.id);
        }
        if self.history_view(session)? != HistoryView::Bub {
            self.set_history_view(session, HistoryView::Bub)?;
        }
        started.zone = self.write_zone(session)?;
        Ok(started)
    }

    /// After a change of memory made in `session` (a tool call, a save over REST or the
    /// CLI with a session named): a Bub session's tape gets the zone of the memory as it
    /// is now (seed 001, 3.3: every save appends a new zone). Nothing is written for a
    /// scope that is not a session, a session with memtape's view, or memory that did not
    /// change. Returns the zone version written, if one was.
    pub fn memory_changed_in(&self, session: &Scope) -> Result<Option<u64>> {
        if session.session().is_none() || self.history_view(session)? != HistoryView::Bub {
            return Ok(None);
        }
        self.write_zone(session)
    }

    /// Writes the session's memory zone (`memory/open`, the memory, `memory/seal`, with the
    /// next version) when the zone Bub would read from the session's tape is missing or no
    /// longer the memory of its scope. Returns the version written, if one was. The zone is
    /// written in one transaction, after the tape's current last entry.
    pub fn write_zone(&self, session: &Scope) -> Result<Option<u64>> {
        let memory = memory_scope(session)?;
        for attempt in 0..ATTEMPTS {
            // Compare-and-append on the session: a zone computed from a tape that moved on
            // meanwhile (another writer's zone) is computed again.
            let base = self
                .store
                .scope_info(session)?
                .and_then(|i| i.last_id)
                .unwrap_or(EntryId(0));
            let (log, _) = self.memory_log(&memory)?;
            let now = bub::zone(0, &log.view(), self.now());
            let (reader, visible) = self.zones_read(session)?;
            if visible.as_ref() == Some(&now.files) {
                return Ok(None);
            }
            let version = reader.highest_version() + 1;
            let zone = bub::Zone { version, ..now };
            let mut entries: Vec<NewEntry> = bub::zone_payloads(&zone)
                .into_iter()
                .map(|p| NewEntry::new(session.clone(), p, zone.at))
                .collect();
            entries[0] = entries[0].clone().if_last(base);
            match self.append_entries(entries) {
                Ok(_) => return Ok(Some(version)),
                Err(Error::Store(memtape_store::Error::Conflict { .. })) => back_off(attempt),
                Err(e) => return Err(e),
            }
        }
        Err(Error::Contended(format!(
            "{session}: the tape kept changing under the memory zone ({ATTEMPTS} attempts); try again"
        )))
    }

    /// Reads the session's zones as Bub's reader would: the reader after the whole tape, and
    /// the files of the zone it takes as current (none: no sealed zone).
    fn zones_read(
        &self,
        session: &Scope,
    ) -> Result<(
        ZoneReader,
        Option<std::collections::BTreeMap<String, bub::ZoneFile>>,
    )> {
        let mut reader = ZoneReader::default();
        let mut visible = None;
        let mut after = EntryId(0);
        loop {
            let filter = Filter {
                after: Some(after),
                kinds: vec![Kind::Anchor, Kind::Event],
                limit: Some(PAGE),
                ..Filter::default()
            };
            let page = self.store.scan(session, &filter)?;
            for e in &page {
                if let Ok(Some(zone)) = reader.push(&e.payload, e.created_at, 0) {
                    visible = Some(zone.files);
                }
            }
            match page.last() {
                Some(last) if page.len() == PAGE => after = last.id,
                _ => return Ok((reader, visible)),
            }
        }
    }
}
