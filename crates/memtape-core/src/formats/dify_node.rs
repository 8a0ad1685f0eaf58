//! Dify's stored node memory (seed 002): one JSON file per node,
//! `node_memory/{app_id}/{conversation_id}/{node_id}.json`, holding
//! `{"version": 1, "messages": [...]}`. Each message has `message_id`,
//! `parent_message_id`, `role` (`user` or `assistant`), `content`, `files` (references:
//! `type`, `transfer_method`, `upload_file_id` / `tool_file_id` / `url`, `belongs_to`),
//! `token_count` and `created_at`; the messages come in turns (a user message, then the
//! node's answer), as Dify's `add_messages` writes them.
//!
//! Reading is lossless: what the typed fields cannot say again exactly (a key the file
//! left out, a null where memtape has nothing, a time written another way, file fields
//! beyond memtape's reference) is kept in the message's [`Shape`], so
//! [`render`]`(`[`parse`]`(text))` is the same JSON as `text`. A file that breaks a rule is
//! refused whole, naming the message and the field.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

use crate::{Error, FileRef, Result, Role};

/// The only version of the format.
pub const VERSION: u64 = 1;

/// The keys a message may have.
const KEYS: [&str; 7] = [
    "message_id",
    "parent_message_id",
    "role",
    "content",
    "files",
    "token_count",
    "created_at",
];

/// A node memory file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFile {
    /// The messages, in the order stored: user, assistant, user, assistant, ...
    pub messages: Vec<NodeFileMessage>,
}

/// One message of a node memory file.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeFileMessage {
    /// The Dify message it belongs to.
    pub message_id: String,
    /// The Dify message it follows (none: it starts a thread).
    pub parent_message_id: Option<String>,
    /// `User` or `Assistant`.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// The files attached, by reference.
    pub files: Vec<FileRef>,
    /// Dify's token count of the message, when the file gives one.
    pub token_count: Option<u64>,
    /// When it was written, when the file says.
    pub created_at: Option<DateTime<Utc>>,
    /// What the typed fields cannot say again exactly.
    pub shape: Shape,
}

/// How a message's JSON differs from what its typed fields render: keys it leaves out,
/// and keys whose JSON is kept as the file had it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shape {
    /// Keys the typed rendering has and the file did not.
    pub absent: Vec<String>,
    /// Keys whose value is the file's own.
    pub raw: Map<String, Value>,
}

impl Shape {
    /// Whether the typed fields say everything.
    pub fn is_empty(&self) -> bool {
        self.absent.is_empty() && self.raw.is_empty()
    }

    /// The shape as JSON (`{"absent": [...], "raw": {...}}`, each only when not empty).
    pub fn to_value(&self) -> Value {
        let mut o = Map::new();
        if !self.absent.is_empty() {
            o.insert("absent".into(), self.absent.clone().into());
        }
        if !self.raw.is_empty() {
            o.insert("raw".into(), Value::Object(self.raw.clone()));
        }
        Value::Object(o)
    }

    /// The shape [`Shape::to_value`] wrote; `None` for anything else.
    pub fn from_value(v: &Value) -> Option<Shape> {
        let o = v.as_object()?;
        let absent = match o.get("absent") {
            None => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|k| k.as_str().map(str::to_owned))
                .collect::<Option<_>>()?,
            Some(_) => return None,
        };
        let raw = match o.get("raw") {
            None => Map::new(),
            Some(Value::Object(r)) => r.clone(),
            Some(_) => return None,
        };
        Some(Shape { absent, raw })
    }
}

/// The error for message `index` (counted from 1).
fn bad(index: usize, reason: impl std::fmt::Display) -> Error {
    Error::InvalidImport(format!("node memory message {index}: {reason}"))
}

