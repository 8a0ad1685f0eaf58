//! Bub (republic) tapes: `TapeEntry {id, kind, payload, meta}` per line. Kinds map onto
//! memtape's: `message` and `system` are messages, `tool_call {calls}` is an assistant
//! message calling tools, each of `tool_result {results}` answers the preceding calls by
//! position, `anchor` and `event` are kept as they are, and `error` becomes a
//! `tape.error` event so it survives a round trip.
//!
//! Bub keeps memory inside the tape as *zones* (seed 001): a `memory/open` anchor, the whole
//! memory as `memory.long_term` and `memory.daily` events, and a `memory/seal` anchor, both
//! anchors carrying `{"version": N}`. Every save appends a new zone with the next version;
//! a reader takes the highest-version seal and the nearest `memory/open` of that version
//! before it. [`read`] turns each sealed zone into a [`Zone`] (a full snapshot of memory),
//! [`zone_change`] turns consecutive snapshots into memtape memory changes, and
//! [`render_with_zones`] writes memtape's memory versions back as zones Bub can read.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{Map, Value, json};

use crate::events::TAPE_ERROR;
use crate::formats::{Imported, bad, json_lines, time_field};
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

/// One item of a Bub tape read with [`read`]: an entry, or a sealed memory zone standing in
/// for its anchors and memory events.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// An entry of the conversation (or any other entry).
    Entry(Imported),
    /// A memory zone, at the place of its seal.
    Zone(Zone),
}

/// Parses a Bub tape. Entries get the line's `date` as their time when it has one, else `now`.
/// Memory zones stay as the anchors and events they are made of; [`read`] takes them out.
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
    for item in json_lines(text) {
        let (line, value) = item?;
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
        let parse_as = |v: Value| -> Result<Payload> {
            let k = match kind.as_str() {
                "anchor" => Kind::Anchor,
                "event" => Kind::Event,
                _ => Kind::Message,
            };
            let payload = match k {
                Kind::Anchor => Payload::Anchor(
                    serde_json::from_value::<Anchor>(v).map_err(|e| bad(line, e.to_string()))?,
                ),
                Kind::Event => Payload::Event(
                    serde_json::from_value::<Event>(v).map_err(|e| bad(line, e.to_string()))?,
                ),
                _ => Payload::Message(
                    serde_json::from_value::<Message>(v).map_err(|e| bad(line, e.to_string()))?,
                ),
            };
            payload.validate().map_err(|e| bad(line, e.to_string()))?;
            Ok(payload)
        };
        let mut push = |payload: Payload| {
            out.push((
                line,
                Imported {
                    payload,
                    meta: meta.clone(),
                    created_at,
                },
            ));
        };
        match kind.as_str() {
            "message" | "anchor" | "event" => push(parse_as(Value::Object(payload))?),
            "system" => {
                let content = payload
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                push(Payload::Message(Message::text(Role::System, content)));
            }
            "tool_call" => {
                let calls: Vec<ToolCall> =
                    serde_json::from_value(payload.get("calls").cloned().unwrap_or(Value::Null))
                        .map_err(|e| bad(line, format!("tool_call calls: {e}")))?;
                if calls.is_empty() {
                    return Err(bad(line, "a tool_call entry with no calls"));
                }
                pending.clone_from(&calls);
                push(Payload::Message(Message::assistant_tool_calls(calls)));
            }
            "tool_result" => {
                let Some(Value::Array(results)) = payload.get("results") else {
                    return Err(bad(line, "a tool_result entry needs a results list"));
                };
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
                    let text = match result {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let mut m = Message::tool_result(call.id.clone(), text);
                    m.name = Some(call.function.name.clone());
                    push(Payload::Message(m));
                }
                pending.clear();
            }
            "error" => push(Payload::Event(Event {
                name: TAPE_ERROR.to_owned(),
                data: Value::Object(payload),
            })),
            other => return Err(bad(line, format!("unknown tape entry kind {other:?}"))),
        }
    }
    Ok(out)
}

