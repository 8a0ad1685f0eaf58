//! nanobot session files: a `{"_type": "metadata", ...}` line, then one OpenAI-style message
//! per line with a `timestamp`. Fields nanobot adds that memtape does not model are kept in
//! the entry's meta and written back on export.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::formats::{Imported, bad, json_lines, time_field};
use crate::{Entry, Error, Message, Payload, Result};

/// The message fields memtape models; everything else on a line goes to meta.
const MESSAGE_FIELDS: [&str; 7] = [
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning_content",
    "files",
];

/// The meta key that lists the tool calls (by index) whose arguments the file gave as a
/// JSON value rather than a JSON-encoded string (nanobot keeps what the provider sent,
/// nanobot issue #1042). memtape stores every call's arguments as a string; export writes
/// these back as the value, so the file comes out as it went in.
pub const VALUE_ARGUMENTS: &str = "memtape:value_arguments";

/// A parsed nanobot session.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    /// The session key (`channel:chat_id`), if the metadata line names one.
    pub key: Option<String>,
    /// When the session was created.
    pub created_at: Option<DateTime<Utc>>,
    /// When it was last updated.
    pub updated_at: Option<DateTime<Utc>>,
    /// Free metadata.
    pub metadata: Map<String, Value>,
    /// How many leading messages are consolidated (nanobot's `last_archived` index, formerly
    /// `last_consolidated`).
    pub last_consolidated: usize,
    /// The messages, in order.
    pub messages: Vec<Imported>,
}

/// Parses a nanobot session file. Messages without a timestamp get the previous one's (or
/// `now` for the first).
pub fn parse(text: &str, now: DateTime<Utc>) -> Result<Session> {
    let mut session = Session {
        key: None,
        created_at: None,
        updated_at: None,
        metadata: Map::new(),
        last_consolidated: 0,
        messages: Vec::new(),
    };
    let mut seen_metadata = false;
    let mut last_time = None;
    for item in json_lines(text) {
        let (line, value) = item?;
        let Value::Object(mut obj) = value else {
            return Err(bad(line, "expected a JSON object"));
        };
        if obj.get("_type").and_then(Value::as_str) == Some("metadata") {
            if seen_metadata {
                return Err(bad(line, "a second metadata line"));
            }
            seen_metadata = true;
            session.key = match obj.get("key") {
                None | Some(Value::Null) => None,
                Some(Value::String(k)) => Some(k.clone()),
                Some(other) => return Err(bad(line, format!("key must be a string, not {other}"))),
            };
            session.created_at = time_field(line, &obj, "created_at")?;
            session.updated_at = time_field(line, &obj, "updated_at")?;
            session.metadata = match obj.remove("metadata") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(m)) => m,
                Some(other) => {
                    return Err(bad(
                        line,
                        format!("metadata must be an object, not {other}"),
                    ));
                }
            };
            // nanobot 0.3.5 calls the pointer `last_archived` and reads it first; it writes
            // `last_consolidated` beside it for older releases.
            let field = ["last_archived", "last_consolidated"]
                .into_iter()
                .find(|k| !matches!(obj.get(*k), None | Some(Value::Null)));
            session.last_consolidated = match field {
                None => 0,
                Some(k) => {
                    let v = &obj[k];
                    v.as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| bad(line, format!("{k} must be a whole number, not {v}")))?
                }
            };
            continue;
        }
        let created_at = time_field(line, &obj, "timestamp")?
            .or(last_time)
            .unwrap_or(now);
        last_time = Some(created_at);
        obj.remove("timestamp");
        let mut fields = Map::new();
        for key in MESSAGE_FIELDS {
            if let Some(v) = obj.remove(key) {
                fields.insert(key.to_owned(), v);
            }
        }
        if !fields.contains_key("role") {
            return Err(bad(line, "a message line needs a role"));
        }
        if obj.contains_key(VALUE_ARGUMENTS) {
            return Err(bad(
                line,
                format!("{VALUE_ARGUMENTS} is memtape's own field"),
            ));
        }
        let value_arguments: Vec<Value> = match fields.get("tool_calls") {
            Some(Value::Array(calls)) => calls
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    c.pointer("/function/arguments")
                        .is_some_and(|a| !a.is_string())
                })
                .map(|(i, _)| json!(i))
                .collect(),
            _ => Vec::new(),
        };
        if !value_arguments.is_empty() {
            obj.insert(VALUE_ARGUMENTS.into(), Value::Array(value_arguments));
        }
        let message: Message =
            serde_json::from_value(Value::Object(fields)).map_err(|e| bad(line, e.to_string()))?;
        message.validate().map_err(|e| bad(line, e.to_string()))?;
        session.messages.push(Imported {
            payload: Payload::Message(message),
            meta: obj,
            created_at,
        });
    }
    if session.last_consolidated > session.messages.len() {
        return Err(Error::InvalidImport(format!(
            "last_consolidated is {} but the file has only {} messages",
            session.last_consolidated,
            session.messages.len()
        )));
    }
    Ok(session)
}

