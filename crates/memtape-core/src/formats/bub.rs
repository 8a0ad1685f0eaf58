//! Bub (republic) tapes: `TapeEntry {id, kind, payload, meta, date}` per line. Kinds map
//! onto memtape's: `message` and `system` are messages, `tool_call {calls, content?}` is an
//! assistant message calling tools (with the text that came with the calls), each of
//! `tool_result {results}` answers the preceding calls by position, `anchor` and `event`
//! are kept as they are, and `error` becomes a `tape.error` event so it survives a round
//! trip. Every line becomes entries: nothing on a Bub tape is dropped.
//!
//! Bub keeps memory inside the tape as *zones* (seed 001): a `memory/open` anchor, the whole
//! memory as `memory.long_term` and `memory.daily` events, and a `memory/seal` anchor, both
//! anchors carrying `{"version": N}`. Every save appends a new zone with the next version;
//! a reader takes the highest-version seal and the nearest `memory/open` of that version
//! before it. The zones stay on the tape where they are, so anchor queries see them as Bub
//! does; [`ZoneReader`] follows them the way Bub's reader would at each point of the tape,
//! [`zone_change`] turns consecutive snapshots into memtape memory changes, and
//! [`render_with_zones`] writes a session back out with a zone wherever memtape's memory
//! had moved away from what Bub would read.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::events::{SESSION_SETTINGS, TAPE_ERROR};
use crate::formats::{Imported, bad, raw_lines, time_field};
use crate::memory::{Change, MemoryView, Op, check_path, paths};
use crate::{
    Anchor, Content, Entry, EntryId, Event, Kind, Message, Meta, Payload, Result, Role, ToolCall,
};

/// The anchor that opens a memory zone; its state is `{"version": N}`.
pub const MEMORY_OPEN: &str = "memory/open";
/// The anchor that seals a memory zone; its state is `{"version": N}`, the same N as its open.
pub const MEMORY_SEAL: &str = "memory/seal";
/// A zone's long-term memory: `{"content", "updated_at"}` (memtape's `MEMORY.md`).
pub const MEMORY_LONG_TERM: &str = "memory.long_term";
/// One daily note of a zone: `{"date": "YYYY-MM-DD", "content", "updated_at"}` (memtape's
/// `memory/YYYY-MM-DD.md`).
pub const MEMORY_DAILY: &str = "memory.daily";
/// memtape's own zone event for a memory file Bub has no event for (`PROFILE.md`,
/// `HISTORY.md`, `memories/**`, ...): `{"path", "content", "updated_at"}`. Bub's zone reader
/// skips event names it does not know, so a zone with these still reads the same in Bub.
pub const MEMORY_FILE: &str = "memory.file";
/// The anchor Bub writes when a session starts (`ensure_bootstrap_anchor`), with state
/// `{"owner": "human"}`.
pub const SESSION_START: &str = "session/start";
/// memtape's own meta key for what a Bub line carried that memtape's entry does not say by
/// itself, so an export writes the line back as it was (a Bub export leaves the key out):
/// `{"result": "json"}` on a tool result Bub stored as a JSON value rather than a string
/// (the message's text is that JSON exactly as the tape carried it); `{"fields": {...}}`
/// with the payload fields of a `message` line that memtape's message does not model;
/// `{"kind": "message"}` on a `message` line whose payload memtape would file under
/// another kind (an assistant message carrying tool calls, a tool or system role).
pub const BUB_META: &str = "memtape.bub";

/// The payload fields of a `message` line that memtape's [`Message`] models.
const MESSAGE_FIELDS: [&str; 7] = [
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning_content",
    "files",
];

/// One file of a memory zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneFile {
    /// Its text.
    pub content: String,
    /// MateClaw's enabled flag (carried as `enabled` in the event's data when it is not the
    /// path's default; Bub ignores it).
    pub enabled: bool,
    /// MateClaw's sort order (carried as `sort_order` when it is not the path's default).
    pub sort_order: i64,
}

/// A sealed memory zone: the whole memory at one version (Bub's `MemorySnapshot`), by
/// memtape path.
#[derive(Clone, Debug, PartialEq)]
pub struct Zone {
    /// The version its anchors carry.
    pub version: u64,
    /// The files it holds.
    pub files: BTreeMap<String, ZoneFile>,
    /// When it was sealed (the seal line's `date`, else the import time).
    pub at: DateTime<Utc>,
}

/// A Bub tape line's `tool_result` payload, with each result's JSON text as it is on the
/// line, so a result comes back byte for byte.
#[derive(Deserialize)]
struct RawLine<'a> {
    #[serde(borrow)]
    payload: RawResults<'a>,
}

#[derive(Deserialize)]
struct RawResults<'a> {
    #[serde(borrow)]
    results: Vec<&'a RawValue>,
}

/// Parses a Bub tape, every line. Entries get the line's `date` as their time when it has
/// one, else `now`. Memory zones stay as the anchors and events they are made of;
/// [`read`] also finds them.
pub fn parse(text: &str, now: DateTime<Utc>) -> Result<Vec<Imported>> {
    Ok(parse_lines(text, now)?
        .into_iter()
        .map(|(_, item)| item)
        .collect())
}

