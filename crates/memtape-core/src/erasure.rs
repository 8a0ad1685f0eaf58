//! Erasure: what an erased entry keeps (its id, scope, kind, time and parent) and loses
//! (its content), how a piece of text is redacted out of a payload, and the `tape.erased`
//! receipt that records an erasure without holding anything it erased.
//!
//! The tape is append-only except for this: an erasure rewrites the payloads (and meta) of
//! the entries its receipt names (memtape-store runs it in steps). Everything else that holds
//! an entry's text (the index, the memory files, the workspace) is a projection that
//! follows the receipt.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Anchor, Content, EntryId, Error, Event, Message, Meta, Payload, Result, ToolCall};

/// What stands where redacted text was.
pub const ERASED_TEXT: &str = "[erased]";

/// The name an erased anchor or event takes: its own name may have held what was erased,
/// and a reader that looks events up by name (memory changes, pointers) must pass it over.
pub const TOMBSTONE: &str = "tape.tombstone";

/// The longest text an erasure by text looks for, in bytes.
pub const MAX_ERASE_TEXT_BYTES: usize = 64 * 1024;

/// How an erasure changed an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErasedHow {
    /// All its content is gone: a tombstone ([`Payload::tombstone`]).
    Whole,
    /// A piece of text in it was replaced by [`ERASED_TEXT`]; the rest is as written.
    Text,
}

impl ErasedHow {
    /// The name stores keep (`whole`, `text`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErasedHow::Whole => "whole",
            ErasedHow::Text => "text",
        }
    }
}

impl std::str::FromStr for ErasedHow {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "whole" => Ok(ErasedHow::Whole),
            "text" => Ok(ErasedHow::Text),
            other => Err(Error::InvalidEntry(format!(
                "unknown erasure {other:?} (whole or text)"
            ))),
        }
    }
}

/// The mark an erasure leaves on an entry: which erasure (its receipt's id) and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Erasure {
    /// The `tape.erased` receipt of the erasure that last changed the entry.
    pub by: EntryId,
    /// Whether the whole entry or a piece of text in it was erased.
    pub how: ErasedHow,
}

impl Erasure {
    /// Whether the entry is a tombstone (nothing of its content is left).
    pub fn is_whole(&self) -> bool {
        self.how == ErasedHow::Whole
    }
}

impl Payload {
    /// The tombstone of this payload: the same kind and structure with no content. A
    /// message keeps its role and its tool-call ids (so calls and results still pair);
    /// its text, arguments, names, reasoning and files are gone. An anchor or event becomes
    /// one named [`TOMBSTONE`] with no state or data.
    pub fn tombstone(&self) -> Payload {
        match self {
            Payload::Message(m) => Payload::Message(Message {
                role: m.role,
                content: m.content.as_ref().map(|_| Content::Text(String::new())),
                tool_calls: m
                    .tool_calls
                    .iter()
                    .map(|c| ToolCall::function(c.id.clone(), "", ""))
                    .collect(),
                tool_call_id: m.tool_call_id.clone(),
                name: None,
                reasoning_content: None,
                files: Vec::new(),
            }),
            Payload::Anchor(_) => Payload::Anchor(Anchor {
                name: TOMBSTONE.to_owned(),
                state: None,
            }),
            // A built-in event's name is memtape's, not the caller's content: it is kept
            // as `was`, so readers that count such events (memory versions) still count
            // the erased one. A caller's own name may be content, and goes.
            Payload::Event(e) => Payload::Event(Event {
                name: TOMBSTONE.to_owned(),
                data: if crate::events::BuiltinEvent::is_builtin(&e.name) {
                    serde_json::json!({ "was": e.name })
                } else {
                    Value::Null
                },
            }),
        }
    }