/// Reads a Bub tape with its memory zones taken out: each sealed zone (a `memory/open` and
/// the `memory/seal` of the same version after it, seed 001) becomes one [`Item::Zone`] at
/// the place of its seal, holding the `memory.long_term`, `memory.daily` (and memtape's
/// `memory.file`) events between them. Everything else inside a zone stays an entry, as
/// Bub's reader skips it too.
///
/// Bub reads the zone with the highest version, so a zone whose version is not above every
/// zone before it is never current: its memory events stay plain entries. The anchors of
/// every zone, and versioned `memory/open` and `memory/seal` anchors without their pair (a
/// write that never finished), are not kept as entries: written back out they could shadow
/// the zones memtape writes.
pub fn read(text: &str, now: DateTime<Utc>) -> Result<Vec<Item>> {
    let lines = parse_lines(text, now)?;
    // Pair each seal with the nearest open of its version after the previous zone.
    let mut zones: Vec<(usize, usize, u64)> = Vec::new();
    let mut floor = 0;
    for (i, (_, item)) in lines.iter().enumerate() {
        let Some(version) = zone_anchor(item, MEMORY_SEAL) else {
            continue;
        };
        let open = (floor..i)
            .rev()
            .find(|&j| zone_anchor(&lines[j].1, MEMORY_OPEN) == Some(version));
        if let Some(open) = open {
            zones.push((open, i, version));
            floor = i + 1;
        }
    }
    let mut out = Vec::new();
    let mut best = 0;
    let mut zones = zones.into_iter().peekable();
    let mut i = 0;
    while i < lines.len() {
        if let Some(&(open, seal, version)) = zones.peek()
            && open == i
        {
            zones.next();
            let current = version > best;
            let mut files = BTreeMap::new();
            for (line, item) in &lines[open + 1..seal] {
                match current
                    .then(|| zone_file(*line, item))
                    .transpose()?
                    .flatten()
                {
                    Some((path, file)) => {
                        files.insert(path, file);
                    }
                    None => out.push(Item::Entry(item.clone())),
                }
            }
            if current {
                best = version;
                out.push(Item::Zone(Zone {
                    version,
                    files,
                    at: lines[seal].1.created_at,
                }));
            }
            i = seal + 1;
            continue;
        }
        let item = &lines[i].1;
        if zone_anchor(item, MEMORY_OPEN).is_none() && zone_anchor(item, MEMORY_SEAL).is_none() {
            out.push(Item::Entry(item.clone()));
        }
        i += 1;
    }
    Ok(out)
}