/// [`parse`], with each item's line number.
fn parse_lines(text: &str, now: DateTime<Utc>) -> Result<Vec<(usize, Imported)>> {
    let mut out = Vec::new();
    let mut pending: Vec<ToolCall> = Vec::new();
    for (line, raw) in raw_lines(text) {
        let value: Value =
            serde_json::from_str(raw).map_err(|e| bad(line, format!("not valid JSON: {e}")))?;
        let Value::Object(mut obj) = value else {
            return Err(bad(line, "expected a JSON object"));
        };
        let created_at = time_field(line, &obj, "date")?.unwrap_or(now);
        let kind = match obj.get("kind") {
            Some(Value::String(k)) => k.clone(),
            _ => return Err(bad(line, "a tape entry needs a string kind")),
        };
        let payload = match obj.remove("payload") {
            Some(Value::Object(p)) => p,
            _ => return Err(bad(line, "a tape entry needs an object payload")),
        };
        let meta = match obj.remove("meta") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(other) => return Err(bad(line, format!("meta must be an object, not {other}"))),
        };
        if meta.contains_key(BUB_META) {
            return Err(bad(line, format!("meta key {BUB_META:?} is memtape's own")));
        }
        let checked = |payload: Payload| -> Result<Payload> {
            payload.validate().map_err(|e| bad(line, e.to_string()))?;
            Ok(payload)
        };
        let typed = |v: Value| -> Result<Payload> {
            let payload = match kind.as_str() {
                "anchor" => Payload::Anchor(
                    serde_json::from_value::<Anchor>(v).map_err(|e| bad(line, e.to_string()))?,
                ),
                "event" => Payload::Event(
                    serde_json::from_value::<Event>(v).map_err(|e| bad(line, e.to_string()))?,
                ),
                _ => Payload::Message(
                    serde_json::from_value::<Message>(v).map_err(|e| bad(line, e.to_string()))?,
                ),
            };
            checked(payload)
        };
        let mut push = |payload: Payload, meta: Map<String, Value>| {
            out.push((
                line,
                Imported {
                    payload,
                    meta,
                    created_at,
                },
            ));
        };
        match kind.as_str() {
            "message" => {
                let mut payload = payload;
                let mut bub = Map::new();
                let extra: Map<String, Value> = payload
                    .keys()
                    .filter(|k| !MESSAGE_FIELDS.contains(&k.as_str()))
                    .cloned()
                    .collect::<Vec<_>>()
                    .into_iter()
                    .filter_map(|k| payload.remove(&k).map(|v| (k, v)))
                    .collect();
                if !extra.is_empty() {
                    bub.insert("fields".into(), Value::Object(extra));
                }
                let message = typed(Value::Object(payload))?;
                if message.kind() != Kind::Message {
                    bub.insert("kind".into(), "message".into());
                }
                let mut meta = meta;
                if !bub.is_empty() {
                    meta.insert(BUB_META.into(), Value::Object(bub));
                }
                push(message, meta);
            }
            "anchor" | "event" => push(typed(Value::Object(payload))?, meta),
            "system" => {
                let content = payload
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                push(
                    checked(Payload::Message(Message::text(Role::System, content)))?,
                    meta,
                );
            }
            "tool_call" => {
                let calls: Vec<ToolCall> =
                    serde_json::from_value(payload.get("calls").cloned().unwrap_or(Value::Null))
                        .map_err(|e| bad(line, format!("tool_call calls: {e}")))?;
                if calls.is_empty() {
                    return Err(bad(line, "a tool_call entry with no calls"));
                }
                // Bub records the text the model sent with its calls (`record_chat`).
                let content = match payload.get("content") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(Content::Text(s.clone())),
                    Some(other) => {
                        return Err(bad(
                            line,
                            format!("tool_call content must be a string, not {other}"),
                        ));
                    }
                };
                pending.clone_from(&calls);
                let mut message = Message::assistant_tool_calls(calls);
                message.content = content;
                push(checked(Payload::Message(message))?, meta);
            }
            "tool_result" => {
                let results = serde_json::from_str::<RawLine<'_>>(raw)
                    .map_err(|e| {
                        bad(
                            line,
                            format!("a tool_result entry needs a results list: {e}"),
                        )
                    })?
                    .payload
                    .results;
                if results.len() > pending.len() {
                    return Err(bad(
                        line,
                        format!(
                            "{} results but only {} pending tool calls",
                            results.len(),
                            pending.len()
                        ),
                    ));
                }
                for (result, call) in results.iter().zip(&pending) {
                    // A string result is its text (Bub's render_result); any other value is
                    // its JSON exactly as the tape carries it, marked so an export writes
                    // the value back.
                    let mut meta = meta.clone();
                    let text = match serde_json::from_str::<String>(result.get()) {
                        Ok(s) => s,
                        Err(_) => {
                            meta.insert(BUB_META.into(), json!({"result": "json"}));
                            result.get().to_owned()
                        }
                    };
                    let mut m = Message::tool_result(call.id.clone(), text);
                    m.name = Some(call.function.name.clone());
                    push(checked(Payload::Message(m))?, meta);
                }
                pending.clear();
            }
            "error" => push(
                Payload::Event(Event {
                    name: TAPE_ERROR.to_owned(),
                    data: Value::Object(payload),
                }),
                meta,
            ),
            other => return Err(bad(line, format!("unknown tape entry kind {other:?}"))),
        }
    }
    Ok(out)
}