/// A Dify message id: 1 to 256 bytes, no control character.
fn check_id(index: usize, key: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(bad(index, format!("{key} is empty")));
    }
    if id.len() > 256 {
        return Err(bad(
            index,
            format!("{key} is {} bytes long (at most 256)", id.len()),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(bad(index, format!("{key} holds a control character")));
    }
    Ok(())
}

/// Reads a node memory file.
pub fn parse(text: &str) -> Result<NodeFile> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Error::InvalidImport(format!("node memory: not valid JSON: {e}")))?;
    let Value::Object(mut top) = value else {
        return Err(Error::InvalidImport(
            "node memory: the file must be a JSON object {\"version\": 1, \"messages\": [...]}"
                .into(),
        ));
    };
    match top.remove("version") {
        Some(v) if v.as_u64() == Some(VERSION) => {}
        Some(v) => {
            return Err(Error::InvalidImport(format!(
                "node memory: version {v}: memtape reads version {VERSION}"
            )));
        }
        None => {
            return Err(Error::InvalidImport(
                "node memory: the file has no version (expected \"version\": 1)".into(),
            ));
        }
    }
    let messages = match top.remove("messages") {
        Some(Value::Array(m)) => m,
        Some(other) => {
            return Err(Error::InvalidImport(format!(
                "node memory: messages must be an array, not {}",
                kind(&other)
            )));
        }
        None => {
            return Err(Error::InvalidImport(
                "node memory: the file has no messages".into(),
            ));
        }
    };
    if let Some(key) = top.keys().next() {
        return Err(Error::InvalidImport(format!(
            "node memory: unknown field {key:?} (a file has version and messages)"
        )));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.into_iter().enumerate() {
        let index = i + 1;
        let message = parse_message(index, m)?;
        let expected = if i % 2 == 0 {
            Role::User
        } else {
            Role::Assistant
        };
        if message.role != expected {
            return Err(bad(
                index,
                format!(
                    "is a{} {} message where {} expected (node memory keeps turns: a user \
                     message, then the node's answer)",
                    if message.role == Role::Assistant {
                        "n"
                    } else {
                        ""
                    },
                    message.role.as_str(),
                    if expected == Role::User {
                        "a user message is"
                    } else {
                        "the node's answer (assistant) is"
                    }
                ),
            ));
        }
        out.push(message);
    }
    if out.len() % 2 == 1 {
        return Err(bad(
            out.len(),
            "a user message without the node's answer (node memory keeps whole turns)",
        ));
    }
    Ok(NodeFile { messages: out })
}

/// The JSON type of `v`, for errors.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_message(index: usize, value: Value) -> Result<NodeFileMessage> {
    let Value::Object(source) = value else {
        return Err(bad(index, format!("is {}, not an object", kind(&value))));
    };
    if let Some(key) = source.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(bad(
            index,
            format!("unknown field {key:?} (a message has {})", KEYS.join(", ")),
        ));
    }
    let message_id = match source.get("message_id") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(bad(index, format!("message_id is {}", kind(v)))),
        None => return Err(bad(index, "message_id is missing")),
    };
    check_id(index, "message_id", &message_id)?;
    let parent_message_id = match source.get("parent_message_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            check_id(index, "parent_message_id", s)?;
            Some(s.clone())
        }
        Some(v) => return Err(bad(index, format!("parent_message_id is {}", kind(v)))),
    };
    let role = match source.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some(other) => {
            return Err(bad(
                index,
                format!("role {other:?}: node memory holds user and assistant messages"),
            ));
        }
        None => return Err(bad(index, "role is missing or not a string")),
    };
    let content = match source.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(v) => return Err(bad(index, format!("content is {}, not a string", kind(v)))),
    };
    let files = match source.get("files") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(files)) => files
            .iter()
            .enumerate()
            .map(|(j, f)| {
                serde_json::from_value::<FileRef>(f.clone())
                    .map_err(|e| bad(index, format!("file {}: {e}", j + 1)))
            })
            .collect::<Result<_>>()?,
        Some(v) => return Err(bad(index, format!("files is {}, not an array", kind(v)))),
    };
    let token_count = match source.get("token_count") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            bad(
                index,
                format!("token_count {v} is not a whole number of at least 0"),
            )
        })?),
    };
    let created_at = match source.get("created_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            super::parse_time(s)
                .ok_or_else(|| bad(index, format!("created_at {s:?} is not a timestamp")))?,
        ),
        Some(v) => return Err(bad(index, format!("created_at is {}", kind(v)))),
    };
    let mut message = NodeFileMessage {
        message_id,
        parent_message_id,
        role,
        content,
        files,
        token_count,
        created_at,
        shape: Shape::default(),
    };
    let typed = typed_message(&message);
    for key in typed.keys() {
        if !source.contains_key(key) {
            message.shape.absent.push(key.clone());
        }
    }
    for (key, value) in &source {
        if typed.get(key) != Some(value) {
            message.shape.raw.insert(key.clone(), value.clone());
        }
    }
    Ok(message)
}

/// A time as the file's times are written (RFC 3339, UTC as `Z`).
pub fn format_time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// A message's JSON from its typed fields alone.
fn typed_message(m: &NodeFileMessage) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("message_id".into(), m.message_id.clone().into());
    o.insert(
        "parent_message_id".into(),
        m.parent_message_id.clone().map_or(Value::Null, Value::from),
    );
    o.insert("role".into(), m.role.as_str().into());
    o.insert("content".into(), m.content.clone().into());
    o.insert(
        "files".into(),
        serde_json::to_value(&m.files).unwrap_or(Value::Array(Vec::new())),
    );
    if let Some(n) = m.token_count {
        o.insert("token_count".into(), n.into());
    }
    if let Some(t) = &m.created_at {
        o.insert("created_at".into(), format_time(t).into());
    }
    o
}