/// The version of a zone anchor named `name`: Bub only counts a positive integer version.
fn zone_anchor(item: &Imported, name: &str) -> Option<u64> {
    match &item.payload {
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
fn zone_file(line: usize, item: &Imported) -> Result<Option<(String, ZoneFile)>> {
    let Payload::Event(event) = &item.payload else {
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
            let date = NaiveDate::parse_from_str(date, "%Y-%m-%d").map_err(|_| {
                bad(
                    line,
                    format!("{MEMORY_DAILY} date {date:?} is not a YYYY-MM-DD date"),
                )
            })?;
            paths::daily(date)
        }
        MEMORY_FILE => {
            let Some(path) = data.get("path").and_then(Value::as_str) else {
                return Ok(None);
            };
            check_path(path).map_err(|e| bad(line, e.to_string()))?
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

/// The lines of a zone, as `(kind, payload)`: `memory/open`, the long-term memory, the
/// daily notes newest first (Bub's order), memtape's other files, `memory/seal`.
fn zone_lines(zone: &Zone) -> Vec<(&'static str, Value)> {
    let updated_at = zone.at.to_rfc3339();
    let anchor = |name: &str| json!({"name": name, "state": {"version": zone.version}});
    let event = |name: &str, path: &str, file: &ZoneFile, mut data: Map<String, Value>| {
        data.insert("content".into(), file.content.clone().into());
        data.insert("updated_at".into(), updated_at.clone().into());
        if paths::default_flags(path) != (file.enabled, file.sort_order) {
            data.insert("enabled".into(), file.enabled.into());
            data.insert("sort_order".into(), file.sort_order.into());
        }
        ("event", json!({"name": name, "data": data}))
    };
    let mut lines = vec![("anchor", anchor(MEMORY_OPEN))];
    if let Some(file) = zone.files.get(paths::MEMORY) {
        lines.push(event(MEMORY_LONG_TERM, paths::MEMORY, file, Map::new()));
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
        lines.push(event(MEMORY_DAILY, path, file, data));
    }
    for (path, file) in &zone.files {
        if path != paths::MEMORY && paths::daily_date(path).is_none() {
            let mut data = Map::new();
            data.insert("path".into(), path.clone().into());
            lines.push(event(MEMORY_FILE, path, file, data));
        }
    }
    lines.push(("anchor", anchor(MEMORY_SEAL)));
    lines
}

/// Writes `entries` as a Bub tape, numbering entries from 1. Consecutive tool results are
/// grouped into one `tool_result` entry, as Bub pairs results with calls by position.
pub fn render(entries: &[Entry], out: &mut String) {
    render_with_zones(entries, &[], out);
}

/// [`render`], with memory zones: each `(id, zone)` is written before the first entry whose
/// id is above `id` (the memory change it comes from), so zones sit where the saves
/// happened. `zones` must be in id order, with increasing versions.
pub fn render_with_zones(entries: &[Entry], zones: &[(EntryId, Zone)], out: &mut String) {
    let mut id = 0u64;
    let mut emit =
        |kind: &str, payload: Value, meta: &Meta, date: DateTime<Utc>, out: &mut String| {
            id += 1;
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
    let mut zones = zones.iter().peekable();
    let mut i = 0;
    loop {
        let next_id = entries.get(i).map(|e| e.id);
        while let Some((at, zone)) = zones.peek() {
            if next_id.is_some_and(|n| n <= *at) {
                break;
            }
            for (kind, payload) in zone_lines(zone) {
                emit(kind, payload, &no_meta, zone.at, out);
            }
            zones.next();
        }
        let Some(entry) = entries.get(i) else {
            break;
        };
        let mut emit = |kind: &str, payload: Value, out: &mut String| {
            emit(kind, payload, &entry.meta, entry.created_at, out);
        };
        match &entry.payload {
            Payload::Message(m) => match entry.kind() {
                Kind::System => emit("system", json!({"content": m.content_text()}), out),
                Kind::ToolCall => {
                    if m.content.as_ref().is_some_and(|c| !c.text().is_empty()) {
                        let text_only = Message {
                            tool_calls: Vec::new(),
                            ..m.clone()
                        };
                        emit("message", Payload::Message(text_only).to_json(), out);
                    }
                    emit("tool_call", json!({"calls": m.tool_calls}), out);
                }
                Kind::ToolResult => {
                    let mut results = Vec::new();
                    while let Some(Payload::Message(r)) = entries.get(i).map(|e| &e.payload) {
                        if r.role != Role::Tool {
                            break;
                        }
                        results.push(match &r.content {
                            Some(Content::Text(t)) => Value::String(t.clone()),
                            Some(parts) => serde_json::to_value(parts).unwrap_or(Value::Null),
                            None => Value::Null,
                        });
                        i += 1;
                    }
                    emit("tool_result", json!({"results": results}), out);
                    continue;
                }
                _ => emit("message", entry.payload.to_json(), out),
            },
            Payload::Anchor(_) => emit("anchor", entry.payload.to_json(), out),
            Payload::Event(e) if e.name == TAPE_ERROR => emit("error", e.data.clone(), out),
            Payload::Event(_) => emit("event", entry.payload.to_json(), out),
        }
        i += 1;
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
        assert_eq!(r2.content_text(), r#"{"temp":21}"#);
        assert_eq!(items[2].meta["run_id"], "r1");
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

    fn zones_of(items: &[Item]) -> Vec<&Zone> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Zone(z) => Some(z),
                Item::Entry(_) => None,
            })
            .collect()
    }

    /// Seed 001: a zone is the events between `memory/open` and the `memory/seal` of the
    /// same version; only sealed zones are memory, and their anchors are taken out.
    #[test]
    fn seed_bub_sealed_zones_become_snapshots() {
        let items = read(ZONES, DateTime::UNIX_EPOCH).unwrap();
        let zones = zones_of(&items);
        assert_eq!(
            zones.iter().map(|z| z.version).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(zones[0].files.is_empty());
        assert_eq!(zones[1].files["MEMORY.md"].content, "User likes Python");
        assert_eq!(zones[1].at.to_rfc3339(), "2026-02-09T10:00:00+00:00");
        assert_eq!(
            zones[2].files.keys().collect::<Vec<_>>(),
            ["MEMORY.md", "memory/2026-02-09.md", "memory/2026-02-10.md"]
        );
        let names: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::Entry(e) => e
                    .payload
                    .name()
                    .map_or_else(|| e.payload.kind().to_string(), str::to_owned),
                Item::Zone(z) => format!("zone {}", z.version),
            })
            .collect();
        // The unknown event inside zone 3 stays an entry (before the zone); the unsealed
        // zone 4 loses its open anchor but keeps its event.
        assert_eq!(
            names,
            [
                "session/start",
                "zone 1",
                "message",
                "zone 2",
                "other.event",
                "zone 3",
                "memory.long_term"
            ]
        );
    }

    /// Seed 001: "Reads find the highest-version memory/seal": a later zone with a lower
    /// version is never current, so it is no snapshot.
    #[test]
    fn seed_bub_a_zone_below_the_highest_version_is_not_memory() {
        let tape = r#"{"id": 1, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 5}}}
{"id": 2, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "five"}}}
{"id": 3, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 5}}}
{"id": 4, "kind": "anchor", "payload": {"name": "memory/open", "state": {"version": 2}}}
{"id": 5, "kind": "event", "payload": {"name": "memory.long_term", "data": {"content": "two"}}}
{"id": 6, "kind": "anchor", "payload": {"name": "memory/seal", "state": {"version": 2}}}
"#;
        let items = read(tape, DateTime::UNIX_EPOCH).unwrap();
        let zones = zones_of(&items);
        assert_eq!(zones.len(), 1);
        assert_eq!(zones[0].files["MEMORY.md"].content, "five");
        assert_eq!(
            items.len(),
            2,
            "the stale zone's event stays, its anchors go"
        );
    }

    /// Seed 001: every save is a new version; a snapshot becomes the change that makes it.
    #[test]
    fn seed_bub_each_zone_is_the_change_from_the_one_before() {
        let items = read(ZONES, DateTime::UNIX_EPOCH).unwrap();
        let zones = zones_of(&items);
        assert_eq!(zone_change(None, zones[0]), None, "empty v1 is version 0");
        let v2 = zone_change(Some(zones[0]), zones[1]).unwrap();
        assert_eq!(
            v2.ops,
            [Op::Write {
                path: "MEMORY.md".into(),
                content: "User likes Python".into()
            }]
        );
        assert_eq!(v2.source, "bub memory zone version 2");
        let v3 = zone_change(Some(zones[1]), zones[2]).unwrap();
        assert_eq!(v3.ops.len(), 2, "only the two new notes: {:?}", v3.ops);
        let cleared = Zone {
            version: 4,
            files: BTreeMap::new(),
            at: DateTime::UNIX_EPOCH,
        };
        let clear = zone_change(Some(zones[2]), &cleared).unwrap();
        assert!(clear.ops.iter().all(|op| matches!(op, Op::Delete { .. })));
        assert_eq!(clear.ops.len(), 3);
        let again = Zone {
            version: 5,
            ..zones[1].clone()
        };
        let resave = zone_change(Some(zones[1]), &again).unwrap();
        assert_eq!(
            resave.ops, v2.ops,
            "a save that changed nothing still writes"
        );
    }

    #[test]
    fn zones_render_so_that_they_read_back() {
        let items = read(ZONES, DateTime::UNIX_EPOCH).unwrap();
        let mut zones: Vec<(EntryId, Zone)> = zones_of(&items)
            .into_iter()
            .enumerate()
            .map(|(i, z)| (EntryId(i as u64), z.clone()))
            .collect();
        zones[2].1.files.insert(
            "memories/notes.md".into(),
            ZoneFile {
                content: "n".into(),
                enabled: true,
                sort_order: 7,
            },
        );
        let mut out = String::new();
        render_with_zones(&[], &zones, &mut out);
        let back = read(&out, DateTime::UNIX_EPOCH).unwrap();
        let back: Vec<Zone> = zones_of(&back).into_iter().cloned().collect();
        let want: Vec<Zone> = zones.into_iter().map(|(_, z)| z).collect();
        assert_eq!(back, want);
        let daily_first = out.find("2026-02-10").unwrap() < out.find("2026-02-09\"").unwrap();
        assert!(
            daily_first,
            "daily notes are written newest first, as Bub sorts them"
        );
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