/// A Bub tape read with [`read`].
#[derive(Clone, Debug, PartialEq)]
pub struct Tape {
    /// Every line's entries, in order (as [`parse`] gives them).
    pub entries: Vec<Imported>,
    /// The memory zones Bub's reader would take as current, each with the index of its
    /// seal in `entries`.
    pub zones: Vec<(usize, Zone)>,
}

/// Reads a Bub tape: every line's entries, and the memory zones among them that Bub's
/// reader would take as current. A zone event of a current zone that Bub could not read (a
/// daily note whose date is not `YYYY-MM-DD`, a `memory.file` with a bad path) is a bad
/// line.
pub fn read(text: &str, now: DateTime<Utc>) -> Result<Tape> {
    let lines = parse_lines(text, now)?;
    let mut reader = ZoneReader::default();
    let mut zones = Vec::new();
    for (i, (line, item)) in lines.iter().enumerate() {
        if let Some(zone) = reader
            .push(&item.payload, item.created_at, *line)
            .map_err(|(line, e)| bad(line, e))?
        {
            zones.push((i, zone));
        }
    }
    Ok(Tape {
        entries: lines.into_iter().map(|(_, item)| item).collect(),
        zones,
    })
}

/// A zone event read inside an open zone: its file, or why Bub could not read it, with the
/// caller's tag for the entry (a line number).
type ZoneEvent = std::result::Result<(String, ZoneFile), (usize, String)>;

/// Follows a tape's memory zones entry by entry, the way Bub's reader (seed 001, 3.4) would
/// see them at each point: the memory is the zone of the highest-version `memory/seal` so
/// far, made of the `memory.long_term`, `memory.daily` (and memtape's `memory.file`) events
/// between it and the nearest `memory/open` of the same version before it. Other entries
/// inside a zone are passed over, as Bub's reader skips them.
#[derive(Clone, Debug, Default)]
pub struct ZoneReader {
    /// Zones opened and not yet sealed, by version: the files seen since their open.
    open: BTreeMap<u64, Vec<ZoneEvent>>,
    /// The highest version sealed so far (0: none).
    best: u64,
    /// The highest version any zone anchor so far carried.
    highest: u64,
}

impl ZoneReader {
    /// Reads the next entry of the tape, tagged `tag` (a line number, for errors). Returns
    /// the zone it seals when it seals one with a version above every zone before it: Bub's
    /// memory from here on. An error is the tag and the reason of a zone event of that zone
    /// Bub could not read.
    pub fn push(
        &mut self,
        payload: &Payload,
        at: DateTime<Utc>,
        tag: usize,
    ) -> std::result::Result<Option<Zone>, (usize, String)> {
        if let Some(version) = zone_anchor(payload, MEMORY_OPEN) {
            self.highest = self.highest.max(version);
            self.open.insert(version, Vec::new());
            return Ok(None);
        }
        if let Some(version) = zone_anchor(payload, MEMORY_SEAL) {
            self.highest = self.highest.max(version);
            let Some(events) = self.open.remove(&version) else {
                return Ok(None);
            };
            if version <= self.best {
                return Ok(None);
            }
            self.best = version;
            let mut files = BTreeMap::new();
            for file in events {
                let (path, file) = file?;
                files.insert(path, file);
            }
            return Ok(Some(Zone { version, files, at }));
        }
        if !self.open.is_empty() {
            let file = match zone_file(payload) {
                Ok(None) => return Ok(None),
                Ok(Some(file)) => Ok(file),
                Err(reason) => Err((tag, reason)),
            };
            for events in self.open.values_mut() {
                events.push(file.clone());
            }
        }
        Ok(None)
    }

    /// The highest version any `memory/open` or `memory/seal` read so far carried.
    pub fn highest_version(&self) -> u64 {
        self.highest
    }
}

/// Whether `payload` is part of a memory zone's structure: a versioned zone anchor, or a
/// zone event (`memory.long_term`, `memory.daily`, `memory.file`).
pub fn is_zone_entry(payload: &Payload) -> bool {
    match payload {
        Payload::Anchor(_) => zone_version(payload).is_some(),
        Payload::Event(e) => {
            [MEMORY_LONG_TERM, MEMORY_DAILY, MEMORY_FILE].contains(&e.name.as_str())
        }
        Payload::Message(_) => false,
    }
}

/// The version of a zone anchor (`memory/open` or `memory/seal`), if `payload` is one.
pub fn zone_version(payload: &Payload) -> Option<u64> {
    zone_anchor(payload, MEMORY_OPEN).or_else(|| zone_anchor(payload, MEMORY_SEAL))
}

/// The version of a zone anchor named `name`: Bub only counts a positive integer version.
fn zone_anchor(payload: &Payload, name: &str) -> Option<u64> {
    match payload {
        Payload::Anchor(a) if a.name == name => a
            .state
            .as_ref()?
            .get("version")?
            .as_u64()
            .filter(|v| *v > 0),
        _ => None,
    }
}