    /// This payload with every occurrence of `text` replaced by [`ERASED_TEXT`], or `None`
    /// when it does not hold `text`. Every string is searched (content, parts, tool
    /// arguments, names, event data, map keys), and a string that holds JSON (a tool
    /// call's arguments) is searched decoded too, where escapes such as `\u00e9` would hide
    /// the text from a plain search. An anchor or event whose name held the text becomes a
    /// tombstone: a name with `[erased]` in it would no longer be the name readers look up.
    pub fn redact(&self, text: &str) -> Option<Payload> {
        if text.is_empty() {
            return None;
        }
        let mut value = self.to_json();
        if !redact_value(&mut value, text) {
            return None;
        }
        if self.name().is_some_and(|n| n.contains(text)) {
            return Some(self.tombstone());
        }
        // The kind cannot change: a string never decides a payload's kind except a
        // message's role, whose values cannot contain the bracketed marker.
        Payload::from_json(self.kind(), value)
            .ok()
            .or_else(|| Some(self.tombstone()))
    }
}

/// `meta` with every occurrence of `text` replaced by [`ERASED_TEXT`], or `None` when it
/// does not hold `text`.
pub fn redact_meta(meta: &Meta, text: &str) -> Option<Meta> {
    if text.is_empty() {
        return None;
    }
    let mut value = Value::Object(meta.clone());
    if !redact_value(&mut value, text) {
        return None;
    }
    match value {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Replaces `text` everywhere in `value` (strings, keys, JSON inside strings); whether
/// anything changed.
fn redact_value(value: &mut Value, text: &str) -> bool {
    match value {
        Value::String(s) => redact_string(s, text),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| redact_value(v, text) | changed),
        Value::Object(map) => {
            let mut changed = false;
            let old = std::mem::take(map);
            for (mut key, mut v) in old {
                changed |= redact_string(&mut key, text);
                changed |= redact_value(&mut v, text);
                // Two keys that differed only in the text now collide: the later wins,
                // and both held the text.
                map.insert(key, v);
            }
            changed
        }
        _ => false,
    }
}

fn redact_string(s: &mut String, text: &str) -> bool {
    let mut changed = false;
    if s.contains(text) {
        *s = s.replace(text, ERASED_TEXT);
        changed = true;
    }
    // JSON inside a string (tool arguments) may hold the text escaped.
    let trimmed = s.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(mut inner) = serde_json::from_str::<Value>(s)
        && redact_value(&mut inner, text)
    {
        *s = inner.to_string();
        changed = true;
    }
    changed
}

/// What an erasure selected, as its receipt records it (the receipt's scope says where).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case", deny_unknown_fields)]
pub enum Selector {
    /// Everything of one user in the tenant: every scope naming the user, in every agent.
    User {
        /// The user.
        user: String,
    },
    /// One session (of the receipt's agent, and its user when the receipt names one).
    Session {
        /// The session.
        session: String,
    },
    /// Entries named by id.
    Entries,
    /// A piece of text, everywhere in the receipt's scope (the text is not recorded).
    Text,
    /// A retention run: the raw conversation of the receipt's scope older than the policy
    /// in effect keeps (the policy as applied: no field unset means "inherit" here).
    Retention {
        /// Days the conversation was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        messages_days: Option<u32>,
        /// Days tool results were kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_results_days: Option<u32>,
        /// Whether only consolidated entries went.
        only_consolidated: bool,
    },
}

/// The `tape.erased` receipt: when (its entry's time), by whom, what was selected, how
/// many entries were erased whole and how many had text redacted, and which ones. It never
/// holds the erased content, nor a hash of it (a hash of a short secret can be guessed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Erased {
    /// Who erased: `cli`, or the API key's name.
    pub by: String,
    /// What was selected.
    pub selector: Selector,
    /// How many entries became tombstones.
    pub entries: u64,
    /// How many entries had text redacted.
    pub redacted: u64,
    /// The entries changed, as inclusive ranges of ids in order.
    pub ids: Vec<(EntryId, EntryId)>,
    /// Why, as the caller gave it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The longest reason a receipt keeps, in bytes.
pub const MAX_REASON_BYTES: usize = 4096;

impl Erased {
    /// Checks the receipt's rules: ranges in order, each first ≤ last and no id 0, counts
    /// that add up to the ids, and a reason of at most [`MAX_REASON_BYTES`].
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidEntry(format!("event tape.erased: {why}")));
        let mut previous = EntryId(0);
        let mut count: u64 = 0;
        for &(first, last) in &self.ids {
            if first.0 == 0 || first > last || (count > 0 && first <= previous) {
                return bad(format!("id range {first}..={last} is out of order"));
            }
            count += last.0 - first.0 + 1;
            previous = last;
        }
        if count != self.entries + self.redacted {
            return bad(format!(
                "{} entries and {} redacted, but the ranges hold {count} ids",
                self.entries, self.redacted
            ));
        }
        if self.reason.len() > MAX_REASON_BYTES {
            return bad(format!(
                "a reason of {} bytes is over the {MAX_REASON_BYTES} bytes it may have",
                self.reason.len()
            ));
        }
        if self.by.is_empty() || self.by.chars().any(char::is_control) {
            return bad(format!(
                "who erased ({:?}) is empty or has a control character",
                self.by
            ));
        }
        Ok(())
    }

    /// Every id the ranges hold, in order.
    pub fn each_id(&self) -> impl Iterator<Item = EntryId> + '_ {
        self.ids
            .iter()
            .flat_map(|&(first, last)| (first.0..=last.0).map(EntryId))
    }
}

