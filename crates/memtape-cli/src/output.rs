//! How the CLI prints: one line per entry for people (control characters escaped, events
//! as readable text), and JSON for programs through the CLI's own wire types (OpenAI chat
//! messages for history, entries otherwise) — pretty on a terminal, compact when piped.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use chrono::{DateTime, Utc};
use memtape::{Content, Entry, Message, Payload, Scope, SessionInfo, ToolCall};
use serde::Serialize;
use serde_json::{Map, Value};

/// Prints `value` as JSON: indented when stdout is a terminal, one line when piped.
pub fn json(out: &mut impl Write, value: &impl Serialize) -> Result<()> {
    let text = if std::io::stdout().is_terminal() {
        serde_json::to_string_pretty(value)?
    } else {
        serde_json::to_string(value)?
    };
    writeln!(out, "{text}")?;
    Ok(())
}

/// Prints a history: OpenAI chat messages as JSON, or one line per entry for people.
pub fn history<'a>(
    out: &mut impl Write,
    entries: impl IntoIterator<Item = &'a Entry>,
    as_json: bool,
) -> Result<()> {
    let entries: Vec<&Entry> = entries.into_iter().collect();
    if as_json {
        let messages: Vec<ChatMessage<'_>> = entries
            .iter()
            .filter_map(|e| e.message())
            .map(ChatMessage::of)
            .collect();
        return json(out, &messages);
    }
    for e in entries {
        writeln!(out, "{}", entry_line(e))?;
    }
    Ok(())
}

/// Whether an error is stdout's reader having gone away (`memtape … | head`).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || cause.to_string().contains("Broken pipe (os error 32)")
    })
}

/// `text` safe for a terminal: control characters (a NUL, an escape sequence's ESC) are
/// written as `\u{..}`, carriage returns as `\r`. Newlines and tabs are kept unless
/// `one_line`, which writes them as `\n` and `\t`.
pub fn escape(text: &str, one_line: bool) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' if !one_line => s.push('\n'),
            '\n' => s.push_str("\\n"),
            '\t' if !one_line => s.push('\t'),
            '\t' => s.push_str("\\t"),
            '\r' => s.push_str("\\r"),
            c if c.is_control() => s.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => s.push(c),
        }
    }
    s
}

/// One line of at most 160 characters, escaped.
fn one_line(text: &str) -> String {
    const MAX: usize = 160;
    let flat = escape(text, true);
    match flat.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// An event's data as readable text: strings as they are, objects as `key: value` pairs,
/// lists joined by commas.
fn readable(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Bool(_) | Value::Number(_) => value.to_string(),
        Value::Array(items) => items.iter().map(nested).collect::<Vec<_>>().join(", "),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}: {}", nested(v)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// A value inside another: objects in parentheses, so their pairs stay apart.
fn nested(value: &Value) -> String {
    match value {
        Value::Object(_) => format!("({})", readable(value)),
        _ => readable(value),
    }
}

/// `#ID kind role: text` for people.
pub fn entry_line(e: &Entry) -> String {
    let body = match &e.payload {
        Payload::Message(m) => {
            let mut s = format!("{}: {}", m.role.as_str(), one_line(&m.content_text()));
            for c in &m.tool_calls {
                s.push_str(&format!(
                    " [call {} {}({})]",
                    one_line(&c.id),
                    one_line(&c.function.name),
                    one_line(&c.function.arguments)
                ));
            }
            if let Some(id) = &m.tool_call_id {
                s.push_str(&format!(" [answers {}]", one_line(id)));
            }
            for f in &m.files {
                let (how, what) = match &f.source {
                    memtape::FileSource::LocalFile { upload_file_id } => ("upload", upload_file_id),
                    memtape::FileSource::RemoteUrl { url } => ("url", url),
                    memtape::FileSource::ToolFile { tool_file_id } => ("tool", tool_file_id),
                };
                let kind = serde_json::to_value(f.file_type).unwrap_or_default();
                s.push_str(&format!(
                    " [file {}:{how}:{}]",
                    kind.as_str().unwrap_or_default(),
                    one_line(what)
                ));
            }
            s
        }
        Payload::Anchor(a) => match &a.state {
            Some(state) => format!(
                "{} ({})",
                one_line(&a.name),
                one_line(&readable(&Value::Object(state.clone())))
            ),
            None => one_line(&a.name),
        },
        Payload::Event(ev) => format!("{} {}", one_line(&ev.name), one_line(&readable(&ev.data))),
    };
    match e.erased {
        Some(x) if x.is_whole() => format!("#{} {} [erased by #{}]", e.id, e.kind(), x.by),
        Some(x) => format!("#{} {} {body} [redacted by #{}]", e.id, e.kind(), x.by),
        None => format!("#{} {} {}", e.id, e.kind(), body),
    }
}

/// A score for people: three decimals, or three significant digits when it is small.
pub fn score(s: f64) -> String {
    if s == 0.0 {
        "0".into()
    } else if s.abs() >= 0.01 {
        format!("{s:.3}")
    } else {
        format!("{s:.2e}")
    }
}

/// A message as an OpenAI chat message: role, content, and tool_calls / tool_call_id /
/// name when present.
#[derive(Serialize)]
pub struct ChatMessage<'a> {
    role: &'a str,
    content: Option<&'a Content>,
    #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
    tool_calls: &'a [ToolCall],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "<[memtape::FileRef]>::is_empty")]
    files: &'a [memtape::FileRef],
}