/// The memory file a zone event holds, if it is one Bub (or memtape) reads: a string
/// `content`, and for a daily note a `YYYY-MM-DD` date, for `memory.file` a valid path.
fn zone_file(payload: &Payload) -> std::result::Result<Option<(String, ZoneFile)>, String> {
    let Payload::Event(event) = payload else {
        return Ok(None);
    };
    let Value::Object(data) = &event.data else {
        return Ok(None);
    };
    let Some(content) = data.get("content").and_then(Value::as_str) else {
        return Ok(None);
    };
    let path = match event.name.as_str() {
        MEMORY_LONG_TERM => paths::MEMORY.to_string(),
        MEMORY_DAILY => {
            let Some(date) = data.get("date").and_then(Value::as_str) else {
                return Ok(None);
            };
            let date = NaiveDate::parse_from_str(date, "%Y-%m-%d")
                .map_err(|_| format!("{MEMORY_DAILY} date {date:?} is not a YYYY-MM-DD date"))?;
            paths::daily(date)
        }
        MEMORY_FILE => {
            let Some(path) = data.get("path").and_then(Value::as_str) else {
                return Ok(None);
            };
            check_path(path).map_err(|e| e.to_string())?
        }
        _ => return Ok(None),
    };
    let (enabled, sort_order) = paths::default_flags(&path);
    let file = ZoneFile {
        content: content.to_string(),
        enabled: data
            .get("enabled")
            .and_then(Value::as_bool)
            .unwrap_or(enabled),
        sort_order: data
            .get("sort_order")
            .and_then(Value::as_i64)
            .unwrap_or(sort_order),
    };
    Ok(Some((path, file)))
}

/// The memory change that turns the snapshot `prev` (nothing, for a tape's first zone) into
/// `next`: deletes of the files `next` no longer has, writes of the files that are new or
/// changed, flags that changed. A zone that changes nothing is still a save (Bub bumps the
/// version on every save), so its files are written again; a zone that is empty after an
/// empty one (Bub's `ensure()` writes an empty version 1) is no change at all, as memtape's
/// version 0 is already the empty memory.
pub fn zone_change(prev: Option<&Zone>, next: &Zone) -> Option<Change> {
    let nothing = BTreeMap::new();
    let before = prev.map_or(&nothing, |z| &z.files);
    let mut ops: Vec<Op> = before
        .keys()
        .filter(|p| !next.files.contains_key(*p))
        .map(|p| Op::Delete { path: p.clone() })
        .collect();
    for (path, file) in &next.files {
        let old = before.get(path);
        if old.is_none_or(|o| o.content != file.content) {
            ops.push(Op::Write {
                path: path.clone(),
                content: file.content.clone(),
            });
        }
        let flags = old.map_or_else(|| paths::default_flags(path), |o| (o.enabled, o.sort_order));
        if flags != (file.enabled, file.sort_order) {
            ops.push(Op::Flags {
                path: path.clone(),
                enabled: Some(file.enabled),
                sort_order: Some(file.sort_order),
            });
        }
    }
    if ops.is_empty() {
        ops = next
            .files
            .iter()
            .map(|(path, file)| Op::Write {
                path: path.clone(),
                content: file.content.clone(),
            })
            .collect();
    }
    (!ops.is_empty()).then(|| Change {
        ops,
        source: format!("bub memory zone version {}", next.version),
        caused_by: Vec::new(),
    })
}

/// The zone that writes `view` as version `version`, sealed at `at`.
pub fn zone(version: u64, view: &MemoryView, at: DateTime<Utc>) -> Zone {
    Zone {
        version,
        files: view
            .files
            .iter()
            .map(|(path, f)| {
                let file = ZoneFile {
                    content: f.content.clone(),
                    enabled: f.enabled,
                    sort_order: f.sort_order,
                };
                (path.clone(), file)
            })
            .collect(),
        at,
    }
}

/// The entries of a zone, in order: `memory/open`, the long-term memory, the daily notes
/// newest first (Bub's order), memtape's other files, `memory/seal`.
pub fn zone_payloads(zone: &Zone) -> Vec<Payload> {
    let updated_at = zone.at.to_rfc3339();
    let anchor = |name: &str| {
        let mut state = Map::new();
        state.insert("version".into(), zone.version.into());
        Payload::Anchor(Anchor {
            name: name.to_owned(),
            state: Some(state),
        })
    };
    let event = |name: &str, path: &str, file: &ZoneFile, mut data: Map<String, Value>| {
        data.insert("content".into(), file.content.clone().into());
        data.insert("updated_at".into(), updated_at.clone().into());
        if paths::default_flags(path) != (file.enabled, file.sort_order) {
            data.insert("enabled".into(), file.enabled.into());
            data.insert("sort_order".into(), file.sort_order.into());
        }
        Payload::Event(Event {
            name: name.to_owned(),
            data: Value::Object(data),
        })
    };
    let mut out = vec![anchor(MEMORY_OPEN)];
    if let Some(file) = zone.files.get(paths::MEMORY) {
        out.push(event(MEMORY_LONG_TERM, paths::MEMORY, file, Map::new()));
    }
    let mut dailies: Vec<(NaiveDate, &String, &ZoneFile)> = zone
        .files
        .iter()
        .filter_map(|(p, f)| paths::daily_date(p).map(|d| (d, p, f)))
        .collect();
    dailies.sort_by_key(|d| std::cmp::Reverse(d.0));
    for (date, path, file) in &dailies {
        let mut data = Map::new();
        data.insert("date".into(), date.format("%Y-%m-%d").to_string().into());
        out.push(event(MEMORY_DAILY, path, file, data));
    }
    for (path, file) in &zone.files {
        if path != paths::MEMORY && paths::daily_date(path).is_none() {
            let mut data = Map::new();
            data.insert("path".into(), path.clone().into());
            out.push(event(MEMORY_FILE, path, file, data));
        }
    }
    out.push(anchor(MEMORY_SEAL));
    out
}

