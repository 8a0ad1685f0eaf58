//! Compaction records and the pure splitting rules of the two policies: MateClaw keeps the
//! most recent pairs and summarizes the rest; Qanot keeps the first and last messages and
//! removes the middle.

use serde::{Deserialize, Serialize};

use crate::events::{BuiltinEvent, CONTEXT_COMPACTION};
use crate::{Entry, EntryId, Error, Message, Payload, Result, Role};

/// One compaction of a session's conversation, as recorded on the session's tape (a
/// `context.compaction` event). It stays in effect for every later prompt of the session
/// whose thread still runs through `through`, until a newer compaction replaces it, so a
/// summary is made once and the prompt prefix stays the same from turn to turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum Compaction {
    /// MateClaw: the messages after `from` up to and including `through` are replaced by
    /// `summary`, which folds in the summary of the compaction before (if any).
    #[serde(rename = "mateclaw")]
    MateClaw {
        /// The span starts after this entry (the previous compaction's `through`, or the
        /// consolidation pointer; 0 for the start of the session).
        from: EntryId,
        /// The last entry the summary covers.
        through: EntryId,
        /// How many messages the summary covers in all, this span and those folded in.
        messages: usize,
        /// The summary text (without MateClaw's prefix, which is added when rendering).
        summary: String,
    },
    /// Qanot: the first messages (`head`) stay, every later message up to and including
    /// `through` is removed and a marker says how many.
    Qanot {
        /// The kept first messages (Qanot keeps 2).
        head: Vec<EntryId>,
        /// The last removed entry.
        through: EntryId,
        /// How many messages were removed in all, by this compaction and earlier ones.
        removed: usize,
    },
}

impl Compaction {
    /// The last entry the compaction covers: the prompt shows the thread after it.
    pub fn through(&self) -> EntryId {
        match self {
            Compaction::MateClaw { through, .. } | Compaction::Qanot { through, .. } => *through,
        }
    }

    /// The policy that made it: `mateclaw` or `qanot`.
    pub fn policy(&self) -> &'static str {
        match self {
            Compaction::MateClaw { .. } => "mateclaw",
            Compaction::Qanot { .. } => "qanot",
        }
    }

    /// The event that records this compaction on the session's tape.
    pub fn to_payload(&self) -> Payload {
        BuiltinEvent::Compaction(self.clone()).to_payload()
    }

    /// The compaction an entry records, if it is a `context.compaction` event.
    pub fn from_entry(entry: &Entry) -> Option<Result<Compaction>> {
        match &entry.payload {
            Payload::Event(e) if e.name == CONTEXT_COMPACTION => {
                Some(match BuiltinEvent::decode(e) {
                    Ok(Some(BuiltinEvent::Compaction(c))) => Ok(c),
                    Ok(_) => Err(Error::InvalidEntry(format!(
                        "entry {}: not a context.compaction",
                        entry.id
                    ))),
                    Err(err) => Err(Error::InvalidEntry(format!("entry {}: {err}", entry.id))),
                })
            }
            _ => None,
        }
    }
}

/// MateClaw's split: where the last `pairs` conversation turns begin (a turn starts at a
/// user message and runs to the next one), so `messages[..start]` is what a compaction
/// summarizes. 0 when the messages hold no more than `pairs` turns.
pub fn recent_pairs_start(messages: &[&Message], pairs: usize) -> usize {
    if pairs == 0 {
        return messages.len();
    }
    let mut seen = 0;
    for (i, m) in messages.iter().enumerate().rev() {
        if m.role == Role::User {
            seen += 1;
            if seen == pairs {
                return i;
            }
        }
    }
    0
}

/// Qanot's split of `len` messages: keep the first `keep_first` and the last
/// `min(keep_last, len / 2)`, remove the middle. Returns `(head_end, tail_start)`, or
/// `None` when there are too few messages to compact (no more than `keep_first +
/// keep_last`).
pub fn qanot_split(len: usize, keep_first: usize, keep_last: usize) -> Option<(usize, usize)> {
    if len <= keep_first + keep_last {
        return None;
    }
    let keep_recent = keep_last.min(len / 2);
    Some((keep_first, len - keep_recent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Meta, Scope, ToolCall};

    /// MateClaw: "The most recent preserveRecentPairs conversation turns (default 2 turns
    /// = 4 messages) are preserved as-is"; a turn with tool calls stays whole.
    #[test]
    fn mateclaw_recent_pairs_start_at_the_second_to_last_user_message() {
        let msgs = [
            Message::user("u1"),
            Message::assistant("a1"),
            Message::user("u2"),
            Message::assistant_tool_calls(vec![ToolCall::function("c", "f", "{}")]),
            Message::tool_result("c", "r"),
            Message::assistant("a2"),
            Message::user("u3"),
            Message::assistant("a3"),
        ];
        let refs: Vec<&Message> = msgs.iter().collect();
        assert_eq!(recent_pairs_start(&refs, 2), 2);
        assert_eq!(recent_pairs_start(&refs, 1), 6);
        assert_eq!(recent_pairs_start(&refs, 3), 0);
        assert_eq!(recent_pairs_start(&refs, 9), 0);
    }

    /// Qanot: "The first 2 messages (initial context) are kept; the last 4 messages (recent
    /// context) are kept; everything in between is removed" — and nothing is compacted
    /// with 6 messages or fewer.
    #[test]
    fn qanot_split_keeps_first_two_and_last_four() {
        assert_eq!(qanot_split(20, 2, 4), Some((2, 16)));
        assert_eq!(qanot_split(6, 2, 4), None);
        assert_eq!(
            qanot_split(7, 2, 4),
            Some((2, 4)),
            "keep_recent = min(4, 7 / 2)"
        );
    }

    #[test]
    fn a_compaction_round_trips_through_its_event() {
        for c in [
            Compaction::MateClaw {
                from: EntryId(0),
                through: EntryId(9),
                messages: 8,
                summary: "- User: hi".into(),
            },
            Compaction::Qanot {
                head: vec![EntryId(1), EntryId(2)],
                through: EntryId(9),
                removed: 6,
            },
        ] {
            let entry = Entry {
                id: EntryId(10),
                scope: Scope::agent("t", "a").unwrap().with_session("s").unwrap(),
                payload: c.to_payload(),
                meta: Meta::new(),
                created_at: chrono::DateTime::UNIX_EPOCH,
                parent: None,
                erased: None,
            };
            assert_eq!(Compaction::from_entry(&entry).unwrap().unwrap(), c);
            assert_eq!(c.through(), EntryId(9));
        }
        let data = serde_json::to_value(Compaction::Qanot {
            head: vec![],
            through: EntryId(3),
            removed: 1,
        })
        .unwrap();
        assert_eq!(data["policy"], "qanot");
    }
}