/// `ids` (sorted, without duplicates) as inclusive ranges.
pub fn id_ranges(ids: &[EntryId]) -> Vec<(EntryId, EntryId)> {
    let mut out: Vec<(EntryId, EntryId)> = Vec::new();
    for &id in ids {
        match out.last_mut() {
            Some((_, last)) if last.0 + 1 == id.0 => *last = id,
            _ => out.push((id, id)),
        }
    }
    out
}

/// Checks a text to erase: not empty, not only spaces, at most [`MAX_ERASE_TEXT_BYTES`],
/// and at least 4 characters, so an erasure cannot turn every "a" of a scope into
/// `[erased]` by mistake.
pub fn check_erase_text(text: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::InvalidEntry(format!("the text to erase {why}")));
    if text.trim().is_empty() {
        return bad("is empty");
    }
    if text.len() > MAX_ERASE_TEXT_BYTES {
        return bad(&format!(
            "is {} bytes, over the {MAX_ERASE_TEXT_BYTES} it may have",
            text.len()
        ));
    }
    if text.chars().count() < 4 {
        return bad("is shorter than 4 characters: it would match too much");
    }
    Ok(())
}

impl crate::Entry {
    /// For a tombstone of one of memtape's own events, the event's name (`memory.change`,
    /// …); `None` for anything else.
    pub fn erased_event(&self) -> Option<&str> {
        match &self.payload {
            Payload::Event(e) if e.name == TOMBSTONE && self.is_tombstone() => {
                e.data.get("was").and_then(Value::as_str)
            }
            _ => None,
        }
    }

