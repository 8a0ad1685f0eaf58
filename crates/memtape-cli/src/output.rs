//! How the CLI prints entries, messages and sessions: one line each for people, JSON for
//! programs (OpenAI chat messages for history, memtape entries otherwise).

use std::io::Write;

use anyhow::Result;
use memtape::{Entry, Message, Payload, ScopeInfo};
use serde_json::{Value, json};

/// A message as an OpenAI chat message: role, content, and tool_calls / tool_call_id /
/// name when present.
pub fn chat_message(m: &Message) -> Value {
    let mut v = json!({ "role": m.role.as_str(), "content": m.content });
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = json!(m.tool_calls);
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    if let Some(name) = &m.name {
        v["name"] = json!(name);
    }
    v
}

fn one_line(text: &str) -> String {
    const MAX: usize = 160;
    let flat = text.replace('\n', "\\n");
    match flat.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
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
                    c.id,
                    c.function.name,
                    one_line(&c.function.arguments)
                ));
            }
            if let Some(id) = &m.tool_call_id {
                s.push_str(&format!(" [answers {id}]"));
            }
            s
        }
        Payload::Anchor(a) => match &a.state {
            Some(state) => format!("{} {}", a.name, Value::Object(state.clone())),
            None => a.name.clone(),
        },
        Payload::Event(ev) => format!("{} {}", ev.name, one_line(&ev.data.to_string())),
    };
    format!("#{} {} {}", e.id, e.kind(), body)
}

/// Prints entries as lines or as a JSON array of memtape entries.
pub fn entries(out: &mut impl Write, entries: &[Entry], as_json: bool) -> Result<()> {
    if as_json {
        writeln!(out, "{}", serde_json::to_string_pretty(entries)?)?;
    } else {
        for e in entries {
            writeln!(out, "{}", entry_line(e))?;
        }
    }
    Ok(())
}

/// A session's projection as JSON.
pub fn session_json(s: &ScopeInfo) -> Value {
    json!({
        "scope": s.scope,
        "session": s.scope.session(),
        "entries": s.entries,
        "messages": s.messages,
        "last_consolidated": s.last_consolidated,
        "first_at": s.first_at,
        "last_at": s.last_at,
    })
}

/// A session's projection for people.
pub fn session_line(s: &ScopeInfo) -> String {
    let when = s
        .last_at
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default();
    let mut line = format!(
        "{}  {} messages, {} entries, consolidated through #{}, last {}",
        s.scope.session().unwrap_or_default(),
        s.messages,
        s.entries,
        s.last_consolidated,
        when
    );
    if let Some(user) = s.scope.user() {
        line.push_str(&format!("  (user {user})"));
    }
    if let Some(node) = s.scope.node() {
        line.push_str(&format!("  (node {node})"));
    }
    line
}
