//! Qanot's WAL capture on the engine: a user message is scanned before it is answered, its
//! matches are appended with timestamps to the working state (SESSION-STATE.md), and the
//! durable ones (names, preferences, things to remember) are copied to long-term memory
//! unless MEMORY.md already holds them.

use memtape_core::memory::{Change, Op, Recorded, paths};
use memtape_core::wal::{self, WalMatch};
use memtape_core::{Entry, EntryId, Role, Scope};
use memtape_store::Store;

use crate::{Engine, Result, memory_scope};

/// What one WAL capture found and recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Captured {
    /// Every match in the message, in order.
    pub matches: Vec<WalMatch>,
    /// How many durable matches were new to MEMORY.md and copied there.
    pub saved_long_term: usize,
    /// The memory version the capture recorded; `None` when nothing matched.
    pub recorded: Option<Recorded>,
}

impl<S: Store> Engine<S> {
    /// Qanot's WAL protocol: scans the user `message` of `scope` (a session, or its
    /// memory scope) and records what it found in the memory of the session's agent (and
    /// user), as one change. Call it before the agent answers the message.
    pub fn capture(&self, scope: &Scope, message: &str) -> Result<Captured> {
        self.capture_caused(scope, message, None)
    }

    /// [`Engine::capture`] of a user message already on the tape: what it records names
    /// `entry` as its cause (`memtape memory blame` leads back to it). Any other entry
    /// captures nothing.
    pub fn capture_entry(&self, entry: &Entry) -> Result<Captured> {
        match entry.message() {
            Some(m) if m.role == Role::User => {
                self.capture_caused(&entry.scope, &m.content_text(), Some(entry.id))
            }
            _ => Ok(Captured {
                matches: Vec::new(),
                saved_long_term: 0,
                recorded: None,
            }),
        }
    }

    fn capture_caused(
        &self,
        scope: &Scope,
        message: &str,
        cause: Option<EntryId>,
    ) -> Result<Captured> {
        crate::tiers::caused_by(cause, || self.capture_now(scope, message))
    }

    fn capture_now(&self, scope: &Scope, message: &str) -> Result<Captured> {
        let matches = wal::scan(message);
        if matches.is_empty() {
            return Ok(Captured {
                matches,
                saved_long_term: 0,
                recorded: None,
            });
        }
        let memory = memory_scope(scope)?;
        let at = self.now();
        let mut saved = 0;
        let recorded = self.change_memory(&memory, |_, view| {
            let state: String = matches
                .iter()
                .map(|m| wal::session_state_line(at, m))
                .collect();
            let mut ops = vec![Op::Append {
                path: paths::SESSION_STATE.into(),
                text: state,
                heading: Some(paths::SESSION_STATE_HEADING.into()),
            }];
            // Duplicates are checked against MEMORY.md and the lines added before them.
            let mut long_term = view.content(paths::MEMORY).unwrap_or("").to_owned();
            let mut added = String::new();
            for m in matches.iter().filter(|m| m.category.is_durable()) {
                if !wal::is_duplicate(&long_term, &m.text) {
                    let line = wal::long_term_line(m);
                    long_term.push_str(&line);
                    added.push_str(&line);
                }
            }
            saved = added.lines().count();
            if !added.is_empty() {
                if !view
                    .content(paths::MEMORY)
                    .is_none_or(|c| c.is_empty() || c.ends_with('\n'))
                {
                    added.insert(0, '\n');
                }
                ops.push(Op::Append {
                    path: paths::MEMORY.into(),
                    text: added,
                    heading: None,
                });
            }
            Ok(Some(Change {
                ops,
                source: "wal".into(),
                caused_by: Vec::new(),
            }))
        })?;
        Ok(Captured {
            matches,
            saved_long_term: saved,
            recorded,
        })
    }
}