impl<'a> ChatMessage<'a> {
    /// The chat message of `m`.
    pub fn of(m: &'a Message) -> Self {
        ChatMessage {
            role: m.role.as_str(),
            content: m.content.as_ref(),
            tool_calls: &m.tool_calls,
            tool_call_id: m.tool_call_id.as_deref(),
            name: m.name.as_deref(),
            reasoning_content: m.reasoning_content.as_deref(),
            files: &m.files,
        }
    }
}

/// A scope on the wire: its parts, the absent ones left out.
#[derive(Serialize)]
pub struct ScopeOut<'a> {
    tenant: &'a str,
    agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
}

impl<'a> ScopeOut<'a> {
    /// The wire form of `s`.
    pub fn of(s: &'a Scope) -> Self {
        ScopeOut {
            tenant: s.tenant(),
            agent: s.agent_name(),
            user: s.user(),
            session: s.session(),
            node: s.node(),
        }
    }
}

/// An entry's payload on the wire: a message with every field, an anchor, or an event.
#[derive(Serialize)]
#[serde(untagged)]
enum PayloadOut<'a> {
    Message(MessageOut<'a>),
    Anchor {
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        state: Option<&'a Map<String, Value>>,
    },
    Event {
        name: &'a str,
        data: &'a Value,
    },
}

/// A message with every field (entries are lossless on the wire; history uses the
/// narrower [`ChatMessage`]).
#[derive(Serialize)]
struct MessageOut<'a> {
    role: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a Content>,
    #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
    tool_calls: &'a [ToolCall],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    /// Dify's file references, in Dify's shape.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files: Vec<Value>,
}

impl<'a> MessageOut<'a> {
    fn of(m: &'a Message) -> Self {
        MessageOut {
            role: m.role.as_str(),
            content: m.content.as_ref(),
            tool_calls: &m.tool_calls,
            tool_call_id: m.tool_call_id.as_deref(),
            name: m.name.as_deref(),
            reasoning_content: m.reasoning_content.as_deref(),
            files: m
                .files
                .iter()
                .filter_map(|f| serde_json::to_value(f).ok())
                .collect(),
        }
    }
}

/// A tape entry on the wire.
#[derive(Serialize)]
pub struct EntryOut<'a> {
    id: u64,
    scope: ScopeOut<'a>,
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<u64>,
    created_at: DateTime<Utc>,
    payload: PayloadOut<'a>,
    meta: &'a Map<String, Value>,
    /// Which erasure changed it, and how (`whole`: a tombstone; `text`: redacted).
    #[serde(skip_serializing_if = "Option::is_none")]
    erased: Option<memtape::Erasure>,
}

impl<'a> EntryOut<'a> {
    /// The wire form of `e`.
    pub fn of(e: &'a Entry) -> Self {
        EntryOut {
            id: e.id.0,
            scope: ScopeOut::of(&e.scope),
            kind: e.kind().to_string(),
            parent: e.parent.map(|p| p.0),
            created_at: e.created_at,
            payload: match &e.payload {
                Payload::Message(m) => PayloadOut::Message(MessageOut::of(m)),
                Payload::Anchor(a) => PayloadOut::Anchor {
                    name: &a.name,
                    state: a.state.as_ref(),
                },
                Payload::Event(ev) => PayloadOut::Event {
                    name: &ev.name,
                    data: &ev.data,
                },
            },
            meta: &e.meta,
            erased: e.erased,
        }
    }
}

/// Prints entries as lines or as a JSON array of entries.
pub fn entries(out: &mut impl Write, entries: &[Entry], as_json: bool) -> Result<()> {
    if as_json {
        let list: Vec<EntryOut<'_>> = entries.iter().map(EntryOut::of).collect();
        json(out, &list)?;
    } else {
        for e in entries {
            writeln!(out, "{}", entry_line(e))?;
        }
    }
    Ok(())
}

/// A session's projection on the wire.
#[derive(Serialize)]
pub struct SessionOut<'a> {
    scope: ScopeOut<'a>,
    session: Option<&'a str>,
    entries: u64,
    messages: u64,
    last_consolidated: u64,
    first_at: Option<DateTime<Utc>>,
    last_at: Option<DateTime<Utc>>,
    last_message_at: Option<DateTime<Utc>>,
}

impl<'a> SessionOut<'a> {
    /// The wire form of `session`.
    pub fn of(session: &'a SessionInfo) -> Self {
        let s = &session.info;
        SessionOut {
            scope: ScopeOut::of(&s.scope),
            session: s.scope.session(),
            entries: s.entries,
            messages: s.messages,
            last_consolidated: s.last_consolidated.0,
            first_at: s.first_at,
            last_at: s.last_at,
            last_message_at: session.last_message_at,
        }
    }
}

/// A session's projection for people: `last` is the time of its latest message.
pub fn session_line(session: &SessionInfo) -> String {
    let s = &session.info;
    let when = session
        .last_message_at
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default();
    let mut line = format!(
        "{}  {} messages, {} entries, consolidated through #{}, last {}",
        one_line(s.scope.session().unwrap_or_default()),
        s.messages,
        s.entries,
        s.last_consolidated,
        when
    );
    if let Some(user) = s.scope.user() {
        line.push_str(&format!("  (user {})", one_line(user)));
    }
    if let Some(node) = s.scope.node() {
        line.push_str(&format!("  (node {})", one_line(node)));
    }
    line
}