    /// The entry as a view of the past shows it when it was erased later: a tombstoned
    /// message reads [`ERASED_TEXT`] where its text was (role and tool-call ids kept, so
    /// calls and results still pair); anything else is shown as it is.
    pub fn shown_as_erased(mut self) -> crate::Entry {
        if self.is_tombstone()
            && let Payload::Message(m) = &mut self.payload
        {
            m.content = Some(Content::Text(ERASED_TEXT.to_owned()));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, Role};
    use serde_json::json;

    #[test]
    fn a_tombstone_keeps_kind_role_and_call_ids_and_nothing_else() {
        let call = Payload::Message(Message::assistant_tool_calls(vec![ToolCall::function(
            "c1",
            "pay",
            r#"{"card":"4111 1111"}"#,
        )]));
        let t = call.tombstone();
        assert_eq!(t.kind(), Kind::ToolCall);
        let m = t.as_message().unwrap();
        assert_eq!(m.role, Role::Assistant);
        assert_eq!(m.tool_calls[0].id, "c1");
        assert!(!t.to_json().to_string().contains("4111"));
        assert!(!t.to_json().to_string().contains("pay"));

        let result = Payload::Message(Message::tool_result("c1", "paid with 4111 1111"));
        let t = result.tombstone();
        assert_eq!(t.kind(), Kind::ToolResult);
        assert_eq!(t.as_message().unwrap().tool_call_id.as_deref(), Some("c1"));
        assert_eq!(t.as_message().unwrap().content_text(), "");

        let event = Payload::Event(Event {
            name: "memory.change".into(),
            data: json!({"ops": [{"op": "write", "path": "MEMORY.md", "content": "secret"}]}),
        });
        let t = event.tombstone();
        assert_eq!(t.kind(), Kind::Event);
        assert_eq!(t.name(), Some(TOMBSTONE));
        assert!(!t.to_json().to_string().contains("secret"));
        // A tombstone reads back as stored, but is never a valid new entry.
        assert_eq!(Payload::from_json(Kind::Event, t.to_json()).unwrap(), t);
        assert!(t.validate().unwrap_err().to_string().contains(TOMBSTONE));
    }

    #[test]
    fn redaction_finds_the_text_in_every_string_and_in_json_inside_strings() {
        let secret = "Zoë-4111";
        let call = Payload::Message(Message::assistant_tool_calls(vec![ToolCall::function(
            "c1",
            "pay",
            // Escaped inside the arguments' JSON: a plain search would miss it.
            r#"{"card":"Zo\u00eb-4111","note":"x"}"#,
        )]));
        let red = call.redact(secret).expect("the escaped text is found");
        let s = red.to_json().to_string();
        assert!(!s.contains("4111"), "{s}");
        assert!(s.contains(ERASED_TEXT), "{s}");
        assert_eq!(red.kind(), Kind::ToolCall);

        let msg = Payload::Message(Message::user(format!("my card is {secret}, ok? {secret}")));
        let red = msg.redact(secret).unwrap();
        assert_eq!(
            red.as_message().unwrap().content_text(),
            "my card is [erased], ok? [erased]"
        );
        assert_eq!(msg.redact("not there"), None);
        assert_eq!(msg.redact(""), None);

        let named = Payload::Event(Event {
            name: format!("note.{secret}"),
            data: json!({}),
        });
        assert_eq!(named.redact(secret).unwrap().name(), Some(TOMBSTONE));

        let mut meta = Meta::new();
        meta.insert(secret.into(), json!(["a", secret]));
        let red = redact_meta(&meta, secret).unwrap();
        assert_eq!(Value::Object(red), json!({"[erased]": ["a", "[erased]"]}));
    }

    #[test]
    fn receipts_check_their_ranges_and_counts() {
        let ids = [1, 2, 3, 7, 9, 10].map(EntryId);
        let ranges = id_ranges(&ids);
        assert_eq!(
            ranges,
            vec![
                (EntryId(1), EntryId(3)),
                (EntryId(7), EntryId(7)),
                (EntryId(9), EntryId(10))
            ]
        );
        let receipt = Erased {
            by: "cli".into(),
            selector: Selector::Session {
                session: "s1".into(),
            },
            entries: 5,
            redacted: 1,
            ids: ranges,
            reason: String::new(),
        };
        receipt.validate().unwrap();
        assert_eq!(receipt.each_id().collect::<Vec<_>>(), ids.to_vec());
        let wrong = Erased {
            entries: 2,
            ..receipt.clone()
        };
        assert!(wrong.validate().unwrap_err().to_string().contains("6 ids"));
        let backwards = Erased {
            ids: vec![(EntryId(5), EntryId(9)), (EntryId(1), EntryId(1))],
            ..receipt
        };
        assert!(backwards.validate().is_err());
        assert!(check_erase_text("abc").is_err());
        assert!(check_erase_text("   ").is_err());
        check_erase_text("4111 1111").unwrap();
    }
}