/// A message's JSON: its typed fields, reshaped by its [`Shape`].
pub fn render_message(m: &NodeFileMessage) -> Value {
    let mut o = typed_message(m);
    for key in &m.shape.absent {
        o.shift_remove(key);
    }
    for (key, value) in &m.shape.raw {
        o.insert(key.clone(), value.clone());
    }
    Value::Object(o)
}

/// The file's JSON (`{"version": 1, "messages": [...]}`).
pub fn render(file: &NodeFile) -> Value {
    let mut o = Map::new();
    o.insert("version".into(), VERSION.into());
    o.insert(
        "messages".into(),
        Value::Array(file.messages.iter().map(render_message).collect()),
    );
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The seed's own example.
    fn seed() -> Value {
        json!({"version": 1, "messages": [
            {"message_id": "msg-001", "parent_message_id": null, "role": "user",
             "content": "Analyze this image",
             "files": [{"type": "image", "transfer_method": "local_file",
                        "upload_file_id": "file-uuid-123", "belongs_to": "user"}],
             "token_count": 15, "created_at": "2026-01-07T10:00:00Z"},
            {"message_id": "msg-002", "parent_message_id": "msg-001", "role": "assistant",
             "content": "This is a landscape image...", "files": [], "token_count": 50,
             "created_at": "2026-01-07T10:00:01Z"}
        ]})
    }

    #[test]
    fn the_seed_example_reads_whole_and_renders_back() {
        let file = parse(&seed().to_string()).unwrap();
        assert_eq!(file.messages.len(), 2);
        let first = &file.messages[0];
        assert_eq!(first.files.len(), 1);
        assert_eq!(first.token_count, Some(15));
        assert!(first.shape.is_empty(), "{:?}", first.shape);
        assert_eq!(render(&file), seed());
    }

    #[test]
    fn what_the_types_cannot_say_is_kept() {
        let odd = json!({"version": 1, "messages": [
            {"message_id": "m1", "role": "user", "content": "hi",
             "files": [{"type": "document", "transfer_method": "tool_file",
                        "tool_file_id": "t1", "upload_file_id": null, "url": null,
                        "belongs_to": "user"}],
             "created_at": "2026-01-07T10:00:00.500+00:00"},
            {"message_id": "m1", "parent_message_id": null, "role": "assistant",
             "content": null, "token_count": 0}
        ]});
        let file = parse(&odd.to_string()).unwrap();
        assert_eq!(render(&file), odd);
        let shape = Shape::from_value(&file.messages[0].shape.to_value()).unwrap();
        assert_eq!(shape, file.messages[0].shape);
    }

    #[test]
    fn a_bad_file_is_refused_naming_what_is_wrong() {
        let m = |extra: Value| {
            let mut v = seed();
            for (k, x) in extra.as_object().unwrap() {
                v["messages"][0][k] = x.clone();
            }
            v.to_string()
        };
        let cases: Vec<(String, &str)> = vec![
            (
                json!({"version": 2, "messages": []}).to_string(),
                "version 2",
            ),
            (json!({"messages": []}).to_string(), "no version"),
            (
                json!({"version": "1", "messages": []}).to_string(),
                "version \"1\"",
            ),
            (json!({"version": 1}).to_string(), "no messages"),
            (
                json!({"version": 1, "messages": [], "x": 1}).to_string(),
                "unknown field \"x\"",
            ),
            ("[]".into(), "must be a JSON object"),
            ("{".into(), "not valid JSON"),
            (
                m(json!({"message_id": ""})),
                "message 1: message_id is empty",
            ),
            (m(json!({"message_id": "a\u{0}b"})), "control character"),
            (m(json!({"message_id": 5})), "message_id is a number"),
            (m(json!({"role": "system"})), "role \"system\""),
            (
                m(json!({"role": "assistant"})),
                "an assistant message where a user message",
            ),
            (m(json!({"token_count": -1})), "token_count -1"),
            (m(json!({"token_count": 1.5})), "token_count 1.5"),
            (
                m(json!({"created_at": "yesterday"})),
                "created_at \"yesterday\"",
            ),
            (m(json!({"files": [{"type": "image"}]})), "file 1"),
            (m(json!({"files": {}})), "files is an object"),
            (m(json!({"extra": true})), "unknown field \"extra\""),
            (
                json!({"version": 1, "messages": [seed()["messages"][0]]}).to_string(),
                "without the node's answer",
            ),
        ];
        for (text, needle) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle:?} in {err} ({text})");
        }
    }

    #[test]
    fn an_empty_memory_is_a_file_too() {
        let empty = json!({"version": 1, "messages": []});
        assert_eq!(render(&parse(&empty.to_string()).unwrap()), empty);
    }
}
