//! Bub (republic) tapes: `TapeEntry {id, kind, payload, meta}` per line. Kinds map onto
//! memtape's: `message` and `system` are messages, `tool_call {calls}` is an assistant
//! message calling tools, each of `tool_result {results}` answers the preceding calls by
//! position, `anchor` and `event` are kept as they are, and `error` becomes a
//! `tape.error` event so it survives a round trip.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::events::TAPE_ERROR;
use crate::formats::{Imported, bad, json_lines, time_field};
use crate::{Anchor, Content, Entry, Event, Kind, Message, Payload, Result, Role, ToolCall};

/// Parses a Bub tape. Entries get the line's `date` as their time when it has one, else `now`.
pub fn parse(text: &str, now: DateTime<Utc>) -> Result<Vec<Imported>> {
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
            out.push(Imported {
                payload,
                meta: meta.clone(),
                created_at,
            });
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

/// Writes `entries` as a Bub tape, numbering entries from 1. Consecutive tool results are
/// grouped into one `tool_result` entry, as Bub pairs results with calls by position.
pub fn render(entries: &[Entry], out: &mut String) {
    let mut id = 0u64;
    let mut emit = |kind: &str, payload: Value, entry: &Entry, out: &mut String| {
        id += 1;
        let line = json!({
            "id": id,
            "kind": kind,
            "payload": payload,
            "meta": entry.meta,
            "date": entry.created_at.to_rfc3339(),
        });
        out.push_str(&line.to_string());
        out.push('\n');
    };
    let mut i = 0;
    while i < entries.len() {
        let entry = &entries[i];
        match &entry.payload {
            Payload::Message(m) => match entry.kind() {
                Kind::System => emit("system", json!({"content": m.content_text()}), entry, out),
                Kind::ToolCall => {
                    if m.content.as_ref().is_some_and(|c| !c.text().is_empty()) {
                        let text_only = Message {
                            tool_calls: Vec::new(),
                            ..m.clone()
                        };
                        emit("message", Payload::Message(text_only).to_json(), entry, out);
                    }
                    emit("tool_call", json!({"calls": m.tool_calls}), entry, out);
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
                    emit("tool_result", json!({"results": results}), entry, out);
                    continue;
                }
                _ => emit("message", entry.payload.to_json(), entry, out),
            },
            Payload::Anchor(_) => emit("anchor", entry.payload.to_json(), entry, out),
            Payload::Event(e) if e.name == TAPE_ERROR => emit("error", e.data.clone(), entry, out),
            Payload::Event(_) => emit("event", entry.payload.to_json(), entry, out),
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
}