/// Writes `entries` as a Bub tape, numbering entries from 1. Consecutive tool results are
/// grouped into one `tool_result` entry, as Bub pairs results with calls by position.
pub fn render(entries: &[Entry], out: &mut String) {
    render_with_zones(entries, &[], out);
}

/// [`render`] for a session whose memory is `memory`: each `(id, snapshot)` is memtape's
/// memory as the change with that id left it, in id order. The session's own entries are
/// written as they are, zones included. Wherever a change leaves memtape's memory
/// different from what Bub's reader would take from the tape so far (memory changed
/// through another way in, or a fact was forgotten), a zone with that memory is written
/// at the change's place (after the tape's own zone entries that follow it, if any), so
/// Bub reads the same memory at each point; and the tape always ends with Bub reading
/// memtape's current memory. A written zone's version is above every zone version before
/// it; mid-tape it must also stay below every zone version after it (Bub takes the highest
/// version, wherever it is), and where no number is left between the two it is not
/// written: the zone after it follows soon enough.
pub fn render_with_zones(entries: &[Entry], memory: &[(EntryId, Zone)], out: &mut String) {
    // The lowest zone version on the tape from each entry on.
    let mut floor_after = vec![u64::MAX; entries.len() + 1];
    for (i, e) in entries.iter().enumerate().rev() {
        floor_after[i] =
            zone_version(&e.payload).map_or(floor_after[i + 1], |v| v.min(floor_after[i + 1]));
    }
    let mut id = 0u64;
    let mut emit =
        |kind: &str, payload: Value, meta: &Meta, date: DateTime<Utc>, out: &mut String| {
            id += 1;
            let mut meta = meta.clone();
            meta.remove(BUB_META);
            let line = json!({
                "id": id,
                "kind": kind,
                "payload": payload,
                "meta": meta,
                "date": date.to_rfc3339(),
            });
            out.push_str(&line.to_string());
            out.push('\n');
        };
    let no_meta = Meta::new();
    let mut reader = ZoneReader::default();
    // What Bub reads at this point of the written tape (no zone yet: nothing).
    let mut visible: BTreeMap<String, ZoneFile> = BTreeMap::new();
    let mut memory = memory.iter().peekable();
    // A memory change followed by the tape's own zone entries waits until they are read.
    let mut pending: Option<&Zone> = None;
    let mut i = 0;
    loop {
        let entry = entries.get(i);
        let structural = entry.is_some_and(|e| is_zone_entry(&e.payload));
        let mut due: Vec<&Zone> = Vec::new();
        while let Some((at, zone)) = memory.peek() {
            if entry.is_some_and(|e| e.id <= *at) {
                break;
            }
            if structural {
                pending = Some(zone);
            } else {
                // A later change supersedes one still waiting.
                pending = None;
                due.push(zone);
            }
            memory.next();
        }
        if !structural {
            due.splice(0..0, pending.take());
        }
        for now in due {
            let version = reader.highest_version() + 1;
            if now.files != visible && version < floor_after[i] {
                let zone = Zone {
                    version,
                    ..now.clone()
                };
                for payload in zone_payloads(&zone) {
                    reader.push(&payload, zone.at, 0).ok();
                    emit(
                        kind_name(&payload),
                        payload.to_json(),
                        &no_meta,
                        zone.at,
                        out,
                    );
                }
                visible = zone.files;
            }
        }
        let Some(entry) = entry else {
            break;
        };
        if let Ok(Some(zone)) = reader.push(&entry.payload, entry.created_at, 0) {
            visible = zone.files;
        }
        let mut emit = |kind: &str, payload: Value, out: &mut String| {
            emit(kind, payload, &entry.meta, entry.created_at, out);
        };
        let bub = entry.meta.get(BUB_META);
        let as_message = bub.and_then(|b| b.get("kind")) == Some(&json!("message"));
        match &entry.payload {
            Payload::Message(_) if as_message || entry.kind() == Kind::Message => {
                let mut payload = entry.payload.to_json();
                if let (Value::Object(p), Some(Value::Object(fields))) =
                    (&mut payload, bub.and_then(|b| b.get("fields")))
                {
                    p.extend(fields.clone());
                }
                emit("message", payload, out);
            }
            Payload::Message(m) => match entry.kind() {
                Kind::System => emit("system", json!({"content": m.content_text()}), out),
                Kind::ToolCall => {
                    let mut payload = Map::new();
                    payload.insert("calls".into(), json!(m.tool_calls));
                    if let Some(content) = &m.content {
                        payload.insert("content".into(), content.text().into());
                    }
                    emit("tool_call", Value::Object(payload), out);
                }
                Kind::ToolResult => {
                    let mut results = Vec::new();
                    while let Some(r) = entries.get(i) {
                        let Payload::Message(m) = &r.payload else {
                            break;
                        };
                        if m.role != Role::Tool {
                            break;
                        }
                        results.push(result_value(r, m));
                        i += 1;
                    }
                    emit("tool_result", json!({"results": results}), out);
                    continue;
                }
                _ => emit("message", entry.payload.to_json(), out),
            },
            Payload::Anchor(_) => emit("anchor", entry.payload.to_json(), out),
            Payload::Event(e) if e.name == TAPE_ERROR => emit("error", e.data.clone(), out),
            // memtape's record of the session's history view: the format itself says it.
            Payload::Event(e) if e.name == SESSION_SETTINGS => {}
            Payload::Event(_) => emit("event", entry.payload.to_json(), out),
        }
        i += 1;
    }
}