/// Writes a nanobot session file: the metadata line (the pointer under both of nanobot's
/// names, as nanobot 0.3.5 writes it), then each message entry of `entries` (anchors and
/// events have no place in a nanobot session and are left out).
pub fn render(
    key: &str,
    metadata: &Map<String, Value>,
    last_consolidated: usize,
    entries: &[Entry],
    out: &mut String,
) {
    let time = |t: DateTime<Utc>| t.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string();
    let messages: Vec<&Entry> = entries.iter().filter(|e| e.message().is_some()).collect();
    let created = messages.first().map(|e| time(e.created_at));
    let updated = messages.last().map(|e| time(e.created_at));
    let head = json!({
        "_type": "metadata",
        "key": key,
        "created_at": created,
        "updated_at": updated,
        "metadata": metadata,
        "last_archived": last_consolidated,
        "last_consolidated": last_consolidated,
    });
    out.push_str(&head.to_string());
    out.push('\n');
    for entry in messages {
        let mut obj = match entry.payload.to_json() {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        obj.entry("content").or_insert(Value::Null);
        obj.insert("timestamp".into(), Value::String(time(entry.created_at)));
        if let Some(Value::Array(indices)) = entry.meta.get(VALUE_ARGUMENTS) {
            restore_value_arguments(&mut obj, indices);
        }
        for (k, v) in &entry.meta {
            if k != VALUE_ARGUMENTS {
                obj.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        out.push_str(&Value::Object(obj).to_string());
        out.push('\n');
    }
}

/// Puts back as JSON values the arguments of the tool calls at `indices` (those the file
/// gave as values); an argument string that is not JSON (an erasure rewrote it) stays a
/// string.
fn restore_value_arguments(message: &mut Map<String, Value>, indices: &[Value]) {
    let Some(Value::Array(calls)) = message.get_mut("tool_calls") else {
        return;
    };
    for i in indices.iter().filter_map(Value::as_u64) {
        let Some(arguments) = usize::try_from(i)
            .ok()
            .and_then(|i| calls.get_mut(i))
            .and_then(|c| c.pointer_mut("/function/arguments"))
        else {
            continue;
        };
        if let Some(value) = arguments
            .as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
        {
            *arguments = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    const FILE: &str = r#"{"_type": "metadata", "key": "telegram:42", "created_at": "2026-03-10T14:30:00.000001", "updated_at": "2026-03-10T14:31:00", "metadata": {"lang": "en"}, "last_consolidated": 1}
{"role": "user", "content": "hi", "timestamp": "2026-03-10T14:30:00.000001"}
{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}], "timestamp": "2026-03-10T14:30:01"}
{"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "ok", "timestamp": "2026-03-10T14:30:02", "tools_used": ["exec"]}
"#;

    #[test]
    fn reads_the_metadata_line_and_messages() {
        let s = parse(FILE, DateTime::UNIX_EPOCH).unwrap();
        assert_eq!(s.key.as_deref(), Some("telegram:42"));
        assert_eq!(s.last_consolidated, 1);
        assert_eq!(s.metadata["lang"], "en");
        let kinds: Vec<Kind> = s.messages.iter().map(|m| m.payload.kind()).collect();
        assert_eq!(kinds, [Kind::Message, Kind::ToolCall, Kind::ToolResult]);
        assert_eq!(s.messages[2].meta["tools_used"], json!(["exec"]));
    }

    #[test]
    fn a_bad_line_is_named() {
        let text =
            "{\"role\": \"user\", \"content\": \"a\"}\n{\"role\": \"tool\", \"content\": \"x\"}\n";
        let err = parse(text, DateTime::UNIX_EPOCH).unwrap_err();
        assert!(err.to_string().starts_with("line 2:"), "{err}");
        assert!(err.to_string().contains("tool_call_id"), "{err}");
        let err = parse("{\"role\": \"user\"\n", DateTime::UNIX_EPOCH).unwrap_err();
        assert!(
            err.to_string().starts_with("line 1: not valid JSON"),
            "{err}"
        );
        let err = parse("{\"content\": \"a\"}\n", DateTime::UNIX_EPOCH).unwrap_err();
        assert!(err.to_string().contains("needs a role"), "{err}");
    }

    /// nanobot 0.3.5 names the pointer `last_archived` and reads it first, writing
    /// `last_consolidated` beside it only for older releases.
    #[test]
    fn the_pointer_is_last_archived_when_a_file_has_it() {
        let messages = "{\"role\": \"user\", \"content\": \"a\"}\n{\"role\": \"assistant\", \"content\": \"b\"}\n";
        let pointer = |head: &str| {
            parse(&format!("{head}\n{messages}"), DateTime::UNIX_EPOCH).map(|s| s.last_consolidated)
        };
        assert_eq!(
            pointer(r#"{"_type": "metadata", "last_archived": 1}"#).unwrap(),
            1
        );
        assert_eq!(
            pointer(r#"{"_type": "metadata", "last_archived": 2, "last_consolidated": 1}"#)
                .unwrap(),
            2
        );
        assert_eq!(
            pointer(r#"{"_type": "metadata", "last_consolidated": 1}"#).unwrap(),
            1
        );
        let err = pointer(r#"{"_type": "metadata", "last_archived": "1"}"#).unwrap_err();
        assert!(err.to_string().contains("last_archived"), "{err}");
        let err = pointer(r#"{"_type": "metadata", "last_archived": 3}"#).unwrap_err();
        assert!(err.to_string().contains("only 2 messages"), "{err}");
    }

    #[test]
    fn the_pointer_is_written_under_both_names() {
        let mut out = String::new();
        render("k", &Map::new(), 0, &[], &mut out);
        let head: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(head["last_archived"], 0);
        assert_eq!(head["last_consolidated"], 0);
    }

    #[test]
    fn pointer_past_the_end_is_refused() {
        let text = "{\"_type\": \"metadata\", \"last_consolidated\": 3}\n{\"role\": \"user\", \"content\": \"a\"}\n";
        assert!(parse(text, DateTime::UNIX_EPOCH).is_err());
    }
}