/// The Bub kind of a zone's payload.
fn kind_name(payload: &Payload) -> &'static str {
    match payload {
        Payload::Anchor(_) => "anchor",
        Payload::Event(_) => "event",
        Payload::Message(_) => "message",
    }
}

/// A tool result as Bub stores it: the JSON value it came as (marked in [`BUB_META`]), else
/// its text.
fn result_value(entry: &Entry, m: &Message) -> Value {
    let json = entry.meta.get(BUB_META).and_then(|b| b.get("result")) == Some(&json!("json"));
    match &m.content {
        Some(Content::Text(t)) if json => {
            serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.clone()))
        }
        Some(Content::Text(t)) => Value::String(t.clone()),
        Some(parts) => serde_json::to_value(parts).unwrap_or(Value::Null),
        None => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAPE: &str = r#"{"id": 1, "kind": "anchor", "payload": {"name": "session/start", "state": {"owner": "human"}}, "meta": {}}
{"id": 2, "kind": "system", "payload": {"content": "be brief"}, "meta": {}}
{"id": 3, "kind": "message", "payload": {"role": "user", "content": "weather?"}, "meta": {"run_id": "r1"}}
{"id": 4, "kind": "tool_call", "payload": {"calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}, {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}, "meta": {}}
{"id": 5, "kind": "tool_result", "payload": {"results": ["sunny", {"temp": 21}]}, "meta": {}}
{"id": 6, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "likes sun"}}, "meta": {}}
{"id": 7, "kind": "error", "payload": {"kind": "provider", "message": "boom"}, "meta": {}}
"#;

    #[test]
    fn tool_results_answer_pending_calls_by_position() {
        let items = parse(TAPE, DateTime::UNIX_EPOCH).unwrap();
        let kinds: Vec<Kind> = items.iter().map(|i| i.payload.kind()).collect();
        use Kind::*;
        assert_eq!(
            kinds,
            [
                Anchor, System, Message, ToolCall, ToolResult, ToolResult, Event, Event
            ]
        );
        let r2 = items[5].payload.as_message().unwrap();
        assert_eq!(r2.tool_call_id.as_deref(), Some("c2"));
        // Byte for byte as the tape carried it, marked as JSON for the way back.
        assert_eq!(r2.content_text(), r#"{"temp": 21}"#);
        assert_eq!(items[5].meta[BUB_META], json!({"result": "json"}));
        assert!(!items[4].meta.contains_key(BUB_META));
        assert_eq!(items[2].meta["run_id"], "r1");
    }

    /// A `message` line is kept whole: payload fields memtape's message does not model,
    /// and a payload memtape would file under another kind, come back out as they were.
    #[test]
    fn message_lines_come_back_as_they_were() {
        let tape = r#"{"id": 1, "kind": "message", "payload": {"role": "user", "content": "hi", "ts": 5, "lang": {"code": "uz"}}, "meta": {"run_id": "r"}, "date": "2026-02-10T09:00:00+00:00"}
{"id": 2, "kind": "message", "payload": {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "meta": {}, "date": "2026-02-10T09:00:00+00:00"}
{"id": 3, "kind": "message", "payload": {"role": "system", "content": "be brief"}, "meta": {}, "date": "2026-02-10T09:00:00+00:00"}
{"id": 4, "kind": "message", "payload": {"role": "tool", "content": "ok", "tool_call_id": "c"}, "meta": {}, "date": "2026-02-10T09:00:00+00:00"}
"#;
        let items = parse(tape, DateTime::UNIX_EPOCH).unwrap();
        assert_eq!(
            items[0].meta[BUB_META],
            json!({"fields": {"ts": 5, "lang": {"code": "uz"}}})
        );
        let entries: Vec<Entry> = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let mut e = entry(i as u64 + 1, item.payload);
                e.meta = item.meta;
                e.created_at = item.created_at;
                e
            })
            .collect();
        let mut out = String::new();
        render(&entries, &mut out);
        let lines = |t: &str| -> Vec<Value> {
            t.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let mut want = lines(tape);
        // memtape writes an assistant message without text with no content field.
        want[1]["payload"]
            .as_object_mut()
            .unwrap()
            .remove("content");
        assert_eq!(lines(&out), want);
    }

    #[test]
    fn unknown_kinds_and_unmatched_results_are_bad_lines() {
        let err = parse(
            "{\"id\":1,\"kind\":\"weird\",\"payload\":{}}\n",
            DateTime::UNIX_EPOCH,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("line 1") && err.to_string().contains("weird"),
            "{err}"
        );
        let err = parse(
            "{\"id\":1,\"kind\":\"tool_result\",\"payload\":{\"results\":[1]}}\n",
            DateTime::UNIX_EPOCH,
        )
        .unwrap_err();
        assert!(err.to_string().contains("pending"), "{err}");
    }
    /// Seed 001's tape data flow (sections 5.1 to 5.3): an empty version 1 written by
    /// `ensure()`, a save, then a save with daily notes; plus a zone whose seal never came.
    const ZONES: &str = r##"{"id": 1, "kind": "anchor", "payload": {"name": "session/start", "state": {"owner": "human"}}, "meta": {}}
{"id": 2, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 1}}, "meta": {}}
{"id": 3, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 1}}, "meta": {}}
{"id": 4, "kind": "message", "payload": {"role": "user", "content": "remember: I like Python"}, "meta": {}}
{"id": 5, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 2}}, "meta": {}}
{"id": 6, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "User likes Python", "updated_at": "2026-02-09T10:00:00+00:00"}}, "meta": {}}
{"id": 7, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 2}}, "meta": {}, "date": "2026-02-09T10:00:00+00:00"}
{"id": 8, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 3}}, "meta": {}}
{"id": 9, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "User likes Python"}}, "meta": {}}
{"id": 10, "kind": "event", "payload": {"name": "memory.daily", "data": {"date": "2026-02-10", "content": "# 2026-02-10\n\n- Implemented tape memory zone"}}, "meta": {}}
{"id": 11, "kind": "event", "payload": {"name": "memory.daily", "data": {"date": "2026-02-09", "content": "# 2026-02-09\n\n- Designed memory architecture"}}, "meta": {}}
{"id": 12, "kind": "event", "payload": {"name": "other.event", "data": {"x": 1}}, "meta": {}}
{"id": 13, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 3}}, "meta": {}}
{"id": 14, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 4}}, "meta": {}}
{"id": 15, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "half written"}}, "meta": {}}
"##;

    fn zones_of(text: &str) -> Vec<Zone> {
        let tape = read(text, DateTime::UNIX_EPOCH).unwrap();
        tape.zones.into_iter().map(|(_, z)| z).collect()
    }

    /// Seed 001: a zone is the events between `memory/open` and the `memory/seal` of the
    /// same version; only sealed zones are memory. The zones stay on the tape: every line
    /// is an entry, in place.
    #[test]
    fn seed_bub_sealed_zones_become_snapshots_and_stay_on_the_tape() {
        let Tape {
            entries: items,
            zones,
        } = read(ZONES, DateTime::UNIX_EPOCH).unwrap();
        assert_eq!(items.len(), 15, "every line is kept");
        assert_eq!(
            zones
                .iter()
                .map(|(i, z)| (*i, z.version))
                .collect::<Vec<_>>(),
            [(2, 1), (6, 2), (12, 3)],
            "each zone at its seal's place"
        );
        let zones: Vec<Zone> = zones.into_iter().map(|(_, z)| z).collect();
        assert!(zones[0].files.is_empty());
        assert_eq!(zones[1].files["MEMORY.md"].content, "User likes Python");
        assert_eq!(zones[1].at.to_rfc3339(), "2026-02-09T10:00:00+00:00");
        assert_eq!(
            zones[2].files.keys().collect::<Vec<_>>(),
            ["MEMORY.md", "memory/2026-02-09.md", "memory/2026-02-10.md"]
        );
        assert!(is_zone_entry(&items[1].payload) && !is_zone_entry(&items[11].payload));
        assert_eq!(
            zone_version(&items[13].payload),
            Some(4),
            "the unsealed open"
        );
    }

    /// Seed 001: "Reads find the highest-version memory/seal": a later zone with a lower
    /// version is never current, so it is no snapshot (but its entries stay).
    #[test]
    fn seed_bub_a_zone_below_the_highest_version_is_not_memory() {
        let tape = r#"{"id": 1, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 5}}}
{"id": 2, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "five"}}}
{"id": 3, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 5}}}
{"id": 4, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 2}}}
{"id": 5, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "two"}}}
{"id": 6, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 2}}}
"#;
        let Tape {
            entries: items,
            zones,
        } = read(tape, DateTime::UNIX_EPOCH).unwrap();
        assert_eq!(zones.len(), 1);
        assert_eq!(zones[0].1.files["MEMORY.md"].content, "five");
        assert_eq!(items.len(), 6);
    }

    /// Seed 001: every save is a new version; a snapshot becomes the change that makes it.
    #[test]
    fn seed_bub_each_zone_is_the_change_from_the_one_before() {
        let zones = zones_of(ZONES);
        assert_eq!(zone_change(None, &zones[0]), None, "empty v1 is version 0");
        let v2 = zone_change(Some(&zones[0]), &zones[1]).unwrap();
        assert_eq!(
            v2.ops,
            [Op::Write {
                path: "MEMORY.md".into(),
                content: "User likes Python".into()
            }]
        );
        assert_eq!(v2.source, "bub memory zone version 2");
        let v3 = zone_change(Some(&zones[1]), &zones[2]).unwrap();
        assert_eq!(v3.ops.len(), 2, "only the two new notes: {:?}", v3.ops);
        let cleared = Zone {
            version: 4,
            files: BTreeMap::new(),
            at: DateTime::UNIX_EPOCH,
        };
        let clear = zone_change(Some(&zones[2]), &cleared).unwrap();
        assert!(clear.ops.iter().all(|op| matches!(op, Op::Delete { .. })));
        assert_eq!(clear.ops.len(), 3);
        let again = Zone {
            version: 5,
            ..zones[1].clone()
        };
        let resave = zone_change(Some(&zones[1]), &again).unwrap();
        assert_eq!(
            resave.ops, v2.ops,
            "a save that changed nothing still writes"
        );
    }

    fn entry(id: u64, payload: Payload) -> Entry {
        Entry {
            id: EntryId(id),
            scope: crate::Scope::agent("t", "a")
                .unwrap()
                .with_session("s")
                .unwrap(),
            parent: None,
            payload,
            meta: Meta::new(),
            created_at: DateTime::UNIX_EPOCH,
            erased: None,
        }
    }

    /// A memory timeline written between a session's messages comes out as zones, with
    /// versions that increase, and every zone reads back as the memory it was written from.
    #[test]
    fn zones_render_so_that_they_read_back() {
        let mut zones = zones_of(ZONES);
        zones[2].files.insert(
            "memories/notes.md".into(),
            ZoneFile {
                content: "n".into(),
                enabled: true,
                sort_order: 7,
            },
        );
        let say = |id: u64| entry(id, Payload::Message(Message::user(format!("m{id}"))));
        let entries = [say(1), say(3), say(5), say(7)];
        let memory: Vec<(EntryId, Zone)> = zones
            .iter()
            .enumerate()
            .map(|(i, z)| (EntryId(2 * i as u64 + 2), z.clone()))
            .collect();
        let mut out = String::new();
        render_with_zones(&entries, &memory, &mut out);
        let back = zones_of(&out);
        // The empty first snapshot is what Bub reads on a tape with no zone: no zone.
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].files, zones[1].files);
        assert_eq!(back[1].files, zones[2].files);
        assert_eq!((back[0].version, back[1].version), (1, 2));
        let daily_first = out.find("2026-02-10").unwrap() < out.find("2026-02-09\"").unwrap();
        assert!(
            daily_first,
            "daily notes are written newest first, as Bub sorts them"
        );
    }

    /// A session's own zones are written as they are; memtape adds a zone only where its
    /// memory differs from what Bub reads there, numbered between the zones around it, and
    /// leaves one out where no number is free.
    #[test]
    fn a_written_zone_never_shadows_the_tape_s_own() {
        let Tape {
            entries: items,
            zones,
        } = read(ZONES, DateTime::UNIX_EPOCH).unwrap();
        let entries: Vec<Entry> = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| entry(i as u64 + 1, item.payload))
            .collect();
        let mut out = String::new();
        let memory: Vec<(EntryId, Zone)> = zones
            .iter()
            .map(|(i, z)| (EntryId(*i as u64 + 1), z.clone()))
            .collect();
        render_with_zones(&entries, &memory, &mut out);
        assert_eq!(out.lines().count(), 15, "the tape as it was: {out}");
        let files =
            |z: Vec<Zone>| -> Vec<_> { z.into_iter().map(|z| (z.version, z.files)).collect() };
        assert_eq!(files(zones_of(&out)), files(zones_of(ZONES)));
        // memtape's memory moved on after the tape's last zone (version 3; an open
        // version 4 follows): the new memory comes at the end as version 5.
        let mut later = zones[2].1.clone();
        later.files.remove("MEMORY.md");
        let mut more = memory.clone();
        more.push((EntryId(13), later.clone()));
        let mut out = String::new();
        render_with_zones(&entries, &more, &mut out);
        let back = zones_of(&out);
        assert_eq!(back.last().unwrap().version, 5);
        assert_eq!(back.last().unwrap().files, later.files);
        assert_eq!(out.lines().count(), 15 + 4);
    }

    #[test]
    fn a_zone_daily_without_a_date_is_a_bad_line() {
        let tape = ZONES.replace(r#""date": "2026-02-09", "#, r#""date": "yesterday", "#);
        let err = read(&tape, DateTime::UNIX_EPOCH).unwrap_err().to_string();
        assert!(
            err.starts_with("line 11:") && err.contains("yesterday"),
            "{err}"
        );
    }
}
